//! Measuring the control plane: a counting allocator (declare it with
//! `#[global_allocator]` in a benchmark binary), wall/CPU/allocation costs of a piece
//! of work, and peak RSS; and, for every benchmark that compares subjects side by
//! side, the order they run in ([`rotated`]).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    time::{Duration, Instant},
};

/// Counts every allocation (and the growth of every reallocation) on top of the
/// system allocator.
pub struct Counting;

/// Allocations so far.
pub static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Bytes requested so far.
pub static BYTES: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// Allocations made by this thread: what a test of one thread's work reads, so
    /// that the test harness's own threads cannot add to it.
    static THREAD_ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Allocations (and reallocations) made by the calling thread so far.
pub fn thread_allocs() -> u64 {
    THREAD_ALLOCS.try_with(std::cell::Cell::get).unwrap_or(0)
}

fn count_thread() {
    let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged;
// the counters are plain atomics and never affect the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        count_thread();
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        count_thread();
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        count_thread();
        BYTES.fetch_add(new_size.saturating_sub(layout.size()) as u64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Wall time, CPU time and allocations over a piece of work.
#[derive(Clone, Copy, Debug)]
pub struct Cost {
    /// Wall-clock time.
    pub wall: Duration,
    /// User + system CPU time.
    pub cpu: Duration,
    /// Allocations (and reallocations).
    pub allocs: u64,
    /// Bytes requested.
    pub bytes: u64,
}

impl Cost {
    /// Runs `work` and measures it.
    pub fn measure<T>(work: impl FnOnce() -> T) -> (T, Cost) {
        let meter = Meter::start();
        let out = work();
        (out, meter.stop())
    }

    /// One report line.
    pub fn line(&self, what: &str) -> String {
        format!(
            "{what:<44} wall {:>9.3} ms  cpu {:>9.3} ms  {:>9} allocs  {:>9.2} MB",
            ms(self.wall),
            ms(self.cpu),
            self.allocs,
            self.bytes as f64 / 1e6
        )
    }
}

/// A measurement under way, for work that cannot be wrapped in a closure (async).
#[derive(Debug)]
pub struct Meter {
    allocs: u64,
    bytes: u64,
    cpu: Duration,
    wall: Instant,
}

impl Meter {
    /// Starts measuring now.
    pub fn start() -> Self {
        Self {
            allocs: ALLOCS.load(Relaxed),
            bytes: BYTES.load(Relaxed),
            cpu: cpu_time(),
            wall: Instant::now(),
        }
    }

    /// What the work since [`Meter::start`] cost.
    pub fn stop(&self) -> Cost {
        Cost {
            wall: self.wall.elapsed(),
            cpu: cpu_time().saturating_sub(self.cpu),
            allocs: ALLOCS.load(Relaxed) - self.allocs,
            bytes: BYTES.load(Relaxed) - self.bytes,
        }
    }
}

/// Milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// User + system CPU time of this process.
pub fn cpu_time() -> Duration {
    let u = rusage();
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Peak resident set size of this process, in bytes.
pub fn peak_rss() -> u64 {
    rusage().ru_maxrss as u64 * 1024
}

fn rusage() -> libc::rusage {
    // SAFETY: getrusage writes a whole `rusage` into the zeroed value we pass.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    }
}

/// The order in which round `round` measures `n` subjects compared side by side: each
/// round starts one subject later. Back-to-back runs on a shared machine were seen to
/// favour one place in the order (the first of the L7 proxies by up to 15% of CPU per
/// request, the second of two BPF objects by up to 30%); rotating gives every subject
/// each place in turn.
pub fn rotated(n: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (k + round) % n)
}
