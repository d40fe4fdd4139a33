//! Checksum helpers for in-place rewrites. The per-word work is done by the kernel's
//! `bpf_csum_diff` (see `nat.rs`); these finish its 32-bit sums.

/// Folds a 32-bit one's-complement sum to 16 bits.
#[inline(always)]
pub fn fold(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// The 16-byte form's significant bytes for a header field: IPv4 uses the last four.
#[inline(always)]
pub fn v4_of(addr: &[u8; 16]) -> [u8; 4] {
    [addr[12], addr[13], addr[14], addr[15]]
}
