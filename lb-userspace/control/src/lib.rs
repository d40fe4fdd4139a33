//! The control plane: where services and endpoints come from (the config file, a
//! directory of EndpointSlices, an etcd prefix), health checks, fade-in weights, and
//! the [`agent::Agent`] that turns all of it into data-plane writes and reconciles on
//! every change — over any data plane (the kernel's in lbd, an in-memory one in tests)
//! and any node ([`agent::Host`]). [`answer`] answers the admin API from a snapshot of
//! the agent's state; [`runtime`] is lbd's run loop (a control thread for the agent,
//! an async side for probes, etcd, the admin API and the l7 proxy).

pub mod agent;
pub mod answer;
pub mod fuzzing;
pub mod health;
pub mod runtime;
pub mod sources;
