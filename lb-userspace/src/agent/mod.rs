//! The agent: turns a validated config into a programmed, attached data plane and
//! takes it down again cleanly.

use std::{
    ffi::CString,
    net::IpAddr,
    path::Path,
    time::{Instant, SystemTime},
};

use lb_common::Counter;

use crate::{
    admin::{Histogram, ReconcileRecord},
    bpffs,
    config::ValidConfig,
    dataplane::{
        ApplyReport, DataplaneError, MapOps as _, Programmer, ServiceSpec,
        kernel::{AttachOutcome, KernelDataplane, LINK_PIN},
        neighbour,
    },
    fade_state::FadeStarts,
    health::{Outcome, Probe, ProbeTarget},
    sources::{
        etcd::{EtcdMessage, EtcdMirror, mirror::MirrorChange},
        slicedir::{Discovered, SliceDir},
    },
    sysctl::Forwarding,
};

mod compose;
pub use compose::{compose, discover};
mod specs;
mod views;

pub use specs::{
    BackendHealth, HealthMap, global_config, service_specs, service_specs_with, specs_at,
    weights_moved,
};
use specs::{dsr_backends, state_path};

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

/// A running data plane for one config.
#[derive(Debug)]
pub struct Agent {
    dataplane: KernelDataplane,
    programmer: Programmer,
    /// What runs: the file's services plus etcd's.
    config: ValidConfig,
    /// The config file as loaded.
    file: ValidConfig,
    /// The etcd prefix's contents, if `node.etcd` is set.
    etcd: Option<EtcdMirror>,
    /// etcd services left out (invalid, or clashing with another), with why.
    etcd_rejected: Vec<(String, String)>,
    ifindex: u32,
    forwarding: Vec<Forwarding>,
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

impl Agent {
    /// Loads the data plane, programs every service, makes the kernel keep backend
    /// neighbours resolved, enables forwarding, then attaches — in that order, so the
    /// first packet already sees complete tables.
    ///
    /// # Errors
    /// [`AgentError`] saying which step failed; nothing stays attached in that case.
    ///
    /// With a pin directory, a data plane left running by a previous agent is adopted:
    /// its maps (conntrack included) are reused, its services taken over, and its XDP
    /// link switched to the new program atomically.
    pub fn start(config: ValidConfig) -> Result<Self, AgentError> {
        let interface = config.node.interface.clone();
        let ifindex = ifindex(&interface)?;
        let pin_dir = config.node.pin_dir().map(Path::to_path_buf);
        if let Some(dir) = &pin_dir {
            bpffs::ensure(dir).map_err(|source| AgentError::PinDir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let mut dataplane = KernelDataplane::load_with_pins(pin_dir.as_deref())?;
        let mut programmer = Programmer::default();
        programmer.set_answer_ping(config.node.answer_ping);
        let adopted = programmer.adopt(dataplane.maps())?;
        if adopted > 0 {
            log::info!("adopted {adopted} services from the pinned data plane");
        }
        dataplane.set_config(global_config(&config))?;
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
        let (specs, fading) = specs_at(
            &config,
            &discovered,
            &mut starts,
            &HealthMap::new(),
            SystemTime::now(),
        );
        save_starts(&mut starts);
        let began = Instant::now();
        programmer.apply(&mut dataplane, &specs, Instant::now())?;
        let mut reconciles = Histogram::default();
        let first = record("start", began, None, &mut reconciles);
        for addr in dsr_backends(&specs) {
            neighbour::ensure_managed(ifindex, addr).map_err(|source| AgentError::Neighbour {
                addr,
                interface: interface.clone(),
                source,
            })?;
        }
        let mut forwarding = vec![enable_forwarding("ipv4", &interface)?];
        if specs
            .iter()
            .any(|s| !lb_common::maps::is_v4_mapped(&s.key.addr))
        {
            forwarding.push(enable_forwarding("ipv6", &interface)?);
        }
        let link_pin = pin_dir.as_ref().map(|d| d.join(LINK_PIN));
        match dataplane.attach(&interface, config.node.xdp_mode, link_pin.as_deref())? {
            AttachOutcome::Replaced => {
                log::info!("took over the running XDP program on {interface}")
            }
            AttachOutcome::Attached => {}
        }
        Ok(Self {
            dataplane,
            programmer,
            file: config.clone(),
            config,
            etcd,
            etcd_rejected: Vec::new(),
            ifindex,
            forwarding,
            drained: Vec::new(),
            starts,
            applied: specs,
            fading,
            fade_rebuilds: 0,
            health: HealthMap::new(),
            slices,
            discovered,
            reconciles,
            last_reconcile: Some(first),
            retry: false,
        })
    }

    /// Moves the data plane to `config`: changed services are swapped atomically,
    /// removed ones deleted, new backends' neighbours kept resolved. Established flows
    /// keep their backends — also flows to a backend that was removed (connection
    /// draining), which is why removed backends keep their neighbour entries until
    /// shutdown. Node settings that need a re-attach (`interface`,
    /// `xdp_mode`) are kept as they are, with a warning.
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
        let mut rebuilt = false;
        if self.retry {
            // A reconcile failed (a map write, a neighbour entry): what the sources
            // say now is still not programmed.
            let (specs, fading) = self.specs_now(now);
            self.reprogram(specs, fading, "retry")?;
            log::info!("retried the failed reconcile: the data plane is up to date");
            rebuilt = true;
        }
        if self.slices.as_mut().is_some_and(SliceDir::scan) {
            self.discovered = compose::discover(self.slices.as_ref(), self.etcd.as_ref());
            let (specs, fading) = self.specs_now(now);
            save_starts(&mut self.starts);
            let report = self.reprogram(specs, fading, "endpointslices")?;
            log::info!(
                "EndpointSlices changed: {} services reprogrammed, {} unchanged",
                report.programmed,
                report.unchanged
            );
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
        let interface = self.config.node.interface.clone();
        for &addr in new.iter().filter(|a| !old.contains(a)) {
            neighbour::ensure_managed(self.ifindex, addr).map_err(|source| {
                AgentError::Neighbour {
                    addr,
                    interface: interface.clone(),
                    source,
                }
            })?;
        }
        if self.forwarding.len() < 2
            && specs
                .iter()
                .any(|s| !lb_common::maps::is_v4_mapped(&s.key.addr))
        {
            self.forwarding.push(enable_forwarding("ipv6", &interface)?);
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
                crate::config::HealthCheckKind::Tcp => Probe::Tcp,
                crate::config::HealthCheckKind::Http => Probe::Http {
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

    /// The loaded data plane (counters, maps).
    pub fn dataplane(&self) -> &KernelDataplane {
        &self.dataplane
    }

    /// What is programmed, service by service.
    pub fn programmer(&self) -> &Programmer {
        &self.programmer
    }

    /// Every global counter, summed over CPUs, in index order.
    ///
    /// # Errors
    /// A map read failed.
    pub fn counters(&self) -> Result<Vec<(Counter, u64)>, DataplaneError> {
        self.dataplane.maps().counters()
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

    /// The config in force: the file's services plus etcd's.
    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    /// Exits leaving the data plane running: pinned maps and link keep forwarding, with
    /// conntrack, until the next agent adopts them. Without a pin directory there is
    /// nothing to leave behind, so this is [`Agent::shutdown`].
    ///
    /// # Errors
    /// As [`Agent::shutdown`] when pinning is off.
    pub fn leave_running(self) -> Result<(), AgentError> {
        match self.config.node.pin_dir() {
            Some(dir) => {
                log::info!(
                    "leaving the data plane running (pinned at {})",
                    dir.display()
                );
                Ok(())
            }
            None => self.shutdown(),
        }
    }

    /// Tears everything down: detaches the program, removes the pins and the neighbour
    /// entries the agent made, and restores the interface's forwarding settings.
    ///
    /// # Errors
    /// The detach failed (the program is still detached when the agent is dropped).
    pub fn shutdown(mut self) -> Result<(), AgentError> {
        self.dataplane.detach()?;
        if let Some(dir) = self.config.node.pin_dir()
            && let Err(err) = KernelDataplane::unpin_maps(dir)
        {
            log::warn!("removing map pins under {}: {err}", dir.display());
        }
        let mut made = dsr_backends(&self.applied);
        made.extend(self.drained.iter().copied());
        made.sort_unstable();
        made.dedup();
        for addr in made {
            if let Err(err) = neighbour::remove(self.ifindex, addr) {
                log::warn!("removing neighbour entry for {addr}: {err}");
            }
        }
        for f in self.forwarding {
            if let Err(err) = f.restore() {
                log::warn!(
                    "restoring forwarding on {}: {err}",
                    self.config.node.interface
                );
            }
        }
        Ok(())
    }
}

/// Removes a data plane that an agent left running (`lbd --cleanup`): the pinned XDP
/// link (which detaches the program), the map pins and the backends' neighbour entries.
///
/// # Errors
/// A pin that exists could not be removed.
pub fn cleanup(config: &ValidConfig) -> Result<(), AgentError> {
    let mut backends = dsr_backends(&service_specs(config));
    if let Some(dir) = config.node.pin_dir() {
        // What was programmed — from the file, EndpointSlices or etcd alike — is in
        // the pinned maps; read it before the pins go.
        if let Ok(maps) = crate::dataplane::maps::MapSet::open_pinned(dir) {
            backends.extend(programmed_backends(&maps));
        }
        let pin_error = |source| AgentError::PinDir {
            path: dir.display().to_string(),
            source,
        };
        match std::fs::remove_file(dir.join(LINK_PIN)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(pin_error(e)),
            _ => {}
        }
        KernelDataplane::unpin_maps(dir).map_err(pin_error)?;
    }
    backends.sort_unstable();
    backends.dedup();
    if let Ok(index) = ifindex(&config.node.interface) {
        for addr in backends {
            if let Err(err) = neighbour::remove(index, addr) {
                log::warn!("removing neighbour entry for {addr}: {err}");
            }
        }
    }
    Ok(())
}

/// Backends in the lists of the `dsr` and `nat` services of a data plane: those whose
/// neighbour entries lbd keeps resolved.
fn programmed_backends(maps: &impl crate::dataplane::MapRead) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for (_, info) in maps.vips().unwrap_or_default() {
        if lb_common::ForwardingMode::from_u32(info.mode) == Some(lb_common::ForwardingMode::L7) {
            continue;
        }
        for i in 0..info.list_len {
            let backend = maps
                .list_entry(info.list_base + i)
                .and_then(|id| maps.backend(id));
            if let Ok(b) = backend {
                out.push(crate::dataplane::from_addr16(b.addr));
            }
        }
    }
    out
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

fn enable_forwarding(family: &'static str, interface: &str) -> Result<Forwarding, AgentError> {
    Forwarding::enable(family, interface).map_err(|source| AgentError::Sysctl {
        family,
        interface: interface.to_owned(),
        source,
    })
}

/// The interface index of `name` in the calling thread's network namespace.
///
/// # Errors
/// [`AgentError::NoSuchInterface`].
pub fn ifindex(name: &str) -> Result<u32, AgentError> {
    let missing = || AgentError::NoSuchInterface {
        name: name.to_owned(),
    };
    let c_name = CString::new(name).map_err(|_| missing())?;
    // SAFETY: c_name is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if index == 0 {
        Err(missing())
    } else {
        Ok(index)
    }
}

#[cfg(test)]
mod tests;
