//! The `Date` field of the proxy's own HTTP/1 answers (a backend's answer keeps its
//! own): the text changes once a second, so each worker formats it once a second and
//! copies it into every head, as hyper's server did.
//!
//! The second is read from `CLOCK_REALTIME_COARSE` (the kernel's last tick, a copy
//! from the vDSO page: a few nanoseconds), not `SystemTime::now`, which reads and
//! scales the cycle counter for a precision the field does not have.

use std::{
    cell::RefCell,
    time::{Duration, UNIX_EPOCH},
};

/// `Sun, 06 Nov 1994 08:49:37 GMT`: the length of every IMF-fixdate.
pub(crate) const LEN: usize = 29;

struct Cached {
    second: u64,
    text: [u8; LEN],
}

thread_local! {
    static CACHED: RefCell<Cached> = const { RefCell::new(Cached { second: u64::MAX, text: [b' '; LEN] }) };
}

/// Seconds since the Unix epoch, to the kernel's tick.
fn now_seconds() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Through the C library, as `coarse::now` (valgrind cannot follow rustix's own
    // vDSO parse). SAFETY: `t` is a valid, writable timespec and
    // CLOCK_REALTIME_COARSE exists on every kernel lbd runs on.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(t.tv_sec).unwrap_or(0)
}

/// Appends the current date's text (no field name, no CRLF).
pub(crate) fn extend(out: &mut Vec<u8>) {
    let second = now_seconds();
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        if c.second != second {
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
            if let Ok(t) = <[u8; LEN]>::try_from(text.as_bytes()) {
                c.text = t;
                c.second = second;
            }
        }
        out.extend_from_slice(&c.text);
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_now_as_an_http_date() {
        let mut out = Vec::new();
        super::extend(&mut out);
        let text = std::str::from_utf8(&out).expect("ascii");
        let then = httpdate::parse_http_date(text).expect("an IMF-fixdate");
        let now = std::time::SystemTime::now();
        let apart = now.duration_since(then).unwrap_or_else(|e| e.duration());
        assert!(
            apart < std::time::Duration::from_secs(3),
            "{text} vs {now:?}"
        );
        // The second call copies the cached text.
        let mut again = Vec::new();
        super::extend(&mut again);
        assert_eq!(again.len(), super::LEN);
    }
}
