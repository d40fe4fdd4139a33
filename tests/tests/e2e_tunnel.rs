//! End to end: `ipip` and `gue` with the backends in another subnet behind a router
//! (so L2 DSR cannot reach them), each backend running `lbd decap` with the VIPs on
//! `lo`: real TCP connections and UDP exchanges from the client, answered by the
//! backends straight to the client (the router carries the answers; the node never
//! sees them), in XDP generic and native mode and on the TC hook, both families and
//! across them; held
//! connections through a backend change and an lbd restart.

use std::net::{IpAddr, SocketAddr};

use lb_testbed::{
    LbdProcess,
    routed::{DecapProcess, RoutedTopology, routed_backend, routed_backend6},
    topology::{VIP, VIP6},
    traffic::{Held, Server, assert_held_intact, http_requests, udp_requests},
};

const HTTP_PORT: u16 = 80;
const UDP_PORT: u16 = 5353;
const ECHO_PORT: u16 = 7000;
const CONNECTIONS: usize = 150;
const DATAGRAMS: usize = 90;
const GUE_PORT: u16 = 6080;

/// Backends of one family: `v6` picks the IPv6 addresses.
fn backends(v6: bool, which: &[usize]) -> Vec<IpAddr> {
    which
        .iter()
        .map(|&i| {
            if v6 {
                routed_backend6(i).into()
            } else {
                routed_backend(i).into()
            }
        })
        .collect()
}

/// A config with web (TCP), dns (UDP) and echo (TCP) services on `vip` in `mode`,
/// optionally with outer sources from a block (else the route's own source).
fn config(xdp_mode: &str, mode: &str, vip: IpAddr, list: &[IpAddr], block: bool) -> String {
    let list: Vec<String> = list
        .iter()
        .map(|b| format!("{{ address = \"{b}\" }}"))
        .collect();
    let list = list.join(", ");
    // "tc" runs the TC ingress twin instead of XDP.
    let mut text = if xdp_mode == "tc" {
        "[node]\ninterface = \"eth0\"\nhook = \"tc\"\n".to_owned()
    } else {
        format!("[node]\ninterface = \"eth0\"\nxdp_mode = \"{xdp_mode}\"\n")
    };
    if block {
        text.push_str(&format!(
            "[node.tunnel]\nsource_v4 = \"198.18.200.0/24\"\nsource_v6 = \"2001:db8:200::/64\"\ngue_port = {GUE_PORT}\n"
        ));
    }
    for (name, port, proto) in [
        ("web", HTTP_PORT, "tcp"),
        ("dns", UDP_PORT, "udp"),
        ("echo", ECHO_PORT, "tcp"),
    ] {
        text.push_str(&format!(
            "\n[[service]]\nname = \"{name}\"\nvip = \"{vip}\"\nport = {port}\nprotocol = \"{proto}\"\nmode = \"{mode}\"\nbackends = [{list}]\n"
        ));
    }
    text
}

/// The topology with `lbd decap` and the servers running on every backend.
struct Bed {
    topo: RoutedTopology,
    _decap: Vec<DecapProcess>,
    _servers: Vec<Server>,
}

fn bed(native: bool) -> Bed {
    bed_of(3, native)
}

fn bed_of(backends: usize, native: bool) -> Bed {
    let topo = RoutedTopology::build(backends, native);
    let vips = [IpAddr::from(VIP), IpAddr::from(VIP6)];
    let decap = topo
        .backends
        .iter()
        .map(|b| DecapProcess::start(b, &vips, GUE_PORT))
        .collect();
    let mut servers = Vec::new();
    for (i, b) in topo.backends.iter().enumerate() {
        let name = format!("backend-{}", i + 1);
        for vip in vips {
            servers.push(Server::http(b, vip, HTTP_PORT, &name));
            servers.push(Server::udp(b, vip, UDP_PORT, &name));
            servers.push(Server::echo(b, vip, ECHO_PORT, &name));
        }
    }
    Bed {
        topo,
        _decap: decap,
        _servers: servers,
    }
}

/// 150 connections and 90 datagrams through `vip`, every one answered, all three
/// backends used; the node counted the encapsulated forwards under `counter`.
fn steer(xdp_mode: &str, mode: &str, vip: IpAddr, backends_v6: bool, block: bool) {
    let bed = bed(xdp_mode == "native");
    let list = backends(backends_v6, &[0, 1, 2]);
    let lbd = LbdProcess::start(&bed.topo.lb, &config(xdp_mode, mode, vip, &list, block));
    let tcp = http_requests(&bed.topo.client, vip, HTTP_PORT, CONNECTIONS);
    assert!(
        tcp.failures.is_empty(),
        "{mode} {xdp_mode} TCP failures: {:?}\nlbd log:\n{}",
        &tcp.failures[..tcp.failures.len().min(5)],
        lbd.log()
    );
    assert_eq!(tcp.ok(), CONNECTIONS);
    assert_eq!(
        tcp.served.len(),
        3,
        "every backend serves: {:?}",
        tcp.served
    );
    // A UDP answer reaches the client only if the backend saw the client's address:
    // it answers the datagram's source, straight (through the router), not via the node.
    let udp = udp_requests(&bed.topo.client, vip, UDP_PORT, DATAGRAMS);
    assert!(
        udp.failures.is_empty(),
        "UDP failures: {:?}",
        &udp.failures[..udp.failures.len().min(5)]
    );
    assert_eq!(
        udp.served.len(),
        3,
        "every backend answers UDP: {:?}",
        udp.served
    );
    let tx = lbd.counter(&format!("tx_{mode}")) + lbd.counter(&format!("redirect_{mode}"));
    let least = (CONNECTIONS * 3 + DATAGRAMS) as u64;
    assert!(tx >= least, "{mode} forwards {tx} < {least}\n{}", lbd.log());
    assert_eq!(lbd.counter("drop_malformed"), 0, "{}", lbd.log());
    assert_eq!(lbd.counter("drop_no_route"), 0, "{}", lbd.log());
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "lbd exit status; log:\n{log}");
}

#[test]
fn ipip_ipv4_generic_mode_tcp_and_udp() {
    lb_testbed::needs_root!();
    steer("generic", "ipip", VIP.into(), false, false);
}

#[test]
fn ipip_ipv4_native_mode_with_a_source_block() {
    lb_testbed::needs_root!();
    steer("native", "ipip", VIP.into(), false, true);
}

#[test]
fn ipip_ipv6_generic_mode_tcp_and_udp() {
    lb_testbed::needs_root!();
    steer("generic", "ipip", VIP6.into(), true, false);
}

#[test]
fn gue_ipv6_native_mode_tcp_and_udp() {
    lb_testbed::needs_root!();
    steer("native", "gue", VIP6.into(), true, true);
}

#[test]
fn ipip_and_gue_on_the_tc_hook() {
    lb_testbed::needs_root!();
    steer("tc", "ipip", VIP.into(), false, true);
    steer("tc", "gue", VIP6.into(), true, false);
}

#[test]
fn gue_ipv4_vip_over_ipv6_backends() {
    lb_testbed::needs_root!();
    steer("generic", "gue", VIP.into(), true, false);
}

#[test]
fn held_tunnelled_connections_survive_backend_changes_and_a_restart() {
    lb_testbed::needs_root!();
    let bed = bed(false);
    let vip = IpAddr::from(VIP);
    let all = backends(false, &[0, 1, 2]);
    let mut lbd = LbdProcess::start(
        &bed.topo.lb,
        &config("generic", "ipip", vip, &all[..2], true),
    );
    let mut held = Held::open(&bed.topo.client, SocketAddr::new(vip, ECHO_PORT), 30);
    let on: Vec<String> = held
        .iter_mut()
        .enumerate()
        .map(|(i, c)| c.ask(&format!("hello-{i}")).expect("first exchange"))
        .collect();
    // A backend joins: nothing held moves, and the new one takes new flows.
    let outcome = lbd.reload(&config("generic", "ipip", vip, &all, true));
    assert!(outcome.applied(), "{outcome}\n{}", lbd.log());
    assert_held_intact(&mut held, &on, "after an add");
    let fresh = http_requests(&bed.topo.client, vip, HTTP_PORT, 60);
    assert!(fresh.failures.is_empty(), "{:?}", fresh.failures);
    assert!(
        fresh.served.contains_key("backend-3"),
        "the new backend serves: {:?}",
        fresh.served
    );
    // One of the first two leaves: its held connections keep going (draining).
    let outcome = lbd.reload(&config("generic", "ipip", vip, &[all[1], all[2]], true));
    assert!(outcome.applied(), "{outcome}\n{}", lbd.log());
    assert_held_intact(&mut held, &on, "after a removal");
    let fresh = http_requests(&bed.topo.client, vip, HTTP_PORT, 60);
    assert!(fresh.failures.is_empty(), "{:?}", fresh.failures);
    assert!(
        !fresh.served.contains_key("backend-1"),
        "the removed backend takes no new flows: {:?}",
        fresh.served
    );
    // A restart: the pinned data plane forwards meanwhile and the next lbd adopts it.
    let code = lbd.restart();
    assert_eq!(code, Some(0), "{}", lbd.log());
    assert_held_intact(&mut held, &on, "after a restart");
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// Every path here has a 1500-byte MTU, so a client's full-size segments (1500 bytes of
/// IP) do not fit once encapsulated: the node answers "fragmentation needed" with 1480
/// (1460 for IPv6 in GUE over IPv6: 48 bytes of outer headers), the client's stack
/// lowers its path MTU to the VIP and sends again, and a 200 KB upload arrives whole.
/// (The backend's answers do not pass the node; the SYN's MSS clamp covers what the
/// backend sends, the ICMP what the client sends.)
#[test]
fn large_uploads_through_the_tunnel_find_the_path_mtu() {
    lb_testbed::needs_root!();
    let bed = bed(false);
    for (vip, mode, v6) in [
        (IpAddr::from(VIP), "ipip", false),
        (IpAddr::from(VIP6), "gue", true),
    ] {
        let list = backends(v6, &[0, 1, 2]);
        let lbd = LbdProcess::start(&bed.topo.lb, &config("generic", mode, vip, &list, false));
        let mut held = Held::open(&bed.topo.client, SocketAddr::new(vip, ECHO_PORT), 2);
        let big = "x".repeat(200_000);
        for (i, conn) in held.iter_mut().enumerate() {
            let who = conn
                .ask(&big)
                .unwrap_or_else(|e| panic!("{mode}: upload {i} failed: {e}\n{}", lbd.log()));
            assert!(who.starts_with("backend-"), "{mode}: answered by {who:?}");
        }
        assert!(
            lbd.counter("tx_icmp_too_big") > 0,
            "{mode}: the node told the client its packets are too big\n{}",
            lbd.log()
        );
        assert!(
            lbd.counter("mss_clamped") > 0,
            "{mode}: the SYNs' MSS was lowered"
        );
        drop(held);
        let (code, log) = lbd.stop();
        assert_eq!(code, Some(0), "{log}");
    }
}

/// Fade-in is the same for tunnelled services: a fourth backend joins with a 6 s
/// window; right after, it takes a small share of new connections (the formula gives
/// under 8 % in its first 1.5 s), after the window its full quarter.
#[test]
fn a_new_tunnel_backend_fades_in() {
    lb_testbed::needs_root!();
    let bed = bed_of(4, false);
    let vip = IpAddr::from(VIP);
    let all = backends(false, &[0, 1, 2, 3]);
    let faded = |list: &[IpAddr]| {
        config("generic", "ipip", vip, list, false).replace(
            "mode = \"ipip\"\n",
            "mode = \"ipip\"\nfade_in = { window = \"6s\", min_weight = 0.05 }\n",
        )
    };
    let mut lbd = LbdProcess::start(&bed.topo.lb, &faded(&all[..3]));
    // Let the first three settle past their own ramp.
    std::thread::sleep(std::time::Duration::from_secs(7));
    let outcome = lbd.reload(&faded(&all));
    assert!(outcome.applied(), "{outcome}\n{}", lbd.log());
    let early = http_requests(&bed.topo.client, vip, HTTP_PORT, 200);
    assert!(early.failures.is_empty(), "{:?}", early.failures);
    let new = |t: &lb_testbed::traffic::Tally| t.served.get("backend-4").copied().unwrap_or(0);
    assert!(
        new(&early) * 100 < 200 * 15,
        "early share of the new backend: {:?}",
        early.served
    );
    std::thread::sleep(std::time::Duration::from_secs(6));
    let late = http_requests(&bed.topo.client, vip, HTTP_PORT, 400);
    assert!(late.failures.is_empty(), "{:?}", late.failures);
    let share = new(&late) as f64 / 400.0;
    assert!(
        (0.15..0.36).contains(&share),
        "late share {share}: {:?}",
        late.served
    );
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}
