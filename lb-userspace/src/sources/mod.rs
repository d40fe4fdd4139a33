//! Where services' backends come from besides the TOML file.

pub mod endpointslice;
pub mod etcd;
pub mod slicedir;
