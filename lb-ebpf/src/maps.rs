//! Every map the data plane uses. Sizes and layouts come from `lb-common`; names are
//! the ABI userspace opens (and pins) them by.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, ProgramArray},
};
use lb_common::{
    Backend, Counter, FlowEntry, FlowKey, GlobalConfig, TableChunk, TrafficStats, VipInfo, VipKey,
    maps::{
        CONNTRACK_ENTRIES, EMBRYONIC_ENTRIES, MAX_BACKENDS, MAX_SERVICES, NAT_ENTRIES,
        SERVICE_BACKEND_SLOTS, TABLE_CHUNKS,
    },
};

/// Which VIPs this node serves: (address, port or 0, protocol) → service.
#[map(name = "LB_VIPS_V2")]
pub static VIPS: HashMap<VipKey, VipInfo> = HashMap::with_max_entries(MAX_SERVICES, 0);

/// Backends by id.
/// A direct-mapped copy of [`VIPS`] written by the agent (see `lb_common::VipSlot`).
#[map(name = "LB_VIP_SLOTS_V1")]
pub static VIP_SLOTS: Array<lb_common::maps::VipSlot> =
    Array::with_max_entries(lb_common::maps::VIP_SLOTS, 0);

#[map(name = "LB_BACKENDS_V2")]
pub static BACKENDS: Array<Backend> = Array::with_max_entries(MAX_BACKENDS, 0);

/// Pool of service backend lists: `VipInfo::list_base + i` → backend id.
#[map(name = "LB_SVC_BACKENDS_V2")]
pub static SERVICE_BACKENDS: Array<u32> = Array::with_max_entries(SERVICE_BACKEND_SLOTS, 0);

/// Pool of Maglev tables, 32 two-byte slots per element.
#[map(name = "LB_TABLES_V2")]
pub static TABLE_CHUNKS_MAP: Array<TableChunk> = Array::with_max_entries(TABLE_CHUNKS, 0);

/// Established `dsr` flows: the backend each is pinned to. Only a flow's second packet
/// (the handshake's ACK, a second datagram) brings it here, so spoofed SYNs and
/// datagrams never evict an established flow. One LRU list for all CPUs: inserts are
/// rare (one per flow), and the whole capacity serves whatever CPUs the flows use.
/// Sized by `node.conntrack_entries` at load.
#[map(name = "LB_CONNTRACK_V3")]
pub static CONNTRACK: LruHashMap<FlowKey, FlowEntry> =
    LruHashMap::with_max_entries(CONNTRACK_ENTRIES, 0);

/// The per-CPU flow cache in front of [`CONNTRACK`] (see `lb_common::FlowCacheSlot`
/// and `flowcache.rs`).
#[map(name = "LB_FLOW_CACHE_V1")]
pub static FLOW_CACHE: PerCpuArray<lb_common::maps::FlowCacheSlot> =
    PerCpuArray::with_max_entries(lb_common::maps::FLOW_CACHE_SLOTS, 0);

/// The flow cache's generation (`lb_common::FlowCacheSlot`), pinned.
#[map(name = "LB_FLOW_CACHE_GEN_V1")]
pub static FLOW_CACHE_GEN: Array<u64> = Array::with_max_entries(1, 0);

/// Flows that have sent only their first packet (a SYN, one datagram): the
/// set-associative table of `lb_common::halfopen`, shared by every CPU. Sized by
/// `node.embryonic_entries` at load (`halfopen::buckets_for`), and the bucket mask and
/// seed the program uses are its globals below. Mappable (`halfopen::MAP_FLAGS`): the
/// agent reads and writes it a way at a time through a shared mapping.
#[map(name = "LB_CT_EMBRYONIC_V2")]
pub static EMBRYONIC: Array<lb_common::halfopen::Bucket> = Array::with_max_entries(
    lb_common::halfopen::buckets_for(EMBRYONIC_ENTRIES),
    lb_common::halfopen::MAP_FLAGS,
);

/// The seed [`EMBRYONIC`] was filled with, pinned for the next agent; the data plane
/// reads its copy in [`EMBRYONIC_SEED`] instead.
#[map(name = "LB_CT_EMBRYONIC_SEED_V1")]
pub static EMBRYONIC_SEED_MAP: Array<u32> = Array::with_max_entries(1, 0);

/// [`EMBRYONIC`]'s bucket count minus one, set by the agent at load (a `.rodata`
/// constant to the verifier: the mask costs nothing at run time).
#[unsafe(no_mangle)]
pub static LB_EMBRYONIC_MASK: u32 = lb_common::halfopen::buckets_for(EMBRYONIC_ENTRIES) - 1;

/// The seed of [`EMBRYONIC`]'s bucket hash, set by the agent at load (the value it
/// keeps in [`EMBRYONIC_SEED_MAP`]).
#[unsafe(no_mangle)]
pub static LB_EMBRYONIC_SEED: u32 = 0;

/// Per-CPU scratch space for `bpf_fib_lookup` parameters (see `forward.rs`).
#[map(name = "LB_FIB_SCRATCH")]
pub static FIB_SCRATCH: PerCpuArray<aya_ebpf::bindings::bpf_fib_lookup> =
    PerCpuArray::with_max_entries(1, 0);

/// Per-CPU cache of the coarse clock (see `forward::now`): the time it read and the
/// jiffy it read it in.
#[map(name = "LB_CLOCK")]
pub static CLOCK: PerCpuArray<crate::forward::Clock> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU cache of each backend's next hop (see `forward.rs`), by backend id.
#[map(name = "LB_NEXT_HOPS")]
pub static NEXT_HOPS: PerCpuArray<crate::forward::NextHop> =
    PerCpuArray::with_max_entries(MAX_BACKENDS, 0);

/// Per-CPU cache of clients' next hops (translated `nat` replies), direct-mapped by
/// address (`lb_common::maps::client_hop_slot`).
#[map(name = "LB_CLIENT_HOPS")]
pub static CLIENT_HOPS: PerCpuArray<crate::forward::NextHop> =
    PerCpuArray::with_max_entries(lb_common::maps::CLIENT_HOP_SLOTS, 0);

/// VIP addresses whose echo requests are answered here.
#[map(name = "LB_ECHO_ADDRS_V1")]
pub static ECHO_ADDRS: HashMap<lb_common::AddrKey, u32> =
    HashMap::with_max_entries(MAX_SERVICES, 0);

/// `nat` mode, the reply side: (backend → NAT address:port) → what to translate back
/// to, and until when the port is taken. A plain hash, so nothing is ever evicted: a
/// port is taken over only once its flow has ended or idled out (see `nat.rs`).
#[map(name = "LB_NAT_V2")]
pub static NAT: HashMap<FlowKey, lb_common::NatEntry> = HashMap::with_max_entries(NAT_ENTRIES, 0);

/// `nat` mode, the client side: (client → VIP) → backend and NAT port. A plain hash,
/// one entry per live `nat` flow; entries leave with their reply entry.
#[map(name = "LB_NAT_FLOWS_V1")]
pub static NAT_FLOWS: HashMap<FlowKey, FlowEntry> = HashMap::with_max_entries(NAT_ENTRIES, 0);

/// Per-CPU scratch of `lb_nat` (keys and values that do not fit its stack).
#[map(name = "LB_NAT_SCRATCH")]
pub static NAT_SCRATCH: PerCpuArray<crate::nat::Scratch> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU hand-over from `lb_xdp` to `lb_nat`: the packet as parsed and the VIP
/// found (or that it is a reply), so `lb_nat` neither parses nor looks up again.
/// Pinned, like the program array it goes with: a restarted agent's `lb_nat` is in the
/// array while the previous `lb_xdp` still runs, and reads what that one wrote (its
/// layout is ABI; a changed one needs a new name).
#[map(name = "LB_NAT_JOBS_V1")]
pub static NAT_JOBS: PerCpuArray<crate::nat::Job> = PerCpuArray::with_max_entries(1, 0);

/// Tail-call targets: `lb_nat` (`nat` flows), `lb_nat_icmp` (ICMP errors about them)
/// and `lb_tunnel` (`ipip`/`gue` encapsulation, tail-called only by the `lb_xdp` of
/// the release before), each with a stack frame of its own (the verifier allows 512
/// bytes per program, and one program doing everything does not fit).
#[map(name = "LB_PROGS_V2")]
pub static PROGS: ProgramArray = ProgramArray::with_max_entries(3, 0);

/// Index of `lb_nat` in [`PROGS`].
pub const PROG_NAT: u32 = 0;
/// Index of `lb_nat_icmp` in [`PROGS`].
pub const PROG_NAT_ICMP: u32 = 1;
// Index 2 of [`PROGS`] holds `lb_tunnel`, which only an earlier release calls.

/// [`PROGS`] of `lb_tc`: its TC twins `lb_tc_nat`, `lb_tc_nat_icmp` and
/// `lb_tc_tunnel`, at the same indices (a program array holds one program type).
#[map(name = "LB_TC_PROGS_V1")]
pub static TC_PROGS: ProgramArray = ProgramArray::with_max_entries(3, 0);

/// Per-CPU hand-over to `lb_tunnel` from the `lb_xdp` of the release before: the
/// packet as parsed and the backend chosen, so the encapsulation neither parses nor
/// looks up again. Pinned, as [`NAT_JOBS`] is.
#[map(name = "LB_TUNNEL_JOBS_V1")]
pub static TUNNEL_JOBS: PerCpuArray<crate::tunnel::Job> = PerCpuArray::with_max_entries(1, 0);

/// The VIP-address prefilter (see `lb_common::maps::vip_filter_slot`): a bit per
/// address hash, set for every VIP address.
#[map(name = "LB_VIP_FILTER_V1")]
pub static VIP_FILTER: Array<u64> = Array::with_max_entries(lb_common::maps::VIP_FILTER_WORDS, 0);

/// Tunnel settings of `ipip` and `gue` services at index 0 (see `tunnel.rs`).
#[map(name = "LB_TUNNEL_V1")]
pub static TUNNEL: Array<lb_common::TunnelConfig> = Array::with_max_entries(1, 0);

/// Node-wide settings at index 0.
#[map(name = "LB_CONFIG_V4")]
pub static CONFIG: Array<GlobalConfig> = Array::with_max_entries(1, 0);

/// Global verdict and reason counters, one slot per `Counter`.
#[map(name = "LB_COUNTERS_V5")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Per-service traffic, indexed by `VipInfo::service_id`.
#[map(name = "LB_VIP_STATS_V2")]
pub static VIP_STATS: PerCpuArray<TrafficStats> = PerCpuArray::with_max_entries(MAX_SERVICES, 0);

/// Per-backend traffic, indexed by backend id.
#[map(name = "LB_BACKEND_STATS_V2")]
pub static BACKEND_STATS: PerCpuArray<TrafficStats> =
    PerCpuArray::with_max_entries(MAX_BACKENDS, 0);

/// `lb_decap` (backends): the VIP addresses this host decapsulates for (see `decap.rs`).
#[map(name = "LB_DECAP_VIPS_V1")]
pub static DECAP_VIPS: HashMap<lb_common::AddrKey, u32> =
    HashMap::with_max_entries(lb_common::decap::MAX_DECAP_VIPS, 0);

/// `lb_decap`'s settings at index 0: the GUE ports.
#[map(name = "LB_DECAP_CONFIG_V1")]
pub static DECAP_CONFIG: Array<lb_common::DecapConfig> = Array::with_max_entries(1, 0);

/// `lb_decap`'s counters, one slot per `DecapCounter`.
#[map(name = "LB_DECAP_COUNTERS_V1")]
pub static DECAP_COUNTERS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(lb_common::DecapCounter::COUNT, 0);

/// `lb_probe`'s counters, per CPU, indexed by `lb_common::ProbeCounter`.
#[map(name = "LB_PROBE_COUNTERS_V1")]
pub static PROBE_COUNTERS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(lb_common::ProbeCounter::COUNT, 0);
