//! Route predicates: path patterns and the request checks.

use std::{
    net::IpAddr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use regex::Regex;

use super::values::{Headers, client_source, cookie};

/// A path predicate, found through the path tree ([`super::tree`]) before the others
/// are checked: `Path` patterns and `PathSubtree`.
///
/// Both are parsed as skipper's matcher reads them: the text is cleaned first
/// (rooted, `//`, `.` and `..` resolved, the trailing slash kept), then split into
/// segments. A segment starting with `:` is a parameter (named by the rest, possibly
/// empty); one starting with `*` is a free wildcard and must be last; a `:` or `*`
/// anywhere else in a segment is an error, because skipper's tree rejects it.
#[derive(Clone, Debug, PartialEq)]
pub enum PathMatch {
    /// `Path("/a/:id/*rest")`.
    Pattern {
        /// The segments after the root slash.
        segments: Vec<Segment>,
        /// Whether the path ends with `/` (`Path("/a/")`, and `Path("/")`): without
        /// skipper's ignore-trailing-slash option `/a` and `/a/` are different paths.
        slash: bool,
    },
    /// `PathSubtree("/base")`: `/base`, `/base/` and everything below. A trailing
    /// slash on the base is ignored.
    Subtree {
        /// The base's segments (no [`Segment::Rest`]).
        segments: Vec<Segment>,
        /// The tail parameter's name: `*`, or `name` from `/base/*name`.
        tail: String,
    },
}

/// One segment of a path pattern.
#[derive(Clone, Debug, PartialEq)]
pub enum Segment {
    /// Must equal this.
    Literal(String),
    /// `:name`: any one non-empty segment.
    Param(String),
    /// `*name` (or `*`, `**`, named `*`), last only: everything after its slash, at
    /// least one character.
    Rest(String),
}

impl PathMatch {
    /// Parses a `Path` pattern; `Err` says what is wrong with it.
    pub fn pattern(text: &str) -> Result<Self, String> {
        let (segments, slash) = parse(text)?;
        if slash && matches!(segments.last(), Some(Segment::Rest(_))) {
            return Err(format!(
                "path {text:?}: a `*` wildcard must be the last segment"
            ));
        }
        Ok(Self::Pattern { segments, slash })
    }

    /// Parses a `PathSubtree` base; a final `/*name` or `/*` names the tail parameter.
    pub fn subtree(text: &str) -> Result<Self, String> {
        let (mut segments, slash) = parse(text)?;
        let tail = match segments.last() {
            Some(Segment::Rest(_)) if slash => {
                return Err(format!(
                    "path {text:?}: a `*` wildcard must be the last segment"
                ));
            }
            Some(Segment::Rest(name)) => {
                let name = name.clone();
                segments.pop();
                name
            }
            _ => "*".to_owned(),
        };
        Ok(Self::Subtree { segments, tail })
    }

    /// Whether `path`, a routing path, matches this predicate alone (for tests and
    /// explaining; requests are matched through the table's tree).
    pub fn matches(&self, path: &str) -> bool {
        super::tree::PathTree::build([(self, 0)])
            .lookup(path, &mut |leaves| leaves.first().copied())
            .is_some()
    }
}

/// Cleans `text` and splits it into segments; the flag says whether it ends in `/`.
fn parse(text: &str) -> Result<(Vec<Segment>, bool), String> {
    if text.is_empty() {
        return Err("the path is empty (use `*` to match every path)".to_owned());
    }
    let cleaned = super::path::clean(text);
    let body = cleaned.strip_prefix('/').unwrap_or(&cleaned);
    let slash = cleaned.ends_with('/');
    let body = body.strip_suffix('/').unwrap_or(body);
    if body.is_empty() {
        return Ok((Vec::new(), true));
    }
    let parts: Vec<&str> = body.split('/').collect();
    let mut segments = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        segments.push(if let Some(name) = p.strip_prefix(':') {
            Segment::Param(name.to_owned())
        } else if let Some(name) = p.strip_prefix('*') {
            if i + 1 != parts.len() {
                return Err(format!(
                    "path {text:?}: a `*` wildcard must be the last segment"
                ));
            }
            Segment::Rest(
                if name.is_empty() || name == "*" {
                    "*"
                } else {
                    name
                }
                .to_owned(),
            )
        } else if p.contains([':', '*']) {
            return Err(format!(
                "path {text:?}: `:` and `*` may only start a segment"
            ));
        } else {
            Segment::Literal((*p).to_owned())
        });
    }
    Ok((segments, slash))
}

/// A predicate other than the path.
#[derive(Clone, Debug)]
pub enum Predicate {
    /// `PathRegexp(/re/)`
    PathRegexp(Regex),
    /// `Host(/re/)`, against the Host header (or the HTTP/2 authority).
    Host(Regex),
    /// `Method("GET")`: the request's method exactly as written.
    Method(http::Method),
    /// `Methods("GET", "head")`: any of these, compared without case.
    Methods(Vec<http::Method>),
    /// `Header("K", "V")`: some value equals `V`.
    Header(http::HeaderName, String),
    /// `HeaderRegexp("K", /re/)`: some value matches.
    HeaderRegexp(http::HeaderName, Regex),
    /// `True()` / `False()`.
    Const(bool),
    /// `Cookie("name", /re/)`: the cookie (Go's `Request.Cookie`: the first valid one
    /// of that name) exists and its value matches.
    Cookie(String, Regex),
    /// `QueryParam("name")`: the decoded query has the key; `QueryParam("name", /re/)`:
    /// one of its values matches.
    QueryParam(String, Option<Regex>),
    /// `Source(cidr…)`, `SourceFromLast(cidr…)`, `ClientIP(cidr…)`.
    Source(SourceOf, Vec<Cidr>),
    /// `Between(from, until)` (both), `After(from)`, `Before(until)`: `from <= now <
    /// until`.
    Interval {
        /// Inclusive start.
        from: Option<SystemTime>,
        /// Exclusive end.
        until: Option<SystemTime>,
    },
    /// `Traffic(chance)`: a draw of its own for every request it sees is below
    /// `chance` (in `[0, 1]`), so two `Traffic` routes take their shares one after
    /// the other, as in skipper. `Traffic(chance, cookie, group)`: a request with
    /// that cookie matches exactly when its value is `group`, whatever the chance
    /// (stickiness; setting the cookie is the route's or the backend's business);
    /// one without it takes the chance.
    Traffic {
        /// Share of the requests, `[0, 1]`.
        chance: f64,
        /// `(cookie name, group)` of the sticky form.
        sticky: Option<(String, String)>,
    },
    /// `TrafficSegment(min, max)`: the request's one draw ([`RequestView::draw`]) is
    /// in `[min, max)`. Every segment of a table sees the same draw, so segments
    /// that tile `[0, 1)` split the traffic exactly (`TrafficSegment(0, 1)` takes
    /// every request, `TrafficSegment(x, x)` none).
    Segment {
        /// Inclusive, `[0, 1]`.
        min: f64,
        /// Exclusive, `[min, 1]`.
        max: f64,
    },
}

/// Which address a source predicate checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceOf {
    /// `Source`: the first X-Forwarded-For entry (from a trusted proxy), else the peer.
    First,
    /// `SourceFromLast`: the last X-Forwarded-For entry (from a trusted proxy), else
    /// the peer.
    Last,
    /// `ClientIP`: the peer, whatever the header says.
    Peer,
}

/// An address or network of a source predicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Skipper's `ParseIPCIDRs` entry: `addr/bits` as Go's `netip.ParsePrefix` reads it
    /// (no zone, bits in range, no leading zero), or an address alone (a host, which
    /// must not be the unspecified address).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{text:?} is not an address or CIDR: {why}");
        let full = |a: &IpAddr| if a.is_ipv4() { 32 } else { 128 };
        match text.split_once('/') {
            Some((addr, bits)) => {
                let addr: IpAddr = addr.parse().map_err(|_| bad("bad address"))?;
                let leading_zero = bits.len() > 1 && bits.starts_with('0');
                let bits = bits
                    .parse::<u8>()
                    .ok()
                    .filter(|b| {
                        !leading_zero
                            && bits.bytes().all(|c| c.is_ascii_digit())
                            && *b <= full(&addr)
                    })
                    .ok_or_else(|| bad("bad prefix length"))?;
                Ok(Self { addr, bits })
            }
            None => {
                let addr: IpAddr = text.parse().map_err(|_| bad("bad address"))?;
                if addr.is_unspecified() {
                    return Err(bad("the address is unspecified"));
                }
                Ok(Self {
                    addr,
                    bits: full(&addr),
                })
            }
        }
    }

    /// Whether `ip` is in the network (never across address families, as in Go).
    pub fn contains(&self, ip: IpAddr) -> bool {
        // Both as 128 bits, an IPv4 address in the top 32, so one mask serves.
        let wide = |a: IpAddr| match a {
            IpAddr::V4(v4) => u128::from(u32::from(v4)) << 96,
            IpAddr::V6(v6) => u128::from(v6),
        };
        let mask = u128::MAX
            .checked_shl(128 - u32::from(self.bits))
            .unwrap_or(0);
        self.addr.is_ipv4() == ip.is_ipv4() && wide(self.addr) & mask == wide(ip) & mask
    }
}

/// A point in time given as Unix seconds: skipper converts the number to an int
/// (truncating) and takes `time.Unix(n, 0)`.
pub fn unix_time(seconds: f64) -> Result<SystemTime, String> {
    if !seconds.is_finite() {
        return Err(format!("{seconds} is not a Unix time"));
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "skipper truncates; `as` saturates"
    )]
    let n = seconds as i64;
    let d = Duration::from_secs(n.unsigned_abs());
    if n >= 0 {
        UNIX_EPOCH.checked_add(d)
    } else {
        UNIX_EPOCH.checked_sub(d)
    }
    .ok_or_else(|| format!("{seconds} is out of range as a Unix time"))
}

/// A time zone as Go's `time.LoadLocation` finds it: `""` and `"UTC"` are UTC,
/// `"Local"` the system's zone (UTC without one), any other name a file of the zone
/// database, its name spelled exactly (the lookup is case-sensitive on Linux).
pub fn location(name: &str) -> Result<jiff::tz::TimeZone, String> {
    match name {
        "" | "UTC" => return Ok(jiff::tz::TimeZone::UTC),
        "Local" => {
            return Ok(std::fs::read("/etc/localtime")
                .ok()
                .and_then(|b| jiff::tz::TimeZone::tzif("Local", &b).ok())
                .unwrap_or(jiff::tz::TimeZone::UTC));
        }
        _ => {}
    }
    let unknown = || format!("unknown time zone {name:?}");
    if name.starts_with('/') || name.contains("..") || name.contains('\\') {
        return Err(unknown());
    }
    let tz = jiff::tz::db().get(name).map_err(|_| unknown())?;
    if tz.iana_name() != Some(name) {
        return Err(unknown());
    }
    Ok(tz)
}

/// A local time `2006-01-02T15:04:05` (Go's layout: the hour may have one digit, a
/// fraction may follow the seconds, nothing else may) in zone `tz`.
pub fn local_time(text: &str, tz: &jiff::tz::TimeZone) -> Result<SystemTime, String> {
    let bad = || format!("{text:?} is not a local time like \"2006-01-02T15:04:05\"");
    let b = text.as_bytes();
    let mut at = 0;
    // Each field: the separator before it, its fewest and most digits.
    let layout = [
        (None, 4, 4),
        (Some(b'-'), 2, 2),
        (Some(b'-'), 2, 2),
        (Some(b'T'), 1, 2),
        (Some(b':'), 2, 2),
        (Some(b':'), 2, 2),
    ];
    let mut fields = [0i32; 6];
    for (field, (sep, min, max)) in fields.iter_mut().zip(layout) {
        if let Some(c) = sep {
            if b.get(at) != Some(&c) {
                return Err(bad());
            }
            at += 1;
        }
        let start = at;
        while at < b.len() && at - start < max && b[at].is_ascii_digit() {
            at += 1;
        }
        if at - start < min {
            return Err(bad());
        }
        *field = text[start..at].parse().map_err(|_| bad())?;
    }
    let mut nanos = 0i32;
    if b.len() >= at + 2 && matches!(b[at], b'.' | b',') && b[at + 1].is_ascii_digit() {
        let start = at + 1;
        at = start;
        while at < b.len() && b[at].is_ascii_digit() {
            at += 1;
        }
        let digits = &text[start..at.min(start + 9)];
        nanos = format!("{digits:0<9}").parse().map_err(|_| bad())?;
    }
    if at != b.len() {
        return Err(bad());
    }
    let [year, month, day, hour, minute, second] = fields;
    let narrow = |v: i32| i8::try_from(v).map_err(|_| bad());
    let dt = jiff::civil::DateTime::new(
        i16::try_from(year).map_err(|_| bad())?,
        narrow(month)?,
        narrow(day)?,
        narrow(hour)?,
        narrow(minute)?,
        narrow(second)?,
        nanos,
    )
    .map_err(|e| format!("{text:?}: {e}"))?;
    let ts = tz.to_timestamp(dt).map_err(|e| format!("{text:?}: {e}"))?;
    SystemTime::try_from(ts).map_err(|e| format!("{text:?}: {e}"))
}

/// What predicates look at.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// Method.
    pub method: &'a http::Method,
    /// Path without the query: as sent for [`super::RouteTable::find`], the routing
    /// form for [`super::RouteTable::find_routed`] and the predicates.
    pub path: &'a str,
    /// Host header or authority.
    pub host: &'a str,
    /// Headers.
    pub headers: &'a http::HeaderMap,
    /// The raw query, without `?` (empty for none).
    pub query: &'a str,
    /// The peer's address.
    pub peer: IpAddr,
    /// Whether the peer is a trusted proxy, whose X-Forwarded-For `Source` and
    /// `SourceFromLast` believe.
    pub trusted: bool,
    /// The time `Between`, `After` and `Before` compare with; `None`: the clock.
    pub now: Option<SystemTime>,
    /// The request's draw in `[0, 1)` that every `TrafficSegment` compares with
    /// (skipper keeps one per request in its routing context). `None`: drawn by
    /// [`super::RouteTable::find_routed`] when the table has a segment, so a table
    /// without one draws nothing; tests fix it.
    pub draw: Option<f64>,
}

impl<'a> RequestView<'a> {
    /// A request with no query from an untrusted unspecified peer, at the clock's time.
    pub fn new(
        method: &'a http::Method,
        path: &'a str,
        host: &'a str,
        headers: &'a http::HeaderMap,
    ) -> Self {
        Self {
            method,
            path,
            host,
            headers,
            query: "",
            peer: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            trusted: false,
            now: None,
            draw: None,
        }
    }
}

impl Predicate {
    /// The request's headers as sent (predicates run before any filter).
    fn headers<'a>(req: &RequestView<'a>) -> Headers<'a> {
        Headers {
            base: req.headers,
            edits: &[],
        }
    }

    /// Whether the request satisfies it.
    pub fn matches(&self, req: &RequestView<'_>) -> bool {
        match self {
            Self::PathRegexp(re) => re.is_match(req.path),
            Self::Host(re) => re.is_match(req.host),
            Self::Method(m) => m == req.method,
            Self::Methods(m) => m
                .iter()
                .any(|m| m.as_str().eq_ignore_ascii_case(req.method.as_str())),
            Self::Header(name, value) => req
                .headers
                .get_all(name)
                .iter()
                .any(|v| v.as_bytes() == value.as_bytes()),
            Self::HeaderRegexp(name, re) => req
                .headers
                .get_all(name)
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| re.is_match(v))),
            Self::Const(b) => *b,
            Self::Cookie(name, re) => {
                cookie(Self::headers(req), name).is_some_and(|v| re.is_match(v))
            }
            Self::QueryParam(name, re) => super::query::pairs(req.query)
                .any(|(k, v)| k == *name && re.as_ref().is_none_or(|re| re.is_match(&v))),
            Self::Source(of, nets) => {
                // Go's listener reports an IPv4 client on a dual-stack socket unmapped.
                let peer = req.peer.to_canonical();
                let ip = match of {
                    SourceOf::Peer => peer,
                    SourceOf::First | SourceOf::Last => {
                        client_source(Self::headers(req), peer, req.trusted, *of == SourceOf::Last)
                    }
                };
                nets.iter().any(|n| n.contains(ip))
            }
            Self::Interval { from, until } => {
                let now = req.now.unwrap_or_else(SystemTime::now);
                from.is_none_or(|f| f <= now) && until.is_none_or(|u| now < u)
            }
            Self::Traffic { chance, sticky } => {
                let group = sticky
                    .as_ref()
                    .and_then(|(name, group)| Some((cookie(Self::headers(req), name)?, group)));
                match group {
                    Some((value, group)) => value == group,
                    None => crate::balance::rng::unit() < *chance,
                }
            }
            Self::Segment { min, max } => {
                let r = req.draw.unwrap_or_else(crate::balance::rng::unit);
                *min <= r && r < *max
            }
        }
    }
}
