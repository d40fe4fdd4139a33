//! `lbctl explain PROTO SRC:PORT DST:PORT`: which backend, and why, from the pinned
//! maps (the same computation the XDP program makes).

use std::net::SocketAddr;

use serde::Serialize;

use super::{Context, Outcome};
use crate::explain::{Decision, Explanation, Flow, Protocol, explain};

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
            nat_port,
            ..
        } => {
            let nat = nat_port.map_or_else(String::new, |p| format!(", NAT source port {p}"));
            format!(
                "established: conntrack pins it to backend {} (id {backend_id}{nat})",
                with_port(*backend, *backend_port)
            )
        }
        Decision::Table {
            backend,
            backend_port,
            backend_id,
            hash,
            slot,
            table_size,
            list_index,
            list_len,
        } => format!(
            "new flow: hash {hash:#010x} -> slot {slot} of {table_size} -> list index {list_index} of {list_len} -> backend {} (id {backend_id})",
            with_port(*backend, *backend_port)
        ),
    };
    text.push_str(&format!("decision {decision}\n"));
    text
}
