//! What the data plane is told: the config's services turned into specs, with
//! health (unhealthy → weight 0) and fade-in (scaled weights) applied at a moment.

use std::{
    collections::HashMap,
    net::IpAddr,
    path::{Path, PathBuf},
    time::SystemTime,
};

use lb_common::{ForwardingMode, GlobalConfig};

use crate::{health::Health, sources::slicedir::Discovered};
use lb_model::{
    config::EndpointSlicesConfig, config::ForwardingModeConfig, config::PortSpec,
    config::ServiceConfig, config::ValidConfig, dataplane::ServiceSpec, dataplane::vip_key,
    endpointslice::EndpointState, fade_state::FadeStarts, fadein::FadeIn,
};

/// Relative weight change (per mille of the larger weight) that triggers a rebuild
/// while fading: 2%.
const FADE_STEP_PER_MILLE: u64 = 20;

/// Health of each checked backend, by service name then address (so the per-backend
/// lookup of every tick needs no owned key).
pub type HealthMap = HashMap<String, HashMap<IpAddr, BackendHealth>>;

/// A backend's health and when it last recovered.
#[derive(Clone, Copy, Debug, Default)]
pub struct BackendHealth {
    /// Rise/fall state.
    pub health: Health,
    /// Last unhealthy → healthy transition (restarts the fade-in ramp).
    pub recovered: Option<SystemTime>,
}

/// The specs at `now`: backends from the config or from EndpointSlices, unhealthy ones
/// at weight 0 (no new flows, established ones continue), fading ones scaled down per
/// [`FadeIn`] (the ramp starts at the latest of first sight, the slice's creation time
/// and the last recovery). Returns whether any ramp is still running. Records first
/// sight of new backends in `starts`.
pub fn specs_at(
    config: &ValidConfig,
    discovered: &Discovered,
    starts: &mut FadeStarts,
    health: &HealthMap,
    now: SystemTime,
) -> (Vec<ServiceSpec>, bool) {
    let mut specs = service_specs_with(config, discovered);
    let mut fading = false;
    for (spec, svc) in specs.iter_mut().zip(&config.services) {
        let fade = svc.fade_in.as_ref().map(|f| FadeIn {
            window: f.window.get(),
            exponent: f.exponent,
            min_weight: f.min_weight,
        });
        let created = svc.endpoint_slices.as_ref().and_then(|e| {
            discovered
                .created
                .get(&(e.namespace.clone(), e.service.clone()))
        });
        let checked = health.get(&svc.name);
        // Health first; then each weighted backend's ramp start and fraction.
        let mut ramps: Vec<Option<(SystemTime, f64)>> = Vec::with_capacity(spec.backends.len());
        for (w, &addr) in spec.weights.iter_mut().zip(&spec.backends) {
            let h = checked.and_then(|c| c.get(&addr));
            if h.is_some_and(|h| !h.health.healthy) {
                *w = 0;
            }
            let Some(f) = &fade else { continue };
            let created = created.and_then(|c| c.get(&addr).copied());
            let seen = starts.first_seen(&svc.name, addr, now);
            let start =
                lb_model::fadein::ramp_start(seen, created, h.and_then(|h| h.recovered), now);
            ramps.push((*w > 0).then(|| (start, f.fraction(lb_model::fadein::age(start, now)))));
        }
        if let Some(f) = &fade {
            fading |= scale_relative(&mut spec.weights, &ramps, f, now);
        }
    }
    // Pruning ramps of backends that left costs a set of every backend; without any
    // ramp start recorded (no service fades in) there is nothing to prune.
    if !starts.is_empty() {
        let mut live: Vec<(&str, IpAddr)> =
            Vec::with_capacity(specs.iter().map(|s| s.backends.len()).sum());
        live.extend(
            specs
                .iter()
                .flat_map(|s| s.backends.iter().map(|&a| (s.name.as_str(), a))),
        );
        starts.retain(&live);
    }
    (specs, fading)
}

/// Scales `weights` by each backend's fade-in fraction relative to the largest
/// fraction among the service's weighted backends (`ramps[i]` is `None` for weight 0),
/// in [`lb_model::fadein::WEIGHT_SCALE`] units. Returns whether a ramp still runs.
///
/// Why relative: only the ratio of weights shapes a Maglev table, and slow start exists
/// to protect a new backend from its share of the load while the others carry it. When
/// every backend of a service started together (a fresh node, a new service) there is
/// nobody to carry the load, scaling them all alike would change nothing but cost a
/// rebuild a second, so such a service is not fading at all.
fn scale_relative(
    weights: &mut [u32],
    ramps: &[Option<(SystemTime, f64)>],
    fade: &FadeIn,
    now: SystemTime,
) -> bool {
    let top = ramps.iter().flatten().map(|r| r.1).fold(0.0, f64::max);
    let first = ramps.iter().flatten().next().map(|r| r.0);
    let together = ramps.iter().flatten().all(|r| Some(r.0) == first);
    let mut fading = false;
    for (w, ramp) in weights.iter_mut().zip(ramps) {
        let Some((start, fraction)) = *ramp else {
            continue;
        };
        fading |= !together && fade.fading(start, now);
        let full = f64::from(*w) * f64::from(lb_model::fadein::WEIGHT_SCALE);
        *w = ((full * fraction / top).round() as u32).max(1);
    }
    fading
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

/// What the data plane is told for each configured service, from the config alone
/// (services fed by EndpointSlices get no backends).
pub fn service_specs(config: &ValidConfig) -> Vec<ServiceSpec> {
    service_specs_with(config, &Discovered::default())
}

/// What the data plane is told for each configured service, with the backends of
/// `endpoint_slices` services taken from `discovered`.
pub fn service_specs_with(config: &ValidConfig, discovered: &Discovered) -> Vec<ServiceSpec> {
    config
        .services
        .iter()
        .map(|svc| {
            let (backends, weights, ports) = match &svc.endpoint_slices {
                Some(es) => from_slices(svc, es, discovered),
                None => (
                    svc.backends.iter().map(|b| b.address).collect(),
                    svc.backends.iter().map(|b| b.weight).collect(),
                    Vec::new(),
                ),
            };
            ServiceSpec {
                name: svc.name.clone(),
                key: vip_key(svc.vip, svc.port.key_port(), svc.protocol.number()),
                mode: match svc.mode {
                    ForwardingModeConfig::Dsr => ForwardingMode::Dsr,
                    ForwardingModeConfig::Nat => ForwardingMode::Nat,
                    ForwardingModeConfig::L7 => ForwardingMode::L7,
                    ForwardingModeConfig::Ipip => ForwardingMode::Ipip,
                    ForwardingModeConfig::Gue => ForwardingMode::Gue,
                },
                backends,
                table_size: svc.table_size,
                weights,
                ports,
            }
        })
        .collect()
}

/// Backends, weights and ports of a service from its Kubernetes Service port:
/// endpoints of the VIP's family. In `nat` mode an endpoint may listen on another port
/// than the VIP's (the Service's target port): the data plane rewrites the port, so
/// `ports` says which; `l7` services' proxy connects to any port. `dsr` cannot change
/// ports, so there only endpoints on the VIP's port are usable (an all-ports service takes any, unchanged). Ready
/// endpoints weigh 1; draining ones 0 (their flows continue) unless none is ready,
/// then 1 (kube-proxy's fallback).
fn from_slices(
    svc: &ServiceConfig,
    es: &EndpointSlicesConfig,
    discovered: &Discovered,
) -> (Vec<IpAddr>, Vec<u32>, Vec<u16>) {
    let protocol = svc.protocol.to_string().to_ascii_uppercase();
    let list = discovered
        .backends
        .get(&(es.namespace.clone(), es.service.clone()))
        .and_then(|ports| ports.get(&(es.port.clone(), protocol)))
        .map_or(&[][..], Vec::as_slice);
    // The HTTP proxy of an l7 service connects anywhere: any port, either family.
    let l7 = svc.mode == ForwardingModeConfig::L7;
    let remaps = (svc.mode == ForwardingModeConfig::Nat || l7) && svc.port != PortSpec::All;
    let usable: Vec<_> = list
        .iter()
        .filter(|b| l7 || b.addr.is_ipv6() == svc.vip.is_ipv6())
        .filter(|b| remaps || svc.port == PortSpec::All || PortSpec::Port(b.port) == svc.port)
        .collect();
    if usable.len() < list.len() {
        tracing::debug!(
            service = %svc.name,
            source = "endpointslices",
            endpoints = list.len() - usable.len(),
            slices = %format_args!("{}/{}", es.namespace, es.service),
            mode = ?svc.mode,
            "endpoints not usable: another family, or a target port the mode cannot reach"
        );
    }
    let any_ready = usable.iter().any(|b| b.state == EndpointState::Ready);
    let mut seen = std::collections::HashSet::new();
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for b in usable.into_iter().filter(|b| seen.insert(b.addr)) {
        out.0.push(b.addr);
        out.1
            .push(u32::from(b.state == EndpointState::Ready || !any_ready));
        out.2.push(match svc.port {
            PortSpec::Port(p) if remaps && b.port != p => b.port,
            _ => 0,
        });
    }
    if out.2.iter().all(|&p| p == 0) {
        out.2.clear();
    }
    out
}

/// Node-wide data-plane settings from the config.
/// `possible_cpus` is what the kernel sizes per-CPU maps for: the NAT port range is split
/// into that many slices.
pub fn global_config(config: &ValidConfig, possible_cpus: u32) -> GlobalConfig {
    let node = &config.node;
    let nat_of = |v6: bool| {
        node.nat_addresses
            .iter()
            .find(|a| a.is_ipv6() == v6)
            .map_or(lb_common::Addr::ZERO, |a| lb_model::dataplane::addr16(*a))
    };
    let count = u32::from(node.nat_ports.last) - u32::from(node.nat_ports.first) + 1;
    GlobalConfig {
        hash_seed: node.hash_seed,
        flags: 0,
        nat_port_first: node.nat_ports.first,
        nat_port_count: count.min(u32::from(u16::MAX)) as u16,
        nat_cpus: possible_cpus.max(1),
        nat_v4: nat_of(false),
        nat_v6: nat_of(true),
        nat_timeouts: config.flow_tables.nat_timeouts,
    }
}

/// Backends the node sends to on its own link (dsr and nat): their neighbours must stay
/// resolved. (Tunnel backends are routed: their next hop is a router.)
pub fn dsr_backends(specs: &[ServiceSpec]) -> Vec<IpAddr> {
    let mut addrs: Vec<IpAddr> = specs
        .iter()
        .filter(|s| matches!(s.mode, ForwardingMode::Dsr | ForwardingMode::Nat))
        .flat_map(|s| s.backends.iter().copied())
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    addrs
}
