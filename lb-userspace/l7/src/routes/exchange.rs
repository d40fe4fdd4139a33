//! A request while its route's filters run: what they changed ([`Exchange`]) and what
//! they read of it besides ([`RequestInfo`]).

use std::{net::IpAddr, time::Duration};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

pub use super::values::client_source;
use super::{
    host::UpstreamHost,
    template::{Hash, ip_into},
    values::{HeaderEdit, Headers, Values},
};
use crate::balance::rng;

/// What a request became while its route's filters ran.
#[derive(Debug, Default)]
pub struct Exchange {
    /// The path a filter set, escaped as the backend gets it; `None`: the request's
    /// own ([`Exchange::path`]). Filters copy nothing they do not change.
    pub path: Option<String>,
    /// The raw query without `?` a filter set (empty: none); `None`: the request's
    /// own ([`Exchange::query`]).
    pub query: Option<String>,
    /// Request header changes, in order, for the proxy to apply to what it forwards.
    pub edits: Vec<HeaderEdit>,
    /// The hash of the key a `consistentHashKey` resolved, if one did.
    pub key: Option<u64>,
    /// An answer given by a filter: no backend is asked.
    pub served: Option<Served>,
    /// How many filters ran their request part (the response parts of those run).
    pub ran: usize,
    /// The Host the backend gets; the proxy sets where it starts (the node's
    /// `preserve_host`) before the filters run.
    pub host: UpstreamHost,
    /// A `backendTimeout`'s duration, replacing the node's `request_timeout`.
    pub backend_timeout: Option<Duration>,
    /// The path as received, kept when a filter first changes `path`: Go keeps it as
    /// `URL.RawPath` and sends it again while the path decodes to it (see
    /// [`super::gopath`]).
    pub received_path: Option<Box<str>>,
}

impl Exchange {
    /// The consistent-hash key: what a `consistentHashKey` resolved to, else the
    /// client address (skipper's `RemoteHost`, see [`client_source`]).
    pub fn key_hash(&self, source: IpAddr) -> u64 {
        self.key.unwrap_or_else(|| {
            let mut h = Hash(rng::FNV_START);
            ip_into(source, &mut h);
            h.0
        })
    }

    /// The path the backend sees, given the request's own (escaped, as received).
    pub fn path<'a>(&'a self, own: &'a str) -> &'a str {
        self.path.as_deref().unwrap_or(own)
    }

    /// The query the backend sees (without `?`), given the request's own.
    pub fn query<'a>(&'a self, own: &'a str) -> &'a str {
        self.query.as_deref().unwrap_or(own)
    }

    /// Whether a filter set the path or query: the backend then gets a target made
    /// of [`Exchange::path`] and [`Exchange::query`] instead of the request's own
    /// (which is forwarded as is, without copying, otherwise).
    pub fn rewritten(&self) -> bool {
        self.path.is_some() || self.query.is_some()
    }

    /// The path and query for the backend: the request's own (moved, not copied:
    /// an h2 request's target is an unshared buffer that a clone would promote with
    /// an allocation) unless a filter rewrote them; `None` if a rewrite is no valid
    /// target.
    pub fn target(&self, uri: http::Uri) -> Option<http::uri::PathAndQuery> {
        if !self.rewritten() {
            return Some(
                uri.into_parts()
                    .path_and_query
                    .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            );
        }
        let path = self.path(uri.path());
        let path = if path.is_empty() { "/" } else { path };
        let query = self.query(uri.query().unwrap_or(""));
        // Exactly as long as the text: a `Vec` with room to spare becomes `Bytes`
        // with an allocation of its own.
        let room = if query.is_empty() { 0 } else { query.len() + 1 };
        let mut pq = String::with_capacity(path.len() + room);
        pq.push_str(path);
        if !query.is_empty() {
            pq.push('?');
            pq.push_str(query);
        }
        http::uri::PathAndQuery::from_maybe_shared(Bytes::from(pq)).ok()
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

/// The request's scheme as skipper's filters see it (`redirectTo` without one uses
/// it): Go's server knows a scheme only from an absolute-form HTTP/1 target
/// (`GET http://host/path`), and a redirect otherwise goes to `https`. The proxy and
/// `lbctl routes` both take it from here, so an explained redirect is the one served.
pub fn request_scheme(version: http::Version, uri: &http::Uri) -> &'static str {
    match (version, uri.scheme_str()) {
        (http::Version::HTTP_2, _) | (_, None) => "https",
        (_, Some(s)) if s.eq_ignore_ascii_case("http") => "http",
        _ => "https",
    }
}

/// What filters read of a request besides what they change.
///
/// For response filters the proxy passes the request's headers, path and query only
/// when a response template reads them ([`super::Route::response_reads_request`]):
/// they went to the backend, and keeping a copy for every request would cost for
/// nothing.
#[derive(Clone, Copy, Debug)]
pub struct RequestInfo<'a> {
    /// Method.
    pub method: &'a str,
    /// `http` or `https`, for redirects.
    pub scheme: &'a str,
    /// The Host header, else the target's authority.
    pub host: &'a str,
    /// Headers as the client sent them.
    pub headers: &'a HeaderMap,
    /// The path as the client sent it (escaped): what filters see until one sets
    /// another ([`Exchange::path`]).
    pub path: &'a str,
    /// The raw query as the client sent it, without `?` (empty: none).
    pub query: &'a str,
    /// The routing path the route matched.
    pub routing_path: &'a str,
    /// The peer's address.
    pub peer: IpAddr,
    /// Whether the peer's X-Forwarded-For is believed.
    pub trusted: bool,
}

impl<'a> RequestInfo<'a> {
    /// What templates see now: this request as `ex` has changed it so far.
    pub fn values<'s>(&self, ex: &'s Exchange, response: Option<&'s HeaderMap>) -> Values<'s>
    where
        'a: 's,
    {
        Values {
            method: self.method,
            host: self.host,
            path: ex.path(self.path),
            query: ex.query(self.query),
            routing_path: self.routing_path,
            headers: Headers {
                base: self.headers,
                edits: &ex.edits,
            },
            peer: self.peer,
            trusted: self.trusted,
            response,
        }
    }
}
