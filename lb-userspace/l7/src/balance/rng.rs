//! Per-thread random numbers and 64-bit mixing for selection: no lock, no allocation,
//! no system call after a thread's first draw.

use std::cell::Cell;

thread_local! {
    // Const-initialized (no lazy-init check per access); seeded on first use.
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// A per-thread seed: the thread's stack address and the clock, mixed (the draws only
/// need to differ between threads and runs, not to be secret).
fn seed() -> u64 {
    let local = 0u8;
    let addr = std::ptr::addr_of!(local) as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    mix(addr ^ nanos.rotate_left(32)) | 1
}

/// The next 64 random bits of this thread (splitmix64 sequence).
#[inline]
pub fn next() -> u64 {
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            x = seed();
        }
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        s.set(x);
        mix(x)
    })
}

/// A uniform number in `[0, bound)` (multiply-shift: no division, bias < 2^-32 for
/// the bounds we use).
#[inline]
pub fn below(bound: u64) -> u64 {
    scale(next(), bound)
}

/// Maps 64 uniform bits onto `[0, bound)`.
#[inline]
pub fn scale(bits: u64, bound: u64) -> u64 {
    ((u128::from(bits) * u128::from(bound)) >> 64) as u64
}

/// The splitmix64 finalizer: a bijective mix whose output bits each depend on every
/// input bit.
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
