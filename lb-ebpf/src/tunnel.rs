//! Encapsulated DSR: `ipip` (the packet in an outer IPv4 or IPv6 header, IP protocol
//! 4 or 41) and `gue` (in UDP, GUE variant 1: the IP packet right after the UDP
//! header). The outer header's family is the backend's, so an IPv4 VIP can have IPv6
//! backends (4-in-6) and the other way round. The backend's `lb_decap` strips it.
//!
//! Order per packet: the next hop for the outer header (cached per backend, with the
//! route's MTU), the MTU check, the MSS clamp of a SYN, then the frame grows at the
//! front, the outer headers are written (IPv4 header checksum computed whole; the UDP
//! checksum of `gue` is zero, which RFC 6935 allows for tunnels and our decap takes),
//! and the frame is sent.
//!
//! MTU: a packet that would not fit the route once encapsulated is answered with ICMP
//! "fragmentation needed" (IPv4 with DF) or ICMPv6 "packet too big", quoting it, with
//! the MTU left for the inner packet, so the client's path-MTU discovery shrinks its
//! packets; an IPv4 packet without DF is dropped (XDP cannot fragment). A TCP SYN gets
//! its MSS option lowered to what fits, so TCP flows never hit the limit at all (no
//! lost first segment, no ICMP needed); only an MSS option in the first option slot is
//! looked at, where every common stack puts it.

use aya_ebpf::bindings::xdp_action;
use lb_common::Addr;
use lb_common::{
    Backend, Counter, FlowKey, Sent, TunnelConfig,
    maps::{BACKEND_F_IPV6, proto},
    tunnel::{flow_label, flow_mix, gue_source_port, outer_source},
};

use crate::{
    Verdict,
    ctx::Ctx,
    forward::{self, Hop, Query},
    icmp::{self, ICMP_LEN},
    maps::{BACKENDS, TUNNEL, TUNNEL_JOBS},
    mem,
    parse::{EthHdr, IPV4_LEN, IPV6_LEN, Ipv4Hdr, Ipv6Hdr, Kind, Packet, ptr_at},
};

/// UDP header length.
const UDP_LEN: usize = 8;
/// IP protocol numbers of the inner packet in `ipip`.
const IPPROTO_IPIP: u8 = 4;
const IPPROTO_IPV6: u8 = 41;
const ETH_P_IPV4: [u8; 2] = 0x0800u16.to_be_bytes();
const ETH_P_IPV6: [u8; 2] = 0x86ddu16.to_be_bytes();
/// Hop limit of outer headers and of the ICMP errors made here.
const TTL: u8 = 64;
/// A TCP header with one 4-byte option: room for an MSS option in the first slot.
const TCP_WITH_MSS: usize = 24;

/// The UDP header of `gue`.
#[repr(C)]
struct UdpHdr {
    src: [u8; 2],
    dst: [u8; 2],
    len: [u8; 2],
    check: [u8; 2],
}

/// What the `lb_xdp` of the release before this one hands `lb_tunnel` (through
/// [`TUNNEL_JOBS`]): the packet as parsed and the backend chosen. Its layout is ABI
/// between the two releases.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Job {
    pub key: FlowKey,
    pub backend_id: u32,
    pub service_id: u32,
    pub l3: u16,
    pub ip_len: u16,
    pub ipv6: u8,
    pub tcp_flags: u8,
    pub gue: u8,
    pub icmp_error: u8,
    pub new_flow: u8,
    pub _pad: [u8; 3],
}

/// `lb_tunnel`: the packet an earlier release's `lb_xdp` handed over, encapsulated and
/// sent, and counted for its service and backend.
#[inline(always)]
pub fn steer(ctx: &impl Ctx) -> Verdict {
    let Some(job) = TUNNEL_JOBS.get_ptr(0) else {
        return Verdict::drop(Counter::DropTunnelUnavailable);
    };
    // SAFETY: this CPU's slot, written by the caller just before the tail call; read in
    // place (a copy would cost stack the log build does not have).
    let job = unsafe { &*job };
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return Verdict::drop(Counter::DropMalformed);
    };
    let Some(backend) = BACKENDS.get(job.backend_id) else {
        return Verdict::drop(Counter::DropNoBackend);
    };
    let kind = if job.icmp_error != 0 {
        Kind::IcmpError
    } else {
        Kind::Flow
    };
    let pkt = crate::parse::handed_over(
        eth,
        &job.key,
        job.ipv6 != 0,
        job.l3 == 18,
        job.ip_len,
        kind,
        job.tcp_flags,
    );
    // A slot that does not describe this frame (see `parse::describes`) names no
    // backend for it: dropped, never sent to another flow's backend. (An ICMP error's
    // key is the flow it quotes, not its own headers.)
    if pkt.kind == Kind::Flow && !crate::parse::describes(ctx, &pkt) {
        return Verdict::drop(Counter::DropTunnelUnavailable);
    }
    let verdict = to_backend(
        ctx,
        &pkt,
        job.backend_id,
        backend,
        job.gue != 0,
        forward::now(),
    );
    if verdict.forwarded() {
        let bytes = ctx.len() as u64;
        let new_flow = job.new_flow != 0;
        crate::stats::count_forwarded(job.service_id, job.backend_id, bytes, new_flow);
        if_log! {
            if new_flow {
                crate::log::new_flow(&pkt.key, job.backend_id, backend);
            }
        }
    }
    verdict
}

/// Encapsulates the packet to `backend` and sends it (`gue`: in UDP): `lb_xdp`'s
/// (inlined there, without a tail call), and `lb_probe`'s, for the node's own health
/// probes. `now` is [`forward::now`].
#[inline(always)]
pub fn to_backend<C: Ctx>(
    ctx: &C,
    pkt: &Packet,
    backend_id: u32,
    backend: &Backend,
    gue: bool,
    now: u64,
) -> Verdict {
    let Some(cfg) = TUNNEL.get(0) else {
        return Verdict::drop(Counter::DropNoRoute);
    };
    let outer6 = backend.flags & BACKEND_F_IPV6 != 0;
    let mix = flow_mix(&pkt.key);
    let Some(src) = outer_source(cfg, outer6, mix) else {
        return Verdict::drop(Counter::DropNoRoute);
    };
    let outer = Outer {
        cfg,
        src,
        mix,
        outer6,
        gue,
        proto: match (gue, pkt.ipv6) {
            (true, _) => proto::UDP,
            (false, false) => IPPROTO_IPIP,
            (false, true) => IPPROTO_IPV6,
        },
    };
    let overhead = outer.overhead();
    // `tot_len` 0: the MTU is compared here, so a packet too big can be answered.
    let q = Query {
        ipv6: outer6,
        src: &outer.src,
        dst: &backend.addr,
        proto: outer.proto,
        tot_len: 0,
    };
    let cache = crate::maps::NEXT_HOPS.get_ptr_mut(backend_id);
    // A fresh cached hop is read inline; only the FIB lookup is a call of its own.
    let hop = match cache.and_then(|hop| forward::cached(hop, q.dst, now)) {
        Some(hop) => Ok(hop),
        None => ask_fib(ctx, &q, backend_id, now),
    };
    let hop = match hop {
        Ok(hop) => hop,
        // The stack cannot resolve the outer next hop from the inner packet (it would
        // route it to the VIP, which is not here, and answer the client unreachable):
        // drop it; lbd keeps tunnel next hops resolved, and the client retries.
        Err(verdict) if verdict.reason == Counter::PassNoNeighbour => {
            return Verdict::drop(Counter::DropNoNeighbour);
        }
        Err(verdict) => return verdict,
    };
    let room = hop.mtu.saturating_sub(overhead as u32);
    let segment = ctx.gso_size();
    if segment != 0 {
        // A GSO skb (TC): the kernel lowers its segment size by the overhead as the
        // packet grows (see `ctx.rs`), so each segment leaves as big as it came in;
        // one that would not fit the route cannot be answered (the ICMP error would
        // have to quote a segment), and a SYN's clamped MSS keeps this from happening.
        if segment_len(ctx, pkt, segment) > hop.mtu {
            return Verdict::drop(Counter::DropTooBig);
        }
    } else if u32::from(pkt.ip_len) > room {
        return Verdict::unpack(too_big(ctx, pkt, room));
    }
    if pkt.is_syn() {
        if C::SKB {
            clamp_mss(ctx, pkt, room);
        } else {
            clamp(ctx, pkt, room);
        }
    }
    // XDP inlines it: on this kind of host (SRSO "safe RET") a call and its return
    // cost 20-30 ns. TC keeps the call: its programs' frames have no room for it.
    let eth = if C::SKB {
        encapsulate(ctx, pkt, &outer, backend)
    } else {
        write_outer(ctx, pkt, &outer, backend)
    };
    if eth.is_null() {
        return Verdict::drop(Counter::DropMalformed);
    }
    forward::send(ctx, eth, &hop).forwarded_as(if gue { Sent::Gue } else { Sent::Ipip })
}

/// The length of one segment of a GSO packet with `segment` payload bytes: its IP
/// and TCP (or UDP) headers and the payload.
#[inline(always)]
fn segment_len(ctx: &impl Ctx, pkt: &Packet, segment: u32) -> u32 {
    let ip = if pkt.ipv6 { IPV6_LEN } else { IPV4_LEN } as u32;
    let l4 = if pkt.key.proto == proto::TCP {
        match ptr_at::<[u8; 13]>(ctx, pkt.l4) {
            // SAFETY: ptr_at checked the bytes.
            Some(head) => u32::from(unsafe { (*head)[12] } >> 4) * 4,
            None => return u32::MAX,
        }
    } else {
        UDP_LEN as u32
    };
    ip + l4 + segment
}

/// The next hop of the outer header from the FIB (see [`forward::ask_fib`]). Not
/// inlined (as [`encapsulate`]): `lb_xdp`'s stack frame cannot hold every step at once.
#[inline(never)]
fn ask_fib(ctx: &impl Ctx, q: &Query<'_>, backend_id: u32, now: u64) -> Result<Hop, Verdict> {
    forward::ask_fib(ctx, q, crate::maps::NEXT_HOPS.get_ptr_mut(backend_id), now)
}

/// The outer headers of one packet, as [`to_backend`] works them out: their family
/// (the backend's), `gue` or plain `ipip`, the protocol the outer IP header names, the
/// source, and the flow's [`flow_mix`], which [`encapsulate`] takes as they are.
struct Outer<'a> {
    cfg: &'a TunnelConfig,
    src: Addr,
    mix: u32,
    outer6: bool,
    gue: bool,
    proto: u8,
}

impl Outer<'_> {
    /// The IP header's length.
    #[inline(always)]
    fn ip_len(&self) -> usize {
        if self.outer6 { IPV6_LEN } else { IPV4_LEN }
    }

    /// How many bytes the frame grows by.
    #[inline(always)]
    fn overhead(&self) -> usize {
        self.ip_len() + if self.gue { UDP_LEN } else { 0 }
    }
}

/// Grows the frame by the `outer` headers and writes them, to `backend`; the frame's
/// (moved) Ethernet header, or null if the frame cannot grow.
///
/// The TC programs' call: a BPF function of its own has a stack frame of its own,
/// and theirs cannot hold every step at once (at most five arguments). XDP inlines
/// the body, [`write_outer`] (see [`to_backend`]).
#[inline(never)]
fn encapsulate(ctx: &impl Ctx, pkt: &Packet, outer: &Outer<'_>, backend: &Backend) -> *mut EthHdr {
    write_outer(ctx, pkt, outer, backend)
}

/// The body of [`encapsulate`].
#[inline(always)]
fn write_outer(ctx: &impl Ctx, pkt: &Packet, outer: &Outer<'_>, backend: &Backend) -> *mut EthHdr {
    let (outer6, gue) = (outer.outer6, outer.gue);
    let ip_len = outer.ip_len();
    let overhead = outer.overhead();
    let inner_tos = inner_tos(ctx, pkt);
    if !ctx.grow_for_encap(overhead as u32, outer6, gue) {
        return core::ptr::null_mut();
    }
    let l3 = pkt.l3;
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return core::ptr::null_mut();
    };
    // The link header moves to the new front: a VLAN tag (at 12..16 of the old
    // frame, now `overhead` bytes further in) comes along; the MACs are written by
    // the send below.
    // SAFETY: ptr_at checked both ranges; they do not overlap (overhead >= 20 > 18).
    unsafe {
        if l3 != 14 {
            let Some(old_tag) = ptr_at::<[u8; 4]>(ctx, overhead + 12) else {
                return core::ptr::null_mut();
            };
            let Some(tag) = ptr_at::<[u8; 6]>(ctx, 12) else {
                return core::ptr::null_mut();
            };
            let t = *old_tag;
            let ether_type = if outer6 { ETH_P_IPV6 } else { ETH_P_IPV4 };
            *tag = [t[0], t[1], t[2], t[3], ether_type[0], ether_type[1]];
        } else {
            (*eth).ether_type = if outer6 { ETH_P_IPV6 } else { ETH_P_IPV4 };
        }
    }
    let payload = pkt.ip_len + if gue { UDP_LEN as u16 } else { 0 };
    let (src, mix) = (&outer.src, outer.mix);
    let written = if outer6 {
        write_ipv6(
            ctx,
            l3,
            src,
            &backend.addr,
            outer.proto,
            payload,
            inner_tos,
            mix,
        )
    } else {
        write_ipv4(ctx, l3, src, &backend.addr, outer.proto, payload, inner_tos)
    };
    if !written || (gue && !write_udp(ctx, l3 + ip_len, outer.cfg, pkt.ip_len, mix)) {
        return core::ptr::null_mut();
    }
    eth
}

/// The inner packet's TOS / traffic class, copied to the outer header (ECN included,
/// RFC 6040's normal mode).
#[inline(always)]
fn inner_tos(ctx: &impl Ctx, pkt: &Packet) -> u8 {
    let Some(b) = ptr_at::<[u8; 2]>(ctx, pkt.l3) else {
        return 0;
    };
    // SAFETY: ptr_at checked the two bytes.
    let b = unsafe { *b };
    if pkt.ipv6 {
        (b[0] << 4) | (b[1] >> 4)
    } else {
        b[1]
    }
}

/// Writes the outer IPv4 header at `at` with its checksum computed whole.
#[inline(always)]
fn write_ipv4(
    ctx: &impl Ctx,
    at: usize,
    src: &Addr,
    dst: &Addr,
    proto: u8,
    payload: u16,
    tos: u8,
) -> bool {
    let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, at) else {
        return false;
    };
    let tot_len = payload + IPV4_LEN as u16;
    let addrs = (src.v4_word(), dst.v4_word());
    // SAFETY: ptr_at checked the header's bounds. Don't fragment: the packet was
    // checked against the route's MTU.
    unsafe { crate::csum::write_ipv4(ip, tos, tot_len, true, [TTL, proto], addrs) };
    true
}

/// Writes the outer IPv6 header at `at`, the flow's `mix` as its flow label.
#[inline(always)]
#[expect(
    clippy::too_many_arguments,
    reason = "one header's fields, each needed"
)]
fn write_ipv6(
    ctx: &impl Ctx,
    at: usize,
    src: &Addr,
    dst: &Addr,
    proto: u8,
    payload: u16,
    tc: u8,
    mix: u32,
) -> bool {
    let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, at) else {
        return false;
    };
    let vtc_flow = (6u32 << 28) | (u32::from(tc) << 20) | flow_label(mix);
    let len = payload.to_be_bytes();
    let at = ip.cast::<u8>();
    // SAFETY: ptr_at checked the header's 40 bytes; word stores as in
    // `csum::write_ipv4` (the addresses' words are their network-order bytes).
    unsafe {
        mem::store_u32::<0>(at, vtc_flow.to_be());
        mem::store_u32::<4>(at, u32::from_ne_bytes([len[0], len[1], proto, TTL]));
        mem::store_ipv6_addrs(at, src, dst);
    }
    true
}

/// Writes the UDP header of `gue` at `at`: the flow's hash as source port (kept in
/// the dynamic range), zero checksum.
#[inline(always)]
fn write_udp(ctx: &impl Ctx, at: usize, cfg: &TunnelConfig, inner_len: u16, mix: u32) -> bool {
    let Some(udp) = ptr_at::<UdpHdr>(ctx, at) else {
        return false;
    };
    let (sport, len) = (
        gue_source_port(mix).to_be_bytes(),
        (inner_len + UDP_LEN as u16).to_be_bytes(),
    );
    let dport = cfg.gue_port_be.to_ne_bytes();
    let at = udp.cast::<u8>();
    // SAFETY: ptr_at checked the header's eight bytes; the checksum is zero.
    unsafe {
        mem::store_u32::<0>(
            at,
            u32::from_ne_bytes([sport[0], sport[1], dport[0], dport[1]]),
        );
        mem::store_u32::<4>(at, u32::from_ne_bytes([len[0], len[1], 0, 0]));
    }
    true
}

/// Lowers a SYN's MSS option (first option slot) to what `room` bytes of IP leave,
/// updating the TCP checksum. TC's call (as [`encapsulate`]); XDP inlines [`clamp`].
#[inline(never)]
fn clamp_mss(ctx: &impl Ctx, pkt: &Packet, room: u32) {
    clamp(ctx, pkt, room);
}

/// The body of [`clamp_mss`].
#[inline(always)]
fn clamp(ctx: &impl Ctx, pkt: &Packet, room: u32) {
    let headers = if pkt.ipv6 { IPV6_LEN } else { IPV4_LEN } as u32 + 20;
    let Some(most) = room.checked_sub(headers) else {
        return;
    };
    let Some(head) = ptr_at::<[u8; TCP_WITH_MSS]>(ctx, pkt.l4) else {
        return;
    };
    // SAFETY: ptr_at checked all 24 bytes.
    let mss = unsafe {
        let h = &*head;
        if h[12] >> 4 < 6 || h[20] != 2 || h[21] != 4 {
            return;
        }
        u16::from_be_bytes([h[22], h[23]])
    };
    if u32::from(mss) <= most {
        return;
    }
    let new = (most as u16).to_be_bytes();
    if ctx.replace_l4_word(pkt.l4 + 22, pkt.l4 + 16, new) {
        crate::stats::count(Counter::MssClamped);
    }
}

/// Answers a packet too big to encapsulate (module doc): the frame becomes the ICMP
/// error in place, quoting the packet's IP header and 8 bytes after it, and goes back
/// out where it came in. Not inlined: a function of its own has its own stack frame,
/// which `lb_xdp`'s (with the log build's record) has no room for.
#[inline(never)]
fn too_big(ctx: &impl Ctx, pkt: &Packet, room: u32) -> u64 {
    // The verdict as an integer: returned through memory, LLVM may leave the caller's
    // stack pointer in r0, which the verifier refuses to see returned.
    write_too_big(ctx, pkt, room).pack()
}

/// The body of [`too_big`].
#[inline(always)]
fn write_too_big(ctx: &impl Ctx, pkt: &Packet, room: u32) -> Verdict {
    if !pkt.ipv6 {
        let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, pkt.l3) else {
            return Verdict::drop(Counter::DropMalformed);
        };
        // SAFETY: ptr_at checked the header.
        if unsafe { (*ip).frag[0] } & 0x40 == 0 {
            return Verdict::drop(Counter::DropTooBig);
        }
    }
    let (ip_len, quote) = if pkt.ipv6 {
        (IPV6_LEN, IPV6_LEN + 8)
    } else {
        (IPV4_LEN, IPV4_LEN + 8)
    };
    let grow = ip_len + ICMP_LEN;
    let l3 = pkt.l3;
    if !ctx.grow_front(grow as u32) {
        return Verdict::drop(Counter::DropTooBig);
    }
    let len = ctx.len();
    let want = l3 + grow + quote;
    if len < want || !ctx.resize(len, want) {
        return Verdict::drop(Counter::DropMalformed);
    }
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return Verdict::drop(Counter::DropMalformed);
    };
    let Some(old) = ptr_at::<[u8; 16]>(ctx, grow) else {
        return Verdict::drop(Counter::DropMalformed);
    };
    // SAFETY: ptr_at checked both; the old link header (at `grow` >= 28) lies after the
    // new one (at most 18 bytes).
    unsafe {
        let o = *old;
        (*eth).dst = [o[6], o[7], o[8], o[9], o[10], o[11]];
        (*eth).src = [o[0], o[1], o[2], o[3], o[4], o[5]];
        (*eth).ether_type = [o[12], o[13]];
        if l3 != 14 {
            let Some(tci) = ptr_at::<[u8; 2]>(ctx, 14) else {
                return Verdict::drop(Counter::DropMalformed);
            };
            *tci = [o[14], o[15]];
            let Some(inner_type) = ptr_at::<[u8; 2]>(ctx, 16) else {
                return Verdict::drop(Counter::DropMalformed);
            };
            let Some(old_inner_type) = ptr_at::<[u8; 2]>(ctx, grow + 16) else {
                return Verdict::drop(Counter::DropMalformed);
            };
            *inner_type = *old_inner_type;
        }
    }
    let ok = if pkt.ipv6 {
        icmp::write_too_big_v6(ctx, l3, &pkt.key, room)
    } else {
        icmp::write_frag_needed_v4(ctx, l3, &pkt.key, room)
    };
    if !ok {
        return Verdict::drop(Counter::DropMalformed);
    }
    Verdict::forward(xdp_action::XDP_TX, Counter::TxIcmpTooBig)
}
