//! `[node.l7] trusted_proxies`: the peers whose X-Forwarded-For is believed.
//!
//! Anyone can send an X-Forwarded-For header. The access log's client address and the
//! consistent-hash key come from it only when the connection's peer is a proxy we
//! trust (a load balancer in front of us); from any other peer the header is ignored
//! and the peer's own address is used. The header is forwarded to backends either
//! way, with the peer appended, so they see the whole chain and who vouches for what.

use std::{net::IpAddr, sync::Arc};

/// An address block, `198.18.0.0/15` or `2001:db8::/32` (a bare address is a /32 or
/// /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// A text that is not an address block.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an address or ADDRESS/PREFIX block")]
pub struct BadCidr {
    /// The text.
    pub text: String,
}

impl std::str::FromStr for Cidr {
    type Err = BadCidr;

    fn from_str(text: &str) -> Result<Self, BadCidr> {
        let bad = || BadCidr {
            text: text.to_owned(),
        };
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Self { addr, prefix })
    }
}

impl Cidr {
    /// The address as written and the prefix length.
    pub fn parts(&self) -> (IpAddr, u8) {
        (self.addr, self.prefix)
    }

    /// The block's first address (the host bits cleared).
    pub fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }

    /// Whether `ip` is in the block (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| -> (u128, u8) {
            match ip.to_canonical() {
                IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, 32),
                IpAddr::V6(v6) => (u128::from(v6), 128),
            }
        };
        let (net, net_len) = bits(self.addr);
        let (addr, addr_len) = bits(ip);
        if net_len != addr_len {
            return false;
        }
        let mask = match self.prefix {
            0 => 0,
            p => u128::MAX << (128 - u32::from(p)),
        };
        net & mask == addr & mask
    }
}

/// The trusted proxies; empty (the default) trusts nobody.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Arc<[Cidr]>);

impl TrustedProxies {
    /// Parses every entry.
    ///
    /// # Errors
    /// The first entry that is not a block.
    pub fn parse(entries: &[String]) -> Result<Self, BadCidr> {
        let blocks = entries
            .iter()
            .map(|e| e.trim().parse())
            .collect::<Result<Vec<Cidr>, _>>()?;
        Ok(Self(blocks.into()))
    }

    /// Whether a connection from `peer` may tell us the client's address.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn blocks_contain_their_addresses_only() {
        let t = TrustedProxies::parse(&[
            "198.18.0.0/24".into(),
            "2001:db8:1::/48".into(),
            " 198.19.0.7 ".into(),
        ])
        .expect("valid");
        for yes in [
            "198.18.0.0",
            "198.18.0.255",
            "2001:db8:1::5",
            "198.19.0.7",
            "::ffff:198.18.0.9",
        ] {
            assert!(t.trusts(ip(yes)), "{yes}");
        }
        for no in [
            "198.18.1.0",
            "198.19.0.8",
            "2001:db8:2::1",
            "10.0.0.1",
            "::1",
        ] {
            assert!(!t.trusts(ip(no)), "{no}");
        }
        assert!(!TrustedProxies::default().trusts(ip("198.18.0.1")));
        let all: TrustedProxies = TrustedProxies::parse(&["0.0.0.0/0".into()]).expect("valid");
        assert!(all.trusts(ip("203.0.113.1")) && !all.trusts(ip("2001:db8::1")));
    }

    #[test]
    fn malformed_blocks_are_refused() {
        for bad in [
            "",
            "198.18.0.0/33",
            "2001:db8::/129",
            "nope",
            "198.18.0.0/",
            "1.2.3.4/x",
        ] {
            assert!(TrustedProxies::parse(&[bad.into()]).is_err(), "{bad:?}");
        }
    }
}
