//! A request body on its way from the client's connection to whoever sends it on.
//!
//! The connection ([`super::Connection`]) owns the socket and its read buffer: it
//! reads and decodes the body (Content-Length or chunked) and hands the data over
//! one piece at a time through a [`Feed`], which the [`RequestBody`] takes it from.
//! The body is usually polled by the request's own handler, which the connection
//! polls itself (so nothing needs waking), but for a backend reached through
//! hyper-util's client it is polled by that client's connection task: each side
//! keeps the other's waker and wakes it when it gave or took something.
//!
//! One piece at a time keeps a slow backend from making the proxy buffer a fast
//! client's body: the connection reads the next piece only once the last was taken
//! (TCP's window then slows the client), as hyper's server did with its body
//! channel's want signal.
//!
//! A feed outlives its requests: the connection makes one when its first request
//! with a body comes and uses it again for the next, unless the last body is still
//! held somewhere (a backend answered before reading all of it); then that one is
//! cut off ([`BodyError::Abandoned`]) and a new feed made.

use std::{
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::{Context, Poll, Waker},
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::super::upstream::Malformed;

/// Why a request body stopped before its end.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BodyError {
    /// The chunked coding is broken.
    #[error("the request body's chunked coding is malformed")]
    Malformed(#[source] Malformed),
    /// The client closed the connection before the body's end.
    #[error("the client closed the connection before the end of the request body")]
    Closed,
    /// Reading the socket failed.
    #[error("reading the request body failed: {0}")]
    Io(std::io::ErrorKind),
    /// The connection stopped feeding this body (its response was sent, or the
    /// connection closed).
    #[error("the request body was abandoned")]
    Abandoned,
}

/// Where a body is.
#[derive(Debug, Clone, Default)]
enum End {
    /// More may come.
    #[default]
    Open,
    /// All of it has been handed over.
    Done,
    /// It failed.
    Failed(BodyError),
}

/// What the connection and the body share.
#[derive(Debug, Default)]
struct Slot {
    /// The next piece, not yet taken.
    data: Option<Bytes>,
    end: End,
    /// The body found nothing to take and waits.
    wanted: bool,
    /// The body has been polled at least once (for `Expect: 100-continue`).
    polled: bool,
    /// Body bytes not handed over yet, when the length is known.
    left: Option<u64>,
    body_waker: Option<Waker>,
    conn_waker: Option<Waker>,
    /// The connection is polling (and looks at the slot when it is done): the body
    /// need not wake it.
    conn_polling: bool,
}

/// The connection's side of a body's hand-over.
#[derive(Debug, Default)]
pub(crate) struct Feed(Mutex<Slot>);

impl Feed {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        // Nothing panics while holding the lock; a poisoned one is still consistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ready for a new body of `len` bytes (`None`: chunked).
    pub(crate) fn start(&self, len: Option<u64>) {
        *self.slot() = Slot {
            left: len,
            ..Slot::default()
        };
    }

    /// The connection's poll begins (`Some`, with its waker) or ends (`None`).
    pub(crate) fn conn_polling(&self, waker: Option<&Waker>) {
        let mut s = self.slot();
        s.conn_polling = waker.is_some();
        if let Some(w) = waker
            && !s.conn_waker.as_ref().is_some_and(|c| c.will_wake(w))
        {
            s.conn_waker = Some(w.clone());
        }
    }

    /// Whether the body has room for the next piece and may want it; and whether
    /// it has been polled yet (a client waiting for `100 Continue` gets it then).
    pub(crate) fn room(&self) -> (bool, bool) {
        let s = self.slot();
        (s.data.is_none() && matches!(s.end, End::Open), s.polled)
    }

    /// Hands over the next piece (`last`: nothing follows it).
    pub(crate) fn push(&self, data: Bytes, last: bool) {
        let mut s = self.slot();
        s.data = Some(data);
        if last {
            s.end = End::Done;
        }
        wake_body(s);
    }

    /// The body has ended (`Ok`), or failed.
    pub(crate) fn end(&self, how: Result<(), BodyError>) {
        let mut s = self.slot();
        if matches!(s.end, End::Open) {
            s.end = match how {
                Ok(()) => End::Done,
                Err(e) => End::Failed(e),
            };
        }
        wake_body(s);
    }
}

/// Wakes a body that waits, after the slot's lock is let go.
fn wake_body(mut s: MutexGuard<'_, Slot>) {
    let waker = s.wanted.then(|| s.body_waker.take()).flatten();
    s.wanted = false;
    drop(s);
    if let Some(w) = waker {
        w.wake();
    }
}

/// A client's HTTP/1 request body, as the handler and the backend's writer read it.
#[derive(Debug)]
pub struct RequestBody {
    feed: Arc<Feed>,
}

impl RequestBody {
    pub(crate) fn new(feed: Arc<Feed>) -> Self {
        Self { feed }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let mut s = self.feed.slot();
        s.polled = true;
        if let Some(data) = s.data.take() {
            if let Some(left) = &mut s.left {
                *left = left.saturating_sub(data.len() as u64);
            }
            // The connection reads the next piece now there is room for it.
            let waker = (!s.conn_polling).then(|| s.conn_waker.clone()).flatten();
            drop(s);
            if let Some(w) = waker {
                w.wake();
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        match &s.end {
            End::Done => Poll::Ready(None),
            End::Failed(e) => Poll::Ready(Some(Err(e.clone()))),
            End::Open => {
                s.wanted = true;
                if !s
                    .body_waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    s.body_waker = Some(cx.waker().clone());
                }
                let waker = (!s.conn_polling).then(|| s.conn_waker.clone()).flatten();
                drop(s);
                if let Some(w) = waker {
                    w.wake();
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let s = self.feed.slot();
        s.data.is_none() && matches!(s.end, End::Done)
    }

    fn size_hint(&self) -> SizeHint {
        let s = self.feed.slot();
        match s.left {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        // A body dropped before its end will never take the rest: the connection
        // stops reading it (and closes after the response).
        let mut s = self.feed.slot();
        if matches!(s.end, End::Open) {
            s.end = End::Failed(BodyError::Abandoned);
            let waker = (!s.conn_polling).then(|| s.conn_waker.clone()).flatten();
            drop(s);
            if let Some(w) = waker {
                w.wake();
            }
        }
    }
}
