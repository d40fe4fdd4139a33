//! `lbctl services`.

use super::{Context, Outcome, Table};
use lb_admin::ServiceView;

/// Prints every service.
pub fn run(ctx: &Context) -> Outcome {
    let services: Vec<ServiceView> = ctx.get("/v1/services")?;
    ctx.print(&services, || {
        let mut t = Table::new(&[
            "NAME",
            "VIP",
            "MODE",
            "BACKENDS",
            "SERVING",
            "FADING",
            "TABLE",
            "DIGEST",
            "PACKETS",
            "BYTES",
            "NEW_FLOWS",
        ]);
        for s in &services {
            t.row(vec![
                s.name.clone(),
                s.vip.clone(),
                s.mode.clone(),
                s.backends.to_string(),
                s.serving.to_string(),
                s.fading.to_string(),
                s.table_size.to_string(),
                s.table_digest.clone(),
                s.packets.to_string(),
                s.bytes.to_string(),
                s.new_flows.to_string(),
            ]);
        }
        t.render()
    })
}
