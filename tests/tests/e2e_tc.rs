//! End to end with `node.hook = "tc"`: `lb_tc` on TCX ingress instead of XDP, real TCP
//! and UDP through the VIP in network namespaces, lbd running as a process; the link
//! pinned, replaced in place by a restarted lbd, and gone after `lbd` stops.

use std::net::IpAddr;

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    topology::{HOST_IF, NAT4, NAT6, VIP, VIP6, backend_addr, backend_addr6},
    traffic::{ServerKind, http_requests, serve_backends, udp_requests},
};

const HTTP_PORT: u16 = 80;
const UDP_PORT: u16 = 5353;
const CONNECTIONS: usize = 150;
const DATAGRAMS: usize = 90;

fn on_tc(config: String) -> String {
    config.replacen("[node]\n", "[node]\nhook = \"tc\"\n", 1)
}

fn backend(v6: bool, i: usize) -> IpAddr {
    if v6 {
        backend_addr6(i).into()
    } else {
        backend_addr(i).into()
    }
}

fn xdp_attached(topo: &Topology) -> bool {
    let out = std::process::Command::new("ip")
        .args(["-n", topo.lb.name(), "link", "show", "dev", HOST_IF])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

/// `CONNECTIONS` HTTP requests and `DATAGRAMS` UDP exchanges through `vip`, each
/// served by one of three backends, all three used; the `tx` counter moved by at
/// least what they must have sent through the node (SYN, request, FIN; a datagram).
fn traffic(topo: &Topology, lbd: &LbdProcess, vip: IpAddr) {
    let before = lbd.counter("tx");
    let tcp = http_requests(&topo.client, vip, HTTP_PORT, CONNECTIONS);
    assert!(
        tcp.failures.is_empty(),
        "TCP failures: {:?}\nlbd log:\n{}",
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
    let udp = udp_requests(&topo.client, vip, UDP_PORT, DATAGRAMS);
    assert!(
        udp.failures.is_empty(),
        "UDP failures: {:?}",
        &udp.failures[..udp.failures.len().min(5)]
    );
    assert_eq!(
        udp.served.len(),
        3,
        "every backend answers: {:?}",
        udp.served
    );
    let tx = lbd.counter("tx") - before;
    let least = (CONNECTIONS * 3 + DATAGRAMS) as u64;
    assert!(tx >= least, "tx moved {tx} < {least}; log:\n{}", lbd.log());
    assert_eq!(lbd.counter("drop_malformed"), 0, "{}", lbd.log());
}

fn dsr_on_tc(v6: bool) {
    let vip: IpAddr = if v6 { VIP6.into() } else { VIP.into() };
    let topo = Topology::build(&TopologyOptions {
        backends: 3,
        native_xdp: false,
    });
    let _servers = serve_backends(
        &topo,
        |_| vip,
        &[(ServerKind::Http, HTTP_PORT), (ServerKind::Udp, UDP_PORT)],
    );
    let backends: Vec<IpAddr> = (0..3).map(|i| backend(v6, i)).collect();
    let config = on_tc(lb_testbed::lbd::config(
        "generic",
        &[
            ("web", vip, HTTP_PORT, "tcp"),
            ("dns", vip, UDP_PORT, "udp"),
        ],
        &backends,
    ));
    let mut lbd = LbdProcess::start(&topo.lb, &config);
    assert_eq!(lbd.status()["hook"], "tc", "{}", lbd.status());
    let pin = lbd.pin_dir().join("link_tc");
    assert!(pin.exists(), "no pinned TCX link at {}", pin.display());
    assert!(!xdp_attached(&topo), "hook = tc attached XDP");
    traffic(&topo, &lbd, vip);

    // A restarted lbd takes the pinned link over and swaps its program in.
    assert_eq!(lbd.restart(), Some(0), "{}", lbd.log());
    assert!(
        lbd.log().contains("took over the running program's link"),
        "{}",
        lbd.log()
    );
    traffic(&topo, &lbd, vip);

    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "lbd exit status; log:\n{log}");
    assert!(!pin.exists(), "the TCX link pin outlived a stopping lbd");
}

#[test]
fn tc_dsr_ipv4_tcp_and_udp_across_a_restart() {
    lb_testbed::needs_root!();
    dsr_on_tc(false);
}

#[test]
fn tc_dsr_ipv6_tcp_and_udp_across_a_restart() {
    lb_testbed::needs_root!();
    dsr_on_tc(true);
}

/// `nat` on TC with the client's checksum offload left on, so its packets reach the
/// node `CHECKSUM_PARTIAL` (only the pseudo header summed) and take the checksum
/// helpers' partial path; the replies (full checksums, which the client's stack
/// verifies) take the other. (A receiver trusts a partial skb from a veth, so this
/// shows the partial path breaks nothing; it cannot show its sum is right.)
fn nat_on_tc(v6: bool) {
    let topo = Topology::build(&TopologyOptions {
        backends: 3,
        native_xdp: false,
    });
    topo.client.exec("ethtool", &["-K", HOST_IF, "tx", "on"]);
    topo.add_nat_addresses();
    let vip: IpAddr = if v6 { VIP6.into() } else { VIP.into() };
    let _servers = serve_backends(
        &topo,
        |i| backend(v6, i),
        &[(ServerKind::Http, HTTP_PORT), (ServerKind::Udp, UDP_PORT)],
    );
    let backends: Vec<IpAddr> = (0..3).map(|i| backend(v6, i)).collect();
    let config = on_tc(lb_testbed::lbd::nat_config(
        "generic",
        &[
            ("web", vip, HTTP_PORT, "tcp"),
            ("dns", vip, UDP_PORT, "udp"),
        ],
        &backends,
        &[NAT4.into(), NAT6.into()],
    ));
    let lbd = LbdProcess::start(&topo.lb, &config);
    traffic(&topo, &lbd, vip);
    let replies = lbd.counter("tx_nat_reply");
    let least = (CONNECTIONS * 3 + DATAGRAMS) as u64;
    assert!(replies >= least, "tx_nat_reply {replies} < {least}");
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn tc_nat_ipv4_with_partial_checksums() {
    lb_testbed::needs_root!();
    nat_on_tc(false);
}

#[test]
fn tc_nat_ipv6_with_partial_checksums() {
    lb_testbed::needs_root!();
    nat_on_tc(true);
}
