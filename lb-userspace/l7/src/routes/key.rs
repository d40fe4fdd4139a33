//! `consistentHashKey` templates: `${request.header.X-User}` and friends, hashed
//! piece by piece so no key string is built per request.

use crate::balance::rng;

/// One piece of a key template.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    /// Text as written.
    Literal(String),
    /// `${request.header.NAME}`
    Header(http::HeaderName),
    /// `${request.query.NAME}`
    Query(String),
    /// `${request.path}`
    Path,
    /// `${request.host}`
    Host,
    /// `${request.method}`
    Method,
    /// `${request.source}`: the client address (first X-Forwarded-For entry, else peer).
    Source,
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyTemplate(pub Vec<Piece>);

impl KeyTemplate {
    /// Parses a template; `Err` names the bad placeholder.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some((literal, after)) = rest.split_once("${") {
            if !literal.is_empty() {
                pieces.push(Piece::Literal(literal.to_owned()));
            }
            let Some((name, after)) = after.split_once('}') else {
                return Err(format!("unclosed `${{` in {text:?}"));
            };
            pieces.push(placeholder(name)?);
            rest = after;
        }
        if !rest.is_empty() {
            pieces.push(Piece::Literal(rest.to_owned()));
        }
        Ok(Self(pieces))
    }

    /// The key's hash for a request, or `None` when every placeholder is empty (the
    /// caller falls back to the client address).
    pub fn hash(&self, req: &KeySource<'_>) -> Option<u64> {
        let mut h = rng::FNV_START;
        let mut any = false;
        for p in &self.0 {
            let bytes: &[u8] = match p {
                Piece::Literal(s) => {
                    h = rng::fnv(h, s.as_bytes());
                    continue;
                }
                Piece::Header(name) => req.headers.get(name).map_or(&[][..], |v| v.as_bytes()),
                Piece::Query(name) => query_value(req.query, name).unwrap_or("").as_bytes(),
                Piece::Path => req.path.as_bytes(),
                Piece::Host => req.host.as_bytes(),
                Piece::Method => req.method.as_bytes(),
                Piece::Source => req.source.as_bytes(),
            };
            any |= !bytes.is_empty();
            h = rng::fnv(h, bytes);
        }
        any.then_some(h)
    }
}

/// The piece `${name}` stands for.
fn placeholder(name: &str) -> Result<Piece, String> {
    if let Some(h) = name.strip_prefix("request.header.") {
        return http::HeaderName::from_bytes(h.as_bytes())
            .map(Piece::Header)
            .map_err(|_| format!("{h:?} is not a header name"));
    }
    if let Some(q) = name.strip_prefix("request.query.") {
        return Ok(Piece::Query(q.to_owned()));
    }
    Ok(match name {
        "request.path" => Piece::Path,
        "request.host" => Piece::Host,
        "request.method" => Piece::Method,
        "request.source" => Piece::Source,
        _ => {
            return Err(format!(
                "unknown placeholder ${{{name}}} (request.header.*, request.query.*, request.path, request.host, request.method, request.source)"
            ));
        }
    })
}

/// What a key can be made of.
#[derive(Clone, Copy, Debug)]
pub struct KeySource<'a> {
    /// Headers.
    pub headers: &'a http::HeaderMap,
    /// Raw query.
    pub query: &'a str,
    /// Path.
    pub path: &'a str,
    /// Host.
    pub host: &'a str,
    /// Method.
    pub method: &'a str,
    /// Client address text.
    pub source: &'a str,
}

/// The raw value of `name` in a query (first occurrence, not decoded).
fn query_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_split_at_placeholders_whatever_the_characters() {
        let k = KeyTemplate::parse("\u{e9}${request.host}\u{20ac}${request.query.q\u{e9}}")
            .expect("parses");
        assert_eq!(
            k.0,
            [
                Piece::Literal("\u{e9}".into()),
                Piece::Host,
                Piece::Literal("\u{20ac}".into()),
                Piece::Query("q\u{e9}".into()),
            ]
        );
        assert!(KeyTemplate::parse("${request.header.\u{e9}}").is_err());
        assert!(KeyTemplate::parse("\u{e9}${").is_err());
    }

    #[test]
    fn templates_hash_their_pieces() {
        let k = KeyTemplate::parse("u-${request.header.X-User}").expect("parses");
        let mut headers = http::HeaderMap::new();
        let src = |h: &'static http::HeaderMap| KeySource {
            headers: h,
            query: "",
            path: "/",
            host: "h",
            method: "GET",
            source: "198.18.0.1",
        };
        let empty = Box::leak(Box::new(http::HeaderMap::new()));
        assert_eq!(k.hash(&src(empty)), None, "no user header: fall back");
        headers.insert("x-user", http::HeaderValue::from_static("alice"));
        let alice = Box::leak(Box::new(headers));
        let h = k.hash(&src(alice));
        assert!(h.is_some());
        assert_eq!(h, k.hash(&src(alice)));
        assert!(KeyTemplate::parse("${request.cookie.x}").is_err());
        assert!(KeyTemplate::parse("${request.path").is_err());
    }
}
