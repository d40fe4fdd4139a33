//! A monotonic clock read to the kernel's tick (`CLOCK_MONOTONIC_COARSE`, 1-4 ms),
//! for deadlines of seconds that are checked on every request: how long a client
//! connection has been idle ([`super::activity`]) and how long a pooled backend
//! connection has been ([`super::upstream`]).
//!
//! Why not `Instant`: it reads the cycle counter and scales it, 25 ns a read on the
//! development machine against 5-6 ns for the coarse clock, which copies the kernel's
//! last tick from the vDSO page; a proxied request made three such reads for these
//! alone. Its values are only ever compared with each other, never with an
//! `Instant`.

use std::time::Duration;

/// Time since an unspecified start (boot), to within the kernel's tick; never goes
/// back.
#[inline]
pub fn now() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Through the C library rather than rustix: rustix reads the vDSO's ELF image
    // itself, which under valgrind (the instruction counts of `lb-l7bench`) is not
    // mapped where the auxiliary vector says, and the read faults.
    // SAFETY: `t` is a valid, writable timespec, and CLOCK_MONOTONIC_COARSE exists
    // on every kernel lbd runs on (2.6.32 on).
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    if rc != 0 {
        return Duration::ZERO;
    }
    // The kernel keeps both fields in range (seconds since boot, nanoseconds below
    // a second); the conversions only guard against a broken clock.
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::now;
    use std::time::{Duration, Instant};

    #[test]
    fn advances_with_the_fine_clock() {
        let (coarse, fine) = (now(), Instant::now());
        std::thread::sleep(Duration::from_millis(60));
        let (passed, fine_passed) = (now() - coarse, fine.elapsed());
        // One tick of slack each way (a tick is at most 10 ms at HZ=100).
        assert!(
            passed + Duration::from_millis(10) >= fine_passed,
            "{passed:?} vs {fine_passed:?}"
        );
        assert!(
            passed <= fine_passed + Duration::from_millis(10),
            "{passed:?} vs {fine_passed:?}"
        );
        assert!(now() >= coarse + passed);
    }
}
