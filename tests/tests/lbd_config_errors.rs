//! `lbd` refuses bad configuration with one clear line naming the file, where, the
//! field and the problem — before it touches the data plane.

use lb_testbed::lbd::{TempDir, run_lbd};

const GOOD: &str = r#"[node]
interface = "eth0"

[[service]]
name = "web"
vip = "198.18.100.1"
port = 80
backends = [{ address = "198.18.0.11" }]
"#;

fn lbd_on(config: &str, check_only: bool) -> (Option<i32>, String, String) {
    let dir = TempDir::new("cfg");
    let path = dir.write("lbd.toml", config);
    let path = path.to_str().expect("utf-8 temp path").to_owned();
    let mut args = vec!["--config", path.as_str()];
    if check_only {
        args.push("--check-config");
    }
    let (code, out) = run_lbd(&args);
    (code, out, path)
}

#[test]
fn good_config_checks_ok() {
    let (code, out, path) = lbd_on(GOOD, true);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("{path}: ok (1 services)")), "{out}");
}

#[test]
fn unknown_field_is_named_with_file_and_line() {
    let (code, out, path) = lbd_on(&GOOD.replace("port = 80", "port = 80\nbakends = []"), false);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("{path}:8:")),
        "names file and line: {out}"
    );
    assert!(out.contains("unknown field `bakends`"), "{out}");
}

#[test]
fn invalid_value_is_named_with_field_and_problem() {
    let (code, out, path) = lbd_on(&GOOD.replace("198.18.100.1", "198.18.100.256"), false);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("{path}:6:")), "{out}");
    assert!(out.contains("invalid IP address syntax"), "{out}");

    let (code, out, _) = lbd_on(&GOOD.replace("port = 80", "port = 0"), true);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(":7:"), "{out}");
    assert!(out.contains("port 0 is out of range"), "{out}");

    let (code, out, _) = lbd_on(&GOOD.replace("198.18.0.11", "2001:db8::11"), true);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(
            "service[0] (web).backends[0].address: 2001:db8::11 is not of the VIP's address family"
        ),
        "{out}"
    );
}

#[test]
fn missing_file_is_named() {
    let (code, out) = run_lbd(&["--config", "/nonexistent/lbd.toml"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("/nonexistent/lbd.toml: cannot read"), "{out}");
}

#[test]
fn missing_interface_fails_cleanly() {
    lb_testbed::needs_root!();
    let ns = lb_testbed::Netns::new("noif");
    let dir = TempDir::new("cfg");
    let path = dir.write("lbd.toml", GOOD);
    let (code, out) =
        lb_testbed::lbd::run_lbd_in(&ns, &["--config", path.to_str().expect("utf-8")]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("interface \"eth0\" not found (node.interface)"),
        "{out}"
    );
}

/// Issue 14: durations no duration type holds made `--check-config` panic (exit 101).
/// Each is now one line naming the file, the line, the field and the problem.
#[test]
fn durations_out_of_range_are_named_with_file_line_and_field() {
    const HUGE: &str = "\"99999999999999999999999s\"";
    let in_service = |line: &str| GOOD.replace("port = 80\n", &format!("port = 80\n{line}\n"));
    let in_node = |line: &str| {
        GOOD.replace(
            "interface = \"eth0\"\n",
            &format!("interface = \"eth0\"\n[node.l7]\n{line}\n"),
        )
    };
    for (config, at, field) in [
        (
            in_service(&format!("fade_in = {{ window = {HUGE} }}")),
            ":8:",
            "service[0].fade_in.window",
        ),
        (
            in_service(&format!("health_check = {{ interval = {HUGE} }}")),
            ":8:",
            "service[0].health_check.interval",
        ),
        (
            in_node(&format!("header_timeout = {HUGE}")),
            ":4:",
            "node.l7.header_timeout",
        ),
        (
            in_node(&format!("shutdown_timeout = {HUGE}")),
            ":4:",
            "node.l7.shutdown_timeout",
        ),
    ] {
        let (code, out, path) = lbd_on(&config, true);
        assert_eq!(code, Some(1), "{out}");
        assert!(
            out.contains(&format!("{path}{at}")),
            "names file and line: {out}"
        );
        assert!(
            out.contains(&format!("{field}: {HUGE} is out of range")),
            "{out}"
        );
        assert_eq!(out.lines().count(), 1, "one line: {out}");
    }
}
