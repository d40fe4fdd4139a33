//! `${name}` templates, as skipper's `eskip.Template` reads them: compiled once with
//! the route (each placeholder resolved to what it stands for), applied per request
//! into the caller's output without any parsing or intermediate strings.
//!
//! A placeholder is `${` + one or more characters other than `{` and `}` + `}`; any
//! other `$` or `${` is text. Names, in skipper's lookup order:
//! `request.header.NAME`, `request.query.NAME`, `request.cookie.NAME`,
//! `request.method`, `request.host`, `request.path`, `request.rawQuery`,
//! `request.source`, `request.sourceFromLast`, `request.clientIP`,
//! `response.header.NAME` (response filters only), then a path parameter of the route.
//! A name that is none of these is not an error: it stands for the empty string, as
//! in skipper.
//!
//! Applying reports whether every placeholder gave a non-empty value; each filter
//! decides what an unresolved template means (skipper's `ApplyContext` `ok`).
//!
//! One difference on purpose: skipper substitutes placeholder by placeholder over the
//! whole string, so a value that contains the text of a later placeholder (a client's
//! header `${request.header.Authorization}`) is expanded again. Here a value is
//! written as it is and never read as a template.

use std::net::IpAddr;

use http::HeaderName;

use super::{params::ParamRef, query, values::Values};
use crate::balance::rng;

/// A compiled template.
#[derive(Clone, Debug, PartialEq)]
pub struct Template {
    pieces: Box<[Piece]>,
    /// Bytes of literal text, for sizing the output.
    literal_len: usize,
}

/// One piece of a template.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    /// Text as written.
    Literal(Box<str>),
    /// `${request.header.NAME}`: the first value.
    Header(HeaderName),
    /// `${request.query.NAME}`: the first value, decoded.
    Query(Box<str>),
    /// `${request.cookie.NAME}`
    Cookie(Box<str>),
    /// `${request.method}`
    Method,
    /// `${request.host}`
    Host,
    /// `${request.path}`: decoded, as Go's `URL.Path`.
    Path,
    /// `${request.rawQuery}`
    RawQuery,
    /// `${request.source}`: the first X-Forwarded-For address, else the peer.
    Source,
    /// `${request.sourceFromLast}`: the last X-Forwarded-For address, else the peer.
    SourceFromLast,
    /// `${request.clientIP}`: the peer.
    ClientIp,
    /// `${response.header.NAME}`: empty while the request is filtered.
    ResponseHeader(HeaderName),
    /// A path parameter of the route.
    Param(ParamRef),
    /// A name nothing stands for: always empty.
    Missing,
}

/// Where bytes of an applied template go: a buffer, an escaper, a hash.
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// FNV over the bytes of an applied template, so a key is hashed, never built.
pub(crate) struct Hash(pub u64);

impl Sink for Hash {
    fn put(&mut self, bytes: &[u8]) {
        self.0 = rng::fnv(self.0, bytes);
    }
}

impl Template {
    /// Compiles `text`; `param` finds a path parameter of the route by name.
    pub fn new(text: &str, param: impl Fn(&str) -> Option<ParamRef>) -> Self {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            let after = &rest[start + 2..];
            let end = after.find(['{', '}']);
            match end {
                Some(n) if n > 0 && after.as_bytes()[n] == b'}' => {
                    literal.push_str(&rest[..start]);
                    if !literal.is_empty() {
                        pieces.push(Piece::Literal(std::mem::take(&mut literal).into()));
                    }
                    pieces.push(resolve(&after[..n], &param));
                    rest = &after[n + 1..];
                }
                _ => {
                    // Not a placeholder here: keep the `$` and look again after it.
                    literal.push_str(&rest[..=start]);
                    rest = &rest[start + 1..];
                }
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal.into()));
        }
        let literal_len = pieces
            .iter()
            .map(|p| match p {
                Piece::Literal(s) => s.len(),
                _ => 0,
            })
            .sum();
        Self {
            pieces: pieces.into(),
            literal_len,
        }
    }

    /// The text, when the template has no placeholders.
    pub fn as_literal(&self) -> Option<&str> {
        match &*self.pieces {
            [] => Some(""),
            [Piece::Literal(s)] => Some(s),
            _ => None,
        }
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Whether applying it reads the request's headers, host, cookies, client
    /// addresses, path parameters, path or query: what a response filter needs kept
    /// from the request.
    pub fn reads_request(&self) -> bool {
        self.pieces.iter().any(|p| {
            matches!(
                p,
                Piece::Header(_)
                    | Piece::Host
                    | Piece::Cookie(_)
                    | Piece::Source
                    | Piece::SourceFromLast
                    | Piece::Param(_)
                    | Piece::Path
                    | Piece::Query(_)
                    | Piece::RawQuery
            )
        })
    }

    /// Writes the template applied to `v` into `out`; `true` when every placeholder
    /// gave a non-empty value.
    pub fn apply_into(&self, v: &Values<'_>, out: &mut impl Sink) -> bool {
        let mut ok = true;
        for p in &*self.pieces {
            ok &= piece(p, v, out);
        }
        ok
    }

    /// As [`Template::apply`], borrowing the text of a template without
    /// placeholders instead of copying it for every request.
    pub fn apply_cow(&self, v: &Values<'_>) -> (std::borrow::Cow<'_, str>, bool) {
        match self.as_literal() {
            Some(text) => (std::borrow::Cow::Borrowed(text), true),
            None => {
                let (text, ok) = self.apply(v);
                (std::borrow::Cow::Owned(text), ok)
            }
        }
    }

    /// The template applied to `v` as a string (invalid UTF-8 from header bytes
    /// replaced), and whether every placeholder resolved.
    pub fn apply(&self, v: &Values<'_>) -> (String, bool) {
        if let Some(text) = self.as_literal() {
            return (text.to_owned(), true);
        }
        let mut out = Vec::with_capacity(self.literal_len + 32);
        let ok = self.apply_into(v, &mut out);
        let text = match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        (text, ok)
    }

    /// The template applied to `v` as header-value bytes, and whether every
    /// placeholder resolved.
    pub fn apply_bytes(&self, v: &Values<'_>) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(self.literal_len + 32);
        let ok = self.apply_into(v, &mut out);
        (out, ok)
    }
}

/// What `name` stands for.
fn resolve(name: &str, param: &impl Fn(&str) -> Option<ParamRef>) -> Piece {
    // A name that is not a header name cannot be in a header map: always empty.
    let header = |h: &str, response: bool| match HeaderName::from_bytes(h.as_bytes()) {
        Ok(n) if response => Piece::ResponseHeader(n),
        Ok(n) => Piece::Header(n),
        Err(_) => Piece::Missing,
    };
    if let Some(h) = name.strip_prefix("request.header.") {
        return header(h, false);
    }
    if let Some(q) = name.strip_prefix("request.query.") {
        return Piece::Query(q.into());
    }
    if let Some(c) = name.strip_prefix("request.cookie.") {
        return Piece::Cookie(c.into());
    }
    match name {
        "request.method" => return Piece::Method,
        "request.host" => return Piece::Host,
        "request.path" => return Piece::Path,
        "request.rawQuery" => return Piece::RawQuery,
        "request.source" => return Piece::Source,
        "request.sourceFromLast" => return Piece::SourceFromLast,
        "request.clientIP" => return Piece::ClientIp,
        _ => {}
    }
    if let Some(h) = name.strip_prefix("response.header.") {
        return header(h, true);
    }
    param(name).map_or(Piece::Missing, Piece::Param)
}

/// Writes one piece; `true` when it is literal text or gave bytes.
fn piece(p: &Piece, v: &Values<'_>, out: &mut impl Sink) -> bool {
    let bytes: &[u8] = match p {
        Piece::Literal(s) => {
            out.put(s.as_bytes());
            return true;
        }
        Piece::Header(name) => v.headers.first(name).map_or(&[], |h| h.as_bytes()),
        Piece::Query(name) => return query::first_value_into(v.query, name, out),
        Piece::Cookie(name) => v.cookie(name).unwrap_or("").as_bytes(),
        Piece::Method => v.method.as_bytes(),
        Piece::Host => v.host.as_bytes(),
        Piece::Path => return query::path_unescape_into(v.path, out),
        Piece::RawQuery => v.query.as_bytes(),
        Piece::Source => return ip_into(v.source(false), out),
        Piece::SourceFromLast => return ip_into(v.source(true), out),
        Piece::ClientIp => return ip_into(v.peer, out),
        Piece::ResponseHeader(name) => v
            .response
            .and_then(|h| h.get(name))
            .map_or(&[], |h| h.as_bytes()),
        Piece::Param(at) => return at.write_value(v.routing_path, out),
        Piece::Missing => &[],
    };
    out.put(bytes);
    !bytes.is_empty()
}

/// Writes an address as Go prints a `net.IP` (IPv4-mapped IPv6 as IPv4).
pub(crate) fn ip_into(ip: IpAddr, out: &mut impl Sink) -> bool {
    use std::io::Write as _;
    let mut buf = [0u8; 46];
    let mut w = &mut buf[..];
    let _ = write!(w, "{}", ip.to_canonical());
    let n = 46 - w.len();
    out.put(&buf[..n]);
    true
}
