//! The ingress programs: `lb_xdp` on the XDP hook and its twin `lb_tc` on TC ingress
//! (`node.hook = "tc"`), the same steering on either context (`ctx`), each with its
//! own tail-call programs (a program array holds one program type); `lb_probe` on TC
//! egress, sending the node's health probes of tunnel services through the tunnel;
//! and, for backends, the TC program `lb_decap`.
//!
//! Reads top to bottom: `maps` (every map) → `parse` (headers, bounds-checked) →
//! `lookup` (VIP, backend) → `forward` (FIB lookup, MAC rewrite, transmit) → the verdict
//! here, with `stats` counting exactly one reason per packet. `log` is the log build's
//! (feature `log`): decisions noted on the way, records written by `lb_log`, to which
//! every program then hands its verdict; without the feature it is nothing.
//!
//! Contract: a packet that is not TCP/UDP to a configured VIP leaves with `XDP_PASS`
//! and its bytes untouched; a truncated or inconsistent packet is never forwarded.
#![no_std]
#![feature(asm_experimental_arch)]
#![no_main]

#[macro_use]
mod log;

mod csum;
mod ctx;
mod decap;
mod flowcache;
mod forward;
mod halfopen;
mod icmp;
mod lookup;
mod maps;
mod mem;
mod nat;
mod parse;
mod probe;
mod stats;
mod tunnel;

use aya_ebpf::{
    bindings::xdp_action,
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};
use ctx::Ctx;
use lb_common::{Counter, ForwardingMode, Sent, maps::VipInfo};
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

    /// Counts a packet that was sent on as `what` (an ICMP error, a NAT reply) under
    /// the counter of `what` for the action it was sent with (`XDP_TX` or
    /// `XDP_REDIRECT`); a verdict that did not send it keeps its own.
    pub const fn forwarded_as(self, what: Sent) -> Self {
        Self {
            action: self.action,
            reason: self.reason.sent_as(what),
        }
    }

    /// The verdict as one integer (see `tunnel::too_big`).
    pub const fn pack(self) -> u64 {
        self.action as u64 | ((self.reason as u64) << 32)
    }

    /// The verdict [`Verdict::pack`] made `bits` of.
    pub const fn unpack(bits: u64) -> Self {
        Self {
            action: bits as u32,
            // SAFETY: the upper half is a `Counter`, as `pack` wrote it.
            reason: unsafe { core::mem::transmute::<u32, Counter>((bits >> 32) as u32) },
        }
    }

    /// Whether the packet leaves towards a backend.
    pub const fn forwarded(&self) -> bool {
        matches!(
            self.reason,
            Counter::Tx
                | Counter::Redirect
                | Counter::TxIcmpError
                | Counter::RedirectIcmpError
                | Counter::TxIpip
                | Counter::RedirectIpip
                | Counter::TxGue
                | Counter::RedirectGue
        )
    }
}

/// Counts exactly one verdict-and-reason counter per packet; userspace derives the
/// packet count as their sum (one per-CPU map update per packet saved).
#[xdp]
pub fn lb_xdp(ctx: XdpContext) -> u32 {
    let verdict = steer(&ctx);
    stats::count(verdict.reason);
    if_log! { log::hand_over(&ctx, verdict, verdict.action); }
    verdict.action
}

/// `lb_xdp` on TC ingress: the same steering, maps and counters; the verdict mapped to
/// TC's (see `ctx.rs`).
#[classifier]
pub fn lb_tc(ctx: TcContext) -> i32 {
    ctx::pull_headers(&ctx);
    let verdict = steer(&ctx);
    tc_end(&ctx, verdict)
}

/// Counts a TC program's verdict and maps it to TC's.
#[inline(always)]
fn tc_end(ctx: &TcContext, verdict: Verdict) -> i32 {
    stats::count(verdict.reason);
    let action = ctx::tc_action(ctx, verdict.action);
    if_log! { log::hand_over(ctx, verdict, action as u32); }
    action
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
fn steer(ctx: &impl Ctx) -> Verdict {
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
    let vip = if lookup::may_be_vip(&pkt.key.dst) {
        lookup::vip(&pkt.key)
    } else {
        None
    };
    let Some(vip) = vip else {
        if pkt.kind == Kind::Flow && nat::is_nat_addr(&pkt.key.dst, pkt.ipv6) {
            return nat::hand_over(ctx, &pkt, None);
        }
        return Verdict::pass(Counter::PassNotVip);
    };
    if vip.mode == ForwardingMode::Nat as u32 {
        return match pkt.kind {
            Kind::IcmpError => tail_call(ctx, maps::PROG_NAT_ICMP),
            _ => nat::hand_over(ctx, &pkt, Some(vip)),
        };
    }
    if vip.mode == ForwardingMode::L7 as u32 {
        return Verdict::pass(Counter::PassL7);
    }
    let now = forward::now();
    let choice = if pkt.kind == Kind::IcmpError {
        lookup::owner(vip, &pkt.key).ok_or(lookup::NoChoice::NoBackend)
    } else {
        lookup::dsr(vip, &pkt.key, pkt.may_open(), now)
    };
    let choice = match choice {
        Ok(choice) => choice,
        Err(why) => return no_choice(why),
    };
    let gue = vip.mode == ForwardingMode::Gue as u32;
    let mut verdict = if gue || vip.mode == ForwardingMode::Ipip as u32 {
        tunnel::to_backend(ctx, &pkt, choice.backend_id, choice.backend, gue, now)
    } else {
        forward::to_backend(ctx, &pkt, choice.backend_id, choice.backend, now)
    };
    if pkt.kind == Kind::IcmpError {
        // An encapsulated error keeps its tunnel's counter (`Counter::sent_as`).
        verdict = verdict.forwarded_as(Sent::IcmpError);
    }
    count_forwarded(ctx, &pkt, vip, &choice, verdict)
}

/// Counts a forwarded packet for its VIP and backend (and logs a new flow in the log
/// build); `verdict` is returned as it is.
#[inline(always)]
#[cfg_attr(
    not(feature = "log"),
    expect(
        unused_variables,
        reason = "the packet is read only by the log build's record"
    )
)]
fn count_forwarded(
    ctx: &impl Ctx,
    pkt: &parse::Packet,
    vip: &VipInfo,
    choice: &lookup::Choice,
    verdict: Verdict,
) -> Verdict {
    if verdict.forwarded() {
        let bytes = (ctx.data_end() - ctx.data()) as u64;
        stats::count_forwarded(vip.service_id, choice.backend_id, bytes, choice.new_flow);
        if_log! {
            if choice.new_flow {
                log::new_flow(&pkt.key, choice.backend_id, choice.backend);
            }
        }
    }
    verdict
}

/// The verdict for a packet no backend could be chosen for.
#[inline(always)]
fn no_choice(why: lookup::NoChoice) -> Verdict {
    Verdict::drop(match why {
        lookup::NoChoice::NoBackend => Counter::DropNoBackend,
        lookup::NoChoice::NatPortsExhausted => Counter::DropNatPortsExhausted,
        lookup::NoChoice::NatTableFull => Counter::DropNatTableFull,
        lookup::NoChoice::NatNoFlow => Counter::DropNatNoFlow,
    })
}

#[inline(always)]
fn tail_call(ctx: &impl Ctx, index: u32) -> Verdict {
    ctx.tail_call(index);
    Verdict::drop(Counter::DropNatUnavailable)
}

/// `ipip` and `gue` packets, reached by tail call from the `lb_xdp` of the release
/// before this one, which handed the encapsulation to a program of its own: kept so
/// that its tunnelled flows go on in the instant of an upgrade, while it still runs
/// beside this release's tail-call programs. This release's `lb_xdp` encapsulates
/// itself (a tail call cost ~0.15 of the tunnelled packet's time).
#[xdp]
pub fn lb_tunnel(ctx: XdpContext) -> u32 {
    let verdict = tunnel::steer(&ctx);
    stats::count(verdict.reason);
    if_log! { log::hand_over(&ctx, verdict, verdict.action); }
    verdict.action
}

/// `lb_tunnel` of `lb_tc`.
#[classifier]
pub fn lb_tc_tunnel(ctx: TcContext) -> i32 {
    let verdict = tunnel::steer(&ctx);
    tc_end(&ctx, verdict)
}

/// `nat` mode ICMP errors about the node's translated replies, reached by tail call
/// from `lb_xdp`: translated to be about the backend's own packet and sent to it.
#[xdp]
pub fn lb_nat_icmp(ctx: XdpContext) -> u32 {
    let verdict = steer_nat_icmp(&ctx);
    stats::count(verdict.reason);
    if_log! { log::hand_over(&ctx, verdict, verdict.action); }
    verdict.action
}

/// `lb_nat_icmp` of `lb_tc`.
#[classifier]
pub fn lb_tc_nat_icmp(ctx: TcContext) -> i32 {
    let verdict = steer_nat_icmp(&ctx);
    tc_end(&ctx, verdict)
}

#[inline(always)]
fn steer_nat_icmp(ctx: &impl Ctx) -> Verdict {
    let pkt = match parse::packet(ctx) {
        Ok(pkt) if pkt.kind == Kind::IcmpError => pkt,
        Ok(_) => return Verdict::pass(Counter::PassNotVip),
        Err(verdict) => return verdict,
    };
    // SAFETY: plain data replaced whole by updates.
    #[expect(
        clippy::needless_borrows_for_generic_args,
        reason = "passing the key by value would copy it onto the stack"
    )]
    let Some(entry) = (unsafe { maps::NAT_FLOWS.get(&pkt.key) }) else {
        // Not a flow we know: nobody to tell.
        return Verdict::pass(Counter::PassNotVip);
    };
    let backend_id = entry.backend_id;
    let nat_port_be = entry.nat_port_be;
    let Some(backend) = maps::BACKENDS.get(backend_id) else {
        return Verdict::drop(Counter::DropNoBackend);
    };
    let Some(nat) = nat::nat_addr_of(pkt.ipv6) else {
        return Verdict::drop(Counter::DropNatUnavailable);
    };
    if !icmp::nat_translate(ctx, &pkt, backend, &nat, nat_port_be) {
        return Verdict::drop(Counter::DropMalformed);
    }
    forward::to_backend(ctx, &pkt, backend_id, backend, forward::now())
        .forwarded_as(Sent::IcmpError)
}

/// `nat` flows, reached by tail call from `lb_xdp` with the packet as it parsed it and
/// the VIP it found (`nat::hand_over`): towards the backend with source NAT, or a
/// reply translated back.
#[xdp]
pub fn lb_nat(ctx: XdpContext) -> u32 {
    let verdict = steer_nat(&ctx);
    stats::count(verdict.reason);
    if_log! { log::hand_over(&ctx, verdict, verdict.action); }
    verdict.action
}

/// `lb_nat` of `lb_tc`.
#[classifier]
pub fn lb_tc_nat(ctx: TcContext) -> i32 {
    let verdict = steer_nat(&ctx);
    tc_end(&ctx, verdict)
}

#[inline(always)]
fn steer_nat(ctx: &impl Ctx) -> Verdict {
    let (mut pkt, vip) = match nat::take_job(ctx) {
        Some(job) => job,
        // Not handed over (see `parse::describes`): an `lb_xdp` of a release before
        // the hand-over, in the instant of an upgrade. Dropped and counted, never
        // translated with another packet's addresses; parsing here instead would cost
        // every packet ~12 ns in this program's code.
        None => return Verdict::drop(Counter::DropNatUnavailable),
    };
    let now = forward::now();
    let Some(vip) = vip else {
        return nat_reply(ctx, &mut pkt, now);
    };
    let choice = match nat::flow(vip, &pkt, now) {
        Ok(choice) => choice,
        Err(why) => {
            if_log! { log::nat_refused(&pkt.key, &why); }
            return no_choice(why);
        }
    };
    if (choice.backend.flags & lb_common::maps::BACKEND_F_IPV6 != 0) != pkt.ipv6 {
        return Verdict::drop(Counter::DropNoRoute);
    }
    if let Err(verdict) = nat::to_backend(ctx, &pkt, choice.backend, choice.nat_port_be) {
        return verdict;
    }
    if !parse::refresh(ctx, &mut pkt) {
        return Verdict::drop(Counter::DropMalformed);
    }
    let verdict = forward::to_backend(ctx, &pkt, choice.backend_id, choice.backend, now);
    count_forwarded(ctx, &pkt, vip, &choice, verdict)
}

/// A packet to the NAT address: translate a reply back and send it to the client.
#[inline(always)]
fn nat_reply(ctx: &impl Ctx, pkt: &mut parse::Packet, now: u64) -> Verdict {
    let entry = match nat::reply(ctx, pkt, now) {
        Ok(entry) => entry,
        Err(verdict) => return verdict,
    };
    if !parse::refresh(ctx, pkt) {
        return Verdict::drop(Counter::DropMalformed);
    }
    forward::to_client(ctx, pkt, &entry.client, now).forwarded_as(Sent::NatReply)
}

/// The TC ingress program of backends of `ipip`/`gue` services (not of the load
/// balancer): strips the encapsulation of packets for this host's VIPs and hands the
/// inner packet to the stack (see `decap.rs`).
#[classifier]
pub fn lb_decap(ctx: TcContext) -> i32 {
    let counter = decap::steer(&ctx);
    decap::count(counter);
    decap::action(counter)
}

/// The node's TC egress program: health probes of `ipip`/`gue` services (marked by
/// lbd's probe sockets) encapsulated like client traffic; everything else passes
/// untouched (see `probe.rs`).
#[classifier]
pub fn lb_probe(ctx: TcContext) -> i32 {
    let ctx = probe::Egress(ctx);
    let (action, counter) = probe::steer(&ctx);
    probe::count(counter);
    action
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
