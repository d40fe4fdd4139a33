//! Sending a request to a route's pool: the pick, failover to the next endpoints, the
//! head the backend gets and how the body travels.
//!
//! The Host: as skipper's proxy sends it, the endpoint's own `host:port` (on a retry,
//! the next endpoint's), unless the node's `preserve_host` or the route's
//! `preserveHost("true")` keeps the client's, or a filter set one (see
//! [`UpstreamHost`]).
//!
//! Bodies: whether a request has one is what its framing says — a Content-Length, a
//! chunked HTTP/1.1 body, HTTP/2 DATA after a HEADERS frame without END_STREAM — for
//! every method. A body without a length goes to the backend chunked
//! (`Transfer-Encoding: chunked` is set explicitly, since hyper's client would send a
//! GET, HEAD or CONNECT with an unknown length as bodiless). Only a request without a
//! body is ever sent twice: once a body has started to flow, a failure is final.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Instant, SystemTime},
};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, Uri, header};
use http_body::Body as _;
use hyper::body::Incoming;

use super::{body::UpBody, headers, service::ServiceState};
use crate::{
    balance::{Algorithm, InFlight, Pick},
    routes::{Exchange, Pool, client_source, filter::UpstreamHost, values::Headers},
};

/// Why no backend answered; [`Failure::status`] is skipper's answer to each (see
/// [`super::failure`]).
#[derive(Debug)]
pub(super) enum Failure {
    /// The pool has no endpoint with weight (503).
    NoEndpoints,
    /// Connecting failed on every attempt (502).
    Unreachable,
    /// No response head within `request_timeout`, or the route's `backendTimeout`
    /// over all attempts (504).
    Timeout,
    /// After connecting, the backend closed the connection before a whole response
    /// head, or sent one that does not parse (500).
    Closed,
    /// After connecting, the socket failed: reset, broken pipe (503).
    Reset,
    /// The request for the backend could not be built (500).
    Internal,
    /// The client's body could not be read (bad framing): the client's fault (400).
    ClientBody,
}

/// A request as it reaches [`forward`].
pub(super) struct Outgoing<'a> {
    pub parts: http::request::Parts,
    pub body: Incoming,
    pub ex: &'a Exchange,
    pub peer: SocketAddr,
    /// Whether the peer's X-Forwarded-For is believed.
    pub trusted: bool,
    pub now: SystemTime,
}

/// Sends the request to the pool's pick; when connecting fails and the request may
/// be repeated (idempotent, no body), to the next endpoints in the set's order.
pub(super) async fn forward(
    state: &ServiceState,
    pool: &Pool,
    out: Outgoing<'_>,
) -> Result<(Response<Incoming>, InFlight), Failure> {
    let Outgoing {
        parts,
        body,
        ex,
        peer,
        trusted,
        now,
    } = out;
    let http::request::Parts {
        method,
        uri,
        mut headers,
        ..
    } = parts;
    let set = pool.set.load_full();
    let n = set.len();
    let key = match pool.balancer.algorithm() {
        Algorithm::ConsistentHash { .. } => {
            let current = Headers {
                base: &headers,
                edits: &ex.edits,
            };
            ex.key_hash(client_source(current, peer.ip(), trusted, false))
        }
        _ => 0,
    };
    let first = pool
        .balancer
        .pick(&set, &Pick { now, key })
        .ok_or(Failure::NoEndpoints)?;
    let bodiless = body.is_end_stream();
    let repeatable = is_idempotent(&method) && bodiless;
    let attempts = if repeatable {
        1 + state.shared.limits.retries.min(n - 1)
    } else {
        1
    };
    let failed = Arc::new(AtomicBool::new(false));
    let mut client_body = (!bodiless).then(|| UpBody::Client {
        body,
        failed: Arc::clone(&failed),
    });
    // The client's Host, read before a filter's edits could drop it.
    let incoming_host = headers.get(header::HOST).cloned().or_else(|| {
        uri.authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    // The filters' changes come first, as skipper's filters change the request before
    // the proxy maps it to the backend's.
    for edit in &ex.edits {
        edit.apply(&mut headers);
    }
    headers::strip_hop_by_hop(&mut headers);
    if !bodiless && !headers.contains_key(header::CONTENT_LENGTH) {
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    }
    headers::add_forwarded(&mut headers, peer.ip(), "http");
    // `None`: each attempt's endpoint's own `host:port`.
    let host = match &ex.host {
        UpstreamHost::Backend => None,
        UpstreamHost::Incoming => incoming_host.filter(|h| !h.is_empty()),
        UpstreamHost::Set(v) => Some(v.clone()),
    };
    if let Some(h) = host.clone() {
        headers.insert(header::HOST, h);
    }
    // skipper's `backendTimeout` is one deadline for every attempt.
    let deadline = ex.backend_timeout.map(|d| Instant::now() + d);
    let path_and_query = upstream_path(&uri, ex).ok_or(Failure::Internal)?;
    let mut last = Failure::Unreachable;
    for attempt in 0..attempts {
        let i = if first + attempt >= n {
            first + attempt - n
        } else {
            first + attempt
        };
        let endpoint = &set.endpoints()[i];
        let mut target = http::uri::Parts::default();
        target.scheme = Some(http::uri::Scheme::HTTP);
        target.authority.clone_from(&endpoint.uri_authority);
        target.path_and_query = Some(path_and_query.clone());
        let Ok(target) = Uri::from_parts(target) else {
            return Err(Failure::Internal);
        };
        let mut req = Request::new(client_body.take().unwrap_or(UpBody::Empty));
        *req.method_mut() = method.clone();
        *req.uri_mut() = target;
        // The last attempt takes the headers; earlier ones send a copy, since a
        // failed send does not give the request back.
        *req.headers_mut() = if attempt + 1 < attempts {
            headers.clone()
        } else {
            std::mem::take(&mut headers)
        };
        if host.is_none()
            && let Ok(v) = HeaderValue::from_str(&endpoint.authority)
        {
            req.headers_mut().insert(header::HOST, v);
        }
        let limit = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => state.shared.limits.request_timeout,
        };
        // A deadline already past (a zero or negative `backendTimeout`, or one spent
        // on failed connects) sends nothing, as an expired Go context does.
        if limit.is_zero() {
            return Err(Failure::Timeout);
        }
        let inflight = endpoint.stats.start();
        if attempt > 0 {
            state.stats.retries.fetch_add(1, Ordering::Relaxed);
        }
        match tokio::time::timeout(
            limit,
            state.shared.clients[super::workers::current()].request(req),
        )
        .await
        {
            Ok(Ok(mut resp)) => {
                if let Some(d) = deadline {
                    resp.extensions_mut()
                        .insert(super::body::BodyDeadline(d.into()));
                }
                return Ok((resp, inflight));
            }
            Ok(Err(_)) if failed.load(Ordering::Relaxed) => return Err(Failure::ClientBody),
            Ok(Err(e)) => {
                endpoint.stats.failures.fetch_add(1, Ordering::Relaxed);
                // A failed connect sent nothing, so the next endpoint may be tried;
                // a request that reached the backend is answered as skipper does.
                let connect = e.is_connect();
                tracing::debug!(
                    service = %state.name,
                    backend = %endpoint.authority,
                    error = %e,
                    connect,
                    "backend request failed; {}",
                    if connect { "trying the next" } else { "answering" }
                );
                if !connect {
                    return Err(Failure::after_connect(&e));
                }
                last = Failure::Unreachable;
            }
            Err(_) => {
                endpoint.stats.failures.fetch_add(1, Ordering::Relaxed);
                return Err(Failure::Timeout);
            }
        }
    }
    Err(last)
}

fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// The path and query for the backend: the request's own (shared, not copied) unless
/// a filter rewrote them.
fn upstream_path(uri: &Uri, ex: &Exchange) -> Option<http::uri::PathAndQuery> {
    if !ex.rewritten {
        return Some(
            uri.path_and_query()
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        );
    }
    let mut pq = String::with_capacity(ex.path.len() + ex.query.len() + 1);
    pq.push_str(if ex.path.is_empty() { "/" } else { &ex.path });
    if !ex.query.is_empty() {
        pq.push('?');
        pq.push_str(&ex.query);
    }
    http::uri::PathAndQuery::from_maybe_shared(Bytes::from(pq)).ok()
}
