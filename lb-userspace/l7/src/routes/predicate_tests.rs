//! The request predicates ported from skipper's tests: `Cookie`, `QueryParam`,
//! `Source`, `SourceFromLast`, `ClientIP`, `Between`, `After` and `Before`, each
//! group naming the skipper test it follows. Every predicate is compiled in a route,
//! so argument errors are checked as route errors with their position.
//!
//! One deliberate difference: X-Forwarded-For counts for `Source` and
//! `SourceFromLast` only from a trusted proxy, so skipper's cases that read the header
//! run with `trusted`, and extra cases show an untrusted peer's header ignored.

use std::time::SystemTime;

use http::{HeaderMap, HeaderValue, Method};

use super::{
    predicate::RequestView,
    tests::{parse, table},
};

/// A request as the predicates see it.
#[derive(Clone, Copy)]
struct Req {
    cookie: Option<&'static str>,
    query: &'static str,
    peer: &'static str,
    xff: Option<&'static str>,
    trusted: bool,
    /// RFC 3339.
    now: &'static str,
}

const REQ: Req = Req {
    cookie: None,
    query: "",
    peer: "192.0.2.1",
    xff: None,
    trusted: false,
    now: "2024-06-01T12:00:00Z",
};

fn at(text: &str) -> SystemTime {
    lb_model::units::parse_rfc3339(text).expect("an RFC 3339 time")
}

/// Whether route `r: <predicate> -> <shunt>` takes `req`.
fn matches(predicate: &str, req: Req) -> bool {
    let t = table(&format!("r: {predicate} -> <shunt>;"));
    let mut headers = HeaderMap::new();
    if let Some(c) = req.cookie {
        headers.insert(http::header::COOKIE, HeaderValue::from_static(c));
    }
    if let Some(x) = req.xff {
        headers.insert("x-forwarded-for", HeaderValue::from_static(x));
    }
    let get = Method::GET;
    let view = RequestView {
        query: req.query,
        peer: req.peer.parse().expect("peer address"),
        trusted: req.trusted,
        now: Some(at(req.now)),
        ..RequestView::new(&get, "/", "example.org", &headers)
    };
    t.find(&view).is_some()
}

/// `predicate` compiles (`true`) or is refused at its position, naming it (`false`).
fn compiles(predicate: &str) -> bool {
    let text = format!("r: {predicate} -> <shunt>;");
    match parse(&text) {
        Ok(_) => true,
        Err(e) => {
            let e = e.to_string();
            let name = predicate.split('(').next().unwrap_or_default();
            assert!(
                e.contains("line 1, column 4") && e.contains(name),
                "{predicate}: {e}"
            );
            false
        }
    }
}

fn check_compile(group: &str, cases: &[(&str, &str, bool)]) -> usize {
    for (what, predicate, ok) in cases {
        assert_eq!(compiles(predicate), *ok, "{group}: {what}: {predicate}");
    }
    cases.len()
}

fn check_match(group: &str, cases: &[(&str, &str, Req, bool)]) -> usize {
    for (what, predicate, req, want) in cases {
        assert_eq!(
            matches(predicate, *req),
            *want,
            "{group}: {what}: {predicate}"
        );
    }
    cases.len()
}

#[test]
fn cookie() {
    // skipper predicates/cookie/cookie_test.go TestCookieArgs
    check_compile(
        "Cookie args",
        &[
            ("no args", "Cookie()", false),
            (
                "too many args",
                r#"Cookie("name", "value", "something")"#,
                false,
            ),
            ("invalid name", r#"Cookie(1, "value")"#, false),
            ("invalid value", r#"Cookie("name", "\\")"#, false),
            ("ok", r#"Cookie("name", "value")"#, true),
            ("ok, regexp literal", r#"Cookie("name", /^v$/)"#, true),
        ],
    );
    // TestCookieMatch
    let c = |cookie| Req {
        cookie: Some(cookie),
        ..REQ
    };
    check_match(
        "Cookie match",
        &[
            (
                "not found",
                r#"Cookie("tcial", /^enabled$/)"#,
                c("some=value"),
                false,
            ),
            (
                "don't match",
                r#"Cookie("tcial", /^enabled, but not working$/)"#,
                c("some=value;tcial=enabled"),
                false,
            ),
            (
                "match",
                r#"Cookie("tcial", /^enabled$/)"#,
                c("some=value;tcial=enabled"),
                true,
            ),
            // Go's Request.Cookie: quotes removed, the first valid pair of the name.
            (
                "quoted value",
                r#"Cookie("tcial", /^enabled$/)"#,
                c(r#"tcial="enabled""#),
                true,
            ),
            (
                "first pair wins",
                r#"Cookie("tcial", /^on$/)"#,
                c("tcial=off; tcial=on"),
                false,
            ),
            ("no Cookie header", r#"Cookie("tcial", /.*/)"#, REQ, false),
            (
                "empty value matches ^$",
                r#"Cookie("tcial", /^$/)"#,
                c("tcial="),
                true,
            ),
        ],
    );
}

#[test]
fn query_param() {
    // skipper predicates/query/query_test.go TestQueryArgs
    check_compile(
        "QueryParam args",
        &[
            ("too few args", "QueryParam()", false),
            (
                "too many args",
                r#"QueryParam("key", "value", "something")"#,
                false,
            ),
            ("exists case", r#"QueryParam("query")"#, true),
            ("match case simple", r#"QueryParam("key", "value")"#, true),
            ("match case regexp", r#"QueryParam("key", /^value$/)"#, true),
            (
                "invalid regexp, three args",
                r#"QueryParam("key", "value", "\\")"#,
                false,
            ),
            ("invalid type key", r#"QueryParam(5, "value")"#, false),
            ("invalid type value", r#"QueryParam("key", 5)"#, false),
            ("invalid regexp string", r#"QueryParam("key", "\\")"#, false),
        ],
    );
    // TestMatchArgs (the values as Go's Values.Encode writes them)
    let q = |query| Req { query, ..REQ };
    check_match(
        "QueryParam match",
        &[
            (
                "find existing params",
                r#"QueryParam("key")"#,
                q("key=value"),
                true,
            ),
            (
                "does not find nonexistent params",
                r#"QueryParam("keyNot")"#,
                q("key=value"),
                false,
            ),
            (
                "find existing params with multiple values",
                r#"QueryParam("key")"#,
                q("key=value1&key=value2"),
                true,
            ),
            (
                "match query params",
                r#"QueryParam("key", "^regexp$")"#,
                q("key=regexp"),
                true,
            ),
            (
                "match query params with multiple values",
                r#"QueryParam("key", "^regexp$")"#,
                q("key=value&key=regexp"),
                true,
            ),
            (
                "does not match nonexistent params",
                r#"QueryParam("key", "^regexp$")"#,
                q("key=value&key=value2"),
                false,
            ),
            // Go's ParseQuery: keys and values decoded, an empty value is there.
            (
                "decoded value",
                r#"QueryParam("k y", "^a b/c$")"#,
                q("k+y=a+b%2Fc"),
                true,
            ),
            (
                "key without value exists",
                r#"QueryParam("flag")"#,
                q("flag"),
                true,
            ),
            ("no query", r#"QueryParam("key")"#, REQ, false),
            (
                "a pair with ; is dropped",
                r#"QueryParam("key")"#,
                q("key=a;b"),
                false,
            ),
        ],
    );
}

#[test]
fn source_args() {
    // skipper predicates/source/source_test.go TestCreate, for all three names
    let mut n = 0;
    for name in ["Source", "SourceFromLast", "ClientIP"] {
        let cases: Vec<(&str, String, bool)> = vec![
            ("no args", format!("{name}()"), false),
            ("arg 1 not string", format!("{name}(1)"), false),
            (
                "arg 2 not string",
                format!(r#"{name}("127.0.0.1/32", 1)"#),
                false,
            ),
            (
                "one invalid IP",
                format!(r#"{name}("1.2.3.4.5/16", "1000.2.3.4")"#),
                false,
            ),
            (
                "arg 1 not netmask",
                format!(r#"{name}("all the things")"#),
                false,
            ),
            (
                "one valid netmask",
                format!(r#"{name}("1.2.3.4/32")"#),
                true,
            ),
            (
                "two valid netmasks",
                format!(r#"{name}("1.2.3.4/32", "1.2.3.4/32")"#),
                true,
            ),
            (
                "no net mask should default to /32",
                format!(r#"{name}("1.2.3.4")"#),
                true,
            ),
            (
                "should handle IPv6 addresses",
                format!(r#"{name}("C0:FF::EE")"#),
                true,
            ),
            (
                "should handle IPv6 with mask",
                format!(r#"{name}("C0:FF::EE/32")"#),
                true,
            ),
            // skipper net.ParseIPCIDRs: netip's rules.
            (
                "unspecified address alone",
                format!(r#"{name}("0.0.0.0")"#),
                false,
            ),
            (
                "unspecified network",
                format!(r#"{name}("0.0.0.0/0")"#),
                true,
            ),
            (
                "prefix too long",
                format!(r#"{name}("10.0.0.0/33")"#),
                false,
            ),
            (
                "prefix with a leading zero",
                format!(r#"{name}("10.0.0.0/08")"#),
                false,
            ),
        ];
        let cases: Vec<(&str, &str, bool)> = cases
            .iter()
            .map(|(w, p, ok)| (*w, p.as_str(), *ok))
            .collect();
        n += check_compile(name, &cases);
    }
    assert_eq!(n, 42);
}

/// skipper's matching cases shared by the three source predicates (TestMatching,
/// TestMatchingFromLast, TestMatchingClientIP), the peer given without a port.
fn source_common(name: &str) -> usize {
    let p = |peer| Req { peer, ..REQ };
    let cases = [
        ("happy case", r#""127.0.0.1""#, p("127.0.0.1"), true),
        ("sad case", r#""127.0.0.1""#, p("127.0.0.2"), false),
        (
            "should match on netmask",
            r#""127.0.0.1/30""#,
            p("127.0.0.2"),
            true,
        ),
        (
            "should correctly handle netmask /31",
            r#""127.0.0.0/31""#,
            p("127.0.0.2"),
            false,
        ),
        (
            "should correctly handle netmask /30",
            r#""127.0.0.0/30""#,
            p("127.0.0.2"),
            true,
        ),
        (
            "should consider multiple masks",
            r#""127.0.0.1", "8.8.8.8/24""#,
            p("8.8.8.127"),
            true,
        ),
        (
            "should work for IPv6",
            r#""C0:FF::EE""#,
            p("c0:ff::ee"),
            true,
        ),
        (
            "should work for IPv6 with mask - pass",
            r#""C0:FF::EE/127""#,
            p("c0:ff::ef"),
            true,
        ),
        (
            "should work for IPv6 with mask - reject",
            r#""C0:FF::EE/127""#,
            p("c0:ff::ec"),
            false,
        ),
        // Ours: families never mix, and a mapped IPv4 peer counts as IPv4.
        (
            "IPv4 network, IPv6 peer",
            r#""0.0.0.0/0""#,
            p("c0:ff::ee"),
            false,
        ),
        (
            "mapped IPv4 peer",
            r#""127.0.0.1""#,
            p("::ffff:127.0.0.1"),
            true,
        ),
    ];
    for (what, args, req, want) in &cases {
        let predicate = format!("{name}({args})");
        assert_eq!(
            matches(&predicate, *req),
            *want,
            "{name}: {what}: {predicate}"
        );
    }
    cases.len()
}

#[test]
fn source_match() {
    let mut n = 0;
    for name in ["Source", "SourceFromLast", "ClientIP"] {
        n += source_common(name);
    }
    let xff = |xff, trusted| Req {
        peer: "127.0.0.1",
        xff: Some(xff),
        trusted,
        ..REQ
    };
    // TestMatching: X-Forwarded-For's first entry (from a trusted proxy here)
    n += check_match(
        "Source X-Forwarded-For",
        &[
            (
                "if available, should use X-Forwarded-For",
                r#"Source("8.8.8.8")"#,
                xff("8.8.8.8", true),
                true,
            ),
            (
                "should use first X-Forwarded-For host",
                r#"Source("8.8.8.8")"#,
                xff("8.8.8.8, 7.7.7.7, 6.6.6.6", true),
                true,
            ),
            (
                "the last is not the first",
                r#"Source("6.6.6.6")"#,
                xff("8.8.8.8, 7.7.7.7, 6.6.6.6", true),
                false,
            ),
            (
                "not an address: the peer",
                r#"Source("127.0.0.1")"#,
                xff("unknown", true),
                true,
            ),
            (
                "untrusted peer: header ignored (ours)",
                r#"Source("8.8.8.8")"#,
                xff("8.8.8.8", false),
                false,
            ),
            (
                "untrusted peer: the peer (ours)",
                r#"Source("127.0.0.1")"#,
                xff("8.8.8.8", false),
                true,
            ),
        ],
    );
    // TestMatchingFromLast
    n += check_match(
        "SourceFromLast X-Forwarded-For",
        &[
            (
                "if available, should use X-Forwarded-For",
                r#"SourceFromLast("8.8.8.8")"#,
                xff("8.8.8.8", true),
                true,
            ),
            (
                "should use last X-Forwarded-For host",
                r#"SourceFromLast("6.6.6.6")"#,
                xff("8.8.8.8, 7.7.7.7, 6.6.6.6", true),
                true,
            ),
            (
                "the first is not the last",
                r#"SourceFromLast("8.8.8.8")"#,
                xff("8.8.8.8, 7.7.7.7, 6.6.6.6", true),
                false,
            ),
            (
                "untrusted peer: header ignored (ours)",
                r#"SourceFromLast("6.6.6.6")"#,
                xff("8.8.8.8, 6.6.6.6", false),
                false,
            ),
        ],
    );
    // TestMatchingClientIP: the header never counts
    n += check_match(
        "ClientIP X-Forwarded-For",
        &[
            (
                "should not use X-Forwarded-For, match",
                r#"ClientIP("127.0.0.1")"#,
                xff("8.8.8.8", true),
                true,
            ),
            (
                "should not use X-Forwarded-For, no match",
                r#"ClientIP("8.8.8.8")"#,
                xff("8.8.8.8", true),
                false,
            ),
        ],
    );
    assert_eq!(n, 45);
}

#[test]
fn interval_args() {
    // skipper predicates/interval/interval_test.go TestCreateBetween
    let mut n = check_compile(
        "Between args",
        &[
            ("nil arguments", "Between()", false),
            (
                "wrong number of arguments, one",
                r#"Between("2016-01-01T12:00:00+07:00")"#,
                false,
            ),
            (
                "wrong number of arguments, three times",
                r#"Between("2016-01-01T12:00:00+07:00", "2016-02-01T12:00:00+07:00", "2016-03-01T12:00:00+07:00")"#,
                false,
            ),
            (
                "first argument is not a string",
                r#"Between(49, "2016-01-01T12:00:00+07:00")"#,
                false,
            ),
            (
                "second argument is not a string",
                r#"Between("2016-01-01T12:00:00+07:00", 49)"#,
                false,
            ),
            (
                "mixed first unix and second string",
                r#"Between(1613606400, "2021-02-18T01:00:00Z")"#,
                false,
            ),
            (
                "mixed first string and second unix",
                r#"Between("2021-02-18T01:00:00Z", 1613613600)"#,
                false,
            ),
            (
                "begin date is after end date",
                r#"Between("2016-02-01T12:00:00+07:00", "2016-01-01T12:00:00+07:00")"#,
                false,
            ),
            (
                "begin date is the same as end date",
                r#"Between("2016-02-01T12:00:00+07:00", "2016-02-01T12:00:00+07:00")"#,
                false,
            ),
            (
                "valid interval with time zone",
                r#"Between("2016-01-01T12:00:00+07:00", "2016-02-01T12:00:00+07:00")"#,
                true,
            ),
            (
                "valid interval in UTC",
                r#"Between("2016-01-01T12:00:00Z", "2016-02-01T12:00:00Z")"#,
                true,
            ),
            (
                "valid interval using Unix time",
                "Between(1451649600, 1454328000)",
                true,
            ),
            (
                "valid interval, invalid location",
                r#"Between("2021-02-18T00:00:00", "2021-02-18T01:00:00", "unknown location")"#,
                false,
            ),
            (
                "begin after end in valid location",
                r#"Between("2021-02-18T02:00:00", "2021-02-18T01:00:00", "Europe/Berlin")"#,
                false,
            ),
            (
                "valid interval in valid location",
                r#"Between("2021-02-18T00:00:00", "2021-02-18T01:00:00", "Europe/Berlin")"#,
                true,
            ),
            (
                "unsupported timezone offset in location",
                r#"Between("2021-02-18T00:00:00+01:00", "2021-02-18T01:00:00", "Europe/Berlin")"#,
                false,
            ),
            (
                "unsupported unix in location",
                r#"Between(1613603624, 1613603625, "Europe/Berlin")"#,
                false,
            ),
            // Go's LoadLocation and layout rules.
            (
                "location names are case-sensitive",
                r#"Between("2021-02-18T00:00:00", "2021-02-18T01:00:00", "europe/berlin")"#,
                false,
            ),
            (
                "one-digit hour in a local time",
                r#"Between("2021-02-18T0:00:00", "2021-02-18T01:00:00", "UTC")"#,
                true,
            ),
            (
                "fraction after the seconds",
                r#"Between("2021-02-18T00:00:00.5", "2021-02-18T01:00:00", "UTC")"#,
                true,
            ),
            (
                "local time without seconds",
                r#"Between("2021-02-18T00:00", "2021-02-18T01:00:00", "UTC")"#,
                false,
            ),
            (
                "RFC 3339 time without offset",
                r#"Between("2021-02-18T00:00:00", "2021-02-18T01:00:00")"#,
                false,
            ),
        ],
    );
    // TestCreateBefore and TestCreateAfter (the same cases; skipper's `1` there is a
    // Go int, which eskip cannot write, so it is left out: eskip numbers are Unix
    // times)
    for name in ["Before", "After"] {
        let cases: Vec<(&str, String, bool)> = vec![
            ("nil arguments", format!("{name}()"), false),
            (
                "wrong number of arguments",
                format!(r#"{name}("2016-01-01T12:00:00+07:00", "2016-02-01T12:00:00+07:00")"#),
                false,
            ),
            (
                "argument is not a time",
                format!(r#"{name}("tomorrow")"#),
                false,
            ),
            (
                "valid string argument",
                format!(r#"{name}("2016-01-01T12:00:00+07:00")"#),
                true,
            ),
            ("valid float argument", format!("{name}(1451624400)"), true),
            (
                "valid timestamp, invalid location",
                format!(r#"{name}("2021-02-18T00:00:00", "unknown location")"#),
                false,
            ),
            (
                "valid timestamp in valid location",
                format!(r#"{name}("2021-02-18T00:00:00", "Europe/Berlin")"#),
                true,
            ),
            (
                "unsupported timezone offset in location",
                format!(r#"{name}("2021-02-18T00:00:00+01:00", "Europe/Berlin")"#),
                false,
            ),
            (
                "unsupported unix in location",
                format!(r#"{name}(1613603624, "Europe/Berlin")"#),
                false,
            ),
        ];
        let cases: Vec<(&str, &str, bool)> = cases
            .iter()
            .map(|(w, p, ok)| (*w, p.as_str(), *ok))
            .collect();
        n += check_compile(name, &cases);
    }
    assert_eq!(n, 40);
}

#[test]
fn interval_match() {
    let now = |now| Req { now, ..REQ };
    // skipper's time.Now() cases with the clock at REQ.now (2024-06-01T12:00:00Z,
    // Unix 1717243200).
    // TestMatchBetween
    let mut n = check_match(
        "Between match",
        &[
            (
                "time inside the interval defined as strings",
                r#"Between("2024-06-01T11:00:00Z", "2024-06-01T13:00:00Z")"#,
                REQ,
                true,
            ),
            (
                "time inside the interval defined as floats",
                "Between(1717239600, 1717246800)",
                REQ,
                true,
            ),
            (
                "time is equal to begin value",
                r#"Between("2016-01-01T12:00:00Z", "2016-02-01T12:00:00Z")"#,
                now("2016-01-01T12:00:00Z"),
                true,
            ),
            (
                "time is equal to end value",
                r#"Between("2016-01-01T12:00:00Z", "2016-02-01T12:00:00Z")"#,
                now("2016-02-01T12:00:00Z"),
                false,
            ),
            (
                "time before begin value",
                r#"Between("2024-06-01T13:00:00Z", "2024-06-01T14:00:00Z")"#,
                REQ,
                false,
            ),
            (
                "time after end value",
                r#"Between("2024-06-01T10:00:00Z", "2024-06-01T11:00:00Z")"#,
                REQ,
                false,
            ),
            (
                "time inside the interval in location",
                r#"Between("2021-02-18T00:00:00", "2021-02-18T01:00:00", "Europe/Berlin")"#,
                now("2021-02-17T23:01:00Z"),
                true,
            ),
            (
                "time inside the interval in UTC location",
                r#"Between("2021-02-18T00:00:00", "2021-02-18T01:00:00", "UTC")"#,
                now("2021-02-18T00:01:00Z"),
                true,
            ),
            (
                "time before the interval in location",
                r#"Between("2021-02-18T00:00:00", "2021-02-18T01:00:00", "Europe/Berlin")"#,
                now("2021-02-17T22:59:00Z"),
                false,
            ),
            (
                "time after the interval in location",
                r#"Between("2021-02-18T00:00:00", "2021-02-18T01:00:00", "Europe/Berlin")"#,
                now("2021-02-18T00:01:00Z"),
                false,
            ),
            // Ours: the offset counts, Unix seconds are truncated.
            (
                "offsets compared as instants",
                r#"Between("2024-06-01T13:30:00+02:00", "2024-06-01T14:30:00+02:00")"#,
                REQ,
                true,
            ),
            (
                "fractional Unix seconds truncated",
                "Between(1717243200.9, 1717246800)",
                REQ,
                true,
            ),
        ],
    );
    // TestMatchBefore
    n += check_match(
        "Before match",
        &[
            (
                "time before the boundary value defined as string",
                r#"Before("2024-06-01T13:00:00Z")"#,
                REQ,
                true,
            ),
            (
                "time before the boundary value defined as float",
                "Before(1717246800)",
                REQ,
                true,
            ),
            (
                "time is equal to boundary value",
                r#"Before("2016-01-01T12:00:00Z")"#,
                now("2016-01-01T12:00:00Z"),
                false,
            ),
            (
                "time after boundary value",
                r#"Before("2024-06-01T11:00:00Z")"#,
                REQ,
                false,
            ),
            (
                "time before the boundary in location",
                r#"Before("2021-02-18T01:00:00", "Europe/Berlin")"#,
                now("2021-02-17T23:59:00Z"),
                true,
            ),
            (
                "time after the boundary in location",
                r#"Before("2021-02-18T01:00:00", "Europe/Berlin")"#,
                now("2021-02-18T00:01:00Z"),
                false,
            ),
        ],
    );
    // TestMatchAfter
    n += check_match(
        "After match",
        &[
            (
                "time before the boundary value",
                r#"After("2024-06-01T13:00:00Z")"#,
                REQ,
                false,
            ),
            (
                "time is equal to boundary value",
                r#"After("2016-01-01T12:00:00Z")"#,
                now("2016-01-01T12:00:00Z"),
                true,
            ),
            (
                "time after boundary value defined as string",
                r#"After("2024-06-01T11:00:00Z")"#,
                REQ,
                true,
            ),
            (
                "time after boundary value defined as float",
                "After(1717239600)",
                REQ,
                true,
            ),
            (
                "time before the boundary in location",
                r#"After("2021-02-18T01:00:00", "Europe/Berlin")"#,
                now("2021-02-17T23:59:00Z"),
                false,
            ),
            (
                "time after the boundary in location",
                r#"After("2021-02-18T01:00:00", "Europe/Berlin")"#,
                now("2021-02-18T00:01:00Z"),
                true,
            ),
        ],
    );
    assert_eq!(n, 24);
}

#[test]
fn each_counts_one_for_priority() {
    // skipper routing/matcher.go: the leaf weight is the number of predicates.
    let t = table(
        r#"plain: * -> <shunt>;
           cookie: Cookie("c", /x/) -> <shunt>;
           both: Cookie("c", /x/) && QueryParam("q") -> <shunt>;"#,
    );
    let priority = |id: &str| t.routes().iter().find(|r| r.id == id).map(|r| r.priority);
    assert_eq!(priority("plain"), Some(0));
    assert_eq!(priority("cookie"), Some(1));
    assert_eq!(priority("both"), Some(2));
    let mut h = HeaderMap::new();
    h.insert(http::header::COOKIE, HeaderValue::from_static("c=x"));
    let get = Method::GET;
    let view = RequestView {
        query: "q=1",
        ..RequestView::new(&get, "/", "example.org", &h)
    };
    assert_eq!(t.find(&view).map(|r| r.id.as_str()), Some("both"));
}
