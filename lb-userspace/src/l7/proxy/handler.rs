//! One request through a service: route, filters, endpoint pick, forward with
//! failover, response filters, access log.

use std::{
    net::{IpAddr, SocketAddr},
    sync::{Arc, atomic::Ordering},
    time::{Instant, SystemTime},
};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use hyper::body::Incoming;

use super::{
    Shared,
    body::{Finish, LogRecord, ProxyBody, UpBody},
    headers,
    listen::Activity,
};
use crate::l7::{
    accesslog::StatusSet,
    balance::{Algorithm, InFlight, Pick},
    routes::{
        Backend, Exchange, KeySource, Pool, RouteTable, Served, filter, predicate::RequestView,
    },
};

/// A service's live state, shared by its connections.
#[derive(Debug)]
pub struct ServiceState {
    /// Service name.
    pub name: String,
    /// Routes; swapped whole on reload.
    pub routes: ArcSwap<RouteTable>,
    pub(super) shared: Arc<Shared>,
    pub(super) stats: super::ServiceStats,
}

/// Why no backend answered.
enum Failure {
    NoEndpoints,
    Unreachable,
    Timeout,
    Upstream,
}

impl ServiceState {
    /// The service's request counters.
    pub fn stats(&self) -> &super::ServiceStats {
        &self.stats
    }

    /// Serves one request; never fails (errors become 4xx/5xx responses).
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
        activity: Arc<Activity>,
    ) -> Response<ProxyBody> {
        activity.request_started();
        let started = Instant::now();
        let time = SystemTime::now();
        let (parts, body) = req.into_parts();
        let host = host_of(&parts.headers, &parts.uri);
        let table = self.routes.load_full();
        let view = RequestView {
            method: &parts.method,
            path: parts.uri.path(),
            host,
            headers: &parts.headers,
        };
        let mut finish = Finish {
            started,
            log: None,
            inflight: None,
            activity,
        };
        let Some(route) = table.find(&view) else {
            self.stats.no_route.fetch_add(1, Ordering::Relaxed);
            let status = StatusCode::NOT_FOUND;
            if self.shared.log_default {
                finish.log = self.log_record(&parts, peer, time, status, None);
            }
            return into_body(
                plain(status, Bytes::from_static(b"Route not found\n"), None),
                finish,
            );
        };
        let mut ex = Exchange::for_request(&parts.uri, !route.filters.is_empty());
        filter::on_request(&route.filters, &mut ex, "http", host);
        // What the log line needs is taken now (shared bytes, no copies): the request
        // head goes to the backend by move.
        let may_log = route
            .access_log
            .map_or(self.shared.log_default, |s| s != StatusSet::NONE);
        let mut record = if may_log {
            self.log_record(
                &parts,
                peer,
                time,
                StatusCode::OK,
                Some(Arc::clone(&route.mask_query)),
            )
        } else {
            None
        };
        let (mut response, inflight) = match (ex.served.take(), &route.backend) {
            (Some(Served::Inline { body, content_type }), _) => {
                (plain(StatusCode::OK, body, Some(content_type)), None)
            }
            (Some(Served::Redirect { status, location }), _) => {
                let mut r = plain(status, Bytes::new(), None);
                if let Ok(v) = HeaderValue::from_str(&location) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                (r, None)
            }
            (None, Backend::Shunt) => (plain(StatusCode::NOT_FOUND, Bytes::new(), None), None),
            (None, Backend::Pool(pool)) => {
                match self.forward(pool, parts, body, &ex, peer, time).await {
                    Ok((r, inflight)) => (r.map(Out::Upstream), Some(inflight)),
                    Err(f) => (self.failure(f), None),
                }
            }
        };
        let mut status = response.status();
        filter::on_response(&route.filters, ex.ran, &mut status, response.headers_mut());
        *response.status_mut() = status;
        headers::strip_hop_by_hop(response.headers_mut());
        self.stats.count(status);
        let logs = route
            .access_log
            .map_or(self.shared.log_default, |s| s.contains(status.as_u16()));
        if logs && let Some(r) = &mut record {
            r.status = status.as_u16();
            finish.log = record;
        }
        finish.inflight = inflight;
        into_body(response, finish)
    }

    /// Sends the request to the pool's pick; when connecting fails and the request may
    /// be repeated (idempotent, no body), to the next endpoints in the set's order.
    async fn forward(
        &self,
        pool: &Pool,
        parts: http::request::Parts,
        body: Incoming,
        ex: &Exchange,
        peer: SocketAddr,
        now: SystemTime,
    ) -> Result<(Response<Incoming>, InFlight), Failure> {
        let http::request::Parts {
            method,
            uri,
            mut headers,
            ..
        } = parts;
        let set = pool.set.load_full();
        let n = set.len();
        let key = match pool.balancer.algorithm() {
            Algorithm::ConsistentHash { .. } => hash_key(pool, &headers, &uri, &method, ex, peer),
            _ => 0,
        };
        let first = pool
            .balancer
            .pick(&set, &Pick { now, key })
            .ok_or(Failure::NoEndpoints)?;
        let repeatable = is_idempotent(&method) && has_no_body(&headers);
        let attempts = if repeatable {
            1 + self.shared.limits.retries.min(n - 1)
        } else {
            1
        };
        let mut client_body = if repeatable { None } else { Some(body) };
        headers::strip_hop_by_hop(&mut headers);
        headers::add_forwarded(&mut headers, peer.ip(), "http");
        if !headers.contains_key(header::HOST)
            && let Some(a) = uri.authority()
            && let Ok(v) = HeaderValue::from_str(a.as_str())
        {
            headers.insert(header::HOST, v);
        }
        for (k, v) in &ex.request_headers {
            headers.insert(k.clone(), v.clone());
        }
        let path_and_query = upstream_path(&uri, ex).ok_or(Failure::Upstream)?;
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
                return Err(Failure::Upstream);
            };
            let mut req = Request::new(client_body.take().map_or(UpBody::Empty, UpBody::Client));
            *req.method_mut() = method.clone();
            *req.uri_mut() = target;
            // The last attempt takes the headers; earlier ones send a copy, since a
            // failed send does not give the request back.
            *req.headers_mut() = if attempt + 1 < attempts {
                headers.clone()
            } else {
                std::mem::take(&mut headers)
            };
            let inflight = endpoint.stats.start();
            if attempt > 0 {
                self.stats.retries.fetch_add(1, Ordering::Relaxed);
            }
            match tokio::time::timeout(
                self.shared.limits.request_timeout,
                self.shared.clients[super::workers::current()].request(req),
            )
            .await
            {
                Ok(Ok(resp)) => return Ok((resp, inflight)),
                Ok(Err(e)) if e.is_connect() => {
                    endpoint.stats.failures.fetch_add(1, Ordering::Relaxed);
                    log::debug!(
                        "{}: connecting to {} failed: {e}",
                        self.name,
                        endpoint.authority
                    );
                    last = Failure::Unreachable;
                }
                Ok(Err(e)) => {
                    endpoint.stats.failures.fetch_add(1, Ordering::Relaxed);
                    log::debug!("{}: {} failed: {e}", self.name, endpoint.authority);
                    return Err(Failure::Upstream);
                }
                Err(_) => {
                    endpoint.stats.failures.fetch_add(1, Ordering::Relaxed);
                    return Err(Failure::Timeout);
                }
            }
        }
        Err(last)
    }

    fn failure(&self, f: Failure) -> Response<Out> {
        let (status, text) = match f {
            Failure::NoEndpoints => (StatusCode::SERVICE_UNAVAILABLE, "no healthy endpoint\n"),
            Failure::Unreachable | Failure::Upstream => {
                (StatusCode::BAD_GATEWAY, "backend failed\n")
            }
            Failure::Timeout => (StatusCode::GATEWAY_TIMEOUT, "backend timed out\n"),
        };
        self.stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
        plain(status, Bytes::from_static(text.as_bytes()), None)
    }

    fn log_record(
        &self,
        parts: &http::request::Parts,
        peer: SocketAddr,
        time: SystemTime,
        status: StatusCode,
        mask: Option<Arc<[String]>>,
    ) -> Option<Box<LogRecord>> {
        let log = self.shared.access_log.as_ref()?;
        // Typed names: a lookup by `&str` would parse the name on every request.
        static FLOW_ID: http::HeaderName = http::HeaderName::from_static("x-flow-id");
        static AUDIT: http::HeaderName = http::HeaderName::from_static("x-unverified-audit");
        static FORWARDED_FOR: http::HeaderName = http::HeaderName::from_static("x-forwarded-for");
        let h = |name: &http::HeaderName| parts.headers.get(name).cloned();
        Some(Box::new(LogRecord {
            log: Arc::clone(log),
            mask: mask.unwrap_or_else(|| Arc::from(Vec::new())),
            peer: peer.ip(),
            forwarded_for: h(&FORWARDED_FOR),
            time,
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            version: parts.version,
            status: status.as_u16(),
            referer: h(&header::REFERER),
            user_agent: h(&header::USER_AGENT),
            host: h(&header::HOST),
            flow_id: h(&FLOW_ID),
            audit: h(&AUDIT),
        }))
    }
}

/// A response body before the bookkeeping is attached.
enum Out {
    Inline(Bytes),
    Upstream(Incoming),
}

fn plain(status: StatusCode, body: Bytes, content_type: Option<HeaderValue>) -> Response<Out> {
    let mut r = Response::new(Out::Inline(Bytes::new()));
    *r.status_mut() = status;
    if !body.is_empty() {
        let ct = content_type.unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8"));
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
        *r.body_mut() = Out::Inline(body);
    }
    r
}

fn into_body(response: Response<Out>, finish: Finish) -> Response<ProxyBody> {
    response.map(|b| match b {
        Out::Inline(bytes) => ProxyBody::full(bytes, finish),
        Out::Upstream(incoming) => ProxyBody::upstream(incoming, finish),
    })
}

/// The Host header, else the URI's authority (HTTP/2).
fn host_of<'a>(headers: &'a http::HeaderMap, uri: &'a Uri) -> &'a str {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(http::uri::Authority::as_str))
        .unwrap_or("")
}

fn is_idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// No body: no Transfer-Encoding and no or a zero Content-Length.
fn has_no_body(h: &http::HeaderMap) -> bool {
    !h.contains_key(header::TRANSFER_ENCODING)
        && h.get(header::CONTENT_LENGTH)
            .is_none_or(|v| v.as_bytes() == b"0")
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

/// The consistent-hash key: the route's template, else the client address (first
/// X-Forwarded-For entry, else the peer).
fn hash_key(
    pool: &Pool,
    headers: &http::HeaderMap,
    uri: &Uri,
    method: &Method,
    ex: &Exchange,
    peer: SocketAddr,
) -> u64 {
    let xff_first = headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .map(str::trim)
        .filter(|s| s.parse::<IpAddr>().is_ok());
    let mut peer_text = [0u8; 46];
    let source: &str = match xff_first {
        Some(s) => s,
        None => {
            use std::io::Write as _;
            let mut w = &mut peer_text[..];
            let _ = write!(w, "{}", peer.ip());
            let n = 46 - w.len();
            std::str::from_utf8(&peer_text[..n]).unwrap_or("")
        }
    };
    pool.key_hash(&KeySource {
        headers,
        query: ex.query(uri),
        path: ex.path(uri),
        host: host_of(headers, uri),
        method: method.as_str(),
        source,
    })
}
