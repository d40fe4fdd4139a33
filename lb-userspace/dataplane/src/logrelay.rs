//! The relay of a log build's records (lb-ebpf's feature `log`) to the `log` crate.
//!
//! A log build's programs end in `lb_log` (a tail call through `LB_LOG_PROGS`, which
//! the relay fills), and `lb_log` writes aya-log records into the `AYA_LOGS` ring
//! buffer (see lb-ebpf's `log.rs` for why a program of its own). aya-log 0.3
//! runs nothing by itself: its `EbpfLogger` is that ring buffer's descriptor, readable
//! while records wait, and a `flush` that formats every waiting record and hands it to
//! a [`log::Log`]. The relay is a thread blocked in poll(2) on that descriptor and on
//! the read end of a pipe whose write end [`LogRelay`] holds: dropping the relay
//! closes the pipe, the thread drains what is left and ends, and the drop joins it.
//! So the relay lives exactly as long as the data plane that owns it, and needs no
//! async runtime.
//!
//! Records carry the eBPF module as their target (`lb_ebpf::log::records`), so
//! `RUST_LOG=lb_ebpf=debug` selects them. aya-log panics on a record it cannot parse;
//! only `lb_log` writes the ring buffer, so that would be a bug of ours, and it ends
//! the relay (logged when the data plane drops it), not lbd.

use std::{os::fd::OwnedFd, thread::JoinHandle};

use aya::{
    Ebpf,
    maps::{MapData, ProgramArray},
    programs::{SchedClassifier, Xdp},
};
use aya_log::EbpfLogger;
use lb_model::dataplane::DataplaneError;
use rustix::event::{PollFd, PollFlags, poll};

/// The ring buffer a log build writes its records to.
pub const LOG_MAP: &str = "AYA_LOGS";

/// The program of a log build that writes the records.
pub const LOG_PROGRAM: &str = "lb_log";

/// The log build's tail-call slot for [`LOG_PROGRAM`].
pub const LOG_PROGS: &str = "LB_LOG_PROGS";

/// [`LOG_PROGRAM`] of the TC programs (`node.hook = "tc"`).
pub const TC_LOG_PROGRAM: &str = "lb_tc_log";

/// The tail-call slot for [`TC_LOG_PROGRAM`].
pub const TC_LOG_PROGS: &str = "LB_TC_LOG_PROGS";

/// The log build's per-CPU notes of a packet's decisions, read by [`LOG_PROGRAM`].
pub const LOG_NOTE: &str = "LB_LOG_NOTE";

/// The global of a log build holding the most verbose level it writes.
pub const LOG_LEVEL: &str = aya_log::LEVEL;

/// The level a log build should write up to: the `log` crate's maximum, so records
/// the logger would discard are not even written (lb-ebpf levels are aya-log's, which
/// number like `log::LevelFilter`: 0 off … 5 trace).
#[must_use]
pub(crate) fn ebpf_level() -> u8 {
    u8::try_from(log::max_level() as usize).unwrap_or(u8::MAX)
}

/// A running relay; stops (after relaying what is left) when dropped.
pub(crate) struct LogRelay {
    /// Closing it wakes the thread to stop.
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    /// Holds `lb_log` in its slot while the data plane runs.
    _progs: ProgramArray<MapData>,
}

impl LogRelay {
    /// Takes the log ring buffer of a loaded (not necessarily attached) object,
    /// installs `lb_log` and relays the records to `logger`; `None` if the object has
    /// no log map (the default build). Start it before loading the other programs:
    /// whatever refers to the ring buffer needs its descriptor, which the relay holds.
    ///
    /// # Errors
    /// The map is not a ring buffer, `lb_log` or its slot is missing or does not load,
    /// or no pipe or thread could be made.
    pub(crate) fn start(
        ebpf: &mut Ebpf,
        logger: &'static dyn log::Log,
        hook: lb_model::config::Hook,
    ) -> Result<Option<Self>, DataplaneError> {
        if ebpf.map(LOG_MAP).is_none() {
            return Ok(None);
        }
        let failed = |action: &str, source: Box<dyn std::error::Error + Send + Sync>| {
            DataplaneError::Program {
                action: action.into(),
                source,
            }
        };
        let logger = EbpfLogger::init_with_logger(ebpf, logger)
            .map_err(|e| failed("opening the BPF log ring buffer", Box::new(e)))?;
        let tc = hook == lb_model::config::Hook::Tc;
        let (slot, name) = if tc {
            (TC_LOG_PROGS, TC_LOG_PROGRAM)
        } else {
            (LOG_PROGS, LOG_PROGRAM)
        };
        let progs = ebpf.take_map(slot).ok_or(DataplaneError::Missing {
            what: "map",
            name: slot,
        })?;
        let mut progs = ProgramArray::try_from(progs)
            .map_err(|e| failed("opening the log program's slot", Box::new(e)))?;
        let prog = ebpf.program_mut(name).ok_or(DataplaneError::Missing {
            what: "program",
            name,
        })?;
        let loaded = if tc {
            let prog: &mut SchedClassifier = prog
                .try_into()
                .map_err(|e| failed("lb_tc_log is not a TC classifier", Box::new(e)))?;
            prog.load()
                .and_then(|()| prog.fd().map(|fd| fd.try_clone()))
        } else {
            let prog: &mut Xdp = prog
                .try_into()
                .map_err(|e| failed("lb_log is not XDP", Box::new(e)))?;
            prog.load()
                .and_then(|()| prog.fd().map(|fd| fd.try_clone()))
        };
        let fd = loaded
            .map_err(|e| failed("loading the log program", Box::new(e)))?
            .map_err(|e| failed("duplicating the log program's descriptor", Box::new(e)))?;
        progs
            .set(0, &fd, 0)
            .map_err(|e| failed("installing the log program", Box::new(e)))?;
        let (wake, stop) =
            pipe().map_err(|e| failed("making the log relay's pipe", Box::new(e)))?;
        let thread = std::thread::Builder::new()
            .name("bpf-log".into())
            .spawn(move || relay(logger, &wake))
            .map_err(|e| failed("starting the log relay thread", Box::new(e)))?;
        Ok(Some(Self {
            stop: Some(stop),
            thread: Some(thread),
            _progs: progs,
        }))
    }
}

impl Drop for LogRelay {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(
                "the BPF log relay panicked; the data plane runs on without its records"
            );
        }
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Relays records until the write end of `wake` is closed, then once more.
fn relay(mut logger: EbpfLogger<&'static dyn log::Log>, wake: &OwnedFd) {
    loop {
        let mut fds = [
            PollFd::new(&logger, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        if let Err(err) = poll(&mut fds, None) {
            if err == rustix::io::Errno::INTR {
                continue;
            }
            tracing::error!(error = %err, "the BPF log relay stops: poll failed; the data plane runs on without its records");
            return;
        }
        let woken = !fds[1].revents().is_empty();
        logger.flush();
        if woken {
            return;
        }
    }
}
