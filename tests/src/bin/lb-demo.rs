//! The demo behind `cargo xtask demo`: a client, an LB node running `lbd` and three
//! backends in network namespaces; real HTTP requests to the VIP; who served how many.
//! Everything is torn down at the end, on failure and on Ctrl-C.

use std::{
    process::ExitCode,
    sync::atomic::{AtomicBool, Ordering},
    time::Instant,
};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions, is_root,
    topology::{CLIENT_ADDR, LB_ADDR, VIP, backend_addr},
    traffic::{Server, Tally, http_requests, http_requests_from},
};

/// The embedded default configuration (also in lb-userspace/conf/demo.toml).
const CONFIG: &str = include_str!("../../../lb-userspace/conf/demo.toml");
const DEFAULT_REQUESTS: usize = 300;
const MAX_REQUESTS: usize = 10_000;
const BATCH: usize = 50;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

struct Args {
    requests: usize,
    mode: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        requests: DEFAULT_REQUESTS,
        mode: "native".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--requests" => {
                let n = it.next().ok_or("--requests needs a number")?;
                args.requests = n
                    .parse()
                    .map_err(|_| format!("--requests: {n:?} is not a number"))?;
                if args.requests == 0 || args.requests > MAX_REQUESTS {
                    return Err(format!("--requests must be 1..={MAX_REQUESTS}"));
                }
            }
            "--xdp-mode" => {
                args.mode = it.next().ok_or("--xdp-mode needs native or generic")?;
                if args.mode != "native" && args.mode != "generic" {
                    return Err(format!(
                        "--xdp-mode: {:?} is not native or generic",
                        args.mode
                    ));
                }
            }
            "-h" | "--help" => {
                println!("usage: cargo xtask demo [-- --requests N] [--xdp-mode native|generic]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("lb-demo: {e}");
            return ExitCode::from(2);
        }
    };
    if !is_root() {
        eprintln!("lb-demo: needs root (network namespaces, XDP)");
        return ExitCode::FAILURE;
    }
    // SAFETY: installs an async-signal-safe handler that only stores to an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let ok = run(&args);
    println!("topology removed");
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run(args: &Args) -> bool {
    let config = CONFIG.replace(
        "xdp_mode = \"native\"",
        &format!("xdp_mode = \"{}\"", args.mode),
    );
    println!(
        "building the topology: client {CLIENT_ADDR}, LB node {LB_ADDR}, backends {}..{}",
        backend_addr(0),
        backend_addr(2)
    );
    let topo = Topology::build(&TopologyOptions {
        backends: 4,
        native_xdp: args.mode == "native",
    });
    let _servers: Vec<Server> = topo
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            Server::http(
                ns,
                VIP,
                80,
                &format!("backend-{} ({})", i + 1, backend_addr(i)),
            )
        })
        .collect();
    println!("starting lbd on the LB node ({} XDP)", args.mode);
    // The three configured backends have been up for an hour: no fade-in for them.
    let mut lbd =
        LbdProcess::start_with_state(&topo.lb, &config, &[("fade-in.json", &settled_state())]);
    println!(
        "sending {} HTTP requests from the client to http://{VIP}/",
        args.requests
    );
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut sent = 0;
    while sent < args.requests && !INTERRUPTED.load(Ordering::Relaxed) {
        let n = BATCH.min(args.requests - sent);
        let batch = http_requests(&topo.client, VIP, 80, n);
        for (name, count) in batch.served {
            *tally.served.entry(name).or_default() += count;
        }
        tally.failures.extend(batch.failures);
        sent += n;
        if tally.failures.len() >= Tally::MAX_FAILURES {
            break;
        }
    }
    let elapsed = started.elapsed();
    if INTERRUPTED.load(Ordering::Relaxed) {
        println!("interrupted after {sent} requests");
    }
    println!("\n{:<32} {:>8} {:>7}", "backend", "requests", "share");
    for (name, count) in &tally.served {
        let share = 100.0 * *count as f64 / tally.ok().max(1) as f64;
        println!(
            "{name:<32} {count:>8} {share:>6.1}%  {}",
            "#".repeat((share / 2.0) as usize)
        );
    }
    println!(
        "\n{} of {sent} requests answered in {:.2}s; {} failed",
        tally.ok(),
        elapsed.as_secs_f64(),
        tally.failures.len()
    );
    for f in tally.failures.iter().take(5) {
        println!("  failure: {f}");
    }
    show_lbctl(&lbd, &["services"]);
    let faded = if tally.failures.is_empty() && !INTERRUPTED.load(Ordering::Relaxed) {
        fade_in_fourth_backend(&topo, &mut lbd, &config)
    } else {
        true
    };
    let (code, log) = lbd.stop();
    println!("lbd stopped (exit {code:?}); its log:");
    for line in log.lines() {
        println!("  {line}");
    }
    faded && tally.failures.is_empty() && code == Some(0)
}

/// Fade-in state saying backends 1-3 were first seen an hour ago.
fn settled_state() -> String {
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let ms = hour_ago
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let entries: Vec<String> = (0..3)
        .map(|i| format!("\"web/{}\": {ms}", backend_addr(i)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// Adds backend-4 with a reload and shows its share of new connections each second
/// while it fades in. Returns whether every request succeeded.
fn fade_in_fourth_backend(topo: &Topology, lbd: &mut LbdProcess, config: &str) -> bool {
    let four = config.replace(
        &format!("  {{ address = \"{}\" }},\n]", backend_addr(2)),
        &format!(
            "  {{ address = \"{}\" }},\n  {{ address = \"{}\" }},\n]",
            backend_addr(2),
            backend_addr(3)
        ),
    );
    println!(
        "\nadding backend-4 ({}) with a 10 s fade-in (SIGHUP reload)",
        backend_addr(3)
    );
    let outcome = lbd.reload(&four);
    println!("  lbd: {outcome}");
    println!(
        "{:>6}  {:>14}  share of new connections",
        "second", "backend-4"
    );
    let started = Instant::now();
    let mut ok = true;
    for second in 0..12 {
        if INTERRUPTED.load(Ordering::Relaxed) {
            break;
        }
        // 400 connections from fresh, known source ports each second.
        let first = 20000 + 400 * second as u16;
        let batch = http_requests_from(
            &topo.client,
            CLIENT_ADDR.into(),
            VIP.into(),
            80,
            first..first + 400,
        );
        ok &= batch.iter().all(|(_, r)| r.is_ok());
        let on_four = batch
            .iter()
            .filter(|(_, r)| r.as_deref().is_ok_and(|b| b.starts_with("backend-4")))
            .count();
        let share = 100.0 * on_four as f64 / batch.len() as f64;
        println!(
            "{second:>6}  {share:>13.1}%  {}",
            "#".repeat(share as usize)
        );
        if second == 4 {
            show_lbctl(lbd, &["backends", "web"]);
        }
        let next = std::time::Duration::from_secs(second + 1);
        if let Some(wait) = next.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    println!("  (with four equal backends the full share is 25%)");
    let vip = format!("{VIP}:80");
    show_lbctl(
        lbd,
        &["explain", "tcp", &format!("{CLIENT_ADDR}:20000"), &vip],
    );
    show_lbctl(
        lbd,
        &["explain", "tcp", &format!("{CLIENT_ADDR}:65000"), &vip],
    );
    show_lbctl(lbd, &["status"]);
    ok
}

/// Prints an lbctl command and its output, indented.
fn show_lbctl(lbd: &LbdProcess, args: &[&str]) {
    println!("\n$ lbctl {}", args.join(" "));
    let (_, out, err) = lbd.lbctl(args);
    for line in out.lines().chain(err.lines()) {
        println!("  {line}");
    }
}
