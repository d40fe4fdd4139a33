//! Keep-alive HTTP/1.1 connections to plain backends addressed as `ip:port`, driven
//! with hyper's connection API directly and pooled per worker thread.
//!
//! Why not hyper-util's pooled client: per request it boxes a ~3 KB future, fills
//! the request's extensions (three allocations), and grows the pool's idle list
//! again each time it empties — five allocations per request, for a pool that here
//! only ever serves one thread (each worker is a single-threaded runtime; see
//! [`super::workers`]), so it needs no lock either. Names (resolved per connect)
//! and `https://` endpoints still go through hyper-util ([`super::tls`]).
//!
//! Contract:
//! - A connection is only ever in the pool while no request uses it: it is taken out
//!   for a request and put back by the response body ([`Pooled`]) once the backend's
//!   body has been read to its end. A body dropped before its end drops its
//!   connection with it (HTTP/1 cannot abandon a response and reuse the stream).
//! - A connection taken from the pool is used once hyper says it is ready for the
//!   next request; one that closed meanwhile is dropped and the next one tried.
//! - A request that a pooled connection gave back unsent (the backend had closed it
//!   while idle) goes out on another connection: sending it again is safe because
//!   nothing of it was written. This is not an attempt in [`super::forward`]'s sense,
//!   as it was not for hyper-util's client (`retry_canceled_requests`).
//! - Errors keep hyper-util's split: [`SendError::Connect`] when nothing was sent
//!   (the caller may try the next endpoint), [`SendError::Sent`] otherwise, its
//!   `hyper::Error` carrying the socket's `io::Error` for [`super::failure`].
//! - Idle connections are closed after [`IDLE_TIMEOUT`] (as the pooled client did),
//!   and at most [`MAX_IDLE`] are kept per backend address and worker.

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::{
    body::Incoming,
    client::conn::http1::{self, SendRequest},
};
use hyper_util::rt::TokioIo;

use super::body::UpBody;

/// How long a connection may stay idle in the pool.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per backend address and worker.
pub const MAX_IDLE: usize = 256;

/// How often a worker's pool closes connections idle for too long.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

struct Idle {
    sender: SendRequest<UpBody>,
    since: Instant,
}

thread_local! {
    /// This worker's idle connections by backend address, most recently used last.
    static IDLE: RefCell<HashMap<SocketAddr, Vec<Idle>>> = RefCell::new(HashMap::new());
    /// Whether this worker runs its sweep task.
    static SWEEPING: Cell<bool> = const { Cell::new(false) };
}

/// A connection lent to one request, given back by [`Pooled`].
struct Lease {
    addr: SocketAddr,
    sender: SendRequest<UpBody>,
}

impl Lease {
    /// Puts the connection back into this worker's pool: the response it carried has
    /// been read to its end.
    fn release(self) {
        if self.sender.is_closed() {
            return;
        }
        IDLE.with(|idle| {
            let mut idle = idle.borrow_mut();
            let list = idle.entry(self.addr).or_default();
            if list.len() < MAX_IDLE {
                list.push(Idle {
                    sender: self.sender,
                    since: Instant::now(),
                });
            }
        });
    }
}

/// A backend's response body, with the connection it came on when that came from
/// this pool: the connection goes back once the body has ended — its last frame
/// polled, or the body dropped after [`Body::is_end_stream`] said it had ended (a
/// server stops polling there) — and is closed if the body is dropped before.
#[derive(Debug)]
pub struct Pooled {
    body: Incoming,
    lease: Option<Lease>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("addr", &self.addr).finish()
    }
}

impl Pooled {
    /// A body whose connection is not this pool's (hyper-util's client, tunnels).
    pub fn unpooled(body: Incoming) -> Self {
        Self { body, lease: None }
    }

    fn give_back(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.release();
        }
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if self.body.is_end_stream() {
            self.give_back();
        }
    }
}

impl Body for Pooled {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.give_back(),
            // A failed body's connection is not reusable.
            Poll::Ready(Some(Err(_))) => this.lease = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
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
    Sent(#[source] hyper::Error),
}

/// Sends `req` (origin-form target, Host set) to the backend at `addr`: on an idle
/// pooled connection if there is one, else on a new one (connecting within
/// `connect_timeout`). The response's body gives the connection back ([`Pooled`]).
///
/// # Errors
/// See [`SendError`].
pub async fn send(
    addr: SocketAddr,
    connect_timeout: Duration,
    mut req: Request<UpBody>,
) -> Result<Response<Pooled>, SendError> {
    while let Some(mut sender) = take(addr) {
        // Ready once the previous response has been read to its end; an error
        // means the connection closed while idle.
        if sender.ready().await.is_err() {
            continue;
        }
        match sender.try_send_request(req).await {
            Ok(resp) => return Ok(pooled(resp, addr, sender)),
            Err(mut e) => match e.take_message() {
                // Closed before any of it was written.
                Some(unsent) => req = unsent,
                None => return Err(SendError::Sent(e.into_error())),
            },
        }
    }
    let mut sender = connect(addr, connect_timeout)
        .await
        .map_err(SendError::Connect)?;
    match sender.send_request(req).await {
        Ok(resp) => Ok(pooled(resp, addr, sender)),
        Err(e) => Err(SendError::Sent(e)),
    }
}

fn pooled(
    resp: Response<Incoming>,
    addr: SocketAddr,
    sender: SendRequest<UpBody>,
) -> Response<Pooled> {
    resp.map(|body| Pooled {
        body,
        lease: Some(Lease { addr, sender }),
    })
}

/// The most recently used idle connection to `addr` that is still open and not
/// idle for too long.
fn take(addr: SocketAddr) -> Option<SendRequest<UpBody>> {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let list = idle.get_mut(&addr)?;
        while let Some(i) = list.pop() {
            if !i.sender.is_closed() && i.since.elapsed() < IDLE_TIMEOUT {
                return Some(i.sender);
            }
        }
        None
    })
}

/// A new connection, its protocol task running on this worker.
async fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<SendRequest<UpBody>> {
    let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(backend = %addr, error = %e, "backend connection ended");
        }
    });
    start_sweeping();
    Ok(sender)
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
        idle.retain(|_, list| {
            list.retain(|i| !i.sender.is_closed() && i.since.elapsed() < IDLE_TIMEOUT);
            !list.is_empty()
        });
    });
}

#[cfg(test)]
mod tests;
