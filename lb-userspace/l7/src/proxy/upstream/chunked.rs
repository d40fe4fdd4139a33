//! The chunked transfer coding of a response body (RFC 9112 §7.1), decoded from the
//! connection's read buffer as bytes arrive: it stops wherever the bytes stop and goes
//! on from there with the next ones, so a body decodes the same however it was split
//! into reads.
//!
//! Data comes out as slices split off the read buffer (no copy). Chunk extensions are
//! skipped, with at most [`MAX_EXTENSIONS`] bytes of them per body; trailer fields come
//! out as a [`HeaderMap`], at most [`MAX_TRAILERS`] bytes and
//! [`super::codec::MAX_HEADERS`] fields. What hyper's decoder refuses is refused here
//! too: a size that is no hex number or is past `u64`, anything but blanks, `;` or CR
//! after the size, a bare LF in an extension, data not followed by CRLF.

use bytes::{Buf as _, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::{codec::MAX_HEADERS, error::Malformed};

/// Chunk-extension bytes a body may carry in all.
pub(crate) const MAX_EXTENSIONS: u64 = 16 * 1024;

/// The longest trailer section.
pub(crate) const MAX_TRAILERS: usize = 16 * 1024;

/// Where the decoder is in the coding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The chunk size's hex digits; `digits` once there was one.
    Size { digits: bool },
    /// Blanks after the size.
    SizeBlank,
    /// A chunk extension, up to its CR.
    Extension,
    /// The LF of the size line.
    SizeLf,
    /// `left` bytes of chunk data to come.
    Data,
    /// The CR after a chunk's data.
    DataCr,
    /// The LF after a chunk's data.
    DataLf,
    /// After the last chunk: trailer fields or the final CRLF.
    Trailers,
    /// The body has ended.
    End,
}

/// What [`Decoder::decode`] found next.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// Chunk data (never empty).
    Data(Bytes),
    /// The trailer fields; the body has ended.
    Trailers(HeaderMap),
    /// The body has ended (no trailers).
    End,
    /// The buffer holds no more of the body: read more and call again.
    More,
}

/// A chunked body's decoder.
#[derive(Debug)]
pub(crate) struct Decoder {
    state: State,
    /// The chunk size being read, then the data left of the chunk.
    left: u64,
    extensions: u64,
    /// An error found reading ahead past data already returned, for the next call.
    failed: Option<Malformed>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self {
            state: State::Size { digits: false },
            left: 0,
            extensions: 0,
            failed: None,
        }
    }
}

impl Decoder {
    /// Whether the body has ended (the last chunk and the trailer section are read).
    pub(crate) fn is_end(&self) -> bool {
        self.state == State::End && self.failed.is_none()
    }

    /// Decodes from the front of `buf`, consuming what it decodes.
    ///
    /// After data, whatever framing follows in `buf` is read too, so that the end of
    /// the body is known as soon as its bytes are there ([`Decoder::is_end`]); an
    /// error found there is returned by the next call.
    ///
    /// # Errors
    /// The coding is broken or over a limit; the body cannot go on.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, Malformed> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.framing(buf)?;
        match self.state {
            State::Data if buf.is_empty() => Ok(Decoded::More),
            State::Data => {
                let n = usize::try_from(self.left).map_or(buf.len(), |l| l.min(buf.len()));
                let data = buf.split_to(n).freeze();
                self.left -= n as u64;
                if self.left == 0 {
                    self.state = State::DataCr;
                    if let Err(e) = self.framing(buf) {
                        self.failed = Some(e);
                    }
                }
                Ok(Decoded::Data(data))
            }
            State::Trailers => self.trailers(buf),
            State::End => Ok(Decoded::End),
            _ => Ok(Decoded::More),
        }
    }

    /// Reads the framing bytes at the front of `buf` up to data, the trailer
    /// fields, the end, or the end of `buf`.
    fn framing(&mut self, buf: &mut BytesMut) -> Result<(), Malformed> {
        let mut used = 0;
        let result = self.framing_in(buf, &mut used);
        buf.advance(used);
        result?;
        if self.state == State::Trailers && buf.starts_with(b"\r\n") {
            buf.advance(2);
            self.state = State::End;
        }
        Ok(())
    }

    fn framing_in(&mut self, buf: &[u8], used: &mut usize) -> Result<(), Malformed> {
        for &b in buf {
            self.state = match (self.state, b) {
                (State::Size { .. }, b) if b.is_ascii_hexdigit() => {
                    let digit = u64::from(hex(b));
                    self.left = self
                        .left
                        .checked_mul(16)
                        .and_then(|n| n.checked_add(digit))
                        .ok_or(Malformed::ChunkSize)?;
                    State::Size { digits: true }
                }
                (State::Size { digits: true } | State::SizeBlank, b' ' | b'\t') => State::SizeBlank,
                (State::Size { digits: true } | State::SizeBlank, b';') => State::Extension,
                (State::Size { digits: true } | State::SizeBlank, b'\r') => State::SizeLf,
                (State::Size { .. } | State::SizeBlank, _) => return Err(Malformed::ChunkSize),
                (State::Extension, b'\r') => State::SizeLf,
                (State::Extension, b'\n') => return Err(Malformed::ChunkExtension),
                (State::Extension, _) => {
                    self.extensions += 1;
                    if self.extensions > MAX_EXTENSIONS {
                        return Err(Malformed::ChunkExtension);
                    }
                    State::Extension
                }
                (State::SizeLf, b'\n') if self.left == 0 => State::Trailers,
                (State::SizeLf, b'\n') => State::Data,
                (State::SizeLf, _) => return Err(Malformed::ChunkCrlf),
                (State::DataCr, b'\r') => State::DataLf,
                (State::DataLf, b'\n') => State::Size { digits: false },
                (State::DataCr | State::DataLf, _) => return Err(Malformed::ChunkCrlf),
                (State::Data | State::Trailers | State::End, _) => return Ok(()),
            };
            *used += 1;
        }
        Ok(())
    }

    /// The trailer section, whole or not at all (it is short and rare).
    fn trailers(&mut self, buf: &mut BytesMut) -> Result<Decoded, Malformed> {
        let view = &buf[..buf.len().min(MAX_TRAILERS)];
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let (len, fields) = match httparse::parse_headers(view, &mut fields) {
            Ok(httparse::Status::Complete(done)) => done,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_TRAILERS => {
                return Err(Malformed::TrailersTooLarge);
            }
            Ok(httparse::Status::Partial) => return Ok(Decoded::More),
            Err(httparse::Error::TooManyHeaders) => return Err(Malformed::TrailersTooLarge),
            Err(e) => return Err(Malformed::Trailers(e)),
        };
        let mut map = HeaderMap::with_capacity(fields.len());
        for f in fields {
            let name =
                HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| Malformed::Header("name"))?;
            let value = HeaderValue::from_bytes(f.value).map_err(|_| Malformed::Header("value"))?;
            map.append(name, value);
        }
        buf.advance(len);
        self.state = State::End;
        Ok(Decoded::Trailers(map))
    }
}

fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

#[cfg(test)]
mod tests;
