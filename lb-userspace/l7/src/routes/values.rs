//! What templates read of a request: its values as the filters before left them
//! (skipper's filters change the request in place, so a later template sees an
//! earlier `setRequestHeader` or `setPath`), and the response's headers in response
//! filters.

use std::net::{IpAddr, SocketAddr};

use http::{HeaderMap, HeaderName, HeaderValue};

/// A request header change a filter made; the proxy applies them in order to the
/// headers it forwards.
#[derive(Clone, Debug, PartialEq)]
pub enum HeaderEdit {
    /// Replace every value.
    Set(HeaderName, HeaderValue),
    /// Add a value.
    Append(HeaderName, HeaderValue),
    /// Remove every value.
    Drop(HeaderName),
}

impl HeaderEdit {
    fn name(&self) -> &HeaderName {
        match self {
            Self::Set(n, _) | Self::Append(n, _) | Self::Drop(n) => n,
        }
    }

    /// Applies the edit to `headers`.
    pub fn apply(&self, headers: &mut HeaderMap) {
        match self {
            Self::Set(n, v) => {
                headers.insert(n.clone(), v.clone());
            }
            Self::Append(n, v) => {
                headers.append(n.clone(), v.clone());
            }
            Self::Drop(n) => {
                headers.remove(n);
            }
        }
    }
}

/// The request's headers with the filters' edits so far laid over them, read without
/// copying either.
#[derive(Clone, Copy, Debug)]
pub struct Headers<'a> {
    /// As the client sent them.
    pub base: &'a HeaderMap,
    /// The edits, in order.
    pub edits: &'a [HeaderEdit],
}

impl<'a> Headers<'a> {
    /// Every value of `name`, in order, after the edits.
    pub fn all(self, name: &'a HeaderName) -> impl Iterator<Item = &'a HeaderValue> + 'a {
        // The last Set or Drop replaces what came before it; Appends after it add.
        let last_reset = self
            .edits
            .iter()
            .rposition(|e| e.name() == name && !matches!(e, HeaderEdit::Append(..)));
        let base = match last_reset {
            None => Some(self.base.get_all(name).iter()),
            Some(_) => None,
        };
        let from = last_reset.unwrap_or(0);
        base.into_iter().flatten().chain(
            self.edits[from..]
                .iter()
                .filter(move |e| e.name() == name)
                .filter_map(|e| match e {
                    HeaderEdit::Set(_, v) | HeaderEdit::Append(_, v) => Some(v),
                    HeaderEdit::Drop(_) => None,
                }),
        )
    }

    /// The first value of `name` (Go's `Header.Get`).
    pub fn first(self, name: &'a HeaderName) -> Option<&'a HeaderValue> {
        self.all(name).next()
    }
}

/// Everything a template can read.
#[derive(Clone, Copy, Debug)]
pub struct Values<'a> {
    /// Method.
    pub method: &'a str,
    /// The Host header, else the target's authority.
    pub host: &'a str,
    /// The path as the backend would get it now (escaped).
    pub path: &'a str,
    /// The raw query as the backend would get it now, without `?`.
    pub query: &'a str,
    /// The routing path the route matched (for path parameters).
    pub routing_path: &'a str,
    /// Request headers.
    pub headers: Headers<'a>,
    /// The peer's address.
    pub peer: IpAddr,
    /// Whether the peer's X-Forwarded-For is believed (a trusted proxy): only then do
    /// `request.source` and `request.sourceFromLast` read it, as the consistent-hash
    /// fallback and the access log do.
    pub trusted: bool,
    /// The response's headers, in response filters.
    pub response: Option<&'a HeaderMap>,
}

static FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static COOKIE: HeaderName = http::header::COOKIE;

impl Values<'_> {
    /// skipper's `RemoteHost` (`from_last`: `RemoteHostFromLast`): the first (last)
    /// entry of the first X-Forwarded-For line when it is an address, else the peer.
    pub fn source(&self, from_last: bool) -> IpAddr {
        client_source(self.headers, self.peer, self.trusted, from_last)
    }

    /// The value of cookie `name`: Go's `Request.Cookie` (the first valid pair of that
    /// name in the Cookie lines, surrounding quotes removed).
    pub fn cookie(&self, name: &str) -> Option<&str> {
        cookie(self.headers, name)
    }
}

/// The value of cookie `name` in `headers`: Go's `Request.Cookie` (the first valid
/// pair of that name in the Cookie lines, surrounding quotes removed).
pub fn cookie<'a>(headers: Headers<'a>, name: &str) -> Option<&'a str> {
    headers
        .all(&COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|line| line.split(';'))
        .find_map(|pair| {
            let (n, value) = pair.trim().split_once('=').unwrap_or((pair.trim(), ""));
            (n.trim() == name && is_token(name))
                .then(|| cookie_value(value))
                .flatten()
        })
}

/// skipper's `RemoteHost` (`from_last`: `RemoteHostFromLast`): the first (last) entry
/// of the first X-Forwarded-For line when it is an address, else the peer. The header
/// counts only from a `trusted` peer.
pub fn client_source(headers: Headers<'_>, peer: IpAddr, trusted: bool, from_last: bool) -> IpAddr {
    trusted
        .then(|| headers.first(&FORWARDED_FOR))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            if from_last {
                v.rsplit(',').next()
            } else {
                v.split(',').next()
            }
        })
        .and_then(parse_address)
        .unwrap_or(peer)
}

/// An address, with or without a port (Go's `stripPort` then `ParseIP`).
fn parse_address(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// Go's `isCookieNameValid`: a non-empty token.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Go's `parseCookieValue` with quotes allowed.
fn cookie_value(raw: &str) -> Option<&str> {
    let v = if raw.len() > 1 && raw.starts_with('"') && raw.ends_with('"') {
        &raw[1..raw.len() - 1]
    } else {
        raw
    };
    v.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && !matches!(b, b'"' | b';' | b'\\'))
        .then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn edits_lay_over_the_request_headers_in_order() {
        let base = map(&[("x-a", "1"), ("x-a", "2")]);
        let a = HeaderName::from_static("x-a");
        let v = |s: &'static str| HeaderValue::from_static(s);
        let all = |edits: &[HeaderEdit]| -> Vec<String> {
            Headers { base: &base, edits }
                .all(&a)
                .map(|v| v.to_str().expect("text").to_owned())
                .collect()
        };
        assert_eq!(all(&[]), ["1", "2"]);
        assert_eq!(
            all(&[HeaderEdit::Append(a.clone(), v("3"))]),
            ["1", "2", "3"]
        );
        assert_eq!(all(&[HeaderEdit::Set(a.clone(), v("9"))]), ["9"]);
        assert_eq!(
            all(&[
                HeaderEdit::Set(a.clone(), v("9")),
                HeaderEdit::Append(a.clone(), v("8"))
            ]),
            ["9", "8"]
        );
        assert!(all(&[HeaderEdit::Drop(a.clone())]).is_empty());
        assert_eq!(
            all(&[
                HeaderEdit::Drop(a.clone()),
                HeaderEdit::Append(a.clone(), v("7"))
            ]),
            ["7"]
        );
    }
}
