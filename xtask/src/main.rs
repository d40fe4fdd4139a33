//! Project tasks that cargo alone cannot do.
//!
//! xtask deliberately depends on nothing of ours: building `lb-userspace` needs the BPF
//! toolchain, and `cargo xtask setup` must run on a machine that lacks it.

mod cmd;
mod fuzz;
mod setup;

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

/// Build, test and demo tasks for the load balancer.
#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check every capability the project needs of this machine (protoc with the
    /// well-known types, bpf-linker linking a BPF object, nightly rust-src, etcd,
    /// ip netns, ethtool, openssl, …), install the providers of the missing ones and
    /// check again.
    Setup {
        /// Only check and print each capability (ok / missing and what provides it);
        /// install nothing; exit non-zero if one is missing.
        #[arg(long)]
        check: bool,
    },
    /// Build the BPF object (release, bpfel) and print its path.
    BuildEbpf {
        /// Build the log object instead (lb-ebpf's feature `log`): aya-log records at
        /// drops, nat exhaustion and new flows, which the data plane relays to lbd's log.
        #[arg(long)]
        log: bool,
    },
    /// Everything: fmt check, clippy (host and BPF target), unit, fixture and netns tests.
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Benchmarks: `dataplane` (per-packet cost through BPF_PROG_TEST_RUN, as ratios to
    /// an empty XDP program measured in the same run); `control-plane` (1000 services ×
    /// 30 EndpointSlice endpoints: cold sync, one change, one fade-in step, Maglev);
    /// `etcd` (the same shape from a real etcd: cold start, write-to-maps latency);
    /// `l7` (endpoint selection and access-log lines with criterion, then the HTTP
    /// proxy under wrk against nginx and HAProxy, and allocations per request);
    /// `admin` (how long `/v1/status` takes while a real lbd cold-syncs 1000 × 30 and
    /// restarts 30,000 health probes; `LBD_BIN=...` picks the lbd to measure).
    Bench {
        /// What to measure.
        #[arg(value_parser = ["dataplane", "control-plane", "etcd", "l7", "admin"])]
        what: String,
        /// Extra arguments for the benchmark (e.g. `--calls 100000 --trials 3`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Fuzz every parser of untrusted text (EndpointSlices, etcd values, the config,
    /// eskip routes, durations, timestamps, consistent-hash key templates, backends'
    /// HTTP/1.1 responses, clients' HTTP/1.x requests) with cargo-fuzz on nightly, installing cargo-fuzz first if
    /// needed. Crashes become regression seeds that `cargo test` replays.
    Fuzz {
        /// How long to run each target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Targets to run (default: all).
        targets: Vec<String>,
    },
    /// Run the main job on an embedded default: client → VIP → three backends, in
    /// network namespaces, with lbd on the LB node.
    Demo {
        /// Arguments for the demo (see `cargo xtask demo -- --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Runs the task; a failure is one line (with its causes) and exit status 1. anyhow's
/// backtrace (printed under `RUST_BACKTRACE=1`, which CI sets) would bury a missing
/// capability's name under a stack of xtask's own frames.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    std::env::set_current_dir(&root).context("entering the workspace root")?;
    match cli.command {
        Command::Setup { check: true } => setup::check(),
        Command::Setup { check: false } => setup::run(),
        Command::BuildEbpf { log } => build_ebpf(if log { Object::Log } else { Object::Default }),
        Command::Test { args } => test(&args),
        Command::Demo { args } => demo(&args),
        Command::Bench { what, args } => bench(&what, &args),
        Command::Fuzz { seconds, targets } => {
            setup::run()?;
            fuzz::run(seconds, &targets)
        }
    }
}

fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

fn build_ebpf(object: Object) -> Result<()> {
    setup::run()?;
    bpf_cargo(object, "build", &["--bins"], &[])?;
    let object = workspace_root()
        .join(object.target_dir())
        .join("bpfel-unknown-none/release/lb-ebpf");
    let size = std::fs::metadata(&object)
        .with_context(|| format!("{} was not produced", object.display()))?
        .len();
    println!("{} ({size} bytes)", object.display());
    Ok(())
}

/// Which BPF object to build.
#[derive(Clone, Copy, Debug)]
enum Object {
    /// What lbd embeds.
    Default,
    /// With lb-ebpf's feature `log` (aya-log records).
    Log,
}

impl Object {
    /// Where `build-ebpf` and the BPF clippy run put their output: one directory per
    /// object, so building one never overwrites the other.
    const fn target_dir(self) -> &'static str {
        match self {
            Self::Default => "target/ebpf",
            Self::Log => "target/ebpf-log",
        }
    }

    const fn features(self) -> &'static [&'static str] {
        match self {
            Self::Default => &[],
            Self::Log => &["--features", "log"],
        }
    }
}

/// `cargo +nightly <subcommand>` on `lb-ebpf` for the BPF target, in release (a debug
/// BPF object does not load).
fn bpf_cargo(object: Object, subcommand: &str, before: &[&str], after: &[&str]) -> Result<()> {
    let mut args = vec![subcommand, "--package", "lb-ebpf", "--release"];
    args.extend_from_slice(object.features());
    args.extend_from_slice(before);
    args.extend_from_slice(&[
        "--target",
        "bpfel-unknown-none",
        "-Z",
        "build-std=core",
        "--target-dir",
        object.target_dir(),
    ]);
    args.extend_from_slice(after);
    cmd::cargo_nightly(&args)
}

fn test(extra: &[String]) -> Result<()> {
    setup::run()?;
    require_root("the data-plane and network-namespace tests")?;
    cmd::remove_stale_namespaces()?;
    cmd::cargo(&["fmt", "--all", "--", "--check"])
        .context("cargo fmt --check: run `cargo fmt --all`")?;
    cmd::cargo(&[
        "clippy",
        "--workspace",
        "--exclude",
        "lb-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    // lb-dataplane without `object` is what lbctl and the pure crates build against.
    cmd::cargo(&[
        "clippy",
        "--package",
        "lb-dataplane",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    bpf_cargo(Object::Default, "clippy", &[], &["--", "-D", "warnings"])?;
    bpf_cargo(Object::Log, "clippy", &[], &["--", "-D", "warnings"])?;
    // The integration tests run the real lbd binary.
    cmd::cargo(&["build", "--package", "lb-userspace", "--bins"])?;
    let mut args = vec![
        "test",
        "--workspace",
        "--exclude",
        "lb-ebpf",
        "--no-fail-fast",
    ];
    args.extend(extra.iter().map(String::as_str));
    let totals = cmd::cargo_test(&args)?;
    cmd::remove_stale_namespaces()?;
    // One closing line over every test binary, so the run ends with the overall count
    // rather than the last binary's (often empty) doc-test summary.
    println!(
        "total: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    );
    if totals.failed > 0 {
        bail!("{} tests failed", totals.failed);
    }
    Ok(())
}

fn demo(args: &[String]) -> Result<()> {
    setup::run()?;
    require_root("the demo (network namespaces, XDP)")?;
    cmd::remove_stale_namespaces()?;
    cmd::cargo(&["build", "--package", "lb-userspace", "--bins"])?;
    let mut full = vec![
        "run",
        "--quiet",
        "--package",
        "lb-testbed",
        "--bin",
        "lb-demo",
        "--",
    ];
    full.extend(args.iter().map(String::as_str));
    cmd::cargo(&full)
}

fn bench(what: &str, args: &[String]) -> Result<()> {
    setup::run()?;
    let bin = match what {
        "dataplane" => {
            require_root("BPF_PROG_TEST_RUN")?;
            cmd::remove_stale_namespaces()?;
            "lb-bench"
        }
        // Root adds the kernel-map cold sync; without it that row is skipped.
        "control-plane" => "lb-cpbench",
        "admin" => {
            require_root("a network namespace and XDP for a real lbd")?;
            cmd::remove_stale_namespaces()?;
            // The benchmark runs the lbd binary; build the workspace's.
            cmd::cargo(&["build", "--release", "--package", "lb-userspace", "--bins"])?;
            "lb-adminbench"
        }
        "etcd" => {
            require_root("a network namespace for etcd and BPF maps")?;
            cmd::remove_stale_namespaces()?;
            "lb-etcdbench"
        }
        "l7" => {
            require_root("a network namespace for the proxies")?;
            cmd::remove_stale_namespaces()?;
            setup::l7_bench_tools()?;
            // Selection and log-line micro-benchmarks first (criterion), then the
            // whole proxy under wrk against nginx and HAProxy; not before a count of
            // instructions or a serve of one's own, which time nothing.
            let times = !args
                .iter()
                .any(|a| matches!(a.as_str(), "--instructions" | "--serve" | "--serve-stdin"));
            if times {
                cmd::cargo(&[
                    "bench",
                    "--package",
                    "lb-l7",
                    "--bench",
                    "l7",
                    "--",
                    "--warm-up-time",
                    "0.5",
                    "--measurement-time",
                    "1",
                ])?;
            }
            "lb-l7bench"
        }
        other => bail!("unknown benchmark {other} (dataplane, control-plane, etcd, l7, admin)"),
    };
    let mut full = vec![
        "run",
        "--quiet",
        "--release",
        "--package",
        "lb-testbed",
        "--bin",
        bin,
        "--",
    ];
    full.extend(args.iter().map(String::as_str));
    cmd::cargo(&full)
}

fn require_root(what: &str) -> Result<()> {
    if !cmd::is_root() {
        bail!("{what} need root: run as root (e.g. `sudo -E cargo xtask ...`)");
    }
    Ok(())
}
