//! Debug records for the log build of the object (feature `log`: `cargo xtask
//! build-ebpf --log`, lb-dataplane's `object-log`), written with aya-log into its
//! `AYA_LOGS` ring buffer and relayed by the data plane to userspace's `log` crate.
//!
//! Contract: without the feature [`if_log!`] expands to nothing, its body not even
//! parsed, so the default object has the same instructions as one without any log
//! statement, and none of the log build's maps (`AYA_LOGS`, `AYA_LOG_LEVEL`,
//! `LB_LOG_NOTE`, `LB_LOG_PROGS`; `tests/tests/xdp_log.rs` checks). Log statements go
//! inside `if_log! { … }` and use only values the program computes anyway.
//!
//! Why records are written by a program of their own: a record is written by a call
//! (aya-log's macros make closures LLVM keeps out of line), and a call's frame adds to
//! its caller's: `lb_xdp` and `lb_nat` already use 480 of the 512 bytes the verifier
//! allows a call chain, so the log build of either is rejected ("combined stack size").
//! Instead the hot programs only note the packet's decisions in a per-CPU map
//! ([`LOG_NOTE`]) and end with a tail call into `lb_log`, which starts on a fresh
//! stack, writes the records and returns the verdict. Without `lb_log` installed
//! the tail call fails and the packet goes on unlogged.
//!
//! Levels: `warn` for a resource that ran out (nat ports, the nat table), `debug` for
//! per-packet decisions (a drop and its reason, a new flow and its backend). Records
//! above the level the loader sets in `AYA_LOG_LEVEL` (lb-dataplane sets the `log`
//! crate's maximum) are not written at all. A full ring buffer drops records, never
//! packets.

/// The statements inside, in the log build only.
#[cfg(feature = "log")]
macro_rules! if_log {
    ($($body:tt)*) => {
        $($body)*
    };
}

/// The statements inside, in the log build only.
#[cfg(not(feature = "log"))]
macro_rules! if_log {
    ($($body:tt)*) => {};
}

#[cfg(feature = "log")]
pub use records::*;

#[cfg(feature = "log")]
mod records {
    use aya_ebpf::{
        EbpfContext,
        bindings::{TC_ACT_SHOT, xdp_action},
        macros::{classifier, map, xdp},
        maps::{PerCpuArray, ProgramArray},
        programs::{TcContext, XdpContext},
    };
    use aya_log_ebpf::{debug, warn};
    use lb_common::Addr;
    use lb_common::{Backend, Counter, FlowKey};

    use crate::{Verdict, ctx::Ctx, lookup::NoChoice};

    /// What the packet on this CPU did that `lb_log` should write down.
    #[repr(C)]
    pub struct Note {
        /// `NOTE_*` bits: which records to write besides the verdict's.
        what: u32,
        /// The verdict in the hook's own terms: `lb_log` returns it.
        action: u32,
        reason: Counter,
        backend_id: u32,
        /// The flow (client → VIP) of a `NOTE_NEW_FLOW` or `NOTE_NAT_*`.
        key: FlowKey,
        /// The backend's address, for `NOTE_NEW_FLOW`.
        backend: Addr,
    }

    /// A new flow was given a backend.
    const NOTE_NEW_FLOW: u32 = 1;
    /// A `nat` flow found no free source port.
    const NOTE_NAT_NO_PORT: u32 = 2;
    /// A `nat` flow found the nat maps full.
    const NOTE_NAT_TABLE_FULL: u32 = 4;
    /// The packet was dropped.
    const NOTE_DROP: u32 = 8;

    /// This CPU's packet's notes, from its first program to `lb_log`.
    #[map(name = "LB_LOG_NOTE")]
    pub static LOG_NOTE: PerCpuArray<Note> = PerCpuArray::with_max_entries(1, 0);

    /// `lb_log` at index 0, installed by the data plane when it loads a log build.
    #[map(name = "LB_LOG_PROGS")]
    pub static LOG_PROGS: ProgramArray = ProgramArray::with_max_entries(1, 0);

    /// `lb_tc_log` at index 0: [`LOG_PROGS`] of the TC programs.
    #[map(name = "LB_TC_LOG_PROGS")]
    pub static TC_LOG_PROGS: ProgramArray = ProgramArray::with_max_entries(1, 0);

    #[inline(always)]
    fn note() -> Option<*mut Note> {
        LOG_NOTE.get_ptr_mut(0)
    }

    /// A new flow and the backend the service's table gave it.
    #[inline(always)]
    pub fn new_flow(key: &FlowKey, backend_id: u32, backend: &Backend) {
        if let Some(note) = note() {
            // SAFETY: this CPU's slot; nothing else runs on it during this packet.
            unsafe {
                (*note).what |= NOTE_NEW_FLOW;
                (*note).key = *key;
                (*note).backend_id = backend_id;
                (*note).backend = backend.addr;
            }
        }
    }

    /// A `nat` flow that could not be made because a resource ran out; other reasons
    /// are per-packet drops, which the verdict's record tells.
    #[inline(always)]
    pub fn nat_refused(key: &FlowKey, why: &NoChoice) {
        let what = match why {
            NoChoice::NatPortsExhausted => NOTE_NAT_NO_PORT,
            NoChoice::NatTableFull => NOTE_NAT_TABLE_FULL,
            NoChoice::NoBackend | NoChoice::NatNoFlow => return,
        };
        if let Some(note) = note() {
            // SAFETY: as in `new_flow`.
            unsafe {
                (*note).what |= what;
                (*note).key = *key;
            }
        }
    }

    /// Ends the packet's program in the hook's `lb_log` with its verdict, `action`
    /// in the hook's terms. Returns only if the tail call fails (no `lb_log`
    /// installed); then the notes are forgotten.
    #[inline(always)]
    pub fn hand_over<C: Ctx>(ctx: &C, verdict: Verdict, action: u32) {
        let Some(note) = note() else {
            return;
        };
        // SAFETY: as in `new_flow`; each log array holds programs of its hook's type.
        unsafe {
            (*note).action = action;
            (*note).reason = verdict.reason;
            if verdict.action == xdp_action::XDP_DROP {
                (*note).what |= NOTE_DROP;
            }
            if C::SKB {
                TC_LOG_PROGS.tail_call(ctx, 0);
            } else {
                LOG_PROGS.tail_call(ctx, 0);
            }
            (*note).what = 0;
        }
    }

    /// Writes the records of the packet `hand_over` noted, and returns its verdict.
    #[xdp]
    pub fn lb_log(ctx: XdpContext) -> u32 {
        write(&ctx).unwrap_or(xdp_action::XDP_ABORTED)
    }

    /// `lb_log` of the TC programs.
    #[classifier]
    pub fn lb_tc_log(ctx: TcContext) -> i32 {
        write(&ctx).map_or(TC_ACT_SHOT, |action| action as i32)
    }

    /// The records of the noted packet; its verdict.
    #[inline(always)]
    fn write(ctx: &impl EbpfContext) -> Option<u32> {
        let note = note()?;
        // SAFETY: as in `new_flow`.
        let note = unsafe { &mut *note };
        let key = &note.key;
        let (src_port, dst_port) = (u16::from_be(key.src_port_be), u16::from_be(key.dst_port_be));
        if note.what & NOTE_NEW_FLOW != 0 {
            debug!(
                ctx,
                "new flow {:i}:{} -> {:i}:{} proto {}: backend {} {:i}",
                key.src.octets(),
                src_port,
                key.dst.octets(),
                dst_port,
                key.proto,
                note.backend_id,
                note.backend.octets()
            );
        }
        if note.what & (NOTE_NAT_NO_PORT | NOTE_NAT_TABLE_FULL) != 0 {
            let what = if note.what & NOTE_NAT_NO_PORT != 0 {
                "no free nat port"
            } else {
                "nat table full"
            };
            warn!(
                ctx,
                "{} for {:i}:{} -> {:i}:{} proto {}",
                what,
                key.src.octets(),
                src_port,
                key.dst.octets(),
                dst_port,
                key.proto
            );
        }
        if note.what & NOTE_DROP != 0 {
            debug!(ctx, "drop: {}", note.reason.name());
        }
        note.what = 0;
        Some(note.action)
    }
}
