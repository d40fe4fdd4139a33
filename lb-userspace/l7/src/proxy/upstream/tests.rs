//! The pool against a real backend on loopback: which requests reuse a connection,
//! which get a new one, and that every one of them is answered.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use http::Request;
use http_body_util::BodyExt as _;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpListener,
};

use super::{BackendBody, SendError};
use crate::proxy::body::UpBody;

/// [`super::send`] keeping the response's hop-by-hop fields, as for a route with
/// filters.
async fn send(
    addr: SocketAddr,
    connect_timeout: Duration,
    until: tokio::time::Instant,
    req: Request<UpBody>,
) -> Result<http::Response<BackendBody>, SendError> {
    super::send(
        addr,
        connect_timeout,
        until,
        req,
        super::HeadMode::Map,
        None,
    )
    .await
}

const BIG: usize = 4 << 20;

/// How long the backend waits before it answers `/late`.
const LATE: Duration = Duration::from_millis(400);

/// A deadline no answer here comes near.
fn soon() -> tokio::time::Instant {
    super::deadline(Duration::from_secs(10))
}

/// What the scripted backend does after an answer.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    KeepOpen,
    Close,
    /// Closes with a zero linger: a reset.
    Reset,
}

/// The scripted backend's answer to `method path`.
fn answer(method: &str, path: &str) -> (Vec<u8>, Then) {
    let fixed = |bytes: &[u8], then| (bytes.to_vec(), then);
    match (method, path) {
        ("HEAD", _) => fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Then::KeepOpen),
        (_, "/big") => {
            let mut a = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n").into_bytes();
            a.resize(a.len() + BIG, b'x');
            (a, Then::KeepOpen)
        }
        (_, "/close") => fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", Then::Close),
        (_, "/chunked") => fixed(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n1\r\n!\r\n0\r\nX-T: 1\r\n\r\n",
            Then::KeepOpen,
        ),
        (_, "/interim") => fixed(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            Then::KeepOpen,
        ),
        (_, "/eof") => fixed(b"HTTP/1.1 200 OK\r\n\r\nuntil the close", Then::Close),
        (_, "/204") => fixed(b"HTTP/1.1 204 No Content\r\n\r\n", Then::KeepOpen),
        (_, "/304") => fixed(
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n",
            Then::KeepOpen,
        ),
        (_, "/smuggle") => fixed(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            Then::KeepOpen,
        ),
        (_, "/garbage") => fixed(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", Then::Close),
        (_, "/nothing") => fixed(b"", Then::Close),
        (_, "/silent") => fixed(b"", Then::KeepOpen),
        (_, "/reset") => fixed(b"", Then::Reset),
        (_, "/cut") => fixed(
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789",
            Then::Close,
        ),
        _ => fixed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", Then::KeepOpen),
    }
}

/// A keep-alive backend counting its connections, answering each request head (it
/// reads no request body) as [`answer`] says.
async fn backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let mut words = head.split(' ');
                    let method = words.next().unwrap_or("").to_owned();
                    let path = words.next().unwrap_or("").to_owned();
                    let (bytes, then) = answer(&method, &path);
                    if path == "/late" {
                        tokio::time::sleep(LATE).await;
                    }
                    if stream.write_all(&bytes).await.is_err() {
                        return;
                    }
                    match then {
                        Then::KeepOpen => {}
                        Then::Close => return,
                        Then::Reset => {
                            let _ =
                                socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

fn get(path: &str, addr: SocketAddr) -> Request<UpBody> {
    let mut req = Request::new(UpBody::Empty);
    *req.uri_mut() = path.parse().expect("path");
    req.headers_mut()
        .insert(http::header::HOST, addr.to_string().parse().expect("host"));
    req
}

async fn fetch(addr: SocketAddr, path: &str) -> Result<bytes::Bytes, SendError> {
    let resp = send(addr, Duration::from_secs(1), soon(), get(path, addr)).await?;
    assert_eq!(resp.status(), 200);
    Ok(resp
        .into_body()
        .collect()
        .await
        .expect("the whole body")
        .to_bytes())
}

/// A connection's one timer is moved to each request's deadline: to an earlier one
/// (registered anew) and to a later one (the wheel finds the new instant when the old
/// one comes and must not fire then).
#[tokio::test]
async fn each_request_on_a_connection_keeps_its_own_deadline() {
    let (addr, accepted) = backend().await;
    assert_eq!(&fetch(addr, "/small").await.expect("answered")[..], b"ok");
    let near = Duration::from_millis(150);
    let started = std::time::Instant::now();
    let err = send(
        addr,
        Duration::from_secs(1),
        super::deadline(near),
        get("/silent", addr),
    )
    .await
    .expect_err("no answer comes");
    assert!(matches!(err, SendError::Timeout), "{err:?}");
    let waited = started.elapsed();
    assert!(
        waited >= near && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    // The connection that timed out is closed (its answer may yet come): a new one.
    let quick = super::deadline(Duration::from_millis(100));
    let resp = send(addr, Duration::from_secs(1), quick, get("/small", addr))
        .await
        .expect("answered in time");
    resp.into_body().collect().await.expect("the whole body");
    // Its timer still holds the 100 ms deadline; this request's answer takes 400 ms.
    let resp = send(addr, Duration::from_secs(1), soon(), get("/late", addr))
        .await
        .expect("the earlier deadline does not cut a later request short");
    assert_eq!(resp.status(), 200);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_connection_read_to_its_end_is_reused() {
    let (addr, accepted) = backend().await;
    for _ in 0..3 {
        assert_eq!(&fetch(addr, "/small").await.expect("answered")[..], b"ok");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// A server stops polling a body whose `is_end_stream` says it has ended and drops
/// it: the connection goes back all the same.
#[tokio::test]
async fn a_body_dropped_at_its_end_gives_its_connection_back() {
    let (addr, accepted) = backend().await;
    let mut body: BackendBody = send(addr, Duration::from_secs(1), soon(), get("/small", addr))
        .await
        .expect("answered")
        .into_body();
    let mut got = Vec::new();
    while !http_body::Body::is_end_stream(&body) {
        let frame = body.frame().await.expect("a frame").expect("data");
        got.extend_from_slice(frame.data_ref().expect("data"));
    }
    assert_eq!(got, b"ok");
    drop(body);
    fetch(addr, "/small").await.expect("answered");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// The backend closes a pooled connection while it is idle: the next request goes
/// out on a new connection and is answered.
#[tokio::test]
async fn an_idle_connection_the_backend_closed_is_not_used() {
    let (addr, accepted) = backend().await;
    fetch(addr, "/close").await.expect("answered");
    // Time for the backend's FIN to arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(&fetch(addr, "/small").await.expect("answered")[..], b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    fetch(addr, "/small").await.expect("answered");
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "the new one is pooled");
}

/// A response dropped mid-body leaves unread bytes on its connection: that
/// connection must never carry another request.
#[tokio::test]
async fn a_response_dropped_mid_body_does_not_return_its_connection() {
    let (addr, accepted) = backend().await;
    let resp = send(addr, Duration::from_secs(1), soon(), get("/big", addr))
        .await
        .expect("answered");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert!(first.data_ref().is_some_and(|d| d.len() < BIG));
    drop(body);
    assert_eq!(&fetch(addr, "/small").await.expect("answered")[..], b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    // The big one read whole is reused as any other.
    assert_eq!(fetch(addr, "/big").await.expect("answered").len(), BIG);
    fetch(addr, "/small").await.expect("answered");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// Nothing listening: a connect error, which the caller may retry elsewhere.
#[tokio::test]
async fn a_refused_connect_is_a_connect_error() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let err = send(addr, Duration::from_secs(1), soon(), get("/", addr))
        .await
        .expect_err("refused");
    assert!(matches!(err, SendError::Connect(_)), "{err:?}");
}

fn request(method: http::Method, path: &str, addr: SocketAddr) -> Request<UpBody> {
    let mut req = get(path, addr);
    *req.method_mut() = method;
    req
}

/// A chunked body with an extension and trailers is read whole, and its connection
/// goes back to the pool.
#[tokio::test]
async fn a_chunked_body_and_its_trailers_are_read_and_the_connection_reused() {
    let (addr, accepted) = backend().await;
    let resp = send(addr, Duration::from_secs(1), soon(), get("/chunked", addr))
        .await
        .expect("answered");
    let whole = resp.into_body().collect().await.expect("the whole body");
    assert_eq!(
        whole
            .trailers()
            .and_then(|t| t.get("x-t"))
            .map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    assert_eq!(&whole.to_bytes()[..], b"hello!");
    assert_eq!(&fetch(addr, "/small").await.expect("answered")[..], b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// 100 Continue and 103 Early Hints before the response are skipped, as hyper's
/// client skipped them.
#[tokio::test]
async fn interim_responses_are_skipped() {
    let (addr, accepted) = backend().await;
    let resp = send(addr, Duration::from_secs(1), soon(), get("/interim", addr))
        .await
        .expect("answered");
    assert_eq!(resp.status(), 200);
    assert!(
        !resp.headers().contains_key("link"),
        "an interim head's field"
    );
    let body = resp.into_body().collect().await.expect("whole").to_bytes();
    assert_eq!(&body[..], b"ok");
    fetch(addr, "/small").await.expect("answered");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// A body without a length ends with the connection, which is then gone.
#[tokio::test]
async fn a_body_delimited_by_the_close_is_read_to_it() {
    let (addr, accepted) = backend().await;
    assert_eq!(
        &fetch(addr, "/eof").await.expect("answered")[..],
        b"until the close"
    );
    fetch(addr, "/small").await.expect("answered");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// HEAD, 204 and 304 have no body whatever their head says; the connection carries
/// the next request (which it could not, had a body been expected or read).
#[tokio::test]
async fn bodiless_answers_end_at_once_and_keep_the_connection() {
    let (addr, accepted) = backend().await;
    for (method, path, status) in [
        (http::Method::HEAD, "/x", 200),
        (http::Method::GET, "/204", 204),
        (http::Method::GET, "/304", 304),
    ] {
        let resp = send(
            addr,
            Duration::from_secs(1),
            soon(),
            request(method, path, addr),
        )
        .await
        .expect("answered");
        assert_eq!(resp.status(), status, "{path}");
        assert!(http_body::Body::is_end_stream(resp.body()), "{path}");
        let body = resp.into_body().collect().await.expect("whole").to_bytes();
        assert!(body.is_empty(), "{path}");
    }
    assert_eq!(&fetch(addr, "/small").await.expect("answered")[..], b"ok");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// After the request went out, a failure is a Sent error, which `failure` sorts as
/// skipper sorts Go's: a head that does not parse or that could smuggle, or a close
/// before any head, carries no socket error (500); a reset does (503).
#[tokio::test]
async fn failures_after_sending_are_sorted_as_skipper_sorts_them() {
    let (addr, _) = backend().await;
    for (path, status) in [
        ("/smuggle", 500),
        ("/garbage", 500),
        ("/nothing", 500),
        ("/reset", 503),
    ] {
        let err = send(addr, Duration::from_secs(1), soon(), get(path, addr))
            .await
            .expect_err(path);
        assert!(matches!(err, SendError::Sent(_)), "{path}: {err:?}");
        let failure = crate::proxy::forward::Failure::after_connect(&err);
        assert_eq!(failure.status().as_u16(), status, "{path}: {err:?}");
    }
}

/// A body the backend cuts short fails after the bytes that came, and its
/// connection is not reused.
#[tokio::test]
async fn a_body_cut_short_fails_after_what_came() {
    let (addr, accepted) = backend().await;
    let resp = send(addr, Duration::from_secs(1), soon(), get("/cut", addr))
        .await
        .expect("answered");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a frame").expect("data");
    assert_eq!(first.data_ref().map(|d| &d[..]), Some(&b"0123456789"[..]));
    let err = body.frame().await.expect("a frame").expect_err("cut short");
    assert!(matches!(err, super::ClientError::ClosedMidBody), "{err:?}");
    fetch(addr, "/small").await.expect("answered");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A hyper backend that streams every request's body back as its response while
/// still reading it (so a client must write and read at once), counting connections.
async fn echo_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let echo = hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(req.into_body()))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), echo),
            );
        }
    });
    (addr, accepted)
}

/// A hyper server in front of `backend` that sends each request on through [`send`],
/// with its body framed as `forward` frames it.
async fn front(backend: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (mut parts, body) = req.into_parts();
                crate::proxy::headers::strip_hop_by_hop(&mut parts.headers);
                let up = if http_body::Body::is_end_stream(&body) {
                    UpBody::Empty
                } else {
                    if !parts.headers.contains_key(http::header::CONTENT_LENGTH) {
                        parts.headers.insert(
                            http::header::TRANSFER_ENCODING,
                            http::HeaderValue::from_static("chunked"),
                        );
                    }
                    UpBody::Client {
                        body: crate::proxy::client_body::ClientBody::Hyper(body),
                        failed: Arc::default(),
                    }
                };
                let req = Request::from_parts(parts, up);
                async move { send(backend, Duration::from_secs(1), soon(), req).await }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
            );
        }
    });
    addr
}

/// A body of unknown length, its pieces fed through a channel.
struct Fed(tokio::sync::mpsc::Receiver<bytes::Bytes>);

impl http_body::Body for Fed {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|piece| piece.map(|p| Ok(http_body::Frame::data(p))))
    }
}

type TestBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, std::convert::Infallible>;

async fn echoed(
    c: &mut hyper::client::conn::http1::SendRequest<TestBody>,
    body: TestBody,
) -> bytes::Bytes {
    let mut req = Request::new(body);
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = http::Uri::from_static("/echo");
    req.headers_mut()
        .insert(http::header::HOST, http::HeaderValue::from_static("b"));
    let resp = c.send_request(req).await.expect("answered");
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.expect("whole").to_bytes()
}

/// Request bodies reach the backend with their framing — a Content-Length as it
/// came, chunked for a body of unknown length — and stream both ways at once: the
/// backend answers before the body has ended and echoes it as it reads. The one
/// backend connection carries every request.
#[tokio::test]
async fn request_bodies_stream_to_the_backend_while_the_response_streams_back() {
    let (backend, accepted) = echo_backend().await;
    let front = front(backend).await;
    let stream = tokio::net::TcpStream::connect(front)
        .await
        .expect("connect");
    let (mut c, conn) =
        hyper::client::conn::http1::handshake::<_, TestBody>(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let full = |b: Vec<u8>| http_body_util::Full::new(bytes::Bytes::from(b)).boxed_unsync();
    let within = Duration::from_secs(30);
    tokio::time::timeout(within, async {
        assert_eq!(&echoed(&mut c, full(b"abc".to_vec())).await[..], b"abc");
        let big: Vec<u8> = (0..1 << 20).map(|i: u32| i.to_le_bytes()[1]).collect();
        assert_eq!(echoed(&mut c, full(big.clone())).await, big);
        // Unknown length, fed piece by piece while the echo comes back: more than
        // the sockets buffer, so it only gets through with both directions moving.
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let feed = tokio::spawn(async move {
            for i in 0..256u32 {
                let piece = bytes::Bytes::from(vec![i.to_le_bytes()[0]; 16 * 1024]);
                tx.send(piece).await.expect("sent");
            }
        });
        let got = echoed(&mut c, Fed(rx).boxed_unsync()).await;
        feed.await.expect("fed");
        assert_eq!(got.len(), 256 * 16 * 1024);
        assert!(
            got.chunks(16 * 1024)
                .enumerate()
                .all(|(i, p)| p.iter().all(|&b| usize::from(b) == i % 256))
        );
        assert_eq!(&echoed(&mut c, full(Vec::new())).await[..], b"");
    })
    .await
    .expect("every exchange within 30 s");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

/// The idle map's hash tells backend addresses apart: every port of a few addresses
/// of either family, none of them colliding in the whole 64 bits.
#[test]
fn the_idle_map_hash_tells_backends_apart() {
    use std::hash::BuildHasher as _;
    let hasher = std::hash::BuildHasherDefault::<super::AddrHasher>::default();
    let ips: [std::net::IpAddr; 4] = [
        "198.18.0.11".parse().expect("ip"),
        "198.18.0.12".parse().expect("ip"),
        "2001:db8::11".parse().expect("ip"),
        "2001:db8::12".parse().expect("ip"),
    ];
    let mut seen = std::collections::HashSet::new();
    for ip in ips {
        for port in 0..=u16::MAX {
            assert!(
                seen.insert(hasher.hash_one(SocketAddr::new(ip, port))),
                "{ip} port {port} collides"
            );
        }
    }
}
