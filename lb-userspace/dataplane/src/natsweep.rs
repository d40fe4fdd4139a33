//! Releasing the NAT ports of flows that ended or idled out.
//!
//! The data plane takes over an expired port when a new flow lands on it; the ports no
//! new flow happens to need are released here, so the `nat` maps' fill says how many
//! flows are really alive and the maps never fill with dead entries. A pass walks the
//! reply map, and for every entry past its deadline deletes the flow's client side
//! (if it still refers to this port) and then the entry, re-reading it first: a flow
//! that sent a packet since the walk saw it keeps its port.
//!
//! The sweeper has its own map handles, so it runs on a thread of its own and never
//! delays the agent.

use std::sync::{Arc, atomic::Ordering};

use aya::maps::{HashMap, MapData};
use lb_common::{FlowEntry, FlowKey, NatEntry, NatState, maps::NAT_EV_RST};

use lb_model::dataplane::{DataplaneError, monotonic_ns};

use crate::maps::MapSet;

pub use lb_model::dataplane::SweepStats;

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Reply entries walked.
    pub walked: usize,
    /// Ports released.
    pub released: usize,
}

/// Releases expired `nat` entries (see the module doc).
pub struct NatSweeper {
    flows: HashMap<MapData, FlowKey, FlowEntry>,
    nat: HashMap<MapData, FlowKey, NatEntry>,
    stats: Arc<SweepStats>,
}

impl std::fmt::Debug for NatSweeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatSweeper").finish_non_exhaustive()
    }
}

impl NatSweeper {
    /// A sweeper with handles of its own to `maps`' `nat` maps.
    ///
    /// # Errors
    /// The kernel refused a new handle.
    pub fn new(maps: &MapSet) -> Result<Self, DataplaneError> {
        let (flows, nat) = maps.nat_handles()?;
        Ok(Self {
            flows,
            nat,
            stats: Arc::default(),
        })
    }

    /// The release counters (shared with whoever reports them).
    pub fn stats(&self) -> Arc<SweepStats> {
        Arc::clone(&self.stats)
    }

    /// One pass at `now_ns` (`CLOCK_MONOTONIC`).
    ///
    /// # Errors
    /// A map walk failed (deleting an entry someone else deleted is not an error).
    pub fn sweep_at(&mut self, now_ns: u64) -> Result<SweepReport, DataplaneError> {
        let mut report = SweepReport::default();
        let mut expired = Vec::new();
        for item in self.nat.iter() {
            match item {
                Ok((key, entry)) => {
                    report.walked += 1;
                    if entry.expires_ns <= now_ns {
                        expired.push(key);
                    }
                }
                Err(aya::maps::MapError::KeyNotFound) => {}
                Err(source) => {
                    return Err(DataplaneError::Map {
                        op: "iterate",
                        map: lb_common::maps::names::NAT,
                        source: Box::new(source),
                    });
                }
            }
        }
        for reply in expired {
            // Re-read: the flow may have been refreshed, or its port taken over by a
            // new flow, since the walk.
            let Ok(entry) = self.nat.get(&reply, 0) else {
                continue;
            };
            if entry.expires_ns > now_ns {
                continue;
            }
            let client = entry.client_key(reply.proto);
            if let Ok(f) = self.flows.get(&client, 0)
                && f.nat_port_be == reply.dst_port_be
                && f.backend_id == entry.backend_id
            {
                let _ = self.flows.remove(&client);
            }
            if self.nat.remove(&reply).is_ok() {
                report.released += 1;
                let counter = if entry.events & NAT_EV_RST != 0 {
                    &self.stats.rst
                } else if matches!(
                    NatState::from_u8(entry.state),
                    NatState::Closed | NatState::TimeWait
                ) {
                    &self.stats.fin
                } else {
                    &self.stats.timeout
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.stats.passes.fetch_add(1, Ordering::Relaxed);
        Ok(report)
    }

    /// One pass now.
    ///
    /// # Errors
    /// As [`NatSweeper::sweep_at`].
    pub fn sweep(&mut self) -> Result<SweepReport, DataplaneError> {
        self.sweep_at(monotonic_ns())
    }

    /// Sweeps every `interval` until `stop` is set (checked at least every 100 ms), on
    /// the calling thread. Failures are logged at most once a minute.
    pub fn run(mut self, interval: std::time::Duration, stop: &std::sync::atomic::AtomicBool) {
        let mut last_error: Option<std::time::Instant> = None;
        let tick = std::time::Duration::from_millis(100);
        let mut waited = std::time::Duration::ZERO;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(tick);
            waited += tick;
            if waited < interval {
                continue;
            }
            waited = std::time::Duration::ZERO;
            match self.sweep() {
                Ok(r) if r.released > 0 => {
                    tracing::debug!(
                        released = r.released,
                        walked = r.walked,
                        "nat sweep released ports"
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    if last_error.is_none_or(|t| t.elapsed() > std::time::Duration::from_secs(60)) {
                        tracing::warn!(
                            error = %e,
                            "nat sweep failed, trying again next interval"
                        );
                        last_error = Some(std::time::Instant::now());
                    }
                }
            }
        }
    }
}

/// How often lbd sweeps: often enough that the fill gauges follow the traffic within
/// seconds, rarely enough that a walk of a full map (a few hundred ms at 262 144
/// entries) stays a small share of a core.
pub const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// A sweeper running on a thread of its own; stopped and joined on drop.
#[derive(Debug)]
pub struct SweeperThread {
    stop: Arc<std::sync::atomic::AtomicBool>,
    stats: Arc<SweepStats>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl SweeperThread {
    /// Starts sweeping `maps`' `nat` maps every `interval`.
    ///
    /// # Errors
    /// The kernel refused the sweeper's map handles, or the thread did not start.
    pub fn spawn(maps: &MapSet, interval: std::time::Duration) -> Result<Self, DataplaneError> {
        let sweeper = NatSweeper::new(maps)?;
        let stats = sweeper.stats();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name("nat-sweep".into())
            .spawn(move || sweeper.run(interval, &flag))
            .map_err(|source| DataplaneError::Program {
                action: "starting the nat sweeper thread".into(),
                source: Box::new(source),
            })?;
        Ok(Self {
            stop,
            stats,
            handle: Some(handle),
        })
    }

    /// What it released so far.
    pub fn stats(&self) -> Arc<SweepStats> {
        Arc::clone(&self.stats)
    }
}

impl Drop for SweeperThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
