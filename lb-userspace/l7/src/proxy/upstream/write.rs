//! Writing a request to a backend: the head (already in the connection's write
//! buffer), then the body frame by frame, with a Content-Length or chunked as
//! [`RequestFraming`] says. The head goes out with the body's first frame when that
//! is there at once, and a chunk with its size line and CRLF in one vectored write.

use std::{
    io::{self, IoSlice, Write as _},
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::{io::AsyncWrite, net::TcpStream};

use super::{codec::RequestFraming, error::ClientError};
use crate::proxy::body::UpBody;

/// Why writing the request stopped.
pub(super) enum WriteError {
    /// The socket failed.
    Io(io::Error),
    /// The request body failed or does not match its length.
    Body(ClientError),
}

/// The request on its way out: the head (in the connection's `wbuf`), then the body
/// frame by frame, coded as [`RequestFraming`] says.
#[derive(Debug)]
pub(super) struct Writer {
    body: UpBody,
    framing: RequestFraming,
    /// Body bytes still to come for a Content-Length.
    left: u64,
    /// Bytes of `wbuf` already written.
    written: usize,
    /// Data of the current chunk not yet written.
    data: Bytes,
    /// What follows the data (CRLF, the last chunk), not yet written.
    tail: &'static [u8],
    /// Nothing more comes from the body.
    ended: bool,
}

impl Writer {
    pub(super) fn new(body: UpBody, framing: RequestFraming) -> Self {
        let (left, ended) = match framing {
            RequestFraming::Empty => (0, true),
            RequestFraming::Length(n) => (n, n == 0),
            RequestFraming::Chunked => (0, false),
        };
        Self {
            body,
            framing,
            left,
            written: 0,
            data: Bytes::new(),
            tail: b"",
            ended,
        }
    }

    /// Writes until the whole request is out (`Ready(Ok)`), or the socket or body
    /// makes us wait. The head goes out with the body's first frame when that is
    /// ready at once.
    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        stream: &mut TcpStream,
        wbuf: &mut Vec<u8>,
    ) -> Poll<Result<(), WriteError>> {
        loop {
            // Take the next frame before writing what is there, so that it goes in
            // the same write; a body that has none ready yet waits for the next turn.
            if !self.ended && self.data.is_empty() && self.tail.is_empty() {
                match Pin::new(&mut self.body).poll_frame(cx) {
                    Poll::Ready(frame) => self.take(frame, wbuf).map_err(WriteError::Body)?,
                    Poll::Pending if self.written == wbuf.len() => return Poll::Pending,
                    Poll::Pending => {}
                }
            }
            if self.written == wbuf.len() && self.data.is_empty() && self.tail.is_empty() {
                if self.ended {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let slices = [
                IoSlice::new(&wbuf[self.written..]),
                IoSlice::new(&self.data),
                IoSlice::new(self.tail),
            ];
            let n = ready!(Pin::new(&mut *stream).poll_write_vectored(cx, &slices))
                .map_err(WriteError::Io)?;
            if n == 0 {
                return Poll::Ready(Err(WriteError::Io(io::ErrorKind::WriteZero.into())));
            }
            self.advance(n, wbuf);
        }
    }

    /// Moves past `n` written bytes.
    fn advance(&mut self, mut n: usize, wbuf: &mut Vec<u8>) {
        let head = (wbuf.len() - self.written).min(n);
        self.written += head;
        n -= head;
        let data = self.data.len().min(n);
        bytes::Buf::advance(&mut self.data, data);
        n -= data;
        self.tail = &self.tail[n..];
        if self.written == wbuf.len() {
            wbuf.clear();
            self.written = 0;
        }
    }

    /// Codes the body's next frame for writing.
    fn take(
        &mut self,
        frame: Option<Result<Frame<Bytes>, hyper::Error>>,
        wbuf: &mut Vec<u8>,
    ) -> Result<(), ClientError> {
        let data = match frame {
            None => {
                self.ended = true;
                return match self.framing {
                    RequestFraming::Length(_) => Err(ClientError::RequestBodyLength),
                    RequestFraming::Chunked => {
                        self.tail = b"0\r\n\r\n";
                        Ok(())
                    }
                    RequestFraming::Empty => Ok(()),
                };
            }
            Some(Err(e)) => return Err(ClientError::RequestBody(e)),
            // Trailers are not sent: hyper's client sent only those a Trailer header
            // announced, and that header is hop-by-hop.
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                _ => return Ok(()),
            },
        };
        match self.framing {
            RequestFraming::Length(_) => {
                let len = data.len() as u64;
                if len > self.left {
                    return Err(ClientError::RequestBodyLength);
                }
                self.left -= len;
                self.ended = self.left == 0;
            }
            RequestFraming::Chunked => {
                let _ = write!(wbuf, "{:X}\r\n", data.len());
                if self.body.is_end_stream() {
                    self.tail = b"\r\n0\r\n\r\n";
                    self.ended = true;
                } else {
                    self.tail = b"\r\n";
                }
            }
            RequestFraming::Empty => return Ok(()),
        }
        self.data = data;
        Ok(())
    }
}
