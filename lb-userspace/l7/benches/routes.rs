//! Criterion benchmarks of the route table: compiling 1k, 10k and 100k routes shaped
//! like a cluster's (distinct paths with parameters, subtrees and wildcards, some
//! hosts, methods and headers, network backends) and looking requests up in them.
//! The baseline, measured in the same run, is a lookup in a table of one route.
//!
//! Before the groups run it prints the heap bytes each table holds per route,
//! counted by a global allocator that tracks live bytes.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    sync::atomic::{AtomicIsize, Ordering},
    time::{Duration, Instant, SystemTime},
};

use criterion::{BenchmarkId, Criterion};
use http::{HeaderMap, HeaderValue, Method};
use lb_l7::{
    balance::Registry,
    eskip,
    routes::{Context, RouteTable, predicate::RequestView},
};

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// Route `i` of a cluster-like set: five shapes in turn, 50 hosts.
fn route(i: usize) -> String {
    let backend = format!(
        "\"http://10.{}.{}.{}:8080\"",
        i / 65_536 % 256,
        i / 256 % 256,
        i % 256
    );
    match i % 5 {
        0 => format!(r#"r{i}: Path("/api/v1/svc{i}/items/:id") && Method("GET") -> {backend};"#),
        1 => format!(r#"r{i}: Path("/api/v1/svc{i}/items") && Method("POST") -> {backend};"#),
        2 => format!(r#"r{i}: PathSubtree("/static/svc{i}") -> {backend};"#),
        3 => format!(
            r#"r{i}: Host(/^svc{}\.example\.org$/) && Path("/svc{i}/:tenant/orders/*rest") -> {backend};"#,
            i % 50
        ),
        _ => format!(
            r#"r{i}: Path("/api/v2/svc{i}/users/:user/profile") && Header("X-Tenant", "t{}") -> {backend};"#,
            i % 7
        ),
    }
}

/// A request `route(i)` matches: method, path, host, whether it needs X-Tenant.
fn request(i: usize) -> (Method, String, String, Option<String>) {
    let host = format!("svc{}.example.org", i % 50);
    match i % 5 {
        0 => (Method::GET, format!("/api/v1/svc{i}/items/42"), host, None),
        1 => (Method::POST, format!("/api/v1/svc{i}/items"), host, None),
        2 => (Method::GET, format!("/static/svc{i}/js/app.js"), host, None),
        3 => (
            Method::GET,
            format!("/svc{i}/acme/orders/2024/7"),
            host,
            None,
        ),
        _ => (
            Method::GET,
            format!("/api/v2/svc{i}/users/u1/profile"),
            host,
            Some(format!("t{}", i % 7)),
        ),
    }
}

fn parsed(n: usize) -> Vec<eskip::Route> {
    let text: String = (0..n).map(route).collect::<Vec<_>>().join("\n");
    let parsed = eskip::parse_all(&text);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors.first());
    parsed.routes
}

fn compile(routes: &[eskip::Route], registry: &Registry) -> RouteTable {
    let cx = Context {
        registry,
        service_endpoints: &[],
        previous: None,
        now: SystemTime::now(),
    };
    RouteTable::compile(routes, &cx).expect("compiles")
}

/// Prints heap bytes per route and one timed 100k compile.
fn memory() {
    for n in SIZES {
        let routes = parsed(n);
        let registry = Registry::default();
        let before = LIVE.load(Ordering::Relaxed);
        let started = Instant::now();
        let table = compile(&routes, &registry);
        let took = started.elapsed();
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        println!(
            "routes/memory/{n}: {} bytes per route (table and endpoint registry), compiled once in {took:?}",
            bytes / n as isize
        );
        drop(black_box(table));
    }
}

/// 1024 requests spread over the table, one in eight missing every route.
struct Requests {
    list: Vec<(Method, String, String, HeaderMap)>,
}

impl Requests {
    fn new(n: usize) -> Self {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let list = (0..1024)
            .map(|k| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % n as u64) as usize;
                let (method, mut path, host, tenant) = request(i);
                if k % 8 == 7 {
                    path.insert_str(0, "/missing");
                }
                let mut headers = HeaderMap::new();
                if let Some(t) = tenant {
                    headers.insert("x-tenant", HeaderValue::from_str(&t).expect("value"));
                }
                (method, path, host, headers)
            })
            .collect();
        Self { list }
    }

    fn find<'t>(&self, table: &'t RouteTable, k: usize) -> Option<&'t str> {
        let (method, path, host, headers) = &self.list[k % self.list.len()];
        table
            .find(&RequestView::new(method, path, host, headers))
            .map(|r| r.id.as_str())
    }
}

fn benches(c: &mut Criterion) {
    let registry = Registry::default();
    let mut g = c.benchmark_group("routes/compile");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in SIZES {
        let routes = parsed(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &routes, |b, routes| {
            b.iter_with_large_drop(|| compile(black_box(routes), &registry));
        });
    }
    g.finish();

    let mut g = c.benchmark_group("routes/lookup");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let one = compile(&parsed(1), &registry);
    let reqs = Requests::new(1);
    let mut k = 0;
    g.bench_function("baseline-1-route", |b| {
        b.iter(|| {
            k += 1;
            black_box(reqs.find(&one, k))
        });
    });
    for n in SIZES {
        let table = compile(&parsed(n), &registry);
        let reqs = Requests::new(n);
        assert!(reqs.find(&table, 0).is_some() || reqs.find(&table, 1).is_some());
        let mut k = 0;
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                k += 1;
                black_box(reqs.find(&table, k))
            });
        });
    }
    g.finish();
}

fn main() {
    memory();
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
