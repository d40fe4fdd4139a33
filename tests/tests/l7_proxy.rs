//! The L7 proxy with real HTTP clients and backends in a namespace of its own:
//! skipper's tutorial routes, failover retries, endpoint updates, route reloads under
//! load, limits against bad clients, h2c, the access log and graceful shutdown.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use lb_l7::{accesslog::AccessLog, accesslog::AccessLogConfig, proxy::L7Config};
use lb_testbed::{
    http::{EchoBackend, client, client_from, get, raw, send},
    l7::{
        VIP, backend_addr, client_addr, endpoint, namespace, one_backend_proxy, proxy_with,
        runtime, service, url, vip,
    },
};

#[test]
fn skipper_tutorial_routes_answer_as_in_skipper() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let b8080 = rt.block_on(EchoBackend::start(backend_addr(0, 8080), "b8080"));
        let b9998 = rt.block_on(EchoBackend::start(backend_addr(1, 9998), "b9998"));
        let b9997 = rt.block_on(EchoBackend::start(backend_addr(2, 9997), "b9997"));
        let r1 = format!(r#"r1: * -> setQuery("lang", "pt") -> "http://{}/";"#, b8080.addr);
        let r2 = r#"r2: * -> inlineContent("Hello world!") -> status(200) -> <shunt>;"#;
        let r3 = r#"r3: * -> redirectTo(308, "http://127.0.0.1:9999") -> <shunt>;"#;
        let r4 = r#"r4: Path("/a/base/") -> modPath("/a/base/", "/my/new/base/") -> redirectTo(308, "https://another-example.com") -> <shunt>;"#;
        let r5 = format!(r#"r5: * -> <roundRobin, "http://{}", "http://{}">;"#, b9998.addr, b9997.addr);
        let mut proxy = proxy_with(&L7Config::default(), None);
        let errors = proxy.apply(&[
            service("r1", 81, Some(&r1), vec![]),
            service("r2", 82, Some(r2), vec![]),
            service("r3", 83, Some(r3), vec![]),
            service("r4", 84, Some(r4), vec![]),
            service("r5", 85, Some(&r5), vec![]),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        rt.block_on(async {
            let c = client(false);
            let a = get(&c, &url(81, "/x?b=2&a=1")).await.expect("r1");
            assert_eq!((a.status, a.backend()), (200, "b8080"));
            assert!(a.body.contains("GET /x?a=1&b=2&lang=pt\n"), "backend saw {}", a.body);
            let a = get(&c, &url(81, "/")).await.expect("r1");
            assert!(a.body.contains("GET /?lang=pt\n"), "{}", a.body);

            let a = get(&c, &url(82, "/anything")).await.expect("r2");
            assert_eq!((a.status, a.body.as_str()), (200, "Hello world!"));
            assert_eq!(a.header("content-type"), "text/plain; charset=utf-8");
            assert_eq!(a.header("content-length"), "12");

            let a = get(&c, &url(83, "/some/path?x=1")).await.expect("r3");
            assert_eq!((a.status, a.header("location")), (308, "http://127.0.0.1:9999/some/path?x=1"));
            let a = get(&c, &url(84, "/a/base/")).await.expect("r4");
            assert_eq!((a.status, a.header("location")), (308, "https://another-example.com/my/new/base/"));
            let a = get(&c, &url(84, "/a/base/?keep=1")).await.expect("r4");
            assert_eq!(a.header("location"), "https://another-example.com/my/new/base/?keep=1");
            let a = get(&c, &url(84, "/other")).await.expect("r4");
            assert_eq!(a.status, 404, "no route matches");

            let mut seen = Vec::new();
            for _ in 0..10 {
                seen.push(get(&c, &url(85, "/")).await.expect("r5").backend().to_owned());
            }
            for pair in seen.windows(2) {
                assert_ne!(pair[0], pair[1], "round robin alternates: {seen:?}");
            }
        });
        proxy.shutdown();
    });
}

#[test]
fn forwarding_headers_and_http2() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let b = rt.block_on(EchoBackend::start(backend_addr(0, 80), "b0"));
        let mut proxy = proxy_with(&L7Config::default(), None);
        let routes = format!(r#"r: * -> setRequestHeader("X-Added", "yes") -> setResponseHeader("X-Via", "lbd") -> "http://{}";"#, b.addr);
        assert!(proxy.apply(&[service("web", 80, Some(&routes), vec![])]).is_empty());
        rt.block_on(async {
            let a = send(&client(false), "GET", &url(80, "/h"), &[("X-Forwarded-For", "198.18.5.5"), ("Connection", "X-Secret"), ("X-Secret", "s")], "")
                .await
                .expect("h1");
            assert_eq!(a.status, 200);
            assert!(a.body.contains(&format!("x-forwarded-for: 198.18.5.5, {VIP}\n")), "{}", a.body);
            assert!(a.body.contains("x-forwarded-proto: http\n"), "{}", a.body);
            assert!(a.body.contains("x-added: yes\n"));
            assert!(a.body.contains(&format!("host: {}\n", b.addr)), "the backend's own Host, as skipper sends: {}", a.body);
            assert!(!a.body.contains("x-secret"), "a Connection-listed header is hop-by-hop");
            assert_eq!(a.header("x-via"), "lbd");
            let a = send(&client(true), "POST", &url(80, "/h2"), &[], "payload").await.expect("h2c");
            assert_eq!(a.status, 200);
            assert!(a.body.contains("POST /h2\n") && a.body.contains("body: payload\n"), "{}", a.body);
            assert!(a.body.contains(&format!("host: {}\n", b.addr)), "h2 too: {}", a.body);
        });
        proxy.shutdown();
    });
}

#[test]
fn failover_retries_idempotent_requests_on_the_next_endpoint() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let live = rt.block_on(EchoBackend::start(backend_addr(0, 80), "live"));
        // Nothing listens on backend 1 and 2: connecting is refused.
        let dead = [backend_addr(1, 80), backend_addr(2, 80)];
        let routes = format!(
            r#"r: * -> <roundRobin, "http://{}", "http://{}", "http://{}">;"#,
            dead[0], dead[1], live.addr
        );
        let mut proxy = proxy_with(&L7Config::default(), None);
        assert!(
            proxy
                .apply(&[service("web", 80, Some(&routes), vec![])])
                .is_empty()
        );
        let state = Arc::clone(proxy.service("web").expect("running"));
        rt.block_on(async {
            let c = client(false);
            for i in 0..60 {
                let a = get(&c, &url(80, &format!("/{i}"))).await.expect("answer");
                assert_eq!(
                    (a.status, a.backend()),
                    (200, "live"),
                    "GET {i} failed over"
                );
            }
        });
        let retries = state
            .stats()
            .retries
            .load(std::sync::atomic::Ordering::Relaxed);
        // Round robin starts at dead[0] 20 times (2 retries) and dead[1] 20 times (1).
        assert_eq!(retries, 60, "each failed connect is one counted attempt");
        rt.block_on(async {
            let c = client(false);
            let (mut ok, mut bad) = (0, 0);
            for _ in 0..30 {
                let a = send(&c, "POST", &url(80, "/"), &[], "data")
                    .await
                    .expect("answer");
                match a.status {
                    200 => ok += 1,
                    502 => bad += 1,
                    s => panic!("unexpected {s}"),
                }
            }
            assert_eq!((ok, bad), (10, 20), "a request with a body is not repeated");
        });
        assert_eq!(
            state
                .stats()
                .retries
                .load(std::sync::atomic::Ordering::Relaxed),
            60
        );
        proxy.shutdown();
    });
}

#[test]
fn service_endpoint_updates_and_route_reloads_under_load_fail_no_request() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let a = rt.block_on(EchoBackend::start(backend_addr(0, 80), "a"));
        let b = rt.block_on(EchoBackend::start(backend_addr(1, 80), "b"));
        let mut proxy = proxy_with(&L7Config::default(), None);
        let both = vec![endpoint(a.addr, 1), endpoint(b.addr, 1)];
        assert!(
            proxy
                .apply(&[service("svc", 80, None, both.clone())])
                .is_empty()
        );
        let count = |n: usize| {
            rt.block_on(async {
                let c = client(false);
                let mut by = std::collections::BTreeMap::<String, usize>::new();
                for _ in 0..n {
                    let r = get(&c, &url(80, "/")).await.expect("answer");
                    assert_eq!(r.status, 200);
                    *by.entry(r.backend().to_owned()).or_default() += 1;
                }
                by
            })
        };
        let by = count(40);
        assert_eq!(
            (by["a"], by["b"]),
            (20, 20),
            "the default route balances the service's endpoints"
        );
        // Health says b is down: weight 0.
        assert!(
            proxy
                .apply(&[service(
                    "svc",
                    80,
                    None,
                    vec![endpoint(a.addr, 1), endpoint(b.addr, 0)]
                )])
                .is_empty()
        );
        assert_eq!(
            count(20).get("b"),
            None,
            "an unhealthy endpoint gets no requests"
        );
        assert!(
            proxy
                .apply(&[service("svc", 80, None, both.clone())])
                .is_empty()
        );

        // Route reloads while 4 clients send 300 requests each.
        let routes_a = r#"r: * -> setResponseHeader("X-Version", "1") -> <roundRobin>;"#;
        let routes_b = r#"r: * -> setResponseHeader("X-Version", "2") -> <leastConnections>;
                         s: Path("/only-b") -> status(204) -> <shunt>;"#;
        let load = rt.spawn(async {
            let mut tasks = Vec::new();
            for _ in 0..4 {
                tasks.push(tokio::spawn(async {
                    let c = client(false);
                    let mut versions = std::collections::BTreeSet::new();
                    for _ in 0..300 {
                        let r = get(&c, &url(80, "/"))
                            .await
                            .expect("no failed request during reloads");
                        assert_eq!(r.status, 200, "{r:?}");
                        versions.insert(r.header("x-version").to_owned());
                    }
                    versions
                }));
            }
            let mut all = std::collections::BTreeSet::new();
            for t in tasks {
                all.extend(t.await.expect("client task"));
            }
            all
        });
        let mut flips = 0;
        while !load.is_finished() {
            let text = if flips % 2 == 0 { routes_a } else { routes_b };
            assert!(
                proxy
                    .apply(&[service("svc", 80, Some(text), both.clone())])
                    .is_empty()
            );
            flips += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        let versions = rt.block_on(load).expect("load");
        assert!(flips > 4, "reloaded {flips} times");
        assert!(
            versions.contains("1") && versions.contains("2"),
            "both tables served: {versions:?}"
        );
        // A broken route text keeps the running routes.
        let errors = proxy.apply(&[service(
            "svc",
            80,
            Some("r: * -> nope() -> <shunt>;"),
            both.clone(),
        )]);
        assert_eq!(errors.len(), 1);
        let msg = errors[0].to_string();
        assert!(
            msg.contains("line 1, column 9: route r: nope: unknown filter `nope`")
                && msg.contains("keeping the previous routes"),
            "{msg}"
        );
        assert_eq!(count(4).values().sum::<usize>(), 4, "still serving");
        proxy.shutdown();
    });
}

/// The default limit of 100 fields is the proxy's own, as hyper's was and as
/// `max_headers`' doc says: a head of 100 fields is answered, one of 101 gets 431.
/// The route answers itself, so no backend's limit is in play (through a backend a
/// head of 100 fields also carries the X-Forwarded-* fields the proxy adds, and this
/// test once saw the echo backend's 431 and took it for the proxy's).
#[test]
fn the_default_header_count_limit_is_100() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let mut proxy = proxy_with(&L7Config::default(), None);
        let routes = r#"ok: * -> inlineContent("fields") -> <shunt>;"#;
        let errors = proxy.apply(&[service("svc", 80, Some(routes), vec![])]);
        assert!(errors.is_empty(), "{errors:?}");
        rt.block_on(async {
            for (fields, status) in [(100, "HTTP/1.1 200"), (101, "HTTP/1.1 431")] {
                let mut head = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
                for i in 1..fields - 1 {
                    head.push_str(&format!("X-H{i}: v\r\n"));
                }
                // Host and Connection are fields too.
                head.push_str("Connection: close\r\n\r\n");
                let r = raw(vip(80), head.as_bytes()).await;
                assert!(r.starts_with(status), "{fields} fields: {r:?}");
                if status.ends_with("200") {
                    assert!(r.ends_with("fields"), "{r:?}");
                }
            }
        });
        proxy.shutdown();
    });
}

#[test]
fn bad_clients_get_4xx_and_idle_connections_close() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let config = L7Config {
            max_headers: 20,
            idle_timeout: lb_model::config::DurationText::Millis(300),
            ..L7Config::default()
        };
        let (proxy, _backend) = one_backend_proxy(&rt, &config);
        let vip: SocketAddr = format!("{VIP}:80").parse().expect("addr");
        rt.block_on(async {
            let huge = format!(
                "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "a".repeat(70_000)
            );
            let r = raw(vip, huge.as_bytes()).await;
            assert!(r.starts_with("HTTP/1.1 431"), "oversized head: {r:?}");
            let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
            for i in 0..30 {
                many.push_str(&format!("X-H{i}: v\r\n"));
            }
            many.push_str("\r\n");
            let r = raw(vip, many.as_bytes()).await;
            assert!(r.starts_with("HTTP/1.1 431"), "too many headers: {r:?}");
            for junk in [
                &b"GARBAGE\r\n\r\n"[..],
                b"GET / HTTP/9.9\r\n\r\n",
                b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            ] {
                let r = raw(vip, junk).await;
                assert!(r.starts_with("HTTP/1.1 400"), "{junk:?} got {r:?}");
            }
            // Idle: a keep-alive connection with no request is closed after 300 ms.
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(vip).await.expect("connect");
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .expect("write");
            let started = std::time::Instant::now();
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            loop {
                match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                    Ok(Ok(0)) => break,
                    Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                    Ok(Err(e)) => panic!("read: {e}"),
                    Err(_) => panic!("idle connection not closed within 5 s"),
                }
            }
            assert!(
                String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
                "the request was answered first"
            );
            assert!(
                started.elapsed() >= Duration::from_millis(250),
                "closed only once idle"
            );
            // Still serving after all that.
            assert_eq!(
                get(&client(false), &url(80, "/")).await.expect("ok").status,
                200
            );
        });
        let (_, _, malformed, idle) = proxy.connection_counts();
        assert!(malformed >= 6, "malformed requests counted: {malformed}");
        assert!(idle >= 1);
        proxy.shutdown();
    });
}

#[test]
fn access_log_lines_and_graceful_shutdown_drains_requests() {
    lb_testbed::needs_root!();
    let dir = lb_testbed::lbd::TempDir::new("l7log");
    let path = dir.path().join("access.log");
    let log_path = path.clone();
    namespace().run(move || {
        let rt = runtime();
        let b = rt.block_on(EchoBackend::start(backend_addr(0, 80), "b"));
        let settings = AccessLogConfig {
            file: log_path.display().to_string(),
            ..AccessLogConfig::default()
        };
        let mut proxy = proxy_with(
            &L7Config::default(),
            Some(AccessLog::open(settings).expect("opens")),
        );
        let routes = format!(
            r#"quiet: Path("/health") -> disableAccessLog(2) -> inlineContent("ok") -> <shunt>;
               masked: Path("/login") -> maskAccessLogQuery("token") -> "http://{0}";
               all: * -> "http://{0}";"#,
            b.addr
        );
        assert!(
            proxy
                .apply(&[service("svc", 80, Some(&routes), vec![])])
                .is_empty()
        );
        rt.block_on(async {
            let c = client(false);
            for _ in 0..5 {
                assert_eq!(get(&c, &url(80, "/health")).await.expect("ok").status, 200);
            }
            send(
                &c,
                "GET",
                &url(80, "/login?token=s3cret&u=1"),
                &[("User-Agent", "evil \"ua\""), ("X-Flow-Id", "F1")],
                "",
            )
            .await
            .expect("ok");
        });
        // A slow request in flight when the shutdown starts.
        let slow = rt.spawn(async move { get(&client(false), &url(80, "/slow/700")).await });
        std::thread::sleep(Duration::from_millis(200));
        proxy.shutdown();
        let answer = rt
            .block_on(slow)
            .expect("task")
            .expect("the in-flight request completed");
        assert_eq!(answer.status, 200);
    });
    let text = std::fs::read_to_string(&path).expect("log written");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "health checks are not logged; the slow request is:\n{text}"
    );
    let token = lb_l7::accesslog::mask_hash(b"s3cret");
    assert!(
        lines[0].starts_with(&format!("{VIP} - - [")),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains(&format!("\"GET /login?token={token}&u=1 HTTP/1.1\" 200 ")),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("\"evil \\x22ua\\x22\""), "{}", lines[0]);
    assert!(lines[0].ends_with(&format!(" {VIP} F1 -")), "{}", lines[0]);
    assert!(
        lines[1].contains("\"GET /slow/700 HTTP/1.1\" 200 "),
        "{}",
        lines[1]
    );
    let ms: u64 = lines[1]
        .split(' ')
        .rev()
        .nth(3)
        .and_then(|d| d.parse().ok())
        .expect("duration field");
    assert!(ms >= 700, "duration {ms} ms");
}

#[test]
fn slow_backends_get_504_slow_clients_are_cut_and_connections_are_capped() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let ms = lb_model::config::DurationText::Millis;
        let config = L7Config {
            request_timeout: ms(300),
            header_timeout: ms(300),
            max_connections: 3,
            ..L7Config::default()
        };
        let (proxy, _backend) = one_backend_proxy(&rt, &config);
        let vip: SocketAddr = format!("{VIP}:80").parse().expect("addr");
        rt.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let c = client(false);
            let slow = get(&c, &url(80, "/slow/1000")).await.expect("answer");
            assert_eq!(slow.status, 504, "a backend slower than request_timeout");
            assert_eq!(slow.body, "Gateway Timeout\n", "skipper's answer");
            assert_eq!(
                get(&c, &url(80, "/slow/10")).await.expect("answer").status,
                200
            );
            drop(c);

            // A client that never finishes its head is disconnected.
            let mut s = tokio::net::TcpStream::connect(vip).await.expect("connect");
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
                .await
                .expect("write");
            let mut buf = [0u8; 256];
            let started = std::time::Instant::now();
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("closed within 5 s")
                .unwrap_or(0);
            let got = String::from_utf8_lossy(&buf[..n]);
            assert!(n == 0 || got.starts_with("HTTP/1.1 408"), "{got:?}");
            assert!(started.elapsed() >= Duration::from_millis(250));

            // Three connections are allowed; a fourth is closed at once when all three
            // have sent a request (h2c ones, which stay open between requests; a
            // connection without a request would be closed to make room instead).
            let mut held = Vec::new();
            for _ in 0..3 {
                let c = client(true);
                assert_eq!(get(&c, &url(80, "/")).await.expect("answer").status, 200);
                held.push(c);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut extra = tokio::net::TcpStream::connect(vip).await.expect("connect");
            let _ = extra.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
            let n = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut buf))
                .await
                .expect("answered within 5 s")
                .unwrap_or(0);
            assert_eq!(n, 0, "over the limit: closed without an answer");
            drop(held);
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(
                get(&client(false), &url(80, "/"))
                    .await
                    .expect("answer")
                    .status,
                200,
                "room again"
            );
        });
        let (_, refused, _, _) = proxy.connection_counts();
        assert!(refused >= 1, "refused connections counted");
        let stats = proxy.service("svc").expect("running").stats();
        assert_eq!(
            stats
                .upstream_errors
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        proxy.shutdown();
    });
}

#[test]
fn lbctl_routes_explains_the_endpoint_the_proxy_then_uses() {
    lb_testbed::needs_root!();
    let dir = lb_testbed::lbd::TempDir::new("l7explain");
    let file = dir.path().join("routes.eskip");
    let file_text = file.display().to_string();
    namespace().run(move || {
        let rt = runtime();
        let backends: Vec<EchoBackend> = (0..3)
            .map(|i| rt.block_on(EchoBackend::start(backend_addr(i, 80), &format!("b{i}"))))
            .collect();
        let urls: Vec<String> = backends.iter().map(|b| format!("\"http://{}\"", b.addr)).collect();
        let routes = format!(
            "health: Path(\"/healthz\") -> inlineContent(\"ok\") -> <shunt>;\n\
             moved: Path(\"/moved\") -> redirectTo(302, \"/new\") -> <shunt>;\n\
             api: PathSubtree(\"/api\") -> consistentHashKey(\"${{request.header.X-User}}\") -> <consistentHash, {urls}>;\n\
             byclient: PathSubtree(\"/byclient\") -> <consistentHash, {urls}>;\n",
            urls = urls.join(", ")
        );
        std::fs::write(&file_text, &routes).expect("routes file");
        let proxy_peer = client_addr(8);
        let config: L7Config = toml::from_str(&format!("trusted_proxies = [\"{proxy_peer}/32\"]")).expect("config");
        let mut proxy = proxy_with(&config, None);
        assert!(proxy.apply(&[service("svc", 80, Some(&routes), vec![])]).is_empty());
        let mut hits = std::collections::BTreeSet::new();
        for user in 0..20 {
            let header = format!("X-User: user-{user}");
            let out = std::process::Command::new(lb_testbed::lbd::lbctl_binary())
                .args(["routes", &file_text, "/api/items", "-H", &header, "-o", "json"])
                .output()
                .expect("lbctl runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let explained: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            assert_eq!(explained["route"], "api");
            let predicted = explained["pick"].as_str().expect("a pick").to_owned();
            let answer = rt
                .block_on(send(&client(false), "GET", &url(80, "/api/items"), &[("X-User", &format!("user-{user}"))], ""))
                .expect("answer");
            let index: usize = answer.backend().trim_start_matches('b').parse().expect("an echo backend's name");
            let served_by = backends[index].addr.to_string();
            assert_eq!(predicted, served_by, "user-{user}");
            hits.insert(served_by);
        }
        assert!(hits.len() >= 2, "20 users spread over the endpoints: {hits:?}");
        // Without a key the client is the key: behind a trusted proxy, the first
        // X-Forwarded-For address (lbctl used to hash the peer instead).
        let mut hits = std::collections::BTreeSet::new();
        let via_proxy = client_from(false, proxy_peer);
        for user in 0..20 {
            let xff = format!("198.18.1.{user}");
            let header = format!("X-Forwarded-For: {xff}");
            let peer = proxy_peer.to_string();
            let out = std::process::Command::new(lb_testbed::lbd::lbctl_binary())
                .args(["routes", &file_text, "/byclient", "-H", &header, "--client", &peer, "--trusted", "-o", "json"])
                .output()
                .expect("lbctl runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let explained: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            let predicted = explained["pick"].as_str().expect("a pick").to_owned();
            let answer = rt
                .block_on(send(&via_proxy, "GET", &url(80, "/byclient"), &[("X-Forwarded-For", &xff)], ""))
                .expect("answer");
            let index: usize = answer.backend().trim_start_matches('b').parse().expect("an echo backend's name");
            let served_by = backends[index].addr.to_string();
            assert_eq!(predicted, served_by, "client {xff}");
            hits.insert(served_by);
        }
        assert!(hits.len() >= 2, "20 clients spread over the endpoints: {hits:?}");
        // A redirect without a scheme: lbctl explains the Location the proxy sends
        // (the client's Host names no default port).
        let host = VIP.to_owned();
        let out = std::process::Command::new(lb_testbed::lbd::lbctl_binary())
            .args(["routes", &file_text, "/moved?x=1", "--host", &host, "-o", "json"])
            .output()
            .expect("lbctl runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let explained: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let answer = rt
            .block_on(get(&client(false), &url(80, "/moved?x=1")))
            .expect("answer");
        let location = answer.headers.get("location").expect("a Location");
        assert_eq!(
            explained["answer"],
            format!("302 Found, Location: {}", location.to_str().expect("text")),
        );
        proxy.shutdown();
    });
}

/// A route text refused once and brought back after a good one is refused again: after
/// good → bad → good → bad edits the second bad text is reported like the first (it
/// used to pass as applied while the good routes kept serving), also when only the
/// endpoints change under it, and the good routes serve throughout.
#[test]
fn a_route_text_refused_before_is_refused_again_after_a_good_one() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let good = r#"ok: * -> inlineContent("good") -> <shunt>;"#;
        let other = r#"ok: * -> inlineContent("other") -> <shunt>;"#;
        let bad = r#"ok: * -> inlineContnt("bad") -> <shunt>;"#;
        let mut proxy = proxy_with(&L7Config::default(), None);
        let body = |rt: &tokio::runtime::Runtime| {
            rt.block_on(async {
                let c = client(false);
                get(&c, &url(86, "/")).await.expect("answer").body
            })
        };
        let routes_errors = |errors: &[lb_l7::proxy::ApplyError]| {
            errors
                .iter()
                .filter(|e| matches!(e, lb_l7::proxy::ApplyError::Routes { .. }))
                .count()
        };
        let endpoint_a = endpoint(backend_addr(0, 80), 1);
        let endpoint_b = endpoint(backend_addr(1, 80), 1);
        let steps: [(&str, Vec<_>, usize, &str); 6] = [
            (good, vec![], 0, "good"),
            (bad, vec![], 1, "good"),
            (good, vec![], 0, "good"),
            (bad, vec![], 1, "good"),
            // The same refused text while the endpoints change under it.
            (bad, vec![endpoint_a.clone()], 1, "good"),
            (other, vec![endpoint_b.clone()], 0, "other"),
        ];
        for (i, (text, endpoints, refused, serves)) in steps.into_iter().enumerate() {
            let errors = proxy.apply(&[service("svc", 86, Some(text), endpoints)]);
            assert_eq!(routes_errors(&errors), refused, "step {i}: {errors:?}");
            assert_eq!(body(&rt), serves, "step {i}");
        }
        proxy.shutdown();
    });
}

/// Templates, skipper's filter variants and backend URLs with a path, through the real
/// proxy to an echo backend: what the backend received, and what the client got.
/// (Values from skipper's template, header, query, stripQuery and path tests; the
/// unit-level ports are in lb-l7's `routes::template_tests`.)
#[test]
fn templates_and_filter_variants_reach_the_backend_as_in_skipper() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let b = rt.block_on(EchoBackend::start(backend_addr(0, 80), "b0"));
        let routes = format!(
            r#"
            params: Path("/users/:id/*rest") -> setRequestHeader("X-User", "${{id}}")
                -> setRequestHeader("X-Rest", "${{rest}}") -> setPath("/v2/${{id}}${{rest}}")
                -> "http://{b}/ignored/prefix";
            subtree: PathSubtree("/files") -> setRequestHeader("X-Tail", "${{*}}")
                -> appendRequestHeader("X-Q", "${{request.query.q}}")
                -> setResponseHeader("X-Seen", "${{request.header.X-In}}-${{response.header.X-Body-Bytes}}")
                -> "http://{b}";
            missing: Path("/missing") -> setRequestHeader("X-Never", "${{request.header.X-Absent}}")
                -> setPath("/got/${{request.header.X-Absent}}") -> setQuery("k", "${{nope}}") -> "http://{b}";
            strip: Path("/strip") -> stripQuery("true") -> "http://{b}";
            drop: Path("/drop") -> dropQuery("secret") -> dropRequestHeader("X-Drop") -> "http://{b}";
            raw: Path("/raw") -> setQuery("a=1&m=${{request.method}}") -> "http://{b}";
            cookie: Path("/cookie") -> setRequestHeader("X-Session", "${{request.cookie.session}}")
                -> setRequestHeader("X-Host", "${{request.host}} ${{request.path}}") -> "http://{b}";
            plain: Path("/plain") -> "http://{b}/some/path?x=1";
            seen: Path("/seen") -> setQuery("lang", "pt")
                -> setResponseHeader("X-Target", "${{request.path}} ${{request.rawQuery}}") -> "http://{b}";
            asked: Path("/asked") -> setResponseHeader("X-Target", "${{request.path}} ${{request.query.x}}")
                -> "http://{b}";
            "#,
            b = b.addr
        );
        let mut proxy = proxy_with(&L7Config::default(), None);
        let errors = proxy.apply(&[service("tmpl", 86, Some(&routes), vec![])]);
        assert!(errors.is_empty(), "{errors:?}");
        // (path, request headers, lines the backend must see, text it must not see)
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [&'a str], &'a [&'a str]);
        let cases: &[Case<'_>] = &[
            ("/users/42/a/b", &[], &["GET /v2/42/a/b\n", "x-user: 42\n", "x-rest: /a/b\n"], &["ignored"]),
            ("/users/a%20b/c", &[], &["GET /v2/a%20b/c\n", "x-user: a b\n"], &[]),
            ("/files", &[], &["GET /files\n", "x-tail: /\n"], &["x-q:"]),
            ("/files/a/b/?q=1", &[("X-Q", "0")], &["x-tail: /a/b/\n", "x-q: 0\n", "x-q: 1\n"], &[]),
            ("/missing", &[], &["GET /got/?k=\n"], &["x-never"]),
            ("/strip?bar=baz&a%20b=1&bar=qux", &[], &["GET /strip\n", "x-query-param-bar: baz\n", "x-query-param-ab: 1\n"], &["?"]),
            ("/drop?secret=1&b=2&a=3", &[("X-Drop", "x")], &["GET /drop?a=3&b=2\n"], &["x-drop", "secret"]),
            ("/raw?gone=1", &[], &["GET /raw?a=1&m=GET\n"], &["gone"]),
            ("/cookie", &[("Cookie", "a=1; session=abc")], &["x-session: abc\n", &format!("x-host: {VIP}:86 /cookie\n")], &[]),
            ("/cookie", &[], &[], &["x-session"]),
            ("/plain?y=2", &[], &["GET /plain?y=2\n"], &["some/path", "x=1"]),
        ];
        rt.block_on(async {
            let c = client(false);
            for (path, headers, want, not) in cases {
                let a = send(&c, "GET", &url(86, path), headers, "").await.expect(path);
                assert_eq!((a.status, a.backend()), (200, "b0"), "{path}");
                for w in *want {
                    assert!(a.body.contains(w), "{path}: the backend saw no {w:?}:\n{}", a.body);
                }
                for n in *not {
                    assert!(!a.body.contains(n), "{path}: the backend saw {n:?}:\n{}", a.body);
                }
            }
            // A response template reads the request (kept for it) and the response.
            let a = send(&c, "GET", &url(86, "/files/x"), &[("X-In", "in")], "").await.expect("files");
            assert_eq!(a.header("x-seen"), "in-0");
            let a = get(&c, &url(86, "/files/x")).await.expect("files");
            assert_eq!(a.header("x-seen"), "", "an unresolved placeholder sets no header");
            // Response templates see the request as its filters left it: the query a
            // filter set, and the path and query as received where none did.
            let a = get(&c, &url(86, "/seen?x=1")).await.expect("seen");
            assert!(a.body.contains("GET /seen?lang=pt&x=1\n"), "{}", a.body);
            assert_eq!(a.header("x-target"), "/seen lang=pt&x=1");
            let a = get(&c, &url(86, "/asked?x=7")).await.expect("asked");
            assert_eq!(a.header("x-target"), "/asked 7");
        });
        proxy.shutdown();
    });
}

/// The proxy's own answers as skipper's `makeErrorResponse` gives them: no route 404,
/// a backend that refuses the connection 502, a pool without endpoints 503; each the
/// status's reason phrase and a line feed, as text/plain with `nosniff`. And
/// `redirectTo`'s default scheme (`redirect.go`: https for a server request).
#[test]
fn no_route_and_backend_failures_get_skippers_answers() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        // Nothing listens on backend 1: connecting is refused.
        let routes = format!(
            r#"dead: Path("/dead") -> "http://{}";
               empty: Path("/empty") -> <roundRobin>;
               moved: Path("/moved") -> redirectTo(302, "/new") -> <shunt>;"#,
            backend_addr(1, 80)
        );
        let mut proxy = proxy_with(&L7Config::default(), None);
        let errors = proxy.apply(&[service("web", 87, Some(&routes), vec![])]);
        assert!(errors.is_empty(), "{errors:?}");
        rt.block_on(async {
            let c = client(false);
            for (path, status, body) in [
                ("/nothing-here", 404, "Not Found\n"),
                ("/dead", 502, "Bad Gateway\n"),
                ("/empty", 503, "Service Unavailable\n"),
            ] {
                let a = get(&c, &url(87, path)).await.expect("answer");
                assert_eq!((a.status, a.body.as_str()), (status, body), "{path}");
                assert_eq!(
                    a.headers.get("content-type").map(|v| v.as_bytes()),
                    Some(&b"text/plain; charset=utf-8"[..]),
                    "{path}"
                );
                assert_eq!(
                    a.headers
                        .get("x-content-type-options")
                        .map(|v| v.as_bytes()),
                    Some(&b"nosniff"[..]),
                    "{path}"
                );
            }
            // redirectTo without a scheme: skipper's server requests have none, so the
            // Location is https, with the request's host and query.
            let a = get(&c, &url(87, "/moved?x=1")).await.expect("answer");
            assert_eq!(a.status, 302);
            assert_eq!(
                a.headers.get("location").map(|v| v.as_bytes()),
                Some(format!("https://{VIP}:87/new?x=1").as_bytes()),
            );
        });
        proxy.shutdown();
    });
}

/// The Host a backend gets and skipper's header, flow-id and timeout filters, through
/// the real proxy to echo backends (values from skipper's `proxy.go` `mapRequest`,
/// `preservehost_test.go`, `mod_header_test.go`, `flowid/filter_test.go` and
/// `timeout_test.go` `TestTimeoutsFilterBackendTimeout`; the unit-level ports are in
/// lb-l7's `routes::filter_tests`).
#[test]
fn the_backend_gets_its_own_host_and_skippers_filters_as_in_skipper() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let b = rt.block_on(EchoBackend::start(backend_addr(0, 80), "b0"));
        let b1 = rt.block_on(EchoBackend::start(backend_addr(1, 80), "b1"));
        // Nothing listens on backend 2: connecting is refused and the next is tried.
        let dead = backend_addr(2, 80);
        let routes = format!(
            r#"
            default: Path("/default") -> "http://{b}";
            lb: Path("/lb") -> <roundRobin, "http://{dead}", "http://{b}", "http://{b1}">;
            keep: Path("/keep") -> preserveHost("true") -> "http://{b}";
            nokeep: Path("/nokeep") -> preserveHost("false") -> "http://{b}";
            set: Path("/set") -> setRequestHeader("Host", "custom.example") -> preserveHost("true") -> "http://{b}";
            drop: Path("/drop") -> dropRequestHeader("Host") -> preserveHost("true") -> "http://{b}";
            modhost: Path("/modhost") -> modRequestHeader("Host", "^198\\.18\\.0\\.1:(\\d+)$", "www.example:$1") -> "http://{b}";
            nomatch: Path("/nomatch") -> modRequestHeader("Host", "^zalando\\.de$", "zalando.com") -> "http://{b}";
            modhdr: Path("/modhdr") -> modRequestHeader("Accept-Language", "^nl-NL$", "en") -> "http://{b}";
            modresp: Path("/modresp") -> modResponseHeader("X-Body-Bytes", "^(\\d+)$", "n=$1")
                -> modResponseHeader("X-None", ".*", "x") -> "http://{b}";
            flow: Path("/flow") -> flowId() -> "http://{b}";
            reuse: Path("/reuse") -> flowId("reuse") -> "http://{b}";
            slow: PathSubtree("/slow") -> backendTimeout("300ms") -> "http://{b}";
            zero: Path("/zero") -> backendTimeout("0s") -> "http://{b}";
            "#,
            b = b.addr,
            b1 = b1.addr,
        );
        let mut proxy = proxy_with(&L7Config::default(), None);
        let errors = proxy.apply(&[service("hosts", 88, Some(&routes), vec![])]);
        assert!(errors.is_empty(), "{errors:?}");
        // The node's preserve_host: the client's Host unless a route says otherwise.
        let preserving = L7Config {
            preserve_host: true,
            ..L7Config::default()
        };
        let mut keeper = proxy_with(&preserving, None);
        let routes = format!(
            r#"all: * -> "http://{b}"; off: Path("/off") -> preserveHost("false") -> "http://{b}";"#,
            b = b.addr
        );
        let errors = keeper.apply(&[service("keeper", 89, Some(&routes), vec![])]);
        assert!(errors.is_empty(), "{errors:?}");
        let own = format!("host: {}\n", b.addr);
        let client_host = |port: u16| format!("host: {VIP}:{port}\n");
        // (port, path, request headers, lines the backend must see, text it must not see)
        type Case<'a> = (u16, &'a str, &'a [(&'a str, &'a str)], Vec<String>, &'a [&'a str]);
        let cases: Vec<Case<'_>> = vec![
            (88, "/default", &[], vec![own.clone()], &[]),
            (88, "/keep", &[], vec![client_host(88)], &[]),
            (88, "/nokeep", &[], vec![own.clone()], &[]),
            (88, "/set", &[], vec!["host: custom.example\n".into()], &[]),
            (88, "/drop", &[], vec![client_host(88)], &[]),
            (88, "/modhost", &[], vec!["host: www.example:88\n".into()], &[]),
            (88, "/nomatch", &[], vec![client_host(88)], &[]),
            (88, "/modhdr", &[("Accept-Language", "nl-NL")], vec!["accept-language: en\n".into()], &["nl-NL"]),
            (88, "/modhdr", &[("Accept-Language", "de")], vec!["accept-language: de\n".into()], &[]),
            (88, "/modhdr", &[], vec![], &["accept-language"]),
            (88, "/reuse", &[("X-Flow-Id", "FLOW-ID-FOR-TESTING")], vec!["x-flow-id: FLOW-ID-FOR-TESTING\n".into()], &[]),
            (88, "/reuse", &[("X-Flow-Id", "[<>] (o) [<>]")], vec!["x-flow-id: ".into()], &["[<>]"]),
            (88, "/flow", &[("X-Flow-Id", "FLOW-ID-FOR-TESTING")], vec!["x-flow-id: ".into()], &["FLOW-ID-FOR-TESTING"]),
            (88, "/slow/20", &[], vec![own.clone()], &[]),
            (89, "/", &[], vec![client_host(89)], &[]),
            (89, "/off", &[], vec![own.clone()], &[]),
        ];
        rt.block_on(async {
            let c = client(false);
            for (port, path, headers, want, not) in &cases {
                let a = send(&c, "GET", &url(*port, path), headers, "").await.expect(path);
                assert_eq!((a.status, a.backend()), (200, "b0"), "{port}{path}");
                for w in want {
                    assert!(a.body.contains(w.as_str()), "{port}{path}: the backend saw no {w:?}:\n{}", a.body);
                }
                for n in *not {
                    assert!(!a.body.contains(n), "{port}{path}: the backend saw {n:?}:\n{}", a.body);
                }
                if *path == "/flow" || *path == "/reuse" {
                    let ids: Vec<&str> = a.body.lines().filter_map(|l| l.strip_prefix("x-flow-id: ")).collect();
                    assert_eq!(ids.len(), 1, "{path}: one id: {ids:?}");
                    let valid = (8..=64).contains(&ids[0].len())
                        && ids[0].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-');
                    assert!(valid, "{path}: {:?} is a skipper flow id", ids[0]);
                }
            }
            // h2: the backend's own Host too, not the :authority.
            let a = send(&client(true), "GET", &url(88, "/default"), &[], "").await.expect("h2");
            assert!(a.body.contains(&own), "h2: {}", a.body);
            // A load-balanced route: each answer carries its own endpoint's Host, also
            // after a failed connect to the dead one.
            for _ in 0..6 {
                let a = get(&c, &url(88, "/lb")).await.expect("lb");
                assert_eq!(a.status, 200, "{}", a.body);
                let from = if a.backend() == "b0" { b.addr } else { b1.addr };
                assert!(a.body.contains(&format!("host: {from}\n")), "lb: {}", a.body);
            }
            // modResponseHeader rewrites a header the backend sent, adds none.
            let a = get(&c, &url(88, "/modresp")).await.expect("modresp");
            assert_eq!((a.header("x-body-bytes"), a.header("x-none")), ("n=0", ""));
            // backendTimeout: a zero one never asks; 504 once the backend takes longer.
            let served = b.served.load(std::sync::atomic::Ordering::Relaxed);
            let a = get(&c, &url(88, "/zero")).await.expect("zero");
            assert_eq!(a.status, 504);
            assert_eq!(b.served.load(std::sync::atomic::Ordering::Relaxed), served, "a zero timeout sends nothing");
            let a = get(&c, &url(88, "/slow/2000")).await.expect("slow");
            assert_eq!((a.status, a.body.as_str()), (504, "Gateway Timeout\n"));
        });
        proxy.shutdown();
        keeper.shutdown();
    });
}

/// The request predicates through the real proxy: routes keyed by a cookie, a query
/// parameter, the source (X-Forwarded-For from a trusted proxy only), the peer and the
/// time, each answering with its name (the unit-level ports of skipper's cases are in
/// lb-l7's `routes::predicate_tests`).
#[test]
fn cookie_query_source_and_time_predicates_pick_the_route() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let (proxy_peer, plain_peer) = (client_addr(0), client_addr(1));
        let routes = format!(
            r#"cookie: Cookie("flavour", /^choc$/) -> inlineContent("cookie") -> <shunt>;
               query: QueryParam("q", /^x/) -> inlineContent("query") -> <shunt>;
               source: Source("203.0.113.0/24") -> inlineContent("source") -> <shunt>;
               last: SourceFromLast("192.0.2.9") -> inlineContent("last") -> <shunt>;
               peer: ClientIP("{plain_peer}") -> inlineContent("peer") -> <shunt>;
               after: Path("/time") && After("2020-01-01T00:00:00Z") -> inlineContent("after") -> <shunt>;
               before: Path("/time") && Before(946684800) -> inlineContent("before") -> <shunt>;
               between: Path("/between") && Between("2020-01-01T00:00:00Z", "2999-01-01T00:00:00Z") -> inlineContent("between") -> <shunt>;
               gone: Path("/gone") && Between(1, 2) -> inlineContent("gone") -> <shunt>;
               none: * -> inlineContent("none") -> <shunt>;"#
        );
        let config: L7Config = toml::from_str(&format!("trusted_proxies = [\"{proxy_peer}/32\"]")).expect("config");
        let mut proxy = proxy_with(&config, None);
        let errors = proxy.apply(&[service("web", 88, Some(&routes), vec![])]);
        assert!(errors.is_empty(), "{errors:?}");
        rt.block_on(async {
            let (c, from_proxy, from_plain) = (client(false), client_from(false, proxy_peer), client_from(false, plain_peer));
            for (what, c, path, headers, want) in [
                ("cookie", &c, "/", &[("Cookie", "a=1; flavour=choc")][..], "cookie"),
                ("other cookie value", &c, "/", &[("Cookie", "flavour=vanilla")][..], "none"),
                ("query", &c, "/?q=xyz", &[][..], "query"),
                ("query, no match", &c, "/?q=abc&x=1", &[][..], "none"),
                ("source from a trusted proxy", &from_proxy, "/", &[("X-Forwarded-For", "203.0.113.7, 198.51.100.1")][..], "source"),
                ("source, last entry", &from_proxy, "/", &[("X-Forwarded-For", "198.51.100.1, 192.0.2.9")][..], "last"),
                ("source from an untrusted peer: the peer", &from_plain, "/", &[("X-Forwarded-For", "203.0.113.7")][..], "peer"),
                ("client ip", &from_plain, "/", &[][..], "peer"),
                ("after", &c, "/time", &[][..], "after"),
                ("between", &c, "/between", &[][..], "between"),
                ("interval over", &c, "/gone", &[][..], "none"),
            ] {
                let a = send(c, "GET", &url(88, path), headers, "").await.expect(what);
                assert_eq!((a.status, a.body.as_str()), (200, want), "{what}");
            }
        });
        proxy.shutdown();
    });
}
