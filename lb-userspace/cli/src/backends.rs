//! `lbctl backends [SERVICE]`.

use super::{Context, Outcome, Table};
use lb_admin::BackendView;

/// Arguments of `backends`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this service's backends.
    service: Option<String>,
}

/// Prints backends with their state, weights, fade-in, health and flows.
pub fn run(ctx: &Context, args: &Args) -> Outcome {
    let path = match &args.service {
        Some(s) => format!("/v1/backends/{s}"),
        None => "/v1/backends".to_owned(),
    };
    let backends: Vec<BackendView> = ctx.get(&path)?;
    ctx.print(&backends, || {
        let mut t = Table::new(&[
            "SERVICE",
            "BACKEND",
            "STATE",
            "WEIGHT",
            "EFFECTIVE",
            "FADE-IN",
            "HEALTH",
            "FLOWS",
            "NEW_FLOWS",
            "PACKETS",
        ]);
        for b in &backends {
            t.row(vec![
                b.service.clone(),
                match b.port {
                    Some(port) => std::net::SocketAddr::new(b.address, port).to_string(),
                    None => b.address.to_string(),
                },
                b.state.clone(),
                b.weight.to_string(),
                format!("{:.2}", b.effective_weight),
                format!("{:.0}%", b.fade_in_percent),
                b.health.clone(),
                b.flows.to_string(),
                b.new_flows.to_string(),
                b.packets.to_string(),
            ]);
        }
        t.render()
    })
}
