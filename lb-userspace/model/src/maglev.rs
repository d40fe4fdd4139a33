//! Maglev consistent hashing (Eisenbud et al., NSDI 2016): a pure function from an
//! ordered backend list and a prime table size to a lookup table.
//!
//! Contract: identical input gives a byte-identical table on every node (no
//! randomness, no platform-dependent hashing); every backend gets `⌊M/N⌋` or `⌈M/N⌉`
//! slots; removing one of N backends moves about 1/N of the slots.

use std::net::IpAddr;

/// Table sizes used by default: primes a little under powers of two. The default for
/// a service is the smallest one at least 100 × its backend count, which keeps each
/// backend's share within 1% of even (the paper's guidance).
pub const DEFAULT_SIZES: [u32; 10] = [
    251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131_071,
];

/// The default table size for `backends` backends.
pub fn default_size(backends: usize) -> u32 {
    let want = (backends as u64 * 100).min(u64::from(u32::MAX)) as u32;
    DEFAULT_SIZES
        .iter()
        .copied()
        .find(|&m| m >= want)
        .unwrap_or(DEFAULT_SIZES[DEFAULT_SIZES.len() - 1])
}

/// Whether `n` is prime (trial division; table sizes are small).
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while d.saturating_mul(d) <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// Builds the table with equal weights: slot → index into `backends`. `size` must be a
/// prime larger than the number of backends (so every permutation visits every slot).
///
/// # Panics
/// If `backends` has more than `u16::MAX` entries or `size` is not larger than it;
/// callers validate both.
pub fn build(backends: &[IpAddr], size: u32) -> Vec<u16> {
    build_weighted(backends, &[], size)
}

/// Builds the table with weights (`weights[i]` for `backends[i]`; empty means all 1).
///
/// Backends take turns as in Maglev, but in round `r` backend `i` places a slot only if
/// `⌊(r+1)·wᵢ/w_max⌋ > ⌊r·wᵢ/w_max⌋`, so its share of slots follows `wᵢ/Σw` (within one
/// slot per backend) and equal weights give exactly the unweighted table. A backend of
/// weight 0 gets no slots (no new flows) but keeps its place in the list, so its
/// established flows are untouched. All weights 0 gives an empty table.
///
/// # Panics
/// As [`build`], or if `weights` is neither empty nor as long as `backends`.
pub fn build_weighted(backends: &[IpAddr], weights: &[u32], size: u32) -> Vec<u16> {
    assert!(
        weights.is_empty() || weights.len() == backends.len(),
        "one weight per backend"
    );
    let weight = |i: usize| u64::from(weights.get(i).copied().unwrap_or(1));
    assert!(
        backends.len() <= usize::from(u16::MAX),
        "too many backends for u16 slots"
    );
    let w_max = (0..backends.len()).map(weight).max().unwrap_or(0);
    if w_max == 0 {
        return Vec::new();
    }
    assert!(
        size as usize > backends.len(),
        "table size must exceed the backend count"
    );
    let m = u64::from(size);
    let perms: Vec<(u64, u64)> = backends
        .iter()
        .map(|b| {
            let bytes = identity(b);
            let offset = u64::from(hash(&bytes, OFFSET_SEED)) % m;
            let skip = u64::from(hash(&bytes, SKIP_SEED)) % (m - 1) + 1;
            (offset, skip)
        })
        .collect();
    let mut next = vec![0u64; backends.len()];
    let mut table = vec![u16::MAX; size as usize];
    let mut filled = 0u32;
    let mut round = 0u64;
    'fill: loop {
        for (i, &(offset, skip)) in perms.iter().enumerate() {
            let w = weight(i);
            if (round + 1) * w / w_max == round * w / w_max {
                continue;
            }
            let mut slot = (offset + next[i] * skip) % m;
            while table[slot as usize] != u16::MAX {
                next[i] += 1;
                slot = (offset + next[i] * skip) % m;
            }
            table[slot as usize] = i as u16;
            next[i] += 1;
            filled += 1;
            if filled == size {
                break 'fill;
            }
        }
        round += 1;
    }
    table
}

const OFFSET_SEED: u32 = 0x4d41_474c; // "MAGL"
const SKIP_SEED: u32 = 0x5349_4b50; // "SKIP"

/// A backend's identity for the permutation: its address as 16 bytes (IPv4-mapped).
/// A digest of a table: FNV-1a (64-bit) over its slots as little-endian `u16`s.
///
/// Identical input gives an identical table on every node, so two nodes (or a node
/// and a model) agree on a service exactly when their digests match; this is the
/// cheap way to compare tables without shipping 2 × M bytes.
pub fn digest(table: &[u16]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    table
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

fn identity(addr: &IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// 32-bit FNV-1a mixed with a seed and finalised with MurmurHash3's fmix: stable
/// across platforms and releases, unlike `std`'s hasher.
fn hash(bytes: &[u8], seed: u32) -> u32 {
    let mut h = 0x811c_9dc5u32 ^ seed;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;

    use super::*;

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 18, 0, last))
    }

    fn shares(table: &[u16], n: usize) -> Vec<usize> {
        let mut c = vec![0; n];
        for &s in table {
            c[s as usize] += 1;
        }
        c
    }

    #[test]
    fn golden_table_prefix() {
        let t = build(&[v4(11), v4(12), v4(13)], 251);
        assert_eq!(
            &t[..16],
            &GOLDEN_PREFIX,
            "changing this moves flows on every node"
        );
    }
    const GOLDEN_PREFIX: [u16; 16] = [2, 1, 1, 2, 2, 2, 1, 0, 1, 0, 0, 2, 0, 2, 2, 1];

    #[test]
    fn every_backend_gets_its_even_share() {
        for n in [1usize, 2, 3, 7, 30] {
            let backends: Vec<IpAddr> = (0..n).map(|i| v4(10 + i as u8)).collect();
            let m = default_size(n);
            let t = build(&backends, m);
            assert_eq!(t.len(), m as usize);
            let lo = m as usize / n;
            for (i, c) in shares(&t, n).into_iter().enumerate() {
                assert!(
                    c == lo || c == lo + 1,
                    "n={n} backend {i} has {c} slots, want {lo} or {}",
                    lo + 1
                );
            }
        }
    }

    #[test]
    fn removing_one_backend_moves_about_one_nth() {
        let backends: Vec<IpAddr> = (0..10).map(|i| v4(10 + i)).collect();
        let m = 65521;
        let before = build(&backends, m);
        let mut fewer = backends.clone();
        let gone = fewer.remove(4);
        let after = build(&fewer, m);
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            let was = backends[*b as usize];
            let now = fewer[*a as usize];
            if was != gone && was != now {
                moved += 1;
            }
        }
        // Slots of surviving backends that moved: Maglev keeps this small (the paper
        // reports a few percent); the removed backend's own 10% must move anyway.
        let frac = moved as f64 / f64::from(m);
        assert!(frac < 0.03, "{:.1}% of surviving slots moved", frac * 100.0);
    }

    #[test]
    fn deterministic_and_ipv6_capable() {
        let b = [
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
        ];
        assert_eq!(build(&b, 509), build(&b, 509));
        let mut s = shares(&build(&b, 509), 2);
        s.sort_unstable();
        assert_eq!(s, vec![254, 255]);
    }

    #[test]
    fn weighted_shares_follow_the_weights() {
        let backends: Vec<IpAddr> = (0..4).map(|i| v4(10 + i)).collect();
        let weights = [1, 2, 3, 4];
        let m = 65521;
        let t = build_weighted(&backends, &weights, m);
        let total: u32 = weights.iter().sum();
        for (i, c) in shares(&t, 4).into_iter().enumerate() {
            let want = f64::from(m) * f64::from(weights[i]) / f64::from(total);
            assert!(
                (c as f64 - want).abs() <= 4.0,
                "backend {i}: {c} slots, want {want:.0}"
            );
        }
        assert_eq!(
            build_weighted(&backends, &[5, 5, 5, 5], m),
            build(&backends, m),
            "equal weights = unweighted"
        );
    }

    #[test]
    fn weight_zero_gets_no_slots_and_a_weight_change_moves_about_the_delta() {
        let backends: Vec<IpAddr> = (0..3).map(|i| v4(10 + i)).collect();
        let m = 65521;
        let drained = build_weighted(&backends, &[1, 0, 1], m);
        assert_eq!(shares(&drained, 3)[1], 0);
        assert!(build_weighted(&backends, &[0, 0, 0], m).is_empty());
        // Backend 2 from weight 1 to 2: its share goes 1/3 → 1/2, so about 1/6 of the
        // slots must move (all of them to backend 2), and little else.
        let before = build_weighted(&backends, &[1, 1, 1], m);
        let after = build_weighted(&backends, &[1, 1, 2], m);
        let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count() as f64 / f64::from(m);
        assert!((0.16..0.25).contains(&moved), "{:.1}% moved", moved * 100.0);
    }

    #[test]
    fn digest_is_fnv1a_and_tells_tables_apart() {
        // FNV-1a 64 test vectors: empty input, and the bytes "a\0" (slot 0x0061).
        assert_eq!(digest(&[]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(digest(&[0x0061]), 0x089b_e207_b544_f1e4);
        let backends: Vec<IpAddr> = (1..=10).map(v4).collect();
        let a = build(&backends, 1021);
        assert_eq!(digest(&a), digest(&build(&backends, 1021)));
        assert_ne!(digest(&a), digest(&build(&backends[..9], 1021)));
    }

    /// Distinct backends, IPv4 and IPv6 mixed.
    fn backend_set(n: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<IpAddr>> {
        let addr = prop_oneof![
            any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
        ];
        proptest::collection::btree_set(addr, n).prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        /// Every slot names a backend with a weight; each backend's share is within
        /// `1 + N·wᵢ/Σw` slots of `M·wᵢ/Σw` (after `R` rounds a backend has placed
        /// `⌊R·wᵢ/w_max⌋` slots, the last round is partial); equal weights give the
        /// unweighted table, whose shares are `⌊M/N⌋` or `⌈M/N⌉`.
        #[test]
        fn every_slot_is_filled_and_shares_follow_the_weights(
            (backends, weights) in backend_set(1..=40).prop_flat_map(|b| {
                let n = b.len();
                (Just(b), proptest::collection::vec(0u32..=8, n))
            }),
            size in proptest::sample::select(&DEFAULT_SIZES[..5]),
        ) {
            let n = backends.len();
            let t = build_weighted(&backends, &weights, size);
            let total: u32 = weights.iter().sum();
            if total == 0 {
                prop_assert!(t.is_empty());
                return Ok(());
            }
            prop_assert_eq!(t.len(), size as usize);
            prop_assert!(t.iter().all(|&s| weights.get(usize::from(s)).is_some_and(|&w| w > 0)));
            for (i, c) in shares(&t, n).into_iter().enumerate() {
                let w = f64::from(weights[i]) / f64::from(total);
                let want = f64::from(size) * w;
                prop_assert!(
                    (c as f64 - want).abs() <= 1.0 + n as f64 * w,
                    "backend {} of weight {}: {} slots, want {:.1}", i, weights[i], c, want
                );
            }
            let even = build(&backends, size);
            prop_assert_eq!(build_weighted(&backends, &vec![weights[0].max(1); n], size), even.clone());
            let lo = size as usize / n;
            prop_assert!(shares(&even, n).iter().all(|&c| c == lo || c == lo + 1));
        }
    }

    proptest! {
        // Two tables of 65521 slots per case: fewer cases.
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Removing one of N backends moves the slots of the others little: Maglev's
        /// minimal disruption. Which slots move depends on the addresses (the table
        /// fills greedily), so the bound is loose — fewer than 3·M/N slots of the
        /// survivors, where 20,000 random sets stayed under 1.1·M/N — yet any
        /// reshuffle of the table (say by list position) moves far more.
        #[test]
        fn removing_a_backend_moves_few_other_slots(
            (backends, gone) in backend_set(3..=40).prop_flat_map(|b| {
                let n = b.len();
                (Just(b), 0..n)
            }),
        ) {
            let m = 65521;
            let n = backends.len();
            let before = build(&backends, m);
            let mut fewer = backends.clone();
            let removed = fewer.remove(gone);
            let after = build(&fewer, m);
            let moved = before
                .iter()
                .zip(&after)
                .filter(|&(&b, &a)| {
                    let was = backends[usize::from(b)];
                    was != removed && was != fewer[usize::from(a)]
                })
                .count();
            prop_assert!(
                moved * n < 3 * m as usize,
                "{} of {} slots of the survivors moved (N = {})", moved, m, n
            );
        }
    }

    #[test]
    fn default_sizes_are_prime_and_grow() {
        assert!(DEFAULT_SIZES.iter().all(|&m| is_prime(m)));
        assert_eq!(default_size(1), 251);
        assert_eq!(default_size(3), 509);
        assert_eq!(default_size(30), 4093);
        assert_eq!(default_size(100_000), 131_071);
        assert!(!is_prime(1) && is_prime(2) && !is_prime(65535) && is_prime(65537));
    }
}
