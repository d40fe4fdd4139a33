//! `lb_probe`: health probes of `ipip`/`gue` services sent through the tunnel, so a
//! probe takes the path a client's packet takes and a backend whose decap is broken
//! fails its checks.
//!
//! lbd's probe socket connects to VIP:port with a probe mark (`lb_common::probe`:
//! magic, GUE bit, backend id); a policy rule routes marked packets out of the node's
//! interface, where this program runs on TC egress. A marked packet is encapsulated to
//! the backend exactly as `lb_xdp` encapsulates a client's (`tunnel::to_backend`:
//! outer source, next hop and MTU from the FIB, a SYN's MSS clamped), the mark cleared
//! so it is not encapsulated twice, and sent: on this interface (`TC_ACT_OK`) or
//! redirected to the FIB's. The backend answers from the VIP straight to the node's
//! address, which `lb_xdp` passes (it is no VIP). Anything unmarked passes untouched.
//!
//! On TC egress the skb comes from a local socket: its TCP checksum is usually
//! `CHECKSUM_PARTIAL` (only the pseudo header's sum in the field). The packet grows
//! with `bpf_skb_adjust_room`'s ENCAP flags ([`Egress::grow_for_encap`]), which leave
//! the inner bytes where `csum_start` points, so the kernel finishes the inner
//! checksum on transmit (or the NIC does).

use aya_ebpf::{
    EbpfContext,
    bindings::{TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT, TC_ACT_UNSPEC, xdp_action},
    programs::TcContext,
};
use lb_common::Addr;
use lb_common::{
    Counter, ProbeCounter,
    maps::{proto, v4_mapped},
    probe::{PROBE_MARK, PROBE_MARK_BACKEND, PROBE_MARK_GUE, PROBE_MARK_MASK},
};

use crate::{
    ctx::{self, Ctx},
    maps::{BACKENDS, PROBE_COUNTERS},
    parse::{EthHdr, IPV4_LEN, IPV6_LEN, Ipv4Hdr, Ipv6Hdr, Kind, Packet, ptr_at},
};

/// TCP flags byte offset in the TCP header.
const TCP_FLAGS_AT: usize = 13;

/// What [`probe_packet`] read of a probe.
#[derive(Default)]
struct Probe {
    key: lb_common::FlowKey,
    ip_len: u16,
    ipv6: bool,
    l4: usize,
    tcp_flags: u8,
}

/// Reads a probe as our own socket sends it: Ethernet without a tag, IPv4 without
/// options or IPv6 without extension headers, TCP; false for anything else. Lighter
/// than the ingress parser, and not inlined (it writes only plain values into `out`):
/// `lb_probe`'s stack frame has no room for it next to the encapsulation.
#[inline(never)]
fn probe_packet(ctx: &Egress, out: &mut Probe) -> bool {
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return false;
    };
    // SAFETY: ptr_at checked every header read below.
    let ether_type = unsafe { (*eth).ether_type };
    match ether_type {
        [0x08, 0x00] => {
            let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, 14) else {
                return false;
            };
            // SAFETY: as above.
            let ip = unsafe { &*ip };
            if ip.version_ihl != 0x45 || ip.proto != proto::TCP {
                return false;
            }
            out.key.src = v4_mapped(ip.src);
            out.key.dst = v4_mapped(ip.dst);
            out.ip_len = u16::from_be_bytes(ip.tot_len);
            out.ipv6 = false;
            out.l4 = 14 + IPV4_LEN;
        }
        [0x86, 0xdd] => {
            let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, 14) else {
                return false;
            };
            // SAFETY: as above.
            let ip = unsafe { &*ip };
            if ip.next_hdr != proto::TCP {
                return false;
            }
            out.key.src = Addr::from_octets(ip.src);
            out.key.dst = Addr::from_octets(ip.dst);
            out.ip_len = u16::from_be_bytes(ip.payload_len).saturating_add(IPV6_LEN as u16);
            out.ipv6 = true;
            out.l4 = 14 + IPV6_LEN;
        }
        _ => return false,
    }
    if usize::from(out.ip_len) + 14 > ctx.len() {
        return false;
    }
    let Some(tcp) = ptr_at::<[u8; 14]>(ctx, out.l4) else {
        return false;
    };
    // SAFETY: as above.
    let tcp = unsafe { &*tcp };
    out.key.src_port_be = u16::from_ne_bytes([tcp[0], tcp[1]]);
    out.key.dst_port_be = u16::from_ne_bytes([tcp[2], tcp[3]]);
    out.key.proto = proto::TCP;
    out.tcp_flags = tcp[TCP_FLAGS_AT];
    true
}

/// A TC context on egress: the interface the packet leaves by stands where a
/// received packet's ingress interface would (the FIB is asked from it, and a next
/// hop on it means "send here").
#[repr(transparent)]
pub struct Egress(pub TcContext);

impl EbpfContext for Egress {
    fn as_ptr(&self) -> *mut core::ffi::c_void {
        self.0.as_ptr()
    }
}

impl Ctx for Egress {
    const SKB: bool = true;

    #[inline(always)]
    fn data(&self) -> usize {
        Ctx::data(&self.0)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        Ctx::data_end(&self.0)
    }

    #[inline(always)]
    fn len(&self) -> usize {
        Ctx::len(&self.0)
    }

    #[inline(always)]
    #[expect(
        clippy::misnamed_getters,
        reason = "on egress the leaving interface stands for the ingress one (type doc)"
    )]
    fn ingress_ifindex(&self) -> u32 {
        // SAFETY: a field of this program's context.
        unsafe { (*self.0.skb.skb).ifindex }
    }

    #[inline(always)]
    fn gso_size(&self) -> u32 {
        Ctx::gso_size(&self.0)
    }

    #[inline(always)]
    fn fib_len(&self, ip_len: u16) -> u16 {
        Ctx::fib_len(&self.0, ip_len)
    }

    #[inline(always)]
    fn redirect(&self, ifindex: u32) -> u32 {
        Ctx::redirect(&self.0, ifindex)
    }

    #[inline(always)]
    fn grow_front(&self, len: u32) -> bool {
        Ctx::grow_front(&self.0, len)
    }

    #[inline(always)]
    fn grow_for_encap(&self, len: u32, outer6: bool, udp: bool) -> bool {
        // Always the ENCAP flags (module doc), GSO or not.
        ctx::grow_encap_room(&self.0, len, outer6, udp)
    }

    #[inline(always)]
    fn resize(&self, from: usize, to: usize) -> bool {
        Ctx::resize(&self.0, from, to)
    }

    #[inline(always)]
    fn tail_call(&self, _index: u32) {
        // `lb_probe` has no tail-call programs; the caller's failure path runs.
    }

    #[inline(always)]
    fn replace_l4_word(&self, at: usize, check_at: usize, new: [u8; 2]) -> bool {
        Ctx::replace_l4_word(&self.0, at, check_at, new)
    }
}

/// Counts one packet under `counter`.
#[inline(always)]
pub fn count(counter: ProbeCounter) {
    if let Some(slot) = PROBE_COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: the map returned a valid pointer to this CPU's slot.
        unsafe { *slot += 1 };
    }
}

/// Encapsulates a probe, passes anything else; the TC action and what to count.
#[inline(always)]
pub fn steer(ctx: &Egress) -> (i32, ProbeCounter) {
    // SAFETY: a field of this program's context.
    let mark = unsafe { (*ctx.0.skb.skb).mark };
    if mark & PROBE_MARK_MASK != PROBE_MARK {
        return (TC_ACT_UNSPEC, ProbeCounter::Passed);
    }
    let shot = |c| (TC_ACT_SHOT, c);
    ctx::pull_headers(&ctx.0);
    let mut probe = Probe::default();
    if !probe_packet(ctx, &mut probe) {
        return shot(ProbeCounter::DropMalformed);
    }
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        return shot(ProbeCounter::DropMalformed);
    };
    // Offsets as constants the verifier knows (the parser only sets these two).
    let l4 = if probe.ipv6 {
        14 + IPV6_LEN
    } else {
        14 + IPV4_LEN
    };
    let pkt = Packet {
        eth,
        key: probe.key,
        ipv6: probe.ipv6,
        ip_len: probe.ip_len,
        kind: Kind::Flow,
        l3: 14,
        l4,
        tcp_flags: probe.tcp_flags,
    };
    let backend_id = mark & PROBE_MARK_BACKEND;
    let Some(backend) = BACKENDS.get(backend_id) else {
        return shot(ProbeCounter::DropUnknownBackend);
    };
    // An id never given out holds zeros: no address to send to.
    if backend.addr.is_zero() {
        return shot(ProbeCounter::DropUnknownBackend);
    }
    let gue = mark & PROBE_MARK_GUE != 0;
    let verdict =
        crate::tunnel::to_backend(ctx, &pkt, backend_id, backend, gue, crate::forward::now());
    let counter = if gue {
        ProbeCounter::EncapsulatedGue
    } else {
        ProbeCounter::EncapsulatedIpip
    };
    // A probe is sent once: cleared, the mark does not select it again on the next
    // egress (a redirect) or match the policy rule anywhere else.
    let sent = |action| {
        ctx.0.set_mark(0);
        (action, counter)
    };
    match (verdict.action, verdict.reason) {
        // The ICMP error `lb_tunnel` would answer a client with makes no sense for
        // our own socket (its MSS was clamped on the SYN; it sends nothing bigger).
        (_, Counter::TxIcmpTooBig) => shot(ProbeCounter::DropNoRoute),
        (xdp_action::XDP_TX, _) => sent(TC_ACT_OK),
        (xdp_action::XDP_REDIRECT, _) => sent(TC_ACT_REDIRECT),
        _ => shot(ProbeCounter::DropNoRoute),
    }
}
