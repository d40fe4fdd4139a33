//! HTTP/1.1 on the wire to a backend: the request head we write, how its body is
//! framed, and the response head we read with how its body is framed (RFC 9112 §6.3).
//!
//! The request side follows what hyper's client did with an [`UpBody`]: a bodiless
//! request goes with its headers as they are (no Transfer-Encoding), a body keeps the
//! framing [`super::super::forward`] chose (Transfer-Encoding: chunked, or the
//! Content-Length).
//!
//! The response side is strict where leniency would let a backend smuggle a second
//! response past us: a Content-Length that is not a number or that differs from
//! another, Transfer-Encoding together with Content-Length, Transfer-Encoding in
//! HTTP/1.0, obs-fold, a head over [`MAX_HEAD`] bytes or with more than
//! [`MAX_HEADERS`] fields are all refused ([`Malformed`]). hyper's client lets
//! Transfer-Encoding override Content-Length; RFC 9112 allows either, and refusing is
//! what hyper's server does with such a request.
//!
//! [`UpBody`]: super::super::body::UpBody

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, Version, header};

use super::error::Malformed;
use crate::proxy::headers::{
    Forwarded, is_hop_by_hop, lists_only_hop_by_hop, strip_hop_by_hop, write_fields,
};

/// The longest response head we read.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// The most header fields a response head (or a trailer section) may have.
pub(crate) const MAX_HEADERS: usize = 100;

/// How a request body goes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestFraming {
    /// No body.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding (length unknown up front).
    Chunked,
}

impl From<RequestFraming> for Framing {
    fn from(f: RequestFraming) -> Self {
        match f {
            RequestFraming::Empty => Framing::Empty,
            RequestFraming::Length(n) => Framing::Length(n),
            RequestFraming::Chunked => Framing::Chunked,
        }
    }
}

/// Settles how a request body is framed, fixing `headers` to say so. `empty`: the
/// body is known to have ended (`is_end_stream`); `exact`: its exact length when
/// known.
pub(crate) fn request_framing(
    headers: &mut HeaderMap,
    empty: bool,
    exact: Option<u64>,
) -> RequestFraming {
    if empty {
        // As hyper's client: the headers go as they are, without a coding.
        headers.remove(header::TRANSFER_ENCODING);
        return RequestFraming::Empty;
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        // The only coding we send; forward sets it for bodies of unknown length.
        if !is_chunked(headers) {
            headers.insert(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
        }
        headers.remove(header::CONTENT_LENGTH);
        return RequestFraming::Chunked;
    }
    match content_length(headers) {
        Ok(Some(n)) => return RequestFraming::Length(n),
        Ok(None) => {}
        // A filter's Content-Length that does not parse cannot frame anything.
        Err(_) => {
            headers.remove(header::CONTENT_LENGTH);
        }
    }
    if let Some(n) = exact {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        RequestFraming::Length(n)
    } else {
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        RequestFraming::Chunked
    }
}

/// Appends the request head to `out`: the request line with the origin-form target
/// (`/` when the URI has no path), every header (X-Forwarded-* as `forwarded` says,
/// see [`write_fields`]), the blank line.
pub(crate) fn encode_head(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    forwarded: Option<Forwarded<'_>>,
    out: &mut Vec<u8>,
) {
    let target = uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    write_fields(headers, forwarded, out);
    out.extend_from_slice(b"\r\n");
}

/// How a message body is delimited (RFC 9112 §6.3): a response's as read from a
/// backend, and either one as written ([`crate::proxy::writer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: HEAD, 1xx, 204, 304, `Content-Length: 0`, an upgrade.
    Empty,
    /// Exactly this many bytes (more than zero).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the backend closes the connection, which then cannot be reused.
    Close,
}

/// A parsed final response head; its fields are in the map given to [`parse_head`].
#[derive(Debug)]
pub(crate) struct Head {
    pub status: StatusCode,
    pub version: Version,
    /// The reason phrase when it is not the status's canonical one (hyper's server
    /// writes it to the client as it came).
    pub reason: Option<hyper::ext::ReasonPhrase>,
    pub framing: Framing,
    /// Whether the connection may carry another request after this response, as far
    /// as the head says (version, Connection, an upgrade, a close-delimited body).
    pub keep_alive: bool,
    /// The fields as they came, with [`HeadMode::Raw`] for an ordinary response
    /// with a body.
    pub raw: Option<super::raw::RawHead>,
}

/// Where a header's name and value are in the head's bytes.
#[derive(Clone, Copy, Default)]
pub(crate) struct Span {
    pub name: (usize, usize),
    pub value: (usize, usize),
}

/// What becomes of a response head's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadMode {
    /// All of them go into the map.
    Map,
    /// The map gets them as [`strip_hop_by_hop`] would leave them: hop-by-hop fields
    /// are not put in (the head still frames the body and says whether the
    /// connection stays open), and a Connection that lists other names is put in
    /// and stripped with them.
    Bare,
    /// As [`HeadMode::Bare`], but an ordinary response's fields stay in its head's
    /// bytes for an HTTP/1 client ([`super::raw`]) and the map stays empty. Only
    /// when it has a body: the connection, which keeps them, stays with the body.
    Raw,
}

/// What [`parse_head`] reuses from one response to the next, per worker, not per
/// connection, so a connection (moved into every response body) stays small.
#[derive(Default)]
struct Scratch {
    /// Where the fields are, noted between parsing the head and splitting it off the
    /// buffer: an array for [`MAX_HEADERS`] on the stack was 3.2 KB to zero for every
    /// response (a tenth of the proxy's instructions per request).
    spans: Vec<Span>,
    /// The names of the last heads' fields by position ([`Names`]).
    names: Names,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// The longest name [`Names`] keeps.
const CACHED_NAME_MAX: usize = 32;

/// How many of a head's first fields [`Names`] keeps names for.
const CACHED_NAMES: usize = 32;

/// The header names of the fields a worker's last responses had at each position, as
/// the backend spelled them and as parsed. A backend answers with the same fields in
/// the same order response after response (Server, Date, Content-Type, …), so the
/// name at a position is usually the one before: a byte comparison then stands in
/// for parsing the name (lower-casing it and matching it against the standard names,
/// ~100 instructions a field), and a name that is not a standard one is not
/// allocated again. A different name at a position replaces the one kept there.
#[derive(Default)]
struct Names(Vec<CachedName>);

struct CachedName {
    raw: [u8; CACHED_NAME_MAX],
    len: u8,
    name: HeaderName,
}

impl Names {
    /// The name of the field at `position` whose text is `raw`.
    fn get(&mut self, position: usize, raw: &[u8]) -> Result<HeaderName, Malformed> {
        if let Some(c) = self.0.get(position)
            && c.raw.get(..usize::from(c.len)) == Some(raw)
        {
            return Ok(c.name.clone());
        }
        let name = HeaderName::from_bytes(raw).map_err(|_| Malformed::Header("name"))?;
        if raw.len() <= CACHED_NAME_MAX && position < CACHED_NAMES {
            let mut cached = CachedName {
                raw: [0; CACHED_NAME_MAX],
                len: raw.len() as u8,
                name: name.clone(),
            };
            cached.raw[..raw.len()].copy_from_slice(raw);
            let kept = self.0.len();
            match self.0.get_mut(position) {
                Some(c) => *c = cached,
                // Positions fill in order: one past the end is the next.
                None if position == kept => self.0.push(cached),
                None => {}
            }
        }
        Ok(name)
    }
}

/// Parses the response head at the start of `buf`, skipping informational (1xx,
/// except 101) responses before it, into `headers` (cleared first) as `mode` says.
/// On success the head's bytes are split off `buf` and the header values share them;
/// `Ok(None)`: more bytes are needed.
///
/// # Errors
/// A head that does not parse, is too large, or frames its body in a way we refuse.
///
/// [`strip_hop_by_hop`]: crate::proxy::headers::strip_hop_by_hop
pub(crate) fn parse_head(
    buf: &mut BytesMut,
    method: &Method,
    headers: &mut HeaderMap,
    mode: HeadMode,
) -> Result<Option<Head>, Malformed> {
    loop {
        let parsed = SCRATCH.with_borrow_mut(|s| parse_one(buf, method, headers, s, mode));
        let Some(head) = parsed? else {
            return Ok(None);
        };
        if let Some(head) = head {
            return Ok(Some(head));
        }
    }
}

/// One head: `Ok(Some(None))` for an informational one, consumed and dropped.
fn parse_one(
    buf: &mut BytesMut,
    method: &Method,
    headers: &mut HeaderMap,
    scratch: &mut Scratch,
    mode: HeadMode,
) -> Result<Option<Option<Head>>, Malformed> {
    let Scratch { spans, names } = scratch;
    // Never more than MAX_HEAD bytes: a head is refused at the same byte however the
    // bytes arrived (whole, or in pieces).
    let view = &buf[..buf.len().min(MAX_HEAD)];
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, view, &mut raw)
        .map_err(Malformed::Head)?;
    let len = match parsed {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial if buf.len() >= MAX_HEAD => {
            return Err(Malformed::HeadTooLarge);
        }
        httparse::Status::Partial => return Ok(None),
    };
    let code = res.code.ok_or(Malformed::Header("status"))?;
    let status = StatusCode::from_u16(code).map_err(|_| Malformed::Header("status"))?;
    let version = if res.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // Where a piece httparse returned is in the head. Not every piece is a slice of
    // it: a reason phrase that is not UTF-8 comes back as a static "".
    let base = view.as_ptr().addr();
    let at = |part: &[u8]| {
        if part.is_empty() {
            return Some((0, 0));
        }
        let start = part.as_ptr().addr().checked_sub(base)?;
        let end = start + part.len();
        (end <= view.len()).then_some((start, end))
    };
    let reason = match res.reason {
        Some(r) if Some(r) != status.canonical_reason() => at(r.as_bytes()),
        _ => None,
    };
    spans.clear();
    for h in res.headers.iter() {
        spans.push(Span {
            name: at(h.name.as_bytes()).ok_or(Malformed::Header("name"))?,
            value: at(h.value).ok_or(Malformed::Header("value"))?,
        });
    }
    let bytes = buf.split_to(len).freeze();
    if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
        // 100 Continue, 103 Early Hints, …: the final response follows.
        return Ok(Some(None));
    }
    // `clear` walks the whole index table even of an empty map (~230 instructions),
    // and the connection hands over its request's map already emptied.
    if !headers.is_empty() {
        headers.clear();
    }
    let raw = (mode == HeadMode::Raw && super::raw::ordinary(status, method))
        .then(|| super::raw::take(&bytes, spans, version == Version::HTTP_11))
        .flatten();
    let (seen, raw) = match raw {
        Some((raw, seen)) => (seen, Some(raw)),
        None => (
            fill(
                headers,
                &bytes,
                spans,
                names,
                version,
                mode != HeadMode::Map,
            )?,
            None,
        ),
    };
    let framing = framing(status, version, method, &seen)?;
    let raw = if raw.is_some() && framing == Framing::Empty {
        // Without a body the response's connection goes back to the pool at once,
        // before the client's side would write the lines from it: the map it is.
        fill(headers, &bytes, spans, names, version, true)?;
        None
    } else {
        raw
    };
    let keep_alive = seen.keep_alive && framing != Framing::Close && !upgrade(status, method);
    let reason =
        reason.and_then(|(s, e)| hyper::ext::ReasonPhrase::try_from(bytes.slice(s..e)).ok());
    Ok(Some(Some(Head {
        status,
        version,
        reason,
        framing,
        keep_alive,
        raw,
    })))
}

/// What [`fill`] (or [`super::raw::take`]) saw of the fields that say how the body
/// is framed and whether the connection stays open, noted as each field went by:
/// looking them up again afterwards cost two hashed lookups per response.
pub(crate) struct Seen {
    /// HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with `keep-alive`.
    pub keep_alive: bool,
    /// `Some`: a Transfer-Encoding came; whether its last value ends with `chunked`.
    pub chunked: Option<bool>,
    /// The Content-Length the head's values agree on ([`add_length`]).
    pub length: Result<Option<u64>, Malformed>,
}

/// Puts the head's fields into `headers`, noting what [`framing`] needs ([`Seen`]).
fn fill(
    headers: &mut HeaderMap,
    bytes: &Bytes,
    spans: &[Span],
    names: &mut Names,
    version: Version,
    drop_hop_by_hop: bool,
) -> Result<Seen, Malformed> {
    let mut keep_alive = version == Version::HTTP_11;
    let mut close = false;
    let mut chunked = None;
    let mut length = Ok(None);
    // A Connection that lists other names was put in: strip them all at the end.
    let mut strip = false;
    headers.reserve(spans.len());
    for (position, s) in spans.iter().enumerate() {
        let name = names.get(position, &bytes[s.name.0..s.name.1])?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(s.value.0..s.value.1))
            .map_err(|_| Malformed::Header("value"))?;
        if name == header::CONNECTION {
            close |= has_token(&value, b"close");
            keep_alive |= has_token(&value, b"keep-alive");
            if drop_hop_by_hop && !lists_only_hop_by_hop(&value) {
                strip = true;
                headers.append(name, value);
                continue;
            }
        } else if name == header::CONTENT_LENGTH {
            add_length(&value, &mut length);
        } else if name == header::TRANSFER_ENCODING {
            chunked = Some(ends_chunked(&value));
        }
        if drop_hop_by_hop && is_hop_by_hop(&name) {
            continue;
        }
        headers.append(name, value);
    }
    if strip {
        strip_hop_by_hop(headers);
    }
    Ok(Seen {
        keep_alive: keep_alive && !close,
        chunked,
        length,
    })
}

/// A response after which the connection belongs to another protocol (or a tunnel):
/// we never ask for one (Upgrade is hop-by-hop, CONNECT goes through `tunnel`), so
/// such a connection is closed.
fn upgrade(status: StatusCode, method: &Method) -> bool {
    status == StatusCode::SWITCHING_PROTOCOLS || (*method == Method::CONNECT && status.is_success())
}

/// The body's framing, in RFC 9112 §6.3's order.
fn framing(
    status: StatusCode,
    version: Version,
    method: &Method,
    seen: &Seen,
) -> Result<Framing, Malformed> {
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || *method == Method::HEAD
        || upgrade(status, method)
    {
        return Ok(Framing::Empty);
    }
    if let Some(chunked) = seen.chunked {
        if !matches!(seen.length, Ok(None)) {
            return Err(Malformed::LengthAndEncoding);
        }
        if version == Version::HTTP_10 {
            return Err(Malformed::EncodingInHttp10);
        }
        // Chunked must be the last coding; otherwise the body ends with the connection.
        return Ok(if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        });
    }
    Ok(match seen.length.clone()? {
        Some(0) => Framing::Empty,
        Some(n) => Framing::Length(n),
        None => Framing::Close,
    })
}

/// Whether the last transfer coding is `chunked`.
fn is_chunked(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .next_back()
        .is_some_and(ends_chunked)
}

/// Whether a Transfer-Encoding value's last coding is `chunked`.
fn ends_chunked(value: &HeaderValue) -> bool {
    ends_chunked_bytes(value.as_bytes())
}

/// [`ends_chunked`] of a value's bytes.
pub(crate) fn ends_chunked_bytes(value: &[u8]) -> bool {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.rsplit(',').next())
        .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
}

/// The Content-Length the head's values agree on (a value may be a list of equal
/// lengths); `None` without one.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, Malformed> {
    let mut length = Ok(None);
    for value in headers.get_all(header::CONTENT_LENGTH) {
        add_length(value, &mut length);
    }
    length
}

/// Takes one Content-Length value into `length`: each of its comma-separated items
/// must be digits and equal to every length before; otherwise `length` becomes the
/// error and stays it.
fn add_length(value: &HeaderValue, length: &mut Result<Option<u64>, Malformed>) {
    add_length_bytes(value.as_bytes(), length);
}

/// [`add_length`] of a value's bytes.
pub(crate) fn add_length_bytes(value: &[u8], length: &mut Result<Option<u64>, Malformed>) {
    let Ok(known) = length else {
        return;
    };
    let mut now = *known;
    for item in value.split(|&b| b == b',') {
        match decimal(item.trim_ascii()) {
            Some(n) if now.is_none_or(|l| l == n) => now = Some(n),
            _ => {
                *length = Err(Malformed::ContentLength);
                return;
            }
        }
    }
    *length = Ok(now);
}

/// Digits only (no sign, no blank), within `u64`.
pub(crate) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if d.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        } else {
            None
        }
    })
}

/// Whether a comma-separated header value lists `token` (ASCII case-insensitively).
pub(crate) fn has_token(value: &HeaderValue, token: &[u8]) -> bool {
    has_token_bytes(value.as_bytes(), token)
}

/// [`has_token`] of a value's bytes.
pub(crate) fn has_token_bytes(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests;
