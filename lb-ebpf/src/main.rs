//! The ingress XDP program.
//!
//! Reads top to bottom: `maps` (every map) → `parse` (headers, bounds-checked) →
//! `lookup` (VIP, backend) → `forward` (FIB lookup, MAC rewrite, transmit) → the verdict
//! here, with `stats` counting exactly one reason per packet.
//!
//! Contract: a packet that is not TCP/UDP to a configured VIP leaves with `XDP_PASS`
//! and its bytes untouched; a truncated or inconsistent packet is never forwarded.
#![no_std]
#![no_main]

mod forward;
mod lookup;
mod maps;
mod parse;
mod stats;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use lb_common::Counter;

/// What happens to a packet and the counter that says why.
#[derive(Clone, Copy)]
pub struct Verdict {
    /// An `xdp_action` value.
    pub action: u32,
    /// The reason, counted once.
    pub reason: Counter,
}

impl Verdict {
    /// Let the kernel stack have the packet, untouched.
    pub const fn pass(reason: Counter) -> Self {
        Self {
            action: xdp_action::XDP_PASS,
            reason,
        }
    }

    /// Discard the packet.
    pub const fn drop(reason: Counter) -> Self {
        Self {
            action: xdp_action::XDP_DROP,
            reason,
        }
    }
}

#[xdp]
pub fn lb_xdp(ctx: XdpContext) -> u32 {
    stats::count(Counter::Packets);
    let verdict = steer(&ctx);
    stats::count(verdict.reason);
    verdict.action
}

/// Passes every packet untouched. It is the floor the per-packet benchmark measures
/// against, and the program a veth peer needs in native mode: the kernel only wakes a
/// veth's receive queue for frames sent to it by `XDP_TX` when that veth has an XDP
/// program of its own (GRO alone queues them until other traffic arrives).
#[xdp]
pub fn xdp_pass(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// Parses the packet, finds its VIP and backend, and forwards it.
#[inline(always)]
fn steer(ctx: &XdpContext) -> Verdict {
    let pkt = match parse::ipv4_l4(ctx) {
        Ok(pkt) => pkt,
        Err(verdict) => return verdict,
    };
    let Some(vip) = lookup::vip(&pkt) else {
        return Verdict::pass(Counter::PassNotVip);
    };
    let Some(backend) = lookup::backend(vip, &pkt) else {
        return Verdict::drop(Counter::DropNoBackend);
    };
    let verdict = forward::to_backend(ctx, &pkt, backend.addr_be);
    if verdict.action != xdp_action::XDP_PASS && verdict.action != xdp_action::XDP_DROP {
        stats::count_vip(vip.service_id, ctx.data_end() - ctx.data());
    }
    verdict
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// bpf_fib_lookup is a GPL-only helper; the dual licence makes the object GPL-compatible.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
