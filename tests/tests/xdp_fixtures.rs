//! Named packet fixtures through BPF_PROG_TEST_RUN: each asserts the verdict, the full
//! output bytes and the counters the packet moved.

use std::net::Ipv4Addr;

use lb_common::{Counter, ForwardingMode, flow_hash_v4};
use lb_testbed::{
    fixture::{CLIENT_MAC, FixtureHost, HOST_MAC, Outcome, XdpRig, action, backend},
    is_root,
    packet::{Packet, TCP},
};
use lb_userspace::dataplane::{ServiceProgram, vip_key};

const SEED: u32 = 0x5eed;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

fn eth() -> Packet {
    Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800)
}

fn service(id: u32, port: u16, proto: u8, backends: &[Ipv4Addr]) -> ServiceProgram {
    ServiceProgram {
        key: vip_key(VIP, port, proto),
        service_id: id,
        mode: ForwardingMode::Dsr,
        backends: backends.to_vec(),
    }
}

fn three_backends() -> Vec<Ipv4Addr> {
    (0..3).map(|i| backend(i).0).collect()
}

/// The backend index the flow hash picks for a TCP/UDP flow to the VIP.
fn expected_backend(sport: u16, dport: u16, proto: u8, n: u32) -> u8 {
    let h = flow_hash_v4(
        SEED,
        u32::from_ne_bytes(CLIENT.octets()),
        u32::from_ne_bytes(VIP.octets()),
        sport.to_be(),
        dport.to_be(),
        proto,
    );
    (h % n) as u8
}

/// Runs `packet`, asserts the action, and that exactly `reason` (besides `Packets`)
/// moved by one.
fn run_expect(rig: &mut XdpRig, packet: &[u8], want_action: u32, reason: Counter) -> Outcome {
    let before = rig.counters();
    let out = rig.run(packet);
    assert_eq!(
        out.action,
        want_action,
        "action for a packet expected to count {}",
        reason.name()
    );
    let after = rig.counters();
    for c in Counter::ALL {
        let want = u64::from(c == reason || c == Counter::Packets);
        assert_eq!(
            after[c as usize] - before[c as usize],
            want,
            "counter {} (expected reason {})",
            c.name(),
            reason.name()
        );
    }
    out
}

fn assert_forwarded_to(out: &Outcome, input: &[u8], backend_index: u8) {
    let (_, mac) = backend(backend_index);
    let mut want = input.to_vec();
    want[0..6].copy_from_slice(&mac);
    want[6..12].copy_from_slice(&HOST_MAC);
    assert_eq!(
        out.bytes, want,
        "only the MACs change, to backend {backend_index}"
    );
}

#[test]
fn vip_tcp_and_udp_are_sent_to_the_hashed_backend() {
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(&service(0, 80, TCP, &three_backends()));
        rig.program(&service(1, 53, 17, &three_backends()));
        let mut seen = [false; 3];
        let mut bytes = 0;
        for sport in 40000..40030u16 {
            let p = Packet::tcp4(eth(), CLIENT, sport, VIP, 80, b"GET / HTTP/1.1\r\n\r\n");
            let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
            let b = expected_backend(sport, 80, TCP, 3);
            assert_forwarded_to(&out, &p.bytes, b);
            seen[b as usize] = true;
            bytes += p.bytes.len() as u64;
        }
        assert_eq!(seen, [true; 3], "30 flows reach all three backends");
        let stats = rig.dataplane.vip_stats(0).expect("vip stats");
        assert_eq!((stats.packets, stats.bytes), (30, bytes));

        let p = Packet::udp4(eth(), CLIENT, 5000, VIP, 53, b"query");
        let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
        assert_forwarded_to(&out, &p.bytes, expected_backend(5000, 53, 17, 3));
        assert_eq!(rig.dataplane.vip_stats(1).expect("vip stats").packets, 1);
    });
}

#[test]
fn golden_flow_lands_on_a_fixed_backend() {
    // Pins the whole chain (parse → hash → slot) to one value, independent of the
    // userspace copy of the hash: a change in either side's byte order fails here.
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(&service(0, 80, TCP, &three_backends()));
        let p = Packet::tcp4(eth(), CLIENT, 40000, VIP, 80, b"");
        let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
        assert_forwarded_to(&out, &p.bytes, GOLDEN_BACKEND);
    });
}
const GOLDEN_BACKEND: u8 = 2;

#[test]
fn traffic_that_is_not_ours_passes_untouched() {
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(&service(0, 80, TCP, &three_backends()));
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
                Packet::ipv4_with(eth(), CLIENT, VIP, 1, vec![8, 0, 0, 0, 0, 1, 0, 1], 2, &[])
                    .bytes,
                Counter::PassNotVip,
            ),
            ("arp", arp_request(), Counter::PassNotIpv4),
            ("ipv6", ipv6_frame(), Counter::PassNotIpv4),
            (
                "ipv4 options",
                Packet::ipv4_with(
                    eth(),
                    CLIENT,
                    VIP,
                    TCP,
                    tcp_header(1, 80),
                    16,
                    &[0x94, 0x04, 0, 0],
                )
                .bytes,
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

#[test]
fn malformed_frames_are_dropped_and_counted() {
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(&service(0, 80, TCP, &three_backends()));
        let good = Packet::tcp4(eth(), CLIENT, 1, VIP, 80, b"");
        // Every cut inside the IPv4 or TCP-ports region (BPF_PROG_TEST_RUN refuses
        // frames shorter than the Ethernet header).
        for len in 15..38 {
            let p = good.clone().truncated(len);
            run_expect(&mut rig, &p.bytes, action::DROP, Counter::DropMalformed);
        }
        let mut bad_version = good.clone();
        bad_version.bytes[14] = 0x65;
        run_expect(
            &mut rig,
            &bad_version.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut short_ihl = good.clone();
        short_ihl.bytes[14] = 0x44;
        run_expect(
            &mut rig,
            &short_ihl.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut long_total = good.clone();
        long_total.bytes[16..18].copy_from_slice(&1500u16.to_be_bytes());
        long_total.fix_ipv4_checksum();
        run_expect(
            &mut rig,
            &long_total.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
        let mut short_total = good.clone();
        short_total.bytes[16..18].copy_from_slice(&24u16.to_be_bytes());
        short_total.fix_ipv4_checksum();
        run_expect(
            &mut rig,
            &short_total.bytes,
            action::DROP,
            Counter::DropMalformed,
        );
    });
}

#[test]
fn service_without_backends_drops() {
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(&service(0, 80, TCP, &[]));
        let p = Packet::tcp4(eth(), CLIENT, 1, VIP, 80, b"");
        run_expect(&mut rig, &p.bytes, action::DROP, Counter::DropNoBackend);
    });
}

#[test]
fn unresolved_and_unroutable_backends() {
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        // On the connected subnet but with no neighbour entry: to the stack, once.
        rig.program(&service(0, 80, TCP, &[Ipv4Addr::new(198, 18, 0, 99)]));
        let p = Packet::tcp4(eth(), CLIENT, 1, VIP, 80, b"");
        let out = run_expect(&mut rig, &p.bytes, action::PASS, Counter::PassNoNeighbour);
        assert_eq!(out.bytes, p.bytes);
        // No route at all.
        rig.program(&service(0, 80, TCP, &[Ipv4Addr::new(198, 19, 200, 1)]));
        run_expect(&mut rig, &p.bytes, action::DROP, Counter::DropNoRoute);
    });
}

#[test]
fn table_swap_moves_new_packets_to_the_new_table() {
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(SEED);
        rig.program(&service(0, 80, TCP, &[backend(0).0]));
        let p = Packet::tcp4(eth(), CLIENT, 1234, VIP, 80, b"");
        let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
        assert_forwarded_to(&out, &p.bytes, 0);
        rig.program(&service(0, 80, TCP, &[backend(3).0]));
        let out = run_expect(&mut rig, &p.bytes, action::TX, Counter::Tx);
        assert_forwarded_to(&out, &p.bytes, 3);
    });
}

fn tcp_header(sport: u16, dport: u16) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xfa, 0xf0, 0, 0, 0, 0]);
    h
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

fn ipv6_frame() -> Vec<u8> {
    let mut p = Packet::eth(HOST_MAC, CLIENT_MAC, 0x86dd);
    p.bytes.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
    p.bytes
        .extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
    p.bytes
        .extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
    p.bytes.extend_from_slice(&[0, 1, 0, 80, 0, 8, 0, 0]);
    p.bytes
}
