//! The log build of the object (lb-ebpf's feature `log`): it passes the verifier when
//! loaded by the data plane's own loading code, its records at drops, nat exhaustion
//! and new flows reach the `log` crate through the data plane's relay, the relay writes
//! only the levels `log` lets through and stops with the data plane; and the default
//! object has none of it.

use std::{
    net::Ipv4Addr,
    sync::Mutex,
    time::{Duration, Instant},
};

use aya_obj::generated::bpf_insn;
use lb_common::{Counter, ForwardingMode};
use lb_dataplane::{
    kernel::{BPF_OBJECT, BPF_OBJECT_LOG},
    logrelay::{LOG_LEVEL, LOG_MAP, LOG_NOTE, LOG_PROGRAM, LOG_PROGS},
};
use lb_model::dataplane::ServiceSpec;
use lb_testbed::{
    fixture::{CLIENT_ADDR, CLIENT_MAC, FixtureHost, HOST_MAC, XdpRig, action, backend, service},
    is_root,
    packet::{Packet, TCP},
};

const SEED: u32 = 0x5eed;
const DSR_VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
const NAT_VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 2);
/// `bpf_ringbuf_reserve`: how aya-log writes a record.
const BPF_FUNC_RINGBUF_RESERVE: i32 = 131;

/// One relayed record.
#[derive(Clone, Debug)]
struct Record {
    level: log::Level,
    target: String,
    message: String,
}

/// The test binary's logger: keeps every record.
struct Capture(Mutex<Vec<Record>>);

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        self.0.lock().expect("capture lock").push(Record {
            level: record.level(),
            target: record.target().to_owned(),
            message: record.args().to_string(),
        });
    }

    fn flush(&self) {}
}

impl Capture {
    /// Takes the records the BPF programs wrote (target `lb_ebpf…`) so far.
    fn take_ebpf(&self) -> Vec<Record> {
        let mut all = self.0.lock().expect("capture lock");
        let (ebpf, rest): (Vec<_>, Vec<_>) =
            all.drain(..).partition(|r| r.target.starts_with("lb_ebpf"));
        *all = rest;
        ebpf
    }
}

fn svc(vip: Ipv4Addr, mode: ForwardingMode) -> ServiceSpec {
    service(
        format!("{vip}:80"),
        vip.into(),
        80,
        TCP,
        mode,
        vec![backend(0).0],
    )
}

fn syn(vip: Ipv4Addr, sport: u16) -> Packet {
    Packet::tcp4(
        Packet::eth(HOST_MAC, CLIENT_MAC, 0x0800),
        CLIENT_ADDR,
        sport,
        vip,
        80,
        b"",
    )
}

/// A log-build rig with a dsr and a nat service (one backend each, one nat port).
fn log_rig() -> XdpRig {
    let mut rig = XdpRig::load_object(SEED, BPF_OBJECT_LOG);
    rig.set_nat(40000, 1);
    rig.program(svc(DSR_VIP, ForwardingMode::Dsr));
    rig.program(svc(NAT_VIP, ForwardingMode::Nat));
    rig
}

/// Sends a dsr SYN (a new flow), a truncated frame (dropped malformed), and two nat
/// SYNs: a new flow, and one that finds no free port (a warning and a drop).
fn send_logged_decisions(rig: &mut XdpRig) {
    rig.expect(&syn(DSR_VIP, 1000).bytes, action::TX, Counter::Tx);
    let cut = syn(DSR_VIP, 1001).truncated(30);
    rig.expect(&cut.bytes, action::DROP, Counter::DropMalformed);
    rig.expect(&syn(NAT_VIP, 2000).bytes, action::TX, Counter::Tx);
    rig.expect(
        &syn(NAT_VIP, 2001).bytes,
        action::DROP,
        Counter::DropNatPortsExhausted,
    );
}

fn find<'a>(records: &'a [Record], level: log::Level, text: &str) -> Option<&'a Record> {
    records
        .iter()
        .find(|r| r.level == level && r.message.contains(text))
}

fn relay_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "bpf-log")
        .count()
}

fn verified_insns(rig: &mut XdpRig) -> Option<u32> {
    let info = rig.dataplane.program().ok()?.info().ok()?;
    info.verified_instruction_count()
}

#[test]
fn log_build_records_reach_the_log_crate_and_stop_with_the_data_plane() {
    assert!(is_root(), "needs root for BPF_PROG_TEST_RUN");
    log::set_logger(&CAPTURE).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Trace);
    let host = FixtureHost::new();
    let (live, records) = host.run(|| {
        let mut default = XdpRig::load(SEED);
        let mut rig = log_rig();
        eprintln!(
            "lb_xdp instructions verified: default object {:?}, log build {:?}",
            verified_insns(&mut default),
            verified_insns(&mut rig)
        );
        drop(default);
        assert_eq!(relay_threads(), 1, "one relay, for the log build only");
        send_logged_decisions(&mut rig);
        // The relay runs while the data plane does: the first record arrives by itself.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut live = CAPTURE.take_ebpf();
        while live.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            live = CAPTURE.take_ebpf();
        }
        // Dropping the data plane relays what is left and ends the relay.
        drop(rig);
        assert_eq!(relay_threads(), 0, "the relay stops with its data plane");
        let mut records = live.clone();
        records.extend(CAPTURE.take_ebpf());
        (live, records)
    });
    assert!(!live.is_empty(), "no record relayed within 10 s");
    let flow = find(
        &records,
        log::Level::Debug,
        "new flow ::ffff:198.18.0.1:1000 ->",
    )
    .unwrap_or_else(|| panic!("a new-flow record: {records:#?}"));
    let backend = backend(0).0.to_string();
    assert!(
        flow.message
            .contains(&format!("::ffff:{DSR_VIP}:80 proto 6: backend ",))
            && flow.message.ends_with(&format!("::ffff:{backend}")),
        "the new flow's backend: {flow:?}"
    );
    for (level, text) in [
        (log::Level::Debug, "drop: drop_malformed"),
        (
            log::Level::Warn,
            "no free nat port for ::ffff:198.18.0.1:2001 -> ::ffff:198.18.100.2:80 proto 6",
        ),
        (log::Level::Debug, "drop: drop_nat_ports_exhausted"),
    ] {
        assert!(
            find(&records, level, text).is_some(),
            "{level} record {text:?}: {records:#?}"
        );
    }
    assert!(
        find(
            &records,
            log::Level::Debug,
            "new flow ::ffff:198.18.0.1:2000 ->"
        )
        .is_some(),
        "the nat flow's new-flow record: {records:#?}"
    );
    assert_eq!(
        records.len(),
        5,
        "one record per logged decision: {records:#?}"
    );

    // With `log` at warn, the program writes no debug record at all.
    log::set_max_level(log::LevelFilter::Warn);
    host.run(|| {
        let mut rig = log_rig();
        send_logged_decisions(&mut rig);
    });
    log::set_max_level(log::LevelFilter::Trace);
    let records = CAPTURE.take_ebpf();
    assert!(
        records.len() == 1 && records[0].level == log::Level::Warn,
        "only the warn record is written: {records:#?}"
    );
}

/// Whether any function of the object calls `helper`.
fn calls_helper(object: &aya_obj::Object, helper: i32) -> bool {
    const BPF_JMP_CALL: u8 = 0x85;
    object.functions.values().any(|f| {
        f.instructions
            .iter()
            .any(|i: &bpf_insn| i.code == BPF_JMP_CALL && i.src_reg() == 0 && i.imm == helper)
    })
}

#[test]
fn the_default_object_has_no_log_maps_and_writes_no_records() {
    let parse = |bytes| aya_obj::Object::parse(bytes).expect("parse the object");
    let (default, logged) = (parse(BPF_OBJECT), parse(BPF_OBJECT_LOG));
    // The check sees the log build's maps, so it would see them in the default one.
    assert!(
        logged.maps.contains_key(LOG_MAP),
        "the log build's ring buffer"
    );
    assert!(calls_helper(&logged, BPF_FUNC_RINGBUF_RESERVE));
    // Both builds have `.rodata` (the half-open table's mask and seed); only the log
    // build names the level global.
    let has_level = |bytes: &[u8]| {
        bytes
            .windows(LOG_LEVEL.len())
            .any(|w| w == LOG_LEVEL.as_bytes())
    };
    assert!(has_level(BPF_OBJECT_LOG), "the log build's {LOG_LEVEL}");

    let mut names: Vec<_> = default.maps.keys().cloned().collect();
    names.sort();
    assert!(
        names.iter().all(|n| n.starts_with("LB_") || n == ".rodata"),
        "the default object has only our maps and globals (no {LOG_MAP}): {names:?}"
    );
    assert!(!has_level(BPF_OBJECT), "{LOG_LEVEL} in the default object");
    for map in [LOG_MAP, LOG_NOTE, LOG_PROGS] {
        assert!(
            !default.maps.contains_key(map),
            "{map} in the default object"
        );
    }
    assert!(!default.programs.contains_key(LOG_PROGRAM));
    assert!(
        !calls_helper(&default, BPF_FUNC_RINGBUF_RESERVE),
        "the default object writes no ring buffer"
    );
}
