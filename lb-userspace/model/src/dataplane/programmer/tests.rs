use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_common::{FlowKey, ForwardingMode, maps::v4_mapped};

use super::*;
use crate::dataplane::{memory::MemoryDataplane, pool::QUARANTINE, vip_key};

fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(198, 18, 0, last))
}

fn spec(port: u16, backends: &[IpAddr]) -> ServiceSpec {
    ServiceSpec {
        name: format!("svc-{port}"),
        key: vip_key(IpAddr::V4(Ipv4Addr::new(198, 18, 100, 1)), port, 6),
        mode: ForwardingMode::Dsr,
        backends: backends.to_vec(),
        table_size: None,
        weights: Vec::new(),
        ports: Vec::new(),
    }
}

fn flow(sport: u16) -> FlowKey {
    FlowKey {
        src: v4_mapped([198, 18, 0, 1]),
        dst: v4_mapped([198, 18, 100, 1]),
        src_port_be: sport.to_be(),
        dst_port_be: 80u16.to_be(),
        proto: 6,
        _pad: 0,
        _pad2: 0,
    }
}

#[test]
fn vip_entry_is_written_after_its_list_and_table() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let report = p
        .apply(
            &mut dp,
            &[spec(80, &[v4(11), v4(12), v4(13)])],
            Instant::now(),
        )
        .expect("apply");
    assert_eq!(
        report,
        ApplyReport {
            programmed: 1,
            unchanged: 0,
            removed: 0,
            refused: Vec::new(),
        }
    );
    let last_vip = dp
        .log
        .iter()
        .rposition(|op| *op == "put_vip")
        .expect("vip written");
    assert!(
        dp.log[last_vip..]
            .iter()
            .all(|op| !matches!(*op, "put_backend" | "put_list_entry" | "put_table_chunk")),
        "the VIP entry comes after its backends, list and table: {:?}",
        dp.log
    );
    let info = dp.vips[&spec(80, &[]).key];
    assert_eq!((info.list_len, info.table_size), (3, 509));
    let chunks = dp.log.iter().filter(|op| **op == "put_table_chunk").count();
    assert_eq!(chunks, 509usize.div_ceil(32));
}

#[test]
fn unchanged_services_cost_nothing() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let specs = [spec(80, &[v4(11), v4(12)]), spec(81, &[v4(11)])];
    p.apply(&mut dp, &specs, Instant::now()).expect("first");
    let writes = dp.log.len();
    let report = p.apply(&mut dp, &specs, Instant::now()).expect("second");
    assert_eq!(report.unchanged, 2);
    assert_eq!(
        dp.log.len(),
        writes,
        "no map operation for an unchanged config"
    );
}

#[test]
fn a_change_uses_new_regions_and_keeps_backend_ids() {
    let t0 = Instant::now();
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    p.apply(&mut dp, &[spec(80, &[v4(11), v4(12), v4(13)])], t0)
        .expect("first");
    let before = p.service(&spec(80, &[]).key).expect("programmed").clone();
    p.apply(&mut dp, &[spec(80, &[v4(11), v4(13), v4(14)])], t0)
        .expect("second");
    let after = p.service(&spec(80, &[]).key).expect("programmed").clone();
    assert_ne!(
        before.info.table_base, after.info.table_base,
        "new table region"
    );
    assert_ne!(
        before.info.list_base, after.info.list_base,
        "new list region"
    );
    assert_eq!(before.info.service_id, after.info.service_id);
    // 198.18.0.11 and .13 keep their ids: conntrack entries stay valid.
    assert_eq!(before.backend_ids[0], after.backend_ids[0]);
    assert_eq!(before.backend_ids[2], after.backend_ids[1]);
    assert!(
        !before.backend_ids.contains(&after.backend_ids[2]),
        "a new backend gets a new id"
    );
    // The old regions still hold the old table: a reader mid-swap sees it whole.
    let old_chunk = dp.chunks[&(before.info.table_base / 32)];
    assert_eq!(&old_chunk.slots[..], &before.table[..32]);
}

#[test]
fn removed_service_is_deleted_and_its_space_reused_after_quarantine() {
    let t0 = Instant::now();
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    p.apply(&mut dp, &[spec(80, &[v4(11)])], t0).expect("first");
    let base = p
        .service(&spec(80, &[]).key)
        .expect("programmed")
        .info
        .table_base;
    let report = p.apply(&mut dp, &[], t0).expect("remove");
    assert_eq!(report.removed, 1);
    assert!(dp.vips.is_empty());
    p.apply(&mut dp, &[spec(81, &[v4(12)])], t0 + QUARANTINE)
        .expect("reuse");
    let reused = p
        .service(&spec(81, &[]).key)
        .expect("programmed")
        .info
        .table_base;
    assert_eq!(reused, base);
}

#[test]
fn table_choice_follows_the_table() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let backends = [v4(11), v4(12), v4(13)];
    p.apply(&mut dp, &[spec(80, &backends)], Instant::now())
        .expect("apply");
    let prog = p.service(&spec(80, &[]).key).expect("programmed");
    let mut per_backend = [0usize; 3];
    for sport in 1000..4000 {
        let c = dp.choose(&spec(80, &[]).key, &flow(sport)).expect("choice");
        assert_eq!(u32::from(prog.table[c.slot as usize]), c.list_index);
        assert_eq!(prog.backend_ids[c.list_index as usize], c.backend_id);
        per_backend[c.list_index as usize] += 1;
    }
    for n in per_backend {
        assert!((900..=1100).contains(&n), "uneven: {per_backend:?}");
    }
}

#[test]
fn bad_table_size_and_empty_service() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let mut s = spec(80, &[v4(11), v4(12)]);
    s.table_size = Some(1000);
    // A refused service does not hold back the others.
    let other = spec(81, &[v4(13)]);
    let report = p
        .apply(&mut dp, &[s.clone(), other.clone()], Instant::now())
        .expect("the rest applies");
    assert_eq!(report.programmed, 1, "{report:?}");
    assert_eq!(report.refused.len(), 1, "{report:?}");
    let e = report.refused[0].to_string();
    assert!(e.contains("table size 1000 must be a prime"), "{e}");
    assert!(!dp.vips.contains_key(&s.key), "nothing written for it");
    assert!(dp.vips.contains_key(&other.key));
    p.apply(&mut dp, &[spec(80, &[])], Instant::now())
        .expect("empty");
    let info = dp.vips[&spec(80, &[]).key];
    assert_eq!((info.list_len, info.table_size), (0, 0));
    assert!(dp.choose(&spec(80, &[]).key, &flow(1)).is_none());
}

#[test]
fn ipv6_backends_are_flagged() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let b6 = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 11);
    let mut s = spec(80, &[IpAddr::V6(b6)]);
    s.key = vip_key(
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 1, 1)),
        80,
        6,
    );
    p.apply(&mut dp, &[s], Instant::now()).expect("apply");
    let b = dp.backends.values().next().expect("one backend");
    assert_eq!(b.flags, BACKEND_F_IPV6);
    assert_eq!(b.addr.octets(), b6.octets());
}

#[test]
fn a_new_programmer_adopts_the_previous_state() {
    let t0 = Instant::now();
    let mut dp = MemoryDataplane::default();
    let mut first = Programmer::default();
    let backends = [v4(11), v4(12), v4(13)];
    first
        .apply(&mut dp, &[spec(80, &backends), spec(81, &[v4(14)])], t0)
        .expect("first");
    let before = first
        .service(&spec(80, &[]).key)
        .expect("programmed")
        .clone();

    // A restarted agent: fresh allocators, same maps.
    let mut second = Programmer::default();
    assert_eq!(second.adopt(&dp).expect("adopt"), 2);
    let adopted = second.service(&spec(80, &[]).key).expect("adopted");
    assert_eq!(adopted.table, before.table);
    assert_eq!(adopted.backend_ids, before.backend_ids);
    assert_eq!(adopted.backends, before.backends);

    // Applying the same config swaps in new regions (never the live ones) and keeps
    // every backend id; the service that is gone is removed.
    second
        .apply(&mut dp, &[spec(80, &backends)], t0)
        .expect("apply");
    let after = second.service(&spec(80, &[]).key).expect("programmed");
    assert_eq!(after.backend_ids, before.backend_ids);
    assert_ne!(after.info.table_base, before.info.table_base);
    assert_ne!(after.info.list_base, before.info.list_base);
    assert_eq!(after.table, before.table);
    assert_eq!(dp.vips.len(), 1);
}

#[test]
fn echo_is_answered_for_dsr_vips_only() {
    let t0 = Instant::now();
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let mut l7 = spec(443, &[v4(11)]);
    l7.key = vip_key(IpAddr::V4(Ipv4Addr::new(198, 18, 100, 9)), 443, 6);
    l7.mode = ForwardingMode::L7;
    let specs = [spec(80, &[v4(11)]), spec(53, &[v4(11)]), l7.clone()];
    p.apply(&mut dp, &specs, t0).expect("apply");
    assert_eq!(dp.echo.len(), 1, "one dsr address, the l7 one excluded");
    assert!(dp.echo.contains(&spec(80, &[]).key.addr));
    p.apply(&mut dp, &[l7], t0).expect("apply");
    assert!(
        dp.echo.is_empty(),
        "answering stops with the last dsr service"
    );
    p.set_answer_ping(false);
    p.apply(&mut dp, &[spec(80, &[v4(11)])], t0).expect("apply");
    assert!(dp.echo.is_empty(), "answer_ping = false");
}

#[test]
fn weights_shape_the_table_and_zero_drains() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let mut s = spec(80, &[v4(11), v4(12), v4(13)]);
    s.weights = vec![1, 0, 3];
    p.apply(&mut dp, &[s.clone()], Instant::now())
        .expect("apply");
    let prog = p.service(&s.key).expect("programmed");
    assert_eq!(prog.info.list_len, 3, "a drained backend stays in the list");
    let on = |i: u16| prog.table.iter().filter(|&&x| x == i).count();
    assert_eq!(on(1), 0, "weight 0: no new flows");
    assert!(on(2) > 2 * on(0), "weight 3 vs 1: {} vs {}", on(2), on(0));
    s.weights = vec![0, 0, 0];
    p.apply(&mut dp, &[s.clone()], Instant::now())
        .expect("apply");
    let info_key = s.key;
    let info = dp.vips[&s.key];
    assert_eq!(
        (info.list_len, info.table_size),
        (3, 0),
        "all drained: no table, list kept"
    );
    s.weights = vec![1, 1];
    let report = p
        .apply(&mut dp, &[s], Instant::now())
        .expect("nothing fails");
    assert!(
        report.refused[0]
            .to_string()
            .contains("2 weights for 3 backends"),
        "weights must match backends: {report:?}"
    );
    assert_eq!(
        dp.vips[&info_key].table_size, 0,
        "the refused change wrote nothing"
    );
}

#[test]
fn the_digest_of_what_the_maps_hold_matches_the_model() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let mut s = spec(80, &[v4(11), v4(12), v4(13)]);
    s.weights = vec![3, 1, 2];
    p.apply(&mut dp, std::slice::from_ref(&s), Instant::now())
        .expect("apply");
    let programmed = p.service(&s.key).expect("programmed");
    let info = dp.vips[&s.key];
    let in_maps: Vec<u16> = (0..info.table_size)
        .map(|slot| {
            dp.chunks[&(info.table_base / TABLE_CHUNK_SLOTS + slot / TABLE_CHUNK_SLOTS)].slots
                [(slot % TABLE_CHUNK_SLOTS) as usize]
        })
        .collect();
    let model = maglev::build_weighted(&s.backends, &s.weights, maglev::default_size(3));
    assert_eq!(maglev::digest(&in_maps), maglev::digest(&model));
    assert_eq!(programmed.digest(), maglev::digest(&model));
    s.weights = vec![1, 1, 2];
    p.apply(&mut dp, std::slice::from_ref(&s), Instant::now())
        .expect("apply");
    assert_ne!(
        p.service(&s.key).expect("programmed").digest(),
        maglev::digest(&model),
        "a weight change changes the digest"
    );
}

#[test]
fn keep_unlisted_programs_but_removes_nothing() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let now = Instant::now();
    p.apply(&mut dp, &[spec(80, &[v4(11)]), spec(81, &[v4(12)])], now)
        .expect("apply");
    p.keep_unlisted(true);
    let report = p
        .apply(&mut dp, &[spec(80, &[v4(13)])], now)
        .expect("apply");
    assert_eq!((report.programmed, report.removed), (1, 0));
    assert_eq!(dp.vips.len(), 2, "81 stays while its source is unknown");
    p.keep_unlisted(false);
    let report = p
        .apply(&mut dp, &[spec(80, &[v4(13)])], now)
        .expect("apply");
    assert_eq!(report.removed, 1);
    assert_eq!(dp.vips.len(), 1);
}

/// Whether the data plane would send the flow `entry` (found under the service with
/// `service_id`) to `addr`: its identity check passes and the record is `addr`'s.
fn reaches(dp: &MemoryDataplane, service_id: u32, entry: &lb_common::FlowEntry) -> Option<IpAddr> {
    let record = dp.backends.get(&entry.backend_id)?;
    crate::dataplane::entry_is_own(service_id, entry, record).then(|| from_addr16(record.addr))
}

#[test]
fn a_held_flow_never_reaches_another_services_backend_through_id_reuse_or_restart() {
    let mut now = Instant::now();
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let (x, y) = (v4(11), v4(12));
    let held_service = spec(80, &[x, y]);
    p.apply(&mut dp, std::slice::from_ref(&held_service), now)
        .expect("apply");
    let programmed = p.service(&held_service.key).expect("programmed").clone();
    let service_id = programmed.info.service_id;
    let id_x = programmed.backend_ids[0];
    let record = dp.backends[&id_x];
    // The flow as the kernel pinned it.
    let held = lb_common::FlowEntry {
        backend_id: id_x,
        service_id: record.service_id,
        backend_gen: record.generation,
        ..lb_common::FlowEntry::default()
    };
    assert_eq!(reaches(&dp, service_id, &held), Some(x));
    // x leaves the service: the held flow drains to it, no new flow does.
    let only_y = spec(80, &[y]);
    p.apply(&mut dp, std::slice::from_ref(&only_y), now)
        .expect("apply");
    assert_eq!(reaches(&dp, service_id, &held), Some(x), "draining");
    assert_ne!(dp.backends[&id_x].flags & BACKEND_F_NO_NEW, 0);

    // Another service churns through 70,000 backend ids (every address new), with an
    // lbd restart (a new programmer adopting the maps) in the middle.
    let churn_key = vip_key(
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x100, 2)),
        80,
        6,
    );
    let mut allocations = 0u32;
    let mut first_reuse = None;
    for round in 0..140u32 {
        if round == 70 {
            let mut restarted = Programmer::default();
            assert_eq!(restarted.adopt(&dp).expect("adopt"), 2);
            p = restarted;
        }
        let backends: Vec<IpAddr> = (0..500u32)
            .map(|i| {
                let n = round * 500 + i;
                IpAddr::V6(Ipv6Addr::new(
                    0x2001,
                    0xdb8,
                    1,
                    0,
                    0,
                    0,
                    (n >> 16) as u16,
                    n as u16,
                ))
            })
            .collect();
        let churn = ServiceSpec {
            name: "churn".into(),
            key: churn_key,
            mode: ForwardingMode::Dsr,
            weights: vec![0; backends.len()],
            backends,
            table_size: None,
            ports: Vec::new(),
        };
        now += QUARANTINE * 2;
        p.apply(&mut dp, &[only_y.clone(), churn], now)
            .expect("churn");
        allocations += 500;
        let record = dp.backends[&id_x];
        if first_reuse.is_none() && from_addr16(record.addr) != x {
            first_reuse = Some(allocations);
        }
        match reaches(&dp, service_id, &held) {
            Some(addr) => assert_eq!(addr, x, "round {round}: only ever its own backend"),
            None => assert_ne!(
                from_addr16(record.addr),
                x,
                "round {round}: x's record is intact yet the flow lost it"
            ),
        }
    }
    let reuse = first_reuse.expect("70,000 allocations reuse x's id");
    assert!(
        reuse > 60_000,
        "x's id came back after {reuse} allocations: fresh ids go first, across the restart"
    );
    assert_ne!(
        dp.backends[&id_x].generation, held.backend_gen,
        "a new generation"
    );
    assert_eq!(reaches(&dp, service_id, &held), None);
}

/// What the data plane serves, read through the VIP entries only (regions a failed
/// attempt wrote but never published do not count): per VIP its mode, backends with
/// ports in list order, and table.
type Served = std::collections::BTreeMap<Addr, Vec<(u16, u32, Vec<(IpAddr, u16)>, Vec<u16>)>>;

fn served(dp: &MemoryDataplane) -> Served {
    let mut out = Served::new();
    for (key, info) in dp.vips().expect("vips") {
        let backends = (0..info.list_len)
            .map(|i| {
                let b = dp
                    .backend(dp.list_entry(info.list_base + i).expect("list"))
                    .expect("backend");
                (from_addr16(b.addr), u16::from_be(b.port_be))
            })
            .collect();
        let mut table = Vec::new();
        for c in 0..info.table_size.div_ceil(TABLE_CHUNK_SLOTS) {
            table.extend_from_slice(
                &dp.table_chunk(info.table_base / TABLE_CHUNK_SLOTS + c)
                    .expect("chunk")
                    .slots,
            );
        }
        table.truncate(info.table_size as usize);
        out.entry(key.addr).or_default().push((
            u16::from_be(key.port_be),
            info.mode,
            backends,
            table,
        ));
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// A reconcile whose n-th write fails, for every n: it hands back what it allocated
/// (no id or pool slot stays taken), and the retry succeeds and serves exactly what a
/// clean run serves, with the same pool usage.
#[test]
fn a_reconcile_failing_at_any_write_leaks_nothing_and_its_retry_converges() {
    let vip2 = IpAddr::V4(Ipv4Addr::new(198, 18, 100, 2));
    let before = [
        spec(80, &[v4(11), v4(12), v4(13)]),
        spec(81, &[v4(11)]),
        ServiceSpec {
            name: "gone".into(),
            key: vip_key(vip2, 53, 17),
            ..spec(53, &[v4(14)])
        },
    ];
    let after = [
        // Changed: one backend replaced, weights.
        ServiceSpec {
            weights: vec![1, 2, 3],
            ..spec(80, &[v4(11), v4(13), v4(15)])
        },
        spec(81, &[v4(11)]),
        // New, with a table of its own and new backends.
        spec(82, &[v4(16), v4(17)]),
        ServiceSpec {
            name: "nat".into(),
            mode: ForwardingMode::Nat,
            ports: vec![8080],
            ..spec(83, &[v4(18)])
        },
    ];
    let t0 = Instant::now();
    let start = || {
        let (mut dp, mut p) = (MemoryDataplane::default(), Programmer::default());
        p.apply(&mut dp, &before, t0).expect("initial state");
        (dp, p)
    };
    let (mut clean_dp, mut clean) = start();
    let base = clean_dp.writes;
    clean.apply(&mut clean_dp, &after, t0).expect("clean run");
    let writes = clean_dp.writes - base;
    assert!(writes > 40, "a reconcile of some size: {writes} writes");
    let want = served(&clean_dp);
    for n in 0..writes {
        let (mut dp, mut p) = start();
        let usage_before = p.pool_usage();
        dp.fail_writes = dp.writes + n..dp.writes + n + 1;
        let failed = p.apply(&mut dp, &after, t0);
        assert!(
            failed.is_err(),
            "write {n} of {writes} failed, the apply must say so"
        );
        let usage_failed = p.pool_usage();
        for (was, now, what) in [
            (usage_before.0, usage_failed.0, "service ids"),
            (usage_before.1, usage_failed.1, "backend ids"),
        ] {
            // What a failure part-way may hold: the services programmed before it.
            assert!(now <= was + 3, "write {n}: {what} {was} -> {now}");
        }
        p.apply(&mut dp, &after, t0)
            .unwrap_or_else(|e| panic!("write {n}: the retry failed: {e}"));
        assert_eq!(
            served(&dp),
            want,
            "write {n}: the retry serves what a clean run serves"
        );
        assert_eq!(
            p.pool_usage(),
            clean.pool_usage(),
            "write {n}: ids and pool slots in use after the retry"
        );
        // And the next reconcile goes on from there.
        let more = [&after[..], &[spec(90, &[v4(30), v4(31)])]].concat();
        p.apply(&mut dp, &more, t0 + QUARANTINE)
            .unwrap_or_else(|e| panic!("write {n}: the next reconcile failed: {e}"));
    }
}

#[test]
fn a_plan_is_pure_and_applying_it_writes_what_it_says() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let (a, b, c) = (
        spec(80, &[v4(11), v4(12)]),
        spec(81, &[v4(13)]),
        spec(82, &[v4(14), v4(15), v4(16)]),
    );
    p.apply(&mut dp, &[a.clone(), b.clone()], Instant::now())
        .expect("first");
    let writes = dp.log.len();
    let mut changed = a.clone();
    changed.backends.push(v4(17));
    let plan = p.plan(&[changed.clone(), c.clone()]);
    assert_eq!(dp.log.len(), writes, "planning writes nothing");
    assert_eq!(
        p.plan(&[changed.clone(), c.clone()]),
        plan,
        "and changes nothing"
    );
    assert_eq!(plan.unchanged, 0);
    let names: Vec<(&str, bool)> = plan
        .changes
        .iter()
        .map(|ch| (ch.spec.name.as_str(), ch.existing))
        .collect();
    assert_eq!(names, [("svc-80", true), ("svc-82", false)]);
    assert_eq!(
        plan.removals
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["svc-81"]
    );
    for ch in &plan.changes {
        let slots = ch.slots_per_backend();
        assert_eq!(slots.iter().sum::<usize>(), ch.table.len());
        assert!(
            slots.iter().all(|&n| n > 0),
            "every backend has slots: {slots:?}"
        );
        assert_eq!(ch.digest, maglev::digest(&ch.table));
    }
    let digests: Vec<u64> = plan.changes.iter().map(|ch| ch.digest).collect();
    let report = p.apply_plan(&mut dp, plan, Instant::now()).expect("apply");
    assert_eq!((report.programmed, report.removed), (2, 1));
    assert_eq!(p.service(&changed.key).expect("a").digest(), digests[0]);
    assert_eq!(p.service(&c.key).expect("c").digest(), digests[1]);
    assert!(!dp.vips.contains_key(&b.key));
    assert!(p.plan(&[changed, c]).is_empty(), "nothing left to do");
}

/// Whether the memory data plane's prefilter lets `key`'s address through.
fn filtered_in(dp: &MemoryDataplane, key: &VipKey) -> bool {
    let (w, bit) = lb_common::maps::vip_filter_slot(&key.addr);
    dp.vip_filter.get(&w).is_some_and(|word| word & bit != 0)
}

#[test]
fn the_prefilter_bit_is_up_before_its_vip_and_down_after_the_last() {
    let mut dp = MemoryDataplane::default();
    let mut p = Programmer::default();
    let web = spec(80, &[v4(11)]);
    let dns = spec(53, &[v4(11)]);
    let other = ServiceSpec {
        key: vip_key(IpAddr::V4(Ipv4Addr::new(198, 18, 100, 2)), 80, 6),
        ..spec(80, &[v4(12)])
    };
    p.apply(
        &mut dp,
        &[web.clone(), dns.clone(), other.clone()],
        Instant::now(),
    )
    .expect("apply");
    assert!(filtered_in(&dp, &web.key) && filtered_in(&dp, &other.key));
    // The first write of the filter writes every word, before any VIP entry.
    let first_vip = dp.log.iter().position(|op| *op == "put_vip").expect("vip");
    let words = dp.log[..first_vip]
        .iter()
        .filter(|op| **op == "put_vip_filter_word")
        .count();
    assert_eq!(words, lb_common::maps::VIP_FILTER_WORDS as usize);
    // One of two services of an address goes: the bit stays for the other.
    p.apply(&mut dp, &[web.clone(), other.clone()], Instant::now())
        .expect("apply");
    assert!(filtered_in(&dp, &web.key), "web still serves the address");
    // The last service of an address goes: its bit comes down, after the VIP entry.
    dp.log.clear();
    p.apply(&mut dp, std::slice::from_ref(&web), Instant::now())
        .expect("apply");
    let (ow, obit) = lb_common::maps::vip_filter_slot(&other.key.addr);
    let (ww, wbit) = lb_common::maps::vip_filter_slot(&web.key.addr);
    if (ow, obit) != (ww, wbit) {
        assert!(
            !filtered_in(&dp, &other.key),
            "the removed address is filtered out"
        );
    }
    let deleted = dp
        .log
        .iter()
        .position(|op| *op == "delete_vip")
        .expect("deleted");
    let cleared = dp
        .log
        .iter()
        .rposition(|op| *op == "put_vip_filter_word")
        .expect("cleared");
    assert!(
        deleted < cleared,
        "the bit comes down after the VIP entry: {:?}",
        dp.log
    );
    // Only changed words are written once the filter is in sync.
    dp.log.clear();
    p.apply(&mut dp, &[web], Instant::now()).expect("apply");
    assert!(!dp.log.contains(&"put_vip_filter_word"), "{:?}", dp.log);
}
