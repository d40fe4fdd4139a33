//! lbd's log as a machine reads it: with `--log-format json` every line on stderr is
//! one JSON object (timestamp, level, target, the message and structured fields under
//! `fields`), and what lbd refuses names its input in a field (`file`, `source`,
//! `service`) rather than only in the words of the message.

use std::process::Command;

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    lbd::{TempDir, lbd_binary},
    topology::{VIP, backend_addr},
};

const SLICE: &str = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-1\n  namespace: shop\n  labels:\n    kubernetes.io/service-name: web\naddressType: IPv4\nendpoints:\n- addresses: [\"198.18.1.1\"]\nports:\n- name: http\n  port: 80\n  protocol: TCP\n";

/// Checks the shape every line must have and returns the events.
fn events_of(lines: &str) -> Vec<serde_json::Value> {
    let events: Vec<serde_json::Value> = lines
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
        .collect();
    assert!(!events.is_empty(), "no log lines");
    for e in &events {
        assert!(e.is_object(), "{e}");
        assert!(e["timestamp"].is_string(), "no timestamp: {e}");
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]
                .contains(&e["level"].as_str().unwrap_or("")),
            "no level: {e}"
        );
        assert!(e["target"].is_string(), "no target: {e}");
        assert!(e["fields"]["message"].is_string(), "no message: {e}");
    }
    events
}

/// The one event at `level` whose fields include every `(name, value)` of `fields`.
fn find<'a>(
    events: &'a [serde_json::Value],
    level: &str,
    fields: &[(&str, &str)],
) -> &'a serde_json::Value {
    let found: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["level"] == level && fields.iter().all(|(k, v)| e["fields"][*k] == *v))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {level} event with {fields:?} among:\n{}",
        events
            .iter()
            .map(serde_json::Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    found[0]
}

#[test]
fn json_log_lines_name_what_lbd_refused_in_fields() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions::default());
    topo.lb
        .ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
    let dir = TempDir::new("jsonlog");
    let slices = dir.path().join("slices");
    std::fs::create_dir_all(&slices).expect("slice dir");
    std::fs::write(slices.join("web.yaml"), SLICE).expect("slice");
    let routes = dir.write(
        "site.eskip",
        "hello: * -> inlineContent(\"hi\") -> <shunt>;\n",
    );
    let config = format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\nendpointslice_dir = \"{}\"\n\n\
         [[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\n\
         endpoint_slices = {{ namespace = \"shop\", service = \"web\", port = \"http\" }}\n\n\
         [[service]]\nname = \"site\"\nvip = \"{VIP}\"\nport = 8080\nmode = \"l7\"\n\
         routes_file = \"{}\"\nbackends = [{{ address = \"{}\" }}]\n",
        slices.display(),
        routes.display(),
        backend_addr(0)
    );
    let mut lbd = LbdProcess::start_with_args(&topo.lb, &config, &["--log-format", "json"]);
    lbd.wait_source("routes", "the routes serve", |s| s["state"] == "ok");

    // Three inputs refused: an EndpointSlice file, a route file, a SIGHUP'd config.
    let broken_slice = slices.join("broken.yaml");
    std::fs::write(&broken_slice, "kind: EndpointSlice\nendpoints: [unclosed\n").expect("write");
    lbd.wait_source("endpointslices", "the broken slice refused", |s| {
        s["state"]
            .as_str()
            .is_some_and(|s| s.starts_with("rejected "))
    });
    std::fs::write(&routes, "hello: * -> inlineContent(\"hi\" -> <shunt>;\n").expect("write");
    lbd.wait_source("routes", "the broken routes refused", |s| {
        s["state"]
            .as_str()
            .is_some_and(|s| s.starts_with("rejected"))
    });
    let config_path = lbd.config_path().display().to_string();
    let outcome = lbd.reload(&config.replace("port = 8080", "port = \"eighty\""));
    assert!(outcome.rejected().is_some(), "{outcome}");
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");

    let events = events_of(&log);
    let slice = find(
        &events,
        "ERROR",
        &[
            ("source", "endpointslices"),
            ("file", &broken_slice.display().to_string()),
        ],
    );
    assert!(
        slice["fields"]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{slice}"
    );
    let refused = find(
        &events,
        "ERROR",
        &[
            ("source", "routes"),
            ("service", "site"),
            ("file", &routes.display().to_string()),
        ],
    );
    assert!(
        refused["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("line 1, column ")),
        "{refused}"
    );
    // The reload's refusal names the config file in its own field, inside the span
    // of the reload.
    let rejected: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| {
            e["level"] == "ERROR"
                && e["fields"]["file"] == config_path.as_str()
                && e["fields"]["source"] == "config"
                && e["span"]["name"] == "reload"
        })
        .collect();
    assert_eq!(rejected.len(), 1, "the reload refusal: {events:?}");
    // Lines from the data-plane crates carry their module as target, lbd's own `lbd`.
    assert!(
        events.iter().any(|e| e["target"] == "lbd"),
        "lbd's own lines: {events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["target"] == "lb_l7::node" && e["fields"]["message"] == "routes loaded"),
        "{events:?}"
    );
}

/// Runs `lbd args` outside any namespace with `RUST_LOG=rust_log`; exit code and
/// stderr.
fn lbd(rust_log: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(lbd_binary())
        .args(args)
        .env("RUST_LOG", rust_log)
        .output()
        .expect("run lbd");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_fatal_error_and_a_bad_rust_log_are_json_lines_too() {
    let dir = TempDir::new("jsonlog-fatal");
    let missing = dir.path().join("missing.toml").display().to_string();
    let (code, err) = lbd("info", &["--log-format", "json", "--config", &missing]);
    assert_eq!(code, Some(1), "{err}");
    let events = events_of(&err);
    let last = events.last().expect("a line");
    assert_eq!(last["level"], "ERROR", "{last}");
    assert_eq!(last["fields"]["message"], "lbd stopped", "{last}");
    assert!(
        last["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains(&missing)),
        "names the file: {last}"
    );

    // A RUST_LOG that does not parse: lbd logs at info, says so, and carries on
    // (here to the same missing config).
    let (code, err) = lbd(
        "lb_l7=loud",
        &["--log-format", "json", "--config", &missing],
    );
    assert_eq!(code, Some(1), "{err}");
    let events = events_of(&err);
    let warned = find(&events, "WARN", &[("rust_log", "lb_l7=loud")]);
    assert!(warned["fields"]["error"].is_string(), "{warned}");

    // Text stays text.
    let (code, err) = lbd("info", &["--config", &missing]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.starts_with("lbd: error: "), "{err}");
    assert!(serde_json::from_str::<serde_json::Value>(&err).is_err());
}
