//! `lbd --check-config --plan`: what this config would make the data plane hold,
//! service by service — against the running node's pinned maps when there are any
//! (so the plan shows what a reload would change), else against empty maps.

use std::{fmt::Write as _, time::SystemTime};

use lb_control::agent::check;
use lb_dataplane::maps::MapSet;
use lb_model::{
    config::ValidConfig,
    dataplane::{Change, Plan, Programmer},
    explain::{mode_name, vip_text},
};

/// The plan for `config`, as text for a terminal: first where it was planned against,
/// then one block per service that would be written, removals, echo changes, refusals
/// and what stays unchanged.
#[must_use]
pub fn plan_text(config: ValidConfig) -> String {
    let mut out = String::new();
    let mut programmer = Programmer::default();
    programmer.set_answer_ping(config.node.answer_ping);
    let against = match config.node.pin_dir() {
        Some(dir) => match MapSet::open_pinned(dir) {
            Ok(maps) => match programmer.adopt(&maps) {
                Ok(n) => format!(
                    "the running data plane pinned at {} ({n} services)",
                    dir.display()
                ),
                Err(e) => {
                    programmer = Programmer::default();
                    format!(
                        "empty maps (the pinned ones at {} are unusable: {e})",
                        dir.display()
                    )
                }
            },
            Err(_) => format!("empty maps (nothing pinned at {})", dir.display()),
        },
        None => "empty maps (pinning is off)".to_owned(),
    };
    let checked = check(config, &programmer, SystemTime::now());
    let _ = writeln!(out, "plan against {against}:");
    if let Some(problem) = &checked.problem {
        let _ = writeln!(out, "  endpointslice_dir: {problem}");
    }
    render(&mut out, &checked.plan);
    if checked.weighted.fading {
        let _ = writeln!(
            out,
            "  (fade-in ramps are running: weights move every few seconds)"
        );
    }
    out
}

fn render(out: &mut String, plan: &Plan) {
    if plan.is_empty() && plan.refused.is_empty() {
        let _ = writeln!(
            out,
            "  nothing to write ({} services unchanged)",
            plan.unchanged
        );
        return;
    }
    for change in &plan.changes {
        service(out, change);
    }
    for r in &plan.removals {
        let _ = writeln!(out, "  remove {} ({})", r.name, vip_text(&r.key));
    }
    for addr in &plan.echo_add {
        let _ = writeln!(out, "  answer echo requests to {addr}");
    }
    for addr in &plan.echo_remove {
        let _ = writeln!(out, "  stop answering echo requests to {addr}");
    }
    for r in &plan.refused {
        let _ = writeln!(out, "  refuse {r}");
    }
    let _ = writeln!(
        out,
        "  {} to write, {} to remove, {} unchanged",
        plan.changes.len(),
        plan.removals.len(),
        plan.unchanged
    );
}

fn service(out: &mut String, change: &Change) {
    let spec = &change.spec;
    let _ = writeln!(
        out,
        "  {} {} {} ({}): {} backends, table {} slots, digest {:016x}",
        match (change.existing, change.same_table) {
            (false, _) => "add",
            (true, false) => "change",
            (true, true) => "rewrite (same backends and table)",
        },
        spec.name,
        vip_text(&spec.key),
        mode_name(Some(spec.mode)),
        spec.backends.len(),
        change.table.len(),
        change.digest
    );
    let slots = change.slots_per_backend();
    for (i, addr) in spec.backends.iter().enumerate() {
        let weight = spec.weights.get(i).copied().unwrap_or(1);
        let port = spec
            .ports
            .get(i)
            .filter(|&&p| p != 0)
            .map_or_else(String::new, |p| format!(" port {p}"));
        let note = if weight == 0 { " (no new flows)" } else { "" };
        let _ = writeln!(
            out,
            "      {addr}{port}  weight {weight}  slots {}{note}",
            slots.get(i).copied().unwrap_or(0)
        );
    }
}
