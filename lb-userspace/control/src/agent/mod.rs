//! The agent: keeps the data plane serving what the sources say. It reads the config,
//! the slice directory and etcd's changes, health results and the clock, and takes
//! each change through the stages of [`stages`] to the maps — over any data plane
//! ([`MapOps`]: the kernel's in lbd, an in-memory one that can be told to fail in
//! tests) and any node ([`Host`]).
//!
//! One concern per file: [`stages`] (desired → weighted → plan), `reconcile` (applying,
//! recording, retrying, fade-in ticks), `reload` (the config file and etcd), `health`
//! (probe targets and results), [`snapshot`] (what the admin API is answered from),
//! `views` (services and backends as the admin API shows them).

use std::{net::IpAddr, sync::Arc};

use crate::sources::{etcd::EtcdMirror, slicedir::SliceDir};
use lb_admin::{Histogram, ReconcileRecord};
use lb_model::{
    config::ValidConfig,
    dataplane::{DataplaneError, MapOps, Programmer, Refusal, ServiceSpec},
    fade_state::FadeStarts,
};

mod compose;
pub use compose::{compose, discover};
mod health;
mod reconcile;
mod reload;
pub mod snapshot;
mod specs;
pub mod stages;
mod views;

pub use snapshot::{AgentSnapshot, ProgrammedView};
use specs::state_path;
pub use specs::{
    BackendHealth, HealthMap, dsr_backends, global_config, service_specs, service_specs_with,
    specs_at, weights_moved,
};
pub use stages::{Checked, Desired, Weighted, check};
pub use views::{backend_views, service_views, service_views_with};

/// What a reconcile changes on the node besides the maps. The kernel's is
/// `lb_userspace::node::KernelHost`; tests use one that does nothing, so that reconciles run without
/// root.
pub trait Host {
    /// Makes the kernel keep the neighbour entries of `addrs` resolved on the node's
    /// interface, so the data plane's FIB lookups find a next hop. Every address is
    /// tried (one batch, not a round trip each) before a failure is reported.
    ///
    /// # Errors
    /// [`AgentError::Neighbour`] for the first address that failed.
    fn keep_resolved(&mut self, addrs: &[IpAddr]) -> Result<(), AgentError>;

    /// Enables IPv6 forwarding on the interface (once; later calls do nothing).
    ///
    /// # Errors
    /// [`AgentError::Sysctl`].
    fn enable_ipv6_forwarding(&mut self) -> Result<(), AgentError>;

    /// The node's route towards a tunnel backend `addr`, if there is one: its next hop
    /// when it leaves by the node's interface, and the source it prefers (the outer
    /// source of tunnel packets when `[node.tunnel]` names none).
    fn tunnel_route(&mut self, addr: IpAddr) -> Option<TunnelRoute>;

    /// Routes health probes of tunnel services of one family (`v6`) out of the node's
    /// interface via `gateway` (a policy rule on the probe mark and a table of its
    /// own, see `lb_dataplane::policy`), or removes that route (`None`). Failures are
    /// logged: the probes then fail, and the backends show unhealthy.
    fn route_probes(&mut self, v6: bool, gateway: Option<IpAddr>);
}

/// What the node's route towards a tunnel backend says ([`Host::tunnel_route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunnelRoute {
    /// The next hop (gateway, or the backend itself when on-link) when the route leaves
    /// by the node's interface: what the backend's packets need resolved.
    pub next_hop: Option<IpAddr>,
    /// The source the route prefers.
    pub source: Option<IpAddr>,
}

/// A node that changes nothing: for agents over an in-memory data plane (tests,
/// benchmarks, checks), which need no neighbour entries and no sysctls.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHost;

impl Host for NoHost {
    fn keep_resolved(&mut self, _: &[IpAddr]) -> Result<(), AgentError> {
        Ok(())
    }

    fn enable_ipv6_forwarding(&mut self) -> Result<(), AgentError> {
        Ok(())
    }

    fn tunnel_route(&mut self, _: IpAddr) -> Option<TunnelRoute> {
        None
    }

    fn route_probes(&mut self, _: bool, _: Option<IpAddr>) {}
}

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
    /// The rtnetlink socket for neighbour entries could not be opened.
    #[error("opening an rtnetlink socket for backend neighbour entries: {source}")]
    Netlink {
        /// Why.
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
    /// What runs: the file's services plus etcd's, and what the slices say.
    desired: Desired,
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
    applied: Arc<Vec<ServiceSpec>>,
    /// Whether any backend's ramp is still running; when not, ticks do nothing at all.
    fading: bool,
    /// Table rebuilds done because a fade-in ramp moved weights.
    fade_rebuilds: u64,
    /// Health of checked backends (only backends that are still listed).
    health: Arc<HealthMap>,
    /// The watched EndpointSlice directory, if configured.
    slices: Option<SliceDir>,
    /// Reconciles so far, their latency and the latest outcome.
    reconciles: Histogram,
    last_reconcile: Option<ReconcileRecord>,
    /// The last reconcile failed: the next tick tries again from the current state.
    retry: bool,
    /// Services the last plan refused (each problem is logged once).
    refused: Vec<Refusal>,
    /// The tunnel settings last written to the data plane.
    tunnel: Option<lb_common::TunnelConfig>,
    /// The routes towards tunnel backends, asked once per backend (their next hops
    /// kept resolved, their sources the default outer sources).
    tunnel_hops: std::collections::BTreeMap<IpAddr, Option<TunnelRoute>>,
    /// The gateways health probes of tunnel services are routed via, IPv4 and IPv6
    /// (see [`Host::route_probes`]), as last set.
    probe_gateways: [Option<IpAddr>; 2],
    /// Parts of the last snapshot still valid (see [`Agent::snapshot`]).
    cache: snapshot::Cache,
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
            desired: Desired {
                config: Arc::new(config),
                discovered,
            },
            etcd,
            etcd_rejected: Vec::new(),
            drained: Vec::new(),
            starts,
            applied: Arc::default(),
            fading: false,
            fade_rebuilds: 0,
            health: Arc::default(),
            slices,
            reconciles: Histogram::default(),
            last_reconcile: None,
            retry: false,
            refused: Vec::new(),
            tunnel: None,
            tunnel_hops: std::collections::BTreeMap::new(),
            probe_gateways: [None; 2],
            cache: snapshot::Cache::default(),
        };
        let weighted = agent.weighted_now(std::time::SystemTime::now());
        reconcile::save_starts(&mut agent.starts);
        if let Err(err) = agent.reprogram(weighted, "start") {
            tracing::error!(error = %err, "programming the sources' services failed, retrying every second");
        }
        agent
    }
}

impl<D, H> Agent<D, H> {
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
            config: Arc::unwrap_or_clone(self.desired.config),
            applied: Arc::unwrap_or_clone(self.applied),
            drained: self.drained,
        }
    }

    /// The config in force: the file's services plus etcd's.
    pub fn config(&self) -> &ValidConfig {
        &self.desired.config
    }

    /// Stage 1 as it stands: the running services and what the slices say.
    pub fn desired(&self) -> &Desired {
        &self.desired
    }

    /// The etcd mirror, if `node.etcd` is set.
    pub fn etcd(&self) -> Option<&EtcdMirror> {
        self.etcd.as_ref()
    }

    /// etcd services left out, with why.
    pub fn etcd_rejected(&self) -> &[(String, String)] {
        &self.etcd_rejected
    }

    /// Health of checked backends, by service and address.
    pub fn health(&self) -> &HealthMap {
        &self.health
    }
}

#[cfg(test)]
mod tests;
