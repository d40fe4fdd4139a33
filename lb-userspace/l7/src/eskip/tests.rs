use super::*;

#[test]
fn tutorial_routes_parse() {
    let text = r#"
// skipper's tutorial routes
r1: * -> setQuery("lang", "pt") -> "http://127.0.0.1:8080/";
r2: * -> inlineContent("Hello world!") -> status(200) -> <shunt>;
r3: * -> redirectTo(308, "http://127.0.0.1:9999") -> <shunt>;
r4: Path("/a/base/") -> modPath("/a/base/", "/my/new/base/") -> redirectTo(308, "https://another-example.com") -> <shunt>;
r5: * -> <roundRobin, "http://127.0.0.1:9998", "http://127.0.0.1:9997">;
"#;
    let routes = parse(text).expect("parses");
    assert_eq!(routes.len(), 5);
    assert_eq!(routes[0].id, "r1");
    assert!(routes[0].predicates.is_empty());
    assert_eq!(routes[0].filters[0].name, "setQuery");
    assert_eq!(
        routes[0].filters[0].args,
        vec![Arg::Str("lang".into()), Arg::Str("pt".into())]
    );
    assert_eq!(
        routes[0].backend,
        Backend::Network("http://127.0.0.1:8080/".into())
    );
    assert_eq!(routes[1].backend, Backend::Shunt);
    assert_eq!(routes[2].filters[0].args[0], Arg::Num(308.0));
    assert_eq!(routes[3].predicates[0].name, "Path");
    assert_eq!(routes[3].pos, Pos { line: 6, column: 1 });
    assert_eq!(
        routes[4].backend,
        Backend::LoadBalanced {
            algorithm: Some("roundRobin".into()),
            endpoints: vec![
                "http://127.0.0.1:9998".into(),
                "http://127.0.0.1:9997".into()
            ],
        }
    );
}

#[test]
fn regexps_strings_and_lists() {
    let routes = parse(
        r#"a: PathRegexp(/^\/api\/v[0-9]+/) && Header("X-A", "say \"hi\"") && Methods("GET", "HEAD") -> <"http://h:1", "http://h:2">;
b: Weight(-1.5) -> <consistentHash>;"#,
    )
    .expect("parses");
    assert_eq!(
        routes[0].predicates[0].args[0],
        Arg::Regex(r"^/api/v[0-9]+".into())
    );
    assert_eq!(
        routes[0].predicates[1].args[1],
        Arg::Str("say \"hi\"".into())
    );
    assert_eq!(routes[0].predicates.len(), 3);
    assert!(
        matches!(&routes[0].backend, Backend::LoadBalanced { algorithm: None, endpoints } if endpoints.len() == 2)
    );
    assert_eq!(routes[1].predicates[0].args[0], Arg::Num(-1.5));
    assert_eq!(
        routes[1].backend,
        Backend::LoadBalanced {
            algorithm: Some("consistentHash".into()),
            endpoints: vec![]
        }
    );
}

#[test]
fn errors_name_line_column_and_expectation() {
    let cases: &[(&str, &str)] = &[
        (
            "r1 * -> <shunt>;",
            "line 1, column 4: expected `:` after the route id, found `*`",
        ),
        (
            "r1: * -> <shunt>",
            "line 1, column 17: expected `;` after the backend, found end of input",
        ),
        (
            "r1: *\n  -> status(200 -> <shunt>;",
            "line 2, column 17: expected `,` or `)`, found `->`",
        ),
        (
            "r1: Path(\"/x\") <shunt>;",
            "line 1, column 16: expected `&&` or `->`, found `<`",
        ),
        (
            "r1: * -> \"unterminated;",
            "line 1, column 10: expected a closing `\"`, found end of input",
        ),
        (
            "r1: * -> <roundRobin \"http://a\">;",
            "line 1, column 22: expected `,` or `>`, found string \"http://a\"",
        ),
        (
            "r1: * -> <loopback>;",
            "line 1, column 11: expected <shunt> or a load-balanced backend, found <loopback> (not supported)",
        ),
        (
            "r1: * -> ;",
            "line 1, column 10: expected a filter or a backend (\"http://…\", <shunt>, <…>), found `;`",
        ),
        (
            "r1: * -> <shunt>;\n\n  @",
            "line 3, column 3: expected a route (`id: predicates -> filters -> backend;`), found `@`",
        ),
    ];
    for (text, want) in cases {
        let err = parse(text).expect_err(text);
        assert_eq!(&err.to_string(), want, "for {text:?}");
    }
}

#[test]
fn empty_and_comment_only_documents_have_no_routes() {
    assert_eq!(parse("").expect("empty"), vec![]);
    assert_eq!(parse("// nothing\n   // here\n").expect("comments"), vec![]);
}

#[test]
fn routes_print_back_as_eskip_that_parses_to_the_same() {
    let text = r#"a: Path("/x") && PathRegexp(/^\/x\/[a-z]+/) && Weight(2.5) -> setQuery("k", "v \"q\"") -> <roundRobin, "http://h:1", "http://h:2">;
b: * -> inlineContent("hi") -> <shunt>;
c: * -> "http://h:3";"#;
    let routes = parse(text).expect("parses");
    let printed: Vec<String> = routes.iter().map(ToString::to_string).collect();
    assert_eq!(printed[1], r#"b: * -> inlineContent("hi") -> <shunt>;"#);
    let again = parse(&printed.join("\n")).expect("printed routes parse");
    for (a, b) in routes.iter().zip(&again) {
        assert_eq!(
            (&a.id, &a.predicates.len(), &a.filters, &a.backend),
            (&b.id, &b.predicates.len(), &b.filters, &b.backend)
        );
        for (p, q) in a.predicates.iter().zip(&b.predicates) {
            assert_eq!((&p.name, &p.args), (&q.name, &q.args));
        }
    }
}
