use std::net::IpAddr;

use super::*;

/// A stand-in for the l7 crate's route compiler (which this crate cannot use): refuses
/// a text that says `REFUSE`, so the tests see where a route error lands. The real
/// compiler's errors are tested with the l7 crate.
fn routes(text: &str) -> Result<(), String> {
    match text.find("REFUSE") {
        Some(at) => Err(format!("refused at byte {at}")),
        None => Ok(()),
    }
}

const GOOD: &str = r#"
[node]
interface = "eth0"
xdp_mode = "generic"

[[service]]
name = "web"
vip = "198.18.0.100"
port = 80
backends = [{ address = "198.18.0.11" }, { address = "198.18.0.12" }]

[[service]]
name = "dns"
vip = "198.18.0.100"
port = 53
protocol = "udp"
backends = [{ address = "198.18.0.11" }]
"#;

fn err(text: &str) -> String {
    parse(text, "lbd.toml", routes)
        .expect_err("config should be rejected")
        .to_string()
}

#[test]
fn parses_a_good_file() {
    let cfg = parse(GOOD, "lbd.toml", routes).expect("valid");
    assert_eq!(cfg.node.interface, "eth0");
    assert_eq!(cfg.node.xdp_mode, XdpMode::Generic);
    assert_eq!(cfg.node.hash_seed, 0x5eed);
    assert_eq!(cfg.services.len(), 2);
    assert_eq!(cfg.services[1].protocol, Protocol::Udp);
    assert_eq!(
        cfg.services[0].backends[1].address,
        IpAddr::from([198, 18, 0, 12])
    );
    assert_eq!(cfg.services[0].port, PortSpec::Port(80));
}

#[test]
fn unknown_field_names_file_line_and_field() {
    let text = GOOD.replace("port = 80", "port = 80\nweigth = 3");
    let e = err(&text);
    assert!(e.starts_with("lbd.toml:10:"), "{e}");
    assert!(e.contains("unknown field `weigth`"), "{e}");
}

#[test]
fn bad_address_names_the_line() {
    let e = err(&GOOD.replace("198.18.0.12", "198.18.0.300"));
    assert!(e.starts_with("lbd.toml:10:54:"), "{e}");
    assert!(e.contains("invalid IP address"), "{e}");
}

#[test]
fn unknown_mode_lists_the_choices() {
    let e = err(&GOOD.replace("protocol = \"udp\"", "protocol = \"sctp\""));
    assert!(e.contains("unknown variant `sctp`"), "{e}");
    assert!(e.contains("tcp"), "{e}");
}

#[test]
fn duplicate_vip_is_invalid() {
    let e = err(&GOOD.replace("port = 53\nprotocol = \"udp\"", "port = 80"));
    assert!(e.contains("service[1] (dns).vip"), "{e}");
    assert!(e.contains("198.18.0.100:80/tcp is already served"), "{e}");
    assert!(e.starts_with("lbd.toml:12:"), "{e}");
}

#[test]
fn port_zero_is_invalid() {
    let e = err(&GOOD.replace("port = 80", "port = 0"));
    assert!(e.starts_with("lbd.toml:9:"), "{e}");
    assert!(
        e.contains("port 0 is out of range: use 1-65535 or \"all\""),
        "{e}"
    );
}

#[test]
fn all_ports_and_ipv6_and_l7() {
    let text = r#"
[node]
interface = "eth0"

[[service]]
name = "any"
vip = "2001:db8::100"
port = "all"
protocol = "udp"
backends = [{ address = "2001:db8::11" }]
table_size = 1021

[[service]]
name = "web"
vip = "198.18.100.1"
port = 443
mode = "l7"
"#;
    let cfg = parse(text, "lbd.toml", routes).expect("valid");
    assert_eq!(cfg.services[0].port, PortSpec::All);
    assert_eq!(cfg.services[0].table_size, Some(1021));
    assert_eq!(cfg.services[1].mode, ForwardingModeConfig::L7);
    let e = err(&text.replace("port = \"all\"", "port = \"any\""));
    assert!(
        e.contains("port \"any\": use a number 1-65535 or \"all\""),
        "{e}"
    );
}

#[test]
fn dsr_backend_of_the_other_family_is_invalid() {
    let e = err(&GOOD.replace("198.18.0.12", "2001:db8::12"));
    assert!(
        e.contains("backends[1].address: 2001:db8::12 is not of the VIP's address family"),
        "{e}"
    );
}

#[test]
fn table_size_must_be_prime_and_large_enough() {
    let e = err(&GOOD.replace("port = 80", "port = 80\ntable_size = 1000"));
    assert!(
        e.contains("(web).table_size: 1000 must be a prime above the backend count (2)"),
        "{e}"
    );
    let e = err(&GOOD.replace("port = 80", "port = 80\ntable_size = 2"));
    assert!(e.contains("table_size: 2 must be a prime above"), "{e}");
}

#[test]
fn port_out_of_range_is_a_syntax_error() {
    let e = err(&GOOD.replace("port = 80", "port = 70000"));
    assert!(e.starts_with("lbd.toml:9:"), "{e}");
}

#[test]
fn duplicate_backend_is_invalid() {
    let e = err(&GOOD.replace("198.18.0.12", "198.18.0.11"));
    assert!(
        e.contains("backends[1].address: duplicate backend 198.18.0.11"),
        "{e}"
    );
}

#[test]
fn missing_node_section_is_reported() {
    let e = err("[[service]]\nname = \"a\"\nvip = \"198.18.0.1\"\nport = 1\n");
    assert!(e.contains("missing field `node`"), "{e}");
}

#[test]
fn unreadable_file_names_it() {
    let e = load(Path::new("/nonexistent/lbd.toml"), routes).expect_err("missing file");
    assert!(
        e.to_string()
            .starts_with("/nonexistent/lbd.toml: cannot read"),
        "{e}"
    );
}

#[test]
fn line_col_counts_from_one() {
    assert_eq!(line_col("ab\ncd", 0), (1, 1));
    assert_eq!(line_col("ab\ncd", 4), (2, 2));
}

#[test]
fn nat_needs_a_source_address_of_its_family() {
    let nat = GOOD.replace("port = 80\n", "port = 80\nmode = \"nat\"\n");
    let e = err(&nat);
    assert!(
        e.contains("(web).mode: nat needs a node.nat_addresses entry of the VIP's family (IPv4)"),
        "{e}"
    );
    let ok = nat.replace("xdp_mode = \"generic\"", "xdp_mode = \"generic\"\nnat_addresses = [\"198.18.0.3\"]\nnat_ports = { first = 30000, last = 30999 }");
    let cfg = parse(&ok, "lbd.toml", routes).expect("valid");
    assert_eq!(cfg.services[0].mode, ForwardingModeConfig::Nat);
    assert_eq!(cfg.node.nat_ports.last, 30999);
    let bad = ok.replace("first = 30000", "first = 31000");
    assert!(err(&bad).contains("node.nat_ports: 31000-30999 is not a range"));
    let two = ok.replace("[\"198.18.0.3\"]", "[\"198.18.0.3\", \"198.18.0.4\"]");
    assert!(err(&two).contains("node.nat_addresses: at most one IPv4 and one IPv6 address"));
}

#[test]
fn backend_weights() {
    let cfg = parse(
        &GOOD.replace(
            "{ address = \"198.18.0.12\" }",
            "{ address = \"198.18.0.12\", weight = 0 }",
        ),
        "lbd.toml",
        routes,
    )
    .expect("valid");
    assert_eq!(cfg.services[0].backends[0].weight, 1, "default");
    assert_eq!(cfg.services[0].backends[1].weight, 0);
    let e = err(&GOOD.replace(
        "{ address = \"198.18.0.12\" }",
        "{ address = \"198.18.0.12\", weight = 20000 }",
    ));
    assert!(
        e.contains("backends[1].weight: 20000 is above the maximum of 10000"),
        "{e}"
    );
}

#[test]
fn fade_in_settings() {
    let text = GOOD.replace(
        "port = 80\n",
        "port = 80\nfade_in = { window = \"20s\", exponent = 2.0 }\n",
    );
    let cfg = parse(&text, "lbd.toml", routes).expect("valid");
    let fade = cfg.services[0].fade_in.as_ref().expect("fade_in");
    assert_eq!(fade.window.parse(), Ok(std::time::Duration::from_secs(20)));
    assert_eq!((fade.exponent, fade.min_weight), (2.0, 0.05));
    let e = err(&text.replace("\"20s\"", "\"20 parsecs\""));
    assert!(e.contains("service[0].fade_in.window: unknown unit"), "{e}");
    let e = err(&text.replace("exponent = 2.0", "exponent = 0.0"));
    assert!(
        e.contains("fade_in.exponent: 0 must be a positive number"),
        "{e}"
    );
    let e = err(&text.replace("exponent = 2.0", "min_weight = 1.5"));
    assert!(
        e.contains("fade_in.min_weight: 1.5 must be in (0, 1]"),
        "{e}"
    );
}

#[test]
fn shipped_example_configs_are_valid() {
    for (name, text) in [
        ("example.toml", include_str!("../../../conf/example.toml")),
        ("demo.toml", include_str!("../../../conf/demo.toml")),
    ] {
        parse(text, name, routes).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn health_check_settings() {
    let text = GOOD.replace("port = 80\n", "port = 80\nhealth_check = { kind = \"http\", path = \"/healthz\", interval = \"500ms\", fall = 2 }\n");
    let cfg = parse(&text, "lbd.toml", routes).expect("valid");
    let hc = cfg.services[0].health_check.as_ref().expect("health_check");
    assert_eq!(hc.kind, HealthCheckKind::Http);
    assert_eq!((hc.rise, hc.fall, hc.port), (2, 2, None));
    assert_eq!(
        hc.interval.parse(),
        Ok(std::time::Duration::from_millis(500))
    );
    let e = err(&text.replace("fall = 2", "fall = 0"));
    assert!(
        e.contains("health_check: rise and fall must be at least 1"),
        "{e}"
    );
    let e = err(&text.replace("\"500ms\"", "\"0s\""));
    assert!(
        e.contains("health_check.interval: must be longer than 0"),
        "{e}"
    );
    let all = text.replace("port = 80\n", "port = \"all\"\n");
    assert!(err(&all).contains("health_check.port: required for an all-ports service"));
}

#[test]
fn endpoint_slices_settings() {
    let text = GOOD
        .replace(
            "xdp_mode = \"generic\"",
            "xdp_mode = \"generic\"\nendpointslice_dir = \"/etc/lbd/slices\"",
        )
        .replace(
            "backends = [{ address = \"198.18.0.11\" }, { address = \"198.18.0.12\" }]",
            "endpoint_slices = { namespace = \"shop\", service = \"web\", port = \"http\" }",
        );
    let cfg = parse(&text, "lbd.toml", routes).expect("valid");
    let es = cfg.services[0]
        .endpoint_slices
        .as_ref()
        .expect("endpoint_slices");
    assert_eq!(
        (es.namespace.as_str(), es.service.as_str(), es.port.as_str()),
        ("shop", "web", "http")
    );
    let e = err(&text.replace("endpointslice_dir = \"/etc/lbd/slices\"", ""));
    assert!(
        e.contains("(web).endpoint_slices: needs node.endpointslice_dir"),
        "{e}"
    );
    let both = text.replace(
        "port = 80\n",
        "port = 80\nbackends = [{ address = \"198.18.0.11\" }]\n",
    );
    assert!(err(&both).contains("use either backends or endpoint_slices"));
}

#[test]
fn admin_socket_and_metrics_defaults_and_errors() {
    let cfg = parse(GOOD, "lbd.toml", routes).expect("valid");
    assert_eq!(cfg.node.admin_socket, "/run/lbd/admin.sock");
    assert_eq!(cfg.node.metrics_address, "127.0.0.1:9470");
    let off = GOOD.replace(
        "xdp_mode = \"generic\"",
        "xdp_mode = \"generic\"\nadmin_socket = \"\"\nmetrics_address = \"\"",
    );
    let cfg = parse(&off, "lbd.toml", routes).expect("valid");
    assert!(cfg.node.admin_socket.is_empty() && cfg.node.metrics_address.is_empty());
    let bad = GOOD.replace(
        "xdp_mode = \"generic\"",
        "xdp_mode = \"generic\"\nmetrics_address = \"localhost\"",
    );
    assert!(
        err(&bad).contains("node.metrics_address: \"localhost\" is not an address:port"),
        "{}",
        err(&bad)
    );
}

#[test]
fn etcd_settings_are_checked() {
    let with = |etcd: &str| {
        GOOD.replace(
            "xdp_mode = \"generic\"\n",
            &format!("xdp_mode = \"generic\"\n{etcd}\n"),
        )
    };
    let ok = with("etcd = { endpoints = [\"http://198.18.0.5:2379\"] }");
    let cfg = parse(&ok, "lbd.toml", routes).expect("valid");
    let etcd = cfg.node.etcd.expect("etcd");
    assert_eq!((etcd.prefix.as_str(), etcd.username.as_str()), ("/lb", ""));
    for (bad, why) in [
        ("etcd = { endpoints = [] }", "at least one etcd client URL"),
        (
            "etcd = { endpoints = [\"198.18.0.5:2379\"] }",
            "must start with http://",
        ),
        (
            "etcd = { endpoints = [\"http://e:2379\"], prefix = \"lb/\" }",
            "must look like /name",
        ),
        (
            "etcd = { endpoints = [\"http://e:2379\"], username = \"lb\" }",
            "username and password_file go together",
        ),
        (
            "etcd = { endpoints = [\"http://e:2379\"], cert_file = \"c.pem\" }",
            "cert_file and key_file go together",
        ),
    ] {
        let e = err(&with(bad));
        assert!(e.contains("node.etcd: ") && e.contains(why), "{bad}: {e}");
    }
}

const L7: &str = r#"
[node]
interface = "eth0"

[node.l7]
retries = 1
idle_timeout = "5s"
trusted_proxies = ["198.18.0.0/24", "2001:db8::1"]

[node.access_log]
format = "json"

[[service]]
name = "site"
vip = "198.18.0.100"
port = 80
mode = "l7"
backends = [{ address = "198.18.0.11" }]
routes = '''
  hi: Path("/hi") -> inlineContent("hi") -> <shunt>;
  all: * -> <roundRobin>;
'''
"#;

#[test]
fn l7_services_routes_and_proxy_settings() {
    let cfg = parse(L7, "lbd.toml", routes).expect("valid");
    assert_eq!(cfg.node.l7.retries, 1);
    assert_eq!(
        cfg.node.access_log.format,
        crate::config::AccessLogFormat::Json
    );
    assert!(
        cfg.services[0]
            .routes
            .as_deref()
            .is_some_and(|r| r.contains("hi:"))
    );
    let e = err(&L7.replace("inlineContent(\"hi\")", "inlineContent(\"REFUSE\")"));
    assert!(
        e.contains("service[0] (site).routes: refused at byte 36"),
        "the route check's error, named by service and field: {e}"
    );
    let e = err(&L7.replace("mode = \"l7\"", "mode = \"nat\""));
    assert!(e.contains("only l7 services have routes"), "{e}");
    let e = err(&L7.replace("port = 80", "port = \"all\""));
    assert!(e.contains("an l7 service listens on one TCP port"), "{e}");
    let e = err(&L7.replace("idle_timeout = \"5s\"", "idle_timeout = \"soon\""));
    assert!(e.contains("node.l7.idle_timeout"), "{e}");
    let e = err(&L7.replace("routes = '''", "routes_file = \"x.eskip\"\nroutes = '''"));
    assert!(e.contains("use either routes or routes_file"), "{e}");
    let limits = cfg.node.l7.limits().expect("valid");
    assert!(
        limits
            .trusted_proxies
            .trusts("198.18.0.7".parse().expect("ip"))
    );
    assert!(
        !limits
            .trusted_proxies
            .trusts("198.18.1.7".parse().expect("ip"))
    );
    let e = err(&L7.replace("\"198.18.0.0/24\"", "\"198.18.0.0/40\""));
    assert!(
        e.contains("node.l7.trusted_proxies") && e.contains("\"198.18.0.0/40\" is not an address"),
        "{e}"
    );
}

#[test]
fn route_files_resolve_next_to_the_config_and_are_checked() {
    let dir = std::env::temp_dir().join(format!("lbd-routes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let text = L7.replace(
        &L7[L7.find("routes = '''").expect("routes")..],
        "routes_file = \"site.eskip\"\n",
    );
    std::fs::write(dir.join("lbd.toml"), &text).expect("config");
    std::fs::write(dir.join("site.eskip"), "all: * -> <roundRobin>;\n").expect("routes");
    let cfg = load(&dir.join("lbd.toml"), routes).expect("valid");
    let resolved = dir.join("site.eskip").display().to_string();
    assert_eq!(
        cfg.services[0].routes_file.as_deref(),
        Some(resolved.as_str())
    );
    std::fs::write(dir.join("site.eskip"), "all: REFUSE\n").expect("routes");
    let e = load(&dir.join("lbd.toml"), routes)
        .expect_err("broken routes")
        .to_string();
    assert!(
        e.contains("routes_file") && e.contains("site.eskip: refused at byte 5"),
        "{e}"
    );
    std::fs::remove_file(dir.join("site.eskip")).expect("remove");
    let e = load(&dir.join("lbd.toml"), routes)
        .expect_err("missing routes")
        .to_string();
    assert!(e.contains("site.eskip: No such file"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 14's durations: too long for any duration type. Each is an error naming the
/// file, the line and the field — in services and in `[node.l7]` alike — instead of a
/// panic in `--check-config` or in a running lbd's SIGHUP.
#[test]
fn durations_out_of_range_name_file_line_and_field() {
    const HUGE: &str = "\"99999999999999999999999s\"";
    let fade = GOOD.replace(
        "port = 80\n",
        &format!("port = 80\nfade_in = {{ window = {HUGE} }}\n"),
    );
    let health = GOOD.replace(
        "port = 80\n",
        &format!("port = 80\nhealth_check = {{ interval = {HUGE} }}\n"),
    );
    let header = L7.replace("idle_timeout = \"5s\"", &format!("header_timeout = {HUGE}"));
    let shutdown = L7.replace(
        "idle_timeout = \"5s\"",
        &format!("shutdown_timeout = {HUGE}"),
    );
    for (text, at, field) in [
        (&fade, "lbd.toml:10:", "service[0].fade_in.window"),
        (&health, "lbd.toml:10:", "service[0].health_check.interval"),
        (&header, "lbd.toml:7:", "node.l7.header_timeout"),
        (&shutdown, "lbd.toml:7:", "node.l7.shutdown_timeout"),
    ] {
        let e = err(text);
        assert!(e.starts_with(at), "{e}");
        assert!(e.contains(field), "{e}");
        assert!(
            e.contains("\"99999999999999999999999s\" is out of range"),
            "{e}"
        );
    }
}

/// A bare number used to mean milliseconds in the config; it is now refused with a
/// hint, since `interval = 2` reads as two seconds to most people.
#[test]
fn a_bare_number_in_a_duration_field_asks_for_a_unit() {
    let text = GOOD.replace("port = 80\n", "port = 80\nfade_in = { window = 3000 }\n");
    let e = err(&text);
    assert!(e.starts_with("lbd.toml:10:22:"), "{e}");
    assert!(e.contains("service[0].fade_in.window"), "{e}");
    assert!(e.contains("has no unit") && e.contains("\"3000ms\""), "{e}");
    let e = err(&L7.replace("idle_timeout = \"5s\"", "idle_timeout = 5.5"));
    assert!(
        e.contains("node.l7.idle_timeout") && e.contains("has no unit"),
        "{e}"
    );
}

/// Go's duration syntax, as in route files.
#[test]
fn config_durations_take_go_syntax() {
    let text = GOOD.replace(
        "port = 80\n",
        "port = 80\nfade_in = { window = \"1m30s\" }\nhealth_check = { interval = \"1.5s\", timeout = \"300ms\" }\n",
    );
    let cfg = parse(&text, "lbd.toml", routes).expect("valid");
    let secs = |d: &DurationText| d.parse().map(|d| d.as_secs_f64());
    let svc = &cfg.services[0];
    assert_eq!(
        svc.fade_in.as_ref().map(|f| secs(&f.window)),
        Some(Ok(90.0))
    );
    let hc = svc.health_check.as_ref().expect("health_check");
    assert_eq!((secs(&hc.interval), secs(&hc.timeout)), (Ok(1.5), Ok(0.3)));
    let l7 = parse(&L7.replace("\"5s\"", "\"2h45m\""), "lbd.toml", routes).expect("valid");
    assert_eq!(secs(&l7.node.l7.idle_timeout), Ok(9900.0));
    let e = err(&text.replace("\"1.5s\"", "\"-1s\""));
    assert!(
        e.contains("service[0].health_check.interval") && e.contains("negative"),
        "{e}"
    );
}

#[test]
fn tunnel_modes_may_cross_families_and_take_node_tunnel() {
    let mixed = GOOD.replace(
        "backends = [{ address = \"198.18.0.11\" }, { address = \"198.18.0.12\" }]",
        "backends = [{ address = \"198.19.0.11\" }, { address = \"2001:db8:1::11\" }]",
    );
    let e = err(&mixed);
    assert!(
        e.contains("is not of the VIP's address family"),
        "dsr keeps it: {e}"
    );
    for mode in ["ipip", "gue"] {
        let text = mixed.replace("port = 80\n", &format!("port = 80\nmode = \"{mode}\"\n"));
        let cfg = parse(&text, "lbd.toml", routes).expect("a tunnel crosses families");
        assert_eq!(cfg.tunnel.gue_port, 6080, "default GUE port");
        assert_eq!(cfg.tunnel.source_v4, None, "the route's source by default");
    }
    let ipip = mixed.replace("port = 80\n", "port = 80\nmode = \"ipip\"\n");
    let with = ipip.replace(
        "xdp_mode = \"generic\"",
        "xdp_mode = \"generic\"\n[node.tunnel]\nsource_v4 = \"198.18.200.0/24\"\ngue_port = 7000",
    );
    let cfg = parse(&with, "lbd.toml", routes).expect("valid");
    assert_eq!(
        cfg.tunnel.source_v4,
        Some(("198.18.200.0".parse().expect("ip"), 24))
    );
    assert_eq!(cfg.tunnel.gue_port, 7000);
    let bad = with.replace("198.18.200.0/24", "2001:db8::/64");
    assert!(err(&bad).contains("node.tunnel.source_v4"), "{}", err(&bad));
}
