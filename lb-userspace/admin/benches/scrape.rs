//! What one `/metrics` scrape costs to render: 1000 services × 30 backends (the
//! control-plane benchmark's shape), timed by criterion, and the allocations of one
//! render counted by a wrapping global allocator and printed.
//!
//! `cargo bench -p lb-admin --bench scrape` (`-- --quick` for a short run).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
};

use criterion::{Criterion, criterion_group, criterion_main};
use lb_admin::{
    BackendView, FlowTablesStatus, Histogram, ReconcileRecord, ServiceView, SourceStatus, Status,
    metrics::{Snapshot, render},
};
use lb_common::Counter;

/// Counts allocations (and their bytes) made through the global allocator.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to `System` unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        ALLOCATED.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        ALLOCATED.fetch_add(new_size as u64, Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SERVICES: usize = 1000;
const BACKENDS_PER_SERVICE: usize = 30;

/// A node with `SERVICES` dsr services of `BACKENDS_PER_SERVICE` backends each, every
/// counter non-zero, health checks on every other service.
struct Node {
    status: Status,
    services: Vec<ServiceView>,
    backends: Vec<BackendView>,
    counters: Vec<(Counter, u64)>,
    reconciles: Histogram,
}

fn node() -> Node {
    let services = (0..SERVICES)
        .map(|i| ServiceView {
            name: format!("service-{i}"),
            vip: format!("198.18.{}.{}:80/tcp", i / 256, i % 256),
            mode: "dsr".into(),
            service_id: Some(i as u32),
            backends: BACKENDS_PER_SERVICE,
            serving: BACKENDS_PER_SERVICE,
            fading: 0,
            table_size: 65537,
            table_digest: format!("{:016x}", i * 7919),
            packets: 1_000_000 + i as u64,
            bytes: 900_000_000 + i as u64,
            new_flows: 10_000 + i as u64,
        })
        .collect();
    let backends = (0..SERVICES * BACKENDS_PER_SERVICE)
        .map(|k| {
            let (i, j) = (k / BACKENDS_PER_SERVICE, k % BACKENDS_PER_SERVICE);
            BackendView {
                service: format!("service-{i}"),
                address: std::net::Ipv4Addr::new(10, (i / 256) as u8, (i % 256) as u8, j as u8)
                    .into(),
                backend_id: Some(k as u32),
                port: None,
                state: "active".into(),
                weight: 100,
                effective_weight: 100.0,
                fade_in_percent: 100.0,
                health: if i % 2 == 0 { "healthy" } else { "unchecked" }.into(),
                packets: 30_000 + k as u64,
                bytes: 27_000_000 + k as u64,
                new_flows: 300 + k as u64,
                flows: 40,
            }
        })
        .collect();
    let mut reconciles = Histogram::default();
    for s in [0.0002, 0.003, 0.04, 0.7] {
        reconciles.observe(s);
    }
    Node {
        status: Status {
            version: "0.1.0".into(),
            api_version: 1,
            kernel: "6.18.0".into(),
            pid: 1,
            uptime_seconds: 3600.0,
            config_path: "/etc/lbd/lbd.toml".into(),
            config_generation: 3,
            interface: "eth0".into(),
            hook: lb_model::config::Hook::Xdp,
            xdp_mode: "native".into(),
            pin_path: "/sys/fs/bpf/lb".into(),
            services: SERVICES,
            sources: vec![SourceStatus {
                kind: "config".into(),
                location: "/etc/lbd/lbd.toml".into(),
                state: "ok".into(),
                revision: None,
                rejected: Vec::new(),
            }],
            reconciles: 4,
            last_reconcile: Some(ReconcileRecord {
                trigger: "reload".into(),
                finished_unix: 0.0,
                duration_seconds: 0.7,
                error: None,
            }),
            fade_in_rebuilds: 0,
            conntrack_entries: 1_200_000,
            flow_tables: FlowTablesStatus::default(),
        },
        services,
        backends,
        counters: Counter::ALL
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, 1000 * i as u64))
            .collect(),
        reconciles,
    }
}

fn snapshot(n: &Node) -> Snapshot<'_> {
    Snapshot {
        status: &n.status,
        services: &n.services,
        backends: &n.backends,
        counters: &n.counters,
        reconciles: &n.reconciles,
        l7: None,
    }
}

fn scrape(c: &mut Criterion) {
    let n = node();
    let (count, bytes) = (ALLOCATIONS.load(Relaxed), ALLOCATED.load(Relaxed));
    let text = render(&snapshot(&n));
    println!(
        "scrape of {SERVICES} services × {BACKENDS_PER_SERVICE} backends: {} allocations, \
         {} bytes allocated, {} bytes of text in {} lines",
        ALLOCATIONS.load(Relaxed) - count,
        ALLOCATED.load(Relaxed) - bytes,
        text.len(),
        text.lines().count(),
    );
    let mut group = c.benchmark_group("scrape");
    group.sample_size(10);
    group.bench_function("render_1000x30", |b| {
        b.iter(|| black_box(render(black_box(&snapshot(&n)))))
    });
    group.finish();
}

criterion_group!(benches, scrape);
criterion_main!(benches);
