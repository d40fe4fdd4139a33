//! The per-flow values of the tunnel modes' outer headers: the outer source address,
//! the IPv6 flow label and the GUE source port.
//!
//! They run in `lb_tunnel` and in userspace (`lbctl explain` shows a flow's outer
//! header), so both must agree bit for bit: pure functions of the flow and the
//! settings, without loops or byte-wise array work (each byte would cost the BPF
//! program a stack slot).

use crate::{Addr, FlowKey, TunnelConfig};

/// A cheap per-flow value of the client's address and port: the same for every packet
/// of a flow, different across flows. MurmurHash3's finaliser, so every input bit
/// reaches every output bit.
#[inline(always)]
pub fn flow_mix(key: &FlowKey) -> u32 {
    let [_, _, b, a] = key.src.0;
    let p = u32::from(key.src_port_be);
    let mut x = a ^ b.rotate_left(7) ^ p.wrapping_mul(0x9e37_79b1);
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^ (x >> 16)
}

/// The outer source of a flow whose [`flow_mix`] is `mix` (see [`TunnelConfig`]),
/// IPv4-mapped for IPv4; `None` when the family has no source.
#[inline(always)]
pub fn outer_source(cfg: &TunnelConfig, outer6: bool, mix: u32) -> Option<Addr> {
    if outer6 {
        let s = &cfg.source_v6;
        let hi = u64::from_ne_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]);
        let lo = u64::from_ne_bytes([s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15]]);
        if hi | lo == 0 {
            return None;
        }
        let m = u64::from(mix) | (u64::from(mix) << 32);
        let lo = lo | (m & u64::from_ne_bytes(cfg.host_mask_v6));
        let (h, l) = (hi.to_ne_bytes(), lo.to_ne_bytes());
        Some(Addr([
            u32::from_ne_bytes([h[0], h[1], h[2], h[3]]),
            u32::from_ne_bytes([h[4], h[5], h[6], h[7]]),
            u32::from_ne_bytes([l[0], l[1], l[2], l[3]]),
            u32::from_ne_bytes([l[4], l[5], l[6], l[7]]),
        ]))
    } else {
        let base = u32::from_ne_bytes(cfg.source_v4);
        if base == 0 {
            return None;
        }
        let v4 = base | (mix & u32::from_ne_bytes(cfg.host_mask_v4));
        Some(Addr::v4_mapped_word(v4))
    }
}

/// The IPv6 outer header's flow label for `mix`.
#[inline(always)]
pub const fn flow_label(mix: u32) -> u32 {
    mix & 0x000f_ffff
}

/// The GUE source port for `mix`: in the dynamic range 49152-65535.
#[inline(always)]
pub const fn gue_source_port(mix: u32) -> u16 {
    0xc000 | (mix as u16 & 0x3fff)
}

/// The default GUE destination port (`node.tunnel.gue_port`).
pub const GUE_PORT: u16 = 6080;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::v4_mapped;

    fn key(src: Addr, port: u16) -> FlowKey {
        FlowKey {
            src,
            src_port_be: port.to_be(),
            ..FlowKey::default()
        }
    }

    #[test]
    fn sources_stay_in_their_prefix_and_spread() {
        let cfg = TunnelConfig {
            source_v4: [198, 18, 200, 0],
            host_mask_v4: [0, 0, 0, 0xff],
            source_v6: [0x20, 0x01, 0x0d, 0xb8, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            host_mask_v6: [0xff; 8],
            ..TunnelConfig::default()
        };
        let mut v4 = [false; 256];
        for port in 1000..1256u16 {
            let m = flow_mix(&key(v4_mapped([198, 18, 0, 1]), port));
            let s = outer_source(&cfg, false, m).expect("v4 source").octets();
            assert_eq!(s[..15], v4_mapped([198, 18, 200, 0]).octets()[..15]);
            v4[usize::from(s[15])] = true;
            let s6 = outer_source(&cfg, true, m).expect("v6 source").octets();
            assert_eq!(s6[..8], cfg.source_v6[..8]);
            assert!(gue_source_port(m) >= 0xc000);
        }
        assert!(
            v4.iter().filter(|b| **b).count() > 128,
            "256 flows use most of a /24"
        );
        let none = TunnelConfig::default();
        assert_eq!(outer_source(&none, false, 1), None);
        assert_eq!(outer_source(&none, true, 1), None);
    }
}
