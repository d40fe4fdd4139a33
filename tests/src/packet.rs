//! A small packet builder for fixtures: `Packet::eth(..).ipv4(..).tcp(..)`, with valid
//! IPv4 and L4 checksums, plus knobs to break things (options, fragments, truncation).

use std::net::{Ipv4Addr, Ipv6Addr};

/// A frame under construction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// The bytes so far.
    pub bytes: Vec<u8>,
}

/// TCP flag bits, for [`Packet::with_tcp_flags`].
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN (what the builders make).
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// IP protocol numbers.
pub const TCP: u8 = 6;
/// UDP.
pub const UDP: u8 = 17;

impl Packet {
    /// An Ethernet II header.
    pub fn eth(dst: [u8; 6], src: [u8; 6], ether_type: u16) -> Self {
        let mut bytes = Vec::with_capacity(128);
        bytes.extend_from_slice(&dst);
        bytes.extend_from_slice(&src);
        bytes.extend_from_slice(&ether_type.to_be_bytes());
        Self { bytes }
    }

    /// An IPv4 TCP packet with `payload`, all checksums valid.
    pub fn tcp4(
        eth: Self,
        src: Ipv4Addr,
        sport: u16,
        dst: Ipv4Addr,
        dport: u16,
        payload: &[u8],
    ) -> Self {
        Self::ipv4_with(
            eth,
            src,
            dst,
            TCP,
            tcp_segment(sport, dport, payload),
            16,
            &[],
        )
    }

    /// An IPv4 UDP datagram with `payload`, all checksums valid.
    pub fn udp4(
        eth: Self,
        src: Ipv4Addr,
        sport: u16,
        dst: Ipv4Addr,
        dport: u16,
        payload: &[u8],
    ) -> Self {
        Self::ipv4_with(
            eth,
            src,
            dst,
            UDP,
            udp_datagram(sport, dport, payload),
            6,
            &[],
        )
    }

    /// IPv4 around an L4 segment; `csum_at` is the L4 checksum offset, `options` are
    /// appended to the 20-byte header (a multiple of 4 bytes).
    pub fn ipv4_with(
        mut eth: Self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        proto: u8,
        mut l4: Vec<u8>,
        csum_at: usize,
        options: &[u8],
    ) -> Self {
        assert_eq!(options.len() % 4, 0, "options must be 32-bit aligned");
        let ihl = 5 + options.len() / 4;
        let total = ihl * 4 + l4.len();
        let mut ip = vec![
            0x40 | ihl as u8,
            0,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0x00,
            64,
            proto,
            0,
            0,
        ];
        ip.extend_from_slice(&src.octets());
        ip.extend_from_slice(&dst.octets());
        ip.extend_from_slice(options);
        let c = checksum(&[&ip]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let mut pseudo = Vec::with_capacity(12);
        pseudo.extend_from_slice(&src.octets());
        pseudo.extend_from_slice(&dst.octets());
        pseudo.extend_from_slice(&[0, proto]);
        pseudo.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        let c = l4_checksum(proto, checksum(&[&pseudo, &l4]));
        l4[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
        eth.bytes.extend_from_slice(&ip);
        eth.bytes.extend_from_slice(&l4);
        eth
    }

    /// An IPv6 TCP packet with `payload`, checksum valid.
    pub fn tcp6(
        eth: Self,
        src: Ipv6Addr,
        sport: u16,
        dst: Ipv6Addr,
        dport: u16,
        payload: &[u8],
    ) -> Self {
        let mut l4 = tcp_segment(sport, dport, payload);
        Self::ipv6_with(eth, src, dst, TCP, &mut l4, 16)
    }

    /// An IPv6 UDP datagram with `payload`, checksum valid.
    pub fn udp6(
        eth: Self,
        src: Ipv6Addr,
        sport: u16,
        dst: Ipv6Addr,
        dport: u16,
        payload: &[u8],
    ) -> Self {
        let mut l4 = udp_datagram(sport, dport, payload);
        Self::ipv6_with(eth, src, dst, UDP, &mut l4, 6)
    }

    /// IPv6 around an L4 segment whose checksum sits at `csum_at`.
    pub fn ipv6_with(
        mut eth: Self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        next: u8,
        l4: &mut [u8],
        csum_at: usize,
    ) -> Self {
        let mut ip = vec![0x60, 0, 0, 0];
        ip.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        ip.extend_from_slice(&[next, 64]);
        ip.extend_from_slice(&src.octets());
        ip.extend_from_slice(&dst.octets());
        let mut pseudo = Vec::with_capacity(40);
        pseudo.extend_from_slice(&src.octets());
        pseudo.extend_from_slice(&dst.octets());
        pseudo.extend_from_slice(&(l4.len() as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, next]);
        let c = l4_checksum(next, checksum(&[&pseudo, l4]));
        l4[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
        eth.bytes.extend_from_slice(&ip);
        eth.bytes.extend_from_slice(l4);
        eth
    }

    /// An ICMPv4 message (`body` starts with type and code; its checksum field is
    /// filled in over the message alone: ICMPv4 has no pseudo header).
    pub fn icmp4(eth: Self, src: Ipv4Addr, dst: Ipv4Addr, mut body: Vec<u8>) -> Self {
        body[2..4].copy_from_slice(&[0, 0]);
        let c = checksum(&[&body]);
        body[2..4].copy_from_slice(&c.to_be_bytes());
        let mut p = Self::ipv4_with(eth, src, dst, 1, body, 2, &[]);
        // ipv4_with wrote a pseudo-header checksum; put the ICMP one back (the ICMP
        // header follows the 14-byte Ethernet and 20-byte IPv4 headers).
        p.bytes[36..38].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// Inserts an 802.1Q tag with VLAN id `vid` after the MAC addresses.
    pub fn with_vlan(mut self, vid: u16) -> Self {
        let inner = [self.bytes[12], self.bytes[13]];
        let mut tag = vec![0x81, 0x00];
        tag.extend_from_slice(&(vid & 0x0fff).to_be_bytes());
        tag.extend_from_slice(&inner);
        self.bytes.splice(12..14, tag);
        self
    }

    /// Sets the IPv4 flags/fragment-offset field (the header checksum is recomputed).
    pub fn with_frag(mut self, field: u16) -> Self {
        self.bytes[20..22].copy_from_slice(&field.to_be_bytes());
        self.fix_ipv4_checksum();
        self
    }

    /// Recomputes the IPv4 header checksum (header at offset 14, no VLAN).
    pub fn fix_ipv4_checksum(&mut self) {
        let ihl = (self.bytes[14] & 0x0f) as usize * 4;
        self.bytes[24..26].copy_from_slice(&[0, 0]);
        let c = checksum(&[&self.bytes[14..14 + ihl]]);
        self.bytes[24..26].copy_from_slice(&c.to_be_bytes());
    }

    /// Sets the TCP flags of a TCP frame built here (SYN by default), keeping its
    /// checksum valid (RFC 1624 incremental update). Panics on other frames.
    pub fn with_tcp_flags(mut self, tcp_flags: u8) -> Self {
        let at = self.tcp_offset();
        let old = u16::from_be_bytes([self.bytes[at + 12], self.bytes[at + 13]]);
        self.bytes[at + 13] = tcp_flags;
        let new = u16::from_be_bytes([self.bytes[at + 12], self.bytes[at + 13]]);
        let check = u16::from_be_bytes([self.bytes[at + 16], self.bytes[at + 17]]);
        let mut sum = u32::from(!check) + u32::from(!old) + u32::from(new);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        self.bytes[at + 16..at + 18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        self
    }

    /// Offset of the TCP header in a frame built here.
    fn tcp_offset(&self) -> usize {
        let mut l3 = 14;
        if self.bytes[12..14] == [0x81, 0x00] {
            l3 += 4;
        }
        let ether_type = [self.bytes[l3 - 2], self.bytes[l3 - 1]];
        let (l4, proto) = match ether_type {
            [0x08, 0x00] => (
                l3 + usize::from(self.bytes[l3] & 0x0f) * 4,
                self.bytes[l3 + 9],
            ),
            [0x86, 0xdd] => (l3 + 40, self.bytes[l3 + 6]),
            other => panic!("not IPv4 or IPv6: ether type {other:02x?}"),
        };
        assert_eq!(proto, TCP, "not a TCP frame");
        l4
    }

    /// The first `len` bytes only.
    pub fn truncated(mut self, len: usize) -> Self {
        self.bytes.truncate(len);
        self
    }
}

/// A TCP SYN segment (checksum zero, filled in by the IP layer builder).
pub fn tcp_segment(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut l4 = Vec::with_capacity(20 + payload.len());
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.extend_from_slice(&1u32.to_be_bytes()); // seq
    l4.extend_from_slice(&0u32.to_be_bytes()); // ack
    l4.extend_from_slice(&[0x50, 0x02]); // data offset 5, SYN
    l4.extend_from_slice(&64240u16.to_be_bytes());
    l4.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent
    l4.extend_from_slice(payload);
    l4
}

/// A UDP datagram (checksum zero, filled in by the IP layer builder).
pub fn udp_datagram(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut l4 = Vec::with_capacity(8 + payload.len());
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    l4.extend_from_slice(&[0, 0]);
    l4.extend_from_slice(payload);
    l4
}

/// The checksum field as a sender writes it: a UDP checksum that computes to zero
/// goes out as `0xffff` (RFC 768), since zero in that field means "no checksum" (for
/// IPv6, where UDP's is mandatory, a datagram the receiver drops: RFC 8200 §8.1).
/// Written as zero, one random datagram in 65,536 was such a datagram, and the TC
/// program, which leaves a zero UDP checksum alone, failed the NAT checksum test for it.
fn l4_checksum(proto: u8, computed: u16) -> u16 {
    if proto == 17 && computed == 0 {
        0xffff
    } else {
        computed
    }
}

/// The Internet checksum over the concatenation of `parts`.
pub fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    let mut odd: Option<u8> = None;
    for part in parts {
        for &b in *part {
            match odd.take() {
                Some(hi) => sum += u32::from(u16::from_be_bytes([hi, b])),
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        sum += u32::from(u16::from_be_bytes([hi, 0]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The datagram of seed 9393786871777658884 of `xdp_nat`'s random-flow test had a
    /// UDP checksum that computes to zero: it must go out as 0xffff, v4 and v6.
    #[test]
    fn a_udp_checksum_that_computes_to_zero_is_sent_as_all_ones() {
        let (src, dst) = (
            "2001:db8:1::1".parse().expect("v6"),
            "2001:db8::1".parse().expect("v6"),
        );
        let eth = || Packet::eth([2; 6], [4; 6], 0x86dd);
        // Some two-byte payload makes the sum come out at zero; find it.
        let p = (0..=u16::MAX)
            .map(|v| Packet::udp6(eth(), src, 1000, dst, 53, &v.to_be_bytes()))
            .find(|p| p.bytes[60..62] == [0xff, 0xff])
            .expect("a payload whose UDP checksum computes to zero");
        let mut pseudo = p.bytes[22..54].to_vec();
        pseudo.extend_from_slice(&[0, 0, 0, 10, 0, 0, 0, UDP]);
        assert_eq!(checksum(&[&pseudo, &p.bytes[54..]]), 0, "0xffff verifies");
        let zeroed = (0..=u16::MAX)
            .map(|v| Packet::udp6(eth(), src, 1000, dst, 53, &v.to_be_bytes()))
            .filter(|p| p.bytes[60..62] == [0, 0])
            .count();
        assert_eq!(
            zeroed, 0,
            "no IPv6 UDP datagram goes out without a checksum"
        );
        let v4 = (0..=u16::MAX)
            .map(|v| {
                let eth = Packet::eth([2; 6], [4; 6], 0x0800);
                Packet::udp4(
                    eth,
                    Ipv4Addr::new(198, 18, 0, 1),
                    1000,
                    Ipv4Addr::new(198, 18, 0, 3),
                    53,
                    &v.to_be_bytes(),
                )
            })
            .filter(|p| p.bytes[40..42] == [0, 0])
            .count();
        assert_eq!(v4, 0, "nor an IPv4 one with the field that means none");
    }

    #[test]
    fn checksums_verify_to_zero() {
        let p = Packet::tcp4(
            Packet::eth([2; 6], [4; 6], 0x0800),
            Ipv4Addr::new(198, 18, 0, 1),
            1000,
            Ipv4Addr::new(198, 18, 100, 1),
            80,
            b"hi",
        );
        assert_eq!(checksum(&[&p.bytes[14..34]]), 0, "IPv4 header");
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p.bytes[26..34]);
        pseudo.extend_from_slice(&[0, TCP, 0, 22]);
        assert_eq!(checksum(&[&pseudo, &p.bytes[34..]]), 0, "TCP");
    }

    #[test]
    fn changed_tcp_flags_keep_the_checksum_valid() {
        let eth = Packet::eth([2; 6], [4; 6], 0x0800);
        let src = Ipv4Addr::new(198, 18, 0, 1);
        let dst = Ipv4Addr::new(198, 18, 100, 1);
        let p =
            Packet::tcp4(eth, src, 1000, dst, 80, b"hi").with_tcp_flags(flags::ACK | flags::FIN);
        assert_eq!(p.bytes[34 + 13], 0x11);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p.bytes[26..34]);
        pseudo.extend_from_slice(&[0, TCP, 0, 22]);
        assert_eq!(checksum(&[&pseudo, &p.bytes[34..]]), 0, "TCP");
        let eth6 = Packet::eth([2; 6], [4; 6], 0x86dd);
        let (s6, d6) = (
            "2001:db8::1".parse().expect("v6"),
            "2001:db8::2".parse().expect("v6"),
        );
        let v6 = Packet::tcp6(eth6, s6, 1, d6, 2, b"")
            .with_vlan(7)
            .with_tcp_flags(flags::RST);
        assert_eq!(v6.bytes[18 + 40 + 13], flags::RST);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&v6.bytes[18 + 8..18 + 40]);
        pseudo.extend_from_slice(&[0, 0, 0, 20, 0, 0, 0, TCP]);
        assert_eq!(checksum(&[&pseudo, &v6.bytes[58..]]), 0, "TCP over IPv6");
    }

    #[test]
    fn known_header_checksum() {
        // The worked example from RFC 1071 section 3 style sums.
        assert_eq!(
            checksum(&[&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]]),
            !0xddf2
        );
    }
}
