//! Route predicates: path patterns and the request checks.

use regex::Regex;

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
    /// `Method("GET")`, `Methods("GET", "HEAD")`.
    Methods(Vec<http::Method>),
    /// `Header("K", "V")`: some value equals `V`.
    Header(http::HeaderName, String),
    /// `HeaderRegexp("K", /re/)`: some value matches.
    HeaderRegexp(http::HeaderName, Regex),
    /// `True()` / `False()`.
    Const(bool),
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
}

impl Predicate {
    /// Whether the request satisfies it.
    pub fn matches(&self, req: &RequestView<'_>) -> bool {
        match self {
            Self::PathRegexp(re) => re.is_match(req.path),
            Self::Host(re) => re.is_match(req.host),
            Self::Methods(m) => m.contains(req.method),
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
        }
    }
}
