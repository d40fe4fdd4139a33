//! Keep-alive HTTP/1.1 connections to plain backends addressed as `ip:port`, with a
//! client of our own ([`conn`]) pooled per worker thread.
//!
//! Why not hyper-util's pooled client: per request it boxes a ~3 KB future, fills
//! the request's extensions (three allocations), and grows the pool's idle list
//! again each time it empties — five allocations per request, for a pool that here
//! only ever serves one thread (each worker is a single-threaded runtime; see
//! [`super::workers`]), so it needs no lock either. Why not hyper's client connection
//! either: it runs as a task of its own, so every request hops to it and back, and
//! per request it allocates a new read buffer, a oneshot for the response and a
//! channel for its body. Ours is driven by the request's own task, keeps its read
//! buffer and hands the response its connection. Names (resolved per connect) and
//! `https://` endpoints still go through hyper-util ([`super::tls`]), and CONNECT
//! tunnels through hyper's upgrades ([`super::tunnel`]).
//!
//! Contract:
//! - A connection is only ever in the pool while no request uses it: it is taken out
//!   for a request and put back by the response body ([`conn::ResponseBody`]) once the
//!   backend's body has been read to its end, the request was written whole and the
//!   response allows keep-alive. A body dropped before its end drops its connection
//!   with it (HTTP/1 cannot abandon a response and reuse the stream).
//! - A connection taken from the pool is checked first: one the backend closed while
//!   it was idle (or that has bytes nobody asked for) is dropped and the next one
//!   tried, so the request goes out unsent-so-far on another connection. This is not
//!   an attempt in [`super::forward`]'s sense, as it was not for hyper's pool.
//! - Errors keep hyper-util's split: [`SendError::Connect`] when nothing was sent
//!   (the caller may try the next endpoint), [`SendError::Sent`] otherwise, its
//!   [`ClientError`] carrying the socket's `io::Error` for [`super::failure`] when
//!   the socket failed, and none when the backend closed early or answered garbage.
//! - Idle connections are closed after [`IDLE_TIMEOUT`] (as the pooled client did),
//!   and at most [`MAX_IDLE`] are kept per backend address and worker.
//! - A request has a deadline for its response head, `until`: past it, connecting,
//!   writing or waiting stops with [`SendError::Timeout`]. Each connection keeps one
//!   timer for this and moves it on per request ([`conn`]), which costs an atomic
//!   update instead of a registration with tokio's timer wheel and its removal.

pub(crate) mod chunked;
mod codec;
mod conn;
mod error;
pub mod fuzz;
mod raw;

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    hash::{BuildHasherDefault, Hasher},
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

pub use codec::HeadMode;
pub(crate) use codec::{Framing, decimal, has_token};
pub(crate) use error::{ClientError, Malformed};
pub(crate) use raw::RawHead;

use super::{body::UpBody, coarse};
use conn::{Conn, ResponseBody};

/// How long a connection may stay idle in the pool.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per backend address and worker.
pub const MAX_IDLE: usize = 256;

/// How often a worker's pool closes connections idle for too long.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

struct Idle {
    conn: Box<Conn>,
    /// When it came back, by the [`coarse`] clock: two fine clock reads per request
    /// (one to give back, one to take) were a measurable part of a request's cost.
    since: Duration,
}

impl Idle {
    /// Not idle for too long, and not closed or sent anything by the backend.
    fn usable(&self, now: Duration) -> bool {
        now.saturating_sub(self.since) < IDLE_TIMEOUT && self.conn.is_usable()
    }
}

/// The idle lists by backend address. The addresses are the configuration's own
/// endpoints, not anything a client sends, so they need no flood-resistant hash:
/// SipHash cost two hashes of ~200 instructions per request (one to take, one to
/// give back).
type IdleMap = HashMap<SocketAddr, Vec<Idle>, BuildHasherDefault<AddrHasher>>;

/// A multiply-rotate hash (FxHash's step) for [`IdleMap`].
#[derive(Default)]
struct AddrHasher(u64);

impl AddrHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_ne_bytes(c.try_into().unwrap_or_default()));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

thread_local! {
    /// This worker's idle connections by backend address, most recently used last.
    static IDLE: RefCell<IdleMap> = RefCell::new(IdleMap::default());
    /// Whether this worker runs its sweep task.
    static SWEEPING: Cell<bool> = const { Cell::new(false) };
}

/// A backend's response body: from a connection of this pool, or from hyper
/// (hyper-util's pools, tunnels).
#[derive(Debug)]
pub enum BackendBody {
    /// Read from one of this pool's connections, which it gives back at its end.
    Pooled(ResponseBody),
    /// hyper's body, whose connection is not this pool's.
    Hyper(Incoming),
}

impl BackendBody {
    /// A body whose connection is not this pool's (hyper-util's client, tunnels).
    pub fn unpooled(body: Incoming) -> Self {
        Self::Hyper(body)
    }

    /// The response head's fields as they came, if they were left in its bytes
    /// ([`HeadMode::Raw`]).
    pub(crate) fn take_raw_head(&mut self) -> Option<RawHead> {
        match self {
            BackendBody::Pooled(b) => b.take_raw_head(),
            BackendBody::Hyper(_) => None,
        }
    }
}

impl Body for BackendBody {
    type Data = Bytes;
    type Error = ClientError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientError>>> {
        match self.get_mut() {
            BackendBody::Pooled(b) => Pin::new(b).poll_frame(cx),
            BackendBody::Hyper(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(ClientError::Hyper))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            BackendBody::Pooled(b) => b.is_end_stream(),
            BackendBody::Hyper(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            BackendBody::Pooled(b) => b.size_hint(),
            BackendBody::Hyper(b) => b.size_hint(),
        }
    }
}

/// Why [`send`] got no response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection could be made (refused, unreachable, `connect_timeout`): nothing
    /// was sent.
    #[error("connecting to the backend")]
    Connect(#[source] std::io::Error),
    /// The request went out on a connection and failed there.
    #[error("sending the request to the backend")]
    Sent(#[source] ClientError),
    /// No response head by the request's deadline (504); the request may have been
    /// sent.
    #[error("no response head from the backend in time")]
    Timeout,
}

/// The instant `after` from now; for an absurd `after` (past what `Instant` holds),
/// a year from now, which no response head waits for in practice.
pub fn deadline(after: Duration) -> tokio::time::Instant {
    deadline_from(tokio::time::Instant::now(), after)
}

/// The instant `after` from `start`, as [`deadline`] counts it.
pub fn deadline_from(start: tokio::time::Instant, after: Duration) -> tokio::time::Instant {
    start
        .checked_add(after)
        .unwrap_or_else(|| start + Duration::from_secs(365 * 24 * 3600))
}

/// Sends `req` (origin-form target, Host set) to the backend at `addr`: on an idle
/// pooled connection if there is one, else on a new one (connecting within
/// `connect_timeout`). The response head must be in by `until`. The response's body
/// gives the connection back. `mode` says what becomes of the response's fields (see
/// [`HeadMode`]): without hop-by-hop ones, or left in the head's bytes, for a route
/// whose filters do not see them. `forwarded`: X-Forwarded-* fields to add as the
/// head is written (see [`crate::proxy::headers::write_fields`]).
///
/// # Errors
/// See [`SendError`].
pub async fn send(
    addr: SocketAddr,
    connect_timeout: Duration,
    until: tokio::time::Instant,
    req: Request<UpBody>,
    mode: HeadMode,
    forwarded: Option<crate::proxy::headers::Forwarded<'_>>,
) -> Result<Response<BackendBody>, SendError> {
    let conn = match take(addr) {
        Some(conn) => conn,
        None => {
            let conn = Conn::connect(addr, connect_timeout, until).await?;
            start_sweeping();
            conn
        }
    };
    let resp = conn
        .send(req, until, mode, forwarded)
        .await
        .map_err(|e| match e {
            ClientError::TimedOut => SendError::Timeout,
            e => SendError::Sent(e),
        })?;
    Ok(resp.map(BackendBody::Pooled))
}

/// The most recently used idle connection to `addr` that is still usable and not
/// idle for too long.
fn take(addr: SocketAddr) -> Option<Box<Conn>> {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let list = idle.get_mut(&addr)?;
        let now = coarse::now();
        while let Some(i) = list.pop() {
            if i.usable(now) {
                return Some(i.conn);
            }
        }
        None
    })
}

/// Puts a connection whose response has been read to its end back into this
/// worker's pool (or closes it, with [`MAX_IDLE`] already there).
fn release(conn: Box<Conn>) {
    // After the worker's thread-locals are gone (its runtime shutting down) the
    // connection just closes.
    let _ = IDLE.try_with(|idle| {
        let mut idle = idle.borrow_mut();
        let list = idle.entry(conn.addr()).or_default();
        if list.len() < MAX_IDLE {
            list.push(Idle {
                conn,
                since: coarse::now(),
            });
        }
    });
}

/// Starts this worker's sweep once: every [`SWEEP_EVERY`], idle connections past
/// [`IDLE_TIMEOUT`] or closed by their backend are dropped (which closes them), and
/// addresses without any are forgotten.
fn start_sweeping() {
    if SWEEPING.with(|s| s.replace(true)) {
        return;
    }
    tokio::spawn(async {
        loop {
            tokio::time::sleep(SWEEP_EVERY).await;
            sweep();
        }
    });
}

fn sweep() {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let now = coarse::now();
        idle.retain(|_, list| {
            list.retain(|i| i.usable(now));
            !list.is_empty()
        });
    });
}

#[cfg(test)]
mod tests;
