//! `redirectTo`'s location, read and written as skipper's filter does: Go's
//! `url.Parse` at route load (so `http:`, `?q=1`, `//host/path` and `http:///path` are
//! locations, and a location Go refuses refuses the route), then at each request the
//! parts it lacks taken from the request and the result written as Go's
//! `URL.String` writes it.
//!
//! Only what a location can carry is kept: userinfo is parsed (and checked) but
//! never written, since skipper replaces it with the request's, which a server
//! request does not have.

use super::{
    gopath,
    query::{escape_path_into, path_unescape_into},
};

/// A parsed location; empty parts come from the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// Lower-case scheme, or empty.
    scheme: String,
    /// `scheme:opaque` (no `//`): written as it is, host and path ignored.
    opaque: String,
    /// `host[:port]`, or empty.
    host: String,
    /// The path, decoded; empty: the request's.
    path: String,
    /// The path as written, when its escaping is not Go's own for `path`.
    raw_path: String,
    /// A `?` with nothing after it.
    force_query: bool,
    /// The query as written, without `?`; empty: the request's.
    query: String,
    /// The fragment as written, without `#`.
    fragment: String,
}

/// What a location takes from the request it answers.
#[derive(Clone, Copy, Debug)]
pub struct FromRequest<'a> {
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The request's Host.
    pub host: &'a str,
    /// The path as the filters left it, escaped.
    pub path: &'a str,
    /// The raw query as the filters left it.
    pub query: &'a str,
}

impl Location {
    /// Parses `text` as Go's `url.Parse` does.
    ///
    /// # Errors
    /// What Go refuses: a control byte, a scheme-less text starting with `:`, a
    /// first path segment with a colon and no scheme, a bad `%` escape, a host with
    /// a bad port or bracket.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| Err(format!("location {text:?}: {why}"));
        if text.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return bad("has a control character");
        }
        let (rest, fragment) = match text.split_once('#') {
            Some((r, f)) => (r, f),
            None => (text, ""),
        };
        if !valid_escapes(fragment) {
            return bad("the fragment has a bad % escape");
        }
        let mut loc = Self {
            fragment: fragment.to_owned(),
            ..Self::default()
        };
        let (scheme, rest) = match scheme(rest) {
            Ok(s) => s,
            Err(()) => return bad("missing protocol scheme"),
        };
        loc.scheme = scheme.to_ascii_lowercase();
        let rest = if rest.ends_with('?') && rest.matches('?').count() == 1 {
            loc.force_query = true;
            &rest[..rest.len() - 1]
        } else {
            match rest.split_once('?') {
                Some((r, q)) => {
                    q.clone_into(&mut loc.query);
                    r
                }
                None => rest,
            }
        };
        if !rest.starts_with('/') {
            if !loc.scheme.is_empty() {
                rest.clone_into(&mut loc.opaque);
                return Ok(loc);
            }
            if rest.split('/').next().is_some_and(|seg| seg.contains(':')) {
                return bad("the first path segment has a colon");
            }
        }
        let mut path = rest;
        if (!loc.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
            let authority = &rest[2..];
            let end = authority.find('/').unwrap_or(authority.len());
            path = &authority[end..];
            let authority = &authority[..end];
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            if !valid_host(host) {
                return bad("the host is not host[:port]");
            }
            host.clone_into(&mut loc.host);
        }
        if !path.is_empty() {
            let Some(decoded) = gopath::decode(path) else {
                return bad("the path has a bad % escape");
            };
            loc.path = String::from_utf8_lossy(&decoded).into_owned();
            let mut canonical = String::with_capacity(path.len());
            escape_path_into(&mut canonical, &decoded);
            if canonical != path {
                path.clone_into(&mut loc.raw_path);
            }
        }
        Ok(loc)
    }

    /// The Location header for a request (skipper's `getLocation`, then Go's
    /// `URL.String`).
    pub fn render(&self, req: FromRequest<'_>) -> String {
        let mut out = String::with_capacity(64);
        out.push_str(if self.scheme.is_empty() {
            req.scheme
        } else {
            &self.scheme
        });
        out.push(':');
        if self.opaque.is_empty() {
            let host = if self.host.is_empty() {
                req.host
            } else {
                &self.host
            };
            // The path, as the bytes to escape or as text to copy: written straight
            // into `out`, no buffer of its own (a redirect answers every request of
            // its route).
            let decoded;
            let path = if self.path.is_empty() {
                // The request's path, decoded and escaped again as Go does: only
                // `Path` is copied, not its raw form. Without a `%` the decoding
                // changes nothing (paths decode no `+`).
                if req.path.contains('%') {
                    let mut d = Vec::with_capacity(req.path.len());
                    path_unescape_into(req.path, &mut d);
                    decoded = d;
                    PathText::Escape(&decoded)
                } else {
                    PathText::Escape(req.path.as_bytes())
                }
            } else if !self.raw_path.is_empty() && gopath::valid_encoded(&self.raw_path) {
                PathText::Verbatim(&self.raw_path)
            } else {
                PathText::Escape(self.path.as_bytes())
            };
            // Escaping keeps a path's emptiness and its leading `/` (a `/` stays as it
            // is, every other byte becomes itself or `%XX`).
            let (empty, rooted) = match path {
                PathText::Escape(b) => (b.is_empty(), b.first() == Some(&b'/')),
                PathText::Verbatim(t) => (t.is_empty(), t.starts_with('/')),
            };
            if !host.is_empty() || !empty {
                out.push_str("//");
            }
            out.push_str(host);
            if !empty && !rooted && !host.is_empty() {
                out.push('/');
            }
            match path {
                PathText::Escape(b) => escape_path_into(&mut out, b),
                PathText::Verbatim(t) => out.push_str(t),
            }
        } else {
            out.push_str(&self.opaque);
        }
        let query = if self.query.is_empty() {
            req.query
        } else {
            &self.query
        };
        if self.force_query || !query.is_empty() {
            out.push('?');
            out.push_str(query);
        }
        if !self.fragment.is_empty() {
            out.push('#');
            out.push_str(&self.fragment);
        }
        out
    }
}

/// A Location's path as [`Location::render`] writes it.
#[derive(Clone, Copy)]
enum PathText<'a> {
    /// Decoded bytes, escaped as Go's `URL.EscapedPath` escapes them.
    Escape(&'a [u8]),
    /// A valid raw path, written as it is.
    Verbatim(&'a str),
}

/// Go's `getScheme`: a letter, then letters, digits, `+`, `-`, `.`, up to a colon;
/// anything else before a colon means no scheme. `Err` for a leading colon.
fn scheme(text: &str) -> Result<(&str, &str), ()> {
    for (i, c) in text.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err(()),
            b':' => return Ok((&text[..i], &text[i + 1..])),
            _ => return Ok(("", text)),
        }
    }
    Ok(("", text))
}

/// Every `%` is followed by two hex digits.
fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return false;
            }
            i += 2;
        }
        i += 1;
    }
    true
}

/// Go's `parseHost` for what a location can hold: a bracketed IPv6 literal with an
/// optional port, or a name or address with an optional port of digits.
fn valid_host(host: &str) -> bool {
    let port = if let Some(rest) = host.strip_prefix('[') {
        let Some((_, after)) = rest.split_once(']') else {
            return false;
        };
        match after.strip_prefix(':') {
            Some(p) => p,
            None if after.is_empty() => "",
            None => return false,
        }
    } else {
        host.rsplit_once(':').map_or("", |(_, p)| p)
    };
    port.bytes().all(|c| c.is_ascii_digit()) && valid_escapes(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQ: FromRequest<'static> = FromRequest {
        scheme: "https",
        host: "in.example.org",
        path: "/some/path",
        query: "a=1",
    };

    fn at(loc: &str) -> String {
        Location::parse(loc).expect(loc).render(REQ)
    }

    /// Go's `url.Parse` then `getLocation`'s filling, case by case.
    #[test]
    fn locations_as_go_parses_and_writes_them() {
        assert_eq!(at(""), "https://in.example.org/some/path?a=1");
        assert_eq!(at("http:"), "http://in.example.org/some/path?a=1");
        assert_eq!(at("?q=3"), "https://in.example.org/some/path?q=3");
        assert_eq!(at("//other.org"), "https://other.org/some/path?a=1");
        assert_eq!(at("//other.org:8080/x?q"), "https://other.org:8080/x?q");
        assert_eq!(at("http:///x"), "http://in.example.org/x?a=1");
        assert_eq!(at("HTTP://Other.org/x"), "http://Other.org/x?a=1");
        assert_eq!(at("/x y"), "https://in.example.org/x%20y?a=1");
        assert_eq!(at("/a%2Fb"), "https://in.example.org/a%2Fb?a=1");
        assert_eq!(at("/x#top"), "https://in.example.org/x?a=1#top");
        assert_eq!(at("mailto:ops"), "mailto:ops?a=1");
        assert_eq!(at("//user:pw@other.org/x"), "https://other.org/x?a=1");
        assert_eq!(at("relative/x"), "https://in.example.org/relative/x?a=1");
        for bad in [":x", "1a:b", "/%zz", "//h:80x/", "//[::1/", "/x\n", "/x#%g"] {
            assert!(Location::parse(bad).is_err(), "{bad:?} refused");
        }
    }

    #[test]
    fn the_requests_path_is_decoded_and_escaped_again() {
        let req = FromRequest {
            path: "/a%2Fb/%7Ex",
            ..REQ
        };
        let loc = Location::parse("//o.org").expect("location");
        assert_eq!(loc.render(req), "https://o.org/a/b/~x?a=1");
    }
}
