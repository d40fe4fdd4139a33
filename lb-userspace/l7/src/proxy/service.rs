//! A service's live state, shared by its connections: its routes (swapped whole on
//! reload), the proxy's shared limits and counters, its request counters. Serving a
//! request with it is [`super::handler`]'s; this module is the type alone, so the
//! accept loop, forwarding and tunnels can hold one without depending on the handler.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{ServiceStats, Shared};
use crate::routes::RouteTable;

/// A service's live state, shared by its connections.
#[derive(Debug)]
pub struct ServiceState {
    /// Service name.
    pub name: String,
    /// Routes; swapped whole on reload.
    pub routes: ArcSwap<RouteTable>,
    pub(super) shared: Arc<Shared>,
    pub(super) stats: ServiceStats,
}

impl ServiceState {
    /// The service's request counters.
    pub fn stats(&self) -> &ServiceStats {
        &self.stats
    }
}
