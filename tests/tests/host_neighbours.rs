//! lbd's neighbour entries for backends, through the kernel's rtnetlink on one
//! socket: hundreds of managed entries made in batches (IPv4 and IPv6) are there as
//! `ip neigh` shows them, removing them leaves none, removing again is no failure,
//! and a vanished interface fails every address with the kernel's error.

use std::{net::IpAddr, process::Command};

use lb_dataplane::neighbour::{BATCH, Neighbours};
use lb_testbed::Netns;

/// `ip -n <ns> neigh show dev <dev>` (both families), one entry a line.
fn neighbours(ns: &str, dev: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["-n", ns, "neigh", "show", "dev", dev])
        .output()
        .expect("ip neigh");
    assert!(out.status.success(), "ip neigh: {out:?}");
    let v6 = Command::new("ip")
        .args(["-6", "-n", ns, "neigh", "show", "dev", dev])
        .output()
        .expect("ip -6 neigh");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&v6.stdout).lines())
        .map(str::to_owned)
        .collect()
}

#[test]
fn managed_entries_are_made_and_removed_in_batches_on_one_socket() {
    lb_testbed::needs_root!();
    let ns = Netns::new("neigh");
    ns.ip(&["link", "add", "n0", "type", "veth", "peer", "name", "n1"]);
    ns.ip(&["addr", "add", "198.19.0.1/16", "dev", "n0"]);
    ns.ip(&["addr", "add", "2001:db8:7::1/64", "dev", "n0"]);
    ns.ip(&["link", "set", "n0", "up"]);
    ns.ip(&["link", "set", "n1", "up"]);
    // More than two batches of each family, the last one partial.
    let count = 2 * BATCH + 37;
    let mut addrs: Vec<IpAddr> = (0..count)
        .map(|i| IpAddr::from([198, 19, 1 + (i / 250) as u8, 1 + (i % 250) as u8]))
        .collect();
    addrs.extend((0..count).map(|i| IpAddr::from([0x2001, 0xdb8, 7, 0, 0, 0, 1, i as u16 + 1])));
    let want = addrs.clone();
    let (made, shown, removed, again, gone, vanished) = {
        let addrs = addrs.clone();
        let name = ns.name().to_owned();
        ns.run(move || {
            let index = lb_userspace::node::ifindex("n0").expect("n0's index");
            let mut nl = Neighbours::open().expect("netlink socket");
            let made = nl.ensure_managed(index, &addrs);
            // Making them again is idempotent (NLM_F_REPLACE).
            let made_again = nl.ensure_managed(index, &addrs);
            assert!(made_again.is_empty(), "{made_again:?}");
            let shown = neighbours(&name, "n0");
            let removed = nl.remove(index, &addrs);
            let again = nl.remove(index, &addrs);
            let gone = neighbours(&name, "n0");
            let vanished = nl.ensure_managed(99_999, &addrs[..3]);
            (made, shown, removed, again, gone, vanished)
        })
    };
    assert!(made.is_empty(), "failed: {made:?}");
    for addr in &want {
        let line = shown
            .iter()
            .find(|l| l.split_whitespace().next() == Some(&addr.to_string()))
            .unwrap_or_else(|| panic!("{addr} not in the neighbour table: {shown:?}"));
        assert!(line.contains("managed"), "{addr} not managed: {line}");
    }
    assert!(removed.is_empty(), "{removed:?}");
    assert!(again.is_empty(), "a missing entry is no failure: {again:?}");
    let left: Vec<&String> = gone
        .iter()
        .filter(|l| {
            want.iter()
                .any(|a| l.split_whitespace().next() == Some(&a.to_string()))
        })
        .collect();
    assert!(left.is_empty(), "entries left after removal: {left:?}");
    assert_eq!(vanished.len(), 3, "{vanished:?}");
    for (_, e) in &vanished {
        assert_eq!(e.raw_os_error(), Some(19), "ENODEV expected: {e}");
    }
}
