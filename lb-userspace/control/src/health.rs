//! Active health checks: TCP connect or HTTP GET, with rise/fall thresholds.
//!
//! A backend starts healthy (a fresh node must not blackhole a service while its first
//! probes run). `fall` consecutive failures make it unhealthy: it gets no new flows,
//! its established flows continue. `rise` consecutive successes make it healthy again,
//! and its fade-in ramp restarts from that moment.

use std::{net::SocketAddr, time::Duration};

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
    /// Where to probe.
    pub target: SocketAddr,
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
    targets: Vec<ProbeTarget>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Prober {
    /// Makes the running probes exactly `targets` (restarting all of them if the set
    /// changed; an unchanged set keeps running undisturbed).
    pub fn sync(
        &mut self,
        targets: Vec<ProbeTarget>,
        reports: &tokio::sync::mpsc::UnboundedSender<Report>,
    ) {
        if targets == self.targets {
            return;
        }
        for task in self.tasks.drain(..) {
            task.abort();
        }
        for t in &targets {
            let (t, tx) = (t.clone(), reports.clone());
            self.tasks.push(tokio::spawn(async move {
                let mut every = tokio::time::interval(t.interval);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    let outcome = probe(t.target, &t.probe, t.timeout).await;
                    if tx.send((t.service.clone(), t.backend, outcome)).is_err() {
                        return;
                    }
                }
            }));
        }
        self.targets = targets;
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        for task in &self.tasks {
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

/// Runs one probe against `target` within `timeout`.
pub async fn probe(target: SocketAddr, check: &Probe, timeout: Duration) -> Outcome {
    match tokio::time::timeout(timeout, run(target, check)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Down(format!("no answer within {timeout:?}")),
    }
}

async fn run(target: SocketAddr, check: &Probe) -> Outcome {
    let mut conn = match TcpStream::connect(target).await {
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
            probe(serve_once("HTTP/1.1 204 No Content\r\n\r\n"), &ok, t).await,
            Outcome::Up
        );
        let down = probe(serve_once("HTTP/1.1 500 Oops\r\n\r\n"), &ok, t).await;
        assert_eq!(down, Outcome::Down("status 500, expected 200-399".into()));
        assert_eq!(probe(serve_once(""), &Probe::Tcp, t).await, Outcome::Up);
        // Nothing listens on a port we just released.
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr");
        assert!(
            matches!(probe(free, &Probe::Tcp, t).await, Outcome::Down(e) if e.starts_with("connect"))
        );
        // A server that accepts but never answers times out.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let silent_addr = silent.local_addr().expect("addr");
        let out = probe(silent_addr, &ok, Duration::from_millis(200)).await;
        assert_eq!(out, Outcome::Down("no answer within 200ms".into()));
        drop(silent);
    }
}
