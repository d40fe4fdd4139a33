//! The control thread: the one place the agent lives. It takes events (a reload, etcd's
//! changes, health results) from a channel in batches, ticks every second (fade-in
//! steps, retries, the slice directory and the config file's stamp), and after each
//! step publishes what the admin API and the async side need ([`Published`]).
//! Everything here may block — bpf(2) writes, netlink round trips, parsing a thousand
//! slice files — and nothing else waits for it.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        mpsc::{Receiver, RecvTimeoutError},
    },
    time::{Duration, Instant, SystemTime},
};

use lb_model::{
    config,
    dataplane::MapOps,
    filestamp::{FileStamp, SETTLE},
};

use super::Published;
use crate::{
    agent::{Agent, Host},
    health::{ProbeTarget, Report},
    sources::etcd::EtcdMessage,
};

/// Between ticks: fade-in steps, retries and file checks happen at most this often.
const TICK: Duration = Duration::from_secs(1);

/// Events taken in one batch at most, so that a steady stream of them cannot hold
/// off the tick.
const BATCH: usize = 10_000;

/// What the control thread is told.
#[derive(Debug)]
pub(super) enum Event {
    /// Load the config file again (SIGHUP).
    Reload,
    /// What etcd's watcher saw.
    Etcd(EtcdMessage),
    /// A health probe's result.
    Health(Report),
    /// Return the agent (to stop, or to hand over).
    Stop,
}

/// The control thread's own state, kept across a pause (a failed handover).
pub(super) struct State {
    /// The config file.
    pub(super) path: PathBuf,
    /// Its stamp when last loaded.
    file: FileStamp,
    /// Successful config loads so far.
    generation: u64,
    /// Why the latest reload was rejected or could not be applied, until one is.
    config_error: Option<String>,
    /// The latest reload loaded but failed to apply: the retry that succeeds
    /// completes it.
    apply_pending: bool,
    /// Where snapshots go.
    publish: tokio::sync::watch::Sender<Arc<Published>>,
    /// Probe targets as last published, and the reconcile count they were made at.
    probes: (u64, Arc<Vec<ProbeTarget>>),
}

impl State {
    /// State for a freshly started agent whose config came from `path`, and the
    /// receiving end of what it publishes (holding the agent's state as of now).
    pub(super) fn new<D, H>(
        path: PathBuf,
        agent: &mut Agent<D, H>,
    ) -> (Self, tokio::sync::watch::Receiver<Arc<Published>>) {
        let mut probes = (u64::MAX, Arc::default());
        let first = published(agent, 1, None, &mut probes);
        let (publish, receiver) = tokio::sync::watch::channel(Arc::new(first));
        let state = Self {
            file: FileStamp::of(&path),
            path,
            generation: 1,
            config_error: None,
            apply_pending: false,
            publish,
            probes,
        };
        (state, receiver)
    }

    fn publish<D, H>(&mut self, agent: &mut Agent<D, H>) {
        let next = published(
            agent,
            self.generation,
            self.config_error.clone(),
            &mut self.probes,
        );
        // Nobody listening (the async side is gone) is not the control thread's
        // concern: it stops when told to.
        self.publish.send_replace(Arc::new(next));
    }
}

/// What the agent looks like now, for the async side and the admin API. `probes`
/// caches the probe targets by the reconcile count they were made at (they change
/// only with what is programmed).
fn published<D, H>(
    agent: &mut Agent<D, H>,
    generation: u64,
    config_error: Option<String>,
    probes: &mut (u64, Arc<Vec<ProbeTarget>>),
) -> Published {
    let reconciles = agent.reconciles().count;
    if probes.0 != reconciles {
        *probes = (reconciles, Arc::new(agent.probe_targets()));
    }
    Published {
        agent: agent.snapshot(),
        generation,
        config_error,
        probes: Arc::clone(&probes.1),
    }
}

/// The events of one batch, merged: a reload once, etcd's messages in order, health
/// results in order.
#[derive(Default)]
struct Batch {
    reload: bool,
    etcd: Vec<EtcdMessage>,
    health: Vec<Report>,
    stop: bool,
}

impl Batch {
    fn add(&mut self, event: Event) {
        match event {
            Event::Reload => self.reload = true,
            Event::Etcd(m) => self.etcd.push(m),
            Event::Health(r) => self.health.push(r),
            Event::Stop => self.stop = true,
        }
    }
}

/// Runs the agent until told to stop (or every sender is gone); returns it with the
/// thread's state and the channel, so that it can be resumed.
pub(super) fn run<D: MapOps, H: Host>(
    mut agent: Agent<D, H>,
    mut state: State,
    events: Receiver<Event>,
) -> (Agent<D, H>, State, Receiver<Event>) {
    let mut next_tick = Instant::now() + TICK;
    loop {
        let wait = next_tick.saturating_duration_since(Instant::now());
        let mut batch = Batch::default();
        match events.recv_timeout(wait) {
            Ok(event) => {
                batch.add(event);
                while batch.health.len() + batch.etcd.len() < BATCH && !batch.stop {
                    match events.try_recv() {
                        Ok(event) => batch.add(event),
                        Err(_) => break,
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => batch.stop = true,
        }
        let before = agent.reconciles().count;
        let stop = batch.stop;
        let asked = batch.reload || !batch.etcd.is_empty();
        apply(&mut agent, &mut state, batch);
        let ticked = Instant::now() >= next_tick;
        if ticked {
            tick(&mut agent, &mut state);
            next_tick = Instant::now() + TICK;
        }
        if ticked || asked || stop || agent.reconciles().count != before {
            state.publish(&mut agent);
        }
        if stop {
            return (agent, state, events);
        }
    }
}

/// Applies one batch: etcd's changes with one reconcile, then a reload, then health
/// results with at most one more.
fn apply<D: MapOps, H: Host>(agent: &mut Agent<D, H>, state: &mut State, batch: Batch) {
    let now = SystemTime::now();
    if !batch.etcd.is_empty() {
        match agent.etcd_apply(batch.etcd, now) {
            Ok(Some(report)) => tracing::info!(
                source = "etcd",
                revision = agent.etcd().map_or(0, |e| e.revision),
                programmed = report.programmed,
                unchanged = report.unchanged,
                removed = report.removed,
                "etcd changes applied"
            ),
            Ok(None) => {}
            Err(err) => {
                tracing::error!(source = "etcd", error = %err, "applying etcd changes failed, retrying within a second");
            }
        }
    }
    if batch.reload {
        // The edit that came with the signal is loaded now; the watcher must not load
        // it a second time.
        state.file = FileStamp::of(&state.path);
        reload(agent, state);
    }
    if !batch.health.is_empty()
        && let Err(err) = agent.observe_all(&batch.health, now)
    {
        tracing::error!(error = %err, "applying a health change failed, retrying within a second");
    }
}

/// The once-a-second work: fade-in steps and retries, and the config file's stamp
/// (an edit reloads like SIGHUP).
fn tick<D: MapOps, H: Host>(agent: &mut Agent<D, H>, state: &mut State) {
    let retrying = state.apply_pending;
    if let Err(err) = agent.tick(SystemTime::now()) {
        tracing::error!(error = %err, "fade-in step or retry failed, retrying next second");
    } else if retrying && agent.last_reconcile().is_some_and(|r| r.error.is_none()) {
        tracing::info!(file = %state.path.display(), "the reloaded config is applied now");
        state.apply_pending = false;
        state.generation += 1;
        state.config_error = None;
    }
    let now = FileStamp::of(&state.path);
    // A file modified in the last SETTLE may be half written (truncated, not yet
    // filled): the next tick reads it.
    if now != state.file && now.settled(SystemTime::now(), SETTLE) {
        state.file = now;
        tracing::info!(file = %state.path.display(), "config file changed, reloading");
        reload(agent, state);
    }
}

/// Loads the config file and moves the agent to it; the outcome goes to `state`
/// (`lbctl status` shows it).
fn reload<D: MapOps, H: Host>(agent: &mut Agent<D, H>, state: &mut State) {
    let path = state.path.clone();
    let span = tracing::info_span!("reload", file = %path.display());
    let _entered = span.enter();
    let began = std::time::Instant::now();
    let config = match config::load(&path, lb_l7::check_routes) {
        Ok(config) => config,
        Err(err) => {
            tracing::error!(
                source = "config",
                file = %path.display(),
                error = %err,
                "reload rejected, keeping the running config"
            );
            state.config_error = Some(err.to_string());
            return;
        }
    };
    match agent.reload(config) {
        Ok(report) => {
            tracing::info!(
                file = %path.display(),
                programmed = report.programmed,
                unchanged = report.unchanged,
                removed = report.removed,
                elapsed_ms = began.elapsed().as_secs_f64() * 1000.0,
                "reloaded"
            );
            state.generation += 1;
            state.config_error = None;
            state.apply_pending = false;
        }
        Err(err) => {
            tracing::error!(
                file = %path.display(),
                error = %err,
                "reload failed part-way, retrying every second"
            );
            state.config_error = Some(format!("applying the config failed part-way: {err}"));
            state.apply_pending = true;
        }
    }
}
