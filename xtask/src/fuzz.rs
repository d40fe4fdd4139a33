//! `cargo xtask fuzz [--seconds N] [TARGET…]`: runs the cargo-fuzz targets in `fuzz/`
//! (one per untrusted text lbd reads) for N seconds each, on nightly, after making
//! sure cargo-fuzz is installed. New corpus entries land in `fuzz/corpus/<target>/`
//! (minimised afterwards, so the committed corpus stays small); a crash is copied
//! into `fuzz/regressions/<target>/`, where `cargo test` replays it from then on.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use crate::cmd;

/// The targets, as `fuzz/fuzz_targets/<name>.rs` names them.
pub const TARGETS: [&str; 9] = [
    "endpointslice",
    "etcd_value",
    "config_toml",
    "eskip",
    "duration",
    "timestamp",
    "key_template",
    "h1_response",
    "h1_request",
];

/// Runs `targets` (all when empty) for `seconds` each.
pub fn run(seconds: u64, targets: &[String]) -> Result<()> {
    let chosen: Vec<&str> = if targets.is_empty() {
        TARGETS.to_vec()
    } else {
        for t in targets {
            if !TARGETS.contains(&t.as_str()) {
                bail!("unknown fuzz target {t} (one of {})", TARGETS.join(", "));
            }
        }
        targets.iter().map(String::as_str).collect()
    };
    ensure_cargo_fuzz()?;
    // Build first, so that a build failure is not taken for a crash.
    for target in &chosen {
        cargo_fuzz(&["build", target, "--sanitizer", "none", "--debug-assertions"])
            .with_context(|| format!("building fuzz target {target}"))?;
    }
    let mut crashed = Vec::new();
    for target in chosen {
        eprintln!("== fuzz {target}: {seconds} s");
        let corpus = format!("fuzz/corpus/{target}");
        let seeds = format!("fuzz/regressions/{target}");
        std::fs::create_dir_all(&corpus).with_context(|| format!("creating {corpus}"))?;
        let time = format!("-max_total_time={seconds}");
        // Safe Rust needs no address sanitizer; debug assertions catch overflows.
        let ran = cargo_fuzz(&[
            "run",
            target,
            "--sanitizer",
            "none",
            "--debug-assertions",
            &corpus,
            &seeds,
            "--",
            &time,
            "-timeout=10",
            "-rss_limit_mb=4096",
        ]);
        if let Err(err) = ran {
            eprintln!("fuzz {target}: {err:#}");
            keep_crashes(target)?;
            crashed.push(target);
            continue;
        }
        cargo_fuzz(&[
            "cmin",
            target,
            "--sanitizer",
            "none",
            "--debug-assertions",
            &corpus,
        ])
        .with_context(|| format!("minimising {corpus}"))?;
    }
    if !crashed.is_empty() {
        bail!(
            "crashes in {}: the inputs are in fuzz/regressions/<target>/ (cargo test replays them)",
            crashed.join(", ")
        );
    }
    Ok(())
}

/// Installs cargo-fuzz from crates.io unless nightly cargo already has it.
fn ensure_cargo_fuzz() -> Result<()> {
    if cmd::succeeds("rustup", &["run", "nightly", "cargo", "fuzz", "--version"]) {
        return Ok(());
    }
    eprintln!("installing cargo-fuzz (once)");
    cmd::cargo(&["install", "cargo-fuzz", "--locked"])
}

/// `cargo +nightly fuzz <args>` in the workspace root, without the variables of the
/// stable cargo running xtask (they would pick the wrong compiler).
fn cargo_fuzz(args: &[&str]) -> Result<()> {
    let mut c = Command::new("rustup");
    c.args(["run", "nightly", "cargo", "fuzz"]).args(args);
    for var in [
        "RUSTC",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTUP_TOOLCHAIN",
        "CARGO",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
    ] {
        c.env_remove(var);
    }
    cmd::run(&mut c)
}

/// Copies the crash inputs cargo-fuzz left in `fuzz/artifacts/<target>/` into the
/// target's regression seeds.
fn keep_crashes(target: &str) -> Result<()> {
    let artifacts = Path::new("fuzz/artifacts").join(target);
    let seeds = Path::new("fuzz/regressions").join(target);
    let Ok(entries) = std::fs::read_dir(&artifacts) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let to = seeds.join(&name);
        std::fs::copy(entry.path(), &to)
            .with_context(|| format!("copying {} to {}", entry.path().display(), to.display()))?;
        eprintln!("kept {} as a regression seed", to.display());
    }
    Ok(())
}
