//! The proxy's own HTTP/1.x server connection: reads request heads, runs the
//! handler, writes its answer, keeps the connection for the next request.
//!
//! Why not hyper's server: per request it parses the head into its own message type
//! and a fresh header map, runs its dispatcher's state machines for reading, writing
//! and keep-alive around the handler, and re-encodes the answer's head from the map
//! with its own buffering: about 8,500 of the proxy's 23,900 instructions per
//! proxied request (callgrind), and its read buffer cost both allocations left per
//! request. This connection does what the proxy needs in one loop: the
//! head is parsed straight into `http`'s types ([`head`]), the handler's future is
//! polled in place (one box for the connection's life), and the answer's head and
//! first body bytes go out in one `writev` ([`respond`], [`crate::proxy::writer`]).
//! The rules a client sees are hyper's (framing, keep-alive, 4xx for bad heads),
//! held by the tests that held hyper to them.
//!
//! Contract:
//! - Requests on a connection are answered in order, one at a time; pipelined
//!   requests wait in the read buffer.
//! - A request body is read by the connection and handed over piece by piece
//!   ([`feed`]) while the handler runs and while the answer is written (a backend may
//!   echo it); an answer sent before its request's body was read whole ends the
//!   connection (the next request's start cannot be found).
//! - While the handler runs, a client that closes its connection cancels the request
//!   (the handler's future is dropped), as hyper did; the check costs no system call
//!   until the socket says something happened.
//! - `Expect: 100-continue` is answered with `100 Continue` when the body is first
//!   read, and not at all if the answer comes first.
//! - A CONNECT's 2xx answer hands the socket to the tunnel ([`upgrade`]).
//! - A connection whose first bytes are HTTP/2's preface is handed back to the
//!   caller ([`Ended::H2`]) with the bytes read.
//! - [`Connection::graceful_shutdown`]: a connection between requests (or with only
//!   part of a head) closes at once, a busy one after its answer.

mod date;
mod feed;
pub mod fuzz;
pub(crate) mod head;
mod respond;
#[cfg(test)]
mod tests;
pub mod upgrade;
#[cfg(test)]
mod vs_hyper;

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body::Body;
use tokio::{io::AsyncWrite as _, net::TcpStream, sync::oneshot};

use feed::Feed;
pub use feed::{BodyError, RequestBody};
use head::{BodyFraming, HeadError, HeadLimits};
use respond::{Asked, BodySize, Plan};
pub use upgrade::{OnUpgrade, Upgraded};

use super::{
    client_body::ClientBody,
    upstream::RawHead,
    upstream::chunked,
    writer::{WriteError, Writer},
};

/// HTTP/2's connection preface: a client speaking h2c with prior knowledge starts
/// with it.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `Expect: 100-continue`'s interim answer.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The read buffer's first size, and the least it grows by.
const READ_SIZE: usize = 8 * 1024;

/// Free bytes below which the read buffer is grown (or reclaimed) before a read.
const MIN_SPARE: usize = 2 * 1024;

/// The largest read while a body streams in.
const MAX_READ_SIZE: usize = 64 * 1024;

/// What a connection reads and drops, at most, after refusing a head (see
/// `Connection::poll_refusing`).
const LINGER_MAX: usize = 256 * 1024;

/// A response body that may carry its head's fields as a backend wrote them
/// ([`crate::proxy::upstream::HeadMode::Raw`]), written to the client as they came.
pub(crate) trait RawFields {
    /// The fields, once.
    fn take_raw_head(&mut self) -> Option<RawHead> {
        None
    }
}

/// How a connection ended without an error.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Closed (by either side, or after an answer that ends it).
    Closed,
    /// The client speaks HTTP/2: its socket, and the bytes read from it so far.
    H2(TcpStream, Bytes),
}

/// Why a connection ended with an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    /// A request head that had to be refused; it was answered with
    /// [`HeadError::status`].
    #[error(transparent)]
    Head(#[from] HeadError),
    /// The client closed the connection in the middle of a request head.
    #[error("the client closed the connection in the middle of a request head")]
    Incomplete,
    /// The socket failed.
    #[error("the client connection failed")]
    Io(#[source] io::Error),
    /// The answer's body failed, or did not match its length: the connection was cut.
    #[error("the response body failed")]
    Body,
}

/// Where the connection is.
enum State {
    /// Reading (and waiting for) a request head.
    Head,
    /// The handler runs.
    Handling,
    /// The answer is being written (by `Connection::writer`).
    Writing,
    /// Writing the answer to a refused head, then closing.
    Refusing(HeadError),
    /// Done: the next poll closes.
    Done,
}

/// How the current request's body is read off the socket.
enum Reader {
    /// Not reading: no body, or it was read whole or given up.
    Idle,
    /// This many bytes are left.
    Length(u64),
    Chunked(chunked::Decoder),
}

/// One client connection speaking HTTP/1.x. `S` makes the handler's future for
/// each request, which answers with a body `B`.
pub(crate) struct Connection<S, F, B> {
    io: Option<TcpStream>,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// Bytes of `wbuf` written while it holds `100 Continue` alone.
    wbuf_written: usize,
    service: S,
    limits: HeadLimits,
    /// The handler of the request being served, in a box made once per connection.
    handling: Pin<Box<Option<F>>>,
    state: State,
    /// The answer on its way out, in [`State::Writing`].
    writer: Option<Writer<B>>,
    /// An emptied header map for the next request's head.
    headers: Option<http::HeaderMap>,
    asked: Asked,
    reader: Reader,
    /// The current request's body hand-over; kept for the next request's.
    feed: Option<Arc<Feed>>,
    /// The current request has a body.
    has_body: bool,
    /// `100 Continue` is owed when the body is first read.
    expect_continue: bool,
    /// The current request is a CONNECT: where its socket goes after a 2xx.
    upgrade: Option<oneshot::Sender<Upgraded>>,
    /// No request has been read yet (HTTP/2 may still be spoken).
    first: bool,
    /// Close after the current answer (or now, when idle).
    shutdown: bool,
    /// The request body could not be read to its end: close after the answer.
    broken: bool,
    /// The client sent something while the handler ran (stop watching for a close).
    peeked: bool,
    /// A refused connection has said all it will and reads what is left.
    lingering: bool,
    /// Bytes read and dropped while lingering.
    lingered: usize,
    read_size: usize,
}

impl<S, F, B> Connection<S, F, B>
where
    S: FnMut(Request<ClientBody>) -> F,
    F: Future<Output = Response<B>>,
    B: Body<Data = Bytes> + RawFields + Unpin,
{
    pub(crate) fn new(io: TcpStream, limits: HeadLimits, service: S) -> Self {
        Self {
            io: Some(io),
            rbuf: BytesMut::with_capacity(READ_SIZE),
            wbuf: Vec::with_capacity(1024),
            wbuf_written: 0,
            service,
            limits,
            handling: Box::pin(None),
            state: State::Head,
            writer: None,
            headers: None,
            asked: Asked::of(&http::Method::GET, http::Version::HTTP_11, true),
            reader: Reader::Idle,
            feed: None,
            has_body: false,
            expect_continue: false,
            upgrade: None,
            first: true,
            shutdown: false,
            broken: false,
            peeked: false,
            lingering: false,
            lingered: 0,
            read_size: READ_SIZE,
        }
    }

    /// The head this connection refused, while it still reads what the client sends
    /// after it (see `poll_refusing`).
    pub(crate) fn refused(&self) -> Option<HeadError> {
        match self.state {
            State::Refusing(e) => Some(e),
            _ => None,
        }
    }

    /// Closes between requests: at once if no whole head has come, else after the
    /// answer.
    pub(crate) fn graceful_shutdown(&mut self) {
        self.shutdown = true;
    }

    /// Reads what the socket has into `rbuf`; `Ok(0)` at its end. Through the
    /// stream's `AsyncRead`, which takes a read that did not fill the buffer as the
    /// socket drained and clears its readiness: the next wait costs no `recv` that
    /// can only fail with `EAGAIN`.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.rbuf.capacity() - self.rbuf.len() < MIN_SPARE {
            // Reclaims the buffer in place when the pieces split off it are gone.
            self.rbuf.reserve(self.read_size);
        }
        let spare = self.rbuf.capacity() - self.rbuf.len();
        let Some(io) = self.io.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(io),
            cx,
            &mut self.rbuf
        ))?;
        if n == spare && matches!(self.state, State::Handling | State::Writing) {
            // A body that keeps filling the buffer gets bigger reads.
            self.read_size = (self.read_size * 2).min(MAX_READ_SIZE);
        }
        Poll::Ready(Ok(n))
    }

    /// Reads the next request head; starts its handler.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Ended>, ConnError>> {
        loop {
            if self.first && !self.rbuf.is_empty() {
                let n = self.rbuf.len().min(H2_PREFACE.len());
                if self.rbuf[..n] == H2_PREFACE[..n] {
                    if n == H2_PREFACE.len() {
                        let read = self.rbuf.split().freeze();
                        let io = self.io.take().ok_or(ConnError::Incomplete)?;
                        return Poll::Ready(Ok(Some(Ended::H2(io, read))));
                    }
                } else {
                    self.first = false;
                }
            }
            // Parsed once not empty, and (on a first request) longer than the preface
            // or unlike it.
            if !(self.rbuf.is_empty() || self.first && self.rbuf.len() < H2_PREFACE.len()) {
                match head::parse(&mut self.rbuf, self.limits, &mut self.headers) {
                    Ok(Some(parsed)) => {
                        self.start(parsed);
                        return Poll::Ready(Ok(None));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        self.wbuf.clear();
                        self.wbuf_written = 0;
                        respond::refusal(e.status(), &mut self.wbuf);
                        self.state = State::Refusing(e);
                        return Poll::Ready(Ok(None));
                    }
                }
            }
            if self.shutdown {
                // Between requests (a head not complete yet counts as none, as it
                // did for hyper): closed now.
                return Poll::Ready(Ok(Some(Ended::Closed)));
            }
            match ready!(self.poll_fill(cx)) {
                Ok(0) if self.rbuf.is_empty() => return Poll::Ready(Ok(Some(Ended::Closed))),
                Ok(0) => return Poll::Ready(Err(ConnError::Incomplete)),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Err(ConnError::Io(e))),
            }
        }
    }

    /// Starts serving a parsed request: its body's hand-over, its handler.
    fn start(&mut self, parsed: head::Parsed) {
        self.first = false;
        self.peeked = false;
        self.broken = false;
        let head::Parsed {
            mut request,
            framing,
            keep_alive,
            expect_continue,
        } = parsed;
        self.asked = Asked::of(request.method(), request.version(), keep_alive);
        self.upgrade = None;
        if self.asked.connect {
            let (tx, on) = upgrade::pair();
            request.extensions_mut().insert(on);
            self.upgrade = Some(tx);
        }
        let body = match framing {
            BodyFraming::Empty => {
                self.reader = Reader::Idle;
                self.has_body = false;
                ClientBody::Empty
            }
            BodyFraming::Length(n) => self.feed_body(Reader::Length(n), Some(n)),
            BodyFraming::Chunked => {
                self.feed_body(Reader::Chunked(chunked::Decoder::default()), None)
            }
        };
        self.expect_continue = expect_continue && self.has_body;
        let future = (self.service)(request.map(|()| body));
        self.handling.set(Some(future));
        self.state = State::Handling;
    }

    fn feed_body(&mut self, reader: Reader, len: Option<u64>) -> ClientBody {
        self.reader = reader;
        self.has_body = true;
        // The last body's feed serves again unless that body is still held.
        let feed = match self.feed.take() {
            Some(f) if Arc::strong_count(&f) == 1 => f,
            _ => Arc::new(Feed::default()),
        };
        feed.start(len);
        self.feed = Some(Arc::clone(&feed));
        ClientBody::H1(RequestBody::new(feed))
    }

    /// Reads the request body on while there is room for it; `true` when something
    /// was handed over (the handler may go on).
    fn drive_body(&mut self, cx: &mut Context<'_>) -> bool {
        if matches!(self.reader, Reader::Idle) {
            return false;
        }
        let Some(feed) = self.feed.clone() else {
            return false;
        };
        let (room, polled) = feed.room();
        if !room {
            return false;
        }
        if polled && self.expect_continue {
            self.expect_continue = false;
            self.wbuf.clear();
            self.wbuf.extend_from_slice(CONTINUE);
            self.wbuf_written = 0;
        }
        if self.wbuf_written < self.wbuf.len() && matches!(self.state, State::Handling) {
            // `100 Continue` goes out before the body is read (the client waits).
            let Some(io) = self.io.as_mut() else {
                return false;
            };
            match Pin::new(io).poll_write(cx, &self.wbuf[self.wbuf_written..]) {
                Poll::Ready(Ok(n)) if n > 0 => self.wbuf_written += n,
                Poll::Ready(_) => {
                    return self.body_failed(&feed, BodyError::Io(io::ErrorKind::WriteZero));
                }
                Poll::Pending => return false,
            }
            if self.wbuf_written < self.wbuf.len() {
                return false;
            }
            self.wbuf.clear();
            self.wbuf_written = 0;
        }
        loop {
            match &mut self.reader {
                Reader::Idle => return false,
                Reader::Length(left) => {
                    if !self.rbuf.is_empty() {
                        let n = usize::try_from(*left)
                            .map_or(self.rbuf.len(), |l| l.min(self.rbuf.len()));
                        *left -= n as u64;
                        let last = *left == 0;
                        feed.push(self.rbuf.split_to(n).freeze(), last);
                        if last {
                            self.reader = Reader::Idle;
                        }
                        return true;
                    }
                }
                Reader::Chunked(d) => match d.decode(&mut self.rbuf) {
                    Ok(chunked::Decoded::Data(data)) => {
                        feed.push(data, false);
                        return true;
                    }
                    Ok(chunked::Decoded::Trailers(_) | chunked::Decoded::End) => {
                        feed.end(Ok(()));
                        self.reader = Reader::Idle;
                        return true;
                    }
                    Ok(chunked::Decoded::More) => {}
                    Err(e) => return self.body_failed(&feed, BodyError::Malformed(e)),
                },
            }
            match self.poll_fill(cx) {
                Poll::Pending => return false,
                Poll::Ready(Ok(n)) if n > 0 => {}
                Poll::Ready(r) => {
                    let e = match r {
                        Err(e) => BodyError::Io(e.kind()),
                        Ok(_) => BodyError::Closed,
                    };
                    return self.body_failed(&feed, e);
                }
            }
        }
    }

    /// The request body cannot be read on: its reader is told why, the connection
    /// stops reading it and closes after the answer. `true`, as [`Self::drive_body`]
    /// says when something was handed over.
    fn body_failed(&mut self, feed: &Feed, e: BodyError) -> bool {
        feed.end(Err(e));
        self.broken = true;
        self.reader = Reader::Idle;
        true
    }

    /// Whether the request body has been read off the connection whole, once what
    /// of it the read buffer already holds is skipped (a handler that answered
    /// without reading the body did not take it).
    fn skip_buffered_body(&mut self) -> bool {
        loop {
            match &mut self.reader {
                Reader::Idle => return true,
                Reader::Length(left) => {
                    let Ok(left) = usize::try_from(*left) else {
                        return false;
                    };
                    if self.rbuf.len() < left {
                        return false;
                    }
                    bytes::Buf::advance(&mut self.rbuf, left);
                    self.reader = Reader::Idle;
                }
                Reader::Chunked(d) => match d.decode(&mut self.rbuf) {
                    Ok(chunked::Decoded::Data(_)) => {}
                    Ok(chunked::Decoded::Trailers(_) | chunked::Decoded::End) => {
                        self.reader = Reader::Idle;
                    }
                    Ok(chunked::Decoded::More) | Err(_) => return false,
                },
            }
        }
    }

    /// While the handler runs and nothing else is read: whether the client closed
    /// the connection. Costs a `recv` only when the socket became readable.
    fn client_gone(&mut self, cx: &mut Context<'_>) -> bool {
        if self.peeked || !matches!(self.reader, Reader::Idle) {
            return false;
        }
        let Some(io) = self.io.as_ref() else {
            return true;
        };
        let mut byte = [0u8; 1];
        let mut buf = tokio::io::ReadBuf::new(&mut byte);
        match io.poll_peek(cx, &mut buf) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => true,
            Poll::Ready(Ok(_)) => {
                // The next request, pipelined: it waits in the socket.
                self.peeked = true;
                false
            }
            Poll::Pending => false,
        }
    }

    /// Polls the handler; on its answer, starts writing it.
    fn poll_handling(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ended>> {
        loop {
            // Only a request with a body has its feed told: the feed a connection
            // keeps from an earlier body is no business of a bodiless request's
            // polls (two lock round trips each).
            let feed = self.feed.as_ref().filter(|_| self.has_body);
            if let Some(feed) = feed {
                feed.conn_polling(Some(cx.waker()));
            }
            let polled = match self.handling.as_mut().as_pin_mut() {
                Some(f) => f.poll(cx),
                None => return Poll::Ready(Some(Ended::Closed)),
            };
            if let Some(feed) = feed {
                feed.conn_polling(None);
            }
            if let Poll::Ready(response) = polled {
                self.handling.set(None);
                self.respond(response);
                return Poll::Ready(None);
            }
            if self.drive_body(cx) {
                continue;
            }
            if self.client_gone(cx) {
                // The request is cancelled with its future.
                self.handling.set(None);
                return Poll::Ready(Some(Ended::Closed));
            }
            return Poll::Pending;
        }
    }

    /// Encodes the answer's head and starts writing it with its body.
    fn respond(&mut self, response: Response<B>) {
        let (parts, mut body) = response.into_parts();
        let raw = body.take_raw_head();
        let size = if body.is_end_stream() {
            BodySize::None
        } else {
            match body.size_hint().exact() {
                Some(n) => BodySize::Known(n),
                None => BodySize::Unknown,
            }
        };
        // A `100 Continue` still on its way goes out first; one never started is
        // not owed any more.
        if self.wbuf_written == 0 {
            self.wbuf.clear();
        } else {
            self.wbuf.drain(..self.wbuf_written);
            self.wbuf_written = 0;
        }
        self.expect_continue = false;
        // A connection told to shut down says so in the answer it still gives.
        self.asked.keep_alive &= !self.shutdown;
        let plan = respond::encode(&parts, raw.as_ref(), size, self.asked, &mut self.wbuf);
        // The answer's map, emptied, takes the next request's fields: no new map per
        // request (the request's own became the backend response's, see `upstream`).
        let mut headers = parts.headers;
        headers.clear();
        self.headers = Some(headers);
        let Plan {
            framing,
            keep_alive,
            upgrade,
        } = plan;
        self.asked.keep_alive = keep_alive;
        if !upgrade {
            self.upgrade = None;
        }
        self.writer = Some(Writer::new(body, framing));
        self.state = State::Writing;
    }

    /// Writes the answer (and reads the request body on); at its end, the
    /// connection goes on, closes, or becomes a tunnel.
    fn poll_writing(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Ended>, ConnError>> {
        loop {
            let (Some(writer), Some(io)) = (self.writer.as_mut(), self.io.as_mut()) else {
                return Poll::Ready(Ok(Some(Ended::Closed)));
            };
            match writer.poll(cx, io, &mut self.wbuf) {
                Poll::Ready(Ok(())) => break,
                Poll::Ready(Err(e)) => {
                    self.writer = None;
                    return Poll::Ready(Err(match e {
                        WriteError::Io(e) => ConnError::Io(e),
                        WriteError::Body(_) | WriteError::Length => ConnError::Body,
                    }));
                }
                Poll::Pending => {
                    if self.drive_body(cx) {
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
        // The answer is out: its body's bookkeeping ends (access log, activity).
        self.state = State::Head;
        self.writer = None;
        if let Some(tx) = self.upgrade.take() {
            let read = self.rbuf.split().freeze();
            if let Some(stream) = self.io.take() {
                let _ = tx.send(Upgraded { stream, read });
            }
            return Poll::Ready(Ok(Some(Ended::Closed)));
        }
        let body_read = !self.has_body || !self.broken && self.skip_buffered_body();
        if !self.asked.keep_alive || self.shutdown || !body_read {
            if let Some(feed) = &self.feed {
                feed.end(Err(BodyError::Abandoned));
            }
            return Poll::Ready(Ok(Some(Ended::Closed)));
        }
        Poll::Ready(Ok(None))
    }

    /// Writes the refusal and its FIN, then reads and drops what the client still
    /// sends before closing: until the client closes,
    /// [`LINGER_MAX`] bytes, or [`Connection::graceful_shutdown`] (the connection's
    /// head and idle timers): closing a socket with unread bytes resets the
    /// connection, and the client may lose the answer with it (nginx's lingering
    /// close).
    fn poll_refusing(&mut self, cx: &mut Context<'_>) -> Poll<Result<Ended, ConnError>> {
        while self.wbuf_written < self.wbuf.len() {
            let Some(io) = self.io.as_mut() else { break };
            match ready!(Pin::new(io).poll_write(cx, &self.wbuf[self.wbuf_written..])) {
                Ok(n) if n > 0 => self.wbuf_written += n,
                _ => self.wbuf_written = self.wbuf.len(),
            }
        }
        if !self.lingering {
            if let Some(io) = self.io.as_mut() {
                let _ = ready!(Pin::new(io).poll_shutdown(cx));
            }
            self.lingering = true;
            self.lingered = 0;
        }
        while self.lingered < LINGER_MAX && !self.shutdown {
            self.rbuf.clear();
            match ready!(self.poll_fill(cx)) {
                Ok(n) if n > 0 => self.lingered += n,
                _ => break,
            }
        }
        let State::Refusing(e) = std::mem::replace(&mut self.state, State::Done) else {
            return Poll::Ready(Ok(Ended::Closed));
        };
        Poll::Ready(Err(ConnError::Head(e)))
    }
}

impl<S, F, B> Future for Connection<S, F, B>
where
    S: FnMut(Request<ClientBody>) -> F + Unpin,
    F: Future<Output = Response<B>>,
    B: Body<Data = Bytes> + RawFields + Unpin,
{
    type Output = Result<Ended, ConnError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            let step = match &this.state {
                State::Head => this.poll_head(cx),
                State::Handling => this.poll_handling(cx).map(Ok),
                State::Writing => this.poll_writing(cx),
                State::Refusing(_) => return this.poll_refusing(cx),
                State::Done => return Poll::Ready(Ok(Ended::Closed)),
            };
            match ready!(step) {
                Ok(Some(ended)) => {
                    this.state = State::Done;
                    return Poll::Ready(Ok(ended));
                }
                Ok(None) => {}
                Err(e) => {
                    this.state = State::Done;
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}
