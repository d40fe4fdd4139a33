//! Where services' backends come from besides the TOML file.

pub use lb_model::endpointslice;
pub mod etcd;
pub mod slicedir;
