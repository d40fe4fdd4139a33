//! Per-CPU counters: no atomics needed, userspace sums the CPUs.

use lb_common::{Counter, TrafficStats};

use crate::maps::{BACKEND_STATS, COUNTERS, VIP_STATS};

/// Adds one to a global counter.
#[inline(always)]
pub fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: the map returned a valid pointer to this CPU's slot.
        unsafe { *slot += 1 };
    }
}

/// Accounts one forwarded packet of `bytes` bytes to a service and a backend.
#[inline(always)]
pub fn count_forwarded(service_id: u32, backend_id: u32, bytes: u64, new_flow: bool) {
    if let Some(stats) = VIP_STATS.get_ptr_mut(service_id) {
        add(stats, bytes, new_flow);
    }
    if let Some(stats) = BACKEND_STATS.get_ptr_mut(backend_id) {
        add(stats, bytes, new_flow);
    }
}

#[inline(always)]
fn add(stats: *mut TrafficStats, bytes: u64, new_flow: bool) {
    // SAFETY: the map returned a valid pointer to this CPU's slot.
    unsafe {
        (*stats).packets += 1;
        (*stats).bytes += bytes;
        (*stats).new_flows += u64::from(new_flow);
    }
}
