//! `lb_probe`, the node's TC egress program that sends health probes of `ipip`/`gue`
//! services through the tunnel, through BPF_PROG_TEST_RUN: a packet as the node's
//! stack sends it from a probe socket (node → VIP:port, the probe mark on the skb)
//! leaves encapsulated to the backend the mark names, every byte checked (outer
//! checksum from scratch, the inner packet untouched) and its mark cleared; an
//! unmarked packet passes untouched; a mark naming no backend is dropped; each counted;
//! the log build's `lb_probe` loads and does the same.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use aya::{TestRun as _, TestRunOptions};
use lb_common::{ForwardingMode, ProbeCounter, TunnelConfig, probe::probe_mark};
use lb_model::dataplane::{ServiceSpec, vip_key};
use lb_testbed::{
    fixture::{
        FixtureHost, HOST_ADDR, HOST_ADDR6, HOST_MAC, Hook, ROUTED_V4, ROUTER_MAC, XdpRig, backend,
        backend6, mac_of, with_hook,
    },
    packet::{Packet, TCP, checksum},
};

const SEED: u32 = 0x9b0e;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1);
const SRC4: Ipv4Addr = Ipv4Addr::new(198, 18, 200, 0);
const SRC6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x200, 0, 0, 0, 0, 0);
const GUE_PORT: u16 = 6080;
/// `TC_ACT_UNSPEC`, `TC_ACT_OK`, `TC_ACT_SHOT`.
const UNSPEC: i32 = -1;
const OK: i32 = 0;
const SHOT: i32 = 2;

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

fn spec(vip: IpAddr, port: u16, mode: ForwardingMode, backends: &[IpAddr]) -> ServiceSpec {
    ServiceSpec {
        name: format!("{vip}:{port}"),
        key: vip_key(vip, port, TCP),
        mode,
        backends: backends.to_vec(),
        table_size: None,
        weights: Vec::new(),
        ports: Vec::new(),
    }
}

/// A probe's SYN as the node's stack hands it to egress: to the router's MAC (the
/// policy route's gateway), from the node's address to the VIP.
fn probe_syn(vip: IpAddr, sport: u16) -> Vec<u8> {
    match vip {
        IpAddr::V4(v) => {
            Packet::tcp4(
                Packet::eth(ROUTER_MAC, HOST_MAC, 0x0800),
                HOST_ADDR,
                sport,
                v,
                80,
                b"GET /healthz",
            )
            .bytes
        }
        IpAddr::V6(v) => {
            Packet::tcp6(
                Packet::eth(ROUTER_MAC, HOST_MAC, 0x86dd),
                HOST_ADDR6,
                sport,
                v,
                80,
                b"GET /healthz",
            )
            .bytes
        }
    }
}

/// What `lb_probe` did to one frame sent with `mark`.
struct Run {
    action: i32,
    bytes: Vec<u8>,
    mark_after: u32,
}

/// Runs `frame` through `lb_probe` as an skb leaving `eth0` with `mark`.
fn run(rig: &mut XdpRig, frame: &[u8], mark: u32) -> Run {
    let ifindex = lb_userspace::node::ifindex("eth0").expect("eth0");
    // struct __sk_buff: mark at 8, ifindex at 40 (the device it leaves by).
    let mut skb = [0u8; 192];
    skb[8..12].copy_from_slice(&mark.to_ne_bytes());
    skb[40..44].copy_from_slice(&ifindex.to_ne_bytes());
    let mut ctx_out = [0u8; 192];
    let mut out = vec![0u8; frame.len() + 256];
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(frame);
    opts.data_out = Some(&mut out);
    opts.ctx_in = Some(&skb);
    opts.ctx_out = Some(&mut ctx_out);
    let result = rig
        .dataplane
        .probe_program()
        .expect("lb_probe")
        .test_run(opts)
        .expect("BPF_PROG_TEST_RUN");
    out.truncate(result.data_size_out as usize);
    Run {
        action: result.return_value as i32,
        bytes: out,
        mark_after: u32::from_ne_bytes(ctx_out[8..12].try_into().expect("4")),
    }
}

/// Runs `frame` and asserts exactly `counter` of `lb_probe`'s counters moved.
fn counted(rig: &mut XdpRig, frame: &[u8], mark: u32, counter: ProbeCounter) -> Run {
    let before = rig.dataplane.probe_counts().expect("counts");
    let r = run(rig, frame, mark);
    let after = rig.dataplane.probe_counts().expect("counts");
    for c in ProbeCounter::ALL {
        assert_eq!(
            after[c as usize] - before[c as usize],
            u64::from(c == counter),
            "counter {} (expected {} only)",
            c.name(),
            counter.name()
        );
    }
    r
}

/// The frame `inner` (an Ethernet frame) must leave as, encapsulated to `to` via
/// `dmac`; the outer source (from the block) and the choices the program makes per
/// flow (flow label, GUE source port) are read from `got` and checked apart.
fn expected(inner: &[u8], to: IpAddr, dmac: [u8; 6], gue: bool, got: &[u8]) -> Vec<u8> {
    let ip = &inner[14..];
    let inner_v6 = ip[0] >> 4 == 6;
    let tos = if inner_v6 {
        (ip[0] << 4) | (ip[1] >> 4)
    } else {
        ip[1]
    };
    let udp_len = if gue { 8 } else { 0 };
    let proto = match (gue, inner_v6) {
        (true, _) => 17,
        (false, false) => 4,
        (false, true) => 41,
    };
    let mut out = Vec::new();
    out.extend_from_slice(&dmac);
    out.extend_from_slice(&HOST_MAC);
    let udp_at = match to {
        IpAddr::V4(dst) => {
            out.extend_from_slice(&0x0800u16.to_be_bytes());
            let src: [u8; 4] = got[26..30].try_into().expect("4");
            assert_eq!(src[..3], SRC4.octets()[..3], "outer source from the block");
            let mut h = vec![0x45, tos];
            h.extend_from_slice(&((20 + udp_len + ip.len()) as u16).to_be_bytes());
            h.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
            h.extend_from_slice(&src);
            h.extend_from_slice(&dst.octets());
            let c = checksum(&[&h]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend_from_slice(&h);
            34
        }
        IpAddr::V6(dst) => {
            out.extend_from_slice(&0x86ddu16.to_be_bytes());
            let src: [u8; 16] = got[22..38].try_into().expect("16");
            assert_eq!(src[..8], SRC6.octets()[..8], "outer source from the block");
            let label = u32::from_be_bytes(got[14..18].try_into().expect("4")) & 0xfffff;
            let vtc = (6u32 << 28) | (u32::from(tos) << 20) | label;
            out.extend_from_slice(&vtc.to_be_bytes());
            out.extend_from_slice(&((udp_len + ip.len()) as u16).to_be_bytes());
            out.extend_from_slice(&[proto, 64]);
            out.extend_from_slice(&src);
            out.extend_from_slice(&dst.octets());
            54
        }
    };
    if gue {
        let sport = u16::from_be_bytes([got[udp_at], got[udp_at + 1]]);
        out.extend_from_slice(&sport.to_be_bytes());
        out.extend_from_slice(&GUE_PORT.to_be_bytes());
        out.extend_from_slice(&((8 + ip.len()) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
    }
    out.extend_from_slice(ip);
    out
}

/// The backend id the programmer gave `backend` in `svc`.
fn id_of(rig: &XdpRig, svc: &ServiceSpec, backend: IpAddr) -> u32 {
    let p = rig.programmer.service(&svc.key).expect("programmed");
    let i = p
        .backends
        .iter()
        .position(|&b| b == backend)
        .expect("listed");
    p.backend_ids[i]
}

/// Loads the data plane (the TC programs) with the tunnel block and `services`.
fn rig(services: &[ServiceSpec]) -> XdpRig {
    let mut rig = with_hook(Hook::Tc, || XdpRig::load(SEED));
    rig.set_tunnel(tunnel());
    for s in services {
        rig.program(s.clone());
    }
    rig
}

#[test]
fn marked_probes_leave_encapsulated_to_the_backend_the_mark_names() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let routed = IpAddr::V4(Ipv4Addr::from(u32::from(ROUTED_V4) + 7));
        let v4 = [backend(0).0, backend(1).0, routed];
        let v6 = [backend6(0).0, backend6(1).0];
        let (vip, vip6) = (IpAddr::V4(VIP), IpAddr::V6(VIP6));
        let services = [
            spec(vip, 80, ForwardingMode::Ipip, &v4),
            spec(vip6, 80, ForwardingMode::Gue, &v6),
            spec(vip6, 81, ForwardingMode::Ipip, &v4),
        ];
        let mut rig = rig(&services);
        // (service, backend, next hop MAC, GUE, VIP): 4-in-4 to an on-link backend and
        // through the router, 6-in-6 in GUE, 6-in-4.
        let cases = [
            (&services[0], v4[1], mac_of(v4[1]), false, vip),
            (&services[0], routed, ROUTER_MAC, false, vip),
            (&services[1], v6[0], mac_of(v6[0]), true, vip6),
            (&services[2], v4[0], mac_of(v4[0]), false, vip6),
        ];
        for (sport, (svc, to, dmac, gue, vip)) in (41000u16..).zip(cases) {
            let frame = probe_syn(vip, sport);
            let mark = probe_mark(id_of(&rig, svc, to), gue);
            let counter = if gue {
                ProbeCounter::EncapsulatedGue
            } else {
                ProbeCounter::EncapsulatedIpip
            };
            let r = counted(&mut rig, &frame, mark, counter);
            assert_eq!(r.action, OK, "sent on eth0 (the next hop is there)");
            assert_eq!(
                r.bytes,
                expected(&frame, to, dmac, gue, &r.bytes),
                "probe to {to} via {dmac:02x?}"
            );
            if to.is_ipv4() {
                assert_eq!(checksum(&[&r.bytes[14..34]]), 0, "outer checksum valid");
            }
            assert_eq!(r.mark_after, 0, "the mark is cleared once encapsulated");
        }
    });
}

#[test]
fn unmarked_packets_pass_untouched_and_unknown_backends_are_dropped() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let svc = spec(IpAddr::V4(VIP), 80, ForwardingMode::Ipip, &[backend(0).0]);
        let mut rig = rig(std::slice::from_ref(&svc));
        let frame = probe_syn(IpAddr::V4(VIP), 42000);
        // The node's own traffic: no mark, or a mark of someone else's.
        for mark in [0, 0x1234_0005, 0x4c44_0000] {
            let r = counted(&mut rig, &frame, mark, ProbeCounter::Passed);
            assert_eq!(r.action, UNSPEC, "mark {mark:#x}: left to the next program");
            assert_eq!(r.bytes, frame, "mark {mark:#x}: untouched");
            assert_eq!(r.mark_after, mark);
        }
        // A backend id never given out.
        let r = counted(
            &mut rig,
            &frame,
            probe_mark(60000, false),
            ProbeCounter::DropUnknownBackend,
        );
        assert_eq!(r.action, SHOT);
        // A marked packet that is not TCP/UDP over IP.
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        let mark = probe_mark(id_of(&rig, &svc, backend(0).0), false);
        let r = counted(&mut rig, &arp, mark, ProbeCounter::DropMalformed);
        assert_eq!(r.action, SHOT);
    });
}

#[test]
fn the_log_build_of_lb_probe_loads_and_encapsulates() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let svc = spec(IpAddr::V4(VIP), 80, ForwardingMode::Ipip, &[backend(0).0]);
        let mut rig = with_hook(Hook::Tc, || {
            XdpRig::load_object(SEED, lb_dataplane::kernel::BPF_OBJECT_LOG)
        });
        rig.set_tunnel(tunnel());
        rig.program(svc.clone());
        let frame = probe_syn(IpAddr::V4(VIP), 43000);
        let mark = probe_mark(id_of(&rig, &svc, backend(0).0), false);
        let r = counted(&mut rig, &frame, mark, ProbeCounter::EncapsulatedIpip);
        assert_eq!(r.action, OK);
        let to = backend(0).0;
        assert_eq!(r.bytes, expected(&frame, to, mac_of(to), false, &r.bytes));
    });
}
