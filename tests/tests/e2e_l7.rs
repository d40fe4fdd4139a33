//! An `l7` service through lbd: the XDP program passes the VIP's traffic to the stack,
//! lbd's HTTP proxy answers by its routes and balances over the service's backends
//! with the control plane's health weights; the route file is watched (a broken edit
//! keeps the running routes) and every request is in the access log.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    http::{client, get, send},
    lbd::TempDir,
    topology::{VIP, backend_addr},
    traffic::Server,
};

fn config(routes_file: &str, log_file: &str) -> String {
    config_with(routes_file, log_file, "")
}

/// [`config`] with `l7` as the body of a `[node.l7]` table.
fn config_with(routes_file: &str, log_file: &str, l7: &str) -> String {
    let list: Vec<String> = (0..3)
        .map(|i| format!("{{ address = \"{}\" }}", backend_addr(i)))
        .collect();
    format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\naccess_log = {{ file = \"{log_file}\" }}\n\n\
         [[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\nmode = \"l7\"\nroutes_file = \"{routes_file}\"\n\
         health_check = {{ kind = \"http\", port = 8081, path = \"/healthz\", interval = \"200ms\", timeout = \"150ms\", rise = 2, fall = 2 }}\n\
         backends = [{}]\n\n[node.l7]\n{l7}\n",
        list.join(", ")
    )
}

/// `n` GETs of `path` from the client namespace; the answering backend's body per
/// answer (status 200 required).
fn spread(topo: &Topology, path: &str, n: usize) -> BTreeMap<String, usize> {
    let url = format!("http://{VIP}{path}");
    topo.client.run(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let c = client(false);
            let mut by = BTreeMap::new();
            for _ in 0..n {
                let a = get(&c, &url)
                    .await
                    .unwrap_or_else(|e| panic!("GET {url}: {e}"));
                assert_eq!(a.status, 200, "{a:?}");
                *by.entry(a.body.trim().to_owned()).or_insert(0) += 1;
            }
            by
        })
    })
}

/// Waits until lbd's status shows the `web` service's routes in force (the proxy
/// listens before the admin API answers the first time; this makes sure it started).
fn proxy_serves(lbd: &mut LbdProcess) {
    lbd.wait_source("routes", "the proxy serves its routes", |s| {
        s["state"] == "ok"
    });
}

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn http_vip_routes_balances_follows_health_and_reloads_routes() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    // The proxy answers for the VIP on the node itself.
    topo.lb
        .ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
    let _web: Vec<Server> = (0..3)
        .map(|i| Server::http(&topo.backends[i], backend_addr(i), 80, &format!("b{i}")))
        .collect();
    let mut health: Vec<Option<Server>> = (0..3)
        .map(|i| Some(Server::http(&topo.backends[i], backend_addr(i), 8081, "ok")))
        .collect();
    let dir = TempDir::new("l7e2e");
    let routes = dir.path().join("web.eskip");
    let log = dir.path().join("access.log");
    std::fs::write(&routes, "hello: Path(\"/hello\") -> inlineContent(\"hi from v1\") -> <shunt>;\nall: * -> <roundRobin>;\n").expect("routes");
    let routes_path = routes.display().to_string();
    let mut lbd = LbdProcess::start(
        &topo.lb,
        &config(&routes.display().to_string(), &log.display().to_string()),
    );

    proxy_serves(&mut lbd);
    assert_eq!(
        spread(&topo, "/hello", 3),
        BTreeMap::from([("hi from v1".to_owned(), 3)])
    );
    let by = spread(&topo, "/", 60);
    assert_eq!(
        by,
        BTreeMap::from([
            ("b0".to_owned(), 20),
            ("b1".to_owned(), 20),
            ("b2".to_owned(), 20)
        ]),
        "round robin over the service's backends"
    );

    // Backend 1's health check fails: it leaves the proxy's endpoint set.
    health[1] = None;
    lbd.wait_backend(
        "web",
        backend_addr(1).into(),
        Duration::from_secs(10),
        |b| b["health"] == "unhealthy",
    );
    std::thread::sleep(Duration::from_millis(300));
    let by = spread(&topo, "/", 40);
    assert_eq!(
        by.get("b1"),
        None,
        "no requests to an unhealthy backend: {by:?}"
    );
    assert_eq!(by.values().sum::<usize>(), 40);

    // A route file edit applies; a broken one is reported and changes nothing.
    std::fs::write(&routes, "hello: Path(\"/hello\") -> inlineContent(\"hi from v2\") -> <shunt>;\nall: * -> <roundRobin>;\n").expect("routes");
    wait_until("routes v2", Duration::from_secs(10), || {
        spread(&topo, "/hello", 1).contains_key("hi from v2")
    });
    std::fs::write(
        &routes,
        "hello: Path(\"/hello\") -> inlineContent(\"v3\" -> <shunt>;\n",
    )
    .expect("routes");
    // lbctl status names the refused route file (a routes source, like the config's),
    // with line, column and what was expected.
    let routes_source = lbd.wait_source("routes", "the broken edit reported", |s| {
        s["state"]
            .as_str()
            .is_some_and(|s| s.starts_with("rejected"))
    });
    assert_eq!(routes_source["location"], routes_path.as_str());
    assert_eq!(
        routes_source["state"],
        "rejected, previous routes serve: line 1, column 45: expected `,` or `)`, found `->`"
    );
    assert_eq!(
        spread(&topo, "/hello", 2),
        BTreeMap::from([("hi from v2".to_owned(), 2)])
    );

    // The proxy's counters on /metrics: every answer so far was a 2xx, backend 1 got
    // exactly its 20 requests before it went unhealthy.
    let metrics = lb_testbed::lbd::scrape_metrics(&topo.lb);
    let value = |line: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(line).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {line} in\n{metrics}"))
    };
    let answered = value("lbd_l7_responses_total{service=\"web\",code=\"2xx\"}");
    assert!(answered >= (3 + 60 + 40 + 1 + 2) as f64, "{answered}");
    assert_eq!(
        value(&format!(
            "lbd_l7_endpoint_requests_total{{endpoint=\"{}:80\"}}",
            backend_addr(1)
        )),
        20.0
    );
    assert_eq!(value("lbd_l7_upstream_errors_total{service=\"web\"}"), 0.0);

    let (code, out) = lbd.stop();
    assert_eq!(code, Some(0), "{out}");
    let lines = std::fs::read_to_string(&log).expect("access log");
    let count = lines.lines().count();
    assert!(
        count >= 3 + 60 + 40 + 1 + 2,
        "every request logged ({count})"
    );
    assert!(
        lines.lines().all(|l| l.starts_with("198.18.0.1 - - [")),
        "client address first:\n{lines}"
    );
    assert!(
        lines.contains("\"GET /hello HTTP/1.1\" 200 10 \"-\" \"-\""),
        "{lines}"
    );
}

/// The standard topology with the VIP on the LB node, three HTTP backends and their
/// health endpoints; lbd serving `web` on the VIP with `* -> <roundRobin>` and the
/// `[node.l7]` settings `l7`.
struct L7Bed {
    topo: Topology,
    _servers: Vec<Server>,
    dir: TempDir,
}

impl L7Bed {
    fn build() -> Self {
        let topo = Topology::build(&TopologyOptions::default());
        topo.lb
            .ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
        let mut servers = Vec::new();
        for i in 0..3 {
            servers.push(Server::http(
                &topo.backends[i],
                backend_addr(i),
                80,
                &format!("b{i}"),
            ));
            servers.push(Server::http(&topo.backends[i], backend_addr(i), 8081, "ok"));
        }
        let dir = TempDir::new("l7bed");
        std::fs::write(dir.path().join("web.eskip"), "all: * -> <roundRobin>;\n").expect("routes");
        Self {
            topo,
            _servers: servers,
            dir,
        }
    }

    fn config(&self, l7: &str) -> String {
        config_with(
            &self.dir.path().join("web.eskip").display().to_string(),
            &self.dir.path().join("access.log").display().to_string(),
            l7,
        )
    }
}

/// How one load client sends: keep-alive HTTP/1.1, a new connection per request, or
/// h2c.
#[derive(Clone, Copy, Debug)]
enum Kind {
    KeepAlive,
    Close,
    H2,
}

#[test]
fn an_lbd_restart_under_load_fails_no_request() {
    lb_testbed::needs_root!();
    let bed = L7Bed::build();
    let mut lbd = LbdProcess::start(&bed.topo.lb, &bed.config("shutdown_timeout = \"10s\""));
    proxy_serves(&mut lbd);
    const PER_CLIENT: usize = 500;
    let kinds = [Kind::KeepAlive, Kind::KeepAlive, Kind::Close, Kind::H2];
    let done = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let load = {
        let (done, failures) = (Arc::clone(&done), Arc::clone(&failures));
        bed.topo.client.spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for kind in kinds {
                    let (done, failures) = (Arc::clone(&done), Arc::clone(&failures));
                    tasks.push(tokio::spawn(async move {
                        let c = client(matches!(kind, Kind::H2));
                        let url = format!("http://{VIP}/");
                        let headers: &[(&str, &str)] = match kind {
                            Kind::Close => &[("Connection", "close")],
                            _ => &[],
                        };
                        let mut ok = 0;
                        for i in 0..PER_CLIENT {
                            let mut answer = send(&c, "GET", &url, headers, "").await;
                            // RFC 9113 §6.8: a request the server refused with GOAWAY
                            // (a stream above its last one) was not processed, and a
                            // client sends it again, as browsers and curl do.
                            if answer.as_ref().is_err_and(|e| e.contains("GoAway")) {
                                answer = send(&c, "GET", &url, headers, "").await;
                            }
                            match answer {
                                Ok(a) if a.status == 200 => ok += 1,
                                Ok(a) => failures
                                    .lock()
                                    .expect("lock")
                                    .push(format!("{kind:?} #{i}: status {}", a.status)),
                                Err(e) => failures
                                    .lock()
                                    .expect("lock")
                                    .push(format!("{kind:?} #{i}: {e}")),
                            }
                            done.fetch_add(1, Ordering::Relaxed);
                            // Paced, so the load spans the whole restart.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        ok
                    }));
                }
                let mut ok = 0;
                for t in tasks {
                    ok += t.await.expect("client task");
                }
                ok
            })
        })
    };
    wait_until("the load runs", Duration::from_secs(30), || {
        done.load(Ordering::Relaxed) >= 200
    });
    let old_exit = lbd.take_over();
    let at_handover = done.load(Ordering::Relaxed);
    let ok = load.join().expect("load");
    let log = lbd.log();
    let failures = failures.lock().expect("lock").clone();
    eprintln!(
        "restart under load: {ok} of {} requests answered 200, {} failures; the old lbd exited after {at_handover} requests",
        PER_CLIENT * kinds.len(),
        failures.len()
    );
    assert_eq!(
        old_exit,
        Some(0),
        "the old lbd handed over, drained and exited by itself:\n{log}"
    );
    assert!(
        at_handover + 200 < PER_CLIENT * kinds.len(),
        "the restart happened under load ({at_handover} requests done when the old lbd exited)"
    );
    assert_eq!(
        failures,
        Vec::<String>::new(),
        "no request failed across the restart:\n{log}"
    );
    assert_eq!(ok, PER_CLIENT * kinds.len());
    // The new lbd serves on.
    let by = spread(&bed.topo, "/", 3);
    assert_eq!(by.values().sum::<usize>(), 3);
    let (code, out) = lbd.stop();
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn ten_thousand_silent_connections_under_a_1024_file_limit_leave_room_for_a_client() {
    lb_testbed::needs_root!();
    const SILENT: usize = 10_000;
    const REQUESTS: usize = 1_000;
    // This process holds the silent connections' client ends.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        // Each side (this process, lbd) holds one end of every connection.
        assert!(
            lim.rlim_max > SILENT as u64 + 1024,
            "the hard open-file limit ({}) must hold {SILENT} connections and more",
            lim.rlim_max
        );
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    let bed = L7Bed::build();
    // Heads may take 60 s: the silent connections stay for the whole test unless lbd
    // closes them to make room.
    let mut lbd = LbdProcess::start_with_nofile(
        &bed.topo.lb,
        &bed.config("header_timeout = \"60s\""),
        1024,
        None,
    );
    proxy_serves(&mut lbd);
    let lb = bed.topo.lb.name().to_owned();
    let (silent, held, ok, failed) = bed.topo.client.run(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let target = std::net::SocketAddr::from((VIP, 80));
            let mut silent = Vec::with_capacity(SILENT);
            for _ in 0..SILENT / 250 {
                let batch = (0..250).map(|_| {
                    tokio::time::timeout(
                        Duration::from_secs(3),
                        tokio::net::TcpStream::connect(target),
                    )
                });
                for r in futures_join(batch).await {
                    if let Ok(Ok(s)) = r {
                        silent.push(s);
                    }
                }
            }
            // Until lbd has accepted them (a connect completes in the kernel before
            // lbd accepts it), at most 60 s.
            let started = Instant::now();
            let mut held = 0.0;
            while started.elapsed() < Duration::from_secs(60) {
                held = metric(&lb, "lbd_l7_connections");
                if held >= (SILENT * 99 / 100) as f64 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // A well-behaved client: new connections and keep-alive ones, each request
            // given 2 s, the whole run at most 90 s.
            let (mut ok, mut failed) = (0, 0);
            let keep = client(false);
            let url = format!("http://{VIP}/");
            let started = Instant::now();
            for i in 0..REQUESTS {
                if started.elapsed() > Duration::from_secs(90) {
                    failed += REQUESTS - i;
                    break;
                }
                let answer = if i % 2 == 0 {
                    tokio::time::timeout(
                        Duration::from_secs(2),
                        send(&client(false), "GET", &url, &[("Connection", "close")], ""),
                    )
                    .await
                } else {
                    tokio::time::timeout(Duration::from_secs(2), send(&keep, "GET", &url, &[], ""))
                        .await
                };
                match answer {
                    Ok(Ok(a)) if a.status == 200 => ok += 1,
                    _ => failed += 1,
                }
            }
            (silent.len(), held, ok, failed)
        })
    });
    let rate = ok as f64 / REQUESTS as f64;
    eprintln!(
        "{silent} silent connections made, {held} open in lbd; then a client's requests: {ok} answered, {failed} failed ({:.1}% success)",
        rate * 100.0,
    );
    assert!(rate >= 0.99, "{ok} of {REQUESTS} answered:\n{}", lbd.log());
    assert!(
        held >= (SILENT * 99 / 100) as f64,
        "lbd held only {held} of {SILENT} silent connections when the client began"
    );
    // lbd runs with its soft limit raised to the hard one.
    let pid = lbd.pid().expect("running");
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("open files line");
    let numbers: Vec<&str> = files.split_whitespace().skip(3).take(2).collect();
    assert_eq!(
        numbers,
        [lim.rlim_max.to_string(), lim.rlim_max.to_string()],
        "{files}"
    );
}

#[test]
fn out_of_file_descriptors_lbd_neither_spins_nor_floods_its_log() {
    lb_testbed::needs_root!();
    // A hard limit lbd cannot raise past, filled by silent connections.
    const FILES: u64 = 300;
    let bed = L7Bed::build();
    // JSON lines: what is counted below are events with structured fields, not words.
    let mut lbd = LbdProcess::start_with_nofile_and_args(
        &bed.topo.lb,
        &bed.config("header_timeout = \"60s\""),
        FILES,
        Some(FILES),
        &["--log-format", "json"],
    );
    proxy_serves(&mut lbd);
    // A failed accept on any of lbd's sockets (l7 workers, metrics, admin) says how
    // long it waits; a malformed request names its client.
    let accept_lines = |events: &[serde_json::Value]| {
        events
            .iter()
            .filter(|e| e["fields"]["retry_ms"].is_u64())
            .count()
    };
    let malformed_lines = |events: &[serde_json::Value]| {
        events
            .iter()
            .filter(|e| e["level"] == "WARN" && e["fields"]["client"].is_string())
            .count()
    };
    let events = lbd.log_events();
    let before = (accept_lines(&events), malformed_lines(&events));
    const WINDOW: Duration = Duration::from_secs(3);
    let lb = bed.topo.lb.name().to_owned();
    let (malformed_counted, silent) = bed.topo.client.run(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let target = std::net::SocketAddr::from((VIP, 80));
            // 200 malformed requests: each would be a warning.
            for _ in 0..200 {
                let _ = lb_testbed::http::raw(target, b"GARBAGE\r\n\r\n").await;
            }
            let counted = metric(&lb, "lbd_l7_malformed_requests_total");
            // More connections than lbd has descriptors: its accepts fail.
            let mut silent = Vec::new();
            for _ in 0..2 * FILES {
                if let Ok(Ok(s)) = tokio::time::timeout(
                    Duration::from_secs(1),
                    tokio::net::TcpStream::connect(target),
                )
                .await
                {
                    silent.push(s);
                }
            }
            // Metrics scrapes while lbd has no descriptor to accept them with (they
            // may go unanswered; what matters is what lbd does meanwhile).
            let started = Instant::now();
            while started.elapsed() < WINDOW {
                let _ = metric(&lb, "lbd_l7_connections");
            }
            (counted, silent)
        })
    });
    let log = lbd.log();
    let events = lbd.log_events();
    let accepts = accept_lines(&events) - before.0;
    let malformed = malformed_lines(&events) - before.1;
    eprintln!(
        "200 malformed requests ({malformed_counted} counted): {malformed} log lines; then out of descriptors for {WINDOW:?}: {accepts} accept log lines"
    );
    assert!(
        malformed_counted >= 200.0,
        "the malformed requests reached lbd: {malformed_counted}"
    );
    // Logged, but throttled: the counts below would pass vacuously if the events
    // lost the fields they are found by.
    assert!(
        malformed >= 1 && accepts >= 1,
        "{malformed} malformed-request and {accepts} accept events:\n{}",
        tail(&log)
    );
    assert!(
        malformed <= 3,
        "{malformed} malformed-request lines:\n{}",
        tail(&log)
    );
    // Each of the three accept loops (two proxy workers, metrics) may log once a second.
    let most = 3 * (WINDOW.as_secs() as usize + 3);
    assert!(
        accepts <= most,
        "{accepts} accept lines in {WINDOW:?}:\n{}",
        tail(&log)
    );
    drop(silent);
    // With the connections gone, lbd serves again (once health checks, which also
    // ran out of descriptors, have passed again).
    let url = format!("http://{VIP}/");
    wait_until("lbd answers again", Duration::from_secs(20), || {
        let url = url.clone();
        bed.topo.client.run(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                get(&client(false), &url)
                    .await
                    .is_ok_and(|a| a.status == 200)
            })
        })
    });
}

/// The last 40 lines of a log.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Awaits every future (no extra dependency for a join of many).
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// The metric `name` (without labels) from lbd's metrics in the namespace `ns` (NaN
/// when the scrape fails), scraped from a thread that enters `ns`.
fn metric(ns: &str, name: &str) -> f64 {
    let prefix = format!("{name} ");
    use std::io::{Read as _, Write as _};
    let scrape = || -> Option<f64> {
        let file = std::fs::File::open(format!("/run/netns/{ns}")).ok()?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd as _;
            // SAFETY: setns on an open namespace fd affects only this thread.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return;
            }
            let body = (|| {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", 9470)).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .ok()?;
                let mut raw = String::new();
                s.read_to_string(&mut raw).ok()?;
                Some(raw)
            })();
            let _ = tx.send(body);
        });
        let raw = rx.recv().ok()??;
        raw.lines().find_map(|l| {
            l.strip_prefix(prefix.as_str())
                .and_then(|v| v.trim().parse().ok())
        })
    };
    scrape().unwrap_or(f64::NAN)
}
