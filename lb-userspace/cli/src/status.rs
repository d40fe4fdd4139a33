//! `lbctl status`.

use super::{Context, Outcome};
use lb_admin::Status;
use lb_model::config::Hook;

/// `entries of capacity (percent%)`.
fn fill(f: &lb_admin::Fill) -> String {
    let pct = if f.capacity == 0 {
        0.0
    } else {
        f.entries as f64 * 100.0 / f.capacity as f64
    };
    format!("{} of {} ({pct:.1}%)", f.entries, f.capacity)
}

/// Prints lbd's status.
pub fn run(ctx: &Context) -> Outcome {
    let s: Status = ctx.get("/v1/status")?;
    ctx.print(&s, || {
        let last = s.last_reconcile.as_ref().map_or_else(
            || "none".to_owned(),
            |r| {
                let outcome = r
                    .error
                    .as_deref()
                    .map_or_else(|| "ok".to_owned(), |e| format!("FAILED: {e}"));
                format!(
                    "{} ({:.1} ms, {outcome})",
                    r.trigger,
                    r.duration_seconds * 1e3
                )
            },
        );
        let mut lines = vec![
            (
                "version",
                format!("{} (admin API {})", s.version, s.api_version),
            ),
            ("kernel", s.kernel.clone()),
            ("pid", s.pid.to_string()),
            ("uptime", format!("{:.0}s", s.uptime_seconds)),
            (
                "interface",
                match s.hook {
                    Hook::Xdp => format!("{} (XDP {})", s.interface, s.xdp_mode),
                    Hook::Tc => format!("{} (TC ingress)", s.interface),
                },
            ),
            (
                "pin path",
                if s.pin_path.is_empty() {
                    "(not pinned)".into()
                } else {
                    s.pin_path.clone()
                },
            ),
            (
                "config",
                format!("{} (generation {})", s.config_path, s.config_generation),
            ),
            ("services", s.services.to_string()),
            ("conntrack", format!("{} flows", s.conntrack_entries)),
            ("  established", fill(&s.flow_tables.conntrack)),
            (
                "  half-open",
                format!(
                    "{} ({} evicted before their handshake completed)",
                    fill(&s.flow_tables.embryonic),
                    s.flow_tables.embryonic_evicted
                ),
            ),
            (
                "  nat ports",
                format!(
                    "{} (released: {} fin, {} rst, {} timeout)",
                    fill(&s.flow_tables.nat),
                    s.flow_tables.nat_released.fin,
                    s.flow_tables.nat_released.rst,
                    s.flow_tables.nat_released.timeout
                ),
            ),
            ("reconciles", s.reconciles.to_string()),
            ("last reconcile", last),
            ("fade-in rebuilds", s.fade_in_rebuilds.to_string()),
        ];
        for src in &s.sources {
            let revision = src
                .revision
                .map_or_else(String::new, |r| format!(", revision {r}"));
            lines.push((
                "source",
                format!("{} {} ({}{revision})", src.kind, src.location, src.state),
            ));
            for r in &src.rejected {
                lines.push(("  rejected", r.clone()));
            }
        }
        let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        lines
            .iter()
            .map(|(k, v)| format!("{k:<width$}  {v}\n"))
            .collect()
    })
}
