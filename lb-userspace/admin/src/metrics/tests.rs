use std::{
    collections::{BTreeMap, HashSet},
    time::{Duration, UNIX_EPOCH},
};

use lb_common::{Counter, CounterKind, XdpAction};

use super::*;
use crate::{BackendView, ReconcileRecord, ServiceView, SourceStatus, Status};

fn status() -> Status {
    Status {
        version: "0.1.0".into(),
        api_version: 1,
        kernel: "6.18.0".into(),
        pid: 1,
        uptime_seconds: 5.0,
        config_path: "/etc/lbd/lbd.toml".into(),
        config_generation: 2,
        interface: "eth0".into(),
        hook: lb_model::config::Hook::Xdp,
        xdp_mode: "native".into(),
        pin_path: "/sys/fs/bpf/lb".into(),
        services: 1,
        sources: vec![SourceStatus {
            kind: "etcd".into(),
            location: "/var/run/\"slices\"".into(),
            state: "rejected a.yaml: bad".into(),
            revision: Some(42),
            rejected: vec!["k: bad".into()],
        }],
        reconciles: 3,
        last_reconcile: Some(ReconcileRecord {
            trigger: "reload".into(),
            finished_unix: 0.0,
            duration_seconds: 0.002,
            error: Some("map full".into()),
        }),
        fade_in_rebuilds: 4,
        conntrack_entries: 7,
        flow_tables: crate::FlowTablesStatus {
            conntrack: crate::Fill {
                entries: 5,
                capacity: 1024,
            },
            embryonic: crate::Fill {
                entries: 9,
                capacity: 2048,
            },
            nat: crate::Fill {
                entries: 2,
                capacity: 4096,
            },
            nat_released: crate::NatReleased {
                fin: 11,
                rst: 3,
                timeout: 8,
            },
            embryonic_created: 40,
            embryonic_evicted: 13,
        },
    }
}

fn service() -> ServiceView {
    ServiceView {
        name: "web".into(),
        vip: "198.18.0.100:80/tcp".into(),
        mode: "dsr".into(),
        service_id: Some(0),
        backends: 2,
        serving: 1,
        fading: 1,
        table_size: 251,
        table_digest: "00000000deadbeef".into(),
        packets: 10,
        bytes: 1000,
        new_flows: 2,
    }
}

fn backend(address: &str, health: &str) -> BackendView {
    BackendView {
        service: "web".into(),
        address: address.parse().expect("addr"),
        backend_id: Some(3),
        port: None,
        state: "fading".into(),
        weight: 2,
        effective_weight: 0.5,
        fade_in_percent: 25.0,
        health: health.into(),
        packets: 9,
        bytes: 900,
        new_flows: 1,
        flows: 1,
    }
}

fn l7() -> lb_l7::stats::L7Snapshot {
    lb_l7::stats::L7Snapshot {
        services: vec![lb_l7::stats::L7ServiceStats {
            name: "api".into(),
            listen: "198.18.0.100:80".into(),
            responses: [0, 90, 3, 5, 2],
            no_route: 5,
            retries: 1,
            upstream_errors: 2,
            tls_failures: 1,
        }],
        endpoints: vec![lb_l7::stats::L7EndpointStats {
            endpoint: "198.18.1.1:8080".into(),
            in_flight: 3,
            requests: 96,
            failures: 1,
        }],
        connections_open: 4,
        malformed_requests: 6,
        connections_evicted: 7,
        ..Default::default()
    }
}

fn reconciles() -> Histogram {
    let mut h = Histogram::default();
    h.observe(0.002);
    h.observe(0.2);
    h
}

/// A few counters: plain forwards, a drop, a dsr event, and the ICMP errors and nat
/// replies of both transmits.
const COUNTERS: [(Counter, u64); 8] = [
    (Counter::Packets, 52),
    (Counter::Tx, 10),
    (Counter::DropNoRoute, 2),
    (Counter::TxIcmpError, 3),
    (Counter::RedirectIcmpError, 5),
    (Counter::TxNatReply, 13),
    (Counter::RedirectNatReply, 19),
    (Counter::NonSynMiss, 4),
];

/// The exposition of the small node above, one second after it started 995 s past
/// the epoch.
fn small() -> String {
    let status = status();
    let services = [service()];
    let backends = [
        backend("198.18.1.1", "unhealthy"),
        backend("2001:db8::1", "unchecked"),
    ];
    let l7 = l7();
    render_at(
        &Snapshot {
            status: &status,
            services: &services,
            backends: &backends,
            counters: &COUNTERS,
            reconciles: &reconciles(),
            l7: Some(&l7),
        },
        UNIX_EPOCH + Duration::from_secs(1000),
    )
}

/// What one scrape of [`small`] must be, byte for byte.
const GOLDEN: &str = include_str!("golden.txt");

#[test]
fn golden_exposition() {
    let text = small();
    if text != GOLDEN {
        let diff: Vec<String> = text
            .lines()
            .zip(GOLDEN.lines())
            .enumerate()
            .filter(|(_, (got, want))| got != want)
            .map(|(i, (got, want))| format!("line {}:\n  got  {got}\n  want {want}", i + 1))
            .take(5)
            .collect();
        panic!(
            "exposition differs from golden.txt ({} vs {} lines):\n{}\n--- full text ---\n{text}",
            text.lines().count(),
            GOLDEN.lines().count(),
            diff.join("\n")
        );
    }
}

#[test]
fn parses_back_as_openmetrics() {
    let scrape = parse(&small()).unwrap_or_else(|e| panic!("{e}"));
    for (sample, want) in [
        ("lbd_build_info{version=\"0.1.0\"}", 1.0),
        ("lbd_start_time_seconds", 995.0),
        ("lbd_xdp_packets_total", 52.0),
        (
            "lbd_xdp_verdicts_total{reason=\"forwarded\",verdict=\"tx\"}",
            10.0,
        ),
        (
            "lbd_xdp_verdicts_total{reason=\"forwarded\",verdict=\"redirect\"}",
            0.0,
        ),
        (
            "lbd_xdp_verdicts_total{reason=\"no_route\",verdict=\"drop\"}",
            2.0,
        ),
        (
            "lbd_xdp_verdicts_total{reason=\"nat_reply\",verdict=\"tx\"}",
            13.0,
        ),
        (
            "lbd_xdp_verdicts_total{reason=\"nat_reply\",verdict=\"redirect\"}",
            19.0,
        ),
        (
            "lbd_xdp_verdicts_total{reason=\"icmp_error\",verdict=\"tx\"}",
            3.0,
        ),
        (
            "lbd_xdp_verdicts_total{reason=\"icmp_error\",verdict=\"redirect\"}",
            5.0,
        ),
        ("lbd_conntrack_entries", 7.0),
        ("lbd_flow_table_entries{table=\"embryonic\"}", 9.0),
        ("lbd_flow_table_capacity{table=\"nat\"}", 4096.0),
        ("lbd_conntrack_embryonic_created_total", 40.0),
        ("lbd_conntrack_embryonic_evicted_total", 13.0),
        ("lbd_conntrack_promoted_total", 0.0),
        ("lbd_conntrack_non_syn_miss_total", 4.0),
        ("lbd_nat_released_total{reason=\"rst\"}", 3.0),
        (
            "lbd_vip_bytes_total{service=\"web\",vip=\"198.18.0.100:80/tcp\"}",
            1000.0,
        ),
        (
            "lbd_table_size{service=\"web\",vip=\"198.18.0.100:80/tcp\"}",
            251.0,
        ),
        (
            "lbd_table_info{digest=\"00000000deadbeef\",service=\"web\",vip=\"198.18.0.100:80/tcp\"}",
            1.0,
        ),
        (
            "lbd_backend_packets_total{backend=\"2001:db8::1\",service=\"web\",vip=\"198.18.0.100:80/tcp\"}",
            9.0,
        ),
        (
            "lbd_backend_effective_weight{backend=\"198.18.1.1\",service=\"web\",vip=\"198.18.0.100:80/tcp\"}",
            0.5,
        ),
        (
            "lbd_backend_fade_in_ratio{backend=\"198.18.1.1\",service=\"web\",vip=\"198.18.0.100:80/tcp\"}",
            0.25,
        ),
        (
            "lbd_backend_healthy{backend=\"198.18.1.1\",service=\"web\",vip=\"198.18.0.100:80/tcp\"}",
            0.0,
        ),
        ("lbd_config_generation", 2.0),
        (
            "lbd_source_up{kind=\"etcd\",location=\"/var/run/\\\"slices\\\"\"}",
            0.0,
        ),
        (
            "lbd_source_revision{kind=\"etcd\",location=\"/var/run/\\\"slices\\\"\"}",
            42.0,
        ),
        (
            "lbd_source_rejected{kind=\"etcd\",location=\"/var/run/\\\"slices\\\"\"}",
            1.0,
        ),
        ("lbd_reconciles_total", 2.0),
        ("lbd_last_reconcile_success", 0.0),
        ("lbd_reconcile_duration_seconds_bucket{le=\"0.001\"}", 0.0),
        ("lbd_reconcile_duration_seconds_bucket{le=\"0.005\"}", 1.0),
        ("lbd_reconcile_duration_seconds_bucket{le=\"0.25\"}", 2.0),
        ("lbd_reconcile_duration_seconds_bucket{le=\"+Inf\"}", 2.0),
        ("lbd_reconcile_duration_seconds_count", 2.0),
        ("lbd_fade_in_rebuilds_total", 4.0),
        ("lbd_l7_responses_total{code=\"2xx\",service=\"api\"}", 90.0),
        ("lbd_l7_responses_total{code=\"5xx\",service=\"api\"}", 2.0),
        ("lbd_l7_retries_total{service=\"api\"}", 1.0),
        (
            "lbd_l7_endpoint_in_flight{endpoint=\"198.18.1.1:8080\"}",
            3.0,
        ),
        (
            "lbd_l7_endpoint_failures_total{endpoint=\"198.18.1.1:8080\"}",
            1.0,
        ),
        ("lbd_l7_connections", 4.0),
        ("lbd_l7_connections_evicted_total", 7.0),
        ("lbd_l7_malformed_requests_total", 6.0),
    ] {
        assert_eq!(
            scrape.samples.get(sample),
            Some(&want),
            "{sample} in {:#?}",
            scrape.samples.keys().collect::<Vec<_>>()
        );
    }
    assert!(
        !scrape
            .samples
            .keys()
            .any(|k| k.starts_with("lbd_backend_healthy{backend=\"2001:db8::1\"")),
        "an unchecked backend has no health sample"
    );
    for (family, kind) in [
        ("lbd_build", "info"),
        ("lbd_xdp_verdicts", "counter"),
        ("lbd_table", "info"),
        ("lbd_backend_flows", "gauge"),
        ("lbd_reconcile_duration_seconds", "histogram"),
        ("lbd_l7_responses", "counter"),
    ] {
        assert_eq!(
            scrape.types.get(family).map(String::as_str),
            Some(kind),
            "{family}"
        );
    }
}

#[test]
fn every_verdict_is_labelled_with_the_action_its_packets_left_with() {
    let counters: Vec<(Counter, u64)> = Counter::ALL
        .iter()
        .enumerate()
        .map(|(i, &c)| (c, 10 * (i as u64 + 1)))
        .collect();
    let status = status();
    let text = render(&Snapshot {
        status: &status,
        services: &[],
        backends: &[],
        counters: &counters,
        reconciles: &Histogram::default(),
        l7: None,
    });
    let scrape = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let mut label_sets = HashSet::new();
    for &(c, value) in &counters {
        let CounterKind::Verdict { action, reason } = c.kind() else {
            continue;
        };
        let sample = format!(
            "lbd_xdp_verdicts_total{{reason=\"{}\",verdict=\"{}\"}}",
            reason.as_str(),
            action.as_str()
        );
        assert_eq!(
            scrape.samples.get(&sample),
            Some(&(value as f64)),
            "{}",
            c.name()
        );
        assert!(label_sets.insert(sample), "{} shares its labels", c.name());
    }
    let verdicts = scrape
        .samples
        .keys()
        .filter(|k| k.starts_with("lbd_xdp_verdicts_total{"))
        .count();
    assert_eq!(verdicts, label_sets.len(), "one series per verdict counter");
    // The counters the issue found mislabelled: sent with XDP_REDIRECT, labelled so.
    for c in [Counter::RedirectNatReply, Counter::RedirectIcmpError] {
        assert!(
            matches!(
                c.kind(),
                CounterKind::Verdict {
                    action: XdpAction::Redirect,
                    ..
                }
            ),
            "{}",
            c.name()
        );
    }
}

#[test]
fn a_backend_of_an_unknown_service_has_an_empty_vip() {
    let status = status();
    let mut stray = backend("198.18.1.9", "unchecked");
    stray.service = "gone".into();
    let text = render(&Snapshot {
        status: &status,
        services: &[service()],
        backends: &[backend("198.18.1.1", "healthy"), stray],
        counters: &[],
        reconciles: &Histogram::default(),
        l7: None,
    });
    let scrape = parse(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        scrape
            .samples
            .get("lbd_backend_weight{backend=\"198.18.1.9\",service=\"gone\",vip=\"\"}"),
        Some(&2.0)
    );
    assert_eq!(
        scrape.samples.get(
            "lbd_backend_healthy{backend=\"198.18.1.1\",service=\"web\",vip=\"198.18.0.100:80/tcp\"}"
        ),
        Some(&1.0)
    );
}

#[test]
fn the_checker_refuses_what_openmetrics_refuses() {
    for (bad, why) in [
        (
            "# TYPE a counter\na 1\n# EOF\n",
            "counter sample without _total",
        ),
        ("# TYPE a gauge\na 1\n", "no # EOF"),
        ("# TYPE a gauge\na 1\n# EOF\nb 2\n", "a line after # EOF"),
        (
            "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n# EOF\n",
            "a label twice",
        ),
        (
            "# TYPE a gauge\na{x=\"\\t\"} 1\n# EOF\n",
            "an unknown escape",
        ),
        (
            "# TYPE a gauge\n# TYPE b gauge\na 1\n# EOF\n",
            "a sample of an earlier family",
        ),
        (
            "# TYPE h histogram\nh_bucket{le=\"1.0\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n# EOF\n",
            "buckets that shrink",
        ),
        (
            "# TYPE s_seconds gauge\n# UNIT s_seconds bytes\ns_seconds 1\n# EOF\n",
            "a unit the name does not end in",
        ),
        (
            "# TYPE a gauge\na one\n# EOF\n",
            "a value that is no number",
        ),
        (
            "# TYPE h histogram\nh_count 3\nh_bucket{le=\"+Inf\"} 2\n# EOF\n",
            "a +Inf bucket that is not the count",
        ),
    ] {
        assert!(parse(bad).is_err(), "accepted {why}:\n{bad}");
    }
    assert!(parse("# TYPE a gauge\na{x=\"q\\\"\\\\\\n\"} 1\n# EOF\n").is_ok());
}

/// A scrape read back: each sample by name and labels (sorted by key, values as
/// written), and each family's type.
#[derive(Debug, Default)]
struct Scrape {
    samples: BTreeMap<String, f64>,
    types: BTreeMap<String, String>,
}

/// Reads OpenMetrics text strictly, enough to catch what Prometheus would refuse:
/// families declared once, before their samples, which follow together; sample
/// names with the suffixes their type allows; well-formed, unique labels; numbers;
/// cumulative buckets ending in `+Inf` equal to `_count`; units ending their family's
/// name; and `# EOF` last.
fn parse(text: &str) -> Result<Scrape, String> {
    let mut scrape = Scrape::default();
    let mut family: Option<(String, String)> = None;
    let mut seen = HashSet::new();
    let mut buckets: Option<f64> = None;
    // (the family's `_count`, the `+Inf` bucket, its line)
    let mut inf = Vec::new();
    let lines = text.lines().enumerate();
    let mut ended = false;
    for (i, line) in lines {
        let at = |e: String| format!("line {}: {e}: {line:?}", i + 1);
        if ended {
            return Err(at("after # EOF".into()));
        }
        if line == "# EOF" {
            ended = true;
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (kind, name, rest) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            match kind {
                "HELP" => {}
                "TYPE" => {
                    if !seen.insert(name.to_owned()) {
                        return Err(at(format!("{name} declared again")));
                    }
                    if !["counter", "gauge", "histogram", "info", "unknown"].contains(&rest) {
                        return Err(at(format!("type {rest}")));
                    }
                    scrape.types.insert(name.to_owned(), rest.to_owned());
                    family = Some((name.to_owned(), rest.to_owned()));
                    buckets = None;
                }
                "UNIT" => {
                    if !name.ends_with(&format!("_{rest}")) {
                        return Err(at(format!("{name} does not end in its unit {rest}")));
                    }
                }
                _ => return Err(at("unknown metadata".into())),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').ok_or_else(|| at("no value".into()))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| at(format!("value {v}")))?,
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (
                name,
                rest.strip_suffix('}')
                    .ok_or_else(|| at("labels not closed".into()))?,
            ),
            None => (series, ""),
        };
        let labels = parse_labels(labels).map_err(at)?;
        let (fam, kind) = family
            .as_ref()
            .ok_or_else(|| at("sample before any # TYPE".into()))?;
        let suffix = name
            .strip_prefix(fam.as_str())
            .ok_or_else(|| at(format!("not of family {fam}")))?;
        let allowed: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            "info" => &["_info"],
            _ => &[""],
        };
        if !allowed.contains(&suffix) {
            return Err(at(format!("suffix {suffix:?} on a {kind}")));
        }
        if suffix == "_bucket" {
            let le = labels
                .get("le")
                .ok_or_else(|| at("bucket without le".into()))?;
            if buckets.is_some_and(|before| value < before) {
                return Err(at("buckets not cumulative".into()));
            }
            buckets = Some(value);
            if le == "+Inf" {
                inf.push((format!("{fam}_count"), value, i + 1));
            }
        }
        let key = if labels.is_empty() {
            name.to_owned()
        } else {
            let list: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            format!("{name}{{{}}}", list.join(","))
        };
        if scrape.samples.insert(key, value).is_some() {
            return Err(at("series twice".into()));
        }
    }
    if !ended {
        return Err("no # EOF".into());
    }
    for (count, bucket, line) in inf {
        let total = scrape.samples.get(&count);
        if total != Some(&bucket) {
            return Err(format!(
                "line {line}: +Inf bucket {bucket} but {count} {total:?}"
            ));
        }
    }
    Ok(scrape)
}

/// `k="v",…` into a map of unescaped values; a key twice, a bad key or escape is an
/// error.
fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once("=\"")
            .ok_or_else(|| format!("label without =\" in {rest:?}"))?;
        let valid = key
            .chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if key.is_empty() || !valid {
            return Err(format!("label name {key:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("escape {other:?} in {key}")),
                },
                Some((_, c)) => value.push(c),
                None => return Err(format!("value of {key} not closed")),
            }
        };
        if labels.insert(key.to_owned(), value).is_some() {
            return Err(format!("label {key} twice"));
        }
        rest = &after[end + 1..];
        rest = match rest.strip_prefix(',') {
            Some(r) if !r.is_empty() => r,
            Some(_) => return Err("trailing comma".into()),
            None if rest.is_empty() => rest,
            None => return Err(format!("after {key}: {rest:?}")),
        };
    }
    Ok(labels)
}

/// A label value as the exposition escapes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
