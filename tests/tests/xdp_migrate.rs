//! Flows survive an upgrade from the release before `LB_NAT_V2`: its `nat` reply map
//! (an LRU of a 40-byte reply entry) and the client side in conntrack are translated
//! into the new maps when the new data plane loads, and the flow's packets go on being
//! translated with the same NAT port, both ways. Half-open flows survive the upgrade
//! from the embryonic LRU to the set-associative table, and a resize of that table.

use std::net::{IpAddr, Ipv4Addr};

use aya::maps::{HashMap, Map, MapData};
use aya_obj::{
    EbpfSectionKind,
    maps::{LegacyMap, bpf_map_def},
};
use lb_common::{FlowEntry, FlowKey, ForwardingMode, maps::names};
use lb_model::{dataplane::FlowTable, dataplane::MapRead as _, dataplane::addr16};
use lb_testbed::{
    fixture::{
        CLIENT_ADDR, CLIENT_MAC, FixtureHost, HOST_MAC, NAT_ADDR, XdpRig, action, backend, service,
    },
    lbd::{BpfFs, TempDir},
    packet::{Packet, TCP, flags::ACK},
};

const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);

/// The reply entry of the old release.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct OldNatEntry {
    client: lb_common::Addr,
    vip: lb_common::Addr,
    client_port_be: u16,
    vip_port_be: u16,
    _pad: u32,
}
// SAFETY: repr(C), Copy, no padding (4 × 16 + 2 + 2 + 4 = 40 bytes), any bytes valid.
unsafe impl aya::Pod for OldNatEntry {}

/// Creates and pins an LRU hash named `name` with per-CPU lists, as the old releases
/// created `LB_NAT_V1` and `LB_CT_EMBRYONIC_V1`.
fn pin_old_lru<V: aya::Pod>(pin_dir: &std::path::Path, name: &str) -> HashMap<MapData, FlowKey, V> {
    let def = bpf_map_def {
        map_type: 9, // BPF_MAP_TYPE_LRU_HASH
        key_size: size_of::<FlowKey>() as u32,
        value_size: size_of::<V>() as u32,
        max_entries: 1024,
        map_flags: 2, // BPF_F_NO_COMMON_LRU
        ..bpf_map_def::default()
    };
    let obj = aya_obj::Map::Legacy(LegacyMap {
        def,
        inner_def: None,
        section_index: 0,
        section_kind: EbpfSectionKind::Maps,
        symbol_index: None,
        data: Vec::new(),
    });
    let data = MapData::create(obj, name, None).expect("create the old map");
    data.pin(pin_dir.join(name)).expect("pin it");
    HashMap::try_from(Map::LruHashMap(data)).expect("typed")
}

#[test]
fn nat_flows_of_the_previous_release_keep_their_port() {
    lb_testbed::needs_root!();
    let host = FixtureHost::new();
    let dir = TempDir::new("migrate");
    let bpffs = BpfFs::mount(&dir.path().join("bpf"));
    let pins = bpffs.path().join("lb");
    host.run(move || {
        let spec = service(
            "nat",
            VIP.into(),
            8080,
            TCP,
            ForwardingMode::Nat,
            vec![backend(0).0],
        );
        let client = FlowKey {
            src: addr16(CLIENT_ADDR.into()),
            dst: addr16(VIP.into()),
            src_port_be: 45678u16.to_be(),
            dst_port_be: 8080u16.to_be(),
            proto: TCP,
            _pad: 0,
            _pad2: 0,
        };
        let nat_port = 31234u16;
        // The old agent's state: programmed services, a conntrack entry naming the
        // backend and NAT port, and the reply entry in LB_NAT_V1.
        {
            let mut old = XdpRig::load_pinned(0x5eed, Some(&pins));
            old.set_nat(30000, 10000);
            old.program(spec.clone());
            let backend_id = old
                .programmer
                .service(&spec.key)
                .expect("programmed")
                .backend_ids[0];
            let record = old.dataplane.maps().backend(backend_id).expect("record");
            old.dataplane
                .maps_mut()
                .put_flow(
                    FlowTable::Established,
                    &client,
                    FlowEntry {
                        backend_id,
                        service_id: record.service_id,
                        nat_port_be: nat_port.to_be(),
                        backend_gen: record.generation,
                        ..FlowEntry::default()
                    },
                )
                .expect("old conntrack entry");
            let mut v1 = pin_old_lru::<OldNatEntry>(&pins, names::NAT_V1);
            let reply = FlowKey {
                src: addr16(backend(0).0),
                dst: addr16(NAT_ADDR.into()),
                src_port_be: 8080u16.to_be(),
                dst_port_be: nat_port.to_be(),
                proto: TCP,
                _pad: 0,
                _pad2: 0,
            };
            v1.insert(
                reply,
                OldNatEntry {
                    client: client.src,
                    vip: client.dst,
                    client_port_be: client.src_port_be,
                    vip_port_be: client.dst_port_be,
                    _pad: 0,
                },
                0,
            )
            .expect("old reply entry");
            // The V2 maps did not exist then.
            for name in [names::NAT, names::NAT_FLOWS] {
                std::fs::remove_file(pins.join(name)).expect("unpin new map");
            }
        }
        // The new release starts on those pins.
        let mut rig = XdpRig::load_pinned(0x5eed, Some(&pins));
        rig.set_nat(30000, 10000);
        rig.programmer.adopt(rig.dataplane.maps()).expect("adopt");
        rig.program(spec.clone());
        rig.dataplane.finish_migration().expect("finish");
        assert!(
            !pins.join(names::NAT_V1).exists(),
            "the old map's pin is gone"
        );
        let f = rig
            .dataplane
            .maps()
            .flow(FlowTable::Nat, &client)
            .expect("read")
            .expect("the flow was carried over");
        assert_eq!(u16::from_be(f.nat_port_be), nat_port);
        // The client's next segment: to the backend, from the same NAT port.
        let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
        let ack = Packet::tcp4(eth, CLIENT_ADDR, 45678, VIP, 8080, b"more").with_tcp_flags(ACK);
        let out = rig.expect(&ack.bytes, action::TX, lb_common::Counter::Tx);
        assert_eq!(&out.bytes[26..30], &NAT_ADDR.octets());
        assert_eq!(
            IpAddr::from([out.bytes[30], out.bytes[31], out.bytes[32], out.bytes[33]]),
            backend(0).0
        );
        assert_eq!(u16::from_be_bytes([out.bytes[34], out.bytes[35]]), nat_port);
        // The backend's answer: back to the client, from the VIP.
        let eth = Packet::eth(HOST_MAC, backend(0).1, 0x0800);
        let Some(IpAddr::V4(b)) = Some(backend(0).0) else {
            unreachable!()
        };
        let answer = Packet::tcp4(eth, b, 8080, NAT_ADDR, nat_port, b"ok").with_tcp_flags(ACK);
        let back = rig.expect(&answer.bytes, action::TX, lb_common::Counter::TxNatReply);
        assert_eq!(&back.bytes[26..30], &VIP.octets());
        assert_eq!(&back.bytes[30..34], &CLIENT_ADDR.octets());
        assert_eq!(u16::from_be_bytes([back.bytes[36], back.bytes[37]]), 45678);
    });
}

fn dsr_client(sport: u16) -> FlowKey {
    FlowKey {
        src: addr16(CLIENT_ADDR.into()),
        dst: addr16(VIP.into()),
        src_port_be: sport.to_be(),
        dst_port_be: 80u16.to_be(),
        proto: TCP,
        _pad: 0,
        _pad2: 0,
    }
}

/// The handshake's ACK of a flow whose SYN an earlier data plane saw: established,
/// from the half-open entry (counted as a promotion), to the SYN's backend.
fn ack_is_promoted(rig: &mut XdpRig, sport: u16, to: IpAddr) {
    let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
    let ack = Packet::tcp4(eth, CLIENT_ADDR, sport, VIP, 80, b"").with_tcp_flags(ACK);
    let out = rig.expect_events(
        &ack.bytes,
        action::TX,
        lb_common::Counter::Tx,
        &[lb_common::Counter::EmbryonicPromoted],
    );
    assert_eq!(
        &out.bytes[0..6],
        &lb_testbed::fixture::mac_of(to),
        "port {sport}"
    );
}

#[test]
fn half_open_flows_survive_the_new_table_and_its_resize() {
    lb_testbed::needs_root!();
    let host = FixtureHost::new();
    let dir = TempDir::new("migrate-embryonic");
    let bpffs = BpfFs::mount(&dir.path().join("bpf"));
    let pins = bpffs.path().join("lb");
    host.run(move || {
        let spec = service(
            "dsr",
            VIP.into(),
            80,
            TCP,
            ForwardingMode::Dsr,
            (0..3).map(|i| backend(i).0).collect(),
        );
        let syn = |sport: u16| {
            let eth = Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800);
            Packet::tcp4(eth, CLIENT_ADDR, sport, VIP, 80, b"").bytes
        };
        let (old_flow, old_to) = (dsr_client(48000), {
            // The old release's half-open flow: its entry as this release writes it,
            // moved into an LRU of the old name, the new table's pins removed.
            let mut old = XdpRig::load_pinned(0x5eed, Some(&pins));
            old.program(spec.clone());
            let k = dsr_client(48000);
            let to = old.expected_backend(&spec.key, &k);
            old.expect(&syn(48000), action::TX, lb_common::Counter::Tx);
            let e = old
                .dataplane
                .maps()
                .flow(FlowTable::Embryonic, &k)
                .expect("read")
                .expect("half-open");
            pin_old_lru::<FlowEntry>(&pins, names::EMBRYONIC_V1)
                .insert(k, e, 0)
                .expect("old entry");
            for name in [names::EMBRYONIC, names::EMBRYONIC_SEED] {
                std::fs::remove_file(pins.join(name)).expect("unpin new map");
            }
            // lbctl of this release reads such a node's pins (one not restarted since
            // the upgrade) through the same calls.
            let pinned = lb_dataplane::maps::MapSet::open_pinned(&pins).expect("open old pins");
            assert!(pinned.embryonic_table().is_none());
            assert_eq!(pinned.embryonic_flows().expect("walk"), vec![(k, e)]);
            assert_eq!(
                pinned.flow(FlowTable::Embryonic, &k).expect("read"),
                Some(e)
            );
            assert_eq!(
                pinned.flow_counts().expect("counts").embryonic.capacity,
                1024
            );
            to
        });
        // The new release starts on those pins, and the flow's SYN is copied over.
        let (seed, resized_to) = {
            let mut rig = XdpRig::load_pinned(0x5eed, Some(&pins));
            rig.programmer.adopt(rig.dataplane.maps()).expect("adopt");
            rig.program(spec.clone());
            rig.dataplane.finish_migration().expect("finish");
            assert!(
                !pins.join(names::EMBRYONIC_V1).exists(),
                "the old pin is gone"
            );
            assert!(
                rig.dataplane
                    .maps()
                    .flow(FlowTable::Embryonic, &old_flow)
                    .expect("read")
                    .is_some(),
                "carried over"
            );
            ack_is_promoted(&mut rig, 48000, old_to);
            // A SYN before the table is resized.
            let k = dsr_client(48001);
            let to = rig.expected_backend(&spec.key, &k);
            rig.expect(&syn(48001), action::TX, lb_common::Counter::Tx);
            (
                rig.dataplane
                    .maps()
                    .embryonic_table()
                    .expect("table")
                    .seed(),
                to,
            )
        };
        // node.embryonic_entries changes: the pinned table is replaced by one of
        // another size, its flows copied into their new buckets.
        let tables = lb_model::config::FlowTables {
            embryonic_entries: 1024,
            ..lb_model::config::FlowTables::default()
        };
        let mut rig = XdpRig::load_sized(0x5eed, Some(&pins), &tables);
        rig.programmer.adopt(rig.dataplane.maps()).expect("adopt");
        rig.program(spec.clone());
        rig.dataplane.finish_migration().expect("finish");
        let table = rig.dataplane.maps().embryonic_table().expect("table");
        assert_eq!(
            (table.capacity(), table.seed()),
            (1024, seed),
            "resized, same seed"
        );
        ack_is_promoted(&mut rig, 48001, resized_to);
    });
}
