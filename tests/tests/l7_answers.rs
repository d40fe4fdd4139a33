//! The L7 proxy's answers as skipper gives them: to backends that misbehave at the
//! TCP level — close after the request, answer garbage, reset, cut a body short,
//! trickle a body past the route's `backendTimeout` (proxy/proxy.go
//! `makeBackendRequest`, `makeErrorResponse`, `serveResponse`;
//! backendtimeout_test.go) — and which filters a serving filter leaves unrun
//! (`applyFiltersToRequest`, `applyFiltersToResponse`).

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use lb_l7::{
    accesslog::{AccessLog, AccessLogConfig},
    proxy::L7Config,
};
use lb_testbed::{
    http::{client, get},
    l7::{backend_addr, namespace, proxy_with, runtime, service, url, vip},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a raw backend does once it has read a request head.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Closes the connection (FIN): no response.
    Close,
    /// Writes a line that is no HTTP status line, then closes.
    Garbage,
    /// Resets the connection (RST, by closing with a zero linger).
    Reset,
    /// A head announcing 100 bytes, 10 of them, then a close.
    CutLength,
    /// A chunked head and one chunk, then a close without the last chunk.
    CutChunked,
    /// A chunked head, then one byte every 100 ms for 3 s.
    Trickle,
    /// A whole answer whose head has every kind of hop-by-hop field.
    HopByHop,
}

/// Accepts connections on `addr` and does `act` on each after reading its head.
async fn raw_backend(addr: SocketAddr, act: Act) -> tokio::task::JoinHandle<()> {
    let l = tokio::net::TcpListener::bind(addr).await.expect("bind");
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                match act {
                    Act::Close => {}
                    Act::Garbage => {
                        let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").await;
                    }
                    Act::Reset => {
                        let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                    }
                    Act::CutLength => {
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                            .await;
                    }
                    Act::CutChunked => {
                        let _ = s
                            .write_all(
                                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n",
                            )
                            .await;
                    }
                    Act::HopByHop => {
                        let _ = s
                            .write_all(
                                b"HTTP/1.1 200 OK\r\nX-Secret: s\r\n\
                                  Connection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\n\
                                  Upgrade: h2c\r\nTrailer: X-T\r\nProxy-Authenticate: Basic\r\n\
                                  X-Kept: yes\r\nContent-Length: 2\r\n\r\nok",
                            )
                            .await;
                    }
                    Act::Trickle => {
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                            .await;
                        for _ in 0..30 {
                            if s.write_all(b"1\r\nx\r\n").await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        let _ = s.write_all(b"0\r\n\r\n").await;
                    }
                }
                // Dropping the stream closes it (with a zero linger: resets it).
            });
        }
    })
}

/// A proxy with `config`, serving `routes` as service `web` on `port` of the VIP.
fn serving(config: &L7Config, port: u16, routes: &str) -> lb_l7::proxy::Proxy {
    let mut proxy = proxy_with(config, None);
    let errors = proxy.apply(&[service("web", port, Some(routes), vec![])]);
    assert!(errors.is_empty(), "{errors:?}");
    proxy
}

/// Sends `GET path` on a new connection and reads until the proxy closes it or
/// `within` passes: what came back, and how long that took.
async fn read_until_closed(port: u16, path: &str, within: Duration) -> (String, Duration) {
    let mut s = tokio::net::TcpStream::connect(vip(port))
        .await
        .expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let started = Instant::now();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "{path}: the proxy kept the connection open: {:?}",
        String::from_utf8_lossy(&out)
    );
    (
        String::from_utf8_lossy(&out).into_owned(),
        started.elapsed(),
    )
}

/// A backend that fails after the request was sent gets skipper's answer for its
/// kind: closed before a response head or a head that does not parse is an error Go
/// does not classify (500), a reset is a `net.Error` (503); the proxy's own answer is
/// its reason phrase, and no response filter runs on it (skipper's
/// `applyFiltersOnError` runs only filters that opt in, none of ours).
#[test]
fn backends_failing_after_the_request_get_skippers_status_per_kind() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let acts = [Act::Close, Act::Garbage, Act::Reset];
        let _backends: Vec<_> = acts
            .iter()
            .enumerate()
            .map(|(i, act)| {
                let i = u8::try_from(i).expect("few");
                rt.block_on(raw_backend(backend_addr(i, 80), *act))
            })
            .collect();
        let routes = format!(
            r#"closes: Path("/closes") -> setResponseHeader("X-Filtered", "yes") -> status(418) -> "http://{}";
               garbage: Path("/garbage") -> setResponseHeader("X-Filtered", "yes") -> "http://{}";
               resets: Path("/resets") -> setResponseHeader("X-Filtered", "yes") -> "http://{}";"#,
            backend_addr(0, 80),
            backend_addr(1, 80),
            backend_addr(2, 80),
        );
        let proxy = serving(&L7Config::default(), 88, &routes);
        rt.block_on(async {
            let c = client(false);
            for (path, status, body) in [
                ("/closes", 500, "Internal Server Error\n"),
                ("/garbage", 500, "Internal Server Error\n"),
                ("/resets", 503, "Service Unavailable\n"),
            ] {
                let a = get(&c, &url(88, path)).await.expect("answer");
                assert_eq!((a.status, a.body.as_str()), (status, body), "{path}");
                assert_eq!(a.header("x-content-type-options"), "nosniff", "{path}");
                assert_eq!(a.header("x-filtered"), "", "{path}: no response filter");
            }
        });
        proxy.shutdown();
    });
}

/// A body that fails after the head was sent cannot become an error answer: the
/// client's connection is cut, at once, without the end of a chunked body (which
/// would make the cut body look whole), and the proxy does not hang.
#[test]
fn a_backend_failing_mid_body_cuts_the_client_connection() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let _a = rt.block_on(raw_backend(backend_addr(0, 80), Act::CutLength));
        let _b = rt.block_on(raw_backend(backend_addr(1, 80), Act::CutChunked));
        let routes = format!(
            r#"length: Path("/length") -> "http://{}";
               chunked: Path("/chunked") -> "http://{}";"#,
            backend_addr(0, 80),
            backend_addr(1, 80),
        );
        let proxy = serving(&L7Config::default(), 89, &routes);
        rt.block_on(async {
            for path in ["/length", "/chunked"] {
                let (got, took) = read_until_closed(89, path, Duration::from_secs(5)).await;
                assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {got:?}");
                assert!(got.contains("0123456789"), "{path}: the bytes that came");
                assert!(
                    !got.ends_with("0\r\n\r\n"),
                    "{path}: no last chunk: {got:?}"
                );
                assert!(
                    took < Duration::from_secs(2),
                    "{path}: cut at once, {took:?}"
                );
            }
        });
        proxy.shutdown();
    });
}

/// skipper's `backendTimeout` is a deadline on the backend request's context, and Go
/// stops reading a body whose context is done (`TestBackendTimeoutInTheMiddleOfServiceResponse`:
/// the head and the bytes before the deadline arrive, then the body stops). A
/// trickling body is cut at the deadline; the node's `request_timeout` bounds only
/// the wait for the head, so without the filter the same body arrives whole.
#[test]
fn backend_timeout_cuts_a_body_that_trickles_past_it() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let _t = rt.block_on(raw_backend(backend_addr(0, 80), Act::Trickle));
        let routes = format!(
            r#"bounded: Path("/bounded") -> backendTimeout("500ms") -> "http://{b}";
               free: Path("/free") -> "http://{b}";"#,
            b = backend_addr(0, 80),
        );
        let config = L7Config {
            request_timeout: lb_model::config::DurationText::Millis(500),
            ..L7Config::default()
        };
        let proxy = serving(&config, 90, &routes);
        rt.block_on(async {
            let (got, took) = read_until_closed(90, "/bounded", Duration::from_secs(5)).await;
            assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got:?}");
            assert!(
                got.contains("1\r\nx\r\n"),
                "bytes before the deadline: {got:?}"
            );
            assert!(!got.ends_with("0\r\n\r\n"), "cut, not ended: {got:?}");
            assert!(
                took >= Duration::from_millis(400) && took < Duration::from_millis(2500),
                "cut at the deadline, {took:?}"
            );
            let a = get(&client(false), &url(90, "/free")).await.expect("whole");
            assert_eq!(
                (a.status, a.body.len()),
                (200, 30),
                "request_timeout spares bodies"
            );
        });
        proxy.shutdown();
    });
}

/// A serving filter ends skipper's request phase: the filters after it run neither
/// part, so a `maskAccessLogQuery` or `disableAccessLog` after `inlineContent`
/// does nothing (the line shows the query as sent, the global setting logs it),
/// while one before it masks. Response filters before it run, last first.
#[test]
fn filters_after_a_serving_filter_do_not_run() {
    lb_testbed::needs_root!();
    let dir = lb_testbed::lbd::TempDir::new("l7phases");
    let path = dir.path().join("access.log");
    let log_path = path.clone();
    namespace().run(move || {
        let rt = runtime();
        let settings = AccessLogConfig {
            file: log_path.display().to_string(),
            ..AccessLogConfig::default()
        };
        let mut proxy = proxy_with(
            &L7Config::default(),
            Some(AccessLog::open(settings).expect("opens")),
        );
        let routes = r#"
            after: Path("/after") -> setResponseHeader("X-Order", "a") -> setResponseHeader("X-Order", "b")
                -> inlineContent("hi") -> maskAccessLogQuery("token") -> disableAccessLog()
                -> setResponseHeader("X-After", "ran") -> <shunt>;
            before: Path("/before") -> maskAccessLogQuery("token") -> inlineContent("hi") -> <shunt>;"#;
        let errors = proxy.apply(&[service("web", 91, Some(routes), vec![])]);
        assert!(errors.is_empty(), "{errors:?}");
        rt.block_on(async {
            let c = client(false);
            let a = get(&c, &url(91, "/after?token=s3cret")).await.expect("answer");
            assert_eq!((a.status, a.body.as_str()), (200, "hi"));
            assert_eq!(a.header("x-order"), "a", "last first: b, then a");
            assert_eq!(a.header("x-after"), "", "after the serving filter");
            let b = get(&c, &url(91, "/before?token=s3cret")).await.expect("answer");
            assert_eq!(b.status, 200);
        });
        proxy.shutdown();
    });
    let log = std::fs::read_to_string(&path).expect("the log");
    let after: Vec<&str> = log.lines().filter(|l| l.contains("/after")).collect();
    assert_eq!(
        after.len(),
        1,
        "logged: the disable after the answer never ran: {log}"
    );
    assert!(
        after[0].contains("/after?token=s3cret "),
        "not masked: {}",
        after[0]
    );
    let before: Vec<&str> = log.lines().filter(|l| l.contains("/before")).collect();
    assert_eq!(before.len(), 1, "{log}");
    assert!(!before[0].contains("s3cret"), "masked: {}", before[0]);
}

/// A backend's hop-by-hop fields stay on its hop, through a route without filters
/// (whose response never holds them: they are dropped as the head is parsed) as
/// through one with a response filter (which sees them, as skipper's do, before
/// they are stripped): the client gets the other fields and the body.
#[test]
fn a_backend_s_hop_by_hop_fields_never_reach_the_client() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let _backend = rt.block_on(raw_backend(backend_addr(0, 80), Act::HopByHop));
        let routes = format!(
            r#"bare: Path("/bare") -> "http://{b}";
               filtered: Path("/filtered") -> setResponseHeader("X-Filtered", "yes") -> "http://{b}";"#,
            b = backend_addr(0, 80),
        );
        let proxy = serving(&L7Config::default(), 88, &routes);
        rt.block_on(async {
            let c = client(false);
            for (path, filtered) in [("/bare", ""), ("/filtered", "yes")] {
                let a = get(&c, &url(88, path)).await.expect("answer");
                assert_eq!((a.status, a.body.as_str()), (200, "ok"), "{path}");
                assert_eq!(a.header("x-kept"), "yes", "{path}");
                assert_eq!(a.header("x-filtered"), filtered, "{path}");
                for hop in ["x-secret", "keep-alive", "upgrade", "trailer", "proxy-authenticate"] {
                    assert!(!a.headers.contains_key(hop), "{path}: {hop} reached the client");
                }
                let connection = a.header("connection");
                assert!(!connection.contains("X-Secret"), "{path}: Connection {connection:?}");
            }
        });
        proxy.shutdown();
    });
}
