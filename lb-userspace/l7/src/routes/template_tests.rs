//! skipper's template and filter tests, ported: the inputs and expected values of
//! `eskip/template_test.go`, `filters/builtin/{header,query,path,stripquery}_test.go`
//! and `filters/consistenthash/key_test.go`, run through our compiled routes.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::{
    filter::{on_request, on_response},
    params::ParamRef,
    template::Template,
    tests::info,
    values::HeaderEdit,
    *,
};

/// Header lines, `(name, value)`.
type Pairs<'a> = &'a [(&'a str, &'a str)];

/// A header filter case: name, filters, headers before, values after.
type HeaderCase<'a> = (&'a str, &'a str, Pairs<'a>, &'a [&'a str]);

fn headers(pairs: Pairs<'_>) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    h
}

/// One `ApplyContext` case: path parameters become the segments of a routing path.
struct Apply<'a> {
    template: &'a str,
    params: &'a [(&'a str, &'a str)],
    request: &'a [(&'a str, &'a str)],
    response: Option<&'a [(&'a str, &'a str)]>,
    path: &'a str,
    query: &'a str,
    peer: &'a str,
    want: &'a str,
    ok: bool,
}

const BASE: Apply<'static> = Apply {
    template: "",
    params: &[],
    request: &[],
    response: None,
    path: "/",
    query: "",
    peer: "198.18.0.1",
    want: "",
    ok: true,
};

fn apply(c: &Apply<'_>) -> (String, bool) {
    let routing: String = c.params.iter().map(|(_, v)| format!("/{v}")).collect();
    let t = Template::new(c.template, |name| {
        c.params
            .iter()
            .position(|(n, _)| *n == name)
            .map(ParamRef::Segment)
    });
    let request = headers(c.request);
    let response = c.response.map(headers);
    let ex = Exchange::default();
    let info = RequestInfo {
        method: "GET",
        scheme: "https",
        host: "example.com",
        headers: &request,
        path: c.path,
        query: c.query,
        routing_path: &routing,
        peer: c.peer.parse::<IpAddr>().expect("peer"),
        trusted: true,
    };
    t.apply(&info.values(&ex, response.as_ref()))
}

/// `TestTemplateApplyContext` (eskip/template_test.go), every case.
#[test]
fn apply_context_as_skipper() {
    let xff = &[(
        "X-Forwarded-For",
        "203.0.113.195, 70.41.3.18, 150.172.238.178",
    )][..];
    let cases = [
        (
            "path params",
            Apply {
                template: "hello ${p1} ${p2}",
                params: &[("p1", "path"), ("p2", "params")],
                want: "hello path params",
                ..BASE
            },
        ),
        (
            "all missing",
            Apply {
                template: "hello ${p1} ${p2}",
                want: "hello  ",
                ok: false,
                ..BASE
            },
        ),
        (
            "some missing",
            Apply {
                template: "hello ${p1} ${missing}",
                params: &[("p1", "X")],
                want: "hello X ",
                ok: false,
                ..BASE
            },
        ),
        (
            "request header",
            Apply {
                template: "hello ${request.header.X-Foo}",
                request: &[("X-Foo", "foo")],
                want: "hello foo",
                ..BASE
            },
        ),
        (
            "missing request header",
            Apply {
                template: "hello ${request.header.X-Foo}",
                want: "hello ",
                ok: false,
                ..BASE
            },
        ),
        (
            "response header",
            Apply {
                template: "hello ${response.header.X-Foo}",
                response: Some(&[("X-Foo", "bar")]),
                want: "hello bar",
                ..BASE
            },
        ),
        (
            "response header when response is absent",
            Apply {
                template: "hello ${response.header.X-Foo}",
                want: "hello ",
                ok: false,
                ..BASE
            },
        ),
        (
            "missing response header",
            Apply {
                template: "hello ${response.header.X-Foo}",
                response: Some(&[]),
                want: "hello ",
                ok: false,
                ..BASE
            },
        ),
        (
            "request and response headers (lowercase)",
            Apply {
                template: "hello ${request.header.x-foo} ${response.header.x-foo}",
                request: &[("X-Foo", "bar")],
                response: Some(&[("X-Foo", "baz")]),
                want: "hello bar baz",
                ..BASE
            },
        ),
        (
            "request and response headers when response is absent",
            Apply {
                template: "hello ${request.header.x-foo} ${response.header.x-foo}",
                request: &[("X-Foo", "bar")],
                want: "hello bar ",
                ok: false,
                ..BASE
            },
        ),
        (
            "request query",
            Apply {
                template: "hello ${request.query.q-Q} ${request.query.P_p}",
                query: "q-Q=foo&P_p=bar",
                want: "hello foo bar",
                ..BASE
            },
        ),
        (
            "missing request query",
            Apply {
                template: "hello ${request.query.missing}",
                query: "p=foo",
                want: "hello ",
                ok: false,
                ..BASE
            },
        ),
        (
            "request cookie",
            Apply {
                template: "hello ${request.cookie.foo} ${request.cookie.x}",
                request: &[("Cookie", "foo=bar; x=y")],
                want: "hello bar y",
                ..BASE
            },
        ),
        (
            "missing request cookie",
            Apply {
                template: "hello ${request.cookie.missing}",
                request: &[("Cookie", "foo=bar; x=y")],
                want: "hello ",
                ok: false,
                ..BASE
            },
        ),
        (
            "request path",
            Apply {
                template: "hello ${request.path}",
                path: "/foo/bar",
                want: "hello /foo/bar",
                ..BASE
            },
        ),
        (
            "request path is empty",
            Apply {
                template: "hello ${request.path}",
                path: "",
                want: "hello ",
                ok: false,
                ..BASE
            },
        ),
        (
            "request rawquery",
            Apply {
                template: "hello ${request.rawQuery}",
                query: "q-Q=foo&P_p=bar&r=baz%20qux&s",
                want: "hello q-Q=foo&P_p=bar&r=baz%20qux&s",
                ..BASE
            },
        ),
        (
            "request rawquery is empty",
            Apply {
                template: "hello ${request.rawQuery}",
                want: "hello ",
                ok: false,
                ..BASE
            },
        ),
        (
            "all in one",
            Apply {
                template: "Hello ${name} ${request.header.name} ${request.query.name} ${request.cookie.name} ${response.header.name}",
                params: &[("name", "one")],
                request: &[("Name", "two"), ("Cookie", "name=four")],
                query: "name=three",
                response: Some(&[("Name", "five")]),
                want: "Hello one two three four five",
                ..BASE
            },
        ),
        (
            "request source and X-Forwarded-For present",
            Apply {
                template: "${request.source}",
                request: xff,
                peer: "192.168.0.1",
                want: "203.0.113.195",
                ..BASE
            },
        ),
        (
            "request source and X-Forwarded-For absent",
            Apply {
                template: "${request.source}",
                peer: "192.168.0.1",
                want: "192.168.0.1",
                ..BASE
            },
        ),
        (
            "request sourceFromLast and X-Forwarded-For present",
            Apply {
                template: "${request.sourceFromLast}",
                request: xff,
                peer: "192.168.0.1",
                want: "150.172.238.178",
                ..BASE
            },
        ),
        (
            "request sourceFromLast and X-Forwarded-For absent",
            Apply {
                template: "${request.sourceFromLast}",
                peer: "192.168.0.1",
                want: "192.168.0.1",
                ..BASE
            },
        ),
        (
            "request clientIP (ignores X-Forwarded-For)",
            Apply {
                template: "${request.clientIP}",
                request: xff,
                peer: "192.168.0.1",
                want: "192.168.0.1",
                ..BASE
            },
        ),
        (
            "request method host",
            Apply {
                template: "${request.method} ${request.host}",
                want: "GET example.com",
                ..BASE
            },
        ),
    ];
    for (name, c) in &cases {
        assert_eq!(apply(c), (c.want.to_owned(), c.ok), "{name}");
    }
}

/// `TestTemplateGetter` (eskip/template_test.go): a getter that returns each name is
/// path parameters whose values are their names. (Its `nil` getter case has no
/// counterpart: every template here is applied to a request.)
#[test]
fn placeholders_are_replaced_in_place() {
    let p = &[("param1", "param1"), ("param2", "param2")][..];
    for (template, want, ok) in [
        ("template", "template", true),
        ("/path/${param1}/", "/path/param1/", true),
        ("/${param2}/${param1}/", "/param2/param1/", true),
        ("/${param2}", "/param2", true),
        ("/${missing}", "/", false),
    ] {
        let c = Apply {
            template,
            params: p,
            ..BASE
        };
        assert_eq!(apply(&c), (want.to_owned(), ok), "{template}");
    }
}

/// What skipper's placeholder pattern `\$\{([^{}]+)\}` takes and leaves as text; and
/// values the Go functions behind it give (decoding, cookies, addresses).
#[test]
fn placeholder_syntax_and_values_as_go_reads_them() {
    let q = &[("q", "v")][..];
    for (template, want, ok) in [
        ("${}", "${}", true),
        ("${q", "${q", true),
        ("$${q}", "$v", true),
        ("${${q}}", "${v}", true),
        ("${a{b}", "${a{b}", true),
        ("${q}${q}", "vv", true),
        ("${request.unknown}", "", false),
    ] {
        let c = Apply {
            template,
            params: q,
            ..BASE
        };
        assert_eq!(apply(&c), (want.to_owned(), ok), "{template}");
    }
    let cases = [
        (
            "query decoded, first value",
            Apply {
                template: "${request.query.a b}",
                query: "a+b=1%2F2&a%20b=3",
                want: "1/2",
                ..BASE
            },
        ),
        (
            "pairs with a bad escape or a `;` are skipped",
            Apply {
                template: "${request.query.k}",
                query: "k=%zz&k=x;y&k=ok",
                want: "ok",
                ..BASE
            },
        ),
        (
            "path decoded, `+` kept",
            Apply {
                template: "${request.path}",
                path: "/a%20b+c",
                want: "/a b+c",
                ..BASE
            },
        ),
        (
            "quoted cookie",
            Apply {
                template: "${request.cookie.s}",
                request: &[("Cookie", "s=\"abc\"")],
                want: "abc",
                ..BASE
            },
        ),
        (
            "cookies over several lines",
            Apply {
                template: "${request.cookie.b}",
                request: &[("Cookie", "a=1"), ("Cookie", "b=2")],
                want: "2",
                ..BASE
            },
        ),
        (
            "an invalid cookie value is skipped",
            Apply {
                template: "${request.cookie.s}",
                request: &[("Cookie", "s=a\\b; s=ok")],
                want: "ok",
                ..BASE
            },
        ),
        (
            "forwarded-for with a port",
            Apply {
                template: "${request.source}",
                request: &[("X-Forwarded-For", "203.0.113.7:5555")],
                want: "203.0.113.7",
                ..BASE
            },
        ),
        (
            "forwarded-for not an address",
            Apply {
                template: "${request.source}",
                request: &[("X-Forwarded-For", "unknown")],
                want: "198.18.0.1",
                ..BASE
            },
        ),
        (
            "IPv4-mapped peer printed as IPv4",
            Apply {
                template: "${request.clientIP}",
                peer: "::ffff:192.0.2.1",
                want: "192.0.2.1",
                ..BASE
            },
        ),
        (
            "a value is not read as a template",
            Apply {
                template: "${request.header.X-A}${request.header.X-B}",
                request: &[("X-A", "${request.header.X-B}"), ("X-B", "b")],
                want: "${request.header.X-B}b",
                ..BASE
            },
        ),
    ];
    for (name, c) in &cases {
        assert_eq!(apply(c), (c.want.to_owned(), c.ok), "{name}");
    }
}

/// The path and query the backend gets of `target` after `ex`'s filters.
fn sent(ex: &Exchange, target: &str) -> (String, String) {
    let uri: http::Uri = target.parse().expect("target");
    (
        ex.path(uri.path()).to_owned(),
        ex.query(uri.query().unwrap_or("")).to_owned(),
    )
}

/// Runs a route's request filters on `target` with `request` headers.
fn request(route: &str, target: &str, request: &[(&str, &str)]) -> (Exchange, HeaderMap) {
    let t = super::tests::table(route);
    let uri: http::Uri = target.parse().expect("target");
    let routing = path::routing_path(uri.path()).expect("path").into_owned();
    let r = t
        .find_routed(&predicate::RequestView::new(
            &http::Method::GET,
            &routing,
            "lb.example:8080",
            &HeaderMap::new(),
        ))
        .expect("a route matches");
    let base = headers(request);
    let mut ex = Exchange::default();
    let req = RequestInfo {
        path: uri.path(),
        query: uri.query().unwrap_or(""),
        ..info(&base, &routing)
    };
    on_request(&r.filters, &mut ex, &req);
    let mut out = base.clone();
    for e in &ex.edits {
        e.apply(&mut out);
    }
    (ex, out)
}

fn values(h: &HeaderMap, name: &str) -> Vec<String> {
    h.get_all(name)
        .iter()
        .map(|v| v.to_str().expect("text").to_owned())
        .collect()
}

/// `TestHeader` (filters/builtin/header_test.go), the request cases; path
/// parameters come from the route's `Path`.
#[test]
fn request_header_filters_as_skipper() {
    let two = &[("X-Test-Name", "value0"), ("X-Test-Name", "value1")][..];
    let cases: &[HeaderCase<'_>] = &[
        (
            "set request header when none",
            r#"setRequestHeader("X-Test-Name", "value")"#,
            &[],
            &["value"],
        ),
        (
            "set request header when exists",
            r#"setRequestHeader("X-Test-Name", "value")"#,
            two,
            &["value"],
        ),
        (
            "set request header from path params",
            r#"setRequestHeader("X-Test-Name", "Mit ${was} zu ${wo}")"#,
            &[],
            &["Mit Raketen zu Planeten"],
        ),
        (
            "name parameter is case-insensitive",
            r#"setRequestHeader("x-test-name", "Value")"#,
            &[],
            &["Value"],
        ),
        (
            "append request header when none",
            r#"appendRequestHeader("X-Test-Name", "value")"#,
            &[],
            &["value"],
        ),
        (
            "append request header when exists",
            r#"appendRequestHeader("X-Test-Name", "value")"#,
            two,
            &["value0", "value1", "value"],
        ),
        (
            "append request header from path params",
            r#"appendRequestHeader("X-Test-Name", "a ${foo}ter")"#,
            two,
            &["value0", "value1", "a barter"],
        ),
        (
            "append request header from path params when missing",
            r#"appendRequestHeader("X-Test-Name", "${nope}")"#,
            two,
            &["value0", "value1"],
        ),
        (
            "set request header when a placeholder is missing",
            r#"setRequestHeader("X-Test-Name", "x ${nope}")"#,
            two,
            &["value0", "value1"],
        ),
        (
            "drop request header when none",
            r#"dropRequestHeader("X-Test-Name")"#,
            &[],
            &[],
        ),
        (
            "drop request header when exists",
            r#"dropRequestHeader("X-Test-Name")"#,
            two,
            &[],
        ),
        (
            "drop is case-insensitive",
            r#"dropRequestHeader("x-test-name")"#,
            two,
            &[],
        ),
        (
            "a later filter reads an earlier one's header",
            r#"setRequestHeader("X-A", "1") -> setRequestHeader("X-Test-Name", "${request.header.X-A}")"#,
            &[],
            &["1"],
        ),
    ];
    for (name, filters, request_headers, want) in cases {
        let route =
            format!(r#"r: Path("/:was/zu/:wo/:foo") -> {filters} -> "http://198.18.0.1:80";"#);
        let (_, out) = request(&route, "/Raketen/zu/Planeten/bar", request_headers);
        assert_eq!(values(&out, "x-test-name"), *want, "{name}");
    }
    let (ex, _) = request(
        r#"r: * -> setRequestHeader("Host", "www.example.org") -> "http://198.18.0.1:80";"#,
        "/",
        &[("Host", "lb.example:8080")],
    );
    assert_eq!(
        ex.edits,
        [HeaderEdit::Set(
            http::header::HOST,
            HeaderValue::from_static("www.example.org")
        )],
        "set outgoing host on set"
    );
}

/// `TestHeader`, the response cases.
#[test]
fn response_header_filters_as_skipper() {
    let two = &[("X-Test-Name", "value0"), ("X-Test-Name", "value1")][..];
    let cases: &[HeaderCase<'_>] = &[
        (
            "set response header when none",
            r#"setResponseHeader("X-Test-Name", "value")"#,
            &[],
            &["value"],
        ),
        (
            "set response header when exists",
            r#"setResponseHeader("X-Test-Name", "value")"#,
            two,
            &["value"],
        ),
        (
            "set response header from path params",
            r#"setResponseHeader("X-Test-Name", "a ${sizeof} ${foo}ter")"#,
            &[],
            &["a small barter"],
        ),
        (
            "set response header from path params when missing",
            r#"setResponseHeader("X-Test-Name", "a ${nope}ter")"#,
            &[],
            &[],
        ),
        (
            "name parameter is case-insensitive",
            r#"setResponseHeader("x-test-name", "Value")"#,
            &[],
            &["Value"],
        ),
        (
            "append response header when none",
            r#"appendResponseHeader("X-Test-Name", "value")"#,
            &[],
            &["value"],
        ),
        (
            "append response header when exists",
            r#"appendResponseHeader("X-Test-Name", "value")"#,
            two,
            &["value0", "value1", "value"],
        ),
        (
            "drop response header",
            r#"dropResponseHeader("X-Test-Name")"#,
            two,
            &[],
        ),
        (
            "response template reads the response",
            r#"setResponseHeader("X-Test-Name", "${response.header.X-Test-Name}!")"#,
            two,
            &["value0!"],
        ),
        (
            "response template reads the request",
            r#"setResponseHeader("X-Test-Name", "${request.header.X-In} ${request.method}")"#,
            &[],
            &["in GET"],
        ),
    ];
    for (name, filters, response, want) in cases {
        let route = format!(r#"r: Path("/:sizeof/:foo") -> {filters} -> "http://198.18.0.1:80";"#);
        let t = super::tests::table(&route);
        let r = &t.routes()[0];
        let request = headers(&[("X-In", "in")]);
        let ex = Exchange {
            ran: r.filters.len(),
            ..Exchange::default()
        };
        let mut out = headers(response);
        let mut status = StatusCode::OK;
        on_response(
            &r.filters,
            &ex,
            &info(&request, "/small/bar"),
            &mut status,
            &mut out,
        );
        assert_eq!(values(&out, "x-test-name"), *want, "{name}");
    }
}

/// `TestSetPath`, `TestSetPathWithTemplate`, `TestModifyPath` (path_test.go) and
/// `TestDropQuery*`, `TestSetQuery*` (query_test.go); then what Go's URL code makes of
/// a path a filter sets (escaped) and of a placeholder left empty (still applied).
#[test]
fn path_and_query_filters_as_skipper() {
    let cases: &[(&str, &str, &str, &str)] = &[
        ("setPath", r#"setPath("/baz/qux")"#, "/foo/bar", "/baz/qux"),
        (
            "setPath with template",
            r#"setPath("/path/${param2}/${param1}")"#,
            "/foo/bar",
            "/path/bar/foo",
        ),
        (
            "modPath",
            r#"modPath("/replace-this/", "/with-this/")"#,
            "/path/replace-this/yo",
            "/path/with-this/yo",
        ),
        (
            "dropQuery",
            r#"dropQuery("foo")"#,
            "/path?foo=1&bar=2",
            "/path?bar=2",
        ),
        (
            "dropQuery with template",
            r#"dropQuery("${param1}")"#,
            "/foo/bar?foo=1&bar=2",
            "/foo/bar?bar=2",
        ),
        (
            "setQuery",
            r#"setQuery("foo", "bar")"#,
            "/path?foo=1",
            "/path?foo=bar",
        ),
        (
            "setQuery key only",
            r#"setQuery("foo")"#,
            "/path?foo",
            "/path?foo",
        ),
        (
            "setQuery with template",
            r#"setQuery("${param2}", "${param1}")"#,
            "/foo/bar",
            "/foo/bar?bar=foo",
        ),
        (
            "setQuery key only replaces the whole query",
            r#"setQuery("a=${param1}&b")"#,
            "/foo/bar?x=1",
            "/foo/bar?a=foo&b",
        ),
        (
            "dropQuery re-encodes what stays",
            r#"dropQuery("none")"#,
            "/p?b=2&a=1",
            "/p?a=1&b=2",
        ),
        (
            "setPath escapes as Go",
            r#"setPath("/a b/%41/${request.query.q}")"#,
            "/p?q=c%2Fd",
            "/a%20b/%2541/c/d?q=c%2Fd",
        ),
        (
            "setPath with a missing placeholder",
            r#"setPath("/x/${nope}")"#,
            "/p",
            "/x/",
        ),
        (
            "setPath from the decoded path",
            r#"setPath("${request.path}/more")"#,
            "/a%20b",
            "/a%20b/more",
        ),
        ("setPath rooted", r#"setPath("rel")"#, "/p", "/rel"),
        (
            "setQuery with a missing placeholder",
            r#"setQuery("k", "${nope}")"#,
            "/p",
            "/p?k=",
        ),
    ];
    for (name, filters, target, want) in cases {
        let route = format!(r#"r: * -> {filters} -> "http://198.18.0.1:80";"#);
        let route = if filters.contains("param") {
            route.replace("r: *", r#"r: Path("/:param1/:param2")"#)
        } else {
            route
        };
        let (ex, _) = request(&route, target, &[]);
        let (path, query) = sent(&ex, target);
        let got = if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        };
        assert_eq!(got, *want, "{name}");
    }
}

/// skipper's `modPath` and `setPath` (filters/builtin/path.go) write Go's decoded
/// `URL.Path` and leave `URL.RawPath` as received; Go then sends `EscapedPath()`:
/// the received text while it still decodes to the path, else the path escaped
/// afresh. Path parameters are the tree's values, decoded once more
/// (pathmux/tree.go). `redirectTo` without a path takes the decoded path, escaped
/// afresh. (route, request target, what the backend gets, or the Location.)
#[test]
fn path_filters_work_on_the_decoded_path_and_send_gos_form() {
    let cases: &[(&str, &str, &str)] = &[
        // The regexp sees the decoded path.
        (r#"modPath("é", "e")"#, "/caf%C3%A9", "/cafe"),
        (r#"modPath("a b", "c d")"#, "/a%20b", "/c%20d"),
        (r#"modPath("^/a/b", "/x")"#, "/a%2Fb/c", "/x/c"),
        // A changed path is escaped afresh; an unchanged one is sent as it came.
        (r#"modPath("^/a", "/x")"#, "/a%2Fb/c", "/x/b/c"),
        (r#"modPath("^/none", "/x")"#, "/a%2Fb/c", "/a%2Fb/c"),
        (r#"modPath("^/a", "/x")"#, "/a(b)", "/x%28b%29"),
        (r#"modPath("^/none", "/x")"#, "/a(b)", "/a(b)"),
        (r#"modPath("th$", "TH")"#, "/p%41th", "/pATH"),
        (r#"modPath("/b$", "/c%2Fd")"#, "/a/b", "/a/c%252Fd"),
        (r#"modPath("b", "B")"#, "/a+b", "/a+B"),
        // Changed back: the received text fits again (Go's RawPath).
        (
            r#"modPath("^/a/b", "/x") -> modPath("^/x", "/a/b")"#,
            "/a%2Fb/c",
            "/a%2Fb/c",
        ),
        (r#"setPath("/a/b")"#, "/a%2Fb", "/a%2Fb"),
        (r#"setPath("/a/c")"#, "/a%2Fb", "/a/c"),
        // Parameters: the routing path is decoded once, the tree decodes again.
        (r#"setPath("/v/${id}")"#, "/p/x%252Fy", "/v/x/y"),
        (r#"setPath("/v/${id}")"#, "/p/b+c", "/v/b%20c"),
        (r#"setPath("/v/${id}")"#, "/p/100%25", "/v/100%25"),
        (r#"setPath("/v/${id}")"#, "/p/%2525", "/v/%25"),
    ];
    for (filters, target, want) in cases {
        let route = format!(r#"r: PathSubtree("/") -> {filters} -> "http://198.18.0.1:80";"#);
        let route = if filters.contains("${id}") {
            route.replace(r#"PathSubtree("/")"#, r#"Path("/p/:id")"#)
        } else {
            route
        };
        let (ex, _) = request(&route, target, &[]);
        assert_eq!(sent(&ex, target).0, *want, "{filters} on {target}");
    }
    for (target, want) in [
        ("/a%2Fb", "https://lb.example:8080/a/b"),
        ("/a(b)?q=1", "https://lb.example:8080/a%28b%29?q=1"),
        ("/caf%C3%A9", "https://lb.example:8080/caf%C3%A9"),
    ] {
        let (ex, _) = request(
            r#"r: PathSubtree("/") -> redirectTo(308) -> <shunt>;"#,
            target,
            &[],
        );
        let Some(Served::Redirect { location, .. }) = &ex.served else {
            panic!("a redirect")
        };
        assert_eq!(location, want, "{target}");
    }
}

/// `TestStripQuery`, `TestPreserveQuery` (stripquery_test.go), plus the argument
/// rules of its `CreateFilter`.
#[test]
fn strip_query_as_skipper() {
    let cases: &[(&str, &str, Pairs<'_>)] = &[
        (
            "/foo?bar=baz",
            r#"stripQuery("true")"#,
            &[("x-query-param-bar", "baz")],
        ),
        (
            "/foo?bar",
            r#"stripQuery("true")"#,
            &[("x-query-param-bar", "")],
        ),
        (
            "/foo?bar=baz&bar=qux",
            r#"stripQuery("true")"#,
            &[("x-query-param-bar", "baz")],
        ),
        (
            "/foo?a-b=123",
            r#"stripQuery("true")"#,
            &[("x-query-param-a-b", "123")],
        ),
        (
            "/foo?a%20b=123",
            r#"stripQuery("true")"#,
            &[("x-query-param-ab", "123")],
        ),
        (
            "/foo?%E9%A6%AC%E9%B9%BF=123",
            r#"stripQuery("true")"#,
            &[("x-query-param-u99acu9e7f", "123")],
        ),
        (
            "/foo?a_b=1&c%0Ad=2",
            r#"stripQuery("TRUE")"#,
            &[("x-query-param-ab", "1"), ("x-query-param-cnd", "2")],
        ),
        ("/foo?bar=baz", r#"stripQuery()"#, &[]),
        ("/foo?bar=baz", r#"stripQuery("false")"#, &[]),
        ("/foo?bar=baz", r#"stripQuery("true", "ignored")"#, &[]),
    ];
    for (target, filter, want) in cases {
        let route = format!(r#"r: * -> {filter} -> "http://198.18.0.1:80";"#);
        let (ex, out) = request(&route, target, &[]);
        let (path, query) = sent(&ex, target);
        assert_eq!(
            (path.as_str(), query.as_str()),
            ("/foo", ""),
            "{target} {filter}"
        );
        for (name, value) in *want {
            assert_eq!(
                out.get(*name).map(|v| v.to_str().expect("text")),
                Some(*value),
                "{target} {filter}"
            );
        }
        assert_eq!(out.keys_len(), want.len(), "{target} {filter}: {out:?}");
    }
    let bad = super::tests::error(r#"r: * -> stripQuery(1) -> <shunt>;"#);
    assert!(bad.contains("must be a string"), "{bad}");
}

/// `TestConsistentHashKey` (filters/consistenthash/key_test.go): a key with a missing
/// placeholder sets nothing and does not overwrite one set before.
#[test]
fn consistent_hash_key_as_skipper() {
    let key = |filters: &str| {
        let route = format!(r#"r: * -> {filters} -> <consistentHash, "http://198.18.0.1:80">;"#);
        request(&route, "/", &[("X-Uid", "user1")]).0.key
    };
    let hash = |s: &str| {
        Some(crate::balance::rng::fnv(
            crate::balance::rng::FNV_START,
            s.as_bytes(),
        ))
    };
    assert_eq!(
        key(r#"consistentHashKey("missing: ${request.header.missing}")"#),
        None
    );
    assert_eq!(
        key(r#"consistentHashKey("set: ${request.header.x-uid}")"#),
        hash("set: user1")
    );
    assert_eq!(
        key(
            r#"consistentHashKey("set: ${request.header.x-uid}") -> consistentHashKey("overwrite: ${request.header.x-uid}")"#
        ),
        hash("overwrite: user1")
    );
    assert_eq!(
        key(
            r#"consistentHashKey("overwrite: ${request.header.x-uid}") -> consistentHashKey("missing overwrite: ${request.header.missing}")"#
        ),
        hash("overwrite: user1")
    );
    let ex = Exchange::default();
    assert_eq!(
        ex.key_hash("198.18.0.1".parse().expect("ip")),
        hash("198.18.0.1").expect("hash"),
        "no key: the client address"
    );
}
