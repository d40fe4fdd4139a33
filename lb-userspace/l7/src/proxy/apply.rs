//! Applying a service's new input to its running state: routes recompiled when their
//! text changed, endpoints replaced in place; and what can go wrong.

use std::{net::SocketAddr, sync::Arc, time::SystemTime};

use super::{Running, ServiceInput};
use crate::{
    balance::Registry,
    routes::{Context, RouteTable, RoutesError},
};

/// A service the proxy could not (fully) apply; it keeps what it had.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Its routes did not compile; the previous routes stay.
    #[error("{origin}: {source}; keeping the previous routes")]
    Routes {
        /// File or inline origin.
        origin: String,
        /// Why.
        source: RoutesError,
    },
    /// Its VIP:port could not be bound.
    #[error("service {service}: listening on {addr}: {source}")]
    Listen {
        /// Service.
        service: String,
        /// Address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Applies a running service's new input: routes recompiled when their text changed
/// (and was not rejected before), endpoints replaced when they changed.
pub(super) fn update(
    running: &mut Running,
    input: &ServiceInput,
    registry: &Registry,
    now: SystemTime,
) -> Result<(), ApplyError> {
    if running.input == *input {
        return Ok(());
    }
    let mut result = Ok(());
    let routes_changed = running.input.routes != input.routes;
    if routes_changed && running.rejected != input.routes {
        let previous = running.state.routes.load_full();
        match compile(input, registry, Some(&previous), now) {
            Ok(table) => {
                running.state.routes.store(Arc::new(table));
                running.rejected = None;
                running.input = input.clone();
                return Ok(());
            }
            Err(source) => {
                running.rejected.clone_from(&input.routes);
                result = Err(ApplyError::Routes {
                    origin: input.routes_origin.clone(),
                    source,
                });
            }
        }
    }
    if running.input.endpoints != input.endpoints {
        running
            .state
            .routes
            .load()
            .set_service_endpoints(&input.endpoints, registry, now);
        running.input.endpoints.clone_from(&input.endpoints);
    }
    result
}

pub(super) fn compile(
    input: &ServiceInput,
    registry: &Registry,
    previous: Option<&RouteTable>,
    now: SystemTime,
) -> Result<RouteTable, RoutesError> {
    let cx = Context {
        registry,
        service_endpoints: &input.endpoints,
        previous,
        now,
    };
    match &input.routes {
        Some(text) => RouteTable::parse(text, &cx),
        None => Ok(RouteTable::service_default(&cx)),
    }
}
