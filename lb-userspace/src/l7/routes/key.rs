//! `consistentHashKey` templates: `${request.header.X-User}` and friends, hashed
//! piece by piece so no key string is built per request.

use crate::l7::balance::rng;

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
        while let Some(start) = rest.find("${") {
            if start > 0 {
                pieces.push(Piece::Literal(rest[..start].to_owned()));
            }
            let Some(len) = rest[start..].find('}') else {
                return Err(format!("unclosed `${{` in {text:?}"));
            };
            let name = &rest[start + 2..start + len];
            pieces.push(if let Some(h) = name.strip_prefix("request.header.") {
                Piece::Header(http::HeaderName::from_bytes(h.as_bytes()).map_err(|_| format!("{h:?} is not a header name"))?)
            } else if let Some(q) = name.strip_prefix("request.query.") {
                Piece::Query(q.to_owned())
            } else {
                match name {
                    "request.path" => Piece::Path,
                    "request.host" => Piece::Host,
                    "request.method" => Piece::Method,
                    "request.source" => Piece::Source,
                    _ => return Err(format!("unknown placeholder ${{{name}}} (request.header.*, request.query.*, request.path, request.host, request.method, request.source)")),
                }
            });
            rest = &rest[start + len + 1..];
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

/// Parses `endpointCreated`'s time: Unix seconds, or RFC 3339
/// (`2024-01-02T15:04:05Z`, `…+01:00`, fractional seconds allowed).
pub fn parse_created(text: &str) -> Result<std::time::SystemTime, String> {
    let bad = || format!("{text:?} is not Unix seconds or an RFC 3339 time");
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| {
        text.get(r)
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(bad)
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        let f: f64 = format!("0.{}", &frac[..digits])
            .parse()
            .map_err(|_| bad())?;
        nanos = (f * 1e9) as u32;
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && &rest[3..4] == ":" =>
        {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            let h: i64 = rest[1..3].parse().map_err(|_| bad())?;
            let m: i64 = rest[4..6].parse().map_err(|_| bad())?;
            sign * (h * 3600 + m * 60)
        }
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(bad());
    }
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let secs = u64::try_from(secs).map_err(|_| bad())?;
    Ok(std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_times_parse() {
        let t = |s| {
            parse_created(s).map(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(-1.0)
            })
        };
        assert_eq!(t("1970-01-01T00:00:00Z"), Ok(0.0));
        assert_eq!(t("2019-02-05T15:39:06+01:00"), Ok(1_549_377_546.0));
        assert_eq!(t("2019-02-05T14:39:06.5Z"), Ok(1_549_377_546.5));
        assert!(t("2019-02-05 14:39:06Z").is_err());
        assert!(t("2019-13-05T14:39:06Z").is_err());
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
