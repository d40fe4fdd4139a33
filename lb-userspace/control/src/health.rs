//! Active health checks: TCP connect or HTTP GET, with rise/fall thresholds.
//!
//! A backend starts healthy (a fresh node must not blackhole a service while its first
//! probes run). `fall` consecutive failures make it unhealthy: it gets no new flows,
//! its established flows continue. `rise` consecutive successes make it healthy again,
//! and its fade-in ramp restarts from that moment.

use std::{collections::HashMap, net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// What a probe does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Probe {
    /// A TCP connection is accepted.
    Tcp,
    /// `GET path` answers with a status in `expect`.
    Http {
        /// Request path.
        path: String,
        /// Accepted statuses, inclusive.
        expect: (u16, u16),
    },
}

/// One health probe to run repeatedly.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProbeTarget {
    /// Service name.
    pub service: String,
    /// Backend address (the key results are reported under).
    pub backend: std::net::IpAddr,
    /// Where to probe: the backend's address, or for `ipip`/`gue` services the VIP
    /// (the probe goes through the tunnel, as clients' packets do).
    pub target: SocketAddr,
    /// The socket mark of a probe through the tunnel (`lb_common::probe::probe_mark`:
    /// the node's policy rule and `lb_probe` act on it); `None` for a direct probe.
    pub mark: Option<u32>,
    /// What to check.
    pub probe: Probe,
    /// Time between probes.
    pub interval: Duration,
    /// Time a probe may take.
    pub timeout: Duration,
}

/// A probe result as reported to the agent.
pub type Report = (String, std::net::IpAddr, Outcome);

/// Runs one task per [`ProbeTarget`] on the current tokio runtime, each probing on
/// its interval and sending every result to a channel.
#[derive(Debug, Default)]
pub struct Prober {
    running: HashMap<ProbeTarget, tokio::task::JoinHandle<()>>,
    /// Keys each target's first-probe delay (random per process, stable per target).
    jitter: std::hash::RandomState,
}

/// What a [`Prober::sync`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeChanges {
    /// Probes started (new targets, or targets whose check changed).
    pub started: usize,
    /// Probes stopped (targets gone, or whose check changed).
    pub stopped: usize,
}

impl Prober {
    /// Makes the running probes exactly `targets`. Probes of targets that are gone
    /// stop; new targets start, each first probed at a point within its interval
    /// chosen by hashing the target, so that a thousand backends added at once are not
    /// all connected to in the same instant (nor, after a restart, every backend of
    /// the node); targets that stay keep running undisturbed, on their own schedule.
    /// A target whose check changed (port, kind, interval, timeout) is a new target.
    pub fn sync(
        &mut self,
        targets: &[ProbeTarget],
        reports: &tokio::sync::mpsc::UnboundedSender<Report>,
    ) -> ProbeChanges {
        let wanted: std::collections::HashSet<&ProbeTarget> = targets.iter().collect();
        let before = self.running.len();
        self.running.retain(|t, task| {
            let keep = wanted.contains(t);
            if !keep {
                task.abort();
            }
            keep
        });
        let stopped = before - self.running.len();
        let mut started = 0;
        for t in targets {
            if self.running.contains_key(t) {
                continue;
            }
            let delay = self.first_delay(t);
            let (target, tx) = (t.clone(), reports.clone());
            let task = tokio::spawn(async move {
                let first = tokio::time::Instant::now() + delay;
                let mut every = tokio::time::interval_at(first, target.interval);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    let outcome =
                        probe(target.target, target.mark, &target.probe, target.timeout).await;
                    if tx
                        .send((target.service.clone(), target.backend, outcome))
                        .is_err()
                    {
                        return;
                    }
                }
            });
            self.running.insert(t.clone(), task);
            started += 1;
        }
        ProbeChanges { started, stopped }
    }

    /// Probes running now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether no probe runs.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// How long after it starts `target` is first probed: a fraction of its interval
    /// taken from a hash of the target.
    fn first_delay(&self, target: &ProbeTarget) -> Duration {
        use std::hash::BuildHasher as _;
        let nanos = u64::try_from(target.interval.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.jitter.hash_one(target) % nanos)
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
    }
}

/// The result of one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The check passed.
    Up,
    /// The check failed, and why (for logs).
    Down(String),
}

/// Runs one probe against `target` within `timeout`, from a socket with `mark` if
/// given (`SO_MARK`, which needs `CAP_NET_ADMIN`).
pub async fn probe(
    target: SocketAddr,
    mark: Option<u32>,
    check: &Probe,
    timeout: Duration,
) -> Outcome {
    match tokio::time::timeout(timeout, run(target, mark, check)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Down(format!("no answer within {timeout:?}")),
    }
}

/// Connects to `target`, from a socket with `mark` if given.
async fn connect(target: SocketAddr, mark: Option<u32>) -> std::io::Result<TcpStream> {
    let Some(mark) = mark else {
        return TcpStream::connect(target).await;
    };
    let domain = socket2::Domain::for_address(target);
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_mark(mark)?;
    socket.set_nonblocking(true)?;
    let socket = tokio::net::TcpSocket::from_std_stream(socket.into());
    socket.connect(target).await
}

async fn run(target: SocketAddr, mark: Option<u32>, check: &Probe) -> Outcome {
    let mut conn = match connect(target, mark).await {
        Ok(c) => c,
        Err(e) => return Outcome::Down(format!("connect: {e}")),
    };
    let Probe::Http { path, expect } = check else {
        return Outcome::Up;
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: lbd-health\r\nConnection: close\r\n\r\n"
    );
    if let Err(e) = conn.write_all(request.as_bytes()).await {
        return Outcome::Down(format!("write: {e}"));
    }
    // The status line is all we need; read until it is complete or 1 KiB came.
    let mut buf = Vec::with_capacity(128);
    let mut chunk = [0u8; 256];
    while !buf.contains(&b'\n') && buf.len() < 1024 {
        match conn.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Outcome::Down(format!("read: {e}")),
        }
    }
    match status_of(&buf) {
        Some(s) if (expect.0..=expect.1).contains(&s) => Outcome::Up,
        Some(s) => Outcome::Down(format!("status {s}, expected {}-{}", expect.0, expect.1)),
        None => Outcome::Down("no HTTP status line".into()),
    }
}

/// The status code of an HTTP/1.x response's first line.
fn status_of(response: &[u8]) -> Option<u16> {
    let line = response.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// Rise/fall bookkeeping for one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// Whether the backend takes new flows.
    pub healthy: bool,
    streak: u32,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            healthy: true,
            streak: 0,
        }
    }
}

impl Health {
    /// Records one probe result; returns the new state if it changed.
    pub fn observe(&mut self, up: bool, rise: u32, fall: u32) -> Option<bool> {
        if up == self.healthy {
            self.streak = 0;
            return None;
        }
        self.streak += 1;
        let needed = if up { rise } else { fall };
        if self.streak >= needed.max(1) {
            self.healthy = up;
            self.streak = 0;
            Some(up)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fall_then_rise_thresholds() {
        let mut h = Health::default();
        assert!(h.healthy, "starts healthy");
        assert_eq!(h.observe(false, 2, 3), None);
        assert_eq!(h.observe(false, 2, 3), None);
        assert_eq!(
            h.observe(true, 2, 3),
            None,
            "a success resets the failure streak"
        );
        assert_eq!(h.observe(false, 2, 3), None);
        assert_eq!(h.observe(false, 2, 3), None);
        assert_eq!(
            h.observe(false, 2, 3),
            Some(false),
            "third consecutive failure"
        );
        assert_eq!(h.observe(true, 2, 3), None);
        assert_eq!(
            h.observe(true, 2, 3),
            Some(true),
            "second consecutive success"
        );
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            status_of(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_of(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_of(b""), None);
    }

    fn serve_once(response: &'static str) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            if let Ok((mut conn, _)) = listener.accept() {
                use std::io::{Read, Write};
                let mut buf = [0u8; 512];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(response.as_bytes());
            }
        });
        addr
    }

    #[tokio::test]
    async fn real_probes_against_loopback_servers() {
        let ok = Probe::Http {
            path: "/healthz".into(),
            expect: (200, 399),
        };
        let t = Duration::from_secs(2);
        assert_eq!(
            probe(serve_once("HTTP/1.1 204 No Content\r\n\r\n"), None, &ok, t).await,
            Outcome::Up
        );
        let down = probe(serve_once("HTTP/1.1 500 Oops\r\n\r\n"), None, &ok, t).await;
        assert_eq!(down, Outcome::Down("status 500, expected 200-399".into()));
        assert_eq!(
            probe(serve_once(""), None, &Probe::Tcp, t).await,
            Outcome::Up
        );
        // Nothing listens on a port we just released.
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr");
        assert!(
            matches!(probe(free, None, &Probe::Tcp, t).await, Outcome::Down(e) if e.starts_with("connect"))
        );
        // A server that accepts but never answers times out.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let silent_addr = silent.local_addr().expect("addr");
        let out = probe(silent_addr, None, &ok, Duration::from_millis(200)).await;
        assert_eq!(out, Outcome::Down("no answer within 200ms".into()));
        drop(silent);
    }

    fn target(last: u8, port: u16) -> ProbeTarget {
        let backend = std::net::IpAddr::from([198, 18, 0, last]);
        ProbeTarget {
            service: "web".into(),
            backend,
            target: SocketAddr::new(backend, port),
            mark: None,
            probe: Probe::Tcp,
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(1),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_changed_probe_set_restarts_only_what_changed() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut prober = Prober::default();
        let first: Vec<ProbeTarget> = (11..=40).map(|b| target(b, 80)).collect();
        assert_eq!(
            prober.sync(&first, &tx),
            ProbeChanges {
                started: 30,
                stopped: 0
            }
        );
        let kept = prober.running[&first[2]].id();
        // One backend gone, one whose check moved to another port, one new.
        let mut next = first[2..].to_vec();
        next.push(target(12, 8080));
        next.push(target(41, 80));
        assert_eq!(
            prober.sync(&next, &tx),
            ProbeChanges {
                started: 2,
                stopped: 2
            }
        );
        assert_eq!(prober.len(), 30);
        assert!(!prober.running.contains_key(&first[0]));
        assert_eq!(
            prober.sync(&next, &tx),
            ProbeChanges::default(),
            "unchanged set"
        );
        assert_eq!(
            prober.running[&first[2]].id(),
            kept,
            "a target that stayed keeps its task (and its schedule)"
        );
    }

    #[test]
    fn first_probes_spread_over_the_interval() {
        let prober = Prober::default();
        let delays: Vec<Duration> = (0..=255)
            .map(|b| prober.first_delay(&target(b, 80)))
            .collect();
        assert!(delays.iter().all(|d| *d < Duration::from_secs(5)));
        // 256 targets over five one-second buckets: none empty, none with most.
        let mut buckets = [0usize; 5];
        for d in &delays {
            buckets[d.as_secs() as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&n| (20..=100).contains(&n)),
            "{buckets:?}"
        );
    }
}
