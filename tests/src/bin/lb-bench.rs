//! `cargo xtask bench dataplane`: per-packet cost of each fixture class through
//! BPF_PROG_TEST_RUN, against an empty XDP program measured in the same run.
//!
//! Method (shared/TOOLCHAIN.md): one packet per call (`repeat = 1`), the kernel-reported
//! duration averaged over many calls per trial, trials of every class interleaved with
//! the floor, the measuring thread pinned to one CPU. Reported: median [min..max] of the
//! trial means, the ratio to the floor's median, and the net ns above the floor. With
//! `--against`, the two objects' trials alternate which goes first, and their nets are
//! compared both by median and by fastest trial (the least disturbed on a shared host).

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    process::ExitCode,
    time::Duration,
};

use lb_common::ForwardingMode;
use lb_model::{dataplane::FlowTable, dataplane::ServiceSpec};
use lb_testbed::{
    benchkit::rotated,
    fixture::{CLIENT_MAC, FixtureHost, HOST_MAC, XdpRig, action, backend, backend6, service},
    is_root,
    packet::{Packet, TCP, flags},
};

const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 1);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const SEED: u32 = 0x5eed;
/// Flows held in the tables before timing (see `background_flows`); ports below the
/// timed flows' (40000, 40001) and the new-5-tuple class's (from 1 with a new source).
const BACKGROUND_FLOWS: u16 = 256;

/// One benchmark class: what it sends and what the program must answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Floor,
    NonVip,
    EstablishedV4,
    EstablishedV6,
    NewFlowV4,
    NewFlowsV4,
    StrayAckV4,
    NatEstablished,
    NatReply,
    NatStrayAck,
    IpipEstablishedV4,
    IpipNewFlowV4,
    DecapIpipV4,
    DecapPass,
}

impl Class {
    const ALL: [Class; 14] = [
        Class::Floor,
        Class::NonVip,
        Class::EstablishedV4,
        Class::EstablishedV6,
        Class::NewFlowV4,
        Class::NewFlowsV4,
        Class::StrayAckV4,
        Class::NatEstablished,
        Class::NatReply,
        Class::NatStrayAck,
        Class::IpipEstablishedV4,
        Class::IpipNewFlowV4,
        Class::DecapIpipV4,
        Class::DecapPass,
    ];

    fn name(self) -> &'static str {
        match self {
            Class::Floor => "empty XDP program (floor)",
            Class::NonVip => "non-VIP pass",
            Class::EstablishedV4 => "established TCP v4 (flow cache hit)",
            Class::EstablishedV6 => "established TCP v6 (flow cache hit)",
            Class::NewFlowV4 => "new flow v4 (SYN: Maglev + half-open insert)",
            Class::NewFlowsV4 => "SYN from a new 5-tuple every packet v4",
            Class::StrayAckV4 => "ACK without state v4 (dsr: table, no state)",
            Class::NatEstablished => "nat established TCP v4 (tail call + SNAT)",
            Class::NatReply => "nat reply v4 (translated back)",
            Class::NatStrayAck => "ACK without state, nat (dropped)",
            Class::IpipEstablishedV4 => "ipip established TCP v4 (encapsulated)",
            Class::IpipNewFlowV4 => "ipip new flow v4 (SYN: Maglev + encap)",
            Class::DecapIpipV4 => "backend lb_decap: ipip v4 stripped (TC)",
            Class::DecapPass => "backend lb_decap: not a tunnel, passed (TC)",
        }
    }

    fn expected_action(self) -> u32 {
        match self {
            Class::Floor | Class::NonVip => action::PASS,
            Class::NatStrayAck => action::DROP,
            _ => action::TX,
        }
    }
}

fn services() -> Vec<ServiceSpec> {
    let b4: Vec<IpAddr> = (0..3).map(|i| backend(i).0).collect();
    let b6: Vec<IpAddr> = (0..3).map(|i| backend6(i).0).collect();
    vec![
        service(
            "nat",
            VIP.into(),
            8080,
            TCP,
            ForwardingMode::Nat,
            b4.clone(),
        ),
        service("web", VIP.into(), 80, TCP, ForwardingMode::Dsr, b4.clone()),
        service("tunnel", VIP.into(), 81, TCP, ForwardingMode::Ipip, b4),
        service("web6", VIP6.into(), 80, TCP, ForwardingMode::Dsr, b6),
    ]
}

/// `rig` with the benchmark's NAT range, tunnel settings and services.
fn rig_from(mut rig: XdpRig) -> XdpRig {
    rig.set_nat(20000, 40000);
    rig.set_tunnel(lb_common::TunnelConfig {
        source_v4: [198, 18, 200, 0],
        host_mask_v4: [0, 0, 0, 0xff],
        gue_port_be: 6080u16.to_be(),
        ..lb_common::TunnelConfig::default()
    });
    for s in services() {
        rig.program(s);
    }
    background_flows(&mut rig);
    rig
}

/// Flows of other clients, held in both flow tables before anything is timed, as on
/// any node with traffic. Without them the new-flow classes time a single table
/// element again and again: the first one a fresh per-CPU LRU hands out, which
/// measured ~120 ns slower per insert than the elements after it on this kind of
/// machine (its placement, not our code), and not the element a busy node gets.
fn background_flows(rig: &mut XdpRig) {
    for port in 1..=BACKGROUND_FLOWS {
        for dport in [80, 81] {
            let syn = Packet::tcp4(
                Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800),
                CLIENT,
                port,
                VIP,
                dport,
                b"payload",
            );
            let (out, _) = rig.run_timed(&syn.bytes, false);
            assert_eq!(out.action, action::TX, "background SYN");
            if port % 2 == 0 {
                // Every other one completes its handshake: established.
                let ack = syn.with_tcp_flags(flags::ACK);
                let (out, _) = rig.run_timed(&ack.bytes, false);
                assert_eq!(out.action, action::TX, "background ACK");
            }
        }
    }
}

/// Mean kernel time per packet over `calls` calls of one class.
fn trial(rig: &mut XdpRig, class: Class, calls: u32) -> f64 {
    let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
    let eth6 = Packet::eth(HOST_MAC, CLIENT_MAC, 0x86dd);
    let mut packet = match class {
        Class::Floor | Class::EstablishedV4 | Class::NewFlowV4 | Class::NewFlowsV4 => {
            Packet::tcp4(eth, CLIENT, 40000, VIP, 80, b"payload")
        }
        Class::NonVip => Packet::tcp4(
            eth,
            CLIENT,
            40000,
            Ipv4Addr::new(198, 18, 0, 2),
            22,
            b"payload",
        ),
        Class::EstablishedV6 => Packet::tcp6(eth6, CLIENT6, 40000, VIP6, 80, b"payload"),
        Class::NatEstablished | Class::NatReply => {
            Packet::tcp4(eth, CLIENT, 40000, VIP, 8080, b"payload")
        }
        Class::StrayAckV4 => {
            Packet::tcp4(eth, CLIENT, 40001, VIP, 80, b"payload").with_tcp_flags(flags::ACK)
        }
        Class::NatStrayAck => {
            Packet::tcp4(eth, CLIENT, 40001, VIP, 8080, b"payload").with_tcp_flags(flags::ACK)
        }
        Class::IpipEstablishedV4 | Class::IpipNewFlowV4 => {
            Packet::tcp4(eth, CLIENT, 40000, VIP, 81, b"payload")
        }
        Class::DecapIpipV4 | Class::DecapPass => unreachable!("measured by decap_trial"),
    }
    .bytes;
    if class == Class::NatReply {
        // Establish the flow, then replay the backend's answer to the NAT port.
        let (out, _) = rig.run_timed(&packet, false);
        assert_eq!(out.action, action::TX, "nat flow");
        let to = Ipv4Addr::new(out.bytes[30], out.bytes[31], out.bytes[32], out.bytes[33]);
        let nat_port = u16::from_be_bytes([out.bytes[34], out.bytes[35]]);
        let eth = Packet::eth(HOST_MAC, [2, 0, 0, 0, 0, 0x99], 0x0800);
        packet = Packet::tcp4(
            eth,
            to,
            8080,
            lb_testbed::fixture::NAT_ADDR,
            nat_port,
            b"payload",
        )
        .bytes;
    }
    let floor = class == Class::Floor;
    // Warm up: the established classes need their flow established first (a SYN, then
    // the ACK that promotes it; the timed packets are ACKs).
    if matches!(
        class,
        Class::EstablishedV4
            | Class::EstablishedV6
            | Class::NatEstablished
            | Class::IpipEstablishedV4
    ) {
        let (out, _) = rig.run_timed(&packet, floor);
        assert_eq!(out.action, action::TX, "{} SYN", class.name());
        packet = Packet { bytes: packet }.with_tcp_flags(flags::ACK).bytes;
    }
    let (out, _) = rig.run_timed(&packet, floor);
    assert_eq!(
        out.action,
        class.expected_action(),
        "{} gave action {}",
        class.name(),
        out.action
    );
    // The new-flow class: one 5-tuple whose conntrack entry is removed before every
    // call (outside the measured run), so each run takes the whole new-flow path with
    // warm caches. The many-flows class below shows the memory-bound case separately.
    let dport: u16 = if class == Class::IpipNewFlowV4 {
        81
    } else {
        80
    };
    let key = lb_common::FlowKey {
        src: lb_model::dataplane::addr16(CLIENT.into()),
        dst: lb_model::dataplane::addr16(VIP.into()),
        src_port_be: 40000u16.to_be(),
        dst_port_be: dport.to_be(),
        proto: TCP,
        ..lb_common::FlowKey::default()
    };
    // Every timed call's result is checked (outside the kernel-measured time): the
    // action, and the bytes against the first call's where the input does not change.
    let first = out;
    let backend_macs: Vec<[u8; 6]> = (0..3).flat_map(|i| [backend(i).1, backend6(i).1]).collect();
    let mut total = Duration::ZERO;
    for i in 0..calls {
        if matches!(class, Class::NewFlowV4 | Class::IpipNewFlowV4) {
            // The two tables a dsr SYN looks at (the established classes before
            // pinned the same 5-tuple).
            for table in [FlowTable::Established, FlowTable::Embryonic] {
                rig.dataplane
                    .maps_mut()
                    .forget_in(table, &key)
                    .expect("forget flow");
            }
        }
        if class == Class::NewFlowsV4 {
            // A new source address and port for every call: each packet is a new flow.
            let flow = i + 1;
            packet[28..30].copy_from_slice(&((flow >> 16) as u16).to_be_bytes());
            packet[34..36].copy_from_slice(&(flow as u16).to_be_bytes());
        }
        let (got, took) = rig.run_timed(&packet, floor);
        total += took;
        assert_eq!(
            got.action,
            first.action,
            "{} call {i}: action",
            class.name()
        );
        if class == Class::NewFlowsV4 {
            let dmac: [u8; 6] = got.bytes[..6].try_into().expect("a frame");
            assert!(
                backend_macs.contains(&dmac),
                "{} call {i}: to a backend",
                class.name()
            );
        } else {
            assert!(
                got.bytes == first.bytes,
                "{} call {i}: output bytes",
                class.name()
            );
        }
    }
    total.as_nanos() as f64 / f64::from(calls)
}

/// Mean kernel time per frame over `calls` calls of a backend's `lb_decap` (a TC
/// program: its runs include building an skb, so compare its two classes with each
/// other rather than with the XDP floor). Every call's verdict and bytes are checked.
fn decap_trial(rig: &mut lb_testbed::decap::DecapRig, class: Class, calls: u32) -> f64 {
    let inner = Packet::tcp4(
        Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800),
        CLIENT,
        40000,
        VIP,
        80,
        b"payload",
    )
    .bytes[14..]
        .to_vec();
    let frame = match class {
        Class::DecapIpipV4 => {
            lb_testbed::decap::Tunnel::ipip(Ipv4Addr::new(198, 18, 0, 2).into(), backend(0).0)
                .frame(backend(0).1, HOST_MAC, &inner)
        }
        _ => {
            Packet::tcp4(
                Packet::eth(backend(0).1, CLIENT_MAC, 0x0800),
                CLIENT,
                40000,
                Ipv4Addr::new(198, 18, 0, 11),
                22,
                b"payload",
            )
            .bytes
        }
    };
    let (want_action, want, _) = rig.run_timed(&frame);
    if class == Class::DecapIpipV4 {
        assert_eq!(&want[14..], &inner[..], "decapsulated to the inner packet");
    } else {
        assert_eq!(want, frame, "passed untouched");
    }
    let mut total = Duration::ZERO;
    for i in 0..calls {
        let (action, out, took) = rig.run_timed(&frame);
        assert!(
            action == want_action && out == want,
            "{} call {i}",
            class.name()
        );
        total += took;
    }
    total.as_nanos() as f64 / f64::from(calls)
}

fn pin_to_cpu(cpu: usize) {
    if let Err(e) = lb_testbed::fixture::pin_thread_to_cpu(cpu) {
        eprintln!("warning: could not pin to CPU {cpu}: {e}");
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One build of the programs under test: the object embedded at build time, or one
/// read from a file (`--object`, `--against`), so two builds can be compared in one
/// run on one machine.
struct Subject {
    name: String,
    object: Option<Vec<u8>>,
}

impl Subject {
    fn read(path: &str) -> Result<Self, String> {
        let object = std::fs::read(path).map_err(|e| format!("reading {path}: {e}"))?;
        Ok(Self {
            name: path.to_owned(),
            object: Some(object),
        })
    }

    fn rig(&self) -> XdpRig {
        match &self.object {
            Some(object) => rig_from(XdpRig::load_object(SEED, object)),
            None => rig_from(XdpRig::load(SEED)),
        }
    }
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: lb-bench [--calls N] [--trials N] [--only TEXT] [--object FILE] [--against FILE]"
    );
    eprintln!("  --only TEXT: the floor and the classes whose name contains TEXT");
    eprintln!("  --object FILE: measure this lb-ebpf object instead of the embedded one");
    eprintln!("  --against FILE: also measure this object, interleaved, and compare");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut calls: u32 = 500_000;
    let mut trials: usize = 5;
    let mut only: Option<String> = None;
    let mut subjects = vec![Subject {
        name: "embedded".to_owned(),
        object: None,
    }];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let value = args.next();
        let number = value.as_deref().and_then(|v| v.parse::<u64>().ok());
        match (a.as_str(), number, value) {
            ("--calls", Some(n), _) if n > 0 => calls = n as u32,
            ("--trials", Some(n), _) if n > 0 => trials = n as usize,
            ("--only", _, Some(v)) => only = Some(v),
            ("--object" | "--against", _, Some(path)) => {
                let subject = match Subject::read(&path) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("lb-bench: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                if a == "--object" {
                    subjects[0] = subject;
                } else {
                    subjects.push(subject);
                }
            }
            _ => return usage(),
        }
    }
    let classes: Vec<Class> = Class::ALL
        .into_iter()
        .filter(|c| *c == Class::Floor || only.as_deref().is_none_or(|t| c.name().contains(t)))
        .collect();
    if !is_root() {
        eprintln!("lb-bench: needs root (BPF_PROG_TEST_RUN)");
        return ExitCode::FAILURE;
    }
    let host = FixtureHost::new();
    let run_classes = classes.clone();
    let names: Vec<String> = subjects.iter().map(|s| s.name.clone()).collect();
    let objects: Vec<Vec<u8>> = subjects
        .iter()
        .map(|s| {
            s.object
                .clone()
                .unwrap_or_else(|| lb_dataplane::kernel::BPF_OBJECT.to_vec())
        })
        .collect();
    let (results, programs) = host.run(move || {
        let classes = run_classes;
        pin_to_cpu(1);
        let mut rigs: Vec<XdpRig> = subjects.iter().map(Subject::rig).collect();
        let mut decap = lb_testbed::decap::DecapRig::load(&[VIP.into()], &[6080]);
        // samples[subject][class]
        let mut samples: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); classes.len()]; rigs.len()];
        for t in 0..trials {
            for (c, class) in classes.iter().enumerate() {
                // Each trial starts with the next subject (see `rotated`).
                for s in rotated(rigs.len(), t) {
                    let rig = &mut rigs[s];
                    let decap_class = matches!(class, Class::DecapIpipV4 | Class::DecapPass);
                    if decap_class && s > 0 {
                        // The backend's program is the embedded one's for every subject.
                        continue;
                    }
                    // New flows get fresh maps every trial so each trial inserts into a
                    // conntrack table of the same size.
                    let mean = if *class == Class::NewFlowsV4 {
                        trial(&mut subjects[s].rig(), *class, calls)
                    } else if decap_class {
                        decap_trial(&mut decap, *class, calls)
                    } else {
                        trial(rig, *class, calls)
                    };
                    eprintln!(
                        "trial {}/{trials} [{s}]: {:<42} {mean:7.1} ns",
                        t + 1,
                        class.name()
                    );
                    samples[s][c].push(mean);
                }
            }
        }
        let programs: Vec<_> = rigs
            .iter()
            .map(|r| r.dataplane.verified_instructions())
            .collect();
        (samples, programs)
    });
    // Per subject and class: the net of the median trial and of the fastest.
    let mut medians: Vec<Vec<Option<(f64, f64)>>> = Vec::new();
    for (s, samples) in results.into_iter().enumerate() {
        let floor = median(&mut samples[0].clone());
        let floor_min = samples[0].iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "\n[{s}] {}: per-packet cost, BPF_PROG_TEST_RUN, repeat=1, {calls} calls x {trials} trials, CPU 1",
            names[s]
        );
        println!(
            "{:<42} {:>9} {:>19} {:>8} {:>9}",
            "class", "median ns", "[min..max]", "x floor", "net ns"
        );
        let mut nets = Vec::new();
        for (class, mut s) in classes.iter().zip(samples) {
            if s.is_empty() {
                nets.push(None);
                continue;
            }
            // `median` sorts the trials: the fastest is first.
            let med = median(&mut s);
            let (min, max) = (s[0], s[s.len() - 1]);
            println!(
                "{:<42} {med:>9.1} {:>19} {:>8.2} {:>9.1}",
                class.name(),
                format!("[{min:.1}..{max:.1}]"),
                med / floor,
                med - floor
            );
            nets.push(Some((med - floor, min - floor_min)));
        }
        medians.push(nets);
    }
    if medians.len() == 2 {
        println!(
            "\nnet ns above each subject's own floor: [1] {} vs [0] {}",
            names[1], names[0]
        );
        // Medians, and the fastest trials' nets: on a shared host other tenants only
        // ever add time, so the fastest trial of each is the one least disturbed (here
        // one object against itself: medians apart by up to 45%, the fastest trials
        // by up to 11%).
        println!(
            "{:<42} {:>9} {:>9} {:>8} {:>11} {:>11} {:>8}",
            "class", "[0] net", "[1] net", "[1]/[0]", "[0] fastest", "[1] fastest", "[1]/[0]"
        );
        for (c, class) in classes.iter().enumerate().skip(1) {
            if let (Some((a, a_min)), Some((b, b_min))) = (medians[0][c], medians[1][c]) {
                println!(
                    "{:<42} {a:>9.1} {b:>9.1} {:>8.2} {a_min:>11.1} {b_min:>11.1} {:>8.2}",
                    class.name(),
                    b / a,
                    b_min / a_min
                );
            }
        }
    }
    for (s, programs) in programs.into_iter().enumerate() {
        let stacks = lb_testbed::bpfstack::program_stacks(&objects[s]).unwrap_or_else(|e| {
            eprintln!("lb-bench: stack depths of [{s}]: {e}");
            Vec::new()
        });
        println!(
            "\n[{s}] per program: instructions the verifier processed; stack bytes, its \
             own frame and its deepest chain of calls (of {}), read from the object",
            lb_testbed::bpfstack::STACK_LIMIT
        );
        println!(
            "{:<14} {:>12} {:>6} {:>6}",
            "program", "instructions", "frame", "chain"
        );
        for (name, n) in programs {
            let n = n.map_or_else(|| "?".to_owned(), |n| n.to_string());
            let (frame, chain) = stacks
                .iter()
                .find(|p| p.name == name)
                .map_or(("?".to_owned(), "?".to_owned()), |p| {
                    (p.frame.to_string(), p.chain.to_string())
                });
            println!("{name:<14} {n:>12} {frame:>6} {chain:>6}");
        }
    }
    ExitCode::SUCCESS
}
