//! Established flows are sacred: backends added and removed under live connections,
//! and a broken config on reload, move or reset nothing.

use std::net::{IpAddr, SocketAddr};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    topology::{VIP, backend_addr},
    traffic::{Held, Server, ServerKind, Tally, assert_held_intact, http_requests, serve_backends},
};

const HTTP_PORT: u16 = 80;
const ECHO_PORT: u16 = 7000;
const HELD: usize = 30;

/// A config whose two services (HTTP and the echo service) use backends `which`.
fn config(which: &[usize]) -> String {
    let backends: Vec<IpAddr> = which.iter().map(|&i| backend_addr(i).into()).collect();
    let vip = IpAddr::from(VIP);
    lb_testbed::lbd::config(
        "generic",
        &[
            ("web", vip, HTTP_PORT, "tcp"),
            ("echo", vip, ECHO_PORT, "tcp"),
        ],
        &backends,
    )
}

/// A topology with `backends` backends serving HTTP and echo, lbd on backends 1-3, and
/// `HELD` open echo connections with the backend each one landed on.
struct Setup {
    topo: Topology,
    _servers: Vec<Server>,
    lbd: LbdProcess,
    held: Vec<Held>,
    on: Vec<String>,
}

fn setup(backends: usize) -> Setup {
    let topo = Topology::build(&TopologyOptions {
        backends,
        native_xdp: false,
    });
    let servers = serve_backends(
        &topo,
        |_| VIP.into(),
        &[(ServerKind::Http, HTTP_PORT), (ServerKind::Echo, ECHO_PORT)],
    );
    let lbd = LbdProcess::start(&topo.lb, &config(&[0, 1, 2]));
    let mut held = Held::open(&topo.client, SocketAddr::new(VIP.into(), ECHO_PORT), HELD);
    let on: Vec<String> = held
        .iter_mut()
        .enumerate()
        .map(|(i, c)| c.ask(&format!("hello-{i}")).expect("first exchange"))
        .collect();
    Setup {
        topo,
        _servers: servers,
        lbd,
        held,
        on,
    }
}

/// Reloads `config` (expecting success), checks that every held connection survived,
/// and returns who serves `n` new requests (all of which must succeed).
fn reload_then_probe(
    lbd: &mut LbdProcess,
    topo: &Topology,
    held: &mut [Held],
    on: &[String],
    config: &str,
    round: &str,
    n: usize,
) -> Tally {
    let outcome = lbd.reload(config);
    assert!(outcome.applied(), "{round}: {outcome}\n{}", lbd.log());
    assert_held_intact(held, on, round);
    let fresh = http_requests(&topo.client, VIP, HTTP_PORT, n);
    assert!(fresh.failures.is_empty(), "{round}: {:?}", fresh.failures);
    fresh
}

#[test]
fn backend_changes_and_bad_reloads_never_move_established_flows() {
    lb_testbed::needs_root!();
    let Setup {
        topo,
        _servers,
        mut lbd,
        mut held,
        on,
    } = setup(4);
    assert!(
        on.iter().all(|b| b != "backend-4"),
        "backend-4 is not configured yet: {on:?}"
    );

    // Remove backend-1, add backend-4.
    let fresh = reload_then_probe(
        &mut lbd,
        &topo,
        &mut held,
        &on,
        &config(&[1, 2, 3]),
        "after-change",
        90,
    );
    assert!(
        !fresh.served.contains_key("backend-1"),
        "removed backend got new flows: {:?}",
        fresh.served
    );
    assert!(
        fresh.served.contains_key("backend-4"),
        "added backend got no new flows: {:?}",
        fresh.served
    );

    // Weights: drain backend-2 (weight 0), favour backend-4. Established flows — also
    // those on the drained backend — stay; new ones avoid backend-2.
    let weighted = config(&[1, 2, 3])
        .replace(
            &format!("{{ address = \"{}\" }}", backend_addr(1)),
            &format!("{{ address = \"{}\", weight = 0 }}", backend_addr(1)),
        )
        .replace(
            &format!("{{ address = \"{}\" }}", backend_addr(3)),
            &format!("{{ address = \"{}\", weight = 3 }}", backend_addr(3)),
        );
    assert_ne!(weighted, config(&[1, 2, 3]), "the weights were written");
    let fresh = reload_then_probe(
        &mut lbd,
        &topo,
        &mut held,
        &on,
        &weighted,
        "after-weights",
        120,
    );
    assert!(
        !fresh.served.contains_key("backend-2"),
        "drained backend got new flows: {:?}",
        fresh.served
    );
    // The 3:1 split, on 400 connections from fixed source ports (a deterministic sample).
    let fixed = lb_testbed::traffic::http_requests_from(
        &topo.client,
        lb_testbed::topology::CLIENT_ADDR.into(),
        VIP.into(),
        HTTP_PORT,
        10000..10400,
    );
    let on_four = fixed
        .iter()
        .filter(|(_, r)| r.as_deref().expect("request") == "backend-4")
        .count();
    let share = on_four as f64 / fixed.len() as f64;
    assert!(
        (0.67..=0.83).contains(&share),
        "weight 3 of 4 should take 75% of new flows, took {share:.3}"
    );

    // A broken file is reported and changes nothing.
    let outcome = lbd.reload("[node]\ninterface = \"eth0\"\n[[service]]\nname = 1\n");
    let state = outcome.rejected().unwrap_or_else(|| panic!("{outcome}"));
    // Line 7: the harness adds pin_path, state_dir and admin_socket lines under [node].
    assert!(
        state.starts_with("rejected, running the last good config: ")
            && state.ends_with(
                "lbd.toml:7:8: service[0].name: invalid type: integer `1`, expected a string"
            ),
        "names the file, line, field and problem: {state}"
    );
    assert_held_intact(&mut held, &on, "after-bad-reload");
    let after_bad = http_requests(&topo.client, VIP, HTTP_PORT, 30);
    assert!(after_bad.failures.is_empty(), "{:?}", after_bad.failures);
    assert!(
        !after_bad.served.contains_key("backend-1"),
        "{:?}",
        after_bad.served
    );

    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn restarting_lbd_under_traffic_breaks_no_connection() {
    lb_testbed::needs_root!();
    let Setup {
        topo,
        _servers,
        mut lbd,
        mut held,
        on,
    } = setup(3);

    // What the restart must keep: the pinned XDP link (the new lbd swaps its program
    // in, rather than attaching anew) and the services' ids (adopted from the pinned
    // maps, so conntrack entries still name them).
    let link_pin = lbd.pin_dir().join(lb_dataplane::kernel::LINK_PIN);
    let link = || {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(&link_pin)
            .map(|m| m.ino())
            .unwrap_or_else(|e| panic!("the pinned XDP link: {e}"))
    };
    let ids = |lbd: &LbdProcess| {
        let mut ids: Vec<(String, String)> = lbd
            .lbctl_json(&["services"])
            .as_array()
            .expect("services")
            .iter()
            .map(|s| (s["name"].to_string(), s["service_id"].to_string()))
            .collect();
        ids.sort();
        ids
    };
    let (link_before, ids_before) = (link(), ids(&lbd));
    assert_eq!(ids_before.len(), 2, "{ids_before:?}");

    // New connections keep arriving while lbd stops and a new one takes over.
    let (during, code) = std::thread::scope(|s| {
        let traffic = s.spawn(|| http_requests(&topo.client, VIP, HTTP_PORT, 400));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let code = lbd.restart();
        (traffic.join().expect("traffic thread"), code)
    });
    assert_eq!(code, Some(0), "the old lbd exits cleanly:\n{}", lbd.log());
    assert!(
        during.failures.is_empty(),
        "connections failed across the restart: {:?}",
        during.failures
    );
    assert_eq!(during.ok(), 400);
    assert_held_intact(&mut held, &on, "after-restart");
    assert_eq!(
        link(),
        link_before,
        "the new lbd took over the pinned link the old one left running"
    );
    assert_eq!(ids(&lbd), ids_before, "the services were adopted");

    // After the restart the new lbd still steers, then tears everything down.
    let after = http_requests(&topo.client, VIP, HTTP_PORT, 60);
    assert!(after.failures.is_empty(), "{:?}", after.failures);
    assert_eq!(after.served.len(), 3, "{:?}", after.served);
    let pins = lbd.pin_dir();
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(!pins.exists(), "pins left behind at {}", pins.display());
}

#[test]
fn editing_the_config_file_reloads_without_a_signal() {
    lb_testbed::needs_root!();
    let Setup {
        topo,
        _servers,
        mut lbd,
        held: _,
        on: _,
    } = setup(3);
    let before = lbd.status()["config_generation"].as_u64();
    lbd.edit_config(&config(&[0, 2]));
    // No signal: the edit alone makes the next generation, applied by a reload.
    let status = lbd.wait_admin(
        "a reload after the edit",
        "/v1/status",
        std::time::Duration::from_secs(5),
        |s| s["config_generation"].as_u64() > before,
    );
    assert_eq!(status["last_reconcile"]["trigger"], "reload", "{status}");
    let fresh = http_requests(&topo.client, VIP, HTTP_PORT, 60);
    assert!(fresh.failures.is_empty(), "{:?}", fresh.failures);
    assert!(
        !fresh.served.contains_key("backend-2"),
        "edited-out backend got new flows: {:?}",
        fresh.served
    );
}
