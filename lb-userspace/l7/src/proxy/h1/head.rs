//! A client's HTTP/1.x request head: parsed from the connection's read buffer into
//! the `http` types the routes read, with what the connection needs to know to read
//! its body and answer it (framing, keep-alive, `Expect: 100-continue`, CONNECT).
//!
//! The rules are hyper's server's, which this parser replaced, so clients see no
//! change: a Content-Length that is not all digits or that differs from another, a
//! Transfer-Encoding whose last coding is not `chunked` and any Transfer-Encoding in
//! HTTP/1.0 are refused (400); with both, Transfer-Encoding wins, the Content-Length
//! is dropped and the connection closes after the answer (RFC 9112 §6.3). A head
//! that does not fit in the limit is refused with 431, or with 414 when its request
//! line alone does not (whether the bytes came in one read or many); more fields
//! than the limit also get 431. Anything httparse refuses gets 400. `Expect:
//! 100-continue` counts only in HTTP/1.1 (RFC 9110 §10.1.1).
//!
//! Nothing is copied: the method, target and field values are slices of the head's
//! bytes, split off the read buffer.

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri, Version, header};

use crate::proxy::upstream::has_token;

/// The longest request target hyper accepted; ours is the same.
const MAX_URI: usize = (u16::MAX - 1) as usize;

/// Fields parsed into a stack array; a configured limit above this takes a heap one.
const STACK_FIELDS: usize = 100;

/// How a request's body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    /// No body.
    Empty,
    /// Exactly this many bytes (more than zero).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
}

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct Parsed {
    /// The request, without its body yet.
    pub request: Request<()>,
    pub framing: BodyFraming,
    /// Whether the connection may carry another request after this one, as far as
    /// the head says.
    pub keep_alive: bool,
    /// The client waits for `100 Continue` before it sends the body.
    pub expect_continue: bool,
}

/// Why a head is refused; [`HeadError::status`] is the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HeadError {
    /// httparse refused it (bad request line, field syntax, version).
    #[error("malformed request head: {0}")]
    Syntax(&'static str),
    /// The method is not a token.
    #[error("malformed request method")]
    Method,
    /// The target does not parse as a URI.
    #[error("malformed request target")]
    Target,
    /// A Content-Length that is not a number, or two that differ.
    #[error("invalid Content-Length")]
    ContentLength,
    /// A Transfer-Encoding whose last coding is not chunked, or one in HTTP/1.0.
    #[error("unsupported Transfer-Encoding")]
    TransferEncoding,
    /// The head is larger than the limit.
    #[error("request head larger than {0} bytes")]
    TooLarge(usize),
    /// The request line alone is larger than the limit.
    #[error("request target longer than the limit")]
    TargetTooLong,
    /// As many fields as the limit, or more.
    #[error("more than {0} header fields")]
    TooManyFields(usize),
}

impl HeadError {
    /// The status the client gets.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            HeadError::TooLarge(_) | HeadError::TooManyFields(_) => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            HeadError::TargetTooLong => StatusCode::URI_TOO_LONG,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// The limits a head is parsed under.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadLimits {
    /// Bytes a head may take, request line and fields.
    pub max_bytes: usize,
    /// The most fields a head may have.
    pub max_fields: usize,
}

/// Parses the head at the start of `buf`, splitting it off when it is complete.
/// `Ok(None)`: the head is not complete yet (read more and call again).
///
/// `spare`: an emptied map to fill, if the caller has one (taken only when the head
/// is complete).
///
/// # Errors
/// [`HeadError`] for a head that must be refused (its bytes may or may not have been
/// split off `buf`: the connection closes after the refusal either way).
pub(crate) fn parse(
    buf: &mut BytesMut,
    limits: HeadLimits,
    spare: &mut Option<HeaderMap>,
) -> Result<Option<Parsed>, HeadError> {
    let mut stack: [MaybeUninit<httparse::Header<'_>>; STACK_FIELDS] =
        [const { MaybeUninit::uninit() }; STACK_FIELDS];
    let mut heap: Vec<MaybeUninit<httparse::Header<'_>>>;
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_fields <= STACK_FIELDS {
        &mut stack[..limits.max_fields]
    } else {
        heap = Vec::with_capacity(limits.max_fields);
        heap.resize_with(limits.max_fields, MaybeUninit::uninit);
        &mut heap
    };
    let mut spans = Spans::default();
    let len = {
        // Never more than the limit: a head is refused at the same byte (and for the
        // same reason) however its bytes arrived, whole or in pieces.
        let bytes: &[u8] = &buf[..buf.len().min(limits.max_bytes)];
        let mut req = httparse::Request::new(&mut []);
        match httparse::ParserConfig::default()
            .parse_request_with_uninit_headers(&mut req, bytes, slots)
        {
            Ok(httparse::Status::Complete(len)) => {
                if len > limits.max_bytes {
                    return Err(too_large(bytes, limits.max_bytes));
                }
                spans.record(bytes, &req)?;
                len
            }
            Ok(httparse::Status::Partial) => return partial(bytes, limits),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(HeadError::TooManyFields(limits.max_fields));
            }
            Err(e) => return Err(HeadError::Syntax(syntax(e))),
        }
    };
    let head = buf.split_to(len).freeze();
    build(&head, &spans, spare.take().unwrap_or_default()).map(Some)
}

/// A head not complete yet: fine while it fits, else refused.
fn partial(bytes: &[u8], limits: HeadLimits) -> Result<Option<Parsed>, HeadError> {
    if bytes.len() < limits.max_bytes {
        return Ok(None);
    }
    Err(too_large(bytes, limits.max_bytes))
}

/// Why a head over `max` bytes is refused: 414 when its request line alone is over
/// the limit, else 431.
fn too_large(bytes: &[u8], max: usize) -> HeadError {
    match bytes.iter().position(|&b| b == b'\n') {
        Some(line) if line < max => HeadError::TooLarge(max),
        _ => HeadError::TargetTooLong,
    }
}

fn syntax(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token",
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::Version => "invalid HTTP version",
    }
}

/// A field's name and value, as `(start, end)` offsets.
type Field = ((usize, usize), (usize, usize));

/// Where the parts of a head are, as offsets into its bytes, so that they can be
/// taken as slices of the head once it is split off the read buffer.
#[derive(Default)]
struct Spans {
    method: (usize, usize),
    target: (usize, usize),
    version: u8,
    /// Name and value of each field.
    fields: smallvec::SmallVec<[Field; 24]>,
}

impl Spans {
    fn record(&mut self, bytes: &[u8], req: &httparse::Request<'_, '_>) -> Result<(), HeadError> {
        let at = |s: &[u8]| {
            let start = s.as_ptr() as usize - bytes.as_ptr() as usize;
            (start, start + s.len())
        };
        let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version)
        else {
            return Err(HeadError::Syntax("incomplete request line"));
        };
        if target.len() > MAX_URI {
            return Err(HeadError::TargetTooLong);
        }
        self.method = at(method.as_bytes());
        self.target = at(target.as_bytes());
        self.version = version;
        self.fields.reserve(req.headers.len());
        for h in req.headers.iter() {
            self.fields.push((at(h.name.as_bytes()), at(h.value)));
        }
        Ok(())
    }
}

/// The request from a complete head (`head` holds exactly its bytes).
fn build(head: &Bytes, spans: &Spans, mut headers: HeaderMap) -> Result<Parsed, HeadError> {
    let method =
        Method::from_bytes(&head[spans.method.0..spans.method.1]).map_err(|_| HeadError::Method)?;
    let uri = Uri::from_maybe_shared(head.slice(spans.target.0..spans.target.1))
        .map_err(|_| HeadError::Target)?;
    let http11 = spans.version == 1;
    let mut keep_alive = http11;
    let mut closing = false;
    let mut framing = BodyFraming::Empty;
    let mut length: Option<u64> = None;
    let (mut te, mut te_chunked, mut cl) = (false, false, false);
    let mut expect_continue = false;
    headers.reserve(spans.fields.len());
    for &((ns, ne), (vs, ve)) in &spans.fields {
        let name = HeaderName::from_bytes(&head[ns..ne])
            .map_err(|_| HeadError::Syntax("invalid header name"))?;
        // httparse let through only bytes a field value may hold (visible ASCII,
        // blanks, obs-text); `HeaderValue` checks them again.
        let value = HeaderValue::from_maybe_shared(head.slice(vs..ve))
            .map_err(|_| HeadError::Syntax("invalid header value"))?;
        match name {
            header::TRANSFER_ENCODING => {
                if !http11 {
                    return Err(HeadError::TransferEncoding);
                }
                te = true;
                if length.take().is_some() {
                    headers.remove(header::CONTENT_LENGTH);
                }
                te_chunked = last_coding_is_chunked(&value);
                framing = if te_chunked {
                    BodyFraming::Chunked
                } else {
                    BodyFraming::Empty
                };
            }
            header::CONTENT_LENGTH => {
                cl = true;
                if te {
                    continue;
                }
                let n = content_length_of(&value).ok_or(HeadError::ContentLength)?;
                match length {
                    Some(prev) if prev != n => return Err(HeadError::ContentLength),
                    // A repeat of the same length is not kept twice.
                    Some(_) => continue,
                    None => {
                        length = Some(n);
                        framing = if n == 0 {
                            BodyFraming::Empty
                        } else {
                            BodyFraming::Length(n)
                        };
                    }
                }
            }
            header::CONNECTION => {
                // Once a Connection line asks to close, a later keep-alive does not
                // undo it.
                if closing || has_token(&value, b"close") {
                    closing = true;
                    keep_alive = false;
                } else if !keep_alive {
                    keep_alive = has_token(&value, b"keep-alive");
                }
            }
            header::EXPECT => {
                expect_continue = http11 && value.as_bytes().eq_ignore_ascii_case(b"100-continue");
            }
            _ => {}
        }
        headers.append(name, value);
    }
    if te && !te_chunked {
        return Err(HeadError::TransferEncoding);
    }
    if te && cl {
        keep_alive = false;
    }
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = if http11 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    *request.headers_mut() = headers;
    Ok(Parsed {
        request,
        framing,
        keep_alive,
        expect_continue,
    })
}

/// A Content-Length value: digits only, no sign, no blanks, no overflow (hyper's
/// rule; a list of equal values is refused too).
pub(crate) fn content_length_of(value: &HeaderValue) -> Option<u64> {
    // Any number of digits (leading zeros too, as hyper reads them), within `u64`.
    crate::proxy::upstream::decimal(value.as_bytes())
}

/// Whether the last coding of a Transfer-Encoding value is `chunked`.
pub(crate) fn last_coding_is_chunked(value: &HeaderValue) -> bool {
    value
        .as_bytes()
        .rsplit(|&b| b == b',')
        .next()
        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}
