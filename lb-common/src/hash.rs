//! The flow hash that picks a backend for a new flow.
//!
//! The same function runs in the XDP program and in userspace (`lbctl explain`, tests),
//! so both must agree bit for bit: it is a pure function of the 5-tuple and the seed,
//! with no loops (the verifier sees straight-line code). The mixing steps are those of
//! MurmurHash3's 32-bit variant, which spreads nearby addresses and ports well.

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

/// Hashes an IPv4 5-tuple. Addresses and ports are taken as stored (network byte
/// order in memory, read as native `u32`/`u16`), exactly as the XDP program reads them.
#[inline(always)]
pub const fn flow_hash_v4(
    seed: u32,
    src_be: u32,
    dst_be: u32,
    src_port_be: u16,
    dst_port_be: u16,
    proto: u8,
) -> u32 {
    let ports = ((src_port_be as u32) << 16) | dst_port_be as u32;
    let mut h = mix(seed, src_be);
    h = mix(h, dst_be);
    h = mix(h, ports);
    h = mix(h, proto as u32);
    finish(h, 13)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden values: a change here changes which backend every node picks, so it must
    /// be deliberate (and rolled out fleet-wide).
    #[test]
    fn golden_values() {
        let src = u32::from_ne_bytes([198, 18, 0, 1]);
        let dst = u32::from_ne_bytes([198, 18, 0, 100]);
        let sp = 40000u16.to_be();
        let dp = 80u16.to_be();
        assert_eq!(flow_hash_v4(0, src, dst, sp, dp, 6), GOLDEN[0]);
        assert_eq!(flow_hash_v4(1, src, dst, sp, dp, 6), GOLDEN[1]);
        assert_eq!(flow_hash_v4(0, src, dst, sp, dp, 17), GOLDEN[2]);
    }
    const GOLDEN: [u32; 3] = [925_530_493, 933_795_868, 245_362_522];

    #[test]
    fn every_field_matters() {
        let base = flow_hash_v4(7, 1, 2, 3, 4, 6);
        assert_ne!(base, flow_hash_v4(8, 1, 2, 3, 4, 6));
        assert_ne!(base, flow_hash_v4(7, 9, 2, 3, 4, 6));
        assert_ne!(base, flow_hash_v4(7, 1, 9, 3, 4, 6));
        assert_ne!(base, flow_hash_v4(7, 1, 2, 9, 4, 6));
        assert_ne!(base, flow_hash_v4(7, 1, 2, 3, 9, 6));
        assert_ne!(base, flow_hash_v4(7, 1, 2, 3, 4, 17));
    }

    #[test]
    fn source_ports_spread_evenly_over_three_buckets() {
        let src = u32::from_ne_bytes([198, 18, 0, 1]);
        let dst = u32::from_ne_bytes([198, 18, 0, 100]);
        let mut buckets = [0u32; 3];
        for port in 10_000u16..40_000 {
            let h = flow_hash_v4(0x5eed, src, dst, port.to_be(), 80u16.to_be(), 6);
            buckets[(h % 3) as usize] += 1;
        }
        for b in buckets {
            // 10,000 expected per bucket; allow 3% either way.
            assert!((9_700..=10_300).contains(&b), "uneven spread {buckets:?}");
        }
    }
}
