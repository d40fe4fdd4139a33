//! Issue 14 end to end: no input kills lbd. Each way text reaches a running lbd — a
//! file in the watched EndpointSlice directory, an etcd key on a two-node fleet, a
//! watched route file, a config reloaded by SIGHUP — gets the inputs that used to
//! panic it (times with a multi-byte character where the offset's digits go, numbers
//! and durations beyond any time type). lbd refuses each with a message naming it,
//! `lbctl status` says why, forwarding goes on with the last good state, and a
//! restart while the bad input is still there comes up (it used to crash-loop).

use std::time::{Duration, Instant};

use lb_testbed::{
    LbdProcess, Netns, Topology, TopologyOptions,
    etcd::{EtcdServer, plug_etcd_host},
    http::{client, get},
    lbd::TempDir,
    topology::{VIP, backend_addr, plug},
    traffic::{Server, ServerKind, http_requests, serve_backends, udp_requests},
};
use serde_json::Value;

/// Creation times whose offset holds a multi-byte character: the old parser sliced
/// inside it.
const BAD_TIMES: [&str; 3] = [
    "2024-01-01T00:00:00+0\u{e9}00",
    "2024-01-01T00:00:00+00\u{e9}0",
    "2024-01-01T00:00:00+0\u{20ac}0",
];
const GOOD_TIME: &str = "2024-01-01T00:00:00Z";
/// A duration no duration type holds.
const HUGE: &str = "99999999999999999999999s";

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{what} within 15 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The state text of a source.
fn state(src: &Value) -> &str {
    src["state"].as_str().unwrap_or("")
}

/// An EndpointSlice of Service shop/web (port http 80) made at `created`, YAML.
fn slice_yaml(name: &str, backends: &[usize], created: &str) -> String {
    let eps: Vec<String> = backends
        .iter()
        .map(|i| format!("- addresses: [\"{}\"]", backend_addr(*i)))
        .collect();
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}\n  namespace: shop\n  creationTimestamp: \"{created}\"\n  labels:\n    kubernetes.io/service-name: web\naddressType: IPv4\nendpoints:\n{}\nports:\n- name: http\n  port: 80\n  protocol: TCP\n",
        eps.join("\n")
    )
}

/// The same slice as JSON (what `kubectl -o json` and etcd hold), of `service`.
fn slice_json(
    service: &str,
    name: &str,
    backends: &[usize],
    port: (&str, u16, &str),
    created: &str,
) -> String {
    let eps: Vec<String> = backends
        .iter()
        .map(|i| format!("{{\"addresses\":[\"{}\"]}}", backend_addr(*i)))
        .collect();
    format!(
        "{{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"shop\",\"creationTimestamp\":\"{created}\",\"labels\":{{\"kubernetes.io/service-name\":\"{service}\"}}}},\"addressType\":\"IPv4\",\"endpoints\":[{}],\"ports\":[{{\"name\":\"{}\",\"port\":{},\"protocol\":\"{}\"}}]}}",
        eps.join(","),
        port.0,
        port.1,
        port.2
    )
}

/// Requests through the VIP reach all three backends, none fails.
fn all_three_serve(topo: &Topology, lbd: &LbdProcess) {
    let tally = http_requests(&topo.client, VIP, 80, 60);
    assert!(
        tally.failures.is_empty(),
        "{:?}\n{}",
        tally.failures,
        lbd.log()
    );
    assert_eq!(tally.served.len(), 3, "{:?}", tally.served);
}

#[test]
fn bad_slice_files_are_refused_and_lbd_forwards_on_and_restarts() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    let _servers = serve_backends(&topo, |_| VIP.into(), &[(ServerKind::Http, 80)]);
    let slices = TempDir::new("bad-slices");
    let good = slice_yaml("web-1", &[0, 1, 2], GOOD_TIME);
    slices.write("web.yaml", &good);
    let config = format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\nendpointslice_dir = \"{}\"\n\n[[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\nendpoint_slices = {{ namespace = \"shop\", service = \"web\", port = \"http\" }}\n",
        slices.path().display()
    );
    let mut lbd = LbdProcess::start(&topo.lb, &config);
    all_three_serve(&topo, &lbd);

    for (i, bad) in BAD_TIMES.iter().enumerate() {
        // An edit of the served file (one endpoint fewer) with a bad time: refused,
        // its last good contents stay. The comment makes each edit's size differ.
        let edit = format!(
            "{}\n{}",
            "#".repeat(i + 1),
            slice_yaml("web-1", &[0, 1], bad)
        );
        slices.write("web.yaml", &edit);
        let src = lbd.wait_source("endpointslices", "the bad edit reported", |s| {
            state(s).contains(&format!("{bad:?} is not an RFC 3339 time"))
        });
        let text = state(&src);
        assert!(
            text.starts_with("rejected ") && text.contains("web.yaml"),
            "{text}"
        );
        assert!(
            text.contains("metadata.creationTimestamp") && text.contains("line 7"),
            "{text}"
        );
        all_three_serve(&topo, &lbd);
    }
    // New files, JSON, with the same times.
    for (i, bad) in BAD_TIMES.iter().enumerate() {
        slices.write(
            &format!("new-{i}.json"),
            &slice_json("web", &format!("web-n{i}"), &[2], ("http", 80, "TCP"), bad),
        );
    }
    let src = lbd.wait_source("endpointslices", "four files refused", |s| {
        state(s).contains("(and 3 more files)")
    });
    assert!(state(&src).contains("new-0.json"), "{src}");
    all_three_serve(&topo, &lbd);

    // The served file is fixed; the bad new ones stay, and lbd restarts among them.
    slices.write("web.yaml", &good);
    lbd.wait_source("endpointslices", "web.yaml good again", |s| {
        state(s).contains("new-0.json") && state(s).contains("(and 2 more files)")
    });
    assert_eq!(lbd.restart(), Some(0));
    let src = lbd.wait_source("endpointslices", "after the restart", |s| {
        state(s).starts_with("rejected ")
    });
    assert!(state(&src).contains("new-"), "{src}");
    all_three_serve(&topo, &lbd);
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn bad_etcd_keys_are_refused_by_both_nodes_which_forward_on_and_restart() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    let lb2 = Netns::new("lb2");
    plug(
        &topo.switch,
        &lb2,
        "p-lb2",
        std::net::Ipv4Addr::new(198, 18, 0, 4),
        "2001:db8::4".parse().expect("v6"),
    );
    let etcd_ns = Netns::new("etcd");
    plug_etcd_host(&topo.switch, &etcd_ns);
    let _servers = serve_backends(
        &topo,
        |_| VIP.into(),
        &[(ServerKind::Http, 80), (ServerKind::Udp, 5353)],
    );
    let etcd = EtcdServer::start(&etcd_ns);
    let backends: Vec<String> = (0..3)
        .map(|i| format!("{{\"address\":\"{}\"}}", backend_addr(i)))
        .collect();
    let service = |name: &str, port: u16, extra: &str| {
        format!(
            "{{\"name\":\"{name}\",\"vip\":\"{VIP}\",\"port\":{port}{extra},\"backends\":[{}]}}",
            backends.join(",")
        )
    };
    etcd.put("/lb/services/web", &service("web", 80, ""));
    etcd.put(
        "/lb/services/dns",
        &format!("{{\"name\":\"dns\",\"vip\":\"{VIP}\",\"port\":5353,\"protocol\":\"udp\",\"endpoint_slices\":{{\"namespace\":\"shop\",\"service\":\"dns\",\"port\":\"dns\"}}}}"),
    );
    let rev = etcd.put(
        "/lb/endpointslices/dns/dns-1",
        &slice_json("dns", "dns-1", &[0, 1, 2], ("dns", 5353, "UDP"), GOOD_TIME),
    );
    let node = format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\n\n[node.etcd]\nendpoints = [\"{}\"]\nprefix = \"/lb\"\n",
        EtcdServer::url()
    );
    let mut lbd1 = LbdProcess::start(&topo.lb, &node);
    let mut lbd2 = LbdProcess::start(&lb2, &node);
    let at = |rev: i64| move |s: &Value| s["revision"].as_i64() >= Some(rev) && state(s) == "ok";
    lbd1.wait_source("etcd", "first list", at(rev));
    lbd2.wait_source("etcd", "first list", at(rev));
    let before = digest_list(&lbd1);
    assert_eq!(before.len(), 2, "{before:?}");
    all_three_serve(&topo, &lbd1);

    // Every input of the issue, each under its own key.
    let created = |t: &str| {
        format!(
            "r: * -> endpointCreated(\\\"http://{}:80\\\", \\\"{t}\\\") -> <roundRobin>;",
            backend_addr(0)
        )
    };
    let mut bad: Vec<(String, String)> = BAD_TIMES
        .iter()
        .enumerate()
        .map(|(i, t)| {
            (
                format!("/lb/endpointslices/dns/bad-{i}"),
                slice_json("dns", &format!("bad-{i}"), &[2], ("dns", 5353, "UDP"), t),
            )
        })
        .collect();
    bad.extend([
        (
            "/lb/services/fade".to_owned(),
            service("fade", 8081, &format!(",\"fade_in\":{{\"window\":\"{HUGE}\"}}")),
        ),
        (
            "/lb/services/health".to_owned(),
            service("health", 8082, &format!(",\"health_check\":{{\"interval\":\"{HUGE}\"}}")),
        ),
        (
            "/lb/services/routes".to_owned(),
            service("routes", 8083, &format!(",\"mode\":\"l7\",\"routes\":\"{}\"", created(BAD_TIMES[0]))),
        ),
        (
            "/lb/services/fadein".to_owned(),
            service(
                "fadein",
                8084,
                ",\"mode\":\"l7\",\"routes\":\"r: * -> fadeIn(99999999999999999999999999) -> <roundRobin>;\"",
            ),
        ),
        (
            "/lb/services/files".to_owned(),
            service("files", 8085, ",\"mode\":\"l7\",\"routes_file\":\"/etc/passwd\""),
        ),
    ]);
    let rev = etcd.put_many(bad.clone());
    for lbd in [&mut lbd1, &mut lbd2] {
        let src = lbd.wait_source("etcd", "the bad keys applied", |s| {
            s["revision"].as_i64() >= Some(rev)
        });
        let rejected = src["rejected"].to_string();
        for (key, _) in &bad {
            assert!(
                rejected.contains(&format!("{key}: ")),
                "{key} not reported: {src}"
            );
        }
        assert!(rejected.contains("is not an RFC 3339 time"), "{src}");
        assert!(rejected.contains("is out of range"), "{src}");
        assert!(
            rejected.contains("routes_file: a service from etcd cannot name a file"),
            "{src}"
        );
    }
    assert_eq!(digest_list(&lbd1), before, "the last good state runs on");
    assert_eq!(digest_list(&lbd2), before, "both nodes alike");
    all_three_serve(&topo, &lbd1);
    let dns = udp_requests(&topo.client, VIP, 5353, 30);
    assert!(dns.failures.is_empty(), "{:?}", dns.failures);

    // A node restarted while the keys exist comes up and holds the same state.
    assert_eq!(lbd2.restart(), Some(0));
    lbd2.wait_source("etcd", "listed again", at(rev));
    assert_eq!(digest_list(&lbd2), before);
    for lbd in [lbd1, lbd2] {
        let (code, log) = lbd.stop();
        assert_eq!(code, Some(0), "{log}");
    }
}

/// Service name → table digest.
fn digest_list(lbd: &LbdProcess) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = lbd
        .lbctl_json(&["services"])
        .as_array()
        .expect("services")
        .iter()
        .map(|s| (s["name"].to_string(), s["table_digest"].to_string()))
        .collect();
    out.sort();
    out
}

#[test]
fn bad_route_files_are_refused_and_the_routes_in_force_serve() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    topo.lb
        .ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
    let _web = Server::http(&topo.backends[0], backend_addr(0), 80, "b0");
    let dir = TempDir::new("bad-routes");
    let routes = dir.path().join("web.eskip");
    let routes_path = routes.display().to_string();
    std::fs::write(&routes, "hello: Path(\"/hello\") -> inlineContent(\"hi v1\") -> <shunt>;\nall: * -> <roundRobin>;\n").expect("routes");
    let config = format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\n\n[[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\nmode = \"l7\"\nroutes_file = \"{routes_path}\"\nbackends = [{{ address = \"{}\" }}]\n",
        backend_addr(0)
    );
    let mut lbd = LbdProcess::start(&topo.lb, &config);
    let hello = |topo: &Topology| -> Option<String> {
        let url = format!("http://{VIP}/hello");
        topo.client.run(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async { get(&client(false), &url).await.ok().map(|a| a.body) })
        })
    };
    wait_until("the proxy serves", || {
        hello(&topo).as_deref() == Some("hi v1")
    });

    let endpoint = format!("\"http://{}:80\"", backend_addr(0));
    let mut cases: Vec<(String, String)> = BAD_TIMES
        .iter()
        .map(|t| {
            (
                format!("endpointCreated({endpoint}, \"{t}\")"),
                format!("endpointCreated: {t:?} is not an RFC 3339 time"),
            )
        })
        .collect();
    for (arg, shown) in [
        // Written out: eskip numbers have no exponent (skipper's lexer), so `1e23`
        // is a syntax error, not this range check.
        ("100000000000000000000000", "100000000000000000000000"),
        ("18446744073709551615", "18446744073709552000"),
    ] {
        cases.push((
            format!("endpointCreated({endpoint}, {arg})"),
            format!("endpointCreated: {shown} is not a time in Unix seconds"),
        ));
    }
    cases.push((
        "fadeIn(99999999999999999999999999)".into(),
        "fadeIn: 100000000000000000000000000 ms is out of range".into(),
    ));
    cases.push((
        format!("fadeIn(\"{HUGE}\")"),
        format!("fadeIn: \"{HUGE}\" is out of range"),
    ));
    for (i, (filter, message)) in cases.iter().enumerate() {
        // The id's length makes each file's size differ from the one before.
        let id = "r".repeat(i + 1);
        let text = format!("{id}: * -> {filter} -> <roundRobin, {endpoint}>;\n");
        std::fs::write(&routes, &text).expect("routes");
        let src = lbd.wait_source("routes", "the bad routes reported", |s| {
            state(s).contains(message.as_str())
        });
        assert_eq!(src["location"], routes_path.as_str());
        let want = format!(
            "rejected, previous routes serve: line 1, column {}: route {id}: ",
            id.len() + 8
        );
        assert!(state(&src).starts_with(&want), "{src}");
        assert_eq!(
            hello(&topo).as_deref(),
            Some("hi v1"),
            "the routes in force serve"
        );
        // lbctl routes explains the same file with the same error, and exits 1.
        let (code, _, err) = lbd.lbctl(&["routes", &routes_path]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(message.as_str()), "{err}");
    }
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn configs_with_durations_out_of_range_are_refused_on_sighup() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    let _servers = serve_backends(&topo, |_| VIP.into(), &[(ServerKind::Http, 80)]);
    let list: Vec<String> = (0..3)
        .map(|i| format!("{{ address = \"{}\" }}", backend_addr(i)))
        .collect();
    let good = format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\n\n[[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\nbackends = [{}]\n",
        list.join(", ")
    );
    let mut lbd = LbdProcess::start(&topo.lb, &good);
    all_three_serve(&topo, &lbd);
    let in_service = |line: &str| good.replace("port = 80\n", &format!("port = 80\n{line}\n"));
    let in_node = |line: &str| {
        good.replace(
            "xdp_mode = \"generic\"\n",
            &format!("xdp_mode = \"generic\"\n[node.l7]\n{line}\n"),
        )
    };
    for (config, field) in [
        (
            in_service(&format!("fade_in = {{ window = \"{HUGE}\" }}")),
            "service[0].fade_in.window",
        ),
        (
            in_service(&format!("health_check = {{ interval = \"{HUGE}\" }}")),
            "service[0].health_check.interval",
        ),
        (
            in_node(&format!("header_timeout = \"{HUGE}\"")),
            "node.l7.header_timeout",
        ),
        (
            in_node(&format!("shutdown_timeout = \"{HUGE}\"")),
            "node.l7.shutdown_timeout",
        ),
        (
            in_service("fade_in = { window = 3000 }"),
            "service[0].fade_in.window",
        ),
    ] {
        let outcome = lbd.reload(&config);
        assert!(
            outcome.rejected().is_some_and(|s| s.contains(field)),
            "{outcome}"
        );
        let src = lbd.wait_source("config", "the rejection in status", |s| {
            state(s).contains(field)
        });
        let text = state(&src);
        assert!(
            text.starts_with("rejected, running the last good config: "),
            "{text}"
        );
        assert!(text.contains("lbd.toml:") && text.contains(field), "{text}");
        assert!(
            text.contains("is out of range") || text.contains("has no unit"),
            "{text}"
        );
        assert_eq!(lbd.lbctl_json(&["status"])["config_generation"], 1);
        all_three_serve(&topo, &lbd);
    }
    // A good config after all that applies.
    let outcome = lbd.reload(&in_service("fade_in = { window = \"1m30s\" }"));
    assert!(outcome.applied(), "{outcome}");
    lbd.wait_source("config", "ok again", |s| state(s) == "ok");
    assert_eq!(lbd.lbctl_json(&["status"])["config_generation"], 2);
    all_three_serve(&topo, &lbd);
    // The longest durations there are, everywhere at once, are accepted and run.
    const MAX: &str = "\"2562047h47m16.854775807s\"";
    let longest = in_node(&format!("header_timeout = {MAX}\nshutdown_timeout = {MAX}"))
        .replace(
            "port = 80\n",
            &format!("port = 80\nfade_in = {{ window = {MAX} }}\nhealth_check = {{ interval = {MAX}, timeout = {MAX} }}\n"),
        );
    let outcome = lbd.reload(&longest);
    assert!(outcome.applied(), "{outcome}");
    lbd.wait_source("config", "the longest durations", |s| state(s) == "ok");
    assert_eq!(lbd.lbctl_json(&["status"])["config_generation"], 3);
    all_three_serve(&topo, &lbd);
    lbd.assert_running("after the longest durations");
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}
