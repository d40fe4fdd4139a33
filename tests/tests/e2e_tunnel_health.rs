//! End to end: health checks of `ipip`/`gue` services go through the tunnel. The
//! backends sit behind a router and serve only on the VIP (bound to it on `lo`), so
//! a probe succeeds only if it reaches them encapsulated, is decapsulated by their
//! `lbd decap`, and is answered from the VIP straight back to the node. A backend whose
//! decap stops goes unhealthy within fall × interval and gets no new flows; when decap
//! comes back, it is healthy again and gets new flows; probes keep going through
//! across an lbd restart, and lbd leaves no policy rule behind when it stops.

use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use lb_testbed::{
    LbdProcess,
    routed::{DecapProcess, RoutedTopology, routed_backend, routed_backend6},
    topology::{VIP, VIP6},
    traffic::{Server, http_requests},
};

const INTERVAL_MS: u64 = 200;
const TIMEOUT_MS: u64 = 150;
const FALL: u64 = 2;
const GUE_PORT: u16 = 6080;

fn backends(v6: bool) -> Vec<IpAddr> {
    (0..3)
        .map(|i| {
            if v6 {
                routed_backend6(i).into()
            } else {
                routed_backend(i).into()
            }
        })
        .collect()
}

/// `web` (HTTP on 80, an HTTP check) and `echo` (TCP on 7000, a TCP check), both in
/// `mode` on `vip`.
fn config(mode: &str, vip: IpAddr, list: &[IpAddr]) -> String {
    let list: Vec<String> = list
        .iter()
        .map(|b| format!("{{ address = \"{b}\" }}"))
        .collect();
    let list = list.join(", ");
    let timing = format!(
        "interval = \"{INTERVAL_MS}ms\", timeout = \"{TIMEOUT_MS}ms\", rise = 2, fall = {FALL}"
    );
    format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\n\
         [node.tunnel]\ngue_port = {GUE_PORT}\n\
         \n[[service]]\nname = \"web\"\nvip = \"{vip}\"\nport = 80\nmode = \"{mode}\"\n\
         health_check = {{ kind = \"http\", path = \"/\", {timing} }}\nbackends = [{list}]\n\
         \n[[service]]\nname = \"echo\"\nvip = \"{vip}\"\nport = 7000\nmode = \"{mode}\"\n\
         health_check = {{ kind = \"tcp\", {timing} }}\nbackends = [{list}]\n"
    )
}

fn wait_health(lbd: &mut LbdProcess, service: &str, b: IpAddr, health: &str) -> Duration {
    let start = Instant::now();
    lbd.wait_backend(service, b, Duration::from_secs(10), |v| {
        v["health"] == health
    });
    start.elapsed()
}

fn health_of(lbd: &LbdProcess, service: &str, b: IpAddr) -> String {
    let all = lbd.lbctl_json(&["backends", service]);
    all.as_array()
        .and_then(|a| a.iter().find(|x| x["address"] == b.to_string()))
        .map(|x| x["health"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

fn checks_go_through_the_tunnel(mode: &str, vip: IpAddr, v6: bool) {
    lb_testbed::needs_root!();
    let topo = RoutedTopology::build(3, false);
    let vips = [vip];
    let mut decap: Vec<Option<DecapProcess>> = topo
        .backends
        .iter()
        .map(|b| Some(DecapProcess::start(b, &vips, GUE_PORT)))
        .collect();
    // Servers on the VIP only: a probe to the backend's own address finds nothing.
    let _servers: Vec<Server> = topo
        .backends
        .iter()
        .enumerate()
        .flat_map(|(i, b)| {
            let name = format!("backend-{}", i + 1);
            [
                Server::http(b, vip, 80, &name),
                Server::echo(b, vip, 7000, &name),
            ]
        })
        .collect();
    let list = backends(v6);
    let mut lbd = LbdProcess::start(&topo.lb, &config(mode, vip, &list));

    // Ten intervals of probes: every backend stays healthy (probes reach it).
    std::thread::sleep(Duration::from_millis(10 * INTERVAL_MS));
    for svc in ["web", "echo"] {
        for &b in &list {
            assert_eq!(
                health_of(&lbd, svc, b),
                "healthy",
                "{svc} {b} after ten probes\nlbd log:\n{}",
                lbd.log()
            );
        }
    }

    // lb_probe encapsulated them (counted per encapsulation, `lbctl stats`).
    let sent = lbd.counter(&format!("probe_encapsulated_{mode}"));
    assert!(
        sent >= 2 * 3 * 5,
        "probes encapsulated: {sent}\n{}",
        lbd.log()
    );
    for c in ["drop_unknown_backend", "drop_malformed", "drop_no_route"] {
        assert_eq!(lbd.counter(&format!("probe_{c}")), 0, "probe_{c}");
    }

    // backend-2's decap stops: its probes are dropped there, as clients' packets are.
    decap[1] = None;
    let took = wait_health(&mut lbd, "web", list[1], "unhealthy");
    let bound = Duration::from_millis(FALL * INTERVAL_MS + TIMEOUT_MS + 1000);
    assert!(
        took <= bound,
        "detected after {took:?}, more than fall × interval (+ timeout, slack) {bound:?}"
    );
    wait_health(&mut lbd, "echo", list[1], "unhealthy");
    for b in [list[0], list[2]] {
        assert_eq!(health_of(&lbd, "web", b), "healthy", "{b} unaffected");
    }
    let fresh = http_requests(&topo.client, vip, 80, 150);
    assert!(fresh.failures.is_empty(), "{:?}", fresh.failures);
    assert!(
        !fresh.served.contains_key("backend-2"),
        "a backend with broken decap got new flows: {:?}",
        fresh.served
    );

    // Decap comes back: healthy again, new flows reach it.
    decap[1] = Some(DecapProcess::start(&topo.backends[1], &vips, GUE_PORT));
    wait_health(&mut lbd, "web", list[1], "healthy");
    wait_health(&mut lbd, "echo", list[1], "healthy");
    let back = http_requests(&topo.client, vip, 80, 150);
    assert!(back.failures.is_empty(), "{:?}", back.failures);
    assert!(
        back.served.contains_key("backend-2"),
        "recovered backend gets new flows: {:?}",
        back.served
    );

    // A restart (pinned data plane left running): the next lbd takes the lb_probe link
    // over and finds its rule and route in place; probes keep going through.
    assert_eq!(lbd.restart(), Some(0), "exit status of the restart");
    let before = lbd.counter(&format!("probe_encapsulated_{mode}"));
    std::thread::sleep(Duration::from_millis(10 * INTERVAL_MS));
    let after = lbd.counter(&format!("probe_encapsulated_{mode}"));
    assert!(
        after >= before + 2 * 3 * 5,
        "probes after the restart: {before} -> {after}\n{}",
        lbd.log()
    );
    for &b in &list {
        assert_eq!(
            health_of(&lbd, "web", b),
            "healthy",
            "{b} after the restart"
        );
    }
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
    // lbd removed its policy rules and routes on the way out.
    let out = std::process::Command::new("ip")
        .args(["-n", topo.lb.name(), "rule", "show"])
        .output()
        .expect("ip rule show");
    let rules = String::from_utf8_lossy(&out.stdout);
    assert!(!rules.contains("0x4c420000"), "rule left behind:\n{rules}");
}

#[test]
fn ipip_ipv4_checks_follow_the_tunnel() {
    checks_go_through_the_tunnel("ipip", VIP.into(), false);
}

#[test]
fn gue_ipv6_checks_follow_the_tunnel() {
    checks_go_through_the_tunnel("gue", VIP6.into(), true);
}
