//! Limits on what a client can make lbd do over and over: a log line a client can
//! trigger is written at most once a second per call site (with a count of those
//! left out, the `suppressed` field), and a failing `accept` backs off instead of
//! spinning.
//!
//! Without them one client can fill the disk with log lines, and a listener that
//! fails to accept (no file descriptor left: `EMFILE`) wakes its loop again at once,
//! since the connection waiting in the backlog makes it readable again — a busy loop
//! that once wrote 22 M log lines in 25 s. Used by the proxy's listeners, the admin
//! socket and the metrics listener.

use std::{
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// Milliseconds since the first use, for limits that live in statics.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let ms = START.get_or_init(Instant::now).elapsed().as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// At most one event per interval; the others are counted. `const`, so a call site
/// keeps one in a `static`.
#[derive(Debug)]
pub struct Throttle {
    interval_ms: u64,
    /// When the last event passed, in [`now_ms`] + 1 (0: never).
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    /// One event per second.
    pub const fn per_second() -> Self {
        Self {
            interval_ms: 1000,
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when this event may pass, with `n` events held back since the last
    /// one that did; `None` when it is held back.
    pub fn pass(&self) -> Option<u64> {
        let now = now_ms() + 1;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now < last.saturating_add(self.interval_ms) {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // One of several racing threads wins the slot.
        if self
            .last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

/// The wait after failed `accept` calls: 10 ms after the first, doubling to 1 s;
/// reset by a success.
#[derive(Debug)]
pub struct AcceptBackoff {
    next: Duration,
    log: Throttle,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        Self {
            next: Self::FIRST,
            log: Throttle::per_second(),
        }
    }
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MOST: Duration = Duration::from_secs(1);

    /// An accept succeeded.
    pub fn reset(&mut self) {
        self.next = Self::FIRST;
    }

    /// An accept on lbd's `listener` socket (`admin`, `metrics`, `handover`; see
    /// `lb_userspace::logging`) failed with `error`: logs a warning (at most once a
    /// second, with `suppressed`) and returns how long to wait before the next try.
    pub fn failed(&mut self, listener: &str, error: &std::io::Error) -> Duration {
        let (wait, log) = self.failed_quietly();
        if let Some(suppressed) = log {
            tracing::warn!(
                listener,
                %error,
                retry_ms = wait.as_millis() as u64,
                suppressed,
                "accept failed, waiting before the next"
            );
        }
        wait
    }

    /// Like [`AcceptBackoff::failed`] for a caller that logs with fields of its own:
    /// the wait, and `Some(suppressed)` when a line may be logged now.
    pub fn failed_quietly(&mut self) -> (Duration, Option<u64>) {
        let wait = self.next;
        self.next = (self.next * 2).min(Self::MOST);
        (wait, self.log.pass())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_passes_one_event_a_second_and_counts_the_rest() {
        let t = Throttle::per_second();
        assert_eq!(t.pass(), Some(0));
        for _ in 0..1000 {
            assert_eq!(t.pass(), None);
        }
        std::thread::sleep(Duration::from_millis(1001));
        assert_eq!(t.pass(), Some(1000));
        assert_eq!(t.pass(), None);
    }

    #[test]
    fn accept_backoff_doubles_to_a_second_and_resets() {
        let mut b = AcceptBackoff::default();
        let e = std::io::Error::from_raw_os_error(24 /* EMFILE */);
        let waits: Vec<u128> = (0..9).map(|_| b.failed("t", &e).as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.reset();
        assert_eq!(b.failed("t", &e).as_millis(), 10);
    }
}
