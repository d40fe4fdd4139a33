//! Seeded generators for the randomized tests (from `lb-test-rng`): a test draws
//! everything random from `seeded("<test name>")` (or from seeds it draws), which
//! prints its seed to stderr; `LB_TEST_SEED=N` replays it.

pub use lb_test_rng::{Rng, RngExt, SEED_VAR, SeedableRng, StdRng, seed, seeded};
