//! Per-thread random numbers and 64-bit hashing for selection: no lock, no allocation,
//! no system call after a thread's first draw.
//!
//! Draws come from rand's [`SmallRng`] (xoshiro256++), one per thread, seeded from the
//! OS (`getrandom`) on the thread's first draw; [`seed_thread`] makes a thread's draws
//! a replayable sequence, for tests. The draws only need to differ between threads and
//! runs, not to be secret.
//!
//! [`mix`] and [`fnv`] are hashes, not generators, and stay written out here: the
//! endpoints' consistent-hash scores and keys must map an
//! input to the same output in every process, on every node and in every release of
//! lbd. Neither rand's generators (`SmallRng` is documented as non-portable) nor std's
//! randomly keyed hasher promise that.

use std::cell::RefCell;

use rand::{Rng as _, SeedableRng as _, rngs::SmallRng, rngs::SysRng};

thread_local! {
    static RNG: RefCell<SmallRng> = RefCell::new(from_os());
}

/// A generator seeded from the OS; should the OS refuse (no entropy source at all), one
/// seeded from the clock and the thread's stack address, which still differs between
/// threads and runs.
fn from_os() -> SmallRng {
    SmallRng::try_from_rng(&mut SysRng).unwrap_or_else(|_| {
        let local = 0u8;
        let addr = std::ptr::addr_of!(local) as u64;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        SmallRng::seed_from_u64(addr ^ nanos.rotate_left(32))
    })
}

/// Restarts this thread's draws from `seed`: the same seed gives the same draws (for
/// the same build), so a randomized test replays. Other threads are unaffected.
pub fn seed_thread(seed: u64) {
    RNG.with_borrow_mut(|r| *r = SmallRng::seed_from_u64(seed));
}

/// The next 64 random bits of this thread.
#[inline]
pub fn next() -> u64 {
    RNG.with_borrow_mut(|r| r.next_u64())
}

/// A uniform number in `[0, 1)` with 53 random bits, as Go's `rand.Float64` draws
/// for skipper's `Traffic` and `TrafficSegment`.
#[inline]
pub fn unit() -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "53 bits fit an f64 exactly")]
    let bits = (next() >> 11) as f64;
    bits * (1.0 / (1u64 << 53) as f64)
}

/// A uniform number in `[0, bound)`, 0 when `bound` is 0 (never panics: a racing
/// fade-in refresh may briefly see an empty total). Multiply-shift, no division; the
/// bias is below `bound / 2^64`.
#[inline]
pub fn below(bound: u64) -> u64 {
    scale(next(), bound)
}

/// Maps 64 uniform bits onto `[0, bound)` (0 when `bound` is 0).
#[inline]
pub fn scale(bits: u64, bound: u64) -> u64 {
    ((u128::from(bits) * u128::from(bound)) >> 64) as u64
}

/// The splitmix64 finalizer: a fixed bijective mix whose output bits each depend on
/// every input bit (a hash; the same on every node and in every release).
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over bytes, continuing from `state` (start with [`FNV_START`]), so a key
/// spread over several pieces hashes without being copied together.
#[inline]
pub fn fnv(mut state: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        state ^= u64::from(b);
        state = state.wrapping_mul(0x0000_0100_0000_01B3);
    }
    state
}

/// FNV-1a's offset basis.
pub const FNV_START: u64 = 0xCBF2_9CE4_8422_2325;
