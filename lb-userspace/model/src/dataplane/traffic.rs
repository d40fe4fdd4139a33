//! What the data plane counted and holds, as the agent and its admin API read it: a
//! trait over the kernel maps (and the in-memory ones), so the agent's views and
//! answers do not depend on aya.

use std::sync::atomic::AtomicU64;

use lb_common::{Counter, TrafficStats};

use super::DataplaneError;

/// How full a flow table is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fill {
    /// Entries in it.
    pub entries: u64,
    /// Its `max_entries`.
    pub capacity: u64,
}

/// Established flows per backend id and in all, and the fill of every flow table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowCounts {
    /// Established flows (`dsr` and `nat`) per backend id.
    pub per_backend: std::collections::HashMap<u32, u64>,
    /// Established flows in all (`dsr` conntrack plus `nat` flows).
    pub total: u64,
    /// The `dsr` established-flow table.
    pub conntrack: Fill,
    /// The half-open flow table.
    pub embryonic: Fill,
    /// The `nat` reply map (one entry per NAT port in use).
    pub nat: Fill,
}

/// Counters and flow-table contents of a data plane.
pub trait Traffic {
    /// A global counter summed over CPUs ([`Counter::Packets`] is the sum of the
    /// verdict counters).
    ///
    /// # Errors
    /// A map read failed.
    fn counter(&self, counter: Counter) -> Result<u64, DataplaneError>;

    /// Every global counter summed over CPUs, in [`Counter::ALL`] order.
    ///
    /// # Errors
    /// A map read failed.
    fn counters(&self) -> Result<Vec<(Counter, u64)>, DataplaneError> {
        Counter::ALL
            .iter()
            .map(|&c| Ok((c, self.counter(c)?)))
            .collect()
    }

    /// Traffic of a service (by service id), summed over CPUs.
    ///
    /// # Errors
    /// A map read failed.
    fn vip_stats(&self, service_id: u32) -> Result<TrafficStats, DataplaneError>;

    /// Traffic of a backend (by backend id), summed over CPUs.
    ///
    /// # Errors
    /// A map read failed.
    fn backend_stats(&self, backend_id: u32) -> Result<TrafficStats, DataplaneError>;

    /// Established flows per backend and every table's fill (walks the tables: the
    /// kernel implementation does it on handles of its own, see its `conntrack_reader`).
    ///
    /// # Errors
    /// A walk failed.
    fn flow_counts(&self) -> Result<FlowCounts, DataplaneError>;
}

/// A data plane whose counters and flow tables can be read from another thread while
/// it is written: the admin API is answered there, so that no answer waits for a
/// reconcile.
pub trait ShareTraffic {
    /// What reads them.
    type Reader: Traffic + Send + Sync + 'static;

    /// Handles of their own to the same counters and tables.
    ///
    /// # Errors
    /// The handles could not be opened.
    fn share(&self) -> Result<Self::Reader, DataplaneError>;
}

/// `nat` ports released by lbd's sweeper (`lb_dataplane::natsweep`), by how their flow
/// ended.
#[derive(Debug, Default)]
pub struct SweepStats {
    /// Flows that ended with FIN (closed or TIME_WAIT run out).
    pub fin: AtomicU64,
    /// Flows that ended with RST.
    pub rst: AtomicU64,
    /// Flows that timed out (SYN never answered, idle established, closing).
    pub timeout: AtomicU64,
    /// Passes made.
    pub passes: AtomicU64,
}
