//! Installing the providers of missing capabilities, loudly (every command is
//! printed before it runs).

use std::process::Command;

use anyhow::{Context as _, Result, bail};

use super::capability::{BPF_LINKER_VERSION, Capability, LLVM_PREFIX, Provider};
use crate::cmd;

/// Installs what provides each of `missing`: every apt package in one transaction,
/// then rustup components, then bpf-linker (last, since it builds against LLVM 22
/// from apt).
pub fn providers(missing: &[&Capability]) -> Result<()> {
    let mut packages: Vec<&str> = Vec::new();
    let mut components: Vec<(&str, &str)> = Vec::new();
    let mut linker = false;
    for capability in missing {
        match capability.provider {
            Provider::Apt(list) => {
                for p in list {
                    if !packages.contains(p) {
                        packages.push(p);
                    }
                }
            }
            Provider::Rustup {
                toolchain,
                component,
            } => components.push((toolchain, component)),
            Provider::BpfLinker => linker = true,
        }
    }
    if !packages.is_empty() {
        apt_install(&packages)?;
    }
    for (toolchain, component) in components {
        rustup_component(toolchain, component)?;
    }
    if linker {
        bpf_linker()?;
    }
    Ok(())
}

/// What `cargo xtask bench l7` compares against and drives: nginx and HAProxy as
/// reference proxies (and nginx as the shared backend), wrk and h2load (HTTP/1.1 and
/// h2c) as the load generators, valgrind for `--instructions`.
/// Not needed by the tests, so only the benchmark installs them.
pub fn l7_bench_tools() -> Result<()> {
    let missing: Vec<&str> = ["nginx", "haproxy", "wrk", "nghttp2-client", "valgrind"]
        .into_iter()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    apt_install(&missing)
}

fn dpkg_installed(package: &str) -> bool {
    cmd::output("dpkg-query", &["-W", "-f=${Status}", package])
        .is_some_and(|s| s.trim() == "install ok installed")
}

/// Installs `packages` with apt. Package scripts must not start services on this
/// machine (etcd or nginx would listen on the host): unless the machine already has
/// a policy, a `policy-rc.d` that refuses every start is in place while apt runs.
/// Recommends stay out, so every package a capability needs is named explicitly.
fn apt_install(packages: &[&str]) -> Result<()> {
    eprintln!("setup: installing apt packages: {}", packages.join(" "));
    if !cmd::is_root() {
        bail!(
            "installing {} needs root: run `sudo apt-get install {}`",
            packages.join(" "),
            packages.join(" ")
        );
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
                .args(packages)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    });
    if ours {
        let _ = std::fs::remove_file(policy);
    }
    result
}

fn rustup_component(toolchain: &str, component: &str) -> Result<()> {
    let listed = cmd::output("rustup", &["toolchain", "list"])
        .is_some_and(|l| l.lines().any(|t| t.starts_with(toolchain)));
    if !listed {
        // Only the channel itself: shared/TOOLCHAIN.md warns against dated nightlies.
        cmd::run(Command::new("rustup").args([
            "toolchain",
            "install",
            toolchain,
            "--profile",
            "minimal",
        ]))?;
    }
    cmd::run(Command::new("rustup").args(["component", "add", component, "--toolchain", toolchain]))
}

fn bpf_linker() -> Result<()> {
    eprintln!("setup: installing bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about a minute)");
    if !cmd::succeeds(&format!("{LLVM_PREFIX}/bin/llvm-config"), &["--version"]) {
        bail!("{LLVM_PREFIX}/bin/llvm-config missing: install llvm-22-dev libpolly-22-dev first");
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
