use std::time::SystemTime;

use http::{HeaderMap, Method, StatusCode};

use super::{filter::on_request, predicate::RequestView, *};

pub(super) fn parse(text: &str) -> Result<RouteTable, RoutesError> {
    let registry = Registry::default();
    let cx = Context {
        registry: &registry,
        service_endpoints: &[],
        previous: None,
        now: SystemTime::now(),
    };
    RouteTable::parse(text, &cx)
}

pub(super) fn table(text: &str) -> RouteTable {
    parse(text).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn error(text: &str) -> String {
    parse(text).expect_err(text).to_string()
}

fn route_for<'t>(
    t: &'t RouteTable,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Option<&'t str> {
    t.find(&RequestView::new(method, path, "example.org", headers))
        .map(|r| r.id.as_str())
}

#[test]
fn the_tree_then_the_predicate_count_then_file_order() {
    let t = table(
        r#"
        all: * -> <shunt>;
        api: PathSubtree("/api") -> <shunt>;
        apiPost: PathSubtree("/api") && Method("POST") -> <shunt>;
        user: Path("/api/users/:id") -> <shunt>;
        exact: Path("/api/users/me") -> <shunt>;
        rest: Path("/files/*path") -> <shunt>;
        heavy: PathRegexp(/^\/x/) && Weight(5) -> <shunt>;
        light: PathRegexp(/^\/x/) && Header("X-A", "1") -> <shunt>;
        tie1: Host(/^t\./) -> <shunt>;
        tie2: Host(/^t\./) -> <shunt>;
        off: False() -> <shunt>;
    "#,
    );
    let h = HeaderMap::new();
    let mut xa = HeaderMap::new();
    xa.insert("x-a", http::HeaderValue::from_static("1"));
    let get = Method::GET;
    assert_eq!(route_for(&t, &get, "/api/users/me", &h), Some("exact"));
    assert_eq!(route_for(&t, &get, "/api/users/42", &h), Some("user"));
    assert_eq!(
        route_for(&t, &get, "/api/users/", &h),
        Some("api"),
        ":id needs a non-empty segment"
    );
    assert_eq!(route_for(&t, &get, "/api/users/42/x", &h), Some("api"));
    assert_eq!(
        route_for(&t, &Method::POST, "/api/orders", &h),
        Some("apiPost")
    );
    assert_eq!(route_for(&t, &get, "/api", &h), Some("api"));
    assert_eq!(
        route_for(&t, &get, "/apis", &h),
        Some("all"),
        "a subtree ends at a segment"
    );
    assert_eq!(
        route_for(&t, &get, "/files/", &h),
        Some("all"),
        "a *tail needs a character after its slash (skipper's TestCatchallWildcardMatch)"
    );
    assert_eq!(route_for(&t, &get, "/files/a/b/c", &h), Some("rest"));
    assert_eq!(
        route_for(&t, &get, "/x1", &xa),
        Some("heavy"),
        "Weight(5) beats one more predicate"
    );
    let tt = t
        .find(&RequestView::new(&get, "/q", "t.example", &h))
        .map(|r| r.id.as_str());
    assert_eq!(tt, Some("tie1"), "file order breaks ties");
}

#[test]
fn compile_errors_name_route_position_and_problem() {
    let cases: &[(&str, &str)] = &[
        (
            "r: Foo() -> <shunt>;",
            "line 1, column 4: route r: Foo: unknown predicate `Foo`",
        ),
        (
            "r: * -> bar() -> <shunt>;",
            "line 1, column 9: route r: bar: unknown filter `bar`",
        ),
        (
            "r: * ->\n  status(\"x\") -> <shunt>;",
            "line 2, column 3: route r: status: argument 1 must be a number, not a string",
        ),
        (
            "r: * -> status(700) -> <shunt>;",
            "line 1, column 9: route r: status: 700 is not an HTTP status (100-599)",
        ),
        (
            "r: PathRegexp(/(/) -> <shunt>;",
            "line 1, column 4: route r: PathRegexp: argument 1: bad regexp",
        ),
        (
            "r: * -> <fastest, \"http://a:1\">;",
            "line 1, column 9: route r: unknown algorithm `fastest`",
        ),
        (
            "r: * -> \"ftp://a:1\";",
            "line 1, column 9: route r: \"ftp://a:1\": the scheme \"ftp\" is not supported (http or https)",
        ),
        (
            "r: Method(\"CONNECT\") -> \"https://a:1\";",
            "CONNECT is not tunnelled to https backends",
        ),
        (
            "r: * -> redirectTo(200) -> <shunt>;",
            "200 OK is not a redirect status (3xx)",
        ),
        (
            "r: * -> <shunt>;\nr: * -> <shunt>;",
            "line 2, column 1: route r: duplicate route id",
        ),
        (
            "r: Path(\"/a:b\") -> <shunt>;",
            "`:` and `*` may only start a segment",
        ),
        (
            "r: Path(\"/a/*b/c\") -> <shunt>;",
            "wildcard must be the last segment",
        ),
        (
            "r: Methods(\"get\", \"PURGE\") -> <shunt>;",
            "line 1, column 4: route r: Methods: method PURGE is not allowed",
        ),
        (
            "r: * -> redirectTo(302, \":x\") -> <shunt>;",
            "missing protocol scheme",
        ),
        (
            "r: * -> fadeIn(\"3 fortnights\") -> <shunt>;",
            "line 1, column 9: route r: fadeIn:",
        ),
    ];
    for (text, want) in cases {
        let got = error(text);
        assert!(
            got.contains(want),
            "{text:?}: {got:?} does not contain {want:?}"
        );
    }
}

/// Runs the request filters of the first route of `text` on a request for `path`
/// and `query`: the exchange holds what they set (`None`: left as received).
fn run(text: &str, path: &str, query: &str) -> Exchange {
    let t = table(text);
    let route = &t.routes()[0];
    let mut ex = Exchange::default();
    let headers = HeaderMap::new();
    let req = RequestInfo {
        path,
        query,
        ..info(&headers, path)
    };
    on_request(&route.filters, &mut ex, &req);
    ex
}

/// A request from 198.18.0.1 to `lb.example:8080` (origin-form, so the scheme a
/// redirect defaults to is skipper's `https`), for the routing path as sent, without
/// a query.
pub(super) fn info<'a>(headers: &'a HeaderMap, routing_path: &'a str) -> RequestInfo<'a> {
    RequestInfo {
        method: "GET",
        scheme: "https",
        host: "lb.example:8080",
        headers,
        path: routing_path,
        query: "",
        routing_path,
        peer: std::net::IpAddr::from([198, 18, 0, 1]),
        trusted: true,
    }
}

fn location(ex: &Exchange) -> (u16, &str) {
    match &ex.served {
        Some(Served::Redirect { status, location }) => (status.as_u16(), location.as_str()),
        other => panic!("not a redirect: {other:?}"),
    }
}

#[test]
fn redirects_keep_or_replace_path_and_query_like_skipper() {
    let r3 = r#"r3: * -> redirectTo(308, "http://127.0.0.1:9999") -> <shunt>;"#;
    assert_eq!(
        location(&run(r3, "/a/b", "x=1")),
        (308, "http://127.0.0.1:9999/a/b?x=1")
    );
    assert_eq!(location(&run(r3, "/", "")), (308, "http://127.0.0.1:9999/"));
    let r4 = r#"r4: Path("/a/base/") -> modPath("/a/base/", "/my/new/base/") -> redirectTo(308, "https://another-example.com") -> <shunt>;"#;
    assert_eq!(
        location(&run(r4, "/a/base/", "q=2")),
        (308, "https://another-example.com/my/new/base/?q=2")
    );
    let with_path = r#"r: * -> redirectTo(301, "https://b.example/new?fixed=1") -> <shunt>;"#;
    assert_eq!(
        location(&run(with_path, "/old", "x=1")),
        (301, "https://b.example/new?fixed=1")
    );
    let path_only = r#"r: * -> redirectTo(302, "/elsewhere") -> <shunt>;"#;
    assert_eq!(
        location(&run(path_only, "/old", "x=1")),
        (302, "https://lb.example:8080/elsewhere?x=1")
    );
}

#[test]
fn request_filters_rewrite_in_order_and_inline_content_stops_them() {
    let ex = run(
        r#"r: * -> setQuery("lang", "pt") -> setPath("/p") -> setRequestHeader("X-A", "1") -> "http://198.18.0.1:80";"#,
        "/x",
        "b=2&a=1",
    );
    assert_eq!(
        (ex.path.as_deref(), ex.query.as_deref()),
        (Some("/p"), Some("a=1&b=2&lang=pt"))
    );
    assert_eq!(ex.edits.len(), 1);
    let ex = run(
        r#"r: * -> stripQuery() -> modPath(/o+/, "0") -> <shunt>;"#,
        "/foo/boo",
        "a=1",
    );
    assert_eq!(
        (ex.path.as_deref(), ex.query.as_deref()),
        (Some("/f0/b0"), Some(""))
    );
    let ex = run(
        r#"r: * -> status(201) -> inlineContent("Hello world!") -> setQuery("never", "run") -> <shunt>;"#,
        "/",
        "",
    );
    assert!(
        matches!(&ex.served, Some(Served::Inline { body, content_type }) if body == "Hello world!" && content_type == "text/plain; charset=utf-8")
    );
    assert_eq!((ex.ran, ex.query.as_deref()), (2, None));
    let t = table(r#"r: * -> status(201) -> inlineContent("x") -> <shunt>;"#);
    let mut status = StatusCode::OK;
    let mut headers = HeaderMap::new();
    let ex = Exchange {
        ran: 2,
        ..Exchange::default()
    };
    let none = HeaderMap::new();
    filter::on_response(
        &t.routes()[0].filters,
        &ex,
        &info(&none, "/"),
        &mut status,
        &mut headers,
    );
    assert_eq!(status, StatusCode::CREATED);
    let html = run(
        r#"r: * -> inlineContent("<h1>Hi</h1>") -> <shunt>;"#,
        "/",
        "",
    );
    assert!(
        matches!(&html.served, Some(Served::Inline { content_type, .. }) if content_type == "text/html; charset=utf-8")
    );
}

/// skipper `filters/accesslog/control_test.go`: `TestAccessLogControl` (the mask filter
/// is an `enableAccessLog()` with keys; keys are strings) and
/// `TestAccessLogMaskedParametersMerging` (keys of several mask filters add up).
#[test]
fn mask_access_log_query_enables_the_log_and_merges_keys() {
    let t = table(
        r#"
        a: Path("/a") -> disableAccessLog() -> maskAccessLogQuery("key_1") -> maskAccessLogQuery("key_2") -> <shunt>;
        b: Path("/b") -> maskAccessLogQuery("key_1", "key_1") -> disableAccessLog(2) -> <shunt>;
    "#,
    );
    let (a, b) = (&t.routes()[0], &t.routes()[1]);
    assert_eq!(a.access_log, Some(StatusSet::ALL), "the last filter wins");
    assert_eq!(&a.mask_query[..], ["key_1", "key_2"]);
    let log = b.access_log.expect("has a rule");
    assert!(!log.contains(204) && log.contains(404));
    for bad in [
        r#"* -> maskAccessLogQuery(1) -> <shunt>"#,
        r#"* -> maskAccessLogQuery() -> <shunt>"#,
        r#"* -> maskAccessLogQuery("a", "") -> <shunt>"#,
    ] {
        assert!(error(bad).contains("maskAccessLogQuery"), "{bad}");
    }
}

/// skipper `proxy/proxy.go` `applyFiltersToRequest` stops at the first filter that
/// serves (`inlineContent`, `redirectTo`), and the access-log filters act in the
/// request phase (`filters/accesslog/control.go` sets the state bag in `Request`):
/// after a serving filter they never run, so they neither mask nor switch the log.
#[test]
fn access_log_filters_after_a_serving_filter_never_run() {
    let t = table(
        r#"
        after: Path("/a") -> inlineContent("x") -> maskAccessLogQuery("token") -> disableAccessLog() -> <shunt>;
        before: Path("/b") -> maskAccessLogQuery("token") -> redirectTo(308, "/c") -> maskAccessLogQuery("other") -> enableAccessLog(2) -> <shunt>;
        split: Path("/s") -> disableAccessLog() -> redirectTo(302, "/t") -> enableAccessLog() -> <shunt>;
        backend: Path("/d") -> setPath("/e") -> maskAccessLogQuery("token") -> <shunt>;
    "#,
    );
    let [after, before, split, backend] = t.routes() else {
        panic!("four routes")
    };
    assert_eq!(after.access_log, None, "the global setting holds");
    assert!(after.mask_query.is_empty());
    assert_eq!(before.access_log, Some(StatusSet::ALL));
    assert_eq!(&before.mask_query[..], ["token".to_owned()]);
    assert_eq!(split.access_log, Some(StatusSet::NONE));
    assert_eq!(&backend.mask_query[..], ["token".to_owned()]);
    assert!(
        error(r#"* -> inlineContent("x") -> maskAccessLogQuery() -> <shunt>"#)
            .contains("maskAccessLogQuery"),
        "still checked"
    );
}

/// skipper runs the response parts of the filters whose request part ran, last
/// first (`applyFiltersToResponse`): for a shunt all of them, for a serving filter
/// those up to it; for the proxy's own failure answers none (the handler's
/// `FailureAnswer`, see `proxy/handler.rs`).
#[test]
fn response_filters_run_last_first_up_to_the_serving_filter() {
    let text = r#"r: * -> setResponseHeader("X-Order", "first") -> appendResponseHeader("X-Order", "second")
        -> setResponseHeader("X-Last", "a") -> setResponseHeader("X-Last", "b")
        -> inlineContent("x") -> setResponseHeader("X-After", "never") -> status(500) -> <shunt>;"#;
    let ex = run(text, "/", "");
    assert_eq!(ex.ran, 5);
    let t = table(text);
    let mut status = StatusCode::OK;
    let mut headers = HeaderMap::new();
    let none = HeaderMap::new();
    filter::on_response(
        &t.routes()[0].filters,
        &ex,
        &info(&none, "/"),
        &mut status,
        &mut headers,
    );
    assert_eq!(status, StatusCode::OK, "status(500) comes after the answer");
    assert!(headers.get("x-after").is_none());
    // Last first: "b" is set before "a", which stays; the append runs before the set.
    assert_eq!(headers["x-last"], "a");
    let order: Vec<_> = headers.get_all("x-order").iter().collect();
    assert_eq!(order, ["first"]);
}

#[test]
fn route_settings_and_backends_compile() {
    let t = table(
        r#"
        lb: Path("/lb") -> fadeIn("3m", 2) -> endpointCreated("http://198.18.0.2:80", "2024-01-02T15:04:05Z")
            -> maskAccessLogQuery("token") -> disableAccessLog(2, 404)
            -> consistentHashKey("${request.header.X-User}") -> consistentHashBalanceFactor(1.5)
            -> <consistentHash, "http://198.18.0.1", "http://198.18.0.2:80">;
        svc: * -> enableAccessLog() -> <powerOfRandomNChoices>;
    "#,
    );
    let lb = &t.routes()[0];
    assert!(
        matches!(&lb.filters[..], [Filter::ConsistentHashKey(_)]),
        "settings are not per-request filters; the key is, as in skipper"
    );
    let log = lb.access_log.expect("has a rule");
    assert!(!log.contains(200) && !log.contains(404) && log.contains(500));
    assert_eq!(&lb.mask_query[..], ["token".to_owned()]);
    let Backend::Pool(pool) = &lb.backend else {
        panic!("a pool")
    };
    assert_eq!(
        pool.balancer.algorithm(),
        Algorithm::ConsistentHash {
            balance_factor: Some(1.5)
        }
    );
    let set = pool.set.load();
    let names: Vec<&str> = set.endpoints().iter().map(|e| &*e.authority).collect();
    assert_eq!(names, ["198.18.0.1:80", "198.18.0.2:80"]);
    assert_eq!(
        set.endpoints()[1].created,
        lb_model::units::parse_rfc3339("2024-01-02T15:04:05Z").expect("valid")
    );
    let Backend::Pool(svc) = &t.routes()[1].backend else {
        panic!("a pool")
    };
    assert!(svc.set.load().is_empty(), "service endpoints arrive later");
    let registry = Registry::default();
    let specs = vec![EndpointSpec {
        authority: "198.18.0.9:8080".into(),
        weight: 2,
        created: None,
    }];
    t.set_service_endpoints(&specs, &registry, SystemTime::now());
    assert_eq!(svc.set.load().len(), 1);
    assert_eq!(
        &*pool.set.load().endpoints()[0].authority,
        "198.18.0.1:80",
        "listed endpoints untouched"
    );
}

#[test]
fn reload_keeps_the_balancer_of_an_unchanged_route() {
    let registry = Registry::default();
    let now = SystemTime::now();
    let text = r#"a: * -> <"http://198.18.0.1:80", "http://198.18.0.2:80">;"#;
    let cx = Context {
        registry: &registry,
        service_endpoints: &[],
        previous: None,
        now,
    };
    let first = RouteTable::parse(text, &cx).expect("valid");
    let cx = Context {
        previous: Some(&first),
        ..cx
    };
    let second = RouteTable::parse(text, &cx).expect("valid");
    let (Backend::Pool(a), Backend::Pool(b)) =
        (&first.routes()[0].backend, &second.routes()[0].backend)
    else {
        panic!("pools")
    };
    assert!(Arc::ptr_eq(&a.balancer, &b.balancer));
}

#[test]
fn endpoint_urls() {
    assert_eq!(
        endpoint_authority("http://127.0.0.1:8080/"),
        Ok("127.0.0.1:8080".into())
    );
    assert_eq!(
        endpoint_authority("http://backend"),
        Ok("backend:80".into())
    );
    assert_eq!(
        endpoint_authority("http://[2001:db8::1]:81"),
        Ok("[2001:db8::1]:81".into())
    );
    assert_eq!(
        endpoint_authority("http://[2001:db8::1]"),
        Ok("[2001:db8::1]:80".into())
    );
    assert!(endpoint_authority("ftp://x").is_err());
    // skipper's `net.SchemeHost` keeps the scheme and host only: the path, query and
    // fragment of a backend URL are ignored (proxy.go's `mapRequest` sends the
    // request's own path).
    for (url, want) in [
        ("http://127.0.0.1:8080/some/path", "127.0.0.1:8080"),
        ("http://backend/prefix?x=1", "backend:80"),
        ("http://[2001:db8::1]:81/p", "[2001:db8::1]:81"),
        ("http://h:1?q", "h:1"),
        ("http://h:1#f", "h:1"),
    ] {
        assert_eq!(endpoint_authority(url), Ok(want.into()), "{url}");
    }
    assert!(endpoint_authority("http:///path").is_err(), "no host");
}

/// Issue 14's route arguments, which panicked converting to a `Duration` or slicing a
/// time: each is an error at the filter's position saying what is out of range.
#[test]
fn times_and_durations_out_of_range_are_route_errors() {
    let created = |arg: &str| {
        format!(
            "r: * -> endpointCreated(\"http://198.18.0.2:80\", {arg}) -> <roundRobin, \"http://198.18.0.2:80\">;"
        )
    };
    let fade =
        |arg: &str| format!("r: * -> fadeIn({arg}) -> <roundRobin, \"http://198.18.0.2:80\">;");
    // Eskip numbers have no exponent (skipper's lexer), so 1e23 and 1e999 are
    // written out; 1e999 is infinite as an f64, as Go's ParseFloat makes it.
    let e23 = format!("1{}", "0".repeat(23));
    let e999 = format!("1{}", "0".repeat(999));
    let cases = [
        (
            created("\"2024-01-01T00:00:00+0\u{e9}00\""),
            "endpointCreated: \"2024-01-01T00:00:00+0\u{e9}00\" is not an RFC 3339 time",
        ),
        (
            created("\"2024-01-01T00:00:00+00\u{e9}0\""),
            "is not an RFC 3339 time",
        ),
        (
            created("\"2024-01-01T00:00:00+0\u{20ac}0\""),
            "is not an RFC 3339 time",
        ),
        (
            created(&e23),
            "endpointCreated: 100000000000000000000000 is not a time in Unix seconds",
        ),
        (
            created("18446744073709551615"),
            "is not a time in Unix seconds",
        ),
        (created(&e999), "is not a time in Unix seconds"),
        (
            fade("99999999999999999999999999"),
            "fadeIn: 100000000000000000000000000 ms is out of range",
        ),
        (fade(&e999), "out of range"),
        (
            fade("\"99999999999999999999999s\""),
            "fadeIn: \"99999999999999999999999s\" is out of range",
        ),
    ];
    for (text, want) in cases {
        let got = error(&text);
        assert!(
            got.starts_with("line 1, column 9: route r: "),
            "{text}: {got}"
        );
        assert!(
            got.contains(want),
            "{text}: {got:?} does not contain {want:?}"
        );
    }
    // Go's syntax, as skipper reads it; a number is milliseconds (skipper's rule).
    for (arg, secs) in [
        ("\"1m30s\"", 90.0),
        ("\"1.5h\"", 5400.0),
        ("\"300ms\"", 0.3),
        ("\"2h45m\"", 9900.0),
        ("3000", 3.0),
    ] {
        let t = table(&fade(arg));
        let Backend::Pool(pool) = &t.routes()[0].backend else {
            panic!("a pool")
        };
        assert_eq!(
            pool.fade.map(|f| f.window.as_secs_f64()),
            Some(secs),
            "{arg}"
        );
    }
}

/// A text with a syntax error and routes that do not compile reports all of them, in
/// text order, one a line: the routes around a syntax error are compiled too.
#[test]
fn syntax_and_route_errors_are_reported_together() {
    let text = "a: * -> nosuch() -> <shunt>;\n\
                b: * -> status( -> <shunt>;\n\
                c: Nope() && Weight(\"x\") -> <shunt>;\n\
                a: * -> <shunt>;";
    let e = parse(text).expect_err("refused");
    let at: Vec<(usize, usize)> = e
        .problems()
        .iter()
        .map(|p| (p.pos().line, p.pos().column))
        .collect();
    assert_eq!(at, [(1, 9), (2, 17), (3, 4), (3, 14), (4, 1)], "{e}");
    assert!(matches!(e.problems()[1], RouteProblem::Syntax(_)), "{e}");
    assert_eq!(e.to_string().lines().count(), 5, "{e}");
    assert!(
        e.to_string().ends_with("route a: duplicate route id"),
        "{e}"
    );
}

/// The one route of a text without ids is named `""` in errors, as skipper names it.
#[test]
fn the_route_without_an_id_is_named_as_skipper_names_it() {
    let e = parse("* -> nosuch() -> <shunt>").expect_err("refused");
    assert!(e.to_string().contains("route \"\": nosuch"), "{e}");
    let t = table("* -> inlineContent(\"hi\") -> <shunt>");
    assert_eq!(t.routes()[0].id, "");
    assert_eq!(
        t.routes()[0].source,
        "* -> inlineContent(\"hi\") -> <shunt>"
    );
}

/// skipper's `fadeIn` checks only the types of its arguments (filters/fadein/fadein.go,
/// CreateFilter): a zero or negative duration, and any exponent, make a valid route.
/// A duration of 0 or less means no fade-in (fadein.go, the post-processor skips
/// such routes; proxy/fadein.go filterFadeIn returns every endpoint), and an
/// exponent of 0 or less scores every endpoint 1 or more, so none fades either;
/// its test "negative duration" wants the route kept with its endpoint. The last
/// `fadeIn` of a route is the one in force, so such a one also ends an earlier one.
#[test]
fn fade_in_that_cannot_fade_is_a_route_without_fade_in() {
    let fade = |args: &str| format!("r: * -> {args} -> <roundRobin, \"http://198.18.0.2:80\">;");
    for args in [
        "fadeIn(\"-1m\")",
        "fadeIn(\"0s\")",
        "fadeIn(\"0\")",
        "fadeIn(0)",
        "fadeIn(-3000)",
        "fadeIn(\"1m\", 0)",
        "fadeIn(\"1m\", -2)",
        "fadeIn(\"1m\") -> fadeIn(\"-1m\")",
    ] {
        let t = table(&fade(args));
        let Backend::Pool(pool) = &t.routes()[0].backend else {
            panic!("a pool")
        };
        assert!(pool.fade.is_none(), "{args}: {:?}", pool.fade);
    }
    let t = table(&fade("fadeIn(\"-1m\") -> fadeIn(\"2m\", 0.5)"));
    let Backend::Pool(pool) = &t.routes()[0].backend else {
        panic!("a pool")
    };
    let f = pool.fade.expect("the last fadeIn holds");
    assert_eq!((f.window.as_secs(), f.exponent), (120, 0.5));
}

/// skipper's `net.SchemeHost`: scheme and host lower-cased, the scheme's port added
/// when none is given, the rest of the URL dropped; ours keeps the scheme only for
/// TLS endpoints (plain ones are `host:port`, as before).
#[test]
fn backend_urls_become_endpoints_as_skipper_reads_them() {
    for (url, want) in [
        ("http://a", "a:80"),
        ("http://a:8080/x?y=1", "a:8080"),
        ("HTTP://Backend.Example:81", "backend.example:81"),
        ("Http://X", "x:80"),
        ("https://a", "https://a:443"),
        ("https://a:8443/p", "https://a:8443"),
        ("HTTPS://API.Example.ORG", "https://api.example.org:443"),
        ("https://[::1]", "https://[::1]:443"),
        ("https://[::1]:8443", "https://[::1]:8443"),
        ("http://user@a:1", "a:1"),
    ] {
        assert_eq!(super::endpoint_authority(url).as_deref(), Ok(want), "{url}");
    }
    for url in ["ftp://a", "a:80", "http://", "https:///x", "h2c://a"] {
        assert!(super::endpoint_authority(url).is_err(), "{url}");
    }
}

/// A route's https URLs become TLS endpoints: requests to them go over TLS to the
/// `host:port`, which is also the Host they get; plain URLs stay plain.
#[test]
fn https_backends_compile_to_tls_endpoints() {
    let t = table(
        r#"a: * -> "https://api.example.org";
           b: Path("/b") -> <random, "HTTPS://B1:8443", "https://b2:8443">;
           c: Path("/c") -> "http://c:80";"#,
    );
    let endpoints = |i: usize| match &t.routes()[i].backend {
        super::Backend::Pool(p) => p
            .set
            .load()
            .endpoints()
            .iter()
            .map(|e| (e.authority.to_string(), e.tls, e.address().to_string()))
            .collect::<Vec<_>>(),
        super::Backend::Shunt => panic!("a pool"),
    };
    let e = |a: &str, tls: bool, addr: &str| (a.to_owned(), tls, addr.to_owned());
    assert_eq!(
        endpoints(0),
        [e(
            "api.example.org:443",
            true,
            "https://api.example.org:443"
        )]
    );
    assert_eq!(
        endpoints(1),
        [
            e("b1:8443", true, "https://b1:8443"),
            e("b2:8443", true, "https://b2:8443")
        ]
    );
    assert_eq!(endpoints(2), [e("c:80", false, "c:80")]);
}

/// The exchange holds a path or query only once a filter sets it: filters that
/// merely read them (templates, `redirectTo`) read the request's own, and a route
/// that only changes the query copies no path (an allocation each per request).
#[test]
fn filters_copy_only_the_path_and_query_they_set() {
    for (filters, path, query) in [
        (r#"status(201) -> inlineContent("x")"#, None, None),
        (
            r#"setRequestHeader("X-A", "1") -> dropResponseHeader("X-B")"#,
            None,
            None,
        ),
        (r#"setRequestHeader("X-P", "${request.path}")"#, None, None),
        (
            r#"appendResponseHeader("X-Q", "${request.query.q}")"#,
            None,
            None,
        ),
        (r#"consistentHashKey("${request.rawQuery}")"#, None, None),
        (r#"redirectTo(308, "https://x.example")"#, None, None),
        (r#"setQuery("a", "1")"#, None, Some("a=1&q=1")),
        (
            r#"setQuery("a", "${request.path}")"#,
            None,
            Some("a=%2Fs&q=1"),
        ),
        (r#"setQuery("a=1")"#, None, Some("a=1")),
        (r#"dropQuery("q")"#, None, Some("")),
        (r#"stripQuery()"#, None, Some("")),
        (r#"setPath("/p")"#, Some("/p"), None),
        (r#"modPath(/s/, "t")"#, Some("/t"), None),
        (r#"modPath(/nothing/, "t")"#, None, None),
    ] {
        let ex = run(&format!(r#"r: * -> {filters} -> <shunt>;"#), "/s", "q=1");
        assert_eq!(
            (ex.path.as_deref(), ex.query.as_deref()),
            (path, query),
            "{filters}"
        );
        assert_eq!(
            ex.rewritten(),
            path.is_some() || query.is_some(),
            "{filters}"
        );
    }
    // A request without a query keeps its own target through `stripQuery`.
    let ex = run(r#"r: * -> stripQuery() -> <shunt>;"#, "/s", "");
    assert!(!ex.rewritten());
    let t = table(
        r#"r: * -> setRequestHeader("X-P", "${request.path}?${request.rawQuery}") -> <shunt>;"#,
    );
    let route = t.routes().iter().find(|r| r.id == "r").expect("route r");
    let mut ex = Exchange::default();
    let headers = HeaderMap::new();
    let req = RequestInfo {
        query: "q=1",
        ..info(&headers, "/some/path")
    };
    on_request(&route.filters, &mut ex, &req);
    match ex.edits.as_slice() {
        [values::HeaderEdit::Set(name, v)] => {
            assert_eq!(
                (name.as_str(), v.to_str().ok()),
                ("x-p", Some("/some/path?q=1"))
            );
        }
        other => panic!("one Set edit, not {other:?}"),
    }
}

/// A route that only changes the query holds no copy of the path: its backend gets
/// the request's own path, escapes as they came, and the query as Go re-encodes it.
#[test]
fn a_query_filter_sends_the_request_s_own_path() {
    let t = table(r#"r: * -> setQuery("lang", "pt") -> dropQuery("x") -> <shunt>;"#);
    let route = t.routes().iter().find(|r| r.id == "r").expect("route r");
    let uri: http::Uri = "/caf%C3%A9/a%2Fb?x=9&b=2&a=1".parse().expect("uri");
    let mut ex = Exchange::default();
    let headers = HeaderMap::new();
    let req = RequestInfo {
        path: uri.path(),
        query: uri.query().unwrap_or(""),
        ..info(&headers, "/café/a/b")
    };
    on_request(&route.filters, &mut ex, &req);
    assert_eq!(ex.path, None, "no copy of the path");
    assert_eq!(
        ex.target(uri).map(|t| t.to_string()).as_deref(),
        Some("/caf%C3%A9/a%2Fb?a=1&b=2&lang=pt")
    );
}
