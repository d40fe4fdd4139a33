//! What the proxy counts, as one snapshot for `/metrics` (and the admin API).

use std::sync::atomic::Ordering::Relaxed;

use serde::Serialize;

use super::proxy::Proxy;

/// Counters of one `l7` service.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct L7ServiceStats {
    /// Service name.
    pub name: String,
    /// VIP:port it listens on.
    pub listen: String,
    /// Responses by class: `[1xx, 2xx, 3xx, 4xx, 5xx]`.
    pub responses: [u64; 5],
    /// Requests no route matched (404).
    pub no_route: u64,
    /// Extra attempts after failed connects.
    pub retries: u64,
    /// Requests the proxy answered 502/503/504.
    pub upstream_errors: u64,
    /// Requests whose TLS handshake with an `https://` backend failed.
    pub tls_failures: u64,
}

/// Counters of one backend endpoint (across services and routes).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct L7EndpointStats {
    /// `host:port`, or `https://host:port` for a TLS endpoint.
    pub endpoint: String,
    /// Requests in flight.
    pub in_flight: u32,
    /// Attempts sent.
    pub requests: u64,
    /// Attempts that failed (connect, timeout, broken response).
    pub failures: u64,
}

/// Everything the proxy counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct L7Snapshot {
    /// Per service.
    pub services: Vec<L7ServiceStats>,
    /// Per endpoint.
    pub endpoints: Vec<L7EndpointStats>,
    /// Client connections open now.
    pub connections_open: usize,
    /// Connections closed at once over `max_connections`.
    pub connections_refused: u64,
    /// Request heads refused as malformed (400, 414, 431), and bodies whose framing
    /// broke (400).
    pub malformed_requests: u64,
    /// Connections closed after `idle_timeout`.
    pub idle_closed: u64,
    /// Connections without a request head closed to make room for a new one.
    pub connections_evicted: u64,
    /// Access-log lines written.
    pub access_log_lines: u64,
    /// Each route source (file, or a service's inline routes): `None` when its text
    /// in force compiled, else why the latest text was refused (the previous routes
    /// serve).
    pub routes: Vec<(String, Option<String>)>,
}

impl Proxy {
    /// The counters now.
    pub fn snapshot(&self) -> L7Snapshot {
        let (open, refused, malformed, idle) = self.connection_counts();
        let mut services: Vec<L7ServiceStats> = self
            .services()
            .map(|(listen, state)| {
                let st = state.stats();
                let mut responses = [0; 5];
                for (i, r) in responses.iter_mut().enumerate() {
                    *r = st.responses[i + 1].load(Relaxed);
                }
                L7ServiceStats {
                    name: state.name.clone(),
                    listen: listen.to_string(),
                    responses,
                    no_route: st.no_route.load(Relaxed),
                    retries: st.retries.load(Relaxed),
                    upstream_errors: st.upstream_errors.load(Relaxed),
                    tls_failures: st.tls_failures.load(Relaxed),
                }
            })
            .collect();
        services.sort_by(|a, b| a.name.cmp(&b.name));
        let endpoints = self
            .registry()
            .snapshot()
            .into_iter()
            .map(
                |(endpoint, in_flight, requests, failures)| L7EndpointStats {
                    endpoint,
                    in_flight,
                    requests,
                    failures,
                },
            )
            .collect();
        L7Snapshot {
            services,
            endpoints,
            connections_open: open,
            connections_refused: refused,
            malformed_requests: malformed,
            idle_closed: idle,
            connections_evicted: self.evicted(),
            access_log_lines: self.access_log_lines(),
            // The proxy does not know where texts came from; lbd's L7Node fills this.
            routes: Vec::new(),
        }
    }
}
