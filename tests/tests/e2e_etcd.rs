//! A fleet of two LB nodes fed by one real etcd: after a series of service and
//! endpoint changes both hold byte-identical tables and pick the same backend for
//! every flow; etcd dying does not disturb forwarding and a later change still reaches
//! both; a node cut off while the history is compacted recovers the right state; bad
//! JSON is reported by key and the rest applies.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::{Duration, Instant},
};

use lb_dataplane::maps::MapSet;
use lb_model::{explain::Flow, explain::Protocol, explain::explain};
use lb_testbed::{
    LbdProcess, Netns, Topology, TopologyOptions,
    etcd::{EtcdServer, EtcdTls, plug_etcd_host},
    rng::{self, Rng as _, StdRng},
    topology::{VIP, backend_addr, plug},
    traffic::{ServerKind, http_requests, serve_backends, udp_requests},
};
use serde_json::Value;

const LB2_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 4);
const LB2_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 4);
const FLOWS: usize = 10_000;

fn node_config() -> String {
    format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\n\n[node.etcd]\nendpoints = [\"{}\"]\nprefix = \"/lb\"\n",
        EtcdServer::url()
    )
}

fn web(backends: &[(usize, u32)]) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|(i, w)| format!("{{\"address\":\"{}\",\"weight\":{w}}}", backend_addr(*i)))
        .collect();
    format!(
        "{{\"name\":\"web\",\"vip\":\"{VIP}\",\"port\":80,\"backends\":[{}]}}",
        list.join(",")
    )
}

fn dns_service() -> String {
    format!(
        "{{\"name\":\"dns\",\"vip\":\"{VIP}\",\"port\":5353,\"protocol\":\"udp\",\"endpoint_slices\":{{\"namespace\":\"default\",\"service\":\"dns\",\"port\":\"dns\"}}}}"
    )
}

/// An EndpointSlice for Service default/dns: (backend index, ready, terminating).
fn dns_slice(endpoints: &[(usize, bool, bool)]) -> String {
    let eps: Vec<String> = endpoints
        .iter()
        .map(|(i, ready, term)| {
            format!(
                "{{\"addresses\":[\"{}\"],\"conditions\":{{\"ready\":{ready},\"serving\":true,\"terminating\":{term}}}}}",
                backend_addr(*i)
            )
        })
        .collect();
    format!(
        "{{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{{\"name\":\"dns-1\",\"namespace\":\"default\",\"labels\":{{\"kubernetes.io/service-name\":\"dns\"}}}},\"addressType\":\"IPv4\",\"endpoints\":[{}],\"ports\":[{{\"name\":\"dns\",\"port\":5353,\"protocol\":\"UDP\"}}]}}",
        eps.join(",")
    )
}

/// The etcd source's entry in `lbctl status`.
fn etcd_source(lbd: &LbdProcess) -> Value {
    let status = lbd.lbctl_json(&["status"]);
    status["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["kind"] == "etcd")
        .cloned()
        .expect("an etcd source")
}

/// Waits (10 s at most) until `lbd`'s etcd source satisfies `ok`.
fn wait_source(lbd: &LbdProcess, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let src = etcd_source(lbd);
        if ok(&src) {
            return src;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{what}: etcd source is {src}\n{}",
            lbd.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn wait_revision(lbd: &LbdProcess, revision: i64) {
    wait_source(lbd, &format!("revision {revision}"), |s| {
        s["revision"].as_i64() >= Some(revision) && s["state"] == "ok"
    });
}

/// Table digest per service name.
fn digests(lbd: &LbdProcess) -> BTreeMap<String, String> {
    lbd.lbctl_json(&["services"])
        .as_array()
        .expect("services")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().expect("name").to_owned(),
                s["table_digest"].as_str().expect("digest").to_owned(),
            )
        })
        .collect()
}

/// Both nodes' tables are identical and `explain` (from each node's pinned maps, as
/// `lbctl explain` reads them) names the same backend for `FLOWS` random flows (drawn
/// from `rng`).
fn assert_same_decisions(a: &LbdProcess, b: &LbdProcess, rng: &mut StdRng) {
    let (da, db) = (digests(a), digests(b));
    assert_eq!(da, db, "table digests differ between the nodes");
    assert!(da.values().all(|d| !d.is_empty()));
    let (ma, mb) = (
        MapSet::open_pinned(&a.pin_dir()).expect("node 1 maps"),
        MapSet::open_pinned(&b.pin_dir()).expect("node 2 maps"),
    );
    let mut decided = 0;
    for _ in 0..FLOWS {
        let x = rng.next_u64();
        let (protocol, port) = if x & 1 == 0 {
            (Protocol::Tcp, 80)
        } else {
            (Protocol::Udp, 5353)
        };
        let src = IpAddr::V4(Ipv4Addr::new(198, 19, (x >> 8) as u8, (x >> 16) as u8));
        let flow = Flow {
            protocol,
            src: SocketAddr::new(src, 1024 + (x >> 24) as u16 % 60000),
            dst: SocketAddr::new(VIP.into(), port),
        };
        let (ea, eb) = (
            explain(&ma, flow).expect("explain 1"),
            explain(&mb, flow).expect("explain 2"),
        );
        assert_eq!(ea.backend(), eb.backend(), "{flow:?}: {ea:?} vs {eb:?}");
        decided += usize::from(ea.backend().is_some());
    }
    assert!(decided > FLOWS / 2, "only {decided} flows had a backend");
    // And through the lbctl binary itself, on both nodes.
    for sport in 50000..50010 {
        let args = [
            "explain",
            "tcp",
            &format!("198.19.0.1:{sport}"),
            &format!("{VIP}:80"),
        ];
        let (ja, jb) = (a.lbctl_json(&args), b.lbctl_json(&args));
        assert_eq!(ja["backend"], jb["backend"]);
        assert!(ja["backend"].is_string(), "{ja}");
    }
}

#[test]
fn two_nodes_fed_by_one_etcd_decide_alike_through_changes_outages_and_compaction() {
    lb_testbed::needs_root!();
    let mut rng = rng::seeded(
        "two_nodes_fed_by_one_etcd_decide_alike_through_changes_outages_and_compaction",
    );
    let topo = Topology::build(&TopologyOptions::default());
    let lb2 = Netns::new("lb2");
    plug(&topo.switch, &lb2, "p-lb2", LB2_ADDR, LB2_ADDR6);
    let etcd_ns = Netns::new("etcd");
    plug_etcd_host(&topo.switch, &etcd_ns);
    let _servers = serve_backends(
        &topo,
        |_| VIP.into(),
        &[(ServerKind::Http, 80), (ServerKind::Udp, 5353)],
    );
    let mut etcd = EtcdServer::start(&etcd_ns);
    etcd.put("/lb/services/web", &web(&[(0, 1), (1, 1)]));
    etcd.put("/lb/services/dns", &dns_service());
    let rev = etcd.put(
        "/lb/endpointslices/dns/dns-1",
        &dns_slice(&[(0, true, false), (1, true, false), (2, true, false)]),
    );

    let lbd1 = LbdProcess::start(&topo.lb, &node_config());
    let mut lbd2 = LbdProcess::start(&lb2, &node_config());
    wait_revision(&lbd1, rev);
    wait_revision(&lbd2, rev);
    let first = http_requests(&topo.client, VIP, 80, 60);
    assert!(
        first.failures.is_empty(),
        "{:?}\n{}",
        first.failures,
        lbd1.log()
    );
    assert_eq!(
        first.served.len(),
        2,
        "web has two backends: {:?}",
        first.served
    );
    assert_same_decisions(&lbd1, &lbd2, &mut rng);

    // A series of changes: a third backend, a weight, a terminating endpoint, a new
    // service and its removal.
    etcd.put("/lb/services/web", &web(&[(0, 1), (1, 1), (2, 1)]));
    etcd.put("/lb/services/web", &web(&[(0, 3), (1, 1), (2, 1)]));
    etcd.put(
        "/lb/endpointslices/dns/dns-1",
        &dns_slice(&[(0, true, false), (1, false, true), (2, true, false)]),
    );
    etcd.put(
        "/lb/services/extra",
        &format!("{{\"name\":\"extra\",\"vip\":\"{VIP}\",\"port\":8080,\"backends\":[{{\"address\":\"{}\"}}]}}", backend_addr(2)),
    );
    let rev = etcd.delete("/lb/services/extra");
    wait_revision(&lbd1, rev);
    wait_revision(&lbd2, rev);
    assert_eq!(digests(&lbd1).len(), 2, "extra came and went");
    assert_same_decisions(&lbd1, &lbd2, &mut rng);
    let dns = udp_requests(&topo.client, VIP, 5353, 60);
    assert!(dns.failures.is_empty(), "{:?}", dns.failures);
    assert!(
        !dns.served.contains_key("backend-2"),
        "the terminating endpoint gets no new flows: {:?}",
        dns.served
    );

    // Bad JSON is reported with its key and ignored; a good change next to it applies.
    etcd.put("/lb/services/broken", "{not json");
    let rev = etcd.put("/lb/services/web", &web(&[(0, 1), (1, 1), (2, 1)]));
    for lbd in [&lbd1, &lbd2] {
        let src = wait_source(lbd, "bad JSON applied around", |s| {
            s["revision"].as_i64() >= Some(rev)
        });
        let rejected = src["rejected"].to_string();
        assert!(rejected.contains("/lb/services/broken"), "{src}");
    }
    assert_same_decisions(&lbd1, &lbd2, &mut rng);
    etcd.delete("/lb/services/broken");

    // etcd dies during traffic: forwarding goes on, both nodes say they are degraded.
    let before = digests(&lbd1);
    let traffic = std::thread::scope(|scope| {
        let t = scope.spawn(|| http_requests(&topo.client, VIP, 80, 200));
        std::thread::sleep(Duration::from_millis(50));
        etcd.kill();
        t.join().expect("traffic")
    });
    assert!(
        traffic.failures.is_empty(),
        "forwarding must not notice etcd dying: {:?}",
        traffic.failures
    );
    for lbd in [&lbd1, &lbd2] {
        wait_source(lbd, "degraded", |s| {
            s["state"]
                .as_str()
                .is_some_and(|t| t.starts_with("degraded"))
        });
    }
    assert_eq!(digests(&lbd1), before, "the last good state keeps running");
    let metrics = lb_testbed::lbd::scrape_metrics(&topo.lb);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("lbd_source_up{kind=\"etcd\",") && l.ends_with(" 0")),
        "lbd_source_up says etcd is down:\n{metrics}"
    );
    let during = udp_requests(&topo.client, VIP, 5353, 30);
    assert!(during.failures.is_empty(), "{:?}", during.failures);

    // etcd comes back; a change reaches both nodes.
    etcd.restart(&etcd_ns);
    let rev = etcd.put("/lb/services/web", &web(&[(1, 1), (2, 1)]));
    wait_revision(&lbd1, rev);
    wait_revision(&lbd2, rev);
    assert_same_decisions(&lbd1, &lbd2, &mut rng);
    let after = http_requests(&topo.client, VIP, 80, 60);
    assert!(after.failures.is_empty(), "{:?}", after.failures);
    assert!(
        !after.served.contains_key("backend-1"),
        "backend-1 left web: {:?}",
        after.served
    );

    // Node 2 is cut off while changes happen and the history is compacted: once back
    // it lists again and holds exactly node 1's state.
    lb2.ip(&["link", "set", "eth0", "down"]);
    wait_source(&lbd2, "cut off", |s| {
        s["state"]
            .as_str()
            .is_some_and(|t| t.starts_with("degraded"))
    });
    etcd.put("/lb/services/web", &web(&[(0, 2), (1, 1), (2, 1)]));
    etcd.put(
        "/lb/endpointslices/dns/dns-1",
        &dns_slice(&[(0, true, false), (1, true, false)]),
    );
    let rev = etcd.put(
        "/lb/services/late",
        &format!("{{\"name\":\"late\",\"vip\":\"{VIP}\",\"port\":9090,\"backends\":[{{\"address\":\"{}\"}}]}}", backend_addr(0)),
    );
    etcd.compact();
    wait_revision(&lbd1, rev);
    lb2.ip(&["link", "set", "eth0", "up"]);
    wait_revision(&lbd2, rev);
    assert_eq!(
        digests(&lbd2).len(),
        3,
        "node 2 sees the service added while it was away"
    );
    assert_same_decisions(&lbd1, &lbd2, &mut rng);

    let (code, log) = lbd2
        .stop_leaving_running()
        .map_or((None, lbd2.log()), |c| (Some(c), lbd2.log()));
    assert_eq!(code, Some(0), "{log}");
}

/// etcd over mutual TLS with password authentication: lbd reads its secrets from files,
/// never prints them, and a node whose password is refused keeps forwarding with what
/// it had (here: the services it adopted from the pins across a restart).
#[test]
fn tls_and_password_protected_etcd() {
    lb_testbed::needs_root!();
    const PASSWORD: &str = "s3cret-Pa55-word";
    const WRONG: &str = "not-the-Pa55-word";
    let topo = Topology::build(&TopologyOptions::default());
    let etcd_ns = Netns::new("etcd");
    plug_etcd_host(&topo.switch, &etcd_ns);
    let _servers = serve_backends(&topo, |_| VIP.into(), &[(ServerKind::Http, 80)]);
    let certs = lb_testbed::lbd::TempDir::new("etcd-tls");
    let tls = EtcdTls::generate(certs.path());
    let mut etcd = EtcdServer::start_with(&etcd_ns, Some(tls.clone()));
    etcd.enable_auth(PASSWORD);
    let rev = etcd.put("/lb/services/web", &web(&[(0, 1), (1, 1), (2, 1)]));
    let config = |password: &str| {
        let file = certs.write(&format!("password-{password}"), &format!("{password}\n"));
        format!(
            "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\n\n[node.etcd]\nendpoints = [\"{}\"]\nusername = \"root\"\npassword_file = \"{}\"\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            etcd.client_url(),
            file.display(),
            tls.file("ca.pem"),
            tls.file("client.pem"),
            tls.file("client-key.pem"),
        )
    };
    let mut lbd = LbdProcess::start(&topo.lb, &config(PASSWORD));
    wait_revision(&lbd, rev);
    let served = http_requests(&topo.client, VIP, 80, 60);
    assert!(
        served.failures.is_empty(),
        "{:?}\n{}",
        served.failures,
        lbd.log()
    );
    assert_eq!(served.served.len(), 3);

    // A refused password: one clear error, no secret printed, forwarding goes on.
    lbd.edit_config(&config(WRONG));
    lbd.restart();
    let src = wait_source(&lbd, "refused", |s| {
        s["state"]
            .as_str()
            .is_some_and(|t| t.starts_with("degraded"))
    });
    let state = src["state"].as_str().expect("state");
    assert!(state.contains("authentication failed"), "{state}");
    let during = http_requests(&topo.client, VIP, 80, 60);
    assert!(
        during.failures.is_empty(),
        "adopted services keep serving: {:?}",
        during.failures
    );
    let status = lbd.lbctl_json(&["status"]).to_string();
    for secret in [PASSWORD, WRONG] {
        assert!(!lbd.log().contains(secret), "the log shows a password");
        assert!(!status.contains(secret), "status shows a password");
    }
}
