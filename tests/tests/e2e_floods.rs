//! Established flows are sacred, checked end to end with real TCP through network
//! namespaces and real floods of spoofed frames:
//! - a million spoofed ACKs at a `nat` service claim no NAT port, and real clients
//!   still connect;
//! - twenty times the NAT port range of real connections, each closed, all succeed:
//!   ports come back when flows end;
//! - connections held open through a SYN flood several times the conntrack size, a
//!   backend add, a weight change and an lbd restart are never reset or moved (their
//!   answers and `lbctl explain` agree), in `dsr` and `nat`, over IPv4 and IPv6.

use std::net::{IpAddr, SocketAddr};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    flood::{FloodSpec, blackhole_flood_sources, mac_of, tcp_flood},
    packet::flags::{ACK, SYN},
    rng,
    topology::{NAT4, NAT6, VIP, VIP6, backend_addr, backend_addr6},
    traffic::{Held, ServerKind, echo_once, http_requests, serve_backends},
};

/// Gives the LB node its NAT addresses (so backends resolve them) and a blackhole for
/// the flood's sources.
fn prepare_lb(topo: &Topology) {
    topo.add_nat_addresses();
    blackhole_flood_sources(&topo.lb);
}

/// A `[[service]]` table.
fn service(name: &str, vip: IpAddr, port: u16, mode: &str, backends: &[(IpAddr, u32)]) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|(a, w)| format!("{{ address = \"{a}\", weight = {w} }}"))
        .collect();
    format!(
        "\n[[service]]\nname = \"{name}\"\nvip = \"{vip}\"\nport = {port}\nprotocol = \"tcp\"\nmode = \"{mode}\"\nbackends = [{}]\n",
        list.join(", ")
    )
}

fn node(extra: &str) -> String {
    format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"native\"\nnat_addresses = [\"{NAT4}\", \"{NAT6}\"]\n{extra}"
    )
}

/// A flow-table fill from `lbctl status`.
fn fill(lbd: &LbdProcess, table: &str) -> u64 {
    let status = lbd.lbctl_json(&["status"]);
    status["flow_tables"][table]["entries"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {table} fill in {status}"))
}

/// A data-plane counter from `lbctl stats` (a list of `[name, value]` pairs).
fn counter(lbd: &LbdProcess, name: &str) -> u64 {
    let stats = lbd.lbctl_json(&["stats"]);
    stats["counters"]
        .as_array()
        .and_then(|pairs| pairs.iter().find(|p| p[0] == name))
        .and_then(|p| p[1].as_u64())
        .unwrap_or_else(|| panic!("no counter {name} in {stats}"))
}

#[test]
fn a_million_spoofed_acks_claim_no_nat_port() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions {
        backends: 3,
        native_xdp: true,
    });
    prepare_lb(&topo);
    let _servers = serve_backends(&topo, |i| backend_addr(i).into(), &[(ServerKind::Http, 80)]);
    let backends: Vec<(IpAddr, u32)> = (0..3).map(|i| (backend_addr(i).into(), 1)).collect();
    let config = node("") + &service("web", VIP.into(), 80, "nat", &backends);
    let lbd = LbdProcess::start(&topo.lb, &config);
    let warm = http_requests(&topo.client, VIP, 80, 20);
    assert!(warm.failures.is_empty(), "{:?}", warm.failures);
    let before = fill(&lbd, "nat");
    let dropped_before = counter(&lbd, "drop_nat_no_flow");

    let seed = rng::seed("a_million_spoofed_acks_claim_no_nat_port");
    let report = tcp_flood(
        &topo.client,
        mac_of(&topo.lb),
        FloodSpec {
            target: SocketAddr::new(VIP.into(), 80),
            tcp_flags: ACK,
            count: 1_000_000,
            seed,
        },
    );
    eprintln!("sent {} spoofed ACKs in {:?}", report.sent, report.elapsed);
    assert_eq!(report.sent, 1_000_000);
    let dropped = counter(&lbd, "drop_nat_no_flow") - dropped_before;
    // Frames the veth could not queue never reached XDP; every one that did is counted.
    assert!(
        dropped > 900_000,
        "{dropped} of a million reached XDP and were dropped: {}",
        lbd.lbctl_json(&["stats"])["counters"]
    );
    assert!(
        fill(&lbd, "nat") <= before,
        "the flood took NAT ports: {} before, {} after",
        before,
        fill(&lbd, "nat")
    );
    let real = http_requests(&topo.client, VIP, 80, 500);
    assert!(
        real.failures.is_empty(),
        "{} of 500 new connections failed after the flood: {:?}\nlbd log:\n{}",
        real.failures.len(),
        real.failures,
        lbd.log()
    );
    assert_eq!(real.ok(), 500);
}

#[test]
fn closed_nat_flows_give_their_ports_back() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions {
        backends: 1,
        native_xdp: true,
    });
    prepare_lb(&topo);
    let _servers = serve_backends(
        &topo,
        |i| backend_addr(i).into(),
        &[(ServerKind::Echo, 7000)],
    );
    // 64 ports, one backend: every connection needs a port of the same 64.
    const RANGE: u16 = 64;
    let extra = format!(
        "nat_ports = {{ first = 40000, last = {} }}\n",
        40000 + RANGE - 1
    );
    let config = node(&extra)
        + &service(
            "echo",
            VIP.into(),
            7000,
            "nat",
            &[(backend_addr(0).into(), 1)],
        );
    let lbd = LbdProcess::start(&topo.lb, &config);
    let connections = usize::from(RANGE) * 20 + 20;
    let target = SocketAddr::new(VIP.into(), 7000);
    let failures = topo.client.run(move || {
        let mut failures = Vec::new();
        for i in 0..connections {
            if let Err(e) = echo_once(target, &format!("c{i}")) {
                failures.push(format!("connection {i}: {e}"));
            }
        }
        failures
    });
    assert!(
        failures.is_empty(),
        "{} of {connections} sequential connections failed, first {:?}\nlbd log:\n{}",
        failures.len(),
        failures.iter().take(5).collect::<Vec<_>>(),
        lbd.log()
    );
    let status = lbd.lbctl_json(&["status"]);
    let released = &status["flow_tables"]["nat_released"];
    let fin = released["fin"].as_u64().expect("fin");
    assert!(
        fin >= (connections - usize::from(RANGE)) as u64,
        "ports released by FIN: {status}"
    );
    assert_eq!(counter(&lbd, "drop_nat_ports_exhausted"), 0);
    assert!(fill(&lbd, "nat") <= u64::from(RANGE));
}

/// New flows of the dsr services (each starts half-open), from `lbctl services`.
fn dsr_new_flows(lbd: &LbdProcess) -> u64 {
    let services = lbd.lbctl_json(&["services"]);
    services
        .as_array()
        .expect("services")
        .iter()
        .filter(|s| s["mode"] == "dsr")
        .map(|s| s["new_flows"].as_u64().expect("new_flows"))
        .sum()
}

/// One held connection: its service, what it is pinned to, and the connection.
struct Pinned {
    service: &'static str,
    vip: SocketAddr,
    backend: String,
    conn: Held,
}

fn held_config(backends4: &[(IpAddr, u32)], backends6: &[(IpAddr, u32)]) -> String {
    sized_config(16384, backends4, backends6)
}

fn sized_config(
    conntrack: u32,
    backends4: &[(IpAddr, u32)],
    backends6: &[(IpAddr, u32)],
) -> String {
    let extra = format!(
        "conntrack_entries = {conntrack}\nembryonic_entries = 4096\nnat_entries = {}\n",
        conntrack * 8
    );
    node(&extra)
        + &service("dsr4", VIP.into(), 7000, "dsr", backends4)
        + &service("nat4", VIP.into(), 7001, "nat", backends4)
        + &service("dsr6", VIP6.into(), 7000, "dsr", backends6)
        + &service("nat6", VIP6.into(), 7001, "nat", backends6)
}

/// Every held connection answers from its own backend, and `lbctl explain` names that
/// backend as the one its flow table pins it to.
fn check_held(lbd: &LbdProcess, held: &mut [Pinned], phase: &str, topo: &Topology) {
    let mut moved = Vec::new();
    let mut reset = Vec::new();
    for (i, p) in held.iter_mut().enumerate() {
        match p.conn.ask(&format!("{phase}-{i}")) {
            Ok(name) if name == p.backend => {}
            Ok(name) => moved.push(format!("{} {i}: {} -> {name}", p.service, p.backend)),
            Err(e) => reset.push(format!("{} {i}: {e}", p.service)),
        }
        let e = lbd.lbctl_json(&[
            "explain",
            "tcp",
            &p.conn.local_addr().to_string(),
            &p.vip.to_string(),
        ]);
        assert_eq!(
            e["decision"], "conntrack",
            "{phase}: {} {i}: {e}",
            p.service
        );
        let addr: IpAddr = e["backend"].as_str().expect("backend").parse().expect("ip");
        assert_eq!(name_of(topo, addr), p.backend, "{phase}: explain {e}");
    }
    assert!(
        moved.is_empty() && reset.is_empty(),
        "{phase}: {} moved {:?}, {} reset {:?}\nlbd log:\n{}",
        moved.len(),
        moved,
        reset.len(),
        reset,
        lbd.log()
    );
}

fn name_of(topo: &Topology, addr: IpAddr) -> String {
    (0..topo.backends.len())
        .find(|&i| IpAddr::from(backend_addr(i)) == addr || IpAddr::from(backend_addr6(i)) == addr)
        .map(|i| format!("backend-{}", i + 1))
        .unwrap_or_else(|| panic!("{addr} is no backend"))
}

#[test]
fn held_flows_survive_a_syn_flood_changes_and_a_restart() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions {
        backends: 4,
        native_xdp: true,
    });
    prepare_lb(&topo);
    // dsr backends hold the VIPs; nat backends answer on their own addresses.
    let _dsr = serve_backends(&topo, |_| VIP.into(), &[(ServerKind::Echo, 7000)]);
    let _dsr6 = serve_backends(&topo, |_| VIP6.into(), &[(ServerKind::Echo, 7000)]);
    let _nat = serve_backends(
        &topo,
        |i| backend_addr(i).into(),
        &[(ServerKind::Echo, 7001)],
    );
    let _nat6 = serve_backends(
        &topo,
        |i| backend_addr6(i).into(),
        &[(ServerKind::Echo, 7001)],
    );
    let three4: Vec<(IpAddr, u32)> = (0..3).map(|i| (backend_addr(i).into(), 1)).collect();
    let three6: Vec<(IpAddr, u32)> = (0..3).map(|i| (backend_addr6(i).into(), 1)).collect();
    let mut lbd = LbdProcess::start(&topo.lb, &held_config(&three4, &three6));

    let targets: [(&str, SocketAddr); 4] = [
        ("dsr4", SocketAddr::new(VIP.into(), 7000)),
        ("nat4", SocketAddr::new(VIP.into(), 7001)),
        ("dsr6", SocketAddr::new(VIP6.into(), 7000)),
        ("nat6", SocketAddr::new(VIP6.into(), 7001)),
    ];
    let mut held: Vec<Pinned> = Vec::new();
    for (service, vip) in targets {
        for mut conn in Held::open(&topo.client, vip, 30) {
            let backend = conn
                .ask("hello")
                .unwrap_or_else(|e| panic!("{service}: {e}"));
            held.push(Pinned {
                service,
                vip,
                backend,
                conn,
            });
        }
    }
    check_held(&lbd, &mut held, "before", &topo);

    // A SYN flood from random sources at every service: 4 × 40,000 SYNs, ten times the
    // established table and forty times the half-open one.
    let lb_mac = mac_of(&topo.lb);
    let created_before = dsr_new_flows(&lbd);
    let seed = rng::seed("held_flows_survive_a_syn_flood_changes_and_a_restart");
    for (i, (_, vip)) in targets.iter().enumerate() {
        let seed = seed.wrapping_add(i as u64);
        let r = tcp_flood(
            &topo.client,
            lb_mac,
            FloodSpec {
                target: *vip,
                tcp_flags: SYN,
                count: 40_000,
                seed,
            },
        );
        assert_eq!(r.sent, 40_000);
    }
    // The flood really arrived: the dsr SYNs went through the half-open table, the nat
    // ones took (short-lived) NAT ports.
    let created = dsr_new_flows(&lbd) - created_before;
    let nat_ports = fill(&lbd, "nat");
    eprintln!("flood: {created} half-open dsr flows made, {nat_ports} nat ports held");
    assert!(
        created > 72_000,
        "{created} of 80,000 dsr SYNs admitted as half-open"
    );
    assert!(
        nat_ports > 72_000,
        "{nat_ports} nat ports after 80,000 nat SYNs"
    );
    assert!(fill(&lbd, "embryonic") <= 4096);
    assert_eq!(
        fill(&lbd, "conntrack"),
        60,
        "only the held dsr flows are established"
    );
    check_held(&lbd, &mut held, "after the SYN flood", &topo);

    // A backend joins every service: tables move, held flows must not.
    let four4: Vec<(IpAddr, u32)> = (0..4).map(|i| (backend_addr(i).into(), 1)).collect();
    let four6: Vec<(IpAddr, u32)> = (0..4).map(|i| (backend_addr6(i).into(), 1)).collect();
    let out = lbd.reload(&held_config(&four4, &four6));
    assert!(out.applied(), "{out}");
    check_held(&lbd, &mut held, "after a backend add", &topo);

    // A weight change.
    let mut heavy4 = four4.clone();
    heavy4[0].1 = 5;
    let mut heavy6 = four6.clone();
    heavy6[0].1 = 5;
    let out = lbd.reload(&held_config(&heavy4, &heavy6));
    assert!(out.applied(), "{out}");
    check_held(&lbd, &mut held, "after a weight change", &topo);

    // lbd restarts: the pinned data plane keeps forwarding, the new lbd adopts it.
    assert_eq!(lbd.restart(), Some(0));
    check_held(&lbd, &mut held, "after an lbd restart", &topo);

    // The tables grow (a node setting: it applies when lbd restarts): the new lbd
    // copies every flow into the new maps before and after it takes over.
    lbd.edit_config(&sized_config(32768, &heavy4, &heavy6));
    assert_eq!(lbd.restart(), Some(0));
    let status = lbd.lbctl_json(&["status"]);
    assert_eq!(
        status["flow_tables"]["conntrack"]["capacity"], 32768,
        "{status}"
    );
    assert_eq!(status["flow_tables"]["nat"]["capacity"], 262144, "{status}");
    // The migration ran: the new tables hold the held flows before any packet of
    // theirs arrived (a packet that is not a SYN creates no entry).
    let (dsr, nat) = (
        held.iter().filter(|p| p.service.starts_with("dsr")).count(),
        held.iter().filter(|p| p.service.starts_with("nat")).count(),
    );
    assert!(
        status["flow_tables"]["conntrack"]["entries"].as_u64() >= Some(dsr as u64)
            && status["flow_tables"]["nat"]["entries"].as_u64() >= Some(nat as u64),
        "{dsr} dsr and {nat} nat flows copied into the new tables: {status}"
    );
    check_held(&lbd, &mut held, "after a restart with bigger tables", &topo);

    // New connections still work after all of it.
    for (service, vip) in targets {
        let answered = topo.client.run(move || echo_once(vip, "new"));
        assert!(answered.is_ok(), "{service}: {answered:?}");
    }
}
