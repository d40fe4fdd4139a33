//! Fade-in (slow start): a new or recovered backend's weight ramps from a floor to its
//! full weight over a window,
//!
//! `w_eff = w · max(min_weight, (age / window)^exponent)`
//!
//! (`exponent` as in skipper's `fadeIn`; `1/aggression` in Envoy's terms). The start of
//! the ramp is the latest of: when the agent first saw the backend, the EndpointSlice's
//! creation time (ignored when in the future), and the backend's last
//! unhealthy→healthy transition. This module is pure: callers pass the clock.

use std::time::{Duration, SystemTime};

/// Effective weights are the configured weight times this, so a fading backend's
/// fraction survives the integer weights the table builder takes.
pub const WEIGHT_SCALE: u32 = 1000;

/// A service's fade-in settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FadeIn {
    /// How long the ramp lasts.
    pub window: Duration,
    /// Shape: 1 linear, > 1 slow then fast, < 1 fast then slow.
    pub exponent: f64,
    /// Floor of the fraction, in (0, 1]: a brand-new backend still gets a little traffic,
    /// enough to be seen working.
    pub min_weight: f64,
}

impl FadeIn {
    /// The fraction of its weight a backend gets `age` after its ramp started: in
    /// `[min_weight, 1]`, exactly 1 from the end of the window on.
    pub fn fraction(&self, age: Duration) -> f64 {
        if age >= self.window || self.window.is_zero() {
            return 1.0;
        }
        let linear = age.as_secs_f64() / self.window.as_secs_f64();
        linear.powf(self.exponent).max(self.min_weight).min(1.0)
    }

    /// Whether a ramp that started at `start` is still running at `now`.
    pub fn fading(&self, start: SystemTime, now: SystemTime) -> bool {
        age(start, now) < self.window
    }

    /// The scaled effective weight (see [`WEIGHT_SCALE`]) of a backend of `weight`
    /// whose ramp started at `start`.
    pub fn effective(&self, weight: u32, start: SystemTime, now: SystemTime) -> u32 {
        let full = f64::from(weight) * f64::from(WEIGHT_SCALE);
        // Round, but never to 0 for a backend that has a weight: it must stay in the
        // table so it gets its first flows.
        let eff = (full * self.fraction(age(start, now))).round() as u32;
        if weight > 0 { eff.max(1) } else { 0 }
    }
}

/// Time since `start`; zero if `start` is in the future (clock steps, or a creation
/// time from a skewed API server).
pub fn age(start: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(start).unwrap_or(Duration::ZERO)
}

/// The start of a backend's ramp: the latest of the given times, where a creation time
/// in the future is ignored (it would keep the backend at the floor until then).
pub fn ramp_start(
    first_seen: SystemTime,
    created: Option<SystemTime>,
    recovered: Option<SystemTime>,
    now: SystemTime,
) -> SystemTime {
    let mut start = first_seen;
    if let Some(c) = created.filter(|c| *c <= now) {
        start = start.max(c);
    }
    if let Some(r) = recovered {
        start = start.max(r);
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    fn at(secs: u64) -> SystemTime {
        T0 + Duration::from_secs(secs)
    }

    fn linear() -> FadeIn {
        FadeIn {
            window: Duration::from_secs(20),
            exponent: 1.0,
            min_weight: 0.05,
        }
    }

    #[test]
    fn linear_ramp_follows_the_formula() {
        let f = linear();
        for (secs, want) in [(1, 0.05), (5, 0.25), (10, 0.5), (15, 0.75), (19, 0.95)] {
            let got = f.fraction(Duration::from_secs(secs));
            assert!((got - want).abs() < 1e-9, "age {secs}s: {got} != {want}");
        }
    }

    #[test]
    fn floor_applies_at_the_start() {
        assert_eq!(linear().fraction(Duration::ZERO), 0.05);
        assert_eq!(
            linear().effective(2, at(100), at(100)),
            100,
            "2 × 1000 × 0.05"
        );
    }

    #[test]
    fn window_end_and_after_is_full_weight() {
        let f = linear();
        assert_eq!(f.fraction(Duration::from_secs(20)), 1.0);
        assert_eq!(f.fraction(Duration::from_secs(3600)), 1.0);
        assert!(!f.fading(at(0), at(20)));
        assert!(f.fading(at(0), at(19)));
        assert_eq!(f.effective(3, at(0), at(25)), 3000);
    }

    #[test]
    fn exponent_shapes_the_ramp() {
        let slow = FadeIn {
            exponent: 2.0,
            ..linear()
        };
        let fast = FadeIn {
            exponent: 0.5,
            ..linear()
        };
        let half = Duration::from_secs(10);
        assert!((slow.fraction(half) - 0.25).abs() < 1e-9);
        assert!((fast.fraction(half) - 0.5f64.sqrt()).abs() < 1e-9);
    }

    #[test]
    fn new_backend_after_agent_start_ramps_from_first_sight() {
        // The agent started at 0; the backend appeared at 100.
        let start = ramp_start(at(100), None, None, at(105));
        assert_eq!(start, at(100));
        assert_eq!(linear().effective(1, start, at(110)), 500);
    }

    #[test]
    fn creation_time_later_than_first_sight_wins() {
        let start = ramp_start(at(100), Some(at(102)), None, at(105));
        assert_eq!(start, at(102));
    }

    #[test]
    fn creation_time_in_the_future_is_ignored() {
        let start = ramp_start(at(100), Some(at(500)), None, at(105));
        assert_eq!(
            start,
            at(100),
            "a skewed clock must not pin the backend to the floor"
        );
    }

    #[test]
    fn recovery_restarts_the_ramp() {
        let start = ramp_start(at(0), Some(at(0)), Some(at(300)), at(305));
        assert_eq!(start, at(300));
        assert!((linear().fraction(age(start, at(305))) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn restart_in_the_middle_of_a_window_continues_the_ramp() {
        // A persisted start time of 100, read back by a restarted agent at 110.
        let persisted = at(100);
        let start = ramp_start(persisted, None, None, at(110));
        assert_eq!(
            linear().effective(1, start, at(110)),
            500,
            "halfway, not back at the floor"
        );
    }

    #[test]
    fn weight_zero_stays_zero_and_weights_scale() {
        let f = linear();
        assert_eq!(f.effective(0, at(0), at(10)), 0);
        assert_eq!(f.effective(4, at(0), at(10)), 2000);
        let tiny = FadeIn {
            min_weight: 0.0,
            ..f
        };
        assert_eq!(
            tiny.effective(1, at(0), at(0)),
            1,
            "never rounds a live backend out"
        );
    }

    #[test]
    fn start_in_the_future_counts_as_age_zero() {
        assert_eq!(age(at(10), at(5)), Duration::ZERO);
    }

    use proptest::prelude::*;

    proptest! {
        /// For every valid setting (window of any length, zero included; exponent > 0;
        /// floor in (0, 1]) and weight the config allows (0..=10000): the fraction
        /// stays in `[min_weight, 1]` and never falls as time passes; the effective
        /// weight never falls either, stays between 1 and the full scaled weight (0 for
        /// weight 0), is within rounding of `weight × WEIGHT_SCALE × fraction`, and is
        /// the full weight from the end of the window on.
        #[test]
        fn ramps_are_bounded_and_never_fall(
            window_ms in prop_oneof![0u64..=2, 0u64..10_000_000],
            exponent in prop_oneof![0.1f64..3.0, 0.01f64..20.0],
            min_weight in prop_oneof![1e-9f64..0.001, 0.001f64..=1.0],
            weight in prop_oneof![0u32..=3, 0u32..=10_000],
            // Two ages, as fractions of the window: inside it, and past its end.
            earlier in 0.0f64..1.2,
            later_by in 0.0f64..0.6,
        ) {
            let window = Duration::from_millis(window_ms);
            let f = FadeIn {
                window,
                exponent,
                min_weight,
            };
            let (a, b) = (window.mul_f64(earlier), window.mul_f64(earlier + later_by));
            let (fa, fb) = (f.fraction(a), f.fraction(b));
            prop_assert!((min_weight..=1.0).contains(&fa), "fraction {fa} at {a:?}");
            prop_assert!(fa <= fb, "fell from {fa} at {a:?} to {fb} at {b:?}");
            let full = weight * WEIGHT_SCALE;
            let (ea, eb) = (f.effective(weight, T0, T0 + a), f.effective(weight, T0, T0 + b));
            prop_assert!(ea <= eb, "effective fell from {ea} to {eb}");
            prop_assert!(eb <= full && (weight == 0 || ea >= 1), "{ea}..{eb} of {full}");
            prop_assert!(
                (f64::from(ea) - f64::from(full) * fa).abs() <= 0.5 || ea == 1,
                "{ea} for {full} × {fa}"
            );
            if b >= f.window {
                prop_assert_eq!(eb, full);
                prop_assert!(!f.fading(T0, T0 + b));
            }
        }
    }
}
