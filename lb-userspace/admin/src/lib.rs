//! The admin API: what `lbd` tells `lbctl` (JSON over HTTP on a unix socket) and
//! Prometheus (OpenMetrics text on a TCP address, [`metrics`]).
//!
//! Every JSON reply is an [`Envelope`] carrying [`API_VERSION`], so an `lbctl` of
//! another release says so instead of misreading fields.

pub mod client;
pub mod histogram;
pub mod metrics;
pub mod server;

pub use lb_model::dataplane::Fill;
use serde::{Deserialize, Serialize};

pub use histogram::Histogram;

/// Version of the JSON schema below; bumped on any incompatible change.
pub const API_VERSION: u32 = 1;

/// Every JSON reply: the schema version and the payload.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// [`API_VERSION`] of the answering `lbd`.
    pub api_version: u32,
    /// The answer.
    pub data: T,
}

/// An error reply (`data` of a non-2xx answer).
#[derive(Debug, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong.
    pub error: String,
}

/// `GET /v1/status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    /// lbd's version.
    pub version: String,
    /// The admin API's version ([`API_VERSION`]).
    pub api_version: u32,
    /// The kernel's release (`uname -r`): XDP features depend on it.
    pub kernel: String,
    /// lbd's process id.
    pub pid: u32,
    /// Seconds since lbd started.
    pub uptime_seconds: f64,
    /// The config file.
    pub config_path: String,
    /// Successful config loads since start (1 = the file read at start).
    pub config_generation: u64,
    /// Interface the data plane is attached to.
    pub interface: String,
    /// The hook it runs on: `xdp` (`lb_xdp`) or `tc` (`lb_tc` on TCX ingress).
    #[serde(default)]
    pub hook: lb_model::config::Hook,
    /// `native` or `generic` (the XDP hook only).
    pub xdp_mode: String,
    /// Where maps are pinned (empty: not pinned).
    pub pin_path: String,
    /// Configured services.
    pub services: usize,
    /// Where services and endpoints come from.
    pub sources: Vec<SourceStatus>,
    /// Data-plane reconciles so far (start, reloads, slice changes, health changes,
    /// fade-in steps).
    pub reconciles: u64,
    /// The latest reconcile.
    pub last_reconcile: Option<ReconcileRecord>,
    /// Table rebuilds done for fade-in ramps.
    pub fade_in_rebuilds: u64,
    /// Conntrack entries (established flows the node tracks: `dsr` and `nat`).
    pub conntrack_entries: u64,
    /// Fill of each flow table, and `nat` ports released.
    #[serde(default)]
    pub flow_tables: FlowTablesStatus,
}

/// How full the flow tables are, and how `nat` ports were released.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FlowTablesStatus {
    /// Established `dsr` flows (`node.conntrack_entries`).
    pub conntrack: Fill,
    /// Half-open flows (`node.embryonic_entries`, split over CPUs).
    pub embryonic: Fill,
    /// `nat` ports in use (`node.nat_entries`).
    pub nat: Fill,
    /// `nat` ports released since the data plane was loaded, by how their flow ended:
    /// `fin`, `rst`, `timeout` (taken over by the data plane, or swept by lbd).
    pub nat_released: NatReleased,
    /// Half-open flows made: the new flows of `dsr` services (each starts half-open).
    pub embryonic_created: u64,
    /// Half-open flows that left the embryonic table without being promoted (evicted
    /// by newer ones, or replaced by a retransmission that chose again), estimated as
    /// created − promoted − present.
    pub embryonic_evicted: u64,
}

/// `nat` ports released, by how their flow ended.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NatReleased {
    /// Both FINs (and the final ACK or TIME_WAIT).
    pub fin: u64,
    /// A RST.
    pub rst: u64,
    /// A timeout (SYN unanswered, idle, stuck closing).
    pub timeout: u64,
}

/// One source of services or endpoints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SourceStatus {
    /// `config`, `endpointslices`, `etcd` or `routes` (an l7 service's routes).
    pub kind: String,
    /// The file or directory.
    pub location: String,
    /// `ok`, or what is wrong.
    pub state: String,
    /// etcd: the revision the node's state reflects.
    #[serde(default)]
    pub revision: Option<i64>,
    /// Entries left out (`key: why`); the rest is applied.
    #[serde(default)]
    pub rejected: Vec<String>,
}

/// The outcome of one reconcile.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReconcileRecord {
    /// What caused it: `start`, `reload`, `endpointslices`, `health`, `fade-in`.
    pub trigger: String,
    /// When it finished, seconds since the Unix epoch.
    pub finished_unix: f64,
    /// How long it took.
    pub duration_seconds: f64,
    /// `None` when it succeeded.
    pub error: Option<String>,
}

/// `GET /v1/services`: one service.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServiceView {
    /// Name from the config.
    pub name: String,
    /// `addr:port/proto` (`*` for all ports).
    pub vip: String,
    /// `dsr`, `nat` or `l7`.
    pub mode: String,
    /// Id in the data plane (counters index); `None` if not programmed.
    pub service_id: Option<u32>,
    /// Backends in the table's list.
    pub backends: usize,
    /// Backends taking new flows (effective weight > 0).
    pub serving: usize,
    /// Backends still fading in.
    pub fading: usize,
    /// Maglev table size (0: no usable backend).
    pub table_size: u32,
    /// FNV-1a digest of the live table, 16 hex digits; equal on every node with the
    /// same input.
    pub table_digest: String,
    /// Packets forwarded.
    pub packets: u64,
    /// Bytes forwarded.
    pub bytes: u64,
    /// Flows admitted.
    pub new_flows: u64,
}

/// `GET /v1/backends`: one backend of one service.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackendView {
    /// The service.
    pub service: String,
    /// The backend's address.
    pub address: std::net::IpAddr,
    /// Id in the data plane; `None` if not programmed.
    pub backend_id: Option<u32>,
    /// `nat` mode: the port the backend is reached on when it is not the VIP's.
    pub port: Option<u16>,
    /// `active`, `fading`, `draining` (weight 0: existing flows only) or `unhealthy`.
    pub state: String,
    /// Weight from the config or the EndpointSlice (0 = draining).
    pub weight: u32,
    /// Weight the table is built with, in the same unit: lower while fading in, 0
    /// while unhealthy.
    pub effective_weight: f64,
    /// `effective_weight / weight` in percent (100 when settled; 0 when draining).
    pub fade_in_percent: f64,
    /// `healthy`, `unhealthy` or `unchecked` (no health check configured).
    pub health: String,
    /// Packets forwarded.
    pub packets: u64,
    /// Bytes forwarded.
    pub bytes: u64,
    /// Flows admitted.
    pub new_flows: u64,
    /// Conntrack entries pinned to this backend now.
    pub flows: u64,
}
