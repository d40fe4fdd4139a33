//! Programming the XDP data plane.
//!
//! [`MapOps`] is the narrow kernel interface (one method per map operation) with an aya
//! implementation ([`kernel::KernelDataplane`]) and an in-memory one
//! ([`memory::MemoryDataplane`]), so that [`Programmer`] — which decides what to write
//! and in which order — is tested without root.

pub mod memory;
pub mod pool;
mod programmer;
pub mod select;
mod traffic;

use std::net::IpAddr;

use lb_common::{
    Addr, Backend, FlowEntry, FlowKey, ForwardingMode, GlobalConfig, NatEntry, TableChunk,
    TunnelConfig, VipInfo, VipKey,
};
pub use programmer::{ApplyReport, Change, Plan, Programmer, Refusal, Removal};
pub use traffic::{Fill, FlowCounts, ShareTraffic, SweepStats, Traffic};

/// A failed data-plane operation.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// A map update or lookup failed in the kernel.
    #[error("{op} on map {map}: {source}")]
    Map {
        /// The operation, e.g. "insert".
        op: &'static str,
        /// The map's pinned name.
        map: &'static str,
        /// The kernel's (or the map library's) error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A pinned map could not be opened (no agent ever ran with this pin directory, or
    /// it was cleaned up).
    #[error("opening pinned map {path}: {source}")]
    Pinned {
        /// The pin's path.
        path: String,
        /// The map library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The embedded object lacks a map or program this agent expects.
    #[error("the BPF object has no {what} named {name}")]
    Missing {
        /// "map" or "program".
        what: &'static str,
        /// The expected name.
        name: &'static str,
    },
    /// Loading or attaching the program failed.
    #[error("{action}: {source}")]
    Program {
        /// What was being done.
        action: String,
        /// The loader's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A data-plane pool (ids, lists, tables) is exhausted.
    #[error("out of {what} for service {service}: {detail}")]
    Exhausted {
        /// Which pool.
        what: &'static str,
        /// The service being programmed.
        service: String,
        /// Sizes involved.
        detail: String,
    },
    /// A service's spec cannot be programmed as given.
    #[error("service {service}: {problem}")]
    Invalid {
        /// The service.
        service: String,
        /// What is wrong.
        problem: String,
    },
}

/// The map operations the control plane needs. Implementations apply each call
/// immediately and in order; [`Programmer`] relies on that order for atomic swaps.
pub trait MapOps {
    /// Writes node-wide settings.
    fn set_config(&mut self, config: GlobalConfig) -> Result<(), DataplaneError>;
    /// Writes the tunnel settings of `ipip` and `gue` services.
    fn set_tunnel(&mut self, tunnel: TunnelConfig) -> Result<(), DataplaneError>;
    /// Inserts or replaces a VIP entry (one atomic element replacement).
    fn put_vip(&mut self, key: VipKey, info: VipInfo) -> Result<(), DataplaneError>;
    /// Removes a VIP entry.
    fn delete_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError>;
    /// Writes a backend by id.
    fn put_backend(&mut self, id: u32, backend: Backend) -> Result<(), DataplaneError>;
    /// Writes one entry of the service-backend pool.
    fn put_list_entry(&mut self, index: u32, backend_id: u32) -> Result<(), DataplaneError>;
    /// Writes one chunk of the table pool.
    fn put_table_chunk(&mut self, index: u32, chunk: TableChunk) -> Result<(), DataplaneError>;
    /// Writes one word of the VIP-address prefilter
    /// ([`lb_common::maps::vip_filter_slot`]).
    fn put_vip_filter_word(&mut self, index: u32, word: u64) -> Result<(), DataplaneError>;
    /// Answers echo requests to `addr` (16-byte form) from XDP.
    fn put_echo_addr(&mut self, addr: Addr) -> Result<(), DataplaneError>;
    /// Stops answering echo requests to `addr`.
    fn delete_echo_addr(&mut self, addr: Addr) -> Result<(), DataplaneError>;
}

/// Reading back what is programmed: to adopt the state a previous agent left in pinned
/// maps, and to explain decisions the way the data plane makes them.
pub trait MapRead {
    /// Every VIP entry.
    fn vips(&self) -> Result<Vec<(VipKey, VipInfo)>, DataplaneError>;
    /// One VIP entry, if present.
    fn vip(&self, key: &VipKey) -> Result<Option<VipInfo>, DataplaneError>;
    /// A flow's entry in one of the flow tables, if present.
    fn flow(&self, table: FlowTable, key: &FlowKey) -> Result<Option<FlowEntry>, DataplaneError>;
    /// A `nat` reply entry (the owner of a NAT port), if present.
    fn nat_reply(&self, key: &FlowKey) -> Result<Option<NatEntry>, DataplaneError>;
    /// Node-wide settings (the hash seed).
    fn global_config(&self) -> Result<GlobalConfig, DataplaneError>;
    /// The tunnel settings.
    fn tunnel_config(&self) -> Result<TunnelConfig, DataplaneError>;
    /// A backend by id.
    fn backend(&self, id: u32) -> Result<Backend, DataplaneError>;
    /// One entry of the service-backend pool.
    fn list_entry(&self, index: u32) -> Result<u32, DataplaneError>;
    /// One chunk of the table pool.
    fn table_chunk(&self, index: u32) -> Result<TableChunk, DataplaneError>;
    /// Addresses whose echo requests are answered.
    fn echo_addrs(&self) -> Result<Vec<Addr>, DataplaneError>;
}

/// The data plane's flow tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowTable {
    /// Established `dsr` flows (conntrack).
    Established,
    /// Flows that have sent only their first packet.
    Embryonic,
    /// `nat` flows (client side).
    Nat,
}

impl FlowTable {
    /// The pinned name of the table's map.
    pub const fn map_name(self) -> &'static str {
        match self {
            Self::Established => lb_common::maps::names::CONNTRACK,
            Self::Embryonic => lb_common::maps::names::EMBRYONIC,
            Self::Nat => lb_common::maps::names::NAT_FLOWS,
        }
    }

    /// Stable snake_case name, for the CLI.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Established => "established",
            Self::Embryonic => "embryonic",
            Self::Nat => "nat",
        }
    }
}

/// Whether a flow entry found under service `service_id` may reach `backend`: the
/// data plane's identity check (`lb-ebpf/src/lookup.rs` `valid`), mirrored for
/// `explain` and tests.
pub fn entry_is_own(service_id: u32, entry: &FlowEntry, backend: &Backend) -> bool {
    let service = service_id as u16;
    entry.service_id == service
        && backend.service_id == service
        && backend.generation == entry.backend_gen
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds: the clock of the data plane's deadlines
/// (`bpf_ktime_get_coarse_ns` reads the same clock, at jiffy resolution).
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The address a 16-byte data-plane address stands for.
pub fn from_addr16(addr: Addr) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(addr.octets());
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// What the data plane should do for one service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Name, for errors and reports.
    pub name: String,
    /// VIP, port (0 = all) and protocol.
    pub key: VipKey,
    /// Forwarding mode.
    pub mode: ForwardingMode,
    /// Backends, in a stable order (the table depends on it).
    pub backends: Vec<IpAddr>,
    /// Maglev table size; `None` picks [`crate::maglev::default_size`].
    pub table_size: Option<u32>,
    /// Weights, one per backend in `backends` order; empty means all 1. A weight of 0
    /// keeps the backend's established flows but gives it no new ones.
    pub weights: Vec<u32>,
    /// `nat` mode: the port each backend listens on, in `backends` order, where it
    /// differs from the VIP's (a Kubernetes target port); empty, or 0 for a backend,
    /// keeps the VIP's port.
    pub ports: Vec<u16>,
}

/// 16-byte form of an address as the data plane stores it (IPv4-mapped for IPv4).
pub fn addr16(addr: IpAddr) -> Addr {
    match addr {
        IpAddr::V4(v4) => Addr::v4_mapped(v4.octets()),
        IpAddr::V6(v6) => Addr::from_octets(v6.octets()),
    }
}

/// Builds the VIP key for an address, port (0 = all ports) and IP protocol number.
pub fn vip_key(addr: IpAddr, port: u16, proto: u8) -> VipKey {
    VipKey {
        addr: addr16(addr),
        port_be: port.to_be(),
        proto,
        _pad: 0,
        _pad2: 0,
    }
}
