//! The control plane of the load balancer: configuration, programming the XDP data
//! plane, and the agent loop. `lbd` and `lbctl` are thin binaries over this library.

pub mod admin;
pub mod agent;
pub mod bpffs;
pub mod cli;
pub mod config;
pub mod dataplane;
pub mod explain;
pub mod fade_state;
pub mod fadein;
pub mod filestamp;
pub mod fuzzing;
pub mod health;
pub mod l7;
pub mod maglev;
pub mod sources;
pub mod sysctl;
pub mod units;
