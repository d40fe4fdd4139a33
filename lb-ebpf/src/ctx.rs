//! The two hooks the same steering runs on: XDP (`lb_xdp`) and TC ingress (`lb_tc`).
//!
//! Every module is written against [`Ctx`] and monomorphised per hook, so the XDP
//! programs compile to what they were before the trait existed: each `XdpContext`
//! method is the one helper or field read the code used directly.
//!
//! Verdicts stay in XDP terms ([`crate::Verdict`]); a TC program maps its verdict once,
//! at its end ([`tc_action`]): `XDP_PASS` → `TC_ACT_OK`, `XDP_DROP`/`XDP_ABORTED` →
//! `TC_ACT_SHOT`, `XDP_TX` → `bpf_redirect` to the ingress interface (its egress, which
//! is where `XDP_TX` sends a frame), `XDP_REDIRECT` (the helper already called) →
//! `TC_ACT_REDIRECT`.
//!
//! What differs on an skb, and how each method handles it:
//! - The packet may be longer than its linear part: [`Ctx::len`] is the whole packet
//!   (`skb->len`), and `lb_tc` pulls the headers into the linear part first.
//! - It may be GSO (GRO-merged on receive, or TSO from a local sender through a veth):
//!   bigger than the MTU, segmented by the kernel on the way out. [`Ctx::gso_size`]
//!   says so; the FIB is then asked without an MTU check ([`Ctx::fib_len`], the
//!   kernel's own check lets GSO through) and encapsulation grows the packet with
//!   `bpf_skb_adjust_room`'s ENCAP flags so the kernel segments the tunnel right.
//! - Its checksum may be `CHECKSUM_PARTIAL` (the L4 field holds only the pseudo
//!   header's sum, the rest is filled in on transmit): rewrites of covered fields go
//!   through `bpf_l3/l4_csum_replace`, which know the skb's checksum state
//!   ([`Ctx::SKB`] selects that code in `nat.rs`; [`Ctx::replace_l4_word`]).

use aya_ebpf::{
    EbpfContext,
    bindings::{
        BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6, BPF_F_ADJ_ROOM_ENCAP_L4_UDP,
        TC_ACT_OK, TC_ACT_REDIRECT, TC_ACT_SHOT, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC, xdp_action,
    },
    helpers::{
        bpf_l4_csum_replace, bpf_redirect, bpf_skb_adjust_room, bpf_skb_change_head,
        bpf_skb_change_tail, bpf_skb_pull_data, bpf_xdp_adjust_head, bpf_xdp_adjust_tail,
    },
    programs::{TcContext, XdpContext},
};

use crate::{maps, parse::ptr_at};

/// A packet program's context: the packet, where it came in, and how it grows.
pub trait Ctx: EbpfContext {
    /// An skb (TC), whose checksum state only the kernel's helpers know.
    const SKB: bool;

    /// Start of the packet's directly readable bytes.
    fn data(&self) -> usize;
    /// End of the packet's directly readable bytes.
    fn data_end(&self) -> usize;
    /// The whole packet's length (an skb's may extend past `data_end`).
    fn len(&self) -> usize;
    /// The interface the packet arrived on.
    fn ingress_ifindex(&self) -> u32;
    /// Payload bytes per segment of a GSO packet; 0 for a plain one.
    fn gso_size(&self) -> u32;
    /// The IP length to let the FIB check against the route's MTU: `ip_len`, or 0 (no
    /// check) for a GSO skb, which leaves in segments.
    fn fib_len(&self, ip_len: u16) -> u16;
    /// `bpf_redirect` to `ifindex`'s egress, as an XDP action (`XDP_REDIRECT`, or
    /// `XDP_ABORTED` if the helper refused).
    fn redirect(&self, ifindex: u32) -> u32;
    /// Adds `len` bytes in front of the frame (the old frame starts at `len`).
    fn grow_front(&self, len: u32) -> bool;
    /// As [`Ctx::grow_front`], for an outer header of `outer6` family (with a UDP
    /// header for `udp`): an skb being GSO is told it is now a tunnel, so its
    /// segments get the outer header too. The layout afterwards is the same.
    fn grow_for_encap(&self, len: u32, outer6: bool, udp: bool) -> bool;
    /// Cuts (or extends) the frame, now `from` bytes ([`Ctx::len`]), to `to` bytes.
    /// (The caller's length, not one read again: the verifier rejects the arithmetic
    /// LLVM makes of `to - (data_end - data)`.)
    fn resize(&self, from: usize, to: usize) -> bool;
    /// Continues in the hook's own tail-call program `index` (see `maps.rs`). Returns
    /// only if the call fails.
    fn tail_call(&self, index: u32);
    /// Stores `new` at offset `at` and updates the L4 checksum at offset `check_at` for
    /// that one 16-bit word, which is not in the pseudo header. False if either is not
    /// in the packet. Packet pointers taken before are invalid afterwards.
    fn replace_l4_word(&self, at: usize, check_at: usize, new: [u8; 2]) -> bool;
}

impl Ctx for XdpContext {
    const SKB: bool = false;

    #[inline(always)]
    fn data(&self) -> usize {
        XdpContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        XdpContext::data_end(self)
    }

    #[inline(always)]
    fn len(&self) -> usize {
        XdpContext::data_end(self) - XdpContext::data(self)
    }

    #[inline(always)]
    fn ingress_ifindex(&self) -> u32 {
        XdpContext::ingress_ifindex(self) as u32
    }

    #[inline(always)]
    fn gso_size(&self) -> u32 {
        0
    }

    #[inline(always)]
    fn fib_len(&self, ip_len: u16) -> u16 {
        ip_len
    }

    #[inline(always)]
    fn redirect(&self, ifindex: u32) -> u32 {
        // SAFETY: plain helper call; it returns XDP_REDIRECT or XDP_ABORTED.
        unsafe { bpf_redirect(ifindex, 0) as u32 }
    }

    #[inline(always)]
    fn grow_front(&self, len: u32) -> bool {
        // SAFETY: plain helper call on this program's context.
        unsafe { bpf_xdp_adjust_head(self.ctx, -(len as i32)) == 0 }
    }

    #[inline(always)]
    fn grow_for_encap(&self, len: u32, _outer6: bool, _udp: bool) -> bool {
        self.grow_front(len)
    }

    #[inline(always)]
    fn resize(&self, from: usize, to: usize) -> bool {
        // SAFETY: plain helper call on this program's context.
        unsafe { bpf_xdp_adjust_tail(self.ctx, to as i32 - from as i32) == 0 }
    }

    #[inline(always)]
    fn tail_call(&self, index: u32) {
        // SAFETY: this is an XDP context and PROGS holds only XDP programs.
        unsafe { maps::PROGS.tail_call(self, index) };
    }

    #[inline(always)]
    fn replace_l4_word(&self, at: usize, check_at: usize, new: [u8; 2]) -> bool {
        let (Some(at), Some(check_at)) = (
            ptr_at::<[u8; 2]>(self, at),
            ptr_at::<[u8; 2]>(self, check_at),
        ) else {
            return false;
        };
        // SAFETY: ptr_at checked both.
        unsafe {
            let old = u16::from_be_bytes(*at);
            let check = crate::icmp::csum_replace(
                u16::from_be_bytes(*check_at),
                old,
                u16::from_be_bytes(new),
            );
            *at = new;
            *check_at = check.to_be_bytes();
        }
        true
    }
}

/// The raw `__sk_buff` of a TC context.
#[inline(always)]
fn skb(ctx: &TcContext) -> *mut aya_ebpf::bindings::__sk_buff {
    ctx.skb.skb
}

impl Ctx for TcContext {
    const SKB: bool = true;

    #[inline(always)]
    fn data(&self) -> usize {
        TcContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        TcContext::data_end(self)
    }

    #[inline(always)]
    fn len(&self) -> usize {
        TcContext::len(self) as usize
    }

    #[inline(always)]
    fn ingress_ifindex(&self) -> u32 {
        // SAFETY: a field of this program's context.
        unsafe { (*skb(self)).ingress_ifindex }
    }

    #[inline(always)]
    fn gso_size(&self) -> u32 {
        // SAFETY: a field of this program's context.
        unsafe { (*skb(self)).gso_size }
    }

    #[inline(always)]
    fn fib_len(&self, ip_len: u16) -> u16 {
        if self.gso_size() != 0 { 0 } else { ip_len }
    }

    #[inline(always)]
    fn redirect(&self, ifindex: u32) -> u32 {
        // SAFETY: plain helper call; it returns TC_ACT_REDIRECT or TC_ACT_SHOT.
        if unsafe { bpf_redirect(ifindex, 0) } == i64::from(TC_ACT_REDIRECT) {
            xdp_action::XDP_REDIRECT
        } else {
            xdp_action::XDP_ABORTED
        }
    }

    #[inline(always)]
    fn grow_front(&self, len: u32) -> bool {
        // `bpf_skb_change_head` pushes bytes at the very front, as XDP's head
        // adjustment does (for a packet that is not GSO).
        // SAFETY: plain helper call on this program's context.
        unsafe { bpf_skb_change_head(skb(self), len, 0) == 0 }
    }

    #[inline(always)]
    fn grow_for_encap(&self, len: u32, outer6: bool, udp: bool) -> bool {
        if self.gso_size() == 0 {
            return self.grow_front(len);
        }
        grow_encap_room(self, len, outer6, udp)
    }

    #[inline(always)]
    fn resize(&self, _from: usize, to: usize) -> bool {
        // SAFETY: plain helper call on this program's context.
        unsafe { bpf_skb_change_tail(skb(self), to as u32, 0) == 0 }
    }

    #[inline(always)]
    fn tail_call(&self, index: u32) {
        // SAFETY: this is a TC context and TC_PROGS holds only TC programs.
        unsafe { maps::TC_PROGS.tail_call(self, index) };
    }

    #[inline(always)]
    fn replace_l4_word(&self, at: usize, check_at: usize, new: [u8; 2]) -> bool {
        let Some(word) = ptr_at::<[u8; 2]>(self, at) else {
            return false;
        };
        // The helper knows whether the field holds a full checksum (update it) or a
        // CHECKSUM_PARTIAL seed (leave it: the word is not in the pseudo header).
        // SAFETY: ptr_at checked the word; the helper checks `check_at` itself.
        unsafe {
            let old = u16::from_ne_bytes(*word);
            *word = new;
            bpf_l4_csum_replace(
                skb(self),
                check_at as u32,
                u64::from(old),
                u64::from(u16::from_ne_bytes(new)),
                2,
            ) == 0
        }
    }
}

/// Grows an skb by `len` bytes for an outer header of `outer6` family (with a UDP
/// header for `udp`) with `bpf_skb_adjust_room`'s ENCAP flags, leaving the layout
/// [`Ctx::grow_front`] leaves: the kernel then knows the packet is a tunnel, so a GSO
/// packet's segments get the outer header and a `CHECKSUM_PARTIAL` one (a local
/// socket's) has its inner checksum finished on transmit, where it points.
#[inline(always)]
pub fn grow_encap_room(ctx: &TcContext, len: u32, outer6: bool, udp: bool) -> bool {
    let mut flags = if outer6 {
        BPF_F_ADJ_ROOM_ENCAP_L3_IPV6
    } else {
        BPF_F_ADJ_ROOM_ENCAP_L3_IPV4
    };
    if udp {
        flags |= BPF_F_ADJ_ROOM_ENCAP_L4_UDP;
    }
    // Room after the 14-byte link header, the GSO type and inner headers set, the
    // segment size lowered by `len` so each segment leaves as big as it came. Then
    // the link header is copied to just before the old frame's rest, so the layout
    // is the one `grow_front` leaves (the old frame at `len`; `len` >= 20 > 14).
    // SAFETY: plain helper call on this program's context.
    if unsafe { bpf_skb_adjust_room(skb(ctx), len as i32, BPF_ADJ_ROOM_MAC, u64::from(flags)) } != 0
    {
        return false;
    }
    let (Some(front), Some(back)) = (
        ptr_at::<[u8; 14]>(ctx, 0),
        ptr_at::<[u8; 14]>(ctx, len as usize),
    ) else {
        return false;
    };
    // Word-sized copies: a 14-byte array copy would go byte by byte.
    // SAFETY: both ranges checked; they do not overlap.
    unsafe {
        let (from, to) = (front.cast::<u8>(), back.cast::<u8>());
        to.cast::<u64>()
            .write_unaligned(from.cast::<u64>().read_unaligned());
        to.add(8)
            .cast::<u32>()
            .write_unaligned(from.add(8).cast::<u32>().read_unaligned());
        to.add(12)
            .cast::<u16>()
            .write_unaligned(from.add(12).cast::<u16>().read_unaligned());
    }
    true
}

/// Linear bytes `lb_tc` wants before parsing: link header with a VLAN tag, IPv6,
/// and the longest thing read after it (an ICMPv6 error quoting IPv6 and 8 bytes).
const PULL_LEN: u32 = 18 + 40 + 8 + 40 + 8;

/// Makes the headers directly readable: an skb's linear part may end before them.
#[inline(always)]
pub fn pull_headers(ctx: &TcContext) {
    let want = TcContext::len(ctx).min(PULL_LEN);
    if ((TcContext::data_end(ctx) - TcContext::data(ctx)) as u32) < want {
        // SAFETY: plain helper call; on failure the parser finds the packet short.
        unsafe { bpf_skb_pull_data(skb(ctx), want) };
    }
}

/// Maps a verdict's XDP action to TC's (module doc); `XDP_TX` redirects here.
#[inline(always)]
pub fn tc_action(ctx: &TcContext, action: u32) -> i32 {
    match action {
        xdp_action::XDP_PASS => TC_ACT_OK,
        xdp_action::XDP_TX => {
            if Ctx::redirect(ctx, Ctx::ingress_ifindex(ctx)) == xdp_action::XDP_REDIRECT {
                TC_ACT_REDIRECT
            } else {
                TC_ACT_SHOT
            }
        }
        xdp_action::XDP_REDIRECT => TC_ACT_REDIRECT,
        _ => TC_ACT_SHOT,
    }
}
