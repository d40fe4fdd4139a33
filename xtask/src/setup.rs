//! `cargo xtask setup`: install what a fresh machine lacks, skip what is present.
//!
//! Idempotent: each step checks first and says what it found or did. The versions are
//! the ones shared/TOOLCHAIN.md verified on this machine kind.

use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, output, succeeds};

/// Debian packages: LLVM 22 for bpf-linker (must match nightly rustc's LLVM major),
/// iproute2 and ethtool for the network-namespace tests and the demo, protoc for the
/// etcd client's generated code, etcd itself for the fleet tests and benchmark, and
/// openssl for the certificates of the TLS test.
const APT_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "iproute2",
    "ethtool",
    "protobuf-compiler",
    "etcd-server",
    "openssl",
];
const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// Runs every step.
pub fn run() -> Result<()> {
    apt_packages()?;
    nightly_rust_src()?;
    bpf_linker()
}

fn apt_packages() -> Result<()> {
    install(APT_PACKAGES)
}

/// What `cargo xtask bench l7` compares against and drives: nginx and HAProxy as
/// reference proxies (and nginx as the shared backend), wrk as the load generator.
/// Not needed by the tests, so only the benchmark installs them.
pub fn l7_bench_tools() -> Result<()> {
    install(&["nginx", "haproxy", "wrk"])
}

/// Installs the missing ones of `packages`. Package scripts must not start services
/// on this machine (nginx would listen on the host's port 80): unless the machine
/// already has a policy, a `policy-rc.d` that refuses every start is in place while
/// apt runs.
fn install(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        eprintln!("setup: apt packages present ({})", packages.join(", "));
        return Ok(());
    }
    eprintln!("setup: installing apt packages: {}", missing.join(", "));
    if !cmd::is_root() {
        bail!("installing {} needs root", missing.join(" "));
    }
    let policy = std::path::Path::new("/usr/sbin/policy-rc.d");
    let ours = !policy.exists();
    if ours {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(
            policy,
            "#!/bin/sh\n# cargo xtask setup: no service starts while installing\nexit 101\n",
        )
        .context("writing /usr/sbin/policy-rc.d")?;
        std::fs::set_permissions(policy, std::fs::Permissions::from_mode(0o755))?;
    }
    let result = cmd::run(Command::new("apt-get").arg("update").arg("-q")).and_then(|()| {
        cmd::run(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    });
    if ours {
        let _ = std::fs::remove_file(policy);
    }
    result
}

fn dpkg_installed(package: &str) -> bool {
    output("dpkg-query", &["-W", "-f=${Status}", package])
        .is_some_and(|s| s.trim() == "install ok installed")
}

fn nightly_rust_src() -> Result<()> {
    if !output("rustup", &["toolchain", "list"])
        .is_some_and(|l| l.lines().any(|t| t.starts_with("nightly")))
    {
        eprintln!("setup: installing the nightly toolchain");
        cmd::run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let installed = output(
        "rustup",
        &["component", "list", "--toolchain", "nightly", "--installed"],
    )
    .context("listing nightly components")?;
    if installed.lines().any(|c| c.starts_with("rust-src")) {
        eprintln!("setup: nightly rust-src present");
        return Ok(());
    }
    eprintln!("setup: adding rust-src to nightly (needed for -Z build-std=core)");
    cmd::run(Command::new("rustup").args([
        "component",
        "add",
        "rust-src",
        "--toolchain",
        "nightly",
    ]))
}

fn bpf_linker() -> Result<()> {
    if let Some(version) = output("bpf-linker", &["--version"]) {
        if version.contains(BPF_LINKER_VERSION) {
            eprintln!("setup: {} present", version.trim());
            return Ok(());
        }
        eprintln!(
            "setup: replacing {} with {BPF_LINKER_VERSION}",
            version.trim()
        );
    } else {
        eprintln!(
            "setup: installing bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about a minute)"
        );
    }
    if !succeeds(&format!("{LLVM_PREFIX}/bin/llvm-config"), &["--version"]) {
        bail!("{LLVM_PREFIX}/bin/llvm-config missing: the llvm-22-dev install did not work");
    }
    let path = format!(
        "{LLVM_PREFIX}/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    cmd::run(
        Command::new(cargo)
            .args([
                "install",
                &format!("bpf-linker@{BPF_LINKER_VERSION}"),
                "--locked",
                "--force",
                "--no-default-features",
                "--features",
                "llvm-22",
            ])
            .env("PATH", path)
            .env("LLVM_PREFIX", LLVM_PREFIX)
            .env_remove("CARGO_TARGET_DIR"),
    )
}
