//! A response's head as an HTTP/1 client gets it, with the body's framing: hyper's
//! server's rules, which this replaced, so clients see no change.
//!
//! - The status line has the request's version (HTTP/1.0 to an HTTP/1.0 client) and
//!   the backend's own reason phrase when it had one.
//! - Content-Length: a body that knows its length keeps the field as given (or gets
//!   one); a body of unknown length goes chunked to an HTTP/1.1 client and is ended
//!   by closing the connection for an HTTP/1.0 one; an empty body gets
//!   `content-length: 0`. HEAD answers keep their field and send no body; 1xx, 204
//!   and 304 answers and a CONNECT's 2xx have neither field nor body.
//! - `connection: close` when the connection closes after this answer (the client or
//!   the response asked for it, or the length is the close); `connection:
//!   keep-alive` to an HTTP/1.0 client that asked to keep the connection.
//! - A `date` field when the response has none.
//!
//! Field names go out in lower case, as `http`'s names are (and as hyper wrote them).

use http::{HeaderMap, Method, StatusCode, Version, header, response::Parts};

use super::date;
use crate::proxy::{
    headers::write_field,
    upstream::{Framing, RawHead, has_token},
};

/// What answering a request depends on, from its head.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked {
    pub head: bool,
    pub connect: bool,
    pub version: Version,
    /// The client's head allows another request after this one.
    pub keep_alive: bool,
}

impl Asked {
    pub(crate) fn of(method: &Method, version: Version, keep_alive: bool) -> Self {
        Self {
            head: *method == Method::HEAD,
            connect: *method == Method::CONNECT,
            version,
            keep_alive,
        }
    }
}

/// How the answer goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub framing: Framing,
    /// Another request may follow on the connection.
    pub keep_alive: bool,
    /// A CONNECT's 2xx: the connection becomes the tunnel.
    pub upgrade: bool,
}

/// The body as its head is written: ended already, of a known length, or unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodySize {
    None,
    Known(u64),
    Unknown,
}

/// Appends the head of `parts` for the request `asked`, and says how the body goes.
///
/// `raw`: the backend's own field lines, written before the map's fields (the map
/// then holds only what the proxy adds); they never have hop-by-hop fields, and come
/// only for ordinary answers (see [`crate::proxy::upstream::HeadMode::Raw`]).
pub(crate) fn encode(
    parts: &Parts,
    raw: Option<&RawHead>,
    body: BodySize,
    asked: Asked,
    out: &mut Vec<u8>,
) -> Plan {
    let status = parts.status;
    let headers = &parts.headers;
    let upgrade = asked.connect && status.is_success();
    let chunkable = asked.version == Version::HTTP_11 && can_chunk(asked, status);
    let given = match raw {
        Some(r) => r.length,
        None => headers
            .get(header::CONTENT_LENGTH)
            .and_then(super::head::content_length_of),
    };
    let framing = framing(headers, given, body, asked, status, chunkable, upgrade);
    let closes = headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| has_token(v, b"close"));
    // What the head says of the connection; a CONNECT's 2xx says the client's own
    // choice (as hyper did), though the connection becomes the tunnel either way.
    let keep_alive = asked.keep_alive && !closes && framing.0 != Framing::Close;
    status_line(parts, asked.version, out);
    if asked.version == Version::HTTP_11 && !keep_alive && !closes {
        out.extend_from_slice(b"connection: close\r\n");
    } else if asked.version == Version::HTTP_10
        && keep_alive
        && !headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|v| has_token(v, b"keep-alive"))
    {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    let mut wrote_length = raw.is_some_and(|r| r.length.is_some());
    let mut wrote_date = raw.is_some_and(|r| r.date);
    if let Some(r) = raw {
        r.write(out);
    }
    for (name, value) in headers {
        match *name {
            header::CONTENT_LENGTH => {
                // Only the field the framing came from (HEAD's included).
                if wrote_length || framing.1 != Source::Field {
                    continue;
                }
                wrote_length = true;
            }
            header::TRANSFER_ENCODING => {
                if wrote_length || framing.1 != Source::Coding {
                    continue;
                }
                wrote_length = true;
                write_field(name.as_str(), value.as_bytes(), out);
                if !super::head::last_coding_is_chunked(value) {
                    // The coding we send is chunked, whatever else the field says.
                    out.truncate(out.len() - 2);
                    out.extend_from_slice(b", chunked\r\n");
                }
                continue;
            }
            header::DATE => wrote_date = true,
            _ => {}
        }
        write_field(name.as_str(), value.as_bytes(), out);
    }
    match framing.1 {
        Source::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Source::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Source::Field | Source::Coding | Source::Unsaid => {}
    }
    if !wrote_date {
        out.extend_from_slice(b"date: ");
        date::extend(out);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Plan {
        framing: framing.0,
        keep_alive: keep_alive && !upgrade,
        upgrade,
    }
}

/// Where the framing the head says comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The response's Content-Length field.
    Field,
    /// The response's Transfer-Encoding field.
    Coding,
    /// A `content-length` the encoding adds.
    Length(u64),
    /// A `transfer-encoding: chunked` the encoding adds.
    Chunked,
    /// No field says it (no body, or the close ends it).
    Unsaid,
}

/// How the body goes, and which field says so.
fn framing(
    headers: &HeaderMap,
    given: Option<u64>,
    body: BodySize,
    asked: Asked,
    status: StatusCode,
    chunkable: bool,
    upgrade: bool,
) -> (Framing, Source) {
    let bodied = can_chunk(asked, status);
    // A HEAD's answer says the length a GET's would have, and sends nothing.
    let sized = |n| {
        if bodied {
            Framing::Length(n)
        } else {
            Framing::Empty
        }
    };
    if upgrade || !may_have_length(status) {
        return (Framing::Empty, Source::Unsaid);
    }
    match body {
        BodySize::None if asked.head && given.is_some() => (Framing::Empty, Source::Field),
        BodySize::None | BodySize::Known(0) if asked.head => (Framing::Empty, Source::Unsaid),
        BodySize::None if given == Some(0) => (Framing::Empty, Source::Field),
        BodySize::None => (Framing::Empty, Source::Length(0)),
        BodySize::Known(n) if given == Some(n) => (sized(n), Source::Field),
        BodySize::Known(n) => (sized(n), Source::Length(n)),
        BodySize::Unknown => match given {
            Some(n) => (sized(n), Source::Field),
            None if chunkable && headers.contains_key(header::TRANSFER_ENCODING) => {
                (Framing::Chunked, Source::Coding)
            }
            None if chunkable => (Framing::Chunked, Source::Chunked),
            // HTTP/1.0: the body ends where the connection does.
            None if bodied => (Framing::Close, Source::Unsaid),
            None => (Framing::Empty, Source::Unsaid),
        },
    }
}

/// The head of the proxy's own answer to a head it refused: no body, and the
/// connection closes after it.
pub(crate) fn refusal(status: StatusCode, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\nconnection: close\r\ncontent-length: 0\r\ndate: ");
    date::extend(out);
    out.extend_from_slice(b"\r\n\r\n");
}

fn status_line(parts: &Parts, version: Version, out: &mut Vec<u8>) {
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    if version == Version::HTTP_11 && parts.status == StatusCode::OK && reason.is_none() {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(if version == Version::HTTP_10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    match reason {
        Some(r) => out.extend_from_slice(r.as_bytes()),
        // A reason is always written: some parsers expect one.
        None => out.extend_from_slice(
            parts
                .status
                .canonical_reason()
                .unwrap_or("<none>")
                .as_bytes(),
        ),
    }
    out.extend_from_slice(b"\r\n");
}

/// Whether the answer may carry a body at all.
fn can_chunk(asked: Asked, status: StatusCode) -> bool {
    !(asked.head
        || asked.connect && status.is_success()
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED)
}

/// Whether the answer may carry a Content-Length.
fn may_have_length(status: StatusCode) -> bool {
    !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED)
}
