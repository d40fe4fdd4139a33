//! What a connection is doing, shared by its accept loop ([`super::listen`]), its
//! requests ([`super::handler`]) and their response bodies ([`super::body`]): requests
//! in flight, when the last one ended, whether it waits for its first head, drains or
//! speaks HTTP/2.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
    },
    time::Duration,
};

use super::{Shared, coarse, pending::Ticket};

/// Requests running on one connection and when the last one ended, for the idle
/// timeout (a connection with a request in flight is never idle); whether it drains.
#[derive(Debug)]
pub struct Activity {
    active: AtomicU32,
    /// The [`coarse`] clock in milliseconds at the last request end (at the
    /// connection's start before its first).
    last: AtomicU64,
    /// A request head has been complete (the connection left [`Pending`]).
    seen: AtomicBool,
    /// The connection speaks HTTP/2.
    h2: AtomicBool,
    draining: AtomicBool,
    pending: Option<(Arc<Shared>, Ticket)>,
}

impl Activity {
    pub(super) fn new(pending: Option<(Arc<Shared>, Ticket)>) -> Self {
        Self {
            active: AtomicU32::new(0),
            last: AtomicU64::new(millis(coarse::now())),
            seen: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            pending,
        }
    }

    /// A request (of `version`) started: its head is complete.
    pub fn request_started(&self, version: http::Version) {
        self.active.fetch_add(1, Ordering::Relaxed);
        if !self.seen.swap(true, Ordering::AcqRel) {
            self.leave_pending();
            if version == http::Version::HTTP_2 {
                self.h2.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Whether the connection drains: responses then close HTTP/1 connections.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Whether the connection speaks HTTP/2 (known from its first request on).
    pub(super) fn speaks_h2(&self) -> bool {
        self.h2.load(Ordering::Relaxed)
    }

    pub(super) fn seen_request(&self) -> bool {
        self.seen.load(Ordering::Acquire)
    }

    /// A request's response ended (or was abandoned).
    pub fn request_done(&self) {
        self.last.store(millis(coarse::now()), Ordering::Relaxed);
        self.active.fetch_sub(1, Ordering::Relaxed);
    }

    /// How long the connection has been idle; `None` while a request runs.
    pub(super) fn idle_for(&self) -> Option<Duration> {
        if self.active.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        Some(coarse::now().saturating_sub(last))
    }

    /// The connection starts draining; returns whether it speaks HTTP/2 (then GOAWAY
    /// ends it, else the next idle moment does).
    pub(super) fn start_draining(&self) -> bool {
        self.draining.store(true, Ordering::Relaxed);
        self.h2.load(Ordering::Relaxed)
    }

    /// The connection no longer waits for its first head (idempotent).
    pub(super) fn leave_pending(&self) {
        if let Some((shared, ticket)) = &self.pending {
            shared.connections.pending.leave(ticket);
        }
    }
}

/// `t` in whole milliseconds (a clock since boot stays far below `u64::MAX` ms).
fn millis(t: Duration) -> u64 {
    u64::try_from(t.as_millis()).unwrap_or(u64::MAX)
}
