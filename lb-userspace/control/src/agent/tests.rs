//! Fade-in and health as they shape the specs.

mod fade {
    use std::time::Duration;

    use super::super::*;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    fn config(fade: bool, backends: &[&str]) -> ValidConfig {
        let list: Vec<String> = backends
            .iter()
            .map(|b| format!("{{ address = \"{b}\" }}"))
            .collect();
        let fade = if fade {
            "fade_in = { window = \"20s\" }\n"
        } else {
            ""
        };
        let text = format!(
            "[node]\ninterface = \"eth0\"\n[[service]]\nname = \"web\"\nvip = \"198.18.100.1\"\nport = 80\n{fade}backends = [{}]\n",
            list.join(", ")
        );
        lb_model::config::parse(&text, "test", lb_l7::check_routes).expect("valid")
    }

    /// Rebuilds a ticking agent would do over `secs` seconds, one tick a second, for a
    /// config whose backends were all first seen at `T0` except `late`, seen at `late_at`.
    fn rebuilds_over(cfg: &ValidConfig, late: Option<(&str, u64)>, secs: u64) -> u32 {
        let mut starts = FadeStarts::default();
        for b in &cfg.services[0].backends {
            starts.first_seen("web", b.address, T0);
        }
        if let Some((addr, at)) = late {
            let addr: IpAddr = addr.parse().expect("addr");
            starts.retain(&[]);
            for b in cfg.services[0]
                .backends
                .iter()
                .filter(|b| b.address != addr)
            {
                starts.first_seen("web", b.address, T0);
            }
            starts.first_seen("web", addr, T0 + Duration::from_secs(at));
        }
        let (mut applied, mut fading) = specs_at(
            cfg,
            &Discovered::default(),
            &mut starts,
            &HealthMap::new(),
            T0 + Duration::from_secs(late.map_or(0, |l| l.1)),
        );
        let mut rebuilds = 0;
        for s in 1..=secs {
            if !fading {
                continue;
            }
            let now = T0 + Duration::from_secs(late.map_or(0, |l| l.1) + s);
            let (specs, still) = specs_at(
                cfg,
                &Discovered::default(),
                &mut starts,
                &HealthMap::new(),
                now,
            );
            fading = still;
            if weights_moved(&applied, &specs, still) {
                applied = specs;
                rebuilds += 1;
            }
        }
        rebuilds
    }

    #[test]
    fn no_fade_in_means_no_rebuilds_at_all() {
        let cfg = config(false, &["198.18.0.11", "198.18.0.12"]);
        let (specs, fading) = specs_at(
            &cfg,
            &Discovered::default(),
            &mut FadeStarts::default(),
            &HealthMap::new(),
            T0,
        );
        assert!(!fading);
        assert_eq!(specs[0].weights, vec![1, 1], "raw weights");
        assert_eq!(rebuilds_over(&cfg, None, 60), 0);
    }

    #[test]
    fn a_new_backend_ramps_in_steps_then_stops() {
        let cfg = config(
            true,
            &["198.18.0.11", "198.18.0.12", "198.18.0.13", "198.18.0.14"],
        );
        // Three backends long settled, the fourth added at 100 s.
        let n = rebuilds_over(&cfg, Some(("198.18.0.14", 100)), 60);
        assert!(
            (15..=20).contains(&n),
            "one rebuild per second while the weight moves ≥ 2%: {n}"
        );
    }

    #[test]
    fn effective_weights_follow_the_ramp() {
        let cfg = config(true, &["198.18.0.11", "198.18.0.12"]);
        let mut starts = FadeStarts::default();
        starts.first_seen("web", "198.18.0.11".parse().expect("addr"), T0);
        starts.first_seen(
            "web",
            "198.18.0.12".parse().expect("addr"),
            T0 + Duration::from_secs(10),
        );
        let (specs, fading) = specs_at(
            &cfg,
            &Discovered::default(),
            &mut starts,
            &HealthMap::new(),
            T0 + Duration::from_secs(15),
        );
        assert!(fading);
        // .11 at 15/20 of the window, .12 at 5/20: relative to .11, a third.
        assert_eq!(specs[0].weights, vec![1000, 333]);
        let (specs, fading) = specs_at(
            &cfg,
            &Discovered::default(),
            &mut starts,
            &HealthMap::new(),
            T0 + Duration::from_secs(40),
        );
        assert!(!fading);
        assert_eq!(specs[0].weights, vec![1000, 1000]);
    }

    #[test]
    fn backends_that_started_together_do_not_fade() {
        // A fresh node (no saved state): every backend first seen now. Scaling all of
        // them alike would change no share, so nothing fades and nothing rebuilds.
        let cfg = config(true, &["198.18.0.11", "198.18.0.12", "198.18.0.13"]);
        let mut starts = FadeStarts::default();
        let (specs, fading) = specs_at(
            &cfg,
            &Discovered::default(),
            &mut starts,
            &HealthMap::new(),
            T0,
        );
        assert!(!fading);
        assert_eq!(specs[0].weights, vec![1000, 1000, 1000]);
        assert_eq!(rebuilds_over(&cfg, None, 30), 0);
    }

    #[test]
    fn weight_moves_below_two_percent_wait() {
        let spec = |w: u32| {
            let mut s = service_specs(&config(false, &["198.18.0.11"])).remove(0);
            s.weights = vec![w];
            vec![s]
        };
        assert!(!weights_moved(&spec(1000), &spec(1015), true), "1.5%");
        assert!(weights_moved(&spec(1000), &spec(1025), true), "2.5%");
        assert!(
            weights_moved(&spec(1000), &spec(1001), false),
            "the final step is exact"
        );
        assert!(!weights_moved(&spec(1000), &spec(1000), false));
    }
}

mod health {
    use std::time::Duration;

    use super::super::*;
    use crate::health::Health;

    #[test]
    fn unhealthy_backends_get_weight_zero_and_recovery_restarts_the_ramp() {
        let text = "[node]\ninterface = \"eth0\"\n[[service]]\nname = \"web\"\nvip = \"198.18.100.1\"\nport = 80\nfade_in = { window = \"20s\" }\nbackends = [{ address = \"198.18.0.11\" }, { address = \"198.18.0.12\" }]\n";
        let cfg = lb_model::config::parse(text, "t", lb_l7::check_routes).expect("valid");
        let t0 = SystemTime::UNIX_EPOCH;
        let mut starts = FadeStarts::default();
        let b: IpAddr = "198.18.0.12".parse().expect("addr");
        let mut health = HealthMap::new();
        health.entry("web".into()).or_default().insert(
            b,
            BackendHealth {
                health: Health::default(),
                recovered: None,
            },
        );
        fn entry(health: &mut HealthMap, b: IpAddr) -> &mut BackendHealth {
            health
                .get_mut("web")
                .and_then(|m| m.get_mut(&b))
                .expect("entry")
        }
        let h = entry(&mut health, b);
        for _ in 0..3 {
            h.health.observe(false, 2, 3);
        }
        let settled = t0 + Duration::from_secs(100);
        let (specs, fading) = specs_at(&cfg, &Discovered::default(), &mut starts, &health, settled);
        assert_eq!(specs[0].weights, vec![1000, 0], "unhealthy: no new flows");
        assert!(
            !fading,
            "the only weighted backend has nobody to fade against"
        );
        let h = entry(&mut health, b);
        h.health.observe(true, 2, 3);
        h.health.observe(true, 2, 3);
        h.recovered = Some(settled + Duration::from_secs(100));
        let (specs, fading) = specs_at(
            &cfg,
            &Discovered::default(),
            &mut starts,
            &health,
            settled + Duration::from_secs(105),
        );
        assert!(fading);
        assert_eq!(
            specs[0].weights,
            vec![1000, 250],
            "recovered 5 s ago: a quarter of the way up"
        );
    }
}

mod slices {
    use super::super::*;
    use lb_model::{endpointslice::backends, endpointslice::parse};

    const SLICES: &str = r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-a, namespace: shop, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
endpoints:
- addresses: ["198.18.0.11"]
- addresses: ["198.18.0.12"]
  conditions: { ready: false, serving: true, terminating: true }
ports: [{ name: http, port: 80 }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-b, namespace: shop, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
endpoints:
- addresses: ["198.18.0.13"]
ports: [{ name: http, port: 8080 }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: drain, namespace: shop, labels: { kubernetes.io/service-name: old } }
addressType: IPv4
endpoints:
- addresses: ["198.18.0.21"]
  conditions: { ready: false, serving: true, terminating: true }
ports: [{ name: http, port: 80 }]
"#;

    fn config(service: &str) -> ValidConfig {
        let text = format!(
            "[node]\ninterface = \"eth0\"\nendpointslice_dir = \"/x\"\n[[service]]\nname = \"web\"\nvip = \"198.18.100.1\"\nport = 80\nendpoint_slices = {{ namespace = \"shop\", service = \"{service}\", port = \"http\" }}\n"
        );
        lb_model::config::parse(&text, "t", lb_l7::check_routes).expect("valid")
    }

    fn discovered() -> Discovered {
        Discovered {
            backends: backends(&parse(SLICES).expect("slices").slices),
            ..Discovered::default()
        }
    }

    #[test]
    fn ready_take_new_flows_draining_keep_theirs_other_ports_are_left_out() {
        let specs = service_specs_with(&config("web"), &discovered());
        let web = &specs[0];
        let addrs: Vec<String> = web.backends.iter().map(ToString::to_string).collect();
        assert_eq!(
            addrs,
            ["198.18.0.11", "198.18.0.12"],
            "198.18.0.13 serves port 8080, not the VIP's 80"
        );
        assert_eq!(
            web.weights,
            vec![1, 0],
            "the draining endpoint keeps its flows, gets no new ones"
        );
    }

    #[test]
    fn nat_reaches_endpoints_on_their_target_port() {
        let text = "[node]\ninterface = \"eth0\"\nendpointslice_dir = \"/x\"\nnat_addresses = [\"198.18.0.3\"]\n[[service]]\nname = \"web\"\nvip = \"198.18.100.1\"\nport = 80\nmode = \"nat\"\nendpoint_slices = { namespace = \"shop\", service = \"web\", port = \"http\" }\n";
        let cfg = lb_model::config::parse(text, "t", lb_l7::check_routes).expect("valid");
        let specs = service_specs_with(&cfg, &discovered());
        let web = &specs[0];
        let addrs: Vec<String> = web.backends.iter().map(ToString::to_string).collect();
        assert_eq!(addrs, ["198.18.0.11", "198.18.0.12", "198.18.0.13"]);
        assert_eq!(
            web.ports,
            vec![0, 0, 8080],
            "only the one on 8080 is remapped"
        );
        assert_eq!(web.weights, vec![1, 0, 1]);
    }

    #[test]
    fn only_draining_endpoints_take_new_flows_as_a_fallback() {
        let specs = service_specs_with(&config("old"), &discovered());
        assert_eq!(specs[0].weights, vec![1]);
    }

    #[test]
    fn an_unknown_service_has_no_backends() {
        let specs = service_specs_with(&config("nope"), &discovered());
        assert!(specs[0].backends.is_empty());
    }
}

/// Reconciles through an in-memory data plane that can be told to fail: sources keep
/// being read while the data plane fails, and the first reconcile that succeeds
/// serves what the sources say then, with nothing leaked.
mod reconcile {
    use std::path::Path;

    use super::super::*;
    use lb_model::{dataplane::MapRead as _, dataplane::memory::MemoryDataplane};

    /// A node that needs nothing from the kernel.
    #[derive(Debug, Default)]
    struct NoHost;

    impl Host for NoHost {
        fn keep_resolved(&mut self, _: IpAddr) -> Result<(), AgentError> {
            Ok(())
        }
        fn enable_ipv6_forwarding(&mut self) -> Result<(), AgentError> {
            Ok(())
        }
    }

    type TestAgent = Agent<MemoryDataplane, NoHost>;

    fn slice(addrs: &[&str]) -> String {
        let eps: Vec<String> = addrs
            .iter()
            .map(|a| format!("{{\"addresses\":[\"{a}\"]}}"))
            .collect();
        format!(
            "{{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{{\"name\":\"web-1\",\"namespace\":\"shop\",\"labels\":{{\"kubernetes.io/service-name\":\"web\"}}}},\"addressType\":\"IPv4\",\"endpoints\":[{}],\"ports\":[{{\"name\":\"http\",\"port\":80}}]}}",
            eps.join(",")
        )
    }

    fn agent(dir: &Path) -> TestAgent {
        let text = format!(
            "[node]\ninterface = \"eth0\"\nstate_dir = \"\"\nendpointslice_dir = \"{}\"\n[[service]]\nname = \"web\"\nvip = \"198.18.100.1\"\nport = 80\nendpoint_slices = {{ namespace = \"shop\", service = \"web\", port = \"http\" }}\n[[service]]\nname = \"fixed\"\nvip = \"198.18.100.2\"\nport = 80\nbackends = [{{ address = \"198.18.0.21\" }}]\n",
            dir.display()
        );
        let config = lb_model::config::parse(&text, "test", lb_l7::check_routes).expect("valid");
        Agent::assemble(
            config,
            MemoryDataplane::default(),
            NoHost,
            Programmer::default(),
        )
    }

    /// Backends per VIP as the data plane's lists hold them.
    fn served(a: &TestAgent) -> Vec<(VipKeyText, Vec<IpAddr>)> {
        let dp = &a.dataplane;
        let mut out: Vec<_> = dp
            .vips()
            .expect("vips")
            .into_iter()
            .map(|(key, info)| {
                let backends = (0..info.list_len)
                    .map(|i| {
                        let id = dp.list_entry(info.list_base + i).expect("list");
                        lb_model::dataplane::from_addr16(dp.backend(id).expect("backend").addr)
                    })
                    .collect();
                (lb_model::explain::vip_text(&key), backends)
            })
            .collect();
        out.sort();
        out
    }

    type VipKeyText = String;

    fn slice_source(a: &TestAgent) -> String {
        a.sources("lbd.toml", None)
            .into_iter()
            .find(|s| s.kind == "endpointslices")
            .expect("a slice source")
            .state
    }

    #[test]
    fn a_failing_data_plane_does_not_stop_the_slice_directory_and_the_retry_converges() {
        let dir = std::env::temp_dir().join(format!("lbd-reconcile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("web.json"), slice(&["198.18.0.11"])).expect("write");
        let mut a = agent(&dir);
        assert!(a.last_reconcile().is_some_and(|r| r.error.is_none()));
        let usage = a.programmer().pool_usage();

        // The data plane starts failing every write; an edit cannot be programmed.
        a.dataplane.fail_writes = a.dataplane.writes..usize::MAX;
        std::fs::write(dir.join("web.json"), slice(&["198.18.0.11", "198.18.0.12"]))
            .expect("write");
        assert!(a.tick(SystemTime::now()).is_err());
        // While it fails, the directory is still read: a bad file is reported...
        std::fs::write(
            dir.join("bad.yaml"),
            slice(&["198.18.0.13"]).replace(
                "\"name\":\"web-1\"",
                "\"name\":\"web-2\",\"creationTimestamp\":\"2024-01-01T00:00:00+0\u{e9}00\"",
            ),
        )
        .expect("write");
        assert!(a.tick(SystemTime::now()).is_err());
        let state = slice_source(&a);
        assert!(
            state.starts_with("rejected ") && state.contains("bad.yaml"),
            "{state}"
        );
        assert!(state.contains("metadata.creationTimestamp"), "{state}");
        // ... and a later edit is taken in.
        std::fs::write(
            dir.join("web.json"),
            slice(&["198.18.0.11", "198.18.0.12", "198.18.0.14"]),
        )
        .expect("write");
        assert!(a.tick(SystemTime::now()).is_err());
        assert_eq!(
            a.programmer().pool_usage(),
            usage,
            "failed attempts hold nothing"
        );

        // The data plane heals: the next tick programs what the directory says now,
        // exactly what a fresh agent on the same directory serves.
        a.dataplane.fail_writes = 0..0;
        assert!(a.tick(SystemTime::now()).is_ok());
        assert!(a.last_reconcile().is_some_and(|r| r.error.is_none()));
        let fresh = agent(&dir);
        assert_eq!(served(&a), served(&fresh));
        assert_eq!(a.programmer().pool_usage(), fresh.programmer().pool_usage());
        assert!(
            served(&a).iter().any(|(_, b)| b.len() == 3),
            "the last edit is served: {:?}",
            served(&a)
        );
        std::fs::remove_dir_all(dir).expect("cleanup");
    }
}
