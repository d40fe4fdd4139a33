//! `lbctl explain PROTO SRC:PORT DST:PORT`: which backend, and why, from the pinned
//! maps (the same computation the XDP program makes).

use std::net::SocketAddr;

use serde::Serialize;

use super::{Context, Outcome};
use lb_model::explain::{Decision, Explanation, Flow, Protocol, explain};

/// Arguments of `explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `tcp` or `udp`.
    protocol: Protocol,
    /// The client's address and port (`198.18.0.1:40000`, `[2001:db8::1]:40000`).
    src: SocketAddr,
    /// The VIP's address and port.
    dst: SocketAddr,
}

/// The explanation plus the service's name when lbd is there to say it.
#[derive(Debug, Serialize)]
struct Explained<'a> {
    #[serde(flatten)]
    explanation: &'a Explanation,
    service_name: Option<String>,
}

/// Explains one flow.
pub fn run(ctx: &Context, args: &Args) -> Outcome {
    let flow = Flow {
        protocol: args.protocol,
        src: args.src,
        dst: args.dst,
    };
    let maps = ctx.maps()?;
    let e = explain(&maps, flow).map_err(|e| e.to_string())?;
    let name = e
        .service
        .as_ref()
        .and_then(|s| ctx.service_names().remove(&s.service_id));
    let out = Explained {
        explanation: &e,
        service_name: name,
    };
    ctx.print(&out, || describe(&e, out.service_name.as_deref()))
}

/// `addr` or `addr:port` (`[v6]:port`) when the backend has a port of its own.
fn with_port(addr: std::net::IpAddr, port: Option<u16>) -> String {
    port.map_or_else(
        || addr.to_string(),
        |p| SocketAddr::new(addr, p).to_string(),
    )
}

/// The explanation in words.
fn describe(e: &Explanation, name: Option<&str>) -> String {
    let f = &e.flow;
    let mut text = format!("flow     {} {} -> {}\n", f.protocol, f.src, f.dst);
    if let Some(s) = &e.service {
        let name = name.map_or_else(|| format!("#{}", s.service_id), ToOwned::to_owned);
        text.push_str(&format!(
            "service  {name} ({} {}, id {})\n",
            s.vip, s.mode, s.service_id
        ));
    }
    let decision = match &e.decision {
        Decision::NotAVip => {
            "no service has this address, port and protocol: passed to the kernel stack".to_owned()
        }
        Decision::PassL7 => {
            "l7 service: passed to the kernel stack for lbd's HTTP proxy".to_owned()
        }
        Decision::NoBackend => {
            "the service has no usable backend: new flows are dropped".to_owned()
        }
        Decision::Conntrack {
            backend,
            backend_port,
            backend_id,
            table,
            nat_port,
            nat_state,
            nat_expires_in_ms,
            ..
        } => {
            let nat = nat_port.map_or_else(String::new, |p| format!(", NAT source port {p}"));
            let state = match (nat_state, nat_expires_in_ms) {
                (Some(s), Some(ms)) => format!("; port state {s}, released in {ms} ms if idle"),
                _ => String::new(),
            };
            format!(
                "established: the {} table pins it to backend {} (id {backend_id}{nat}){state}",
                table.name(),
                with_port(*backend, *backend_port)
            )
        }
        Decision::Embryonic {
            backend,
            backend_id,
            ..
        } => format!(
            "half-open: its first packet chose backend {backend} (id {backend_id}); its next packet pins it"
        ),
        Decision::Table {
            backend,
            backend_port,
            backend_id,
            hash,
            slot,
            table_size,
            list_index,
            list_len,
            stale_entry,
            syn_only,
        } => {
            let mut d = format!(
                "new flow: hash {hash:#010x} -> slot {slot} of {table_size} -> list index {list_index} of {list_len} -> backend {} (id {backend_id})",
                with_port(*backend, *backend_port)
            );
            if *syn_only {
                d.push_str("; only a SYN opens it, other packets without a flow are dropped");
            } else if e.flow.protocol == lb_model::explain::Protocol::Tcp {
                d.push_str("; a SYN opens it, other packets go there without state");
            }
            if *stale_entry {
                d.push_str(" (an entry of an earlier owner of this backend id is ignored)");
            }
            d
        }
    };
    text.push_str(&format!("decision {decision}\n"));
    if let Some(x) = &e.encapsulation {
        let src = x.outer_src.map_or_else(
            || "(none: no tunnel source of this family, dropped)".to_owned(),
            |a| a.to_string(),
        );
        let mut line = format!(
            "encap    {}: outer {src} -> {} (IP protocol {})",
            x.kind, x.outer_dst, x.ip_protocol
        );
        if let Some((sport, dport)) = x.udp_ports {
            line.push_str(&format!(", UDP {sport} -> {dport}"));
        }
        if let Some(label) = x.flow_label {
            line.push_str(&format!(", flow label {label:#07x}"));
        }
        text.push_str(&line);
        text.push('\n');
    }
    text
}
