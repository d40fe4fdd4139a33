//! Checksum helpers for in-place rewrites (RFC 1624 incremental updates). Sums are
//! of words as loaded from the packet in native order: one's-complement addition is
//! the same in either byte order, so a sum stored back in native order is right.

/// Folds a 32-bit one's-complement sum to 16 bits.
#[inline(always)]
pub fn fold(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// Folds a 64-bit sum of 32-bit one's-complement terms to 16 bits.
#[inline(always)]
pub fn fold64(sum: u64) -> u16 {
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    fold(sum as u32)
}

/// What replacing the 32-bit word `old` by `new` adds to a one's-complement sum
/// (RFC 1624: `~m + m'`), to be added up in a `u64` and finished by [`fold64`].
#[inline(always)]
pub fn word_diff(old: u32, new: u32) -> u64 {
    u64::from(!old) + u64::from(new)
}

/// [`word_diff`] over the four words of an address.
#[inline(always)]
pub fn addr_diff(old: &lb_common::Addr, new: &lb_common::Addr) -> u64 {
    let (o, n) = (&old.0, &new.0);
    word_diff(o[0], n[0]) + word_diff(o[1], n[1]) + word_diff(o[2], n[2]) + word_diff(o[3], n[3])
}

/// An address's bytes for an IPv4 header field: the last four of the mapped form.
#[inline(always)]
pub fn v4_of(addr: &lb_common::Addr) -> [u8; 4] {
    addr.v4_word().to_ne_bytes()
}

/// Writes a whole IPv4 header without options at `ip`, its checksum computed from the
/// fields (a header made here, not rewritten: no incremental update to get wrong).
/// `df` sets don't-fragment; id 0; `src`/`dst` are IPv4 in network order.
///
/// # Safety
/// `ip` must point to 20 writable bytes (a bounds-checked header pointer).
#[inline(always)]
pub unsafe fn write_ipv4(
    ip: *mut crate::parse::Ipv4Hdr,
    tos: u8,
    tot_len: u16,
    df: bool,
    ttl_proto: [u8; 2],
    addrs: ([u8; 4], [u8; 4]),
) {
    let (s, d) = addrs;
    let frag: u16 = if df { 0x4000 } else { 0 };
    let words = [
        u32::from(u16::from_be_bytes([0x45, tos])),
        u32::from(tot_len),
        u32::from(frag),
        u32::from(u16::from_be_bytes(ttl_proto)),
        u32::from(u16::from_be_bytes([s[0], s[1]])),
        u32::from(u16::from_be_bytes([s[2], s[3]])),
        u32::from(u16::from_be_bytes([d[0], d[1]])),
        u32::from(u16::from_be_bytes([d[2], d[3]])),
    ];
    let check = !fold(words.iter().sum());
    // SAFETY: per the contract.
    unsafe {
        (*ip).version_ihl = 0x45;
        (*ip).tos = tos;
        (*ip).tot_len = tot_len.to_be_bytes();
        (*ip).id = [0, 0];
        (*ip).frag = frag.to_be_bytes();
        (*ip).ttl = ttl_proto[0];
        (*ip).proto = ttl_proto[1];
        (*ip).check = check.to_be_bytes();
        (*ip).src = s;
        (*ip).dst = d;
    }
}
