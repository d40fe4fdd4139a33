//! Map keys, values and limits.
//!
//! Addresses are 16 bytes everywhere; IPv4 is stored IPv4-mapped (`::ffff:a.b.c.d`), so
//! one set of maps and one code path serve both families.

use core::mem::size_of;

pub use crate::addr::Addr;

/// Names of programs and maps, as pinned under bpffs.
pub mod names {
    /// The ingress XDP program.
    pub const XDP_PROGRAM: &str = "lb_xdp";
    /// The `nat` program, tail-called from the ingress program.
    pub const NAT_PROGRAM: &str = "lb_nat";
    /// The `nat` ICMP-error program, tail-called from the ingress program.
    pub const NAT_ICMP_PROGRAM: &str = "lb_nat_icmp";
    /// The `ipip`/`gue` encapsulation program, tail-called by the ingress program of
    /// the release before (this one's encapsulates itself): kept for the instant of
    /// an upgrade, when that program still runs.
    pub const TUNNEL_PROGRAM: &str = "lb_tunnel";
    /// Tail-call targets (V2: a third slot, `lb_tunnel`).
    pub const PROGS: &str = "LB_PROGS_V2";
    /// The tail-call targets of releases before V2, whose pin a new agent removes.
    pub const PROGS_V1: &str = "LB_PROGS_V1";
    /// A program that passes everything (benchmark floor, veth peers).
    pub const XDP_PASS_PROGRAM: &str = "xdp_pass";
    /// The TC ingress twin of [`XDP_PROGRAM`] (`node.hook = "tc"`).
    pub const TC_PROGRAM: &str = "lb_tc";
    /// [`NAT_PROGRAM`] of [`TC_PROGRAM`].
    pub const TC_NAT_PROGRAM: &str = "lb_tc_nat";
    /// [`NAT_ICMP_PROGRAM`] of [`TC_PROGRAM`].
    pub const TC_NAT_ICMP_PROGRAM: &str = "lb_tc_nat_icmp";
    /// [`TUNNEL_PROGRAM`] of [`TC_PROGRAM`].
    pub const TC_TUNNEL_PROGRAM: &str = "lb_tc_tunnel";
    /// Tail-call targets of [`TC_PROGRAM`], at the indices of [`PROGS`].
    pub const TC_PROGS: &str = "LB_TC_PROGS_V1";
    /// Per-CPU hand-over from the ingress program to its `nat` tail call (pinned with
    /// the program arrays: an agent's tail calls run behind its predecessor's ingress
    /// program until the swap).
    pub const NAT_JOBS: &str = "LB_NAT_JOBS_V1";
    /// Per-CPU hand-over to the `ipip`/`gue` tail call, pinned as [`NAT_JOBS`] is.
    pub const TUNNEL_JOBS: &str = "LB_TUNNEL_JOBS_V1";
    /// VIP lookup: [`super::VipKey`] → [`super::VipInfo`].
    pub const VIPS: &str = "LB_VIPS_V2";
    /// A direct-mapped copy of [`VIPS`]: index [`super::vip_slot`] →
    /// [`super::VipSlot`]. Not pinned: each load fills its own from [`VIPS`].
    pub const VIP_SLOTS: &str = "LB_VIP_SLOTS_V1";
    /// Backends by id: index → [`super::Backend`].
    pub const BACKENDS: &str = "LB_BACKENDS_V2";
    /// Backend lists of services: index → backend id (`u32`).
    pub const SERVICE_BACKENDS: &str = "LB_SVC_BACKENDS_V2";
    /// Maglev tables: index → [`super::TableChunk`].
    pub const TABLE_CHUNKS: &str = "LB_TABLES_V2";
    /// Connection tracking of established `dsr` flows: [`super::FlowKey`] →
    /// [`super::FlowEntry`]. The layout of V3 is kept (new fields took over padding that
    /// was zero), so flows pinned by an older agent survive an upgrade.
    pub const CONNTRACK: &str = "LB_CONNTRACK_V3";
    /// The generation of the data plane's per-CPU flow cache: index 0 → `u64`, a random
    /// value replaced after every removal or rewrite of a conntrack entry
    /// ([`super::FlowCacheSlot`]). Pinned, so that the programs of an agent and of its
    /// successor, which share the conntrack table, invalidate each other's caches.
    pub const FLOW_CACHE_GEN: &str = "LB_FLOW_CACHE_GEN_V1";
    /// The per-CPU flow cache in front of [`CONNTRACK`]: index
    /// [`super::flow_cache_slot`] → [`super::FlowCacheSlot`]. Not pinned: a cache, each
    /// load starts empty.
    pub const FLOW_CACHE: &str = "LB_FLOW_CACHE_V1";
    /// Flows that have only sent a SYN (or one UDP datagram): an array of
    /// [`crate::halfopen::Bucket`]s. Promoted to [`CONNTRACK`] by the client's next
    /// packet.
    pub const EMBRYONIC: &str = "LB_CT_EMBRYONIC_V2";
    /// The seed of [`EMBRYONIC`]'s bucket hash (`u32` at index 0), kept pinned so a
    /// restarted agent loads its program with the seed the table was filled with.
    pub const EMBRYONIC_SEED: &str = "LB_CT_EMBRYONIC_SEED_V1";
    /// The embryonic table of releases before [`EMBRYONIC`]: an LRU hash of
    /// [`super::FlowKey`] → [`super::FlowEntry`]; its flows are copied into the new
    /// table at the upgrade.
    pub const EMBRYONIC_V1: &str = "LB_CT_EMBRYONIC_V1";
    /// Global of the data plane (`.rodata`): [`EMBRYONIC`]'s bucket count minus one.
    pub const EMBRYONIC_MASK_GLOBAL: &str = "LB_EMBRYONIC_MASK";
    /// Global of the data plane (`.rodata`): [`EMBRYONIC_SEED`]'s value.
    pub const EMBRYONIC_SEED_GLOBAL: &str = "LB_EMBRYONIC_SEED";
    /// `nat` flows, client side: [`super::FlowKey`] (client → VIP) →
    /// [`super::FlowEntry`] (backend, NAT port). A plain hash: entries leave only when
    /// their flow ends or idles out, never by eviction.
    pub const NAT_FLOWS: &str = "LB_NAT_FLOWS_V1";
    /// VIP addresses whose echo requests XDP answers: [`super::AddrKey`] → `u32` (0).
    pub const ECHO_ADDRS: &str = "LB_ECHO_ADDRS_V1";
    /// `nat` mode replies: [`super::FlowKey`] (backend → NAT address and port) →
    /// [`super::NatEntry`]. A plain hash: the owner of a NAT port, released when the
    /// flow ends or idles out (never evicted, so a flood cannot take a live port).
    pub const NAT: &str = "LB_NAT_V2";
    /// The `nat` reply map of agents before V2 (an LRU with a shorter value).
    pub const NAT_V1: &str = "LB_NAT_V1";
    /// Node-wide settings: index 0 → [`super::GlobalConfig`].
    pub const CONFIG: &str = "LB_CONFIG_V4";
    /// Per-CPU global counters indexed by [`crate::Counter`] (V5: the tunnel modes'
    /// verdicts and the MTU's).
    pub const COUNTERS: &str = "LB_COUNTERS_V5";
    /// The counters of releases before V5, whose pin a new agent removes.
    pub const COUNTERS_V4: &str = "LB_COUNTERS_V4";
    /// Tunnel settings: index 0 → [`super::TunnelConfig`].
    pub const TUNNEL: &str = "LB_TUNNEL_V1";
    /// The VIP-address prefilter: word index → 64 bits ([`super::vip_filter_slot`]).
    pub const VIP_FILTER: &str = "LB_VIP_FILTER_V1";
    /// Per-CPU per-service counters indexed by service id → [`crate::VipStats`].
    pub const VIP_STATS: &str = "LB_VIP_STATS_V2";
    /// Per-CPU per-backend counters indexed by backend id → [`crate::BackendStats`].
    pub const BACKEND_STATS: &str = "LB_BACKEND_STATS_V2";
    /// The backends' TC ingress program that strips `ipip`/`gue` encapsulation.
    pub const DECAP_PROGRAM: &str = "lb_decap";
    /// `lb_decap`'s VIPs: [`super::AddrKey`] → `u32` (reserved, zero).
    pub const DECAP_VIPS: &str = "LB_DECAP_VIPS_V1";
    /// `lb_decap`'s settings: index 0 → [`crate::DecapConfig`].
    pub const DECAP_CONFIG: &str = "LB_DECAP_CONFIG_V1";
    /// `lb_decap`'s per-CPU counters indexed by [`crate::DecapCounter`].
    pub const DECAP_COUNTERS: &str = "LB_DECAP_COUNTERS_V1";
    /// The node's TC egress program sending health probes through the tunnel.
    pub const PROBE_PROGRAM: &str = "lb_probe";
    /// `lb_probe`'s counters (per CPU, indexed by `ProbeCounter`).
    pub const PROBE_COUNTERS: &str = "LB_PROBE_COUNTERS_V1";
}

/// Words of the VIP-address prefilter: 65,536 bits, 8 KiB.
pub const VIP_FILTER_WORDS: u32 = 1024;

/// Where an address sits in the VIP-address prefilter: (word, bit mask). A packet whose
/// destination's bit is clear is no VIP's (nor a VIP of another port): one array read,
/// which the verifier inlines, instead of the two VIP-map hash lookups, for the traffic
/// that is not ours. A set bit only means "maybe": the VIP map decides.
#[inline(always)]
pub const fn vip_filter_slot(addr: &Addr) -> (u32, u64) {
    let [a, b, c, d] = addr.0;
    let mut x = a ^ b.rotate_left(8) ^ c.rotate_left(16) ^ d;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    let bit = x & 0xffff;
    (bit >> 6, 1u64 << (bit & 63))
}

/// Most VIP entries (service ids are `< MAX_SERVICES`).
pub const MAX_SERVICES: u32 = 4096;
/// Most backends on a node (backend ids are `< MAX_BACKENDS`).
pub const MAX_BACKENDS: u32 = 65536;
/// Most backends one service may have: table slots are `u16` indices into its list.
pub const MAX_BACKENDS_PER_SERVICE: u32 = 4096;
/// Entries of the service-backend-list pool (regions of it belong to services).
pub const SERVICE_BACKEND_SLOTS: u32 = 262_144;
/// Largest table (Maglev size) one service may have.
pub const MAX_TABLE_SIZE: u32 = 131_071;
/// Table slots per [`TableChunk`]: slots are packed so a slot costs 2 bytes (array map
/// values are padded to 8 bytes, so one `u16` per element would cost 8).
pub const TABLE_CHUNK_SLOTS: u32 = 32;
/// Chunks in the table pool: 8 Mi slots, 16 MiB.
pub const TABLE_CHUNKS: u32 = 262_144;
/// Default size of the established-flow table (`node.conntrack_entries`): one LRU shared
/// by every CPU, so the whole capacity serves whichever CPUs carry the flows.
pub const CONNTRACK_ENTRIES: u32 = 1_048_576;

/// Default size of the embryonic-flow table (`node.embryonic_entries`): half-open flows
/// in all, shared by every CPU (`crate::halfopen`: 65,536 buckets of 4, 16 MiB).
pub const EMBRYONIC_ENTRIES: u32 = 262_144;

/// IP protocol numbers used in keys.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// Turns an IPv4 address (network order bytes) into its IPv4-mapped form.
#[inline(always)]
pub const fn v4_mapped(v4: [u8; 4]) -> Addr {
    Addr::v4_mapped(v4)
}

/// Whether an address is IPv4-mapped.
#[inline(always)]
pub const fn is_v4_mapped(addr: &Addr) -> bool {
    addr.is_v4_mapped()
}

/// Key of the VIP map. A service for every port of an address uses `port_be == 0`; the
/// program looks up the exact port first, then port 0.
///
/// Keys are 8-byte aligned so the compiler copies them in words: with byte alignment
/// the BPF backend calls a byte-at-a-time memcpy loop, which costs more than the
/// lookup itself.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipKey {
    /// VIP address (IPv4-mapped for IPv4).
    pub addr: Addr,
    /// Destination port, network byte order; 0 = all ports.
    pub port_be: u16,
    /// IP protocol ([`proto::TCP`] or [`proto::UDP`]).
    pub proto: u8,
    /// Always zero: hash keys compare every byte.
    pub _pad: u8,
    /// Always zero.
    pub _pad2: u32,
}
const _: () = assert!(size_of::<VipKey>() == 24);

/// A bare address as a map key (IPv4-mapped for IPv4).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AddrKey {
    /// The address.
    pub addr: Addr,
}
const _: () = assert!(size_of::<AddrKey>() == 16);

/// How packets for a service leave the node.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardingMode {
    /// L2 direct server return: rewrite the destination MAC and transmit; the backend
    /// holds the VIP and replies to the client directly.
    Dsr = 1,
    /// One-arm full NAT: destination → backend, source → the node's NAT address and
    /// a port of its own; replies come back to the node and are translated back.
    /// Backends need no configuration.
    Nat = 2,
    /// Pass to the kernel stack: the agent's HTTP proxy serves the VIP.
    L7 = 3,
    /// Encapsulated DSR: the packet in an outer IPv4 or IPv6 header (IP protocol 4
    /// for an IPv4 packet, 41 for IPv6) to a backend anywhere routable, whose
    /// `lb_decap` strips it; the backend replies to the client directly.
    Ipip = 4,
    /// Encapsulated DSR in UDP (GUE variant 1: the IP packet right after the UDP
    /// header), the flow's hash in the source port.
    Gue = 5,
}

impl ForwardingMode {
    /// Whether packets leave encapsulated (`ipip`, `gue`).
    pub const fn is_tunnel(self) -> bool {
        matches!(self, Self::Ipip | Self::Gue)
    }

    /// Decodes a mode stored in [`VipInfo::mode`].
    pub const fn from_u32(value: u32) -> Option<Self> {
        match value {
            1 => Some(Self::Dsr),
            2 => Some(Self::Nat),
            3 => Some(Self::L7),
            4 => Some(Self::Ipip),
            5 => Some(Self::Gue),
            _ => None,
        }
    }
}

/// Slots of the VIP cache ([`names::VIP_SLOTS`]), a power of two.
pub const VIP_SLOTS: u32 = 16384;

/// One slot of the VIP cache: a VIP entry the agent also wrote here, or zeros.
///
/// A VIP hash lookup costs ~15-20 ns on every VIP packet (hashing the 24-byte key and
/// walking a bucket); a slot costs an inlined array read and a compare. The agent
/// writes each VIP entry to its slot after the VIP map and clears the slot before
/// deleting the entry, overwriting whatever key held the slot: a key that lost its
/// slot (or never had one) is found in the VIP map as before, so a slot is only ever
/// a hit or a miss, never a wrong answer. All-zero is empty: no packet's key has
/// protocol 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipSlot {
    /// The VIP entry's key.
    pub key: VipKey,
    /// Its value, as in the VIP map.
    pub info: VipInfo,
}
const _: () = assert!(size_of::<VipSlot>() == 48);

/// Slots of the per-CPU flow cache ([`names::FLOW_CACHE`]), a power of two: 8,192
/// slots of 72 bytes, 576 KiB per CPU.
pub const FLOW_CACHE_SLOTS: u32 = 8192;

/// How long a flow-cache slot answers before its flow is looked up in conntrack again
/// (2^27 ns, about 134 ms): the lookup marks the entry as used in the LRU, so a hot
/// flow's entry is never the least recently used, and it finds entries the table lost.
pub const FLOW_CACHE_TTL_NS: u64 = 1 << 27;

/// How long after its expiry a flow-cache slot may still put back the conntrack entry
/// of its flow that the table lost (2^30 ns, about a second): longer, and the flow is
/// no longer known to be live.
pub const FLOW_CACHE_KEEP_NS: u64 = 1 << 30;

/// One slot of the per-CPU flow cache: a conntrack entry this CPU found (or promoted)
/// for `key`, good until `expires_ns` while `generation` is the cache's current
/// generation ([`names::FLOW_CACHE_GEN`]).
///
/// An established `dsr` packet costs a conntrack lookup (hashing the 40-byte key,
/// walking a bucket, comparing the key out of line: ~15 ns); a slot costs an inlined
/// array read and a compare. A slot is only ever a hit or a miss, never a wrong
/// answer: whoever removes or rewrites a conntrack entry (the data plane or the agent)
/// then stores a new random generation, which every CPU's next packet sees, and an
/// entry's backend identity is checked on every hit as on a conntrack hit. All-zero is
/// empty: no packet's key has protocol 0.
///
/// The generation is a random 64-bit value rather than a counter: a store of a fresh
/// one needs no atomic read-modify-write (which BPF programs written in Rust cannot
/// express), and two writers racing both leave a value no slot was filled with.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCacheSlot {
    /// The flow.
    pub key: FlowKey,
    /// Its conntrack entry as found.
    pub entry: FlowEntry,
    /// `bpf_ktime_get_coarse_ns` after which the slot is checked against conntrack.
    pub expires_ns: u64,
    /// The cache's generation when the slot was filled.
    pub generation: u64,
}
const _: () = assert!(size_of::<FlowCacheSlot>() == 72);

/// The slot of `key` in the per-CPU flow cache. A collision only costs the colliding
/// flows conntrack lookups: a slot holds its key and answers for no other.
#[inline(always)]
pub const fn flow_cache_slot(key: &FlowKey) -> u32 {
    let [a, b, c, d] = key.src.0;
    let ports = ((key.src_port_be as u32) << 16) | key.dst_port_be as u32;
    let mut x = a ^ b ^ c ^ d ^ key.dst.0[3].rotate_left(7) ^ ports.rotate_left(13);
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x & (FLOW_CACHE_SLOTS - 1)
}

/// Slots of the data plane's per-CPU cache of clients' next hops (translated `nat`
/// replies), a power of two.
pub const CLIENT_HOP_SLOTS: u32 = 4096;

/// The slot of a client's address in the cache of clients' next hops.
#[inline(always)]
pub const fn client_hop_slot(client: &Addr) -> u32 {
    let [a, b, c, d] = client.0;
    let mut x = a ^ b ^ c ^ d;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x & (CLIENT_HOP_SLOTS - 1)
}

/// The slot of `key` in the VIP cache.
#[inline(always)]
pub const fn vip_slot(key: &VipKey) -> u32 {
    let [a, b, c, d] = key.addr.0;
    let mut x = a ^ b.rotate_left(8) ^ c.rotate_left(16) ^ d;
    x ^= ((key.port_be as u32) << 8) ^ key.proto as u32;
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x & (VIP_SLOTS - 1)
}

/// Value of the VIP map: where the service's live backend list and table are.
///
/// Userspace writes a new list and table into free regions, then replaces this value in
/// one map update, so a packet sees the old pair or the new pair, never a mix.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipInfo {
    /// Index of this service's counters (`< MAX_SERVICES`).
    pub service_id: u32,
    /// A [`ForwardingMode`] value.
    pub mode: u32,
    /// First index of the backend list in the service-backend pool.
    pub list_base: u32,
    /// Backends in the list; zero means "no usable backend: drop new flows".
    pub list_len: u32,
    /// First table slot (a multiple of [`TABLE_CHUNK_SLOTS`]) in the table pool.
    pub table_base: u32,
    /// Table size (Maglev M, a prime); zero when the list is empty.
    pub table_size: u32,
}
const _: () = assert!(size_of::<VipInfo>() == 24);

/// Slots of a Maglev table, packed: each is an index into the service's backend list.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableChunk {
    /// `TABLE_CHUNK_SLOTS` slots.
    pub slots: [u16; TABLE_CHUNK_SLOTS as usize],
}
const _: () = assert!(size_of::<TableChunk>() == 64);

impl Default for TableChunk {
    fn default() -> Self {
        Self {
            slots: [0; TABLE_CHUNK_SLOTS as usize],
        }
    }
}

/// Backend flag: the address is IPv6 (else IPv4-mapped).
pub const BACKEND_F_IPV6: u16 = 1;
/// Backend flag: takes no new flows (weight 0, unhealthy, or removed and draining);
/// its established flows continue. A SYN whose 5-tuple is still pinned to such a
/// backend is a new connection and chooses again.
pub const BACKEND_F_NO_NEW: u16 = 2;

/// One backend, by id.
///
/// `flags` and `port_be` share what was once a `u32` of flags (little-endian: the flags
/// are its low half), so maps pinned before the port existed read as port 0; likewise
/// `service_id` and `generation` share what was a `u32` service id (`generation` reads as 0).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backend {
    /// Backend address (IPv4-mapped for IPv4).
    pub addr: Addr,
    /// `BACKEND_F_*` flags.
    pub flags: u16,
    /// `nat` mode: the port the backend listens on, network byte order, when it
    /// differs from the VIP's (a Kubernetes target port); 0 keeps the VIP's port.
    /// `dsr` cannot change ports (the backend answers the client directly).
    pub port_be: u16,
    /// Service that owns the backend id now.
    pub service_id: u16,
    /// Generation of the id: bumped each time the id is given to a new (service,
    /// address). Flow entries record it; an entry whose generation differs belongs to
    /// an earlier owner of the id and must not reach this backend.
    pub generation: u16,
}
const _: () = assert!(size_of::<Backend>() == 24);

/// Connection-tracking key: the 5-tuple as it arrives (client → VIP). 8-byte aligned
/// for word copies (see [`VipKey`]).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address (IPv4-mapped for IPv4).
    pub src: Addr,
    /// Destination address, the VIP.
    pub dst: Addr,
    /// Source port, network byte order.
    pub src_port_be: u16,
    /// Destination port, network byte order.
    pub dst_port_be: u16,
    /// IP protocol.
    pub proto: u8,
    /// Always zero.
    pub _pad: u8,
    /// Always zero.
    pub _pad2: u16,
}
const _: () = assert!(size_of::<FlowKey>() == 40);

impl FlowKey {
    /// Whether `other` is the same flow: every field but the zero padding (a key read
    /// from a map slot may carry whatever its writer left there).
    #[inline(always)]
    pub fn same_flow(&self, other: &FlowKey) -> bool {
        self.src == other.src
            && self.dst == other.dst
            && self.src_port_be == other.src_port_be
            && self.dst_port_be == other.dst_port_be
            && self.proto == other.proto
    }
}

/// Flow-entry flag (`nat` flows): the client has sent a packet after its SYN.
pub const FLOW_F_ESTABLISHED: u16 = 1;
/// Flow-entry flag (`nat` flows): the client has sent a FIN.
pub const FLOW_F_CLIENT_FIN: u16 = 2;
/// Flow-entry flag (`nat` flows): the close is complete as far as the client side can
/// tell (final ACK or RST seen); no more state changes are looked for.
pub const FLOW_F_DONE: u16 = 4;

/// A flow-table value: the backend a flow is pinned to (conntrack, embryonic and `nat`
/// flow tables).
///
/// The layout of the first version is kept: `service_id` was a `u32` (its high half,
/// now `flags`, was always zero) and `backend_gen`/`seen` took over zero padding, so
/// entries pinned by an older agent read as generation 0 with no flags.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowEntry {
    /// Backend id.
    pub backend_id: u32,
    /// Service id the flow was admitted by; a hit under another service is a mismatch.
    pub service_id: u16,
    /// `FLOW_F_*` flags.
    pub flags: u16,
    /// `nat` mode: the node's source port for this flow, network byte order (0 in
    /// other modes).
    pub nat_port_be: u16,
    /// [`Backend::generation`] when the flow was admitted.
    pub backend_gen: u16,
    /// `nat` flows: when the client side last refreshed its NAT entry, in units of
    /// 2^30 ns (about a second) of `bpf_ktime_get_coarse_ns`.
    pub seen: u32,
}
const _: () = assert!(size_of::<FlowEntry>() == 16);

/// State of a `nat` flow as its reply entry records it ([`NatEntry::state`]); each
/// state has its own timeout (`GlobalConfig::timeout_ns`).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatState {
    /// TCP: only the client's SYN (and maybe the backend's SYN-ACK) seen.
    SynSent = 0,
    /// TCP after the handshake; UDP always.
    Established = 1,
    /// TCP: the client sent a FIN first.
    ClientFin = 2,
    /// TCP: the backend sent a FIN first.
    BackendFin = 3,
    /// TCP: both FINs seen, the client's first: the backend waits for the final ACK.
    LastAck = 4,
    /// TCP: both FINs seen, the backend's first: the backend holds TIME_WAIT on this
    /// 4-tuple, so the port must not serve another client meanwhile.
    TimeWait = 5,
    /// TCP: final ACK or RST seen; the port is free once a short linger passes.
    Closed = 6,
}

impl NatState {
    /// Number of states (the size of the timeout table).
    pub const COUNT: usize = 7;

    /// Decodes [`NatEntry::state`]; unknown values read as established (the safest:
    /// the longest timeout that still ends).
    pub const fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::SynSent,
            2 => Self::ClientFin,
            3 => Self::BackendFin,
            4 => Self::LastAck,
            5 => Self::TimeWait,
            6 => Self::Closed,
            _ => Self::Established,
        }
    }

    /// Stable snake_case name, for the CLI and metric labels.
    pub const fn name(self) -> &'static str {
        match self {
            Self::SynSent => "syn_sent",
            Self::Established => "established",
            Self::ClientFin => "client_fin",
            Self::BackendFin => "backend_fin",
            Self::LastAck => "last_ack",
            Self::TimeWait => "time_wait",
            Self::Closed => "closed",
        }
    }
}

/// [`NatEntry::events`]: a RST was seen (so a release counts as "rst", not "fin").
pub const NAT_EV_RST: u8 = 1;

/// `nat` mode: the owner of a NAT port. Keyed by the reply's 5-tuple (backend → node's
/// NAT address and port); says what a reply is translated back to, and until when the
/// port is taken.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatEntry {
    /// The client's address (the reply's new destination).
    pub client: Addr,
    /// The VIP (the reply's new source).
    pub vip: Addr,
    /// The client's port, network byte order.
    pub client_port_be: u16,
    /// The VIP's port, network byte order.
    pub vip_port_be: u16,
    /// A [`NatState`] value.
    pub state: u8,
    /// `NAT_EV_*` bits.
    pub events: u8,
    /// Always zero.
    pub _pad: u16,
    /// `bpf_ktime_get_coarse_ns` time after which the port may serve another flow:
    /// the last refresh plus the state's timeout.
    pub expires_ns: u64,
    /// The backend the flow was sent to.
    pub backend_id: u32,
    /// When the deadline was last set, in units of 2^30 ns (about a second): the data
    /// plane refreshes it at most once a unit.
    pub refreshed: u32,
}
const _: () = assert!(size_of::<NatEntry>() == 56);

impl NatEntry {
    /// The key of the flow's client side (client → VIP), given the reply key's
    /// protocol: how a released port finds the flow entry that goes with it.
    #[inline(always)]
    pub const fn client_key(&self, proto: u8) -> FlowKey {
        FlowKey {
            src: self.client,
            dst: self.vip,
            src_port_be: self.client_port_be,
            dst_port_be: self.vip_port_be,
            proto,
            _pad: 0,
            _pad2: 0,
        }
    }
}

/// Default size of the two `nat` maps (`node.nat_entries`): each `nat` flow takes one
/// entry in each. Plain hashes with every element preallocated: when full, new `nat`
/// flows are dropped (counted) and established ones are untouched.
pub const NAT_ENTRIES: u32 = 262_144;

/// Slots of [`NatTimeouts::tcp_ns`]: a power of two above [`NatState::COUNT`], so the
/// data plane indexes it with `state & (NAT_TIMEOUT_SLOTS - 1)` and the verifier sees a
/// bounded offset without a branch.
pub const NAT_TIMEOUT_SLOTS: usize = 8;
const _: () = assert!(NAT_TIMEOUT_SLOTS.is_power_of_two() && NAT_TIMEOUT_SLOTS > NatState::COUNT);

/// Timeouts of `nat` flows, nanoseconds, by [`NatState`] (index = state; the spare
/// slots hold the established timeout), plus UDP.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatTimeouts {
    /// TCP timeout per state.
    pub tcp_ns: [u64; NAT_TIMEOUT_SLOTS],
    /// UDP idle timeout.
    pub udp_ns: u64,
}
const _: () = assert!(size_of::<NatTimeouts>() == 72);

impl NatTimeouts {
    /// The defaults (also `[node.nat_timeouts]`'s): SYN 10 s, established 6 h (beyond
    /// the 2 h TCP keepalive), closing 2 min, TIME_WAIT 60 s (Linux's), closed 0 s, UDP
    /// 60 s.
    pub const DEFAULT: Self = {
        const S: u64 = 1_000_000_000;
        Self {
            tcp_ns: [
                10 * S,
                6 * 3600 * S,
                120 * S,
                120 * S,
                120 * S,
                60 * S,
                0,
                6 * 3600 * S,
            ],
            udp_ns: 60 * S,
        }
    };
}

impl Default for NatTimeouts {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Node-wide settings, stored at index 0 of the config map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalConfig {
    /// Seed of the flow hash. Nodes of one fleet use the same seed so that every node
    /// picks the same backend for a flow.
    pub hash_seed: u32,
    /// Reserved, zero.
    pub flags: u32,
    /// `nat` mode: first source port the node uses towards backends (host order).
    pub nat_port_first: u16,
    /// `nat` mode: how many ports from `nat_port_first` (0 = nat disabled).
    pub nat_port_count: u16,
    /// `nat` mode: the port range is split into this many interleaved slices, one per
    /// possible CPU, and a CPU only claims ports of its own slice, so two CPUs can never
    /// race to take over the same expired port. 0 or 1: no split.
    pub nat_cpus: u32,
    /// `nat` mode: the node's IPv4 source address (IPv4-mapped; zero = none).
    pub nat_v4: Addr,
    /// `nat` mode: the node's IPv6 source address (zero = none).
    pub nat_v6: Addr,
    /// `nat` mode: how long each flow state holds its port.
    pub nat_timeouts: NatTimeouts,
}
const _: () = assert!(size_of::<GlobalConfig>() == 120);

/// Tunnel settings of `ipip` and `gue` services, stored at index 0 of the tunnel map.
///
/// The outer source of a flow's packets is `source | (mix & host_mask)`, `mix` a cheap
/// per-flow value of the client's address and port, so a backend's NIC, hashing the
/// outer header, spreads flows over its queues; a mask of zero sends every packet
/// from `source` itself. IPv6 outer headers also carry `mix` as their flow label.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelConfig {
    /// Outer IPv4 source (network order bytes); zero: IPv4 outer headers are refused.
    pub source_v4: [u8; 4],
    /// The bits of [`Self::source_v4`] a flow varies (network order bytes).
    pub host_mask_v4: [u8; 4],
    /// Outer IPv6 source; zero: IPv6 outer headers are refused.
    pub source_v6: [u8; 16],
    /// The bits of the low half of [`Self::source_v6`] a flow varies (network order).
    pub host_mask_v6: [u8; 8],
    /// `gue`: the UDP destination port, network byte order.
    pub gue_port_be: u16,
    /// Reserved, zero.
    pub _pad: u16,
    /// Reserved, zero.
    pub flags: u32,
}
const _: () = assert!(size_of::<TunnelConfig>() == 40);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), Copy, and has no padding (size asserts above), so
    // every bit pattern is a valid value and no uninitialised bytes are read.
    unsafe impl aya::Pod for super::VipKey {}
    unsafe impl aya::Pod for super::AddrKey {}
    unsafe impl aya::Pod for super::VipInfo {}
    unsafe impl aya::Pod for super::VipSlot {}
    unsafe impl aya::Pod for super::FlowCacheSlot {}
    unsafe impl aya::Pod for crate::halfopen::Bucket {}
    unsafe impl aya::Pod for super::TableChunk {}
    unsafe impl aya::Pod for super::Backend {}
    unsafe impl aya::Pod for super::FlowKey {}
    unsafe impl aya::Pod for super::FlowEntry {}
    unsafe impl aya::Pod for super::NatEntry {}
    unsafe impl aya::Pod for super::GlobalConfig {}
    unsafe impl aya::Pod for super::NatTimeouts {}
    unsafe impl aya::Pod for super::TunnelConfig {}
    unsafe impl aya::Pod for crate::DecapConfig {}
}
