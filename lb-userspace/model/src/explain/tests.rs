use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Instant,
};

use lb_common::{FlowEntry, ForwardingMode};

use super::*;
use crate::dataplane::{Programmer, ServiceSpec, memory::MemoryDataplane, vip_key};

const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);

fn backend(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10 + i))
}

fn spec(name: &str, port: u16, mode: ForwardingMode, backends: &[IpAddr]) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        key: vip_key(IpAddr::V4(VIP), port, 6),
        mode,
        backends: backends.to_vec(),
        table_size: None,
        weights: Vec::new(),
        ports: Vec::new(),
    }
}

fn programmed(specs: &[ServiceSpec]) -> MemoryDataplane {
    let mut dp = MemoryDataplane::default();
    dp.config.hash_seed = 0x5eed;
    Programmer::default()
        .apply(&mut dp, specs, Instant::now())
        .expect("apply");
    dp
}

fn tcp(sport: u16, dport: u16) -> Flow {
    Flow {
        protocol: Protocol::Tcp,
        src: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), sport),
        dst: SocketAddr::new(IpAddr::V4(VIP), dport),
    }
}

#[test]
fn new_flows_follow_the_table_the_data_plane_reads() {
    let backends = [backend(1), backend(2), backend(3)];
    let dp = programmed(&[spec("web", 80, ForwardingMode::Dsr, &backends)]);
    let key = vip_key(IpAddr::V4(VIP), 80, 6);
    let mut seen = std::collections::HashSet::new();
    for sport in 1000..1300 {
        let e = explain(&dp, tcp(sport, 80)).expect("explain");
        let choice = dp.choose(&key, &tcp(sport, 80).key()).expect("choice");
        let Decision::Table {
            backend,
            backend_id,
            slot,
            ..
        } = e.decision
        else {
            panic!("expected a table decision, got {e:?}");
        };
        assert_eq!((backend_id, slot), (choice.backend_id, choice.slot));
        assert_eq!(backend, from_addr16(dp.backends[&backend_id].addr));
        seen.insert(backend);
        assert_eq!(
            e.service.as_ref().map(|s| s.vip.as_str()),
            Some("198.18.100.1:80/tcp")
        );
    }
    assert_eq!(seen.len(), 3, "300 flows reach all three backends");
}

#[test]
fn conntrack_wins_over_the_table() {
    let dp0 = programmed(&[spec(
        "web",
        80,
        ForwardingMode::Nat,
        &[backend(1), backend(2)],
    )]);
    let mut dp = dp0;
    let flow = tcp(4242, 80);
    let table = explain(&dp, flow).expect("explain").backend();
    let other = dp
        .backends
        .iter()
        .find(|(_, b)| Some(from_addr16(b.addr)) != table)
        .map(|(id, _)| *id)
        .expect("second backend");
    dp.flows.insert(
        (FlowTable::Nat, flow.key()),
        FlowEntry {
            backend_id: other,
            service_id: 0,
            nat_port_be: 30000u16.to_be(),
            ..FlowEntry::default()
        },
    );
    let e = explain(&dp, flow).expect("explain");
    assert_eq!(
        e.decision,
        Decision::Conntrack {
            backend: from_addr16(dp.backends[&other].addr),
            backend_port: None,
            backend_id: other,
            admitted_by_service: 0,
            table: FlowTable::Nat,
            nat_port: Some(30000),
            nat_state: None,
            nat_expires_in_ms: None,
        }
    );
    assert_ne!(e.backend(), table);
}

#[test]
fn entries_of_an_earlier_owner_are_ignored_like_the_kernel_does() {
    let mut dp = programmed(&[spec(
        "web",
        80,
        ForwardingMode::Dsr,
        &[backend(1), backend(2)],
    )]);
    let flow = tcp(4343, 80);
    let table = explain(&dp, flow).expect("explain").backend();
    let (&id, record) = dp.backends.iter().next().expect("a backend");
    let stale = FlowEntry {
        backend_id: id,
        service_id: 0,
        backend_gen: record.generation.wrapping_add(1),
        ..FlowEntry::default()
    };
    dp.flows.insert((FlowTable::Established, flow.key()), stale);
    let e = explain(&dp, flow).expect("explain");
    assert!(
        matches!(
            e.decision,
            Decision::Table {
                stale_entry: true,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.backend(), table);
    // The same entry under another service id is not its own either.
    let other_service = FlowEntry {
        backend_gen: record.generation,
        service_id: 7,
        ..stale
    };
    dp.flows
        .insert((FlowTable::Established, flow.key()), other_service);
    let e = explain(&dp, flow).expect("explain");
    assert!(matches!(
        e.decision,
        Decision::Table {
            stale_entry: true,
            ..
        }
    ));
    // Its own: pinned. Half-open only: embryonic.
    let own = FlowEntry {
        service_id: 0,
        ..other_service
    };
    dp.flows.insert((FlowTable::Established, flow.key()), own);
    let e = explain(&dp, flow).expect("explain");
    assert!(matches!(e.decision, Decision::Conntrack { .. }), "{e:?}");
    dp.flows.clear();
    dp.flows.insert((FlowTable::Embryonic, flow.key()), own);
    let e = explain(&dp, flow).expect("explain");
    assert!(matches!(e.decision, Decision::Embryonic { .. }), "{e:?}");
    assert_eq!(e.backend(), Some(from_addr16(record.addr)));
}

#[test]
fn unknown_l7_all_ports_and_empty_services() {
    let dp = programmed(&[
        spec("proxy", 443, ForwardingMode::L7, &[backend(1)]),
        spec("any", 0, ForwardingMode::Dsr, &[backend(2)]),
    ]);
    assert_eq!(
        explain(&dp, tcp(1, 443)).expect("l7").decision,
        Decision::PassL7
    );
    let any = explain(&dp, tcp(1, 8080)).expect("all ports");
    assert_eq!(any.backend(), Some(backend(2)));
    assert_eq!(any.service.expect("matched").vip, "198.18.100.1:*/tcp");
    let udp = Flow {
        protocol: Protocol::Udp,
        ..tcp(1, 8080)
    };
    assert_eq!(explain(&dp, udp).expect("udp").decision, Decision::NotAVip);

    let empty = programmed(&[spec("empty", 80, ForwardingMode::Dsr, &[])]);
    assert_eq!(
        explain(&empty, tcp(1, 80)).expect("empty").decision,
        Decision::NoBackend
    );
}

#[test]
fn flows_round_trip_through_keys_and_json() {
    let v6 = Flow {
        protocol: Protocol::Udp,
        src: "[2001:db8::1]:5353".parse().expect("addr"),
        dst: SocketAddr::new(
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x100)),
            53,
        ),
    };
    for flow in [tcp(40000, 80), v6] {
        assert_eq!(Flow::from_key(&flow.key()), Some(flow));
    }
    let dp = programmed(&[spec("web", 80, ForwardingMode::Dsr, &[backend(1)])]);
    let e = explain(&dp, tcp(9, 80)).expect("explain");
    let json = serde_json::to_string(&e).expect("json");
    assert!(json.contains(r#""decision":"table""#), "{json}");
    let back: Explanation = serde_json::from_str(&json).expect("parse back");
    assert_eq!(back, e);
}
