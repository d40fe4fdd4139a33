//! Map keys, values and limits.
//!
//! Addresses are 16 bytes everywhere; IPv4 is stored IPv4-mapped (`::ffff:a.b.c.d`), so
//! one set of maps and one code path serve both families.

use core::mem::size_of;

/// Names of programs and maps, as pinned under bpffs.
pub mod names {
    /// The ingress XDP program.
    pub const XDP_PROGRAM: &str = "lb_xdp";
    /// The `nat` program, tail-called from the ingress program.
    pub const NAT_PROGRAM: &str = "lb_nat";
    /// The `nat` ICMP-error program, tail-called from the ingress program.
    pub const NAT_ICMP_PROGRAM: &str = "lb_nat_icmp";
    /// Tail-call targets.
    pub const PROGS: &str = "LB_PROGS_V1";
    /// A program that passes everything (benchmark floor, veth peers).
    pub const XDP_PASS_PROGRAM: &str = "xdp_pass";
    /// VIP lookup: [`super::VipKey`] → [`super::VipInfo`].
    pub const VIPS: &str = "LB_VIPS_V2";
    /// Backends by id: index → [`super::Backend`].
    pub const BACKENDS: &str = "LB_BACKENDS_V2";
    /// Backend lists of services: index → backend id (`u32`).
    pub const SERVICE_BACKENDS: &str = "LB_SVC_BACKENDS_V2";
    /// Maglev tables: index → [`super::TableChunk`].
    pub const TABLE_CHUNKS: &str = "LB_TABLES_V2";
    /// Connection tracking: [`super::FlowKey`] → [`super::FlowEntry`].
    pub const CONNTRACK: &str = "LB_CONNTRACK_V3";
    /// VIP addresses whose echo requests XDP answers: [`super::AddrKey`] → `u32` (0).
    pub const ECHO_ADDRS: &str = "LB_ECHO_ADDRS_V1";
    /// `nat` mode replies: [`super::FlowKey`] → [`super::NatEntry`].
    pub const NAT: &str = "LB_NAT_V1";
    /// Node-wide settings: index 0 → [`super::GlobalConfig`].
    pub const CONFIG: &str = "LB_CONFIG_V3";
    /// Per-CPU global counters indexed by [`crate::Counter`].
    pub const COUNTERS: &str = "LB_COUNTERS_V2";
    /// Per-CPU per-service counters indexed by service id → [`crate::VipStats`].
    pub const VIP_STATS: &str = "LB_VIP_STATS_V2";
    /// Per-CPU per-backend counters indexed by backend id → [`crate::BackendStats`].
    pub const BACKEND_STATS: &str = "LB_BACKEND_STATS_V2";
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
/// Connection-tracking entries (LRU: the least recently used are evicted when full).
pub const CONNTRACK_ENTRIES: u32 = 1_048_576;

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

/// Turns an IPv4 address (network order bytes) into its IPv4-mapped 16-byte form.
#[inline(always)]
pub const fn v4_mapped(v4: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, v4[0], v4[1], v4[2], v4[3],
    ]
}

/// Whether a 16-byte address is IPv4-mapped.
#[inline(always)]
pub const fn is_v4_mapped(addr: &[u8; 16]) -> bool {
    addr[0] == 0
        && addr[1] == 0
        && addr[2] == 0
        && addr[3] == 0
        && addr[4] == 0
        && addr[5] == 0
        && addr[6] == 0
        && addr[7] == 0
        && addr[8] == 0
        && addr[9] == 0
        && addr[10] == 0xff
        && addr[11] == 0xff
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
    pub addr: [u8; 16],
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
    pub addr: [u8; 16],
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
}

impl ForwardingMode {
    /// Decodes a mode stored in [`VipInfo::mode`].
    pub const fn from_u32(value: u32) -> Option<Self> {
        match value {
            1 => Some(Self::Dsr),
            2 => Some(Self::Nat),
            3 => Some(Self::L7),
            _ => None,
        }
    }
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

/// One backend, by id.
///
/// `flags` and `port_be` share what was once a `u32` of flags (little-endian: the flags
/// are its low half), so maps pinned before the port existed read as port 0.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backend {
    /// Backend address (IPv4-mapped for IPv4).
    pub addr: [u8; 16],
    /// `BACKEND_F_*` flags.
    pub flags: u16,
    /// `nat` mode: the port the backend listens on, network byte order, when it
    /// differs from the VIP's (a Kubernetes target port); 0 keeps the VIP's port.
    /// `dsr` cannot change ports (the backend answers the client directly).
    pub port_be: u16,
    /// Service that owns the backend (for accounting).
    pub service_id: u32,
}
const _: () = assert!(size_of::<Backend>() == 24);

/// Connection-tracking key: the 5-tuple as it arrives (client → VIP). 8-byte aligned
/// for word copies (see [`VipKey`]).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address (IPv4-mapped for IPv4).
    pub src: [u8; 16],
    /// Destination address, the VIP.
    pub dst: [u8; 16],
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

/// Connection-tracking value: the backend a flow is pinned to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowEntry {
    /// Backend id.
    pub backend_id: u32,
    /// Service id the flow was admitted by.
    pub service_id: u32,
    /// `nat` mode: the node's source port for this flow, network byte order (0 in
    /// other modes).
    pub nat_port_be: u16,
    /// Always zero.
    pub _pad: u16,
    /// Always zero.
    pub _pad2: u32,
}
const _: () = assert!(size_of::<FlowEntry>() == 16);

/// `nat` mode: what a reply from a backend is translated back to, keyed by the reply's
/// 5-tuple (backend → node's NAT address and port) in the NAT map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatEntry {
    /// The client's address (the reply's new destination).
    pub client: [u8; 16],
    /// The VIP (the reply's new source).
    pub vip: [u8; 16],
    /// The client's port, network byte order.
    pub client_port_be: u16,
    /// The VIP's port, network byte order.
    pub vip_port_be: u16,
    /// Always zero.
    pub _pad: u32,
}
const _: () = assert!(size_of::<NatEntry>() == 40);

/// Entries of the NAT map (replies of NATed flows).
pub const NAT_ENTRIES: u32 = 262_144;

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
    /// Always zero.
    pub _pad: u32,
    /// `nat` mode: the node's IPv4 source address (IPv4-mapped; zero = none).
    pub nat_v4: [u8; 16],
    /// `nat` mode: the node's IPv6 source address (zero = none).
    pub nat_v6: [u8; 16],
}
const _: () = assert!(size_of::<GlobalConfig>() == 48);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), Copy, and has no padding (size asserts above), so
    // every bit pattern is a valid value and no uninitialised bytes are read.
    unsafe impl aya::Pod for super::VipKey {}
    unsafe impl aya::Pod for super::AddrKey {}
    unsafe impl aya::Pod for super::VipInfo {}
    unsafe impl aya::Pod for super::TableChunk {}
    unsafe impl aya::Pod for super::Backend {}
    unsafe impl aya::Pod for super::FlowKey {}
    unsafe impl aya::Pod for super::FlowEntry {}
    unsafe impl aya::Pod for super::NatEntry {}
    unsafe impl aya::Pod for super::GlobalConfig {}
}
