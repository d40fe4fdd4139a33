//! The stages a reconcile goes through, each a value of its own:
//!
//! 1. [`Desired`]: what the sources say — the services (the config file's plus
//!    etcd's) and the endpoints discovered for them (slice directory, etcd);
//! 2. [`Weighted`]: the service specs at a moment, health and fade-in applied to the
//!    weights;
//! 3. [`Plan`]: what the data plane needs written to serve them, tables built — pure,
//!    made from the programmer's view of what is programmed;
//! 4. apply: [`Programmer::apply_plan`] writes it (the only stage with I/O).
//!
//! `lbd --check-config --plan` runs the first three on the config's own files and
//! prints the plan; the agent runs all four on every change.

use std::{sync::Arc, time::SystemTime};

use lb_model::{
    config::ValidConfig,
    dataplane::{Plan, Programmer, ServiceSpec},
    fade_state::FadeStarts,
};

use super::specs::{HealthMap, specs_at};
use crate::sources::slicedir::{Discovered, SliceDir};

/// Stage 1: the services to run and the endpoints the sources discovered for them.
#[derive(Clone, Debug)]
pub struct Desired {
    /// Services and node settings: the config file's services plus etcd's.
    pub config: Arc<ValidConfig>,
    /// Endpoints (and their creation times) from EndpointSlices, by Kubernetes service.
    pub discovered: Discovered,
}

impl Desired {
    /// What the config's own files say, read once: its services, and the endpoints
    /// of its slice directory if it names one. etcd is not asked (a check must not
    /// depend on the network). Returns the directory's problem, if it has one.
    #[must_use]
    pub fn from_files(config: ValidConfig) -> (Self, Option<String>) {
        let (discovered, problem) = if config.node.endpointslice_dir.is_empty() {
            (Discovered::default(), None)
        } else {
            let mut dir = SliceDir::new(&config.node.endpointslice_dir);
            dir.scan();
            (super::discover(Some(&dir), None), dir.problem())
        };
        let desired = Self {
            config: Arc::new(config),
            discovered,
        };
        (desired, problem)
    }

    /// Stage 2 at `now`: unhealthy backends at weight 0, fading ones scaled down.
    /// Records first sight of new backends in `starts` (not saved here).
    pub fn weighted(
        &self,
        starts: &mut FadeStarts,
        health: &HealthMap,
        now: SystemTime,
    ) -> Weighted {
        let (specs, fading) = specs_at(&self.config, &self.discovered, starts, health, now);
        Weighted { specs, fading }
    }
}

/// Stage 2: the specs the data plane is to serve, effective weights included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Weighted {
    /// One per service, in config order.
    pub specs: Vec<ServiceSpec>,
    /// Whether a fade-in ramp is still running (the weights will move again).
    pub fading: bool,
}

/// Stages 1 to 3 for a config on its own, as `lbd --check-config --plan` runs them:
/// the config's files read once (no etcd), weights as of `now` with every backend
/// healthy and the ramps of the node's fade-in state file, planned against
/// `programmer` (adopted from the running node's pinned maps, or empty).
#[derive(Debug)]
pub struct Checked {
    /// What the sources say.
    pub desired: Desired,
    /// The slice directory's problem, if any.
    pub problem: Option<String>,
    /// The specs with their weights.
    pub weighted: Weighted,
    /// What would be written.
    pub plan: Plan,
}

/// Runs [`Checked`]'s stages.
#[must_use]
pub fn check(config: ValidConfig, programmer: &Programmer, now: SystemTime) -> Checked {
    let mut starts = FadeStarts::load(super::state_path(&config));
    let (desired, problem) = Desired::from_files(config);
    let weighted = desired.weighted(&mut starts, &HealthMap::new(), now);
    let plan = weighted.plan(programmer);
    Checked {
        desired,
        problem,
        weighted,
        plan,
    }
}

impl Weighted {
    /// Stage 3: what serving these specs takes, given what `programmer` says is
    /// programmed.
    #[must_use]
    pub fn plan(&self, programmer: &Programmer) -> Plan {
        programmer.plan(&self.specs)
    }
}
