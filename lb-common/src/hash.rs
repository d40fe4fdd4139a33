//! The flow hash that picks a backend for a new flow.
//!
//! The same function runs in the XDP program and in userspace (`lbctl explain`, tests),
//! so both must agree bit for bit: it is a pure function of the 5-tuple and the seed,
//! with no loops (the verifier sees straight-line code). The mixing steps are those of
//! MurmurHash3's 32-bit variant, which spreads nearby addresses and ports well.
//!
//! Hand-written rather than a hash crate: it must compile for `bpfel-unknown-none`
//! without `std` or heap, unroll to code the verifier accepts, and never change
//! between releases or between kernel and userspace (every node of a fleet and every
//! restart must send a flow to the same slot); a crate's hash promises none of that.

const C1: u32 = 0xcc9e_2d51;
const C2: u32 = 0x1b87_3593;

#[inline(always)]
const fn mix(h: u32, k: u32) -> u32 {
    let k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    (h ^ k)
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

#[inline(always)]
const fn finish(mut h: u32, len: u32) -> u32 {
    h ^= len;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

#[inline(always)]
const fn word(addr: &crate::Addr, i: usize) -> u32 {
    addr.0[i / 4]
}

/// Hashes a flow's 5-tuple. Addresses and ports are taken as stored (network byte
/// order in memory, read as native words), exactly as the XDP program has them.
/// IPv4 flows (both addresses IPv4-mapped) hash only the IPv4 words: cheaper, and the
/// constant mapped prefix adds nothing.
#[inline(always)]
pub const fn flow_hash(seed: u32, key: &crate::FlowKey) -> u32 {
    let ports = ((key.src_port_be as u32) << 16) | key.dst_port_be as u32;
    let mut h = seed;
    if crate::maps::is_v4_mapped(&key.src) && crate::maps::is_v4_mapped(&key.dst) {
        h = mix(h, word(&key.src, 12));
        h = mix(h, word(&key.dst, 12));
        h = mix(h, ports);
        h = mix(h, key.proto as u32);
        finish(h, 13)
    } else {
        h = mix(h, word(&key.src, 0));
        h = mix(h, word(&key.src, 4));
        h = mix(h, word(&key.src, 8));
        h = mix(h, word(&key.src, 12));
        h = mix(h, word(&key.dst, 0));
        h = mix(h, word(&key.dst, 4));
        h = mix(h, word(&key.dst, 8));
        h = mix(h, word(&key.dst, 12));
        h = mix(h, ports);
        h = mix(h, key.proto as u32);
        finish(h, 37)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Addr, FlowKey, maps::v4_mapped};

    fn key(src: Addr, dst: Addr, sport: u16, dport: u16, proto: u8) -> FlowKey {
        FlowKey {
            src,
            dst,
            src_port_be: sport.to_be(),
            dst_port_be: dport.to_be(),
            proto,
            _pad: 0,
            _pad2: 0,
        }
    }

    const V6_SRC: Addr =
        Addr::from_octets([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    const V6_DST: Addr =
        Addr::from_octets([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);

    /// Golden values: a change here changes which backend every node picks, so it must
    /// be deliberate (and rolled out fleet-wide).
    #[test]
    fn golden_values() {
        let src = v4_mapped([198, 18, 0, 1]);
        let dst = v4_mapped([198, 18, 0, 100]);
        assert_eq!(flow_hash(0, &key(src, dst, 40000, 80, 6)), 925_530_493);
        assert_eq!(flow_hash(1, &key(src, dst, 40000, 80, 6)), 933_795_868);
        assert_eq!(flow_hash(0, &key(src, dst, 40000, 80, 17)), 245_362_522);
        assert_eq!(flow_hash(0, &key(V6_SRC, V6_DST, 40000, 80, 6)), GOLDEN_V6);
    }
    const GOLDEN_V6: u32 = 3_460_238_415;

    #[test]
    fn every_field_matters() {
        for (src, dst) in [
            (v4_mapped([1, 2, 3, 4]), v4_mapped([5, 6, 7, 8])),
            (V6_SRC, V6_DST),
        ] {
            let base = flow_hash(7, &key(src, dst, 3, 4, 6));
            assert_ne!(base, flow_hash(8, &key(src, dst, 3, 4, 6)));
            assert_ne!(base, flow_hash(7, &key(dst, src, 3, 4, 6)));
            assert_ne!(base, flow_hash(7, &key(src, src, 3, 4, 6)));
            assert_ne!(base, flow_hash(7, &key(src, dst, 9, 4, 6)));
            assert_ne!(base, flow_hash(7, &key(src, dst, 3, 9, 6)));
            assert_ne!(base, flow_hash(7, &key(src, dst, 3, 4, 17)));
        }
    }

    #[test]
    fn source_ports_spread_evenly_over_three_buckets() {
        for (src, dst) in [
            (v4_mapped([198, 18, 0, 1]), v4_mapped([198, 18, 0, 100])),
            (V6_SRC, V6_DST),
        ] {
            let mut buckets = [0u32; 3];
            for port in 10_000u16..40_000 {
                buckets[(flow_hash(0x5eed, &key(src, dst, port, 80, 6)) % 3) as usize] += 1;
            }
            for b in buckets {
                // 10,000 expected per bucket; allow 3% either way.
                assert!((9_700..=10_300).contains(&b), "uneven spread {buckets:?}");
            }
        }
    }
}
