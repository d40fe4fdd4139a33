//! `lb_decap`: the TC ingress program of a backend of `ipip`/`gue` services. It undoes
//! what `tunnel.rs` does on the load balancer, since the kernels here have no ipip,
//! fou or ip6_tunnel modules to do it.
//!
//! Contract, per packet on the interface's ingress (each counted once in
//! [`DECAP_COUNTERS`], names in [`DecapCounter`]):
//! - A tunnel packet is IPv4 or IPv6 (behind at most one 802.1Q tag) carrying IP
//!   protocol 4 (an IPv4 packet) or 41 (IPv6), or UDP to one of the configured GUE
//!   ports carrying GUE variant 1 (the IP packet right after the 8-byte UDP header;
//!   the UDP checksum is not looked at: ours is zero, RFC 6935). The outer family may
//!   differ from the inner one.
//! - A tunnel packet whose inner destination is in [`DECAP_VIPS`] loses its outer
//!   headers (`bpf_skb_adjust_room`, `BPF_ADJ_ROOM_MAC`) and goes on with
//!   `TC_ACT_OK`: the stack receives the inner packet byte for byte as the client sent
//!   it, and delivers it to the VIP held on a loopback or dummy interface.
//! - Refused (dropped, `TC_ACT_SHOT`): a tunnel packet for an address that is not one
//!   of ours (decapsulating it would forward it onwards: a tunnel into the backend's
//!   network for anyone), truncated or with lengths that disagree, GUE that is not
//!   variant 1 with IPv4/IPv6 inside.
//! - Everything else passes untouched with `TC_ACT_UNSPEC` (TCX "next"), so programs
//!   attached after this one still see the backend's ordinary traffic. Outer IPv4
//!   options and fragments, IPv6 extension headers and doubly tagged frames also
//!   pass: our load balancers never send them, and the stack has the last word.
//!
//! Family changes (4-in-6, 6-in-4): `bpf_skb_adjust_room` with
//! `BPF_F_ADJ_ROOM_DECAP_L3_IPV4`/`_IPV6` (Linux 6.3) sets `skb->protocol` to the inner
//! family (and lets an inner IPv4 packet be shorter than an IPv6 header); the Ethernet
//! type in the frame, which the helper leaves alone, is rewritten here.
//! `bpf_skb_change_proto` is no use for this: it translates headers (NAT64), it does
//! not relabel them. `BPF_F_ADJ_ROOM_FIXED_GSO` keeps a GRO packet's segment size,
//! which removing outer headers does not change.
//!
//! VLAN: the receive path moves a frame's tag into the skb's metadata before TC runs,
//! so the program normally sees untagged frames. A tag still in the frame (a test
//! packet, or a device without that offload) is moved there with
//! `bpf_skb_vlan_pop`/`_push` (the adjust-room helper only works on a frame whose
//! protocol is IP): the stack then sees what it would have made of the tagged frame.
//!
//! Headers are read in the linear part of the skb; one that is not there (a long
//! packet of a driver that splits headers) is pulled in with `bpf_skb_pull_data`, only
//! for the bytes asked for. The program writes packet bytes through helpers only: a
//! direct write would make the verifier unclone every cloned skb at entry (a running
//! tcpdump), tunnel or not.

use core::mem::size_of;

use aya_ebpf::{
    bindings::{
        BPF_F_ADJ_ROOM_DECAP_L3_IPV4, BPF_F_ADJ_ROOM_DECAP_L3_IPV6, BPF_F_ADJ_ROOM_FIXED_GSO,
        bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    },
    helpers::{bpf_skb_vlan_pop, bpf_skb_vlan_push},
    programs::TcContext,
};
use lb_common::Addr;
use lb_common::{AddrKey, DecapCounter, maps::v4_mapped};

use crate::{
    maps::{DECAP_CONFIG, DECAP_COUNTERS, DECAP_VIPS},
    parse::{EthHdr, IPV4_LEN, IPV6_LEN, Ipv4Hdr, Ipv6Hdr, VlanTag},
};

const ETH_LEN: usize = size_of::<EthHdr>();
const VLAN_LEN: usize = size_of::<VlanTag>();
const UDP_LEN: usize = size_of::<UdpHdr>();
const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
/// IP protocol numbers of the outer header.
const IPPROTO_IPIP: u8 = 4;
const IPPROTO_IPV6: u8 = 41;
const IPPROTO_UDP: u8 = 17;
/// More-fragments flag and fragment offset bits of the IPv4 `frag` field.
const IPV4_FRAG_MASK: u16 = 0x3fff;
/// TC verdicts (`linux/pkt_cls.h`), as the program returns them: the bindings' types
/// differ between the BPF target's and the host architecture's.
const TC_ACT_UNSPEC: i32 = -1;
const TC_ACT_OK: i32 = 0;
const TC_ACT_SHOT: i32 = 2;

/// A UDP header.
#[repr(C)]
struct UdpHdr {
    src: [u8; 2],
    dst: [u8; 2],
    len: [u8; 2],
    check: [u8; 2],
}

/// A tunnel packet as its outer headers say.
#[derive(Clone, Copy)]
struct Tunnel {
    /// Offset of the outer IP header: 14, or 18 behind an 802.1Q tag.
    l3: usize,
    /// The outer header is IPv6.
    outer6: bool,
    /// The outer protocol: [`IPPROTO_IPIP`], [`IPPROTO_IPV6`] or [`IPPROTO_UDP`] (GUE).
    proto: u8,
    /// Bytes after the outer IP header, as the outer header says (checked against
    /// the frame).
    payload: usize,
}

impl Tunnel {
    const fn gue(&self) -> bool {
        self.proto == IPPROTO_UDP
    }

    /// Bytes of outer headers: IP, and UDP for GUE.
    const fn overhead(&self) -> usize {
        (if self.outer6 { IPV6_LEN } else { IPV4_LEN }) + if self.gue() { UDP_LEN } else { 0 }
    }
}

/// What `lb_decap` returns for a packet counted under `counter`.
#[inline(always)]
pub fn action(counter: DecapCounter) -> i32 {
    match counter {
        DecapCounter::Passed => TC_ACT_UNSPEC,
        DecapCounter::DecapsulatedIpip | DecapCounter::DecapsulatedGue => TC_ACT_OK,
        _ => TC_ACT_SHOT,
    }
}

/// Adds one to `counter`.
#[inline(always)]
pub fn count(counter: DecapCounter) {
    if let Some(slot) = DECAP_COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: the map returned a valid pointer to this CPU's slot.
        unsafe { *slot += 1 };
    }
}

/// Decapsulates the packet if it is a tunnel packet for one of our VIPs; the counter
/// that says what happened.
#[inline(always)]
pub fn steer(ctx: &TcContext) -> DecapCounter {
    let tunnel = match outer(ctx) {
        Ok(Some(tunnel)) => tunnel,
        Ok(None) => return DecapCounter::Passed,
        Err(refused) => return refused,
    };
    match inner(ctx, &tunnel) {
        Ok(inner6) => strip(ctx, &tunnel, inner6),
        Err(refused) => refused,
    }
}

/// A `T` at `offset` in the linear part of the packet.
#[inline(always)]
fn linear_at<T>(ctx: &TcContext, offset: usize) -> Option<*const T> {
    let start = ctx.data();
    if start + offset + size_of::<T>() > ctx.data_end() {
        return None;
    }
    Some((start + offset) as *const T)
}

/// A `T` at `offset`, pulled into the linear part if the packet holds it but the
/// linear part does not. A pull moves the packet: pointers from earlier calls are
/// dead after this one (the verifier says so too).
#[inline(always)]
fn header<T>(ctx: &TcContext, offset: usize) -> Option<*const T> {
    if let Some(p) = linear_at(ctx, offset) {
        return Some(p);
    }
    let want = offset + size_of::<T>();
    if (ctx.len() as usize) < want || ctx.pull_data(want as u32).is_err() {
        return None;
    }
    linear_at(ctx, offset)
}

/// The tunnel the outer headers describe; `None` for a packet to pass.
///
/// # Errors
/// The refusal of a tunnel packet whose outer headers are inconsistent.
#[inline(always)]
fn outer(ctx: &TcContext) -> Result<Option<Tunnel>, DecapCounter> {
    let Some(eth) = header::<EthHdr>(ctx, 0) else {
        return Ok(None);
    };
    // SAFETY: header checked the bounds.
    let mut ether_type = u16::from_be_bytes(unsafe { (*eth).ether_type });
    let mut l3 = ETH_LEN;
    if ether_type == ETH_P_8021Q {
        // SAFETY: the context's skb is valid for the program's run.
        if unsafe { (*ctx.skb.skb).vlan_present } != 0 {
            // A second tag: the first is in the metadata already.
            return Ok(None);
        }
        let Some(tag) = header::<VlanTag>(ctx, ETH_LEN) else {
            return Ok(None);
        };
        // SAFETY: header checked the bounds.
        ether_type = u16::from_be_bytes(unsafe { (*tag).ether_type });
        l3 = ETH_LEN + VLAN_LEN;
    }
    match ether_type {
        ETH_P_IPV4 => outer4(ctx, l3),
        ETH_P_IPV6 => outer6(ctx, l3),
        _ => Ok(None),
    }
}

#[inline(always)]
fn outer4(ctx: &TcContext, l3: usize) -> Result<Option<Tunnel>, DecapCounter> {
    let Some(ip) = header::<Ipv4Hdr>(ctx, l3) else {
        return Ok(None);
    };
    // SAFETY: header checked the bounds; the reference dies before the next header.
    let ip = unsafe { &*ip };
    if ip.version_ihl != 0x45 || u16::from_be_bytes(ip.frag) & IPV4_FRAG_MASK != 0 {
        return Ok(None);
    }
    let proto = ip.proto;
    if !matches!(proto, IPPROTO_IPIP | IPPROTO_IPV6 | IPPROTO_UDP) {
        return Ok(None);
    }
    let tot_len = usize::from(u16::from_be_bytes(ip.tot_len));
    let malformed = DecapCounter::RefusedMalformed;
    // The sum is checked before the next header (whose pull would move this one), and
    // at once: header bytes kept for later would each take a stack slot.
    if proto != IPPROTO_UDP && !ipv4_sum_ok(ip) {
        return Err(malformed);
    }
    let tunnel = Tunnel {
        l3,
        outer6: false,
        proto,
        payload: tot_len.wrapping_sub(IPV4_LEN),
    };
    if proto == IPPROTO_UDP {
        if !to_gue_port(ctx, &tunnel)? {
            return Ok(None);
        }
        let ip = header::<Ipv4Hdr>(ctx, l3).ok_or(malformed)?;
        // SAFETY: header checked the bounds.
        if !ipv4_sum_ok(unsafe { &*ip }) {
            return Err(malformed);
        }
    }
    if tot_len < IPV4_LEN || l3 + tot_len > ctx.len() as usize {
        return Err(malformed);
    }
    Ok(Some(tunnel))
}

#[inline(always)]
fn outer6(ctx: &TcContext, l3: usize) -> Result<Option<Tunnel>, DecapCounter> {
    let Some(ip) = header::<Ipv6Hdr>(ctx, l3) else {
        return Ok(None);
    };
    // SAFETY: header checked the bounds; the reference dies before the next header.
    let ip = unsafe { &*ip };
    if ip.vtc_flow[0] >> 4 != 6 {
        return Ok(None);
    }
    let proto = ip.next_hdr;
    if !matches!(proto, IPPROTO_IPIP | IPPROTO_IPV6 | IPPROTO_UDP) {
        return Ok(None);
    }
    let payload = usize::from(u16::from_be_bytes(ip.payload_len));
    let tunnel = Tunnel {
        l3,
        outer6: true,
        proto,
        payload,
    };
    if proto == IPPROTO_UDP && !to_gue_port(ctx, &tunnel)? {
        return Ok(None);
    }
    // Payload length 0 is a jumbogram's (RFC 2675): never ours.
    if payload == 0 || l3 + IPV6_LEN + payload > ctx.len() as usize {
        return Err(DecapCounter::RefusedMalformed);
    }
    Ok(Some(tunnel))
}

/// Whether the IPv4 header's checksum holds. The kernel checks it in `ip_rcv`; the
/// outer header never gets there, so it is checked here. Summed in 32-bit words: a
/// one's-complement sum folds to the same 16 bits in any word size and byte order.
#[inline(always)]
fn ipv4_sum_ok(ip: &Ipv4Hdr) -> bool {
    // SAFETY: the header is 20 readable bytes.
    let w = unsafe { core::ptr::read_unaligned((ip as *const Ipv4Hdr).cast::<[u32; 5]>()) };
    let mut sum =
        u64::from(w[0]) + u64::from(w[1]) + u64::from(w[2]) + u64::from(w[3]) + u64::from(w[4]);
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum == 0xffff
}

/// For outer UDP: whether it goes to a configured GUE port (`false`: the backend's
/// own UDP, to pass).
///
/// # Errors
/// `RefusedMalformed` for UDP to a GUE port whose length is not the outer payload's.
#[inline(always)]
fn to_gue_port(ctx: &TcContext, tunnel: &Tunnel) -> Result<bool, DecapCounter> {
    let at = tunnel.l3 + if tunnel.outer6 { IPV6_LEN } else { IPV4_LEN };
    let Some(udp) = header::<UdpHdr>(ctx, at) else {
        // Not even a UDP header: the stack's to judge.
        return Ok(false);
    };
    // SAFETY: header checked the bounds.
    let (port, len) = unsafe { (u16::from_ne_bytes((*udp).dst), (*udp).len) };
    let Some(cfg) = DECAP_CONFIG.get(0) else {
        return Ok(false);
    };
    let p = &cfg.gue_ports_be;
    if port == 0 || (port != p[0] && port != p[1] && port != p[2] && port != p[3]) {
        return Ok(false);
    }
    if usize::from(u16::from_be_bytes(len)) != tunnel.payload {
        return Err(DecapCounter::RefusedMalformed);
    }
    Ok(true)
}

/// Checks the inner packet and that it is for one of our VIPs; whether it is IPv6.
///
/// # Errors
/// The refusal: not our VIP, malformed, not GUE variant 1.
#[inline(always)]
fn inner(ctx: &TcContext, tunnel: &Tunnel) -> Result<bool, DecapCounter> {
    let malformed = DecapCounter::RefusedMalformed;
    let udp = if tunnel.gue() { UDP_LEN } else { 0 };
    let at = tunnel.l3 + if tunnel.outer6 { IPV6_LEN } else { IPV4_LEN } + udp;
    // No IP header fits: nothing to deliver (GUE: also UDP shorter than its header).
    let len = tunnel.payload.wrapping_sub(udp);
    if tunnel.payload < udp + IPV4_LEN {
        return Err(malformed);
    }
    let first = header::<u8>(ctx, at).ok_or(malformed)?;
    // SAFETY: header checked the bounds.
    let version = unsafe { *first } >> 4;
    let inner6 = match (tunnel.proto, version) {
        (IPPROTO_IPIP | IPPROTO_UDP, 4) => false,
        (IPPROTO_IPV6 | IPPROTO_UDP, 6) => true,
        // GUE variant 0 (a GUE header: control bit, flags, options) or a reserved one.
        (IPPROTO_UDP, _) => return Err(DecapCounter::RefusedGueVariant),
        _ => return Err(malformed),
    };
    let mut key = AddrKey { addr: Addr::ZERO };
    if inner6 {
        let ip = header::<Ipv6Hdr>(ctx, at).ok_or(malformed)?;
        // SAFETY: header checked the bounds.
        let ip = unsafe { &*ip };
        if usize::from(u16::from_be_bytes(ip.payload_len)) + IPV6_LEN != len {
            return Err(malformed);
        }
        key.addr = Addr::from_octets(ip.dst);
    } else {
        let ip = header::<Ipv4Hdr>(ctx, at).ok_or(malformed)?;
        // SAFETY: header checked the bounds.
        let ip = unsafe { &*ip };
        if ip.version_ihl & 0x0f < 5 || usize::from(u16::from_be_bytes(ip.tot_len)) != len {
            return Err(malformed);
        }
        key.addr = v4_mapped(ip.dst);
    }
    // SAFETY: plain data, replaced whole by updates.
    #[expect(
        clippy::needless_borrows_for_generic_args,
        reason = "passing the key by value would copy it onto the stack again"
    )]
    if unsafe { DECAP_VIPS.get(&key) }.is_none() {
        return Err(DecapCounter::RefusedNotVip);
    }
    Ok(inner6)
}

/// Removes the outer headers of a checked tunnel packet.
#[inline(always)]
fn strip(ctx: &TcContext, tunnel: &Tunnel, inner6: bool) -> DecapCounter {
    let failed = DecapCounter::DecapFailed;
    let tci = if tunnel.l3 == ETH_LEN {
        None
    } else {
        let Some(tag) = header::<VlanTag>(ctx, ETH_LEN) else {
            return failed;
        };
        // SAFETY: header checked the bounds.
        let tci = u16::from_be_bytes(unsafe { (*tag).tci });
        // SAFETY: plain helper call on this program's skb.
        if unsafe { bpf_skb_vlan_pop(ctx.skb.skb) } != 0 {
            return failed;
        }
        Some(tci)
    };
    let family = if inner6 {
        BPF_F_ADJ_ROOM_DECAP_L3_IPV6
    } else {
        BPF_F_ADJ_ROOM_DECAP_L3_IPV4
    };
    let flags = u64::from(BPF_F_ADJ_ROOM_FIXED_GSO | family);
    if ctx
        .adjust_room(-(tunnel.overhead() as i32), BPF_ADJ_ROOM_MAC, flags)
        .is_err()
    {
        return failed;
    }
    if tunnel.outer6 != inner6 {
        let ether_type = if inner6 { ETH_P_IPV6 } else { ETH_P_IPV4 }.to_be_bytes();
        if ctx.store(12, &ether_type, 0).is_err() {
            return failed;
        }
    }
    if let Some(tci) = tci {
        // SAFETY: plain helper call on this program's skb.
        if unsafe { bpf_skb_vlan_push(ctx.skb.skb, ETH_P_8021Q.to_be(), tci) } != 0 {
            return failed;
        }
    }
    if tunnel.gue() {
        DecapCounter::DecapsulatedGue
    } else {
        DecapCounter::DecapsulatedIpip
    }
}
