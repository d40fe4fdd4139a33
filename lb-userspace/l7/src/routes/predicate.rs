//! Route predicates: path patterns and the request checks.

use regex::Regex;

/// A path predicate, matched before the others: `Path` patterns and `PathSubtree`.
#[derive(Clone, Debug)]
pub enum PathMatch {
    /// `Path("/a/:id/*rest")`: literal segments, `:name` one non-empty segment, a
    /// final `*name` the rest (possibly empty).
    Pattern(Vec<Segment>),
    /// `PathSubtree("/base")`: `/base`, `/base/` and everything below; `tail` names
    /// the parameter holding the rest (`*`, or `name` from `/base/*name`).
    Subtree {
        /// The base without a trailing slash (`""` for `/`).
        base: String,
        /// The tail parameter's name.
        tail: String,
    },
}

/// One segment of a `Path` pattern.
#[derive(Clone, Debug, PartialEq)]
pub enum Segment {
    /// Must equal this.
    Literal(String),
    /// `:name`
    Param(String),
    /// `*name`, last only: at least one character.
    Rest(String),
}

impl PathMatch {
    /// Parses a `Path` pattern; `Err` says what is wrong with it.
    pub fn pattern(text: &str) -> Result<Self, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!("path {text:?} must start with `/`"));
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let mut segments = Vec::with_capacity(parts.len());
        for (i, p) in parts.iter().enumerate() {
            segments.push(
                if let Some(name) = p.strip_prefix(':').filter(|n| !n.is_empty()) {
                    Segment::Param(name.to_owned())
                } else if let Some(name) = p.strip_prefix('*').filter(|n| !n.is_empty()) {
                    if i + 1 != parts.len() {
                        return Err(format!(
                            "path {text:?}: a `*` wildcard must be the last segment"
                        ));
                    }
                    Segment::Rest(name.to_owned())
                } else {
                    Segment::Literal((*p).to_owned())
                },
            );
        }
        Ok(Self::Pattern(segments))
    }

    /// Parses a `PathSubtree` base (a trailing `/` is ignored; a final `/*name` or
    /// `/*` names the tail parameter).
    pub fn subtree(text: &str) -> Result<Self, String> {
        if !text.starts_with('/') {
            return Err(format!("path {text:?} must start with `/`"));
        }
        let (base, tail) = match text.rsplit_once('/') {
            Some((base, last)) if last.starts_with('*') => {
                let name = &last[1..];
                (base, if name.is_empty() { "*" } else { name })
            }
            _ => (text, "*"),
        };
        Ok(Self::Subtree {
            base: base.trim_end_matches('/').to_owned(),
            tail: tail.to_owned(),
        })
    }

    /// Whether `path` (without the query) matches.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            Self::Subtree { base, .. } => path
                .strip_prefix(base.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
            Self::Pattern(segments) => {
                let Some(rest) = path.strip_prefix('/') else {
                    return false;
                };
                let mut parts = rest.split('/');
                for seg in segments {
                    match seg {
                        // skipper's tree matches a named tail only when something
                        // follows its slash.
                        Segment::Rest(_) => return parts.next().is_some_and(|p| !p.is_empty()),
                        Segment::Param(_) => match parts.next() {
                            Some(p) if !p.is_empty() => {}
                            _ => return false,
                        },
                        Segment::Literal(l) => {
                            if parts.next() != Some(l.as_str()) {
                                return false;
                            }
                        }
                    }
                }
                parts.next().is_none()
            }
        }
    }

    /// How specific the match is, for route order: exact paths before patterns with
    /// parameters, before wildcards and subtrees; longer literal prefixes first.
    pub fn specificity(&self) -> (u8, usize) {
        match self {
            Self::Pattern(segs) => {
                let literal = segs
                    .iter()
                    .take_while(|s| matches!(s, Segment::Literal(_)))
                    .map(|s| match s {
                        Segment::Literal(l) => l.len() + 1,
                        _ => 0,
                    })
                    .sum();
                let class = if segs.iter().all(|s| matches!(s, Segment::Literal(_))) {
                    4
                } else if segs.iter().any(|s| matches!(s, Segment::Rest(_))) {
                    2
                } else {
                    3
                };
                (class, literal)
            }
            Self::Subtree { base, .. } => (2, base.len()),
        }
    }
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
