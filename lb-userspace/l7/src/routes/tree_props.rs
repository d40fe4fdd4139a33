//! Properties of the path tree against the simplest oracle there is, a table of one
//! route: for random route sets (literal, `:param`, `*tail` and `PathSubtree` paths,
//! some with a `Method`) and random request paths, the route the table finds matches
//! the request on its own (sound), and when any route of the set matches on its own,
//! the table finds one (complete). The tree's backtracking is where a lookup could go
//! wrong in ways the ported cases do not reach.

use http::{HeaderMap, Method};
use proptest::prelude::*;

use super::{RouteTable, predicate::RequestView, tests::table};

/// Segments drawn from a small alphabet, so random routes and requests meet often.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![Just("a"), Just("b"), Just("ab"), Just("c")].prop_map(str::to_owned)
}

/// A route path: literal segments, a parameter or a tail at any depth, a trailing
/// slash sometimes.
fn route_path() -> impl Strategy<Value = (String, bool)> {
    (
        proptest::collection::vec(
            prop_oneof![
                4 => segment(),
                1 => Just(":p".to_owned()),
            ],
            0..4,
        ),
        prop_oneof![
            3 => Just(""),
            1 => Just("/"),
            1 => Just("/*rest"),
        ],
        any::<bool>(),
    )
        .prop_map(|(segments, tail, subtree)| {
            let mut path = String::new();
            for (i, s) in segments.iter().enumerate() {
                // A parameter needs a name of its own per route.
                if s == ":p" {
                    path.push_str(&format!("/:p{i}"));
                } else {
                    path.push('/');
                    path.push_str(s);
                }
            }
            let subtree = subtree && tail.is_empty();
            if path.is_empty() && !subtree {
                path.push('/');
            }
            path.push_str(if subtree { "" } else { tail });
            if path.is_empty() {
                path.push('/');
            }
            (path, subtree)
        })
}

fn route_text(i: usize, (path, subtree): &(String, bool), post_only: bool) -> String {
    let predicate = if *subtree { "PathSubtree" } else { "Path" };
    let method = if post_only {
        r#" && Method("POST")"#
    } else {
        ""
    };
    format!("r{i}: {predicate}(\"{path}\"){method} -> <shunt>;\n")
}

fn request_path() -> impl Strategy<Value = String> {
    (proptest::collection::vec(segment(), 0..5), any::<bool>()).prop_map(|(s, slash)| {
        let mut p = format!("/{}", s.join("/"));
        if slash && !p.ends_with('/') {
            p.push('/');
        }
        p
    })
}

fn find<'t>(t: &'t RouteTable, method: &Method, path: &str) -> Option<&'t str> {
    let headers = HeaderMap::new();
    t.find(&RequestView::new(method, path, "example.org", &headers))
        .map(|r| r.id.as_str())
}

proptest! {
    #[test]
    fn the_tree_finds_a_matching_route_exactly_when_one_matches(
        routes in proptest::collection::vec((route_path(), prop_oneof![4 => Just(false), 1 => Just(true)]), 1..12),
        requests in proptest::collection::vec((request_path(), any::<bool>()), 1..16),
    ) {
        let texts: Vec<String> = routes
            .iter()
            .enumerate()
            .map(|(i, (p, post))| route_text(i, p, *post))
            .collect();
        // Two routes with the same path and predicates are one conflict skipper
        // resolves by an unspecified order; the properties hold whichever wins.
        let all = table(&texts.concat());
        let alone: Vec<RouteTable> = texts.iter().map(|t| table(t)).collect();
        for (path, post) in &requests {
            let method = if *post { Method::POST } else { Method::GET };
            let found = find(&all, &method, path);
            let matching: Vec<usize> = alone
                .iter()
                .enumerate()
                .filter(|(_, t)| find(t, &method, path).is_some())
                .map(|(i, _)| i)
                .collect();
            match found {
                Some(id) => {
                    let i: usize = id[1..].parse().expect("route id");
                    prop_assert!(
                        matching.contains(&i),
                        "{method} {path}: found {id}, which does not match alone\n{}",
                        texts.concat()
                    );
                }
                None => prop_assert!(
                    matching.is_empty(),
                    "{method} {path}: nothing found, but {matching:?} match alone\n{}",
                    texts.concat()
                ),
            }
        }
    }
}
