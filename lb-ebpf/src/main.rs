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
mod icmp;
mod lookup;
mod maps;
mod parse;
mod stats;

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use lb_common::{Counter, ForwardingMode};
use parse::Kind;

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

    /// Send the (rewritten) packet on with `action`.
    pub const fn forward(action: u32, reason: Counter) -> Self {
        Self { action, reason }
    }

    /// Whether the packet leaves towards a backend.
    pub const fn forwarded(&self) -> bool {
        matches!(
            self.reason,
            Counter::Tx | Counter::Redirect | Counter::TxIcmpError
        )
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
    let pkt = match parse::packet(ctx) {
        Ok(pkt) => pkt,
        Err(verdict) => return verdict,
    };
    if let Kind::Echo { l3, l4 } = pkt.kind {
        return if lookup::answers_echo(&pkt.key.dst) {
            icmp::echo_reply(ctx, &pkt, l3, l4)
        } else {
            Verdict::pass(Counter::PassNotVip)
        };
    }
    let Some(vip) = lookup::vip(&pkt.key) else {
        return Verdict::pass(Counter::PassNotVip);
    };
    if vip.mode == ForwardingMode::L7 as u32 {
        return Verdict::pass(Counter::PassL7);
    }
    let choice = if pkt.kind == Kind::IcmpError {
        lookup::owner(vip, &pkt.key)
    } else {
        lookup::backend(vip, &pkt.key)
    };
    let Some(choice) = choice else {
        return Verdict::drop(Counter::DropNoBackend);
    };
    let mut verdict = forward::to_backend(ctx, &pkt, choice.backend_id, choice.backend);
    if pkt.kind == Kind::IcmpError && verdict.forwarded() {
        verdict.reason = Counter::TxIcmpError;
    }
    if verdict.forwarded() {
        let bytes = (ctx.data_end() - ctx.data()) as u64;
        stats::count_forwarded(vip.service_id, choice.backend_id, bytes, choice.new_flow);
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
