//! Entry points of the fuzz targets: one per kind of untrusted text lbd reads. The
//! cargo-fuzz crate in `fuzz/` (run by `cargo xtask fuzz`) calls each with the bytes
//! libFuzzer makes up; the normal test suite calls them with every saved corpus file
//! and every regression seed (`fuzz/corpus/<target>/`, `fuzz/regressions/<target>/`),
//! so an input that once crashed stays a test.
//!
//! Each entry feeds the text through the same code lbd runs on it and checks what must
//! hold whatever the text: no panic, and where a value comes out, the invariants a
//! caller relies on. None touches files, sockets or the kernel.

mod targets;
#[cfg(test)]
mod tests;

pub use targets::{
    config_toml, duration, endpointslice, eskip, etcd_value, h1_request, h1_response, key_template,
    timestamp,
};

/// A fuzz entry: takes any bytes, panics only on a bug.
pub type Entry = fn(&[u8]);

/// Every target by the name of its `fuzz/fuzz_targets/<name>.rs`.
pub const TARGETS: &[(&str, Entry)] = &[
    ("endpointslice", endpointslice),
    ("etcd_value", etcd_value),
    ("config_toml", config_toml),
    ("eskip", eskip),
    ("duration", duration),
    ("timestamp", timestamp),
    ("key_template", key_template),
    ("h1_response", h1_response),
    ("h1_request", h1_request),
];
