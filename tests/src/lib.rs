//! The network-namespace test bed shared by the root-only integration tests and
//! `cargo xtask demo`.
//!
//! Everything here creates uniquely named namespaces and removes them on drop, also
//! when a test panics. Nothing touches the host's own interfaces. Addresses come from
//! 198.18.0.0/15.

pub mod benchkit;
pub mod bpfstack;
pub mod callgrind;
pub mod decap;
pub mod etcd;
pub mod fixture;
pub mod flood;
pub mod http;
pub mod l7;
pub mod lbd;
pub mod netns;
pub mod packet;
pub mod relay;
pub mod rng;
pub mod routed;
pub mod shape;
pub mod tls;
pub mod topology;
pub mod traffic;

pub use lbd::LbdProcess;
pub use netns::Netns;
pub use topology::{Topology, TopologyOptions};

/// Panics with `what` and the command's output unless it succeeds.
pub fn run(program: &str, args: &[&str]) {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("spawning {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether the process runs as root (the integration tests need it).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Returns from the calling test, saying so on the terminal, unless the process runs
/// as root: the integration tests need network namespaces, XDP and bpf(2). `cargo
/// xtask test` runs them as root; a plain `cargo test` as another user skips them
/// rather than failing dozens of tests for want of privileges. The line goes straight
/// to stderr (not through the test harness's capture), so it shows for passing tests.
#[macro_export]
macro_rules! needs_root {
    () => {
        if !$crate::is_root() {
            use std::io::Write as _;
            // The calling test's path: a function defined here is named after it.
            fn here() {}
            let name = std::any::type_name_of_val(&here);
            let _ = writeln!(
                std::io::stderr(),
                "skipped {}: needs root (network namespaces, XDP, bpf(2)); run `sudo cargo xtask test`",
                name.strip_suffix("::here").unwrap_or(name)
            );
            return;
        }
    };
}

/// The workspace's target directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        std::path::PathBuf::from,
    )
}
