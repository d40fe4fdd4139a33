//! The open-file limit, which bounds the connections the proxy can hold: every client
//! connection is a file descriptor, and so is its backend connection.
//!
//! Service managers and shells start processes with a soft limit of 1024 (for the
//! sake of `select(2)`, which lbd does not use) under a much higher hard limit. At
//! 1024, about a thousand idle clients used up every descriptor and each new request
//! failed. lbd therefore raises its soft limit to the hard limit when it starts (no
//! privilege needed) and warns when `max_connections` still cannot fit.

/// Descriptors kept for everything but client connections: listeners, BPF maps and
/// programs, the admin socket, logs, health checks.
const RESERVE: u64 = 256;

/// The limit after [`raise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoFile {
    /// The soft limit before.
    pub was: u64,
    /// The soft limit now.
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises the soft open-file limit to the hard one.
///
/// # Errors
/// `getrlimit`/`setrlimit` failed.
pub fn raise() -> std::io::Result<NoFile> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    // `None` is RLIM_INFINITY.
    let value = |v: Option<u64>| v.unwrap_or(u64::MAX);
    let lim = getrlimit(Resource::Nofile);
    let (was, hard) = (value(lim.current), value(lim.maximum));
    if was < hard {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            },
        )?;
    }
    Ok(NoFile {
        was,
        soft: was.max(hard),
        hard,
    })
}

/// The descriptors `max_connections` proxied connections may need: a client and a
/// backend connection each, plus the reserve.
pub fn needed(max_connections: usize) -> u64 {
    (max_connections as u64)
        .saturating_mul(2)
        .saturating_add(RESERVE)
}

/// Raises the limit (see [`raise`]), logging the change, and warns when `config`'s
/// `node.l7.max_connections` may not fit under it.
pub fn raise_for(config: &lb_model::config::ValidConfig) {
    match raise() {
        Ok(limit) => {
            if limit.was < limit.soft {
                tracing::info!(
                    was = limit.was,
                    now = limit.soft,
                    "raised the open-file limit"
                );
            }
            let l7 = config
                .services
                .iter()
                .any(|s| s.mode == lb_model::config::ForwardingModeConfig::L7);
            let max = config.node.l7.max_connections;
            let need = needed(max);
            if l7 && need > limit.soft {
                tracing::warn!(
                    max_connections = max,
                    needed = need,
                    limit = limit.soft,
                    "node.l7.max_connections may need more open files than the limit: raise the \
                     hard limit (LimitNOFILE= in the unit, ulimit -Hn) or lower max_connections"
                );
            }
        }
        Err(e) => tracing::warn!(
            error = %e,
            "cannot raise the open-file limit, running with the one given"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit_and_is_idempotent() {
        let first = raise().expect("raise");
        assert_eq!(first.soft, first.hard);
        let again = raise().expect("raise");
        assert_eq!((again.was, again.soft), (first.soft, first.soft));
        assert_eq!(needed(10_000), 20_256);
    }
}
