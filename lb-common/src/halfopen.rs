//! The half-open (embryonic) flow table: flows that have sent only a SYN or one
//! datagram, and the backend chosen for them, until their next packet moves them to
//! conntrack.
//!
//! A set-associative array rather than an LRU hash: a flow's bucket is a keyed hash of
//! its 5-tuple, a bucket holds [`WAYS`] flows, and a new flow takes a free way or the
//! one written longest ago. An insert is a store into memory the lookup just read: no
//! lock, no free list, no LRU list to rotate. The kernel's per-CPU LRU evicted four
//! nodes at a time under its list lock, and a SYN from a new 5-tuple into a full table
//! cost ~0.4 µs more than one into an empty table; here both cost the same.
//!
//! What a flood does: a flood of new 5-tuples replaces, in each bucket, the way
//! written longest ago, so a half-open flow survives while fewer than [`WAYS`] newer
//! ones land in its bucket (an LRU keeps it while fewer than its whole capacity
//! arrive, then loses all of them). The bucket hash is keyed with a random seed the
//! agent keeps pinned, so senders cannot aim SYNs at one bucket.
//!
//! Many CPUs read and write the table with plain loads and stores. A way carries a
//! check word computed over its key, entry and stamp; a reader that finds its key but
//! a check that does not match saw a way torn by a concurrent writer, and takes it for
//! a miss. A check of zero marks a free way.
//!
//! The same functions run in the data plane and in the agent (which copies flows in at
//! an upgrade, and removes and lists them), so both must agree bit for bit.

use crate::{FlowEntry, FlowKey};

/// The table's map flags: `BPF_F_MMAPABLE`, so the agent reads and writes single ways
/// through a shared mapping (a `bpf(2)` update rewrites a whole bucket).
pub const MAP_FLAGS: u32 = 1 << 10;

/// Ways per bucket: one bucket is 256 bytes, four cache lines.
pub const WAYS: usize = 4;

/// One half-open flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Way {
    /// The flow.
    pub key: FlowKey,
    /// The backend chosen for it.
    pub entry: FlowEntry,
    /// When it was written: `bpf_ktime_get_coarse_ns` in units of 2^20 ns (~1 ms),
    /// wrapping; only differences are compared.
    pub stamp: u32,
    /// [`check`] of the other fields; zero: the way is free.
    pub check: u32,
}
const _: () = assert!(size_of::<Way>() == 64);

/// A bucket of [`WAYS`] half-open flows: one element of the table's array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub ways: [Way; WAYS],
}
const _: () = assert!(size_of::<Bucket>() == 256);

/// The table's buckets for `node.embryonic_entries` flows: a power of two, at least
/// one, holding at least that many flows.
pub const fn buckets_for(entries: u32) -> u32 {
    let b = entries.div_ceil(WAYS as u32);
    if b <= 1 { 1 } else { b.next_power_of_two() }
}

/// The bucket of `key` in a table of `mask + 1` buckets with `seed`.
///
/// Without a branch (unlike `flow_hash`, which takes IPv4 flows apart): a branch on
/// the key's words splits the verifier's states for the rest of the packet's path.
/// Each address is folded into one word (for IPv4 flows the high words are the mapped
/// prefix, the same for every flow), the two are multiplied in parallel with the seed
/// and the ports, and a multiply-xorshift finish spreads the sum: a dependency chain
/// of three multiplies, where four of murmur's mixes and its finish chained fourteen
/// (the SYN path runs it on every new flow, and every ACK that misses conntrack).
#[inline(always)]
pub const fn bucket_of(seed: u32, mask: u32, key: &FlowKey) -> u32 {
    let [a, b, c, d] = key.src.0;
    let [e, f, g, h] = key.dst.0;
    let ports = ((key.src_port_be as u32) << 16) | key.dst_port_be as u32;
    let src = (d ^ (a ^ b ^ c).rotate_left(7) ^ seed).wrapping_mul(0x9e37_79b1);
    let dst = (h ^ (e ^ f ^ g).rotate_left(11) ^ ports).wrapping_mul(0x85eb_ca77);
    let mut x = src ^ dst.rotate_left(16) ^ (key.proto as u32) ^ seed.rotate_left(9);
    x ^= x >> 15;
    x = x.wrapping_mul(0x2c1b_3c6d);
    x ^= x >> 12;
    x = x.wrapping_mul(0x297a_2d39);
    x ^= x >> 15;
    x & mask
}

/// A way's stamp for a time in ns.
#[inline(always)]
pub const fn stamp(now_ns: u64) -> u32 {
    (now_ns >> 20) as u32
}

/// The check word of a way holding `key` and `entry`, written at `stamp`: never zero.
///
/// It only has to tell a way written whole from one torn between two writers (no
/// sender chooses what a torn way holds), so it is cheap: three lanes of
/// multiply-xor over the way's words, run side by side, then one finish; no branch
/// (see [`bucket_of`]). A change of any one word changes every lane it is in.
#[inline(always)]
pub const fn check(seed: u32, key: &FlowKey, entry: &FlowEntry, stamp: u32) -> u32 {
    const M: u32 = 0x0100_0193;
    let [a, b, c, d] = key.src.0;
    let [e, f, g, h] = key.dst.0;
    let ports = ((key.src_port_be as u32) << 16) | key.dst_port_be as u32;
    let mut x = seed ^ 0x811c_9dc5;
    let mut y = seed ^ 0x5bd1_e995;
    let mut z = seed ^ 0x27d4_eb2f;
    x = (x ^ a).wrapping_mul(M);
    y = (y ^ e).wrapping_mul(M);
    z = (z ^ ports).wrapping_mul(M);
    x = (x ^ b).wrapping_mul(M);
    y = (y ^ f).wrapping_mul(M);
    z = (z ^ key.proto as u32).wrapping_mul(M);
    x = (x ^ c).wrapping_mul(M);
    y = (y ^ g).wrapping_mul(M);
    z = (z ^ entry.backend_id).wrapping_mul(M);
    x = (x ^ d).wrapping_mul(M);
    y = (y ^ h).wrapping_mul(M);
    z = (z ^ (((entry.service_id as u32) << 16) | entry.flags as u32)).wrapping_mul(M);
    x = (x ^ (((entry.nat_port_be as u32) << 16) | entry.backend_gen as u32)).wrapping_mul(M);
    y = (y ^ entry.seen).wrapping_mul(M);
    z = (z ^ stamp).wrapping_mul(M);
    let mut w = x ^ y.rotate_left(11) ^ z.rotate_left(22);
    w ^= w >> 15;
    w = w.wrapping_mul(0x2c1b_3c6d);
    (w ^ (w >> 13)) | 1
}

impl Way {
    /// Whether the way holds a flow written whole: not free, and its check matches
    /// its words (a way torn between two writers does not).
    #[inline(always)]
    pub fn is_whole(&self, seed: u32) -> bool {
        self.check != 0 && self.check == check(seed, &self.key, &self.entry, self.stamp)
    }
}

/// What a copy of a way says about `key`: whether it holds `key`'s flow, whole.
#[inline(always)]
pub fn holds(seed: u32, way: &Way, key: &FlowKey) -> bool {
    way.key.same_flow(key) && way.is_whole(seed)
}

/// The way a new flow takes in a bucket whose ways have these (check, stamp) pairs, at
/// `now` (a [`stamp`]): the first free way, else the one written longest ago.
#[inline(always)]
pub fn victim(ways: [(u32, u32); WAYS], now: u32) -> usize {
    let mut pick = 0;
    let mut oldest = 0;
    let mut i = 0;
    while i < WAYS {
        let (check, written) = ways[i];
        if check == 0 {
            return i;
        }
        let age = now.wrapping_sub(written);
        if age >= oldest {
            oldest = age;
            pick = i;
        }
        i += 1;
    }
    pick
}

/// A way holding `key` and `entry`, written at `stamp`.
#[inline(always)]
pub const fn way(seed: u32, key: &FlowKey, entry: &FlowEntry, stamp: u32) -> Way {
    Way {
        key: *key,
        entry: *entry,
        stamp,
        check: check(seed, key, entry, stamp),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::v4_mapped;

    fn key(port: u16) -> FlowKey {
        FlowKey {
            src: v4_mapped([198, 18, 0, 1]),
            dst: v4_mapped([198, 18, 100, 1]),
            src_port_be: port.to_be(),
            dst_port_be: 80u16.to_be(),
            proto: 6,
            _pad: 0,
            _pad2: 0,
        }
    }

    fn entry(backend_id: u32) -> FlowEntry {
        FlowEntry {
            backend_id,
            service_id: 3,
            backend_gen: 1,
            ..FlowEntry::default()
        }
    }

    #[test]
    fn bucket_counts_are_powers_of_two_that_hold_the_entries() {
        assert_eq!(buckets_for(0), 1);
        assert_eq!(buckets_for(4), 1);
        assert_eq!(buckets_for(5), 2);
        assert_eq!(buckets_for(262_144), 65_536);
        assert_eq!(buckets_for(300_000), 131_072);
        assert_eq!(buckets_for(1 << 30), 1 << 28);
    }

    #[test]
    fn a_way_holds_its_own_key_only_and_a_torn_way_holds_nothing() {
        let w = way(7, &key(1), &entry(5), 9);
        assert!(holds(7, &w, &key(1)));
        assert!(!holds(7, &w, &key(2)), "another key");
        assert!(!holds(8, &w, &key(1)), "another seed");
        // Halves of two writers' ways: the key of one, the entry of the other.
        let other = way(7, &key(1), &entry(6), 9);
        let torn = Way {
            entry: other.entry,
            ..w
        };
        assert!(!holds(7, &torn, &key(1)), "torn entry");
        let torn = Way { stamp: 10, ..w };
        assert!(!holds(7, &torn, &key(1)), "torn stamp");
        assert!(!holds(7, &Way::default(), &FlowKey::default()), "free way");
    }

    #[test]
    fn every_word_of_a_way_is_in_its_check() {
        let (k, e) = (key(1), entry(5));
        let base = check(7, &k, &e, 9);
        let mut keys = [k; 11];
        for i in 0..4 {
            keys[i].src.0[i] ^= 1 << (i * 7);
            keys[4 + i].dst.0[i] ^= 1 << (i * 5 + 3);
        }
        keys[8].src_port_be ^= 0x100;
        keys[9].dst_port_be ^= 1;
        keys[10].proto ^= 0x10;
        for o in keys {
            assert_ne!(check(7, &o, &e, 9), base, "{o:?}");
        }
        for f in [
            |o: &mut FlowEntry| o.backend_id ^= 1 << 20,
            |o: &mut FlowEntry| o.service_id ^= 1,
            |o: &mut FlowEntry| o.flags ^= 2,
            |o: &mut FlowEntry| o.nat_port_be ^= 0x8000,
            |o: &mut FlowEntry| o.backend_gen ^= 1,
            |o: &mut FlowEntry| o.seen ^= 1 << 31,
        ] {
            let mut o = e;
            f(&mut o);
            assert_ne!(check(7, &k, &o, 9), base, "{o:?}");
        }
        assert_ne!(check(7, &k, &e, 10), base, "stamp");
        assert_ne!(check(8, &k, &e, 9), base, "seed");
    }

    #[test]
    fn a_new_flow_takes_a_free_way_else_the_oldest_across_the_stamp_wrap() {
        assert_eq!(victim([(1, 5), (0, 0), (1, 1), (0, 0)], 9), 1);
        assert_eq!(victim([(1, 5), (1, 3), (1, 8), (1, 4)], 9), 1);
        // Stamps just before the wrap are older than those just after it.
        let now = 2;
        assert_eq!(victim([(1, 1), (1, u32::MAX - 1), (1, 0), (1, 2)], now), 1);
    }

    /// Sequential clients (one address, every port; every address of a /16) spread
    /// over the buckets about evenly, and the seed moves them.
    #[test]
    fn nearby_flows_spread_over_the_buckets() {
        const BUCKETS: u32 = 4096;
        let mut load = [0u32; BUCKETS as usize];
        for port in 0..=u16::MAX {
            load[bucket_of(7, BUCKETS - 1, &key(port)) as usize] += 1;
        }
        for i in 0..=u16::MAX {
            let mut k = key(40000);
            k.src = v4_mapped([198, 18, (i >> 8) as u8, i as u8]);
            load[bucket_of(7, BUCKETS - 1, &k) as usize] += 1;
        }
        // 32 per bucket on average.
        let max = load.iter().copied().max().unwrap_or(0);
        let min = load.iter().copied().min().unwrap_or(0);
        assert!(max <= 64 && min >= 8, "min {min} max {max}");
        let moved = (0..1000u16)
            .filter(|&p| bucket_of(7, BUCKETS - 1, &key(p)) != bucket_of(8, BUCKETS - 1, &key(p)))
            .count();
        assert!(moved > 990, "{moved} of 1000 moved with the seed");
    }

    #[test]
    fn every_key_field_moves_the_bucket() {
        let base = key(40000);
        let b = |k: &FlowKey| bucket_of(7, u32::MAX, k);
        let mut other = base;
        other.dst = v4_mapped([198, 18, 100, 2]);
        assert_ne!(b(&base), b(&other), "destination");
        let mut other = base;
        other.dst_port_be = 81u16.to_be();
        assert_ne!(b(&base), b(&other), "destination port");
        let mut other = base;
        other.proto = 17;
        assert_ne!(b(&base), b(&other), "protocol");
        let mut other = base;
        other.src.0[0] = 0x2001_0db8;
        assert_ne!(b(&base), b(&other), "a high word of the source");
    }

    /// Golden values: the agent of one release reads tables the data plane of another
    /// wrote (an upgrade keeps the pinned table), so these may not change silently.
    #[test]
    fn golden_values() {
        assert_eq!(bucket_of(7, 0xffff, &key(40000)), GOLDEN_BUCKET);
        assert_eq!(check(7, &key(40000), &entry(5), 9), GOLDEN_CHECK);
    }
    const GOLDEN_CHECK: u32 = 1_311_265_461;
    const GOLDEN_BUCKET: u32 = 33_064;
}
