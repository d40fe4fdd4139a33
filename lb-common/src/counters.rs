//! Counters kept by the data plane in per-CPU arrays; userspace sums them across CPUs.

use core::mem::size_of;

/// Index into the global counter array. Every packet the program sees increments
/// [`Counter::Packets`] and exactly one verdict-and-reason counter; the event counters
/// after them ([`Counter::kind`]) count decisions on the way, any number per packet.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Every packet the program saw: the sum of the verdict counters (the data plane
    /// does not count it separately; its slot stays zero).
    Packets = 0,
    /// Passed: neither IPv4 nor IPv6 (ARP and the rest).
    PassNotIp,
    /// Passed: not TCP or UDP to a configured VIP.
    PassNotVip,
    /// Passed: IPv4 header carries options (policy: let the stack handle them).
    PassIpv4Options,
    /// Passed: IPv4 fragment or IPv6 extension header (policy: let the stack handle it).
    PassFragment,
    /// Passed: a VIP in `l7` mode (the agent's HTTP proxy serves it).
    PassL7,
    /// Passed once: the backend's neighbour entry is not resolved yet; the kernel
    /// resolves it and later packets are forwarded.
    PassNoNeighbour,
    /// Transmitted back out of the ingress interface (`XDP_TX`).
    Tx,
    /// Redirected to another interface (`bpf_redirect`).
    Redirect,
    /// An echo request to a VIP answered from XDP.
    TxIcmpEchoReply,
    /// An ICMP "fragmentation needed" / "packet too big" forwarded to the backend that
    /// owns the flow it quotes.
    TxIcmpError,
    /// A reply of a `nat` flow translated back and sent towards the client.
    TxNatReply,
    /// Dropped: no free NAT source port for a new `nat` flow.
    DropNatPortsExhausted,
    /// Passed: addressed to the NAT address but no NAT entry (not a reply we made).
    PassNatUnknown,
    /// Dropped: a `nat` packet, but the `lb_nat` program is not installed.
    DropNatUnavailable,
    /// Dropped: the service has no usable backend.
    DropNoBackend,
    /// Dropped: the FIB has no route to the backend.
    DropNoRoute,
    /// Dropped: packet truncated or header fields inconsistent.
    DropMalformed,
    /// Dropped: a `nat` packet that is not a TCP SYN and has no NAT flow; it has no
    /// translation, and admitting it would let spoofed ACKs claim NAT ports.
    DropNatNoFlow,
    /// Dropped: a new `nat` flow, but the NAT maps are full (`node.nat_entries`).
    DropNatTableFull,
    /// Event: a flow's second packet moved it from the embryonic to the established
    /// table.
    EmbryonicPromoted,
    /// Event: a `dsr` TCP packet that is not a SYN and has no flow entry; forwarded by
    /// the current table without creating state.
    NonSynMiss,
    /// Event: a flow entry whose backend id now belongs to another service or
    /// generation; treated as no entry.
    IdentityMismatch,
    /// Event: a `nat` port taken over from a flow that ended with FIN.
    NatReleasedFin,
    /// Event: a `nat` port taken over from a flow that ended with RST.
    NatReleasedRst,
    /// Event: a `nat` port taken over from a flow that timed out.
    NatReleasedTimeout,
}

/// What a [`Counter`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    /// Every packet.
    Packets,
    /// The one verdict (`pass`, `tx`, `redirect`, `drop`) of a packet and why.
    Verdict {
        /// `pass`, `tx`, `redirect` or `drop`.
        verdict: &'static str,
        /// Why, e.g. `no_route`; `forwarded` for plain `tx` and `redirect`.
        reason: &'static str,
    },
    /// A decision on the way.
    Event,
}

impl Counter {
    /// Number of counters; the size of the counter array.
    pub const COUNT: u32 = 26;

    /// Every counter, in index order.
    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::Packets,
        Counter::PassNotIp,
        Counter::PassNotVip,
        Counter::PassIpv4Options,
        Counter::PassFragment,
        Counter::PassL7,
        Counter::PassNoNeighbour,
        Counter::Tx,
        Counter::Redirect,
        Counter::TxIcmpEchoReply,
        Counter::TxIcmpError,
        Counter::TxNatReply,
        Counter::DropNatPortsExhausted,
        Counter::PassNatUnknown,
        Counter::DropNatUnavailable,
        Counter::DropNoBackend,
        Counter::DropNoRoute,
        Counter::DropMalformed,
        Counter::DropNatNoFlow,
        Counter::DropNatTableFull,
        Counter::EmbryonicPromoted,
        Counter::NonSynMiss,
        Counter::IdentityMismatch,
        Counter::NatReleasedFin,
        Counter::NatReleasedRst,
        Counter::NatReleasedTimeout,
    ];

    /// Stable snake_case name, used in metric labels and CLI output.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Packets => "packets",
            Counter::PassNotIp => "pass_not_ip",
            Counter::PassNotVip => "pass_not_vip",
            Counter::PassIpv4Options => "pass_ipv4_options",
            Counter::PassFragment => "pass_fragment",
            Counter::PassL7 => "pass_l7",
            Counter::PassNoNeighbour => "pass_no_neighbour",
            Counter::Tx => "tx",
            Counter::Redirect => "redirect",
            Counter::TxIcmpEchoReply => "tx_icmp_echo_reply",
            Counter::TxIcmpError => "tx_icmp_error",
            Counter::TxNatReply => "tx_nat_reply",
            Counter::DropNatPortsExhausted => "drop_nat_ports_exhausted",
            Counter::PassNatUnknown => "pass_nat_unknown",
            Counter::DropNatUnavailable => "drop_nat_unavailable",
            Counter::DropNoBackend => "drop_no_backend",
            Counter::DropNoRoute => "drop_no_route",
            Counter::DropMalformed => "drop_malformed",
            Counter::DropNatNoFlow => "drop_nat_no_flow",
            Counter::DropNatTableFull => "drop_nat_table_full",
            Counter::EmbryonicPromoted => "embryonic_promoted",
            Counter::NonSynMiss => "non_syn_miss",
            Counter::IdentityMismatch => "identity_mismatch",
            Counter::NatReleasedFin => "nat_released_fin",
            Counter::NatReleasedRst => "nat_released_rst",
            Counter::NatReleasedTimeout => "nat_released_timeout",
        }
    }

    /// Whether this counts packets, verdicts or events, and for verdicts the
    /// verdict and reason as metric labels.
    pub const fn kind(self) -> CounterKind {
        let (verdict, reason) = match self {
            Counter::Packets => return CounterKind::Packets,
            Counter::EmbryonicPromoted
            | Counter::NonSynMiss
            | Counter::IdentityMismatch
            | Counter::NatReleasedFin
            | Counter::NatReleasedRst
            | Counter::NatReleasedTimeout => return CounterKind::Event,
            Counter::PassNotIp => ("pass", "not_ip"),
            Counter::PassNotVip => ("pass", "not_vip"),
            Counter::PassIpv4Options => ("pass", "ipv4_options"),
            Counter::PassFragment => ("pass", "fragment"),
            Counter::PassL7 => ("pass", "l7"),
            Counter::PassNoNeighbour => ("pass", "no_neighbour"),
            Counter::PassNatUnknown => ("pass", "nat_unknown"),
            Counter::Tx => ("tx", "forwarded"),
            Counter::Redirect => ("redirect", "forwarded"),
            // Sent with XDP_TX or a redirect; the reason says what was sent.
            Counter::TxIcmpEchoReply => ("tx", "icmp_echo_reply"),
            Counter::TxIcmpError => ("tx", "icmp_error"),
            Counter::TxNatReply => ("tx", "nat_reply"),
            Counter::DropNatPortsExhausted => ("drop", "nat_ports_exhausted"),
            Counter::DropNatUnavailable => ("drop", "nat_unavailable"),
            Counter::DropNoBackend => ("drop", "no_backend"),
            Counter::DropNoRoute => ("drop", "no_route"),
            Counter::DropMalformed => ("drop", "malformed"),
            Counter::DropNatNoFlow => ("drop", "nat_no_flow"),
            Counter::DropNatTableFull => ("drop", "nat_table_full"),
        };
        CounterKind::Verdict { verdict, reason }
    }
}

/// Traffic counters of one service or one backend (one per CPU; userspace sums them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficStats {
    /// Packets forwarded.
    pub packets: u64,
    /// Bytes of those packets, link-layer header included.
    pub bytes: u64,
    /// Flows admitted (conntrack entries created).
    pub new_flows: u64,
}
const _: () = assert!(size_of::<TrafficStats>() == 24);

impl TrafficStats {
    /// Element-wise sum, for adding up CPUs.
    pub const fn plus(self, other: Self) -> Self {
        Self {
            packets: self.packets + other.packets,
            bytes: self.bytes + other.bytes,
            new_flows: self.new_flows + other.new_flows,
        }
    }
}

/// Per-service counters.
pub type VipStats = TrafficStats;
/// Per-backend counters.
pub type BackendStats = TrafficStats;

#[cfg(feature = "user")]
// SAFETY: repr(C), Copy, no padding (asserted above).
unsafe impl aya::Pod for TrafficStats {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_labels_agree_with_names() {
        for c in Counter::ALL {
            match c.kind() {
                CounterKind::Verdict { verdict, reason } => {
                    let name = c.name();
                    let expected = if reason == "forwarded" {
                        verdict.to_owned()
                    } else {
                        format!("{verdict}_{reason}")
                    };
                    assert_eq!(name, expected, "{name}");
                }
                CounterKind::Packets => assert_eq!(c, Counter::Packets),
                CounterKind::Event => assert!(c as u32 > Counter::DropMalformed as u32),
            }
        }
    }

    extern crate std;
    use std::{borrow::ToOwned, format};

    #[test]
    fn all_is_in_index_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "{} out of order", c.name());
        }
    }
}
