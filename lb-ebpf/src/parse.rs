//! Header views and the bounds-checked parser.
//!
//! Header structs hold byte arrays only (alignment 1), because headers sit at arbitrary
//! offsets in the frame. Every pointer comes from [`ptr_at`], which proves to the
//! verifier that the whole header lies inside the packet.
//!
//! Policy (each counted): IPv4 with options, IPv4 fragments and IPv6 packets whose
//! first next-header is not TCP/UDP go to the stack untouched; frames that are
//! truncated or whose lengths contradict each other, and packets from a multicast or
//! broadcast source (no host sends from one: an answer would go to a group), are
//! dropped.

use core::mem::size_of;

use lb_common::Addr;
use lb_common::{
    Counter, FlowKey,
    maps::{proto, v4_mapped},
};

use crate::{Verdict, ctx::Ctx};

/// Ethernet II header.
#[repr(C)]
pub struct EthHdr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub ether_type: [u8; 2],
}

/// The four bytes an 802.1Q tag adds after the MACs (its TCI, then the inner type).
#[repr(C)]
pub struct VlanTag {
    pub tci: [u8; 2],
    pub ether_type: [u8; 2],
}

/// IPv4 header without options.
#[repr(C)]
pub struct Ipv4Hdr {
    pub version_ihl: u8,
    pub tos: u8,
    pub tot_len: [u8; 2],
    pub id: [u8; 2],
    pub frag: [u8; 2],
    pub ttl: u8,
    pub proto: u8,
    pub check: [u8; 2],
    pub src: [u8; 4],
    pub dst: [u8; 4],
}

/// IPv6 fixed header.
#[repr(C)]
pub struct Ipv6Hdr {
    pub vtc_flow: [u8; 4],
    pub payload_len: [u8; 2],
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub src: [u8; 16],
    pub dst: [u8; 16],
}

/// The first four bytes of a TCP or UDP header.
#[repr(C)]
pub struct L4Ports {
    pub src: [u8; 2],
    pub dst: [u8; 2],
}

/// The first 14 bytes of a TCP header: up to and including the flags.
#[repr(C)]
pub struct TcpHead {
    pub ports: L4Ports,
    pub seq: [u8; 4],
    pub ack: [u8; 4],
    pub data_offset: u8,
    pub flags: u8,
}

/// TCP flag bits ([`Packet::tcp_flags`]).
pub mod tcp {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

pub const ETH_LEN: usize = size_of::<EthHdr>();
const VLAN_LEN: usize = size_of::<VlanTag>();
pub const IPV4_LEN: usize = size_of::<Ipv4Hdr>();
pub const IPV6_LEN: usize = size_of::<Ipv6Hdr>();
const ETH_P_IPV4: [u8; 2] = 0x0800u16.to_be_bytes();
const ETH_P_IPV6: [u8; 2] = 0x86ddu16.to_be_bytes();
const ETH_P_8021Q: [u8; 2] = 0x8100u16.to_be_bytes();
/// More-fragments flag and fragment offset bits of the IPv4 `frag` field.
const IPV4_FRAG_MASK: u16 = 0x3fff;

/// A bounds-checked pointer to a `T` at `offset` bytes into the packet.
#[inline(always)]
pub fn ptr_at<T>(ctx: &impl Ctx, offset: usize) -> Option<*mut T> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + offset + size_of::<T>() > end {
        return None;
    }
    Some((start + offset) as *mut T)
}

/// Takes the Ethernet header pointer again after a helper that may have moved the
/// packet (on an skb, `bpf_l3/l4_csum_replace`); on XDP it is never stale. False if
/// the frame is too short (it cannot have become so).
#[inline(always)]
pub fn refresh<C: Ctx>(ctx: &C, pkt: &mut Packet) -> bool {
    if C::SKB {
        match ptr_at(ctx, 0) {
            Some(eth) => pkt.eth = eth,
            None => return false,
        }
    }
    true
}

/// A packet as `lb_xdp` parsed it, rebuilt in a tail call from its per-CPU hand-over
/// (`eth` the frame's Ethernet header). Offsets are rebuilt from what they can be (a
/// link header of 14 or 18 bytes, an IP header without options), so the verifier
/// knows them as small constants; each header access is bounds-checked where it is
/// made. Whether the slot was this frame's is [`describes`]' to say.
#[inline(always)]
pub fn handed_over(
    eth: *mut EthHdr,
    key: &FlowKey,
    ipv6: bool,
    vlan: bool,
    ip_len: u16,
    kind: Kind,
    tcp_flags: u8,
) -> Packet {
    let l3 = if vlan { ETH_LEN + VLAN_LEN } else { ETH_LEN };
    Packet {
        eth,
        key: *key,
        ipv6,
        ip_len,
        kind,
        l3,
        l4: l3 + if ipv6 { IPV6_LEN } else { IPV4_LEN },
        tcp_flags,
    }
}

/// Whether `pkt` (rebuilt from a per-CPU hand-over) describes the frame in `ctx`: its
/// IP version and protocol, addresses and ports are the frame's. A hand-over slot is
/// written by the `lb_xdp` that tail-calls, but a restarted agent puts its tail-call
/// programs into the pinned program array before its own `lb_xdp` replaces the old
/// one, and the old one writes no slot (or another map's): the slot then holds zeros
/// or another packet's, which must not be applied to this one.
#[inline(always)]
pub fn describes(ctx: &impl Ctx, pkt: &Packet) -> bool {
    let key = &pkt.key;
    let Some(ports) = ptr_at::<L4Ports>(ctx, pkt.l4) else {
        return false;
    };
    // SAFETY: ptr_at checked every header read here.
    unsafe {
        if u16::from_ne_bytes((*ports).src) != key.src_port_be
            || u16::from_ne_bytes((*ports).dst) != key.dst_port_be
        {
            return false;
        }
        if pkt.ipv6 {
            let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, pkt.l3) else {
                return false;
            };
            (*ip).vtc_flow[0] >> 4 == 6
                && (*ip).next_hdr == key.proto
                && Addr::from_octets((*ip).src) == key.src
                && Addr::from_octets((*ip).dst) == key.dst
        } else {
            let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, pkt.l3) else {
                return false;
            };
            (*ip).version_ihl == 0x45
                && (*ip).proto == key.proto
                && key.src.is_v4_mapped()
                && key.dst.is_v4_mapped()
                && u32::from_ne_bytes((*ip).src) == key.src.v4_word()
                && u32::from_ne_bytes((*ip).dst) == key.dst.v4_word()
        }
    }
}

/// A TCP or UDP packet over IPv4 or IPv6, with what lookup and forwarding need.
pub struct Packet {
    /// The Ethernet header, for the MAC rewrite.
    pub eth: *mut EthHdr,
    /// The 5-tuple as it arrived (IPv4 addresses IPv4-mapped).
    pub key: FlowKey,
    /// IPv6 rather than IPv4.
    pub ipv6: bool,
    /// Length of the IP packet (IPv4 total length; IPv6 payload + 40), for the FIB's
    /// MTU check.
    pub ip_len: u16,
    /// What the packet is.
    pub kind: Kind,
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the TCP/UDP/ICMP header.
    pub l4: usize,
    /// TCP flags (0 for UDP and ICMP).
    pub tcp_flags: u8,
}

impl Packet {
    /// A TCP SYN without ACK: the only packet that may open a TCP flow.
    #[inline(always)]
    pub fn is_syn(&self) -> bool {
        self.tcp_flags & (tcp::SYN | tcp::ACK) == tcp::SYN
    }

    /// A packet that may create flow state: a TCP SYN, or any UDP datagram.
    #[inline(always)]
    pub fn may_open(&self) -> bool {
        self.key.proto != proto::TCP || self.is_syn()
    }
}

/// What a parsed packet is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TCP or UDP; `key` is its 5-tuple.
    Flow,
    /// An ICMP "fragmentation needed" / ICMPv6 "packet too big" about a packet a
    /// backend sent from a VIP; `key` is the client → VIP flow it is about.
    IcmpError,
    /// An ICMP/ICMPv6 echo request; `key.dst` is its destination, `l3`/`l4` locate the
    /// IP and ICMP headers for the reply.
    Echo { l3: usize, l4: usize },
}

/// Minimum L4 header length for the protocols we balance, or `None` for the rest.
#[inline(always)]
fn l4_min_len(proto: u8) -> Option<u16> {
    match proto {
        proto::TCP => Some(20),
        proto::UDP => Some(8),
        _ => None,
    }
}

/// Parses Ethernet (+ one 802.1Q tag) → IPv4 or IPv6 → TCP/UDP ports, and the ICMP
/// messages we act on.
///
/// # Errors
/// The verdict for anything else (see the module policy).
#[inline(always)]
pub fn packet(ctx: &impl Ctx) -> Result<Packet, Verdict> {
    let malformed = Verdict::drop(Counter::DropMalformed);
    let eth: *mut EthHdr = ptr_at(ctx, 0).ok_or(malformed)?;
    // SAFETY: ptr_at checked that the header lies inside the packet.
    let mut ether_type = unsafe { (*eth).ether_type };
    let mut l3 = ETH_LEN;
    if ether_type == ETH_P_8021Q {
        let tag: *const VlanTag = ptr_at(ctx, ETH_LEN).ok_or(malformed)?;
        // SAFETY: as above.
        ether_type = unsafe { (*tag).ether_type };
        l3 += VLAN_LEN;
    }
    let frame_len = ctx.len();
    if ether_type == ETH_P_IPV4 {
        ipv4(ctx, eth, l3, frame_len)
    } else if ether_type == ETH_P_IPV6 {
        ipv6(ctx, eth, l3, frame_len)
    } else {
        Err(Verdict::pass(Counter::PassNotIp))
    }
}

#[inline(always)]
fn ipv4(ctx: &impl Ctx, eth: *mut EthHdr, l3: usize, frame_len: usize) -> Result<Packet, Verdict> {
    let malformed = Verdict::drop(Counter::DropMalformed);
    let ip: *const Ipv4Hdr = ptr_at(ctx, l3).ok_or(malformed)?;
    // SAFETY: ptr_at checked that the header lies inside the packet.
    let ip = unsafe { &*ip };
    let ihl = ip.version_ihl & 0x0f;
    if ip.version_ihl >> 4 != 4 || ihl < 5 {
        return Err(malformed);
    }
    if ihl != 5 {
        return Err(Verdict::pass(Counter::PassIpv4Options));
    }
    if u16::from_be_bytes(ip.frag) & IPV4_FRAG_MASK != 0 {
        return Err(Verdict::pass(Counter::PassFragment));
    }
    // 224.0.0.0/4 multicast, 240.0.0.0/4 reserved and the broadcast address.
    if ip.src[0] >= 224 {
        return Err(malformed);
    }
    let tot_len = u16::from_be_bytes(ip.tot_len);
    if ip.proto == proto::ICMP {
        if tot_len < (IPV4_LEN + crate::icmp::ICMP_LEN) as u16 || l3 + tot_len as usize > frame_len
        {
            return Err(malformed);
        }
        return crate::icmp::v4(ctx, eth, l3, ip, tot_len);
    }
    let l4_min = l4_min_len(ip.proto).ok_or(Verdict::pass(Counter::PassNotVip))?;
    if tot_len < IPV4_LEN as u16 + l4_min || l3 + tot_len as usize > frame_len {
        return Err(malformed);
    }
    let (ports, tcp_flags) = l4_head(ctx, ip.proto, l3 + IPV4_LEN)?;
    Ok(Packet {
        eth,
        key: FlowKey {
            src: v4_mapped(ip.src),
            dst: v4_mapped(ip.dst),
            src_port_be: u16::from_ne_bytes(ports.src),
            dst_port_be: u16::from_ne_bytes(ports.dst),
            proto: ip.proto,
            _pad: 0,
            _pad2: 0,
        },
        ipv6: false,
        ip_len: tot_len,
        kind: Kind::Flow,
        l3,
        l4: l3 + IPV4_LEN,
        tcp_flags,
    })
}

#[inline(always)]
fn ipv6(ctx: &impl Ctx, eth: *mut EthHdr, l3: usize, frame_len: usize) -> Result<Packet, Verdict> {
    let malformed = Verdict::drop(Counter::DropMalformed);
    let ip: *const Ipv6Hdr = ptr_at(ctx, l3).ok_or(malformed)?;
    // SAFETY: ptr_at checked that the header lies inside the packet.
    let ip = unsafe { &*ip };
    if ip.vtc_flow[0] >> 4 != 6 || ip.src[0] == 0xff {
        return Err(malformed);
    }
    let payload_len = u16::from_be_bytes(ip.payload_len);
    if ip.next_hdr == proto::ICMPV6 {
        if payload_len < crate::icmp::ICMP_LEN as u16
            || l3 + IPV6_LEN + payload_len as usize > frame_len
        {
            return Err(malformed);
        }
        return crate::icmp::v6(ctx, eth, l3, ip, payload_len);
    }
    let l4_min = match l4_min_len(ip.next_hdr) {
        Some(len) => len,
        None if is_extension_header(ip.next_hdr) => {
            return Err(Verdict::pass(Counter::PassFragment));
        }
        None => return Err(Verdict::pass(Counter::PassNotVip)),
    };
    if payload_len < l4_min || l3 + IPV6_LEN + payload_len as usize > frame_len {
        return Err(malformed);
    }
    let (ports, tcp_flags) = l4_head(ctx, ip.next_hdr, l3 + IPV6_LEN)?;
    Ok(Packet {
        eth,
        key: FlowKey {
            src: Addr::from_octets(ip.src),
            dst: Addr::from_octets(ip.dst),
            src_port_be: u16::from_ne_bytes(ports.src),
            dst_port_be: u16::from_ne_bytes(ports.dst),
            proto: ip.next_hdr,
            _pad: 0,
            _pad2: 0,
        },
        ipv6: true,
        ip_len: payload_len.saturating_add(IPV6_LEN as u16),
        kind: Kind::Flow,
        l3,
        l4: l3 + IPV6_LEN,
        tcp_flags,
    })
}

#[inline(always)]
pub fn l4_ports(ctx: &impl Ctx, offset: usize) -> Result<&L4Ports, Verdict> {
    let ports: *const L4Ports = ptr_at(ctx, offset).ok_or(Verdict::drop(Counter::DropMalformed))?;
    // SAFETY: ptr_at checked that the header lies inside the packet.
    Ok(unsafe { &*ports })
}

/// The ports of a TCP or UDP header at `offset`, and for TCP its flags (0 for UDP):
/// one bounds check either way (the IP length check already proved the header is
/// there; this proves it to the verifier).
#[inline(always)]
fn l4_head(ctx: &impl Ctx, proto: u8, offset: usize) -> Result<(&L4Ports, u8), Verdict> {
    let malformed = Verdict::drop(Counter::DropMalformed);
    if proto != proto::TCP {
        return Ok((l4_ports(ctx, offset)?, 0));
    }
    let head: *const TcpHead = ptr_at(ctx, offset).ok_or(malformed)?;
    // SAFETY: ptr_at checked that the whole head lies inside the packet.
    let head = unsafe { &*head };
    Ok((&head.ports, head.flags))
}

/// IPv6 extension headers (RFC 8200 §4 and the IANA list): hop-by-hop, routing,
/// fragment, destination options, AH, ESP, mobility, HIP, shim6.
#[inline(always)]
fn is_extension_header(next: u8) -> bool {
    matches!(next, 0 | 43 | 44 | 60 | 51 | 50 | 135 | 139 | 140)
}
