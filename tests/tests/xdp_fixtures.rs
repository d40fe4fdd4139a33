//! Named packet fixtures through BPF_PROG_TEST_RUN: each asserts the verdict, the full
//! output bytes and the counters the packet moved.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_common::{Counter, FlowKey, ForwardingMode, VipKey};
use lb_model::{
    dataplane::FlowTable, dataplane::MapRead as _, dataplane::ServiceSpec, dataplane::addr16,
    dataplane::vip_key,
};
use lb_testbed::{
    fixture::{
        CLIENT_MAC, FixtureHost, HOST_MAC, Hook, Outcome, XdpRig, action, backend, backend6, mac_of,
    },
    packet::{Packet, TCP, UDP, flags},
};

const SEED: u32 = 0x5eed;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

fn eth() -> Packet {
    Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800)
}

fn eth6() -> Packet {
    Packet::eth(HOST_MAC, CLIENT_MAC, 0x86dd)
}

fn svc_at(vip: IpAddr, port: u16, proto: u8, backends: &[IpAddr]) -> ServiceSpec {
    ServiceSpec {
        name: format!("{vip}:{port}/{proto}"),
        key: vip_key(vip, port, proto),
        mode: ForwardingMode::Dsr,
        backends: backends.to_vec(),
        table_size: None,
        weights: Vec::new(),
        ports: Vec::new(),
    }
}

fn svc(port: u16, proto: u8, backends: &[IpAddr]) -> ServiceSpec {
    svc_at(IpAddr::V4(VIP), port, proto, backends)
}

fn three(f: fn(u8) -> (IpAddr, [u8; 6])) -> Vec<IpAddr> {
    (0..3).map(|i| f(i).0).collect()
}

fn flow(src: IpAddr, sport: u16, dst: IpAddr, dport: u16, proto: u8) -> FlowKey {
    FlowKey {
        src: addr16(src),
        dst: addr16(dst),
        src_port_be: sport.to_be(),
        dst_port_be: dport.to_be(),
        proto,
        _pad: 0,
        _pad2: 0,
    }
}

/// Runs `packet`, asserts the action, and that of the verdict counters exactly `reason`
/// (besides `Packets`) moved by one.
fn run_expect(rig: &mut XdpRig, packet: &[u8], want_action: u32, reason: Counter) -> Outcome {
    rig.expect(packet, want_action, reason)
}

fn assert_forwarded_to(out: &Outcome, input: &[u8], to: IpAddr) {
    let mut want = input.to_vec();
    want[0..6].copy_from_slice(&mac_of(to));
    want[6..12].copy_from_slice(&HOST_MAC);
    assert_eq!(out.bytes, want, "only the MACs change, to {to}");
}

/// Sends 30 new flows from `make(sport)` to `vip`; each must go to the table's choice,
/// all three backends must be used, and the stats must count packets, bytes and flows.
fn spread_case(
    rig: &mut XdpRig,
    vip: &VipKey,
    service_id: u32,
    make: impl Fn(u16) -> (Vec<u8>, FlowKey),
) {
    let mut seen = Vec::new();
    let mut bytes = 0;
    for sport in 40000..40030u16 {
        let (p, key) = make(sport);
        let out = run_expect(rig, &p, action::TX, Counter::Tx);
        let to = rig.expected_backend(vip, &key);
        assert_forwarded_to(&out, &p, to);
        if !seen.contains(&to) {
            seen.push(to);
        }
        bytes += p.len() as u64;
    }
    assert_eq!(seen.len(), 3, "30 flows reach all three backends: {seen:?}");
    let stats = rig
        .dataplane
        .maps()
        .vip_stats(service_id)
        .expect("vip stats");
    assert_eq!(
        (stats.packets, stats.bytes, stats.new_flows),
        (30, bytes, 30)
    );
}

fn ipv4_tcp_and_udp_go_to_the_table_choice() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &three(backend)));
        rig.program(svc(53, UDP, &three(backend)));
        let (vip, client) = (IpAddr::V4(VIP), IpAddr::V4(CLIENT));
        spread_case(&mut rig, &svc(80, TCP, &[]).key, 0, |sport| {
            let p = Packet::tcp4(eth(), CLIENT, sport, VIP, 80, b"GET / HTTP/1.1\r\n\r\n");
            (p.bytes, flow(client, sport, vip, 80, TCP))
        });
        spread_case(&mut rig, &svc(53, UDP, &[]).key, 1, |sport| {
            let p = Packet::udp4(eth(), CLIENT, sport, VIP, 53, b"query");
            (p.bytes, flow(client, sport, vip, 53, UDP))
        });
    });
}

fn ipv6_tcp_and_udp_go_to_the_table_choice() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        let (vip, client) = (IpAddr::V6(VIP6), IpAddr::V6(CLIENT6));
        rig.program(svc_at(vip, 443, TCP, &three(backend6)));
        rig.program(svc_at(vip, 53, UDP, &three(backend6)));
        spread_case(&mut rig, &vip_key(vip, 443, TCP), 0, |sport| {
            let p = Packet::tcp6(eth6(), CLIENT6, sport, VIP6, 443, b"hello");
            (p.bytes, flow(client, sport, vip, 443, TCP))
        });
        spread_case(&mut rig, &vip_key(vip, 53, UDP), 1, |sport| {
            let p = Packet::udp6(eth6(), CLIENT6, sport, VIP6, 53, b"query");
            (p.bytes, flow(client, sport, vip, 53, UDP))
        });
    });
}

fn vlan_tagged_frames_are_forwarded_with_their_tag() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &three(backend)));
        rig.program(svc_at(IpAddr::V6(VIP6), 80, TCP, &three(backend6)));
        let p = Packet::tcp4(eth(), CLIENT, 1000, VIP, 80, b"x").with_vlan(42);
        let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
        let key = flow(IpAddr::V4(CLIENT), 1000, IpAddr::V4(VIP), 80, TCP);
        assert_forwarded_to(
            &out,
            &p.bytes,
            rig.expected_backend(&svc(80, TCP, &[]).key, &key),
        );
        assert_eq!(&out.bytes[12..16], &[0x81, 0x00, 0x00, 42], "tag kept");

        let p = Packet::tcp6(eth6(), CLIENT6, 1000, VIP6, 80, b"x").with_vlan(7);
        let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
        let key = flow(IpAddr::V6(CLIENT6), 1000, IpAddr::V6(VIP6), 80, TCP);
        let vip = vip_key(IpAddr::V6(VIP6), 80, TCP);
        assert_forwarded_to(&out, &p.bytes, rig.expected_backend(&vip, &key));
    });
}

fn all_ports_vip_and_exact_port_precedence() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(0, TCP, &[backend(0).0]));
        rig.program(svc(80, TCP, &[backend(1).0]));
        for port in [1u16, 22, 8080, 65535] {
            let p = Packet::tcp4(eth(), CLIENT, 1000, VIP, port, b"");
            let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
            assert_forwarded_to(&out, &p.bytes, backend(0).0);
        }
        let p = Packet::tcp4(eth(), CLIENT, 1000, VIP, 80, b"");
        let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
        assert_forwarded_to(&out, &p.bytes, backend(1).0);
        // The all-ports entry is per protocol.
        let p = Packet::udp4(eth(), CLIENT, 1000, VIP, 22, b"");
        let out = run_expect(&mut rig, &p.bytes, action::PASS, Counter::PassNotVip);
        assert_eq!(out.bytes, p.bytes);
    });
}

fn l7_vips_go_to_the_stack_untouched() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        let mut l7 = svc(443, TCP, &three(backend));
        l7.mode = ForwardingMode::L7;
        rig.program(l7);
        let p = Packet::tcp4(eth(), CLIENT, 1000, VIP, 443, b"");
        let out = run_expect(&mut rig, &p.bytes, action::PASS, Counter::PassL7);
        assert_eq!(out.bytes, p.bytes);
    });
}

fn established_flows_keep_their_backend_across_table_changes() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        let vip = svc(80, TCP, &[]).key;
        rig.program(svc(80, TCP, &three(backend)));
        // Ten flows, each admitted by its SYN and established by its ACK.
        let flows: Vec<(Packet, IpAddr)> = (0..10u16)
            .map(|i| {
                let syn = Packet::tcp4(eth(), CLIENT, 2000 + i, VIP, 80, b"");
                let out = run_expect(&mut rig, &syn.bytes, action::TX, Counter::Tx);
                let key = flow(IpAddr::V4(CLIENT), 2000 + i, IpAddr::V4(VIP), 80, TCP);
                let to = rig.expected_backend(&vip, &key);
                assert_forwarded_to(&out, &syn.bytes, to);
                let ack = syn.with_tcp_flags(flags::ACK);
                let out = run_expect(&mut rig, &ack.bytes, action::TX, Counter::Tx);
                assert_forwarded_to(&out, &ack.bytes, to);
                (ack, to)
            })
            .collect();
        // Replace the whole backend set: new flows go to the new backend only...
        rig.program(svc(80, TCP, &[backend(3).0]));
        let fresh = Packet::tcp4(eth(), CLIENT, 3000, VIP, 80, b"");
        let out = run_expect(&mut rig, &fresh.bytes, action::TX, Counter::Tx);
        assert_forwarded_to(&out, &fresh.bytes, backend(3).0);
        // ...while every established flow stays where it was.
        for (p, to) in &flows {
            let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
            assert_forwarded_to(&out, &p.bytes, *to);
        }
        let stats = rig.dataplane.maps().vip_stats(0).expect("stats");
        assert_eq!((stats.packets, stats.new_flows), (31, 11));
        assert_eq!(rig.counter(Counter::EmbryonicPromoted), 10);
        let key = flow(IpAddr::V4(CLIENT), 2000, IpAddr::V4(VIP), 80, TCP);
        let maps = rig.dataplane.maps();
        assert!(
            maps.flow(FlowTable::Established, &key)
                .expect("read")
                .is_some()
        );
        assert!(
            maps.flow(FlowTable::Embryonic, &key)
                .expect("read")
                .is_none()
        );
    });
}

fn golden_flow_lands_on_a_fixed_backend() {
    lb_testbed::needs_root!();
    // Pins the whole chain (parse → hash → Maglev slot) to one value, independent of
    // the userspace copies: a change in either side's byte order fails here.
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &three(backend)));
        let p = Packet::tcp4(eth(), CLIENT, 40000, VIP, 80, b"");
        let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
        assert_forwarded_to(&out, &p.bytes, backend(GOLDEN_BACKEND).0);
    });
}
const GOLDEN_BACKEND: u8 = 0;

fn traffic_that_is_not_ours_passes_untouched() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &three(backend)));
        rig.program(svc_at(IpAddr::V6(VIP6), 80, TCP, &three(backend6)));
        let tcp_hdr = lb_testbed::packet::tcp_segment(1, 80, b"");
        let cases: Vec<(&str, Vec<u8>, Counter)> = vec![
            (
                "other port",
                Packet::tcp4(eth(), CLIENT, 1, VIP, 81, b"x").bytes,
                Counter::PassNotVip,
            ),
            (
                "udp to a tcp vip",
                Packet::udp4(eth(), CLIENT, 1, VIP, 80, b"x").bytes,
                Counter::PassNotVip,
            ),
            (
                "other address",
                Packet::tcp4(eth(), CLIENT, 1, Ipv4Addr::new(198, 18, 0, 2), 80, b"x").bytes,
                Counter::PassNotVip,
            ),
            (
                "icmp",
                Packet::ipv4_with(eth(), CLIENT, VIP, 1, vec![13, 0, 0, 0, 0, 1, 0, 1], 2, &[])
                    .bytes,
                Counter::PassNotVip,
            ),
            (
                "ipv6 other address",
                Packet::tcp6(eth6(), CLIENT6, 1, CLIENT6, 80, b"x").bytes,
                Counter::PassNotVip,
            ),
            (
                "ipv6 other port",
                Packet::tcp6(eth6(), CLIENT6, 1, VIP6, 81, b"x").bytes,
                Counter::PassNotVip,
            ),
            (
                "icmpv6",
                Packet::ipv6_with(
                    eth6(),
                    CLIENT6,
                    VIP6,
                    58,
                    &mut [135, 0, 0, 0, 0, 1, 0, 1],
                    2,
                )
                .bytes,
                Counter::PassNotVip,
            ),
            (
                "ipv6 hop-by-hop",
                Packet::ipv6_with(eth6(), CLIENT6, VIP6, 0, &mut [6, 0, 1, 4, 0, 0, 0, 0], 2).bytes,
                Counter::PassFragment,
            ),
            (
                "ipv6 fragment",
                Packet::ipv6_with(eth6(), CLIENT6, VIP6, 44, &mut [6, 0, 0, 1, 0, 0, 0, 1], 2)
                    .bytes,
                Counter::PassFragment,
            ),
            ("arp", arp_request(), Counter::PassNotIp),
            (
                "lldp",
                Packet::eth([0x01, 0x80, 0xc2, 0, 0, 0x0e], CLIENT_MAC, 0x88cc).bytes,
                Counter::PassNotIp,
            ),
            (
                "vlan arp",
                Packet {
                    bytes: arp_request(),
                }
                .with_vlan(5)
                .bytes,
                Counter::PassNotIp,
            ),
            (
                "ipv4 options",
                Packet::ipv4_with(eth(), CLIENT, VIP, TCP, tcp_hdr, 16, &[0x94, 0x04, 0, 0]).bytes,
                Counter::PassIpv4Options,
            ),
            (
                "first fragment",
                Packet::tcp4(eth(), CLIENT, 1, VIP, 80, b"x")
                    .with_frag(0x2000)
                    .bytes,
                Counter::PassFragment,
            ),
            (
                "later fragment",
                Packet::tcp4(eth(), CLIENT, 1, VIP, 80, b"x")
                    .with_frag(0x0010)
                    .bytes,
                Counter::PassFragment,
            ),
        ];
        for (name, bytes, reason) in cases {
            let out = run_expect(&mut rig, &bytes, action::PASS, reason);
            assert_eq!(out.bytes, bytes, "{name}: bytes untouched");
        }
    });
}

fn malformed_frames_are_dropped_and_counted() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &three(backend)));
        rig.program(svc_at(IpAddr::V6(VIP6), 80, TCP, &three(backend6)));
        // Every cut inside the IP header or the ports (BPF_PROG_TEST_RUN refuses frames
        // shorter than the Ethernet header, and for an skb an untagged IPv4 or IPv6
        // frame shorter than its IP header): IPv4, IPv6, and behind a VLAN tag.
        let v4 = Packet::tcp4(eth(), CLIENT, 1, VIP, 80, b"");
        let v6 = Packet::tcp6(eth6(), CLIENT6, 1, VIP6, 80, b"");
        let tagged = v4.clone().with_vlan(9);
        let tc = rig.hook == Hook::Tc;
        for (p, from, upto) in [
            (&v4, if tc { 34 } else { 15 }, 38),
            (&v6, if tc { 54 } else { 15 }, 58),
            (&tagged, 15, 42),
        ] {
            for len in from..upto {
                let cut = p.clone().truncated(len);
                run_expect(&mut rig, &cut.bytes, action::DROP, Counter::DropMalformed);
            }
        }
        // A multicast, reserved or broadcast source: no host sends from one, and a
        // backend's answer would go to a group (found by the fuzz test: such a packet
        // went out while its backend's next hop was cached, and was dropped when not).
        for src in [
            Ipv4Addr::new(224, 0, 0, 1),
            Ipv4Addr::new(240, 1, 2, 3),
            Ipv4Addr::BROADCAST,
        ] {
            let p = Packet::tcp4(eth(), src, 1, VIP, 80, b"");
            let out = run_expect(&mut rig, &p.bytes, action::DROP, Counter::DropMalformed);
            assert_eq!(out.bytes, p.bytes);
        }
        let group: Ipv6Addr = "ff02::1".parse().expect("address");
        let p = Packet::tcp6(eth6(), group, 1, VIP6, 80, b"");
        run_expect(&mut rig, &p.bytes, action::DROP, Counter::DropMalformed);
        let mut bad_version = v4.clone();
        bad_version.bytes[14] = 0x65;
        run_expect(
            &mut rig,
            &bad_version.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut short_ihl = v4.clone();
        short_ihl.bytes[14] = 0x44;
        run_expect(
            &mut rig,
            &short_ihl.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut long_total = v4.clone();
        long_total.bytes[16..18].copy_from_slice(&1500u16.to_be_bytes());
        long_total.fix_ipv4_checksum();
        run_expect(
            &mut rig,
            &long_total.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut short_total = v4.clone();
        short_total.bytes[16..18].copy_from_slice(&24u16.to_be_bytes());
        short_total.fix_ipv4_checksum();
        run_expect(
            &mut rig,
            &short_total.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut v6_bad_version = v6.clone();
        v6_bad_version.bytes[14] = 0x40;
        run_expect(
            &mut rig,
            &v6_bad_version.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut v6_long = v6.clone();
        v6_long.bytes[18..20].copy_from_slice(&1400u16.to_be_bytes());
        run_expect(
            &mut rig,
            &v6_long.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut v6_short = v6.clone();
        v6_short.bytes[18..20].copy_from_slice(&8u16.to_be_bytes());
        run_expect(
            &mut rig,
            &v6_short.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
    });
}

fn service_without_backends_drops() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &[]));
        let p = Packet::tcp4(eth(), CLIENT, 1, VIP, 80, b"");
        run_expect(&mut rig, &p.bytes, action::DROP, Counter::DropNoBackend);
    });
}

fn unresolved_unroutable_and_wrong_family_backends() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        let p = Packet::tcp4(eth(), CLIENT, 1, VIP, 80, b"");
        // On the connected subnet but with no neighbour entry: to the stack, once.
        rig.program(svc(80, TCP, &[IpAddr::V4(Ipv4Addr::new(198, 18, 0, 99))]));
        let out = run_expect(&mut rig, &p.bytes, action::PASS, Counter::PassNoNeighbour);
        assert_eq!(out.bytes, p.bytes);
        // No route at all (new source port: the first flow is pinned to .99 now).
        rig.program(svc(81, TCP, &[IpAddr::V4(Ipv4Addr::new(198, 19, 200, 1))]));
        let p = Packet::tcp4(eth(), CLIENT, 1, VIP, 81, b"");
        run_expect(&mut rig, &p.bytes, action::DROP, Counter::DropNoRoute);
        // DSR cannot send an IPv4 packet to an IPv6 backend.
        rig.program(svc(82, TCP, &[backend6(0).0]));
        let p = Packet::tcp4(eth(), CLIENT, 1, VIP, 82, b"");
        run_expect(&mut rig, &p.bytes, action::DROP, Counter::DropNoRoute);
    });
}

fn arp_request() -> Vec<u8> {
    let mut p = Packet::eth([0xff; 6], CLIENT_MAC, 0x0806);
    p.bytes.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    p.bytes.extend_from_slice(&CLIENT_MAC);
    p.bytes.extend_from_slice(&CLIENT.octets());
    p.bytes.extend_from_slice(&[0; 6]);
    p.bytes.extend_from_slice(&VIP.octets());
    p.bytes
}

/// ICMP echo request/reply bodies: type, code, checksum, id, sequence, payload.
fn echo_body(kind: u8) -> Vec<u8> {
    vec![kind, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g']
}

/// The ICMPv6 checksum over the pseudo header and `body` (zero when valid).
fn icmp6_sum(src: Ipv6Addr, dst: Ipv6Addr, body: &[u8]) -> u16 {
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&(body.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    lb_testbed::packet::checksum(&[&pseudo, body])
}

fn echo_requests_to_a_vip_are_answered() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &three(backend)));
        rig.program(svc_at(IpAddr::V6(VIP6), 80, TCP, &three(backend6)));

        let req = Packet::icmp4(eth(), CLIENT, VIP, echo_body(8));
        let out = run_expect(&mut rig, &req.bytes, action::TX, Counter::TxIcmpEchoReply);
        let want = Packet::icmp4(
            Packet::eth(CLIENT_MAC, HOST_MAC, 0x0800),
            VIP,
            CLIENT,
            echo_body(0),
        );
        assert_eq!(out.bytes, want.bytes, "the reply, checksums and all");
        assert_eq!(
            lb_testbed::packet::checksum(&[&out.bytes[34..]]),
            0,
            "ICMP checksum valid"
        );

        let req = Packet::ipv6_with(eth6(), CLIENT6, VIP6, 58, &mut echo_body(128), 2);
        let out = run_expect(&mut rig, &req.bytes, action::TX, Counter::TxIcmpEchoReply);
        let want = Packet::ipv6_with(
            Packet::eth(CLIENT_MAC, HOST_MAC, 0x86dd),
            VIP6,
            CLIENT6,
            58,
            &mut echo_body(129),
            2,
        );
        assert_eq!(out.bytes, want.bytes);
        assert_eq!(
            icmp6_sum(VIP6, CLIENT6, &out.bytes[54..]),
            0,
            "ICMPv6 checksum valid"
        );

        // Not a VIP, or not an echo request: untouched.
        for bytes in [
            Packet::ipv4_with(
                eth(),
                CLIENT,
                Ipv4Addr::new(198, 18, 0, 2),
                1,
                echo_body(8),
                2,
                &[],
            )
            .bytes,
            Packet::ipv4_with(eth(), CLIENT, VIP, 1, echo_body(0), 2, &[]).bytes,
            Packet::ipv6_with(eth6(), CLIENT6, CLIENT6, 58, &mut echo_body(128), 2).bytes,
            Packet::ipv4_with(eth(), CLIENT, VIP, 1, vec![3, 3, 0, 0, 0, 0, 0, 0], 2, &[]).bytes,
        ] {
            let out = run_expect(&mut rig, &bytes, action::PASS, Counter::PassNotVip);
            assert_eq!(out.bytes, bytes);
        }
    });
}

/// An ICMP "fragmentation needed" from a router, quoting the first bytes of a reply
/// the backend sent from the VIP to the client.
fn frag_needed(sport: u16) -> Packet {
    let quoted = Packet::tcp4(
        Packet::eth([0; 6], [0; 6], 0x0800),
        VIP,
        80,
        CLIENT,
        sport,
        b"",
    );
    let mut body = vec![3, 4, 0, 0, 0, 0, 0x05, 0xdc]; // next-hop MTU 1500
    body.extend_from_slice(&quoted.bytes[14..14 + 28]);
    Packet::ipv4_with(eth(), Ipv4Addr::new(198, 18, 0, 254), VIP, 1, body, 2, &[])
}

fn icmp_errors_go_to_the_backend_that_owns_the_flow() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &three(backend)));
        // Pin a flow, then move every new flow elsewhere: the error must follow the
        // flow's owner, not the new table.
        let syn = Packet::tcp4(eth(), CLIENT, 5555, VIP, 80, b"");
        let out = run_expect(&mut rig, &syn.bytes, action::TX, Counter::Tx);
        let owner_mac: [u8; 6] = out.bytes[..6].try_into().expect("mac");
        rig.program(svc(80, TCP, &[backend(3).0]));
        let err = frag_needed(5555);
        let out = run_expect(&mut rig, &err.bytes, action::TX, Counter::TxIcmpError);
        assert_eq!(&out.bytes[..6], &owner_mac, "to the flow's owner");
        assert_eq!(
            &out.bytes[12..],
            &err.bytes[12..],
            "the error itself is untouched"
        );
        // An unknown flow's error goes where the table sends that flow.
        let err = frag_needed(6666);
        let out = run_expect(&mut rig, &err.bytes, action::TX, Counter::TxIcmpError);
        assert_forwarded_to(&out, &err.bytes, backend(3).0);

        // IPv6 "packet too big".
        rig.program(svc_at(IpAddr::V6(VIP6), 80, TCP, &three(backend6)));
        let quoted = Packet::tcp6(eth6(), VIP6, 80, CLIENT6, 7777, b"");
        let mut body = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
        body.extend_from_slice(&quoted.bytes[14..14 + 48]);
        let ptb = Packet::ipv6_with(
            eth6(),
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xfe),
            VIP6,
            58,
            &mut body,
            2,
        );
        let out = run_expect(&mut rig, &ptb.bytes, action::TX, Counter::TxIcmpError);
        let key = flow(IpAddr::V6(CLIENT6), 7777, IpAddr::V6(VIP6), 80, TCP);
        let vip = vip_key(IpAddr::V6(VIP6), 80, TCP);
        assert_forwarded_to(&out, &ptb.bytes, rig.expected_backend(&vip, &key));

        // An error about a flow to no VIP passes.
        let mut other = frag_needed(5555);
        other.bytes[14 + 20 + 8 + 12..14 + 20 + 8 + 16].copy_from_slice(&[198, 18, 0, 2]);
        let out = run_expect(&mut rig, &other.bytes, action::PASS, Counter::PassNotVip);
        assert_eq!(out.bytes, other.bytes);
    });
}

/// The VIP-address prefilter only says "maybe": an address that shares a VIP's bit
/// still passes (the VIP map decides), a removed VIP's address passes again, and one
/// VIP leaving keeps the bit of another on its address.
fn the_vip_prefilter_is_only_a_maybe() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(svc(80, TCP, &three(backend)));
        rig.program(svc(53, UDP, &three(backend)));
        let vip16 = lb_model::dataplane::addr16(VIP.into());
        let slot = lb_common::maps::vip_filter_slot(&vip16);
        let twin = (0..=u32::from(u16::MAX))
            .map(|n| Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + n))
            .find(|a| {
                lb_common::maps::vip_filter_slot(&lb_model::dataplane::addr16((*a).into())) == slot
            })
            .expect("an address sharing the VIP's prefilter bit");
        let p = Packet::tcp4(eth(), CLIENT, 1, twin, 80, b"x").bytes;
        let out = run_expect(&mut rig, &p, action::PASS, Counter::PassNotVip);
        assert_eq!(
            out.bytes, p,
            "{twin} shares the bit of {VIP} and still passes untouched"
        );
        // One of the address's two services goes: the other still gets its traffic.
        rig.remove(&svc(53, UDP, &[]).key);
        let p = Packet::tcp4(eth(), CLIENT, 40000, VIP, 80, b"x").bytes;
        run_expect(&mut rig, &p, action::TX, Counter::Tx);
        // The last goes: its traffic passes.
        rig.remove(&svc(80, TCP, &[]).key);
        let out = run_expect(&mut rig, &p, action::PASS, Counter::PassNotVip);
        assert_eq!(out.bytes, p);
    });
}

/// The VIP cache (a direct-mapped copy of the VIP map the agent keeps) is only ever a
/// hit or a miss: two VIPs sharing a slot both reach their own service, whichever holds
/// the slot; a VIP that leaves passes again while its slot-mate keeps its traffic; and
/// a service's new backends take effect through the slot.
fn vip_cache_slots_never_answer_wrongly() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        let key_of = |a: Ipv4Addr| vip_key(IpAddr::V4(a), 80, TCP);
        let slot = lb_common::maps::vip_slot(&key_of(VIP));
        let twin = (1..=u32::from(u16::MAX))
            .map(|n| Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + n))
            .find(|a| lb_common::maps::vip_slot(&key_of(*a)) == slot)
            .expect("a VIP sharing the slot of VIP");
        let one = |i: u8| vec![backend(i).0];
        let reaches = |rig: &mut XdpRig, vip: Ipv4Addr, sport: u16, to: IpAddr| {
            let p = Packet::tcp4(eth(), CLIENT, sport, vip, 80, b"x").bytes;
            let out = run_expect(rig, &p, action::TX, Counter::Tx);
            assert_forwarded_to(&out, &p, to);
        };
        // Another port on each address keeps its prefilter bit set throughout, so the
        // slots, not the prefilter, answer for the VIPs that leave.
        rig.program(svc_at(VIP.into(), 53, UDP, &one(0)));
        rig.program(svc_at(twin.into(), 53, UDP, &one(0)));
        rig.program(svc_at(VIP.into(), 80, TCP, &one(0)));
        rig.program(svc_at(twin.into(), 80, TCP, &one(1)));
        // The twin's entry took the slot last; VIP is found in the VIP map.
        reaches(&mut rig, VIP, 40001, backend(0).0);
        reaches(&mut rig, twin, 40002, backend(1).0);
        // VIP's service changes: its new entry takes the slot, the twin goes to the map.
        rig.program(svc_at(VIP.into(), 80, TCP, &one(2)));
        reaches(&mut rig, VIP, 40003, backend(2).0);
        reaches(&mut rig, twin, 40004, backend(1).0);
        // The holder of the slot leaves: its traffic passes, the twin's still arrives.
        rig.remove(&key_of(VIP));
        let p = Packet::tcp4(eth(), CLIENT, 40005, VIP, 80, b"x").bytes;
        let out = run_expect(&mut rig, &p, action::PASS, Counter::PassNotVip);
        assert_eq!(out.bytes, p);
        reaches(&mut rig, twin, 40006, backend(1).0);
        rig.remove(&key_of(twin));
        let p = Packet::tcp4(eth(), CLIENT, 40007, twin, 80, b"x").bytes;
        run_expect(&mut rig, &p, action::PASS, Counter::PassNotVip);
    });
}

lb_testbed::hook_tests!(
    vip_cache_slots_never_answer_wrongly,
    the_vip_prefilter_is_only_a_maybe,
    ipv4_tcp_and_udp_go_to_the_table_choice,
    ipv6_tcp_and_udp_go_to_the_table_choice,
    vlan_tagged_frames_are_forwarded_with_their_tag,
    all_ports_vip_and_exact_port_precedence,
    l7_vips_go_to_the_stack_untouched,
    established_flows_keep_their_backend_across_table_changes,
    golden_flow_lands_on_a_fixed_backend,
    traffic_that_is_not_ours_passes_untouched,
    malformed_frames_are_dropped_and_counted,
    service_without_backends_drops,
    unresolved_unroutable_and_wrong_family_backends,
    echo_requests_to_a_vip_are_answered,
    icmp_errors_go_to_the_backend_that_owns_the_flow,
);
