//! The `/metrics` exposition: OpenMetrics text (1.0.0) encoded by `prometheus-client`
//! from one [`Snapshot`] of what the agent, the data plane and the proxy count.
//!
//! Each component registers its families into one [`Registry`] (prefix `lbd`):
//! `process` (build, start time), `dataplane` (the kernel's verdict and event
//! counters, flow tables), `traffic` (per VIP and per backend), `agent`
//! (config, sources, reconciles and their histogram) and `l7` (the proxy, prefix
//! `lbd_l7`). Label sets are structs deriving `EncodeLabelSet`; label values that
//! name a kind of thing are enums (`labels`), so a verdict's `verdict` label is the
//! action the packet really left with ([`lb_common::XdpAction`]), never a guess from
//! a counter's name.
//!
//! Why collectors over the snapshot, and not families filled per scrape: the values
//! are read from the BPF maps and the agent's state when a scrape asks, so nothing
//! is live between scrapes. A `Family` filled per scrape would hash every label set,
//! allocate an owned label set and a metric per series, and write its series in hash
//! order. Instead each component turns its part of the snapshot into rows once —
//! strings shared by all series of a service (name, VIP) allocated once and shared
//! by reference count, backend addresses written straight into the text — and a
//! [`prometheus_client::collector::Collector`] writes the rows in snapshot order.
//! A backend finds its service's VIP through one hash map built per scrape, so a
//! scrape costs O(series): O(services + backends) time and O(services) allocations,
//! whatever the product of the two.
//!
//! Names follow OpenMetrics: a counter family is named without `_total` and its
//! sample with it (`# TYPE lbd_xdp_packets counter`, `lbd_xdp_packets_total 12`),
//! info families end their sample in `_info`, and units end a name
//! (`lbd_reconcile_duration_seconds`, with a `# UNIT` line). The sample names are
//! the ones lbd has always served.

mod agent;
mod dataplane;
mod encode;
mod l7;
mod labels;
mod process;
mod traffic;

use std::time::SystemTime;

use lb_common::Counter;
use prometheus_client::{encoding::text, registry::Registry};

use super::{BackendView, Histogram, ServiceView, Status};

/// Everything one scrape shows.
#[derive(Debug)]
pub struct Snapshot<'a> {
    /// Agent status.
    pub status: &'a Status,
    /// Services with their counters.
    pub services: &'a [ServiceView],
    /// Backends with their counters, weights and health.
    pub backends: &'a [BackendView],
    /// Global data-plane counters summed over CPUs.
    pub counters: &'a [(Counter, u64)],
    /// Reconcile latencies.
    pub reconciles: &'a Histogram,
    /// The L7 proxy's counters, if it runs.
    pub l7: Option<&'a lb_l7::stats::L7Snapshot>,
}

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Renders a scrape: the OpenMetrics text of [`registry`], ending in `# EOF`.
pub fn render(s: &Snapshot<'_>) -> String {
    render_at(s, SystemTime::now())
}

/// [`render`] as of `now` (which dates lbd's start from its uptime).
pub fn render_at(s: &Snapshot<'_>, now: SystemTime) -> String {
    let registry = registry(s, now);
    // A little over what a service (~400 bytes) and a backend (~750 bytes, eight
    // families) take, so the text is written once, not copied into ever larger
    // buffers on the way.
    let mut out = String::with_capacity(8192 + 400 * s.services.len() + 800 * s.backends.len());
    if let Err(e) = text::encode(&mut out, &registry) {
        // Writing to a String never fails, and the collectors only pass encoder errors
        // on; an error here is a bug, shown to the scraper rather than hidden.
        debug_assert!(false, "encoding metrics: {e}");
        out.push_str("# encoding failed\n# EOF\n");
    }
    out
}

/// Every component's families registered for the snapshot `s`, as of `now`.
pub fn registry(s: &Snapshot<'_>, now: SystemTime) -> Registry {
    let mut registry = Registry::with_prefix("lbd");
    process::register(component(&mut registry), s.status, now);
    dataplane::register(component(&mut registry), s.status, s.counters);
    traffic::register(component(&mut registry), s.services, s.backends);
    agent::register(component(&mut registry), s.status, s.reconciles);
    if let Some(l7) = s.l7 {
        l7::register(registry.sub_registry_with_prefix("l7"), l7);
    }
    registry
}

/// A registry of its own for one component, under the same prefix: a registry
/// writes its metrics before its collectors, so this keeps each component's
/// families together, in the order of registration.
fn component(registry: &mut Registry) -> &mut Registry {
    registry.sub_registry_with_labels(std::iter::empty())
}

#[cfg(test)]
mod tests;
