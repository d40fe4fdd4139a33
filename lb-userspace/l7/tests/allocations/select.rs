//! Endpoint selection allocates nothing: every algorithm, with fade-in off, idle and
//! running, over small and large sets, counted by a global allocator that tallies this
//! thread's allocations. A pick runs once per request on every worker; an allocation
//! there would put the allocator's lock and cache misses on the hot path.

use std::time::{Duration, SystemTime};

use super::allocations;

use lb_l7::balance::{Algorithm, Balancer, EndpointSet, EndpointSpec, Pick, Registry, rng};
use lb_model::fadein::FadeIn;

#[test]
fn picks_allocate_nothing() {
    let registry = Registry::default();
    let now = SystemTime::now();
    let fade = FadeIn {
        window: Duration::from_secs(60),
        exponent: 1.0,
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
    for n in [1usize, 3, 8, 64, 1000] {
        for (label, fade, fading) in [
            ("plain", None, false),
            ("fade idle", Some(fade), false),
            ("fading", Some(fade), true),
        ] {
            let specs: Vec<EndpointSpec> = (0..n)
                .map(|i| EndpointSpec {
                    authority: format!("198.18.{}.{}:80", i / 250, i % 250 + 1),
                    weight: 1 + (i % 3) as u32,
                    created: Some(if fading && i % 2 == 1 {
                        now - Duration::from_secs(10)
                    } else {
                        now - Duration::from_secs(600)
                    }),
                })
                .collect();
            let set = EndpointSet::build(&specs, fade, &registry, now);
            // A third of the endpoints busy, so least-loaded algorithms compare counts.
            let held: Vec<_> = set
                .endpoints()
                .iter()
                .step_by(3)
                .map(|e| e.stats.start())
                .collect();
            for algorithm in algorithms {
                let balancer = Balancer::new(algorithm);
                // The first pick may initialise this thread's generator.
                let _ = balancer.pick(&set, &Pick { now, key: 1 });
                let before = allocations();
                let mut picked = 0u32;
                for key in 0..2_000u64 {
                    let pick = Pick {
                        now,
                        key: rng::mix(key),
                    };
                    picked += u32::from(balancer.pick(&set, &pick).is_some());
                }
                let spent = allocations() - before;
                assert_eq!(
                    picked,
                    2_000,
                    "{} {label} n={n}: a pick failed",
                    algorithm.name()
                );
                assert_eq!(
                    spent,
                    0,
                    "{} {label} n={n}: {spent} allocations in 2000 picks",
                    algorithm.name()
                );
            }
            drop(held);
        }
    }
}
