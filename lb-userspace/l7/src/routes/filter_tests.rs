//! skipper's tests of `modRequestHeader`, `modResponseHeader`, `preserveHost`,
//! `flowId`, `backendTimeout`, `comment` and `originMarker`, ported: their inputs and expected values, run
//! through compiled routes. Each group names the skipper test it comes from.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::{
    filter::{UpstreamHost, on_request, on_response},
    flowid,
    tests::{error, table},
    values::{HeaderEdit, Headers},
    *,
};

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    h
}

/// The only route of `filters -> <shunt>`.
fn route(filters: &str) -> Route {
    let mut t = table(&format!("r: * -> {filters} -> <shunt>;"));
    t.routes.pop().expect("one route")
}

/// Runs `filters`' request parts for a request to `host` with `request` headers,
/// starting from `start`.
fn run(filters: &str, host: &str, request: &HeaderMap, start: UpstreamHost) -> Exchange {
    let r = route(filters);
    let mut ex = Exchange {
        host: start,
        ..Exchange::default()
    };
    let info = RequestInfo {
        method: "GET",
        scheme: "https",
        host,
        headers: request,
        path: "/",
        query: "",
        routing_path: "/",
        peer: std::net::IpAddr::from([198, 18, 0, 1]),
        trusted: false,
    };
    on_request(&r.filters, &mut ex, &info);
    ex
}

/// The values of `name` the backend gets.
fn sent(ex: &Exchange, request: &HeaderMap, name: &str) -> Vec<String> {
    let name = HeaderName::from_bytes(name.as_bytes()).expect("name");
    Headers {
        base: request,
        edits: &ex.edits,
    }
    .all(&name)
    .map(|v| v.to_str().expect("text").to_owned())
    .collect()
}

fn set(v: &str) -> UpstreamHost {
    UpstreamHost::Set(HeaderValue::from_str(v).expect("value"))
}

/// `mod_header_test.go` `TestModRequestHostHeader`: the Host header, else the
/// request's host, rewritten; the result is the Host the backend gets, whether the
/// regexp matched or not.
#[test]
fn mod_request_header_on_host_sets_the_outgoing_host() {
    // (case, Host header, request host, regexp, replacement, outgoing host)
    let cases = [
        (
            "header, match",
            Some("example.org"),
            "example.org",
            r"^(example\.\w+)$",
            "www.$1",
            "www.example.org",
        ),
        (
            "no header, match",
            None,
            "example.org",
            r"^(example\.\w+)$",
            "www.$1",
            "www.example.org",
        ),
        (
            "no header, no match",
            None,
            "zalando.de",
            r"^(example\.\w+)$",
            "www.$1",
            "zalando.de",
        ),
        (
            "header, no match",
            Some("example.org"),
            "example.org",
            r"^zalando\.de$",
            "zalando.com",
            "example.org",
        ),
    ];
    for (case, header, host, re, with, want) in cases {
        let request = headers(&header.map(|h| vec![("Host", h)]).unwrap_or_default());
        let filters = format!(
            r#"modRequestHeader("Host", "{}", "{with}")"#,
            re.replace('\\', "\\\\")
        );
        let ex = run(&filters, host, &request, UpstreamHost::Backend);
        assert_eq!(ex.host, set(want), "{case}");
        assert_eq!(sent(&ex, &request, "host"), [want], "{case}");
    }
}

/// A `mod…Header` case: name, headers before, regexp, replacement, values after.
type ModCase<'a> = (
    &'a str,
    &'a [(&'a str, &'a str)],
    &'a str,
    &'a str,
    &'a [&'a str],
);

/// `mod_header_test.go` `TestModRequestHeader` and `TestModResponseHeader`: a present
/// header's value rewritten, an absent one left absent. (The last three cases are
/// ours: only the first value is read and the result is the only value, groups by
/// name, and Go's rule for empty matches.)
#[test]
fn mod_request_and_response_header_rewrite_only_present_headers() {
    // (case, headers before, regexp, replacement, values after)
    let cases: [ModCase<'_>; 7] = [
        (
            "present, match",
            &[("Accept-Language", "nl-NL")],
            r"^nl\\-NL$",
            "en",
            &["en"],
        ),
        (
            "present, match anything",
            &[("Accept-Language", "nl-NL")],
            "^.*",
            "en",
            &["en"],
        ),
        ("absent, would match anything", &[], "^.*", "en", &[]),
        ("absent, no match", &[], "fr", "en", &[]),
        (
            "first value only",
            &[("Accept-Language", "de"), ("Accept-Language", "fr")],
            "^(.*)$",
            "$1-x",
            &["de-x"],
        ),
        (
            "groups by name",
            &[("Accept-Language", "nl-NL")],
            "^(?P<l>..)-(?P<c>..)$",
            "${c}_$l",
            &["NL_nl"],
        ),
        // Go's ReplaceAllString reports no empty match right after a match.
        (
            "empty matches as Go",
            &[("Accept-Language", "baaac")],
            "a*",
            "X",
            &["XbXcX"],
        ),
    ];
    for (case, before, re, with, want) in cases {
        let request = headers(before);
        let ex = run(
            &format!(r#"modRequestHeader("Accept-Language", "{re}", "{with}")"#),
            "example.org",
            &request,
            UpstreamHost::Backend,
        );
        assert_eq!(
            sent(&ex, &request, "accept-language"),
            want,
            "request: {case}"
        );
        assert_eq!(ex.host, UpstreamHost::Backend, "request: {case}");

        let r = route(&format!(
            r#"modResponseHeader("Accept-Language", "{re}", "{with}")"#
        ));
        let ex = Exchange {
            ran: r.filters.len(),
            ..Exchange::default()
        };
        let mut response = headers(before);
        let mut status = StatusCode::OK;
        let empty = HeaderMap::new();
        let info = tests::info(&empty, "/");
        on_response(&r.filters, &ex, &info, &mut status, &mut response);
        let got: Vec<&str> = response
            .get_all("accept-language")
            .iter()
            .map(|v| v.to_str().expect("text"))
            .collect();
        assert_eq!(got, want, "response: {case}");
    }
}

/// `mod_header_test.go` `TestCreateModHost` and `TestModifyHostWithInvalidExpression`:
/// three strings, the second a regexp that compiles; for both filters.
#[test]
fn mod_header_argument_checks() {
    let cases = [
        ("no args", "()", false),
        ("single arg", r#"("Host")"#, false),
        ("two args", r#"("Host", ".*")"#, false),
        ("non-string arg, pos 1", r#"(3.14, ".*", "/foo")"#, false),
        ("non-string arg, pos 2", r#"("Host", 2.72, "/foo")"#, false),
        ("non-string arg, pos 3", r#"("Host", ".*", 2.72)"#, false),
        (
            "more than three args",
            r#"("Host", ".*", "/foo", "/bar")"#,
            false,
        ),
        ("invalid regexp", r#"("Host", "(?=;)", "foo")"#, false),
        ("create", r#"("Host", ".*", "/foo")"#, true),
        (
            "create with a regexp literal",
            r#"("X-A", /^a/, "b")"#,
            true,
        ),
    ];
    for name in ["modRequestHeader", "modResponseHeader"] {
        for (case, args, ok) in cases {
            let text = format!("r: * -> {name}{args} -> <shunt>;");
            if ok {
                table(&text);
            } else {
                assert!(error(&text).contains(name), "{name} {case}");
            }
        }
    }
}

/// `preservehost_test.go` `TestCreate`: exactly one argument, `"true"` or `"false"`.
#[test]
fn preserve_host_argument_checks() {
    for (case, args, want) in [
        ("0 arguments", "()", None),
        ("too many arguments", r#"("true", "false")"#, None),
        ("wrong argument", r#"("foo")"#, None),
        ("not a string", "(1)", None),
        ("false", r#"("false")"#, Some(false)),
        ("true", r#"("true")"#, Some(true)),
    ] {
        let text = format!("r: * -> preserveHost{args} -> <shunt>;");
        match want {
            None => assert!(error(&text).contains("preserveHost"), "{case}"),
            Some(p) => assert!(
                matches!(route(&format!("preserveHost{args}")).filters[..], [filter::Filter::PreserveHost(q)] if q == p),
                "{case}"
            ),
        }
    }
}

/// `preservehost_test.go` `TestRequest`: the filter overrides only the proxy's own
/// choices (backend's or client's Host), never a value another filter set. The
/// backend is `backend.example.org`, the client asked for `www.example.org`.
#[test]
fn preserve_host_overrides_only_the_proxys_own_choice() {
    let custom = || set("custom.example.org");
    let cases = [
        (
            "preserve, currently backend",
            "true",
            UpstreamHost::Backend,
            UpstreamHost::Incoming,
        ),
        (
            "preserve, currently incoming",
            "true",
            UpstreamHost::Incoming,
            UpstreamHost::Incoming,
        ),
        ("preserve, currently custom", "true", custom(), custom()),
        ("preserve, currently empty", "true", set(""), set("")),
        (
            "preserve not, currently backend",
            "false",
            UpstreamHost::Backend,
            UpstreamHost::Backend,
        ),
        (
            "preserve not, currently incoming",
            "false",
            UpstreamHost::Incoming,
            UpstreamHost::Backend,
        ),
        (
            "preserve not, currently custom",
            "false",
            custom(),
            custom(),
        ),
        ("preserve not, currently empty", "false", set(""), set("")),
        // Ours: a value a filter set that equals the client's Host counts as the
        // client's, as skipper compares the texts.
        (
            "preserve not, set to the incoming",
            "false",
            set("www.example.org"),
            UpstreamHost::Backend,
        ),
    ];
    let request = HeaderMap::new();
    for (case, arg, start, want) in cases {
        let ex = run(
            &format!(r#"preserveHost("{arg}")"#),
            "www.example.org",
            &request,
            start,
        );
        assert_eq!(ex.host, want, "{case}");
    }
}

/// A Host set by `setRequestHeader`/`appendRequestHeader` is the outgoing Host, and a
/// later `preserveHost` leaves it (skipper's `headerfilter.go` calls
/// `SetOutgoingHost`); `dropRequestHeader("Host")` does not change it.
#[test]
fn host_header_filters_choose_the_outgoing_host() {
    let request = headers(&[("Host", "www.example.org")]);
    for (filters, start, want) in [
        (
            r#"setRequestHeader("Host", "a.example")"#,
            UpstreamHost::Backend,
            set("a.example"),
        ),
        (
            r#"appendRequestHeader("Host", "b.example")"#,
            UpstreamHost::Incoming,
            set("b.example"),
        ),
        (
            r#"setRequestHeader("Host", "a.example") -> preserveHost("true")"#,
            UpstreamHost::Backend,
            set("a.example"),
        ),
        (
            r#"setRequestHeader("Host", "a.example") -> preserveHost("false")"#,
            UpstreamHost::Incoming,
            set("a.example"),
        ),
        (
            r#"setRequestHeader("X-Host", "a.example")"#,
            UpstreamHost::Backend,
            UpstreamHost::Backend,
        ),
        (
            r#"dropRequestHeader("Host")"#,
            UpstreamHost::Incoming,
            UpstreamHost::Incoming,
        ),
        (
            r#"setRequestHeader("Host", "${request.header.X-Absent}")"#,
            UpstreamHost::Backend,
            UpstreamHost::Backend,
        ),
    ] {
        let ex = run(filters, "www.example.org", &request, start);
        assert_eq!(ex.host, want, "{filters}");
    }
}

/// `flowid/filter_test.go`: an id is generated, or with `"reuse"` (any case) a
/// valid received one stays; the first argument must be a string, further ones are
/// ignored (`TestDeprecationNotice`, `TestFlowIdWithCustomGenerators`).
#[test]
fn flow_id_generates_or_reuses_a_valid_id() {
    // (case, filter, received id, whether it stays)
    let cases = [
        (
            "generation with reuse, none received",
            r#"flowId("reuse")"#,
            None,
            false,
        ),
        (
            "reuse existing",
            r#"flowId("reuse")"#,
            Some("FLOW-ID-FOR-TESTING"),
            true,
        ),
        (
            "reuse in upper case",
            r#"flowId("REUSE")"#,
            Some("FLOW-ID-FOR-TESTING"),
            true,
        ),
        (
            "ignore existing without reuse",
            r#"flowId("dummy")"#,
            Some("FLOW-ID-FOR-TESTING"),
            false,
        ),
        (
            "ignore existing, no argument",
            "flowId()",
            Some("FLOW-ID-FOR-TESTING"),
            false,
        ),
        (
            "reject an invalid reused id",
            r#"flowId("reuse")"#,
            Some("[<>] (o) [<>]"),
            false,
        ),
        (
            "reject a too short reused id",
            r#"flowId("reuse")"#,
            Some("abc1234"),
            false,
        ),
        (
            "more arguments are ignored",
            r#"flowId("reuse", "ulid")"#,
            Some("abcd1234"),
            true,
        ),
        (
            "an empty first argument",
            r#"flowId("", 1)"#,
            Some("abcd1234"),
            false,
        ),
    ];
    for (case, filter, received, stays) in cases {
        let request = headers(
            &received
                .map(|id| vec![("X-Flow-Id", id)])
                .unwrap_or_default(),
        );
        let ex = run(filter, "example.org", &request, UpstreamHost::Backend);
        let ids = sent(&ex, &request, "x-flow-id");
        assert_eq!(ids.len(), 1, "{case}: {ids:?}");
        if stays {
            assert_eq!(Some(ids[0].as_str()), received, "{case}");
            assert!(ex.edits.is_empty(), "{case}");
        } else {
            assert_ne!(Some(ids[0].as_str()), received, "{case}");
            assert_eq!(ids[0].len(), flowid::LEN, "{case}");
            assert!(flowid::is_valid(ids[0].as_bytes()), "{case}: {}", ids[0]);
        }
    }
    assert!(
        error("r: * -> flowId(1) -> <shunt>;").contains("flowId"),
        "TestFlowIdWithInvalidParameters"
    );
}

/// `flowid/standard_test.go` `TestFlowIdLength` and the generator's `IsValid`: ids
/// are of the alphabet, valid, and differ; 8 to 64 characters are valid.
#[test]
fn flow_ids_are_skippers_standard_ids() {
    let a = flowid::generate();
    let b = flowid::generate();
    assert_ne!(a, b);
    for id in [&a, &b] {
        assert!(flowid::is_valid(id.as_bytes()), "{id:?}");
    }
    for (id, valid) in [
        ("1234567", false),
        ("12345678", true),
        ("aZ09+-aZ09+-aZ09", true),
        (&"x".repeat(64)[..], true),
        (&"x".repeat(65)[..], false),
        ("abcd_1234", false),
        ("abcd 1234", false),
        ("", false),
    ] {
        assert_eq!(flowid::is_valid(id.as_bytes()), valid, "{id:?}");
    }
}

/// `timeout_test.go` `TestBackendTimeout` (the last filter wins) and
/// `TestTimeoutCreateFilterEdgeCases` (one Go duration string), with more of Go's
/// duration syntax: zero and negative durations are accepted and expire at once.
#[test]
fn backend_timeout_takes_one_go_duration() {
    let request = HeaderMap::new();
    for (filters, want) in [
        (r#"backendTimeout("2s")"#, Duration::from_secs(2)),
        (
            r#"backendTimeout("2s") -> backendTimeout("5s")"#,
            Duration::from_secs(5),
        ),
        (r#"backendTimeout("1m30s")"#, Duration::from_secs(90)),
        (r#"backendTimeout("1.5s")"#, Duration::from_millis(1500)),
        (r#"backendTimeout("3us")"#, Duration::from_micros(3)),
        (r#"backendTimeout("0")"#, Duration::ZERO),
        (r#"backendTimeout("-1s")"#, Duration::ZERO),
    ] {
        let ex = run(filters, "example.org", &request, UpstreamHost::Backend);
        assert_eq!(ex.backend_timeout, Some(want), "{filters}");
    }
    for (case, args) in [
        ("no unit", r#"("3.1")"#),
        ("a number", "(3.5)"),
        ("too many", r#"(5, "5")"#),
        ("too few", "()"),
        ("not a duration", r#"("soon")"#),
    ] {
        let text = format!("r: * -> backendTimeout{args} -> <shunt>;");
        assert!(error(&text).contains("backendTimeout"), "{case}");
    }
    let ex = run(
        "status(200)",
        "example.org",
        &request,
        UpstreamHost::Backend,
    );
    assert_eq!(
        ex.backend_timeout, None,
        "the node's request_timeout applies"
    );
}

/// `HeaderEdit` is how the proxy sends the filters' header changes: a flow id is a
/// `Set`, so a received id of another format never reaches the backend twice.
#[test]
fn a_new_flow_id_replaces_every_received_one() {
    let request = headers(&[("X-Flow-Id", "bad id"), ("X-Flow-Id", "worse id")]);
    let ex = run("flowId()", "example.org", &request, UpstreamHost::Backend);
    assert!(matches!(&ex.edits[..], [HeaderEdit::Set(n, _)] if n == "x-flow-id"));
    assert_eq!(sent(&ex, &request, "x-flow-id").len(), 1);
}

/// skipper's `comment` (filters/builtin/comment.go) takes any arguments and does
/// nothing; `originMarker` (originmarker_test.go) takes an origin, an id and an
/// RFC 3339 time and only marks the route for metrics. Neither leaves a filter, so
/// a route with them costs what it costs without.
#[test]
fn comment_and_origin_marker_compile_to_nothing() {
    for filters in [
        r#"comment("nothing to see")"#,
        "comment()",
        r#"comment("zalando.org/skipper-filter [1]", 2, /x/)"#,
        r#"originMarker("apiUsageMonitoring", "deployment1", "2019-08-30T09:55:51Z")"#,
        r#"comment("a") -> setRequestHeader("X-A", "1") -> comment("b")"#,
    ] {
        let r = route(filters);
        let kept = usize::from(filters.contains("setRequestHeader"));
        assert_eq!(r.filters.len(), kept, "{filters}: {:?}", r.filters);
    }
    for (filters, want) in [
        (
            r#"originMarker("a", "b")"#,
            "originMarker: takes an origin, an id and an RFC 3339 creation time",
        ),
        (r#"originMarker("a", "b", "yesterday")"#, "originMarker:"),
        (
            r#"originMarker("a", 1, "2019-08-30T09:55:51Z")"#,
            "originMarker: argument 2",
        ),
        (
            r#"originMarker(1, "b", "2019-08-30T09:55:51Z")"#,
            "originMarker: argument 1",
        ),
    ] {
        let got = error(&format!("r: * -> {filters} -> <shunt>;"));
        assert!(got.contains(want), "{filters}: {got}");
    }
}
