//! The L7 proxy against a hostile client (issue 14): no request body is lost, no
//! encoding of the Host or the path slips past a route, CONNECT and broken framing
//! are refused, silent connections do not hold slots, and X-Forwarded-For counts
//! only from trusted proxies. Real clients and backends in a namespace of their own.

use std::time::Duration;

use bytes::Bytes;
use lb_l7::{accesslog::AccessLog, accesslog::AccessLogConfig, proxy::L7Config};
use lb_testbed::{
    http::{EchoBackend, client, client_from, fnv64, raw, send, send_streamed},
    l7::{
        backend_addr, client_addr, namespace, one_backend_proxy, proxy_with, runtime, service, url,
        vip,
    },
    rng::{self, Rng as _, StdRng},
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A body of `len` random bytes (from `rng`) in chunks of uneven sizes.
fn chunked_body(rng: &mut StdRng, len: usize) -> (Vec<Bytes>, Vec<u8>) {
    let mut all = vec![0u8; len];
    rng.fill_bytes(&mut all);
    let mut chunks = Vec::new();
    let mut at = 0;
    let mut size = 1;
    while at < all.len() {
        let end = (at + size).min(all.len());
        chunks.push(Bytes::copy_from_slice(&all[at..end]));
        at = end;
        size = size * 3 + 7;
    }
    (chunks, all)
}

/// The status code of a raw HTTP/1.x answer ("" when there was none).
fn status_of(answer: &str) -> &str {
    answer.get(9..12).unwrap_or("")
}

#[test]
fn streamed_bodies_reach_the_backend_whole_for_every_method() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let (proxy, _backend) = one_backend_proxy(&rt, &L7Config::default());
        rt.block_on(async {
            let mut rng = rng::seeded("streamed_bodies_reach_the_backend_whole_for_every_method");
            let methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND"];
            for h2 in [false, true] {
                for (i, method) in methods.iter().enumerate() {
                    let (chunks, all) = chunked_body(&mut rng, 200_000 + i * 1_111);
                    let n = chunks.len();
                    let a = send_streamed(h2, method, &url(80, "/upload"), chunks)
                        .await
                        .unwrap_or_else(|e| panic!("{method} h2={h2}: {e}"));
                    let proto = if h2 { "h2c" } else { "HTTP/1.1 chunked" };
                    assert_eq!(a.status, 200, "{method} over {proto}: {a:?}");
                    assert_eq!(
                        (a.header("x-body-bytes"), a.header("x-body-hash")),
                        (all.len().to_string().as_str(), format!("{:016x}", fnv64(&all)).as_str()),
                        "{method} over {proto}: the backend got every byte of {} in {n} chunks",
                        all.len()
                    );
                }
            }
            // On the wire, byte for byte: a chunked GET.
            let r = raw(
                vip(80),
                b"GET /raw HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            )
            .await;
            assert_eq!(status_of(&r), "200", "{r}");
            assert!(r.contains("x-body-bytes: 11\r\n"), "{r}");
            assert!(r.contains("body: hello world\n"), "{r}");
        });
        proxy.shutdown();
    });
}

#[test]
fn a_second_host_a_host_unlike_the_authority_and_connection_host_get_400_or_keep_the_host() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let b = rt.block_on(EchoBackend::start(backend_addr(0, 80), "b"));
        let routes = format!(
            r#"admin: Host(/^admin/) -> status(403) -> inlineContent("admin only") -> <shunt>;
               all: * -> preserveHost("true") -> "http://{}";"#,
            b.addr
        );
        let mut proxy = proxy_with(&L7Config::default(), None);
        assert!(
            proxy
                .apply(&[service("svc", 80, Some(&routes), vec![])])
                .is_empty()
        );
        rt.block_on(async {
            let ask = |head: &'static str| async move {
                raw(
                    vip(80),
                    format!("{head}Connection: close\r\n\r\n").as_bytes(),
                )
                .await
            };
            let r = ask("GET / HTTP/1.1\r\nHost: admin\r\n").await;
            assert_eq!(status_of(&r), "403", "the admin route denies: {r}");
            for head in [
                "GET / HTTP/1.1\r\nHost: public\r\nHost: admin\r\n",
                "GET / HTTP/1.1\r\nHost: admin\r\nHost: public\r\n",
                "GET / HTTP/1.1\r\nHost: public\r\nhost: public\r\n",
                "GET http://public/ HTTP/1.1\r\nHost: admin\r\n",
                "GET http://admin/ HTTP/1.1\r\nHost: public\r\n",
                "GET / HTTP/1.1\r\n",
                "GET / HTTP/1.1\r\nHost: public, admin\r\n",
                "GET / HTTP/1.1\r\nHost: user@admin\r\n",
                "GET / HTTP/1.1\r\nHost: public/../admin\r\n",
            ] {
                let r = ask(head).await;
                assert_eq!(status_of(&r), "400", "{head:?} answered {r}");
            }
            // Absolute form with the same host is fine, as is HTTP/1.0 without a Host.
            let r = ask("GET http://public/x HTTP/1.1\r\nHost: public\r\n").await;
            assert_eq!(status_of(&r), "200", "{r}");
            let r = ask("GET /x HTTP/1.0\r\n").await;
            assert_eq!(status_of(&r), "200", "{r}");

            // `Connection: host` names a hop-by-hop header, but the Host stays.
            let r = ask("GET /c HTTP/1.1\r\nHost: public.example\r\nConnection: host\r\n").await;
            assert_eq!(status_of(&r), "200", "{r}");
            assert!(
                r.contains("\nhost: public.example\n"),
                "the backend got the client's Host: {r}"
            );

            // h2c: a Host header that disagrees with :authority.
            let a = send(
                &client(true),
                "GET",
                &url(80, "/h2"),
                &[("host", "admin")],
                "",
            )
            .await
            .expect("answer");
            assert_eq!(a.status, 400, "{a:?}");
            let a = send(&client(true), "GET", &url(80, "/h2"), &[], "")
                .await
                .expect("answer");
            assert_eq!(a.status, 200, "{a:?}");
        });
        proxy.shutdown();
    });
}

#[test]
fn encoded_and_dotted_paths_do_not_slip_past_a_path_predicate() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let b = rt.block_on(EchoBackend::start(backend_addr(0, 80), "b"));
        let routes = format!(
            r#"internal: PathSubtree("/internal") -> status(403) -> inlineContent("internal") -> <shunt>;
               panel: Path("/admin/panel") -> status(403) -> inlineContent("panel") -> <shunt>;
               item: Path("/items/:id/secret") -> status(403) -> inlineContent("item") -> <shunt>;
               secret: PathRegexp(/^\/secret\//) -> status(403) -> inlineContent("secret") -> <shunt>;
               all: * -> "http://{}";"#,
            b.addr
        );
        let mut proxy = proxy_with(&L7Config::default(), None);
        assert!(proxy.apply(&[service("svc", 80, Some(&routes), vec![])]).is_empty());
        rt.block_on(async {
            let get = |path: &'static str| async move {
                raw(vip(80), format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await
            };
            let denied = [
                ("/internal/x", "internal"),
                ("/public/../internal/x", "internal"),
                ("//internal/x", "internal"),
                ("///internal", "internal"),
                ("/%69nternal/x", "internal"),
                ("/%69%6E%74ernal", "internal"),
                ("/internal%2Fx", "internal"),
                ("/%2finternal/x", "internal"),
                ("/public/%2e%2e/internal/x", "internal"),
                ("/public/%2E%2E/internal", "internal"),
                ("/./internal", "internal"),
                ("/internal/./x", "internal"),
                ("/internal/", "internal"),
                ("/a/b/../../internal/x", "internal"),
                ("/../internal/x", "internal"),
                ("/../../../internal", "internal"),
                ("/x/..//internal", "internal"),
                ("/admin/panel", "panel"),
                ("/admin/./panel", "panel"),
                ("/admin//panel", "panel"),
                ("/%61dmin/panel", "panel"),
                ("/admin/x/../panel", "panel"),
                ("/admin/panel/.", "none"),
                ("/items/7/secret", "item"),
                ("/items//7/secret", "item"),
                ("/items/7/../8/secret", "item"),
                ("/items/%37/%73ecret", "item"),
                ("/secret/x", "secret"),
                ("/%73ecret/x", "secret"),
                ("//secret/x", "secret"),
                ("/z/../secret/x", "secret"),
            ];
            for (path, route) in denied {
                let r = get(path).await;
                if route == "none" {
                    // skipper keeps the trailing slash that `/.` stands for: `/admin/panel/`
                    // is not `Path("/admin/panel")`.
                    assert_eq!(status_of(&r), "200", "{path}: {r}");
                    continue;
                }
                assert_eq!(status_of(&r), "403", "{path} must hit route {route}: {r}");
                assert!(r.ends_with(route), "{path} hit route {route}: {r}");
            }
            // Paths that are not under a predicate go through, and the backend gets
            // them as sent.
            for path in ["/internalx", "/public/%41", "/admin/panel/", "/secretx", "/a%2Fb/../c", "/items/7"] {
                let r = get(path).await;
                assert_eq!(status_of(&r), "200", "{path}: {r}");
                assert!(r.contains(&format!("\nGET {path}\n")), "{path} forwarded raw: {r}");
            }
            for bad in ["/%zz", "/a%2", "/%", "/%%69nternal", "/internal/%c"] {
                let r = get(bad).await;
                assert_eq!(status_of(&r), "400", "{bad}: {r}");
            }
        });
        proxy.shutdown();
    });
}

#[test]
fn connect_gets_405_and_broken_chunked_framing_gets_400() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let (proxy, backend) = one_backend_proxy(&rt, &L7Config::default());
        rt.block_on(async {
            let target = backend.addr;
            let r = raw(
                vip(80),
                format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
            )
            .await;
            assert_eq!(status_of(&r), "405", "{r}");
            assert!(
                r.to_ascii_lowercase().contains("\r\nallow: "),
                "a 405 says what is allowed: {r}"
            );
            for body in [
                &b"zz\r\nhello\r\n0\r\n\r\n"[..],
                b"3\r\nhello\r\n0\r\n\r\n",
                b"fffffffffffffffffffff\r\nx\r\n0\r\n\r\n",
                b"5\nhello\n0\n\n",
            ] {
                let mut req =
                    b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                        .to_vec();
                req.extend_from_slice(body);
                let r = raw(vip(80), &req).await;
                assert_eq!(
                    status_of(&r),
                    "400",
                    "{:?}: {r}",
                    String::from_utf8_lossy(body)
                );
            }
            let a = send(&client(false), "POST", &url(80, "/"), &[], "still fine")
                .await
                .expect("answer");
            assert_eq!(a.status, 200);
        });
        let (_, _, malformed, _) = proxy.connection_counts();
        assert!(
            malformed >= 1,
            "broken framing is counted as malformed: {malformed}"
        );
        proxy.shutdown();
    });
}

/// A proxy in front of one echo backend whose connections get `header_ms` for a
/// request head and an idle timeout far beyond it, so that a close shows which of the
/// two ended the connection.
fn header_timeout_proxy(
    rt: &tokio::runtime::Runtime,
    header_ms: u64,
) -> (lb_l7::proxy::Proxy, EchoBackend) {
    let ms = lb_model::config::DurationText::Millis;
    let config = L7Config {
        header_timeout: ms(header_ms),
        idle_timeout: ms(30_000),
        ..L7Config::default()
    };
    one_backend_proxy(rt, &config)
}

#[test]
fn silent_connections_close_at_the_header_timeout_not_the_idle_timeout() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let (proxy, _backend) = header_timeout_proxy(&rt, 300);
        rt.block_on(async {
            // Nothing at all; the first bytes of the HTTP/2 preface; the whole preface
            // and SETTINGS but no request.
            let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
            for sent in [&b""[..], b"P", b"PRI * HT", &preface[..]] {
                let mut s = tokio::net::TcpStream::connect(vip(80)).await.expect("connect");
                s.write_all(sent).await.expect("write");
                let started = std::time::Instant::now();
                let mut buf = vec![0u8; 1024];
                loop {
                    match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                        Ok(Ok(0) | Err(_)) => break,
                        Ok(Ok(_)) => continue,
                        Err(_) => panic!(
                            "a connection that sent {:?} and no request head is still open after 5 s",
                            String::from_utf8_lossy(sent)
                        ),
                    }
                }
                assert!(started.elapsed() >= Duration::from_millis(250), "closed at the timeout, not before");
            }
        });
        proxy.shutdown();
    });
}

/// A client whose head was refused and which keeps its connection open (it goes on
/// sending and never closes): the proxy reads and drops what it sends for a while (a
/// lingering close, so that the 4xx is not lost to a reset), and the head timer still
/// ends the connection, which counts as malformed once.
#[test]
fn a_refused_client_that_holds_on_is_closed_at_the_header_timeout_and_counted() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let (proxy, _backend) = header_timeout_proxy(&rt, 300);
        let (_, _, before, _) = proxy.connection_counts();
        rt.block_on(async {
            let mut s = tokio::net::TcpStream::connect(vip(80))
                .await
                .expect("connect");
            let started = std::time::Instant::now();
            s.write_all(b"GARBAGE\r\n\r\n").await.expect("write");
            // The answer, and the proxy's half of the close.
            let mut got = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
            assert!(matches!(read, Ok(Ok(_))), "{read:?}");
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 400"), "{text:?}");
            // The client goes on sending; the proxy reads it until the head timer ends
            // the connection, and then a write fails.
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if s.write_all(b"y").await.is_err() {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "still taking bytes after 5 s"
                );
            }
            assert!(
                started.elapsed() >= Duration::from_millis(250),
                "read on until the head timer: {:?}",
                started.elapsed()
            );
            // Counted as the connection ended, while this client still holds its end.
            let (_, _, after, _) = proxy.connection_counts();
            assert_eq!(after, before + 1, "one malformed head");
        });
        proxy.shutdown();
    });
}

/// After a response, a keep-alive HTTP/1.1 connection has `header_timeout` for its
/// next head, counted from the end of that response: one that sends nothing, or only
/// part of a head, is closed then (not at the idle timeout, and not counted as an
/// idle close), while one whose next request comes within it is served.
#[test]
fn later_heads_get_the_header_timeout_from_the_previous_response() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let (proxy, _backend) = header_timeout_proxy(&rt, 400);
        rt.block_on(async {
            let request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
            // Reads one whole response (this backend's have a Content-Length).
            async fn response(s: &mut tokio::net::TcpStream) {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = s.read(&mut buf).await.expect("read");
                    assert!(n > 0, "closed before a whole response");
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length: usize = text
                            .split("content-length: ")
                            .nth(1)
                            .and_then(|l| l.split("\r\n").next())
                            .and_then(|l| l.parse().ok())
                            .expect("a content-length");
                        if got.len() >= end + 4 + length {
                            assert!(text.starts_with("http/1.1 200"), "{text}");
                            return;
                        }
                    }
                }
            }
            for next in [&b""[..], b"GET / HT"] {
                let mut s = tokio::net::TcpStream::connect(vip(80))
                    .await
                    .expect("connect");
                // Requests within the timeout of each other are all served.
                for _ in 0..3 {
                    s.write_all(request).await.expect("write");
                    response(&mut s).await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                s.write_all(next).await.expect("write");
                let started = std::time::Instant::now();
                let mut buf = [0u8; 256];
                let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                    .await
                    .expect("closed within 5 s, long before the idle timeout")
                    .unwrap_or(0);
                assert_eq!(n, 0, "closed without an answer");
                // 400 ms from the last response, 200 of which passed before `started`.
                assert!(
                    started.elapsed() >= Duration::from_millis(150),
                    "not before the timeout"
                );
            }
        });
        let (_, _, _, idle_closed) = proxy.connection_counts();
        assert_eq!(idle_closed, 0, "a head timeout is no idle close");
        proxy.shutdown();
    });
}

#[test]
fn forwarded_for_counts_only_from_trusted_proxies() {
    lb_testbed::needs_root!();
    let dir = lb_testbed::lbd::TempDir::new("l7trust");
    let file = dir.path().join("routes.eskip");
    let file_text = file.display().to_string();
    namespace().run(move || {
        let rt = runtime();
        let backends: Vec<EchoBackend> = (0..4)
            .map(|i| rt.block_on(EchoBackend::start(backend_addr(i, 80), &format!("b{i}"))))
            .collect();
        let urls: Vec<String> = backends
            .iter()
            .map(|b| format!("\"http://{}\"", b.addr))
            .collect();
        let routes = format!("api: * -> <consistentHash, {}>;\n", urls.join(", "));
        std::fs::write(&file_text, &routes).expect("routes file");
        // The endpoint `lbctl routes` predicts for a client address.
        let predict = |client: &str| -> String {
            let out = std::process::Command::new(lb_testbed::lbd::lbctl_binary())
                .args(["routes", &file_text, "/", "--client", client, "-o", "json"])
                .output()
                .expect("lbctl runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            v["pick"].as_str().expect("a pick").to_owned()
        };
        let (trusted, untrusted) = (client_addr(0), client_addr(1));
        // A forwarded-for address whose endpoint differs from both peers' own.
        let forwarded = (1..200)
            .map(|i| format!("198.19.{}.{}", i / 250, i % 250 + 1))
            .find(|f| {
                let p = predict(f);
                p != predict(&trusted.to_string()) && p != predict(&untrusted.to_string())
            })
            .expect("some address hashes elsewhere");
        let served_by = |a: &lb_testbed::http::Answer| -> String {
            let i: usize = a
                .backend()
                .trim_start_matches('b')
                .parse()
                .expect("an echo backend's name");
            backends[i].addr.to_string()
        };
        for phase in ["default", "trusted"] {
            let log_path = dir.path().join(format!("{phase}.log"));
            let settings = AccessLogConfig {
                file: log_path.display().to_string(),
                ..AccessLogConfig::default()
            };
            let config: L7Config = if phase == "default" {
                L7Config::default()
            } else {
                toml::from_str(&format!(
                    "trusted_proxies = [\"{trusted}/32\", \"2001:db8::/32\"]"
                ))
                .expect("config")
            };
            let mut proxy = proxy_with(&config, Some(AccessLog::open(settings).expect("log")));
            assert!(
                proxy
                    .apply(&[service("svc", 80, Some(&routes), vec![])])
                    .is_empty()
            );
            for peer in [trusted, untrusted] {
                let a = rt
                    .block_on(send(
                        &client_from(false, peer),
                        "GET",
                        &url(80, "/"),
                        &[("X-Forwarded-For", &forwarded)],
                        "",
                    ))
                    .expect("answer");
                assert_eq!(a.status, 200);
                let believed = phase == "trusted" && peer == trusted;
                let expected = if believed {
                    predict(&forwarded)
                } else {
                    predict(&peer.to_string())
                };
                assert_eq!(
                    served_by(&a),
                    expected,
                    "{phase}: peer {peer} hashed by {}",
                    if believed {
                        "its X-Forwarded-For"
                    } else {
                        "its own address"
                    }
                );
                assert!(
                    a.body
                        .contains(&format!("x-forwarded-for: {forwarded}, {peer}\n")),
                    "the header is still forwarded: {}",
                    a.body
                );
            }
            proxy.shutdown();
            let text = std::fs::read_to_string(&log_path).expect("log written");
            let hosts: Vec<&str> = text
                .lines()
                .map(|l| l.split(" - ").next().unwrap_or(""))
                .collect();
            let want: Vec<String> = if phase == "trusted" {
                vec![forwarded.clone(), untrusted.to_string()]
            } else {
                vec![trusted.to_string(), untrusted.to_string()]
            };
            assert_eq!(hosts, want, "{phase}: access-log hosts\n{text}");
        }
    });
}

#[test]
fn a_full_proxy_closes_the_oldest_silent_connection_to_let_a_client_in() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let config = L7Config {
            max_connections: 3,
            ..L7Config::default()
        };
        let (proxy, _backend) = one_backend_proxy(&rt, &config);
        rt.block_on(async {
            let mut silent = Vec::new();
            for _ in 0..3 {
                silent.push(
                    tokio::net::TcpStream::connect(vip(80))
                        .await
                        .expect("connect"),
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let a = send(&client(false), "GET", &url(80, "/"), &[], "")
                .await
                .expect("let in");
            assert_eq!(a.status, 200);
            // The oldest silent connection made room; the others are still open.
            let mut buf = [0u8; 16];
            let n = tokio::time::timeout(Duration::from_secs(5), silent[0].read(&mut buf))
                .await
                .expect("the oldest was closed")
                .unwrap_or(0);
            assert_eq!(n, 0);
            for s in &mut silent[1..] {
                assert!(
                    tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf))
                        .await
                        .is_err(),
                    "younger silent connections stay"
                );
            }
        });
        assert_eq!(proxy.evicted(), 1);
        proxy.shutdown();
    });
}

#[test]
fn connect_through_a_route_that_allows_it_is_a_tunnel() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let tunnel = rt.block_on(lb_testbed::http::TunnelBackend::start(backend_addr(
            1, 3128,
        )));
        let echo = rt.block_on(EchoBackend::start(backend_addr(0, 80), "b"));
        let routes = format!(
            r#"tunnel: Method("CONNECT") -> "http://{}";
               all: * -> "http://{}";"#,
            tunnel.addr, echo.addr
        );
        let mut proxy = proxy_with(&L7Config::default(), None);
        assert!(
            proxy
                .apply(&[service("svc", 80, Some(&routes), vec![])])
                .is_empty()
        );
        rt.block_on(async {
            let mut s = tokio::net::TcpStream::connect(vip(80))
                .await
                .expect("connect");
            s.write_all(b"CONNECT 198.18.0.99:443 HTTP/1.1\r\nHost: 198.18.0.99:443\r\n\r\n")
                .await
                .expect("write");
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            // The answer's head, then the tunnel's greeting and our echo.
            s.write_all(b"ping\n").await.expect("write");
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !String::from_utf8_lossy(&got).contains("ping\n") {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no echo through the tunnel: {:?}",
                    String::from_utf8_lossy(&got)
                );
                match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Err(_) => break,
                    Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                    Ok(Err(e)) => panic!("read: {e}"),
                }
            }
            let text = String::from_utf8_lossy(&got).into_owned();
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(
                text.ends_with("\r\n\r\ntarget 198.18.0.99:443\nping\n"),
                "{text}"
            );
        });
        proxy.shutdown();
    });
}
