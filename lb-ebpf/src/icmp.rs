//! ICMP and ICMPv6 for VIPs.
//!
//! - "Fragmentation needed" (ICMP 3/4) and "packet too big" (ICMPv6 2) are sent by a
//!   router to the source of an oversized packet — in DSR that is a backend replying
//!   from the VIP, so the error arrives here. It is forwarded to the backend that owns
//!   the flow it quotes (conntrack, else the table), so path-MTU discovery works.
//! - Echo requests to a VIP address are answered here when the agent lists the address
//!   in the echo map (the node does not hold VIPs itself, so the stack would not).
//! - Everything else ICMP passes to the stack untouched.

use lb_common::Addr;
use lb_common::{
    Backend, Counter, FlowKey,
    maps::{proto, v4_mapped},
};

use crate::{
    Verdict,
    ctx::Ctx,
    parse::{EthHdr, IPV4_LEN, IPV6_LEN, Ipv4Hdr, Ipv6Hdr, Kind, Packet, l4_ports, ptr_at},
};

/// ICMP header length (type, code, checksum, rest-of-header).
pub const ICMP_LEN: usize = 8;
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_FRAG_NEEDED: u8 = 4;
const ICMP_ECHO: u8 = 8;
const ICMP_ECHO_REPLY: u8 = 0;
const ICMPV6_PKT_TOOBIG: u8 = 2;
const ICMPV6_ECHO: u8 = 128;
const ICMPV6_ECHO_REPLY: u8 = 129;

/// The first four bytes of an ICMP header.
#[repr(C)]
pub struct IcmpHdr {
    pub kind: u8,
    pub code: u8,
    pub check: [u8; 2],
}

#[inline(always)]
fn icmp_hdr(ctx: &impl Ctx, offset: usize) -> Result<*mut IcmpHdr, Verdict> {
    ptr_at(ctx, offset).ok_or(Verdict::drop(Counter::DropMalformed))
}

/// Classifies an IPv4 ICMP packet whose header is at `l3`.
#[inline(always)]
pub fn v4(
    ctx: &impl Ctx,
    eth: *mut EthHdr,
    l3: usize,
    ip: &Ipv4Hdr,
    tot_len: u16,
) -> Result<Packet, Verdict> {
    let l4 = l3 + IPV4_LEN;
    // SAFETY: icmp_hdr bounds-checked the header.
    let icmp = unsafe { &*icmp_hdr(ctx, l4)? };
    let mut key = FlowKey {
        dst: v4_mapped(ip.dst),
        proto: proto::ICMP,
        ..FlowKey::default()
    };
    if icmp.kind == ICMP_ECHO && icmp.code == 0 {
        return Ok(Packet {
            eth,
            key,
            ipv6: false,
            ip_len: tot_len,
            kind: Kind::Echo { l3, l4 },
            l3,
            l4,
            tcp_flags: 0,
        });
    }
    if icmp.kind != ICMP_DEST_UNREACH || icmp.code != ICMP_FRAG_NEEDED {
        return Err(Verdict::pass(Counter::PassNotVip));
    }
    // The quoted packet: an IPv4 header without options, then 8 bytes of TCP/UDP.
    let inner_at = l4 + ICMP_LEN;
    let inner: *const Ipv4Hdr = ptr_at(ctx, inner_at).ok_or(Verdict::pass(Counter::PassNotVip))?;
    // SAFETY: ptr_at checked the bounds.
    let inner = unsafe { &*inner };
    if inner.version_ihl != 0x45 || !matches!(inner.proto, proto::TCP | proto::UDP) {
        return Err(Verdict::pass(Counter::PassNotVip));
    }
    let ports =
        l4_ports(ctx, inner_at + IPV4_LEN).map_err(|_| Verdict::pass(Counter::PassNotVip))?;
    // The quoted packet went backend (from the VIP) → client; the flow is its reverse.
    key = FlowKey {
        src: v4_mapped(inner.dst),
        dst: v4_mapped(inner.src),
        src_port_be: u16::from_ne_bytes(ports.dst),
        dst_port_be: u16::from_ne_bytes(ports.src),
        proto: inner.proto,
        _pad: 0,
        _pad2: 0,
    };
    Ok(Packet {
        eth,
        key,
        ipv6: false,
        ip_len: tot_len,
        kind: Kind::IcmpError,
        l3,
        l4,
        tcp_flags: 0,
    })
}

/// Classifies an ICMPv6 packet whose IPv6 header is at `l3`.
#[inline(always)]
pub fn v6(
    ctx: &impl Ctx,
    eth: *mut EthHdr,
    l3: usize,
    ip: &Ipv6Hdr,
    payload_len: u16,
) -> Result<Packet, Verdict> {
    let l4 = l3 + IPV6_LEN;
    // SAFETY: icmp_hdr bounds-checked the header.
    let icmp = unsafe { &*icmp_hdr(ctx, l4)? };
    let ip_len = payload_len.saturating_add(IPV6_LEN as u16);
    if icmp.kind == ICMPV6_ECHO && icmp.code == 0 {
        let key = FlowKey {
            dst: Addr::from_octets(ip.dst),
            proto: proto::ICMPV6,
            ..FlowKey::default()
        };
        return Ok(Packet {
            eth,
            key,
            ipv6: true,
            ip_len,
            kind: Kind::Echo { l3, l4 },
            l3,
            l4,
            tcp_flags: 0,
        });
    }
    if icmp.kind != ICMPV6_PKT_TOOBIG {
        return Err(Verdict::pass(Counter::PassNotVip));
    }
    let inner_at = l4 + ICMP_LEN;
    let inner: *const Ipv6Hdr = ptr_at(ctx, inner_at).ok_or(Verdict::pass(Counter::PassNotVip))?;
    // SAFETY: ptr_at checked the bounds.
    let inner = unsafe { &*inner };
    if inner.vtc_flow[0] >> 4 != 6 || !matches!(inner.next_hdr, proto::TCP | proto::UDP) {
        return Err(Verdict::pass(Counter::PassNotVip));
    }
    let ports =
        l4_ports(ctx, inner_at + IPV6_LEN).map_err(|_| Verdict::pass(Counter::PassNotVip))?;
    let key = FlowKey {
        src: Addr::from_octets(inner.dst),
        dst: Addr::from_octets(inner.src),
        src_port_be: u16::from_ne_bytes(ports.dst),
        dst_port_be: u16::from_ne_bytes(ports.src),
        proto: inner.next_hdr,
        _pad: 0,
        _pad2: 0,
    };
    Ok(Packet {
        eth,
        key,
        ipv6: true,
        ip_len,
        kind: Kind::IcmpError,
        l3,
        l4,
        tcp_flags: 0,
    })
}

/// RFC 1624 incremental update of a checksum (host order) when one 16-bit word of the
/// covered data changes from `old` to `new`.
#[inline(always)]
pub fn csum_replace(check: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!check) + u32::from(!old) + u32::from(new);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// Turns an echo request into the reply in place and sends it back out: addresses and
/// MACs swapped (checksums are sums, so swapping changes nothing), type set to reply
/// with the checksum updated incrementally.
#[inline(always)]
pub fn echo_reply(ctx: &impl Ctx, pkt: &Packet, l3: usize, l4: usize) -> Verdict {
    let malformed = Verdict::drop(Counter::DropMalformed);
    let Ok(icmp) = icmp_hdr(ctx, l4) else {
        return malformed;
    };
    // SAFETY: every pointer below was bounds-checked by ptr_at/icmp_hdr; the packet is
    // not resized.
    unsafe {
        let (request, reply) = if pkt.ipv6 {
            let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, l3) else {
                return malformed;
            };
            core::mem::swap(&mut (*ip).src, &mut (*ip).dst);
            (ICMPV6_ECHO, ICMPV6_ECHO_REPLY)
        } else {
            let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, l3) else {
                return malformed;
            };
            core::mem::swap(&mut (*ip).src, &mut (*ip).dst);
            (ICMP_ECHO, ICMP_ECHO_REPLY)
        };
        (*icmp).kind = reply;
        let check = csum_replace(
            u16::from_be_bytes((*icmp).check),
            u16::from_be_bytes([request, 0]),
            u16::from_be_bytes([reply, 0]),
        );
        (*icmp).check = check.to_be_bytes();
        let eth = pkt.eth;
        core::mem::swap(&mut (*eth).src, &mut (*eth).dst);
    }
    Verdict::forward(
        aya_ebpf::bindings::xdp_action::XDP_TX,
        Counter::TxIcmpEchoReply,
    )
}

/// `nat` mode: an ICMP error about a reply the node sent (VIP → client, translated
/// from backend → NAT address) is rewritten to be about the packet the backend really
/// sent, and addressed to that backend: outer destination VIP → backend, quoted source
/// VIP → backend and quoted destination client → NAT address and port. The ICMP
/// checksum (and for IPv4 both IP header checksums) follow; the quoted TCP/UDP
/// checksum is left alone (receivers do not check it in an ICMP quote).
///
/// False if a header is not in the packet.
#[inline(always)]
pub fn nat_translate(
    ctx: &impl Ctx,
    pkt: &Packet,
    backend: &Backend,
    nat: &Addr,
    nat_port_be: u16,
) -> bool {
    let backend_port_be = backend.port_be;
    let backend = &backend.addr;
    let inner = pkt.l4 + ICMP_LEN;
    let Some(icmp) = ptr_at::<IcmpHdr>(ctx, pkt.l4) else {
        return false;
    };
    // SAFETY: every pointer is bounds-checked by ptr_at; the packet is not resized.
    unsafe {
        let mut sum = u32::from(!u16::from_ne_bytes((*icmp).check));
        if pkt.ipv6 {
            let Some(outer) = ptr_at::<Ipv6Hdr>(ctx, pkt.l3) else {
                return false;
            };
            let Some(quoted) = ptr_at::<Ipv6Hdr>(ctx, inner) else {
                return false;
            };
            let Some(ports) = ptr_at::<[u8; 4]>(ctx, inner + IPV6_LEN) else {
                return false;
            };
            // The ICMPv6 checksum covers the outer destination (pseudo header) too.
            sum = csum_diff((*outer).dst.as_ptr(), backend.as_octets().as_ptr(), 16, sum);
            sum = csum_diff(
                (*quoted).src.as_ptr(),
                backend.as_octets().as_ptr(),
                16,
                sum,
            );
            sum = csum_diff((*quoted).dst.as_ptr(), nat.as_octets().as_ptr(), 16, sum);
            let new_ports = quoted_ports(&*ports, backend_port_be, nat_port_be);
            sum = csum_diff(ports.cast(), new_ports.as_ptr(), 4, sum);
            (*outer).dst = backend.octets();
            (*quoted).src = backend.octets();
            (*quoted).dst = nat.octets();
            *ports = new_ports;
        } else {
            let Some(outer) = ptr_at::<Ipv4Hdr>(ctx, pkt.l3) else {
                return false;
            };
            let Some(quoted) = ptr_at::<Ipv4Hdr>(ctx, inner) else {
                return false;
            };
            let Some(ports) = ptr_at::<[u8; 4]>(ctx, inner + IPV4_LEN) else {
                return false;
            };
            let (backend4, nat4) = (
                backend.as_octets().as_ptr().add(12),
                nat.as_octets().as_ptr().add(12),
            );
            // Outer header: destination VIP → backend (ICMPv4 has no pseudo header).
            let outer_sum = csum_diff(
                (*outer).dst.as_ptr(),
                backend4,
                4,
                u32::from(!u16::from_ne_bytes((*outer).check)),
            );
            (*outer).check = (!crate::csum::fold(outer_sum)).to_ne_bytes();
            (*outer).dst = crate::csum::v4_of(backend);
            // Quoted header: new addresses, its checksum updated, and all of that
            // (checksum field included) reflected in the ICMP checksum.
            let old_check_word = [
                (*quoted).ttl,
                (*quoted).proto,
                (*quoted).check[0],
                (*quoted).check[1],
            ];
            let mut q = u32::from(!u16::from_ne_bytes((*quoted).check));
            q = csum_diff((*quoted).src.as_ptr(), backend4, 4, q);
            q = csum_diff((*quoted).dst.as_ptr(), nat4, 4, q);
            let new_check = (!crate::csum::fold(q)).to_ne_bytes();
            let new_check_word = [
                old_check_word[0],
                old_check_word[1],
                new_check[0],
                new_check[1],
            ];
            sum = csum_diff(old_check_word.as_ptr(), new_check_word.as_ptr(), 4, sum);
            sum = csum_diff((*quoted).src.as_ptr(), backend4, 4, sum);
            sum = csum_diff((*quoted).dst.as_ptr(), nat4, 4, sum);
            let new_ports = quoted_ports(&*ports, backend_port_be, nat_port_be);
            sum = csum_diff(ports.cast(), new_ports.as_ptr(), 4, sum);
            (*quoted).check = new_check;
            (*quoted).src = crate::csum::v4_of(backend);
            (*quoted).dst = crate::csum::v4_of(nat);
            *ports = new_ports;
        }
        (*icmp).check = (!crate::csum::fold(sum)).to_ne_bytes();
    }
    true
}

/// The quoted ports after translation: the source becomes the backend's port (the VIP
/// port stays when the backend has none of its own), the destination the NAT port.
#[inline(always)]
fn quoted_ports(old: &[u8; 4], backend_port_be: u16, nat_port_be: u16) -> [u8; 4] {
    let p = nat_port_be.to_ne_bytes();
    if backend_port_be == 0 {
        return [old[0], old[1], p[0], p[1]];
    }
    let b = backend_port_be.to_ne_bytes();
    [b[0], b[1], p[0], p[1]]
}

/// Makes the frame, whose IPv4 packet at `l3` now has 28 bytes of room in front of the
/// quoted header and 8 bytes after it, an ICMP "fragmentation needed" from the
/// flow's VIP to its client with next-hop MTU `mtu`.
#[inline(always)]
pub fn write_frag_needed_v4(ctx: &impl Ctx, l3: usize, key: &FlowKey, mtu: u32) -> bool {
    const LEN: u16 = (IPV4_LEN + ICMP_LEN + IPV4_LEN + 8) as u16;
    let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, l3) else {
        return false;
    };
    let Some(body) = ptr_at::<[u8; ICMP_LEN + IPV4_LEN + 8]>(ctx, l3 + IPV4_LEN) else {
        return false;
    };
    let addrs = (key.dst.v4_word(), key.src.v4_word());
    let mtu = (mtu.min(0xffff) as u16).to_be_bytes();
    // SAFETY: ptr_at checked both ranges.
    unsafe {
        crate::csum::write_ipv4(ip, 0, LEN, false, [64, proto::ICMP], addrs);
        let b = &mut *body;
        b[..8].copy_from_slice(&[
            ICMP_DEST_UNREACH,
            ICMP_FRAG_NEEDED,
            0,
            0,
            0,
            0,
            mtu[0],
            mtu[1],
        ]);
        let sum = csum_sum(body.cast(), (ICMP_LEN + IPV4_LEN + 8) as u32, 0);
        [b[2], b[3]] = (!crate::csum::fold(sum)).to_ne_bytes();
    }
    true
}

/// Makes the frame, whose IPv6 packet at `l3` now has 48 bytes of room in front of the
/// quoted header and 8 bytes after it, an ICMPv6 "packet too big" from the flow's VIP
/// to its client with MTU `mtu` (at least IPv6's 1280).
#[inline(always)]
pub fn write_too_big_v6(ctx: &impl Ctx, l3: usize, key: &FlowKey, mtu: u32) -> bool {
    const BODY: usize = ICMP_LEN + IPV6_LEN + 8;
    let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, l3) else {
        return false;
    };
    let Some(body) = ptr_at::<[u8; BODY]>(ctx, l3 + IPV6_LEN) else {
        return false;
    };
    let mtu = mtu.max(1280).to_be_bytes();
    // SAFETY: ptr_at checked both ranges.
    unsafe {
        (*ip).vtc_flow = [0x60, 0, 0, 0];
        (*ip).payload_len = (BODY as u16).to_be_bytes();
        (*ip).next_hdr = proto::ICMPV6;
        (*ip).hop_limit = 64;
        (*ip).src = key.dst.octets();
        (*ip).dst = key.src.octets();
        let b = &mut *body;
        b[..8].copy_from_slice(&[ICMPV6_PKT_TOOBIG, 0, 0, 0, mtu[0], mtu[1], mtu[2], mtu[3]]);
        // The pseudo header: both addresses, the length and the next header.
        let mut sum = csum_sum((*ip).src.as_ptr(), 32, 0);
        sum = csum_sum(body.cast(), BODY as u32, sum);
        let fixed = u32::from_ne_bytes([0, 0, 0, BODY as u8]) as u64
            + u32::from_ne_bytes([0, 0, 0, proto::ICMPV6]) as u64
            + u64::from(sum);
        let fixed = ((fixed & 0xffff_ffff) + (fixed >> 32)) as u32;
        [b[2], b[3]] = (!crate::csum::fold(fixed)).to_ne_bytes();
    }
    true
}

/// The one's-complement sum (`bpf_csum_diff` with nothing taken away) of `len` bytes
/// at `data`, continuing `seed`.
///
/// # Safety
/// `data` valid for `len` bytes; `len` a multiple of 4.
#[inline(always)]
unsafe fn csum_sum(data: *const u8, len: u32, seed: u32) -> u32 {
    // SAFETY: per the contract; the helper only reads.
    unsafe {
        aya_ebpf::helpers::bpf_csum_diff(core::ptr::null_mut(), 0, data as *mut u32, len, seed)
            as u32
    }
}

/// `bpf_csum_diff` over `len` bytes, continuing the sum `seed`.
///
/// # Safety
/// Both pointers valid for `len` bytes; `len` a multiple of 4.
#[inline(always)]
unsafe fn csum_diff(old: *const u8, new: *const u8, len: u32, seed: u32) -> u32 {
    // SAFETY: per the contract; the helper only reads.
    unsafe {
        aya_ebpf::helpers::bpf_csum_diff(old as *mut u32, len, new as *mut u32, len, seed) as u32
    }
}
