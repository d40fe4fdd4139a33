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
    /// The path (filters may rewrite it), escaped as the backend gets it.
    pub path: String,
    /// The raw query without `?`; empty for none.
    pub query: String,
    /// Request header changes, in order, for the proxy to apply to what it forwards.
    pub edits: Vec<HeaderEdit>,
    /// The hash of the key a `consistentHashKey` resolved, if one did.
    pub key: Option<u64>,
    /// An answer given by a filter: no backend is asked.
    pub served: Option<Served>,
    /// How many filters ran their request part (the response parts of those run).
    pub ran: usize,
    /// A filter changed the path or query: the backend gets `path`/`query` instead of
    /// the request's own (which is forwarded as is, without copying, otherwise).
    pub rewritten: bool,
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

    /// The request's path and query as filters left them: an exchange starts with
    /// copies only when the route's filters read or change them
    /// ([`super::Route::filters_read_target`]); without, `path` and `query` stay
    /// empty and the request's own are forwarded (`rewritten` stays false).
    pub fn for_request(uri: &http::Uri, reads_target: bool) -> Self {
        if !reads_target {
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

    /// The path and query for the backend: the request's own (moved, not copied:
    /// an h2 request's target is an unshared buffer that a clone would promote with
    /// an allocation) unless a filter rewrote them; `None` if a rewrite is no valid
    /// target.
    pub fn target(&self, uri: http::Uri) -> Option<http::uri::PathAndQuery> {
        if !self.rewritten {
            return Some(
                uri.into_parts()
                    .path_and_query
                    .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
            );
        }
        let mut pq = String::with_capacity(self.path.len() + self.query.len() + 1);
        pq.push_str(if self.path.is_empty() {
            "/"
        } else {
            &self.path
        });
        if !self.query.is_empty() {
            pq.push('?');
            pq.push_str(&self.query);
        }
        http::uri::PathAndQuery::from_maybe_shared(Bytes::from(pq)).ok()
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
/// For response filters the proxy passes the request's headers only when a response
/// template reads them ([`super::Route::response_reads_request`]): the headers went
/// to the backend, and keeping a copy for every request would cost for nothing.
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
            path: &ex.path,
            query: &ex.query,
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
