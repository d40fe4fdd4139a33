//! Skipper's eskip test cases, ported: the inputs and expected values of
//! `eskip/parser_test.go`, `eskip/eskip_test.go`, `eskip/string_test.go` and
//! `eskip/roundtrip_test.go` (zalando/skipper; skipper has no `lexer_test.go`), and
//! cases read off `eskip/lexer.go` and `eskip/parser.y` where its tests are silent.
//! Each case names where it comes from. Skipper reports a byte offset; on one line
//! that is our column minus one.

use super::*;

/// Routes as our printer writes them: the canonical form compares whole routes (ids,
/// predicates in order, filters, arguments, backends).
fn printed(text: &str) -> Vec<String> {
    parse(text)
        .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Every argument of every predicate, then of every filter, in order.
fn all_args(text: &str) -> Vec<Arg> {
    let routes = parse(text).unwrap_or_else(|e| panic!("{text:?} should parse: {e}"));
    routes
        .iter()
        .flat_map(|r| r.predicates.iter().chain(&r.filters))
        .flat_map(|c| c.args.clone())
        .collect()
}

const SINGLE_ROUTE: &str = r#"
        PathRegexp(/\.html$/) && Header("Accept", "text/html") ->
        modPath(/\.html$/, ".jsx") ->
        requestHeader("X-Type", "page") ->
        "https://render.example.com""#;

const SINGLE_ROUTE_PRINTED: &str = r#"PathRegexp(/\.html$/) && Header("Accept", "text/html") -> modPath(/\.html$/, ".jsx") -> requestHeader("X-Type", "page") -> "https://render.example.com""#;

#[test]
fn documents_parse_to_these_routes() {
    let single_def = format!("testroute:{SINGLE_ROUTE}");
    let single_def_printed = format!("testroute: {SINGLE_ROUTE_PRINTED};");
    let document = format!(
        r#"
        route0: {SINGLE_ROUTE};

        route1: Path("/some/path") -> "https://backend-0.example.com";
        route2: Path("/some/other/path") -> fixPath() -> "https://backend-1.example.com";

        route3:
            Method("POST") && Path("/api") ->
            requestHeader("X-Type", "ajax-post") ->
            "https://api.example.com";

        catchAll: * -> "https://www.example.org";
        catchAllWithCustom: * && Custom() -> "https://www.example.org""#
    );
    let route0 = format!("route0: {SINGLE_ROUTE_PRINTED};");
    let fuzz = "\x2f\x2f\0\0\0\u{e6}\u{fe}\0\0\x2f\0\0\0\0\0\0\0\u{e6}\u{fe}\0\0\x2f\0\0\0\0";
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        // parser_test.go
        (
            "TestParseSingleRoute",
            SINGLE_ROUTE,
            vec![SINGLE_ROUTE_PRINTED],
        ),
        (
            "TestParseSingleRouteDef",
            &single_def,
            vec![&single_def_printed],
        ),
        (
            "TestParseDocument",
            &document,
            vec![
                &route0,
                r#"route1: Path("/some/path") -> "https://backend-0.example.com";"#,
                r#"route2: Path("/some/other/path") -> fixPath() -> "https://backend-1.example.com";"#,
                r#"route3: Method("POST") && Path("/api") -> requestHeader("X-Type", "ajax-post") -> "https://api.example.com";"#,
                r#"catchAll: * -> "https://www.example.org";"#,
                r#"catchAllWithCustom: Custom() -> "https://www.example.org";"#,
            ],
        ),
        (
            "TestNumberStartingWithDecimal",
            "* -> number(.3) -> <shunt>",
            vec!["* -> number(0.3) -> <shunt>"],
        ),
        (
            "TestNumber",
            "* -> number(3.14) -> <shunt>",
            vec!["* -> number(3.14) -> <shunt>"],
        ),
        (
            "TestLBBackend single endpoint",
            r#"* -> <"https://example.org">"#,
            vec![r#"* -> <"https://example.org">"#],
        ),
        (
            "TestLBBackend multiple endpoints",
            "* -> <\"https://example1.org\",\n\t\t\"https://example2.org\",\n\t\t\"https://example3.org\">",
            vec![
                r#"* -> <"https://example1.org", "https://example2.org", "https://example3.org">"#,
            ],
        ),
        (
            "TestLBBackend with algorithm",
            r#"* -> <algFoo, "https://example.org">"#,
            vec![r#"* -> <algFoo, "https://example.org">"#],
        ),
        (
            "TestLBBackend algorithm, multiple endpoints",
            "* -> <algFoo,\n \"https://example1.org\",\n \"https://example2.org\",\n \"https://example3.org\">",
            vec![
                r#"* -> <algFoo, "https://example1.org", "https://example2.org", "https://example3.org">"#,
            ],
        ),
        (
            "TestLBBackend with filters",
            "* -> foo() -> <algFoo,\n \"https://example1.org\",\n \"https://example2.org\",\n \"https://example3.org\">",
            vec![
                r#"* -> foo() -> <algFoo, "https://example1.org", "https://example2.org", "https://example3.org">"#,
            ],
        ),
        // TestLBBackend "algorithm only" fails in skipper; ours on purpose: the
        // service's own endpoints (module docs).
        (
            "TestLBBackend algorithm only (ours differs)",
            "* -> <roundRobin>",
            vec!["* -> <roundRobin>"],
        ),
        // eskip_test.go TestParse
        (
            "TestParse path predicate",
            r#"Path("/some/path") -> "https://www.example.org""#,
            vec![r#"Path("/some/path") -> "https://www.example.org""#],
        ),
        (
            "TestParse path regexp",
            r#"PathRegexp("^/some") && PathRegexp(/\/\w+Id$/) -> "https://www.example.org""#,
            vec![r#"PathRegexp("^/some") && PathRegexp(/\/\w+Id$/) -> "https://www.example.org""#],
        ),
        (
            "TestParse weight predicate",
            r#"Weight(50) -> "https://www.example.org""#,
            vec![r#"Weight(50) -> "https://www.example.org""#],
        ),
        (
            "TestParse method predicate",
            r#"Method("HEAD") -> "https://www.example.org""#,
            vec![r#"Method("HEAD") -> "https://www.example.org""#],
        ),
        (
            "TestParse host regexps",
            r#"Host(/^www[.]/) && Host(/[.]org$/) -> "https://www.example.org""#,
            vec![r#"Host(/^www[.]/) && Host(/[.]org$/) -> "https://www.example.org""#],
        ),
        (
            "TestParse headers",
            "Header(\"Header-0\", \"value-0\") &&\n\t\tHeader(\"Header-1\", \"value-1\") ->\n\t\t\"https://www.example.org\"",
            vec![
                r#"Header("Header-0", "value-0") && Header("Header-1", "value-1") -> "https://www.example.org""#,
            ],
        ),
        (
            "TestParse header regexps",
            "HeaderRegexp(\"Header-0\", \"value-0\") &&\nHeaderRegexp(\"Header-0\", \"value-1\") &&\nHeaderRegexp(\"Header-1\", \"value-2\") &&\nHeaderRegexp(\"Header-1\", \"value-3\") ->\n\"https://www.example.org\"",
            vec![
                r#"HeaderRegexp("Header-0", "value-0") && HeaderRegexp("Header-0", "value-1") && HeaderRegexp("Header-1", "value-2") && HeaderRegexp("Header-1", "value-3") -> "https://www.example.org""#,
            ],
        ),
        (
            "TestParse comment as last token",
            "route: Any() -> <shunt>; // some comment",
            vec!["route: * -> <shunt>;"],
        ),
        (
            "TestParse catch all",
            r#"* -> "https://www.example.org""#,
            vec![r#"* -> "https://www.example.org""#],
        ),
        (
            "TestParse custom predicate",
            r#"Custom1(3.14, "test value") && Custom2() -> "https://www.example.org""#,
            vec![r#"Custom1(3.14, "test value") && Custom2() -> "https://www.example.org""#],
        ),
        (
            "TestParse shunt",
            r#"* -> setRequestHeader("X-Foo", "bar") -> <shunt>"#,
            vec![r#"* -> setRequestHeader("X-Foo", "bar") -> <shunt>"#],
        ),
        (
            "TestParse multiple routes",
            r#"r1: Path("/foo") -> <shunt>; r2: Path("/bar") -> "https://www.example.org""#,
            vec![
                r#"r1: Path("/foo") -> <shunt>;"#,
                r#"r2: Path("/bar") -> "https://www.example.org";"#,
            ],
        ),
        ("TestMustParse valid", "* -> <shunt>", vec!["* -> <shunt>"]),
        // TestParseFilters, as the filters of a route
        (
            "TestParseFilters success",
            r#"* -> filter1(3.14) -> filter2("key", 42) -> <shunt>"#,
            vec![r#"* -> filter1(3.14) -> filter2("key", 42) -> <shunt>"#],
        ),
        (
            "TestParseFilters negative number",
            "* -> filter1(-42, -3.14) -> <shunt>",
            vec!["* -> filter1(-42, -3.14) -> <shunt>"],
        ),
        (
            "TestParseFilters a trailing comment is ignored",
            "* -> filter1(3.14) -> filter2(\"key\", 42) -> <shunt> // a trailing comment",
            vec![r#"* -> filter1(3.14) -> filter2("key", 42) -> <shunt>"#],
        ),
        (
            "TestParseFilters a comment before is ignored",
            "// a comment on a separate line\n\t\t* -> filter1(3.14) -> filter2(\"key\", 42) -> <shunt>",
            vec![r#"* -> filter1(3.14) -> filter2("key", 42) -> <shunt>"#],
        ),
        (
            "TestParseFilters a comment after is ignored",
            "* -> filter1(3.14) -> filter2(\"key\", 42) -> <shunt>\n\t\t// a comment on a separate line",
            vec![r#"* -> filter1(3.14) -> filter2("key", 42) -> <shunt>"#],
        ),
        // TestParsePredicates, as the predicates of a route
        (
            "TestParsePredicates single predicate",
            r#"Foo("bar") -> <shunt>"#,
            vec![r#"Foo("bar") -> <shunt>"#],
        ),
        (
            "TestParsePredicates negative number starting with decimal",
            "Foo(-.3) -> <shunt>",
            vec!["Foo(-0.3) -> <shunt>"],
        ),
        (
            "TestParsePredicates multiple predicates",
            r#"Foo("bar") && Baz("qux") && Quux("quuz") -> <shunt>"#,
            vec![r#"Foo("bar") && Baz("qux") && Quux("quuz") -> <shunt>"#],
        ),
        (
            "TestParsePredicates star notation",
            "* -> <shunt>",
            vec!["* -> <shunt>"],
        ),
        (
            "TestParsePredicates a trailing comment is ignored",
            "Foo(\"bar\") && Baz(\"qux\") // a trailing comment\n -> <shunt>",
            vec![r#"Foo("bar") && Baz("qux") -> <shunt>"#],
        ),
        (
            "TestParsePredicates a comment before is ignored",
            "// a comment on a separate line\n\t\tFoo(\"bar\") && Baz(\"qux\") -> <shunt>",
            vec![r#"Foo("bar") && Baz("qux") -> <shunt>"#],
        ),
        // Empty texts: TestParseFilters "empty" and comment cases, TestParsePredicates
        // "empty", "comment fuzz 1" and "comment fuzz 2" (bytes that are not UTF-8
        // there are characters here: the comment hides them either way).
        ("TestParsePredicates empty", "", vec![]),
        ("TestParseFilters empty", " \t", vec![]),
        (
            "TestParseFilters a comment produces nil filters",
            "// a comment",
            vec![],
        ),
        ("TestParsePredicates comment fuzz 1", "///", vec![]),
        ("TestParsePredicates comment fuzz 2", fuzz, vec![]),
        // parser.y: `routes` may be empty and `routes semicolon` repeats.
        ("parser.y routes: a lone `;`", ";", vec![]),
        (
            "parser.y routes: empty separators",
            ";r1: * -> <shunt>;;r2: * -> <shunt>;;",
            vec!["r1: * -> <shunt>;", "r2: * -> <shunt>;"],
        ),
        (
            "parser.y routes: `;` after the last route is optional",
            "r1: * -> <shunt>",
            vec!["r1: * -> <shunt>;"],
        ),
        // parser.y `args: | arg | args comma arg`: an empty first argument.
        (
            "parser.y args: leading comma",
            "* -> f(, 1) -> <shunt>",
            vec!["* -> f(1) -> <shunt>"],
        ),
        // parser.y `predicate: any`, combined like any other (eskip.go drops it).
        (
            "parser.y predicate any",
            "* && Custom() && * -> <shunt>",
            vec!["Custom() -> <shunt>"],
        ),
        // lexer.go scanBacktick: a second string quote.
        (
            "lexer.go scanBacktick",
            "* -> f(`a\"b`) -> <shunt>",
            vec![r#"* -> f("a\"b") -> <shunt>"#],
        ),
        // eskip.go applyPredicates: Header names compared as written.
        (
            "eskip.go duplicate header is case-sensitive",
            r#"Header("A", "1") && Header("a", "2") -> <shunt>"#,
            vec![r#"Header("A", "1") && Header("a", "2") -> <shunt>"#],
        ),
        // eskip.go newRouteDefinition: url.ParseRequestURI reads `host:port` as a
        // scheme and an opaque part.
        (
            "eskip.go ParseRequestURI scheme",
            r#"* -> <"localhost:80", "localhost:81">"#,
            vec![r#"* -> <"localhost:80", "localhost:81">"#],
        ),
        (
            "eskip.go schemes compared in lower case",
            r#"* -> <"HTTP://a:1", "http://b:2">"#,
            vec![r#"* -> <"HTTP://a:1", "http://b:2">"#],
        ),
        // string_test.go TestRouteString, TestDocString, TestPrintSortedPredicates,
        // eskip_test.go TestEditorPreProcessor, TestDefaultFiltersDoCorrectPrependFilters
        (
            "TestRouteString static",
            r#"Method("GET") -> static("/some", "/file") -> <shunt>"#,
            vec![r#"Method("GET") -> static("/some", "/file") -> <shunt>"#],
        ),
        (
            "TestRouteString lb default algorithm",
            r#"Method("GET") -> <"http://127.0.0.1:9997">"#,
            vec![r#"Method("GET") -> <"http://127.0.0.1:9997">"#],
        ),
        (
            "TestRouteString lb random",
            r#"Method("GET") -> <random, "http://127.0.0.1:9997">"#,
            vec![r#"Method("GET") -> <random, "http://127.0.0.1:9997">"#],
        ),
        (
            "TestRouteString lb random, two endpoints",
            r#"Method("GET") -> <random, "http://127.0.0.1:9997", "http://127.0.0.1:9998">"#,
            vec![r#"Method("GET") -> <random, "http://127.0.0.1:9997", "http://127.0.0.1:9998">"#],
        ),
        (
            "TestDocString",
            "route1: Method(\"GET\") -> filter(\"expression\") -> <shunt>;\nroute2: Path(\"/some/path\") -> \"https://www.example.org\";",
            vec![
                r#"route1: Method("GET") -> filter("expression") -> <shunt>;"#,
                r#"route2: Path("/some/path") -> "https://www.example.org";"#,
            ],
        ),
        (
            "TestPrintSortedPredicates regular predicates",
            r#"routeWithoutDefaultPredicates: True() && Cookie("alpha", "/^enabled$/") -> "https://www.example.org""#,
            vec![
                r#"routeWithoutDefaultPredicates: True() && Cookie("alpha", "/^enabled$/") -> "https://www.example.org";"#,
            ],
        ),
        (
            "TestEditorPreProcessor multiple routes",
            "r0: Host(\"www[.]example[.]org\") -> status(201) -> <shunt>;\n\t\t\tr1_filter: Source(\"1.2.3.4/26\") -> status(201) -> <shunt>;",
            vec![
                r#"r0: Host("www[.]example[.]org") -> status(201) -> <shunt>;"#,
                r#"r1_filter: Source("1.2.3.4/26") -> status(201) -> <shunt>;"#,
            ],
        ),
        (
            "TestDefaultFiltersDoCorrectPrependFilters",
            "\nr1: Method(\"GET\") -> inlineContent(\"r1\") -> <shunt>;\nr2: Method(\"POST\") -> inlineContent(\"r2\") -> <shunt>;\n",
            vec![
                r#"r1: Method("GET") -> inlineContent("r1") -> <shunt>;"#,
                r#"r2: Method("POST") -> inlineContent("r2") -> <shunt>;"#,
            ],
        ),
    ];
    for (origin, text, want) in &cases {
        assert_eq!(&printed(text), want, "{origin}: {text:?}");
    }
    assert!(cases.len() >= 50);
}

#[test]
#[expect(
    clippy::approx_constant,
    reason = "3.14 is skipper's test value, not π"
)]
fn arguments_read_as_skipper_reads_them() {
    let s = |v: &str| Arg::Str(v.to_owned());
    let re = |v: &str| Arg::Regex(v.to_owned());
    let huge = format!("* -> f(1{}) -> <shunt>", "0".repeat(400));
    let cases: Vec<(&str, &str, Vec<Arg>)> = vec![
        (
            "TestParsingSpecialChars",
            r#"Path("newlines") -> inlineContent("Line \ \1\nLine 2\r\nLine 3\a\b\f\n\r\t\v") -> <shunt>"#,
            vec![
                s("newlines"),
                s("Line \\ \\1\nLine 2\r\nLine 3\x07\x08\x0c\n\r\t\x0b"),
            ],
        ),
        (
            "TestRegExp slash in a class",
            r"PathRegexp(/[/]/)-> <shunt>",
            vec![re("[/]")],
        ),
        (
            "TestRegExp escaped [ in a class",
            r"PathRegexp(/[\[]/)-> <shunt>",
            vec![re(r"[\[]")],
        ),
        (
            "TestRegExp escaped ] in a class",
            r"PathRegexp(/[\]]/)-> <shunt>",
            vec![re(r"[\]]")],
        ),
        (
            "TestRegExp escaped backslash",
            r"PathRegexp(/[\\]/)-> <shunt>",
            vec![re(r"[\]")],
        ),
        (
            "TestRegExp escaped slash in a class",
            r"PathRegexp(/[\/]/)-> <shunt>",
            vec![re("[/]")],
        ),
        (
            "TestRegExp quote in a class",
            r#"PathRegexp(/["]/)-> <shunt>"#,
            vec![re(r#"["]"#)],
        ),
        (
            "TestRegExp escaped quote kept",
            r#"PathRegexp(/[\"]/)-> <shunt>"#,
            vec![re(r#"[\"]"#)],
        ),
        (
            "TestRegExp escaped slash",
            r"PathRegexp(/\//)-> <shunt>",
            vec![re("/")],
        ),
        (
            "TestRegExp POSIX class",
            r"PathRegexp(/[[:upper:]]/)-> <shunt>",
            vec![re("[[:upper:]]")],
        ),
        (
            "TestParse path regexp",
            r#"PathRegexp("^/some") && PathRegexp(/\/\w+Id$/) -> "https://www.example.org""#,
            vec![s("^/some"), re(r"/\w+Id$")],
        ),
        (
            "TestParse custom predicate",
            r#"Custom1(3.14, "test value") && Custom2() -> "https://www.example.org""#,
            vec![Arg::Num(3.14), s("test value")],
        ),
        (
            "TestParse weight predicate",
            r#"Weight(50) -> "https://www.example.org""#,
            vec![Arg::Num(50.0)],
        ),
        (
            "TestParseFilters negative number",
            "* -> filter1(-42, -3.14) -> <shunt>",
            vec![Arg::Num(-42.0), Arg::Num(-3.14)],
        ),
        (
            "TestParsePredicates negative number starting with decimal",
            "Foo(-.3) -> <shunt>",
            vec![Arg::Num(-0.3)],
        ),
        (
            "TestRouteString escaped escapes",
            r#"* -> filter0("Line 1\\r\\nLine 2") -> <shunt>"#,
            vec![s(r"Line 1\r\nLine 2")],
        ),
        (
            "TestRouteString escapes",
            r#"* -> filter0("Line 1\r\nLine 2") -> <shunt>"#,
            vec![s("Line 1\r\nLine 2")],
        ),
        (
            "TestRouteString slash",
            r#"Path("/") && PathRegexp(/\//) -> afilter("/") -> <shunt>"#,
            vec![s("/"), re("/"), s("/")],
        ),
        (
            "TestRouteString backslash",
            r#"Path("\\") && PathRegexp(/\\/) -> afilter("\\") -> <shunt>"#,
            vec![s("\\"), re("\\"), s("\\")],
        ),
        (
            "TestRouteString double quote",
            r#"Path("\"") && PathRegexp(/"/) -> afilter("\"") -> <shunt>"#,
            vec![s("\""), re("\""), s("\"")],
        ),
        (
            "TestRouteString backslash before other escapes",
            r#"Path("\\\n\"/") && PathRegexp(/\\\n"\//) -> afilter("\\\n\"/") -> <shunt>"#,
            vec![s("\\\n\"/"), re("\\\\n\"/"), s("\\\n\"/")],
        ),
        (
            "TestRouteString quote in a header",
            r#"Header("ap\"key", "ap\"value") -> <shunt>"#,
            vec![s("ap\"key"), s("ap\"value")],
        ),
        (
            "TestPrintSortedPredicates regexp escape",
            r#"HeaderRegexp("age", /\\d/) -> <shunt>"#,
            vec![s("age"), re(r"\d")],
        ),
        // lexer.go scanEscaped: an unknown escape keeps its backslash.
        (
            "lexer.go unknown escape",
            r#"* -> f("a\qb", "\x") -> <shunt>"#,
            vec![s(r"a\qb"), s(r"\x")],
        ),
        (
            "lexer.go backtick escapes",
            r#"* -> f(`a\`b`, `a\"b`, `\\`) -> <shunt>"#,
            vec![s("a`b"), s(r#"a\"b"#), s("\\")],
        ),
        (
            "lexer.go backtick not escaped in quotes",
            r#"* -> f("a\`b") -> <shunt>"#,
            vec![s(r"a\`b")],
        ),
        // lexer.go scanRegexp: other escapes kept, line breaks read through.
        (
            "lexer.go regexp escapes kept",
            r"PathRegexp(/\d+\.x/) -> <shunt>",
            vec![re(r"\d+\.x")],
        ),
        (
            "lexer.go regexp over lines",
            "PathRegexp(/a\nb/) -> <shunt>",
            vec![re("a\nb")],
        ),
        (
            "lexer.go regexp escaped ] does not close",
            r"PathRegexp(/[\]/]/) -> <shunt>",
            vec![re(r"[\]/]")],
        ),
        // lexer.go scanNumber and parser.y convertNumber (strconv.ParseFloat).
        (
            "lexer.go numbers",
            "* -> f(007, -0, 1.50, 0.5) -> <shunt>",
            vec![Arg::Num(7.0), Arg::Num(-0.0), Arg::Num(1.5), Arg::Num(0.5)],
        ),
        (
            "lexer.go number out of range is infinite",
            &huge,
            vec![Arg::Num(f64::INFINITY)],
        ),
    ];
    for (origin, text, want) in &cases {
        assert_eq!(&all_args(text), want, "{origin}: {text:?}");
    }
}

#[test]
fn texts_skipper_refuses_are_errors_here() {
    // (origin, text, line, column of the first error, part of its message)
    let cases: &[(&str, &str, usize, usize, &str)] = &[
        ("TestReturnsLexerErrors", "invalid code", 1, 9, "`(`"),
        (
            "TestParseInvalidDocument",
            "\n        route0: Method(\"GET\") -> \"https://backend-0.example.com\"\n        route1: Method(\"POST\") -> \"https://backend-1.example.com\"",
            3,
            9,
            "`;` between routes",
        ),
        (
            "TestNumberNotClosedWithDecimalSign",
            "* -> number(3.) -> <shunt>",
            1,
            13,
            "a digit after `.`",
        ),
        (
            "TestLBBackend empty",
            "* -> <>",
            1,
            7,
            "an algorithm or an endpoint URL",
        ),
        (
            "TestLBBackend empty with whitespace",
            "* -> <   >",
            1,
            10,
            "an algorithm or an endpoint URL",
        ),
        (
            "TestParse loadbalancer endpoints same protocol",
            r#"* -> <roundRobin, "http://localhost:80", "fastcgi://localhost:80">"#,
            1,
            6,
            "mixed protocols",
        ),
        (
            "TestParse invalid method predicate",
            r#"Path("/endpoint") && Method("GET", "POST") -> "https://www.example.org""#,
            1,
            22,
            "1 string argument to Method",
        ),
        (
            "TestParse invalid header predicate",
            r#"foo: Path("/endpoint") && Header("Foo") -> "https://www.example.org";"#,
            1,
            27,
            "2 string arguments to Header",
        ),
        (
            "TestParse double path predicates",
            r#"Path("/one") && Path("/two") -> "https://www.example.org""#,
            1,
            17,
            "duplicate path tree predicate",
        ),
        (
            "TestParse double method predicates",
            r#"Method("HEAD") && Method("GET") -> "https://www.example.org""#,
            1,
            19,
            "duplicate method predicate",
        ),
        (
            "TestParse syntax error with id (position 12)",
            "fooId: * -> #",
            1,
            13,
            "`#`",
        ),
        (
            "TestParse syntax error multiple routes (position 49)",
            r#"r1: Path("/foo") -> <shunt>; r2: Path("/bar") -> #"#,
            1,
            50,
            "`#`",
        ),
        (
            "TestParse syntax without id (position 5)",
            "* -> #",
            1,
            6,
            "`#`",
        ),
        (
            "TestParse loopback (ours: not supported)",
            r#"* -> setRequestHeader("X-Foo", "bar") -> <loopback>"#,
            1,
            42,
            "not supported",
        ),
        (
            "TestParse dynamic (ours: not supported)",
            r#"* -> setRequestHeader("X-Foo", "bar") -> <dynamic>"#,
            1,
            42,
            "not supported",
        ),
        (
            "TestParse forward (ours: not supported)",
            r#"* -> setRequestHeader("X-Foo", "bar") -> <forward>"#,
            1,
            42,
            "not supported",
        ),
        (
            "TestMustParse invalid",
            "this is an invalid route definition",
            1,
            6,
            "`is`",
        ),
        (
            "TestParseFilters error",
            "* -> trallala -> <shunt>",
            1,
            15,
            "`(` after the filter name",
        ),
        (
            "TestParseFilters error 2 (no `-` in names)",
            "* -> foo-bar -> <shunt>",
            1,
            9,
            "`-`",
        ),
        (
            "TestParseFiltersRejectsInvalidNegativeNumbers f(-)",
            "* -> f(-) -> <shunt>",
            1,
            8,
            "`-`",
        ),
        (
            "TestParseFiltersRejectsInvalidNegativeNumbers f(-.)",
            "* -> f(-.) -> <shunt>",
            1,
            8,
            "a digit after `.`",
        ),
        (
            "TestParseFiltersRejectsInvalidNegativeNumbers f(-x)",
            "* -> f(-x) -> <shunt>",
            1,
            8,
            "`-`",
        ),
        (
            "TestParsePredicates invalid",
            "not predicates -> <shunt>",
            1,
            5,
            "`predicates`",
        ),
        (
            "TestParsePredicates invalid 2",
            "Header# -> <shunt>",
            1,
            7,
            "`#`",
        ),
        // parser.y document: a route without an id is the whole text, without `;`.
        (
            "parser.y document: anonymous route then `;`",
            "* -> <shunt>;",
            1,
            13,
            "end of input",
        ),
        (
            "parser.y document: anonymous route among others",
            "r1: * -> <shunt>; * -> <shunt>",
            1,
            19,
            "a route id",
        ),
        (
            "parser.y document: anonymous route first",
            "* -> <shunt>; r1: * -> <shunt>",
            1,
            13,
            "end of input",
        ),
        (
            "parser.y args: a comma needs an argument",
            "* -> f(,) -> <shunt>",
            1,
            9,
            "an argument",
        ),
        (
            "parser.y args: trailing comma",
            "* -> f(1,) -> <shunt>",
            1,
            10,
            "an argument",
        ),
        (
            "parser.y lbbackendbody: an algorithm needs a comma",
            r#"* -> <random "http://a">"#,
            1,
            14,
            "`,` or `>`",
        ),
        (
            "parser.y backend: <shunt> is one token",
            "* -> < shunt >",
            1,
            8,
            "<shunt> written without spaces",
        ),
        (
            "parser.y route: a backend after filters",
            r#"* -> f() -> "http://a" -> <shunt>"#,
            1,
            24,
            "end of input",
        ),
        (
            "parser.y route: no backend",
            "r: * -> f();",
            1,
            12,
            "`->` after a filter",
        ),
        // lexer.go: no exponents, one decimal point, `&&` whole, ASCII names.
        (
            "lexer.go scanNumber: no exponent",
            "* -> f(1e3) -> <shunt>",
            1,
            9,
            "found `e3`",
        ),
        (
            "lexer.go scanNumber: one decimal point",
            "* -> f(1.2.3) -> <shunt>",
            1,
            11,
            "found number 0.3",
        ),
        (
            "lexer.go scan: a lone `&`",
            "Foo() & Bar() -> <shunt>",
            1,
            7,
            "`&`",
        ),
        (
            "lexer.go isSymbolChar: ASCII only",
            "r\u{e9}: * -> <shunt>",
            1,
            2,
            "`\u{e9}`",
        ),
        (
            "lexer.go isSymbolChar: no `-`",
            "my-route: * -> <shunt>",
            1,
            3,
            "`-`",
        ),
        (
            "lexer.go scanWhitespace: no no-break space",
            "r1:\u{a0}* -> <shunt>",
            1,
            4,
            "`\u{a0}`",
        ),
        (
            "lexer.go scanRegexp: unterminated",
            "PathRegexp(/abc) -> <shunt>",
            1,
            12,
            "a closing `/`",
        ),
        (
            "lexer.go scanRegexp: a class swallows `/`",
            "PathRegexp(/[abc/) -> <shunt>",
            1,
            12,
            "a closing `/`",
        ),
        (
            "lexer.go scanBacktick: unterminated",
            "* -> f(`abc) -> <shunt>",
            1,
            8,
            "a closing backtick",
        ),
        (
            "lexer.go scanEscaped: escaped quote does not close",
            r#"* -> f("abc\") -> <shunt>"#,
            1,
            8,
            "a closing `\"`",
        ),
        (
            "lexer.go scanRegexpOrComment: a lone `/`",
            "* -> <shunt> /",
            1,
            14,
            "a closing `/`",
        ),
        // eskip.go applyPredicates and newRouteDefinition.
        (
            "eskip.go duplicate header predicate",
            r#"Header("A", "1") && Header("A", "2") -> <shunt>"#,
            1,
            21,
            "duplicate header predicate",
        ),
        (
            "eskip.go Path takes a string",
            "Path(1) -> <shunt>",
            1,
            1,
            "1 string argument to Path",
        ),
        (
            "eskip.go Host takes one string",
            "Host() -> <shunt>",
            1,
            1,
            "1 string argument to Host",
        ),
        (
            "eskip.go PathRegexp takes one string",
            "PathRegexp(/a/, /b/) -> <shunt>",
            1,
            1,
            "1 string argument to PathRegexp",
        ),
        (
            "eskip.go HeaderRegexp takes two strings",
            r#"HeaderRegexp("A") -> <shunt>"#,
            1,
            1,
            "2 string arguments to HeaderRegexp",
        ),
        (
            "eskip.go endpoints are request URIs",
            r#"* -> <"localhost">"#,
            1,
            6,
            "invalid URI for request",
        ),
        (
            "eskip.go endpoint ports are digits",
            r#"* -> <"http://a:x">"#,
            1,
            6,
            "invalid URI for request",
        ),
    ];
    for (origin, text, line, column, part) in cases {
        let errors = parse(text).expect_err(&format!("{origin}: {text:?} should fail"));
        let first = errors.first();
        assert_eq!(
            (first.pos.line, first.pos.column),
            (*line, *column),
            "{origin}: {text:?}: {errors}"
        );
        assert!(
            first.to_string().contains(part),
            "{origin}: {text:?}: {first} does not contain {part:?}"
        );
    }
}

/// roundtrip_test.go TestRoundtripString and TestRoundtripRegexp: values that read
/// back the same once printed as a string or a regexp literal.
#[test]
fn skipper_round_trip_values_read_back_the_same() {
    let strings = [
        "s",
        " ",
        "/",
        "//",
        "\\",
        "\\\\",
        "\\x",
        "\\\\x",
        "/x",
        "//x",
        "\"",
        "\"\"",
        "\\/",
        "\\//",
        "/\\",
        "/\\\\",
        "//\\\\",
        "/\\/\\",
        "\\/\\/",
        "^\\/foo(#.*)?$",
        "foo\\/bar",
        "\n",
        "\\\n",
        "\\\\\n",
        "\n\\",
        "\n\\\\",
        "\\\n\\",
        "\"\n",
        "\\\"\n",
    ];
    for v in strings {
        let call = Call {
            name: "afilter".into(),
            args: vec![Arg::Str(v.into())],
            pos: Pos::default(),
        };
        let text = format!("* -> {call} -> <shunt>");
        assert_eq!(all_args(&text), vec![Arg::Str(v.into())], "{v:?} as {text}");
    }
    let regexps = [
        "s",
        " ",
        "/",
        "//",
        "\\",
        "\\\\",
        "\\x",
        "\\\\x",
        "/x",
        "//x",
        "\"",
        "\"\"",
        "\\/",
        "\\//",
        "/\\",
        "/\\\\",
        "//\\\\",
        "/\\/\\",
        "\\/\\/",
        "^\\/foo(#.*)?$",
        "foo\\/bar",
        "[/]",
        "[\\[]",
        "[\\]]",
        "[\\]",
        "[\"]",
        "[\\\"]",
    ];
    for v in regexps {
        let call = Call {
            name: "PathRegexp".into(),
            args: vec![Arg::Regex(v.into())],
            pos: Pos::default(),
        };
        let text = format!("{call} -> <shunt>");
        assert_eq!(
            all_args(&text),
            vec![Arg::Regex(v.into())],
            "{v:?} as {text}"
        );
    }
}

/// Ours, beyond skipper (which stops at the first): every error of a text, in text
/// order, each where it is.
#[test]
fn every_error_in_a_text_is_reported() {
    let text = "r1: Foo( -> <shunt>;\n\
                r2: * -> <shunt>;\n\
                r3 * -> <shunt>;\n\
                r4: Path(1) && Path(\"/a\") && Path(\"/b\") -> <shunt>\n\
                r5: * -> f(#) -> <shunt>;\n\
                r6: * -> <\"http://a\", \"https://b\">;\n\
                r7: * -> \"http://ok\"";
    let errors = parse(text).expect_err("many errors");
    let at: Vec<(usize, usize)> = errors
        .errors()
        .iter()
        .map(|e| (e.pos.line, e.pos.column))
        .collect();
    assert_eq!(
        at,
        vec![(1, 10), (3, 4), (4, 5), (4, 30), (5, 1), (5, 12), (6, 10)],
        "{errors}"
    );
    assert_eq!(errors.to_string().lines().count(), 7, "{errors}");
    let parsed = parse_all(text);
    let ids: Vec<&str> = parsed.routes.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["r2", "r7"]);
}
