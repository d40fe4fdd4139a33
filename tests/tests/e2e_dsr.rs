//! End to end: real TCP and UDP through the VIP in network namespaces, `lbd` running as
//! a process on the LB node, XDP in generic and in native mode.

use std::net::IpAddr;

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    topology::{HOST_IF, VIP, VIP6, backend_addr, backend_addr6},
    traffic::{Server, ServerKind, http_requests, serve_backends, udp_requests},
};

const HTTP_PORT: u16 = 80;
const UDP_PORT: u16 = 5353;
const CONNECTIONS: usize = 150;
const DATAGRAMS: usize = 90;

/// Address family of a run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn vip(self) -> IpAddr {
        match self {
            Family::V4 => VIP.into(),
            Family::V6 => VIP6.into(),
        }
    }

    fn backend(self, i: usize) -> IpAddr {
        match self {
            Family::V4 => backend_addr(i).into(),
            Family::V6 => backend_addr6(i).into(),
        }
    }
}

fn config(mode: &str, family: Family, backends: usize) -> String {
    let vip = family.vip();
    let list: Vec<IpAddr> = (0..backends).map(|i| family.backend(i)).collect();
    lb_testbed::lbd::config(
        mode,
        &[
            ("web", vip, HTTP_PORT, "tcp"),
            ("dns", vip, UDP_PORT, "udp"),
        ],
        &list,
    )
}

fn xdp_attached(topo: &Topology) -> bool {
    let out = std::process::Command::new("ip")
        .args(["-n", topo.lb.name(), "link", "show", "dev", HOST_IF])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn steer_through_vip(mode: &str, family: Family) {
    let vip = family.vip();
    let topo = Topology::build(&TopologyOptions {
        backends: 3,
        native_xdp: mode == "native",
    });
    let _servers = serve_backends(
        &topo,
        |_| vip,
        &[(ServerKind::Http, HTTP_PORT), (ServerKind::Udp, UDP_PORT)],
    );
    let lbd = LbdProcess::start(&topo.lb, &config(mode, family, 3));
    assert!(
        xdp_attached(&topo),
        "lbd reported attached but ip link shows no XDP"
    );

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
    for (name, n) in &tcp.served {
        assert!(
            *n >= CONNECTIONS / 6,
            "{name} served only {n} of {CONNECTIONS}: {:?}",
            tcp.served
        );
    }

    let udp = udp_requests(&topo.client, vip, UDP_PORT, DATAGRAMS);
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

    // The traffic really went through XDP: every TCP connection sends at least its
    // SYN, request and FIN to the VIP, every UDP exchange one datagram.
    let tx = lbd.counter("tx");
    let least = (CONNECTIONS * 3 + DATAGRAMS) as u64;
    assert!(
        tx >= least,
        "XDP_TX count {tx} < {least}; log:\n{}",
        lbd.log()
    );
    assert_eq!(lbd.counter("drop_malformed"), 0, "{}", lbd.log());
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "lbd exit status; log:\n{log}");
    assert!(!xdp_attached(&topo), "XDP still attached after lbd exited");
}

#[test]
fn dsr_ipv4_generic_mode_tcp_and_udp() {
    lb_testbed::needs_root!();
    steer_through_vip("generic", Family::V4);
}

#[test]
fn dsr_ipv4_native_mode_tcp_and_udp() {
    lb_testbed::needs_root!();
    steer_through_vip("native", Family::V4);
}

#[test]
fn dsr_ipv6_generic_mode_tcp_and_udp() {
    lb_testbed::needs_root!();
    steer_through_vip("generic", Family::V6);
}

#[test]
fn dsr_ipv6_native_mode_tcp_and_udp() {
    lb_testbed::needs_root!();
    steer_through_vip("native", Family::V6);
}

/// 1500 connections from known source ports: every one lands exactly where the
/// userspace model of the data plane (the same tables, computed without the kernel)
/// says, and the three backends' shares are within 10% of even.
#[test]
fn spread_is_even_and_every_flow_lands_where_the_model_says() {
    lb_testbed::needs_root!();
    use lb_common::{FlowKey, GlobalConfig};
    use lb_model::{
        dataplane::MapOps as _, dataplane::Programmer, dataplane::addr16,
        dataplane::memory::MemoryDataplane,
    };
    const FLOWS: u16 = 1500;
    let topo = Topology::build(&TopologyOptions::default());
    let _servers: Vec<Server> = topo
        .backends
        .iter()
        .enumerate()
        .map(|(i, ns)| Server::http(ns, VIP, HTTP_PORT, &format!("backend-{}", i + 1)))
        .collect();
    let text = config("generic", Family::V4, 3);
    let lbd = LbdProcess::start(&topo.lb, &text);

    // The model: the agent's own specs, programmed into the in-memory data plane.
    let parsed = lb_model::config::parse(&text, "model", lb_l7::check_routes).expect("config");
    let specs = lb_control::agent::service_specs(&parsed);
    let mut model = MemoryDataplane::default();
    model
        .set_config(GlobalConfig {
            hash_seed: parsed.node.hash_seed,
            ..GlobalConfig::default()
        })
        .expect("config");
    let mut programmer = Programmer::default();
    programmer
        .apply(&mut model, &specs, std::time::Instant::now())
        .expect("program");
    let web = &specs[0];
    let predicted = |sport: u16| -> String {
        let key = FlowKey {
            src: addr16(lb_testbed::topology::CLIENT_ADDR.into()),
            dst: addr16(VIP.into()),
            src_port_be: sport.to_be(),
            dst_port_be: HTTP_PORT.to_be(),
            proto: 6,
            ..FlowKey::default()
        };
        let choice = model.choose(&web.key, &key).expect("a backend");
        let addr = programmer.service(&web.key).expect("web").backends[choice.list_index as usize];
        let i = (0..3)
            .position(|i| IpAddr::from(backend_addr(i)) == addr)
            .expect("known backend");
        format!("backend-{}", i + 1)
    };

    let results = lb_testbed::traffic::http_requests_from(
        &topo.client,
        lb_testbed::topology::CLIENT_ADDR.into(),
        VIP.into(),
        HTTP_PORT,
        20000..20000 + FLOWS,
    );
    let mut counts = std::collections::BTreeMap::new();
    for (sport, result) in results {
        let served = result.unwrap_or_else(|e| panic!("{e}\nlbd log:\n{}", lbd.log()));
        assert_eq!(served, predicted(sport), "flow from port {sport}");
        *counts.entry(served).or_insert(0u32) += 1;
    }
    eprintln!("{FLOWS} flows over three backends: {counts:?}");
    let even = u32::from(FLOWS) / 3;
    for (name, n) in &counts {
        assert!(
            n.abs_diff(even) * 10 <= even,
            "{name} served {n}, more than 10% off {even}: {counts:?}"
        );
    }
    assert_eq!(counts.len(), 3, "{counts:?}");
}
