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
/// `df` sets don't-fragment; id 0; `src`/`dst` are the addresses' network-order bytes
/// as one native word each (`Addr::v4_word`).
///
/// The header is built as five 32-bit words in memory order and stored as five word
/// stores ([`crate::mem::store_u32`]), the checksum summed over the same words:
/// written field by field, as byte arrays, LLVM made a store per byte and a byte swap
/// per field, about twice the instructions on every encapsulated packet.
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
    addrs: (u32, u32),
) {
    let (src, dst) = addrs;
    // Bytes 0..4: version and header length, TOS, total length (network order).
    let w0 = u32::from_ne_bytes([0x45, tos, (tot_len >> 8) as u8, tot_len as u8]);
    // Bytes 4..8: id 0, flags and fragment offset (DF is bit 14 of the big-endian word).
    let w1 = u32::from_ne_bytes([0, 0, if df { 0x40 } else { 0 }, 0]);
    // Bytes 8..12: TTL, protocol, checksum (zero while summing).
    let w2 = u32::from_ne_bytes([ttl_proto[0], ttl_proto[1], 0, 0]);
    let sum = u64::from(w0) + u64::from(w1) + u64::from(w2) + u64::from(src) + u64::from(dst);
    // The sum of native-order words, stored back in native order (see the module).
    let check = !fold64(sum);
    let check = check.to_ne_bytes();
    let w2 = w2 | u32::from_ne_bytes([0, 0, check[0], check[1]]);
    let at = ip.cast::<u8>();
    // SAFETY: per the contract.
    unsafe {
        crate::mem::store_u32::<0>(at, w0);
        crate::mem::store_u32::<4>(at, w1);
        crate::mem::store_u32::<8>(at, w2);
        crate::mem::store_u32::<12>(at, src);
        crate::mem::store_u32::<16>(at, dst);
    }
}
