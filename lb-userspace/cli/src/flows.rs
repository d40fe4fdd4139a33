//! `lbctl flows`: the flow tables (established `dsr` flows, `nat` flows with their
//! TCP state, optionally the half-open ones), read from the pinned maps.

use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

use super::{Context, Outcome, Table};
use lb_model::{
    dataplane::{FlowTable, MapRead as _, from_addr16},
    explain::{Flow, Protocol},
};

/// Arguments of `flows`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only flows to this VIP (`ADDR` or `ADDR:PORT`, `[v6]:PORT`).
    #[arg(long)]
    vip: Option<String>,
    /// Only flows pinned to this backend address.
    #[arg(long)]
    backend: Option<IpAddr>,
    /// Print at most this many flows (0: all).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// Also list half-open flows (a SYN or one datagram so far; the embryonic table).
    #[arg(long)]
    embryonic: bool,
}

/// One established flow.
#[derive(Debug, Serialize)]
struct FlowRow {
    protocol: Protocol,
    client: SocketAddr,
    vip: SocketAddr,
    backend: IpAddr,
    backend_id: u32,
    service_id: u32,
    service: Option<String>,
    /// `established`, `embryonic` or `nat`.
    table: FlowTable,
    nat_port: Option<u16>,
    /// `nat` flows: the TCP state of the flow's port (`syn_sent`, `established`, …).
    nat_state: Option<&'static str>,
}

/// What `flows` prints: how many matched, and the first `limit` of them.
#[derive(Debug, Serialize)]
struct Flows {
    matched: usize,
    flows: Vec<FlowRow>,
}

/// A `--vip` filter: an address, or an address and port.
fn parse_vip(text: &str) -> Result<(IpAddr, Option<u16>), String> {
    if let Ok(sa) = text.parse::<SocketAddr>() {
        return Ok((sa.ip(), Some(sa.port())));
    }
    text.parse::<IpAddr>()
        .map(|ip| (ip, None))
        .map_err(|_| format!("--vip {text:?}: expected ADDR, ADDR:PORT or [V6]:PORT"))
}

/// Prints established flows, filtered.
pub fn run(ctx: &Context, args: &Args) -> Outcome {
    let vip = args.vip.as_deref().map(parse_vip).transpose()?;
    let maps = ctx.maps()?;
    let names = ctx.service_names();
    let mut matched = 0;
    let mut rows = Vec::new();
    let mut all = maps.flows().map_err(|e| e.to_string())?;
    if args.embryonic {
        all.extend(
            maps.embryonic_flows()
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|(k, e)| (FlowTable::Embryonic, k, e)),
        );
    }
    let config = maps.global_config().map_err(|e| e.to_string())?;
    for (table, key, entry) in all {
        let Some(flow) = Flow::from_key(&key) else {
            continue;
        };
        if let Some((addr, port)) = vip
            && (flow.dst.ip() != addr || port.is_some_and(|p| p != flow.dst.port()))
        {
            continue;
        }
        let record = maps.backend(entry.backend_id).map_err(|e| e.to_string())?;
        let backend = from_addr16(record.addr);
        if args.backend.is_some_and(|b| b != backend) {
            continue;
        }
        matched += 1;
        if args.limit != 0 && rows.len() >= args.limit {
            continue;
        }
        rows.push(FlowRow {
            protocol: flow.protocol,
            client: flow.src,
            vip: flow.dst,
            backend,
            backend_id: entry.backend_id,
            service_id: u32::from(entry.service_id),
            service: names.get(&u32::from(entry.service_id)).cloned(),
            table,
            nat_port: (entry.nat_port_be != 0).then(|| u16::from_be(entry.nat_port_be)),
            nat_state: if table == FlowTable::Nat {
                let reply = lb_model::explain::nat_reply_key(&config, &key, &record, &entry);
                maps.nat_reply(&reply)
                    .map_err(|e| e.to_string())?
                    .map(|r| lb_common::NatState::from_u8(r.state).name())
            } else {
                None
            },
        });
    }
    rows.sort_by_key(|r| (r.vip, r.client));
    let out = Flows {
        matched,
        flows: rows,
    };
    ctx.print(&out, || {
        let mut t = Table::new(&[
            "PROTO", "CLIENT", "VIP", "SERVICE", "BACKEND", "TABLE", "NAT_PORT", "STATE",
        ]);
        for r in &out.flows {
            t.row(vec![
                r.protocol.to_string(),
                r.client.to_string(),
                r.vip.to_string(),
                r.service
                    .clone()
                    .unwrap_or_else(|| format!("#{}", r.service_id)),
                r.backend.to_string(),
                r.table.name().into(),
                r.nat_port.map_or_else(|| "-".into(), |p| p.to_string()),
                r.nat_state.unwrap_or("-").into(),
            ]);
        }
        let mut text = t.render();
        if out.matched > out.flows.len() {
            text.push_str(&format!(
                "({} of {} flows shown; --limit 0 shows all)\n",
                out.flows.len(),
                out.matched
            ));
        }
        text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vip_filters() {
        assert_eq!(
            parse_vip("198.18.0.100:80"),
            Ok(("198.18.0.100".parse().expect("ip"), Some(80)))
        );
        assert_eq!(
            parse_vip("2001:db8::100"),
            Ok(("2001:db8::100".parse().expect("ip"), None))
        );
        assert_eq!(
            parse_vip("[2001:db8::100]:53"),
            Ok(("2001:db8::100".parse().expect("ip"), Some(53)))
        );
        assert!(parse_vip("web").expect_err("bad").contains("--vip \"web\""));
    }
}
