//! Fade-in on the real data plane: a backend added to three settled ones ramps up over
//! a 20 s window; new connections sampled along the way follow the formula, and
//! connections established before and during the ramp never move.

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use lb_testbed::{
    LbdProcess, Topology, TopologyOptions,
    topology::{CLIENT_ADDR, VIP, backend_addr},
    traffic::{Held, ServerKind, http_requests_from, serve_backends},
};

const WINDOW: Duration = Duration::from_secs(20);
const MIN_WEIGHT: f64 = 0.05;
const PER_SAMPLE: u16 = 1000;
/// Table rebuilds happen on a 1 s tick; allow that much lag plus scheduling slack.
const LAG: Duration = Duration::from_millis(1300);

fn config(backends: usize) -> String {
    let list: Vec<String> = (0..backends)
        .map(|i| format!("{{ address = \"{}\" }}", backend_addr(i)))
        .collect();
    format!(
        "[node]\ninterface = \"eth0\"\nxdp_mode = \"generic\"\n\n[[service]]\nname = \"web\"\nvip = \"{VIP}\"\nport = 80\nfade_in = {{ window = \"20s\", min_weight = {MIN_WEIGHT} }}\nbackends = [{}]\n\n[[service]]\nname = \"echo\"\nvip = \"{VIP}\"\nport = 7000\nfade_in = {{ window = \"20s\", min_weight = {MIN_WEIGHT} }}\nbackends = [{}]\n",
        list.join(", "),
        list.join(", ")
    )
}

/// The new backend's expected share of new flows `age` into its ramp.
fn expected_share(age: Duration) -> f64 {
    let f = (age.as_secs_f64() / WINDOW.as_secs_f64())
        .clamp(0.0, 1.0)
        .max(MIN_WEIGHT);
    f / (3.0 + f)
}

#[test]
fn a_new_backend_fades_in_along_the_formula() {
    lb_testbed::needs_root!();
    let topo = Topology::build(&TopologyOptions {
        backends: 4,
        native_xdp: false,
    });
    let _servers = serve_backends(
        &topo,
        |_| VIP.into(),
        &[(ServerKind::Http, 80), (ServerKind::Echo, 7000)],
    );
    // Backends 1-3 have been running for an hour: their ramps are long over.
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let ms = hour_ago
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let state: Vec<String> = ["web", "echo"]
        .iter()
        .flat_map(|svc| (0..3).map(move |i| format!("\"{svc}/{}\": {ms}", backend_addr(i))))
        .collect();
    let state = format!("{{{}}}", state.join(", "));
    let mut lbd = LbdProcess::start_with_state(&topo.lb, &config(3), &[("fade-in.json", &state)]);

    let echo = SocketAddr::new(VIP.into(), 7000);
    let mut before = Held::open(&topo.client, echo, 20);
    let before_on: Vec<String> = before
        .iter_mut()
        .map(|c| c.ask("before").expect("echo"))
        .collect();

    let added = Instant::now();
    let outcome = lbd.reload(&config(4));
    assert!(outcome.applied(), "{outcome}");
    let mut during = Vec::new();
    // Fixed source ports stay below the ephemeral range (32768+), which the held
    // connections use.
    let mut port = 10000u16;
    let mut samples = Vec::new();
    while added.elapsed() < WINDOW + Duration::from_secs(2) {
        let start = added.elapsed();
        let results = http_requests_from(
            &topo.client,
            CLIENT_ADDR.into(),
            IpAddr::from(VIP),
            80,
            port..port + PER_SAMPLE,
        );
        let end = added.elapsed();
        port += PER_SAMPLE;
        let fresh = results
            .iter()
            .map(|(_, r)| {
                r.as_deref()
                    .unwrap_or_else(|e| panic!("{e}\n{}", lbd.log()))
            })
            .filter(|b| *b == "backend-4")
            .count();
        let share = fresh as f64 / f64::from(PER_SAMPLE);
        // The table in force during the sample was built from weights between
        // `start - LAG` and `end`.
        let lo = expected_share(start.saturating_sub(LAG)) - 0.05;
        let hi = expected_share(end) + 0.05;
        samples.push((start.as_secs_f64(), share, lo, hi));
        // Hold some connections opened during the ramp as well.
        let mut opened = Held::open(&topo.client, echo, 3);
        let on: Vec<String> = opened
            .iter_mut()
            .map(|c| c.ask("during").expect("echo"))
            .collect();
        during.extend(opened.into_iter().zip(on));
    }
    eprintln!("backend-4 share of new flows (t s, share, allowed range): {samples:.3?}");
    for (t, share, lo, hi) in &samples {
        assert!(
            (lo..=hi).contains(&share),
            "at {t:.1}s backend-4 got {share:.3}, outside [{lo:.3}, {hi:.3}]; all samples: {samples:.3?}"
        );
    }
    assert!(
        samples.len() >= 8,
        "sampled along the whole window: {samples:?}"
    );
    let last = samples.last().expect("samples").1;
    assert!((last - 0.25).abs() < 0.05, "full weight at the end: {last}");

    for (i, (c, was)) in before.iter_mut().zip(&before_on).enumerate() {
        assert_eq!(
            &c.ask("after")
                .unwrap_or_else(|e| panic!("held {i} broke: {e}")),
            was,
            "held {i} moved"
        );
    }
    for (i, (mut c, was)) in during.into_iter().enumerate() {
        assert_eq!(
            c.ask("after")
                .unwrap_or_else(|e| panic!("ramp-time {i} broke: {e}")),
            was,
            "ramp-time {i} moved"
        );
    }
    // The ramp is over: every backend of both services takes its full weight (the
    // admin API calls a backend past 99.5 % of it `active`).
    for service in ["web", "echo"] {
        lbd.wait_admin(
            "the fade-in complete",
            &format!("/v1/backends/{service}"),
            Duration::from_secs(5),
            |all| {
                all.as_array()
                    .is_some_and(|b| b.len() == 4 && b.iter().all(|b| b["state"] == "active"))
            },
        );
    }
    let rebuilds = lbd.status()["fade_in_rebuilds"]
        .as_u64()
        .expect("fade_in_rebuilds");
    assert!(
        (10..=25).contains(&rebuilds),
        "about one rebuild a second during the window: {rebuilds}\n{}",
        lbd.log()
    );
    let (code, log) = lbd.stop();
    assert_eq!(code, Some(0), "{log}");
}
