//! Flow admission and lifetime through BPF_PROG_TEST_RUN: which packets may create
//! state, how a half-open flow becomes established, that entries of an earlier owner of
//! a backend id are ignored, and how a `nat` flow's port follows TCP's states until it
//! is released. Each fixture checks the verdict, the output bytes, the counters the
//! packet moved (verdicts and events) and the flow tables it left behind.

use std::net::{IpAddr, Ipv4Addr};

use lb_common::{Counter, FlowEntry, FlowKey, ForwardingMode, NatState};
use lb_dataplane::natsweep::NatSweeper;
use lb_model::{
    config::FlowTables, dataplane::FlowTable, dataplane::MapRead as _, dataplane::ServiceSpec,
    dataplane::addr16,
};
use lb_testbed::{
    fixture::{
        CLIENT_ADDR, CLIENT_MAC, FixtureHost, HOST_MAC, NAT_ADDR, Outcome, XdpRig, action, backend,
        mac_of, service,
    },
    packet::{
        Packet, TCP, UDP,
        flags::{ACK, FIN, PSH, RST, SYN},
    },
    rng::{self, Rng as _},
};

const SEED: u32 = 0x5eed;
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const DSR_PORT: u16 = 80;
const NAT_PORT: u16 = 8080;

fn svc(port: u16, proto: u8, mode: ForwardingMode, backends: Vec<IpAddr>) -> ServiceSpec {
    service(
        format!("svc-{port}"),
        VIP.into(),
        port,
        proto,
        mode,
        backends,
    )
}

fn three() -> Vec<IpAddr> {
    (0..3).map(|i| backend(i).0).collect()
}

/// A rig with a dsr service (port 80, TCP and UDP) and a nat service (port 8080).
fn rig_with(tables: &FlowTables) -> XdpRig {
    let mut rig = XdpRig::load_sized(SEED, None, tables);
    rig.set_nat(30000, 1000);
    rig.program(svc(DSR_PORT, TCP, ForwardingMode::Dsr, three()));
    rig.program(svc(DSR_PORT, UDP, ForwardingMode::Dsr, three()));
    rig.program(svc(NAT_PORT, TCP, ForwardingMode::Nat, three()));
    rig
}

fn rig() -> XdpRig {
    rig_with(&FlowTables::default())
}

fn tcp(sport: u16, dport: u16, tcp_flags: u8) -> Packet {
    let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
    Packet::tcp4(eth, CLIENT_ADDR, sport, VIP, dport, b"data").with_tcp_flags(tcp_flags)
}

fn tcp_from(src: Ipv4Addr, sport: u16, dport: u16, tcp_flags: u8) -> Packet {
    let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
    Packet::tcp4(eth, src, sport, VIP, dport, b"").with_tcp_flags(tcp_flags)
}

fn key(src: Ipv4Addr, sport: u16, dport: u16, proto: u8) -> FlowKey {
    FlowKey {
        src: addr16(src.into()),
        dst: addr16(VIP.into()),
        src_port_be: sport.to_be(),
        dst_port_be: dport.to_be(),
        proto,
        _pad: 0,
        _pad2: 0,
    }
}

/// A dsr forward: exactly the MACs changed, towards `to`.
fn assert_dsr_to(out: &Outcome, input: &[u8], to: IpAddr) {
    let mut want = input.to_vec();
    want[0..6].copy_from_slice(&mac_of(to));
    want[6..12].copy_from_slice(&HOST_MAC);
    assert_eq!(out.bytes, want, "only the MACs change, to {to}");
}

fn entry(rig: &XdpRig, table: FlowTable, key: &FlowKey) -> Option<FlowEntry> {
    rig.dataplane
        .maps()
        .flow(table, key)
        .expect("read flow table")
}

fn table_fill(rig: &XdpRig) -> (usize, usize, usize) {
    let maps = rig.dataplane.maps();
    let established = maps.flows().expect("flows").len();
    let embryonic = maps.embryonic_flows().expect("embryonic").len();
    let nat = maps.nat_entries().expect("nat").len();
    (established, embryonic, nat)
}

fn a_syn_is_half_open_until_its_ack_establishes_it() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        let k = key(CLIENT_ADDR, 41000, DSR_PORT, TCP);
        let to = rig.expected_backend(&vip, &k);
        let syn = tcp(41000, DSR_PORT, SYN);
        let out = rig.expect_events(&syn.bytes, action::TX, Counter::Tx, &[]);
        assert_dsr_to(&out, &syn.bytes, to);
        assert!(entry(&rig, FlowTable::Embryonic, &k).is_some());
        assert!(entry(&rig, FlowTable::Established, &k).is_none());
        // The handshake's ACK: same backend, now established.
        let ack = tcp(41000, DSR_PORT, ACK);
        let out = rig.expect_events(
            &ack.bytes,
            action::TX,
            Counter::Tx,
            &[Counter::EmbryonicPromoted],
        );
        assert_dsr_to(&out, &ack.bytes, to);
        let e = entry(&rig, FlowTable::Established, &k).expect("established");
        assert!(
            entry(&rig, FlowTable::Embryonic, &k).is_none(),
            "moved, not copied"
        );
        let record = rig.dataplane.maps().backend(e.backend_id).expect("backend");
        assert_eq!(
            IpAddr::from(
                std::net::Ipv6Addr::from(record.addr.octets())
                    .to_ipv4_mapped()
                    .expect("v4")
            ),
            to
        );
        assert_eq!(
            (e.service_id, e.backend_gen),
            (record.service_id, record.generation)
        );
        // Data packets after that touch no table.
        let data = tcp(41000, DSR_PORT, ACK | PSH);
        let out = rig.expect_events(&data.bytes, action::TX, Counter::Tx, &[]);
        assert_dsr_to(&out, &data.bytes, to);
        // A second UDP datagram establishes a UDP flow the same way.
        let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
        let dgram = Packet::udp4(eth, CLIENT_ADDR, 41001, VIP, DSR_PORT, b"q");
        let u = key(CLIENT_ADDR, 41001, DSR_PORT, UDP);
        rig.expect_events(&dgram.bytes, action::TX, Counter::Tx, &[]);
        assert!(
            entry(&rig, FlowTable::Embryonic, &u).is_some(),
            "one datagram: half-open"
        );
        rig.expect_events(
            &dgram.bytes,
            action::TX,
            Counter::Tx,
            &[Counter::EmbryonicPromoted],
        );
        rig.expect_events(&dgram.bytes, action::TX, Counter::Tx, &[]);
        assert!(entry(&rig, FlowTable::Established, &u).is_some());
        let stats = rig
            .dataplane
            .maps()
            .vip_stats(1)
            .expect("udp service stats");
        assert_eq!(
            (stats.packets, stats.new_flows),
            (3, 1),
            "one new flow, three packets"
        );
    });
}

fn a_retransmitted_syn_keeps_its_first_choice() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        // Find a flow whose table choice changes when a fourth backend joins.
        let mut four = three();
        four.push(backend(3).0);
        let (sport, first) = (42000..43000u16)
            .find_map(|sport| {
                let k = key(CLIENT_ADDR, sport, DSR_PORT, TCP);
                let before = rig.expected_backend(&vip, &k);
                let out = rig.run(&tcp(sport, DSR_PORT, SYN).bytes);
                assert_eq!(out.action, action::TX);
                rig.program(svc(DSR_PORT, TCP, ForwardingMode::Dsr, four.clone()));
                let after = rig.expected_backend(&vip, &k);
                rig.program(svc(DSR_PORT, TCP, ForwardingMode::Dsr, three()));
                (before != after).then_some((sport, before))
            })
            .expect("a flow that moves");
        rig.program(svc(DSR_PORT, TCP, ForwardingMode::Dsr, four));
        let syn = tcp(sport, DSR_PORT, SYN);
        let out = rig.expect_events(&syn.bytes, action::TX, Counter::Tx, &[]);
        assert_dsr_to(&out, &syn.bytes, first);
    });
}

fn packets_that_are_not_a_syn_create_no_state() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        // dsr: forwarded by the table as it is now, nothing remembered.
        for (i, f) in [ACK, ACK | PSH, FIN | ACK, RST, SYN | ACK]
            .into_iter()
            .enumerate()
        {
            let sport = 43000 + i as u16;
            let p = tcp(sport, DSR_PORT, f);
            let out = rig.expect_events(&p.bytes, action::TX, Counter::Tx, &[Counter::NonSynMiss]);
            let k = key(CLIENT_ADDR, sport, DSR_PORT, TCP);
            assert_dsr_to(&out, &p.bytes, rig.expected_backend(&vip, &k));
        }
        // nat: no translation exists, so the packet is dropped and claims no port.
        for f in [ACK, ACK | PSH, FIN | ACK, RST, SYN | ACK] {
            let p = tcp(43100, NAT_PORT, f);
            let out = rig.expect_events(&p.bytes, action::DROP, Counter::DropNatNoFlow, &[]);
            assert_eq!(out.bytes, p.bytes);
        }
        assert_eq!(table_fill(&rig), (0, 0, 0), "no table holds anything");
        // A flood of spoofed ACKs from random sources at both services: nothing
        // stored, every packet counted.
        let mut rng = rng::seeded("packets_that_are_not_a_syn_create_no_state");
        for i in 0..20_000u32 {
            let src = Ipv4Addr::from(0xc612_0000 | (rng.next_u64() as u32 & 0xffff));
            let port = if i % 2 == 0 { DSR_PORT } else { NAT_PORT };
            let p = tcp_from(src, rng.next_u64() as u16 | 1024, port, ACK);
            rig.run(&p.bytes);
        }
        assert_eq!(table_fill(&rig), (0, 0, 0), "the flood left no state");
        assert_eq!(rig.counter(Counter::NonSynMiss), 5 + 10_000);
        assert_eq!(rig.counter(Counter::DropNatNoFlow), 5 + 10_000);
    });
}

fn a_syn_flood_cannot_evict_or_move_established_flows() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        // Small tables: the flood is 16 times the conntrack size and 64 times the
        // embryonic one.
        let tables = FlowTables {
            conntrack_entries: 4096,
            embryonic_entries: 1024,
            ..FlowTables::default()
        };
        let mut rig = rig_with(&tables);
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        let held: Vec<(u16, IpAddr)> = (0..64u16)
            .map(|i| {
                let sport = 44000 + i;
                let to = rig.expected_backend(&vip, &key(CLIENT_ADDR, sport, DSR_PORT, TCP));
                rig.run(&tcp(sport, DSR_PORT, SYN).bytes);
                rig.run(&tcp(sport, DSR_PORT, ACK).bytes);
                (sport, to)
            })
            .collect();
        let mut rng = rng::seeded("a_syn_flood_cannot_evict_or_move_established_flows");
        for _ in 0..65_536 {
            let src = Ipv4Addr::from(0xc613_0000 | (rng.next_u64() as u32 & 0xffff));
            let out = rig.run(&tcp_from(src, rng.next_u64() as u16 | 1, DSR_PORT, SYN).bytes);
            assert_eq!(out.action, action::TX);
        }
        let (established, embryonic, _) = table_fill(&rig);
        assert_eq!(established, 64, "only the held flows are established");
        assert!(
            embryonic <= 1024,
            "the flood stays in the embryonic table: {embryonic}"
        );
        // The table changes under the held flows: they stay where they were.
        rig.program(svc(DSR_PORT, TCP, ForwardingMode::Dsr, vec![backend(3).0]));
        for (sport, to) in held {
            let p = tcp(sport, DSR_PORT, ACK | PSH);
            let out = rig.expect_events(&p.bytes, action::TX, Counter::Tx, &[]);
            assert_dsr_to(&out, &p.bytes, to);
        }
    });
}

/// Source ports from 1 whose flows (from the client to the dsr service) land in the
/// same half-open bucket as `first`'s, `n` of them.
fn same_bucket_ports(rig: &XdpRig, first: u16, n: usize) -> Vec<u16> {
    let table = rig
        .dataplane
        .maps()
        .embryonic_table()
        .expect("half-open table");
    let bucket = table.bucket_index(&key(CLIENT_ADDR, first, DSR_PORT, TCP));
    let ports: Vec<u16> = (1..u16::MAX)
        .filter(|&p| p != first)
        .filter(|&p| table.bucket_index(&key(CLIENT_ADDR, p, DSR_PORT, TCP)) == bucket)
        .take(n)
        .collect();
    assert_eq!(ports.len(), n, "ports sharing bucket {bucket}");
    ports
}

/// Way stamps count milliseconds of the coarse clock, which moves a jiffy at a time
/// (up to 10 ms): SYNs further apart than that are told apart by age.
fn next_tick() {
    std::thread::sleep(std::time::Duration::from_millis(15));
}

fn a_half_open_flow_outlives_three_newer_ones_in_its_bucket_not_four() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        // 16 buckets of 4 ways.
        let tables = FlowTables {
            embryonic_entries: 64,
            ..FlowTables::default()
        };
        let mut rig = rig_with(&tables);
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        let first = 46000;
        let others = same_bucket_ports(&rig, first, 4);
        rig.expect(&tcp(first, DSR_PORT, SYN).bytes, action::TX, Counter::Tx);
        for &p in &others[..3] {
            next_tick();
            rig.expect(&tcp(p, DSR_PORT, SYN).bytes, action::TX, Counter::Tx);
        }
        let k = key(CLIENT_ADDR, first, DSR_PORT, TCP);
        assert!(
            entry(&rig, FlowTable::Embryonic, &k).is_some(),
            "three newer flows in its bucket leave it"
        );
        next_tick();
        rig.expect(
            &tcp(others[3], DSR_PORT, SYN).bytes,
            action::TX,
            Counter::Tx,
        );
        assert!(
            entry(&rig, FlowTable::Embryonic, &k).is_none(),
            "the fourth takes the oldest way"
        );
        for &p in &others {
            let k = key(CLIENT_ADDR, p, DSR_PORT, TCP);
            assert!(entry(&rig, FlowTable::Embryonic, &k).is_some(), "port {p}");
        }
        // Flows in other buckets were not touched: a SYN elsewhere then its ACK.
        let elsewhere = (1..u16::MAX)
            .find(|&p| {
                let t = rig
                    .dataplane
                    .maps()
                    .embryonic_table()
                    .expect("half-open table");
                t.bucket_index(&key(CLIENT_ADDR, p, DSR_PORT, TCP)) != t.bucket_index(&k)
            })
            .expect("another bucket");
        rig.run(&tcp(elsewhere, DSR_PORT, SYN).bytes);
        // The replaced flow's ACK goes by the table and creates nothing; the newest
        // one's is established.
        let ack = tcp(first, DSR_PORT, ACK);
        let out = rig.expect_events(&ack.bytes, action::TX, Counter::Tx, &[Counter::NonSynMiss]);
        assert_dsr_to(&out, &ack.bytes, rig.expected_backend(&vip, &k));
        assert!(entry(&rig, FlowTable::Established, &k).is_none());
        for p in [others[3], elsewhere] {
            rig.expect_events(
                &tcp(p, DSR_PORT, ACK).bytes,
                action::TX,
                Counter::Tx,
                &[Counter::EmbryonicPromoted],
            );
        }
    });
}

fn a_torn_half_open_way_is_a_miss() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        let k = key(CLIENT_ADDR, 47000, DSR_PORT, TCP);
        rig.expect(&tcp(47000, DSR_PORT, SYN).bytes, action::TX, Counter::Tx);
        // Another backend's entry under the flow's key and check, as a reader racing
        // two writers of the way might see it.
        let own = entry(&rig, FlowTable::Embryonic, &k).expect("half-open");
        let other = *rig
            .programmer
            .service(&vip)
            .expect("svc")
            .backend_ids
            .iter()
            .find(|&&id| id != own.backend_id)
            .expect("another backend");
        let table = rig
            .dataplane
            .maps_mut()
            .embryonic_table_mut()
            .expect("half-open table");
        let index = table.bucket_index(&k);
        let mut bucket = table.bucket(index).expect("bucket");
        let way = bucket
            .ways
            .iter_mut()
            .find(|w| w.check != 0 && w.key == k)
            .expect("the flow's way");
        way.entry.backend_id = other;
        table.set_bucket(index, bucket).expect("stage");
        assert!(
            entry(&rig, FlowTable::Embryonic, &k).is_none(),
            "agent: a miss"
        );
        // The data plane takes it for a miss too: the ACK goes by the table, unpinned.
        let ack = tcp(47000, DSR_PORT, ACK);
        let out = rig.expect_events(&ack.bytes, action::TX, Counter::Tx, &[Counter::NonSynMiss]);
        assert_dsr_to(&out, &ack.bytes, rig.expected_backend(&vip, &k));
        assert!(entry(&rig, FlowTable::Established, &k).is_none());
    });
}

fn an_entry_of_an_earlier_owner_is_ignored() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        let k = key(CLIENT_ADDR, 45000, DSR_PORT, TCP);
        rig.run(&tcp(45000, DSR_PORT, SYN).bytes);
        rig.run(&tcp(45000, DSR_PORT, ACK).bytes);
        let own = entry(&rig, FlowTable::Established, &k).expect("established");
        let table = rig.expected_backend(&vip, &k);
        // Point the entry at another backend id of an earlier generation, as if the
        // id had been given to a new owner since the flow was admitted.
        let other = (0..3)
            .map(|i| backend(i).0)
            .find(|b| *b != table)
            .expect("another backend");
        let other_id = rig
            .programmer
            .service(&vip)
            .expect("svc")
            .backends
            .iter()
            .position(|b| *b == other)
            .expect("listed");
        let other_id = rig.programmer.service(&vip).expect("svc").backend_ids[other_id];
        let record = rig.dataplane.maps().backend(other_id).expect("record");
        let stale = FlowEntry {
            backend_id: other_id,
            backend_gen: record.generation.wrapping_sub(1),
            ..own
        };
        rig.dataplane
            .maps_mut()
            .put_flow(FlowTable::Established, &k, stale)
            .expect("stage");
        let p = tcp(45000, DSR_PORT, ACK | PSH);
        let out = rig.expect_events(
            &p.bytes,
            action::TX,
            Counter::Tx,
            &[Counter::IdentityMismatch, Counter::NonSynMiss],
        );
        assert_dsr_to(&out, &p.bytes, table);
        assert!(
            entry(&rig, FlowTable::Established, &k).is_none(),
            "the stale entry is gone"
        );
        // Another service's id in the entry is a mismatch too; a SYN then starts anew.
        let foreign = FlowEntry {
            backend_id: other_id,
            backend_gen: record.generation,
            service_id: own.service_id + 1,
            ..own
        };
        rig.dataplane
            .maps_mut()
            .put_flow(FlowTable::Established, &k, foreign)
            .expect("stage");
        let syn = tcp(45000, DSR_PORT, SYN);
        let out = rig.expect_events(
            &syn.bytes,
            action::TX,
            Counter::Tx,
            &[Counter::IdentityMismatch],
        );
        assert_dsr_to(&out, &syn.bytes, table);
        assert!(entry(&rig, FlowTable::Established, &k).is_none());
        assert!(
            entry(&rig, FlowTable::Embryonic, &k).is_some(),
            "a new half-open flow"
        );
    });
}

fn a_syn_on_a_flow_of_a_draining_backend_chooses_again() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        let (sport, first) = (46000..47000u16)
            .map(|s| {
                (
                    s,
                    rig.expected_backend(&vip, &key(CLIENT_ADDR, s, DSR_PORT, TCP)),
                )
            })
            .find(|(_, b)| *b == backend(0).0)
            .expect("a flow on backend 0");
        rig.run(&tcp(sport, DSR_PORT, SYN).bytes);
        rig.run(&tcp(sport, DSR_PORT, ACK).bytes);
        // Backend 0 leaves: its established flow drains there...
        rig.program(svc(
            DSR_PORT,
            TCP,
            ForwardingMode::Dsr,
            vec![backend(1).0, backend(2).0],
        ));
        let data = tcp(sport, DSR_PORT, ACK | PSH);
        let out = rig.expect_events(&data.bytes, action::TX, Counter::Tx, &[]);
        assert_dsr_to(&out, &data.bytes, first);
        // ...but a SYN on the same 5-tuple is a new connection: the table decides.
        let syn = tcp(sport, DSR_PORT, SYN);
        let out = rig.expect_events(&syn.bytes, action::TX, Counter::Tx, &[]);
        let now = rig.expected_backend(&vip, &key(CLIENT_ADDR, sport, DSR_PORT, TCP));
        assert_ne!(now, first);
        assert_dsr_to(&out, &syn.bytes, now);
        let k = key(CLIENT_ADDR, sport, DSR_PORT, TCP);
        assert!(
            entry(&rig, FlowTable::Established, &k).is_none(),
            "the old pin went"
        );
        let half = entry(&rig, FlowTable::Embryonic, &k).expect("half-open again");
        let record = rig
            .dataplane
            .maps()
            .backend(half.backend_id)
            .expect("record");
        assert_eq!(lb_model::dataplane::from_addr16(record.addr), now);
    });
}

/// A flow on backend 0 of the dsr service, established (SYN, then ACK) and forwarded
/// once more from this CPU's flow cache: its source port.
fn cached_flow_on_backend_0(rig: &mut XdpRig, from: u16) -> u16 {
    let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
    let sport = (from..from + 1000)
        .find(|s| rig.expected_backend(&vip, &key(CLIENT_ADDR, *s, DSR_PORT, TCP)) == backend(0).0)
        .expect("a flow on backend 0");
    rig.run(&tcp(sport, DSR_PORT, SYN).bytes);
    rig.expect_events(
        &tcp(sport, DSR_PORT, ACK).bytes,
        action::TX,
        Counter::Tx,
        &[Counter::EmbryonicPromoted],
    );
    let data = tcp(sport, DSR_PORT, ACK | PSH);
    let out = rig.expect_events(&data.bytes, action::TX, Counter::Tx, &[]);
    assert_dsr_to(&out, &data.bytes, backend(0).0);
    sport
}

/// Backend 0 leaves the dsr service (its flows drain there, new ones go elsewhere).
fn drain_backend_0(rig: &mut XdpRig) {
    rig.program(svc(
        DSR_PORT,
        TCP,
        ForwardingMode::Dsr,
        vec![backend(1).0, backend(2).0],
    ));
}

fn a_flow_the_agent_forgets_is_not_answered_from_the_cache() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        let sport = cached_flow_on_backend_0(&mut rig, 47000);
        drain_backend_0(&mut rig);
        let k = key(CLIENT_ADDR, sport, DSR_PORT, TCP);
        rig.dataplane
            .maps_mut()
            .forget_in(FlowTable::Established, &k)
            .expect("forget");
        // No entry now: an ACK is forwarded by the table as it is, creating nothing.
        let data = tcp(sport, DSR_PORT, ACK | PSH);
        let out = rig.expect_events(&data.bytes, action::TX, Counter::Tx, &[Counter::NonSynMiss]);
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        assert_dsr_to(&out, &data.bytes, rig.expected_backend(&vip, &k));
        assert!(entry(&rig, FlowTable::Established, &k).is_none());
    });
}

fn a_syn_that_chooses_again_on_one_cpu_is_followed_on_the_others() {
    lb_testbed::needs_root!();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    assert!(cpus >= 2, "this fixture needs two CPUs, found {cpus}");
    FixtureHost::new().run(|| {
        let mut rig = rig();
        lb_testbed::fixture::pin_thread_to_cpu(0).expect("CPU 0");
        let sport = cached_flow_on_backend_0(&mut rig, 48000);
        drain_backend_0(&mut rig);
        // A new connection on the same 5-tuple, its SYN on another CPU: the old pin
        // goes and the table chooses again...
        lb_testbed::fixture::pin_thread_to_cpu(1).expect("CPU 1");
        let syn = tcp(sport, DSR_PORT, SYN);
        let out = rig.expect_events(&syn.bytes, action::TX, Counter::Tx, &[]);
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        let now = rig.expected_backend(&vip, &key(CLIENT_ADDR, sport, DSR_PORT, TCP));
        assert_ne!(now, backend(0).0);
        assert_dsr_to(&out, &syn.bytes, now);
        // ...and its ACK on the first CPU, whose cache held the old pin, follows it.
        lb_testbed::fixture::pin_thread_to_cpu(0).expect("CPU 0");
        let ack = tcp(sport, DSR_PORT, ACK);
        let out = rig.expect_events(
            &ack.bytes,
            action::TX,
            Counter::Tx,
            &[Counter::EmbryonicPromoted],
        );
        assert_dsr_to(&out, &ack.bytes, now);
    });
}

fn an_entry_conntrack_lost_is_put_back_from_the_cache_for_a_while() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        // One CPU throughout: the slot is this CPU's.
        lb_testbed::fixture::pin_thread_to_cpu(0).expect("CPU 0");
        let ttl = std::time::Duration::from_nanos(lb_common::maps::FLOW_CACHE_TTL_NS);
        let keep = std::time::Duration::from_nanos(lb_common::maps::FLOW_CACHE_KEEP_NS);
        let vip = svc(DSR_PORT, TCP, ForwardingMode::Dsr, Vec::new()).key;
        let sport = cached_flow_on_backend_0(&mut rig, 49000);
        let k = key(CLIENT_ADDR, sport, DSR_PORT, TCP);
        drain_backend_0(&mut rig);
        // The table evicts the entry while the cache answers for the flow; once the
        // slot expires, the flow's next packet finds the table without it and puts it
        // back: the flow stays on its backend.
        rig.dataplane
            .maps_mut()
            .evict(FlowTable::Established, &k)
            .expect("evict");
        std::thread::sleep(ttl + ttl / 2);
        let data = tcp(sport, DSR_PORT, ACK | PSH);
        let out = rig.expect_events(&data.bytes, action::TX, Counter::Tx, &[]);
        assert_dsr_to(&out, &data.bytes, backend(0).0);
        let back = entry(&rig, FlowTable::Established, &k).expect("put back");
        let record = rig
            .dataplane
            .maps()
            .backend(back.backend_id)
            .expect("record");
        assert_eq!(lb_model::dataplane::from_addr16(record.addr), backend(0).0);
        // A slot expired for longer than that no longer vouches for its flow.
        rig.dataplane
            .maps_mut()
            .evict(FlowTable::Established, &k)
            .expect("evict");
        std::thread::sleep(ttl + keep + ttl / 2);
        let out = rig.expect_events(&data.bytes, action::TX, Counter::Tx, &[Counter::NonSynMiss]);
        assert_dsr_to(&out, &data.bytes, rig.expected_backend(&vip, &k));
        assert!(entry(&rig, FlowTable::Established, &k).is_none());
    });
}

/// The reply key of a nat flow whose forwarded packet is `out` (backend → NAT port).
fn reply_key(out: &Outcome) -> FlowKey {
    let b = &out.bytes;
    FlowKey {
        src: addr16(IpAddr::from([b[30], b[31], b[32], b[33]])),
        dst: addr16(NAT_ADDR.into()),
        src_port_be: u16::from_be_bytes([b[36], b[37]]).to_be(),
        dst_port_be: u16::from_be_bytes([b[34], b[35]]).to_be(),
        proto: TCP,
        _pad: 0,
        _pad2: 0,
    }
}

/// The backend's packet of the flow `out` was forwarded as, with `tcp_flags`.
fn from_backend(out: &Outcome, tcp_flags: u8) -> Packet {
    let b = &out.bytes;
    let eth = Packet::eth(
        HOST_MAC,
        mac_of(IpAddr::from([b[30], b[31], b[32], b[33]])),
        0x0800,
    );
    Packet::tcp4(
        eth,
        Ipv4Addr::new(b[30], b[31], b[32], b[33]),
        u16::from_be_bytes([b[36], b[37]]),
        NAT_ADDR,
        u16::from_be_bytes([b[34], b[35]]),
        b"",
    )
    .with_tcp_flags(tcp_flags)
}

fn nat_state(rig: &XdpRig, reply: &FlowKey) -> Option<(NatState, u64)> {
    let r = rig.dataplane.maps().nat_reply(reply).expect("read")?;
    Some((NatState::from_u8(r.state), r.expires_ns))
}

/// Timeouts long enough to read each state, short for the closed one.
fn timeouts(closed_ns: u64) -> lb_common::NatTimeouts {
    let mut t = lb_common::NatTimeouts::DEFAULT;
    t.tcp_ns[NatState::Closed as usize] = closed_ns;
    t
}

fn a_nat_port_follows_the_connection_to_its_close() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        rig.set_nat_timeouts(timeouts(0));
        let syn = tcp(47000, NAT_PORT, SYN);
        let out = rig.expect_events(&syn.bytes, action::TX, Counter::Tx, &[]);
        let reply = reply_key(&out);
        let st = |rig: &XdpRig| nat_state(rig, &reply).map(|s| s.0);
        assert_eq!(st(&rig), Some(NatState::SynSent));
        rig.expect(
            &from_backend(&out, SYN | ACK).bytes,
            action::TX,
            Counter::TxNatReply,
        );
        assert_eq!(
            st(&rig),
            Some(NatState::SynSent),
            "a SYN-ACK is not the handshake's end"
        );
        rig.expect(&tcp(47000, NAT_PORT, ACK).bytes, action::TX, Counter::Tx);
        assert_eq!(st(&rig), Some(NatState::Established));
        let k = key(CLIENT_ADDR, 47000, NAT_PORT, TCP);
        let f = entry(&rig, FlowTable::Nat, &k).expect("nat flow");
        assert_ne!(f.flags & lb_common::maps::FLOW_F_ESTABLISHED, 0);
        // The client closes first; the backend answers with its own FIN, then the
        // final ACK: the port is free at once (the backend keeps no state).
        rig.expect(
            &tcp(47000, NAT_PORT, FIN | ACK).bytes,
            action::TX,
            Counter::Tx,
        );
        assert_eq!(st(&rig), Some(NatState::ClientFin));
        rig.expect(
            &from_backend(&out, FIN | ACK).bytes,
            action::TX,
            Counter::TxNatReply,
        );
        assert_eq!(st(&rig), Some(NatState::LastAck));
        rig.expect(&tcp(47000, NAT_PORT, ACK).bytes, action::TX, Counter::Tx);
        let (state, expires) = nat_state(&rig, &reply).expect("entry");
        assert_eq!(state, NatState::Closed);
        let mut sweeper = NatSweeper::new(rig.dataplane.maps()).expect("sweeper");
        let report = sweeper.sweep_at(expires).expect("sweep");
        assert_eq!((report.walked, report.released), (1, 1));
        assert_eq!(
            sweeper
                .stats()
                .fin
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert!(
            entry(&rig, FlowTable::Nat, &k).is_none(),
            "the client side went too"
        );
        assert_eq!(table_fill(&rig), (0, 0, 0));
    });
}

fn a_nat_port_held_in_time_wait_by_the_backend_is_not_reused() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        // One port only, so two flows to one backend would need the same port.
        rig.set_nat(30000, 1);
        rig.program(svc(NAT_PORT, TCP, ForwardingMode::Nat, vec![backend(0).0]));
        let out = rig.expect(&tcp(48000, NAT_PORT, SYN).bytes, action::TX, Counter::Tx);
        let reply = reply_key(&out);
        rig.expect(&tcp(48000, NAT_PORT, ACK).bytes, action::TX, Counter::Tx);
        // The backend closes first: it will hold TIME_WAIT on the port's 4-tuple.
        rig.expect(
            &from_backend(&out, FIN | ACK).bytes,
            action::TX,
            Counter::TxNatReply,
        );
        assert_eq!(
            nat_state(&rig, &reply).map(|s| s.0),
            Some(NatState::BackendFin)
        );
        rig.expect(
            &tcp(48000, NAT_PORT, FIN | ACK).bytes,
            action::TX,
            Counter::Tx,
        );
        let (state, expires) = nat_state(&rig, &reply).expect("entry");
        assert_eq!(state, NatState::TimeWait);
        let left = expires.saturating_sub(lb_model::dataplane::monotonic_ns());
        assert!(
            (50_000_000_000..=61_000_000_000).contains(&left),
            "{left} ns of TIME_WAIT"
        );
        // Another client's SYN finds the only port held: dropped, nothing taken over.
        let other = tcp_from(Ipv4Addr::new(198, 18, 0, 1), 48001, NAT_PORT, SYN);
        rig.expect_events(
            &other.bytes,
            action::DROP,
            Counter::DropNatPortsExhausted,
            &[],
        );
        // The same client reusing its 5-tuple for a new connection keeps its port (the
        // backend's TIME_WAIT accepts a newer SYN), from the start of the states.
        let again = rig.expect(&tcp(48000, NAT_PORT, SYN).bytes, action::TX, Counter::Tx);
        assert_eq!(reply_key(&again), reply);
        assert_eq!(
            nat_state(&rig, &reply).map(|s| s.0),
            Some(NatState::SynSent)
        );
    });
}

fn an_ended_nat_flow_gives_its_port_to_the_next_flow() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        rig.set_nat(30000, 1);
        // An unanswered SYN holds its port for no time at all, a closed flow neither.
        let mut t = timeouts(0);
        t.tcp_ns[NatState::SynSent as usize] = 0;
        rig.set_nat_timeouts(t);
        rig.program(svc(NAT_PORT, TCP, ForwardingMode::Nat, vec![backend(0).0]));
        let first = rig.expect(&tcp(49000, NAT_PORT, SYN).bytes, action::TX, Counter::Tx);
        rig.expect(&tcp(49000, NAT_PORT, ACK).bytes, action::TX, Counter::Tx);
        // While it lives, the port is its own.
        let second = tcp_from(Ipv4Addr::new(198, 18, 0, 1), 49001, NAT_PORT, SYN);
        rig.expect(&second.bytes, action::DROP, Counter::DropNatPortsExhausted);
        // The backend resets it: the port goes to the next SYN, counted as a release.
        rig.expect(
            &from_backend(&first, RST).bytes,
            action::TX,
            Counter::TxNatReply,
        );
        let out = rig.expect_events(
            &second.bytes,
            action::TX,
            Counter::Tx,
            &[Counter::NatReleasedRst],
        );
        assert_eq!(reply_key(&out), reply_key(&first), "the same port");
        assert!(
            entry(
                &rig,
                FlowTable::Nat,
                &key(CLIENT_ADDR, 49000, NAT_PORT, TCP)
            )
            .is_none(),
            "the old flow's client side went with its port"
        );
        // Its replies now reach the new client only.
        let back = rig.expect(
            &from_backend(&out, SYN | ACK).bytes,
            action::TX,
            Counter::TxNatReply,
        );
        assert_eq!(u16::from_be_bytes([back.bytes[36], back.bytes[37]]), 49001);
        // The new flow's SYN was answered but never acknowledged: past the SYN
        // timeout its port goes to the next SYN.
        let third = tcp_from(Ipv4Addr::new(198, 18, 0, 1), 49002, NAT_PORT, SYN);
        rig.expect_events(
            &third.bytes,
            action::TX,
            Counter::Tx,
            &[Counter::NatReleasedTimeout],
        );
    });
}

fn a_nat_flow_of_an_earlier_owner_is_not_translated() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        rig.expect(&tcp(50000, NAT_PORT, SYN).bytes, action::TX, Counter::Tx);
        let k = key(CLIENT_ADDR, 50000, NAT_PORT, TCP);
        let own = entry(&rig, FlowTable::Nat, &k).expect("nat flow");
        let stale = FlowEntry {
            backend_gen: own.backend_gen.wrapping_add(1),
            ..own
        };
        rig.dataplane
            .maps_mut()
            .put_flow(FlowTable::Nat, &k, stale)
            .expect("stage");
        let p = tcp(50000, NAT_PORT, ACK | PSH);
        rig.expect_events(
            &p.bytes,
            action::DROP,
            Counter::DropNatNoFlow,
            &[Counter::IdentityMismatch],
        );
        assert!(
            entry(&rig, FlowTable::Nat, &k).is_none(),
            "the stale flow is gone"
        );
    });
}

fn a_backend_retransmitting_its_syn_ack_does_not_keep_a_spoofed_syns_port() {
    lb_testbed::needs_root!();
    FixtureHost::new().run(|| {
        let mut rig = rig();
        let out = rig.expect(&tcp(51000, NAT_PORT, SYN).bytes, action::TX, Counter::Tx);
        let reply = reply_key(&out);
        let (_, deadline) = nat_state(&rig, &reply).expect("entry");
        // The client never answers; the backend retransmits its SYN-ACK a second on.
        std::thread::sleep(std::time::Duration::from_millis(1200));
        rig.expect(
            &from_backend(&out, SYN | ACK).bytes,
            action::TX,
            Counter::TxNatReply,
        );
        let (state, after) = nat_state(&rig, &reply).expect("entry");
        assert_eq!(state, NatState::SynSent);
        assert_eq!(
            after, deadline,
            "the SYN timeout runs from the client's SYN"
        );
        // The client's own retransmitted SYN does refresh it.
        rig.expect(&tcp(51000, NAT_PORT, SYN).bytes, action::TX, Counter::Tx);
        let (_, refreshed) = nat_state(&rig, &reply).expect("entry");
        assert!(refreshed > deadline, "{refreshed} > {deadline}");
    });
}

lb_testbed::hook_tests!(
    a_flow_the_agent_forgets_is_not_answered_from_the_cache,
    a_syn_that_chooses_again_on_one_cpu_is_followed_on_the_others,
    an_entry_conntrack_lost_is_put_back_from_the_cache_for_a_while,
    a_syn_is_half_open_until_its_ack_establishes_it,
    a_retransmitted_syn_keeps_its_first_choice,
    packets_that_are_not_a_syn_create_no_state,
    a_syn_flood_cannot_evict_or_move_established_flows,
    a_half_open_flow_outlives_three_newer_ones_in_its_bucket_not_four,
    a_torn_half_open_way_is_a_miss,
    an_entry_of_an_earlier_owner_is_ignored,
    a_syn_on_a_flow_of_a_draining_backend_chooses_again,
    a_nat_port_follows_the_connection_to_its_close,
    a_nat_port_held_in_time_wait_by_the_backend_is_not_reused,
    an_ended_nat_flow_gives_its_port_to_the_next_flow,
    a_nat_flow_of_an_earlier_owner_is_not_translated,
    a_backend_retransmitting_its_syn_ack_does_not_keep_a_spoofed_syns_port,
);
