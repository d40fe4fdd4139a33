//! Counters kept by the data plane in per-CPU arrays; userspace sums them across CPUs.
//!
//! Every packet is counted once, under the counter of its verdict: what the program
//! did with it ([`XdpAction`], the program's return value) and why ([`Reason`]). A
//! counter's action is the one the packet really left with — a `nat` reply or an ICMP
//! error sent with `XDP_REDIRECT` has a counter of its own ([`Counter::sent_as`]) — so
//! metric labels taken from [`Counter::kind`] never misstate a packet's fate.

use core::mem::size_of;

/// Index into the global counter array. Every packet the program sees increments
/// exactly one verdict counter ([`CounterKind::Verdict`]); the event counters after
/// them count decisions on the way, any number per packet.
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
    /// Forwarded to a backend back out of the ingress interface (`XDP_TX`).
    Tx,
    /// Forwarded to a backend through another interface (`bpf_redirect`).
    Redirect,
    /// An echo request to a VIP answered from XDP (always `XDP_TX`).
    TxIcmpEchoReply,
    /// An ICMP "fragmentation needed" / "packet too big" forwarded with `XDP_TX` to the
    /// backend that owns the flow it quotes.
    TxIcmpError,
    /// [`Counter::TxIcmpError`], sent with `XDP_REDIRECT`.
    RedirectIcmpError,
    /// A reply of a `nat` flow translated back and sent towards the client with `XDP_TX`.
    TxNatReply,
    /// [`Counter::TxNatReply`], sent with `XDP_REDIRECT`.
    RedirectNatReply,
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
    /// An `ipip` flow's packet, encapsulated in IPv4/IPv6 and sent with `XDP_TX`.
    TxIpip,
    /// [`Counter::TxIpip`], sent with `XDP_REDIRECT`.
    RedirectIpip,
    /// A `gue` flow's packet, encapsulated in UDP and sent with `XDP_TX`.
    TxGue,
    /// [`Counter::TxGue`], sent with `XDP_REDIRECT`.
    RedirectGue,
    /// An ICMP "fragmentation needed" / ICMPv6 "packet too big" made here for a client
    /// whose packet would exceed the path MTU once encapsulated, sent back out of the
    /// interface the packet came in on (`XDP_TX`).
    TxIcmpTooBig,
    /// Dropped: would exceed the path MTU once encapsulated, and may not be told so
    /// (IPv4 without the don't-fragment bit: XDP cannot fragment).
    DropTooBig,
    /// Dropped: an `ipip`/`gue` packet handed to `lb_tunnel` that it cannot send: the
    /// program is not installed, or the hand-over does not describe the packet.
    DropTunnelUnavailable,
    /// Dropped: an `ipip`/`gue` packet whose outer next hop has no resolved neighbour
    /// entry yet (handing the inner packet to the stack would not resolve it; lbd keeps
    /// tunnel next hops resolved, so this is a first moment's loss the client retries).
    DropNoNeighbour,
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
    /// Event: a tunnelled flow's SYN had its MSS lowered to fit the path MTU once
    /// encapsulated.
    MssClamped,
}

/// What the XDP program did with a packet: the `xdp_action` it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XdpAction {
    /// `XDP_PASS`: handed to the kernel stack.
    Pass,
    /// `XDP_TX`: sent back out of the interface it arrived on.
    Tx,
    /// `XDP_REDIRECT` (`bpf_redirect`): sent out of another interface.
    Redirect,
    /// `XDP_DROP`: discarded.
    Drop,
}

impl XdpAction {
    /// Stable snake_case name: the `verdict` metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            XdpAction::Pass => "pass",
            XdpAction::Tx => "tx",
            XdpAction::Redirect => "redirect",
            XdpAction::Drop => "drop",
        }
    }
}

/// Why a packet got its [`XdpAction`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Neither IPv4 nor IPv6.
    NotIp,
    /// Not TCP or UDP to a configured VIP.
    NotVip,
    /// IPv4 options.
    Ipv4Options,
    /// A fragment or IPv6 extension header.
    Fragment,
    /// A VIP in `l7` mode.
    L7,
    /// The backend's neighbour entry is not resolved yet.
    NoNeighbour,
    /// To the NAT address without a NAT entry.
    NatUnknown,
    /// A packet of a flow, forwarded to its backend.
    Forwarded,
    /// An echo reply made from the request.
    IcmpEchoReply,
    /// An ICMP error forwarded to the backend that owns the flow it quotes.
    IcmpError,
    /// A `nat` reply translated back to the client.
    NatReply,
    /// No free NAT source port.
    NatPortsExhausted,
    /// `lb_nat` is not installed.
    NatUnavailable,
    /// The service has no usable backend.
    NoBackend,
    /// The FIB has no route to the backend.
    NoRoute,
    /// Truncated or inconsistent headers.
    Malformed,
    /// A `nat` packet that is not a SYN and has no flow.
    NatNoFlow,
    /// The NAT maps are full.
    NatTableFull,
    /// Encapsulated in IPv4/IPv6 to its backend (`ipip`).
    Ipip,
    /// Encapsulated in UDP to its backend (`gue`).
    Gue,
    /// An ICMP "too big" made here for the client.
    IcmpTooBig,
    /// Too big once encapsulated, and no ICMP may say so.
    TooBig,
    /// `lb_tunnel` is not installed.
    TunnelUnavailable,
}

impl Reason {
    /// Stable snake_case name: the `reason` metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::NotIp => "not_ip",
            Reason::NotVip => "not_vip",
            Reason::Ipv4Options => "ipv4_options",
            Reason::Fragment => "fragment",
            Reason::L7 => "l7",
            Reason::NoNeighbour => "no_neighbour",
            Reason::NatUnknown => "nat_unknown",
            Reason::Forwarded => "forwarded",
            Reason::IcmpEchoReply => "icmp_echo_reply",
            Reason::IcmpError => "icmp_error",
            Reason::NatReply => "nat_reply",
            Reason::NatPortsExhausted => "nat_ports_exhausted",
            Reason::NatUnavailable => "nat_unavailable",
            Reason::NoBackend => "no_backend",
            Reason::NoRoute => "no_route",
            Reason::Malformed => "malformed",
            Reason::NatNoFlow => "nat_no_flow",
            Reason::NatTableFull => "nat_table_full",
            Reason::Ipip => "ipip",
            Reason::Gue => "gue",
            Reason::IcmpTooBig => "icmp_too_big",
            Reason::TooBig => "too_big",
            Reason::TunnelUnavailable => "tunnel_unavailable",
        }
    }
}

/// What a [`Counter`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    /// Every packet.
    Packets,
    /// The one verdict of a packet: the action it left with and why.
    Verdict {
        /// What the program returned.
        action: XdpAction,
        /// Why.
        reason: Reason,
    },
    /// A decision on the way.
    Event,
}

/// A packet the program sends on that is not a plain forward of a flow's packet; its
/// counter says what it is and how it left ([`Counter::sent_as`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// An ICMP error forwarded to the backend that owns the flow it quotes.
    IcmpError,
    /// A `nat` reply translated back and sent to the client.
    NatReply,
    /// A flow's packet encapsulated in IP (`ipip`).
    Ipip,
    /// A flow's packet encapsulated in UDP (`gue`).
    Gue,
}

impl Counter {
    /// Number of counters; the size of the counter array.
    pub const COUNT: u32 = 37;

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
        Counter::RedirectIcmpError,
        Counter::TxNatReply,
        Counter::RedirectNatReply,
        Counter::DropNatPortsExhausted,
        Counter::PassNatUnknown,
        Counter::DropNatUnavailable,
        Counter::DropNoBackend,
        Counter::DropNoRoute,
        Counter::DropMalformed,
        Counter::DropNatNoFlow,
        Counter::DropNatTableFull,
        Counter::TxIpip,
        Counter::RedirectIpip,
        Counter::TxGue,
        Counter::RedirectGue,
        Counter::TxIcmpTooBig,
        Counter::DropTooBig,
        Counter::DropTunnelUnavailable,
        Counter::DropNoNeighbour,
        Counter::EmbryonicPromoted,
        Counter::NonSynMiss,
        Counter::IdentityMismatch,
        Counter::NatReleasedFin,
        Counter::NatReleasedRst,
        Counter::NatReleasedTimeout,
        Counter::MssClamped,
    ];

    /// Stable snake_case name, used in CLI output and logs: for a verdict counter its
    /// action and reason joined (the reason left out when it is `forwarded`).
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
            Counter::RedirectIcmpError => "redirect_icmp_error",
            Counter::TxNatReply => "tx_nat_reply",
            Counter::RedirectNatReply => "redirect_nat_reply",
            Counter::DropNatPortsExhausted => "drop_nat_ports_exhausted",
            Counter::PassNatUnknown => "pass_nat_unknown",
            Counter::DropNatUnavailable => "drop_nat_unavailable",
            Counter::DropNoBackend => "drop_no_backend",
            Counter::DropNoRoute => "drop_no_route",
            Counter::DropMalformed => "drop_malformed",
            Counter::DropNatNoFlow => "drop_nat_no_flow",
            Counter::DropNatTableFull => "drop_nat_table_full",
            Counter::TxIpip => "tx_ipip",
            Counter::RedirectIpip => "redirect_ipip",
            Counter::TxGue => "tx_gue",
            Counter::RedirectGue => "redirect_gue",
            Counter::TxIcmpTooBig => "tx_icmp_too_big",
            Counter::DropTooBig => "drop_too_big",
            Counter::DropTunnelUnavailable => "drop_tunnel_unavailable",
            Counter::DropNoNeighbour => "drop_no_neighbour",
            Counter::EmbryonicPromoted => "embryonic_promoted",
            Counter::NonSynMiss => "non_syn_miss",
            Counter::IdentityMismatch => "identity_mismatch",
            Counter::NatReleasedFin => "nat_released_fin",
            Counter::NatReleasedRst => "nat_released_rst",
            Counter::NatReleasedTimeout => "nat_released_timeout",
            Counter::MssClamped => "mss_clamped",
        }
    }

    /// Whether this counts packets, verdicts or events, and for a verdict the action
    /// the packet left with and why.
    pub const fn kind(self) -> CounterKind {
        use {Reason as R, XdpAction as A};
        let (action, reason) = match self {
            Counter::Packets => return CounterKind::Packets,
            Counter::EmbryonicPromoted
            | Counter::NonSynMiss
            | Counter::IdentityMismatch
            | Counter::NatReleasedFin
            | Counter::NatReleasedRst
            | Counter::NatReleasedTimeout
            | Counter::MssClamped => return CounterKind::Event,
            Counter::PassNotIp => (A::Pass, R::NotIp),
            Counter::PassNotVip => (A::Pass, R::NotVip),
            Counter::PassIpv4Options => (A::Pass, R::Ipv4Options),
            Counter::PassFragment => (A::Pass, R::Fragment),
            Counter::PassL7 => (A::Pass, R::L7),
            Counter::PassNoNeighbour => (A::Pass, R::NoNeighbour),
            Counter::PassNatUnknown => (A::Pass, R::NatUnknown),
            Counter::Tx => (A::Tx, R::Forwarded),
            Counter::Redirect => (A::Redirect, R::Forwarded),
            Counter::TxIcmpEchoReply => (A::Tx, R::IcmpEchoReply),
            Counter::TxIcmpError => (A::Tx, R::IcmpError),
            Counter::RedirectIcmpError => (A::Redirect, R::IcmpError),
            Counter::TxNatReply => (A::Tx, R::NatReply),
            Counter::RedirectNatReply => (A::Redirect, R::NatReply),
            Counter::DropNatPortsExhausted => (A::Drop, R::NatPortsExhausted),
            Counter::DropNatUnavailable => (A::Drop, R::NatUnavailable),
            Counter::DropNoBackend => (A::Drop, R::NoBackend),
            Counter::DropNoRoute => (A::Drop, R::NoRoute),
            Counter::DropMalformed => (A::Drop, R::Malformed),
            Counter::DropNatNoFlow => (A::Drop, R::NatNoFlow),
            Counter::DropNatTableFull => (A::Drop, R::NatTableFull),
            Counter::TxIpip => (A::Tx, R::Ipip),
            Counter::RedirectIpip => (A::Redirect, R::Ipip),
            Counter::TxGue => (A::Tx, R::Gue),
            Counter::RedirectGue => (A::Redirect, R::Gue),
            Counter::TxIcmpTooBig => (A::Tx, R::IcmpTooBig),
            Counter::DropTooBig => (A::Drop, R::TooBig),
            Counter::DropTunnelUnavailable => (A::Drop, R::TunnelUnavailable),
            Counter::DropNoNeighbour => (A::Drop, R::NoNeighbour),
        };
        CounterKind::Verdict { action, reason }
    }

    /// The counter of a packet sent on as `what`, given the counter its transmit chose
    /// ([`Counter::Tx`] or [`Counter::Redirect`]): the result keeps that action, so a
    /// redirected `nat` reply is counted as a redirect. Any other counter (the transmit
    /// passed or dropped the packet instead) comes back unchanged.
    pub const fn sent_as(self, what: Sent) -> Counter {
        match (self, what) {
            (Counter::Tx, Sent::IcmpError) => Counter::TxIcmpError,
            (Counter::Redirect, Sent::IcmpError) => Counter::RedirectIcmpError,
            (Counter::Tx, Sent::NatReply) => Counter::TxNatReply,
            (Counter::Redirect, Sent::NatReply) => Counter::RedirectNatReply,
            (Counter::Tx, Sent::Ipip) => Counter::TxIpip,
            (Counter::Redirect, Sent::Ipip) => Counter::RedirectIpip,
            (Counter::Tx, Sent::Gue) => Counter::TxGue,
            (Counter::Redirect, Sent::Gue) => Counter::RedirectGue,
            (other, _) => other,
        }
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
    extern crate std;
    use super::*;
    use std::{borrow::ToOwned, format};

    #[test]
    fn verdict_labels_agree_with_names() {
        for c in Counter::ALL {
            match c.kind() {
                CounterKind::Verdict { action, reason } => {
                    let name = c.name();
                    let expected = if reason == Reason::Forwarded {
                        action.as_str().to_owned()
                    } else {
                        format!("{}_{}", action.as_str(), reason.as_str())
                    };
                    assert_eq!(name, expected, "{name}");
                }
                CounterKind::Packets => assert_eq!(c, Counter::Packets),
                CounterKind::Event => assert!(
                    c as u32 > Counter::DropNoNeighbour as u32,
                    "{}: events come after every verdict",
                    c.name()
                ),
            }
        }
    }

    #[test]
    fn a_packet_sent_on_keeps_the_action_it_left_with() {
        for (via, action) in [
            (Counter::Tx, XdpAction::Tx),
            (Counter::Redirect, XdpAction::Redirect),
        ] {
            for (what, reason) in [
                (Sent::IcmpError, Reason::IcmpError),
                (Sent::NatReply, Reason::NatReply),
                (Sent::Ipip, Reason::Ipip),
                (Sent::Gue, Reason::Gue),
            ] {
                let c = via.sent_as(what);
                assert_eq!(
                    c.kind(),
                    CounterKind::Verdict { action, reason },
                    "{} sent as {what:?} is {}",
                    via.name(),
                    c.name()
                );
            }
        }
        // A transmit that failed keeps its own verdict.
        for c in [Counter::DropNoRoute, Counter::PassNoNeighbour] {
            assert_eq!(c.sent_as(Sent::NatReply), c);
            assert_eq!(c.sent_as(Sent::IcmpError), c);
        }
    }

    #[test]
    fn all_is_in_index_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "{} out of order", c.name());
        }
    }
}
