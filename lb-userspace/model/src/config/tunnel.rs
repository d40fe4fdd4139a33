//! `[node.tunnel]`: the outer headers of `ipip` and `gue` services.
//!
//! A flow's outer source comes from a prefix: its host bits carry a per-flow value,
//! so a backend's NIC, which hashes the outer header to pick a receive queue, spreads
//! flows across its queues (a single source address would land every flow on one
//! queue). A bare address (a /32 or /128) sends everything from that address; no
//! setting uses the address the node's route towards the backend prefers. Replies do
//! not come back through the node (the backend answers the client directly), so the
//! prefix need not be routed to the node; only ICMP errors about outer packets would
//! go there, and they are not needed: the node checks each packet against the
//! route's MTU itself.

use std::net::IpAddr;

use serde::Deserialize;

use super::trust::Cidr;

/// `[node.tunnel]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TunnelSettings {
    /// Outer IPv4 sources, `ADDRESS/PREFIX` (e.g. `"198.18.200.0/24"`) or one address.
    #[serde(default)]
    pub source_v4: Option<String>,
    /// Outer IPv6 sources, at most 64 host bits (e.g. `"2001:db8:200::/64"`).
    #[serde(default)]
    pub source_v6: Option<String>,
    /// The UDP port `gue` packets go to (default 6080).
    #[serde(default)]
    pub gue_port: Option<u16>,
}

/// A checked `[node.tunnel]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tunnel {
    /// IPv4 sources: network address and prefix length.
    pub source_v4: Option<(IpAddr, u8)>,
    /// IPv6 sources.
    pub source_v6: Option<(IpAddr, u8)>,
    /// GUE's UDP port.
    pub gue_port: u16,
}

impl TunnelSettings {
    /// Checks the settings.
    ///
    /// # Errors
    /// `(field, problem)`: a source that is not a block of its family, an IPv6 block
    /// with more than 64 host bits, port 0.
    pub fn check(&self) -> Result<Tunnel, (String, String)> {
        let block = |field: &str, text: &Option<String>, v6: bool| {
            let Some(text) = text else {
                return Ok(None);
            };
            let cidr: Cidr = text
                .parse()
                .map_err(|e: super::trust::BadCidr| (field.to_owned(), e.to_string()))?;
            let (addr, prefix) = cidr.parts();
            if addr.is_ipv6() != v6 {
                return Err((
                    field.to_owned(),
                    format!(
                        "{text:?} is not an {} block",
                        if v6 { "IPv6" } else { "IPv4" }
                    ),
                ));
            }
            if v6 && prefix < 64 {
                return Err((
                    field.to_owned(),
                    format!("{text:?}: at most 64 host bits (a /64 or longer)"),
                ));
            }
            if addr.is_unspecified() || addr.is_multicast() {
                return Err((
                    field.to_owned(),
                    format!("{text:?} is not a source address"),
                ));
            }
            Ok(Some((cidr.network(), prefix)))
        };
        let port = self.gue_port.unwrap_or(lb_common::tunnel::GUE_PORT);
        if port == 0 {
            return Err(("gue_port".into(), "must be a port 1-65535".into()));
        }
        Ok(Tunnel {
            source_v4: block("source_v4", &self.source_v4, false)?,
            source_v6: block("source_v6", &self.source_v6, true)?,
            gue_port: port,
        })
    }
}

impl Tunnel {
    /// The data plane's settings; a family without a configured block takes
    /// `fallback` of its family (the route's preferred source), if any.
    pub fn data_plane(
        &self,
        fallback_v4: Option<IpAddr>,
        fallback_v6: Option<IpAddr>,
    ) -> lb_common::TunnelConfig {
        let mut out = lb_common::TunnelConfig {
            gue_port_be: self.gue_port.to_be(),
            ..lb_common::TunnelConfig::default()
        };
        if let Some((IpAddr::V4(a), prefix)) = self.source_v4.or(fallback_v4.map(|a| (a, 32))) {
            out.source_v4 = a.octets();
            let mask = host_mask(32, prefix) as u32;
            out.host_mask_v4 = mask.to_be_bytes();
        }
        if let Some((IpAddr::V6(a), prefix)) = self.source_v6.or(fallback_v6.map(|a| (a, 128))) {
            out.source_v6 = a.octets();
            let mask = host_mask(128, prefix) as u64;
            out.host_mask_v6 = mask.to_be_bytes();
        }
        out
    }
}

/// The host bits of a `prefix` in a `bits`-bit address, right-aligned in a u128.
fn host_mask(bits: u8, prefix: u8) -> u128 {
    let host = u32::from(bits.saturating_sub(prefix));
    if host == 0 {
        0
    } else {
        u128::MAX >> (128 - host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(v4: Option<&str>, v6: Option<&str>, port: Option<u16>) -> TunnelSettings {
        TunnelSettings {
            source_v4: v4.map(str::to_owned),
            source_v6: v6.map(str::to_owned),
            gue_port: port,
        }
    }

    #[test]
    fn blocks_become_a_base_and_host_bits() {
        let t = settings(Some("198.18.200.7/24"), Some("2001:db8:200::/64"), None)
            .check()
            .expect("valid");
        let d = t.data_plane(None, None);
        assert_eq!(d.source_v4, [198, 18, 200, 0], "the network address");
        assert_eq!(d.host_mask_v4, [0, 0, 0, 0xff]);
        assert_eq!(d.source_v6[..8], [0x20, 0x01, 0x0d, 0xb8, 0x02, 0, 0, 0]);
        assert_eq!(d.host_mask_v6, [0xff; 8]);
        assert_eq!(u16::from_be(d.gue_port_be), 6080);
        let one = settings(Some("198.18.200.7"), Some("2001:db8::9/112"), Some(7000))
            .check()
            .expect("valid");
        let d = one.data_plane(None, None);
        assert_eq!((d.source_v4, d.host_mask_v4), ([198, 18, 200, 7], [0; 4]));
        assert_eq!(d.host_mask_v6, [0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(u16::from_be(d.gue_port_be), 7000);
    }

    #[test]
    fn a_family_without_a_block_uses_the_routes_source() {
        let t = settings(None, None, None).check().expect("valid");
        let d = t.data_plane(Some("198.18.0.2".parse().expect("ip")), None);
        assert_eq!((d.source_v4, d.host_mask_v4), ([198, 18, 0, 2], [0; 4]));
        assert_eq!(d.source_v6, [0; 16], "no IPv6 source: none");
    }

    #[test]
    fn bad_blocks_name_the_field() {
        for (s, field) in [
            (settings(Some("2001:db8::/64"), None, None), "source_v4"),
            (settings(None, Some("198.18.0.0/24"), None), "source_v6"),
            (settings(None, Some("2001:db8::/48"), None), "source_v6"),
            (settings(Some("198.18.0.0/33"), None, None), "source_v4"),
            (settings(Some("0.0.0.0/8"), None, None), "source_v4"),
            (settings(None, None, Some(0)), "gue_port"),
        ] {
            let (got, why) = s.check().expect_err("refused");
            assert_eq!(got, field, "{why}");
        }
    }
}
