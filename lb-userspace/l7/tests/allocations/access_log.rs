//! Rendering and logging an access-log line allocates nothing once the buffers have
//! grown: text and JSON lines, X-Forwarded-For lists with IPv6 entries, stripped
//! queries, and masked queries (decoded, sorted, hashed and re-encoded in the
//! renderer's reused scratch). A line is written for every request on every worker;
//! an allocation there would put the allocator on the hot path.

use std::time::{Duration, SystemTime};

use super::allocations;

use lb_l7::accesslog::{AccessLog, AccessLogConfig, Entry, Format, QueryPolicy, Renderer};

fn entry<'a>(query: &'a [u8], forwarded_for: Option<&'a [u8]>) -> Entry<'a> {
    Entry {
        peer: "198.18.1.1".parse().expect("addr"),
        forwarded_for,
        user: b"",
        time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_549_377_546),
        method: b"GET",
        path: b"/api/v1/items",
        query: Some(query),
        filtered_query: query,
        proto: b"HTTP/1.1",
        status: 200,
        size: 1234,
        referer: b"http://ref.example/",
        user_agent: b"curl/8.5.0 \"quoted\"",
        duration: Duration::from_millis(7),
        host: b"api.example",
        flow_id: b"FLOW1",
        audit: b"",
    }
}

const QUERIES: [&[u8]; 4] = [
    b"",
    b"token=s3cret&page=2&q=a+b%21",
    b"z=1&y=2&x=3&token=abc&token=def&k%20!=%7e&bad=%zz&semi=1;2&&flag",
    b"a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9&j=10&k=11&l=12&m=13&n=14&o=15&p=16&token=x",
];

#[test]
fn lines_allocate_nothing_once_buffers_have_grown() {
    let masks: [&[String]; 3] = [
        &[],
        &["token".to_owned()],
        &["token".to_owned(), "q".to_owned()],
    ];
    let xffs: [Option<&[u8]>; 3] = [
        None,
        Some(b"198.18.0.7"),
        Some(b"helloworld, [2001:db8::9]:443, 198.18.0.8:80"),
    ];
    let mut renderer = Renderer::default();
    let mut out = Vec::new();
    let mut pass = |count: bool| {
        let mut lines = 0;
        let before = allocations();
        for format in [Format::Text, Format::Json] {
            for query in QUERIES {
                for xff in xffs {
                    for mask in masks {
                        for strip in [false, true] {
                            out.clear();
                            let e = entry(query, xff);
                            renderer.render(format, &e, QueryPolicy { strip, mask }, &mut out);
                            lines += 1;
                        }
                    }
                }
            }
        }
        let n = allocations() - before;
        if count {
            assert_eq!(n, 0, "{n} allocations over {lines} lines");
        }
    };
    pass(false);
    pass(true);
}

#[test]
fn logging_allocates_nothing_once_buffers_have_grown() {
    let log = AccessLog::with_sink(AccessLogConfig::default(), Box::new(std::io::sink()));
    let mask = ["token".to_owned()];
    let xff: &[u8] = b"198.18.0.7, 2001:db8::9";
    let pass = || {
        for query in QUERIES {
            log.log(&entry(query, Some(xff)), &mask);
            log.log(&entry(query, None), &[]);
        }
        log.flush().expect("flush");
    };
    pass();
    let before = allocations();
    for _ in 0..100 {
        pass();
    }
    let n = allocations() - before;
    assert_eq!(n, 0, "{n} allocations over 800 logged lines");
}
