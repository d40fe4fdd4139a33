//! Copies into map values and helper arguments that stay word copies.
//!
//! A struct assigned through a raw pointer (`(*slot).key = pkt.key`) reaches LLVM as
//! a copy to a temporary and a copy from it; LLVM merges the two into one `memmove`
//! when it cannot prove the pointers apart, and the BPF backend, which expands
//! `memcpy` inline, calls compiler-builtins' `memmove` for it: a byte loop of six
//! instructions per byte (a 40-byte flow key cost ~40 ns per packet). One
//! `copy_nonoverlapping` says the two do not overlap, and stays a `memcpy` that is
//! expanded into loads and stores of the type's alignment.

/// Writes `*value` to `dst`.
///
/// # Safety
/// `dst` must be valid for a write of `T` (a map value or a stack slot of this run)
/// and must not overlap `value`.
#[inline(always)]
pub unsafe fn store<T: Copy>(dst: *mut T, value: &T) {
    // SAFETY: per the contract.
    unsafe { core::ptr::copy_nonoverlapping(value, dst, 1) }
}
