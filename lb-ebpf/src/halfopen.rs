//! The half-open (embryonic) table's bucket for a packet (`lb_common::halfopen`).
//!
//! Contract (what `lookup::dsr` relies on):
//! - [`Bucket::find`] answers only for a way holding the packet's own key whose check
//!   word matches: a way another CPU was writing at the same time reads as a miss.
//! - [`Bucket::insert`] writes a way whole: a free way, else the one written longest
//!   ago (a caller that found a stale way for the key frees it first). The check goes
//!   last, so a reader racing the write sees the old check against new fields (a
//!   miss); whatever order another CPU sees the stores in, a mix of two writes fails
//!   the check, which covers every word.
//! - [`Bucket::remove`] frees a way by its check word alone (one aligned store).

use lb_common::{
    FlowEntry, FlowKey,
    halfopen::{self, WAYS},
};

use crate::maps::{EMBRYONIC, LB_EMBRYONIC_MASK, LB_EMBRYONIC_SEED};

/// A key's bucket in the half-open table.
pub struct Bucket {
    ptr: *mut halfopen::Bucket,
    seed: u32,
}

/// A way of a [`Bucket`] that held the key.
#[derive(Clone, Copy)]
pub struct Found {
    way: usize,
    /// The way's check word when found: the flow's own, and no other's.
    check: u32,
    pub entry: FlowEntry,
}

impl Bucket {
    /// `key`'s bucket; `None` only if the table is missing or smaller than the mask
    /// the program was loaded with, which the agent never does (it sizes the table and
    /// sets the mask together, and replaces a pinned table of another size).
    #[inline(always)]
    pub fn of(key: &FlowKey) -> Option<Self> {
        // SAFETY: globals of this object, constant after load; the volatile reads keep
        // the compiler from folding the values set at build time.
        let (mask, seed) = unsafe {
            (
                core::ptr::read_volatile(&LB_EMBRYONIC_MASK),
                core::ptr::read_volatile(&LB_EMBRYONIC_SEED),
            )
        };
        let ptr = EMBRYONIC.get_ptr_mut(halfopen::bucket_of(seed, mask, key))?;
        Some(Self { ptr, seed })
    }

    /// The way holding `key`, if one does (see the module's contract).
    #[inline(always)]
    pub fn find(&self, key: &FlowKey) -> Option<Found> {
        for i in 0..WAYS {
            // SAFETY: the map's value, valid for this run. Other CPUs may write it: the
            // check word is read first and the entry after the key compared equal, and
            // only a check that matches the packet's key with the entry and stamp read
            // makes a hit, so a way written meanwhile reads as a miss.
            unsafe {
                let way = &raw const (*self.ptr).ways[i];
                let check = core::ptr::read_volatile(&raw const (*way).check);
                if check != 0 && same_flow(&(*way).key, key) {
                    let entry = core::ptr::read_volatile(&raw const (*way).entry);
                    let stamp = core::ptr::read_volatile(&raw const (*way).stamp);
                    let whole = check == halfopen::check(self.seed, key, &entry, stamp);
                    return whole.then_some(Found {
                        way: i,
                        check,
                        entry,
                    });
                }
            }
        }
        None
    }

    /// Frees the way `found` came from, unless another flow was written over it since
    /// (its check word is then another's): a SYN on another CPU may have taken it as
    /// the oldest way between `find` and here.
    #[inline(always)]
    pub fn remove(&self, found: &Found) {
        if found.way < WAYS {
            // SAFETY: as in `find`; aligned 4-byte accesses. The window between the
            // read and the store is a few instructions, not closed: without an atomic
            // compare-and-swap a write landing in it is cleared too (that flow then
            // goes by the table, unpinned, as an evicted one would).
            unsafe {
                let check = &raw mut (*self.ptr).ways[found.way].check;
                if core::ptr::read_volatile(check) == found.check {
                    core::ptr::write_volatile(check, 0);
                }
            }
        }
    }

    /// Writes `key`'s flow with `entry` at `now` (ns) into the way
    /// [`halfopen::victim`] picks: the first free way, else the one written longest ago.
    /// A caller that found a stale way for the key frees it first
    /// ([`Bucket::remove`]), so the flow takes that way rather than a second one.
    #[inline(always)]
    pub fn insert(&self, key: &FlowKey, entry: &FlowEntry, now: u64) {
        let stamp = halfopen::stamp(now);
        let mut ways = [(0u32, 0u32); WAYS];
        for (i, w) in ways.iter_mut().enumerate() {
            // SAFETY: as in `find`: plain reads of two words.
            *w = unsafe { ((*self.ptr).ways[i].check, (*self.ptr).ways[i].stamp) };
        }
        let at = halfopen::victim(ways, stamp);
        if at >= WAYS {
            return;
        }
        let check = halfopen::check(self.seed, key, entry, stamp);
        // SAFETY: as in `find`; the arguments are the stack's, not the map's.
        unsafe {
            let way = &raw mut (*self.ptr).ways[at];
            crate::mem::store(&raw mut (*way).key, key);
            crate::mem::store(&raw mut (*way).entry, entry);
            (*way).stamp = stamp;
            // The check last: the compiler keeps the stores above before it.
            core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
            core::ptr::write_volatile(&raw mut (*way).check, check);
        }
    }
}

/// Whether `a` (a way's key, in the map) is `b`, with one branch: a branch on a key
/// field splits the verifier's states for the rest of the packet's path (with
/// `FlowKey::same_flow` here, and a hash that branched on IPv4, `lb_xdp` took 806,322
/// instructions to verify, five times what it takes without either). The fields that
/// differ most between flows come first.
#[inline(always)]
fn same_flow(a: &FlowKey, b: &FlowKey) -> bool {
    let mut d = a.src.0[3] ^ b.src.0[3];
    d |= (u32::from(a.src_port_be) | u32::from(a.dst_port_be) << 16)
        ^ (u32::from(b.src_port_be) | u32::from(b.dst_port_be) << 16);
    d |= a.dst.0[3] ^ b.dst.0[3];
    let mut i = 0;
    while i < 3 {
        d |= (a.src.0[i] ^ b.src.0[i]) | (a.dst.0[i] ^ b.dst.0[i]);
        i += 1;
    }
    d |= u32::from(a.proto ^ b.proto);
    d == 0
}
