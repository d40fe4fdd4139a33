//! Writing an HTTP/1 message: the head (already in the connection's write buffer),
//! then the body frame by frame, delimited as its [`Framing`] says. Both directions
//! use it: a request to a backend ([`super::upstream`]) and a response to a client
//! ([`super::h1`]).
//!
//! The head goes out with the body's first frame when that is there at once, and a
//! chunk with its size line and CRLF, in one vectored write: a small message is one
//! `writev`. Trailers are not sent: the `Trailer` field that would announce them is
//! hop-by-hop, and hyper, which wrote both directions before, sent only announced
//! ones.

use std::{
    io::{self, IoSlice},
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::{io::AsyncWrite, net::TcpStream};

use super::upstream::Framing;

/// Why writing a message stopped.
#[derive(Debug)]
pub(crate) enum WriteError<E> {
    /// The socket failed.
    Io(io::Error),
    /// The body failed.
    Body(E),
    /// The body is longer or shorter than its Content-Length.
    Length,
}

/// A message on its way out: the head (in the connection's `wbuf`), then the body
/// frame by frame, coded as [`Framing`] says.
#[derive(Debug)]
pub(crate) struct Writer<B> {
    body: B,
    framing: Framing,
    /// Body bytes still to come for a Content-Length.
    left: u64,
    /// Bytes of `wbuf` already written.
    written: usize,
    /// Data of the current piece not yet written.
    data: Bytes,
    /// What follows the data (CRLF, the last chunk), not yet written.
    tail: &'static [u8],
    /// Nothing more comes from the body.
    ended: bool,
}

impl<B> Writer<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    pub(crate) fn new(body: B, framing: Framing) -> Self {
        let (left, ended) = match framing {
            Framing::Empty => (0, body.is_end_stream()),
            Framing::Length(n) => (n, n == 0),
            Framing::Chunked | Framing::Close => (0, false),
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

    /// Writes until the whole message is out (`Ready(Ok)`), or the socket or body
    /// makes us wait. The head goes out with the body's first frame when that is
    /// ready at once.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        stream: &mut TcpStream,
        wbuf: &mut Vec<u8>,
    ) -> Poll<Result<(), WriteError<B::Error>>> {
        loop {
            // Take the next frame before writing what is there, so that it goes in
            // the same write; a body that has none ready yet waits for the next turn.
            if !self.ended && self.data.is_empty() && self.tail.is_empty() {
                match Pin::new(&mut self.body).poll_frame(cx) {
                    Poll::Ready(frame) => self.take(frame, wbuf)?,
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
        frame: Option<Result<Frame<Bytes>, B::Error>>,
        wbuf: &mut Vec<u8>,
    ) -> Result<(), WriteError<B::Error>> {
        let data = match frame {
            None => {
                self.ended = true;
                return match self.framing {
                    Framing::Length(_) => Err(WriteError::Length),
                    Framing::Chunked => {
                        self.tail = b"0\r\n\r\n";
                        Ok(())
                    }
                    Framing::Empty | Framing::Close => Ok(()),
                };
            }
            Some(Err(e)) => return Err(WriteError::Body(e)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                _ => return Ok(()),
            },
        };
        match self.framing {
            Framing::Length(_) => {
                let len = data.len() as u64;
                if len > self.left {
                    return Err(WriteError::Length);
                }
                self.left -= len;
                self.ended = self.left == 0;
            }
            Framing::Chunked => {
                chunk_size(data.len(), wbuf);
                if self.body.is_end_stream() {
                    self.tail = b"\r\n0\r\n\r\n";
                    self.ended = true;
                } else {
                    self.tail = b"\r\n";
                }
            }
            Framing::Close => self.ended = self.body.is_end_stream(),
            // A body where none may go (HEAD, 204, 304): dropped, as hyper did.
            Framing::Empty => {
                self.ended = self.body.is_end_stream();
                return Ok(());
            }
        }
        self.data = data;
        Ok(())
    }
}

/// Appends a chunk's size line (hex digits and CRLF).
fn chunk_size(len: usize, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = len;
    loop {
        i -= 1;
        digits[i] = HEX[n & 0xf];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunk_sizes_are_upper_case_hex() {
        for (n, text) in [
            (0, "0"),
            (9, "9"),
            (10, "A"),
            (255, "FF"),
            (4096, "1000"),
            (usize::MAX, "FFFFFFFFFFFFFFFF"),
        ] {
            let mut out = Vec::new();
            super::chunk_size(n, &mut out);
            assert_eq!(out, format!("{text}\r\n").as_bytes());
        }
    }
}
