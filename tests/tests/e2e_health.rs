//! Health checks on the real data plane: a backend whose health endpoint dies stops
//! getting new flows within fall × interval; connections to every backend keep working;
//! when it recovers it gets new flows again.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    topology::{VIP, backend_addr},
    traffic::{Held, Server, ServerKind, http_requests, serve_backends},
};

const INTERVAL_MS: u64 = 200;
const FALL: u64 = 2;

fn config() -> String {
    let list: Vec<String> = (0..3)
        .map(|i| format!("{{ address = \"{}\" }}", backend_addr(i)))
        .collect();
    let hc = format!(
        "health_check = {{ kind = \"http\", port = 8081, path = \"/healthz\", interval = \"{INTERVAL_MS}ms\", timeout = \"150ms\", rise = 2, fall = {FALL} }}"
    );
    format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\n\n[[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\n{hc}\nbackends = [{list}]\n\n[[service]]\nname = \"echo\"\nvip = \"{VIP}\"\nport = 7000\n{hc}\nbackends = [{list}]\n",
        list = list.join(", ")
    )
}

/// Waits until `/v1/backends` shows backend `i` of `service` with `health`; how long
/// that took.
fn wait_health(lbd: &mut LbdProcess, service: &str, i: usize, health: &str) -> Duration {
    let start = Instant::now();
    lbd.wait_backend(
        service,
        backend_addr(i).into(),
        Duration::from_secs(10),
        |b| b["health"] == health,
    );
    start.elapsed()
}

#[test]
fn an_unhealthy_backend_gets_no_new_flows_and_nothing_breaks() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    let _traffic = serve_backends(
        &topo,
        |_| VIP.into(),
        &[(ServerKind::Http, 80), (ServerKind::Echo, 7000)],
    );
    let health = |i: usize| Server::http(&topo.backends[i], backend_addr(i), 8081, "ok");
    let mut checks: Vec<Option<Server>> = (0..3).map(|i| Some(health(i))).collect();
    let mut lbd = LbdProcess::start(&topo.lb, &config());

    let mut held = Held::open(&topo.client, SocketAddr::new(VIP.into(), 7000), 30);
    let on: Vec<String> = held
        .iter_mut()
        .map(|c| c.ask("hello").expect("echo"))
        .collect();
    assert!(
        on.iter().any(|b| b == "backend-2"),
        "some held connections on backend-2: {on:?}"
    );

    // backend-2's health endpoint goes away (its service keeps running).
    checks[1] = None;
    let took = wait_health(&mut lbd, "web", 1, "unhealthy");
    let bound = Duration::from_millis(FALL * INTERVAL_MS + 150 + 1000);
    assert!(
        took <= bound,
        "detected after {took:?}, more than fall × interval (+ timeout, slack) {bound:?}"
    );
    wait_health(&mut lbd, "echo", 1, "unhealthy");

    let fresh = http_requests(&topo.client, VIP, 80, 150);
    assert!(fresh.failures.is_empty(), "{:?}", fresh.failures);
    assert!(
        !fresh.served.contains_key("backend-2"),
        "unhealthy backend got new flows: {:?}",
        fresh.served
    );
    for (i, (c, was)) in held.iter_mut().zip(&on).enumerate() {
        let now = c
            .ask("still")
            .unwrap_or_else(|e| panic!("held {i} on {was} broke: {e}"));
        assert_eq!(&now, was, "held {i} moved");
    }

    // It recovers: new flows reach it again.
    checks[1] = Some(health(1));
    wait_health(&mut lbd, "web", 1, "healthy");
    let back = http_requests(&topo.client, VIP, 80, 150);
    assert!(back.failures.is_empty(), "{:?}", back.failures);
    assert!(
        back.served.contains_key("backend-2"),
        "recovered backend gets new flows: {:?}",
        back.served
    );
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}
