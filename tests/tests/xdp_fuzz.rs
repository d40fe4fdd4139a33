//! One million random and mutated packets through the real program (BPF_PROG_TEST_RUN).
//!
//! Properties, checked against an independent classifier written here from the policy
//! (not from the kernel code):
//! - a forwarded packet is TCP/UDP to a configured VIP, its bytes above layer 2 are
//!   untouched, and its MACs are a backend's and the node's;
//! - a passed packet is byte-for-byte unchanged;
//! - every packet the classifier calls "for a VIP" is forwarded, and nothing else is;
//! - a `nat` TCP packet that is not a SYN is forwarded only if an earlier SYN of the
//!   same 5-tuple made its flow (the model tracks which did), else dropped: a flood of
//!   stray segments never claims a NAT port;
//! - an `ipip`/`gue` packet leaves as itself behind a well-formed outer header to a
//!   backend (only a SYN's MSS may be lowered, with its checksum kept valid).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_common::ForwardingMode;
use lb_model::{dataplane::ServiceSpec, dataplane::vip_key};
use lb_testbed::{
    fixture::{
        CLIENT_MAC, FixtureHost, HOST_MAC, NAT_ADDR, NAT_ADDR6, XdpRig, action, backend, backend6,
    },
    packet::{Packet, TCP, UDP, checksum, flags},
    rng::{self, RngExt as _, StdRng},
};

const PACKETS: u64 = 1_000_000;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const VIP_ALL_PORTS: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// The tunnel services' VIPs.
const VIP_TUN: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 3);
const VIP6_TUN: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 3);
const GUE_PORT: u16 = 6080;

/// (address, port or 0 for all, protocol) of every configured service.
fn vips() -> Vec<(IpAddr, u16, u8)> {
    vec![
        (VIP.into(), 80, TCP),
        (VIP.into(), 53, UDP),
        (VIP_ALL_PORTS.into(), 0, TCP),
        (VIP6.into(), 443, TCP),
        (VIP6.into(), 53, UDP),
    ]
}

/// Tunnel services: (address, port, protocol, GUE?, IPv6 backends?). IPv4 GUE goes to
/// IPv6 backends and IPv6 ipip to IPv4 ones, so the family changes are fuzzed too.
fn tunnel_vips() -> Vec<(IpAddr, u16, u8, bool, bool)> {
    vec![
        (VIP_TUN.into(), 80, TCP, false, false),
        (VIP_TUN.into(), 53, UDP, true, true),
        (VIP6_TUN.into(), 443, TCP, false, false),
        (VIP6_TUN.into(), 53, UDP, true, true),
    ]
}

/// `nat` services: (address, port, protocol).
fn nat_vips() -> Vec<(IpAddr, u16, u8)> {
    vec![(VIP.into(), 8080, TCP), (VIP6.into(), 8080, UDP)]
}

/// A plausible ICMP packet: an echo request, or an error quoting a reply from a VIP
/// (or from another address), over IPv4 or IPv6.
fn plausible_icmp(rng: &mut StdRng) -> Packet {
    let v6 = rng.random::<bool>();
    let to_vip = rng.random::<bool>();
    let echo = rng.random::<bool>();
    let sport = rng.random::<u16>();
    if v6 {
        let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x86dd);
        let vip = if to_vip { VIP6 } else { CLIENT6 };
        if echo {
            return Packet::ipv6_with(
                eth,
                CLIENT6,
                vip,
                58,
                &mut [128, 0, 0, 0, 0, 7, 0, 1, 1, 2],
                2,
            );
        }
        let quoted = Packet::tcp6(
            Packet::eth([0; 6], [0; 6], 0x86dd),
            vip,
            443,
            CLIENT6,
            sport,
            b"",
        );
        let mut body = vec![2, 0, 0, 0, 0, 0, 5, 0];
        body.extend_from_slice(&quoted.bytes[14..14 + 48]);
        Packet::ipv6_with(eth, CLIENT6, vip, 58, &mut body, 2)
    } else {
        let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
        let vip = if to_vip { VIP } else { CLIENT };
        if echo {
            return Packet::ipv4_with(
                eth,
                CLIENT,
                vip,
                1,
                vec![8, 0, 0, 0, 0, 7, 0, 1, 1, 2],
                2,
                &[],
            );
        }
        let quoted = Packet::tcp4(
            Packet::eth([0; 6], [0; 6], 0x0800),
            vip,
            80,
            CLIENT,
            sport,
            b"",
        );
        let mut body = vec![3, 4, 0, 0, 0, 0, 5, 0xdc];
        body.extend_from_slice(&quoted.bytes[14..14 + 28]);
        Packet::ipv4_with(eth, Ipv4Addr::new(198, 18, 0, 254), vip, 1, body, 2, &[])
    }
}

/// A plausible packet: to a VIP or not, IPv4 or IPv6, TCP, UDP or ICMP, maybe
/// VLAN-tagged.
fn plausible(rng: &mut StdRng) -> Vec<u8> {
    if rng.random_ratio(1, 5) {
        let p = plausible_icmp(rng);
        return if rng.random_ratio(1, 4) {
            p.with_vlan(rng.random_range(0..4096u16)).bytes
        } else {
            p.bytes
        };
    }
    let sport = rng.random::<u16>();
    let ports = [80u16, 53, 443, 8080, 22, rng.random::<u16>()];
    let mut dport = ports[rng.random_range(0..ports.len())];
    let payload = vec![0xabu8; rng.random_range(0..64usize)];
    let v6 = rng.random::<bool>();
    let tcp = rng.random::<bool>();
    // One in eight to a tunnel service (on a port it may serve), the rest as before.
    let tunnel = rng.random_ratio(1, 8);
    if tunnel {
        dport = ports[rng.random_range(0..3usize)];
    }
    let p = if v6 {
        let dsts = [VIP6, CLIENT6];
        let dst = if tunnel {
            VIP6_TUN
        } else {
            dsts[rng.random_range(0..2usize)]
        };
        let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x86dd);
        if tcp {
            Packet::tcp6(eth, CLIENT6, sport, dst, dport, &payload)
        } else {
            Packet::udp6(eth, CLIENT6, sport, dst, dport, &payload)
        }
    } else {
        let dsts = [VIP, VIP_ALL_PORTS, CLIENT];
        let dst = if tunnel {
            VIP_TUN
        } else {
            dsts[rng.random_range(0..3usize)]
        };
        let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
        if tcp {
            Packet::tcp4(eth, CLIENT, sport, dst, dport, &payload)
        } else {
            Packet::udp4(eth, CLIENT, sport, dst, dport, &payload)
        }
    };
    // A SYN (the builders' default) half of the time, else what follows a handshake.
    const AFTER: [u8; 5] = [
        flags::ACK,
        flags::ACK | flags::PSH,
        flags::FIN | flags::ACK,
        flags::RST,
        flags::SYN | flags::ACK,
    ];
    let p = if tcp && rng.random::<bool>() {
        p.with_tcp_flags(AFTER[rng.random_range(0..AFTER.len())])
    } else {
        p
    };
    let p = if rng.random_ratio(1, 4) {
        p.with_vlan(rng.random_range(0..4096u16))
    } else {
        p
    };
    p.bytes
}

/// The 5-tuple of a TCP/UDP frame the classifier accepted, for the `nat` flow model.
fn tuple(b: &[u8]) -> (Vec<u8>, u8, [u8; 4]) {
    let (l3, v6, proto, l4, _) = layout(b);
    let addrs = if v6 {
        b[l3 + 8..l3 + 40].to_vec()
    } else {
        b[l3 + 12..l3 + 20].to_vec()
    };
    let ports: [u8; 4] = b[l4..l4 + 4].try_into().expect("ports");
    (addrs, proto, ports)
}

/// Mutations: flip bytes, truncate, extend; or throw the structure away entirely.
fn mutate(rng: &mut StdRng, mut bytes: Vec<u8>) -> Vec<u8> {
    match rng.random_range(0..6u32) {
        0 => bytes, // unmodified
        1 => {
            for _ in 0..=rng.random_range(0..4u32) {
                let i = rng.random_range(0..bytes.len());
                bytes[i] = rng.random::<u8>();
            }
            bytes
        }
        2 => {
            // A byte in the headers the parser reads (first 80 bytes).
            let i = rng.random_range(0..bytes.len().min(80));
            bytes[i] = rng.random::<u8>();
            bytes
        }
        3 => {
            let len = 14 + rng.random_range(0..bytes.len() - 13);
            bytes.truncate(len);
            bytes
        }
        4 => {
            bytes.extend((0..rng.random_range(0..32u32)).map(|_| rng.random::<u8>()));
            bytes
        }
        _ => (0..14 + rng.random_range(0..120u32))
            .map(|_| rng.random::<u8>())
            .collect(),
    }
}

/// What the policy says must happen to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// TCP/UDP to a configured VIP, or an ICMP error about such a flow: forwarded,
    /// untouched above layer 2.
    Forward,
    /// TCP/UDP to a `nat` VIP: forwarded with source and destination translated.
    Nat,
    /// A TCP segment to a `nat` VIP that is not a SYN: forwarded and translated if its
    /// flow exists, dropped if not (the caller's model decides).
    NatIfKnown,
    /// TCP/UDP to a tunnel VIP: encapsulated (`true`: in UDP).
    Tunnel(bool),
    /// An echo request to a VIP address: answered in place.
    Echo,
    /// Everything else that is well formed: passed untouched.
    Pass,
}

fn is_vip(dst: IpAddr, port: u16, proto: u8) -> bool {
    vips()
        .iter()
        .any(|&(a, p, pr)| a == dst && pr == proto && (p == port || p == 0))
}

/// ICMP after a well-formed outer header: echo to a VIP address, or an error quoting a
/// VIP flow (the quote is backend → client, so the VIP is its source), sent on as the
/// flow's packets are (through the tunnel for a tunnel service).
fn classify_icmp(b: &[u8], l4: usize, dst: IpAddr, v6: bool) -> Fate {
    let (kind, code) = (b[l4], b[l4 + 1]);
    let (echo, error) = if v6 { (128, 2) } else { (8, 3) };
    if kind == echo && code == 0 {
        let tunnel = tunnel_vips().iter().any(|&(a, _, _, _, _)| a == dst);
        return if tunnel || vips().iter().chain(&nat_vips()).any(|&(a, _, _)| a == dst) {
            Fate::Echo
        } else {
            Fate::Pass
        };
    }
    if kind != error || (!v6 && code != 4) {
        return Fate::Pass;
    }
    let inner = l4 + 8;
    let quoted = if v6 {
        b.get(inner..inner + 44)
            .filter(|q| q[0] >> 4 == 6)
            .map(|q| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&q[8..24]);
                (IpAddr::from(a), q[6], u16::from_be_bytes([q[40], q[41]]))
            })
    } else {
        b.get(inner..inner + 24).filter(|q| q[0] == 0x45).map(|q| {
            (
                IpAddr::from([q[12], q[13], q[14], q[15]]),
                q[9],
                u16::from_be_bytes([q[20], q[21]]),
            )
        })
    };
    let tunnel = |vip: IpAddr, proto: u8, port: u16| {
        tunnel_vips()
            .iter()
            .find(|&&(a, p, pr, _, _)| a == vip && pr == proto && p == port)
            .map(|&(_, _, _, gue, _)| gue)
    };
    match quoted {
        Some((vip, proto, port)) if matches!(proto, 6 | 17) && is_vip(vip, port, proto) => {
            Fate::Forward
        }
        // An error about a tunnelled flow goes to its backend through the tunnel.
        Some((vip, proto, port)) if let Some(gue) = tunnel(vip, proto, port) => Fate::Tunnel(gue),
        _ => Fate::Pass,
    }
}

/// The policy, independently; `None` for frames the program may drop as malformed.
fn classify(b: &[u8]) -> Option<Fate> {
    let mut et = u16::from_be_bytes([b[12], b[13]]);
    let mut l3 = 14;
    if et == 0x8100 {
        if b.len() < 18 {
            return None;
        }
        et = u16::from_be_bytes([b[16], b[17]]);
        l3 = 18;
    }
    let (dst, proto, l4, ip_end) = match et {
        0x0800 => {
            let ip = b.get(l3..l3 + 20)?;
            let ihl = ip[0] & 0x0f;
            if ip[0] >> 4 != 4 || ihl < 5 {
                return None;
            }
            if ihl != 5 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
                return Some(Fate::Pass);
            }
            // No host sends from a multicast, reserved or broadcast address.
            if ip[12] >= 224 {
                return None;
            }
            let tot = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let dst = IpAddr::from([ip[16], ip[17], ip[18], ip[19]]);
            if ip[9] == 1 {
                if tot < 28 || l3 + tot > b.len() {
                    return None;
                }
                return Some(classify_icmp(b, l3 + 20, dst, false));
            }
            let min = match ip[9] {
                6 => 20,
                17 => 8,
                _ => return Some(Fate::Pass),
            };
            if tot < 20 + min || l3 + tot > b.len() {
                return None;
            }
            (dst, ip[9], l3 + 20, l3 + tot)
        }
        0x86dd => {
            let ip = b.get(l3..l3 + 40)?;
            if ip[0] >> 4 != 6 || ip[8] == 0xff {
                return None;
            }
            let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let mut a = [0u8; 16];
            a.copy_from_slice(&ip[24..40]);
            let dst = IpAddr::from(a);
            if ip[6] == 58 {
                if plen < 8 || l3 + 40 + plen > b.len() {
                    return None;
                }
                return Some(classify_icmp(b, l3 + 40, dst, true));
            }
            let min = match ip[6] {
                6 => 20,
                17 => 8,
                _ => return Some(Fate::Pass),
            };
            if plen < min || l3 + 40 + plen > b.len() {
                return None;
            }
            (dst, ip[6], l3 + 40, l3 + 40 + plen)
        }
        _ => return Some(Fate::Pass),
    };
    let _ = ip_end;
    let ports = b.get(l4..l4 + 4)?;
    let dport = u16::from_be_bytes([ports[2], ports[3]]);
    let nat = nat_vips()
        .iter()
        .any(|&(a, p, pr)| a == dst && pr == proto && p == dport);
    // TCP flags: byte 13 of the header (the length checks above put it in the frame).
    let syn = proto == TCP && b[l4 + 13] & (flags::SYN | flags::ACK) == flags::SYN;
    let tunnel = tunnel_vips()
        .iter()
        .find(|&&(a, p, pr, _, _)| a == dst && pr == proto && p == dport)
        .map(|&(_, _, _, gue, _)| gue);
    if let Some(gue) = tunnel {
        return Some(Fate::Tunnel(gue));
    }
    Some(if nat && (proto == UDP || syn) {
        Fate::Nat
    } else if nat {
        Fate::NatIfKnown
    } else if is_vip(dst, dport, proto) {
        Fate::Forward
    } else {
        Fate::Pass
    })
}

/// Checks an echo reply made in place from `input`: MACs and addresses swapped, the
/// type changed, nothing else but the ICMP checksum touched.
fn assert_echo_reply(input: &[u8], out: &[u8], ctx: &dyn Fn() -> String) {
    assert_eq!(out.len(), input.len(), "{}", ctx());
    assert_eq!(&out[..6], &input[6..12], "{}", ctx());
    assert_eq!(&out[6..12], &input[..6], "{}", ctx());
    let l3 = if input[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    };
    let v6 = input[l3] >> 4 == 6;
    let (src, dst, l4, reply) = if v6 {
        (l3 + 8, l3 + 24, l3 + 40, 129)
    } else {
        (l3 + 12, l3 + 16, l3 + 20, 0)
    };
    let n = if v6 { 16 } else { 4 };
    assert_eq!(&out[src..src + n], &input[dst..dst + n], "{}", ctx());
    assert_eq!(&out[dst..dst + n], &input[src..src + n], "{}", ctx());
    assert_eq!(out[l4], reply, "{}", ctx());
    let mut same_out = out.to_vec();
    let mut same_in = input.to_vec();
    for v in [&mut same_out, &mut same_in] {
        v[..12].fill(0);
        v[src..src + n].fill(0);
        v[dst..dst + n].fill(0);
        v[l4] = 0;
        v[l4 + 2..l4 + 4].fill(0);
    }
    assert_eq!(same_out, same_in, "only the reply fields change: {}", ctx());
}

fn backend_macs() -> Vec<[u8; 6]> {
    (0..3).flat_map(|i| [backend(i).1, backend6(i).1]).collect()
}

#[test]
fn a_million_random_and_mutated_packets() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(0x5eed);
        let b4: Vec<IpAddr> = (0..3).map(|i| backend(i).0).collect();
        let b6: Vec<IpAddr> = (0..3).map(|i| backend6(i).0).collect();
        rig.set_nat(20000, 40000);
        let modes = vips()
            .into_iter()
            .map(|v| (v, ForwardingMode::Dsr))
            .chain(nat_vips().into_iter().map(|v| (v, ForwardingMode::Nat)));
        for ((addr, port, proto), mode) in modes {
            rig.program(ServiceSpec {
                name: format!("{addr}:{port}/{proto}"),
                key: vip_key(addr, port, proto),
                mode,
                backends: if addr.is_ipv6() {
                    b6.clone()
                } else {
                    b4.clone()
                },
                table_size: None,
                weights: Vec::new(),
                ports: Vec::new(),
            });
        }
        for (addr, port, proto, gue, v6_backends) in tunnel_vips() {
            rig.program(ServiceSpec {
                name: format!("{addr}:{port}/{proto}"),
                key: vip_key(addr, port, proto),
                mode: if gue { ForwardingMode::Gue } else { ForwardingMode::Ipip },
                backends: if v6_backends { b6.clone() } else { b4.clone() },
                table_size: None,
                weights: Vec::new(),
                ports: Vec::new(),
            });
        }
        rig.set_tunnel(lb_common::TunnelConfig {
            source_v4: [198, 18, 200, 0],
            host_mask_v4: [0, 0, 0, 0xff],
            source_v6: [0x20, 0x01, 0x0d, 0xb8, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            host_mask_v6: [0xff; 8],
            gue_port_be: GUE_PORT.to_be(),
            ..lb_common::TunnelConfig::default()
        });
        // Nothing expires during the run, so the model of which nat flows exist stays
        // exact: a flow made by a SYN or a datagram lives on.
        rig.set_nat_timeouts(lb_common::NatTimeouts {
            tcp_ns: [3_600_000_000_000; lb_common::maps::NAT_TIMEOUT_SLOTS],
            udp_ns: 3_600_000_000_000,
        });
        let mut nat_flows = std::collections::HashSet::new();
        let macs = backend_macs();
        let mut rng = rng::seeded("a_million_random_and_mutated_packets");
        let (mut forwarded, mut passed, mut dropped, mut echoed, mut translated) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let mut stray_dropped = 0u64;
        let mut tunnelled = 0u64;
        let backends: Vec<IpAddr> = b4.iter().chain(&b6).copied().collect();
        for n in 0..PACKETS {
            let base = plausible(&mut rng);
            let input = mutate(&mut rng, base);
            let out = rig.run(&input);
            let mut expect = classify(&input);
            if expect == Some(Fate::Nat) {
                nat_flows.insert(tuple(&input));
            }
            if expect == Some(Fate::NatIfKnown) {
                let known = nat_flows.contains(&tuple(&input));
                expect = if known { Some(Fate::Nat) } else { None };
                if !known {
                    stray_dropped += u64::from(out.action == action::DROP);
                }
            }
            let ctx = || format!("packet {n}: {input:02x?} -> action {}", out.action);
            match out.action {
                action::TX if expect == Some(Fate::Echo) => {
                    echoed += 1;
                    assert_echo_reply(&input, &out.bytes, &ctx);
                }
                action::TX if matches!(expect, Some(Fate::Tunnel(_))) => {
                    tunnelled += 1;
                    let gue = expect == Some(Fate::Tunnel(true));
                    assert_tunnelled(&input, &out.bytes, gue, &backends, &ctx);
                }
                action::TX if expect == Some(Fate::Nat) => {
                    translated += 1;
                    assert_nat_forward(&input, &out.bytes, &macs, &ctx);
                }
                action::TX => {
                    forwarded += 1;
                    assert_eq!(
                        expect,
                        Some(Fate::Forward),
                        "forwarded a packet not for a VIP: {}",
                        ctx()
                    );
                    assert_eq!(out.bytes.len(), input.len(), "{}", ctx());
                    assert_eq!(
                        &out.bytes[12..],
                        &input[12..],
                        "changed above layer 2: {}",
                        ctx()
                    );
                    assert_eq!(&out.bytes[6..12], &HOST_MAC, "{}", ctx());
                    let dmac: [u8; 6] = out.bytes[..6].try_into().expect("6 bytes");
                    assert!(macs.contains(&dmac), "not a backend MAC: {}", ctx());
                }
                action::PASS => {
                    passed += 1;
                    assert_eq!(
                        expect,
                        Some(Fate::Pass),
                        "a packet for a VIP was passed: {}",
                        ctx()
                    );
                    assert_eq!(out.bytes, input, "a passed packet was modified: {}", ctx());
                }
                action::DROP => {
                    dropped += 1;
                    assert_eq!(expect, None, "dropped a well-formed packet: {}", ctx());
                }
                other => panic!("unexpected action {other}: {}", ctx()),
            }
        }
        eprintln!("{forwarded} forwarded, {tunnelled} tunnelled, {translated} nat-translated, {passed} passed, {dropped} dropped ({stray_dropped} nat strays), {echoed} echo replies");
        assert_eq!(
            rig.counter(lb_common::Counter::DropNatNoFlow),
            stray_dropped,
            "every nat stray was dropped as one, and nothing else"
        );
        // The generator must exercise every outcome, or the test proves little.
        for (what, n) in [
            ("translated", translated),
            ("tunnelled", tunnelled),
            ("answered", echoed),
            ("forwarded", forwarded),
            ("passed", passed),
            ("dropped", dropped),
            ("nat strays dropped", stray_dropped * 10),
        ] {
            assert!(n > PACKETS / 100, "only {n} packets {what}");
        }
    });
}

/// IP layout of a frame: (l3 offset, IPv6?, protocol, l4 offset, l4 length).
fn layout(b: &[u8]) -> (usize, bool, u8, usize, usize) {
    let l3 = if b[12..14] == [0x81, 0x00] { 18 } else { 14 };
    if b[l3] >> 4 == 6 {
        let len = usize::from(u16::from_be_bytes([b[l3 + 4], b[l3 + 5]]));
        (l3, true, b[l3 + 6], l3 + 40, len)
    } else {
        let len = usize::from(u16::from_be_bytes([b[l3 + 2], b[l3 + 3]])) - 20;
        (l3, false, b[l3 + 9], l3 + 20, len)
    }
}

/// Whether every checksum of a TCP/UDP frame is valid (UDP/IPv4 zero = none).
fn checksums_valid(b: &[u8]) -> bool {
    let (l3, v6, proto, l4, len) = layout(b);
    let seg = &b[l4..l4 + len];
    let mut pseudo = Vec::with_capacity(40);
    if v6 {
        pseudo.extend_from_slice(&b[l3 + 8..l3 + 40]);
        pseudo.extend_from_slice(&(len as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, proto]);
    } else {
        if checksum(&[&b[l3..l3 + 20]]) != 0 {
            return false;
        }
        pseudo.extend_from_slice(&b[l3 + 12..l3 + 20]);
        pseudo.extend_from_slice(&[0, proto]);
        pseudo.extend_from_slice(&(len as u16).to_be_bytes());
        if proto == UDP && seg[6..8] == [0, 0] {
            return true;
        }
    }
    checksum(&[&pseudo, seg]) == 0
}

/// A `nat` forward: from the NAT address to a backend's address and MAC, same length,
/// and valid checksums whenever the input had them.
fn assert_nat_forward(input: &[u8], out: &[u8], macs: &[[u8; 6]], ctx: &dyn Fn() -> String) {
    assert_eq!(out.len(), input.len(), "{}", ctx());
    assert_eq!(&out[6..12], &HOST_MAC, "{}", ctx());
    let dmac: [u8; 6] = out[..6].try_into().expect("6 bytes");
    assert!(macs.contains(&dmac), "not a backend MAC: {}", ctx());
    let (l3, v6, _, _, _) = layout(out);
    let (src, dst): (IpAddr, IpAddr) = if v6 {
        let s: [u8; 16] = out[l3 + 8..l3 + 24].try_into().expect("16");
        let d: [u8; 16] = out[l3 + 24..l3 + 40].try_into().expect("16");
        (s.into(), d.into())
    } else {
        let s: [u8; 4] = out[l3 + 12..l3 + 16].try_into().expect("4");
        let d: [u8; 4] = out[l3 + 16..l3 + 20].try_into().expect("4");
        (s.into(), d.into())
    };
    let nat: IpAddr = if v6 {
        NAT_ADDR6.into()
    } else {
        NAT_ADDR.into()
    };
    assert_eq!(src, nat, "source is the NAT address: {}", ctx());
    assert!(
        (0..3).any(|i| backend(i).0 == dst || backend6(i).0 == dst),
        "to a backend: {}",
        ctx()
    );
    if checksums_valid(input) {
        assert!(
            checksums_valid(out),
            "checksums broken by the translation: {}",
            ctx()
        );
    }
}

/// Checks a tunnelled frame made from `input`: the link header kept (VLAN tag
/// included, MACs the node's and a backend's next hop), a well-formed outer header to
/// one of `backends` (IPv4 checksum valid, lengths those of the inner packet, GUE's
/// port and source-port range), and the input's IP packet after it unchanged but for a
/// SYN's lowered MSS (whose TCP checksum must then still verify).
fn assert_tunnelled(
    input: &[u8],
    out: &[u8],
    gue: bool,
    backends: &[IpAddr],
    ctx: &dyn Fn() -> String,
) {
    let (l3, inner_v6, proto, l4, _) = layout(input);
    let vlan = l3 == 18;
    assert_eq!(&out[6..12], &HOST_MAC, "{}", ctx());
    if vlan {
        assert_eq!(&out[12..16], &input[12..16], "VLAN tag kept: {}", ctx());
    }
    let et = u16::from_be_bytes([out[l3 - 2], out[l3 - 1]]);
    let outer_v6 = match et {
        0x0800 => false,
        0x86dd => true,
        other => panic!("outer ether type {other:#06x}: {}", ctx()),
    };
    let ip_len = if outer_v6 { 40 } else { 20 };
    let overhead = ip_len + if gue { 8 } else { 0 };
    assert_eq!(out.len(), input.len() + overhead, "{}", ctx());
    let inner_len = if inner_v6 {
        40 + usize::from(u16::from_be_bytes([input[l3 + 4], input[l3 + 5]]))
    } else {
        usize::from(u16::from_be_bytes([input[l3 + 2], input[l3 + 3]]))
    };
    let next = if gue {
        UDP
    } else if inner_v6 {
        41
    } else {
        4
    };
    let o = &out[l3..];
    let dst: IpAddr = if outer_v6 {
        assert_eq!(o[0] >> 4, 6, "{}", ctx());
        assert_eq!(
            usize::from(u16::from_be_bytes([o[4], o[5]])),
            inner_len + overhead - 40
        );
        assert_eq!(o[6], next, "{}", ctx());
        let a: [u8; 16] = o[24..40].try_into().expect("16");
        a.into()
    } else {
        assert_eq!(o[0], 0x45, "{}", ctx());
        assert_eq!(
            usize::from(u16::from_be_bytes([o[2], o[3]])),
            inner_len + overhead
        );
        assert_eq!(o[9], next, "{}", ctx());
        assert_eq!(checksum(&[&o[..20]]), 0, "outer checksum: {}", ctx());
        IpAddr::from([o[16], o[17], o[18], o[19]])
    };
    assert!(
        backends.contains(&dst),
        "outer destination {dst} is no backend: {}",
        ctx()
    );
    let dmac: [u8; 6] = out[..6].try_into().expect("6");
    assert!(
        backend_macs().contains(&dmac),
        "not a backend MAC: {}",
        ctx()
    );
    if gue {
        let u = &o[ip_len..ip_len + 8];
        assert!(u16::from_be_bytes([u[0], u[1]]) >= 0xc000, "{}", ctx());
        assert_eq!(u16::from_be_bytes([u[2], u[3]]), GUE_PORT, "{}", ctx());
        assert_eq!(usize::from(u16::from_be_bytes([u[4], u[5]])), 8 + inner_len);
    }
    let inner_out = &out[l3 + overhead..];
    let inner_in = &input[l3..];
    if inner_out == inner_in {
        return;
    }
    // Only a SYN's MSS (and the TCP checksum with it) may differ.
    let t = l4 - l3;
    assert_eq!(proto, TCP, "a non-TCP inner packet changed: {}", ctx());
    let (mut a, mut b) = (inner_out.to_vec(), inner_in.to_vec());
    for v in [&mut a, &mut b] {
        v[t + 16..t + 18].fill(0);
        v[t + 22..t + 24].fill(0);
    }
    assert_eq!(a, b, "only the MSS changed: {}", ctx());
    assert_eq!(
        input[l4 + 13] & (flags::SYN | flags::ACK),
        flags::SYN,
        "{}",
        ctx()
    );
    assert_eq!((input[l4 + 20], input[l4 + 21]), (2, 4), "{}", ctx());
    let mss = u16::from_be_bytes([inner_out[t + 22], inner_out[t + 23]]);
    let most = 1500 - overhead - if inner_v6 { 60 } else { 40 };
    assert_eq!(usize::from(mss), most, "clamped to what fits: {}", ctx());
}
