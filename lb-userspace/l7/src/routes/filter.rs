//! Route filters that act on requests and responses. Filters that only configure the
//! route (access log, fade-in, the consistent-hash balance factor) are taken apart
//! when the route is compiled and do nothing per request.
//!
//! Values with `${…}` are [`Template`]s; what an unresolved placeholder means is each
//! filter's rule in skipper: the header filters and `consistentHashKey` do nothing,
//! `setPath`, `setQuery` and `dropQuery` use the text with the placeholder empty.
//!
//! A filter that sets the Host (`setRequestHeader("Host", …)`, `appendRequestHeader`,
//! `modRequestHeader`) or `preserveHost` also decides the Host the backend gets
//! ([`UpstreamHost`]), as in skipper.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header::HOST};
use regex::Regex;

pub use super::exchange::{Exchange, RequestInfo, Served};
pub use super::host::UpstreamHost;
use super::location::FromRequest;
pub use super::location::Location;
use super::{
    RouteError,
    args::Args,
    flowid, gopath, query,
    template::{Hash, Template},
    values::{HeaderEdit, Values},
};
use crate::balance::rng;

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
    /// `setQuery(k, v)`: the key set to the one value.
    SetQuery(Template, Template),
    /// `setQuery(q)`: the whole raw query replaced, as written (not escaped).
    SetRawQuery(Template),
    /// `dropQuery(k)`.
    DropQuery(Template),
    /// `modPath(/re/, "replacement")`: `$1`, `${name}` are the regexp's groups.
    ModPath(Regex, String),
    /// `redirectTo(code[, location])`.
    RedirectTo(StatusCode, Location),
    /// `setRequestHeader(k, v)`, `appendRequestHeader(k, v)`.
    RequestHeader(HeaderName, HeaderTemplate, Mode),
    /// `dropRequestHeader(k)`.
    DropRequestHeader(HeaderName),
    /// `setResponseHeader(k, v)`, `appendResponseHeader(k, v)`.
    ResponseHeader(HeaderName, HeaderTemplate, Mode),
    /// `dropResponseHeader(k)`.
    DropResponseHeader(HeaderName),
    /// `setPath(p)`: the template's text is a decoded path, escaped as Go escapes it.
    SetPath(PathTemplate),
    /// `stripQuery([preserve])`: `true` moves each pair into an
    /// `X-Query-Param-<key>` request header.
    StripQuery {
        /// Whether the pairs become headers.
        to_headers: bool,
    },
    /// `consistentHashKey(k)`: the key the consistent hash uses, when it resolves.
    ConsistentHashKey(Template),
    /// `modRequestHeader(k, /re/, replacement)`: the header's first value, the
    /// regexp's matches replaced (`$1`, `${name}`), becomes its only value; nothing
    /// happens to a header the request lacks. For Host the value is the request's
    /// Host, and the result is also the Host the backend gets, matched or not.
    ModRequestHeader(HeaderName, regex::bytes::Regex, String),
    /// `modResponseHeader(k, /re/, replacement)`: as `modRequestHeader`, on the
    /// response's header.
    ModResponseHeader(HeaderName, regex::bytes::Regex, String),
    /// `preserveHost("true"|"false")`: see [`UpstreamHost::preserve`].
    PreserveHost(bool),
    /// `flowId()`: a new X-Flow-Id; `flowId("reuse")` keeps one the request has when
    /// it is a valid id (see [`flowid`]).
    FlowId {
        /// Whether a valid received id stays.
        reuse: bool,
    },
    /// `backendTimeout(d)`: the time the backend has, over every attempt, to
    /// answer with a response head (then 504), instead of the node's
    /// `request_timeout`, and to send its body (a body still streaming then is
    /// cut, as skipper's context deadline stops Go's body read). The last one that
    /// ran wins.
    BackendTimeout(Duration),
}

/// Whether a header filter replaces the header's values or adds one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `set…Header`
    Set,
    /// `append…Header`
    Append,
}

/// A header value template; a value without placeholders is checked and built once.
#[derive(Clone, Debug)]
pub struct HeaderTemplate {
    template: Template,
    fixed: Option<HeaderValue>,
}

impl HeaderTemplate {
    /// Compiles `template`.
    ///
    /// # Errors
    /// A value without placeholders that is no valid header value.
    pub fn new(template: Template) -> Result<Self, String> {
        let fixed = match template.as_literal() {
            Some(text) => Some(
                HeaderValue::from_str(text)
                    .map_err(|_| format!("{text:?} is not a valid header value"))?,
            ),
            None => None,
        };
        Ok(Self { template, fixed })
    }

    /// The template.
    pub fn template(&self) -> &Template {
        &self.template
    }

    /// The value for `v`, or `None` when a placeholder is unresolved (skipper then
    /// leaves the header alone) or the text is no header value (a decoded query
    /// value with a line break, say).
    fn value(&self, v: &Values<'_>) -> Option<HeaderValue> {
        if let Some(fixed) = &self.fixed {
            return Some(fixed.clone());
        }
        let (bytes, ok) = self.template.apply_bytes(v);
        if !ok {
            return None;
        }
        HeaderValue::from_maybe_shared(Bytes::from(bytes)).ok()
    }
}

/// A `setPath` template. Its text is Go's decoded `URL.Path`; the backend gets it
/// in Go's sent form ([`gopath::sent_form`]).
#[derive(Clone, Debug)]
pub struct PathTemplate {
    template: Template,
}

impl PathTemplate {
    /// Compiles `template`.
    pub fn new(template: Template) -> Self {
        Self { template }
    }

    /// The template.
    pub fn template(&self) -> &Template {
        &self.template
    }

    fn path(&self, v: &Values<'_>) -> Vec<u8> {
        if let Some(text) = self.template.as_literal() {
            return text.as_bytes().to_vec();
        }
        let mut out = Vec::with_capacity(v.path.len() + 16);
        // skipper sets the path whether or not every placeholder resolved.
        let _ = self.template.apply_into(v, &mut out);
        out
    }
}

impl Filter {
    /// Whether the filter answers the request itself (skipper's `ctx.Serve`): the
    /// filters after it run neither their request nor their response part.
    pub fn serves(&self) -> bool {
        matches!(self, Filter::InlineContent { .. } | Filter::RedirectTo(..))
    }
}

/// Runs the request parts of `filters` in order, up to the first that answers.
pub fn on_request(filters: &[Filter], ex: &mut Exchange, req: &RequestInfo<'_>) {
    for (i, f) in filters.iter().enumerate() {
        ex.ran = i + 1;
        match f {
            Filter::Status(_)
            | Filter::ResponseHeader(..)
            | Filter::DropResponseHeader(_)
            | Filter::ModResponseHeader(..) => {}
            Filter::InlineContent { body, content_type } => {
                ex.served = Some(Served::Inline {
                    body: body.clone(),
                    content_type: content_type.clone(),
                });
                return;
            }
            Filter::SetQuery(k, v) => {
                let values = req.values(ex, None);
                let (k, _) = k.apply_cow(&values);
                let (v, _) = v.apply_cow(&values);
                ex.query = Some(query::set(ex.query(req.query), &k, &v));
            }
            Filter::SetRawQuery(q) => {
                ex.query = Some(q.apply(&req.values(ex, None)).0);
            }
            Filter::DropQuery(k) => {
                let (k, _) = k.apply_cow(&req.values(ex, None));
                ex.query = Some(query::drop(ex.query(req.query), &k));
            }
            Filter::ModPath(re, with) => mod_path(re, with, ex, req),
            Filter::RedirectTo(status, loc) => {
                let host = redirect_host(ex, req.host);
                ex.served = Some(Served::Redirect {
                    status: *status,
                    location: loc.render(FromRequest {
                        scheme: req.scheme,
                        host: &host,
                        path: ex.path(req.path),
                        query: ex.query(req.query),
                    }),
                });
                return;
            }
            Filter::RequestHeader(name, value, mode) => {
                if let Some(value) = value.value(&req.values(ex, None)) {
                    if name == HOST {
                        ex.host = UpstreamHost::Set(value.clone());
                    }
                    ex.edits.push(match mode {
                        Mode::Set => HeaderEdit::Set(name.clone(), value),
                        Mode::Append => HeaderEdit::Append(name.clone(), value),
                    });
                }
            }
            Filter::DropRequestHeader(name) => ex.edits.push(HeaderEdit::Drop(name.clone())),
            Filter::SetPath(p) => {
                let path = p.path(&req.values(ex, None));
                set_path(ex, req, &path);
            }
            Filter::StripQuery { to_headers } => {
                if *to_headers {
                    let current = ex.query.as_deref().unwrap_or(req.query);
                    for (k, v) in query::pairs(current) {
                        let name = HeaderName::from_bytes(query::param_header_name(&k).as_bytes());
                        // A decoded value with a line break cannot be a header.
                        if let (Ok(name), Ok(value)) = (name, HeaderValue::from_str(&v)) {
                            ex.edits.push(HeaderEdit::Append(name, value));
                        }
                    }
                }
                // A request without a query keeps its own target.
                if !ex.query(req.query).is_empty() {
                    ex.query = Some(String::new());
                }
            }
            Filter::ConsistentHashKey(t) => {
                let mut h = Hash(rng::FNV_START);
                if t.apply_into(&req.values(ex, None), &mut h) {
                    ex.key = Some(h.0);
                }
            }
            Filter::ModRequestHeader(name, re, with) => mod_request_header(name, re, with, ex, req),
            Filter::PreserveHost(preserve) => ex.host.preserve(*preserve, req.host),
            Filter::FlowId { reuse } => {
                let keep = *reuse
                    && req
                        .values(ex, None)
                        .headers
                        .first(&flowid::HEADER)
                        .is_some_and(|v| flowid::is_valid(v.as_bytes()));
                if !keep {
                    ex.edits
                        .push(HeaderEdit::Set(flowid::HEADER.clone(), flowid::generate()));
                }
            }
            Filter::BackendTimeout(d) => ex.backend_timeout = Some(*d),
        }
    }
}

/// The host a `redirectTo` without one takes: skipper reads the request's Host
/// header first, which Go's server keeps out of the header map, so only a value a
/// filter put there counts (`setRequestHeader`, `appendRequestHeader`,
/// `modRequestHeader` on Host; the first of them, as `Header.Get` reads), else the
/// request's own host. Unlike the Host sent upstream, `preserveHost` plays no part.
fn redirect_host<'a>(ex: &Exchange, incoming: &'a str) -> std::borrow::Cow<'a, str> {
    let mut first: Option<&HeaderValue> = None;
    for edit in &ex.edits {
        match edit {
            HeaderEdit::Set(name, v) if name == HOST => first = Some(v),
            HeaderEdit::Append(name, v) if name == HOST => first = first.or(Some(v)),
            HeaderEdit::Drop(name) if name == HOST => first = None,
            _ => {}
        }
    }
    match first.and_then(|v| v.to_str().ok()) {
        Some(h) if !h.is_empty() => std::borrow::Cow::Owned(h.to_owned()),
        _ => std::borrow::Cow::Borrowed(incoming),
    }
}

/// `modPath`: skipper replaces in Go's decoded `URL.Path` (so `/caf%C3%A9` is
/// `/café` to the regexp and a `%2F` is a `/`); the backend gets the result in
/// Go's sent form ([`gopath::sent_form`]). A path that does not match stays as it
/// came.
fn mod_path(re: &Regex, with: &str, ex: &mut Exchange, req: &RequestInfo<'_>) {
    let Some(decoded) = gopath::decode(ex.path(req.path)) else {
        return;
    };
    let decoded = String::from_utf8_lossy(&decoded);
    if let std::borrow::Cow::Owned(p) = re.replace_all(&decoded, with) {
        set_path(ex, req, p.as_bytes());
    }
}

/// Sets Go's `URL.Path` to `path` (decoded) and keeps the form the backend gets.
fn set_path(ex: &mut Exchange, req: &RequestInfo<'_>, path: &[u8]) {
    let current = ex.path.as_deref().unwrap_or(req.path);
    let received = ex.received_path.get_or_insert_with(|| current.into());
    ex.path = Some(gopath::sent_form(path, received));
}

/// `modRequestHeader`: see [`Filter::ModRequestHeader`]. A result that is no header
/// value (a replacement with a line break) changes nothing.
fn mod_request_header(
    name: &HeaderName,
    re: &regex::bytes::Regex,
    with: &str,
    ex: &mut Exchange,
    req: &RequestInfo<'_>,
) {
    let values = req.values(ex, None);
    let current = values.headers.first(name).map(HeaderValue::as_bytes);
    let current = match current {
        Some(v) => v,
        // skipper reads the Host from the request when no filter set the header.
        None if name == HOST => req.host.as_bytes(),
        None => return,
    };
    let Ok(value) = HeaderValue::from_bytes(&re.replace_all(current, with.as_bytes())) else {
        return;
    };
    if name == HOST {
        ex.host = UpstreamHost::Set(value.clone());
    }
    ex.edits.push(HeaderEdit::Set(name.clone(), value));
}

/// Runs the response parts of the filters that ran, last first. `req` is what the
/// response templates read of the request (see [`RequestInfo`]).
pub fn on_response(
    filters: &[Filter],
    ex: &Exchange,
    req: &RequestInfo<'_>,
    status: &mut StatusCode,
    headers: &mut HeaderMap,
) {
    for f in filters[..ex.ran].iter().rev() {
        match f {
            Filter::Status(s) => *status = *s,
            Filter::ResponseHeader(name, value, mode) => {
                if let Some(value) = value.value(&req.values(ex, Some(headers))) {
                    match mode {
                        Mode::Set => {
                            headers.insert(name.clone(), value);
                        }
                        Mode::Append => {
                            headers.append(name.clone(), value);
                        }
                    }
                }
            }
            Filter::DropResponseHeader(name) => {
                headers.remove(name);
            }
            Filter::ModResponseHeader(name, re, with) => {
                let value = headers
                    .get(name)
                    .map(|v| re.replace_all(v.as_bytes(), with.as_bytes()))
                    .and_then(|v| HeaderValue::from_bytes(&v).ok());
                if let Some(value) = value {
                    headers.insert(name.clone(), value);
                }
            }
            _ => {}
        }
    }
}

/// Compiles the filters `compile_filter` in the route compiler leaves to this module
/// (one concern each, they act per request), with skipper's argument checks.
///
/// # Errors
/// An unknown filter, or arguments skipper refuses: `modRequestHeader` and
/// `modResponseHeader` take exactly three strings and a regexp that compiles;
/// `preserveHost` exactly `"true"` or `"false"`; `flowId` a string first argument
/// if any (skipper ignores further ones); `backendTimeout` exactly one Go duration
/// string (`"2s"`, `"1m30s"`; zero and negative ones time out at once, as in skipper).
pub(super) fn compile(a: &Args<'_>) -> Result<Filter, RouteError> {
    Ok(match a.call.name.as_str() {
        name @ ("modRequestHeader" | "modResponseHeader") => {
            a.count(3, 3, "a header name, a regexp and a replacement")?;
            let k = a.header_name(0)?;
            let re = a.regex(1)?;
            let with = a.str(2)?.to_owned();
            // The same syntax on bytes: a header value need not be UTF-8.
            let re = regex::bytes::Regex::new(re.as_str()).map_err(|e| a.fail(e))?;
            if name == "modRequestHeader" {
                Filter::ModRequestHeader(k, re, with)
            } else {
                Filter::ModResponseHeader(k, re, with)
            }
        }
        "preserveHost" => {
            a.count(1, 1, r#""true" or "false""#)?;
            match a.str(0)? {
                "true" => Filter::PreserveHost(true),
                "false" => Filter::PreserveHost(false),
                other => {
                    return Err(a.fail(format!(r#"takes "true" or "false", not {other:?}"#)));
                }
            }
        }
        "flowId" => {
            let reuse = a.len() > 0 && a.str(0)?.eq_ignore_ascii_case("reuse");
            Filter::FlowId { reuse }
        }
        "backendTimeout" => {
            a.count(1, 1, r#"one duration like "2s""#)?;
            let text = a.str(0)?;
            let nanos = lb_model::units::duration::parse_nanos(text).map_err(|e| a.fail(e))?;
            Filter::BackendTimeout(Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)))
        }
        other => return Err(a.fail(format!("unknown filter `{other}`"))),
    })
}
