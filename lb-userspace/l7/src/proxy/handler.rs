//! One request through a service: the head checked ([`super::request`]), the route
//! found on the routing path, filters, the backend ([`super::forward`], or a tunnel for
//! an allowed CONNECT), response filters, access log.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::{Instant, SystemTime},
};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Version, header};

use super::{
    activity::Activity,
    body::{self, Finish, ProxyBody},
    forward::{Failure, Outgoing, forward},
    headers,
    record::LogRecord,
    service::ServiceState,
    tunnel,
    upstream::{BackendBody, HeadMode},
};
use crate::{
    accesslog::StatusSet,
    routes::{
        RequestInfo, filter, head,
        plan::{self, Answer, Answered, Outcome, Plan},
        request_scheme,
    },
};
use lb_model::throttle::Throttle;

impl ServiceState {
    /// Serves one request; never fails (errors become 4xx/5xx responses).
    pub async fn handle(
        &self,
        req: Request<super::client_body::ClientBody>,
        client: &headers::Peer,
        activity: Arc<Activity>,
    ) -> Response<ProxyBody> {
        let peer = client.addr;
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
        let head = match head::check(&parts) {
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
                return finished(inline(plan::refused(refusal)), finish, version);
            }
        };
        let table = self.routes.load_full();
        let request = plan::Request {
            parts: &parts,
            head: &head,
            peer: peer.ip(),
            trusted,
            now: None,
        };
        let Plan {
            route,
            exchange,
            outcome,
        } = plan::plan(&table, &request, self.shared.limits.preserve_host);
        let Some(route) = route else {
            let Outcome::Answer(a) = outcome else {
                unreachable!("a request without a route is answered")
            };
            if a.why == Answered::NoRoute {
                self.stats.no_route.fetch_add(1, Ordering::Relaxed);
            } else {
                self.stats.count(a.status);
            }
            if self.shared.log_default {
                finish.log = self.log_record(&parts, peer, trusted, time, a.status, None);
            }
            return finished(inline(a), finish, version);
        };
        // The request goes to the backend by move; response templates that read it
        // get a copy of what they read (see `Route::response_reads_request`).
        let kept = route.response_reads_request.then(|| Kept {
            headers: parts.headers.clone(),
            routing_path: head.path.clone().into_owned(),
            host: head.host.to_owned(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or("").to_owned(),
        });
        let scheme = request_scheme(parts.version, &parts.uri);
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
                Some(&route.mask_query),
            )
        } else {
            None
        };
        if let Some(r) = &mut record {
            r.after_filters(&exchange);
        }
        let method = parts.method.clone();
        // `responded`: the backend answered, and the route's response filters are yet
        // to run. The plan's own answers have had them; failure answers get none
        // (skipper runs only filters that opt in to error responses, none of ours).
        // A route without filters lets its backend's response come without hop-by-hop
        // fields when its connection is one of ours (`upstream::send`): nothing can
        // see them before they are stripped, so they are never put in the map.
        let bare = route.filters.is_empty();
        let mut stripped = false;
        let (mut response, inflight, responded) = match outcome {
            // The route's response filters have run on its own answers.
            Outcome::Answer(a) => (inline(a), None, false),
            Outcome::Tunnel(pool) => match tunnel::open(self, pool, parts, time).await {
                Ok((r, inflight)) => (
                    r.map(|b| Out::Upstream(BackendBody::unpooled(b))),
                    inflight,
                    true,
                ),
                Err(f) => (self.failure(f), None, false),
            },
            Outcome::Forward { pool, key } => {
                let out = Outgoing {
                    parts,
                    body,
                    ex: &exchange,
                    key,
                    client: &client.forwarded,
                    now: time,
                    started,
                    head_mode: match (bare, version) {
                        (false, _) => HeadMode::Map,
                        // hyper's HTTP/2 server writes the response from its map.
                        (true, Version::HTTP_2) => HeadMode::Bare,
                        (true, _) => HeadMode::Raw,
                    },
                };
                match forward(self, pool, out).await {
                    Ok((r, inflight)) => {
                        stripped = bare && matches!(r.body(), BackendBody::Pooled(_));
                        (r.map(Out::Upstream), Some(inflight), true)
                    }
                    Err(f) => (self.failure(f), None, false),
                }
            }
        };
        let mut status = response.status();
        if responded {
            let empty = http::HeaderMap::new();
            let info = RequestInfo {
                method: method.as_str(),
                scheme,
                host: kept.as_ref().map_or("", |k| &k.host),
                headers: kept.as_ref().map_or(&empty, |k| &k.headers),
                routing_path: kept.as_ref().map_or("", |k| &k.routing_path),
                path: kept.as_ref().map_or("", |k| &k.path),
                query: kept.as_ref().map_or("", |k| &k.query),
                peer: peer.ip(),
                trusted,
            };
            filter::on_response(
                &route.filters,
                &exchange,
                &info,
                &mut status,
                response.headers_mut(),
            );
            *response.status_mut() = status;
        }
        if !stripped {
            headers::strip_hop_by_hop(response.headers_mut());
        }
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
    /// ([`Failure::status`]).
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
        inline(Answer::error(Answered::BackendFailed, f.status()))
    }

    fn log_record(
        &self,
        parts: &http::request::Parts,
        peer: SocketAddr,
        trusted: bool,
        time: SystemTime,
        status: StatusCode,
        mask: Option<&Arc<[String]>>,
    ) -> Option<Box<LogRecord>> {
        let log = self.shared.access_log.as_ref()?;
        let mut r = LogRecord::start(log, mask);
        r.peer = peer.ip();
        r.time = time;
        r.method = parts.method.clone();
        r.take_uri(&parts.uri);
        r.version = parts.version;
        r.status = status.as_u16();
        r.take_headers(&parts.headers, trusted);
        Some(r)
    }
}

/// What response templates read of a request that went to the backend.
struct Kept {
    headers: http::HeaderMap,
    routing_path: String,
    host: String,
    /// The path and query as received: a filter that set them left its own in the
    /// exchange.
    path: String,
    query: String,
}

/// A response body before the bookkeeping is attached.
enum Out {
    Inline(Bytes),
    Upstream(BackendBody),
}

/// An answer of the proxy's own as a response.
fn inline(a: Answer) -> Response<Out> {
    let mut r = Response::new(Out::Inline(a.body));
    *r.status_mut() = a.status;
    *r.headers_mut() = a.headers;
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
