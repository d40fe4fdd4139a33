//! The per-CPU flow cache in front of conntrack (`lb_common::FlowCacheSlot`): a
//! direct-mapped copy of the conntrack entries this CPU used last, so an established
//! packet reads an inlined array slot instead of hashing its key into the LRU.
//!
//! Contract (what `lookup::dsr` relies on):
//! - A slot answers only for its own key, only while its generation is the current
//!   one, and only until it expires ([`FLOW_CACHE_TTL_NS`]). Whoever removes or rewrites
//!   a conntrack entry stores a new random generation after doing so ([`invalidate`]
//!   here, `MapSet::invalidate_flow_cache` in the agent), so no CPU answers from a slot
//!   filled before that.
//! - An expired slot sends its packet to conntrack, which marks the entry used (the
//!   LRU would otherwise see a hot flow as idle). An entry the table lost meanwhile
//!   (evicted: removals change the generation) is put back from the slot, if the slot
//!   expired no more than [`FLOW_CACHE_KEEP_NS`] ago; older slots are misses.
//! - Everything found here is checked as a conntrack entry is (`lookup::valid`).

use aya_ebpf::helpers::bpf_get_prandom_u32;
use lb_common::{
    FlowEntry, FlowKey,
    maps::{FLOW_CACHE_KEEP_NS, FLOW_CACHE_TTL_NS, FlowCacheSlot, flow_cache_slot},
};

use crate::maps::{FLOW_CACHE, FLOW_CACHE_GEN};

/// What a slot holds for a key.
pub enum Probe {
    /// The key's entry, fresh: use it.
    Fresh(FlowEntry),
    /// The key's entry, expired no more than [`FLOW_CACHE_KEEP_NS`] ago: a flow still
    /// live, whose conntrack entry it can put back.
    Expired(FlowEntry),
    /// Another key, an old generation, empty, or expired for longer.
    Miss,
}

/// A key's slot in this CPU's cache, with the generation this packet saw.
pub struct Slot {
    ptr: *mut FlowCacheSlot,
    generation: u64,
}

impl Slot {
    /// `key`'s slot on this CPU; `None` only if the cache's maps are missing.
    #[inline(always)]
    pub fn of(key: &FlowKey) -> Option<Self> {
        // Read before any conntrack lookup of this packet: a slot filled from that
        // lookup then carries a generation no newer than the table it saw.
        let generation = *FLOW_CACHE_GEN.get(0)?;
        let ptr = FLOW_CACHE.get_ptr_mut(flow_cache_slot(key))?;
        Some(Self { ptr, generation })
    }

    /// What the slot holds for `key` at `now` (`forward::now`): one read of the slot
    /// answers both the fast path and the put-back.
    #[inline(always)]
    pub fn probe(&self, key: &FlowKey, now: u64) -> Probe {
        // SAFETY: this CPU's slot, valid for this run; no other CPU writes it.
        let slot = unsafe { &*self.ptr };
        if slot.generation != self.generation || !slot.key.same_flow(key) {
            Probe::Miss
        } else if now < slot.expires_ns {
            Probe::Fresh(slot.entry)
        } else if now < slot.expires_ns + FLOW_CACHE_KEEP_NS {
            Probe::Expired(slot.entry)
        } else {
            Probe::Miss
        }
    }

    /// Caches `entry` (just found in, or written to, conntrack) for `key`.
    #[inline(always)]
    pub fn fill(&self, key: &FlowKey, entry: &FlowEntry, now: u64) {
        // SAFETY: as in `probe`; the slot and the arguments do not overlap.
        unsafe {
            crate::mem::store(&raw mut (*self.ptr).key, key);
            crate::mem::store(&raw mut (*self.ptr).entry, entry);
            (*self.ptr).expires_ns = now + FLOW_CACHE_TTL_NS;
            (*self.ptr).generation = self.generation;
        }
    }
}

/// Invalidates every CPU's slots: called after the data plane removed a conntrack
/// entry (rare: a stale entry, or a SYN for a backend that takes no new flows).
#[inline(always)]
pub fn invalidate() {
    if let Some(generation) = FLOW_CACHE_GEN.get_ptr_mut(0) {
        // SAFETY: helpers without arguments.
        let fresh =
            unsafe { u64::from(bpf_get_prandom_u32()) << 32 | u64::from(bpf_get_prandom_u32()) };
        // SAFETY: the map's value, valid for this run; an aligned 8-byte store, so a
        // racing writer's store is seen whole or not at all.
        unsafe { core::ptr::write_volatile(generation, fresh) };
    }
}
