//! The L7 fallback: an HTTP/1.1 and HTTP/2 (h2c) proxy for services in `l7` mode,
//! routed by skipper-style eskip routes (see `shared/L7-SPEC.md`).
//!
//! - [`eskip`] parses route text; [`routes`] compiles it into a table that matches
//!   requests and applies filters.
//! - [`balance`] picks endpoints (roundRobin, random, consistentHash,
//!   powerOfRandomNChoices, leastConnections) with health and fade-in as weights.
//! - [`accesslog`] renders skipper's access-log line (or JSON) into a reused buffer.
//! - [`proxy`] serves the VIPs with hyper and forwards with pooled connections.

pub mod accesslog;
pub mod balance;
pub mod eskip;
pub mod handover;
pub mod node;
pub mod nofile;
pub mod proxy;
pub mod routes;
pub mod stats;
pub mod throttle;
