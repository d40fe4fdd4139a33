use std::{
    collections::VecDeque,
    sync::atomic::Ordering,
    time::{Duration, SystemTime},
};

use super::*;
use lb_model::fadein::FadeIn;
use lb_test_rng::{Rng as _, StdRng};

const PICKS: usize = 100_000;

/// The randomized test `name`'s generator, from one printed seed, which also seeds this
/// thread's selection draws: the seed replays the test (`LB_TEST_SEED`).
fn seeded(name: &str) -> StdRng {
    let mut rng = lb_test_rng::seeded(name);
    rng::seed_thread(rng.next_u64());
    rng
}

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn spec(i: usize, weight: u32, created: Option<SystemTime>) -> EndpointSpec {
    EndpointSpec {
        authority: format!("198.18.0.{}:80", i + 1),
        weight,
        created,
    }
}

fn set_of(weights: &[u32]) -> EndpointSet {
    let specs: Vec<_> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| spec(i, w, None))
        .collect();
    EndpointSet::build(&specs, None, &Registry::default(), t0())
}

const FADE: FadeIn = FadeIn {
    window: Duration::from_secs(100),
    exponent: 1.0,
    min_weight: 0.01,
};

/// One settled endpoint and three fading at 20%, 50% and 80% of a 100 s window at
/// `t0 + 100 s`: shares 0.2/0.5/0.8/1.0 over 2.5.
fn fading_set() -> (EndpointSet, SystemTime, Vec<f64>) {
    let specs = vec![
        spec(0, 1, Some(t0() + Duration::from_secs(80))),
        spec(1, 1, Some(t0() + Duration::from_secs(50))),
        spec(2, 1, Some(t0() + Duration::from_secs(20))),
        spec(3, 1, Some(t0())),
    ];
    let now = t0() + Duration::from_secs(100);
    let set = EndpointSet::build(
        &specs,
        Some(FADE),
        &Registry::default(),
        t0() + Duration::from_secs(80),
    );
    (set, now, vec![0.2 / 2.5, 0.5 / 2.5, 0.8 / 2.5, 1.0 / 2.5])
}

fn expected(weights: &[u32]) -> Vec<f64> {
    let total: u32 = weights.iter().sum();
    weights
        .iter()
        .map(|&w| f64::from(w) / f64::from(total))
        .collect()
}

/// Picks `PICKS` times (keys from `rng` for consistentHash); with `hold`, each pick
/// stays in flight for `hold` further picks (least-loaded algorithms see a real load).
fn shares(
    rng: &mut StdRng,
    b: &Balancer,
    set: &EndpointSet,
    now: SystemTime,
    hold: usize,
) -> Vec<f64> {
    let mut counts = vec![0usize; set.len()];
    let mut open = VecDeque::new();
    for _ in 0..PICKS {
        let i = b
            .pick(
                set,
                &Pick {
                    now,
                    key: rng.next_u64(),
                },
            )
            .expect("non-empty");
        counts[i] += 1;
        if hold > 0 {
            open.push_back(set.endpoints()[i].stats.start());
            if open.len() > hold {
                open.pop_front();
            }
        }
    }
    counts.iter().map(|&c| c as f64 / PICKS as f64).collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() < 0.01,
            "{what}: endpoint {i} got {:.2}% want {:.2}% (all {got:?})",
            g * 100.0,
            w * 100.0
        );
    }
}

fn all_algorithms() -> Vec<(Algorithm, usize)> {
    vec![
        (Algorithm::RoundRobin, 0),
        (Algorithm::Random, 0),
        (
            Algorithm::ConsistentHash {
                balance_factor: None,
            },
            0,
        ),
        (Algorithm::PowerOfRandomNChoices { n: 2 }, 0),
        (Algorithm::PowerOfRandomNChoices { n: 3 }, 0),
        (Algorithm::LeastConnections, 400),
    ]
}

#[test]
fn realized_shares_follow_weights() {
    let mut rng = seeded("realized_shares_follow_weights");
    for weights in [
        vec![1, 1, 1],
        vec![1, 2, 3, 4],
        vec![5, 1],
        vec![10, 1, 1, 1, 1, 1, 1, 1],
    ] {
        let set = set_of(&weights);
        for (algo, hold) in all_algorithms() {
            let b = Balancer::new(algo);
            let got = shares(&mut rng, &b, &set, t0(), hold);
            assert_close(
                &format!("{} {weights:?}", algo.name()),
                &got,
                &expected(&weights),
            );
        }
    }
}

#[test]
fn realized_shares_follow_the_fade_in_formula_with_three_endpoints_fading() {
    let mut rng = seeded("realized_shares_follow_the_fade_in_formula_with_three_endpoints_fading");
    let (set, now, want) = fading_set();
    assert!(set.fading(now));
    for (algo, hold) in all_algorithms() {
        let b = Balancer::new(algo);
        let got = shares(&mut rng, &b, &set, now, hold);
        assert_close(&format!("{} fading", algo.name()), &got, &want);
    }
    // After the window nothing fades: equal shares.
    let later = now + Duration::from_secs(81);
    assert!(!set.fading(later));
    let got = shares(
        &mut rng,
        &Balancer::new(Algorithm::RoundRobin),
        &set,
        later,
        0,
    );
    assert_close("after the ramp", &got, &[0.25; 4]);
}

#[test]
fn endpoints_that_start_together_do_not_fade() {
    let specs: Vec<_> = (0..3).map(|i| spec(i, 1, Some(t0()))).collect();
    let set = EndpointSet::build(&specs, Some(FADE), &Registry::default(), t0());
    assert!(!set.fading(t0() + Duration::from_secs(1)));
}

#[test]
fn zero_weight_endpoints_are_left_out_and_one_endpoint_short_circuits() {
    let set = set_of(&[0, 3, 0]);
    assert_eq!(set.len(), 1);
    for (algo, _) in all_algorithms() {
        let b = Balancer::new(algo);
        assert_eq!(b.pick(&set, &Pick { now: t0(), key: 7 }), Some(0));
    }
    let empty = set_of(&[0]);
    assert_eq!(
        Balancer::new(Algorithm::RoundRobin).pick(&empty, &Pick { now: t0(), key: 0 }),
        None
    );
}

#[test]
fn consistent_hash_moves_a_key_to_a_fading_endpoint_at_most_once() {
    let mut rng = seeded("consistent_hash_moves_a_key_to_a_fading_endpoint_at_most_once");
    let registry = Registry::default();
    // Four settled endpoints (ramps long over) and one that starts at t0 + 50 s.
    let settled = t0() - Duration::from_secs(1000);
    let mut specs: Vec<_> = (0..4).map(|i| spec(i, 1, Some(settled))).collect();
    specs.push(spec(9, 1, Some(t0() + Duration::from_secs(50))));
    let set = EndpointSet::build(
        &specs,
        Some(FADE),
        &registry,
        t0() + Duration::from_secs(50),
    );
    let b = Balancer::new(Algorithm::ConsistentHash {
        balance_factor: None,
    });
    let keys: Vec<u64> = (0..10_000).map(|_| rng.next_u64()).collect();
    let at = |secs: u64, key: u64| {
        b.pick(
            &set,
            &Pick {
                now: t0() + Duration::from_secs(secs),
                key,
            },
        )
        .expect("picks")
    };
    let mut current: Vec<usize> = keys.iter().map(|&k| at(50, k)).collect();
    let mut moves = vec![0u32; keys.len()];
    for secs in 51..=160 {
        for (j, &k) in keys.iter().enumerate() {
            let now = at(secs, k);
            if now != current[j] {
                assert_eq!(now, 4, "key {j} moved between settled endpoints at {secs}s");
                moves[j] += 1;
                current[j] = now;
            }
        }
    }
    assert!(moves.iter().all(|&m| m <= 1), "a key moved twice");
    let on_new = current.iter().filter(|&&i| i == 4).count() as f64 / keys.len() as f64;
    assert!(
        (on_new - 0.2).abs() < 0.02,
        "fully faded in it holds {on_new}"
    );
    // The same key always maps to the same endpoint.
    assert_eq!(at(200, keys[0]), at(200, keys[0]));
}

#[test]
fn consistent_hash_balance_factor_passes_over_overloaded_endpoints() {
    let set = set_of(&[1, 1, 1]);
    let key = 42;
    let plain = Balancer::new(Algorithm::ConsistentHash {
        balance_factor: None,
    });
    let bounded = Balancer::new(Algorithm::ConsistentHash {
        balance_factor: Some(1.25),
    });
    let pick = |b: &Balancer| b.pick(&set, &Pick { now: t0(), key }).expect("picks");
    let home = pick(&plain);
    assert_eq!(pick(&bounded), home, "nothing in flight: the home endpoint");
    let _held: Vec<_> = (0..30)
        .map(|_| set.endpoints()[home].stats.start())
        .collect();
    assert_eq!(pick(&plain), home, "without a factor load does not matter");
    let other = pick(&bounded);
    assert_ne!(other, home, "30 in flight > 1.25 × average: passed over");
    // Passing over follows score order: the same key goes to the same second choice.
    assert_eq!(pick(&bounded), other);
}

#[test]
fn power_of_two_choices_with_two_endpoints_never_picks_the_busier() {
    seeded("power_of_two_choices_with_two_endpoints_never_picks_the_busier");
    let set = set_of(&[1, 1]);
    let b = Balancer::new(Algorithm::PowerOfRandomNChoices { n: 2 });
    let _busy: Vec<_> = (0..3).map(|_| set.endpoints()[1].stats.start()).collect();
    for _ in 0..10_000 {
        assert_eq!(b.pick(&set, &Pick { now: t0(), key: 0 }), Some(0));
    }
    // Draws are distinct: with n = 2 both endpoints are always compared.
    let _busier: Vec<_> = (0..5).map(|_| set.endpoints()[0].stats.start()).collect();
    for _ in 0..10_000 {
        assert_eq!(b.pick(&set, &Pick { now: t0(), key: 0 }), Some(1));
    }
}

#[test]
fn least_connections_ties_rotate_and_load_counts() {
    seeded("least_connections_ties_rotate_and_load_counts");
    let set = set_of(&[1, 1, 1, 1]);
    let b = Balancer::new(Algorithm::LeastConnections);
    let mut seen = [0usize; 4];
    for _ in 0..400 {
        seen[b.pick(&set, &Pick { now: t0(), key: 0 }).expect("picks")] += 1;
    }
    assert_eq!(seen, [100; 4], "ties rotate evenly, not always index 0");
    let _load: Vec<_> = [0, 1, 3]
        .iter()
        .map(|&i| set.endpoints()[i].stats.start())
        .collect();
    for _ in 0..100 {
        assert_eq!(b.pick(&set, &Pick { now: t0(), key: 0 }), Some(2));
    }
}

#[test]
fn in_flight_counts_survive_set_updates() {
    let registry = Registry::default();
    let a = EndpointSet::build(&[spec(0, 1, None), spec(1, 1, None)], None, &registry, t0());
    let guard = a.endpoints()[1].stats.start();
    let b = EndpointSet::build(&[spec(1, 2, None), spec(2, 1, None)], None, &registry, t0());
    assert_eq!(b.endpoints()[0].stats.inflight.load(Ordering::Relaxed), 1);
    drop(guard);
    assert_eq!(b.endpoints()[0].stats.inflight.load(Ordering::Relaxed), 0);
    drop(a);
    registry.prune(&std::collections::HashSet::new());
    let left: Vec<String> = registry.snapshot().into_iter().map(|s| s.0).collect();
    assert_eq!(
        left,
        ["198.18.0.2:80", "198.18.0.3:80"],
        "endpoint 0 left with its last set"
    );
    drop(b);
    registry.prune(&std::collections::HashSet::from(["198.18.0.3:80"]));
    let left: Vec<String> = registry.snapshot().into_iter().map(|s| s.0).collect();
    assert_eq!(
        left,
        ["198.18.0.3:80"],
        "listed but in no set (say unhealthy): kept"
    );
}

#[test]
fn algorithm_names_round_trip() {
    for (algo, _) in all_algorithms() {
        assert_eq!(
            Algorithm::from_name(algo.name()).map(|a| a.name()),
            Some(algo.name())
        );
    }
    assert_eq!(
        Algorithm::from_name("leastRequests"),
        Some(Algorithm::LeastConnections)
    );
    assert_eq!(Algorithm::from_name("fastest"), None);
}
