//! What the agent reports through the admin API: services and backends as the tables
//! see them (configured and effective weights, health, fade-in) joined with the data
//! plane's counters.

use super::{Agent, specs::service_specs_with};
use lb_admin::{BackendView, ServiceView, SourceStatus};
use lb_model::{
    dataplane::DataplaneError, dataplane::FlowCounts, dataplane::Traffic, explain::mode_name,
    explain::vip_text, fadein::WEIGHT_SCALE,
};

impl<D: Traffic, H> Agent<D, H> {
    /// Every configured service with its table and traffic.
    ///
    /// # Errors
    /// A counter read failed.
    pub fn service_views(&self) -> Result<Vec<ServiceView>, DataplaneError> {
        self.service_views_with(&self.backend_views(None, None)?)
    }

    /// [`Agent::service_views`] given every backend's view.
    ///
    /// # Errors
    /// A counter read failed.
    pub fn service_views_with(
        &self,
        backends: &[BackendView],
    ) -> Result<Vec<ServiceView>, DataplaneError> {
        let mut out = Vec::with_capacity(self.applied.len());
        for spec in &self.applied {
            let programmed = self.programmer.service(&spec.key);
            let stats = match programmed {
                Some(p) => self.dataplane.vip_stats(p.info.service_id)?,
                None => Default::default(),
            };
            let mine = backends.iter().filter(|b| b.service == spec.name);
            out.push(ServiceView {
                name: spec.name.clone(),
                vip: vip_text(&spec.key),
                mode: mode_name(Some(spec.mode)).to_owned(),
                service_id: programmed.map(|p| p.info.service_id),
                backends: spec.backends.len(),
                serving: mine.clone().filter(|b| b.effective_weight > 0.0).count(),
                fading: mine.filter(|b| b.state == "fading").count(),
                table_size: programmed.map_or(0, |p| p.info.table_size),
                table_digest: programmed
                    .map_or_else(String::new, |p| format!("{:016x}", p.digest())),
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
        &self,
        service: Option<&str>,
        flows: Option<&FlowCounts>,
    ) -> Result<Vec<BackendView>, DataplaneError> {
        let configured = service_specs_with(&self.config, &self.discovered);
        let mut out = Vec::new();
        for (svc, spec) in self.config.services.iter().zip(&configured) {
            if service.is_some_and(|s| s != svc.name) {
                continue;
            }
            let applied = self.applied.iter().find(|a| a.name == svc.name);
            let programmed = self.programmer.service(&spec.key);
            let unit = if svc.fade_in.is_some() {
                f64::from(WEIGHT_SCALE)
            } else {
                1.0
            };
            let health = self.health.get(&svc.name);
            for (i, &addr) in spec.backends.iter().enumerate() {
                let weight = spec.weights.get(i).copied().unwrap_or(1);
                let effective = applied
                    .and_then(|a| {
                        let j = a.backends.iter().position(|&b| b == addr)?;
                        Some(f64::from(a.weights.get(j).copied().unwrap_or(1)) / unit)
                    })
                    .unwrap_or(0.0);
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
                let backend_id = programmed.and_then(|p| {
                    let j = p.backends.iter().position(|&b| b == addr)?;
                    p.backend_ids.get(j).copied()
                });
                let stats = match backend_id {
                    Some(id) => self.dataplane.backend_stats(id)?,
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
}

impl<D, H> Agent<D, H> {
    /// Where services and endpoints come from, and whether each reads cleanly
    /// (`config_error`: why the config file's latest version was rejected).
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
        if let Some(dir) = &self.slices {
            out.push(SourceStatus {
                kind: "endpointslices".into(),
                location: self.config.node.endpointslice_dir.clone(),
                state: dir.problem().unwrap_or_else(|| "ok".into()),
                revision: None,
                rejected: Vec::new(),
            });
        }
        if let (Some(mirror), Some(settings)) = (&self.etcd, &self.config.node.etcd) {
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
