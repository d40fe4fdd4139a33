//! Backends from a watched directory of EndpointSlices: conditions drive new flows,
//! edits apply within a second or two, a broken file changes nothing, and established
//! connections never move.

use std::{net::SocketAddr, time::Duration};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    lbd::TempDir,
    topology::{VIP, backend_addr},
    traffic::{Held, ServerKind, http_requests, serve_backends},
};

/// An EndpointSlice for Service shop/web with ports http (80) and echo (7000); each
/// endpoint is (backend index, conditions).
fn slice(endpoints: &[(usize, &str)]) -> String {
    let eps: Vec<String> = endpoints
        .iter()
        .map(|(i, c)| format!("- addresses: [\"{}\"]\n  conditions: {c}", backend_addr(*i)))
        .collect();
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-abcde\n  namespace: shop\n  labels:\n    kubernetes.io/service-name: web\naddressType: IPv4\nendpoints:\n{}\nports:\n- name: http\n  port: 80\n  protocol: TCP\n- name: echo\n  port: 7000\n  protocol: TCP\n",
        eps.join("\n")
    )
}

const READY: &str = "{ ready: true, serving: true, terminating: false }";
const DRAINING: &str = "{ ready: false, serving: true, terminating: true }";

fn config(dir: &std::path::Path) -> String {
    format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\nendpointslice_dir = \"{}\"\n\n[[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\nendpoint_slices = {{ namespace = \"shop\", service = \"web\", port = \"http\" }}\n\n[[service]]\nname = \"echo\"\nvip = \"{VIP}\"\nport = 7000\nendpoint_slices = {{ namespace = \"shop\", service = \"web\", port = \"echo\" }}\n",
        dir.display()
    )
}

/// Waits until `/v1/backends/<service>` lists exactly `want` (backend index, state),
/// in address order.
fn wait_backends(lbd: &mut LbdProcess, service: &str, want: &[(usize, &str)]) {
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(i, s)| (backend_addr(*i).to_string(), (*s).to_owned()))
        .collect();
    lbd.wait_admin(
        &format!("{service} lists {want:?}"),
        &format!("/v1/backends/{service}"),
        Duration::from_secs(10),
        |all| {
            let mut have: Vec<(String, String)> = all
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| {
                    let field = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
                    (field("address"), field("state"))
                })
                .collect();
            have.sort();
            have == want
        },
    );
}

#[test]
fn endpointslice_changes_drive_new_flows_and_never_break_old_ones() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    let _servers = serve_backends(
        &topo,
        |_| VIP.into(),
        &[(ServerKind::Http, 80), (ServerKind::Echo, 7000)],
    );
    let slices = TempDir::new("slices");
    slices.write("web.yaml", &slice(&[(0, READY), (1, READY), (2, READY)]));
    let mut lbd = LbdProcess::start(&topo.lb, &config(slices.path()));

    let first = http_requests(&topo.client, VIP, 80, 90);
    assert!(
        first.failures.is_empty(),
        "{:?}\n{}",
        first.failures,
        lbd.log()
    );
    assert_eq!(first.served.len(), 3, "{:?}", first.served);
    let mut held = Held::open(&topo.client, SocketAddr::new(VIP.into(), 7000), 30);
    let on: Vec<String> = held
        .iter_mut()
        .map(|c| c.ask("hi").expect("echo"))
        .collect();

    // backend-1 starts terminating (serving), backend-3 disappears.
    std::thread::sleep(Duration::from_millis(1100)); // a new modification time
    slices.write("web.yaml", &slice(&[(0, DRAINING), (1, READY)]));
    // Both services (ports http and echo) come from the edited slice: backend-1
    // drains (terminating), backend-3 is gone.
    for service in ["web", "echo"] {
        wait_backends(&mut lbd, service, &[(0, "draining"), (1, "active")]);
    }
    let after = http_requests(&topo.client, VIP, 80, 60);
    assert!(after.failures.is_empty(), "{:?}", after.failures);
    assert_eq!(
        after.served.keys().collect::<Vec<_>>(),
        ["backend-2"],
        "only the ready backend: {:?}",
        after.served
    );
    for (i, (c, was)) in held.iter_mut().zip(&on).enumerate() {
        assert_eq!(
            &c.ask("still")
                .unwrap_or_else(|e| panic!("held {i} on {was} broke: {e}")),
            was
        );
    }

    // A broken file is reported with its path and changes nothing.
    slices.write("broken.yaml", "kind: EndpointSlice\nendpoints: [unclosed\n");
    let src = lbd.wait_source("endpointslices", "the broken file reported", |s| {
        s["state"]
            .as_str()
            .is_some_and(|s| s.starts_with("rejected "))
    });
    assert!(
        src["state"]
            .as_str()
            .is_some_and(|s| s.contains("broken.yaml")),
        "names the file: {src}"
    );
    let still = http_requests(&topo.client, VIP, 80, 30);
    assert!(still.failures.is_empty(), "{:?}", still.failures);
    assert_eq!(
        still.served.keys().collect::<Vec<_>>(),
        ["backend-2"],
        "{:?}",
        still.served
    );
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// Kubernetes Services usually map their port to another target port: `nat` mode
/// reaches pods on the target port (here VIP:80 → pod:8080) and the client sees the
/// VIP's port.
#[test]
fn nat_reaches_pods_on_their_target_port() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    let nat = std::net::Ipv4Addr::new(198, 18, 0, 3);
    topo.lb
        .ip(&["addr", "add", &format!("{nat}/24"), "dev", "eth0"]);
    // Pods listen on their own address and port 8080 only.
    let _servers = serve_backends(
        &topo,
        |i| backend_addr(i).into(),
        &[(ServerKind::Http, 8080)],
    );
    let slices = TempDir::new("slices-nat");
    let eps: Vec<String> = (0..3)
        .map(|i| {
            format!(
                "- addresses: [\"{}\"]\n  conditions: {READY}",
                backend_addr(i)
            )
        })
        .collect();
    slices.write(
        "web.yaml",
        &format!(
            "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-x\n  namespace: shop\n  labels:\n    kubernetes.io/service-name: web\naddressType: IPv4\nendpoints:\n{}\nports:\n- name: http\n  port: 8080\n  protocol: TCP\n",
            eps.join("\n")
        ),
    );
    let config = format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\nendpointslice_dir = \"{}\"\nnat_addresses = [\"{nat}\"]\n\n[[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\nmode = \"nat\"\nendpoint_slices = {{ namespace = \"shop\", service = \"web\", port = \"http\" }}\n",
        slices.path().display()
    );
    let lbd = LbdProcess::start(&topo.lb, &config);
    let tally = http_requests(&topo.client, VIP, 80, 90);
    assert!(
        tally.failures.is_empty(),
        "{:?}\n{}",
        tally.failures,
        lbd.log()
    );
    assert_eq!(tally.served.len(), 3, "{:?}", tally.served);
    // lbctl says which port each backend is reached on.
    let backends = lbd.lbctl_json(&["backends", "web"]);
    for b in backends.as_array().expect("backends") {
        assert_eq!(b["port"], 8080, "{b}");
    }
    let e = lbd.lbctl_json(&["explain", "tcp", "198.18.0.1:45000", &format!("{VIP}:80")]);
    assert_eq!(e["backend_port"], 8080, "{e}");
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}

/// `lbd --cleanup` after a SIGTERM removes the neighbour entries lbd made for backends
/// it learnt from EndpointSlices (which the config file does not list): it reads them
/// from the pinned maps.
#[test]
fn cleanup_removes_neighbours_of_backends_the_file_does_not_list() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    let _servers = serve_backends(&topo, |_| VIP.into(), &[(ServerKind::Http, 80)]);
    let slices = TempDir::new("slices-cleanup");
    slices.write("web.yaml", &slice(&[(0, READY), (1, READY), (2, READY)]));
    let mut lbd = LbdProcess::start(&topo.lb, &config(slices.path()));
    let managed = || {
        let out = std::process::Command::new("ip")
            .args(["-n", topo.lb.name(), "neigh", "show", "dev", "eth0"])
            .output()
            .expect("ip neigh");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("managed"))
            .count()
    };
    assert_eq!(managed(), 3, "lbd keeps the three backends resolved");
    assert_eq!(lbd.stop_leaving_running(), Some(0));
    assert_eq!(managed(), 3, "a SIGTERM leaves them for the next lbd");
    let config = lbd.config_path().display().to_string();
    let (code, out) = lb_testbed::lbd::run_lbd_in(&topo.lb, &["--cleanup", "--config", &config]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(managed(), 0, "cleanup removed them: {out}");
}
