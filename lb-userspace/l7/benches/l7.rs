//! Criterion benchmarks of the L7 hot paths: endpoint selection per algorithm and set
//! size (with fade-in off, configured but idle, and running) and access-log line
//! rendering. Each group has a baseline measured in the same run: the cheapest possible
//! pick (`fetch_add % n`) and a copy of a pre-rendered line.

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, SystemTime},
};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use lb_l7::{
    accesslog::{Entry, Format, QueryPolicy, Renderer},
    balance::{Algorithm, Balancer, EndpointSet, EndpointSpec, Pick, Registry, rng},
};
use lb_model::fadein::FadeIn;

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::RoundRobin,
    Algorithm::Random,
    Algorithm::ConsistentHash {
        balance_factor: None,
    },
    Algorithm::PowerOfRandomNChoices { n: 2 },
    Algorithm::LeastConnections,
];

fn set(
    n: usize,
    fade: Option<FadeIn>,
    fading: bool,
    registry: &Registry,
    now: SystemTime,
) -> EndpointSet {
    let specs: Vec<EndpointSpec> = (0..n)
        .map(|i| EndpointSpec {
            authority: format!("198.18.{}.{}:80", i / 250, i % 250 + 1),
            weight: 1,
            created: Some(if fading && i % 2 == 1 {
                now - Duration::from_secs(10)
            } else {
                now - Duration::from_secs(600)
            }),
        })
        .collect();
    EndpointSet::build(&specs, fade, registry, now)
}

fn selection(c: &mut Criterion) {
    let registry = Registry::default();
    let now = SystemTime::now();
    let fade = FadeIn {
        window: Duration::from_secs(60),
        exponent: 1.0,
        min_weight: 0.01,
    };
    let mut g = c.benchmark_group("select");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30);
    for n in [3usize, 8, 64, 1000] {
        let counter = AtomicU64::new(0);
        g.bench_function(BenchmarkId::new("baseline_fetch_add_mod", n), |b| {
            b.iter(|| black_box(counter.fetch_add(1, Ordering::Relaxed) % black_box(n as u64)));
        });
        for (label, fade, fading) in [
            ("plain", None, false),
            ("fade_idle", Some(fade), false),
            ("fading", Some(fade), true),
        ] {
            let s = set(n, fade, fading, &registry, now);
            // Every endpoint busy (a third of them twice): least-loaded algorithms
            // compare real counts and leastConnections scans the whole set (an idle
            // endpoint would end its scan early).
            let _held: Vec<_> = s
                .endpoints()
                .iter()
                .chain(s.endpoints().iter().step_by(3))
                .map(|e| e.stats.start())
                .collect();
            for algorithm in ALGORITHMS {
                let b = Balancer::new(algorithm);
                let mut key = 0u64;
                g.bench_function(
                    BenchmarkId::new(format!("{}/{label}", algorithm.name()), n),
                    |bench| {
                        bench.iter(|| {
                            key = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
                            black_box(b.pick(
                                &s,
                                &Pick {
                                    now,
                                    key: rng::mix(key),
                                },
                            ))
                        });
                    },
                );
            }
        }
    }
    g.finish();
}

fn access_log(c: &mut Criterion) {
    let entry = Entry {
        peer: "198.18.0.1".parse().expect("addr"),
        forwarded_for: Some(b"198.18.5.5, 198.18.6.6"),
        user: b"",
        time: SystemTime::now(),
        method: b"GET",
        path: b"/api/v1/items",
        query: Some(b"page=2&token=abc"),
        filtered_query: b"page=2&token=abc",
        proto: b"HTTP/1.1",
        status: 200,
        size: 5123,
        referer: b"https://shop.example/",
        user_agent: b"Mozilla/5.0 (X11; Linux x86_64) \"quoted\"",
        duration: Duration::from_millis(12),
        host: b"shop.example",
        flow_id: b"abc123",
        audit: b"",
    };
    let mut g = c.benchmark_group("access_log");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30);
    let mut out = Vec::with_capacity(1024);
    let mut r = Renderer::default();
    r.render(Format::Text, &entry, QueryPolicy::default(), &mut out);
    let rendered = out.clone();
    g.bench_function("baseline_copy_line", |b| {
        b.iter(|| {
            out.clear();
            out.extend_from_slice(black_box(&rendered));
            black_box(out.len())
        });
    });
    let mask = ["token".to_owned()];
    for (name, format, mask) in [
        ("text", Format::Text, &[][..]),
        ("json", Format::Json, &[][..]),
        ("text_masked", Format::Text, &mask[..]),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                r.render(
                    format,
                    black_box(&entry),
                    QueryPolicy { strip: false, mask },
                    &mut out,
                );
                black_box(out.len())
            });
        });
    }
    g.finish();
}

criterion_group!(benches, selection, access_log);
criterion_main!(benches);
