//! The request head parser ([`super::head`]) and the request body decoding of the
//! connection ([`super::Connection`]: Content-Length, or chunked through
//! [`Decoder`]) over bytes as a client could send them, for the fuzz target
//! `h1_request` and for tests.
//!
//! The bytes arrive in pieces, as reads would bring them, and are read as the
//! connection reads them: a head, its body, and the next head while the connection
//! would be kept (pipelined requests). Besides "no panic", what must hold whatever the
//! bytes ([`check`]):
//! - the outcome (heads, framings, bodies, trailers, how it ended) is the same
//!   however the bytes are split into pieces;
//! - a parsed head takes a prefix of the bytes buffered, no more, and leaves the
//!   rest as it was; an incomplete head leaves the buffer untouched;
//! - the head's fields, framing, keep-alive and `Expect` agree with the head's own
//!   fields read again by httparse alone ([`oracle`]): a Length framing is the
//!   Content-Length field's value, Transfer-Encoding chunked means Chunked framing
//!   and no Content-Length left in the map, both fields mean no keep-alive;
//! - a refused head gets 400, 414 or 431;
//! - a body read whole by its length is as long as the length; chunk data is never
//!   empty.
//!
//! A head over the size limit once got 431 or 414 depending on whether its request
//! line had ended in the bytes buffered when the limit was reached; the first runs
//! of this target found it, and now no difference by splitting is let through.

use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version, header};

use super::head::{self, BodyFraming, HeadError, HeadLimits};
use crate::proxy::upstream::{
    Malformed,
    chunked::{Decoded, Decoder},
};

#[cfg(test)]
mod tests;

/// Fields in order, as text names (lower case) and byte values.
pub(crate) type Fields = Vec<(String, Vec<u8>)>;

/// One request as the connection read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub method: String,
    pub target: String,
    pub version: Version,
    /// The request's header map, in its order.
    pub fields: Fields,
    pub framing: BodyFraming,
    pub keep_alive: bool,
    pub expect_continue: bool,
    /// The body's bytes, whatever came before its end or failure.
    pub body: Vec<u8>,
    /// A chunked body's trailer fields.
    pub trailers: Fields,
    pub body_end: BodyEnd,
}

/// How a request's body ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// As its framing says (no body: at once).
    Complete,
    /// The bytes ended first.
    Cut,
    /// The chunked coding is broken.
    Failed(Malformed),
}

/// How reading the bytes ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Between requests, nothing left.
    Idle,
    /// In the middle of a head: this many bytes of it.
    Partial(usize),
    /// The connection would not read another request (no keep-alive, a CONNECT, a
    /// body that did not end); this many bytes were left unread.
    Closed(usize),
    /// A head refused with this status.
    Refused(StatusCode),
}

/// What a client's bytes were read as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub requests: Vec<Request>,
    pub end: End,
    /// The refusal's error, when [`End::Refused`] (its variant may differ by split
    /// where the status may not).
    pub refusal: Option<HeadError>,
}

/// The limits the fuzz target picks from.
pub(crate) const LIMITS: [HeadLimits; 4] = [
    HeadLimits {
        max_bytes: 16 * 1024,
        max_fields: 100,
    },
    HeadLimits {
        max_bytes: 256,
        max_fields: 8,
    },
    HeadLimits {
        max_bytes: 64,
        max_fields: 3,
    },
    // More fields than the parser's stack array: a heap one.
    HeadLimits {
        max_bytes: 2048,
        max_fields: 128,
    },
];

fn fields(map: &HeaderMap) -> Fields {
    map.iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// Reads `input`, fed in pieces of `piece` bytes, under `limits`.
pub(crate) fn decode(input: &[u8], limits: HeadLimits, piece: usize) -> Outcome {
    decode_pieces(input.chunks(piece.max(1)), limits)
}

/// Reads the bytes of `pieces`, one after the other, under `limits`, checking each
/// head as it is parsed (see the module's docs).
///
/// # Panics
/// When a check fails.
pub(crate) fn decode_pieces<'a>(
    mut pieces: impl Iterator<Item = &'a [u8]>,
    limits: HeadLimits,
) -> Outcome {
    let mut buf = BytesMut::new();
    let mut spare = None;
    let mut out = Outcome {
        requests: Vec::new(),
        end: End::Idle,
        refusal: None,
    };
    let mut more = |buf: &mut BytesMut| match pieces.next() {
        Some(p) => {
            buf.extend_from_slice(p);
            true
        }
        None => false,
    };
    loop {
        // As the connection: a head is parsed once something is buffered.
        let parsed = loop {
            if buf.is_empty() {
                if more(&mut buf) {
                    continue;
                }
                out.end = End::Idle;
                return out;
            }
            let before = buf.clone();
            match head::parse(&mut buf, limits, &mut spare) {
                Ok(Some(parsed)) => {
                    let used = before.len() - buf.len();
                    assert!(used > 0, "a head of no bytes");
                    assert_eq!(&buf[..], &before[used..], "the bytes after the head");
                    oracle(&before[..used], &parsed, limits);
                    break parsed;
                }
                Ok(None) => {
                    assert_eq!(buf, before, "an incomplete head is left buffered");
                    assert!(buf.len() < limits.max_bytes, "incomplete past the limit");
                    if !more(&mut buf) {
                        out.end = End::Partial(buf.len());
                        return out;
                    }
                }
                Err(e) => {
                    // (`head::parse` says a refused head is left as it was; one
                    // refused after httparse took it is split off: see the tests.)
                    assert!(before.ends_with(&buf), "a refusal takes a prefix");
                    let status = e.status();
                    assert!(
                        [400, 414, 431].contains(&status.as_u16()),
                        "{e:?} answered {status}"
                    );
                    out.end = End::Refused(status);
                    out.refusal = Some(e);
                    return out;
                }
            }
        };
        let head::Parsed {
            request,
            framing,
            keep_alive,
            expect_continue,
        } = parsed;
        let (parts, ()) = request.into_parts();
        let mut req = Request {
            method: parts.method.as_str().to_owned(),
            target: parts.uri.to_string(),
            version: parts.version,
            fields: fields(&parts.headers),
            framing,
            keep_alive,
            expect_continue,
            body: Vec::new(),
            trailers: Vec::new(),
            body_end: BodyEnd::Complete,
        };
        // The map comes back emptied, as the connection gives it back.
        let mut map = parts.headers;
        map.clear();
        spare = Some(map);
        req.body_end = match framing {
            BodyFraming::Empty => BodyEnd::Complete,
            BodyFraming::Length(n) => {
                assert!(n > 0, "a Length framing of 0");
                let mut left = n;
                loop {
                    // As `Connection::drive_body`.
                    let k = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
                    req.body.extend_from_slice(&buf.split_to(k));
                    left -= k as u64;
                    if left == 0 {
                        assert_eq!(req.body.len() as u64, n);
                        break BodyEnd::Complete;
                    }
                    if !more(&mut buf) {
                        break BodyEnd::Cut;
                    }
                }
            }
            BodyFraming::Chunked => {
                let mut decoder = Decoder::default();
                loop {
                    match decoder.decode(&mut buf) {
                        Ok(Decoded::Data(data)) => {
                            assert!(!data.is_empty(), "a data frame is never empty");
                            req.body.extend_from_slice(&data);
                        }
                        Ok(Decoded::Trailers(t)) => {
                            req.trailers = fields(&t);
                            assert!(decoder.is_end());
                            break BodyEnd::Complete;
                        }
                        Ok(Decoded::End) => {
                            assert!(decoder.is_end());
                            break BodyEnd::Complete;
                        }
                        Ok(Decoded::More) => {
                            if !more(&mut buf) {
                                break BodyEnd::Cut;
                            }
                        }
                        Err(e) => break BodyEnd::Failed(e),
                    }
                }
            }
        };
        let goes_on =
            req.keep_alive && req.body_end == BodyEnd::Complete && req.method != "CONNECT";
        out.requests.push(req);
        if !goes_on {
            while more(&mut buf) {}
            out.end = End::Closed(buf.len());
            return out;
        }
    }
}

/// Checks a parsed head against its own bytes read again by httparse alone, with
/// the rules of RFC 9112 §6 as hyper's server has them.
///
/// # Panics
/// When the parsed head disagrees.
pub(crate) fn oracle(raw: &[u8], parsed: &head::Parsed, limits: HeadLimits) {
    assert!(
        raw.len() <= limits.max_bytes,
        "a head of {} bytes",
        raw.len()
    );
    assert!(raw.ends_with(b"\n"), "a head ends with its empty line");
    let mut slots = vec![httparse::EMPTY_HEADER; limits.max_fields + 1];
    let mut req = httparse::Request::new(&mut slots);
    let Ok(httparse::Status::Complete(len)) = req.parse(raw) else {
        panic!("httparse does not take the head again");
    };
    assert_eq!(len, raw.len());
    assert!(
        req.headers.len() <= limits.max_fields,
        "{} fields",
        req.headers.len()
    );
    let request = &parsed.request;
    assert_eq!(Some(request.method().as_str()), req.method);
    assert_eq!(
        Some(request.uri()),
        req.path
            .unwrap_or_default()
            .parse::<http::Uri>()
            .ok()
            .as_ref()
    );
    let http11 = req.version == Some(1);
    assert_eq!(
        request.version(),
        if http11 {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        }
    );
    let raw_fields: Vec<(HeaderName, HeaderValue)> = req
        .headers
        .iter()
        .map(|h| {
            (
                HeaderName::from_bytes(h.name.as_bytes()).expect("a field name"),
                HeaderValue::from_bytes(h.value).expect("a field value"),
            )
        })
        .collect();
    let all = |name: &HeaderName| -> Vec<&HeaderValue> {
        raw_fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .collect()
    };
    let map = request.headers();
    let te = all(&header::TRANSFER_ENCODING);
    let cl = all(&header::CONTENT_LENGTH);
    if let Some(last) = te.last() {
        assert!(http11, "Transfer-Encoding in HTTP/1.0");
        assert!(
            head::last_coding_is_chunked(last),
            "{last:?} is not chunked"
        );
        assert_eq!(parsed.framing, BodyFraming::Chunked);
        assert!(
            !map.contains_key(header::CONTENT_LENGTH),
            "Content-Length kept beside Transfer-Encoding"
        );
    } else if let Some(first) = cl.first() {
        let n = head::content_length_of(first).expect("a Content-Length");
        for v in &cl {
            assert_eq!(
                head::content_length_of(v),
                Some(n),
                "Content-Lengths differ"
            );
        }
        assert_eq!(
            parsed.framing,
            if n == 0 {
                BodyFraming::Empty
            } else {
                BodyFraming::Length(n)
            }
        );
        let kept: Vec<_> = map.get_all(header::CONTENT_LENGTH).iter().collect();
        assert_eq!(kept, [*first], "one Content-Length kept, the first");
    } else {
        assert_eq!(parsed.framing, BodyFraming::Empty);
    }
    if let BodyFraming::Length(n) = parsed.framing {
        let field = map.get(header::CONTENT_LENGTH).expect("a Content-Length");
        assert_eq!(head::content_length_of(field), Some(n));
    }
    if parsed.framing == BodyFraming::Chunked {
        assert!(
            map.get_all(header::TRANSFER_ENCODING)
                .iter()
                .next_back()
                .is_some_and(head::last_coding_is_chunked)
        );
    }
    // Every other field is kept, in order.
    for (name, _) in &raw_fields {
        if *name != header::CONTENT_LENGTH {
            let kept: Vec<_> = map.get_all(name).iter().collect();
            assert_eq!(kept, all(name), "the {name} fields");
        }
    }
    assert!(map.keys().all(|n| raw_fields.iter().any(|(r, _)| r == n)));
    // Keep-alive: HTTP/1.1 unless a Connection field says close; HTTP/1.0 only if
    // one says keep-alive and none close; never with both framing fields.
    let connection = all(&header::CONNECTION);
    let close = connection
        .iter()
        .any(|v| crate::proxy::upstream::has_token(v, b"close"));
    let keep = connection
        .iter()
        .any(|v| crate::proxy::upstream::has_token(v, b"keep-alive"));
    let keep_alive = !close && (http11 || keep) && !(!te.is_empty() && !cl.is_empty());
    assert_eq!(parsed.keep_alive, keep_alive, "keep-alive");
    // Only HTTP/1.1's counts (RFC 9110 §10.1.1).
    let expect = http11
        && all(&header::EXPECT)
            .last()
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    assert_eq!(parsed.expect_continue, expect, "Expect: 100-continue");
}

/// Whether two outcomes of the same bytes are the same; `Err` says how they differ.
pub(crate) fn same(a: &Outcome, b: &Outcome) -> Result<(), String> {
    if a == b {
        return Ok(());
    }
    // Refusals of the same head that differ only in their error, with the same
    // status.
    let refusal_only = a.requests == b.requests
        && matches!((&a.end, &b.end), (End::Refused(x), End::Refused(y)) if x == y);
    if refusal_only {
        return Ok(());
    }
    Err(format!("{a:#?}\nvs\n{b:#?}"))
}

/// The fuzz target: the first byte picks the head limits (its low two bits, from
/// [`LIMITS`]) and the size of the pieces; the rest is what the client sent.
/// Whatever it is, nothing panics, every head agrees with its bytes, and the outcome
/// in pieces is the one of a single read (see the module's docs).
pub fn request(data: &[u8]) {
    check(data);
}

/// [`request`]'s checks.
///
/// # Panics
/// When a check fails.
pub(crate) fn check(data: &[u8]) {
    let Some((&control, input)) = data.split_first() else {
        return;
    };
    let limits = LIMITS[usize::from(control & 3)];
    let piece = usize::from(control >> 2) + 1;
    let whole = decode(input, limits, input.len());
    let split = decode(input, limits, piece);
    if let Err(diff) = same(&whole, &split) {
        panic!("pieces of {piece} bytes read differently:\n{diff}");
    }
}
