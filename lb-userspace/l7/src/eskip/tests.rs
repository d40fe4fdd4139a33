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
            "r0: * -> <shunt>; r1 * -> <shunt>;",
            "line 1, column 22: expected `:` after the route id, found `*`",
        ),
        (
            "r1 * -> <shunt>",
            "line 1, column 4: expected `(` after the predicate name, or `:` after a route id, found `*`",
        ),
        (
            "r1: * -> <shunt> r2: * -> <shunt>",
            "line 1, column 18: expected `;` between routes, found `r2`",
        ),
        (
            "r1: *\n  -> status(200 -> <shunt>;",
            "line 2, column 17: expected `,` or `)`, found `->`",
        ),
        (
            "r1: Path(\"/x\") <shunt>;",
            "line 1, column 16: expected `&&` or `->`, found `<shunt>`",
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
            "line 1, column 10: expected <shunt> or a load-balanced backend, found <loopback> (not supported)",
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
        assert_eq!(err.errors().len(), 1, "for {text:?}");
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

mod properties {
    use proptest::prelude::*;

    use super::*;

    /// Names as skipper's lexer reads them: an ASCII letter or `_`, then ASCII
    /// letters, digits and `_`.
    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z_][A-Za-z0-9_]{0,8}"
    }

    /// Predicate names that parse to themselves: not `Any` (dropped like `*`) and not
    /// the built-ins whose arguments skipper checks while parsing.
    fn predicate_name() -> impl Strategy<Value = String> {
        name().prop_filter("no checked built-in", |n| {
            !matches!(
                n.as_str(),
                "Any" | "Path" | "Host" | "PathRegexp" | "Method" | "Header" | "HeaderRegexp"
            )
        })
    }

    /// Whether eskip can write the regexp: every `[` class the lexer would see is
    /// closed by a later `]` or `\]` (an open class would swallow the closing `/`,
    /// in skipper too).
    fn writable(re: &str) -> bool {
        let mut in_class = false;
        let mut chars = re.chars();
        while let Some(c) = chars.next() {
            match c {
                '[' => in_class = true,
                ']' => in_class = false,
                '\\' => in_class &= chars.next() != Some(']'),
                _ => {}
            }
        }
        !in_class
    }

    /// Any regexp eskip can write: any characters, `/`, `\`, brackets and line
    /// breaks included (a regexp may span lines); never empty (`//` starts a
    /// comment).
    fn regexp() -> impl Strategy<Value = String> {
        let atom = prop_oneof!["[^\\\\]", "\\\\(.|\n)?", "[\\[\\]/]"];
        proptest::collection::vec(atom, 1..8)
            .prop_map(|atoms| atoms.concat())
            .prop_filter("an open class cannot be written", |re| writable(re))
    }

    fn arg() -> impl Strategy<Value = Arg> {
        prop_oneof![
            any::<String>().prop_map(Arg::Str),
            regexp().prop_map(Arg::Regex),
            any::<f64>()
                .prop_filter("eskip numbers are finite", |n| n.is_finite())
                .prop_map(Arg::Num),
        ]
    }

    fn call(name: impl Strategy<Value = String>) -> impl Strategy<Value = Call> {
        (name, proptest::collection::vec(arg(), 0..4)).prop_map(|(name, args)| Call {
            name,
            args,
            pos: Pos::default(),
        })
    }

    /// Endpoint URLs of one scheme, as skipper's parse-time check wants them.
    fn endpoint() -> impl Strategy<Value = String> {
        "http://[a-z0-9.]{1,8}(:[0-9]{1,5})?(/[a-z\"\\\\]{0,4})?"
    }

    fn backend() -> impl Strategy<Value = Backend> {
        let algorithm = name().prop_filter("not a reserved backend", |n| {
            !matches!(n.as_str(), "shunt" | "loopback" | "dynamic" | "forward")
        });
        prop_oneof![
            any::<String>().prop_map(Backend::Network),
            Just(Backend::Shunt),
            (
                proptest::option::of(algorithm),
                proptest::collection::vec(endpoint(), 0..3)
            )
                .prop_filter("`<>` is not a backend", |(a, e)| a.is_some()
                    || !e.is_empty())
                .prop_map(|(algorithm, endpoints)| Backend::LoadBalanced {
                    algorithm,
                    endpoints
                }),
        ]
    }

    fn route() -> impl Strategy<Value = Route> {
        (
            name(),
            proptest::collection::vec(call(predicate_name()), 0..3),
            proptest::collection::vec(call(name()), 0..3),
            backend(),
        )
            .prop_map(|(id, predicates, filters, backend)| Route {
                id,
                predicates,
                filters,
                backend,
                backend_pos: Pos::default(),
                pos: Pos::default(),
            })
    }

    /// Eskip-like text: the tokens, names, numbers and strings of the syntax in any
    /// order, with the characters that end or break them.
    fn token_soup() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just(":".to_owned()),
            Just("&&".to_owned()),
            Just("->".to_owned()),
            Just(";".to_owned()),
            Just("(".to_owned()),
            Just(")".to_owned()),
            Just(",".to_owned()),
            Just("*".to_owned()),
            Just("<".to_owned()),
            Just(">".to_owned()),
            Just("<shunt>".to_owned()),
            Just("//".to_owned()),
            Just("\n".to_owned()),
            Just(" ".to_owned()),
            name(),
            "[-.0-9e]{1,6}",
            "\"([^\"\\\\]|\\\\.){0,6}\"?",
            "/([^/\\\\\n]|\\\\.){0,6}/?",
            "[\\\\&\"/-]",
        ];
        proptest::collection::vec(piece, 0..30).prop_map(|p| p.concat())
    }

    /// Every route with its positions cleared (printing does not keep them).
    fn without_positions(mut routes: Vec<Route>) -> Vec<Route> {
        for r in &mut routes {
            r.pos = Pos::default();
            r.backend_pos = Pos::default();
            for c in r.predicates.iter_mut().chain(&mut r.filters) {
                c.pos = Pos::default();
            }
        }
        routes
    }

    proptest! {
        /// Any text, and any jumble of eskip's tokens, parses or is an error (no
        /// panic), and an error points at a line of the text.
        #[test]
        fn any_text_parses_or_is_an_error_within_the_text(
            text in prop_oneof![any::<String>(), token_soup()],
        ) {
            if let Err(errors) = parse(&text) {
                let lines = text.split('\n').count();
                for e in errors.errors() {
                    prop_assert!(
                        (1..=lines).contains(&e.pos.line) && e.pos.column >= 1,
                        "{e} for {text:?} ({lines} lines)"
                    );
                }
            }
        }

        /// A route printed in canonical eskip form parses back to the same route,
        /// whatever its strings (quotes, backslashes, line breaks, control and
        /// non-ASCII characters), regexps (slashes) and numbers.
        #[test]
        fn printed_routes_parse_back_to_the_same(
            routes in proptest::collection::vec(route(), 1..4),
        ) {
            let text: Vec<String> = routes.iter().map(ToString::to_string).collect();
            let text = text.join("\n");
            let again = parse(&text).map(without_positions);
            prop_assert_eq!(again, Ok(routes), "printed as {}", text);
        }

        /// A text of one route without an id prints without id and `;` and parses
        /// back to the same.
        #[test]
        fn a_printed_route_without_id_parses_back_to_the_same(mut r in route()) {
            r.id.clear();
            let text = r.to_string();
            let again = parse(&text).map(without_positions);
            prop_assert_eq!(again, Ok(vec![r]), "printed as {}", text);
        }
    }
}
