//! Real HTTP on both sides of the L7 proxy: echo backends that report what they
//! received, and a client. Everything runs on a tokio runtime the caller creates inside
//! a test namespace; every request has a timeout.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, Response, body::Incoming};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioIo},
};

/// A backend answering `200` with a body of its name, then `METHOD URI`, then every
/// request header as `name: value`, one per line. `/slow/<ms>` waits that long first.
/// Stops when dropped.
#[derive(Debug)]
pub struct EchoBackend {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests answered.
    pub served: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EchoBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EchoBackend {
    /// Starts on `addr` (port 0 picks one) on the current runtime.
    ///
    /// # Panics
    /// If it cannot bind.
    pub async fn start(addr: SocketAddr, name: &str) -> Self {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = listener.local_addr().expect("local addr");
        let served = Arc::new(AtomicU64::new(0));
        let (name, counter) = (Arc::<str>::from(name), Arc::clone(&served));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (name, counter) = (Arc::clone(&name), Arc::clone(&counter));
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (name, counter) = (Arc::clone(&name), Arc::clone(&counter));
                        async move { Ok::<_, Infallible>(echo(&name, &counter, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self { addr, served, task }
    }
}

async fn echo(name: &str, counter: &AtomicU64, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some(ms) = req
        .uri()
        .path()
        .strip_prefix("/slow/")
        .and_then(|m| m.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut text = format!("{name}\n{} {}\n", req.method(), req.uri());
    for (k, v) in req.headers() {
        text.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if !body.is_empty() && body.len() <= 4096 {
        text.push_str(&format!("body: {}\n", String::from_utf8_lossy(&body)));
    }
    counter.fetch_add(1, Ordering::Relaxed);
    let mut resp = Response::new(Full::new(Bytes::from(text)));
    // What arrived of the body, also for HEAD (whose answer has no body).
    let h = resp.headers_mut();
    h.insert("x-body-bytes", body.len().into());
    h.insert(
        "x-body-hash",
        format!("{:016x}", fnv64(&body)).parse().expect("hex"),
    );
    resp
}

/// FNV-1a, 64 bits: the echo backend's and the tests' checksum of a body.
pub fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A response as the tests look at it.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body as text.
    pub body: String,
}

impl Answer {
    /// The first line of the body: the echo backend's name.
    pub fn backend(&self) -> &str {
        self.body.lines().next().unwrap_or("")
    }

    /// A header as text, or "".
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// An HTTP/1.1 client with pooled keep-alive connections (`h2` for prior-knowledge
/// HTTP/2).
pub fn client(h2: bool) -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(h2)
        .build(HttpConnector::new())
}

/// Like [`client`], connecting from `local` (an address of the namespace).
pub fn client_from(h2: bool, local: std::net::IpAddr) -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(local));
    Client::builder(TokioExecutor::new())
        .http2_only(h2)
        .build(connector)
}

/// A request body sent as `chunks` with a pause before each but the first, and no
/// length announced: HTTP/1.1 sends it chunked, HTTP/2 as DATA frames after a HEADERS
/// frame without END_STREAM.
#[derive(Debug)]
pub struct StreamedBody {
    chunks: std::collections::VecDeque<Bytes>,
    pause: Duration,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    first: bool,
}

impl StreamedBody {
    /// `chunks`, `pause` apart.
    pub fn new(chunks: Vec<Bytes>, pause: Duration) -> Self {
        Self {
            chunks: chunks.into(),
            pause,
            sleep: None,
            first: true,
        }
    }
}

impl http_body::Body for StreamedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        use std::task::Poll;
        if self.chunks.is_empty() {
            return Poll::Ready(None);
        }
        if !self.first {
            let pause = self.pause;
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(pause)));
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.sleep = None;
        }
        self.first = false;
        Poll::Ready(
            self.chunks
                .pop_front()
                .map(|c| Ok(http_body::Frame::data(c))),
        )
    }
}

/// Sends `method url` with a [`StreamedBody`] of `chunks` over HTTP/1.1 (chunked, the
/// `Transfer-Encoding` set explicitly so that GET and HEAD carry it too) or h2c;
/// `Err` on a transport error or after 10 s.
///
/// # Errors
/// The transport error, as text.
pub async fn send_streamed(
    h2: bool,
    method: &str,
    url: &str,
    chunks: Vec<Bytes>,
) -> Result<Answer, String> {
    let client: Client<HttpConnector, StreamedBody> = Client::builder(TokioExecutor::new())
        .http2_only(h2)
        .build(HttpConnector::new());
    let mut req = Request::builder().method(method).uri(url);
    if !h2 {
        req = req.header("transfer-encoding", "chunked");
    }
    let req = req
        .body(StreamedBody::new(chunks, Duration::from_millis(20)))
        .map_err(|e| e.to_string())?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| format!("{method} {url}: timed out"))?
}

/// Sends `method url` with `headers` and `body`; `Err` on a transport error or after
/// 10 s.
///
/// # Errors
/// The transport error, as text.
pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer, String> {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_owned())))
        .map_err(|e| e.to_string())?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| format!("{method} {url}: timed out"))?
}

/// `GET url`.
///
/// # Errors
/// See [`send`].
pub async fn get(client: &Client<HttpConnector, Full<Bytes>>, url: &str) -> Result<Answer, String> {
    send(client, "GET", url, &[], "").await
}

/// Writes `raw` bytes on a new connection and reads until the peer closes or 5 s
/// pass; returns what came back.
pub async fn raw(addr: SocketAddr, raw: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    let _ = s.write_all(raw).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// An empty body type for clients that only GET.
pub type NoBody = Empty<Bytes>;

/// A backend for CONNECT: answers `200` to a CONNECT, then on the tunnel writes
/// `target <authority>\n` and echoes every byte back; anything else gets 400. Stops
/// when dropped.
#[derive(Debug)]
pub struct TunnelBackend {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TunnelBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TunnelBackend {
    /// Starts on `addr` on the current runtime.
    ///
    /// # Panics
    /// If it cannot bind.
    pub async fn start(addr: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(|mut req: Request<Incoming>| async move {
                        if req.method() != hyper::Method::CONNECT {
                            let mut r =
                                Response::new(Full::new(Bytes::from_static(b"CONNECT only\n")));
                            *r.status_mut() = hyper::StatusCode::BAD_REQUEST;
                            return Ok::<_, Infallible>(r);
                        }
                        let target = req.uri().to_string();
                        let upgrade = hyper::upgrade::on(&mut req);
                        tokio::spawn(async move {
                            use tokio::io::{AsyncReadExt, AsyncWriteExt};
                            let Ok(up) = upgrade.await else { return };
                            let mut io = TokioIo::new(up);
                            let _ = io.write_all(format!("target {target}\n").as_bytes()).await;
                            let mut buf = [0u8; 4096];
                            while let Ok(n) = io.read(&mut buf).await {
                                if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        });
                        Ok(Response::new(Full::new(Bytes::new())))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Self { addr, task }
    }
}
