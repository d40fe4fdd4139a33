//! A backend's response head passed to an HTTP/1 client as the backend wrote it,
//! without going through a header map: for a route without filters nothing reads
//! or changes the fields, so putting each into a `HeaderMap` (its name looked up,
//! its value checked and shared, the field hashed in) and writing it out again from
//! the map was work for nothing, about 4,000 instructions of a proxied request's
//! 21,000 (callgrind). nginx and HAProxy copy header lines the same way.
//!
//! Kept: every field line but the hop-by-hop ones, byte for byte (the backend's
//! spelling and order), in as few ranges of the head as the dropped lines allow.
//! Only an ordinary response qualifies (not 1xx, 204, 304, nor one to HEAD or
//! CONNECT, whose length fields follow rules of their own), and only when each line
//! ends with CRLF and Connection names no field but hop-by-hop ones; any other goes
//! into the map as before.

use bytes::Bytes;
use http::{Method, StatusCode};
use smallvec::SmallVec;

use super::codec::{Seen, Span, add_length_bytes, ends_chunked_bytes, has_token_bytes};

/// The fields of a response head that go to the client as they came.
#[derive(Clone, Debug)]
pub(crate) struct RawHead {
    /// The whole head, status line to blank line.
    head: Bytes,
    /// The kept field lines, each range with its CRLFs.
    ranges: SmallVec<[(u32, u32); 4]>,
    /// The Content-Length the fields say, if they say one.
    pub length: Option<u64>,
    /// The fields have a Date.
    pub date: bool,
}

impl RawHead {
    /// Appends the kept field lines.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        for &(s, e) in &self.ranges {
            out.extend_from_slice(&self.head[s as usize..e as usize]);
        }
    }

    /// The kept field lines as text, for tests.
    #[cfg(test)]
    pub(crate) fn text(&self) -> String {
        let mut out = Vec::new();
        self.write(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// What a field is to the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Plain,
    Date,
    ContentLength,
    TransferEncoding,
    Connection,
    /// Hop-by-hop ([`crate::proxy::headers`]' list), other than the two above:
    /// dropped.
    HopByHop,
}

fn kind(name: &[u8]) -> Kind {
    // Most names are told apart by their length alone.
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    match name.len() {
        4 if is("date") => Kind::Date,
        14 if is("content-length") => Kind::ContentLength,
        17 if is("transfer-encoding") => Kind::TransferEncoding,
        10 if is("connection") => Kind::Connection,
        _ if crate::proxy::headers::is_hop_by_hop_text(name) => Kind::HopByHop,
        _ => Kind::Plain,
    }
}

/// Whether a response to `method` with `status` may go raw.
pub(crate) fn ordinary(status: StatusCode, method: &Method) -> bool {
    !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || *method == Method::HEAD
        || *method == Method::CONNECT)
}

/// The raw head of `head` (whose fields are at `spans`), with what frames its body;
/// `None` when it must go through the map (module docs).
pub(crate) fn take(head: &Bytes, spans: &[Span], http11: bool) -> Option<(RawHead, Seen)> {
    let mut ranges: SmallVec<[(u32, u32); 4]> = SmallVec::new();
    let mut keep_alive = http11;
    let mut close = false;
    let mut chunked = None;
    let mut length = Ok(None);
    let mut date = false;
    // The head is at most `MAX_HEAD` bytes: offsets fit in `u32`.
    let end_of_fields = head.len().checked_sub(2)?;
    for (i, s) in spans.iter().enumerate() {
        let start = s.name.0;
        let end = spans.get(i + 1).map_or(end_of_fields, |next| next.name.0);
        if end < start + 2 || head.get(end - 2..end) != Some(&b"\r\n"[..]) {
            return None;
        }
        let value = &head[s.value.0..s.value.1];
        let keep = match kind(&head[s.name.0..s.name.1]) {
            Kind::Plain => true,
            Kind::Date => {
                date = true;
                true
            }
            Kind::ContentLength => {
                add_length_bytes(value, &mut length);
                true
            }
            Kind::TransferEncoding => {
                chunked = Some(ends_chunked_bytes(value));
                false
            }
            // What nearly every backend that keeps connections says.
            Kind::Connection if value.eq_ignore_ascii_case(b"keep-alive") => {
                keep_alive = true;
                false
            }
            Kind::Connection => {
                close |= has_token_bytes(value, b"close");
                keep_alive |= has_token_bytes(value, b"keep-alive");
                if !crate::proxy::headers::lists_only_hop_by_hop_bytes(value) {
                    return None;
                }
                false
            }
            Kind::HopByHop => false,
        };
        if keep {
            let (start, end) = (u32::try_from(start).ok()?, u32::try_from(end).ok()?);
            match ranges.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => ranges.push((start, end)),
            }
        }
    }
    let raw = RawHead {
        head: head.clone(),
        ranges,
        length: length.clone().ok().flatten(),
        date,
    };
    Some((
        raw,
        Seen {
            keep_alive: keep_alive && !close,
            chunked,
            length,
        },
    ))
}
