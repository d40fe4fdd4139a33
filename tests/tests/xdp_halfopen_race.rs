//! Two CPUs writing one half-open bucket at once: a way torn between two writers must
//! read as a miss, never as the other flow's backend. The table is one bucket of four
//! ways, and two threads, pinned to different CPUs, each run a SYN and then its ACK for
//! flows of their own through the same loaded `lb_xdp`; every packet must go to the
//! backend the table gives its own flow (a half-open hit and a miss both do).

use std::net::Ipv4Addr;

use aya::programs::Xdp;
use aya_obj::programs::XdpAttachType;
use lb_common::{FlowKey, ForwardingMode};
use lb_model::{config::FlowTables, dataplane::addr16};
use lb_testbed::{
    fixture::{
        CLIENT_MAC, FixtureHost, HOST_MAC, XdpRig, action, backend, mac_of, pin_thread_to_cpu,
        service, test_run_xdp,
    },
    lbd::{BpfFs, TempDir},
    packet::{
        Packet, TCP,
        flags::{ACK, SYN},
    },
};

const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
/// Flows per thread and round, each a SYN and its ACK.
const FLOWS: u16 = 30_000;
/// Rounds, each from a client address of its own. With the data plane taking a torn
/// way for a hit (its check ignored), two runs in five of one round caught it, and two
/// in three of four rounds (the race is real but rare: a write is ~10 ns of a ~2 µs
/// call); with the check, no run has sent a packet elsewhere.
const ROUNDS: u8 = 4;

fn client(round: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 1, round)
}

fn key(round: u8, sport: u16) -> FlowKey {
    FlowKey {
        src: addr16(client(round).into()),
        dst: addr16(VIP.into()),
        src_port_be: sport.to_be(),
        dst_port_be: 80u16.to_be(),
        proto: TCP,
        _pad: 0,
        _pad2: 0,
    }
}

#[test]
fn a_way_torn_by_two_cpus_never_sends_a_flow_to_another_flows_backend() {
    lb_testbed::needs_root!();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let host = FixtureHost::new();
    let dir = TempDir::new("halfopen-race");
    let bpffs = BpfFs::mount(&dir.path().join("bpf"));
    let pin = bpffs.path().join("lb_xdp");
    host.run(move || {
        let tables = FlowTables {
            embryonic_entries: 4,
            ..FlowTables::default()
        };
        let mut rig = XdpRig::load_sized(0x5eed, None, &tables);
        let spec = service(
            "dsr",
            VIP.into(),
            80,
            TCP,
            ForwardingMode::Dsr,
            (0..3).map(|i| backend(i).0).collect(),
        );
        rig.program(spec.clone());
        // Thread t sends from ports t·FLOWS + 1 ...: where the table sends each flow.
        let want: Vec<Vec<[u8; 6]>> = (0..ROUNDS)
            .map(|r| {
                (0..=2 * FLOWS)
                    .map(|p| mac_of(rig.expected_backend(&spec.key, &key(r, p))))
                    .collect()
            })
            .collect();
        let distinct: std::collections::HashSet<_> = want[0][1..].iter().collect();
        assert_eq!(distinct.len(), 3, "the flows go to all three backends");
        rig.dataplane
            .xdp_program("lb_xdp")
            .expect("lb_xdp")
            .pin(&pin)
            .expect("pin lb_xdp");
        let ifindex = rig.ifindex();
        let threads: Vec<_> = (0..2u16)
            .map(|t| {
                let (pin, want) = (pin.clone(), want.clone());
                std::thread::spawn(move || {
                    pin_thread_to_cpu(usize::from(t)).expect("pin to a CPU");
                    let mut prog =
                        Xdp::from_pin(&pin, XdpAttachType::Interface).expect("open lb_xdp");
                    let mut wrong = Vec::new();
                    for r in 0..ROUNDS {
                        for i in 1..=FLOWS {
                            let sport = t * FLOWS + i;
                            for flags in [SYN, ACK] {
                                let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
                                let p = Packet::tcp4(eth, client(r), sport, VIP, 80, b"")
                                    .with_tcp_flags(flags);
                                let (out, _) = test_run_xdp(&mut prog, ifindex, &p.bytes);
                                if out.action != action::TX
                                    || out.bytes[0..6] != want[usize::from(r)][usize::from(sport)]
                                {
                                    wrong.push((r, sport, flags, out.action));
                                }
                            }
                        }
                    }
                    wrong
                })
            })
            .collect();
        let wrong: Vec<_> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("thread"))
            .collect();
        assert!(
            wrong.is_empty(),
            "{} packets went elsewhere than their flow's backend: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(10)]
        );
    });
}
