//! Selection allocates nothing: every algorithm, every set size, with fade-in off,
//! configured but idle, and running. A counting global allocator watches 10,000 picks
//! of each (1,000 at n = 1000), counting only the allocations of the thread that
//! picks, so the test harness's own threads cannot add to them.

use std::time::{Duration, SystemTime};

use lb_l7::{
    balance::Algorithm, balance::Balancer, balance::EndpointSet, balance::EndpointSpec,
    balance::Pick, balance::Registry, balance::rng,
};
use lb_model::fadein::FadeIn;
use lb_testbed::benchkit::{Counting, thread_allocs};

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn selection_allocates_nothing() {
    lb_testbed::needs_root!();
    let registry = Registry::default();
    let now = SystemTime::now();
    let fade = FadeIn {
        window: Duration::from_secs(60),
        exponent: 2.0,
        min_weight: 0.01,
    };
    let algorithms = [
        Algorithm::RoundRobin,
        Algorithm::Random,
        Algorithm::ConsistentHash {
            balance_factor: None,
        },
        Algorithm::ConsistentHash {
            balance_factor: Some(1.25),
        },
        Algorithm::PowerOfRandomNChoices { n: 2 },
        Algorithm::PowerOfRandomNChoices { n: 3 },
        Algorithm::LeastConnections,
    ];
    let mut checked = 0;
    for n in [1usize, 3, 8, 64, 1000] {
        for (label, fade, created) in [
            ("no fade-in", None, None),
            (
                "fade-in idle",
                Some(fade),
                Some(now - Duration::from_secs(600)),
            ),
            ("fading", Some(fade), Some(now)),
        ] {
            let specs: Vec<EndpointSpec> = (0..n)
                .map(|i| EndpointSpec {
                    authority: format!("198.18.{}.{}:80", i / 250, i % 250 + 1),
                    weight: 1 + (i % 3) as u32,
                    // Half the endpoints are new when fading, so a ramp runs.
                    created: if i % 2 == 0 {
                        Some(now - Duration::from_secs(600))
                    } else {
                        created
                    },
                })
                .collect();
            let set = EndpointSet::build(&specs, fade, &registry, now);
            // Some load, so the least-loaded algorithms compare real numbers.
            let _held: Vec<_> = set
                .endpoints()
                .iter()
                .step_by(3)
                .map(|e| e.stats.start())
                .collect();
            for algorithm in algorithms {
                let b = Balancer::new(algorithm);
                let pick = |key| b.pick(&set, &Pick { now, key });
                assert!(pick(1).is_some(), "warm-up");
                let before = thread_allocs();
                let mut sum = 0usize;
                let picks = if n > 64 { 1_000 } else { 10_000 };
                for k in 0..picks {
                    sum = sum.wrapping_add(pick(rng::mix(k)).unwrap_or(0));
                }
                let allocs = thread_allocs() - before;
                assert_eq!(
                    allocs,
                    0,
                    "{} n={n} {label}: {allocs} allocations (sum {sum})",
                    algorithm.name()
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 5 * 3 * 7);
}
