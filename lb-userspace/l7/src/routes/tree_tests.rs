//! Which route wins, as skipper's matcher decides it: route sets and requests ported
//! from skipper's tests (the skipper test function is named per group; inputs and
//! expectations restated here), and cases derived from `routing/matcher.go` where
//! skipper has no test (marked "matcher.go").

use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::{predicate::RequestView, tests::table};

/// A request: method, path as sent, headers.
struct Req {
    method: Method,
    path: &'static str,
    headers: HeaderMap,
}

fn get(path: &'static str) -> Req {
    Req {
        method: Method::GET,
        path,
        headers: HeaderMap::new(),
    }
}

fn with(method: &str, path: &'static str) -> Req {
    Req {
        method: Method::from_bytes(method.as_bytes()).expect("method"),
        ..get(path)
    }
}

impl Req {
    fn header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.append(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
        self
    }
}

/// A route set and what each request finds (`None`: no route).
struct Group {
    source: &'static str,
    routes: &'static str,
    expect: Vec<(Req, Option<&'static str>)>,
}

fn check(groups: &[Group]) {
    for g in groups {
        let t = table(g.routes);
        for (req, want) in &g.expect {
            let got = t
                .find(&RequestView::new(
                    &req.method,
                    req.path,
                    "example.org",
                    &req.headers,
                ))
                .map(|r| r.id.as_str());
            assert_eq!(
                got, *want,
                "{}: {} {} on\n{}",
                g.source, req.method, req.path, g.routes
            );
        }
    }
}

fn one(
    source: &'static str,
    routes: &'static str,
    expect: Vec<(Req, Option<&'static str>)>,
) -> Group {
    Group {
        source,
        routes,
        expect,
    }
}

const R: Option<&str> = Some("r");

/// Trailing slashes are significant; wildcards need a non-empty segment.
#[test]
fn paths_and_trailing_slashes() {
    check(&[
        one(
            "TestSinglePathMatch",
            r#"r: Path("/") -> <shunt>"#,
            vec![(get("/"), R), (get(""), R), (get("/foo"), None)],
        ),
        one(
            "TestSinglePathMatch",
            r#"r: Path("/foo") -> <shunt>"#,
            vec![
                (get("/"), None),
                (get("/foo"), R),
                (get("/foo/"), None),
                (get("/foo/bar"), None),
            ],
        ),
        one(
            "TestSinglePathMatch",
            r#"r: Path("/foo/") -> <shunt>"#,
            vec![
                (get("/foo"), None),
                (get("/foo/"), R),
                (get("/foo/bar/"), None),
            ],
        ),
        one(
            "TestSinglePathMatch",
            r#"r: Path("/foo/bar/") -> <shunt>"#,
            vec![
                (get("/foo/bar"), None),
                (get("/foo/bar/"), R),
                (get("/foo/bar/baz/"), None),
            ],
        ),
        one(
            "TestSimpleWildcardMatch",
            r#"r: Path("/:name1") -> <shunt>"#,
            vec![
                (get("/"), None),
                (get("/foo"), R),
                (get("/foo/"), None),
                (get("/foo/bar"), None),
            ],
        ),
        one(
            "TestSimpleWildcardMatch",
            r#"r: Path("/:name1/") -> <shunt>"#,
            vec![(get("/foo"), None), (get("/foo/"), R)],
        ),
        one(
            "TestSimpleWildcardMatch",
            r#"r: Path("/:name1/bar") -> <shunt>"#,
            vec![
                (get("/foo"), None),
                (get("/foo/bar"), R),
                (get("/foo/bar/"), None),
            ],
        ),
        one(
            "TestSimpleWildcardMatch",
            r#"r: Path("/foo/:name1/baz/") -> <shunt>"#,
            vec![(get("/foo/bar/baz"), None), (get("/foo/bar/baz/"), R)],
        ),
        one(
            "TestSimpleWildcardMatch",
            r#"r: Path("/:name1/:name2") -> <shunt>"#,
            vec![
                (get("/foo"), None),
                (get("/foo/bar"), R),
                (get("/foo/bar/baz"), None),
            ],
        ),
        one(
            "TestCatchallWildcardMatch",
            r#"r: Path("/*name1") -> <shunt>"#,
            vec![(get("/"), None), (get("/foo"), R), (get("/foo/bar/"), R)],
        ),
        one(
            "TestCatchallWildcardMatch",
            r#"r: Path("/foo/*name1") -> <shunt>"#,
            vec![
                (get("/foo"), None),
                (get("/foo/"), None),
                (get("/foo/bar"), R),
                (get("/foo/bar/baz/"), R),
            ],
        ),
        one(
            "TestSubtreeMatch",
            r#"r: PathSubtree("/") -> <shunt>"#,
            vec![(get("/"), R), (get("/foo"), R), (get("/foo/bar/"), R)],
        ),
        one(
            "TestSubtreeMatch",
            r#"r: PathSubtree("/foo") -> <shunt>"#,
            vec![
                (get("/"), None),
                (get("/foo"), R),
                (get("/foo/"), R),
                (get("/foo/bar"), R),
                (get("/foob"), None),
            ],
        ),
        one(
            "TestSubtreeMatch",
            r#"r: PathSubtree("/foo/") -> <shunt>"#,
            vec![(get("/foo"), R), (get("/foo/bar/"), R)],
        ),
        one(
            "TestSubtreeMatch",
            r#"r: PathSubtree("/foo/bar") -> <shunt>"#,
            vec![
                (get("/foo"), None),
                (get("/foo/"), None),
                (get("/foo/bar"), R),
                (get("/foo/bar/baz"), R),
            ],
        ),
        one(
            "TestSubtreeWildcardMatch",
            r#"r: PathSubtree("/:name1") -> <shunt>"#,
            vec![
                (get("/"), None),
                (get("/foo"), R),
                (get("/foo/"), R),
                (get("/foo/bar/"), R),
            ],
        ),
        one(
            "TestSubtreeWildcardMatch",
            r#"r: PathSubtree("/foo/:name1/baz") -> <shunt>"#,
            vec![
                (get("/foo/bar"), None),
                (get("/foo/bar/"), None),
                (get("/foo/bar/baz"), R),
                (get("/foo/bar/baz/qux/"), R),
            ],
        ),
        one(
            "TestSubtreeCatchallWildcardMatch",
            r#"r: PathSubtree("/foo/*rest") -> <shunt>"#,
            vec![(get("/foo"), R), (get("/foo/"), R), (get("/foo/bar"), R)],
        ),
        one(
            "TestMatchPathResolved",
            r#"r: Path("/some/path") -> <shunt>"#,
            vec![
                (get("/some/some-other/../path"), R),
                (get("//some/./path"), R),
            ],
        ),
        one(
            "matcher.go: route paths are cleaned and rooted as requests are",
            r#"r: Path("a//b/../c") -> <shunt>"#,
            vec![(get("/a/c"), R), (get("/a/b/c"), None)],
        ),
        one(
            "matcher.go: `:` alone is an unnamed parameter",
            r#"r: Path("/a/:") -> <shunt>"#,
            vec![(get("/a/x"), R), (get("/a/"), None)],
        ),
        one(
            "docs predicates.md: `/foo/**` and `/foo/*` are free wildcards",
            r#"
            a: Path("/a/**") -> <shunt>;
            b: Path("/b/*") -> <shunt>;
        "#,
            vec![
                (get("/a/x/y"), Some("a")),
                (get("/a/"), None),
                (get("/b/x"), Some("b")),
                (get("/b"), None),
            ],
        ),
    ]);
}

/// The tree decides before any other predicate: literal, then parameter, then free
/// wildcard, with backtracking; routes without a path come last.
#[test]
fn the_tree_picks_before_the_predicates() {
    check(&[
        one(
            "TestTree (pathmux/tree_test.go)",
            r#"
            root: Path("/") -> <shunt>;
            i: Path("/i") -> <shunt>;
            iAaa: Path("/i/:aaa") -> <shunt>;
            images: Path("/images") -> <shunt>;
            abcJpg: Path("/images/abc.jpg") -> <shunt>;
            imgname: Path("/images/:imgname") -> <shunt>;
            imgpath: Path("/images/*path") -> <shunt>;
            ima: Path("/ima") -> <shunt>;
            imaPar: Path("/ima/:par") -> <shunt>;
            images1: Path("/images1") -> <shunt>;
            apples: Path("/apples") -> <shunt>;
            appLes: Path("/app/les") -> <shunt>;
            appeasement: Path("/appeasement") -> <shunt>;
            dateYM: Path("/date/:year/:month") -> <shunt>;
            dateYMonth: Path("/date/:year/month") -> <shunt>;
            dateYMAbc: Path("/date/:year/:month/abc") -> <shunt>;
            dateYMPost: Path("/date/:year/:month/:post") -> <shunt>;
            dateYMRest: Path("/date/:year/:month/*post") -> <shunt>;
            page: Path("/:page") -> <shunt>;
            pageIndex: Path("/:page/:index") -> <shunt>;
            postPage: Path("/post/:post/page/:page") -> <shunt>;
            usersRelated: Path("/users/:pk/:related") -> <shunt>;
            usersPassword: Path("/users/:id/updatePassword") -> <shunt>;
            somethingAbc: Path("/:something/abc") -> <shunt>;
            somethingDef: Path("/:something/def") -> <shunt>;
        "#,
            vec![
                (get("/users/abc/updatePassword"), Some("usersPassword")),
                (get("/users/all/something"), Some("usersRelated")),
                (get("/aaa/abc"), Some("somethingAbc")),
                (get("/aaa/def"), Some("somethingDef")),
                (get("/paper"), Some("page")),
                (get("/"), Some("root")),
                (get("/i"), Some("i")),
                (get("/images"), Some("images")),
                (get("/images/abc.jpg"), Some("abcJpg")),
                (get("/images/something"), Some("imgname")),
                (get("/images/long/path"), Some("imgpath")),
                (get("/images/even/longer/path"), Some("imgpath")),
                (get("/ima"), Some("ima")),
                (get("/apples"), Some("apples")),
                (get("/app/les"), Some("appLes")),
                (get("/abc"), Some("page")),
                (get("/abc/100"), Some("pageIndex")),
                (get("/post/a/page/2"), Some("postPage")),
                (get("/date/2014/5"), Some("dateYM")),
                (get("/date/2014/month"), Some("dateYMonth")),
                (get("/date/2014/5/abc"), Some("dateYMAbc")),
                (get("/date/2014/5/def"), Some("dateYMPost")),
                (get("/date/2014/5/def/hij"), Some("dateYMRest")),
                (get("/date/2014/5/def/hij/"), Some("dateYMRest")),
                (get("/ima/bcd/fgh"), None),
                (get("/date/2014/05/"), None),
            ],
        ),
        one(
            "TestMatcherWithPathConflict",
            r#"
            testRoute0: Path("/api/:one/name") && Method("GET") -> <shunt>;
            testRoute1: Path("/api/:two/name") && Method("POST") -> <shunt>;
        "#,
            vec![
                (get("/api/a/name"), Some("testRoute0")),
                (with("POST", "/api/a/name"), Some("testRoute1")),
                (with("PUT", "/api/a/name"), None),
            ],
        ),
        one(
            "TestMakeMatcherRootLeavesOnly, TestMatchTopLeaves",
            r#"
            top: Path("/*") && Method("PUT") -> <shunt>;
            rootLeaf: Method("PATCH") -> <shunt>;
        "#,
            vec![
                (with("PUT", "/some/path"), Some("top")),
                (with("PATCH", "/some/path"), Some("rootLeaf")),
                (get("/some/path"), None),
            ],
        ),
        one(
            "TestMatchWrongMethod",
            r#"r: Path("/some/path/*_") && Method("PUT") -> <shunt>"#,
            vec![
                (get("/some/path/x"), None),
                (with("PUT", "/some/path/x"), R),
            ],
        ),
        one(
            "TestHeaderMatchCaseInsensitive",
            r#"r: Header("some-header", "some-value") -> <shunt>"#,
            vec![
                (get("/").header("some-header", "some-value"), R),
                (get("/").header("some-header", "other"), None),
            ],
        ),
        one(
            "TestSubtreeConflict",
            r#"
            subtree: PathSubtree("/foo/") && Method("PUT") -> <shunt>;
            path: Path("/foo") -> <shunt>;
        "#,
            vec![
                (with("PUT", "/foo/bar"), Some("subtree")),
                (with("PUT", "/foo"), Some("subtree")),
                (with("PUT", "/foo/"), Some("subtree")),
                (get("/foo"), Some("path")),
                (get("/bar"), None),
            ],
        ),
        one(
            "TestSubtreeConflict (other order)",
            r#"
            path: Path("/foo/") -> <shunt>;
            subtree: PathSubtree("/foo") && Method("PUT") -> <shunt>;
        "#,
            vec![
                (with("PUT", "/foo/bar"), Some("subtree")),
                (with("PUT", "/foo/"), Some("subtree")),
                (get("/foo/"), Some("path")),
                (get("/foo"), None),
            ],
        ),
        one(
            "matcher.go: a literal beats a parameter whatever the weights",
            r#"
            param: Path("/a/:x") && Weight(10) -> <shunt>;
            literal: Path("/a/b") -> <shunt>;
        "#,
            vec![(get("/a/b"), Some("literal")), (get("/a/c"), Some("param"))],
        ),
        one(
            "matcher.go: backtracking when a node's routes all fail",
            r#"
            post: Path("/a/b") && Method("POST") -> <shunt>;
            deepFalse: Path("/a/:x/c") && False() -> <shunt>;
            param: Path("/:x/b") -> <shunt>;
            paramC: Path("/:y/b/c") -> <shunt>;
        "#,
            vec![
                (get("/a/b"), Some("param")),
                (with("POST", "/a/b"), Some("post")),
                (get("/a/b/c"), Some("paramC")),
            ],
        ),
        one(
            "matcher.go: the deepest wildcard first, a parameter before a subtree",
            r#"
            all: PathSubtree("/") -> <shunt>;
            a: PathSubtree("/a") -> <shunt>;
            id: Path("/a/:id") -> <shunt>;
        "#,
            vec![
                (get("/b"), Some("all")),
                (get("/a"), Some("a")),
                (get("/a/b"), Some("id")),
                (get("/a/b/c"), Some("a")),
            ],
        ),
        one(
            "matcher.go: routes without a path only when the tree has none",
            r#"
            heavy: Method("GET") && Weight(100) -> <shunt>;
            x: Path("/x") -> <shunt>;
            y: Path("/y") && Method("POST") -> <shunt>;
        "#,
            vec![
                (get("/x"), Some("x")),
                (get("/y"), Some("heavy")),
                (with("POST", "/y"), Some("y")),
                (with("POST", "/z"), None),
            ],
        ),
        one(
            "TestGeneric",
            GENERIC,
            vec![
                (get("/tessera/header"), Some("header")),
                (get("/some.html"), Some("pdp")),
                (get("/path/to/some.html"), Some("pdp")),
                (get("/sls-async/some.html"), Some("pdpAsync")),
                (get("/sc/some.html"), Some("pdpsc")),
                (get(""), Some("catalog")),
                (get("/"), Some("catalog")),
                (get("/nike"), Some("catalog")),
                (get("/sls-async/nike"), Some("catalogAsync")),
                (get("/sc/nike/sports"), Some("catalogsc")),
                (get("/slow"), Some("slow")),
                (get("/api/cart/42"), Some("cart")),
                (get("/api/cart/42/all"), Some("cart")),
                (with("POST", "/login"), Some("login")),
                (with("POST", "/logout"), Some("logout")),
                (get("/healthcheck"), Some("healthcheck")),
                (get("/assets/base-assets/some.css"), Some("baseAssets")),
                (get("/assets/login/dir/some.css"), Some("loginAssets")),
                (get("/herren/nike"), Some("catalogHerren")),
                (get("/sls-async/damen/nike"), Some("catalogAsyncDamen")),
                (get("/sc/herren/nike/sports"), Some("catalogscHerren")),
                (get("/men/nike"), Some("catalogHerrenEn")),
                (get("/sls/women/nike/sports"), Some("catalogslsDamenEn")),
                // matcher.go: a tree route whose method fails leaves the request to
                // the routes without a path.
                (get("/login"), Some("catalog")),
            ],
        ),
    ]);
}

/// skipper's `TestGeneric` route set (routing/matcher_test.go), with shunts.
const GENERIC: &str = r#"
    header: Path("/tessera/header") -> <shunt>;
    footer: Path("/tessera/footer") -> <shunt>;
    pdp: PathRegexp(/.*\.html$/) -> <shunt>;
    pdpAsync: Path("/sls-async/*_") && PathRegexp(/.*\.html$/) -> <shunt>;
    pdpsc: Path("/sc/*_") && PathRegexp(/.*\.html$/) -> <shunt>;
    catalog: * -> <shunt>;
    catalogAsync: Path("/sls-async/*_") -> <shunt>;
    catalogsc: Path("/sc/*_") -> <shunt>;
    slow: Path("/slow") -> <shunt>;
    cart: Path("/api/cart/*_") -> <shunt>;
    login: Path("/login") && Method("POST") -> <shunt>;
    logout: Path("/logout") && Method("POST") -> <shunt>;
    healthcheck: Path("/healthcheck") -> <shunt>;
    baseAssets: Path("/assets/base-assets/*_") -> <shunt>;
    loginAssets: Path("/assets/login/*_") -> <shunt>;
    catalogHerren: Path("/herren/*_") -> <shunt>;
    catalogAsyncDamen: Path("/sls-async/damen/*_") -> <shunt>;
    catalogscHerren: Path("/sc/herren/*_") -> <shunt>;
    catalogHerrenEn: True() && Path("/men/*_") -> <shunt>;
    catalogslsDamenEn: True() && Path("/sls/women/*_") -> <shunt>;
"#;

/// Among the routes at one node: the predicate count plus `Weight`, then file order.
#[test]
fn priority_within_a_node() {
    check(&[
        one(
            "docs predicates.md, Weight: more predicates win",
            r#"
            route1: Path("/test") -> <shunt>;
            route2: Path("/test") && True() -> <shunt>;
        "#,
            vec![(get("/test"), Some("route2"))],
        ),
        one(
            "docs predicates.md, Weight: weight beats predicates",
            r#"
            route1: Path("/test") && Weight(100) -> <shunt>;
            route2: Path("/test") && True() && True() -> <shunt>;
        "#,
            vec![(get("/test"), Some("route1"))],
        ),
        one(
            "matcher.go: Weight is truncated to an integer",
            r#"
            w19: Path("/w") && Weight(1.9) -> <shunt>;
            two: Path("/w") && True() && True() -> <shunt>;
            w25: Path("/v") && Weight(2.5) -> <shunt>;
            twoV: Path("/v") && True() && True() -> <shunt>;
            neg: Path("/n") && Weight(-1) && True() -> <shunt>;
            zero: Path("/n") -> <shunt>;
        "#,
            vec![
                (get("/w"), Some("two")),
                (get("/v"), Some("w25")),
                (get("/n"), Some("neg")),
            ],
        ),
        one(
            "matcher.go: Header counts once per name; of names differing in case the last holds",
            r#"
            sameName: Path("/h") && Header("X-A", "1") && Header("x-a", "2") -> <shunt>;
            twoNames: Path("/h") && Header("X-B", "1") && True() -> <shunt>;
        "#,
            vec![
                (
                    get("/h").header("x-a", "2").header("x-b", "1"),
                    Some("twoNames"),
                ),
                (get("/h").header("x-a", "2"), Some("sameName")),
                (get("/h").header("x-a", "1"), None),
            ],
        ),
        one(
            "matcher.go: HeaderRegexp counts once per name, every regexp must match",
            r#"
            sameName: Path("/r") && HeaderRegexp("X-A", /a/) && HeaderRegexp("X-A", /b/) -> <shunt>;
            twoNames: Path("/r") && HeaderRegexp("X-B", /./) && True() -> <shunt>;
        "#,
            vec![
                (
                    get("/r").header("x-a", "ab").header("x-b", "1"),
                    Some("twoNames"),
                ),
                (get("/r").header("x-a", "ab"), Some("sameName")),
                (get("/r").header("x-a", "a"), None),
            ],
        ),
        one(
            "matcher.go: Method and Methods count one, Host one each",
            r#"
            method: Path("/i") && Method("GET") && Weight(1) -> <shunt>;
            threeI: Path("/i") && True() && True() && True() -> <shunt>;
            methods: Path("/j") && Methods("GET", "POST") -> <shunt>;
            twoJ: Path("/j") && True() && True() -> <shunt>;
            hosts: Path("/k") && Host(/example/) && Host(/org/) -> <shunt>;
            oneK: Path("/k") && True() -> <shunt>;
        "#,
            vec![
                (get("/i"), Some("threeI")),
                (get("/j"), Some("twoJ")),
                (get("/k"), Some("hosts")),
            ],
        ),
        one(
            "docs predicates.md, PathRegexp: with a Path, checked in the node",
            r#"
            any: Path("/colors/:name/rgb") -> <shunt>;
            known: Path("/colors/:name/rgb") && PathRegexp("^/colors/(red|green|blue)/") -> <shunt>;
        "#,
            vec![
                (get("/colors/red/rgb"), Some("known")),
                (get("/colors/pink/rgb"), Some("any")),
            ],
        ),
        one(
            "matcher.go: a free wildcard and a subtree share the node; ties go in file order",
            r#"
            rest: Path("/a/*rest") -> <shunt>;
            subtree: PathSubtree("/a") -> <shunt>;
            heavier: PathSubtree("/b") && Weight(1) -> <shunt>;
            lighter: Path("/b/*rest") -> <shunt>;
        "#,
            vec![
                (get("/a/x"), Some("rest")),
                (get("/a"), Some("subtree")),
                (get("/b/x"), Some("heavier")),
            ],
        ),
        one(
            "matcher.go: without a path, the same order",
            r#"
            first: Host(/^example/) -> <shunt>;
            second: Host(/^example/) -> <shunt>;
            weighted: Method("GET") && Weight(1) -> <shunt>;
        "#,
            vec![
                (get("/q"), Some("weighted")),
                (with("POST", "/q"), Some("first")),
            ],
        ),
    ]);
}

/// Paths skipper's tree refuses are route errors here (skipper drops the route).
#[test]
fn invalid_paths_are_route_errors() {
    for (source, route) in [
        (
            "TestSimpleWildcardMatch",
            r#"Path("/foo:name1") -> <shunt>"#,
        ),
        ("TestCatchallWildcardMatch", r#"Path("/foo*") -> <shunt>"#),
        (
            "TestCatchallWildcardMatch",
            r#"Path("/*name1/") -> <shunt>"#,
        ),
        (
            "TestFreeWildcardParamNotLast",
            r#"Path("/foo/*one/bar") -> <shunt>"#,
        ),
        (
            "TestSubtreeCatchallWildcardMatch",
            r#"PathSubtree("/*name1/") -> <shunt>"#,
        ),
        ("TestPanics", r#"Path("/abc/ab*cd") -> <shunt>"#),
        ("TestSinglePathMatch", r#"Path("") -> <shunt>"#),
    ] {
        let e = super::tests::error(route);
        assert!(e.contains("Path"), "{source}: {route}: {e}");
    }
}
