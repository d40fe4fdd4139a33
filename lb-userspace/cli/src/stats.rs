//! `lbctl stats [--watch]`: data-plane counters from the pinned maps.

use std::{net::IpAddr, time::Duration};

use lb_common::{ForwardingMode, TrafficStats};
use serde::Serialize;

use super::{Context, Outcome, Table, emit};
use lb_dataplane::maps::MapSet;
use lb_model::{
    dataplane::{MapRead as _, from_addr16},
    explain::{mode_name, vip_text},
};

/// Arguments of `stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print rates (per second) every interval instead of totals once.
    #[arg(long)]
    watch: bool,
    /// Seconds between samples with `--watch`.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Stop after this many samples with `--watch` (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    count: u64,
}

/// Counters of one VIP and its backends.
#[derive(Clone, Debug, Serialize)]
struct VipStats<T> {
    vip: String,
    service: Option<String>,
    service_id: u32,
    mode: String,
    packets: T,
    bytes: T,
    new_flows: T,
    backends: Vec<BackendStats<T>>,
}

/// Counters of one backend.
#[derive(Clone, Debug, Serialize)]
struct BackendStats<T> {
    backend: IpAddr,
    backend_id: u32,
    packets: T,
    bytes: T,
    new_flows: T,
}

/// Everything `stats` prints: global verdict counters and per-VIP traffic.
#[derive(Clone, Debug, Serialize)]
struct Stats<T> {
    counters: Vec<(String, T)>,
    conntrack_entries: u64,
    vips: Vec<VipStats<T>>,
}

fn read(
    maps: &MapSet,
    names: &std::collections::HashMap<u32, String>,
) -> Result<Stats<u64>, String> {
    let e = |e: lb_model::dataplane::DataplaneError| e.to_string();
    let mut counters: Vec<(String, u64)> = maps
        .counters()
        .map_err(e)?
        .into_iter()
        .map(|(c, v)| (c.name().to_owned(), v))
        .collect();
    // lb_probe's (tunnel health probes, on the node's egress), prefixed `probe_`.
    if let Some(probe) = maps.probe_counts().map_err(e)? {
        for c in lb_common::ProbeCounter::ALL {
            counters.push((format!("probe_{}", c.name()), probe[c as usize]));
        }
    }
    let mut vips = Vec::new();
    let mut entries = maps.vips().map_err(e)?;
    entries.sort_by_key(|(k, _)| vip_text(k));
    for (key, info) in entries {
        let s = maps.vip_stats(info.service_id).map_err(e)?;
        let mut backends = Vec::new();
        for i in 0..info.list_len {
            let id = maps.list_entry(info.list_base + i).map_err(e)?;
            let b: TrafficStats = maps.backend_stats(id).map_err(e)?;
            backends.push(BackendStats {
                backend: from_addr16(maps.backend(id).map_err(e)?.addr),
                backend_id: id,
                packets: b.packets,
                bytes: b.bytes,
                new_flows: b.new_flows,
            });
        }
        vips.push(VipStats {
            vip: vip_text(&key),
            service: names.get(&info.service_id).cloned(),
            service_id: info.service_id,
            mode: mode_name(ForwardingMode::from_u32(info.mode)).to_owned(),
            packets: s.packets,
            bytes: s.bytes,
            new_flows: s.new_flows,
            backends,
        });
    }
    Ok(Stats {
        counters,
        conntrack_entries: maps.flow_count() as u64,
        vips,
    })
}

/// Per-second rates between two samples `secs` apart (VIPs matched by position; a
/// VIP added in between shows its total).
fn rates(before: &Stats<u64>, after: &Stats<u64>, secs: f64) -> Stats<f64> {
    let r = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
    let find = |vip: &str| before.vips.iter().find(|v| v.vip == vip);
    Stats {
        counters: after
            .counters
            .iter()
            .zip(&before.counters)
            .map(|((n, a), (_, b))| (n.clone(), r(*a, *b)))
            .collect(),
        conntrack_entries: after.conntrack_entries,
        vips: after
            .vips
            .iter()
            .map(|v| {
                let old = find(&v.vip);
                let old_b =
                    |id: u32| old.and_then(|o| o.backends.iter().find(|b| b.backend_id == id));
                VipStats {
                    vip: v.vip.clone(),
                    service: v.service.clone(),
                    service_id: v.service_id,
                    mode: v.mode.clone(),
                    packets: r(v.packets, old.map_or(0, |o| o.packets)),
                    bytes: r(v.bytes, old.map_or(0, |o| o.bytes)),
                    new_flows: r(v.new_flows, old.map_or(0, |o| o.new_flows)),
                    backends: v
                        .backends
                        .iter()
                        .map(|b| BackendStats {
                            backend: b.backend,
                            backend_id: b.backend_id,
                            packets: r(b.packets, old_b(b.backend_id).map_or(0, |o| o.packets)),
                            bytes: r(b.bytes, old_b(b.backend_id).map_or(0, |o| o.bytes)),
                            new_flows: r(
                                b.new_flows,
                                old_b(b.backend_id).map_or(0, |o| o.new_flows),
                            ),
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}

fn render<T: std::fmt::Display>(s: &Stats<T>, unit: &str) -> String {
    let mut t = Table::new(&["COUNTER", "VALUE"]);
    for (name, v) in &s.counters {
        t.row(vec![name.clone(), format!("{v}{unit}")]);
    }
    let mut text = t.render();
    text.push_str(&format!("conntrack entries: {}\n\n", s.conntrack_entries));
    let mut t = Table::new(&["VIP", "SERVICE", "BACKEND", "PACKETS", "BYTES", "NEW_FLOWS"]);
    for v in &s.vips {
        let name = v
            .service
            .clone()
            .unwrap_or_else(|| format!("#{}", v.service_id));
        t.row(vec![
            v.vip.clone(),
            name,
            "-".into(),
            format!("{}{unit}", v.packets),
            format!("{}{unit}", v.bytes),
            format!("{}{unit}", v.new_flows),
        ]);
        for b in &v.backends {
            t.row(vec![
                String::new(),
                String::new(),
                b.backend.to_string(),
                format!("{}{unit}", b.packets),
                format!("{}{unit}", b.bytes),
                format!("{}{unit}", b.new_flows),
            ]);
        }
    }
    text.push_str(&t.render());
    text
}

/// Prints totals, or with `--watch` rates every interval.
pub fn run(ctx: &Context, args: &Args) -> Outcome {
    let maps = ctx.maps()?;
    let names = ctx.service_names();
    let first = read(&maps, &names)?;
    if !args.watch {
        return ctx.print(&first, || render(&first, ""));
    }
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        return Err(format!(
            "--interval {}: at least 0.1 seconds",
            args.interval
        ));
    }
    let mut before = first;
    let mut samples = 0;
    while args.count == 0 || samples < args.count {
        let started = std::time::Instant::now();
        std::thread::sleep(Duration::from_secs_f64(args.interval));
        let after = read(&maps, &names)?;
        let rate = rates(&before, &after, started.elapsed().as_secs_f64());
        match ctx.format {
            super::Format::Json => {
                emit(&(serde_json::to_string(&rate).map_err(|e| e.to_string())? + "\n"))?
            }
            super::Format::Table => emit(&format!("{}\n", render(&rate, "/s")))?,
        }
        before = after;
        samples += 1;
    }
    Ok(())
}
