//! lbd's run loop, on two sides that never wait for each other:
//!
//! - the control thread ([`control`]) owns the agent and does everything that may
//!   block — map writes, netlink, parsing slice files, reloading the config — taking
//!   events in batches and publishing a [`Published`] snapshot after each step;
//! - the async side (a tokio runtime on the calling thread) waits for signals, runs the
//!   health probes, the etcd watcher, the admin socket and metrics listener, the l7
//!   proxy's sync and the handover socket. Admin answers are computed on tokio's
//!   blocking threads from the latest snapshot and the data plane's live counters,
//!   through handles of their own ([`ShareTraffic`]).
//!
//! So a cold sync of thousands of services, or thirty thousand probes restarting, delays
//! neither `lbctl status` nor a health probe, and a slow scrape delays no reconcile.

mod control;
mod serve;
#[cfg(test)]
mod tests;

use std::{path::PathBuf, sync::Arc, time::Instant};

use lb_l7::{handover, node::L7Node};
use lb_model::dataplane::{DataplaneError, MapOps, ShareTraffic, SweepStats};

use crate::{
    agent::{Agent, AgentSnapshot, Host},
    health::ProbeTarget,
};

/// What the control thread publishes after each step.
#[derive(Clone, Debug)]
pub struct Published {
    /// The agent's state.
    pub agent: AgentSnapshot,
    /// Successful config loads so far (1: the one lbd started with).
    pub generation: u64,
    /// Why the latest reload was rejected or could not be applied, until one is.
    pub config_error: Option<String>,
    /// The health probes the running services ask for.
    pub probes: Arc<Vec<ProbeTarget>>,
}

/// What the run loop needs besides the agent.
#[derive(Debug)]
pub struct Settings {
    /// The config file (reloaded on SIGHUP and when it changes).
    pub config_path: PathBuf,
    /// Where the next lbd asks for the l7 sockets.
    pub handover_path: PathBuf,
    /// When lbd started (for `uptime_seconds`).
    pub started: Instant,
    /// What lbd's `nat` sweeper released, if it runs.
    pub nat_sweep: Option<Arc<SweepStats>>,
    /// A stop asked for from inside the process (lbd is stopped by signals; tests
    /// use this).
    pub stop: Option<tokio::sync::oneshot::Receiver<Stop>>,
}

/// How lbd was asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, as a service manager sends for a stop or restart: the pinned data plane
    /// keeps forwarding until the next lbd adopts it.
    LeaveRunning,
    /// SIGINT (Ctrl-C): detach and remove everything.
    TearDown,
    /// The next lbd took the l7 sockets over (a zero-downtime restart).
    HandedOver,
}

/// Why the run loop could not start or went away.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Setting something up failed (the tokio runtime, a signal handler, a thread).
    #[error("{what}: {source}")]
    Setup {
        /// What was being set up.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The data plane's counters could not be opened for the admin API.
    #[error("opening the data plane's counters for the admin API: {0}")]
    Share(#[from] DataplaneError),
    /// The control thread panicked (the agent, and with it the data plane, is gone).
    #[error("the control thread panicked")]
    ControlPanicked,
}

/// What is left when the run loop ends.
#[derive(Debug)]
pub struct Ended<D, H> {
    /// The agent, to leave running or shut down.
    pub agent: Agent<D, H>,
    /// The l7 proxy, to shut down (it lets requests in flight finish).
    pub l7: L7Node,
    /// Why it ended.
    pub stop: Stop,
}

/// Runs lbd until it is asked to stop. `predecessor` is the lbd that handed its l7
/// sockets over, told once this one serves.
///
/// # Errors
/// [`RuntimeError`]: something could not be set up, or the control thread panicked.
pub fn run<D, H>(
    mut agent: Agent<D, H>,
    l7: L7Node,
    predecessor: Option<handover::Predecessor>,
    settings: Settings,
) -> Result<Ended<D, H>, RuntimeError>
where
    D: MapOps + ShareTraffic + Send + 'static,
    H: Host + Send + 'static,
{
    let reader = Arc::new(agent.dataplane().share()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RuntimeError::Setup {
            what: "starting the async runtime",
            source,
        })?;
    let (events, receiver) = std::sync::mpsc::channel();
    let (state, published) = control::State::new(settings.config_path.clone(), &mut agent);
    let thread = serve::spawn_control(agent, state, receiver)?;
    runtime.block_on(serve::serve(serve::Sides {
        thread,
        events,
        published,
        reader,
        l7,
        predecessor,
        settings,
    }))
}
