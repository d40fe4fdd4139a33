//! Health checks from the agent's side: which probes the running services ask for, what
//! a result changes, and forgetting backends that are gone.

use std::{
    collections::HashSet,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::SystemTime,
};

use lb_common::{ForwardingMode, probe::probe_mark};
use lb_model::{
    config::HealthCheckKind,
    dataplane::{MapOps, ServiceSpec, from_addr16},
};

use super::{Agent, AgentError, Host};
use crate::health::{Outcome, Probe, ProbeTarget, Report};

impl<D, H> Agent<D, H> {
    /// The health probes the running services ask for: one per backend of each
    /// service with a `health_check`, in service then backend order. A backend of an
    /// `ipip`/`gue` service is probed through the tunnel: at VIP:port (it answers from
    /// the VIP, as for clients) with the probe mark of its backend id, which the node's
    /// policy rule and `lb_probe` act on; a backend without an id yet (not programmed)
    /// is not probed until it has one.
    pub fn probe_targets(&self) -> Vec<ProbeTarget> {
        let mut targets = Vec::new();
        let applied: std::collections::HashMap<&str, &ServiceSpec> =
            self.applied.iter().map(|s| (s.name.as_str(), s)).collect();
        for svc in &self.desired.config.services {
            let Some(hc) = &svc.health_check else {
                continue;
            };
            let (interval, timeout) = (hc.interval.get(), hc.timeout.get());
            let probe = match hc.kind {
                HealthCheckKind::Tcp => Probe::Tcp,
                HealthCheckKind::Http => Probe::Http {
                    path: hc.path.clone(),
                    expect: hc.expect_status.map_or((200, 399), |s| (s, s)),
                },
            };
            let port = hc.port.unwrap_or(svc.port.key_port());
            let Some(spec) = applied.get(svc.name.as_str()) else {
                continue;
            };
            let gue = spec.mode == ForwardingMode::Gue;
            let tunnel = gue || spec.mode == ForwardingMode::Ipip;
            let programmed = self.programmer.service(&spec.key);
            let vip = from_addr16(spec.key.addr);
            for &addr in &spec.backends {
                let (target, mark) = if tunnel {
                    let Some(id) = programmed.and_then(|p| {
                        let i = p.backends.iter().position(|&b| b == addr)?;
                        p.backend_ids.get(i).copied()
                    }) else {
                        continue;
                    };
                    (SocketAddr::new(vip, port), Some(probe_mark(id, gue)))
                } else {
                    (SocketAddr::new(addr, port), None)
                };
                targets.push(ProbeTarget {
                    service: svc.name.clone(),
                    backend: addr,
                    target,
                    mark,
                    probe: probe.clone(),
                    interval,
                    timeout,
                });
            }
        }
        targets
    }

    /// Drops the health of backends no longer listed in `specs` (and of services
    /// gone): a backend that comes back starts healthy, like a new one, and the map
    /// does not grow with every backend ever seen.
    pub(super) fn prune_health(&mut self, specs: &[ServiceSpec]) {
        if self.health.is_empty() {
            return;
        }
        let listed: HashSet<(&str, IpAddr)> = specs
            .iter()
            .flat_map(|s| s.backends.iter().map(|&a| (s.name.as_str(), a)))
            .collect();
        let stale = self.health.iter().any(|(svc, backends)| {
            backends
                .keys()
                .any(|&a| !listed.contains(&(svc.as_str(), a)))
        });
        if !stale {
            return;
        }
        let health = Arc::make_mut(&mut self.health);
        health.retain(|svc, backends| {
            backends.retain(|&a, _| listed.contains(&(svc.as_str(), a)));
            !backends.is_empty()
        });
    }
}

/// A service's health-check thresholds `(rise, fall)` (none: not checked) and the
/// backends it lists.
type ServiceChecks = (Option<(u32, u32)>, HashSet<IpAddr>);

impl<D: MapOps, H: Host> Agent<D, H> {
    /// Records a probe result; see [`Agent::observe_all`].
    ///
    /// # Errors
    /// As [`Agent::observe_all`].
    pub fn observe(
        &mut self,
        service: &str,
        backend: IpAddr,
        outcome: &Outcome,
        now: SystemTime,
    ) -> Result<bool, AgentError> {
        let report = (service.to_owned(), backend, outcome.clone());
        self.observe_all(std::slice::from_ref(&report), now)
            .map(|n| n > 0)
    }

    /// Records probe results, in order. If any backend changed state the services
    /// are reprogrammed, once for all of them: an unhealthy backend gets no new flows
    /// (its established flows continue); a recovered one fades in again from now — so
    /// a thousand backends failing together cost one reconcile, not a thousand.
    /// Results for backends or services that are no longer running (a probe in flight
    /// when they left) are ignored. Returns how many backends changed state.
    ///
    /// # Errors
    /// A data-plane failure (the state changes are kept; the next tick retries).
    pub fn observe_all(
        &mut self,
        reports: &[Report],
        now: SystemTime,
    ) -> Result<usize, AgentError> {
        let mut transitions = 0;
        // Per service seen in this batch: its (rise, fall), and the backends it lists.
        let mut services: std::collections::HashMap<&str, ServiceChecks> =
            std::collections::HashMap::new();
        for (service, backend, outcome) in reports {
            let (check, listed) = services.entry(service.as_str()).or_insert_with(|| {
                let check = self
                    .desired
                    .config
                    .services
                    .iter()
                    .find(|s| s.name == *service)
                    .and_then(|s| s.health_check.as_ref())
                    .map(|hc| (hc.rise, hc.fall));
                let listed = self
                    .applied
                    .iter()
                    .find(|s| s.name == *service)
                    .map(|s| s.backends.iter().copied().collect())
                    .unwrap_or_default();
                (check, listed)
            });
            let Some((rise, fall)) = *check else {
                continue;
            };
            if !listed.contains(backend) {
                continue;
            }
            if self.record_result(service, *backend, outcome, (rise, fall), now) {
                transitions += 1;
            }
        }
        if transitions > 0 {
            let weighted = self.weighted_now(now);
            self.reprogram(weighted, "health")?;
        }
        Ok(transitions)
    }

    /// Counts one result into the backend's rise/fall state; returns whether the
    /// backend changed state (and logs it).
    fn record_result(
        &mut self,
        service: &str,
        backend: IpAddr,
        outcome: &Outcome,
        (rise, fall): (u32, u32),
        now: SystemTime,
    ) -> bool {
        let up = *outcome == Outcome::Up;
        // Most results change nothing: look before taking the map for writing (which
        // copies it while a snapshot shares it).
        let current = self
            .health
            .get(service)
            .and_then(|b| b.get(&backend))
            .copied()
            .unwrap_or_default();
        let mut next = current;
        let changed = next.health.observe(up, rise, fall);
        if changed == Some(true) {
            next.recovered = Some(now);
        }
        if next.health != current.health {
            Arc::make_mut(&mut self.health)
                .entry(service.to_owned())
                .or_default()
                .insert(backend, next);
        }
        match (changed, outcome) {
            (Some(true), _) => {
                tracing::info!(service, backend = %backend, "backend healthy again, fading in");
            }
            (Some(false), Outcome::Down(why)) => {
                tracing::warn!(service, backend = %backend, error = %why, "backend unhealthy: no new flows");
            }
            _ => {}
        }
        changed.is_some()
    }
}
