//! The agent: turns a validated config into a programmed, attached data plane and
//! takes it down again cleanly.

use std::{
    net::IpAddr,
    time::{Instant, SystemTime},
};

use crate::{
    health::Outcome, health::Probe, health::ProbeTarget, sources::etcd::EtcdMessage,
    sources::etcd::EtcdMirror, sources::etcd::mirror::MirrorChange, sources::slicedir::Discovered,
    sources::slicedir::SliceDir,
};
use lb_admin::{Histogram, ReconcileRecord};
use lb_model::{
    config::ValidConfig, dataplane::ApplyReport, dataplane::DataplaneError, dataplane::MapOps,
    dataplane::Programmer, dataplane::ServiceSpec, fade_state::FadeStarts,
};

mod compose;
pub use compose::{compose, discover};
mod specs;
mod views;

/// What a reconcile changes on the node besides the maps. The kernel's is
/// [`KernelHost`]; tests use one that does nothing, so that reconciles run without
/// root.
pub trait Host {
    /// Makes the kernel keep `addr`'s neighbour entry resolved on the node's
    /// interface, so the data plane's FIB lookups find a next hop.
    ///
    /// # Errors
    /// [`AgentError::Neighbour`].
    fn keep_resolved(&mut self, addr: IpAddr) -> Result<(), AgentError>;

    /// Enables IPv6 forwarding on the interface (once; later calls do nothing).
    ///
    /// # Errors
    /// [`AgentError::Sysctl`].
    fn enable_ipv6_forwarding(&mut self) -> Result<(), AgentError>;
}

use specs::state_path;
pub use specs::{
    BackendHealth, HealthMap, dsr_backends, global_config, service_specs, service_specs_with,
    specs_at, weights_moved,
};

/// Why the agent could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configured interface does not exist in this network namespace.
    #[error("interface {name:?} not found (node.interface)")]
    NoSuchInterface {
        /// The configured name.
        name: String,
    },
    /// The data plane could not be loaded, programmed or attached.
    #[error(transparent)]
    Dataplane(#[from] DataplaneError),
    /// A node setting the data plane needs could not be applied.
    #[error("{family} forwarding on {interface}: {source}")]
    Sysctl {
        /// "ipv4" or "ipv6".
        family: &'static str,
        /// The interface.
        interface: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The pin directory is unusable.
    #[error("pin directory {path}: {source} (node.pin_path)")]
    PinDir {
        /// The directory.
        path: String,
        /// What is wrong.
        #[source]
        source: std::io::Error,
    },
    /// A managed neighbour entry for a backend could not be created.
    #[error("keeping backend {addr} resolved on {interface}: {source}")]
    Neighbour {
        /// The backend.
        addr: IpAddr,
        /// The interface.
        interface: String,
        /// The kernel's error.
        #[source]
        source: std::io::Error,
    },
}

/// An agent taken apart ([`Agent::into_parts`]).
#[derive(Debug)]
pub struct Parts<D, H> {
    /// The data plane.
    pub dataplane: D,
    /// The node's state the agent changed.
    pub host: H,
    /// The config it ran.
    pub config: ValidConfig,
    /// The services it programmed last.
    pub applied: Vec<ServiceSpec>,
    /// Backends removed while it ran whose flows may still drain.
    pub drained: Vec<IpAddr>,
}

/// A running data plane for one config, over any data plane ([`MapOps`], the
/// kernel's in lbd, an in-memory one in tests) and any [`Host`].
#[derive(Debug)]
pub struct Agent<D, H> {
    dataplane: D,
    host: H,
    programmer: Programmer,
    /// What runs: the file's services plus etcd's.
    config: ValidConfig,
    /// The config file as loaded.
    file: ValidConfig,
    /// The etcd prefix's contents, if `node.etcd` is set.
    etcd: Option<EtcdMirror>,
    /// etcd services left out (invalid, or clashing with another), with why.
    etcd_rejected: Vec<(String, String)>,
    /// Backends removed by a reload whose established flows may still run.
    drained: Vec<IpAddr>,
    /// Fade-in ramp start times (persisted).
    starts: FadeStarts,
    /// What was last programmed, effective weights included.
    applied: Vec<ServiceSpec>,
    /// Whether any backend's ramp is still running; when not, ticks do nothing at all.
    fading: bool,
    /// Table rebuilds done because a fade-in ramp moved weights.
    fade_rebuilds: u64,
    /// Health of checked backends.
    health: HealthMap,
    /// The watched EndpointSlice directory, if configured.
    slices: Option<SliceDir>,
    /// What the slices currently say.
    discovered: Discovered,
    /// Reconciles so far, their latency and the latest outcome.
    reconciles: Histogram,
    last_reconcile: Option<ReconcileRecord>,
    /// The last reconcile failed: the next tick tries again from the current state.
    retry: bool,
}

impl<D: MapOps, H: Host> Agent<D, H> {
    /// Assembles an agent over `dataplane`, whose maps `programmer` describes (empty,
    /// or adopted from a previous agent's pins): reads the sources (slice directory;
    /// etcd is heard from later) and programs what they say.
    ///
    /// A first reconcile that fails is recorded (`lbctl status`) and retried by
    /// [`Agent::tick`] instead of failing: what the sources hold must not keep lbd from
    /// starting, or one bad document would crash-loop every node that reads it.
    pub fn assemble(
        config: ValidConfig,
        dataplane: D,
        host: H,
        mut programmer: Programmer,
    ) -> Self {
        let mut starts = FadeStarts::load(state_path(&config));
        let mut slices = (!config.node.endpointslice_dir.is_empty())
            .then(|| SliceDir::new(&config.node.endpointslice_dir));
        if let Some(d) = &mut slices {
            d.scan();
        }
        let etcd = config
            .node
            .etcd
            .as_ref()
            .map(|e| EtcdMirror::new(&e.prefix));
        if etcd.is_some() {
            // Services adopted from the pinned maps may come from etcd: keep them, and
            // their backends' ramp start times, until etcd has been heard from.
            programmer.keep_unlisted(true);
            starts.hold(true);
        }
        let discovered = compose::discover(slices.as_ref(), etcd.as_ref());
        let mut agent = Self {
            dataplane,
            host,
            programmer,
            file: config.clone(),
            config,
            etcd,
            etcd_rejected: Vec::new(),
            drained: Vec::new(),
            starts,
            applied: Vec::new(),
            fading: false,
            fade_rebuilds: 0,
            health: HealthMap::new(),
            slices,
            discovered,
            reconciles: Histogram::default(),
            last_reconcile: None,
            retry: false,
        };
        let (specs, fading) = agent.specs_now(SystemTime::now());
        save_starts(&mut agent.starts);
        if let Err(err) = agent.reprogram(specs, fading, "start") {
            log::error!("programming the sources' services failed, retrying every second: {err}");
        }
        agent
    }

    /// Moves the data plane to `config`: changed services are swapped atomically,
    /// removed ones deleted, new backends' neighbours kept resolved. Established flows
    /// keep their backends — also flows to a backend that was removed (connection
    /// draining), which is why removed backends keep their neighbour entries until
    /// shutdown. Node settings (`interface` and `xdp_mode` need a re-attach, the flow
    /// tables are sized when loaded) are kept as they are until lbd restarts, with a
    /// warning.
    ///
    /// # Errors
    /// A data-plane failure; services before the failing one are already updated.
    pub fn reload(&mut self, mut config: ValidConfig) -> Result<ApplyReport, AgentError> {
        if config.node != self.config.node {
            log::warn!(
                "node settings changed; they take effect on restart (running with {:?})",
                self.config.node
            );
            config.node = self.config.node.clone();
            config.flow_tables = self.config.flow_tables;
        }
        let file = config;
        let (config, rejected) = compose::compose(&file, self.etcd.as_ref());
        let (specs, fading) = specs_at(
            &config,
            &self.discovered,
            &mut self.starts,
            &self.health,
            SystemTime::now(),
        );
        save_starts(&mut self.starts);
        let report = self.reprogram(specs, fading, "reload")?;
        self.config = config;
        self.file = file;
        self.note_rejected(rejected);
        Ok(report)
    }

    /// Advances fade-in ramps to `now`: rebuilds the tables of services whose effective
    /// weights moved enough (see [`weights_moved`]), and retries a reconcile that
    /// failed. When no ramp is running and nothing failed this does no work at all.
    /// Returns whether tables were rebuilt.
    ///
    /// # Errors
    /// A data-plane failure; the next tick retries.
    pub fn tick(&mut self, now: SystemTime) -> Result<bool, AgentError> {
        // The sources are read first, whatever the data plane does: a reconcile that
        // keeps failing must not stop the directory from being watched, and the next
        // one that succeeds programs what the sources say by then.
        let scanned = self.slices.as_mut().is_some_and(SliceDir::scan);
        if scanned {
            self.discovered = compose::discover(self.slices.as_ref(), self.etcd.as_ref());
        }
        let mut rebuilt = false;
        if scanned || self.retry {
            // A failed reconcile (a map write, a neighbour entry) is retried with what
            // the sources say now.
            let retrying = self.retry;
            let (specs, fading) = self.specs_now(now);
            save_starts(&mut self.starts);
            let trigger = if scanned { "endpointslices" } else { "retry" };
            let report = self.reprogram(specs, fading, trigger)?;
            if scanned {
                log::info!(
                    "EndpointSlices changed: {} services reprogrammed, {} unchanged",
                    report.programmed,
                    report.unchanged
                );
            }
            if retrying {
                log::info!("retried the failed reconcile: the data plane is up to date");
            }
            rebuilt = true;
        }
        if !self.fading {
            return Ok(rebuilt);
        }
        let (specs, fading) = self.specs_now(now);
        if !fading {
            log::info!("fade-in complete: every backend at full weight");
        }
        if !weights_moved(&self.applied, &specs, fading) {
            self.fading = fading;
            return Ok(rebuilt);
        }
        self.reprogram(specs, fading, "fade-in")?;
        self.fade_rebuilds += 1;
        Ok(true)
    }

    /// Applies what the etcd watcher reported (in order) and, if services or slices
    /// changed, reprograms once. Returns the report if it reprogrammed.
    ///
    /// # Errors
    /// A data-plane failure; the next change retries.
    pub fn etcd_apply(
        &mut self,
        messages: Vec<EtcdMessage>,
        now: SystemTime,
    ) -> Result<Option<ApplyReport>, AgentError> {
        let Some(mirror) = self.etcd.as_mut() else {
            return Ok(None);
        };
        let mut changed = MirrorChange::default();
        let mut synced = false;
        for msg in messages {
            synced |= matches!(msg, EtcdMessage::Snapshot { .. });
            match &msg {
                EtcdMessage::Down { error } if mirror.down.is_none() => {
                    log::error!(
                        "etcd source degraded, keeping the last state (revision {}): {error}",
                        mirror.revision
                    );
                }
                EtcdMessage::Snapshot { revision, .. }
                    if mirror.down.is_some() || mirror.revision == 0 =>
                {
                    log::info!(
                        "etcd: listed {} at revision {revision}",
                        self.file
                            .node
                            .etcd
                            .as_ref()
                            .map_or("", |e| e.prefix.as_str())
                    );
                }
                _ => {}
            }
            changed.merge(mirror.apply_tracked(msg));
        }
        if synced {
            self.programmer.keep_unlisted(false);
            self.starts.hold(false);
        }
        if !changed.any() && !synced {
            return Ok(None);
        }
        if changed.services || synced {
            let (config, rejected) = compose::compose(&self.file, self.etcd.as_ref());
            self.config = config;
            self.note_rejected(rejected);
        }
        // Only the Kubernetes services whose slices changed get new endpoint sets.
        let dir = self.slices.as_ref().into_iter().flat_map(SliceDir::held);
        let etcd = self.etcd.iter().flat_map(EtcdMirror::slices);
        self.discovered.refresh(&changed.slices, dir.chain(etcd));
        let (specs, fading) = self.specs_now(now);
        save_starts(&mut self.starts);
        self.reprogram(specs, fading, "etcd").map(Some)
    }

    fn note_rejected(&mut self, rejected: Vec<(String, String)>) {
        for (key, why) in &rejected {
            if !self.etcd_rejected.iter().any(|(k, w)| k == key && w == why) {
                log::error!("etcd key {key}: {why} (ignored)");
            }
        }
        self.etcd_rejected = rejected;
    }

    /// The etcd mirror, if `node.etcd` is set.
    pub fn etcd(&self) -> Option<&EtcdMirror> {
        self.etcd.as_ref()
    }

    /// etcd services left out, with why.
    pub fn etcd_rejected(&self) -> &[(String, String)] {
        &self.etcd_rejected
    }

    /// Programs `specs` (see [`Agent::reprogram_now`]) and records the reconcile's
    /// latency and outcome under `trigger`.
    fn reprogram(
        &mut self,
        specs: Vec<ServiceSpec>,
        fading: bool,
        trigger: &'static str,
    ) -> Result<ApplyReport, AgentError> {
        let began = Instant::now();
        let result = self.reprogram_now(specs, fading);
        self.retry = result.is_err();
        let error = result.as_ref().err().map(ToString::to_string);
        self.last_reconcile = Some(record(trigger, began, error, &mut self.reconciles));
        result
    }

    /// Keeps new backends' neighbours resolved, enables IPv6 forwarding if IPv6 VIPs
    /// appeared, applies, and remembers backends that left (their flows drain, so their
    /// neighbour entries stay until shutdown).
    fn reprogram_now(
        &mut self,
        specs: Vec<ServiceSpec>,
        fading: bool,
    ) -> Result<ApplyReport, AgentError> {
        let old = dsr_backends(&self.applied);
        let new = dsr_backends(&specs);
        for &addr in new.iter().filter(|a| !old.contains(a)) {
            self.host.keep_resolved(addr)?;
        }
        if specs
            .iter()
            .any(|s| !lb_common::maps::is_v4_mapped(&s.key.addr))
        {
            self.host.enable_ipv6_forwarding()?;
        }
        let report = self
            .programmer
            .apply(&mut self.dataplane, &specs, Instant::now())?;
        self.drained
            .extend(old.into_iter().filter(|a| !new.contains(a)));
        self.applied = specs;
        self.fading = fading;
        Ok(report)
    }

    /// The health probes this config asks for.
    pub fn probe_targets(&self) -> Vec<ProbeTarget> {
        let mut targets = Vec::new();
        for svc in &self.config.services {
            let Some(hc) = &svc.health_check else {
                continue;
            };
            let (interval, timeout) = (hc.interval.get(), hc.timeout.get());
            let probe = match hc.kind {
                lb_model::config::HealthCheckKind::Tcp => Probe::Tcp,
                lb_model::config::HealthCheckKind::Http => Probe::Http {
                    path: hc.path.clone(),
                    expect: hc.expect_status.map_or((200, 399), |s| (s, s)),
                },
            };
            let port = hc.port.unwrap_or(svc.port.key_port());
            let Some(spec) = self.applied.iter().find(|s| s.name == svc.name) else {
                continue;
            };
            for &addr in &spec.backends {
                targets.push(ProbeTarget {
                    service: svc.name.clone(),
                    backend: addr,
                    target: std::net::SocketAddr::new(addr, port),
                    probe: probe.clone(),
                    interval,
                    timeout,
                });
            }
        }
        targets
    }

    /// Records a probe result. On a health transition the service is reprogrammed at
    /// once: an unhealthy backend gets no new flows (its established flows continue); a
    /// recovered one fades in again from now. Returns whether the state changed.
    ///
    /// # Errors
    /// A data-plane failure (the state change is kept; the next change retries).
    pub fn observe(
        &mut self,
        service: &str,
        backend: IpAddr,
        outcome: &Outcome,
        now: SystemTime,
    ) -> Result<bool, AgentError> {
        let Some(svc) = self.config.services.iter().find(|s| s.name == service) else {
            return Ok(false);
        };
        let Some(hc) = &svc.health_check else {
            return Ok(false);
        };
        let entry = self
            .health
            .entry(service.to_owned())
            .or_default()
            .entry(backend)
            .or_default();
        let up = *outcome == Outcome::Up;
        let Some(healthy) = entry.health.observe(up, hc.rise, hc.fall) else {
            return Ok(false);
        };
        if healthy {
            entry.recovered = Some(now);
            log::info!("{service}: backend {backend} is healthy again");
        } else {
            let why = match outcome {
                Outcome::Down(why) => why.as_str(),
                Outcome::Up => "",
            };
            log::warn!("{service}: backend {backend} is unhealthy ({why}): no new flows");
        }
        let (specs, fading) = self.specs_now(now);
        self.reprogram(specs, fading, "health")?;
        Ok(true)
    }

    /// The specs at `now` from the current config, slices, health and ramp starts.
    fn specs_now(&mut self, now: SystemTime) -> (Vec<ServiceSpec>, bool) {
        specs_at(
            &self.config,
            &self.discovered,
            &mut self.starts,
            &self.health,
            now,
        )
    }

    /// Table rebuilds done for fade-in so far.
    pub fn fade_rebuilds(&self) -> u64 {
        self.fade_rebuilds
    }

    /// What is programmed, service by service.
    pub fn programmer(&self) -> &Programmer {
        &self.programmer
    }

    /// Latency histogram of every reconcile so far.
    pub fn reconciles(&self) -> &Histogram {
        &self.reconciles
    }

    /// The latest reconcile's outcome.
    pub fn last_reconcile(&self) -> Option<&ReconcileRecord> {
        self.last_reconcile.as_ref()
    }

    /// What was last programmed: every service with its effective weights (health
    /// and fade-in applied); the l7 proxy balances with these too.
    pub fn applied(&self) -> &[ServiceSpec] {
        &self.applied
    }

    /// The data plane.
    pub fn dataplane(&self) -> &D {
        &self.dataplane
    }

    /// The data plane, writable (attach, detach).
    pub fn dataplane_mut(&mut self) -> &mut D {
        &mut self.dataplane
    }

    /// Takes the agent apart, for tearing the node down: what it programmed and
    /// changed.
    pub fn into_parts(self) -> Parts<D, H> {
        Parts {
            dataplane: self.dataplane,
            host: self.host,
            config: self.config,
            applied: self.applied,
            drained: self.drained,
        }
    }

    /// The config in force: the file's services plus etcd's.
    pub fn config(&self) -> &ValidConfig {
        &self.config
    }
}

/// Counts a reconcile that began at `began` into `histogram` and describes it.
fn record(
    trigger: &str,
    began: Instant,
    error: Option<String>,
    histogram: &mut Histogram,
) -> ReconcileRecord {
    let took = began.elapsed().as_secs_f64();
    histogram.observe(took);
    ReconcileRecord {
        trigger: trigger.to_owned(),
        finished_unix: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        duration_seconds: took,
        error,
    }
}

fn save_starts(starts: &mut FadeStarts) {
    if let Err(err) = starts.save() {
        log::warn!("saving fade-in state: {err} (ramps restart if lbd restarts)");
    }
}

#[cfg(test)]
mod tests;
