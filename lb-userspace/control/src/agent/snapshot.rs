//! What the admin API is answered from: an immutable copy of the agent's state after
//! its latest step, shared with the threads that answer queries. A reconcile that takes
//! a second (a cold sync of thousands of services) never delays an answer, and an
//! answer never delays a reconcile; the live counters come from the data plane itself.
//!
//! Taking a snapshot is cheap: the large parts (config, specs, health) are shared
//! behind [`Arc`]s the agent replaces, or copies on write, when they change; the views
//! derived from them are cached until their inputs change.

use std::{collections::HashMap, net::IpAddr, sync::Arc};

use lb_admin::{Histogram, ReconcileRecord, SourceStatus};
use lb_common::VipKey;
use lb_model::{config::ValidConfig, dataplane::ServiceSpec};

use super::{Agent, HealthMap, service_specs_with};

/// The agent's state as of one moment.
#[derive(Clone, Debug)]
pub struct AgentSnapshot {
    /// The config in force (the file's services plus etcd's).
    pub config: Arc<ValidConfig>,
    /// Each service as configured (configured weights, all discovered endpoints), in
    /// config order.
    pub configured: Arc<Vec<ServiceSpec>>,
    /// What was last programmed, effective weights included.
    pub applied: Arc<Vec<ServiceSpec>>,
    /// What the data plane holds for each programmed service.
    pub programmed: Arc<HashMap<VipKey, ProgrammedView>>,
    /// Health of checked backends.
    pub health: Arc<HealthMap>,
    /// The sources other than the config file (slice directory, etcd) and their state.
    pub sources: Vec<SourceStatus>,
    /// Reconcile latencies so far.
    pub reconciles: Histogram,
    /// The latest reconcile's outcome.
    pub last_reconcile: Option<ReconcileRecord>,
    /// Table rebuilds done for fade-in.
    pub fade_rebuilds: u64,
}

/// One programmed service as the data plane holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgrammedView {
    /// Its id (the index of its counters).
    pub service_id: u32,
    /// Its table's size (0: takes no new flows).
    pub table_size: u32,
    /// Its table's digest.
    pub digest: u64,
    /// Each backend's id (the index of its counters), by address.
    pub backend_ids: HashMap<IpAddr, u32>,
}

/// Snapshot parts that stay valid until their inputs change.
#[derive(Debug, Default)]
pub(super) struct Cache {
    /// Invalidated when the config or the discovered endpoints change.
    pub(super) configured: Option<Arc<Vec<ServiceSpec>>>,
    /// Invalidated by every reconcile.
    pub(super) programmed: Option<Arc<HashMap<VipKey, ProgrammedView>>>,
}

impl<D, H> Agent<D, H> {
    /// The state to answer admin queries from, as of now.
    pub fn snapshot(&mut self) -> AgentSnapshot {
        let configured = match &self.cache.configured {
            Some(c) => Arc::clone(c),
            None => {
                let c = Arc::new(service_specs_with(
                    &self.desired.config,
                    &self.desired.discovered,
                ));
                self.cache.configured = Some(Arc::clone(&c));
                c
            }
        };
        let programmed = match &self.cache.programmed {
            Some(p) => Arc::clone(p),
            None => {
                let p = Arc::new(self.programmed_views());
                self.cache.programmed = Some(Arc::clone(&p));
                p
            }
        };
        AgentSnapshot {
            config: Arc::clone(&self.desired.config),
            configured,
            applied: Arc::clone(&self.applied),
            programmed,
            health: Arc::clone(&self.health),
            sources: self.source_states(),
            reconciles: self.reconciles.clone(),
            last_reconcile: self.last_reconcile.clone(),
            fade_rebuilds: self.fade_rebuilds,
        }
    }

    fn programmed_views(&self) -> HashMap<VipKey, ProgrammedView> {
        self.applied
            .iter()
            .filter_map(|spec| {
                let p = self.programmer.service(&spec.key)?;
                let view = ProgrammedView {
                    service_id: p.info.service_id,
                    table_size: p.info.table_size,
                    digest: p.digest(),
                    backend_ids: p
                        .backends
                        .iter()
                        .copied()
                        .zip(p.backend_ids.iter().copied())
                        .collect(),
                };
                Some((spec.key, view))
            })
            .collect()
    }

    /// The slice directory and etcd, and whether each reads cleanly.
    fn source_states(&self) -> Vec<SourceStatus> {
        let mut out = Vec::new();
        if let Some(dir) = &self.slices {
            out.push(SourceStatus {
                kind: "endpointslices".into(),
                location: self.desired.config.node.endpointslice_dir.clone(),
                state: dir.problem().unwrap_or_else(|| "ok".into()),
                revision: None,
                rejected: Vec::new(),
            });
        }
        if let (Some(mirror), Some(settings)) = (&self.etcd, &self.desired.config.node.etcd) {
            let state = match (&mirror.down, mirror.revision) {
                (Some(e), _) => format!("degraded, keeping the last state: {e}"),
                (None, 0) => "connecting".into(),
                (None, _) => "ok".into(),
            };
            let mut rejected: Vec<String> = mirror
                .rejected()
                .map(|(k, why)| format!("{k}: {why}"))
                .collect();
            rejected.extend(
                self.etcd_rejected
                    .iter()
                    .map(|(k, why)| format!("{k}: {why}")),
            );
            out.push(SourceStatus {
                kind: "etcd".into(),
                location: format!("{} {}", settings.endpoints.join(","), settings.prefix),
                state,
                revision: Some(mirror.revision),
                rejected,
            });
        }
        out
    }
}

impl AgentSnapshot {
    /// Every source with its state, the config file first (`config_error`: why its
    /// latest version was rejected).
    #[must_use]
    pub fn sources(&self, config_path: &str, config_error: Option<&str>) -> Vec<SourceStatus> {
        let mut out = vec![SourceStatus {
            kind: "config".into(),
            location: config_path.to_owned(),
            state: config_error.map_or_else(
                || "ok".into(),
                |e| format!("rejected, running the last good config: {e}"),
            ),
            revision: None,
            rejected: Vec::new(),
        }];
        out.extend(self.sources.iter().cloned());
        out
    }
}
