//! Agent tests: fade-in and health as they shape the specs, EndpointSlice backends, and reconciles over a data plane that fails.

/// What the test modules share from the agent's neighbourhood.
mod common {
    pub use crate::sources::slicedir::Discovered;
    pub use std::time::SystemTime;
}

mod fade {
    use std::time::Duration;

    use super::super::*;
    #[allow(unused_imports, reason = "each test module uses part of these")]
    use super::common::*;

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
    #[allow(unused_imports, reason = "each test module uses part of these")]
    use super::common::*;
    use crate::health::Health;

    /// A node whose routes lead via one router, recording the probe routes asked for.
    #[derive(Default)]
    struct Routed {
        probe_routes: Vec<(bool, Option<IpAddr>)>,
    }

    impl Host for Routed {
        fn keep_resolved(&mut self, _: &[IpAddr]) -> Result<(), AgentError> {
            Ok(())
        }
        fn enable_ipv6_forwarding(&mut self) -> Result<(), AgentError> {
            Ok(())
        }
        fn tunnel_route(&mut self, _: IpAddr) -> Option<TunnelRoute> {
            Some(TunnelRoute {
                next_hop: "198.18.0.254".parse().ok(),
                source: "198.18.0.2".parse().ok(),
            })
        }
        fn route_probes(&mut self, v6: bool, gateway: Option<IpAddr>) {
            self.probe_routes.push((v6, gateway));
        }
    }

    #[test]
    fn tunnel_backends_are_probed_at_the_vip_with_their_mark_and_a_probe_route() {
        let text = "[node]\ninterface = \"eth0\"\nstate_dir = \"\"\n\
            [[service]]\nname = \"t\"\nvip = \"198.18.100.1\"\nport = 80\nmode = \"gue\"\n\
            health_check = { kind = \"tcp\", port = 8080 }\n\
            backends = [{ address = \"198.19.0.11\" }, { address = \"198.19.0.12\" }]\n\
            [[service]]\nname = \"d\"\nvip = \"198.18.100.2\"\nport = 80\n\
            health_check = { kind = \"tcp\" }\nbackends = [{ address = \"198.18.0.11\" }]\n";
        let cfg = lb_model::config::parse(text, "t", lb_l7::check_routes).expect("valid");
        let a = Agent::assemble(
            cfg,
            lb_model::dataplane::memory::MemoryDataplane::default(),
            Routed::default(),
            Programmer::default(),
        );
        let vip: IpAddr = "198.18.100.1".parse().expect("vip");
        let key = lb_model::dataplane::vip_key(vip, 80, 6);
        let p = a.programmer().service(&key).expect("programmed");
        let targets = a.probe_targets();
        assert_eq!(targets.len(), 3);
        for t in targets.iter().filter(|t| t.service == "t") {
            let i = p
                .backends
                .iter()
                .position(|&b| b == t.backend)
                .expect("listed");
            assert_eq!(t.target, std::net::SocketAddr::new(vip, 8080), "at the VIP");
            assert_eq!(
                t.mark,
                Some(lb_common::probe::probe_mark(p.backend_ids[i], true))
            );
        }
        let d = targets
            .iter()
            .find(|t| t.service == "d")
            .expect("dsr probe");
        assert_eq!((d.target.ip(), d.mark), (d.backend, None), "dsr: direct");
        let parts = a.into_parts();
        assert_eq!(
            parts.host.probe_routes,
            [(false, "198.18.0.254".parse().ok())],
            "one IPv4 probe route via the tunnel next hop"
        );
    }

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
    #[allow(unused_imports, reason = "each test module uses part of these")]
    use super::common::*;
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
    #[allow(unused_imports, reason = "each test module uses part of these")]
    use super::common::*;
    use lb_model::{dataplane::MapRead as _, dataplane::memory::MemoryDataplane};

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

    fn slice_source(a: &mut TestAgent) -> String {
        a.snapshot()
            .sources("lbd.toml", None)
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
        // Each tick runs as if the files just written had been left alone since
        // (a slice file is read once it was last modified SETTLE ago).
        let settled = || SystemTime::now() + lb_model::filestamp::SETTLE;
        assert!(a.last_reconcile().is_some_and(|r| r.error.is_none()));
        let usage = a.programmer().pool_usage();

        // The data plane starts failing every write; an edit cannot be programmed.
        a.dataplane.fail_writes = a.dataplane.writes..usize::MAX;
        std::fs::write(dir.join("web.json"), slice(&["198.18.0.11", "198.18.0.12"]))
            .expect("write");
        assert!(a.tick(settled()).is_err());
        // While it fails, the directory is still read: a bad file is reported...
        std::fs::write(
            dir.join("bad.yaml"),
            slice(&["198.18.0.13"]).replace(
                "\"name\":\"web-1\"",
                "\"name\":\"web-2\",\"creationTimestamp\":\"2024-01-01T00:00:00+0\u{e9}00\"",
            ),
        )
        .expect("write");
        assert!(a.tick(settled()).is_err());
        let state = slice_source(&mut a);
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
        assert!(a.tick(settled()).is_err());
        assert_eq!(
            a.programmer().pool_usage(),
            usage,
            "failed attempts hold nothing"
        );

        // The data plane heals: the next tick programs what the directory says now,
        // exactly what a fresh agent on the same directory serves.
        a.dataplane.fail_writes = 0..0;
        assert!(a.tick(settled()).is_ok());
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

    /// Services with fixed backends: `(name, vip last octet, backend last octets)`,
    /// each with an optional TCP health check.
    fn fixed(services: &[(&str, u8, &[u8])], checked: bool) -> lb_model::config::ValidConfig {
        let mut text = "[node]\ninterface = \"eth0\"\nstate_dir = \"\"\n".to_owned();
        for (name, vip, backends) in services {
            let list: Vec<String> = backends
                .iter()
                .map(|b| format!("{{ address = \"198.18.0.{b}\" }}"))
                .collect();
            text.push_str(&format!(
                "[[service]]\nname = \"{name}\"\nvip = \"198.18.100.{vip}\"\nport = 80\nbackends = [{}]\n",
                list.join(", ")
            ));
            if checked {
                text.push_str("health_check = { kind = \"tcp\", rise = 1, fall = 1 }\n");
            }
        }
        lb_model::config::parse(&text, "test", lb_l7::check_routes).expect("valid")
    }

    fn over(config: lb_model::config::ValidConfig) -> TestAgent {
        Agent::assemble(
            config,
            MemoryDataplane::default(),
            NoHost,
            Programmer::default(),
        )
    }

    #[test]
    fn a_reload_failing_at_any_write_is_retried_toward_the_new_config_and_leaks_nothing() {
        let before = fixed(
            &[("a", 1, &[11, 12]), ("b", 2, &[13]), ("c", 3, &[14])],
            false,
        );
        let after = fixed(
            &[("a", 1, &[11, 15]), ("c", 3, &[14, 16]), ("d", 4, &[17])],
            false,
        );
        let fresh = over(after.clone());
        // How many writes the reload makes when nothing fails.
        let mut probe = over(before.clone());
        let start = probe.dataplane.writes;
        probe.reload(after.clone()).expect("clean reload");
        let writes = probe.dataplane.writes - start;
        assert!(writes > 5, "a reload worth failing: {writes} writes");
        for fail in 0..writes {
            let mut a = over(before.clone());
            let n = a.dataplane.writes;
            a.dataplane.fail_writes = n + fail..n + fail + 1;
            let err = a.reload(after.clone()).expect_err("the write fails");
            assert!(err.to_string().contains("memory"), "{err}");
            assert!(a.last_reconcile().is_some_and(|r| r.error.is_some()));
            // The new config is what the agent works toward from now on ...
            assert_eq!(a.config().services.len(), 3);
            assert!(a.config().services.iter().any(|s| s.name == "d"));
            // ... and the next tick gets there: what a fresh agent on it serves.
            assert!(
                a.tick(SystemTime::now()).expect("retry"),
                "failing write {fail}"
            );
            assert!(a.last_reconcile().is_some_and(|r| r.error.is_none()));
            assert_eq!(served(&a), served(&fresh), "failing write {fail}");
            let (services, backends, lists, tables) = a.programmer().pool_usage();
            let (fs, fb, _, _) = fresh.programmer().pool_usage();
            assert_eq!((services, backends), (fs, fb), "ids leaked at write {fail}");
            // Regions replaced by the retry sit in quarantine; nothing beyond them.
            assert!(lists >= fresh.programmer().pool_usage().2);
            assert!(tables >= fresh.programmer().pool_usage().3);
        }
    }

    #[test]
    fn a_health_change_whose_reconcile_fails_is_kept_and_retried() {
        let mut a = over(fixed(&[("a", 1, &[11, 12])], true));
        let down = crate::health::Outcome::Down("connect: refused".into());
        let b = "198.18.0.12".parse().expect("addr");
        let n = a.dataplane.writes;
        a.dataplane.fail_writes = n..n + 1;
        assert!(a.observe("a", b, &down, SystemTime::now()).is_err());
        assert!(
            !a.health()["a"][&b].health.healthy,
            "the transition is kept though the data plane failed"
        );
        a.dataplane.fail_writes = 0..0;
        assert!(a.tick(SystemTime::now()).expect("retry"));
        let spec = &a.applied()[0];
        let i = spec.backends.iter().position(|&x| x == b).expect("listed");
        assert_eq!(
            spec.weights[i], 0,
            "the unhealthy backend takes no new flows"
        );
        // A result for a backend that is not listed changes nothing.
        let stray = "198.18.0.99".parse().expect("addr");
        assert!(
            !a.observe("a", stray, &down, SystemTime::now())
                .expect("ignored")
        );
        assert!(!a.health()["a"].contains_key(&stray));
    }

    #[test]
    fn fifty_health_changes_cost_one_reconcile_and_vanished_backends_are_forgotten() {
        let backends: Vec<u8> = (11..=60).collect();
        let mut a = over(fixed(&[("a", 1, &backends)], true));
        let down = crate::health::Outcome::Down("timeout".into());
        let reports: Vec<crate::health::Report> = backends
            .iter()
            .map(|b| {
                (
                    "a".to_owned(),
                    format!("198.18.0.{b}").parse().expect("addr"),
                    down.clone(),
                )
            })
            .collect();
        let before = a.reconciles().count;
        assert_eq!(
            a.observe_all(&reports, SystemTime::now()).expect("applied"),
            50
        );
        assert_eq!(
            a.reconciles().count,
            before + 1,
            "one reconcile for all of them"
        );
        assert_eq!(a.health()["a"].len(), 50);
        // The service loses most of its backends: their health goes with them.
        a.reload(fixed(&[("a", 1, &[11, 12])], true))
            .expect("reload");
        assert_eq!(
            a.health()["a"].len(),
            2,
            "only listed backends keep a state"
        );
        a.reload(fixed(&[("z", 9, &[11])], true)).expect("reload");
        assert!(
            !a.health().contains_key("a"),
            "a service gone takes its health along"
        );
    }

    #[test]
    fn a_refused_service_holds_back_no_other_and_is_reported_not_retried() {
        let mut a = over(fixed(&[("a", 1, &[11])], false));
        let mut config = fixed(&[("a", 1, &[11, 12]), ("b", 2, &[13])], false);
        // A table size that is not a prime: the config check lets etcd-fed or
        // computed specs through only as the programmer sees them, so force it here.
        config.services[0].table_size = Some(1000);
        let report = a.reload(config).expect("the rest applies");
        assert_eq!(report.refused.len(), 1, "{report:?}");
        let error = a
            .last_reconcile()
            .and_then(|r| r.error.clone())
            .expect("reported");
        assert!(
            error.contains("service a") && error.contains("prime"),
            "{error}"
        );
        assert!(
            served(&a)
                .iter()
                .any(|(vip, _)| vip.starts_with("198.18.100.2"))
        );
        let a_backends = served(&a)
            .into_iter()
            .find(|(vip, _)| vip.starts_with("198.18.100.1"))
            .map(|(_, b)| b.len());
        assert_eq!(a_backends, Some(1), "a keeps what it had");
        let reconciles = a.reconciles().count;
        assert!(
            !a.tick(SystemTime::now()).expect("tick"),
            "nothing to retry"
        );
        assert_eq!(a.reconciles().count, reconciles);
    }
}
