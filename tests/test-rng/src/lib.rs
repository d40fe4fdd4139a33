//! Seeded random generators for randomized tests, so that a failure can be replayed.
//!
//! [`seeded`] takes its seed from the environment variable [`SEED_VAR`]
//! (`LB_TEST_SEED`, a decimal `u64`) when it is set, else a fresh random one, prints
//! `<name>: seed N (replay with LB_TEST_SEED=N)` to stderr — the test harness shows a
//! failing test's stderr — and returns a generator seeded with it. A test draws
//! everything random from that one generator (or from seeds it draws), so the seed
//! alone determines the test's inputs.
//!
//! Replays are exact with the same `Cargo.lock`: rand documents that [`StdRng`]'s
//! algorithm may change between its releases.
//!
//! A dev-dependency of the crates whose unit tests are randomized, and re-exported by
//! `lb-testbed` (`lb_testbed::rng`) for the integration tests; it depends on no crate
//! of ours, so any crate can use it without a cycle.

pub use rand::{Rng, RngExt, SeedableRng, rngs::StdRng};

/// The environment variable that fixes the seed of every [`seeded`] generator.
pub const SEED_VAR: &str = "LB_TEST_SEED";

/// The seed for the randomized test `name`: [`SEED_VAR`]'s value if set, else a fresh
/// random one; printed to stderr either way with the command that replays it.
///
/// # Panics
/// If [`SEED_VAR`] is set but is not a decimal `u64` (a mistyped replay must not run
/// with some other seed).
pub fn seed(name: &str) -> u64 {
    let seed = match std::env::var(SEED_VAR) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{SEED_VAR}={v:?} is not a decimal u64: {e}")),
        Err(_) => rand::random(),
    };
    eprintln!("{name}: seed {seed} (replay with {SEED_VAR}={seed})");
    seed
}

/// A generator for the randomized test `name`, seeded with [`seed`]`(name)`.
///
/// # Panics
/// As [`seed`].
pub fn seeded(name: &str) -> StdRng {
    StdRng::seed_from_u64(seed(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same seed gives the same draws: what makes a printed seed a replay.
    #[test]
    fn a_seed_determines_the_draws() {
        let s = seed("a_seed_determines_the_draws");
        let draws = |seed| {
            let mut r = StdRng::seed_from_u64(seed);
            [r.next_u64(), r.next_u64(), r.next_u64()]
        };
        assert_eq!(draws(s), draws(s));
        assert_ne!(draws(s), draws(s ^ 1));
    }
}
