//! One million random and mutated packets through the real program (BPF_PROG_TEST_RUN).
//!
//! Properties, checked against an independent classifier written here from the policy
//! (not from the kernel code):
//! - a forwarded packet is TCP/UDP to a configured VIP, its bytes above layer 2 are
//!   untouched, and its MACs are a backend's and the node's;
//! - a passed packet is byte-for-byte unchanged;
//! - every packet the classifier calls "for a VIP" is forwarded, and nothing else is.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_common::ForwardingMode;
use lb_testbed::{
    fixture::{CLIENT_MAC, FixtureHost, HOST_MAC, XdpRig, action, backend, backend6},
    is_root,
    packet::{Packet, TCP, UDP},
};
use lb_userspace::dataplane::{ServiceSpec, vip_key};

const PACKETS: u64 = 1_000_000;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const VIP_ALL_PORTS: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

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

/// SplitMix64: small, fast, deterministic (a failure reproduces from its seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A plausible packet: to a VIP or not, IPv4 or IPv6, TCP or UDP, maybe VLAN-tagged.
fn plausible(rng: &mut Rng) -> Vec<u8> {
    let sport = rng.below(65536) as u16;
    let ports = [80u16, 53, 443, 22, rng.below(65536) as u16];
    let dport = ports[rng.below(ports.len() as u64) as usize];
    let payload = vec![0xabu8; rng.below(64) as usize];
    let v6 = rng.below(2) == 0;
    let tcp = rng.below(2) == 0;
    let p = if v6 {
        let dsts = [VIP6, CLIENT6];
        let dst = dsts[rng.below(2) as usize];
        let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x86dd);
        if tcp {
            Packet::tcp6(eth, CLIENT6, sport, dst, dport, &payload)
        } else {
            Packet::udp6(eth, CLIENT6, sport, dst, dport, &payload)
        }
    } else {
        let dsts = [VIP, VIP_ALL_PORTS, CLIENT];
        let dst = dsts[rng.below(3) as usize];
        let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
        if tcp {
            Packet::tcp4(eth, CLIENT, sport, dst, dport, &payload)
        } else {
            Packet::udp4(eth, CLIENT, sport, dst, dport, &payload)
        }
    };
    let p = if rng.below(4) == 0 {
        p.with_vlan(rng.below(4096) as u16)
    } else {
        p
    };
    p.bytes
}

/// Mutations: flip bytes, truncate, extend; or throw the structure away entirely.
fn mutate(rng: &mut Rng, mut bytes: Vec<u8>) -> Vec<u8> {
    match rng.below(6) {
        0 => bytes, // unmodified
        1 => {
            for _ in 0..=rng.below(4) {
                let i = rng.below(bytes.len() as u64) as usize;
                bytes[i] = rng.next() as u8;
            }
            bytes
        }
        2 => {
            // A byte in the headers the parser reads (first 80 bytes).
            let i = rng.below(bytes.len().min(80) as u64) as usize;
            bytes[i] = rng.next() as u8;
            bytes
        }
        3 => {
            let len = 14 + rng.below(bytes.len() as u64 - 13) as usize;
            bytes.truncate(len);
            bytes
        }
        4 => {
            bytes.extend((0..rng.below(32)).map(|_| rng.next() as u8));
            bytes
        }
        _ => (0..14 + rng.below(120)).map(|_| rng.next() as u8).collect(),
    }
}

/// The policy, independently: `Some(true)` for TCP/UDP to a configured VIP that must be
/// forwarded; `Some(false)` for traffic that must pass untouched; `None` for frames the
/// program may drop as malformed.
fn classify(b: &[u8]) -> Option<bool> {
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
                return Some(false);
            }
            let min = match ip[9] {
                6 => 20,
                17 => 8,
                _ => return Some(false),
            };
            let tot = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            if tot < 20 + min || l3 + tot > b.len() {
                return None;
            }
            let dst = IpAddr::from([ip[16], ip[17], ip[18], ip[19]]);
            (dst, ip[9], l3 + 20, l3 + tot)
        }
        0x86dd => {
            let ip = b.get(l3..l3 + 40)?;
            if ip[0] >> 4 != 6 {
                return None;
            }
            let min = match ip[6] {
                6 => 20,
                17 => 8,
                _ => return Some(false),
            };
            let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if plen < min || l3 + 40 + plen > b.len() {
                return None;
            }
            let mut a = [0u8; 16];
            a.copy_from_slice(&ip[24..40]);
            (IpAddr::from(a), ip[6], l3 + 40, l3 + 40 + plen)
        }
        _ => return Some(false),
    };
    let _ = ip_end;
    let ports = b.get(l4..l4 + 4)?;
    let dport = u16::from_be_bytes([ports[2], ports[3]]);
    let is_vip = vips()
        .iter()
        .any(|&(a, p, pr)| a == dst && pr == proto && (p == dport || p == 0));
    Some(is_vip)
}

fn backend_macs() -> Vec<[u8; 6]> {
    (0..3).flat_map(|i| [backend(i).1, backend6(i).1]).collect()
}

#[test]
fn a_million_random_and_mutated_packets() {
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    FixtureHost::new().run(|| {
        let mut rig = XdpRig::load(0x5eed);
        let b4: Vec<IpAddr> = (0..3).map(|i| backend(i).0).collect();
        let b6: Vec<IpAddr> = (0..3).map(|i| backend6(i).0).collect();
        for (addr, port, proto) in vips() {
            rig.program(ServiceSpec {
                name: format!("{addr}:{port}/{proto}"),
                key: vip_key(addr, port, proto),
                mode: ForwardingMode::Dsr,
                backends: if addr.is_ipv6() {
                    b6.clone()
                } else {
                    b4.clone()
                },
                table_size: None,
            });
        }
        let macs = backend_macs();
        let mut rng = Rng(0x1b_5eed);
        let (mut forwarded, mut passed, mut dropped) = (0u64, 0u64, 0u64);
        for n in 0..PACKETS {
            let base = plausible(&mut rng);
            let input = mutate(&mut rng, base);
            let out = rig.run(&input);
            let expect = classify(&input);
            let ctx = || format!("packet {n}: {input:02x?} -> action {}", out.action);
            match out.action {
                action::TX => {
                    forwarded += 1;
                    assert_eq!(
                        expect,
                        Some(true),
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
                    assert_ne!(
                        expect,
                        Some(true),
                        "a VIP packet was not forwarded: {}",
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
        eprintln!("{forwarded} forwarded, {passed} passed, {dropped} dropped");
        // The generator must exercise every outcome, or the test proves little.
        for (what, n) in [
            ("forwarded", forwarded),
            ("passed", passed),
            ("dropped", dropped),
        ] {
            assert!(n > PACKETS / 50, "only {n} packets {what}");
        }
    });
}
