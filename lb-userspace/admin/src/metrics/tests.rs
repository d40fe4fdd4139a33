use super::*;
use crate::{ReconcileRecord, SourceStatus};

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
        xdp_mode: "native".into(),
        pin_path: "/sys/fs/bpf/lb".into(),
        services: 1,
        sources: vec![SourceStatus {
            kind: "endpointslices".into(),
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
        backends: 1,
        serving: 1,
        fading: 1,
        table_size: 251,
        table_digest: "00000000deadbeef".into(),
        packets: 10,
        bytes: 1000,
        new_flows: 2,
    }
}

fn backend() -> BackendView {
    BackendView {
        service: "web".into(),
        address: "198.18.1.1".parse().expect("addr"),
        backend_id: Some(3),
        port: None,
        state: "fading".into(),
        weight: 2,
        effective_weight: 0.5,
        fade_in_percent: 25.0,
        health: "unhealthy".into(),
        packets: 9,
        bytes: 900,
        new_flows: 1,
        flows: 1,
    }
}

#[test]
fn renders_counters_gauges_labels_and_histogram() {
    let mut h = Histogram::default();
    h.observe(0.002);
    h.observe(0.2);
    let counters = [
        (Counter::Packets, 12),
        (Counter::DropNoRoute, 2),
        (Counter::Tx, 10),
        (Counter::NonSynMiss, 4),
    ];
    let l7 = lb_l7::stats::L7Snapshot {
        services: vec![lb_l7::stats::L7ServiceStats {
            name: "api".into(),
            listen: "198.18.0.100:80".into(),
            responses: [0, 90, 3, 5, 2],
            no_route: 5,
            retries: 1,
            upstream_errors: 2,
        }],
        endpoints: vec![lb_l7::stats::L7EndpointStats {
            endpoint: "198.18.1.1:8080".into(),
            in_flight: 3,
            requests: 96,
            failures: 1,
        }],
        connections_open: 4,
        malformed_requests: 6,
        ..Default::default()
    };
    let text = render(&Snapshot {
        status: &status(),
        services: &[service()],
        backends: &[backend()],
        counters: &counters,
        reconciles: &h,
        l7: Some(&l7),
    });
    for line in [
        "# TYPE lbd_xdp_packets_total counter",
        "lbd_xdp_packets_total 12",
        "lbd_xdp_verdicts_total{verdict=\"drop\",reason=\"no_route\"} 2",
        "lbd_xdp_verdicts_total{verdict=\"tx\",reason=\"forwarded\"} 10",
        "lbd_vip_bytes_total{service=\"web\",vip=\"198.18.0.100:80/tcp\"} 1000",
        "lbd_table_info{service=\"web\",vip=\"198.18.0.100:80/tcp\",digest=\"00000000deadbeef\"} 1",
        "lbd_backend_effective_weight{service=\"web\",vip=\"198.18.0.100:80/tcp\",backend=\"198.18.1.1\"} 0.5",
        "lbd_backend_fade_in_ratio{service=\"web\",vip=\"198.18.0.100:80/tcp\",backend=\"198.18.1.1\"} 0.25",
        "lbd_backend_healthy{service=\"web\",vip=\"198.18.0.100:80/tcp\",backend=\"198.18.1.1\"} 0",
        "lbd_source_up{kind=\"endpointslices\",location=\"/var/run/\\\"slices\\\"\"} 0",
        "lbd_conntrack_entries 7",
        "lbd_flow_table_entries{table=\"embryonic\"} 9",
        "lbd_flow_table_capacity{table=\"nat\"} 4096",
        "lbd_conntrack_embryonic_evicted_total 13",
        "lbd_nat_released_total{reason=\"rst\"} 3",
        "lbd_conntrack_non_syn_miss_total 4",
        "lbd_conntrack_promoted_total 0",
        "lbd_source_revision{kind=\"endpointslices\",location=\"/var/run/\\\"slices\\\"\"} 42",
        "lbd_source_rejected{kind=\"endpointslices\",location=\"/var/run/\\\"slices\\\"\"} 1",
        "lbd_last_reconcile_success 0",
        "lbd_reconcile_duration_seconds_bucket{le=\"0.005\"} 1",
        "lbd_reconcile_duration_seconds_bucket{le=\"0.25\"} 2",
        "lbd_reconcile_duration_seconds_bucket{le=\"+Inf\"} 2",
        "lbd_reconcile_duration_seconds_count 2",
        "lbd_fade_in_rebuilds_total 4",
        "lbd_l7_responses_total{service=\"api\",code=\"2xx\"} 90",
        "lbd_l7_responses_total{service=\"api\",code=\"5xx\"} 2",
        "lbd_l7_retries_total{service=\"api\"} 1",
        "lbd_l7_endpoint_in_flight{endpoint=\"198.18.1.1:8080\"} 3",
        "lbd_l7_endpoint_failures_total{endpoint=\"198.18.1.1:8080\"} 1",
        "lbd_l7_connections 4",
        "lbd_l7_malformed_requests_total 6",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // Every sample line belongs to a family declared before it.
    let mut declared = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            declared.insert(rest.split(' ').next().expect("name").to_owned());
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().expect("name");
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| declared.contains(*f)))
                .unwrap_or(name);
            assert!(declared.contains(family), "{name} has no # TYPE before it");
        }
    }
}

#[test]
fn nat_replies_and_icmp_errors_are_labelled_with_their_action() {
    let counters = [
        (Counter::TxNatReply, 1),
        (Counter::RedirectNatReply, 2),
        (Counter::TxIcmpError, 3),
        (Counter::RedirectIcmpError, 4),
    ];
    let text = render(&Snapshot {
        status: &status(),
        services: &[],
        backends: &[],
        counters: &counters,
        reconciles: &Histogram::default(),
        l7: None,
    });
    for line in [
        "lbd_xdp_verdicts_total{verdict=\"tx\",reason=\"nat_reply\"} 1",
        "lbd_xdp_verdicts_total{verdict=\"redirect\",reason=\"nat_reply\"} 2",
        "lbd_xdp_verdicts_total{verdict=\"tx\",reason=\"icmp_error\"} 3",
        "lbd_xdp_verdicts_total{verdict=\"redirect\",reason=\"icmp_error\"} 4",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }
}
