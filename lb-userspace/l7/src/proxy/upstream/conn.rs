//! One HTTP/1.1 connection to a backend, driven by whoever polls it: the request's
//! own task writes the request and reads the response head ([`Conn::send`]), then
//! the response body ([`ResponseBody`]) reads the rest as the client's side polls it.
//! No task of its own and no channel: a request costs no wake-up of another task.
//!
//! The read buffer belongs to the connection and outlives its requests. Response
//! heads and body data are split off it (the header values and data frames share its
//! bytes), and it is only grown when less than [`MIN_SPARE`] bytes are free: by then
//! the earlier responses' pieces are normally gone, and `BytesMut::reserve` takes the
//! same memory back instead of allocating.
//!
//! The request body is written while the response is read (full duplex, as hyper's
//! client did): a backend may answer before it has read the whole body, and one that
//! echoes a streamed body needs both at once. A response that ends before its request
//! was written whole leaves the connection unusable: it is closed.
//!
//! The deadline for a response head is one timer per connection, made when it
//! connects and moved to each request's deadline. Moving a registered tokio timer to a
//! later instant is an atomic update; the wheel looks at the new instant only when the
//! old one comes. A fresh `tokio::time::timeout` per request instead registered an
//! entry with the wheel and removed it again, each under the driver's lock and with a
//! clock read: about 6% of the proxy's user time under wrk. The timer wakes the last
//! request's task once after the connection's last request (a no-op wake), at its
//! deadline.

use std::{
    future::poll_fn,
    io,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Request, Response};
use http_body::{Body, Frame, SizeHint};
use tokio::{
    net::TcpStream,
    time::{Instant, Sleep},
};

use super::{
    SendError,
    chunked::{Decoded, Decoder},
    codec::{self, Framing, HeadMode},
    error::ClientError,
    raw::RawHead,
};
use crate::proxy::{
    body::UpBody,
    client_body::ClientBodyError,
    headers::Forwarded,
    writer::{WriteError, Writer},
};

/// The read buffer's first size, and how much it grows by at least.
const READ_SIZE: usize = 8 * 1024;

/// The largest growth step for a body that keeps filling the buffer.
const MAX_READ_SIZE: usize = 64 * 1024;

/// Free bytes below which the read buffer is grown (or reclaimed) before a read.
const MIN_SPARE: usize = 4 * 1024;

/// A connection to a backend. Always boxed (one allocation per connection, not per
/// request): it moves from the pool into a request, into that response's body and
/// back with every request, and as a value each of those moves copied all of it.
#[derive(Debug)]
pub(crate) struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
    /// Bytes read and not yet consumed, with room for the next read.
    rbuf: BytesMut,
    /// How much the next growth of `rbuf` reserves.
    read_size: usize,
    /// The request head and chunk-size lines on their way out, reused.
    wbuf: Vec<u8>,
    /// The current request's deadline for its response head (module docs).
    deadline: Pin<Box<Sleep>>,
    /// The last response head's fields as they came ([`HeadMode::Raw`]), until the
    /// client's side takes them.
    raw: Option<RawHead>,
}

impl Conn {
    /// Connects to `addr` within `timeout`, and by `until`.
    ///
    /// # Errors
    /// [`SendError::Connect`] (its kind `TimedOut` after `timeout`), or
    /// [`SendError::Timeout`] when `until` came first.
    pub(crate) async fn connect(
        addr: SocketAddr,
        timeout: Duration,
        until: Instant,
    ) -> Result<Box<Self>, SendError> {
        let by = super::deadline(timeout);
        let (by, late) = if until < by {
            (until, SendError::Timeout)
        } else {
            (by, SendError::Connect(io::ErrorKind::TimedOut.into()))
        };
        let stream = tokio::time::timeout_at(by, TcpStream::connect(addr))
            .await
            .map_err(|_| late)?
            .map_err(SendError::Connect)?;
        stream.set_nodelay(true).map_err(SendError::Connect)?;
        Ok(Box::new(Self {
            stream,
            addr,
            rbuf: BytesMut::with_capacity(READ_SIZE),
            read_size: READ_SIZE,
            wbuf: Vec::with_capacity(1024),
            deadline: Box::pin(tokio::time::sleep_until(until)),
            raw: None,
        }))
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether an idle connection can carry a request: the backend has not closed it
    /// and sent nothing unasked (either makes it unusable). Costs a read attempt only
    /// when the socket may have something to read.
    pub(crate) fn is_usable(&self) -> bool {
        if !self.rbuf.is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Sends `req` and reads the response head, by `until`. The response's body
    /// holds the connection; it gives it back to the pool at its end
    /// ([`ResponseBody`]).
    ///
    /// # Errors
    /// See [`ClientError`] ([`ClientError::TimedOut`] past `until`); the connection
    /// is closed.
    pub(crate) async fn send(
        mut self: Box<Self>,
        req: Request<UpBody>,
        until: Instant,
        mode: HeadMode,
        forwarded: Option<Forwarded<'_>>,
    ) -> Result<Response<ResponseBody>, ClientError> {
        self.deadline.as_mut().reset(until);
        let (parts, body) = req.into_parts();
        let http::request::Parts {
            method,
            uri,
            mut headers,
            ..
        } = parts;
        let framing =
            codec::request_framing(&mut headers, body.is_end_stream(), body.size_hint().exact());
        self.wbuf.clear();
        codec::encode_head(&method, &uri, &headers, forwarded, &mut self.wbuf);
        // The request's map, emptied, takes the response's fields: no new map.
        headers.clear();
        let mut writer = Some(Writer::new(body, framing.into()));
        let mut write_error = None;
        let head = poll_fn(|cx| {
            let head = self.poll_head(
                cx,
                &mut writer,
                &mut write_error,
                &method,
                &mut headers,
                mode,
            );
            if head.is_pending() && self.deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(ClientError::TimedOut));
            }
            head
        })
        .await?;
        let mut resp = Response::new(());
        *resp.status_mut() = head.status;
        *resp.version_mut() = head.version;
        *resp.headers_mut() = headers;
        if let Some(reason) = head.reason {
            resp.extensions_mut().insert(reason);
        }
        let kind = match head.framing {
            Framing::Empty => Kind::Done,
            Framing::Length(n) => Kind::Length(n),
            Framing::Chunked => Kind::Chunked(Decoder::default()),
            Framing::Close => Kind::Close,
        };
        // Kept on the connection (boxed, so nothing moves them per request) until the
        // client's side takes them, before it reads the body.
        self.raw = head.raw;
        let mut body = ResponseBody {
            conn: Some(self),
            // Boxed (one allocation) only while a request body still streams: the
            // body of every other response stays small to move.
            writer: writer.map(Box::new),
            kind,
            reusable: head.keep_alive && write_error.is_none(),
        };
        if body.kind.is_done() {
            body.finish();
        }
        Ok(resp.map(|()| body))
    }

    /// Writes the request while reading until a final response head is in.
    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        writer: &mut Option<Writer<UpBody>>,
        write_error: &mut Option<io::Error>,
        method: &Method,
        headers: &mut HeaderMap,
        mode: HeadMode,
    ) -> Poll<Result<codec::Head, ClientError>> {
        if let Some(w) = writer {
            match w.poll(cx, &mut self.stream, &mut self.wbuf) {
                Poll::Ready(Ok(())) => *writer = None,
                // The backend may still answer (it stopped reading, say, after an
                // early 413): its answer counts, not the failed write.
                Poll::Ready(Err(e)) => match socket_failure(e) {
                    Ok(e) => {
                        *writer = None;
                        *write_error = Some(e);
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                },
                Poll::Pending => {}
            }
        }
        loop {
            if !self.rbuf.is_empty()
                && let Some(head) = codec::parse_head(&mut self.rbuf, method, headers, mode)
                    .map_err(ClientError::Malformed)?
            {
                return Poll::Ready(Ok(head));
            }
            let read = ready!(self.poll_fill(cx));
            let mut failed = |e| write_error.take().map_or(e, ClientError::Io);
            match read {
                Ok(0) => return Poll::Ready(Err(failed(ClientError::ClosedBeforeHead))),
                Ok(_) => {}
                Err(e) => return Poll::Ready(Err(failed(ClientError::Io(e)))),
            }
        }
    }

    /// Reads what the socket has into `rbuf`; `Ok(0)` at its end.
    ///
    /// Through the stream's `AsyncRead`, which takes a read that did not fill the
    /// buffer as the socket drained and clears its readiness (edge-triggered epoll
    /// says when more comes): the pool's [`Conn::is_usable`] probe of the idle
    /// connection then costs no `recv` that can only fail with `EAGAIN`, one syscall
    /// per request that `try_read_buf` (which keeps the readiness) cost.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.rbuf.capacity() - self.rbuf.len() < MIN_SPARE {
            self.rbuf.reserve(self.read_size);
        }
        let spare = self.rbuf.capacity() - self.rbuf.len();
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.stream),
            cx,
            &mut self.rbuf
        ))?;
        // A body that keeps filling the buffer gets bigger reads.
        if n == spare {
            self.read_size = (self.read_size * 2).min(MAX_READ_SIZE);
        }
        Poll::Ready(Ok(n))
    }

    /// Puts the connection back into its worker's pool.
    fn release(self: Box<Self>) {
        super::release(self);
    }
}

/// How the rest of the response body is delimited.
#[derive(Debug)]
enum Kind {
    /// This many bytes to come.
    Length(u64),
    Chunked(Decoder),
    /// Up to the backend's close.
    Close,
    /// Ended.
    Done,
    /// Failed; nothing more comes.
    Failed,
}

impl Kind {
    fn is_done(&self) -> bool {
        match self {
            Kind::Done => true,
            Kind::Chunked(d) => d.is_end(),
            _ => false,
        }
    }
}

/// How writing a request failed: `Ok` with the socket's error (the backend may still
/// answer), or `Err` with the client error its body's failure is.
fn socket_failure(e: WriteError<ClientBodyError>) -> Result<io::Error, ClientError> {
    match e {
        WriteError::Io(e) => Ok(e),
        WriteError::Body(e) => Err(ClientError::RequestBody(e)),
        WriteError::Length => Err(ClientError::RequestBodyLength),
    }
}

/// A response body read from its connection as it is polled. The connection goes
/// back to the pool as soon as the body's last byte is read (before that frame is
/// even returned), if the response and the request were whole and the backend keeps
/// it open; dropping the body before then closes the connection.
#[derive(Debug)]
pub struct ResponseBody {
    /// `None` once given back or closed.
    conn: Option<Box<Conn>>,
    /// The request, while its body is still being written.
    writer: Option<Box<Writer<UpBody>>>,
    kind: Kind,
    /// The head allowed keep-alive and the request went out whole so far.
    reusable: bool,
}

impl ResponseBody {
    /// The response head's fields as they came, if they were left in its bytes.
    pub(crate) fn take_raw_head(&mut self) -> Option<RawHead> {
        self.conn.as_mut().and_then(|c| c.raw.take())
    }

    /// The body has ended: the connection goes back if it can carry another request.
    fn finish(&mut self) {
        self.kind = Kind::Done;
        let whole = self.writer.is_none();
        self.writer = None;
        if let Some(conn) = self.conn.take()
            && self.reusable
            && whole
            && conn.rbuf.is_empty()
        {
            conn.release();
        }
    }

    fn fail(&mut self, e: ClientError) -> Poll<Option<Result<Frame<Bytes>, ClientError>>> {
        self.kind = Kind::Failed;
        self.conn = None;
        self.writer = None;
        Poll::Ready(Some(Err(e)))
    }

    /// The next piece of the body from what is buffered, if there is one.
    fn next(&mut self) -> Result<Option<Frame<Bytes>>, ClientError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        let frame = match &mut self.kind {
            Kind::Length(left) if !conn.rbuf.is_empty() => {
                let n = usize::try_from(*left).map_or(conn.rbuf.len(), |l| l.min(conn.rbuf.len()));
                *left -= n as u64;
                Frame::data(conn.rbuf.split_to(n).freeze())
            }
            Kind::Close if !conn.rbuf.is_empty() => Frame::data(conn.rbuf.split().freeze()),
            Kind::Chunked(d) => match d.decode(&mut conn.rbuf).map_err(ClientError::Malformed)? {
                Decoded::Data(data) => Frame::data(data),
                Decoded::Trailers(t) => Frame::trailers(t),
                Decoded::End | Decoded::More => return Ok(None),
            },
            _ => return Ok(None),
        };
        Ok(Some(frame))
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = ClientError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientError>>> {
        let this = self.get_mut();
        loop {
            if let Kind::Length(0) = this.kind {
                this.finish();
            }
            if this.kind.is_done() {
                this.finish();
                return Poll::Ready(None);
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if let Some(w) = &mut this.writer {
                match w.poll(cx, &mut conn.stream, &mut conn.wbuf) {
                    Poll::Ready(Ok(())) => this.writer = None,
                    // Reading the response goes on; the connection is not reused.
                    Poll::Ready(Err(e)) => match socket_failure(e) {
                        Ok(_) => {
                            this.writer = None;
                            this.reusable = false;
                        }
                        Err(e) => return this.fail(e),
                    },
                    Poll::Pending => {}
                }
            }
            match this.next() {
                Ok(Some(frame)) => {
                    // The last byte is in: the connection need not wait for another
                    // poll (which a server does not make once `is_end_stream`).
                    if this.kind.is_done() || matches!(this.kind, Kind::Length(0)) {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Ok(None) if this.kind.is_done() => continue,
                Ok(None) => {}
                Err(e) => return this.fail(e),
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(conn.poll_fill(cx)) {
                Ok(0) if matches!(this.kind, Kind::Close) => {
                    this.reusable = false;
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(ClientError::ClosedMidBody),
                Ok(_) => {}
                Err(e) => return this.fail(ClientError::Io(e)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.kind, Kind::Done | Kind::Length(0)) || self.kind.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.kind {
            Kind::Length(n) => SizeHint::with_exact(n),
            Kind::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
