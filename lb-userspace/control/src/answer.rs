//! Answering admin queries from a snapshot of the agent's state ([`AgentSnapshot`])
//! and the data plane's live counters, on whichever thread serves the admin API — never
//! the one that reconciles.

use std::time::Instant;

use lb_admin::{
    Status,
    metrics::{self, Snapshot},
    server::{Query, Reply},
};
use lb_model::{
    config::XdpMode,
    dataplane::{DataplaneError, FlowCounts, SweepStats, Traffic},
};

use crate::agent::{AgentSnapshot, backend_views, service_views, service_views_with};

/// What lbd knows about itself beyond the agent.
#[derive(Clone, Debug)]
pub struct Meta {
    /// When lbd started.
    pub started: Instant,
    /// The config file.
    pub config_path: String,
    /// Successful config loads so far.
    pub generation: u64,
    /// Why the latest reload was rejected, until one succeeds.
    pub config_error: Option<String>,
    /// The L7 proxy's counters as of this query, if it runs.
    pub l7: Option<lb_l7::stats::L7Snapshot>,
    /// What lbd's `nat` sweeper released, if it runs.
    pub nat_sweep: Option<std::sync::Arc<SweepStats>>,
}

impl Meta {
    /// Records a reload's outcome.
    pub fn reloaded(&mut self, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => {
                self.generation += 1;
                self.config_error = None;
            }
            Err(e) => self.config_error = Some(e),
        }
    }
}

/// The reply to `query` from `snap` and the live counters of `traffic`. `flows` are
/// the conntrack counts for the queries that need them ([`Query::needs_flows`]); lbd
/// walks conntrack on a blocking thread and passes them in — without them they are
/// counted here. Map read failures become a 500 that says which read failed.
pub fn answer(
    snap: &AgentSnapshot,
    meta: &Meta,
    traffic: &impl Traffic,
    query: &Query,
    flows: Option<FlowCounts>,
) -> Reply {
    let flows = || match &flows {
        Some(f) => Ok(f.clone()),
        None => traffic.flow_counts(),
    };
    let result = match query {
        Query::Status => flows()
            .and_then(|f| status(snap, meta, traffic, &f))
            .map(Reply::json),
        Query::Services => service_views(snap, traffic).map(Reply::json),
        Query::Backends(Some(name)) if !snap.config.services.iter().any(|s| &s.name == name) => {
            Ok(Reply::error(404, format!("no service named {name:?}")))
        }
        Query::Backends(service) => flows()
            .and_then(|f| backend_views(snap, traffic, service.as_deref(), Some(&f)))
            .map(Reply::json),
        Query::Metrics => flows().and_then(|f| metrics_text(snap, meta, traffic, &f)),
    };
    result.unwrap_or_else(|e| Reply::error(500, format!("reading the data plane: {e}")))
}

/// `GET /v1/status`, given the flow tables' counts.
///
/// # Errors
/// A map read failed.
pub fn status(
    snap: &AgentSnapshot,
    meta: &Meta,
    traffic: &impl Traffic,
    flows: &FlowCounts,
) -> Result<Status, DataplaneError> {
    let node = &snap.config.node;
    let flow_tables = flow_tables(snap, meta, traffic, flows)?;
    Ok(Status {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        api_version: lb_admin::API_VERSION,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |r| r.trim().to_owned()),
        pid: std::process::id(),
        uptime_seconds: meta.started.elapsed().as_secs_f64(),
        config_path: meta.config_path.clone(),
        config_generation: meta.generation,
        interface: node.interface.clone(),
        hook: node.hook,
        xdp_mode: match node.xdp_mode {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        }
        .to_owned(),
        pin_path: node.pin_path.clone(),
        services: snap.config.services.len(),
        sources: {
            let mut sources = snap.sources(&meta.config_path, meta.config_error.as_deref());
            // Route files and inline routes of l7 services are sources too.
            for (origin, error) in meta.l7.iter().flat_map(|l| &l.routes) {
                sources.push(lb_admin::SourceStatus {
                    kind: "routes".into(),
                    location: origin.clone(),
                    state: error.as_ref().map_or_else(
                        || "ok".to_owned(),
                        |e| format!("rejected, previous routes serve: {e}"),
                    ),
                    revision: None,
                    rejected: Vec::new(),
                });
            }
            sources
        },
        reconciles: snap.reconciles.count,
        last_reconcile: snap.last_reconcile.clone(),
        fade_in_rebuilds: snap.fade_rebuilds,
        conntrack_entries: flows.total,
        flow_tables,
    })
}

/// The flow tables' fill, and `nat` ports released by the data plane (taking over an
/// expired port) and by lbd's sweeper together.
fn flow_tables(
    snap: &AgentSnapshot,
    meta: &Meta,
    maps: &impl Traffic,
    flows: &FlowCounts,
) -> Result<lb_admin::FlowTablesStatus, DataplaneError> {
    use lb_common::Counter;
    use std::sync::atomic::Ordering::Relaxed;
    let sweep = |f: fn(&SweepStats) -> u64| meta.nat_sweep.as_deref().map_or(0, f);
    // Every new dsr flow is half-open first; the data plane counts them per service.
    let mut created = 0;
    for spec in snap
        .applied
        .iter()
        .filter(|s| s.mode == lb_common::ForwardingMode::Dsr)
    {
        if let Some(p) = snap.programmed.get(&spec.key) {
            created += maps.vip_stats(p.service_id)?.new_flows;
        }
    }
    let promoted = maps.counter(Counter::EmbryonicPromoted)?;
    Ok(lb_admin::FlowTablesStatus {
        conntrack: flows.conntrack,
        embryonic: flows.embryonic,
        nat: flows.nat,
        nat_released: lb_admin::NatReleased {
            fin: maps.counter(Counter::NatReleasedFin)? + sweep(|s| s.fin.load(Relaxed)),
            rst: maps.counter(Counter::NatReleasedRst)? + sweep(|s| s.rst.load(Relaxed)),
            timeout: maps.counter(Counter::NatReleasedTimeout)?
                + sweep(|s| s.timeout.load(Relaxed)),
        },
        embryonic_created: created,
        embryonic_evicted: created
            .saturating_sub(promoted)
            .saturating_sub(flows.embryonic.entries),
    })
}

fn metrics_text(
    snap: &AgentSnapshot,
    meta: &Meta,
    traffic: &impl Traffic,
    flows: &FlowCounts,
) -> Result<Reply, DataplaneError> {
    let status = status(snap, meta, traffic, flows)?;
    let backends = backend_views(snap, traffic, None, Some(flows))?;
    let services = service_views_with(snap, traffic, &backends)?;
    let counters = traffic.counters()?;
    Ok(Reply {
        status: 200,
        content_type: metrics::CONTENT_TYPE,
        body: metrics::render(&Snapshot {
            status: &status,
            services: &services,
            backends: &backends,
            counters: &counters,
            reconciles: &snap.reconciles,
            l7: meta.l7.as_ref(),
        }),
    })
}
