//! What the admin API shows of services and backends: as the tables see them
//! (configured and effective weights, health, fade-in) joined with the data plane's
//! counters. Computed from an [`AgentSnapshot`] in time linear in the number of
//! backends: a scrape of 30,000 backends must not cost services × backends.

use std::{collections::HashMap, net::IpAddr};

use lb_admin::{BackendView, ServiceView};
use lb_model::{
    dataplane::{DataplaneError, FlowCounts, ServiceSpec, Traffic},
    explain::{mode_name, vip_text},
    fadein::WEIGHT_SCALE,
};

use super::AgentSnapshot;

/// Every running service with its table and traffic.
///
/// # Errors
/// A counter read failed.
pub fn service_views(
    snap: &AgentSnapshot,
    traffic: &impl Traffic,
) -> Result<Vec<ServiceView>, DataplaneError> {
    service_views_with(snap, traffic, &backend_views(snap, traffic, None, None)?)
}

/// [`service_views`] given every backend's view (as [`backend_views`] orders them:
/// service by service).
///
/// # Errors
/// A counter read failed.
pub fn service_views_with(
    snap: &AgentSnapshot,
    traffic: &impl Traffic,
    backends: &[BackendView],
) -> Result<Vec<ServiceView>, DataplaneError> {
    // (serving, fading) per service, in one pass over the backends.
    let mut counts: HashMap<&str, (usize, usize)> = HashMap::with_capacity(snap.applied.len());
    for b in backends {
        let c = counts.entry(b.service.as_str()).or_default();
        c.0 += usize::from(b.effective_weight > 0.0);
        c.1 += usize::from(b.state == "fading");
    }
    let mut out = Vec::with_capacity(snap.applied.len());
    for spec in snap.applied.iter() {
        let programmed = snap.programmed.get(&spec.key);
        let stats = match programmed {
            Some(p) => traffic.vip_stats(p.service_id)?,
            None => Default::default(),
        };
        let (serving, fading) = counts.get(spec.name.as_str()).copied().unwrap_or_default();
        out.push(ServiceView {
            name: spec.name.clone(),
            vip: vip_text(&spec.key),
            mode: mode_name(Some(spec.mode)).to_owned(),
            service_id: programmed.map(|p| p.service_id),
            backends: spec.backends.len(),
            serving,
            fading,
            table_size: programmed.map_or(0, |p| p.table_size),
            table_digest: programmed.map_or_else(String::new, |p| format!("{:016x}", p.digest)),
            packets: stats.packets,
            bytes: stats.bytes,
            new_flows: stats.new_flows,
        });
    }
    Ok(out)
}

/// Backends of one service (or of all), with configured and effective weight,
/// fade-in progress, health, counters and — given `flows` — the conntrack entries
/// pinned to each (0 without).
///
/// # Errors
/// A map read failed.
pub fn backend_views(
    snap: &AgentSnapshot,
    traffic: &impl Traffic,
    service: Option<&str>,
    flows: Option<&FlowCounts>,
) -> Result<Vec<BackendView>, DataplaneError> {
    let applied: HashMap<&str, &ServiceSpec> =
        snap.applied.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut out = Vec::new();
    for (svc, spec) in snap.config.services.iter().zip(snap.configured.iter()) {
        if service.is_some_and(|s| s != svc.name) {
            continue;
        }
        // Effective weight of each backend as programmed, by address.
        let effective: HashMap<IpAddr, u32> = applied
            .get(svc.name.as_str())
            .map(|a| {
                a.backends
                    .iter()
                    .enumerate()
                    .map(|(j, &b)| (b, a.weights.get(j).copied().unwrap_or(1)))
                    .collect()
            })
            .unwrap_or_default();
        let programmed = snap.programmed.get(&spec.key);
        let unit = if svc.fade_in.is_some() {
            f64::from(WEIGHT_SCALE)
        } else {
            1.0
        };
        let health = snap.health.get(&svc.name);
        for (i, &addr) in spec.backends.iter().enumerate() {
            let weight = spec.weights.get(i).copied().unwrap_or(1);
            let effective = effective.get(&addr).map_or(0.0, |&w| f64::from(w) / unit);
            let healthy = health.and_then(|h| h.get(&addr)).map(|h| h.health.healthy);
            let health = match (&svc.health_check, healthy) {
                (None, _) => "unchecked",
                (Some(_), Some(false)) => "unhealthy",
                (Some(_), _) => "healthy",
            };
            let percent = if weight == 0 {
                0.0
            } else {
                (effective / f64::from(weight) * 100.0).min(100.0)
            };
            let state = if weight == 0 {
                "draining"
            } else if health == "unhealthy" {
                "unhealthy"
            } else if percent < 99.5 {
                "fading"
            } else {
                "active"
            };
            let backend_id = programmed.and_then(|p| p.backend_ids.get(&addr).copied());
            let stats = match backend_id {
                Some(id) => traffic.backend_stats(id)?,
                None => Default::default(),
            };
            out.push(BackendView {
                service: svc.name.clone(),
                address: addr,
                backend_id,
                port: spec.ports.get(i).copied().filter(|&p| p != 0),
                state: state.to_owned(),
                weight,
                effective_weight: effective,
                fade_in_percent: percent,
                health: health.to_owned(),
                packets: stats.packets,
                bytes: stats.bytes,
                new_flows: stats.new_flows,
                flows: backend_id
                    .zip(flows)
                    .and_then(|(id, f)| f.per_backend.get(&id).copied())
                    .unwrap_or(0),
            });
        }
    }
    Ok(out)
}
