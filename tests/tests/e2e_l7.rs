//! An `l7` service through lbd: the XDP program passes the VIP's traffic to the stack,
//! lbd's HTTP proxy answers by its routes and balances over the service's backends
//! with the control plane's health weights; the route file is watched (a broken edit
//! keeps the running routes) and every request is in the access log.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    http::{client, get},
    is_root,
    lbd::TempDir,
    topology::{VIP, backend_addr},
    traffic::Server,
};

fn config(routes_file: &str, log_file: &str) -> String {
    let list: Vec<String> = (0..3)
        .map(|i| format!("{{ address = \"{}\" }}", backend_addr(i)))
        .collect();
    format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\naccess_log = {{ file = \"{log_file}\" }}\n\n\
         [[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\nmode = \"l7\"\nroutes_file = \"{routes_file}\"\n\
         health_check = {{ kind = \"http\", port = 8081, path = \"/healthz\", interval = \"200ms\", timeout = \"150ms\", rise = 2, fall = 2 }}\n\
         backends = [{}]\n",
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

fn wait_until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn http_vip_routes_balances_follows_health_and_reloads_routes() {
    assert!(is_root(), "this test needs root (network namespaces, XDP)");
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
    let lbd = LbdProcess::start(
        &topo.lb,
        &config(&routes.display().to_string(), &log.display().to_string()),
    );

    wait_until("the proxy listens", Duration::from_secs(10), || {
        lbd.log().contains("l7 service web: listening")
    });
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
    wait_until("b1 marked unhealthy", Duration::from_secs(10), || {
        lbd.log().contains("unhealthy")
    });
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
    wait_until("the broken edit reported", Duration::from_secs(10), || {
        lbd.log().contains("keeping the previous routes")
    });
    let log_text = lbd.log();
    assert!(
        log_text.contains("web.eskip: line 1, column 45: expected `,` or `)`, found `->`"),
        "{log_text}"
    );
    assert_eq!(
        spread(&topo, "/hello", 2),
        BTreeMap::from([("hi from v2".to_owned(), 2)])
    );
    // lbctl status names the refused route file (a routes source, like the config's).
    let status = lbd.lbctl_json(&["status"]);
    let routes_source = status["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["kind"] == "routes")
        .unwrap_or_else(|| panic!("no routes source in {status}"))
        .clone();
    assert_eq!(routes_source["location"], routes_path.as_str());
    let state = routes_source["state"].as_str().expect("state");
    assert!(
        state.starts_with("rejected, previous routes serve: line 1, column 45"),
        "{state}"
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
