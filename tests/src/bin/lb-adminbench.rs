//! `cargo xtask bench admin`: how long `lbctl status` waits while lbd is busy.
//!
//! A real lbd (the one `LBD_BIN` names, else the workspace's) runs in a namespace of
//! its own with 1000 services × 30 endpoints fed from an EndpointSlice directory, each
//! backend health-checked over TCP (the backends are local addresses of the namespace,
//! answered by a listener of this process). A client asks `/v1/status` on the admin
//! socket every few milliseconds and records how long each answer took, during:
//!
//! 1. the cold sync: the 1000 slice files appear in the directory at once, and lbd
//!    reads them, builds 1000 tables, writes every map, creates 30,000 neighbour
//!    entries and starts 30,000 probes;
//! 2. a probe restart: every service's check moves to another port (30,000 probes
//!    stop, 30,000 start);
//! 3. one service's check moves (30 targets change).
//!
//! Figures are reported (p50, p99, max, and the number of answers), never asserted.
//! Run it for two builds back to back (`LBD_BIN=/path/to/old/lbd`) to compare.

use std::{
    fmt::Write as _,
    net::TcpListener,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use lb_admin::Status;
use lb_testbed::{
    LbdProcess, Netns, is_root,
    lbd::TempDir,
    shape::{ENDPOINTS, SERVICES, slice_yaml, vip},
};

/// Between two status requests.
const PACE: Duration = Duration::from_millis(5);

fn config(dir: &Path, check_port: u16, odd_port: Option<u16>) -> String {
    let mut t = format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\nendpointslice_dir = \"{}\"\n",
        dir.display()
    );
    for s in 0..SERVICES {
        let port = match odd_port {
            Some(p) if s == 0 => p,
            _ => check_port,
        };
        let _ = write!(
            t,
            "\n[[service]]\nname = \"svc-{s}\"\nvip = \"{}\"\nport = 80\nendpoint_slices = {{ namespace = \"bench\", service = \"svc-{s}\", port = \"http\" }}\nhealth_check = {{ kind = \"tcp\", port = {port}, interval = \"5s\", timeout = \"1s\", rise = 2, fall = 3 }}\n",
            vip(s)
        );
    }
    t
}

/// Status answer times, with when each was asked (since the phase began).
#[derive(Default)]
struct Samples {
    took: Vec<Duration>,
    failed: usize,
}

impl Samples {
    fn line(&mut self, phase: &str, wall: Duration) -> String {
        self.took.sort_unstable();
        let q = |p: f64| {
            self.took
                .get(((self.took.len() as f64 * p) as usize).min(self.took.len().saturating_sub(1)))
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        format!(
            "| {phase} | {:.1} s | {} | {:.2} ms | {:.2} ms | {:.1} ms | {} |",
            wall.as_secs_f64(),
            self.took.len(),
            q(0.5),
            q(0.99),
            self.took.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            self.failed
        )
    }
}

/// Asks for status every [`PACE`] until `done`, recording answer times.
fn poll(socket: PathBuf, done: Arc<AtomicBool>) -> std::thread::JoinHandle<Samples> {
    std::thread::spawn(move || {
        let mut samples = Samples::default();
        while !done.load(Ordering::Relaxed) {
            let asked = Instant::now();
            match lb_admin::client::get::<Status>(&socket, "/v1/status") {
                Ok(_) => samples.took.push(asked.elapsed()),
                Err(_) => samples.failed += 1,
            }
            std::thread::sleep(PACE);
        }
        samples
    })
}

/// Measures status answers while `work` runs and until `settled` says lbd is done
/// (bounded by `limit`), plus `tail` after.
fn phase(
    socket: &Path,
    name: &str,
    work: impl FnOnce(),
    mut settled: impl FnMut(&Status) -> bool,
    limit: Duration,
    tail: Duration,
) -> String {
    let done = Arc::new(AtomicBool::new(false));
    let poller = poll(socket.to_path_buf(), Arc::clone(&done));
    let began = Instant::now();
    work();
    let deadline = began + limit;
    loop {
        let ok = lb_admin::client::get::<Status>(socket, "/v1/status").is_ok_and(|s| settled(&s));
        if ok || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let wall = began.elapsed();
    std::thread::sleep(tail);
    done.store(true, Ordering::Relaxed);
    let mut samples = poller.join().expect("poller");
    samples.line(name, wall)
}

fn main() -> ExitCode {
    if !is_root() {
        eprintln!("lb-adminbench needs root (network namespaces, XDP)");
        return ExitCode::FAILURE;
    }
    if std::env::var_os("LBD_BIN").is_none() {
        let release = lb_testbed::target_dir().join("release").join("lbd");
        // SAFETY: no other thread runs yet.
        unsafe { std::env::set_var("LBD_BIN", release) };
    }
    let ns = Netns::new("adm");
    ns.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
    ]);
    ns.ip(&["link", "set", "eth0", "up"]);
    ns.ip(&["link", "set", "eth1", "up"]);
    ns.ip(&["link", "set", "lo", "up"]);
    ns.ip(&["addr", "add", "198.18.255.254/16", "dev", "eth0"]);
    // The backends are this namespace's own addresses: probes reach the listeners
    // below without any of them existing.
    ns.ip(&[
        "route",
        "add",
        "local",
        "198.18.0.0/17",
        "dev",
        "lo",
        "table",
        "local",
    ]);
    for port in [8080u16, 8081, 8082] {
        ns.spawn(move || {
            let listener = TcpListener::bind(("0.0.0.0", port)).expect("bind");
            for conn in listener.incoming() {
                drop(conn);
            }
        });
    }
    let dir = TempDir::new("adminbench");
    let slices = dir.path().join("slices");
    let staging = dir.path().join("staging");
    std::fs::create_dir_all(&slices).expect("slices");
    std::fs::create_dir_all(&staging).expect("staging");
    for s in 0..SERVICES {
        std::fs::write(staging.join(format!("svc-{s}.yaml")), slice_yaml(s, None)).expect("slice");
    }
    let mut lbd = LbdProcess::start(&ns, &config(&slices, 8080, None));
    println!(
        "lbd: {}\n{SERVICES} services × {ENDPOINTS} endpoints, TCP checks every 5 s; /v1/status every {} ms\n",
        lb_testbed::lbd::lbd_binary().display(),
        PACE.as_millis()
    );
    let socket = lbd.admin_socket();
    println!("| phase | until settled | answers | p50 | p99 | max | failed |");
    println!("|---|---|---|---|---|---|---|");
    let programmed = |s: &Status| {
        s.last_reconcile
            .as_ref()
            .is_some_and(|r| r.trigger == "endpointslices" && r.error.is_none())
    };
    let line = phase(
        &socket,
        "cold sync (1000 slice files appear)",
        || {
            for s in 0..SERVICES {
                let name = format!("svc-{s}.yaml");
                std::fs::rename(staging.join(&name), slices.join(&name)).expect("move");
            }
        },
        programmed,
        Duration::from_secs(120),
        Duration::from_secs(5),
    );
    println!("{line}");
    let generation = |n: u64| move |s: &Status| s.config_generation >= n;
    let line = phase(
        &socket,
        "every check moves (30,000 probes restart)",
        || {
            lbd.reload(&config(&slices, 8081, None));
        },
        generation(2),
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    println!("{line}");
    let line = phase(
        &socket,
        "one service's check moves (30 probes)",
        || {
            lbd.reload(&config(&slices, 8081, Some(8082)));
        },
        generation(3),
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    println!("{line}");
    lbd.assert_running("after the benchmark");
    ExitCode::SUCCESS
}
