//! One request through a service: the head checked ([`super::request`]), the route
//! found on the routing path, filters, the backend ([`super::forward`], or a tunnel for
//! an allowed CONNECT), response filters, access log.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::{Instant, SystemTime},
};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Version, header};
use hyper::body::Incoming;

use super::{
    activity::Activity,
    body::{self, Finish, LogRecord, ProxyBody},
    forward::{Failure, Outgoing, forward},
    headers, request,
    service::ServiceState,
    tunnel,
};
use crate::{
    accesslog::StatusSet,
    routes::{
        Backend, Exchange, RequestInfo, Route, Served,
        filter::{self, UpstreamHost},
        predicate::RequestView,
        request_scheme,
    },
};
use lb_model::throttle::Throttle;

impl ServiceState {
    /// Serves one request; never fails (errors become 4xx/5xx responses).
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
        activity: Arc<Activity>,
    ) -> Response<ProxyBody> {
        activity.request_started(req.version());
        let started = Instant::now();
        let time = SystemTime::now();
        let (parts, body) = req.into_parts();
        let version = parts.version;
        let trusted = self.shared.limits.trusted_proxies.trusts(peer.ip());
        let mut finish = Finish {
            started,
            log: None,
            inflight: None,
            activity,
        };
        let head = match request::check(&parts) {
            Ok(head) => head,
            Err(refusal) => {
                self.shared
                    .connections
                    .malformed
                    .fetch_add(1, Ordering::Relaxed);
                static REFUSED: Throttle = Throttle::per_second();
                if let Some(suppressed) = REFUSED.pass() {
                    tracing::warn!(
                        service = %self.name,
                        client = %peer,
                        error = %refusal,
                        suppressed,
                        "bad request answered with 400"
                    );
                }
                let status = StatusCode::BAD_REQUEST;
                if self.shared.log_default {
                    finish.log = self.log_record(&parts, peer, trusted, time, status, None);
                }
                self.stats.count(status);
                let text = Bytes::from(format!("{refusal}\n"));
                return finished(plain(status, text, None), finish, version);
            }
        };
        let table = self.routes.load_full();
        let view = RequestView {
            method: &parts.method,
            path: &head.path,
            host: head.host,
            headers: &parts.headers,
            query: parts.uri.query().unwrap_or(""),
            peer: peer.ip(),
            trusted,
            now: None,
        };
        let route = table.find_routed(&view);
        if parts.method == Method::CONNECT && !route.is_some_and(Route::allows_connect) {
            let status = StatusCode::METHOD_NOT_ALLOWED;
            if self.shared.log_default {
                finish.log = self.log_record(&parts, peer, trusted, time, status, None);
            }
            self.stats.count(status);
            let text = Bytes::from_static(b"CONNECT is not allowed here\n");
            let mut r = plain(status, text, None);
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(ALLOW));
            return finished(r, finish, version);
        }
        let Some(route) = route else {
            self.stats.no_route.fetch_add(1, Ordering::Relaxed);
            let status = StatusCode::NOT_FOUND;
            if self.shared.log_default {
                finish.log = self.log_record(&parts, peer, trusted, time, status, None);
            }
            return finished(proxy_error(status), finish, version);
        };
        let mut ex = Exchange::for_request(&parts.uri, !route.filters.is_empty());
        ex.host = UpstreamHost::initial(self.shared.limits.preserve_host);
        let scheme = request_scheme(parts.version, &parts.uri);
        let info = RequestInfo {
            method: parts.method.as_str(),
            scheme,
            host: head.host,
            headers: &parts.headers,
            routing_path: &head.path,
            peer: peer.ip(),
            trusted,
        };
        filter::on_request(&route.filters, &mut ex, &info);
        // The request goes to the backend by move; response templates that read it
        // get a copy of what they read (see `Route::response_reads_request`).
        let kept = route.response_reads_request.then(|| Kept {
            headers: parts.headers.clone(),
            routing_path: head.path.clone().into_owned(),
            host: head.host.to_owned(),
        });
        let method = parts.method.clone();
        // What the log line needs is taken now (shared bytes, no copies): the request
        // head goes to the backend by move.
        let may_log = route
            .access_log
            .map_or(self.shared.log_default, |s| s != StatusSet::NONE);
        let mut record = if may_log {
            self.log_record(
                &parts,
                peer,
                trusted,
                time,
                StatusCode::OK,
                Some(Arc::clone(&route.mask_query)),
            )
        } else {
            None
        };
        if let Some(r) = &mut record {
            r.after_filters(&ex);
        }
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
            (None, Backend::Pool(pool)) if parts.method == Method::CONNECT => {
                match tunnel::open(self, pool, parts, time).await {
                    Ok((r, inflight)) => (r.map(Out::Upstream), inflight),
                    Err(f) => (self.failure(f), None),
                }
            }
            (None, Backend::Pool(pool)) => {
                let out = Outgoing {
                    parts,
                    body,
                    ex: &ex,
                    peer,
                    trusted,
                    now: time,
                };
                match forward(self, pool, out).await {
                    Ok((r, inflight)) => (r.map(Out::Upstream), Some(inflight)),
                    Err(f) => (self.failure(f), None),
                }
            }
        };
        let mut status = response.status();
        let empty = http::HeaderMap::new();
        let info = RequestInfo {
            method: method.as_str(),
            scheme,
            host: kept.as_ref().map_or("", |k| &k.host),
            headers: kept.as_ref().map_or(&empty, |k| &k.headers),
            routing_path: kept.as_ref().map_or("", |k| &k.routing_path),
            peer: peer.ip(),
            trusted,
        };
        if response.extensions().get::<FailureAnswer>().is_none() {
            filter::on_response(
                &route.filters,
                &ex,
                &info,
                &mut status,
                response.headers_mut(),
            );
        }
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
        finished(response, finish, version)
    }

    /// The answer when the backend could not answer, as skipper's proxy gives it
    /// ([`Failure::status`]). It is marked [`FailureAnswer`]: skipper runs no
    /// response filter on it (only filters that opt in to error responses, none of
    /// which we have).
    fn failure(&self, f: Failure) -> Response<Out> {
        if let Failure::ClientBody = f {
            self.shared
                .connections
                .malformed
                .fetch_add(1, Ordering::Relaxed);
            // hyper closes the connection after a body it could not read: the rest
            // of the stream cannot frame a next request.
        } else {
            self.stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
        }
        let mut r = proxy_error(f.status());
        r.extensions_mut().insert(FailureAnswer);
        r
    }

    fn log_record(
        &self,
        parts: &http::request::Parts,
        peer: SocketAddr,
        trusted: bool,
        time: SystemTime,
        status: StatusCode,
        mask: Option<Arc<[String]>>,
    ) -> Option<Box<LogRecord>> {
        let log = self.shared.access_log.as_ref()?;
        let h = |name: &http::HeaderName| parts.headers.get(name).cloned();
        Some(Box::new(LogRecord {
            log: Arc::clone(log),
            mask: mask.unwrap_or_else(|| Arc::from(Vec::new())),
            peer: peer.ip(),
            // Only a trusted proxy tells us who the client is.
            forwarded_for: if trusted {
                h(&body::FORWARDED_FOR)
            } else {
                None
            },
            time,
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            filtered_query: None,
            version: parts.version,
            status: status.as_u16(),
            referer: h(&header::REFERER),
            user_agent: h(&header::USER_AGENT),
            host: h(&header::HOST),
            flow_id: h(&body::FLOW_ID),
            audit: h(&body::AUDIT),
        }))
    }
}

/// What a 405 to CONNECT says is allowed: every method the proxy forwards.
const ALLOW: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE";

/// What response templates read of a request that went to the backend.
struct Kept {
    headers: http::HeaderMap,
    routing_path: String,
    host: String,
}

/// Marks the proxy's own answer to a backend failure, which no response filter sees.
#[derive(Clone, Copy, Debug)]
struct FailureAnswer;

/// A response body before the bookkeeping is attached.
enum Out {
    Inline(Bytes),
    Upstream(Incoming),
}

/// An answer of the proxy's own for a request it could not route or forward, as
/// skipper's `makeErrorResponse` writes it: the status's reason phrase and a line feed
/// as a plain-text body, with `X-Content-Type-Options: nosniff`. (skipper also adds
/// `Server: Skipper`, which is not ours to send.)
fn proxy_error(status: StatusCode) -> Response<Out> {
    let text = format!("{}\n", status.canonical_reason().unwrap_or(""));
    let mut r = plain(status, Bytes::from(text), None);
    r.headers_mut().insert(
        http::HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    r
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

/// Attaches the bookkeeping. While the connection drains, an HTTP/1 response says
/// `Connection: close`, so the client opens its next request elsewhere (to the lbd
/// that took over) instead of racing a close.
fn finished(mut response: Response<Out>, finish: Finish, version: Version) -> Response<ProxyBody> {
    if finish.activity.draining() && version != Version::HTTP_2 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let deadline = response.extensions_mut().remove::<body::BodyDeadline>();
    response.map(|b| match b {
        Out::Inline(bytes) => ProxyBody::full(bytes, finish),
        Out::Upstream(incoming) => ProxyBody::upstream(incoming, deadline, finish),
    })
}
