//! `lbctl` against a running `lbd` in a namespace topology: every command's JSON is
//! parsed, counters move by exactly the traffic sent, `explain` names the backend
//! that really answers, `/metrics` parses as OpenMetrics text, and with lbd stopped
//! (data plane left running) `flows`, `stats` and `explain` still answer from the
//! pinned maps while the rest say lbd is down.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    topology::{CLIENT_ADDR, VIP, backend_addr},
    traffic::{ServerKind, serve_backends, udp_requests},
};
use serde_json::Value;

const UDP_PORT: u16 = 5353;
const DATAGRAMS: usize = 60;

fn config() -> String {
    let backends: Vec<IpAddr> = (0..3).map(|i| backend_addr(i).into()).collect();
    lb_testbed::lbd::config(
        "generic",
        &[
            ("web", VIP.into(), 80, "tcp"),
            ("dns", VIP.into(), UDP_PORT, "udp"),
        ],
        &backends,
    )
}

/// The `dns` VIP's entry in `lbctl stats` JSON.
fn dns_stats(stats: &Value) -> &Value {
    stats["vips"]
        .as_array()
        .expect("vips")
        .iter()
        .find(|v| v["service"] == "dns" || v["vip"] == format!("{VIP}:{UDP_PORT}/udp"))
        .expect("dns VIP in stats")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Backend name (as the servers answer, `backend-<i+1>`) of a backend address.
fn name_of(addr: &str) -> String {
    let i = (0..3)
        .find(|&i| backend_addr(i).to_string() == addr)
        .unwrap_or_else(|| panic!("{addr} is not a backend"));
    format!("backend-{}", i + 1)
}

/// One datagram from `src` (a fixed client port) to the dns VIP; the answering
/// backend's name.
fn datagram_from(topo: &Topology, src: SocketAddr) -> String {
    let target = SocketAddr::new(VIP.into(), UDP_PORT);
    lb_testbed::traffic::udp_request_from(&topo.client, src, target)
        .unwrap_or_else(|e| panic!("from {src}: {e}"))
}

/// One datagram from each client port in `ports`; answers per backend name.
fn datagrams_from_ports(topo: &Topology, ports: std::ops::Range<u16>) -> BTreeMap<String, usize> {
    let mut served = BTreeMap::new();
    for port in ports {
        let name = datagram_from(topo, SocketAddr::new(CLIENT_ADDR.into(), port));
        *served.entry(name).or_default() += 1;
    }
    served
}

fn metric(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("{name} is not a plain value"),
        })
        .unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
}

#[test]
fn lbctl_reports_and_explains_what_the_node_does() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    let _servers = serve_backends(&topo, |_| VIP.into(), &[(ServerKind::Udp, UDP_PORT)]);
    let mut lbd = LbdProcess::start(&topo.lb, &config());

    let status = lbd.lbctl_json(&["status"]);
    assert_eq!(status["interface"], "eth0");
    assert_eq!(u(&status["api_version"]), 1);
    assert!(!status["kernel"].as_str().expect("kernel").is_empty());
    assert_eq!(status["xdp_mode"], "generic");
    assert_eq!(u(&status["services"]), 2);
    assert_eq!(u(&status["config_generation"]), 1);
    assert_eq!(status["last_reconcile"]["trigger"], "start");
    assert!(status["last_reconcile"]["error"].is_null(), "{status}");

    // A broken edit is reported where lbctl shows it, the running config stays; a
    // good one counts as the next generation.
    let outcome = lbd.reload(&config().replace("port = 80", "port = \"eighty\""));
    assert!(outcome.rejected().is_some(), "{outcome}");
    let status = lbd.lbctl_json(&["status"]);
    assert_eq!(u(&status["config_generation"]), 1);
    let state = status["sources"][0]["state"].as_str().expect("state");
    assert!(
        state.starts_with("rejected, running the last good config: "),
        "{state}"
    );
    assert!(
        state.contains("lbd.toml:"),
        "names the file and line: {state}"
    );
    let outcome = lbd.reload(&config());
    assert!(outcome.applied(), "{outcome}");
    let status = lbd.lbctl_json(&["status"]);
    assert_eq!(u(&status["config_generation"]), 2);
    assert_eq!(status["sources"][0]["state"], "ok");
    assert_eq!(status["last_reconcile"]["trigger"], "reload");

    // Counters move by exactly the traffic sent: DSR, so the node sees each request
    // datagram once and never the answer; each datagram is a new flow.
    let before = lbd.lbctl_json(&["stats"]);
    // Fixed, distinct source ports: random ephemeral ones can repeat, and a repeated
    // 5-tuple is an established flow, not a new one.
    let served = datagrams_from_ports(&topo, 42000..42000 + DATAGRAMS as u16);
    let after = lbd.lbctl_json(&["stats"]);
    let (b, a) = (dns_stats(&before), dns_stats(&after));
    assert_eq!(u(&a["packets"]) - u(&b["packets"]), DATAGRAMS as u64);
    assert_eq!(u(&a["new_flows"]) - u(&b["new_flows"]), DATAGRAMS as u64);
    assert_eq!(a["service"], "dns", "stats names services while lbd runs");
    let per_backend: BTreeMap<String, usize> = a["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|x| {
            (
                name_of(x["backend"].as_str().expect("addr")),
                u(&x["new_flows"]) as usize,
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(
        per_backend, served,
        "per-backend new flows = answers per backend"
    );

    let services = lbd.lbctl_json(&["services"]);
    let dns = services
        .as_array()
        .expect("services")
        .iter()
        .find(|s| s["name"] == "dns")
        .expect("dns");
    assert_eq!(dns["vip"], format!("{VIP}:{UDP_PORT}/udp"));
    assert_eq!(u(&dns["packets"]), DATAGRAMS as u64);
    assert_eq!(u(&dns["serving"]), 3);
    assert_eq!(dns["table_digest"].as_str().expect("digest").len(), 16);

    let backends = lbd.lbctl_json(&["backends", "dns"]);
    let backends = backends.as_array().expect("backends");
    assert_eq!(backends.len(), 3);
    for bk in backends {
        assert_eq!(bk["state"], "active");
        assert_eq!(bk["health"], "unchecked");
        assert_eq!(u(&bk["weight"]), 1);
        assert_eq!(bk["effective_weight"].as_f64(), Some(1.0));
        let name = name_of(bk["address"].as_str().expect("addr"));
        let served = served.get(&name).copied().unwrap_or(0) as u64;
        assert_eq!(u(&bk["new_flows"]), served, "{name}");
        // One datagram each: the flows are half-open, not established.
        assert_eq!(u(&bk["flows"]), 0, "{name}: established flows");
    }
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../lb-userspace/conf/example.toml"
    );
    let checked = lbd.lbctl_json(&["config", "check", example]);
    assert_eq!(u(&checked["services"]), 1, "{checked}");
    let (code, _, err) = lbd.lbctl(&["config", "check", "/nonexistent/lbd.toml"]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with("lbctl: /nonexistent/lbd.toml: cannot read"),
        "{err}"
    );
    let (code, _, err) = lbd.lbctl(&["backends", "nope"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no service named \"nope\""), "{err}");

    let vip = format!("{VIP}:{UDP_PORT}");
    let flows = lbd.lbctl_json(&["flows", "--vip", &vip]);
    assert_eq!(u(&flows["matched"]), 0, "nothing established yet: {flows}");
    let flows = lbd.lbctl_json(&["flows", "--vip", &vip, "--embryonic"]);
    assert_eq!(u(&flows["matched"]), DATAGRAMS as u64);
    let listed = flows["flows"].as_array().expect("flows");
    // Half-open flows: explain says so, naming the backend flows lists; their second
    // datagram goes to the same backend and establishes them.
    for f in listed.iter().take(5) {
        assert_eq!(f["table"], "embryonic", "{f}");
        let client = f["client"].as_str().expect("client");
        let e = lbd.lbctl_json(&["explain", "udp", client, &vip]);
        assert_eq!(e["decision"], "embryonic", "{e}");
        assert_eq!(e["backend"], f["backend"]);
        assert_eq!(e["service_name"], "dns");
        let src: SocketAddr = client.parse().expect("client address");
        let answered = datagram_from(&topo, src);
        assert_eq!(answered, name_of(f["backend"].as_str().expect("backend")));
        let e = lbd.lbctl_json(&["explain", "udp", client, &vip]);
        assert_eq!(e["decision"], "conntrack", "{e}");
        assert_eq!(e["table"], "established", "{e}");
        assert_eq!(e["backend"], f["backend"]);
    }
    let flows = lbd.lbctl_json(&["flows", "--vip", &vip]);
    assert_eq!(u(&flows["matched"]), 5, "five established now: {flows}");
    // New flows: explain predicts from the table; a real datagram from that port is
    // answered by that backend.
    for port in [41000u16, 41001, 41002, 41003, 41004, 41005] {
        let src = SocketAddr::new(CLIENT_ADDR.into(), port);
        let e = lbd.lbctl_json(&[
            "explain",
            "udp",
            &src.to_string(),
            &format!("{VIP}:{UDP_PORT}"),
        ]);
        assert_eq!(e["decision"], "table", "{e}");
        let predicted = name_of(e["backend"].as_str().expect("backend"));
        assert_eq!(datagram_from(&topo, src), predicted, "flow from {src}");
    }
    let (code, text, _) = lbd.lbctl(&["explain", "tcp", "198.18.0.1:1", "198.18.0.99:80"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("passed to the kernel stack"), "{text}");

    let text = lb_testbed::lbd::scrape_metrics(&topo.lb);
    let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("metrics parse");
    let flows_made = (DATAGRAMS + 6) as f64;
    assert_eq!(
        metric(&parsed, "lbd_vip_packets_total", &[("service", "dns")]),
        flows_made + 5.0,
        "every datagram, the five second ones included"
    );
    assert_eq!(
        metric(&parsed, "lbd_vip_new_flows_total", &[("service", "dns")]),
        flows_made
    );
    assert_eq!(metric(&parsed, "lbd_conntrack_promoted_total", &[]), 5.0);
    assert_eq!(
        metric(&parsed, "lbd_flow_table_entries", &[("table", "embryonic")]),
        flows_made - 5.0
    );
    assert_eq!(
        metric(
            &parsed,
            "lbd_flow_table_entries",
            &[("table", "established")]
        ),
        5.0
    );
    assert_eq!(
        metric(&parsed, "lbd_table_size", &[("service", "dns")]),
        u(&dns["table_size"]) as f64
    );
    assert!(metric(&parsed, "lbd_xdp_packets_total", &[]) >= flows_made);
    // Every datagram to the VIP left towards its backend: forwarded by XDP_TX or a
    // redirect, and the verdict label says which.
    let forwarded: f64 = ["tx", "redirect"]
        .iter()
        .map(|v| {
            metric(
                &parsed,
                "lbd_xdp_verdicts_total",
                &[("verdict", v), ("reason", "forwarded")],
            )
        })
        .sum();
    assert!(forwarded >= flows_made + 5.0, "{forwarded} forwarded");
    assert!(
        parsed
            .samples
            .iter()
            .filter(|s| s.metric == "lbd_xdp_verdicts_total")
            .all(|s| s
                .labels
                .get("verdict")
                .is_some_and(|v| ["pass", "tx", "redirect", "drop"].contains(&v))),
        "verdicts are XDP actions"
    );
    assert!(metric(&parsed, "lbd_reconciles_total", &[]) >= 1.0);
    let digest = dns["table_digest"].as_str().expect("digest");
    assert_eq!(
        metric(
            &parsed,
            "lbd_table_info",
            &[("service", "dns"), ("digest", digest)]
        ),
        1.0
    );

    // Without privileges: one line saying what to do, for the socket and the maps.
    let unprivileged = |args: &[&str]| {
        let dir = lb_testbed::lbd::TempDir::new("lbctl-nobody");
        let bin = dir.path().join("lbctl");
        std::fs::copy(lb_testbed::lbd::lbctl_binary(), &bin).expect("copy lbctl");
        let nobody = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ];
        let (code, _, err) = lbd.lbctl_via(&nobody, &bin, args);
        (code, err)
    };
    let (code, err) = unprivileged(&["status"]);
    assert_eq!(code, Some(1));
    assert!(err.starts_with("lbctl: permission denied on "), "{err}");
    let (code, err) = unprivileged(&["flows"]);
    assert_eq!(code, Some(1));
    assert!(err.starts_with("lbctl: opening pinned map "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");

    // lbd stops, the data plane keeps forwarding: pinned-map commands still answer.
    assert_eq!(lbd.stop_leaving_running(), Some(0));
    let (code, _, err) = lbd.lbctl(&["status"]);
    assert_eq!(code, Some(1), "status without lbd must fail");
    assert!(err.starts_with("lbctl: lbd is not running"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let without = datagrams_from_ports(&topo, 43000..43010);
    assert_eq!(
        without.values().sum::<usize>(),
        10,
        "forwarding continues without lbd"
    );
    let stats = lbd.lbctl_json(&["stats"]);
    assert_eq!(u(&dns_stats(&stats)["packets"]), DATAGRAMS as u64 + 21);
    assert!(
        dns_stats(&stats)["service"].is_null(),
        "no names without lbd"
    );
    let flows = lbd.lbctl_json(&["flows", "--limit", "3", "--embryonic"]);
    assert_eq!(u(&flows["matched"]), DATAGRAMS as u64 + 16);
    assert_eq!(flows["flows"].as_array().expect("flows").len(), 3);
    let src = SocketAddr::new(CLIENT_ADDR.into(), 41000);
    let e = lbd.lbctl_json(&[
        "explain",
        "udp",
        &src.to_string(),
        &format!("{VIP}:{UDP_PORT}"),
    ]);
    assert_eq!(e["decision"], "embryonic", "{e}");

    // Rates: one JSON document per sample; 20 datagrams sent while it watches.
    let watch = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            lbd.lbctl(&[
                "-o",
                "json",
                "stats",
                "--watch",
                "--interval",
                "1",
                "--count",
                "2",
            ])
        });
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(udp_requests(&topo.client, VIP, UDP_PORT, 20).ok(), 20);
        watcher.join().expect("watch")
    });
    assert_eq!(watch.0, Some(0), "{}", watch.2);
    let samples: Vec<Value> = watch
        .1
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect();
    assert_eq!(samples.len(), 2);
    // Each sample spans at least its 1 s interval, so the two rates add up to at
    // most 20/s, and to clearly more than 0 (10/s even if each took 2 s).
    let rate: f64 = samples
        .iter()
        .map(|s| dns_stats(s)["packets"].as_f64().expect("rate"))
        .sum();
    assert!(
        (10.0..=20.0).contains(&rate),
        "20 datagrams over two ~1 s samples: {rate}/s"
    );
}
