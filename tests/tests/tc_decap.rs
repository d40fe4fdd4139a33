//! `lb_decap`, the backends' TC ingress program for `ipip`/`gue` services, through
//! BPF_PROG_TEST_RUN (every output byte: the Ethernet header with the inner family's
//! type, then the inner packet exactly as the client sent it) and end to end: a
//! namespace pair joined by a veth, real encapsulated datagrams and TCP handshakes
//! from the "load balancer" side, and real sockets on the VIP in the backend's.

use std::{
    io::ErrorKind,
    mem::MaybeUninit,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket},
    time::{Duration, Instant},
};

use aya::programs::{SchedClassifier, TcAttachType};
use lb_common::DecapCounter::{
    self, DecapsulatedGue, DecapsulatedIpip, Passed, RefusedGueVariant, RefusedMalformed,
    RefusedNotVip,
};
use lb_dataplane::decap::{DecapSettings, load::Decap};
use lb_testbed::{
    Netns,
    decap::{DecapRig, Tunnel},
    lbd::{BpfFs, TempDir},
    packet::{Packet, checksum},
};
use lb_userspace::decap::DecapCommand;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

const LB: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const LB6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const BACKEND: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const BACKEND6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1);
/// Another address: not one of the backend's VIPs.
const OTHER: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 99);
const OTHER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 99);
/// Clients in a subnet of their own, reached through the load balancer's side.
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 19, 5, 7);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 7);
const GUE_PORT: u16 = 6080;
const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const BACKEND_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

fn eth(ether_type: u16) -> Packet {
    Packet::eth(BACKEND_MAC, LB_MAC, ether_type)
}

/// An inner IP packet (the client's), without its link header.
fn ip_of(p: Packet) -> Vec<u8> {
    p.bytes[14..].to_vec()
}

fn tcp4(dst: Ipv4Addr) -> Vec<u8> {
    ip_of(Packet::tcp4(eth(0x0800), CLIENT, 40000, dst, 80, b""))
}

fn udp4(dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    ip_of(Packet::udp4(eth(0x0800), CLIENT, 40001, dst, 53, payload))
}

fn tcp6(dst: Ipv6Addr) -> Vec<u8> {
    ip_of(Packet::tcp6(eth(0x86dd), CLIENT6, 40000, dst, 80, b"data"))
}

fn udp6(dst: Ipv6Addr, payload: &[u8]) -> Vec<u8> {
    ip_of(Packet::udp6(eth(0x86dd), CLIENT6, 40001, dst, 53, payload))
}

fn ipip4() -> Tunnel {
    Tunnel::ipip(LB.into(), BACKEND.into())
}

fn ipip6() -> Tunnel {
    Tunnel::ipip(LB6.into(), BACKEND6.into())
}

fn gue4() -> Tunnel {
    Tunnel::gue(LB.into(), BACKEND.into(), GUE_PORT)
}

fn gue6() -> Tunnel {
    Tunnel::gue(LB6.into(), BACKEND6.into(), GUE_PORT)
}

fn frame(t: Tunnel, inner: &[u8]) -> Vec<u8> {
    t.frame(BACKEND_MAC, LB_MAC, inner)
}

/// What the stack must receive for `inner`: the frame's MACs, the inner family's
/// Ethernet type, the inner packet byte for byte.
fn decapsulated(inner: &[u8]) -> Vec<u8> {
    let ether_type: u16 = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    let mut out = Vec::new();
    out.extend_from_slice(&BACKEND_MAC);
    out.extend_from_slice(&LB_MAC);
    out.extend_from_slice(&ether_type.to_be_bytes());
    out.extend_from_slice(inner);
    out
}

/// An 802.1Q tag with VLAN id `vid` inserted after the MACs.
fn tagged(frame: &[u8], vid: u16) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    out.extend_from_slice(&[0x81, 0x00]);
    out.extend_from_slice(&vid.to_be_bytes());
    out.extend_from_slice(&frame[12..]);
    out
}

/// Recomputes the IPv4 header checksum of the header at `l3`.
fn fix_ipv4_sum(frame: &mut [u8], l3: usize) {
    frame[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
    let c = checksum(&[&frame[l3..l3 + 20]]);
    frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// Runs `f` with `lb_decap` loaded in a namespace of its own, serving [`VIP`] and
/// [`VIP6`] with GUE on [`GUE_PORT`].
fn with_rig(f: impl FnOnce(&mut DecapRig) + Send + 'static) {
    let ns = Netns::new("dc");
    ns.run(move || {
        let mut rig = DecapRig::load(&[VIP.into(), VIP6.into()], &[GUE_PORT]);
        f(&mut rig);
    });
}

/// Asserts each `(frame, inner)` comes out as exactly `inner` behind the MACs.
fn expect_decapsulated(rig: &mut DecapRig, cases: &[(Vec<u8>, Vec<u8>)], counter: DecapCounter) {
    for (i, (frame, inner)) in cases.iter().enumerate() {
        let out = rig.expect(frame, counter);
        assert_eq!(out, decapsulated(inner), "case {i}: output bytes");
    }
}

#[test]
fn ipv4_in_ipv4_is_decapsulated() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let cases: Vec<_> = [tcp4(VIP), udp4(VIP, b"hello")]
            .into_iter()
            .map(|inner| (frame(ipip4(), &inner), inner))
            .collect();
        expect_decapsulated(rig, &cases, DecapsulatedIpip);
    });
}

#[test]
fn ipv6_in_ipv6_is_decapsulated() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let cases: Vec<_> = [tcp6(VIP6), udp6(VIP6, b"hello")]
            .into_iter()
            .map(|inner| (frame(ipip6(), &inner), inner))
            .collect();
        expect_decapsulated(rig, &cases, DecapsulatedIpip);
    });
}

/// The Ethernet type becomes the inner family's (and `skb->protocol` with it: the
/// end-to-end test shows the stack takes the packet as IPv4).
#[test]
fn ipv4_in_ipv6_is_decapsulated_with_the_inner_ether_type() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        // The shortest inner packet too: 28 bytes, less than an IPv6 header.
        let cases: Vec<_> = [tcp4(VIP), udp4(VIP, b"")]
            .into_iter()
            .map(|inner| (frame(ipip6(), &inner), inner))
            .collect();
        assert_eq!(cases[0].0[12..14], [0x86, 0xdd]);
        expect_decapsulated(rig, &cases, DecapsulatedIpip);
    });
}

#[test]
fn ipv6_in_ipv4_is_decapsulated_with_the_inner_ether_type() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let cases: Vec<_> = [tcp6(VIP6), udp6(VIP6, b"hello")]
            .into_iter()
            .map(|inner| (frame(ipip4(), &inner), inner))
            .collect();
        assert_eq!(cases[0].0[12..14], [0x08, 0x00]);
        expect_decapsulated(rig, &cases, DecapsulatedIpip);
    });
}

#[test]
fn gue_over_ipv4_is_decapsulated() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let cases: Vec<_> = [tcp4(VIP), udp4(VIP, b"hello"), tcp6(VIP6), udp6(VIP6, b"")]
            .into_iter()
            .map(|inner| (frame(gue4(), &inner), inner))
            .collect();
        expect_decapsulated(rig, &cases, DecapsulatedGue);
    });
}

#[test]
fn gue_over_ipv6_is_decapsulated() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let cases: Vec<_> = [tcp6(VIP6), udp6(VIP6, b"hello"), tcp4(VIP), udp4(VIP, b"")]
            .into_iter()
            .map(|inner| (frame(gue6(), &inner), inner))
            .collect();
        expect_decapsulated(rig, &cases, DecapsulatedGue);
    });
}

/// A tag still in the frame moves to the skb's metadata, as the receive path does
/// with tags before TC runs: the frame the stack gets is the untagged one.
#[test]
fn vlan_tagged_tunnels_are_decapsulated() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let ipip: Vec<_> = [
            (ipip4(), tcp4(VIP)),
            (ipip6(), tcp6(VIP6)),
            (ipip6(), udp4(VIP, b"x")),
            (ipip4(), udp6(VIP6, b"x")),
        ]
        .into_iter()
        .map(|(t, inner)| (tagged(&frame(t, &inner), 42), inner))
        .collect();
        expect_decapsulated(rig, &ipip, DecapsulatedIpip);
        let gue: Vec<_> = [(gue4(), tcp6(VIP6)), (gue6(), udp4(VIP, b"y"))]
            .into_iter()
            .map(|(t, inner)| (tagged(&frame(t, &inner), 7), inner))
            .collect();
        expect_decapsulated(rig, &gue, DecapsulatedGue);
        // Refusals behind a tag too.
        rig.expect(&tagged(&frame(ipip4(), &tcp4(OTHER)), 42), RefusedNotVip);
    });
}

/// Ethernet padding after the outer packet stays for the stack to trim (it trims to
/// the inner IP length).
#[test]
fn padding_after_the_tunnel_packet_is_left_for_the_stack() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let inner = udp4(VIP, b"");
        let mut f = frame(ipip4(), &inner);
        f.extend_from_slice(&[0; 6]);
        let out = rig.expect(&f, DecapsulatedIpip);
        let mut want = decapsulated(&inner);
        want.extend_from_slice(&[0; 6]);
        assert_eq!(out, want);
    });
}

#[test]
fn tunnels_to_another_address_are_refused() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        for f in [
            frame(ipip4(), &tcp4(OTHER)),
            frame(ipip6(), &tcp6(OTHER6)),
            frame(ipip6(), &udp4(OTHER, b"x")),
            frame(gue4(), &udp4(OTHER, b"x")),
            frame(gue6(), &tcp6(OTHER6)),
            // The backend's own address is not a VIP either.
            frame(ipip4(), &tcp4(BACKEND)),
        ] {
            rig.expect(&f, RefusedNotVip);
        }
    });
}

#[test]
fn truncated_and_inconsistent_tunnels_are_refused() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let inner = tcp4(VIP);
        let whole = frame(ipip4(), &inner);
        // Outer packet cut short: its length says more than the frame holds.
        rig.expect(&whole[..whole.len() - 1], RefusedMalformed);
        let whole6 = frame(ipip6(), &tcp6(VIP6));
        rig.expect(&whole6[..whole6.len() - 1], RefusedMalformed);
        let gue = frame(gue6(), &tcp6(VIP6));
        rig.expect(&gue[..gue.len() - 3], RefusedMalformed);
        // Inner packet truncated: what the outer header carries is not a whole header.
        rig.expect(&frame(ipip4(), &inner[..12]), RefusedMalformed);
        rig.expect(&frame(ipip4(), &tcp6(VIP6)[..30]), RefusedMalformed);
        rig.expect(&frame(gue4(), &inner[..4]), RefusedMalformed);
        rig.expect(&frame(gue6(), &[]), RefusedMalformed);
        // Inner length disagrees with the outer: bytes after the inner packet, or an
        // inner packet longer than what carries it.
        let mut longer = inner.clone();
        longer.extend_from_slice(&[0; 4]);
        rig.expect(&frame(ipip4(), &longer), RefusedMalformed);
        rig.expect(&frame(gue6(), &longer), RefusedMalformed);
        let mut shorter = tcp6(VIP6);
        shorter[5] += 1;
        rig.expect(&frame(ipip6(), &shorter), RefusedMalformed);
        // UDP length not the outer payload's.
        let mut f = frame(gue4(), &inner);
        f[14 + 20 + 5] += 1;
        rig.expect(&f, RefusedMalformed);
        // Outer IPv4 header checksum wrong.
        let mut f = whole.clone();
        f[14 + 10] ^= 0x01;
        rig.expect(&f, RefusedMalformed);
        // The inner version is not the outer protocol's: protocol 4 with IPv6 inside,
        // 41 with IPv4.
        let mut f = frame(ipip4(), &tcp6(VIP6));
        f[14 + 9] = 4;
        fix_ipv4_sum(&mut f, 14);
        rig.expect(&f, RefusedMalformed);
        let mut f = frame(ipip6(), &tcp4(VIP));
        f[14 + 6] = 41;
        rig.expect(&f, RefusedMalformed);
        // An IPv6 payload length of 0 (a jumbogram's).
        let mut f = whole6.clone();
        f[14 + 4..14 + 6].copy_from_slice(&[0, 0]);
        rig.expect(&f, RefusedMalformed);
    });
}

#[test]
fn gue_that_is_not_variant_1_ip_is_refused() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let inner = udp4(VIP, b"hello");
        // Variant 0: a 4-byte GUE header (version 0, no flags, protocol 4) before the
        // packet; a control message (C bit); variant 1 with a version nibble of 5.
        for first in [[0x00, 0x04, 0x00, 0x00], [0x20, 0x00, 0x00, 0x00]] {
            let mut payload = first.to_vec();
            payload.extend_from_slice(&inner);
            rig.expect(&frame(gue4(), &payload), RefusedGueVariant);
        }
        let mut odd = inner.clone();
        odd[0] = 0x55;
        rig.expect(&frame(gue6(), &odd), RefusedGueVariant);
    });
}

#[test]
fn other_traffic_passes_untouched() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let inner = tcp4(VIP);
        let mut passed = vec![
            // The backend's ordinary traffic, to the VIP and elsewhere.
            [&eth(0x0800).bytes[..], &inner].concat(),
            [&eth(0x0800).bytes[..], &udp4(BACKEND, b"dns")].concat(),
            [&eth(0x86dd).bytes[..], &tcp6(VIP6)].concat(),
            // UDP to another port, with an IP packet inside all the same.
            frame(Tunnel::gue(LB.into(), BACKEND.into(), GUE_PORT + 1), &inner),
            frame(Tunnel::gue(LB6.into(), BACKEND6.into(), 4789), &inner),
            // ARP.
            [
                &eth(0x0806).bytes[..],
                &[0, 1, 8, 0, 6, 4, 0, 1][..],
                &[0; 20][..],
            ]
            .concat(),
            // (A frame too short for its IP header would pass too, but
            // BPF_PROG_TEST_RUN refuses to run one: EINVAL.)
        ];
        // Outer IPv4 with options (our load balancers write none).
        let mut opts = frame(ipip4(), &inner);
        opts.splice(34..34, [1, 1, 1, 0]);
        opts[14] = 0x46;
        let total = u16::from_be_bytes([opts[16], opts[17]]) + 4;
        opts[16..18].copy_from_slice(&total.to_be_bytes());
        fix_ipv4_sum(&mut opts, 14);
        // An outer fragment.
        let mut frag = frame(ipip4(), &inner);
        frag[14 + 6] = 0x20;
        fix_ipv4_sum(&mut frag, 14);
        // An IPv6 extension header first (hop-by-hop).
        let mut ext = frame(ipip6(), &inner);
        ext[14 + 6] = 0;
        passed.extend([opts, frag, ext]);
        for (i, f) in passed.iter().enumerate() {
            let out = rig.expect(f, Passed);
            assert_eq!(&out, f, "case {i}: bytes untouched");
        }
        // With no GUE port configured, GUE is off: UDP to the old port passes.
        rig.configure(&[VIP.into()], &[]);
        let f = frame(gue4(), &inner);
        assert_eq!(rig.expect(&f, Passed), f);
    });
}

/// `lbd` built with `bpf-log` loads the log build of the object; its `lb_decap`
/// (which writes no records) must pass the verifier and decapsulate the same.
#[test]
fn the_log_build_decapsulates_too() {
    lb_testbed::needs_root!();
    let ns = Netns::new("dcl");
    ns.run(|| {
        let decap =
            Decap::load(lb_dataplane::kernel::BPF_OBJECT_LOG, None).expect("load lb_decap (log)");
        let mut rig = DecapRig { decap };
        rig.configure(&[VIP.into()], &[GUE_PORT]);
        let inner = udp4(VIP, b"log");
        assert_eq!(
            rig.expect(&frame(gue6(), &inner), DecapsulatedGue),
            decapsulated(&inner)
        );
    });
}

#[test]
fn vip_changes_take_effect_in_place() {
    lb_testbed::needs_root!();
    with_rig(|rig| {
        let to_vip = frame(ipip4(), &tcp4(VIP));
        let to_vip6 = frame(ipip6(), &tcp6(VIP6));
        rig.configure(&[VIP.into()], &[GUE_PORT]);
        rig.expect(&to_vip, DecapsulatedIpip);
        rig.expect(&to_vip6, RefusedNotVip);
        rig.configure(&[VIP6.into(), OTHER.into()], &[GUE_PORT]);
        rig.expect(&to_vip, RefusedNotVip);
        rig.expect(&to_vip6, DecapsulatedIpip);
        rig.expect(&frame(gue4(), &tcp4(OTHER)), DecapsulatedGue);
        assert_eq!(
            rig.decap.maps().vips().expect("vips"),
            vec![IpAddr::from(OTHER), IpAddr::from(VIP6)]
        );
    });
}

/// `lbd decap --pin-path`: the program stays attached after the run returns, a second
/// run replaces it in place with new VIPs, `--status` reports, `--detach` removes it.
#[test]
fn pinned_decap_outlives_its_run_and_detaches() {
    lb_testbed::needs_root!();
    let ns = Netns::new("dcp");
    ns.ip(&["link", "add", "be0", "type", "veth", "peer", "name", "be1"]);
    ns.ip(&["link", "set", "be0", "up"]);
    let tmp = TempDir::new("decap");
    let fs = BpfFs::mount(&tmp.path().join("bpf"));
    let pins = fs.path().join("decap");
    let run = |command: DecapCommand| -> String {
        let mut out = Vec::new();
        lb_userspace::decap::run(lb_dataplane::kernel::BPF_OBJECT, command, &mut out)
            .unwrap_or_else(|e| panic!("lbd decap: {e:?}"));
        String::from_utf8(out).expect("utf-8")
    };
    let attached = || -> Vec<String> {
        ns.run(|| {
            let (_, progs) =
                SchedClassifier::query_tcx("be0", TcAttachType::Ingress).expect("query tcx");
            progs
                .iter()
                .map(|p| p.name_as_str().unwrap_or("?").to_owned())
                .collect()
        })
    };
    let settings = |vips: &[IpAddr]| DecapSettings::new(vips, &[GUE_PORT]).expect("valid");
    let first = {
        let (pins, settings) = (pins.clone(), settings(&[VIP.into()]));
        ns.run(move || {
            run(DecapCommand::Run {
                interface: "be0".into(),
                settings,
                pin_dir: Some(pins),
            })
        })
    };
    assert!(first.starts_with("lb_decap attached on be0"), "{first}");
    assert_eq!(
        attached(),
        vec!["lb_decap"],
        "attached after the run returned"
    );
    let second = {
        let (pins, settings) = (pins.clone(), settings(&[VIP6.into(), OTHER.into()]));
        ns.run(move || {
            run(DecapCommand::Run {
                interface: "be0".into(),
                settings,
                pin_dir: Some(pins),
            })
        })
    };
    assert!(second.starts_with("lb_decap replaced on be0"), "{second}");
    assert_eq!(attached(), vec!["lb_decap"], "replaced, not added");
    let status = run(DecapCommand::Status {
        pin_dir: pins.clone(),
    });
    assert!(
        status.starts_with(&format!(
            "attached  be0\nvips      {OTHER}, {VIP6}\ngue ports {GUE_PORT}\npassed "
        )),
        "{status}"
    );
    let detached = run(DecapCommand::Detach {
        pin_dir: pins.clone(),
    });
    assert!(
        detached.starts_with("lb_decap detached from be0"),
        "{detached}"
    );
    assert!(attached().is_empty(), "detached");
    assert!(!pins.exists(), "pins removed");
}

/// The two namespaces of the end-to-end tests: the "load balancer" (`lb0`) sends
/// encapsulated packets to the backend (`be0`), which runs `lb_decap` and holds the
/// VIPs on `lo`; the clients' subnets are routed back through the load balancer.
struct Pair {
    lb: Netns,
    backend: Netns,
}

impl Pair {
    fn new() -> Self {
        let lb = Netns::new("dlb");
        let backend = Netns::new("dbe");
        lb.ip(&[
            "link",
            "add",
            "lb0",
            "type",
            "veth",
            "peer",
            "name",
            "be0",
            "netns",
            backend.name(),
        ]);
        for (ns, dev, mac, v4, v6) in [
            (&lb, "lb0", LB_MAC, LB, LB6),
            (&backend, "be0", BACKEND_MAC, BACKEND, BACKEND6),
        ] {
            let mac = mac.map(|b| format!("{b:02x}")).join(":");
            ns.ip(&["link", "set", dev, "address", &mac]);
            ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", dev]);
            ns.ip(&[
                "-6",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            ns.ip(&["link", "set", dev, "up"]);
        }
        // Locally sent packets with checksum offload carry partial checksums; the
        // inner packets' checksums must be the ones the backend's stack verifies.
        lb.exec("ethtool", &["-K", "lb0", "tx", "off"]);
        backend.ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
        backend.ip(&["-6", "addr", "add", &format!("{VIP6}/128"), "dev", "lo"]);
        backend.ip(&["route", "add", "default", "via", &LB.to_string()]);
        backend.ip(&["-6", "route", "add", "default", "via", &LB6.to_string()]);
        Self { lb, backend }
    }

    /// Loads and attaches `lb_decap` on `be0` as `lbd decap` does (no pins).
    fn decap(&self) -> Decap {
        self.backend.run(|| {
            let settings =
                DecapSettings::new(&[VIP.into(), VIP6.into()], &[GUE_PORT]).expect("valid");
            let mut decap =
                Decap::load(lb_dataplane::kernel::BPF_OBJECT, None).expect("load lb_decap");
            decap.configure(&settings).expect("configure");
            decap.attach("be0", None).expect("attach to be0");
            decap
        })
    }

    /// Sends `inner` (an IP packet) from the load balancer to the backend in `tunnel`:
    /// through a raw socket of the outer protocol (the kernel writes the outer IP
    /// header) for IPIP, a UDP socket for GUE.
    fn send(&self, tunnel: Tunnel, inner: Vec<u8>) {
        self.lb.run(move || {
            let (proto, payload) = tunnel.payload(&inner);
            let to = SockAddr::from(SocketAddr::new(tunnel.dst, tunnel.gue.unwrap_or(0)));
            let domain = if tunnel.dst.is_ipv6() {
                Domain::IPV6
            } else {
                Domain::IPV4
            };
            let sock = match tunnel.gue {
                Some(_) => Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)),
                None => Socket::new(domain, Type::RAW, Some(Protocol::from(i32::from(proto)))),
            }
            .expect("sender socket");
            // GUE: the UDP socket writes its own header; the payload is the inner packet.
            let data = if tunnel.gue.is_some() {
                &payload[8..]
            } else {
                &payload[..]
            };
            sock.send_to(data, &to).expect("send encapsulated");
        });
    }
}

/// Waits for a datagram on `sock`; its payload and source.
fn recv(sock: &UdpSocket) -> Option<(Vec<u8>, SocketAddr)> {
    sock.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut buf = [0u8; 1500];
    match sock.recv_from(&mut buf) {
        Ok((n, from)) => Some((buf[..n].to_vec(), from)),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        // EINTR: a signal to the test process; wait again.
        Err(e) if e.kind() == ErrorKind::Interrupted => recv(sock),
        Err(e) => panic!("recv: {e}"),
    }
}

/// Datagrams tunnelled every way (IPIP and GUE, each outer family around each inner
/// one) reach sockets on the VIPs, from the client's own address.
#[test]
fn tunnelled_datagrams_reach_listeners_on_the_vips() {
    lb_testbed::needs_root!();
    let pair = Pair::new();
    let decap = pair.decap();
    let (v4, v6) = pair.backend.run(|| {
        (
            UdpSocket::bind((VIP, 53)).expect("bind VIP:53"),
            UdpSocket::bind((VIP6, 53)).expect("bind [VIP6]:53"),
        )
    });
    let cases = [
        ("4-in-4 ipip", ipip4(), false),
        ("6-in-6 ipip", ipip6(), true),
        ("4-in-6 ipip", ipip6(), false),
        ("6-in-4 ipip", ipip4(), true),
        ("4-in-4 gue", gue4(), false),
        ("6-in-6 gue", gue6(), true),
        ("4-in-6 gue", gue6(), false),
        ("6-in-4 gue", gue4(), true),
    ];
    for (name, tunnel, inner6) in cases {
        let payload = format!("datagram {name}").into_bytes();
        let (inner, sock, client) = if inner6 {
            (udp6(VIP6, &payload), &v6, IpAddr::from(CLIENT6))
        } else {
            (udp4(VIP, &payload), &v4, IpAddr::from(CLIENT))
        };
        let before = decap.maps().counts().expect("counts");
        pair.send(tunnel, inner);
        let got = recv(sock);
        let moved = decap.maps().counts().expect("counts").since(&before);
        let Some((data, from)) = got else {
            panic!("{name}: no datagram on the VIP; lb_decap counters moved:\n{moved}");
        };
        assert_eq!(data, payload, "{name}: payload");
        assert_eq!(
            from,
            SocketAddr::new(client, 40001),
            "{name}: the client's address"
        );
        let counter = if tunnel.gue.is_some() {
            DecapsulatedGue
        } else {
            DecapsulatedIpip
        };
        assert_eq!(moved.get(counter), 1, "{name}: counted\n{moved}");
    }
}

/// A TCP segment from the client (`src`:`sport`) to `dst`:80 with `seq`, `ack` and
/// `flags`, as an IP packet with a valid checksum.
fn segment(src: IpAddr, sport: u16, dst: IpAddr, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let mut tcp = Vec::new();
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&80u16.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&ack.to_be_bytes());
    tcp.extend_from_slice(&[0x50, flags, 0xfa, 0xf0, 0, 0, 0, 0]);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            ip_of(Packet::ipv4_with(eth(0x0800), s, d, 6, tcp, 16, &[]))
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            ip_of(Packet::ipv6_with(eth(0x86dd), s, d, 6, &mut tcp, 16))
        }
        _ => panic!("one family"),
    }
}

/// What came back to the load balancer's side from `vip`:80 to `client`: its TCP
/// flags, sequence and acknowledgement numbers.
fn reply_from(capture: &Socket, vip: IpAddr, client: SocketAddr) -> Option<(u8, u32, u32)> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut buf = [MaybeUninit::<u8>::uninit(); 2048];
    while Instant::now() < deadline {
        let n = match capture.recv(&mut buf) {
            Ok(n) => n,
            // EINTR: a signal to the test process (other tests' children exiting).
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => panic!("capture: {e}"),
        };
        // SAFETY: recv initialised the first n bytes.
        let p: Vec<u8> = buf[..n]
            .iter()
            .map(|b| unsafe { b.assume_init() })
            .collect();
        let (src, dst, proto, l4): (IpAddr, IpAddr, u8, usize) = match p.first().map(|b| b >> 4) {
            Some(4) if p.len() >= 40 => (
                Ipv4Addr::new(p[12], p[13], p[14], p[15]).into(),
                Ipv4Addr::new(p[16], p[17], p[18], p[19]).into(),
                p[9],
                usize::from(p[0] & 0x0f) * 4,
            ),
            Some(6) if p.len() >= 60 => (
                Ipv6Addr::from(<[u8; 16]>::try_from(&p[8..24]).expect("16")).into(),
                Ipv6Addr::from(<[u8; 16]>::try_from(&p[24..40]).expect("16")).into(),
                p[6],
                40,
            ),
            _ => continue,
        };
        let port = |at: usize| u16::from_be_bytes([p[at], p[at + 1]]);
        if proto == 6
            && src == vip
            && dst == client.ip()
            && port(l4) == 80
            && port(l4 + 2) == client.port()
        {
            let word = |at: usize| u32::from_be_bytes(p[at..at + 4].try_into().expect("4"));
            return Some((p[l4 + 13], word(l4 + 4), word(l4 + 8)));
        }
    }
    None
}

/// A tunnelled SYN is answered from the VIP straight to the client (direct server
/// return), and the tunnelled ACK completes the handshake: the listener on the VIP
/// accepts a connection from the client's own address.
#[test]
fn tunnelled_tcp_handshakes_are_accepted_on_the_vips() {
    lb_testbed::needs_root!();
    let pair = Pair::new();
    let decap = pair.decap();
    // Everything the load balancer's side receives (the client's subnet is not local
    // there, so nothing answers the backend's replies: no reset interferes).
    let capture = pair.lb.run(|| {
        let all = i32::from((libc::ETH_P_ALL as u16).to_be());
        let s = Socket::new(Domain::PACKET, Type::DGRAM, Some(Protocol::from(all)))
            .expect("packet socket");
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        s
    });
    let cases = [
        (
            "ipip over IPv4",
            ipip4(),
            IpAddr::from(VIP),
            IpAddr::from(CLIENT),
        ),
        (
            "gue over IPv6",
            gue6(),
            IpAddr::from(VIP6),
            IpAddr::from(CLIENT6),
        ),
        (
            "ipip 6-in-4",
            ipip4(),
            IpAddr::from(VIP6),
            IpAddr::from(CLIENT6),
        ),
        (
            "gue 4-in-6",
            gue6(),
            IpAddr::from(VIP),
            IpAddr::from(CLIENT),
        ),
    ];
    for (i, (name, tunnel, vip, client)) in cases.into_iter().enumerate() {
        // A port per case: an earlier case's closed connection keeps its 4-tuple.
        let client = SocketAddr::new(client, 40000 + i as u16);
        let listener = pair.backend.run(move || {
            let l = TcpListener::bind((vip, 80)).expect("listen on VIP:80");
            l.set_nonblocking(true).expect("nonblocking");
            l
        });
        let isn = 0x1000_0000;
        pair.send(
            tunnel,
            segment(client.ip(), client.port(), vip, isn, 0, 0x02),
        );
        let Some((flags, seq, ack)) = reply_from(&capture, vip, client) else {
            let counts = decap.maps().counts().expect("counts");
            panic!("{name}: no SYN-ACK from the VIP to the client; lb_decap counters:\n{counts}");
        };
        assert_eq!(flags & 0x12, 0x12, "{name}: SYN-ACK");
        assert_eq!(ack, isn + 1, "{name}: acknowledges the SYN");
        pair.send(
            tunnel,
            segment(client.ip(), client.port(), vip, isn + 1, seq + 1, 0x10),
        );
        let deadline = Instant::now() + Duration::from_secs(3);
        let peer = loop {
            match listener.accept() {
                Ok((_, peer)) => break peer,
                Err(e)
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted)
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("{name}: accept: {e}"),
            }
        };
        assert_eq!(peer, client, "{name}: the client's address");
    }
    let counts = decap.maps().counts().expect("counts");
    assert_eq!(counts.get(DecapsulatedIpip), 4, "{counts}");
    assert_eq!(counts.get(DecapsulatedGue), 4, "{counts}");
    assert_eq!(
        counts.get(RefusedNotVip) + counts.get(RefusedMalformed),
        0,
        "{counts}"
    );
}
