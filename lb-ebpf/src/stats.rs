//! Per-CPU counters: no atomics needed, userspace sums the CPUs.

use lb_common::Counter;

use crate::maps::{COUNTERS, VIP_STATS};

/// Adds one to a global counter.
#[inline(always)]
pub fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: the map returned a valid pointer to this CPU's slot.
        unsafe { *slot += 1 };
    }
}

/// Accounts one forwarded packet of `bytes` bytes to a service.
#[inline(always)]
pub fn count_vip(service_id: u32, bytes: usize) {
    if let Some(stats) = VIP_STATS.get_ptr_mut(service_id) {
        // SAFETY: the map returned a valid pointer to this CPU's slot.
        unsafe {
            (*stats).packets += 1;
            (*stats).bytes += bytes as u64;
        }
    }
}
