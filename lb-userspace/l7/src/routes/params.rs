//! Path parameters: the `:name` segments and `*name` tails of a `Path`, and the tail
//! of a `PathSubtree` (named `*` unless the subtree ends in `/*name`), as skipper's
//! matcher fills them for filters. Names are looked up once, when templates are
//! compiled; a value is a slice of the routing path (decoded, cleaned), found when a
//! template is applied, so a request carries no table of parameters.
//!
//! Values as in skipper: a segment is the segment's text; a tail keeps its leading
//! slash (`Path("/files/*p")` on `/files/a/b` gives `/a/b`), and a subtree's tail is
//! `/` on the subtree's own path (`PathSubtree("/api")` on `/api` or `/api/`).
//!
//! The routing path is decoded once already (Go's `URL.Path`), and skipper's tree
//! (`pathmux/tree.go` `search`) decodes each matched value once more with
//! `url.QueryUnescape`: `/a/x%252Fy` matches `/a/:id` with `id` = `x/y`, a `+` in
//! a value is a space, and a value with a malformed escape (`100%`, from `100%25`)
//! stays as matched. A `%2F` in the request is a `/` of the routing path, so it
//! separates segments before any parameter is taken.

use super::{
    predicate::{PathMatch, Segment},
    query,
    template::Sink,
};

/// Where a path parameter's value is in a matched routing path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamRef {
    /// Segment `n` (from 0, the first after the root slash).
    Segment(usize),
    /// Everything from the slash before segment `n`; `/` when there is none.
    Tail(usize),
}

impl ParamRef {
    /// Writes the parameter's value for `path`, a routing path the route matched, as
    /// skipper's tree gives it (decoded once more, see the module doc); `false` when
    /// it is empty.
    pub fn write_value(self, path: &str, out: &mut impl Sink) -> bool {
        query::query_unescape_into(self.matched(path), out)
    }

    /// The text the parameter matched in `path`, before skipper's second decoding.
    pub fn matched(self, path: &str) -> &str {
        match self {
            Self::Segment(n) => path
                .strip_prefix('/')
                .and_then(|rest| rest.split('/').nth(n))
                .unwrap_or(""),
            Self::Tail(n) => path
                .match_indices('/')
                .nth(n)
                .map_or("/", |(at, _)| &path[at..]),
        }
    }
}

/// The route's parameters by name, in path order; for a name used twice the first
/// is found first.
pub fn of(m: &PathMatch) -> Vec<(String, ParamRef)> {
    let (segments, tail) = match m {
        PathMatch::Pattern { segments, .. } => (segments, None),
        PathMatch::Subtree { segments, tail } => (segments, Some(tail)),
    };
    let mut params: Vec<(String, ParamRef)> = segments
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Segment::Literal(_) => None,
            Segment::Param(name) => Some((name.clone(), ParamRef::Segment(i))),
            Segment::Rest(name) => Some((name.clone(), ParamRef::Tail(i))),
        })
        .collect();
    if let Some(tail) = tail {
        params.push((tail.clone(), ParamRef::Tail(segments.len())));
    }
    params
}

/// Finds `name` among `params`.
pub fn find(params: &[(String, ParamRef)], name: &str) -> Option<ParamRef> {
    params.iter().find(|(n, _)| n == name).map(|(_, r)| *r)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Values = Vec<(String, String)>;

    fn values(pattern: PathMatch, path: &str) -> Values {
        assert!(pattern.matches(path), "{pattern:?} should match {path:?}");
        of(&pattern)
            .into_iter()
            .map(|(n, r)| {
                let mut out = Vec::new();
                r.write_value(path, &mut out);
                (n, String::from_utf8(out).expect("text"))
            })
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Values {
        list.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    /// skipper's `TestWildcardParam`, `TestFreeWildcardParam` (routing/matcher_test.go)
    /// and the consider-trailing-slash columns of `TestSubtreeMatch`,
    /// `TestSubtreeWildcardMatch` and `TestCatchallWildcardMatch`
    /// (routing/tree_test.go).
    #[test]
    fn parameters_take_skippers_values() {
        let path = |p: &str| PathMatch::pattern(p).expect("pattern");
        let subtree = |p: &str| PathMatch::subtree(p).expect("subtree");
        let cases: Vec<(PathMatch, &str, Values)> = vec![
            (
                path("/some/:wildcard0/path/:wildcard1"),
                "/some/value0/path/value1",
                pairs(&[("wildcard0", "value0"), ("wildcard1", "value1")]),
            ),
            (
                path("/some/*wildcard"),
                "/some/value0/value1",
                pairs(&[("wildcard", "/value0/value1")]),
            ),
            (path("/*name1"), "/foo", pairs(&[("name1", "/foo")])),
            (
                path("/*name1"),
                "/foo/bar/",
                pairs(&[("name1", "/foo/bar/")]),
            ),
            (path("/foo/*name1"), "/foo/bar", pairs(&[("name1", "/bar")])),
            (
                path("/foo/*name1"),
                "/foo/bar/baz/",
                pairs(&[("name1", "/bar/baz/")]),
            ),
            (subtree("/"), "/", pairs(&[("*", "/")])),
            (subtree("/"), "/foo", pairs(&[("*", "/foo")])),
            (subtree("/foo"), "/foo", pairs(&[("*", "/")])),
            (subtree("/foo"), "/foo/", pairs(&[("*", "/")])),
            (subtree("/foo"), "/foo/bar", pairs(&[("*", "/bar")])),
            (subtree("/foo"), "/foo/bar/", pairs(&[("*", "/bar/")])),
            (subtree("/foo/"), "/foo", pairs(&[("*", "/")])),
            (subtree("/foo/bar"), "/foo/bar/baz", pairs(&[("*", "/baz")])),
            (
                subtree("/foo/bar/"),
                "/foo/bar/baz/",
                pairs(&[("*", "/baz/")]),
            ),
            (
                subtree("/foo/*rest"),
                "/foo/a/b",
                pairs(&[("rest", "/a/b")]),
            ),
            (subtree("/foo/*"), "/foo/a", pairs(&[("*", "/a")])),
            // TestSubtreeWildcardMatch: parameters in a subtree's base.
            (
                subtree("/:name1"),
                "/foo/bar/",
                pairs(&[("name1", "foo"), ("*", "/bar/")]),
            ),
            (
                subtree("/foo/:name1/baz"),
                "/foo/bar/baz/qux",
                pairs(&[("name1", "bar"), ("*", "/qux")]),
            ),
            (path("/b/**"), "/b/x/y", pairs(&[("*", "/x/y")])),
            (
                path("/a/:id/*rest"),
                "/a/42/x/y",
                pairs(&[("id", "42"), ("rest", "/x/y")]),
            ),
        ];
        for (pattern, p, want) in cases {
            assert_eq!(values(pattern.clone(), p), want, "{pattern:?} on {p:?}");
        }
    }

    /// skipper `pathmux/tree_test.go` (`/date/2014/ab%2f` gives `ab/`,
    /// `/post/ab%2fdef/page/2%2f` gives `ab/def` and `2/`): the tree decodes a
    /// matched value with `url.QueryUnescape`. Its input is the routing path, which
    /// the proxy decoded once already: these are the values of requests that had
    /// `%252f`, `%2B`, `+`, `%2525` and `%25` in them.
    #[test]
    fn values_are_decoded_once_more_as_skippers_tree_does() {
        let path = |p: &str| PathMatch::pattern(p).expect("pattern");
        let cases: Vec<(PathMatch, &str, Values)> = vec![
            (
                path("/date/:year/:month"),
                "/date/2014/ab%2f",
                pairs(&[("year", "2014"), ("month", "ab/")]),
            ),
            (
                path("/post/:post/page/:page"),
                "/post/ab%2fdef/page/2%2f",
                pairs(&[("post", "ab/def"), ("page", "2/")]),
            ),
            (path("/a/:id"), "/a/b+c", pairs(&[("id", "b c")])),
            (path("/a/:id"), "/a/%25", pairs(&[("id", "%")])),
            (path("/a/:id"), "/a/100%", pairs(&[("id", "100%")])),
            (path("/a/:id"), "/a/%zz+", pairs(&[("id", "%zz+")])),
            (path("/a/:id"), "/a/caf%C3%A9", pairs(&[("id", "café")])),
            (
                path("/files/*rest"),
                "/files/x%2Fy/z+w",
                pairs(&[("rest", "/x/y/z w")]),
            ),
            (
                PathMatch::subtree("/s").expect("subtree"),
                "/s/a%2Fb",
                pairs(&[("*", "/a/b")]),
            ),
        ];
        for (pattern, p, want) in cases {
            assert_eq!(values(pattern.clone(), p), want, "{pattern:?} on {p:?}");
        }
    }

    /// `TestCatchallWildcardMatch`: a `*name` tail needs at least one character.
    #[test]
    fn a_tail_is_never_empty() {
        for (pattern, path) in [
            ("/*name1", "/"),
            ("/foo/*name1", "/foo/"),
            ("/foo/*name1", "/foo"),
        ] {
            let m = PathMatch::pattern(pattern).expect("pattern");
            assert!(!m.matches(path), "{pattern} must not match {path}");
        }
    }
}
