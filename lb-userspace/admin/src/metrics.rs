//! Prometheus text exposition (format 0.0.4) of what the agent and the data plane
//! count. Names follow Prometheus conventions: `lbd_` prefix, `_total` for counters,
//! base units (seconds, bytes), labels `service`, `vip`, `backend`, `verdict`,
//! `reason`.

use std::fmt::Write as _;

use lb_common::{Counter, CounterKind};

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

/// A metric family drawn from a view: name, type, help, value.
type Column<V> = (&'static str, &'static str, &'static str, fn(&V) -> f64);

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders a scrape.
pub fn render(s: &Snapshot<'_>) -> String {
    let mut out = String::with_capacity(4096 + 600 * s.backends.len());
    let o = &mut out;
    family(o, "lbd_build_info", "gauge", "lbd's version (always 1).");
    sample(o, "lbd_build_info", &[("version", &s.status.version)], 1.0);
    let started = now_unix() - s.status.uptime_seconds;
    gauge(
        o,
        "lbd_start_time_seconds",
        "When lbd started, seconds since the Unix epoch.",
        started,
    );
    gauge(
        o,
        "lbd_config_generation",
        "Successful config loads since lbd started.",
        s.status.config_generation as f64,
    );
    family(
        o,
        "lbd_source_up",
        "gauge",
        "Whether a source of services or endpoints reads cleanly (1) or not (0).",
    );
    for src in &s.status.sources {
        let up = if src.state == "ok" { 1.0 } else { 0.0 };
        sample(
            o,
            "lbd_source_up",
            &[("kind", &src.kind), ("location", &src.location)],
            up,
        );
    }
    family(
        o,
        "lbd_source_revision",
        "gauge",
        "The etcd revision the node's state reflects.",
    );
    family(
        o,
        "lbd_source_rejected",
        "gauge",
        "Entries of a source left out (bad JSON, invalid or clashing services).",
    );
    for src in &s.status.sources {
        let labels = [("kind", src.kind.as_str()), ("location", &src.location)];
        if let Some(rev) = src.revision {
            sample(o, "lbd_source_revision", &labels, rev as f64);
            sample(o, "lbd_source_rejected", &labels, src.rejected.len() as f64);
        }
    }

    family(
        o,
        "lbd_xdp_packets_total",
        "counter",
        "Packets the XDP program saw.",
    );
    family(
        o,
        "lbd_xdp_verdicts_total",
        "counter",
        "Packets by XDP verdict (pass, tx, redirect, drop) and reason.",
    );
    for &(c, v) in s.counters {
        match c.kind() {
            CounterKind::Packets => sample(o, "lbd_xdp_packets_total", &[], v as f64),
            CounterKind::Verdict { action, reason } => sample(
                o,
                "lbd_xdp_verdicts_total",
                &[("verdict", action.as_str()), ("reason", reason.as_str())],
                v as f64,
            ),
            CounterKind::Event => {}
        }
    }
    render_flow_tables(o, s);

    let per_vip: [Column<ServiceView>; 3] = [
        (
            "lbd_vip_packets_total",
            "counter",
            "Packets forwarded for a VIP.",
            |v| v.packets as f64,
        ),
        (
            "lbd_vip_bytes_total",
            "counter",
            "Bytes forwarded for a VIP, link-layer header included.",
            |v| v.bytes as f64,
        ),
        (
            "lbd_vip_new_flows_total",
            "counter",
            "Flows admitted for a VIP.",
            |v| v.new_flows as f64,
        ),
    ];
    for (name, kind, help, get) in per_vip {
        family(o, name, kind, help);
        for v in s.services {
            sample(o, name, &[("service", &v.name), ("vip", &v.vip)], get(v));
        }
    }
    family(
        o,
        "lbd_table_size",
        "gauge",
        "Maglev table size of a service (0: no usable backend).",
    );
    for v in s.services {
        sample(
            o,
            "lbd_table_size",
            &[("service", &v.name), ("vip", &v.vip)],
            f64::from(v.table_size),
        );
    }
    family(
        o,
        "lbd_table_info",
        "gauge",
        "The digest of a service's live table (always 1); equal on nodes with equal input.",
    );
    for v in s.services {
        let labels = [
            ("service", v.name.as_str()),
            ("vip", &v.vip),
            ("digest", &v.table_digest),
        ];
        sample(o, "lbd_table_info", &labels, 1.0);
    }

    let vip_of = |service: &str| {
        s.services
            .iter()
            .find(|v| v.name == service)
            .map_or("", |v| v.vip.as_str())
    };
    let per_backend: [Column<BackendView>; 7] = [
        (
            "lbd_backend_packets_total",
            "counter",
            "Packets forwarded to a backend.",
            |b| b.packets as f64,
        ),
        (
            "lbd_backend_bytes_total",
            "counter",
            "Bytes forwarded to a backend.",
            |b| b.bytes as f64,
        ),
        (
            "lbd_backend_new_flows_total",
            "counter",
            "Flows admitted to a backend.",
            |b| b.new_flows as f64,
        ),
        (
            "lbd_backend_flows",
            "gauge",
            "Conntrack entries pinned to a backend.",
            |b| b.flows as f64,
        ),
        (
            "lbd_backend_weight",
            "gauge",
            "Configured weight of a backend (0: draining).",
            |b| f64::from(b.weight),
        ),
        (
            "lbd_backend_effective_weight",
            "gauge",
            "Weight the table is built with (fade-in and health applied).",
            |b| b.effective_weight,
        ),
        (
            "lbd_backend_fade_in_ratio",
            "gauge",
            "Effective over configured weight, 0 to 1 (1: settled).",
            |b| b.fade_in_percent / 100.0,
        ),
    ];
    for (name, kind, help, get) in per_backend {
        family(o, name, kind, help);
        for b in s.backends {
            let addr = b.address.to_string();
            let labels = [
                ("service", b.service.as_str()),
                ("vip", vip_of(&b.service)),
                ("backend", &addr),
            ];
            sample(o, name, &labels, get(b));
        }
    }
    family(
        o,
        "lbd_backend_healthy",
        "gauge",
        "Health-check state of a checked backend (1 healthy, 0 unhealthy).",
    );
    for b in s.backends.iter().filter(|b| b.health != "unchecked") {
        let addr = b.address.to_string();
        let labels = [
            ("service", b.service.as_str()),
            ("vip", vip_of(&b.service)),
            ("backend", &addr),
        ];
        sample(
            o,
            "lbd_backend_healthy",
            &labels,
            if b.health == "healthy" { 1.0 } else { 0.0 },
        );
    }

    family(
        o,
        "lbd_reconciles_total",
        "counter",
        "Data-plane reconciles (start, reload, slices, health, fade-in).",
    );
    sample(o, "lbd_reconciles_total", &[], s.reconciles.count as f64);
    let ok = s
        .status
        .last_reconcile
        .as_ref()
        .is_none_or(|r| r.error.is_none());
    gauge(
        o,
        "lbd_last_reconcile_success",
        "Whether the latest reconcile succeeded (1) or failed (0).",
        if ok { 1.0 } else { 0.0 },
    );
    family(
        o,
        "lbd_reconcile_duration_seconds",
        "histogram",
        "Time to compute and program a reconcile.",
    );
    for (bound, count) in s.reconciles.cumulative() {
        let le = bound.to_string();
        sample(
            o,
            "lbd_reconcile_duration_seconds_bucket",
            &[("le", &le)],
            count as f64,
        );
    }
    let count = s.reconciles.count as f64;
    sample(
        o,
        "lbd_reconcile_duration_seconds_bucket",
        &[("le", "+Inf")],
        count,
    );
    sample(
        o,
        "lbd_reconcile_duration_seconds_sum",
        &[],
        s.reconciles.sum,
    );
    sample(o, "lbd_reconcile_duration_seconds_count", &[], count);
    family(
        o,
        "lbd_fade_in_rebuilds_total",
        "counter",
        "Table rebuilds done because a fade-in ramp moved weights.",
    );
    sample(
        o,
        "lbd_fade_in_rebuilds_total",
        &[],
        s.status.fade_in_rebuilds as f64,
    );
    if let Some(l7) = s.l7 {
        render_l7(o, l7);
    }
    out
}

/// The flow tables: fill, capacity, admission events and `nat` releases.
fn render_flow_tables(o: &mut String, s: &Snapshot<'_>) {
    let t = &s.status.flow_tables;
    gauge(
        o,
        "lbd_conntrack_entries",
        "Established flows the node tracks (dsr conntrack and nat flows).",
        s.status.conntrack_entries as f64,
    );
    family(
        o,
        "lbd_flow_table_entries",
        "gauge",
        "Entries in a flow table (established, embryonic, nat).",
    );
    family(
        o,
        "lbd_flow_table_capacity",
        "gauge",
        "Size of a flow table (node.conntrack_entries, embryonic_entries, nat_entries).",
    );
    for (table, fill) in [
        ("established", t.conntrack),
        ("embryonic", t.embryonic),
        ("nat", t.nat),
    ] {
        let labels = [("table", table)];
        sample(o, "lbd_flow_table_entries", &labels, fill.entries as f64);
        sample(o, "lbd_flow_table_capacity", &labels, fill.capacity as f64);
    }
    let event = |c: Counter| {
        s.counters
            .iter()
            .find(|(k, _)| *k == c)
            .map_or(0.0, |(_, v)| *v as f64)
    };
    for (name, help, c) in [
        (
            "lbd_conntrack_promoted_total",
            "Half-open flows established by their second packet.",
            Counter::EmbryonicPromoted,
        ),
        (
            "lbd_conntrack_non_syn_miss_total",
            "dsr TCP packets that were not a SYN and had no flow: forwarded by the table, no state made.",
            Counter::NonSynMiss,
        ),
        (
            "lbd_conntrack_identity_mismatch_total",
            "Flow entries ignored because their backend id now belongs to another service or generation.",
            Counter::IdentityMismatch,
        ),
    ] {
        family(o, name, "counter", help);
        sample(o, name, &[], event(c));
    }
    family(
        o,
        "lbd_conntrack_embryonic_created_total",
        "counter",
        "Flows admitted as half-open by a SYN or a first UDP datagram (dsr new flows).",
    );
    sample(
        o,
        "lbd_conntrack_embryonic_created_total",
        &[],
        t.embryonic_created as f64,
    );
    family(
        o,
        "lbd_conntrack_embryonic_evicted_total",
        "counter",
        "Half-open flows that left the embryonic table unpromoted (estimate).",
    );
    sample(
        o,
        "lbd_conntrack_embryonic_evicted_total",
        &[],
        t.embryonic_evicted as f64,
    );
    family(
        o,
        "lbd_nat_released_total",
        "counter",
        "nat ports released, by how their flow ended (fin, rst, timeout).",
    );
    for (reason, n) in [
        ("fin", t.nat_released.fin),
        ("rst", t.nat_released.rst),
        ("timeout", t.nat_released.timeout),
    ] {
        sample(o, "lbd_nat_released_total", &[("reason", reason)], n as f64);
    }
}

/// The `lbd_l7_*` families.
fn render_l7(o: &mut String, l7: &lb_l7::stats::L7Snapshot) {
    family(
        o,
        "lbd_l7_responses_total",
        "counter",
        "HTTP responses of l7 services by status class.",
    );
    for svc in &l7.services {
        for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
            sample(
                o,
                "lbd_l7_responses_total",
                &[("service", &svc.name), ("code", class)],
                svc.responses[i] as f64,
            );
        }
    }
    let per_service: [Column<lb_l7::stats::L7ServiceStats>; 3] = [
        (
            "lbd_l7_no_route_total",
            "counter",
            "Requests no route matched (answered 404).",
            |s| s.no_route as f64,
        ),
        (
            "lbd_l7_retries_total",
            "counter",
            "Extra attempts on the next endpoint after a failed connect.",
            |s| s.retries as f64,
        ),
        (
            "lbd_l7_upstream_errors_total",
            "counter",
            "Requests answered 502, 503 or 504 by the proxy.",
            |s| s.upstream_errors as f64,
        ),
    ];
    for (name, kind, help, value) in per_service {
        family(o, name, kind, help);
        for svc in &l7.services {
            sample(o, name, &[("service", &svc.name)], value(svc));
        }
    }
    family(
        o,
        "lbd_l7_endpoint_in_flight",
        "gauge",
        "Requests in flight to a backend endpoint.",
    );
    for e in &l7.endpoints {
        sample(
            o,
            "lbd_l7_endpoint_in_flight",
            &[("endpoint", &e.endpoint)],
            f64::from(e.in_flight),
        );
    }
    family(
        o,
        "lbd_l7_endpoint_requests_total",
        "counter",
        "Attempts sent to a backend endpoint.",
    );
    for e in &l7.endpoints {
        sample(
            o,
            "lbd_l7_endpoint_requests_total",
            &[("endpoint", &e.endpoint)],
            e.requests as f64,
        );
    }
    family(
        o,
        "lbd_l7_endpoint_failures_total",
        "counter",
        "Attempts to a backend endpoint that failed.",
    );
    for e in &l7.endpoints {
        sample(
            o,
            "lbd_l7_endpoint_failures_total",
            &[("endpoint", &e.endpoint)],
            e.failures as f64,
        );
    }
    gauge(
        o,
        "lbd_l7_connections",
        "Client connections open.",
        l7.connections_open as f64,
    );
    for (name, help, value) in [
        (
            "lbd_l7_connections_refused_total",
            "Connections closed at once over node.l7.max_connections.",
            l7.connections_refused,
        ),
        (
            "lbd_l7_malformed_requests_total",
            "Requests refused as malformed (400, 414, 431).",
            l7.malformed_requests,
        ),
        (
            "lbd_l7_idle_closed_total",
            "Connections closed after node.l7.idle_timeout.",
            l7.idle_closed,
        ),
        (
            "lbd_l7_access_log_lines_total",
            "Access-log lines written.",
            l7.access_log_lines,
        ),
    ] {
        family(o, name, "counter", help);
        sample(o, name, &[], value as f64);
    }
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn gauge(o: &mut String, name: &str, help: &str, value: f64) {
    family(o, name, "gauge", help);
    sample(o, name, &[], value);
}

fn sample(o: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    o.push_str(name);
    if !labels.is_empty() {
        o.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push_str(k);
            o.push_str("=\"");
            escape_label(o, v);
            o.push('"');
        }
        o.push('}');
    }
    let _ = writeln!(o, " {value}");
}

/// Label values escape backslash, double quote and newline.
fn escape_label(o: &mut String, v: &str) {
    for ch in v.chars() {
        match ch {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests;
