//! Reconciling: a [`Weighted`] set of specs planned and applied, with the node's
//! neighbours and forwarding kept in step; every reconcile recorded (latency, trigger,
//! outcome), a failed one retried by the next tick, fade-in ramps stepped.

use std::{
    net::IpAddr,
    sync::Arc,
    time::{Instant, SystemTime},
};

use lb_admin::{Histogram, ReconcileRecord};
use lb_model::{
    dataplane::{ApplyReport, MapOps, ServiceSpec},
    fade_state::FadeStarts,
};

use super::{
    Agent, AgentError, Host, compose, specs::dsr_backends, specs::weights_moved, stages::Weighted,
};

impl<D: MapOps, H: Host> Agent<D, H> {
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
        let scanned = self.slices.as_mut().is_some_and(|d| d.scan_at(now));
        if scanned {
            self.desired.discovered = compose::discover(self.slices.as_ref(), self.etcd.as_ref());
            self.cache.configured = None;
        }
        let mut rebuilt = false;
        if scanned || self.retry {
            // A failed reconcile (a map write, a neighbour entry) is retried with what
            // the sources say now.
            let retrying = self.retry;
            let weighted = self.weighted_now(now);
            save_starts(&mut self.starts);
            let trigger = if scanned { "endpointslices" } else { "retry" };
            let report = self.reprogram(weighted, trigger)?;
            if scanned {
                tracing::info!(
                    source = "endpointslices",
                    programmed = report.programmed,
                    unchanged = report.unchanged,
                    "EndpointSlices changed"
                );
            }
            if retrying {
                tracing::info!("retried the failed reconcile: the data plane is up to date");
            }
            rebuilt = true;
        }
        if !self.fading {
            return Ok(rebuilt);
        }
        let weighted = self.weighted_now(now);
        if !weighted.fading {
            tracing::info!("fade-in complete: every backend at full weight");
        }
        if !weights_moved(&self.applied, &weighted.specs, weighted.fading) {
            self.fading = weighted.fading;
            return Ok(rebuilt);
        }
        self.reprogram(weighted, "fade-in")?;
        self.fade_rebuilds += 1;
        Ok(true)
    }

    /// Plans and applies `weighted` (see [`Agent::apply_weighted`]) and records the
    /// reconcile's latency and outcome under `trigger`. Services the plan refused are
    /// recorded as the reconcile's error (and logged once) but not retried: the same
    /// input would be refused again; the next change of the sources plans anew.
    pub(super) fn reprogram(
        &mut self,
        weighted: Weighted,
        trigger: &'static str,
    ) -> Result<ApplyReport, AgentError> {
        let span = tracing::info_span!("reconcile", trigger);
        let _entered = span.enter();
        let began = Instant::now();
        let result = self.apply_weighted(weighted);
        self.retry = result.is_err();
        let error = match &result {
            Err(e) => Some(e.to_string()),
            Ok(report) if !report.refused.is_empty() => {
                let problems: Vec<String> =
                    report.refused.iter().map(ToString::to_string).collect();
                Some(format!(
                    "refused, keeping what they had: {}",
                    problems.join("; ")
                ))
            }
            Ok(_) => None,
        };
        if let Ok(report) = &result {
            for r in report.refused.iter().filter(|r| !self.refused.contains(r)) {
                tracing::error!(
                    service = %r.service,
                    error = %r.problem,
                    "service refused: it keeps what it had"
                );
            }
            self.refused.clone_from(&report.refused);
        }
        let record = record(trigger, began, error, &mut self.reconciles);
        let elapsed_ms = record.duration_seconds * 1000.0;
        match &result {
            Ok(report) => tracing::debug!(
                programmed = report.programmed,
                unchanged = report.unchanged,
                removed = report.removed,
                elapsed_ms,
                "reconciled"
            ),
            Err(e) => tracing::debug!(error = %e, elapsed_ms, "reconcile failed"),
        }
        self.last_reconcile = Some(record);
        result
    }

    /// Keeps new backends' neighbours resolved, enables IPv6 forwarding if IPv6 VIPs
    /// appeared, plans and applies, and remembers backends that left (their flows
    /// drain, so their neighbour entries stay until shutdown).
    fn apply_weighted(&mut self, weighted: Weighted) -> Result<ApplyReport, AgentError> {
        let Weighted { specs, fading } = weighted;
        let old = dsr_backends(&self.applied);
        let new = dsr_backends(&specs);
        let added: Vec<IpAddr> = new
            .iter()
            .filter(|a| old.binary_search(a).is_err())
            .copied()
            .collect();
        if !added.is_empty() {
            self.host.keep_resolved(&added)?;
        }
        // The FIB lookup of an IPv6 packet (an IPv6 VIP's, or the outer header to an
        // IPv6 tunnel backend) needs IPv6 forwarding on.
        let tunnel_v6 =
            |s: &ServiceSpec| s.mode.is_tunnel() && s.backends.iter().any(IpAddr::is_ipv6);
        if specs
            .iter()
            .any(|s| !lb_common::maps::is_v4_mapped(&s.key.addr) || tunnel_v6(s))
        {
            self.host.enable_ipv6_forwarding()?;
        }
        self.resolve_tunnel_hops(&specs)?;
        self.write_tunnel(&specs)?;
        self.route_probes(&specs);
        let plan = self.programmer.plan(&specs);
        let result = self
            .programmer
            .apply_plan(&mut self.dataplane, plan, Instant::now());
        // Whatever part of the plan was written (and the list of services it is
        // shown for), the view of it is stale.
        self.cache.programmed = None;
        let report = result?;
        self.drained
            .extend(old.into_iter().filter(|a| new.binary_search(a).is_err()));
        self.prune_health(&specs);
        self.applied = Arc::new(specs);
        self.fading = fading;
        Ok(report)
    }

    /// Writes the tunnel settings the specs need, when they changed: `[node.tunnel]`,
    /// a family without a block taking the source the node's route towards one of its
    /// tunnel backends prefers (asked by [`Self::resolve_tunnel_hops`]).
    fn write_tunnel(&mut self, specs: &[ServiceSpec]) -> Result<(), AgentError> {
        let tunnelled = |v6: bool| tunnel_backends(specs).find(|b| b.is_ipv6() == v6).copied();
        let settings = self.desired.config.tunnel;
        let fallback = |v6: bool, configured: bool| {
            if configured {
                return None;
            }
            let backend = tunnelled(v6)?;
            let src = self
                .tunnel_hops
                .get(&backend)
                .copied()
                .flatten()
                .and_then(|r| r.source);
            if src.is_none() {
                tracing::warn!(%backend, "no route towards a tunnel backend: its packets are dropped (drop_no_route)");
            }
            src
        };
        let v4 = fallback(false, settings.source_v4.is_some());
        let v6 = fallback(true, settings.source_v6.is_some());
        let want = settings.data_plane(v4, v6);
        if self.tunnel != Some(want) {
            self.dataplane.set_tunnel(want)?;
            self.tunnel = Some(want);
        }
        Ok(())
    }

    /// Keeps the next hops of tunnel backends resolved (their gateway, usually: the
    /// data plane's FIB lookup for the outer header needs its neighbour entry), asking
    /// the route of each backend once, when it appears.
    fn resolve_tunnel_hops(&mut self, specs: &[ServiceSpec]) -> Result<(), AgentError> {
        let mut fresh = Vec::new();
        for b in tunnel_backends(specs) {
            if self.tunnel_hops.contains_key(b) {
                continue;
            }
            let route = self.host.tunnel_route(*b);
            let hop = route.and_then(|r| r.next_hop);
            if hop.is_none() {
                tracing::warn!(backend = %b, "no route towards a tunnel backend on the node's interface: its packets are dropped (drop_no_route)");
            }
            self.tunnel_hops.insert(*b, route);
            fresh.extend(hop);
        }
        fresh.sort_unstable();
        fresh.dedup();
        if !fresh.is_empty() {
            self.host.keep_resolved(&fresh)?;
        }
        Ok(())
    }

    /// Routes the health probes of tunnel services with a `health_check`, per VIP
    /// family, via the next hop of one of their backends of that family (resolved
    /// already, see [`Self::resolve_tunnel_hops`]; `lb_probe` finds each probe's own
    /// next hop); removes the route of a family no such service has.
    fn route_probes(&mut self, specs: &[ServiceSpec]) {
        for v6 in [false, true] {
            let want = specs
                .iter()
                .filter(|s| s.mode.is_tunnel())
                .filter(|s| lb_common::maps::is_v4_mapped(&s.key.addr) != v6)
                .filter(|s| {
                    self.desired
                        .config
                        .services
                        .iter()
                        .any(|c| c.name == s.name && c.health_check.is_some())
                })
                .flat_map(|s| s.backends.iter())
                .filter(|b| b.is_ipv6() == v6)
                .find_map(|b| self.tunnel_hops.get(b).copied().flatten()?.next_hop);
            let slot = &mut self.probe_gateways[usize::from(v6)];
            if *slot != want {
                self.host.route_probes(v6, want);
                *slot = want;
            }
        }
    }

    /// Stage 2 now: the specs from the current config, slices, health and ramp starts.
    pub(super) fn weighted_now(&mut self, now: SystemTime) -> Weighted {
        self.desired.weighted(&mut self.starts, &self.health, now)
    }
}

/// The backends of the `ipip`/`gue` services among `specs`.
fn tunnel_backends(specs: &[ServiceSpec]) -> impl Iterator<Item = &IpAddr> {
    specs
        .iter()
        .filter(|s| s.mode.is_tunnel())
        .flat_map(|s| s.backends.iter())
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

pub(super) fn save_starts(starts: &mut FadeStarts) {
    if let Err(err) = starts.save() {
        tracing::warn!(error = %err, "saving fade-in state failed: ramps restart if lbd restarts");
    }
}
