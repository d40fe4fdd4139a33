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

/// Stores `value` at `at + OFF` as one 32-bit store instruction, whatever `at`'s
/// alignment.
///
/// Packet headers sit at any offset (the IPv4 header of an Ethernet frame is 2 bytes
/// off a word boundary), so their fields are byte arrays; a store to one, or an
/// unaligned store, is split by LLVM's BPF backend into a store per byte (and the
/// shifts that feed them). The instruction itself takes any alignment on packet
/// memory where the CPU does (x86-64, arm64: the verifier enforces alignment there
/// only under `BPF_F_STRICT_ALIGNMENT`). LLVM's `allows-misaligned-mem-access`
/// feature would emit such stores everywhere, but it also merges stack stores into
/// misaligned ones, which the verifier always refuses; so they are written out here,
/// as inline assembly (nightly's `asm_experimental_arch`, on the nightly the BPF
/// build needs anyway for `build-std`).
///
/// # Safety
/// `at + OFF` must be valid for a write of four bytes, in packet memory.
#[inline(always)]
pub unsafe fn store_u32<const OFF: i16>(at: *mut u8, value: u32) {
    // SAFETY: per the contract; the instruction touches only those four bytes.
    unsafe {
        core::arch::asm!(
            "*(u32 *)({p} + {off}) = {v}",
            p = in(reg) at,
            off = const OFF,
            v = in(reg) u64::from(value),
            options(nostack, preserves_flags)
        );
    }
}

/// As [`store_u32`], two bytes.
///
/// # Safety
/// `at + OFF` must be valid for a write of two bytes, in packet memory.
#[inline(always)]
pub unsafe fn store_u16<const OFF: i16>(at: *mut u8, value: u16) {
    // SAFETY: per the contract; the instruction touches only those two bytes.
    unsafe {
        core::arch::asm!(
            "*(u16 *)({p} + {off}) = {v}",
            p = in(reg) at,
            off = const OFF,
            v = in(reg) u64::from(value),
            options(nostack, preserves_flags)
        );
    }
}

/// Stores `src` and `dst` as the addresses of the IPv6 header at `ip` (bytes 8..40),
/// as [`store_u32`] stores: an address's words are its network-order bytes.
///
/// # Safety
/// `ip` must point to a bounds-checked IPv6 header in packet memory.
#[inline(always)]
pub unsafe fn store_ipv6_addrs(ip: *mut u8, src: &lb_common::Addr, dst: &lb_common::Addr) {
    let (s, d) = (&src.0, &dst.0);
    // SAFETY: per the contract.
    unsafe {
        store_u32::<8>(ip, s[0]);
        store_u32::<12>(ip, s[1]);
        store_u32::<16>(ip, s[2]);
        store_u32::<20>(ip, s[3]);
        store_u32::<24>(ip, d[0]);
        store_u32::<28>(ip, d[1]);
        store_u32::<32>(ip, d[2]);
        store_u32::<36>(ip, d[3]);
    }
}
