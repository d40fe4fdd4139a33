//! Forwarding in `dsr` mode: next hop from the kernel's FIB, MAC rewrite, transmit.

use core::mem::size_of;

use aya_ebpf::{
    EbpfContext,
    bindings::{
        BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, bpf_fib_lookup as FibParams,
        xdp_action,
    },
    helpers::{bpf_fib_lookup, bpf_redirect},
    programs::XdpContext,
};
use lb_common::Counter;

use crate::{Verdict, parse::Ipv4L4};

const AF_INET: u8 = 2;

/// Sends the packet, unchanged above layer 2, to `backend_be`.
///
/// The next hop is a forwarding lookup as the kernel would do for a packet arriving on
/// the ingress interface (so the egress may be another interface), which needs IPv4
/// forwarding enabled on the ingress interface (`bpf_fib_lookup` checks it; the agent
/// sets it). A backend whose neighbour entry is unresolved sends this packet to the
/// stack once (the agent keeps backend neighbours "managed", so the kernel resolves
/// them on its own).
#[inline(always)]
pub fn to_backend(ctx: &XdpContext, pkt: &Ipv4L4, backend_be: u32) -> Verdict {
    let ingress = ctx.ingress_ifindex() as u32;
    // SAFETY: an all-zero bpf_fib_lookup is a valid value of a plain C struct.
    let mut fib: FibParams = unsafe { core::mem::zeroed() };
    fib.family = AF_INET;
    fib.l4_protocol = pkt.proto;
    fib.__bindgen_anon_1.tot_len = pkt.tot_len;
    fib.ifindex = ingress;
    fib.__bindgen_anon_3.ipv4_src = pkt.src_be;
    fib.__bindgen_anon_4.ipv4_dst = backend_be;
    // SAFETY: ctx is the program's context and fib a properly sized stack buffer.
    let rc = unsafe { bpf_fib_lookup(ctx.as_ptr(), &mut fib, size_of::<FibParams>() as i32, 0) };
    match rc as u32 {
        BPF_FIB_LKUP_RET_SUCCESS => {}
        BPF_FIB_LKUP_RET_NO_NEIGH => return Verdict::pass(Counter::PassNoNeighbour),
        _ => return Verdict::drop(Counter::DropNoRoute),
    }
    // SAFETY: pkt.eth was bounds-checked by the parser and the packet was not resized.
    unsafe {
        (*pkt.eth).dst = fib.dmac;
        (*pkt.eth).src = fib.smac;
    }
    if fib.ifindex == ingress {
        Verdict {
            action: xdp_action::XDP_TX,
            reason: Counter::Tx,
        }
    } else {
        // SAFETY: plain helper call; it returns XDP_REDIRECT or XDP_ABORTED.
        let action = unsafe { bpf_redirect(fib.ifindex, 0) } as u32;
        Verdict {
            action,
            reason: Counter::Redirect,
        }
    }
}
