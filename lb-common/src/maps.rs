//! Map keys, values and limits.

use core::mem::size_of;

/// Name of the program object section and of every map, as pinned under bpffs.
pub mod names {
    /// The ingress XDP program.
    pub const XDP_PROGRAM: &str = "lb_xdp";
    /// A program that passes everything (benchmark floor, veth peers).
    pub const XDP_PASS_PROGRAM: &str = "xdp_pass";
    /// VIP lookup: [`super::VipKey`] → [`super::VipInfo`].
    pub const VIPS: &str = "LB_VIPS_V1";
    /// Backend slots: index → [`super::BackendSlot`].
    pub const BACKENDS: &str = "LB_BACKENDS_V1";
    /// Node-wide settings: index 0 → [`super::GlobalConfig`].
    pub const CONFIG: &str = "LB_CONFIG_V1";
    /// Per-CPU global counters indexed by [`crate::Counter`].
    pub const COUNTERS: &str = "LB_COUNTERS_V1";
    /// Per-CPU per-service counters indexed by service id → [`crate::VipStats`].
    pub const VIP_STATS: &str = "LB_VIP_STATS_V1";
}

/// Most services (VIP entries) one node programs.
pub const MAX_SERVICES: u32 = 1024;
/// Most backends one service may have in this table layout.
pub const MAX_BACKENDS_PER_SERVICE: u32 = 256;
/// Every service owns two backend tables; a reader sees the old one or the new one,
/// because the switch is one update of the service's [`VipInfo::table_id`].
pub const TABLES_PER_SERVICE: u32 = 2;
/// Entries in the backend slot array.
pub const BACKEND_SLOTS: u32 = MAX_SERVICES * TABLES_PER_SERVICE * MAX_BACKENDS_PER_SERVICE;

/// IP protocol numbers used in [`VipKey::proto`].
pub mod proto {
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
}

/// Key of the VIP map: a virtual address, port and protocol.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipKey {
    /// IPv4 address, network byte order.
    pub addr_be: u32,
    /// Destination port, network byte order.
    pub port_be: u16,
    /// IP protocol ([`proto::TCP`] or [`proto::UDP`]).
    pub proto: u8,
    /// Always zero: hash map keys compare every byte.
    pub _pad: u8,
}
const _: () = assert!(size_of::<VipKey>() == 8);

/// How packets for a service leave the node.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardingMode {
    /// L2 direct server return: rewrite the destination MAC and transmit; the backend
    /// holds the VIP and replies to the client directly.
    Dsr = 1,
}

impl ForwardingMode {
    /// Decodes a mode stored in [`VipInfo::mode`].
    pub const fn from_u32(value: u32) -> Option<Self> {
        match value {
            1 => Some(Self::Dsr),
            _ => None,
        }
    }
}

/// Value of the VIP map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipInfo {
    /// Index of this service's counters in the VIP stats map (`< MAX_SERVICES`).
    pub service_id: u32,
    /// Which backend table is live: the slots start at `table_id * MAX_BACKENDS_PER_SERVICE`.
    /// Userspace fills the inactive table, then flips this field in one map update.
    pub table_id: u32,
    /// Number of valid slots in the live table; zero means "no usable backend: drop".
    pub backend_count: u32,
    /// A [`ForwardingMode`] value.
    pub mode: u32,
}
const _: () = assert!(size_of::<VipInfo>() == 16);

impl VipInfo {
    /// First slot index of this service's live table.
    pub const fn table_base(&self) -> u32 {
        self.table_id * MAX_BACKENDS_PER_SERVICE
    }
}

/// One backend slot in a service's table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendSlot {
    /// Backend IPv4 address, network byte order; the next-hop MAC for it comes from the
    /// kernel's FIB at forwarding time.
    pub addr_be: u32,
    /// Stable backend identifier, for per-backend accounting.
    pub backend_id: u32,
}
const _: () = assert!(size_of::<BackendSlot>() == 8);

/// Node-wide settings, stored at index 0 of the config map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalConfig {
    /// Seed of the flow hash. Nodes of one fleet use the same seed so that every node
    /// picks the same backend for a flow.
    pub hash_seed: u32,
    /// Reserved, zero.
    pub flags: u32,
}
const _: () = assert!(size_of::<GlobalConfig>() == 8);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), Copy, and has no padding (size asserts above), so
    // every bit pattern is a valid value and no uninitialised bytes are read.
    unsafe impl aya::Pod for super::VipKey {}
    unsafe impl aya::Pod for super::VipInfo {}
    unsafe impl aya::Pod for super::BackendSlot {}
    unsafe impl aya::Pod for super::GlobalConfig {}
}
