//! The L7 fallback: an HTTP/1.1 and HTTP/2 (h2c) proxy for services in `l7` mode,
//! routed by skipper-style eskip routes (see `shared/L7-SPEC.md`).
//!
//! - [`eskip`] parses route text; [`routes`] compiles it into a table that matches
//!   requests and applies filters.
//! - [`balance`] picks endpoints (roundRobin, random, consistentHash,
//!   powerOfRandomNChoices, leastConnections) with health and fade-in as weights.
//! - [`accesslog`] renders skipper's access-log line (or JSON) into a reused buffer.
//! - [`proxy`] serves the VIPs (HTTP/1.x with its own server, h2c with hyper's) and
//!   forwards with pooled connections.

pub mod accesslog;
pub mod balance;
pub mod eskip;
pub mod handover;
pub mod node;
pub mod nofile;
pub mod proxy;
pub mod routes;
pub mod stats;

/// Compiles route text against nothing, to check it: the [`lb_model::config::RouteCheck`]
/// that config loading passes every `l7` service's routes through (inline, from a
/// `routes_file`, or from etcd).
///
/// # Errors
/// Every syntax and route error, one a line, each with line and column.
pub fn check_routes(text: &str) -> Result<(), String> {
    let registry = balance::Registry::default();
    let cx = routes::Context {
        registry: &registry,
        service_endpoints: &[],
        previous: None,
        now: std::time::SystemTime::now(),
    };
    routes::RouteTable::parse(text, &cx)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod config_tests;
