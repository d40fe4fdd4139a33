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
    traffic::{Server, Tally, http_requests},
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
        backends: 3,
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
    let lbd = LbdProcess::start(&topo.lb, &config);
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
    let (code, log) = lbd.stop();
    println!("lbd stopped (exit {code:?}); its log:");
    for line in log.lines() {
        println!("  {line}");
    }
    tally.failures.is_empty() && code == Some(0)
}
