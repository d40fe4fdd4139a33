//! `cargo xtask bench l7` (after the criterion part): the whole HTTP proxy.
//!
//! In a namespace of its own: one nginx serves as the backend for everyone
//! (`198.18.0.11:8080`, a fixed 23-byte body). In front of it, on `198.18.0.1`, our
//! proxy (the library lbd runs, in this process), nginx (`proxy_pass` with upstream
//! keep-alive) and HAProxy (`http-reuse always`), each with the same number of
//! workers. wrk drives each in turn, each round starting one proxy later so that
//! drift and the order of runs hit all alike;
//! requests/s and p99 latency are reported with our ratios, medians over the rounds.
//! Then the same over h2c (HTTP/2 with prior knowledge, the backend side staying
//! HTTP/1.1), driven by h2load: our proxy's port takes h2c beside HTTP/1.1, nginx
//! listens with `http2` on a cleartext port, HAProxy binds with `proto h2`.
//!
//! The proxy runs under a counting allocator, and wrk and the backend are other
//! processes, so the allocation figures per request are the proxy's alone: for the
//! plain proxy route, `status(200)`+`inlineContent`, `setQuery` to the backend and
//! `redirectTo(308)`. Logging on vs off compares two routes that differ by the
//! logging alone (`enableAccessLog()` and `disableAccessLog()`, one filter each, an
//! access-log line per request written to a file); the plain route beside them shows
//! what a route's first filter costs by itself.
//!
//! Beside the proxies, a byte relay with no HTTP in it ([`lb_testbed::relay`], one
//! backend connection per client connection) on port 90: the same reads and writes per
//! request and nothing else, so its requests/s are the ceiling of any user-space proxy
//! on this machine, and each proxy's share of it says how much of its cost is its own.
//!
//! Figures are reported, never asserted.

use std::{
    fmt::Write as _,
    path::Path,
    process::{Child, Command, ExitCode, Stdio},
    sync::{Arc, atomic::Ordering::Relaxed},
    time::Duration,
};

use lb_l7::{
    accesslog::AccessLog, accesslog::AccessLogConfig, proxy::L7Config, proxy::Proxy,
    proxy::ServiceInput,
};
use lb_testbed::{
    Netns,
    benchkit::{ALLOCS, BYTES, Counting, rotated},
    callgrind::{self, Route},
    is_root,
    lbd::TempDir,
    relay::Relay,
};

#[global_allocator]
static GLOBAL: Counting = Counting;

const FRONT: &str = "198.18.0.1";
const BACKEND: &str = "198.18.0.11:8080";

struct Options {
    workers: usize,
    connections: usize,
    seconds: u64,
    rounds: usize,
    /// Paired on/off runs for the access log's cost.
    pairs: usize,
    /// h2load's concurrent streams per connection (its connections are
    /// `connections / 2`, so that streams in flight stay near wrk's).
    streams: usize,
    /// `--serve N`: start every proxy, print where each listens and its pid, and
    /// wait N seconds instead of measuring: for `perf`, `strace` or a load generator
    /// of one's own (`ip netns exec <namespace> ...`).
    serve: u64,
    /// `--serve-stdin`: as `--serve`, until stdin closes (what `--instructions` runs).
    serve_stdin: bool,
    /// `--instructions N`: instead of timing, count this binary's instructions per
    /// request under callgrind, N requests per route ([`lb_testbed::callgrind`]).
    instructions: u64,
    /// `--against PATH`: with `--instructions`, count another build's `lb-l7bench`
    /// too, in the same run, and print this one's ratio to it.
    against: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        workers: 2,
        connections: 64,
        seconds: 5,
        rounds: 3,
        pairs: 10,
        streams: 4,
        serve: 0,
        serve_stdin: false,
        instructions: 0,
        against: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match a.as_str() {
            "--workers" => o.workers = value("--workers")?,
            "--connections" => o.connections = value("--connections")?,
            "--seconds" => o.seconds = value("--seconds")? as u64,
            "--rounds" => o.rounds = value("--rounds")?,
            "--pairs" => o.pairs = value("--pairs")?,
            "--streams" => o.streams = value("--streams")?,
            "--serve" => o.serve = value("--serve")? as u64,
            "--serve-stdin" => o.serve_stdin = true,
            "--instructions" => o.instructions = value("--instructions")? as u64,
            "--against" => o.against = Some(args.next().ok_or("--against needs a path")?),
            other => {
                return Err(format!(
                    "unknown argument {other} (--workers N --connections N --seconds N --rounds N --pairs N --streams N --serve N --serve-stdin --instructions N [--against PATH])"
                ));
            }
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    if !is_root() {
        eprintln!("lb-l7bench needs root (a network namespace)");
        return ExitCode::FAILURE;
    }
    let opts = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("lb-l7bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    if opts.instructions > 0 {
        return report(instructions(&opts));
    }
    if opts.serve > 0 || opts.serve_stdin {
        // Before any thread starts, so every thread inherits it: a SIGTERM or ^C
        // ends the serve through the cleanup (children stopped, namespace removed)
        // instead of leaving nginx and HAProxy running in an orphaned namespace.
        block_stop_signals();
    }
    let ns = Netns::new("l7b");
    for a in [FRONT, "198.18.0.11"] {
        ns.ip(&["addr", "add", &format!("{a}/32"), "dev", "lo"]);
    }
    let dir = TempDir::new("l7bench");
    let dir_path = dir.path().to_owned();
    let namespace = ns.name().to_owned();
    report(ns.run(move || run(&opts, &dir_path, &namespace)))
}

/// SIGTERM and SIGINT, as a set.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Blocks SIGTERM and SIGINT in this thread and the threads it starts, so that
/// [`wait_for_stop`] takes them. (Children get a fresh mask: std's spawn resets it.)
fn block_stop_signals() {
    let set = stop_signals();
    // SAFETY: changes only the calling thread's mask, with a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Waits up to `limit` for SIGTERM or SIGINT (blocked by [`block_stop_signals`]).
fn wait_for_stop(limit: Duration) {
    let set = stop_signals();
    let end = std::time::Instant::now().checked_add(limit);
    loop {
        // An hour at a time at most (a `time_t` holds that whatever `limit` is).
        let step = end
            .map_or(Duration::MAX, |e| {
                e.saturating_duration_since(std::time::Instant::now())
            })
            .min(Duration::from_secs(3600));
        if step.is_zero() {
            return;
        }
        let wait = libc::timespec {
            tv_sec: step.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(step.subsec_nanos()),
        };
        // SAFETY: a valid set and timeout; no siginfo wanted.
        let got = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &wait) };
        if got == libc::SIGTERM || got == libc::SIGINT {
            return;
        }
    }
}

/// Prints a finished benchmark's report, or its error.
fn report(result: Result<String, String>) -> ExitCode {
    match result {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lb-l7bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The routes `--instructions` counts.
const COUNTED: [Route; 4] = [
    Route {
        name: "proxy to backend",
        port: 80,
        h2: false,
    },
    Route {
        name: "proxy to backend, access log on",
        port: 86,
        h2: false,
    },
    Route {
        name: "status(200) -> inlineContent",
        port: 87,
        h2: false,
    },
    Route {
        name: "proxy to backend, h2c client",
        port: 80,
        h2: true,
    },
];

/// `--instructions`: this build's instructions per request, and another's beside it.
fn instructions(opts: &Options) -> Result<String, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let n = opts.instructions;
    let ours = callgrind::per_request(&me, n, &COUNTED)?;
    let theirs = match &opts.against {
        Some(other) => Some(callgrind::per_request(Path::new(other), n, &COUNTED)?),
        None => None,
    };
    let mut out = format!(
        "instructions per request in the proxy's process (callgrind, {n} requests per route, 16 connections, after 2000 to warm up)\n"
    );
    let _ = writeln!(
        out,
        "{:<36} {:>12} {:>12} {:>8}",
        "route", "this build", "against", "ratio"
    );
    for (i, r) in COUNTED.iter().enumerate() {
        match &theirs {
            Some(t) => {
                let _ = writeln!(
                    out,
                    "{:<36} {:>12.0} {:>12.0} {:>7.3}×",
                    r.name,
                    ours[i],
                    t[i],
                    ours[i] / t[i]
                );
            }
            None => {
                let _ = writeln!(out, "{:<36} {:>12.0}", r.name, ours[i]);
            }
        }
    }
    Ok(out)
}

/// A child process killed on drop.
struct Daemon(Child);

impl Drop for Daemon {
    /// SIGTERM first, so nginx's and HAProxy's masters stop their workers (SIGKILL
    /// would orphan them); SIGKILL if still there after 3 s.
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        // SAFETY: kill on our own child's pid, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        for _ in 0..60 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(program: &str, args: &[&str]) -> Result<Daemon, String> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map(Daemon)
        .map_err(|e| format!("starting {program}: {e}"))
}

fn nginx(dir: &Path, name: &str, body: &str) -> Result<Daemon, String> {
    let prefix = dir.join(name);
    std::fs::create_dir_all(prefix.join("logs")).map_err(|e| e.to_string())?;
    let conf = prefix.join("nginx.conf");
    std::fs::write(&conf, body).map_err(|e| e.to_string())?;
    spawn(
        "nginx",
        &[
            "-p",
            &prefix.display().to_string(),
            "-c",
            &conf.display().to_string(),
            "-g",
            "daemon off;",
        ],
    )
}

fn wait_for(addr: &str) -> Result<(), String> {
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("nothing listens on {addr}"))
}

/// One wrk run's figures.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    rps: f64,
    p99_ms: f64,
    requests: u64,
    errors: u64,
    /// CPU time (user + system) the proxy under test spent per request, µs.
    cpu_us: f64,
}

/// CPU time (user + system) process `pid` and its children have used so far, in
/// seconds, from `/proc` (clock ticks): nginx's master has its workers as children,
/// HAProxy and this process keep their threads in one process.
fn cpu_seconds(pid: u32) -> f64 {
    let ticks = |pid: &str| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| {
            fields
                .get(n - 3)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        field(14) + field(15)
    };
    let me = pid.to_string();
    let children =
        std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")).unwrap_or_default();
    let total: u64 = ticks(&me) + children.split_whitespace().map(ticks).sum::<u64>();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    total as f64 / hz
}

/// Runs `load` and adds the CPU time `pid` spent during it, per request, to its run.
fn with_cpu(pid: u32, load: impl FnOnce() -> Result<Run, String>) -> Result<Run, String> {
    let before = cpu_seconds(pid);
    let mut run = load()?;
    run.cpu_us = (cpu_seconds(pid) - before) * 1e6 / run.requests.max(1) as f64;
    Ok(run)
}

fn wrk(opts: &Options, url: &str, seconds: u64) -> Result<Run, String> {
    let out = Command::new("wrk")
        .args([
            "-t",
            &opts.workers.to_string(),
            "-c",
            &opts.connections.to_string(),
            "-d",
            &format!("{seconds}s"),
            "--latency",
            url,
        ])
        .output()
        .map_err(|e| format!("running wrk: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut run = Run::default();
    for line in text.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Requests/sec:"), Some(v)) => run.rps = v.parse().unwrap_or(0.0),
            (Some("99%"), Some(v)) => run.p99_ms = millis(v),
            (Some(n), Some("requests")) => run.requests = n.parse().unwrap_or(0),
            (Some("Non-2xx"), _) | (Some("Socket"), _) => {
                run.errors += line
                    .split([' ', ','])
                    .filter_map(|w| w.parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    if run.rps == 0.0 {
        return Err(format!(
            "wrk {url}: no result\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(run)
}

/// One h2load run over h2c (prior knowledge) for `seconds`: requests/s from its
/// summary, p99 from its per-request log (h2load prints no percentiles), errors as
/// the requests that failed, errored, timed out or had no 2xx.
fn h2load(opts: &Options, url: &str, seconds: u64, log: &Path) -> Result<Run, String> {
    let clients = (opts.connections / 2).max(opts.workers);
    let out = Command::new("h2load")
        .args([
            "-t",
            &opts.workers.to_string(),
            "-c",
            &clients.to_string(),
            "-m",
            &opts.streams.to_string(),
            "-D",
            &seconds.to_string(),
            "--log-file",
            &log.display().to_string(),
            url,
        ])
        .output()
        .map_err(|e| format!("running h2load: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut run = Run::default();
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
        match words.as_slice() {
            ["finished", "in", _, rps, "req/s", ..] => run.rps = rps.parse().unwrap_or(0.0),
            ["requests:", total, "total", ..] => {
                run.requests = total.parse().unwrap_or(0);
                // "N failed, N errored, N timeout"
                for pair in words.windows(2) {
                    if matches!(pair[1], "failed" | "errored" | "timeout") {
                        run.errors += pair[0].parse::<u64>().unwrap_or(0);
                    }
                }
            }
            ["status", "codes:", ok, "2xx", ..] => {
                let ok: u64 = ok.parse().unwrap_or(0);
                run.errors += run.requests.saturating_sub(ok + run.errors);
            }
            _ => {}
        }
    }
    // Tab-separated: start (µs since the epoch), status, µs to the response's end.
    let logged = std::fs::read_to_string(log).unwrap_or_default();
    let mut micros: Vec<f64> = logged
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    let _ = std::fs::remove_file(log);
    if run.rps == 0.0 || micros.is_empty() {
        return Err(format!(
            "h2load {url}: no result\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    micros.sort_by(f64::total_cmp);
    run.p99_ms = micros[(micros.len() * 99 / 100).min(micros.len() - 1)] / 1000.0;
    Ok(run)
}

/// One table of runs by proxy, medians over rounds: requests/s, p99, the proxy's CPU
/// per request, and our first row's ratios to each of the others (the first `ours`
/// rows are our own variants, which get none). Requests/s on this shared machine move
/// with what else runs; the CPU a proxy spends per request moves much less, and is
/// what decides who wins when the proxies, the load generator and the backend share
/// the cores.
fn table(out: &mut String, names: &[&str], runs: &[Vec<Run>], ours: usize) {
    let med = |i: usize, f: fn(&Run) -> f64| median(runs[i].iter().map(f).collect());
    let _ = writeln!(
        out,
        "{:<22} {:>12} {:>10} {:>12} {:>14} {:>17} {:>8}",
        "proxy",
        "requests/s",
        "p99 ms",
        "CPU µs/req",
        "ours ÷ theirs",
        "their CPU ÷ ours",
        "errors"
    );
    let (rps0, cpu0) = (med(0, |r| r.rps), med(0, |r| r.cpu_us));
    for (i, name) in names.iter().enumerate() {
        let errors: u64 = runs[i].iter().map(|r| r.errors).sum();
        let (rps, cpu) = (med(i, |r| r.rps), med(i, |r| r.cpu_us));
        let (ratio, cpu_ratio) = if i < ours {
            (String::from("-"), String::from("-"))
        } else {
            (format!("{:.2}×", rps0 / rps), format!("{:.2}×", cpu / cpu0))
        };
        let _ = writeln!(
            out,
            "{name:<22} {rps:>12.0} {:>10.2} {cpu:>12.2} {ratio:>14} {cpu_ratio:>17} {errors:>8}",
            med(i, |r| r.p99_ms)
        );
    }
}

fn millis(v: &str) -> f64 {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().unwrap_or(0.0);
    match unit {
        "us" => n / 1000.0,
        "s" => n * 1000.0,
        _ => n,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn service(name: &str, port: u16, routes: &str) -> ServiceInput {
    ServiceInput {
        name: name.into(),
        listen: format!("{FRONT}:{port}").parse().expect("address"),
        routes: Some(Arc::from(routes)),
        routes_origin: name.into(),
        endpoints: vec![],
    }
}

fn run(opts: &Options, dir: &Path, namespace: &str) -> Result<String, String> {
    let w = opts.workers;
    let _backend = nginx(
        dir,
        "backend",
        &format!(
            "worker_processes {w};\nerror_log stderr error;\npid backend.pid;\nevents {{ worker_connections 4096; }}\n\
             http {{ access_log off; server {{ listen {BACKEND} reuseport; keepalive_requests 1000000; \
             location / {{ default_type text/plain; return 200 \"hello from the backend\\n\"; }} }} }}\n"
        ),
    )?;
    let nginx_proxy = nginx(
        dir,
        "proxy",
        &format!(
            "worker_processes {w};\nerror_log stderr error;\npid proxy.pid;\nevents {{ worker_connections 4096; }}\n\
             http {{ access_log off; upstream b {{ server {BACKEND}; keepalive 256; }} \
             server {{ listen {FRONT}:81; keepalive_requests 1000000; location / {{ proxy_pass http://b; proxy_http_version 1.1; \
             proxy_set_header Connection \"\"; proxy_set_header Host $host; proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; }} }} \
             server {{ listen {FRONT}:83 http2; keepalive_requests 1000000; location / {{ proxy_pass http://b; proxy_http_version 1.1; \
             proxy_set_header Connection \"\"; proxy_set_header Host $host; proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; }} }} }}\n"
        ),
    )?;
    let haproxy_cfg = dir.join("haproxy.cfg");
    std::fs::write(
        &haproxy_cfg,
        format!(
            "global\n  nbthread {w}\n  maxconn 4096\ndefaults\n  mode http\n  option forwardfor\n  http-reuse always\n  \
             timeout connect 2s\n  timeout client 60s\n  timeout server 60s\nfrontend f\n  bind {FRONT}:82\n  default_backend b\n\
             frontend f2\n  bind {FRONT}:84 proto h2\n  default_backend b\n\
             backend b\n  server s1 {BACKEND}\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let haproxy = spawn(
        "haproxy",
        &["-db", "-f", &haproxy_cfg.display().to_string()],
    )?;

    let log_settings = AccessLogConfig {
        file: dir.join("access.log").display().to_string(),
        ..AccessLogConfig::default()
    };
    let log = AccessLog::open(log_settings).map_err(|e| e.to_string())?;
    let limits = L7Config::default()
        .limits()
        .map_err(|(f, p)| format!("{f}: {p}"))?;
    // Logging is off by default here; the "logged" route turns it on for itself.
    let mut proxy = Proxy::start(limits, w, Some(log), false).map_err(|e| e.to_string())?;
    let errors = proxy.apply(&[
        service("plain", 80, &format!("r: * -> \"http://{BACKEND}\";")),
        service(
            "unlogged",
            85,
            &format!("r: * -> disableAccessLog() -> \"http://{BACKEND}\";"),
        ),
        service(
            "logged",
            86,
            &format!("r: * -> enableAccessLog() -> \"http://{BACKEND}\";"),
        ),
        service(
            "inline",
            87,
            "r: * -> status(200) -> inlineContent(\"hello from the proxy\\n\") -> <shunt>;",
        ),
        service(
            "setquery",
            88,
            &format!("r: * -> setQuery(\"lang\", \"pt\") -> \"http://{BACKEND}\";"),
        ),
        service(
            "redirect",
            89,
            "r: * -> redirectTo(308, \"http://198.18.0.1:9999\") -> <shunt>;",
        ),
    ]);
    if !errors.is_empty() {
        return Err(format!("{errors:?}"));
    }
    // The ceiling: bytes relayed with no HTTP at all (`lb_testbed::relay`).
    let _relay = Relay::start(
        format!("{FRONT}:90").parse().map_err(|e| format!("{e}"))?,
        BACKEND.parse().map_err(|e| format!("{e}"))?,
        w,
    )
    .map_err(|e| format!("starting the byte relay: {e}"))?;
    for port in [80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90] {
        wait_for(&format!("{FRONT}:{port}"))?;
    }
    wait_for(BACKEND)?;

    // Ours with and without the access log back to back in each round, so the
    // logging cost compares runs taken seconds apart. Both are routes with one filter
    // (`disableAccessLog()`, `enableAccessLog()`): the pair differs by the logging
    // alone, and the filter's own cost shows against the plain route.
    let me = std::process::id();
    if opts.serve > 0 || opts.serve_stdin {
        let until = if opts.serve_stdin {
            "until stdin closes".to_owned()
        } else {
            format!("for {} s", opts.serve)
        };
        println!(
            "namespace {namespace}: lbd's proxy (pid {me}) on {FRONT}:80 and :85-89, nginx (master pid {}) on :81 and h2c :83, \
             HAProxy (pid {}) on :82 and h2c :84, byte relay (pid {me}) on :90, backend {BACKEND}; serving {until}",
            nginx_proxy.0.id(),
            haproxy.0.id(),
        );
        if opts.serve_stdin {
            // EOF on stdin stops the serve as a signal does.
            std::thread::spawn(|| {
                let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
                // SAFETY: a signal to this process, which waits for it below.
                unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            });
        }
        let serve = if opts.serve_stdin {
            u64::MAX
        } else {
            opts.serve
        };
        wait_for_stop(Duration::from_secs(serve));
        proxy.shutdown();
        return Ok(String::new());
    }
    let targets = [
        ("lbd l7 proxy", 80, me),
        ("lbd, filter, no log", 85, me),
        ("lbd, access log on", 86, me),
        ("nginx 1.22", 81, nginx_proxy.0.id()),
        ("HAProxy 2.6", 82, haproxy.0.id()),
        ("byte relay, no HTTP", 90, me),
    ];
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); targets.len()];
    // A short warm-up of each, then alternating rounds.
    for (_, port, _) in targets {
        wrk(opts, &format!("http://{FRONT}:{port}/"), 1)?;
    }
    for round in 0..opts.rounds {
        for i in rotated(targets.len(), round) {
            let (_, port, pid) = targets[i];
            runs[i].push(with_cpu(pid, || {
                wrk(opts, &format!("http://{FRONT}:{port}/"), opts.seconds)
            })?);
        }
    }
    let rps: Vec<f64> = runs
        .iter()
        .map(|r| median(r.iter().map(|x| x.rps).collect()))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nL7 proxy under wrk ({} threads, {} connections, {} s × {} rounds, medians; {w} workers each; backend nginx on loopback)",
        opts.workers, opts.connections, opts.seconds, opts.rounds
    );
    let names: Vec<&str> = targets.iter().map(|t| t.0).collect();
    table(&mut out, &names, &runs, 3);
    let _ = writeln!(
        out,
        "access log on vs off (enableAccessLog() vs disableAccessLog()): {:+.1}% requests/s (medians); one filter vs none: {:+.1}%",
        (rps[2] / rps[1] - 1.0) * 100.0,
        (rps[1] / rps[0] - 1.0) * 100.0
    );
    let _ = writeln!(
        out,
        "share of the byte relay's requests/s (the ceiling of a user-space proxy here): ours {:.1}%, nginx {:.1}%, HAProxy {:.1}% (1.1× nginx would be {:.1}%)",
        rps[0] / rps[5] * 100.0,
        rps[3] / rps[5] * 100.0,
        rps[4] / rps[5] * 100.0,
        rps[3] * 1.1 / rps[5] * 100.0
    );
    let per_round: Vec<String> = (0..opts.rounds)
        .map(|r| {
            let v: Vec<String> = runs.iter().map(|t| format!("{:.0}", t[r].rps)).collect();
            v.join("/")
        })
        .collect();
    let _ = writeln!(
        out,
        "each round, requests/s (ours / ours + filter / ours + log / nginx / HAProxy / relay): {}",
        per_round.join("  ")
    );

    // h2c, the same way: a warm-up of each, then alternating rounds.
    let h2_targets = [
        ("lbd l7 proxy", 80, me),
        ("nginx 1.22", 83, nginx_proxy.0.id()),
        ("HAProxy 2.6", 84, haproxy.0.id()),
    ];
    let h2_log = dir.join("h2load.log");
    let mut h2_runs: Vec<Vec<Run>> = vec![Vec::new(); h2_targets.len()];
    for (_, port, _) in h2_targets {
        h2load(opts, &format!("http://{FRONT}:{port}/"), 1, &h2_log)?;
    }
    for round in 0..opts.rounds {
        for i in rotated(h2_targets.len(), round) {
            let (_, port, pid) = h2_targets[i];
            h2_runs[i].push(with_cpu(pid, || {
                h2load(
                    opts,
                    &format!("http://{FRONT}:{port}/"),
                    opts.seconds,
                    &h2_log,
                )
            })?);
        }
    }
    let _ = writeln!(
        out,
        "\nh2c under h2load ({} threads, {} connections × {} streams, {} s × {} rounds, medians; p99 from h2load's per-request log)",
        opts.workers,
        (opts.connections / 2).max(opts.workers),
        opts.streams,
        opts.seconds,
        opts.rounds
    );
    let names: Vec<&str> = h2_targets.iter().map(|t| t.0).collect();
    table(&mut out, &names, &h2_runs, 1);

    // The access log's cost, in pairs of short runs back to back (order alternating),
    // so drift between runs cancels; the median of the per-pair ratios.
    let mut ratios = Vec::with_capacity(opts.pairs);
    let mut cpu_ratios = Vec::with_capacity(opts.pairs);
    for k in 0..opts.pairs {
        let (first, second) = if k % 2 == 0 { (85, 86) } else { (86, 85) };
        let a = with_cpu(me, || wrk(opts, &format!("http://{FRONT}:{first}/"), 2))?;
        let b = with_cpu(me, || wrk(opts, &format!("http://{FRONT}:{second}/"), 2))?;
        let (off, on) = if first == 85 { (a, b) } else { (b, a) };
        ratios.push(on.rps / off.rps);
        cpu_ratios.push(on.cpu_us / off.cpu_us);
    }
    if !ratios.is_empty() {
        let range = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            format!("{lo:.3}-{hi:.3}")
        };
        let (r, c) = (median(ratios.clone()), median(cpu_ratios.clone()));
        let _ = writeln!(
            out,
            "access log on ÷ off, {} pairs of 2 s runs: requests/s median {r:.3} (range {}), i.e. {:+.1}%; \
             proxy CPU per request median {c:.3} (range {}), i.e. {:+.1}%",
            ratios.len(),
            range(&ratios),
            (r - 1.0) * 100.0,
            range(&cpu_ratios),
            (c - 1.0) * 100.0
        );
    }

    // Allocations per request, by route.
    let _ = writeln!(
        out,
        "\nallocations per request (proxy process only; 2 s of wrk each)"
    );
    let _ = writeln!(
        out,
        "{:<34} {:>12} {:>12} {:>10}",
        "route", "allocs/req", "bytes/req", "requests"
    );
    for (name, port, label, h2) in [
        ("plain", 80, "proxy to backend", false),
        ("plain", 80, "proxy to backend, h2c client", true),
        ("inline", 87, "status(200) -> inlineContent", false),
        ("setquery", 88, "setQuery -> backend", false),
        ("redirect", 89, "redirectTo(308)", false),
    ] {
        let stats = proxy.service(name).ok_or("service missing")?;
        let served = || {
            stats
                .stats()
                .responses
                .iter()
                .map(|c| c.load(Relaxed))
                .sum::<u64>()
        };
        let (a0, b0, r0) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed), served());
        let url = format!("http://{FRONT}:{port}/some/path?x=1");
        if h2 {
            h2load(opts, &url, 2, &h2_log)?;
        } else {
            wrk(opts, &url, 2)?;
        }
        let (a1, b1, r1) = (ALLOCS.load(Relaxed), BYTES.load(Relaxed), served());
        let n = (r1 - r0).max(1);
        let _ = writeln!(
            out,
            "{label:<34} {:>12.1} {:>12.0} {:>10}",
            (a1 - a0) as f64 / n as f64,
            (b1 - b0) as f64 / n as f64,
            n
        );
    }
    let (open, refused, malformed, _) = proxy.connection_counts();
    let _ = writeln!(
        out,
        "(connections open {open}, refused {refused}, malformed {malformed}; wrk's own connection setup is in the figures above)"
    );
    proxy.shutdown();
    Ok(out)
}
