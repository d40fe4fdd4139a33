//! [`Addr`]: the 16-byte address every map key and value holds.

/// An address as the maps hold it: 16 bytes in network order, IPv4 stored
/// IPv4-mapped (`::ffff:a.b.c.d`), kept as four words read natively from those bytes.
///
/// Why words: the BPF compiler splits a `[u8; 16]` that is built or read byte by byte
/// into sixteen separate values, each with its own stack slot and its own load and
/// store at every copy. With words the same address is four values, copied and
/// compared four at a time. The memory layout is the bytes themselves, so map
/// layouts (and pinned maps) are what they were with `[u8; 16]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr(pub [u32; 4]);

/// The third word of every IPv4-mapped address: bytes `00 00 ff ff`.
const MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

impl Addr {
    /// The all-zero address (`::`), which no host sends from.
    pub const ZERO: Addr = Addr([0; 4]);

    /// The address of 16 network-order bytes.
    #[inline(always)]
    pub const fn from_octets(o: [u8; 16]) -> Self {
        Self([
            u32::from_ne_bytes([o[0], o[1], o[2], o[3]]),
            u32::from_ne_bytes([o[4], o[5], o[6], o[7]]),
            u32::from_ne_bytes([o[8], o[9], o[10], o[11]]),
            u32::from_ne_bytes([o[12], o[13], o[14], o[15]]),
        ])
    }

    /// The 16 network-order bytes.
    #[inline(always)]
    pub const fn octets(self) -> [u8; 16] {
        let [a, b, c, d] = self.0;
        let (a, b, c, d) = (
            a.to_ne_bytes(),
            b.to_ne_bytes(),
            c.to_ne_bytes(),
            d.to_ne_bytes(),
        );
        [
            a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], c[0], c[1], c[2], c[3], d[0], d[1],
            d[2], d[3],
        ]
    }

    /// The 16 network-order bytes in place (for checksum helpers that read memory).
    #[inline(always)]
    pub const fn as_octets(&self) -> &[u8; 16] {
        // SAFETY: `Addr` is `repr(C)` over four `u32`: 16 initialised bytes, and a
        // byte array needs no more alignment than the words have.
        unsafe { &*(self as *const Self).cast::<[u8; 16]>() }
    }

    /// The IPv4-mapped form of an IPv4 address given as its word (the four
    /// network-order bytes read natively, as [`Addr::v4_word`] returns it).
    #[inline(always)]
    pub const fn v4_mapped_word(v4: u32) -> Self {
        Self([0, 0, MAPPED_WORD, v4])
    }

    /// The IPv4-mapped form of an IPv4 address (network-order bytes).
    #[inline(always)]
    pub const fn v4_mapped(v4: [u8; 4]) -> Self {
        Self::v4_mapped_word(u32::from_ne_bytes(v4))
    }

    /// Whether this is an IPv4-mapped address.
    #[inline(always)]
    pub const fn is_v4_mapped(&self) -> bool {
        self.0[0] == 0 && self.0[1] == 0 && self.0[2] == MAPPED_WORD
    }

    /// The IPv4 address of a mapped address, as its word (the last four bytes).
    #[inline(always)]
    pub const fn v4_word(&self) -> u32 {
        self.0[3]
    }

    /// Whether every byte is zero.
    #[inline(always)]
    pub const fn is_zero(&self) -> bool {
        self.0[0] | self.0[1] | self.0[2] | self.0[3] == 0
    }
}

impl From<[u8; 16]> for Addr {
    fn from(o: [u8; 16]) -> Self {
        Self::from_octets(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octets_round_trip_and_memory_is_the_bytes() {
        let o = [
            0x20, 0x01, 0x0d, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
        ];
        let a = Addr::from_octets(o);
        assert_eq!(a.octets(), o);
        // SAFETY: Addr is 16 bytes of plain integers.
        let raw: [u8; 16] = unsafe { core::mem::transmute(a) };
        assert_eq!(raw, o, "the layout is the network-order bytes");
    }

    #[test]
    fn v4_mapping() {
        let a = Addr::v4_mapped([198, 18, 0, 1]);
        assert_eq!(
            a.octets(),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1]
        );
        assert!(a.is_v4_mapped());
        assert_eq!(a.v4_word().to_ne_bytes(), [198, 18, 0, 1]);
        assert!(
            !Addr::from_octets([
                0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4
            ])
            .is_v4_mapped()
        );
        assert!(Addr::ZERO.is_zero() && !a.is_zero());
    }
}
