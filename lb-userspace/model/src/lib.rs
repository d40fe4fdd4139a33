//! The load balancer's model: what its configuration, services and data-plane state
//! mean, without I/O beyond reading a file, without aya and without tokio. Everything
//! here builds and tests on stable as a normal user.
//!
//! - [`config`]: the TOML schema, validated once into typed values.
//! - [`units`]: durations (Go's syntax) and RFC 3339 times.
//! - [`endpointslice`]: Kubernetes EndpointSlice documents.
//! - [`fadein`], [`fade_state`]: the slow-start ramp and the start times behind it.
//! - [`maglev`]: weighted Maglev tables.
//! - [`dataplane`]: the data plane's traits ([`dataplane::MapOps`],
//!   [`dataplane::MapRead`], [`dataplane::Traffic`]), the desired services, the
//!   programmer that turns them into ordered map writes, and an in-memory data plane.
//! - [`explain`]: which backend a flow goes to and why, from the maps.
//! - [`throttle`], [`filestamp`]: small helpers the other crates share.

pub mod config;
pub mod dataplane;
pub mod endpointslice;
pub mod explain;
pub mod fade_state;
pub mod fadein;
pub mod filestamp;
pub mod maglev;
pub mod throttle;
pub mod units;
