//! Bodies: what goes to a backend ([`UpBody`]) and what goes back to the client
//! ([`ProxyBody`]), which also ends the request's bookkeeping — access-log line,
//! in-flight count, connection activity — when the last byte is sent or the client
//! goes away.

use std::{
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::{
    activity::Activity,
    client_body::{ClientBody, ClientBodyError},
    record::LogRecord,
    upstream::{BackendBody, ClientError},
};
use crate::balance::InFlight;

/// A request body to a backend: the client's, or none (retries only resend requests
/// without a body).
#[derive(Debug)]
pub enum UpBody {
    /// No body.
    Empty,
    /// The client's body, streamed; `failed` is set when reading it failed (bad
    /// chunked framing, a client gone), so the proxy answers 400 rather than blaming
    /// the backend.
    Client {
        /// The body.
        body: ClientBody,
        /// Set on a read error.
        failed: Arc<AtomicBool>,
    },
}

impl Body for UpBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        match self.get_mut() {
            UpBody::Empty => Poll::Ready(None),
            UpBody::Client { body, failed } => {
                let polled = Pin::new(body).poll_frame(cx);
                if let Poll::Ready(Some(Err(_))) = &polled {
                    failed.store(true, Ordering::Relaxed);
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpBody::Empty => true,
            UpBody::Client { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpBody::Empty => SizeHint::with_exact(0),
            UpBody::Client { body, .. } => body.size_hint(),
        }
    }
}

/// The request's bookkeeping, finished once.
#[derive(Debug)]
pub struct Finish {
    pub started: Instant,
    pub log: Option<Box<LogRecord>>,
    pub inflight: Option<InFlight>,
    pub activity: Arc<Activity>,
}

/// A response body to the client. A backend's body gives its connection back to the
/// pool when it ends ([`BackendBody`]).
#[derive(Debug)]
pub struct ProxyBody {
    inner: Inner,
    sent: u64,
    finish: Option<Finish>,
    /// A failure of the backend's body held back for one turn (see `poll_frame`).
    failed: Option<BodyError>,
}

#[derive(Debug)]
enum Inner {
    Full(Option<Bytes>),
    Upstream {
        body: BackendBody,
        /// The route's `backendTimeout` deadline (see [`BodyDeadline`]).
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    },
}

/// The instant a route's `backendTimeout` ends, carried in the backend response's
/// extensions from the request to its body. skipper's deadline is a context on the
/// backend request, and Go's client stops reading a body whose context is done: the
/// timeout bounds the whole exchange, body included. A body still streaming then
/// fails, so the client's connection is cut rather than the body ending as if whole.
#[derive(Clone, Copy, Debug)]
pub struct BodyDeadline(pub tokio::time::Instant);

/// Why a response body stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The backend's body failed (the connection closed or reset mid-body).
    #[error("reading the backend's response body")]
    Backend(#[source] ClientError),
    /// The route's `backendTimeout` passed while the body was streaming.
    #[error("the route's backendTimeout passed while the response body streamed")]
    Deadline,
}

impl ProxyBody {
    /// A body held in memory.
    pub fn full(bytes: Bytes, finish: Finish) -> Self {
        Self {
            inner: Inner::Full((!bytes.is_empty()).then_some(bytes)),
            sent: 0,
            finish: Some(finish),
            failed: None,
        }
    }

    /// A backend's body, streamed; with a deadline, it fails when that passes.
    pub fn upstream(body: BackendBody, deadline: Option<BodyDeadline>, finish: Finish) -> Self {
        Self {
            inner: Inner::Upstream {
                body,
                deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d.0))),
            },
            sent: 0,
            finish: Some(finish),
            failed: None,
        }
    }

    fn done(&mut self) {
        if let Some(f) = self.finish.take() {
            if let Some(log) = f.log {
                log.write(self.sent, f.started);
                LogRecord::recycle(log);
            }
            f.activity.request_done();
        }
    }
}

/// The backend response head's fields as they came, if they were left in its bytes
/// for an HTTP/1 client ([`super::upstream::HeadMode::Raw`]).
impl super::h1::RawFields for ProxyBody {
    fn take_raw_head(&mut self) -> Option<super::upstream::RawHead> {
        match &mut self.inner {
            Inner::Upstream { body, .. } => body.take_raw_head(),
            Inner::Full(_) => None,
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        self.done();
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        let polled = match &mut this.inner {
            Inner::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Inner::Upstream { body, deadline } => {
                // As a done Go context does, the deadline stops the body even when
                // more of it is already there.
                if deadline
                    .as_mut()
                    .is_some_and(|d| d.as_mut().poll(cx).is_ready())
                {
                    Poll::Ready(Some(Err(BodyError::Deadline)))
                } else {
                    Pin::new(body)
                        .poll_frame(cx)
                        .map(|f| f.map(|r| r.map_err(BodyError::Backend)))
                }
            }
        };
        match polled {
            // hyper's HTTP/2 server drops what it has buffered of the response when the
            // body fails: the failure waits one turn, in which the server writes the
            // head and the data before it (skipper's client gets them too, then the
            // cut). Our HTTP/1 server writes what it has before it polls again.
            Poll::Ready(Some(Err(e))) => {
                this.failed = Some(e);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(Some(Ok(ref frame))) => {
                if let Some(d) = frame.data_ref() {
                    this.sent += d.len() as u64;
                }
            }
            Poll::Ready(None) => this.done(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Full(b) => b.is_none(),
            Inner::Upstream { body, .. } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Inner::Upstream { body, .. } => body.size_hint(),
        }
    }
}
