//! `https://` backends: TLS from the proxy to real TLS servers with certificates of a
//! CA made for the test. What skipper (Go's transport) does is the reference: SNI is
//! the URL's host (none for an address), the Host is the endpoint's `host:port`
//! (`host:443` when the URL has no port), a certificate that does not verify is
//! answered 500 and not retried, a refused connect fails over as for http.

use std::sync::atomic::Ordering::Relaxed;

use lb_l7::proxy::{L7Config, Proxy};
use lb_testbed::{
    http::{EchoBackend, client, get},
    l7::{backend_addr, namespace, proxy_with, runtime, service, url},
    tls::{Ca, TlsBackend},
};

/// The names the test servers' certificates are valid for.
const NAMES: &[&str] = &[
    "DNS:localhost",
    "IP:127.0.0.1",
    "IP:198.18.0.11",
    "IP:198.18.0.12",
];

fn trusting(ca: &Ca) -> L7Config {
    L7Config {
        backend_ca_file: ca.cert_file().to_string_lossy().into_owned(),
        ..L7Config::default()
    }
}

fn start(config: &L7Config, routes: &str) -> Proxy {
    let mut proxy = proxy_with(config, None);
    let errors = proxy.apply(&[service("web", 88, Some(routes), vec![])]);
    assert!(errors.is_empty(), "{errors:?}");
    proxy
}

/// `(requests, failures)` of the endpoint `address` (`https://host:port`).
fn endpoint_counts(proxy: &Proxy, address: &str) -> (u64, u64) {
    proxy
        .registry()
        .snapshot()
        .into_iter()
        .find(|(a, ..)| a == address)
        .map_or((0, 0), |(_, _, requests, failures)| (requests, failures))
}

/// A request reaches an https backend over TLS: SNI is the URL's host (and no SNI
/// for an address, which the certificate's IP names verify), ALPN http/1.1, the
/// Host skipper sends (`host:port`, `host:443` without a port, the client's under
/// `preserveHost`, which leaves SNI alone), the path as requested; schemes and hosts
/// in any case, as skipper lower-cases them, for http too.
#[test]
fn https_backends_get_tls_with_the_urls_host_as_sni() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let ca = Ca::new("lb-test-ca");
        let id = ca.issue("server", NAMES);
        let (named, default_port, by_address, plain) = rt.block_on(async {
            (
                TlsBackend::start("127.0.0.1:8443".parse().expect("addr"), "named", &id).await,
                TlsBackend::start("127.0.0.1:443".parse().expect("addr"), "default", &id).await,
                TlsBackend::start(backend_addr(0, 443), "address", &id).await,
                EchoBackend::start(backend_addr(1, 80), "plain").await,
            )
        });
        let routes = format!(
            r#"named: Path("/named") -> "https://localhost:8443/ignored";
               upper: Path("/upper") -> "HTTPS://LocalHost:8443";
               default: Path("/default") -> "https://localhost";
               address: Path("/address") -> <roundRobin, "https://{}">;
               kept: Path("/kept") -> preserveHost("true") -> "https://localhost:8443";
               plain: Path("/plain") -> "HTTP://{}";"#,
            by_address.addr, plain.addr
        );
        let mut proxy = start(&trusting(&ca), &routes);
        rt.block_on(async {
            let c = client(false);
            for (path, backend, sni, host) in [
                ("/named", "named", "localhost", "localhost:8443"),
                ("/upper", "named", "localhost", "localhost:8443"),
                ("/default", "default", "localhost", "localhost:443"),
                ("/address", "address", "-", "198.18.0.11:443"),
                ("/kept", "named", "localhost", "198.18.0.1:88"),
            ] {
                let a = get(&c, &url(88, &format!("{path}?q=1")))
                    .await
                    .expect("answer");
                assert_eq!(a.status, 200, "{path}: {a:?}");
                assert_eq!(a.backend(), backend, "{path}");
                assert_eq!(a.header("x-sni"), sni, "{path}: SNI");
                assert_eq!(a.header("x-alpn"), "http/1.1", "{path}: ALPN");
                assert_eq!(a.header("x-host"), host, "{path}: Host");
                assert_eq!(a.header("x-target"), format!("{path}?q=1"), "{path}");
            }
            let a = get(&c, &url(88, "/plain")).await.expect("answer");
            assert_eq!((a.status, a.backend()), (200, "plain"), "{a:?}");
        });
        assert_eq!(named.served.load(Relaxed), 3);
        assert_eq!(default_port.served.load(Relaxed), 1);
        assert_eq!(by_address.served.load(Relaxed), 1);
        let stats = proxy.service("web").expect("running").stats();
        assert_eq!(stats.tls_failures.load(Relaxed), 0);
        assert_eq!(
            endpoint_counts(&proxy, "https://localhost:8443"),
            (3, 0),
            "an https endpoint is counted under its https address"
        );
        proxy.apply(&[]);
        proxy.shutdown();
    });
}

/// A certificate that does not verify — signed by a CA nobody trusts, or valid for
/// another name — gets skipper's answer for an error Go's TLS client returns (500,
/// the reason phrase as the body), is counted as a TLS failure and as its endpoint's
/// failure, and never reaches HTTP. `backend_ca_file` naming the CA makes it verify;
/// `backend_tls_insecure_skip_verify` takes any certificate.
#[test]
fn a_certificate_that_does_not_verify_is_answered_500_and_counted() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let private = Ca::new("private-ca");
        let id = private.issue("server", NAMES);
        let wrong_name = private.issue("other", &["DNS:other.example"]);
        let (backend, misnamed) = rt.block_on(async {
            (
                TlsBackend::start("127.0.0.1:8443".parse().expect("addr"), "b", &id).await,
                TlsBackend::start("127.0.0.1:9443".parse().expect("addr"), "m", &wrong_name)
                    .await,
            )
        });
        let routes = r#"r: Path("/") -> setResponseHeader("X-Filtered", "yes") -> "https://localhost:8443";
                        m: Path("/misnamed") -> "https://localhost:9443";"#;
        let check = |config: &L7Config, path: &str, want: u16| {
            let mut proxy = start(config, routes);
            let a = rt
                .block_on(get(&client(false), &url(88, path)))
                .expect("answer");
            assert_eq!(a.status, want, "{path} {config:?}: {a:?}");
            let tls_failures = proxy
                .service("web")
                .expect("running")
                .stats()
                .tls_failures
                .load(Relaxed);
            if want == 500 {
                assert_eq!(a.body, "Internal Server Error\n");
                assert_eq!(a.header("x-filtered"), "", "no response filter on a failure");
                assert_eq!(tls_failures, 1);
                let port = if path == "/" { 8443 } else { 9443 };
                assert_eq!(
                    endpoint_counts(&proxy, &format!("https://localhost:{port}")),
                    (1, 1),
                    "one attempt, failed: not retried"
                );
            } else {
                assert_eq!(a.header("x-sni"), "localhost");
                assert_eq!(tls_failures, 0);
            }
            proxy.apply(&[]);
            proxy.shutdown();
        };
        // The system's store only: the private CA is unknown.
        check(&L7Config::default(), "/", 500);
        assert_eq!(backend.served.load(Relaxed), 0, "no request over a refused TLS");
        assert!(backend.failed_handshakes.load(Relaxed) >= 1, "the handshake was tried");
        check(&trusting(&private), "/", 200);
        check(&trusting(&private), "/misnamed", 500);
        assert_eq!(misnamed.served.load(Relaxed), 0);
        let insecure = L7Config {
            backend_tls_insecure_skip_verify: true,
            ..L7Config::default()
        };
        check(&insecure, "/", 200);
        check(&insecure, "/misnamed", 200);
    });
}

/// Failover is as for http: a refused connect to an https endpoint goes on to the
/// next endpoint (counted as a retry); a handshake that fails is final, as in
/// skipper (its dialer marks only the TCP dial retryable), so round robin over a
/// good and an unverifiable endpoint answers every other request 500.
#[test]
fn https_failover_follows_the_http_rules() {
    lb_testbed::needs_root!();
    namespace().run(|| {
        let rt = runtime();
        let ca = Ca::new("lb-test-ca");
        let untrusted = Ca::new("untrusted-ca");
        let good_id = ca.issue("server", NAMES);
        let bad_id = untrusted.issue("server", NAMES);
        let (good, bad) = rt.block_on(async {
            (
                TlsBackend::start("127.0.0.1:8443".parse().expect("addr"), "good", &good_id).await,
                TlsBackend::start("127.0.0.1:9443".parse().expect("addr"), "bad", &bad_id).await,
            )
        });
        let routes = r#"dead: Path("/dead") -> <roundRobin, "https://localhost:1", "https://localhost:8443">;
                        bad: Path("/bad") -> <roundRobin, "https://localhost:9443", "https://localhost:8443">;"#;
        let mut proxy = start(&trusting(&ca), routes);
        let stats = || {
            let s = proxy.service("web").expect("running").stats();
            (s.retries.load(Relaxed), s.tls_failures.load(Relaxed))
        };
        rt.block_on(async {
            let c = client(false);
            for i in 0..6 {
                let a = get(&c, &url(88, "/dead")).await.expect("answer");
                assert_eq!((a.status, a.backend()), (200, "good"), "request {i}: {a:?}");
            }
        });
        let (retries, tls_failures) = stats();
        assert_eq!(retries, 3, "every other request first picked the dead endpoint");
        assert_eq!(tls_failures, 0, "a refused connect is no TLS failure");
        let statuses: Vec<u16> = rt.block_on(async {
            let c = client(false);
            let mut out = Vec::new();
            for _ in 0..6 {
                out.push(get(&c, &url(88, "/bad")).await.expect("answer").status);
            }
            out
        });
        let failed = statuses.iter().filter(|&&s| s == 500).count();
        assert_eq!(failed, 3, "{statuses:?}");
        assert_eq!(statuses.len() - failed, 3, "the rest is 200: {statuses:?}");
        assert_eq!(stats(), (3, 3), "no retry after a failed handshake");
        assert_eq!(bad.served.load(Relaxed), 0);
        assert_eq!(good.served.load(Relaxed), 9);
        proxy.apply(&[]);
        proxy.shutdown();
    });
}

/// A CA file that cannot be read stops the proxy from starting, with the setting
/// and the file named.
#[test]
fn an_unreadable_ca_file_is_refused_with_its_name() {
    let limits = L7Config {
        backend_ca_file: "/nonexistent/ca.pem".into(),
        ..L7Config::default()
    }
    .limits()
    .expect("valid limits");
    let err = Proxy::start(limits, 1, None, false).expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("node.l7.backend_ca_file /nonexistent/ca.pem"),
        "{text}"
    );
}
