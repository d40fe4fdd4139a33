//! Every map the data plane uses. Sizes and layouts come from `lb-common`; names are
//! the ABI userspace opens (and pins) them by.

use aya_ebpf::{
    bindings::BPF_F_NO_COMMON_LRU,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray},
};
use lb_common::{
    Backend, Counter, FlowEntry, FlowKey, GlobalConfig, TableChunk, TrafficStats, VipInfo, VipKey,
    maps::{CONNTRACK_ENTRIES, MAX_BACKENDS, MAX_SERVICES, SERVICE_BACKEND_SLOTS, TABLE_CHUNKS},
};

/// Which VIPs this node serves: (address, port or 0, protocol) → service.
#[map(name = "LB_VIPS_V2")]
pub static VIPS: HashMap<VipKey, VipInfo> = HashMap::with_max_entries(MAX_SERVICES, 0);

/// Backends by id.
#[map(name = "LB_BACKENDS_V2")]
pub static BACKENDS: Array<Backend> = Array::with_max_entries(MAX_BACKENDS, 0);

/// Pool of service backend lists: `VipInfo::list_base + i` → backend id.
#[map(name = "LB_SVC_BACKENDS_V2")]
pub static SERVICE_BACKENDS: Array<u32> = Array::with_max_entries(SERVICE_BACKEND_SLOTS, 0);

/// Pool of Maglev tables, 32 two-byte slots per element.
#[map(name = "LB_TABLES_V2")]
pub static TABLE_CHUNKS_MAP: Array<TableChunk> = Array::with_max_entries(TABLE_CHUNKS, 0);

/// Connection tracking: the backend each flow is pinned to. Per-CPU LRU lists
/// (`BPF_F_NO_COMMON_LRU`) avoid a global lock on insert; the table itself is shared.
#[map(name = "LB_CONNTRACK_V3")]
pub static CONNTRACK: LruHashMap<FlowKey, FlowEntry> =
    LruHashMap::with_max_entries(CONNTRACK_ENTRIES, BPF_F_NO_COMMON_LRU);

/// Per-CPU scratch space for `bpf_fib_lookup` parameters (see `forward.rs`).
#[map(name = "LB_FIB_SCRATCH")]
pub static FIB_SCRATCH: PerCpuArray<aya_ebpf::bindings::bpf_fib_lookup> =
    PerCpuArray::with_max_entries(1, 0);

/// Per-CPU cache of each backend's next hop (see `forward.rs`), by backend id.
#[map(name = "LB_NEXT_HOPS")]
pub static NEXT_HOPS: PerCpuArray<crate::forward::NextHop> =
    PerCpuArray::with_max_entries(MAX_BACKENDS, 0);

/// VIP addresses whose echo requests are answered here.
#[map(name = "LB_ECHO_ADDRS_V1")]
pub static ECHO_ADDRS: HashMap<lb_common::AddrKey, u32> =
    HashMap::with_max_entries(MAX_SERVICES, 0);

/// `nat` mode: replies (backend → NAT address:port) → what to translate them back to.
#[map(name = "LB_NAT_V1")]
pub static NAT: LruHashMap<FlowKey, lb_common::NatEntry> =
    LruHashMap::with_max_entries(lb_common::maps::NAT_ENTRIES, BPF_F_NO_COMMON_LRU);

/// Tail-call targets: `lb_nat` (`nat` flows) and `lb_nat_icmp` (ICMP errors about
/// them), each with a stack frame of its own (the verifier allows 512 bytes per
/// program, and one program doing everything does not fit).
#[map(name = "LB_PROGS_V1")]
pub static PROGS: ProgramArray = ProgramArray::with_max_entries(2, 0);

/// Index of `lb_nat` in [`PROGS`].
pub const PROG_NAT: u32 = 0;
/// Index of `lb_nat_icmp` in [`PROGS`].
pub const PROG_NAT_ICMP: u32 = 1;

/// Node-wide settings at index 0.
#[map(name = "LB_CONFIG_V3")]
pub static CONFIG: Array<GlobalConfig> = Array::with_max_entries(1, 0);

/// Global verdict and reason counters, one slot per `Counter`.
#[map(name = "LB_COUNTERS_V2")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Per-service traffic, indexed by `VipInfo::service_id`.
#[map(name = "LB_VIP_STATS_V2")]
pub static VIP_STATS: PerCpuArray<TrafficStats> = PerCpuArray::with_max_entries(MAX_SERVICES, 0);

/// Per-backend traffic, indexed by backend id.
#[map(name = "LB_BACKEND_STATS_V2")]
pub static BACKEND_STATS: PerCpuArray<TrafficStats> =
    PerCpuArray::with_max_entries(MAX_BACKENDS, 0);
