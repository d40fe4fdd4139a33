//! `explain` agrees with the data plane: for 10,000 random flows the backend it
//! predicts from the pinned maps (opened as `lbctl` opens them) is the one the real
//! XDP program (BPF_PROG_TEST_RUN) sends the packet to — for new flows, for the same
//! flows once conntrack holds them, and after the tables changed under them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use lb_common::ForwardingMode;
use lb_dataplane::maps::MapSet;
use lb_model::{
    dataplane::ServiceSpec, dataplane::vip_key, explain::Decision, explain::Flow,
    explain::Protocol, explain::explain,
};
use lb_testbed::{
    fixture::{CLIENT_MAC, FixtureHost, HOST_MAC, XdpRig, action, backend, backend6},
    lbd::{BpfFs, TempDir},
    packet::{
        Packet,
        flags::{ACK, SYN},
    },
    rng::{self, Rng as _, StdRng},
};

const FLOWS: usize = 10_000;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const VIP_ALL_PORTS: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1);

fn spec(
    name: &str,
    vip: IpAddr,
    port: u16,
    proto: Protocol,
    mode: ForwardingMode,
    backends: Vec<IpAddr>,
    weights: Vec<u32>,
) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        key: vip_key(vip, port, proto.number()),
        mode,
        backends,
        table_size: None,
        weights,
        ports: Vec::new(),
    }
}

fn v4(range: std::ops::Range<u8>) -> Vec<IpAddr> {
    range.map(|i| backend(i).0).collect()
}

fn services(changed: bool) -> Vec<ServiceSpec> {
    let (web, web_w, nat) = if changed {
        (v4(0..3), vec![3, 1, 1], v4(1..4))
    } else {
        (v4(0..4), vec![1, 2, 3, 1], v4(0..4))
    };
    vec![
        spec(
            "web",
            VIP.into(),
            80,
            Protocol::Tcp,
            ForwardingMode::Dsr,
            web,
            web_w,
        ),
        spec(
            "dns6",
            VIP6.into(),
            53,
            Protocol::Udp,
            ForwardingMode::Dsr,
            (0..4).map(|i| backend6(i).0).collect(),
            Vec::new(),
        ),
        spec(
            "any",
            VIP_ALL_PORTS.into(),
            0,
            Protocol::Tcp,
            ForwardingMode::Dsr,
            v4(0..3),
            Vec::new(),
        ),
        spec(
            "natted",
            VIP.into(),
            8080,
            Protocol::Tcp,
            ForwardingMode::Nat,
            nat,
            Vec::new(),
        ),
    ]
}

/// A random flow: mostly to a service, some to a port no service has.
/// Random flows, none drawn twice: a flow drawn again would find the state its first
/// packets left (a half-open or established entry) where the checks expect none.
#[derive(Default)]
struct DistinctFlows(std::collections::HashSet<(bool, SocketAddr, SocketAddr)>);

impl DistinctFlows {
    fn draw(&mut self, rng: &mut StdRng) -> Flow {
        loop {
            let f = random_flow(rng);
            if self.0.insert((f.protocol == Protocol::Tcp, f.src, f.dst)) {
                return f;
            }
        }
    }
}

fn random_flow(rng: &mut StdRng) -> Flow {
    let r = rng.next_u64();
    let sport = 1024 + (r % 60_000) as u16;
    let host = (r >> 16) as u16;
    let client4 = IpAddr::V4(Ipv4Addr::new(
        198,
        18,
        2 + (host >> 8) as u8 % 200,
        host as u8,
    ));
    let client6 = IpAddr::V6(Ipv6Addr::new(
        0x2001,
        0xdb8,
        1,
        0,
        0,
        0,
        host,
        (r >> 32) as u16,
    ));
    let (protocol, src, dst) = match (r >> 40) % 20 {
        0..=5 => (Protocol::Tcp, client4, SocketAddr::new(VIP.into(), 80)),
        6..=10 => (Protocol::Udp, client6, SocketAddr::new(VIP6.into(), 53)),
        11..=14 => (
            Protocol::Tcp,
            client4,
            SocketAddr::new(VIP_ALL_PORTS.into(), 1 + (r >> 48) as u16 % 9000),
        ),
        15..=18 => (Protocol::Tcp, client4, SocketAddr::new(VIP.into(), 8080)),
        _ => (Protocol::Udp, client4, SocketAddr::new(VIP.into(), 9999)),
    };
    Flow {
        protocol,
        src: SocketAddr::new(src, sport),
        dst,
    }
}

/// A packet of `flow`: for TCP with `tcp_flags` (a SYN opens the flow, an ACK follows).
fn packet(flow: &Flow, tcp_flags: u8) -> Vec<u8> {
    let (sp, dp) = (flow.src.port(), flow.dst.port());
    match (flow.protocol, flow.src.ip(), flow.dst.ip()) {
        (Protocol::Tcp, IpAddr::V4(s), IpAddr::V4(d)) => {
            Packet::tcp4(
                Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800),
                s,
                sp,
                d,
                dp,
                b"x",
            )
            .with_tcp_flags(tcp_flags)
            .bytes
        }
        (Protocol::Udp, IpAddr::V4(s), IpAddr::V4(d)) => {
            Packet::udp4(
                Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800),
                s,
                sp,
                d,
                dp,
                b"x",
            )
            .bytes
        }
        (Protocol::Udp, IpAddr::V6(s), IpAddr::V6(d)) => {
            Packet::udp6(
                Packet::eth(HOST_MAC, CLIENT_MAC, 0x86dd),
                s,
                sp,
                d,
                dp,
                b"x",
            )
            .bytes
        }
        other => panic!("no packet builder for {other:?}"),
    }
}

/// Where the program sent a forwarded packet: the backend whose MAC it now carries
/// (dsr), or its new destination address (nat).
fn sent_to(bytes: &[u8], nat: bool) -> IpAddr {
    if nat {
        let d: [u8; 4] = bytes[30..34].try_into().expect("ipv4 dst");
        return IpAddr::from(d);
    }
    let mac: [u8; 6] = bytes[..6].try_into().expect("dst mac");
    (0..4)
        .flat_map(|i| [backend(i), backend6(i)])
        .find(|(_, m)| *m == mac)
        .map(|(a, _)| a)
        .unwrap_or_else(|| panic!("forwarded to unknown MAC {mac:02x?}"))
}

/// Decisions of one pass over the flows.
#[derive(Debug, Default)]
struct Counts {
    table: usize,
    embryonic: usize,
    conntrack: usize,
}

/// Runs every flow's packet (TCP ones with `tcp_flags`); checks explain's prediction
/// (made before the packet) against where the packet went.
fn check(rig: &mut XdpRig, pinned: &MapSet, flows: &[Flow], tcp_flags: u8, phase: &str) -> Counts {
    let mut counts = Counts::default();
    for flow in flows {
        let e = explain(pinned, *flow).expect("explain");
        let out = rig.run(&packet(flow, tcp_flags));
        let nat = e.service.as_ref().is_some_and(|s| s.mode == "nat");
        match &e.decision {
            Decision::NotAVip => {
                assert_eq!(out.action, action::PASS, "{phase}: {flow:?}");
                continue;
            }
            Decision::Table { .. } => counts.table += 1,
            Decision::Embryonic { .. } => counts.embryonic += 1,
            Decision::Conntrack { nat_port, .. } => {
                counts.conntrack += 1;
                if nat {
                    let sport = u16::from_be_bytes([out.bytes[34], out.bytes[35]]);
                    assert_eq!(Some(sport), *nat_port, "{phase}: NAT port of {flow:?}");
                }
            }
            other => panic!("{phase}: unexpected {other:?} for {flow:?}"),
        }
        assert_eq!(
            out.action,
            action::TX,
            "{phase}: {flow:?} was not forwarded"
        );
        let predicted = e.backend().expect("a backend");
        assert_eq!(
            sent_to(&out.bytes, nat),
            predicted,
            "{phase}: {flow:?}: explain said {e:?}"
        );
    }
    counts
}

#[test]
fn explain_predicts_the_kernels_choice_for_10000_flows() {
    lb_testbed::needs_root!();
    let host = FixtureHost::new();
    let dir = TempDir::new("explain");
    let bpffs = BpfFs::mount(&dir.path().join("bpf"));
    let pins = bpffs.path().join("lb");
    host.run(move || {
        let mut rig = XdpRig::load_pinned(0x5eed, Some(&pins));
        rig.set_nat(30000, 20000);
        for s in services(false) {
            rig.program(s);
        }
        let pinned = MapSet::open_pinned(&pins).expect("open pinned maps");
        let mut rng = rng::seeded("explain_predicts_the_kernels_choice_for_10000_flows");
        let mut drawn = DistinctFlows::default();
        let flows: Vec<Flow> = (0..FLOWS).map(|_| drawn.draw(&mut rng)).collect();

        // New flows (a SYN, a first datagram): every prediction comes from the table.
        let c = check(&mut rig, &pinned, &flows, SYN, "new flows");
        assert_eq!((c.conntrack, c.embryonic), (0, 0), "{c:?}");
        assert!(c.table > FLOWS * 9 / 10, "{c:?}");
        // The second packet (the handshake's ACK, a second datagram): dsr flows are
        // half-open until it passes, nat flows were made by their SYN.
        let c = check(&mut rig, &pinned, &flows, ACK, "second packet");
        assert_eq!(c.table, 0, "every forwarded flow has an entry: {c:?}");
        assert!(c.embryonic > FLOWS / 2 && c.conntrack > FLOWS / 10, "{c:?}");
        // From the third packet on, every flow is established.
        let c = check(&mut rig, &pinned, &flows, ACK, "established");
        assert_eq!((c.table, c.embryonic), (0, 0), "{c:?}");
        assert!(c.conntrack > FLOWS * 9 / 10, "{c:?}");

        // Tables change (a backend leaves web, weights move, natted shifts): flows
        // already established stay where conntrack pins them, even where the new
        // table points elsewhere; new flows follow the new table.
        for s in services(true) {
            rig.program(s);
        }
        let removed = backend(3).0;
        let pinned_to_removed = flows
            .iter()
            .filter(|f| f.dst.port() == 80)
            .filter(|f| explain(&pinned, **f).expect("explain").backend() == Some(removed))
            .count();
        assert!(
            pinned_to_removed > 100,
            "{pinned_to_removed} web flows on the removed backend"
        );
        let c = check(&mut rig, &pinned, &flows, ACK, "after the change");
        assert_eq!((c.table, c.embryonic), (0, 0), "{c:?}");
        let fresh: Vec<Flow> = (0..FLOWS / 2).map(|_| drawn.draw(&mut rng)).collect();
        let c = check(&mut rig, &pinned, &fresh, SYN, "new flows after the change");
        assert!(c.table > FLOWS / 2 * 9 / 10, "{c:?}");
        // A TCP packet that is not a SYN and has no flow: dsr forwards it by the table
        // without state, nat drops it; explain says which.
        let strays: Vec<Flow> = (0..FLOWS / 10)
            .map(|_| drawn.draw(&mut rng))
            .filter(|f| f.protocol == Protocol::Tcp)
            .collect();
        for flow in &strays {
            let e = explain(&pinned, *flow).expect("explain");
            let Decision::Table { syn_only, .. } = e.decision else {
                panic!("{flow:?}: {e:?}");
            };
            let out = rig.run(&packet(flow, ACK));
            if syn_only {
                assert_eq!(out.action, action::DROP, "nat stray {flow:?}");
            } else {
                assert_eq!(out.action, action::TX, "dsr stray {flow:?}");
                assert_eq!(sent_to(&out.bytes, false), e.backend().expect("backend"));
            }
            let again = explain(&pinned, *flow).expect("explain");
            assert!(
                matches!(again.decision, Decision::Table { .. }),
                "a stray leaves no state: {again:?}"
            );
        }
    });
}
