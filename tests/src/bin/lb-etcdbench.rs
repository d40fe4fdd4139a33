//! `cargo xtask bench etcd`: what feeding a node from etcd costs.
//!
//! A real etcd (in its own namespace) holds 1000 services × 30 endpoints: one service
//! JSON and one EndpointSlice JSON (shaped like the API server's) per service. The
//! node side is lbd's own chain — the watcher, the mirror, composing services,
//! endpoint sets, specs, and the programmer writing real kernel BPF maps (loaded, not
//! attached). Measured:
//!
//! - cold start: from connecting to etcd to every map programmed (wall, CPU,
//!   allocations from a counting allocator, peak RSS);
//! - propagation: for 1000 sequential updates (one endpoint of one service moved),
//!   the time from issuing the etcd write to the maps being programmed: p50, p99, max.
//!
//! Figures are reported, never asserted.

use std::{
    process::ExitCode,
    time::{Duration, Instant, SystemTime},
};

use lb_control::{
    agent::HealthMap, agent::compose, agent::specs_at, sources::etcd::EtcdMessage,
    sources::etcd::EtcdMirror, sources::etcd::run, sources::slicedir::Discovered,
};
use lb_dataplane::kernel::KernelDataplane;
use lb_model::{config::ValidConfig, dataplane::Programmer, fade_state::FadeStarts};
use lb_testbed::{
    Netns,
    benchkit::{Counting, Meter, ms, peak_rss},
    etcd::{ETCD_ADDR, EtcdServer},
    is_root,
    shape::{ENDPOINTS, SERVICES, backend, slice_json, vip},
};

#[global_allocator]
static GLOBAL: Counting = Counting;

const UPDATES: usize = 1000;

fn service_json(s: usize) -> String {
    format!(
        "{{\"name\":\"svc-{s}\",\"vip\":\"{}\",\"port\":80,\"endpoint_slices\":{{\"namespace\":\"bench\",\"service\":\"svc-{s}\",\"port\":\"http\"}}}}",
        vip(s)
    )
}

/// The node: what lbd holds between etcd messages.
struct Node {
    file: ValidConfig,
    /// The file's services plus etcd's.
    config: ValidConfig,
    discovered: Discovered,
    mirror: EtcdMirror,
    starts: FadeStarts,
    programmer: Programmer,
    maps: KernelDataplane,
}

impl Node {
    /// What `Agent::etcd_apply` does: apply, compose (if services changed), endpoint
    /// sets of the services whose slices changed, specs, program;
    /// the time of each phase is added to `phases`.
    fn apply(&mut self, msg: EtcdMessage, phases: &mut [Duration; 5]) -> usize {
        let mut t = Instant::now();
        let mut lap = |i: usize| {
            phases[i] += t.elapsed();
            t = Instant::now();
        };
        let change = self.mirror.apply_tracked(msg);
        lap(0);
        if change.services {
            self.config = compose(&self.file, Some(&self.mirror)).0;
        }
        lap(1);
        self.discovered
            .refresh(&change.slices, self.mirror.slices());
        lap(2);
        let health = HealthMap::new();
        let (specs, _) = specs_at(
            &self.config,
            &self.discovered,
            &mut self.starts,
            &health,
            SystemTime::now(),
        );
        lap(3);
        let report = self
            .programmer
            .apply(&mut self.maps, &specs, Instant::now())
            .expect("program");
        lap(4);
        report.programmed
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> ExitCode {
    if !is_root() {
        eprintln!("lb-etcdbench: needs root (a network namespace for etcd, BPF maps)");
        return ExitCode::FAILURE;
    }
    let ns = Netns::new("etcdb");
    ns.ip(&["addr", "add", &format!("{ETCD_ADDR}/32"), "dev", "lo"]);
    let etcd = EtcdServer::start(&ns);
    let mut pairs = Vec::with_capacity(2 * SERVICES);
    let mut bytes = 0;
    for s in 0..SERVICES {
        let (svc, slice) = (service_json(s), slice_json(s, None));
        bytes += svc.len() + slice.len();
        pairs.push((format!("/lb/services/svc-{s}"), svc));
        pairs.push((format!("/lb/endpointslices/svc-{s}/svc-{s}-x7k2p"), slice));
    }
    etcd.put_many(pairs);
    println!(
        "etcd: {SERVICES} services × {ENDPOINTS} endpoints under /lb ({} keys, {:.1} MB of JSON)\n",
        2 * SERVICES,
        bytes as f64 / 1e6
    );
    let text = format!(
        "[node]\ninterface = \"lo\"\nstate_dir = \"\"\n[node.etcd]\nendpoints = [\"{}\"]\nprefix = \"/lb\"\n",
        EtcdServer::url()
    );
    let file = lb_model::config::parse(&text, "bench.toml", lb_l7::check_routes).expect("config");
    let settings = file.node.etcd.clone().expect("etcd settings");
    let report = ns.run(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let maps = KernelDataplane::load().expect("load BPF maps");
            let mut node = Node {
                config: file.clone(),
                discovered: Discovered::default(),
                file,
                mirror: EtcdMirror::new("/lb"),
                starts: FadeStarts::load(None),
                programmer: Programmer::default(),
                maps,
            };
            let rss_before = peak_rss();
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            // Cold start: connect, list, build, program.
            let meter = Meter::start();
            tokio::spawn(run(settings.clone(), tx));
            let mut cold_phases = [Duration::ZERO; 5];
            let programmed = loop {
                match rx.recv().await.expect("watcher") {
                    msg @ EtcdMessage::Snapshot { .. } => break node.apply(msg, &mut cold_phases),
                    EtcdMessage::Down { error } => panic!("etcd: {error}"),
                    other => {
                        node.apply(other, &mut cold_phases);
                    }
                }
            };
            let cold = meter.stop();
            let mut out = format!(
                "cold start from etcd ({programmed} services programmed into kernel maps):\n  {}\n  (peak RSS of this process, which also generated the 8.5 MB of input: {:.1} MB before, {:.1} MB after)\n\n",
                cold.line("connect + list + build + program"),
                rss_before as f64 / 1e6,
                peak_rss() as f64 / 1e6
            );
            // Propagation: one write at a time, until the node has programmed it.
            let opts = etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
            let mut client = etcd_client::Client::connect([EtcdServer::url()], Some(opts))
                .await
                .expect("writer");
            let mut latencies = Vec::with_capacity(UPDATES);
            let mut phases = [Duration::ZERO; 5];
            for u in 0..UPDATES {
                let s = (u * 7) % SERVICES;
                let moved = std::net::Ipv4Addr::from(u32::from(backend(SERVICES, 0)) + u as u32);
                let value = slice_json(s, Some(moved));
                let t0 = Instant::now();
                let put = client
                    .put(format!("/lb/endpointslices/svc-{s}/svc-{s}-x7k2p"), value, None)
                    .await
                    .expect("put");
                let rev = put.header().map_or(0, |h| h.revision());
                while node.mirror.revision < rev {
                    let msg = rx.recv().await.expect("watcher");
                    node.apply(msg, &mut phases);
                }
                latencies.push(t0.elapsed());
            }
            latencies.sort();
            let mean = latencies.iter().sum::<Duration>() / UPDATES as u32;
            out.push_str(&format!(
                "propagation, etcd write → kernel maps programmed ({UPDATES} sequential updates, one endpoint each):\n  p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  mean {:.2} ms\n",
                ms(percentile(&latencies, 0.5)),
                ms(percentile(&latencies, 0.99)),
                ms(*latencies.last().expect("latencies")),
                ms(mean)
            ));
            let names = ["mirror", "compose services", "endpoint sets", "specs", "program maps"];
            out.push_str("  per update, by phase (mean):");
            for (name, d) in names.iter().zip(phases) {
                out.push_str(&format!(" {name} {:.2} ms;", ms(d / UPDATES as u32)));
            }
            out.push_str("\n  cold start, by phase:");
            for (name, d) in names.iter().zip(cold_phases) {
                out.push_str(&format!(" {name} {:.1} ms;", ms(d)));
            }
            out.push('\n');
            out
        })
    });
    print!("{report}");
    drop(etcd);
    ExitCode::SUCCESS
}
