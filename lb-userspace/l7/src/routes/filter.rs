//! Route filters that act on requests and responses. Filters that only configure the
//! route (access log, fade-in, consistent hashing) are taken apart when the route is
//! compiled and do nothing per request.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use regex::Regex;

use super::query;

/// A filter.
#[derive(Clone, Debug)]
pub enum Filter {
    /// `status(code)`: the response's status, whatever answered.
    Status(StatusCode),
    /// `inlineContent(body[, type])`: answer without a backend.
    InlineContent {
        /// The body.
        body: Bytes,
        /// Its Content-Type.
        content_type: HeaderValue,
    },
    /// `setQuery(k, v)`.
    SetQuery(String, String),
    /// `modPath(/re/, "replacement")`.
    ModPath(Regex, String),
    /// `redirectTo(code[, location])`.
    RedirectTo(StatusCode, Location),
    /// `setRequestHeader(k, v)`.
    SetRequestHeader(HeaderName, HeaderValue),
    /// `setResponseHeader(k, v)`.
    SetResponseHeader(HeaderName, HeaderValue),
    /// `setPath(p)`.
    SetPath(String),
    /// `stripQuery()`.
    StripQuery,
}

/// A `redirectTo` location; parts left out are taken from the request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Location {
    /// `http`, `https`.
    pub scheme: Option<String>,
    /// `host[:port]`.
    pub authority: Option<String>,
    /// Path (kept from the request when absent).
    pub path: Option<String>,
    /// Query (kept from the request when absent).
    pub query: Option<String>,
}

impl Location {
    /// Parses `scheme://host[:port][/path][?query]`, or `/path[?query]`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut loc = Self::default();
        let rest = if let Some((scheme, rest)) = text.split_once("://") {
            if scheme.is_empty()
                || !scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.')
            {
                return Err(format!("location {text:?} has no valid scheme"));
            }
            loc.scheme = Some(scheme.to_owned());
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            if end == 0 {
                return Err(format!("location {text:?} has no host"));
            }
            loc.authority = Some(rest[..end].to_owned());
            &rest[end..]
        } else if text.starts_with('/') {
            text
        } else {
            return Err(format!(
                "location {text:?} is neither `scheme://host…` nor `/path`"
            ));
        };
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        loc.path = (!path.is_empty()).then(|| path.to_owned());
        loc.query = query.filter(|q| !q.is_empty()).map(str::to_owned);
        Ok(loc)
    }
}

/// What a request became while its route's filters ran.
#[derive(Debug, Default)]
pub struct Exchange {
    /// The path (filters may rewrite it).
    pub path: String,
    /// The raw query without `?`; empty for none.
    pub query: String,
    /// Request headers to set before forwarding.
    pub request_headers: Vec<(HeaderName, HeaderValue)>,
    /// An answer given by a filter: no backend is asked.
    pub served: Option<Served>,
    /// How many filters ran their request part (the response parts of those run).
    pub ran: usize,
    /// A filter changed the path or query: the backend gets `path`/`query` instead of
    /// the request's own (which is forwarded as is, without copying, otherwise).
    pub rewritten: bool,
}

impl Exchange {
    /// The request's path and query as filters left them: an exchange starts with
    /// copies only when the route has filters.
    pub fn for_request(uri: &http::Uri, has_filters: bool) -> Self {
        if !has_filters {
            return Self::default();
        }
        Self {
            path: uri.path().to_owned(),
            query: uri.query().unwrap_or("").to_owned(),
            ..Self::default()
        }
    }

    /// The path the backend sees.
    pub fn path<'a>(&'a self, uri: &'a http::Uri) -> &'a str {
        if self.rewritten {
            &self.path
        } else {
            uri.path()
        }
    }

    /// The query the backend sees (without `?`).
    pub fn query<'a>(&'a self, uri: &'a http::Uri) -> &'a str {
        if self.rewritten {
            &self.query
        } else {
            uri.query().unwrap_or("")
        }
    }
}

/// An answer a filter gave.
#[derive(Debug)]
pub enum Served {
    /// `inlineContent`.
    Inline {
        /// Body.
        body: Bytes,
        /// Content-Type.
        content_type: HeaderValue,
    },
    /// `redirectTo`.
    Redirect {
        /// Status.
        status: StatusCode,
        /// The Location value.
        location: String,
    },
}

/// Runs the request parts of `filters` in order, up to the first that answers.
/// `scheme` and `host` are the request's, for redirects.
pub fn on_request(filters: &[Filter], ex: &mut Exchange, scheme: &str, host: &str) {
    for (i, f) in filters.iter().enumerate() {
        ex.ran = i + 1;
        match f {
            Filter::Status(_) | Filter::SetResponseHeader(..) => {}
            Filter::InlineContent { body, content_type } => {
                ex.served = Some(Served::Inline {
                    body: body.clone(),
                    content_type: content_type.clone(),
                });
                return;
            }
            Filter::SetQuery(k, v) => {
                ex.query = query::set(&ex.query, k, v);
                ex.rewritten = true;
            }
            Filter::ModPath(re, with) => {
                if let std::borrow::Cow::Owned(p) = re.replace_all(&ex.path, with.as_str()) {
                    ex.path = p;
                    ex.rewritten = true;
                }
            }
            Filter::RedirectTo(status, loc) => {
                ex.served = Some(Served::Redirect {
                    status: *status,
                    location: location(loc, ex, scheme, host),
                });
                return;
            }
            Filter::SetRequestHeader(k, v) => ex.request_headers.push((k.clone(), v.clone())),
            Filter::SetPath(p) => {
                p.clone_into(&mut ex.path);
                ex.rewritten = true;
            }
            Filter::StripQuery => {
                ex.rewritten |= !ex.query.is_empty();
                ex.query.clear();
            }
        }
    }
}

/// Runs the response parts of the filters that ran, last first.
pub fn on_response(
    filters: &[Filter],
    ran: usize,
    status: &mut StatusCode,
    headers: &mut HeaderMap,
) {
    for f in filters[..ran].iter().rev() {
        match f {
            Filter::Status(s) => *status = *s,
            Filter::SetResponseHeader(k, v) => {
                headers.insert(k.clone(), v.clone());
            }
            _ => {}
        }
    }
}

/// skipper's rule: a location without a path keeps the request's path, one without a
/// query keeps the request's query; scheme and host default to the request's.
fn location(loc: &Location, ex: &Exchange, scheme: &str, host: &str) -> String {
    let mut out = String::with_capacity(64);
    out.push_str(loc.scheme.as_deref().unwrap_or(scheme));
    out.push_str("://");
    out.push_str(loc.authority.as_deref().unwrap_or(host));
    out.push_str(loc.path.as_deref().unwrap_or(&ex.path));
    let query = loc.query.as_deref().unwrap_or(&ex.query);
    if !query.is_empty() {
        out.push('?');
        out.push_str(query);
    }
    out
}
