//! What happens to one request, decided without doing it: the route it takes, what
//! the route's filters made of it, and whether it is answered here or a backend is
//! asked (and with which consistent-hash key).
//!
//! The proxy acts on a [`Plan`] and `lbctl routes` prints one, so an explained
//! request is the request served: both go through [`plan`] and nothing else decides.
//! A plan has no side effects. Picking an endpoint is left to the caller, since a
//! pick moves a balancer's state (a round robin's position).

use std::{net::IpAddr, time::SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header, request::Parts};

use super::{
    Backend, Pool, Route, RouteTable,
    exchange::{Exchange, RequestInfo, Served, client_source, request_scheme},
    filter::{self, UpstreamHost},
    head::{Head, Refusal},
    predicate::RequestView,
    values::Headers,
};
use crate::balance::Algorithm;

/// A request as a plan reads it: its head, checked ([`super::head::check`]), and who
/// sent it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// Method, target, version and headers as received.
    pub parts: &'a Parts,
    /// The Host and routing path.
    pub head: &'a Head<'a>,
    /// The peer's address.
    pub peer: IpAddr,
    /// Whether the peer is a trusted proxy (its X-Forwarded-For is believed).
    pub trusted: bool,
    /// The time the time predicates compare with; `None`: the clock.
    pub now: Option<SystemTime>,
}

impl<'a> Request<'a> {
    /// What filters read of the request besides what they change.
    pub fn info(&self) -> RequestInfo<'a> {
        RequestInfo {
            method: self.parts.method.as_str(),
            scheme: request_scheme(self.parts.version, &self.parts.uri),
            host: self.head.host,
            headers: &self.parts.headers,
            path: self.parts.uri.path(),
            query: self.parts.uri.query().unwrap_or(""),
            routing_path: &self.head.path,
            peer: self.peer,
            trusted: self.trusted,
        }
    }
}

/// Why a request is answered without a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    /// No route matches: 404, and no route's filters run.
    NoRoute,
    /// A CONNECT that no `Method("CONNECT")` route takes: 405.
    ConnectRefused,
    /// A filter served it (`inlineContent`, `redirectTo`).
    Filter,
    /// The route's backend is `<shunt>` and no filter served: 404.
    Shunt,
    /// The head was refused before routing ([`refused`]): 400.
    Refused,
    /// No backend answered (502, 503, 504), or the client's body did not frame
    /// (400).
    BackendFailed,
}

/// The 400 for a head [`super::head::check`] refused: what is wrong, as text.
pub fn refused(why: Refusal) -> Answer {
    Answer::plain(
        Answered::Refused,
        StatusCode::BAD_REQUEST,
        Bytes::from(format!("{why}\n")),
        None,
    )
}

/// An answer of the proxy's own, complete: the route's response filters have run.
#[derive(Debug)]
pub struct Answer {
    /// Why there is no backend.
    pub why: Answered,
    /// Status.
    pub status: StatusCode,
    /// Headers (Content-Type, Location, …).
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
}

impl Answer {
    /// `status` with `body` (Content-Type `content_type`, plain UTF-8 text by default;
    /// none for an empty body).
    pub fn plain(
        why: Answered,
        status: StatusCode,
        body: Bytes,
        content_type: Option<HeaderValue>,
    ) -> Self {
        let mut headers = HeaderMap::new();
        if !body.is_empty() {
            let ct = content_type.unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8"));
            headers.insert(header::CONTENT_TYPE, ct);
        }
        Self {
            why,
            status,
            headers,
            body,
        }
    }

    /// An answer for a request that could not be routed or forwarded, as skipper's
    /// `makeErrorResponse` writes it: the status's reason phrase and a line feed as a
    /// plain-text body, with `X-Content-Type-Options: nosniff`. (skipper also adds
    /// `Server: Skipper`, which is not ours to send.)
    pub fn error(why: Answered, status: StatusCode) -> Self {
        let text = format!("{}\n", status.canonical_reason().unwrap_or(""));
        let mut a = Self::plain(why, status, Bytes::from(text), None);
        a.headers
            .insert(NOSNIFF.0, HeaderValue::from_static(NOSNIFF.1));
        a
    }
}

/// `X-Content-Type-Options: nosniff`.
const NOSNIFF: (HeaderName, &str) = (HeaderName::from_static("x-content-type-options"), "nosniff");

/// What the proxy does.
#[derive(Debug)]
pub enum Outcome<'r> {
    /// Answers itself.
    Answer(Answer),
    /// Sends the request to `pool`; `key` is the consistent-hash key (0 for other
    /// algorithms, which do not read it).
    Forward {
        /// The route's endpoints.
        pool: &'r Pool,
        /// The key's hash.
        key: u64,
    },
    /// Opens a CONNECT tunnel to one of `pool`'s endpoints.
    Tunnel(&'r Pool),
}

/// A request's fate (module doc).
#[derive(Debug)]
pub struct Plan<'r> {
    /// The route taken, if one matched.
    pub route: Option<&'r Route>,
    /// What the route's filters made of the request.
    pub exchange: Exchange,
    /// What follows.
    pub outcome: Outcome<'r>,
}

impl Plan<'_> {
    /// Runs the route's response filters, in reverse order, over a backend's
    /// response (for a [`Outcome::Forward`] or [`Outcome::Tunnel`]) or a failure
    /// answer; nothing when no route matched.
    pub fn respond(
        &self,
        info: &RequestInfo<'_>,
        status: &mut StatusCode,
        headers: &mut HeaderMap,
    ) {
        if let Some(route) = self.route {
            filter::on_response(&route.filters, &self.exchange, info, status, headers);
        }
    }
}

/// Decides what happens to `req` (module doc). `preserve_host` is the node's setting:
/// where the Host sent upstream starts before the route's filters change it.
pub fn plan<'r>(table: &'r RouteTable, req: &Request<'_>, preserve_host: bool) -> Plan<'r> {
    let parts = req.parts;
    let view = RequestView {
        method: &parts.method,
        path: &req.head.path,
        host: req.head.host,
        headers: &parts.headers,
        query: parts.uri.query().unwrap_or(""),
        peer: req.peer,
        trusted: req.trusted,
        now: req.now,
        draw: None,
    };
    let route = table.find_routed(&view);
    let connect = parts.method == Method::CONNECT;
    if connect && !route.is_some_and(Route::allows_connect) {
        let mut a = Answer::plain(
            Answered::ConnectRefused,
            StatusCode::METHOD_NOT_ALLOWED,
            Bytes::from_static(b"CONNECT is not allowed here\n"),
            None,
        );
        a.headers
            .insert(header::ALLOW, HeaderValue::from_static(CONNECT_ALLOW));
        return unrouted(a);
    }
    let Some(route) = route else {
        return unrouted(Answer::error(Answered::NoRoute, StatusCode::NOT_FOUND));
    };
    let mut ex = Exchange {
        host: UpstreamHost::initial(preserve_host),
        ..Exchange::default()
    };
    let info = req.info();
    filter::on_request(&route.filters, &mut ex, &info);
    let mut outcome = match (ex.served.take(), &route.backend) {
        (Some(served), _) => Outcome::Answer(served_answer(served)),
        (None, Backend::Shunt) => Outcome::Answer(Answer::plain(
            Answered::Shunt,
            StatusCode::NOT_FOUND,
            Bytes::new(),
            None,
        )),
        (None, Backend::Pool(pool)) if connect => Outcome::Tunnel(pool),
        (None, Backend::Pool(pool)) => Outcome::Forward {
            pool,
            key: key(pool, &ex, req),
        },
    };
    if let Outcome::Answer(a) = &mut outcome {
        filter::on_response(&route.filters, &ex, &info, &mut a.status, &mut a.headers);
    }
    Plan {
        route: Some(route),
        exchange: ex,
        outcome,
    }
}

/// The consistent-hash key of a request to `pool`: what a `consistentHashKey`
/// resolved to, else the client (skipper's `RemoteHost`, read from the headers as
/// the filters left them).
fn key(pool: &Pool, ex: &Exchange, req: &Request<'_>) -> u64 {
    match pool.balancer.algorithm() {
        Algorithm::ConsistentHash { .. } => {
            let current = Headers {
                base: &req.parts.headers,
                edits: &ex.edits,
            };
            ex.key_hash(client_source(current, req.peer, req.trusted, false))
        }
        _ => 0,
    }
}

/// The answer a serving filter gave.
fn served_answer(served: Served) -> Answer {
    match served {
        Served::Inline { body, content_type } => {
            Answer::plain(Answered::Filter, StatusCode::OK, body, Some(content_type))
        }
        Served::Redirect { status, location } => {
            let mut a = Answer::plain(Answered::Filter, status, Bytes::new(), None);
            if let Ok(v) = HeaderValue::from_str(&location) {
                a.headers.insert(header::LOCATION, v);
            }
            a
        }
    }
}

fn unrouted<'r>(a: Answer) -> Plan<'r> {
    Plan {
        route: None,
        exchange: Exchange::default(),
        outcome: Outcome::Answer(a),
    }
}

/// What a 405 to CONNECT says is allowed: every method the proxy forwards.
const CONNECT_ALLOW: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE";
