//! `cargo xtask setup`: make this machine able to build, test and demo the project, and
//! prove it.
//!
//! Setup is organised by **capability**, not by package name: each entry in
//! [`capabilities`] runs the thing the project needs (protoc compiles a file that
//! imports `google/protobuf/descriptor.proto`, bpf-linker links a BPF object, …) and
//! names what provides it. Checking package names is what once let a machine pass
//! setup and then fail the build: `protobuf-compiler` was installed, the well-known
//! `.proto` files (`libprotobuf-dev`) were not.
//!
//! - `cargo xtask setup` checks every capability, installs the providers of the
//!   missing ones (apt packages in one transaction, then the nightly component, then
//!   bpf-linker, which needs LLVM from apt), checks again and fails naming every
//!   capability that is still missing.
//! - `cargo xtask setup --check` prints every capability with `ok` or `missing`,
//!   installs nothing, and exits non-zero when one is missing.
//!
//! Idempotent: a machine that has everything runs only the checks (a few seconds).

mod capability;
mod install;

use anyhow::{Result, bail};

use capability::{Capability, capabilities};
pub use install::l7_bench_tools;

/// The outcome of one capability check.
struct Checked {
    capability: Capability,
    /// `Ok(detail)` (a version or what was proven), or why it is missing.
    result: Result<String, String>,
}

fn check_all() -> Vec<Checked> {
    capabilities()
        .into_iter()
        .map(|capability| {
            let result = (capability.check)();
            Checked { capability, result }
        })
        .collect()
}

fn print(checked: &[Checked]) {
    let width = checked
        .iter()
        .map(|c| c.capability.name.len())
        .max()
        .unwrap_or(0);
    for c in checked {
        match &c.result {
            Ok(detail) => eprintln!("  ok       {:width$}  {detail}", c.capability.name),
            Err(why) => eprintln!(
                "  missing  {:width$}  {why}; provided by {}",
                c.capability.name, c.capability.provider
            ),
        }
    }
}

/// Names of the missing capabilities with their providers, for an error message.
fn missing_list(checked: &[Checked]) -> String {
    checked
        .iter()
        .filter(|c| c.result.is_err())
        .map(|c| format!("{} ({})", c.capability.name, c.capability.provider))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `cargo xtask setup --check`: prints every capability; fails if one is missing.
pub fn check() -> Result<()> {
    eprintln!("setup --check: what this machine can do");
    let checked = check_all();
    print(&checked);
    if checked.iter().any(|c| c.result.is_err()) {
        bail!("missing: {}", missing_list(&checked));
    }
    Ok(())
}

/// `cargo xtask setup`: installs what is missing, then proves every capability.
pub fn run() -> Result<()> {
    let before = check_all();
    if before.iter().all(|c| c.result.is_ok()) {
        eprintln!("setup: every capability present");
        return Ok(());
    }
    eprintln!("setup: this machine lacks some of what the project needs:");
    print(&before);
    let missing: Vec<&Capability> = before
        .iter()
        .filter(|c| c.result.is_err())
        .map(|c| &c.capability)
        .collect();
    install::providers(&missing)?;
    let after = check_all();
    eprintln!("setup: after installing:");
    print(&after);
    if after.iter().any(|c| c.result.is_err()) {
        bail!("still missing after installing: {}", missing_list(&after));
    }
    Ok(())
}
