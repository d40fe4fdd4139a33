//! `nat` mode end to end: backends that know nothing about the VIP serve real TCP and
//! UDP clients; replies come back through the node and are translated back.

use std::net::IpAddr;

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    lbd::nat_config,
    topology::{NAT4, NAT6, VIP, VIP6, backend_addr, backend_addr6},
    traffic::{ServerKind, http_requests, serve_backends, udp_requests},
};

const CONNECTIONS: usize = 150;
const DATAGRAMS: usize = 90;

fn nat_round_trips(mode: &str, v6: bool) {
    let topo = Topology::build(&TopologyOptions {
        backends: 3,
        native_xdp: mode == "native",
    });
    topo.add_nat_addresses();
    let backend = |i: usize| -> IpAddr {
        if v6 {
            backend_addr6(i).into()
        } else {
            backend_addr(i).into()
        }
    };
    let vip: IpAddr = if v6 { VIP6.into() } else { VIP.into() };
    // Backends listen on their own address only: nothing about the VIP is configured.
    let _servers = serve_backends(
        &topo,
        backend,
        &[(ServerKind::Http, 80), (ServerKind::Udp, 5353)],
    );
    let backends: Vec<IpAddr> = (0..3).map(backend).collect();
    let config = nat_config(
        mode,
        &[("web", vip, 80, "tcp"), ("dns", vip, 5353, "udp")],
        &backends,
        &[NAT4.into(), NAT6.into()],
    );
    let lbd = LbdProcess::start(&topo.lb, &config);
    let tcp = http_requests(&topo.client, vip, 80, CONNECTIONS);
    assert!(
        tcp.failures.is_empty(),
        "TCP failures: {:?}\nlbd log:\n{}",
        tcp.failures,
        lbd.log()
    );
    assert_eq!(
        tcp.served.len(),
        3,
        "every backend serves: {:?}",
        tcp.served
    );
    let udp = udp_requests(&topo.client, vip, 5353, DATAGRAMS);
    assert!(udp.failures.is_empty(), "UDP failures: {:?}", udp.failures);
    assert_eq!(udp.served.len(), 3, "{:?}", udp.served);
    // Both directions went through XDP.
    let least = (CONNECTIONS * 3 + DATAGRAMS) as u64;
    let (tx, replies) = (lbd.counter("tx"), lbd.counter("tx_nat_reply"));
    assert!(tx >= least, "tx {tx} < {least}:\n{}", lbd.log());
    assert!(
        replies >= least,
        "tx_nat_reply {replies} < {least}:\n{}",
        lbd.log()
    );
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn nat_ipv4_generic() {
    lb_testbed::needs_root!();
    nat_round_trips("generic", false);
}

#[test]
fn nat_ipv4_native() {
    lb_testbed::needs_root!();
    nat_round_trips("native", false);
}

#[test]
fn nat_ipv6_generic() {
    lb_testbed::needs_root!();
    nat_round_trips("generic", true);
}

#[test]
fn nat_ipv6_native() {
    lb_testbed::needs_root!();
    nat_round_trips("native", true);
}
