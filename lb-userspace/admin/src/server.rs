//! Serving the admin API (unix socket) and `/metrics` (TCP) with hyper.
//!
//! The agent is owned by lbd's main loop, so the HTTP side does not touch it: each
//! request becomes a [`Query`] sent to the loop, which answers with a [`Reply`]
//! between its other events. Answers are therefore consistent snapshots, and a slow
//! client never blocks the data plane's control.

use std::{
    convert::Infallible,
    net::SocketAddr,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, header, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::sync::{mpsc, oneshot};

use super::{API_VERSION, ApiError, Envelope};
use lb_model::throttle::AcceptBackoff;

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Query {
    /// `GET /v1/status`.
    Status,
    /// `GET /v1/services`.
    Services,
    /// `GET /v1/backends` or `/v1/backends/<service>`.
    Backends(Option<String>),
    /// `GET /metrics`.
    Metrics,
}

impl Query {
    /// Whether the answer needs conntrack counts (a walk of the whole map).
    pub fn needs_flows(&self) -> bool {
        matches!(self, Self::Status | Self::Backends(_) | Self::Metrics)
    }
}

/// An answer: HTTP status, content type, body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Content type of `body`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Reply {
    /// A 200 with `data` in an [`Envelope`].
    pub fn json<T: serde::Serialize>(data: T) -> Self {
        Self::envelope(200, data)
    }

    /// An error status with an [`ApiError`] in an [`Envelope`].
    pub fn error(status: u16, error: impl Into<String>) -> Self {
        Self::envelope(
            status,
            ApiError {
                error: error.into(),
            },
        )
    }

    fn envelope<T: serde::Serialize>(status: u16, data: T) -> Self {
        let body = serde_json::to_string(&Envelope {
            api_version: API_VERSION,
            data,
        })
        .unwrap_or_else(|e| format!("{{\"api_version\":{API_VERSION},\"data\":{{\"error\":\"encoding the reply: {e}\"}}}}"));
        Self {
            status,
            content_type: "application/json",
            body,
        }
    }
}

/// Where queries go: the main loop receives them with a channel for the reply.
pub type Queries = mpsc::Sender<(Query, oneshot::Sender<Reply>)>;

/// The query for a request line, or the error reply. `metrics_only` listeners (the
/// TCP one) serve nothing but `/metrics`.
pub fn route(method: &Method, path: &str, metrics_only: bool) -> Result<Query, Reply> {
    let path = path.split('?').next().unwrap_or(path);
    let query = match path.trim_end_matches('/') {
        "/metrics" => Query::Metrics,
        _ if metrics_only => {
            return Err(Reply::error(404, format!("no {path} here: try /metrics")));
        }
        "/v1/status" => Query::Status,
        "/v1/services" => Query::Services,
        "/v1/backends" => Query::Backends(None),
        p => match p.strip_prefix("/v1/backends/") {
            Some(service) if !service.is_empty() && !service.contains('/') => {
                Query::Backends(Some(service.to_owned()))
            }
            _ => return Err(Reply::error(404, format!("no such endpoint {path}"))),
        },
    };
    if method != Method::GET {
        return Err(Reply::error(
            405,
            format!("{method} {path}: only GET is served"),
        ));
    }
    Ok(query)
}

async fn handle(req: Request<Incoming>, queries: Queries, metrics_only: bool) -> Reply {
    let query = match route(req.method(), req.uri().path(), metrics_only) {
        Ok(q) => q,
        Err(reply) => return reply,
    };
    let (tx, rx) = oneshot::channel();
    if queries.send((query, tx)).await.is_err() {
        return Reply::error(503, "lbd is shutting down");
    }
    rx.await
        .unwrap_or_else(|_| Reply::error(503, "lbd is shutting down"))
}

fn response(reply: Reply) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(reply.body)));
    *resp.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(reply.content_type),
    );
    resp
}

fn serve_connection<S>(stream: S, queries: Queries, metrics_only: bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let queries = queries.clone();
        async move { Ok::<_, Infallible>(response(handle(req, queries, metrics_only).await)) }
    });
    tokio::spawn(async move {
        // The timer enables hyper's header-read timeout (30 s): a client that opens a
        // connection and sends nothing does not hold a task forever.
        if let Err(e) = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .serve_connection(TokioIo::new(stream), service)
            .await
        {
            tracing::debug!(error = %e, "admin connection ended");
        }
    });
}

/// The admin socket: it stops accepting and its file is removed when this is dropped
/// (so that the next lbd of a handover can bind it while this one still runs).
#[derive(Debug)]
pub struct AdminSocket {
    path: PathBuf,
    accepting: Option<tokio::task::AbortHandle>,
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        if let Some(task) = &self.accepting {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The metrics listener: it stops accepting, and the port is free again, when this is
/// dropped.
#[derive(Debug)]
pub struct MetricsListener {
    local: SocketAddr,
    accepting: tokio::task::AbortHandle,
}

impl MetricsListener {
    /// The address it listens on.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for MetricsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Binds the admin socket at `path` (mode 0600: the API shows the node's whole
/// configuration) and serves it until the returned guard is dropped (or the runtime
/// ends). Call inside a tokio runtime.
///
/// # Errors
/// Another lbd answers on `path`, or the socket cannot be created.
pub fn serve_unix(path: &Path, queries: Queries) -> std::io::Result<AdminSocket> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "another lbd answers on it",
        ));
    }
    // A socket left by an lbd that died: nobody answers, so it is ours to replace.
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    let mut guard = AdminSocket {
        path: path.to_owned(),
        accepting: None,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let task = tokio::spawn(async move {
        // A failed accept (no file descriptor left) backs off: the connection still in
        // the backlog would make the loop spin and log without end.
        let mut backoff = AcceptBackoff::default();
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    backoff.reset();
                    serve_connection(stream, queries.clone(), false);
                }
                Err(e) => tokio::time::sleep(backoff.failed("admin", &e)).await,
            }
        }
    });
    guard.accepting = Some(task.abort_handle());
    Ok(guard)
}

/// Serves `/metrics` on `addr` until the returned listener is dropped (or the runtime
/// ends). Call inside a tokio runtime.
///
/// # Errors
/// The address cannot be bound.
pub async fn serve_metrics(addr: SocketAddr, queries: Queries) -> std::io::Result<MetricsListener> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let mut backoff = AcceptBackoff::default();
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    backoff.reset();
                    serve_connection(stream, queries.clone(), true);
                }
                Err(e) => tokio::time::sleep(backoff.failed("metrics", &e)).await,
            }
        }
    });
    Ok(MetricsListener {
        local,
        accepting: task.abort_handle(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let get = Method::GET;
        assert_eq!(route(&get, "/v1/status", false), Ok(Query::Status));
        assert_eq!(route(&get, "/v1/services/", false), Ok(Query::Services));
        assert_eq!(
            route(&get, "/v1/backends", false),
            Ok(Query::Backends(None))
        );
        assert_eq!(
            route(&get, "/v1/backends/web?x=1", false),
            Ok(Query::Backends(Some("web".into())))
        );
        assert_eq!(route(&get, "/metrics", true), Ok(Query::Metrics));
        assert_eq!(
            route(&get, "/v1/status", true).map_err(|r| r.status),
            Err(404)
        );
        assert_eq!(
            route(&get, "/v1/nope", false).map_err(|r| r.status),
            Err(404)
        );
        assert_eq!(
            route(&Method::POST, "/v1/status", false).map_err(|r| r.status),
            Err(405)
        );
        let err = route(&get, "/x", false).expect_err("404");
        let parsed: Envelope<ApiError> = serde_json::from_str(&err.body).expect("json");
        assert_eq!(parsed.api_version, API_VERSION);
        assert!(parsed.data.error.contains("/x"));
    }
}
