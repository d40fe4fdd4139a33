//! Counters kept by the data plane in per-CPU arrays; userspace sums them across CPUs.

use core::mem::size_of;

/// Index into the global counter array. Every packet the program sees increments
/// [`Counter::Packets`] and exactly one verdict-and-reason counter.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Every packet the program saw.
    Packets = 0,
    /// Passed: not IPv4 (ARP, IPv6 and the rest).
    PassNotIpv4,
    /// Passed: IPv4 but not TCP or UDP to a configured VIP.
    PassNotVip,
    /// Passed: IPv4 header carries options (policy: let the stack handle them).
    PassIpv4Options,
    /// Passed: IPv4 fragment (policy: let the stack reassemble).
    PassFragment,
    /// Passed once: the backend's neighbour entry is not resolved yet; the kernel
    /// resolves it and later packets are forwarded.
    PassNoNeighbour,
    /// Transmitted back out of the ingress interface (`XDP_TX`).
    Tx,
    /// Redirected to another interface (`bpf_redirect`).
    Redirect,
    /// Dropped: the service has no usable backend.
    DropNoBackend,
    /// Dropped: the FIB has no route to the backend.
    DropNoRoute,
    /// Dropped: packet truncated or header fields inconsistent.
    DropMalformed,
}

impl Counter {
    /// Number of counters; the size of the counter array.
    pub const COUNT: u32 = 11;

    /// Every counter, in index order.
    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::Packets,
        Counter::PassNotIpv4,
        Counter::PassNotVip,
        Counter::PassIpv4Options,
        Counter::PassFragment,
        Counter::PassNoNeighbour,
        Counter::Tx,
        Counter::Redirect,
        Counter::DropNoBackend,
        Counter::DropNoRoute,
        Counter::DropMalformed,
    ];

    /// Stable snake_case name, used in metric labels and CLI output.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Packets => "packets",
            Counter::PassNotIpv4 => "pass_not_ipv4",
            Counter::PassNotVip => "pass_not_vip",
            Counter::PassIpv4Options => "pass_ipv4_options",
            Counter::PassFragment => "pass_fragment",
            Counter::PassNoNeighbour => "pass_no_neighbour",
            Counter::Tx => "tx",
            Counter::Redirect => "redirect",
            Counter::DropNoBackend => "drop_no_backend",
            Counter::DropNoRoute => "drop_no_route",
            Counter::DropMalformed => "drop_malformed",
        }
    }
}

/// Per-service traffic counters (one per CPU; userspace sums them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipStats {
    /// Packets forwarded for this service.
    pub packets: u64,
    /// Bytes of those packets, link-layer header included.
    pub bytes: u64,
}
const _: () = assert!(size_of::<VipStats>() == 16);

#[cfg(feature = "user")]
// SAFETY: repr(C), Copy, no padding (asserted above).
unsafe impl aya::Pod for VipStats {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_index_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "{} out of order", c.name());
        }
    }
}
