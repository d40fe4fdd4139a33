//! What the data plane is told: the config's services turned into specs, with
//! health (unhealthy → weight 0) and fade-in (scaled weights) applied at a moment.

use std::{
    collections::HashMap,
    net::IpAddr,
    path::{Path, PathBuf},
    time::SystemTime,
};

use lb_common::{ForwardingMode, GlobalConfig};

use crate::{
    config::{ForwardingModeConfig, ValidConfig},
    dataplane::{ServiceSpec, vip_key},
    fade_state::FadeStarts,
    fadein::FadeIn,
    health::Health,
};

/// Relative weight change (per mille of the larger weight) that triggers a rebuild
/// while fading: 2%.
const FADE_STEP_PER_MILLE: u64 = 20;

/// Health of each checked backend, by (service name, address).
pub type HealthMap = HashMap<(String, IpAddr), BackendHealth>;

/// A backend's health and when it last recovered.
#[derive(Clone, Copy, Debug, Default)]
pub struct BackendHealth {
    /// Rise/fall state.
    pub health: Health,
    /// Last unhealthy → healthy transition (restarts the fade-in ramp).
    pub recovered: Option<SystemTime>,
}

/// The specs at `now`: unhealthy backends at weight 0 (no new flows, established ones
/// continue), fading backends scaled down per [`FadeIn`]. Returns whether any ramp is
/// still running. Records first sight of new backends in `starts`.
pub fn specs_at(
    config: &ValidConfig,
    starts: &mut FadeStarts,
    health: &HealthMap,
    now: SystemTime,
) -> (Vec<ServiceSpec>, bool) {
    let mut specs = service_specs(config);
    let mut fading = false;
    for (spec, svc) in specs.iter_mut().zip(&config.services) {
        for (w, b) in spec.weights.iter_mut().zip(&svc.backends) {
            if health
                .get(&(svc.name.clone(), b.address))
                .is_some_and(|h| !h.health.healthy)
            {
                *w = 0;
            }
        }
        let Some(fade) = &svc.fade_in else { continue };
        let Ok(window) = fade.window.parse() else {
            continue;
        };
        let f = FadeIn {
            window,
            exponent: fade.exponent,
            min_weight: fade.min_weight,
        };
        for (w, b) in spec.weights.iter_mut().zip(&svc.backends) {
            let recovered = health
                .get(&(svc.name.clone(), b.address))
                .and_then(|h| h.recovered);
            let seen = starts.first_seen(&svc.name, b.address, now);
            let start = crate::fadein::ramp_start(seen, None, recovered, now);
            fading |= *w > 0 && f.fading(start, now);
            *w = f.effective(*w, start, now);
        }
    }
    let live: Vec<(String, IpAddr)> = config
        .services
        .iter()
        .flat_map(|s| s.backends.iter().map(|b| (s.name.clone(), b.address)))
        .collect();
    starts.retain(&live);
    (specs, fading)
}

/// Whether the weights moved enough to rebuild: by 2% of a backend's weight while
/// fading, or at all once fading is over (the final table is exact).
pub fn weights_moved(old: &[ServiceSpec], new: &[ServiceSpec], still_fading: bool) -> bool {
    old.len() != new.len()
        || old.iter().zip(new).any(|(o, n)| {
            o.weights.len() != n.weights.len()
                || o.weights.iter().zip(&n.weights).any(|(&a, &b)| {
                    let (a, b) = (u64::from(a), u64::from(b));
                    if still_fading {
                        a.abs_diff(b) * 1000 >= a.max(b) * FADE_STEP_PER_MILLE
                    } else {
                        a != b
                    }
                })
        })
}

pub(super) fn state_path(config: &ValidConfig) -> Option<PathBuf> {
    let dir = &config.node.state_dir;
    (!dir.is_empty()).then(|| Path::new(dir).join("fade-in.json"))
}

/// What the data plane is told for each configured service.
pub fn service_specs(config: &ValidConfig) -> Vec<ServiceSpec> {
    config
        .services
        .iter()
        .map(|svc| ServiceSpec {
            name: svc.name.clone(),
            key: vip_key(svc.vip, svc.port.key_port(), svc.protocol.number()),
            mode: match svc.mode {
                ForwardingModeConfig::Dsr => ForwardingMode::Dsr,
                ForwardingModeConfig::Nat => ForwardingMode::Nat,
                ForwardingModeConfig::L7 => ForwardingMode::L7,
            },
            backends: svc.backends.iter().map(|b| b.address).collect(),
            table_size: svc.table_size,
            weights: svc.backends.iter().map(|b| b.weight).collect(),
        })
        .collect()
}

/// Node-wide data-plane settings from the config.
pub fn global_config(config: &ValidConfig) -> GlobalConfig {
    let node = &config.node;
    let nat_of = |v6: bool| {
        node.nat_addresses
            .iter()
            .find(|a| a.is_ipv6() == v6)
            .map_or([0; 16], |a| crate::dataplane::addr16(*a))
    };
    let count = u32::from(node.nat_ports.last) - u32::from(node.nat_ports.first) + 1;
    GlobalConfig {
        hash_seed: node.hash_seed,
        flags: 0,
        nat_port_first: node.nat_ports.first,
        nat_port_count: count.min(u32::from(u16::MAX)) as u16,
        _pad: 0,
        nat_v4: nat_of(false),
        nat_v6: nat_of(true),
    }
}

/// Backends the node forwards to (dsr and nat): their neighbours must stay resolved.
pub(super) fn dsr_backends(specs: &[ServiceSpec]) -> Vec<IpAddr> {
    let mut addrs: Vec<IpAddr> = specs
        .iter()
        .filter(|s| s.mode != ForwardingMode::L7)
        .flat_map(|s| s.backends.iter().copied())
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    addrs
}
