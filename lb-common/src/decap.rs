//! The ABI of `lb_decap`, the TC ingress program a backend of `ipip`/`gue` services
//! runs (lb-ebpf's `decap.rs`): its settings and its counters. Its VIP map is
//! [`crate::AddrKey`] → `u32` (reserved, zero); names are in [`crate::maps::names`].

use core::mem::size_of;

/// GUE ports one backend accepts at once: room for a port change across a fleet of
/// load balancers (the old and the new port both decapsulated while it rolls out).
pub const DECAP_GUE_PORTS: usize = 4;

/// Most VIP addresses one backend decapsulates for (the VIP map's size).
pub const MAX_DECAP_VIPS: u32 = 4096;

/// `lb_decap`'s settings, stored at index 0 of its config map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecapConfig {
    /// UDP destination ports carrying GUE, network byte order; 0 marks an unused
    /// slot, and all zero turns GUE off (only IP protocols 4 and 41 are decapsulated).
    pub gue_ports_be: [u16; DECAP_GUE_PORTS],
    /// Reserved, zero.
    pub flags: u32,
    /// Reserved, zero.
    pub _pad: u32,
}
const _: () = assert!(size_of::<DecapConfig>() == 16);

/// `lb_decap`'s counters (a per-CPU array indexed by these): every packet the program
/// sees counts exactly one of them.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecapCounter {
    /// Passed untouched: not IP protocol 4/41 nor UDP to a GUE port (the backend's
    /// ordinary traffic), or a tunnel packet the program does not read (outer IPv4
    /// options or fragment, IPv6 extension headers, two VLAN tags).
    Passed = 0,
    /// IPIP / IP6IP6 / 4-in-6 / 6-in-4 (IP protocol 4 or 41) for one of our VIPs,
    /// stripped and handed to the stack.
    DecapsulatedIpip,
    /// GUE (variant 1: the IP packet right after UDP) for one of our VIPs, stripped
    /// and handed to the stack.
    DecapsulatedGue,
    /// Dropped: tunnelled to an inner destination that is not one of our VIPs (a
    /// misrouted or forged packet: decapsulating it would forward it onwards).
    RefusedNotVip,
    /// Dropped: a tunnel packet truncated, or whose lengths disagree (outer vs frame,
    /// UDP vs outer, inner vs outer), a bad outer IPv4 header checksum, or an inner
    /// version that does not match the outer protocol.
    RefusedMalformed,
    /// Dropped: UDP to a GUE port that is not GUE variant 1 carrying IPv4/IPv6 (a GUE
    /// header of variant 0, with its control bit, flags and options, or a reserved
    /// variant): not what our load balancers send.
    RefusedGueVariant,
    /// Dropped: a tunnel packet for our VIP that the kernel refused to shrink
    /// (`bpf_skb_adjust_room`, e.g. a kernel before 6.3 without the decap flags) or
    /// whose VLAN tag could not be moved.
    DecapFailed,
}

impl DecapCounter {
    /// Number of counters (the size of the counter map).
    pub const COUNT: u32 = 7;

    /// Every counter, in index order.
    pub const ALL: [DecapCounter; Self::COUNT as usize] = [
        DecapCounter::Passed,
        DecapCounter::DecapsulatedIpip,
        DecapCounter::DecapsulatedGue,
        DecapCounter::RefusedNotVip,
        DecapCounter::RefusedMalformed,
        DecapCounter::RefusedGueVariant,
        DecapCounter::DecapFailed,
    ];

    /// Stable snake_case name: what `lbd decap --status` prints and operators grep for.
    pub const fn name(self) -> &'static str {
        match self {
            DecapCounter::Passed => "passed",
            DecapCounter::DecapsulatedIpip => "decapsulated_ipip",
            DecapCounter::DecapsulatedGue => "decapsulated_gue",
            DecapCounter::RefusedNotVip => "refused_not_vip",
            DecapCounter::RefusedMalformed => "refused_malformed",
            DecapCounter::RefusedGueVariant => "refused_gue_variant",
            DecapCounter::DecapFailed => "decap_failed",
        }
    }

    /// Whether a packet counted here was dropped (`TC_ACT_SHOT`).
    pub const fn dropped(self) -> bool {
        !matches!(
            self,
            DecapCounter::Passed | DecapCounter::DecapsulatedIpip | DecapCounter::DecapsulatedGue
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_index_order_and_names_are_unique() {
        for (i, c) in DecapCounter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            for other in &DecapCounter::ALL[..i] {
                assert_ne!(c.name(), other.name());
            }
        }
    }
}
