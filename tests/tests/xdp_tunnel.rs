//! `ipip` and `gue` through BPF_PROG_TEST_RUN: every output byte of the encapsulated
//! frame against one built here from the input (outer checksums computed from
//! scratch), IPv4 and IPv6 outer and inner headers (4-in-4, 6-in-6, 4-in-6, 6-in-4),
//! TCP and UDP, VLAN, routed backends, the outer source spread, the MTU answers
//! (ICMP "fragmentation needed" / "packet too big", MSS clamp) and established flows
//! across a table change.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_common::{Counter, ForwardingMode, TunnelConfig};
use lb_model::dataplane::{ServiceSpec, addr16, vip_key};
use lb_testbed::{
    fixture::{
        CLIENT_MAC, FixtureHost, HOST_MAC, Hook, ROUTED_V4, ROUTED_V6, ROUTER_MAC, XdpRig, action,
        backend, backend6, mac_of, with_hook,
    },
    packet::{Packet, TCP, UDP, checksum, flags},
};

const SEED: u32 = 0x7e11;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// The outer IPv4 sources: 198.18.200.0/24.
const SRC4: Ipv4Addr = Ipv4Addr::new(198, 18, 200, 0);
/// The outer IPv6 sources: 2001:db8:200::/64.
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x200, 0, 0, 0, 0, 0);
const GUE_PORT: u16 = 6080;

/// Outer sources from /24 and /64 prefixes, GUE on [`GUE_PORT`].
fn tunnel() -> TunnelConfig {
    TunnelConfig {
        source_v4: SRC4.octets(),
        host_mask_v4: [0, 0, 0, 0xff],
        source_v6: SRC6.octets(),
        host_mask_v6: [0xff; 8],
        gue_port_be: GUE_PORT.to_be(),
        ..TunnelConfig::default()
    }
}

fn eth4() -> Packet {
    Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800)
}

fn eth6() -> Packet {
    Packet::eth(HOST_MAC, CLIENT_MAC, 0x86dd)
}

fn spec(
    vip: IpAddr,
    port: u16,
    proto: u8,
    mode: ForwardingMode,
    backends: &[IpAddr],
) -> ServiceSpec {
    ServiceSpec {
        name: format!("{vip}:{port}/{proto}"),
        key: vip_key(vip, port, proto),
        mode,
        backends: backends.to_vec(),
        table_size: None,
        weights: Vec::new(),
        ports: Vec::new(),
    }
}

fn rig(services: Vec<ServiceSpec>) -> XdpRig {
    let mut rig = XdpRig::load(SEED);
    rig.set_tunnel(tunnel());
    for s in services {
        rig.program(s);
    }
    rig
}

fn flow_key(p: &[u8], l3: usize) -> lb_common::FlowKey {
    let v6 = p[l3] >> 4 == 6;
    let (src, dst, proto, l4): (IpAddr, IpAddr, u8, usize) = if v6 {
        let s: [u8; 16] = p[l3 + 8..l3 + 24].try_into().expect("16");
        let d: [u8; 16] = p[l3 + 24..l3 + 40].try_into().expect("16");
        (
            Ipv6Addr::from(s).into(),
            Ipv6Addr::from(d).into(),
            p[l3 + 6],
            l3 + 40,
        )
    } else {
        let s: [u8; 4] = p[l3 + 12..l3 + 16].try_into().expect("4");
        let d: [u8; 4] = p[l3 + 16..l3 + 20].try_into().expect("4");
        (
            Ipv4Addr::from(s).into(),
            Ipv4Addr::from(d).into(),
            p[l3 + 9],
            l3 + 20,
        )
    };
    lb_common::FlowKey {
        src: addr16(src),
        dst: addr16(dst),
        src_port_be: u16::from_be_bytes([p[l4], p[l4 + 1]]).to_be(),
        dst_port_be: u16::from_be_bytes([p[l4 + 2], p[l4 + 3]]).to_be(),
        proto,
        _pad: 0,
        _pad2: 0,
    }
}

/// What the encapsulated frame of `input` (its IP packet at `l3`) must be, with the
/// outer source, flow label and GUE source port the program chose (checked apart).
struct Outer {
    /// The backend (outer destination).
    to: IpAddr,
    /// The next hop's MAC.
    dmac: [u8; 6],
    /// `gue`: encapsulated in UDP.
    gue: bool,
}

/// Builds the expected frame from `input` and the values read from `got` that the
/// program may choose (outer source, flow label, UDP source port); asserts those lie
/// where they must.
fn expected(input: &[u8], l3: usize, o: &Outer, got: &[u8]) -> Vec<u8> {
    let inner = &input[l3..];
    let inner_v6 = inner[0] >> 4 == 6;
    let tos = if inner_v6 {
        (inner[0] << 4) | (inner[1] >> 4)
    } else {
        inner[1]
    };
    let mut out = Vec::new();
    out.extend_from_slice(&o.dmac);
    out.extend_from_slice(&HOST_MAC);
    if l3 == 18 {
        out.extend_from_slice(&input[12..16]);
    }
    let udp_len = if o.gue { 8 } else { 0 };
    let proto = match (o.gue, inner_v6) {
        (true, _) => UDP,
        (false, false) => 4,
        (false, true) => 41,
    };
    let udp_at = match o.to {
        IpAddr::V4(dst) => {
            out.extend_from_slice(&0x0800u16.to_be_bytes());
            let src: [u8; 4] = got[l3 + 12..l3 + 16].try_into().expect("4");
            assert_eq!(
                src[..3],
                SRC4.octets()[..3],
                "outer source in 198.18.200.0/24"
            );
            let total = (20 + udp_len + inner.len()) as u16;
            let mut ip = vec![0x45, tos];
            ip.extend_from_slice(&total.to_be_bytes());
            ip.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
            ip.extend_from_slice(&src);
            ip.extend_from_slice(&dst.octets());
            let c = checksum(&[&ip]);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend_from_slice(&ip);
            l3 + 20
        }
        IpAddr::V6(dst) => {
            out.extend_from_slice(&0x86ddu16.to_be_bytes());
            let src: [u8; 16] = got[l3 + 8..l3 + 24].try_into().expect("16");
            assert_eq!(
                src[..8],
                SRC6.octets()[..8],
                "outer source in 2001:db8:200::/64"
            );
            let label = u32::from_be_bytes(got[l3..l3 + 4].try_into().expect("4")) & 0xfffff;
            let vtc = (6u32 << 28) | (u32::from(tos) << 20) | label;
            out.extend_from_slice(&vtc.to_be_bytes());
            out.extend_from_slice(&((udp_len + inner.len()) as u16).to_be_bytes());
            out.extend_from_slice(&[proto, 64]);
            out.extend_from_slice(&src);
            out.extend_from_slice(&dst.octets());
            l3 + 40
        }
    };
    if o.gue {
        let sport = u16::from_be_bytes([got[udp_at], got[udp_at + 1]]);
        assert!(
            sport >= 0xc000,
            "GUE source port {sport} in the dynamic range"
        );
        out.extend_from_slice(&sport.to_be_bytes());
        out.extend_from_slice(&GUE_PORT.to_be_bytes());
        out.extend_from_slice(&((8 + inner.len()) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }
    out.extend_from_slice(inner);
    out
}

/// Runs `p` and asserts it left encapsulated to the table's choice.
fn encapsulated(rig: &mut XdpRig, svc: &ServiceSpec, p: &[u8], l3: usize, gue: bool) -> Vec<u8> {
    let reason = if gue { Counter::TxGue } else { Counter::TxIpip };
    let out = rig.expect(p, action::TX, reason);
    let to = rig.expected_backend(&svc.key, &flow_key(p, l3));
    let o = Outer {
        to,
        dmac: mac_of(to),
        gue,
    };
    assert_eq!(
        out.bytes,
        expected(p, l3, &o, &out.bytes),
        "encapsulated to {to}"
    );
    // The outer IPv4 header checksum verifies as a receiver checks it.
    if to.is_ipv4() {
        assert_eq!(
            checksum(&[&out.bytes[l3..l3 + 20]]),
            0,
            "outer checksum valid"
        );
    }
    out.bytes
}

fn ipip_and_gue_encapsulate_every_family_pair_with_exact_bytes() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let v4: Vec<IpAddr> = (0..3).map(|i| backend(i).0).collect();
        let v6: Vec<IpAddr> = (0..3).map(|i| backend6(i).0).collect();
        let (vip, vip6) = (IpAddr::V4(VIP), IpAddr::V6(VIP6));
        let services = [
            spec(vip, 80, TCP, ForwardingMode::Ipip, &v4),
            spec(vip, 53, UDP, ForwardingMode::Ipip, &v4),
            spec(vip6, 80, TCP, ForwardingMode::Ipip, &v6),
            spec(vip6, 53, UDP, ForwardingMode::Gue, &v6),
            spec(vip, 81, TCP, ForwardingMode::Ipip, &v6),
            spec(vip6, 81, TCP, ForwardingMode::Ipip, &v4),
            spec(vip, 82, TCP, ForwardingMode::Gue, &v4),
            spec(vip, 83, UDP, ForwardingMode::Gue, &v6),
        ];
        let mut rig = rig(services.to_vec());
        for sport in 40000..40012u16 {
            let payload = b"tunnelled";
            let cases: [(&ServiceSpec, Vec<u8>, bool); 8] = [
                (
                    &services[0],
                    Packet::tcp4(eth4(), CLIENT, sport, VIP, 80, payload).bytes,
                    false,
                ),
                (
                    &services[1],
                    Packet::udp4(eth4(), CLIENT, sport, VIP, 53, payload).bytes,
                    false,
                ),
                (
                    &services[2],
                    Packet::tcp6(eth6(), CLIENT6, sport, VIP6, 80, payload).bytes,
                    false,
                ),
                (
                    &services[3],
                    Packet::udp6(eth6(), CLIENT6, sport, VIP6, 53, payload).bytes,
                    true,
                ),
                (
                    &services[4],
                    Packet::tcp4(eth4(), CLIENT, sport, VIP, 81, payload).bytes,
                    false,
                ),
                (
                    &services[5],
                    Packet::tcp6(eth6(), CLIENT6, sport, VIP6, 81, payload).bytes,
                    false,
                ),
                (
                    &services[6],
                    Packet::tcp4(eth4(), CLIENT, sport, VIP, 82, payload).bytes,
                    true,
                ),
                (
                    &services[7],
                    Packet::udp4(eth4(), CLIENT, sport, VIP, 83, payload).bytes,
                    true,
                ),
            ];
            for (svc, p, gue) in cases {
                encapsulated(&mut rig, svc, &p, 14, gue);
            }
        }
        // Each service counted its packets (bytes as they left, outer headers included).
        let stats = rig.dataplane.maps().vip_stats(0).expect("vip stats");
        assert_eq!((stats.packets, stats.new_flows), (12, 12));
    });
}

fn a_vlan_tag_stays_and_a_routed_backend_gets_the_routers_mac() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let routed4 = IpAddr::V4(Ipv4Addr::from(u32::from(ROUTED_V4) + 7));
        let routed6 = IpAddr::V6(Ipv6Addr::from(u128::from(ROUTED_V6) + 7));
        let (vip, vip6) = (IpAddr::V4(VIP), IpAddr::V6(VIP6));
        let s4 = spec(vip, 80, TCP, ForwardingMode::Ipip, &[backend(0).0]);
        let r4 = spec(vip, 90, TCP, ForwardingMode::Ipip, &[routed4]);
        let r6 = spec(vip6, 90, UDP, ForwardingMode::Gue, &[routed6]);
        let mut rig = rig(vec![s4.clone(), r4.clone(), r6.clone()]);
        let tagged = Packet::tcp4(eth4(), CLIENT, 41000, VIP, 80, b"x")
            .with_vlan(42)
            .bytes;
        encapsulated(&mut rig, &s4, &tagged, 18, false);
        for (svc, p, to, gue) in [
            (
                &r4,
                Packet::tcp4(eth4(), CLIENT, 41001, VIP, 90, b"x").bytes,
                routed4,
                false,
            ),
            (
                &r6,
                Packet::udp6(eth6(), CLIENT6, 41002, VIP6, 90, b"x").bytes,
                routed6,
                true,
            ),
        ] {
            let reason = if gue { Counter::TxGue } else { Counter::TxIpip };
            let out = rig.expect(&p, action::TX, reason);
            assert_eq!(rig.expected_backend(&svc.key, &flow_key(&p, 14)), to);
            let o = Outer {
                to,
                dmac: ROUTER_MAC,
                gue,
            };
            assert_eq!(
                out.bytes,
                expected(&p, 14, &o, &out.bytes),
                "via the router to {to}"
            );
        }
    });
}

fn outer_sources_spread_flows_and_stay_with_each_flow() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let svc = spec(
            IpAddr::V4(VIP),
            80,
            TCP,
            ForwardingMode::Ipip,
            &[backend(0).0],
        );
        let svc6 = spec(
            IpAddr::V6(VIP6),
            80,
            TCP,
            ForwardingMode::Ipip,
            &[backend6(0).0],
        );
        let gue = spec(
            IpAddr::V4(VIP),
            53,
            UDP,
            ForwardingMode::Gue,
            &[backend(1).0],
        );
        let mut rig = rig(vec![svc.clone(), svc6.clone(), gue.clone()]);
        let (mut v4, mut v6, mut ports) = (Vec::new(), Vec::new(), Vec::new());
        for sport in 30000..30064u16 {
            let p = Packet::tcp4(eth4(), CLIENT, sport, VIP, 80, b"a").bytes;
            let first = encapsulated(&mut rig, &svc, &p, 14, false);
            let again = encapsulated(&mut rig, &svc, &p, 14, false);
            assert_eq!(
                first[26..30],
                again[26..30],
                "a flow keeps its outer source"
            );
            v4.push(first[26..30].to_vec());
            let p = Packet::tcp6(eth6(), CLIENT6, sport, VIP6, 80, b"a").bytes;
            let out = encapsulated(&mut rig, &svc6, &p, 14, false);
            v6.push((
                out[22..38].to_vec(),
                u32::from_be_bytes(out[14..18].try_into().expect("4")) & 0xfffff,
            ));
            let p = Packet::udp4(eth4(), CLIENT, sport, VIP, 53, b"a").bytes;
            let out = encapsulated(&mut rig, &gue, &p, 14, true);
            ports.push(u16::from_be_bytes([out[34], out[35]]));
        }
        let distinct = |mut v: Vec<Vec<u8>>| {
            v.sort();
            v.dedup();
            v.len()
        };
        assert!(distinct(v4) >= 32, "64 flows use many IPv4 outer sources");
        let labels: Vec<Vec<u8>> = v6.iter().map(|(_, l)| l.to_be_bytes().to_vec()).collect();
        assert!(
            distinct(v6.into_iter().map(|(s, _)| s).collect()) >= 32,
            "and IPv6 ones"
        );
        assert!(distinct(labels) >= 32, "and flow labels");
        ports.sort_unstable();
        ports.dedup();
        assert!(ports.len() >= 32, "and GUE source ports: {}", ports.len());

        // Without host bits every packet leaves from the configured address itself.
        rig.set_tunnel(TunnelConfig {
            host_mask_v4: [0; 4],
            ..tunnel()
        });
        let p = Packet::tcp4(eth4(), CLIENT, 30000, VIP, 80, b"a").bytes;
        let out = rig.expect(&p, action::TX, Counter::TxIpip);
        assert_eq!(out.bytes[26..30], SRC4.octets());
        // A family without a source has no way out.
        rig.set_tunnel(TunnelConfig {
            source_v6: [0; 16],
            ..tunnel()
        });
        let p = Packet::tcp6(eth6(), CLIENT6, 30000, VIP6, 80, b"a").bytes;
        let out = rig.expect(&p, action::DROP, Counter::DropNoRoute);
        assert_eq!(out.bytes, p, "a dropped packet is untouched");
    });
}

/// A TCP SYN carrying an MSS option in its first slot.
fn syn_with_mss(v6: bool, sport: u16, dport: u16, mss: u16) -> Vec<u8> {
    let mut l4 = Vec::new();
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.extend_from_slice(&7u32.to_be_bytes());
    l4.extend_from_slice(&0u32.to_be_bytes());
    l4.extend_from_slice(&[0x60, flags::SYN]);
    l4.extend_from_slice(&64240u16.to_be_bytes());
    l4.extend_from_slice(&[0, 0, 0, 0]);
    l4.extend_from_slice(&[2, 4]);
    l4.extend_from_slice(&mss.to_be_bytes());
    if v6 {
        Packet::ipv6_with(eth6(), CLIENT6, VIP6, TCP, &mut l4, 16).bytes
    } else {
        Packet::ipv4_with(eth4(), CLIENT, VIP, TCP, l4, 16, &[]).bytes
    }
}

/// Whether the TCP checksum of the IP packet at `l3` verifies.
fn tcp_checksum_valid(p: &[u8], l3: usize) -> bool {
    let v6 = p[l3] >> 4 == 6;
    let (l4, mut pseudo) = if v6 {
        (l3 + 40, p[l3 + 8..l3 + 40].to_vec())
    } else {
        (l3 + 20, p[l3 + 12..l3 + 20].to_vec())
    };
    let len = p.len() - l4;
    if v6 {
        pseudo.extend_from_slice(&(len as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, TCP]);
    } else {
        pseudo.extend_from_slice(&[0, TCP]);
        pseudo.extend_from_slice(&(len as u16).to_be_bytes());
    }
    checksum(&[&pseudo, &p[l4..]]) == 0
}

fn a_syns_mss_is_clamped_to_what_fits_the_tunnel() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let s4 = spec(
            IpAddr::V4(VIP),
            80,
            TCP,
            ForwardingMode::Ipip,
            &[backend(0).0],
        );
        let s6 = spec(
            IpAddr::V6(VIP6),
            80,
            TCP,
            ForwardingMode::Gue,
            &[backend6(0).0],
        );
        let mut rig = rig(vec![s4, s6]);
        // eth0's MTU is 1500: IPv4 in IPv4 leaves 1480 for the inner packet, so an MSS
        // of 1440; IPv6 in IPv6 and UDP leaves 1452, so 1392.
        for (v6, sent, want, gue) in [
            (false, 1460, 1440, false),
            (false, 1200, 1200, false),
            (true, 1440, 1392, true),
            (true, 1380, 1380, true),
        ] {
            let p = syn_with_mss(v6, 50000, 80, sent);
            let reason = if gue { Counter::TxGue } else { Counter::TxIpip };
            let clamped = want != sent;
            let events: &[Counter] = if clamped { &[Counter::MssClamped] } else { &[] };
            let out = rig.expect_events(&p, action::TX, reason, events);
            let inner = if v6 { 14 + 40 + 8 } else { 14 + 20 };
            let mss_at = inner + if v6 { 40 } else { 20 } + 22;
            let got = u16::from_be_bytes([out.bytes[mss_at], out.bytes[mss_at + 1]]);
            assert_eq!(
                got,
                want,
                "MSS {sent} over {}",
                if v6 { "6-in-6 GUE" } else { "4-in-4" }
            );
            assert!(
                tcp_checksum_valid(&out.bytes, inner),
                "TCP checksum after the clamp"
            );
        }
    });
}

fn a_packet_too_big_for_the_tunnel_is_answered_with_icmp() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let s4 = spec(
            IpAddr::V4(VIP),
            80,
            TCP,
            ForwardingMode::Ipip,
            &[backend(0).0],
        );
        let u4 = spec(
            IpAddr::V4(VIP),
            53,
            UDP,
            ForwardingMode::Gue,
            &[backend(0).0],
        );
        let s6 = spec(
            IpAddr::V6(VIP6),
            80,
            TCP,
            ForwardingMode::Ipip,
            &[backend6(0).0],
        );
        let mut rig = rig(vec![s4.clone(), u4, s6.clone()]);
        // 1480 bytes of IPv4 fit in 1500 once wrapped in 20 more; 1481 do not.
        let fits = Packet::tcp4(eth4(), CLIENT, 42000, VIP, 80, &vec![7; 1480 - 40]).bytes;
        encapsulated(&mut rig, &s4, &fits, 14, false);
        let big = Packet::tcp4(eth4(), CLIENT, 42000, VIP, 80, &vec![7; 1481 - 40])
            .with_tcp_flags(flags::ACK)
            .bytes;
        let out = rig.expect(&big, action::TX, Counter::TxIcmpTooBig);
        let mut want = Vec::new();
        want.extend_from_slice(&CLIENT_MAC);
        want.extend_from_slice(&HOST_MAC);
        want.extend_from_slice(&0x0800u16.to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 56, 0, 0, 0, 0, 64, 1, 0, 0];
        ip.extend_from_slice(&VIP.octets());
        ip.extend_from_slice(&CLIENT.octets());
        let c = checksum(&[&ip]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut icmp = vec![3, 4, 0, 0, 0, 0];
        icmp.extend_from_slice(&1480u16.to_be_bytes());
        icmp.extend_from_slice(&big[14..14 + 28]);
        let c = checksum(&[&icmp]);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        want.extend_from_slice(&ip);
        want.extend_from_slice(&icmp);
        assert_eq!(
            out.bytes, want,
            "fragmentation needed, MTU 1480, quoting the packet"
        );

        // GUE takes 8 more: 1472 is the most.
        let big = Packet::udp4(eth4(), CLIENT, 42001, VIP, 53, &vec![1; 1473 - 28]).bytes;
        let out = rig.expect(&big, action::TX, Counter::TxIcmpTooBig);
        assert_eq!(out.bytes[34..36], [3, 4]);
        assert_eq!(u16::from_be_bytes([out.bytes[40], out.bytes[41]]), 1472);
        assert_eq!(checksum(&[&out.bytes[34..]]), 0, "ICMP checksum valid");

        // Without DF an IPv4 packet cannot be told, nor fragmented here.
        let no_df = Packet::tcp4(eth4(), CLIENT, 42002, VIP, 80, &vec![7; 1481 - 40])
            .with_tcp_flags(flags::ACK)
            .with_frag(0)
            .bytes;
        let out = rig.expect(&no_df, action::DROP, Counter::DropTooBig);
        assert_eq!(out.bytes, no_df);

        // IPv6: "packet too big" with MTU 1460, from the VIP, checksum over the pseudo
        // header.
        let big6 = Packet::tcp6(eth6(), CLIENT6, 42003, VIP6, 80, &vec![9; 1461 - 60])
            .with_tcp_flags(flags::ACK)
            .bytes;
        let out = rig.expect(&big6, action::TX, Counter::TxIcmpTooBig);
        let b = &out.bytes;
        assert_eq!(
            b.len(),
            14 + 40 + 8 + 48,
            "the quote is the header and 8 bytes"
        );
        assert_eq!(
            (b[0..6].to_vec(), b[6..12].to_vec()),
            (CLIENT_MAC.to_vec(), HOST_MAC.to_vec())
        );
        assert_eq!(b[14..20], [0x60, 0, 0, 0, 0, 56]);
        assert_eq!((b[20], b[21]), (58, 64));
        assert_eq!(b[22..38], VIP6.octets());
        assert_eq!(b[38..54], CLIENT6.octets());
        assert_eq!(b[54..58], [2, 0, b[56], b[57]]);
        assert_eq!(u32::from_be_bytes(b[58..62].try_into().expect("4")), 1460);
        assert_eq!(b[62..], big6[14..14 + 48]);
        let mut pseudo = b[22..54].to_vec();
        pseudo.extend_from_slice(&56u32.to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 58]);
        assert_eq!(checksum(&[&pseudo, &b[54..]]), 0, "ICMPv6 checksum valid");
    });
}

fn tunnelled_flows_keep_their_backend_across_a_table_change() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let three: Vec<IpAddr> = (0..3).map(|i| backend(i).0).collect();
        let svc = spec(IpAddr::V4(VIP), 80, TCP, ForwardingMode::Ipip, &three);
        let mut rig = rig(vec![svc.clone()]);
        let mut pinned = Vec::new();
        for sport in 45000..45030u16 {
            let syn = Packet::tcp4(eth4(), CLIENT, sport, VIP, 80, b"").bytes;
            let out = encapsulated(&mut rig, &svc, &syn, 14, false);
            let ack = Packet::tcp4(eth4(), CLIENT, sport, VIP, 80, b"")
                .with_tcp_flags(flags::ACK)
                .bytes;
            rig.expect_events(
                &ack,
                action::TX,
                Counter::TxIpip,
                &[Counter::EmbryonicPromoted],
            );
            pinned.push((ack, out[30..34].to_vec()));
        }
        // One backend goes: every flow stays where it was, including those on the
        // backend that left (draining).
        rig.program(spec(
            IpAddr::V4(VIP),
            80,
            TCP,
            ForwardingMode::Ipip,
            &three[..2],
        ));
        for (ack, dst) in &pinned {
            let out = rig.expect(ack, action::TX, Counter::TxIpip);
            assert_eq!(&out.bytes[30..34], dst.as_slice(), "flow kept its backend");
        }
    });
}

fn explain_names_the_outer_header_the_kernel_writes() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        use lb_model::explain::{Flow, Protocol, explain};
        let v4: Vec<IpAddr> = (0..3).map(|i| backend(i).0).collect();
        let v6: Vec<IpAddr> = (0..3).map(|i| backend6(i).0).collect();
        let ipip = spec(IpAddr::V4(VIP), 80, TCP, ForwardingMode::Ipip, &v4);
        let gue6 = spec(IpAddr::V6(VIP6), 53, UDP, ForwardingMode::Gue, &v6);
        let mut rig = rig(vec![ipip.clone(), gue6.clone()]);
        for sport in 33000..33020u16 {
            let p = Packet::tcp4(eth4(), CLIENT, sport, VIP, 80, b"e").bytes;
            let out = encapsulated(&mut rig, &ipip, &p, 14, false);
            let flow = Flow {
                protocol: Protocol::Tcp,
                src: (CLIENT, sport).into(),
                dst: (VIP, 80).into(),
            };
            let e = explain(rig.dataplane.maps(), flow).expect("explain");
            let x = e.encapsulation.expect("an ipip flow is encapsulated");
            let src: [u8; 4] = out[26..30].try_into().expect("4");
            let dst: [u8; 4] = out[30..34].try_into().expect("4");
            assert_eq!(x.outer_src, Some(IpAddr::V4(src.into())), "outer source");
            assert_eq!(x.outer_dst, IpAddr::V4(dst.into()), "outer destination");
            assert_eq!(
                (x.kind.as_str(), x.ip_protocol, x.udp_ports),
                ("ipip", 4, None)
            );

            let p = Packet::udp6(eth6(), CLIENT6, sport, VIP6, 53, b"e").bytes;
            let out = encapsulated(&mut rig, &gue6, &p, 14, true);
            let flow = Flow {
                protocol: Protocol::Udp,
                src: (CLIENT6, sport).into(),
                dst: (VIP6, 53).into(),
            };
            let x = explain(rig.dataplane.maps(), flow)
                .expect("explain")
                .encapsulation
                .expect("a gue flow is encapsulated");
            let src: [u8; 16] = out[22..38].try_into().expect("16");
            let label = u32::from_be_bytes(out[14..18].try_into().expect("4")) & 0xfffff;
            let sport_out = u16::from_be_bytes([out[54], out[55]]);
            assert_eq!(x.outer_src, Some(IpAddr::V6(src.into())));
            assert_eq!(x.flow_label, Some(label));
            assert_eq!(x.udp_ports, Some((sport_out, GUE_PORT)));
            assert_eq!(x.ip_protocol, UDP);
        }
    });
}

/// TC only (XDP never sees a merged packet): a GRO-merged TCP packet, 3000 bytes of
/// payload in GSO segments, is sent on whole by `dsr` with only its MACs changed (the
/// FIB is asked without an MTU check, which would refuse 3040 bytes of IP). For `ipip`, one whose segments would not fit the 1500-byte
/// route once encapsulated is dropped as too big, before anything is written.
/// (BPF_PROG_TEST_RUN cannot give an skb a GSO type, and `bpf_skb_adjust_room` grows
/// only TCP GSO packets, so the encapsulation of a merged packet itself is not run
/// here.)
#[test]
fn tc_forwards_a_gro_merged_packet_whole() {
    lb_testbed::needs_root!();
    with_hook(Hook::Tc, || {
        FixtureHost::new().run(|| {
            let vip = IpAddr::V4(VIP);
            let v4: Vec<IpAddr> = (0..3).map(|i| backend(i).0).collect();
            let ipip = spec(vip, 80, TCP, ForwardingMode::Ipip, &v4);
            let dsr = spec(vip, 81, TCP, ForwardingMode::Dsr, &v4);
            let mut rig = rig(vec![ipip, dsr.clone()]);
            let payload = vec![0x5a; 3000];
            // dsr first: its backend's next hop is not cached yet, so the FIB is asked.
            let p = Packet::tcp4(eth4(), CLIENT, 42001, VIP, 81, &payload).bytes;
            let before = rig.counter(Counter::Tx);
            let (out, _) = rig.run_tc(&p, 1448);
            assert_eq!(out.action, action::TX);
            assert_eq!(rig.counter(Counter::Tx) - before, 1);
            let to = rig.expected_backend(&dsr.key, &flow_key(&p, 14));
            let mut want = p.clone();
            want[0..6].copy_from_slice(&mac_of(to));
            want[6..12].copy_from_slice(&HOST_MAC);
            assert_eq!(out.bytes, want, "only the MACs change");

            let p = Packet::tcp4(eth4(), CLIENT, 42000, VIP, 80, &payload).bytes;
            let before = rig.counter(Counter::DropTooBig);
            let (out, _) = rig.run_tc(&p, 1480);
            assert_eq!(out.action, action::DROP, "segments of 1520 bytes");
            assert_eq!(rig.counter(Counter::DropTooBig) - before, 1);
            assert_eq!(out.bytes, p, "untouched");
        });
    });
}

/// `lb_tunnel` (kept for the `lb_xdp` of the release before, which tail-calls it in
/// the instant of an upgrade) reached without a hand-over: the packet is dropped,
/// never encapsulated to the backend a zero or stale slot names. This release's
/// `lb_xdp` encapsulates itself and writes no slot, so the slot stays empty.
#[test]
fn lb_tunnel_without_its_hand_over_sends_nothing_to_a_backend() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let v4: Vec<IpAddr> = (0..3).map(|i| backend(i).0).collect();
        let mut rig = rig(vec![spec(
            IpAddr::V4(VIP),
            80,
            TCP,
            ForwardingMode::Ipip,
            &v4,
        )]);
        let name = lb_common::maps::names::TUNNEL_PROGRAM;
        let p = Packet::tcp4(eth4(), CLIENT, 43000, VIP, 80, b"x").bytes;
        let before = rig.counter(Counter::DropTunnelUnavailable);
        let out = rig.run_program(name, &p);
        assert_eq!(out.action, action::DROP, "a zero slot");
        // lb_xdp sends another flow itself; this packet then reaches lb_tunnel.
        let other = Packet::tcp4(eth4(), CLIENT, 43001, VIP, 80, b"y").bytes;
        assert_eq!(rig.run(&other).action, action::TX);
        let out = rig.run_program(name, &p);
        assert_eq!(out.action, action::DROP, "no slot after lb_xdp's own send");
        assert_eq!(out.bytes, p, "untouched");
        assert_eq!(rig.counter(Counter::DropTunnelUnavailable) - before, 2);
    });
}

lb_testbed::hook_tests!(
    ipip_and_gue_encapsulate_every_family_pair_with_exact_bytes,
    a_vlan_tag_stays_and_a_routed_backend_gets_the_routers_mac,
    outer_sources_spread_flows_and_stay_with_each_flow,
    a_syns_mss_is_clamped_to_what_fits_the_tunnel,
    a_packet_too_big_for_the_tunnel_is_answered_with_icmp,
    tunnelled_flows_keep_their_backend_across_a_table_change,
    explain_names_the_outer_header_the_kernel_writes,
);
