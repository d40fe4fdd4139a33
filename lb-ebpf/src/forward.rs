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
use lb_common::{Backend, Counter, maps::BACKEND_F_IPV6};

use crate::{Verdict, parse::Packet};

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

#[inline(always)]
fn words(addr: &[u8; 16]) -> [u32; 4] {
    [
        u32::from_ne_bytes([addr[0], addr[1], addr[2], addr[3]]),
        u32::from_ne_bytes([addr[4], addr[5], addr[6], addr[7]]),
        u32::from_ne_bytes([addr[8], addr[9], addr[10], addr[11]]),
        u32::from_ne_bytes([addr[12], addr[13], addr[14], addr[15]]),
    ]
}

/// Sends the packet, unchanged above layer 2, towards `backend`.
///
/// The next hop is a forwarding lookup as the kernel would do for a packet arriving on
/// the ingress interface (so the egress may be another interface), which needs
/// forwarding enabled on the ingress interface (`bpf_fib_lookup` checks it; the agent
/// sets it). A backend whose neighbour entry is unresolved sends this packet to the
/// stack once (the agent keeps backend neighbours "managed", so the kernel resolves
/// them on its own). DSR cannot change the address family: a backend of the other
/// family has no route.
#[inline(always)]
pub fn to_backend(ctx: &XdpContext, pkt: &Packet, backend: &Backend) -> Verdict {
    if (backend.flags & BACKEND_F_IPV6 != 0) != pkt.ipv6 {
        return Verdict::drop(Counter::DropNoRoute);
    }
    let ingress = ctx.ingress_ifindex() as u32;
    // SAFETY: an all-zero bpf_fib_lookup is a valid value of a plain C struct.
    let mut fib: FibParams = unsafe { core::mem::zeroed() };
    fib.l4_protocol = pkt.key.proto;
    fib.__bindgen_anon_1.tot_len = pkt.ip_len;
    fib.ifindex = ingress;
    if pkt.ipv6 {
        fib.family = AF_INET6;
        fib.__bindgen_anon_3.ipv6_src = words(&pkt.key.src);
        fib.__bindgen_anon_4.ipv6_dst = words(&backend.addr);
    } else {
        fib.family = AF_INET;
        fib.__bindgen_anon_3.ipv4_src = words(&pkt.key.src)[3];
        fib.__bindgen_anon_4.ipv4_dst = words(&backend.addr)[3];
    }
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
        Verdict::forward(xdp_action::XDP_TX, Counter::Tx)
    } else {
        // SAFETY: plain helper call; it returns XDP_REDIRECT or XDP_ABORTED.
        let action = unsafe { bpf_redirect(fib.ifindex, 0) } as u32;
        Verdict::forward(action, Counter::Redirect)
    }
}
