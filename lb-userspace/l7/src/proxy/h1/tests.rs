//! The HTTP/1 server against raw clients on loopback sockets: framing, keep-alive,
//! bodies, refusals and cancellation as hyper's server had them (the cases of
//! hyper's `tests/server.rs` that apply to a proxy, with hyper's answers).

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt as _, Full};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

use super::{ConnError, Connection, Ended, RawFields, head::HeadLimits};
use crate::proxy::client_body::ClientBody;

const LIMITS: HeadLimits = HeadLimits {
    max_bytes: 16 * 1024,
    max_fields: 20,
};

/// A server of one connection with `service`; its task gives the connection's end.
async fn serve<S, F, B>(
    limits: HeadLimits,
    service: S,
) -> (SocketAddr, JoinHandle<Result<Ended, ConnError>>)
where
    S: FnMut(Request<ClientBody>) -> F + Unpin + Send + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body<Data = Bytes> + RawFields + Unpin + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        Connection::new(stream, limits, service).await
    });
    (addr, task)
}

/// Answers `200` with the request's method, target and body as text.
async fn echo(req: Request<ClientBody>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = format!(
        "{} {} {}",
        parts.method,
        parts.uri,
        String::from_utf8_lossy(&body)
    );
    Response::new(Full::new(Bytes::from(text)))
}

/// Everything the server sends until it closes (or 5 s pass).
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut c = Client::connect(addr).await;
    c.send(request).await;
    c.rest().await
}

/// A client that reads answers whose bodies have a Content-Length, one at a time
/// (bytes of the next answer read with one stay for it).
struct Client {
    s: TcpStream,
    got: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Self {
        Self {
            s: TcpStream::connect(addr).await.expect("connect"),
            got: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("write");
    }

    /// The next answer's head and body.
    async fn answer(&mut self) -> (String, String) {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = self.got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.got[..end]).into_owned();
                let len: usize = head
                    .to_lowercase()
                    .split("content-length: ")
                    .nth(1)
                    .and_then(|l| l.split("\r\n").next())
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(0);
                if self.got.len() >= end + 4 + len {
                    let body =
                        String::from_utf8_lossy(&self.got[end + 4..end + 4 + len]).into_owned();
                    self.got.drain(..end + 4 + len);
                    return (head, body);
                }
            }
            let n = tokio::time::timeout(Duration::from_secs(5), self.s.read(&mut buf))
                .await
                .expect("an answer within 5 s")
                .expect("read");
            assert!(
                n > 0,
                "closed before a whole answer: {:?}",
                String::from_utf8_lossy(&self.got)
            );
            self.got.extend_from_slice(&buf[..n]);
        }
    }

    /// What comes until the close.
    async fn rest(&mut self) -> String {
        let mut out = std::mem::take(&mut self.got);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }
}

#[tokio::test]
async fn keep_alive_requests_are_answered_in_order_pipelined_ones_too() {
    let (addr, task) = serve(LIMITS, echo).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (head, body) = c.answer().await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(!head.contains("connection"), "{head}");
    assert_eq!(body, "GET /a ");
    c.send(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert_eq!(c.answer().await.1, "GET /b ");
    let (head, body) = c.answer().await;
    assert_eq!(body, "GET /c ");
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(c.rest().await, "", "closed after the answer to a close");
    assert!(matches!(task.await.expect("join"), Ok(Ended::Closed)));
}

#[tokio::test]
async fn http10_gets_http10_and_a_close_unless_it_asks_to_keep_alive() {
    let (addr, _task) = serve(LIMITS, echo).await;
    let answer = exchange(addr, b"GET /x HTTP/1.0\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
    assert!(
        answer.ends_with("GET /x "),
        "closed after the answer: {answer}"
    );
    let (addr, _task) = serve(LIMITS, echo).await;
    let mut c = Client::connect(addr).await;
    for _ in 0..2 {
        c.send(b"GET /y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .await;
        let (head, body) = c.answer().await;
        assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
        assert!(head.contains("connection: keep-alive"), "{head}");
        assert_eq!(body, "GET /y ");
    }
}

#[tokio::test]
async fn bodies_by_length_and_chunked_reach_the_handler_whole() {
    for (request, want) in [
        (&b"POST /l HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"[..], "POST /l hello"),
        (b"PUT /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: t\r\n\r\n", "PUT /c hello world"),
        // Transfer-Encoding wins over Content-Length.
        (b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", "POST /b hi"),
    ] {
        let (addr, _task) = serve(LIMITS, echo).await;
        let answer = exchange(addr, request).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(want), "{want}: {answer}");
        // With both framings the connection closes after the answer (RFC 9112 §6.3).
        assert!(answer.contains("connection: close"), "{answer}");
    }
}

#[tokio::test]
async fn a_body_in_pieces_arrives_in_order_across_many_reads() {
    let (addr, _task) = serve(LIMITS, echo).await;
    let mut c = Client::connect(addr).await;
    let body: String = (0..2000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    c.send(b"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await;
    for piece in body.as_bytes().chunks(97) {
        c.send(format!("{:x}\r\n", piece.len()).as_bytes()).await;
        c.send(piece).await;
        c.send(b"\r\n").await;
        tokio::task::yield_now().await;
    }
    c.send(b"0\r\n\r\n").await;
    let (_, got) = c.answer().await;
    assert_eq!(got, format!("POST /p {body}"));
    // The connection goes on after a body read whole.
    c.send(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(c.answer().await.1, "GET /next ");
}

#[tokio::test]
async fn expect_100_continue_is_answered_when_the_body_is_read_and_not_after_an_answer() {
    let (addr, _task) = serve(LIMITS, echo).await;
    let mut c = Client::connect(addr).await;
    c.send(b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        .await;
    let mut interim = [0u8; 25];
    c.s.read_exact(&mut interim).await.expect("read");
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    c.send(b"ok").await;
    assert_eq!(c.answer().await.1, "POST /e ok");
    // A handler that answers without reading the body owes no 100 Continue.
    let (addr, _task) = serve(LIMITS, |_req: Request<ClientBody>| async {
        let mut r = Response::new(Full::new(Bytes::from_static(b"no")));
        *r.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
        r
    })
    .await;
    let answer = exchange(
        addr,
        b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 413 Payload Too Large\r\n"),
        "{answer}"
    );
    // The body was never read: the connection cannot go on.
    assert!(
        answer.contains("connection: close") || answer.ends_with("no"),
        "{answer}"
    );
}

/// hyper's answers to heads it refused, held for ours.
#[tokio::test]
async fn refused_heads_get_hypers_statuses_and_a_close() {
    let mut fields = String::from("GET / HTTP/1.1\r\n");
    // One field over the limit.
    for i in 0..=LIMITS.max_fields {
        fields.push_str(&format!("X-{i}: v\r\n"));
    }
    fields.push_str("\r\n");
    let big = format!(
        "GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(LIMITS.max_bytes)
    );
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(LIMITS.max_bytes));
    let cases: Vec<(&[u8], &str)> = vec![
        (b"GARBAGE\r\n\r\n", "400 Bad Request"),
        (b"GET / HTTP/9.9\r\n\r\n", "400 Bad Request"),
        (b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n", "400 Bad Request"),
        (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", "400 Bad Request"),
        (b"G(T / HTTP/1.1\r\n\r\n", "400 Bad Request"),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
            "400 Bad Request",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "400 Bad Request",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            "400 Bad Request",
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "400 Bad Request",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "400 Bad Request",
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "400 Bad Request",
        ),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "400 Bad Request",
        ),
        (fields.as_bytes(), "431 Request Header Fields Too Large"),
        (big.as_bytes(), "431 Request Header Fields Too Large"),
        (long.as_bytes(), "414 URI Too Long"),
    ];
    for (request, status) in cases {
        let (addr, task) = serve(LIMITS, echo).await;
        let answer = exchange(addr, request).await;
        let want = format!("HTTP/1.1 {status}\r\n");
        assert!(
            answer.starts_with(&want),
            "{:?}: {answer}",
            String::from_utf8_lossy(&request[..request.len().min(60)])
        );
        assert!(answer.contains("connection: close\r\n"), "{answer}");
        assert!(answer.contains("content-length: 0\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\n"), "no body: {answer}");
        assert!(matches!(task.await.expect("join"), Err(ConnError::Head(_))));
    }
}

/// As many fields as the limit are served (hyper's rule, and `max_headers`' doc).
#[tokio::test]
async fn as_many_fields_as_the_limit_are_served() {
    let mut fields = String::from("GET / HTTP/1.1\r\nConnection: close\r\n");
    for i in 1..LIMITS.max_fields {
        fields.push_str(&format!("X-{i}: v\r\n"));
    }
    fields.push_str("\r\n");
    let (addr, _task) = serve(LIMITS, echo).await;
    let answer = exchange(addr, fields.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn answers_without_a_body_keep_or_lose_their_length_as_hypers_did() {
    let answer_with = |status: StatusCode, length: Option<&'static str>| {
        move |_req: Request<ClientBody>| async move {
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = status;
            if let Some(l) = length {
                r.headers_mut().insert(
                    http::header::CONTENT_LENGTH,
                    http::HeaderValue::from_static(l),
                );
            }
            r
        }
    };
    // HEAD keeps the length it was given and sends nothing.
    let (addr, _t) = serve(LIMITS, answer_with(StatusCode::OK, Some("42"))).await;
    let answer = exchange(
        addr,
        b"HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.contains("content-length: 42\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "{answer}");
    // 204 and 304 carry none.
    for status in [StatusCode::NO_CONTENT, StatusCode::NOT_MODIFIED] {
        let (addr, _t) = serve(LIMITS, answer_with(status, None)).await;
        let answer = exchange(
            addr,
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {}", status.as_str())),
            "{answer}"
        );
        assert!(!answer.contains("content-length"), "{answer}");
        assert!(answer.contains("\r\ndate: "), "{answer}");
    }
    // An empty 200 says its length is 0.
    let (addr, _t) = serve(LIMITS, answer_with(StatusCode::OK, None)).await;
    let answer = exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.contains("content-length: 0\r\n"), "{answer}");
}

impl RawFields for Full<Bytes> {}

impl RawFields for Pieces {}

/// A body of unknown length, its pieces given by the test.
struct Pieces(tokio::sync::mpsc::Receiver<Result<Bytes, &'static str>>);

impl Body for Pieces {
    type Data = Bytes;
    type Error = &'static str;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
        self.0.poll_recv(cx).map(|p| p.map(|r| r.map(Frame::data)))
    }
    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

fn pieces(
    list: &'static [Result<&'static str, &'static str>],
) -> impl FnMut(Request<ClientBody>) -> std::future::Ready<Response<Pieces>> + Unpin {
    move |_req| {
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        for p in list {
            let _ = tx.try_send(p.map(|s| Bytes::from_static(s.as_bytes())));
        }
        std::future::ready(Response::new(Pieces(rx)))
    }
}

#[tokio::test]
async fn a_body_of_unknown_length_goes_chunked_to_http11_and_until_the_close_to_http10() {
    static LIST: [Result<&str, &str>; 2] = [Ok("hello "), Ok("world")];
    let (addr, task) = serve(LIMITS, pieces(&LIST)).await;
    let answer = exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        answer.contains("transfer-encoding: chunked\r\n"),
        "{answer}"
    );
    assert!(
        answer.ends_with("\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n"),
        "{answer}"
    );
    assert!(matches!(task.await.expect("join"), Ok(Ended::Closed)));
    let (addr, _task) = serve(LIMITS, pieces(&LIST)).await;
    let answer = exchange(addr, b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
    assert!(!answer.contains("transfer-encoding"), "{answer}");
    assert!(
        !answer.contains("keep-alive"),
        "the length is the close: {answer}"
    );
    assert!(answer.ends_with("\r\n\r\nhello world"), "{answer}");
}

#[tokio::test]
async fn a_failing_answer_body_cuts_the_connection() {
    static LIST: [Result<&str, &str>; 2] = [Ok("half"), Err("backend gone")];
    let (addr, task) = serve(LIMITS, pieces(&LIST)).await;
    let answer = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        answer.ends_with("4\r\nhalf\r\n"),
        "cut with no last chunk: {answer}"
    );
    assert!(matches!(task.await.expect("join"), Err(ConnError::Body)));
}

#[tokio::test]
async fn the_h2_preface_hands_the_connection_back_with_what_was_read() {
    let (addr, task) = serve(LIMITS, echo).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    // In two writes, the first shorter than the preface.
    s.write_all(b"PRI * HTTP/2").await.expect("write");
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.write_all(b".0\r\n\r\nSM\r\n\r\n\x00\x00")
        .await
        .expect("write");
    match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(Ok(Ended::H2(_, read)))) => {
            assert_eq!(&read[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00");
        }
        other => panic!("not handed back: {other:?}"),
    }
}

#[tokio::test]
async fn a_client_that_closes_cancels_its_request() {
    let dropped = Arc::new(AtomicBool::new(false));
    struct Guard(Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let flag = Arc::clone(&dropped);
    let (addr, task) = serve(LIMITS, move |_req: Request<ClientBody>| {
        let guard = Guard(Arc::clone(&flag));
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Response::new(Full::new(Bytes::new()))
        }
    })
    .await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !dropped.load(Ordering::SeqCst),
        "runs while the client waits"
    );
    drop(s);
    let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(matches!(ended, Ok(Ok(Ok(Ended::Closed)))), "{ended:?}");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the handler's future was dropped"
    );
}

#[tokio::test]
async fn a_body_the_handler_left_unread_ends_the_connection_after_the_answer() {
    let ignore =
        |_req: Request<ClientBody>| async { Response::new(Full::new(Bytes::from_static(b"k"))) };
    // Not all of it arrived with the head: the next request's start is unknown.
    let (addr, task) = serve(LIMITS, ignore).await;
    let mut c = Client::connect(addr).await;
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        .await;
    let (head, _) = c.answer().await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(c.rest().await, "", "closed");
    assert!(matches!(task.await.expect("join"), Ok(Ended::Closed)));
    // All of it came with the head: read whole, the connection goes on.
    let (addr, _task) = serve(LIMITS, ignore).await;
    let mut c = Client::connect(addr).await;
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(c.answer().await.1, "k");
    assert_eq!(c.answer().await.1, "k");
}

#[tokio::test]
async fn graceful_shutdown_closes_an_idle_connection_and_a_busy_one_after_its_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        let mut conn = Connection::new(stream, LIMITS, |_req: Request<ClientBody>| async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Response::new(Full::new(Bytes::from_static(b"done")))
        });
        let mut stopped = false;
        std::future::poll_fn(|cx| {
            if !stopped && Pin::new(&mut stop_rx).poll(cx).is_ready() {
                stopped = true;
                conn.graceful_shutdown();
            }
            Pin::new(&mut conn).poll(cx)
        })
        .await
    });
    let mut c = Client::connect(addr).await;
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = stop_tx.send(());
    // The request under way is answered (with the close said), then the connection
    // closes.
    let (head, body) = c.answer().await;
    assert_eq!(body, "done");
    assert!(head.contains("connection: close"), "{head}");
    assert_eq!(c.rest().await, "");
    assert!(matches!(task.await.expect("join"), Ok(Ended::Closed)));
}

#[tokio::test]
async fn answers_have_a_date_and_keep_the_handlers_fields() {
    let (addr, _t) = serve(LIMITS, |_req: Request<ClientBody>| async {
        let mut r = Response::new(Full::new(Bytes::from_static(b"x")));
        r.headers_mut()
            .insert("x-custom", http::HeaderValue::from_static("yes"));
        r.headers_mut()
            .append("set-cookie", http::HeaderValue::from_static("a=1"));
        r.headers_mut()
            .append("set-cookie", http::HeaderValue::from_static("b=2"));
        r
    })
    .await;
    let answer = exchange(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.contains("\r\nx-custom: yes\r\n"), "{answer}");
    assert!(
        answer.contains("\r\nset-cookie: a=1\r\nset-cookie: b=2\r\n"),
        "{answer}"
    );
    assert!(answer.contains("\r\ncontent-length: 1\r\n"), "{answer}");
    let date = answer
        .split("\r\ndate: ")
        .nth(1)
        .and_then(|d| d.split("\r\n").next())
        .expect("a date");
    assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
}

#[tokio::test]
async fn a_connection_closed_mid_head_is_incomplete_and_one_closed_between_requests_is_not() {
    let (addr, task) = serve(LIMITS, echo).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET / HT").await.expect("write");
    drop(s);
    assert!(matches!(
        task.await.expect("join"),
        Err(ConnError::Incomplete)
    ));
    let (addr, task) = serve(LIMITS, echo).await;
    drop(TcpStream::connect(addr).await.expect("connect"));
    assert!(matches!(task.await.expect("join"), Ok(Ended::Closed)));
}

/// A client refused while it still sends gets the answer and a clean close: the
/// connection reads and drops what follows before it closes. A socket closed with
/// unread bytes resets the connection: the client's next writes fail, and a client
/// whose stack drops unread data on a reset (not Linux's) loses the 431 with it.
#[tokio::test]
async fn a_refused_client_still_sending_gets_the_answer_and_no_reset() {
    let (addr, task) = serve(LIMITS, echo).await;
    let (mut r, mut w) = TcpStream::connect(addr)
        .await
        .expect("connect")
        .into_split();
    let writer = tokio::spawn(async move {
        w.write_all(b"GET / HTTP/1.1\r\nX-Big: ").await?;
        let chunk = vec![b'a'; 16 * 1024];
        // Ten times the head limit, far more than the sockets' buffers hold.
        for _ in 0..10 {
            w.write_all(&chunk).await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        w.write_all(b"\r\n\r\n").await?;
        w.shutdown().await
    });
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), r.read_to_end(&mut got))
        .await
        .expect("closed within 5 s");
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{text:?}"
    );
    assert!(read.is_ok(), "closed, not reset: {read:?}");
    let written = writer.await.expect("join");
    assert!(
        written.is_ok(),
        "every byte the client sent was taken: {written:?}"
    );
    assert!(matches!(task.await.expect("join"), Err(ConnError::Head(_))));
}
