//! Sending a request to a route's pool: the pick, failover to the next endpoints, the
//! head the backend gets and how the body travels.
//!
//! The Host: as skipper's proxy sends it, the endpoint's own `host:port` (on a retry,
//! the next endpoint's; for `https://host` that is `host:443`, as skipper's
//! `net.SchemeHost` writes it), unless the node's `preserve_host` or the route's
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
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Instant, SystemTime},
};

use http::{HeaderValue, Method, Request, Response, Uri, header};
use http_body::Body as _;

use super::{
    body::UpBody,
    headers,
    service::ServiceState,
    upstream::{self, BackendBody},
};
use crate::{
    balance::{InFlight, Pick},
    routes::{Exchange, Pool, filter::UpstreamHost},
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
    /// After connecting, the socket failed: reset, broken pipe (503); also a TLS
    /// handshake the backend broke off with an alert.
    Reset,
    /// The TLS handshake failed on our side: the backend's certificate does not
    /// verify for its host, or it offers nothing we speak (500).
    Tls,
    /// The request for the backend could not be built (500).
    Internal,
    /// The client's body could not be read (bad framing): the client's fault (400).
    ClientBody,
}

/// A request as it reaches [`forward`].
pub(super) struct Outgoing<'a> {
    pub parts: http::request::Parts,
    pub body: super::client_body::ClientBody,
    pub ex: &'a Exchange,
    /// The consistent-hash key ([`crate::routes::plan::Outcome::Forward`]).
    pub key: u64,
    /// The client's address as an X-Forwarded-For value ([`headers::Peer`]).
    pub client: &'a HeaderValue,
    pub now: SystemTime,
    /// When the request's handling started: the first attempt's response-head
    /// deadline counts from it (microseconds before the send, one clock read less).
    pub started: Instant,
    /// What becomes of a pooled backend connection's response fields
    /// ([`upstream::send`]): when no filter of the route sees them they come without
    /// hop-by-hop ones (the handler need not strip them), and for an HTTP/1 client
    /// they stay in the head's bytes, to be written to the client as they came.
    pub head_mode: upstream::HeadMode,
}

/// Sends the request to the pool's pick; when connecting fails and the request may
/// be repeated (idempotent, no body), to the next endpoints in the set's order.
pub(super) async fn forward(
    state: &ServiceState,
    pool: &Pool,
    out: Outgoing<'_>,
) -> Result<(Response<BackendBody>, InFlight), Failure> {
    let Outgoing {
        parts,
        body,
        ex,
        key,
        client,
        now,
        started,
        head_mode,
    } = out;
    let http::request::Parts {
        method,
        uri,
        mut headers,
        ..
    } = parts;
    let set = pool.set.load_full();
    let n = set.len();
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
    // Only a request with a body can fail reading it: a bodiless one does without
    // the flag (and its allocation).
    let failed = (!bodiless).then(|| Arc::new(AtomicBool::new(false)));
    let mut client_body = failed.as_ref().map(|failed| UpBody::Client {
        body,
        failed: Arc::clone(failed),
    });
    let host = upstream_head(&mut headers, &uri, ex, bodiless);
    // skipper's `backendTimeout` is one deadline for every attempt.
    let deadline = ex
        .backend_timeout
        .map(|d| upstream::deadline_from(started.into(), d).into_std());
    let mut path_and_query = Some(ex.target(uri).ok_or(Failure::Internal)?);
    let mut last = Failure::Unreachable;
    for attempt in 0..attempts {
        let i = if first + attempt >= n {
            first + attempt - n
        } else {
            first + attempt
        };
        let endpoint = &set.endpoints()[i];
        // A plain `ip:port` endpoint goes through the worker's own pool, which takes
        // the origin-form target hyper-util's client would have sent; the rest
        // through hyper-util with the absolute URI it resolves and connects by.
        let direct = endpoint.socket.filter(|_| endpoint.host_header.is_some());
        let mut target = http::uri::Parts::default();
        if direct.is_none() {
            target.scheme = Some(if endpoint.tls {
                http::uri::Scheme::HTTPS
            } else {
                http::uri::Scheme::HTTP
            });
            target.authority.clone_from(&endpoint.uri_authority);
        }
        // As the headers below: a copy for each attempt but the last, which moves it.
        target.path_and_query = if attempt + 1 < attempts {
            path_and_query.clone()
        } else {
            path_and_query.take()
        };
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
            && let Some(v) = &endpoint.host_header
        {
            req.headers_mut().insert(header::HOST, v.clone());
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
        // The worker's own pool keeps the deadline on the connection's timer
        // (`upstream` module docs); hyper-util's client gets a timer of its own.
        let sent = if let Some(addr) = direct {
            // `backendTimeout`'s deadline as it is, not rebuilt from what is left.
            let until = deadline.map_or_else(
                || {
                    let from = if attempt == 0 {
                        started
                    } else {
                        Instant::now()
                    };
                    upstream::deadline_from(from.into(), limit)
                },
                tokio::time::Instant::from_std,
            );
            let timeout = state.shared.limits.connect_timeout;
            let forwarded = headers::Forwarded {
                client,
                proto: "http",
            };
            match upstream::send(addr, timeout, until, req, head_mode, Some(forwarded)).await {
                Err(upstream::SendError::Timeout) => Err(()),
                sent => Ok(sent.map_err(SendFailure::Pooled)),
            }
        } else {
            // Both of hyper-util's pools answer with the same future type: a plain
            // request pays one branch for TLS existing.
            let worker = super::workers::current();
            headers::add_forwarded(req.headers_mut(), client, "http");
            let sent = if endpoint.tls {
                state.shared.tls_clients[worker].request(req)
            } else {
                state.shared.clients[worker].request(req)
            };
            tokio::time::timeout(limit, sent)
                .await
                .map(|sent| {
                    sent.map(|r| r.map(BackendBody::unpooled))
                        .map_err(SendFailure::Client)
                })
                .map_err(drop)
        };
        match sent {
            Ok(Ok(mut resp)) => {
                if let Some(d) = deadline {
                    resp.extensions_mut()
                        .insert(super::body::BodyDeadline(d.into()));
                }
                return Ok((resp, inflight));
            }
            Ok(Err(_)) if failed.as_ref().is_some_and(|f| f.load(Ordering::Relaxed)) => {
                return Err(Failure::ClientBody);
            }
            Ok(Err(e)) => {
                endpoint.stats.failures.fetch_add(1, Ordering::Relaxed);
                // A failed connect sent nothing, so the next endpoint may be tried;
                // a request that reached the backend is answered as skipper does.
                let connect = e.is_connect();
                let e = e.error();
                tracing::debug!(
                    service = %state.name,
                    backend = %endpoint.authority,
                    error = %e,
                    connect,
                    "backend request failed; {}",
                    if connect { "trying the next" } else { "answering" }
                );
                if !connect {
                    return Err(Failure::after_connect(e));
                }
                // The TCP connect of a TLS endpoint succeeded but its handshake did
                // not: skipper does not retry that (module docs of `tls`).
                if let Some(f) = Failure::handshake(e) {
                    state.stats.tls_failures.fetch_add(1, Ordering::Relaxed);
                    return Err(f);
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

/// A failed send through either pool.
enum SendFailure {
    /// The worker's own pool ([`upstream`]).
    Pooled(upstream::SendError),
    /// hyper-util's client.
    Client(hyper_util::client::legacy::Error),
}

impl SendFailure {
    /// Nothing was sent: connecting failed (for TLS, possibly its handshake).
    fn is_connect(&self) -> bool {
        match self {
            SendFailure::Pooled(e) => matches!(e, upstream::SendError::Connect(_)),
            SendFailure::Client(e) => e.is_connect(),
        }
    }

    /// The error, whose causes [`Failure`] sorts.
    fn error(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            SendFailure::Pooled(e) => e,
            SendFailure::Client(e) => e,
        }
    }
}

fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// Turns the client's headers into the backend's, in place: the filters' edits first
/// (as skipper's filters change the request before the proxy maps it), hop-by-hop
/// headers out, `Transfer-Encoding: chunked` for a body without a length. Returns
/// the Host to send; `None`: each attempt's endpoint's own `host:port`.
/// X-Forwarded-For/-Proto come per attempt: written with the head for our own pool,
/// put into the map for hyper-util's ([`headers::add_forwarded`]).
pub(crate) fn upstream_head(
    headers: &mut http::HeaderMap,
    uri: &Uri,
    ex: &Exchange,
    bodiless: bool,
) -> Option<HeaderValue> {
    // The client's Host, read before a filter's edits could drop it, and only when it
    // is the one sent: an HTTP/2 request carries it as `:authority`, which cannot
    // become a header value without a copy (an allocation per h2 request).
    let incoming_host = if ex.host == UpstreamHost::Incoming {
        headers.get(header::HOST).cloned().or_else(|| {
            uri.authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        })
    } else {
        None
    };
    for edit in &ex.edits {
        edit.apply(headers);
    }
    headers::strip_hop_by_hop(headers);
    if !bodiless && !headers.contains_key(header::CONTENT_LENGTH) {
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    }
    let host = match &ex.host {
        UpstreamHost::Backend => None,
        UpstreamHost::Incoming => incoming_host.filter(|h| !h.is_empty()),
        UpstreamHost::Set(v) => Some(v.clone()),
    };
    if let Some(h) = host.clone() {
        headers.insert(header::HOST, h);
    }
    host
}
