//! The hot paths of the proxy allocate nothing once their buffers have grown: endpoint
//! selection (`select`) and access-log lines (`access_log`). Both run for every
//! request on every worker; an allocation there would put the allocator's lock and
//! cache misses on the hot path.
//!
//! A test binary of its own, so that the counting allocator sees no other test's work;
//! in `lb-l7`, so a plain `cargo test` on stable runs it as any user.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

mod access_log;
mod select;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the tally is a
// const-initialised thread-local Cell, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations made so far by the calling thread (tests run on threads of their own,
/// so one test's count is never another's).
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}
