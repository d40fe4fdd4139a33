//! The L7 proxy's families (registered under `lbd_l7`): responses by status class,
//! unmatched requests, retries and upstream errors per service; attempts per backend
//! endpoint; connections.

use std::fmt;

use lb_l7::stats::L7Snapshot;
use prometheus_client::{
    collector::Collector,
    encoding::DescriptorEncoder,
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};

use super::{
    encode::{Column, counter_at, family, gauge_at},
    labels::{EndpointLabels, L7ServiceLabels, ResponseLabels, Shared, StatusClass},
};

/// Registers the proxy's families from `l7` into `registry` (prefixed `l7` by the
/// caller).
pub(super) fn register(registry: &mut Registry, l7: &L7Snapshot) {
    registry.register(
        "connections",
        "Client connections open",
        ConstGauge::new(l7.connections_open),
    );
    for (name, help, value) in [
        (
            "connections_refused",
            "Connections closed at once over node.l7.max_connections",
            l7.connections_refused,
        ),
        (
            "connections_evicted",
            "Connections without a request head closed to make room for a new one",
            l7.connections_evicted,
        ),
        (
            "malformed_requests",
            "Requests refused as malformed (400, 414, 431)",
            l7.malformed_requests,
        ),
        (
            "idle_closed",
            "Connections closed after node.l7.idle_timeout",
            l7.idle_closed,
        ),
        (
            "access_log_lines",
            "Access-log lines written",
            l7.access_log_lines,
        ),
    ] {
        registry.register(name, help, ConstCounter::new(value));
    }
    registry.register_collector(Box::new(Proxy {
        services: l7
            .services
            .iter()
            .map(|s| ServiceRow {
                name: Shared::from(s.name.as_str()),
                responses: s.responses,
                no_route: s.no_route,
                retries: s.retries,
                upstream_errors: s.upstream_errors,
                tls_failures: s.tls_failures,
            })
            .collect(),
        endpoints: l7
            .endpoints
            .iter()
            .map(|e| EndpointRow {
                labels: EndpointLabels {
                    endpoint: Shared::from(e.endpoint.as_str()),
                },
                in_flight: e.in_flight,
                requests: e.requests,
                failures: e.failures,
            })
            .collect(),
    }));
}

/// An `l7` service's counters.
#[derive(Debug)]
struct ServiceRow {
    name: Shared,
    /// By [`StatusClass::ALL`].
    responses: [u64; 5],
    no_route: u64,
    retries: u64,
    upstream_errors: u64,
    tls_failures: u64,
}

/// A backend endpoint's counters.
#[derive(Debug)]
struct EndpointRow {
    labels: EndpointLabels,
    in_flight: u32,
    requests: u64,
    failures: u64,
}

/// One scrape's proxy rows.
#[derive(Debug)]
struct Proxy {
    services: Vec<ServiceRow>,
    endpoints: Vec<EndpointRow>,
}

impl Collector for Proxy {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> fmt::Result {
        {
            let mut f = family(
                &mut e,
                "responses",
                "HTTP responses of l7 services by status class.",
                MetricType::Counter,
            )?;
            for s in &self.services {
                for (code, &n) in StatusClass::ALL.into_iter().zip(&s.responses) {
                    let labels = ResponseLabels {
                        service: s.name.clone(),
                        code,
                    };
                    counter_at(&mut f, &labels, n)?;
                }
            }
        }
        let per_service: [Column<ServiceRow, u64>; 4] = [
            (
                "no_route",
                "Requests no route matched (answered 404).",
                |s| s.no_route,
            ),
            (
                "retries",
                "Extra attempts on the next endpoint after a failed connect.",
                |s| s.retries,
            ),
            (
                "upstream_errors",
                "Requests answered 502, 503 or 504 by the proxy.",
                |s| s.upstream_errors,
            ),
            (
                "tls_failures",
                "Requests whose TLS handshake with an https backend failed.",
                |s| s.tls_failures,
            ),
        ];
        for (name, help, value) in per_service {
            let mut f = family(&mut e, name, help, MetricType::Counter)?;
            for s in &self.services {
                let labels = L7ServiceLabels {
                    service: s.name.clone(),
                };
                counter_at(&mut f, &labels, value(s))?;
            }
        }
        {
            let mut f = family(
                &mut e,
                "endpoint_in_flight",
                "Requests in flight to a backend endpoint.",
                MetricType::Gauge,
            )?;
            for ep in &self.endpoints {
                gauge_at(&mut f, &ep.labels, ep.in_flight)?;
            }
        }
        let per_endpoint: [Column<EndpointRow, u64>; 2] = [
            (
                "endpoint_requests",
                "Attempts sent to a backend endpoint.",
                |ep| ep.requests,
            ),
            (
                "endpoint_failures",
                "Attempts to a backend endpoint that failed.",
                |ep| ep.failures,
            ),
        ];
        for (name, help, value) in per_endpoint {
            let mut f = family(&mut e, name, help, MetricType::Counter)?;
            for ep in &self.endpoints {
                counter_at(&mut f, &ep.labels, value(ep))?;
            }
        }
        Ok(())
    }
}
