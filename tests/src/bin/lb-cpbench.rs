//! `cargo xtask bench control-plane`: what the control plane costs at fleet scale.
//!
//! Shape: 1000 services × 30 endpoints, one EndpointSlice file per service written the
//! way `kubectl get endpointslice -o yaml` prints them (metadata, owner references,
//! target refs, zones, conditions). Measured:
//!
//! - cold sync: config parse → directory scan → specs → every map programmed, in a
//!   fresh child process so its peak RSS is its own: wall and CPU time, allocations
//!   (count and bytes, from a counting global allocator), peak RSS; into the in-memory
//!   maps, and (as root) into real kernel maps loaded from the BPF object;
//! - one endpoint changed in one file → rescan → only that service reprogrammed;
//! - one fade-in step (what a tick costs while one backend ramps);
//! - a weighted Maglev build of 1000 backends at table size 65537, with the unweighted
//!   build of the same input as the baseline in the same run, and its digest.
//!
//! Figures are reported, never asserted: the machines are shared and noisy.

use std::{
    fmt::Write as _,
    net::{IpAddr, Ipv4Addr},
    path::Path,
    process::{Command, ExitCode},
    time::{Duration, Instant, SystemTime},
};

use lb_control::{
    agent::HealthMap, agent::specs_at, agent::weights_moved, sources::slicedir::SliceDir,
};
use lb_dataplane::kernel::KernelDataplane;
use lb_model::{
    config, config::ValidConfig, dataplane::ApplyReport, dataplane::MapOps, dataplane::Programmer,
    dataplane::ServiceSpec, dataplane::memory::MemoryDataplane, fade_state::FadeStarts, maglev,
};

use lb_testbed::{
    benchkit::{Cost, Counting, peak_rss},
    shape::{ENDPOINTS, SERVICES, backend, slice_yaml, vip},
};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn config_text(dir: &Path) -> String {
    let mut t = format!(
        "[node]\ninterface = \"eth0\"\nendpointslice_dir = \"{}\"\nstate_dir = \"\"\n",
        dir.display()
    );
    for s in 0..SERVICES {
        let _ = write!(
            t,
            "\n[[service]]\nname = \"svc-{s}\"\nvip = \"{}\"\nport = 80\nfade_in = {{ window = \"30s\" }}\nendpoint_slices = {{ namespace = \"bench\", service = \"svc-{s}\", port = \"http\" }}\n",
            vip(s)
        );
    }
    t
}

/// Everything a cold start holds after programming.
struct Synced {
    config: ValidConfig,
    slices: SliceDir,
    starts: FadeStarts,
    programmer: Programmer,
    applied: Vec<ServiceSpec>,
}

impl Synced {
    /// Rescans the slice directory (which must have changed) and programs the result
    /// as of `at`, the way a tick after a slice change does.
    fn rescan(&mut self, maps: &mut impl MapOps, at: SystemTime) -> ApplyReport {
        assert!(self.slices.scan(), "the change is seen");
        let discovered = self.slices.discovered();
        let (specs, _) = specs_at(
            &self.config,
            &discovered,
            &mut self.starts,
            &HealthMap::new(),
            at,
        );
        self.program(maps, specs)
    }

    fn program(&mut self, maps: &mut impl MapOps, specs: Vec<ServiceSpec>) -> ApplyReport {
        let report = self
            .programmer
            .apply(maps, &specs, Instant::now())
            .expect("apply");
        self.applied = specs;
        report
    }
}

/// Rewrites service 0's slice with `endpoint0` as its first address, stamped
/// `ahead` into the future so the rescan sees a new modification time even on
/// filesystems with coarse timestamps.
fn rewrite_slice(file: &Path, endpoint0: Ipv4Addr, ahead: Duration) {
    std::fs::write(file, slice_yaml(0, Some(endpoint0))).expect("write");
    std::fs::File::options()
        .write(true)
        .open(file)
        .and_then(|f| f.set_modified(SystemTime::now() + ahead))
        .expect("mtime");
}

/// Config text → programmed maps, the way `lbd` starts; with the cost of each phase.
fn cold_sync(
    text: &str,
    dir: &Path,
    ops: &mut impl MapOps,
    now: SystemTime,
) -> (Synced, Vec<(&'static str, Cost)>) {
    let mut phases = Vec::new();
    let (config, c) = Cost::measure(|| {
        config::parse(text, "bench.toml", lb_l7::check_routes).expect("bench config is valid")
    });
    phases.push(("config parse", c));
    let mut slices = SliceDir::new(dir);
    let (_, c) = Cost::measure(|| slices.scan());
    phases.push(("slice files read + parsed", c));
    let (discovered, c) = Cost::measure(|| slices.discovered());
    phases.push(("endpoint sets", c));
    let mut starts = FadeStarts::default();
    let ((specs, _), c) =
        Cost::measure(|| specs_at(&config, &discovered, &mut starts, &HealthMap::new(), now));
    phases.push(("specs (health, fade-in)", c));
    let mut programmer = Programmer::default();
    let (report, c) = Cost::measure(|| {
        programmer
            .apply(ops, &specs, Instant::now())
            .expect("programming succeeds")
    });
    phases.push(("tables built + maps written", c));
    assert_eq!(report.programmed, SERVICES, "every service programmed");
    let synced = Synced {
        config,
        slices,
        starts,
        programmer,
        applied: specs,
    };
    (synced, phases)
}

/// The child: one cold sync in a fresh process, figures on stdout as `key=value`.
fn child(dir: &Path, kernel: bool) -> ExitCode {
    let text = config_text(dir);
    let rss0 = peak_rss();
    let now = SystemTime::now();
    // Loading the BPF object (kernel maps) is not part of the measured sync.
    let ((synced, phases), cost) = if kernel {
        let mut maps = match KernelDataplane::load() {
            Ok(m) => m,
            Err(e) => {
                eprintln!("kernel maps: {e}");
                return ExitCode::FAILURE;
            }
        };
        Cost::measure(|| cold_sync(&text, dir, &mut maps, now))
    } else {
        let mut maps = MemoryDataplane::default();
        Cost::measure(|| cold_sync(&text, dir, &mut maps, now))
    };
    let backends: usize = synced.applied.iter().map(|s| s.backends.len()).sum();
    for (name, c) in phases {
        println!("{}", c.line(&format!("      {name}")));
    }
    println!(
        "wall_ns={} cpu_ns={} allocs={} bytes={} rss={} rss0={} backends={backends}",
        cost.wall.as_nanos(),
        cost.cpu.as_nanos(),
        cost.allocs,
        cost.bytes,
        peak_rss(),
        rss0
    );
    ExitCode::SUCCESS
}

/// Runs [`child`] in a fresh process and reads its figures.
fn cold_sync_in_child(dir: &Path, kernel: bool) -> Option<(Cost, u64, u64, usize)> {
    let exe = std::env::current_exe().ok()?;
    let mut cmd = Command::new(exe);
    cmd.arg("--cold-sync-child").arg(dir);
    if kernel {
        cmd.arg("--kernel");
    }
    let out = cmd.output().ok()?;
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    for phase in text.lines().filter(|l| l.starts_with("    ")) {
        println!("{phase}");
    }
    let get = |k: &str| -> Option<u64> {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some((
        Cost {
            wall: Duration::from_nanos(get("wall_ns")?),
            cpu: Duration::from_nanos(get("cpu_ns")?),
            allocs: get("allocs")?,
            bytes: get("bytes")?,
        },
        get("rss")?,
        get("rss0")?,
        get("backends")? as usize,
    ))
}

/// Median of `runs` measurements of `work` (by wall time).
fn median(runs: usize, mut work: impl FnMut() -> Cost) -> Cost {
    let mut all: Vec<Cost> = (0..runs).map(|_| work()).collect();
    all.sort_by_key(|c| c.wall);
    all[runs / 2]
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--cold-sync-child") {
        let Some(dir) = args.get(2) else {
            return ExitCode::FAILURE;
        };
        return child(Path::new(dir), args.iter().any(|a| a == "--kernel"));
    }
    let dir = std::env::temp_dir().join(format!("lb-cpbench-{}", std::process::id()));
    let code = run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    code
}

fn run(base: &Path) -> ExitCode {
    let (dir, json_dir) = (base.join("yaml"), base.join("json"));
    for d in [&dir, &json_dir] {
        if let Err(e) = std::fs::create_dir_all(d) {
            eprintln!("{}: {e}", d.display());
            return ExitCode::FAILURE;
        }
    }
    let (mut yaml_bytes, mut json_bytes) = (0, 0);
    for s in 0..SERVICES {
        let y = slice_yaml(s, None);
        let value: serde_json::Value = serde_saphyr::from_str(&y).expect("generated YAML");
        let j = serde_json::to_string_pretty(&value).expect("JSON");
        yaml_bytes += y.len();
        json_bytes += j.len();
        std::fs::write(dir.join(format!("svc-{s}.yaml")), y).expect("write slice");
        std::fs::write(json_dir.join(format!("svc-{s}.json")), j).expect("write slice");
    }
    println!(
        "control plane: {SERVICES} services × {ENDPOINTS} endpoints, {SERVICES} EndpointSlice files ({:.1} MB of YAML; {:.1} MB as JSON)\n",
        yaml_bytes as f64 / 1e6,
        json_bytes as f64 / 1e6
    );

    println!("cold sync (config + slices → programmed maps), fresh process each:");
    let mut runs = vec![("YAML files, in-memory maps", &dir, false)];
    runs.push(("JSON files, in-memory maps", &json_dir, false));
    if lb_testbed::is_root() {
        runs.push(("YAML files, kernel BPF maps", &dir, true));
        runs.push(("JSON files, kernel BPF maps", &json_dir, true));
    } else {
        println!("  (kernel BPF maps skipped: needs root)");
    }
    for (what, d, kernel) in runs {
        println!("  {what}, by phase:");
        let Some((cost, rss, rss0, backends)) = cold_sync_in_child(d, kernel) else {
            eprintln!("cold sync child failed");
            return ExitCode::FAILURE;
        };
        println!("{}", cost.line("    total"));
        println!(
            "    {backends} backends programmed; peak RSS {:.1} MB ({:.1} MB before the sync)",
            rss as f64 / 1e6,
            rss0 as f64 / 1e6
        );
        println!(
            "    vs Cilium agent, same shape (162 MB, 3.77 M allocations, 1.47 s CPU): {:.3}× bytes, {:.3}× allocations, {:.3}× CPU",
            cost.bytes as f64 / 162e6,
            cost.allocs as f64 / 3.77e6,
            cost.cpu.as_secs_f64() / 1.47
        );
    }

    // Warm state for the incremental measurements: synced an hour ago, so the 30
    // backends of every service are settled and a new one fades in against them.
    let t0 = SystemTime::now() - Duration::from_secs(7200);
    let mut maps = MemoryDataplane::default();
    let mut s = cold_sync(&config_text(&dir), &dir, &mut maps, t0).0;

    println!("\nincremental (median of 5):");
    let file = dir.join("svc-0.yaml");
    let mut flip = false;
    let change = median(5, || {
        flip = !flip;
        let addr = if flip {
            Ipv4Addr::new(198, 18, 200, 1)
        } else {
            backend(0, 0)
        };
        rewrite_slice(&file, addr, Duration::from_secs(if flip { 10 } else { 20 }));
        let at = t0 + Duration::from_secs(3600);
        let (report, cost) = Cost::measure(|| s.rescan(&mut maps, at));
        assert_eq!(report.programmed, 1, "only the changed service");
        cost
    });
    println!("{}", change.line("  one endpoint changed → programmed"));

    // A fresh backend in svc-0 ramps in against 29 settled ones; ticks 3 s apart.
    rewrite_slice(
        &file,
        Ipv4Addr::new(198, 18, 201, 1),
        Duration::from_secs(30),
    );
    let t1 = t0 + Duration::from_secs(7200);
    s.rescan(&mut maps, t1);
    let discovered = s.slices.discovered();
    let mut second = 0;
    let step = median(5, || {
        second += 3;
        let now = t1 + Duration::from_secs(second);
        let (_, cost) = Cost::measure(|| {
            let (specs, fading) = specs_at(
                &s.config,
                &discovered,
                &mut s.starts,
                &HealthMap::new(),
                now,
            );
            assert!(fading, "svc-0 still fading: {:?}", specs[0].weights);
            assert!(weights_moved(&s.applied, &specs, fading), "a step is due");
            let r = s.program(&mut maps, specs);
            assert_eq!(r.programmed, 1, "only the fading service");
        });
        cost
    });
    println!(
        "{}",
        step.line("  one fade-in step (tick, 1 service rebuilt)")
    );

    println!("\nMaglev, 1000 backends, table size 65537 (median of 5):");
    let addrs: Vec<IpAddr> = (0..1000).map(|i| IpAddr::V4(backend(0, i))).collect();
    let weights: Vec<u32> = (0..1000).map(|i| 1 + (i % 10) as u32 * 100).collect();
    let mut table = Vec::new();
    let weighted = median(5, || {
        Cost::measure(|| table = maglev::build_weighted(&addrs, &weights, 65_537)).1
    });
    let plain = median(5, || Cost::measure(|| maglev::build(&addrs, 65_537)).1);
    println!("{}", plain.line("  unweighted (baseline)"));
    println!("{}", weighted.line("  weighted (weights 1…901)"));
    println!(
        "  weighted / unweighted: {:.2}×; table digest {:016x}",
        weighted.wall.as_secs_f64() / plain.wall.as_secs_f64(),
        maglev::digest(&table)
    );
    ExitCode::SUCCESS
}
