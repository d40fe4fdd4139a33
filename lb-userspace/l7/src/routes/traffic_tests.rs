//! `Traffic` and `TrafficSegment`, ported from skipper's
//! `predicates/traffic/traffic_test.go` and `segment_test.go`: their argument checks,
//! their matches for fixed draws, and the shares they give over many requests (drawn
//! from a seeded generator, so each run sees the same draws and the tolerances are
//! skipper's own).

use std::collections::HashMap;

use http::{HeaderMap, HeaderValue, Method};

use super::{
    RouteTable,
    predicate::RequestView,
    tests::{parse, table},
};
use crate::balance::rng;

/// Whether `predicate` compiles in a route; a refusal must name its position.
fn compiles(predicate: &str) -> bool {
    match parse(&format!("r: {predicate} -> <shunt>;")) {
        Ok(_) => true,
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("line 1, column 4"), "{predicate}: {e}");
            false
        }
    }
}

/// The id of the route `t` picks for `GET /test` with `cookie` and `headers`, and
/// the request's segment draw fixed to `draw` (`None`: drawn).
fn pick(t: &RouteTable, cookie: Option<&'static str>, draw: Option<f64>) -> Option<String> {
    let mut headers = HeaderMap::new();
    if let Some(c) = cookie {
        headers.insert(http::header::COOKIE, HeaderValue::from_static(c));
    }
    let get = Method::GET;
    let view = RequestView {
        draw,
        ..RequestView::new(&get, "/test", "example.org", &headers)
    };
    t.find(&view).map(|r| r.id.clone())
}

/// How often each route is picked over `n` requests of `GET /test`, drawn from `seed`.
fn shares(t: &RouteTable, n: usize, seed: u64) -> HashMap<String, usize> {
    rng::seed_thread(seed);
    let mut out = HashMap::new();
    for _ in 0..n {
        let id = pick(t, None, None).unwrap_or_else(|| "none".into());
        *out.entry(id).or_default() += 1;
    }
    out
}

/// traffic_test.go `TestCreate`: one argument or three, a chance in [0, 1], then
/// two strings.
#[test]
fn traffic_arguments_as_skipper_checks_them() {
    for (what, predicate, ok) in [
        ("no args", "Traffic()", false),
        (
            "too many args",
            r#"Traffic(.3, "testname", "group", "something")"#,
            false,
        ),
        ("first not number", r#"Traffic("something")"#, false),
        ("second not string", "Traffic(.3, .2)", false),
        ("third not string", r#"Traffic(.3, "testname", .2)"#, false),
        ("only chance", "Traffic(.3)", true),
        ("0.0 is allowed", "Traffic(0.0)", true),
        ("1.0 is allowed", "Traffic(1.0)", true),
        ("wrong chance, bigger than 1", "Traffic(1.3)", false),
        ("wrong chance, less than 0", "Traffic(-0.3)", false),
        ("two parameters", r#"Traffic(.3, "foo")"#, false),
        (
            "chance and stickiness",
            r#"Traffic(.3, "testname", "group")"#,
            true,
        ),
    ] {
        assert_eq!(compiles(predicate), ok, "{what}: {predicate}");
    }
}

/// traffic_test.go `TestMatch`: without stickiness the chance decides (0 never, 1
/// always); with it, the cookie decides when the request has it, else the chance.
#[test]
fn traffic_matches_by_chance_or_by_its_cookie() {
    for (what, predicate, cookie, want) in [
        ("not sticky, no match", "Traffic(0)", None, false),
        ("not sticky, match", "Traffic(1)", None, true),
        (
            "sticky, has cookie, no match",
            r#"Traffic(1, "testcookie", "A")"#,
            Some("testcookie=B"),
            false,
        ),
        (
            "sticky, has cookie, match",
            r#"Traffic(0, "testcookie", "A")"#,
            Some("testcookie=A"),
            true,
        ),
        (
            "sticky, no cookie, no match",
            r#"Traffic(0, "testcookie", "A")"#,
            None,
            false,
        ),
        (
            "sticky, no cookie, match",
            r#"Traffic(1, "testcookie", "A")"#,
            None,
            true,
        ),
        (
            "sticky, another cookie only",
            r#"Traffic(1, "testcookie", "A")"#,
            Some("other=A"),
            true,
        ),
    ] {
        let t = table(&format!("r: {predicate} -> <shunt>;"));
        for _ in 0..20 {
            assert_eq!(pick(&t, cookie, None).is_some(), want, "{what}");
        }
    }
}

/// traffic_test.go `TestTrafficPredicateInRoutes`: each `Traffic` draws on its own,
/// in priority order (`Traffic(.5) && True()` before `Traffic(.5)`), within
/// skipper's tolerance of 10% of the requests.
#[test]
fn traffic_routes_take_their_shares_in_priority_order() {
    let n = 1000;
    let cases: [(&str, [f64; 3]); 3] = [
        ("r1: * -> status(201) -> <shunt>", [1.0, 0.0, 0.0]),
        (
            "r1: Traffic(0.8) -> status(201) -> <shunt>; r2: * -> status(202) -> <shunt>",
            [0.8, 0.2, 0.0],
        ),
        (
            "r1: Traffic(0.5) && True() -> status(201) -> <shunt>; r2: Traffic(0.5) -> status(202) -> <shunt>; r3: * -> status(203) -> <shunt>",
            [0.5, 0.25, 0.25],
        ),
    ];
    for (routes, want) in cases {
        let got = shares(&table(routes), n, 0x5eed);
        for (i, share) in want.iter().enumerate() {
            let id = format!("r{}", i + 1);
            #[expect(clippy::cast_precision_loss, reason = "small counts")]
            let (count, goal) = (got.get(&id).copied().unwrap_or(0) as f64, n as f64 * share);
            assert!(
                (count - goal).abs() <= n as f64 * 0.1,
                "{routes}: {id} got {count}, want {goal}"
            );
        }
    }
}

/// segment_test.go `TestTrafficSegmentInvalidCreateArguments`.
#[test]
fn traffic_segment_arguments_as_skipper_checks_them() {
    for predicate in [
        "TrafficSegment()",
        "TrafficSegment(1)",
        "TrafficSegment(1, 0)",
        "TrafficSegment(0, 1.1)",
        "TrafficSegment(1, 2)",
        r#"TrafficSegment(0, "1")"#,
        r#"TrafficSegment("0", 1)"#,
        "TrafficSegment(-0.1, 1)",
    ] {
        assert!(!compiles(predicate), "{predicate}");
    }
    for predicate in [
        "TrafficSegment(0, 1)",
        "TrafficSegment(0.5, 0.5)",
        "TrafficSegment(1, 1)",
    ] {
        assert!(compiles(predicate), "{predicate}");
    }
}

/// segment_test.go `TestTrafficSegmentMatch` and `TestTrafficSegmentMinEqualsMax`:
/// `[min, max)` against the request's draw; an empty segment takes nothing, not even
/// a draw equal to its bounds.
#[test]
fn traffic_segment_matches_its_half_open_interval() {
    let t = table("r: TrafficSegment(0, 0.5) -> <shunt>;");
    for (draw, want) in [
        (0.0, true),
        (0.1, true),
        (0.49, true),
        (0.5, false),
        (0.6, false),
        (1.0, false),
    ] {
        assert_eq!(pick(&t, None, Some(draw)).is_some(), want, "draw {draw}");
    }
    for bound in [0.0, 1.0 / 10.0, 0.5, 2.0 / 3.0, 1.0] {
        let t = table(&format!("r: TrafficSegment({bound}, {bound}) -> <shunt>;"));
        assert!(pick(&t, None, Some(bound)).is_none(), "[{bound}, {bound})");
    }
    // A draw is in [0, 1): the whole range takes every request.
    let all = table("r: TrafficSegment(0, 1) -> <shunt>;");
    assert_eq!(shares(&all, 1000, 7).get("r"), Some(&1000));
}

/// segment_test.go `TestTrafficSegmentSplit`: segments tiling [0, 1) share one draw
/// per request, so every request goes to exactly one, in the segments' proportions
/// (skipper's tolerance: 6% of each share).
#[test]
fn traffic_segments_split_the_requests_exactly_once_each() {
    let t = table(
        r#"r50: Path("/test") && TrafficSegment(0.0, 0.5) -> status(200) -> <shunt>;
           r30: Path("/test") && TrafficSegment(0.5, 0.8) -> status(201) -> <shunt>;
           r20: Path("/test") && TrafficSegment(0.8, 1.0) -> status(202) -> <shunt>;"#,
    );
    let n = 10_000;
    let got = shares(&t, n, 0x5eed_0001);
    assert_eq!(
        got.get("none"),
        None,
        "every request finds a segment: {got:?}"
    );
    for (id, share) in [("r50", 0.5), ("r30", 0.3), ("r20", 0.2)] {
        #[expect(clippy::cast_precision_loss, reason = "small counts")]
        let (count, goal) = (got[id] as f64, n as f64 * share);
        assert!(
            (count - goal).abs() <= goal * 0.06,
            "{id}: {count} vs {goal}"
        );
    }
}

/// segment_test.go `TestTrafficSegmentRouteWeight`: a segment counts one predicate
/// and weighs -1, so `Path && TrafficSegment` ranks below `Path && Header`; among
/// themselves the segments still split.
#[test]
fn traffic_segment_adds_nothing_to_a_routes_priority() {
    let t = table(
        r#"segment90: Path("/test") && TrafficSegment(0.0, 0.9) -> status(200) -> <shunt>;
           segment10: Path("/test") && TrafficSegment(0.9, 1.0) -> status(200) -> <shunt>;
           cookie: Path("/test") && Header("X-Foo", "bar") -> status(201) -> <shunt>;"#,
    );
    let priority = |id: &str| {
        t.routes()
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.priority)
            .expect("route")
    };
    assert_eq!((priority("segment90"), priority("cookie")), (0, 1));
    let mut headers = HeaderMap::new();
    headers.insert("x-foo", HeaderValue::from_static("bar"));
    let get = Method::GET;
    for draw in [0.0, 0.5, 0.95] {
        let view = RequestView {
            draw: Some(draw),
            ..RequestView::new(&get, "/test", "example.org", &headers)
        };
        assert_eq!(t.find(&view).map(|r| r.id.as_str()), Some("cookie"));
    }
    let got = shares(&t, 1000, 3);
    assert_eq!(
        got.get("segment90").copied().unwrap_or(0) + got.get("segment10").copied().unwrap_or(0),
        1000,
        "{got:?}"
    );
    // `Traffic` counts as any predicate does.
    let traffic = table("t: Traffic(1) && True() -> <shunt>;");
    assert_eq!(traffic.routes()[0].priority, 2);
}
