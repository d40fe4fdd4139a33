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

use super::{Pooled, SendError, send};
use crate::proxy::body::UpBody;

const BIG: usize = 4 << 20;

/// A keep-alive backend counting its connections. `/small` is answered `ok`;
/// `/close` too, and then the backend closes the connection (as a backend's own idle
/// timeout does); `/big` with a body of [`BIG`] bytes.
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
                    let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                    let body = if path == "/big" {
                        vec![b'x'; BIG]
                    } else {
                        b"ok".to_vec()
                    };
                    let answer =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                    if stream.write_all(answer.as_bytes()).await.is_err()
                        || stream.write_all(&body).await.is_err()
                    {
                        return;
                    }
                    if path == "/close" {
                        return;
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
    let resp = send(addr, Duration::from_secs(1), get(path, addr)).await?;
    assert_eq!(resp.status(), 200);
    Ok(resp
        .into_body()
        .collect()
        .await
        .expect("the whole body")
        .to_bytes())
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
    let mut body: Pooled = send(addr, Duration::from_secs(1), get("/small", addr))
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
    // Time for the connection's task to read the backend's FIN.
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
    let resp = send(addr, Duration::from_secs(1), get("/big", addr))
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
    let err = send(addr, Duration::from_secs(1), get("/", addr))
        .await
        .expect_err("refused");
    assert!(matches!(err, SendError::Connect(_)), "{err:?}");
}
