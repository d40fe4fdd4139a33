//! Which backend a flow goes to, and why, computed from the data plane's maps the way
//! the XDP program decides: VIP lookup (exact port, then all-ports); for `dsr` the
//! established table, then the embryonic one, then the service's Maglev table; for
//! `nat` the `nat` flow table (with the state of the flow's port), then the table. An
//! entry whose backend is no longer its own (service or generation) is ignored, as
//! the kernel ignores it. `lbctl explain` prints this; tests hold it against the
//! kernel's own choice.

use std::net::{IpAddr, SocketAddr};

use lb_common::{
    Backend, FlowEntry, FlowKey, ForwardingMode, GlobalConfig, NatState, VipKey, maps::proto,
};
use serde::{Deserialize, Serialize};

use crate::dataplane::{
    DataplaneError, FlowTable, MapRead, addr16, entry_is_own, from_addr16,
    select::{TableChoice, table_choice},
};

/// A flow as an operator names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// `tcp` or `udp`.
    pub protocol: Protocol,
    /// Client address and port.
    pub src: SocketAddr,
    /// VIP address and port.
    pub dst: SocketAddr,
}

/// Transport protocol of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Protocol {
    /// The IP protocol number.
    pub const fn number(self) -> u8 {
        match self {
            Self::Tcp => proto::TCP,
            Self::Udp => proto::UDP,
        }
    }

    /// From an IP protocol number.
    pub const fn from_number(n: u8) -> Option<Self> {
        match n {
            proto::TCP => Some(Self::Tcp),
            proto::UDP => Some(Self::Udp),
            _ => None,
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Self::Tcp),
            "udp" => Ok(Self::Udp),
            _ => Err(format!("unknown protocol {s:?}: expected tcp or udp")),
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
        })
    }
}

impl Flow {
    /// The conntrack key the data plane builds for this flow's packets.
    pub fn key(&self) -> FlowKey {
        FlowKey {
            src: addr16(self.src.ip()),
            dst: addr16(self.dst.ip()),
            src_port_be: self.src.port().to_be(),
            dst_port_be: self.dst.port().to_be(),
            proto: self.protocol.number(),
            _pad: 0,
            _pad2: 0,
        }
    }

    /// The flow a conntrack key stands for (`None` for protocols we do not steer).
    pub fn from_key(key: &FlowKey) -> Option<Self> {
        Some(Self {
            protocol: Protocol::from_number(key.proto)?,
            src: SocketAddr::new(from_addr16(key.src), u16::from_be(key.src_port_be)),
            dst: SocketAddr::new(from_addr16(key.dst), u16::from_be(key.dst_port_be)),
        })
    }
}

/// The service entry a flow matched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchedVip {
    /// `addr:port/proto`, port `*` for an all-ports service.
    pub vip: String,
    /// The service's id in the data plane (its counters' index).
    pub service_id: u32,
    /// `dsr`, `nat` or `l7`.
    pub mode: String,
}

/// What the data plane does with a flow's next packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// No service has this address, port and protocol: passed to the kernel stack.
    NotAVip,
    /// An `l7` service: passed to the stack, where lbd's HTTP proxy answers.
    PassL7,
    /// The flow is established: a flow table pins it to a backend, whatever the table
    /// says now.
    Conntrack {
        /// The backend.
        backend: IpAddr,
        /// `nat` mode: the backend's own port, when not the VIP's.
        backend_port: Option<u16>,
        /// Its id.
        backend_id: u32,
        /// The service that admitted the flow.
        admitted_by_service: u32,
        /// Which table: `established` (`dsr`) or `nat`.
        table: FlowTable,
        /// `nat` mode: the node's source port for the flow.
        nat_port: Option<u16>,
        /// `nat` mode: the TCP state of the flow's port (`syn_sent`, `established`,
        /// `client_fin`, …).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nat_state: Option<String>,
        /// `nat` mode: milliseconds until the port is released if nothing more is seen.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nat_expires_in_ms: Option<u64>,
    },
    /// A half-open flow: its first packet (SYN or datagram) chose this backend; its
    /// next packet makes it established.
    Embryonic {
        /// The backend.
        backend: IpAddr,
        /// Its id.
        backend_id: u32,
        /// The service that admitted the flow.
        admitted_by_service: u32,
    },
    /// A new flow: the seeded 5-tuple hash selects a slot of the service's table.
    Table {
        /// The backend.
        backend: IpAddr,
        /// `nat` mode: the backend's own port, when not the VIP's.
        backend_port: Option<u16>,
        /// Its id.
        backend_id: u32,
        /// The flow hash.
        hash: u32,
        /// `hash % table_size`.
        slot: u32,
        /// The table size (a prime).
        table_size: u32,
        /// The slot's index into the service's backend list.
        list_index: u32,
        /// Backends in the list.
        list_len: u32,
        /// A flow entry exists but belongs to an earlier owner of its backend id (or
        /// another service): the data plane ignores it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stale_entry: bool,
        /// `nat` mode: only a SYN (or a UDP datagram) makes a new flow; any other TCP
        /// packet without a flow is dropped.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        syn_only: bool,
    },
    /// The service has no usable backend: new flows are dropped.
    NoBackend,
}

/// A flow, the service it matched and the decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// The flow asked about.
    pub flow: Flow,
    /// The matched service, if any.
    pub service: Option<MatchedVip>,
    /// The decision.
    #[serde(flatten)]
    pub decision: Decision,
    /// For `ipip` and `gue` services, the outer header the packet leaves in.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub encapsulation: Option<Encapsulation>,
}

/// The outer header of a tunnelled flow's packets, as `lb_xdp` writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Encapsulation {
    /// `ipip` or `gue`.
    pub kind: String,
    /// Outer source (from `[node.tunnel]`); none when the family has no source (the
    /// packets are then dropped, `drop_no_route`).
    pub outer_src: Option<IpAddr>,
    /// Outer destination: the backend.
    pub outer_dst: IpAddr,
    /// The outer header's IP protocol: 4 (IPv4 inside), 41 (IPv6 inside), 17 (GUE).
    pub ip_protocol: u8,
    /// The IPv6 outer header's flow label.
    pub flow_label: Option<u32>,
    /// `gue`: UDP source and destination ports.
    pub udp_ports: Option<(u16, u16)>,
}

impl Explanation {
    /// The backend the flow goes to, if any.
    pub fn backend(&self) -> Option<IpAddr> {
        match self.decision {
            Decision::Conntrack { backend, .. }
            | Decision::Embryonic { backend, .. }
            | Decision::Table { backend, .. } => Some(backend),
            _ => None,
        }
    }
}

/// The decision for a `dsr` or `nat` flow: a pinned entry that is still its own, else
/// the table's choice.
fn pinned_or_table(
    maps: &impl MapRead,
    info: &lb_common::VipInfo,
    key: &FlowKey,
    nat: bool,
) -> Result<Decision, DataplaneError> {
    let tables: &[FlowTable] = if nat {
        &[FlowTable::Nat]
    } else {
        &[FlowTable::Established, FlowTable::Embryonic]
    };
    let mut stale_entry = false;
    for &table in tables {
        let Some(entry) = maps.flow(table, key)? else {
            continue;
        };
        let b = maps.backend(entry.backend_id)?;
        if !entry_is_own(info.service_id, &entry, &b) {
            stale_entry = true;
            continue;
        }
        let admitted_by_service = u32::from(entry.service_id);
        if table == FlowTable::Embryonic {
            return Ok(Decision::Embryonic {
                backend: from_addr16(b.addr),
                backend_id: entry.backend_id,
                admitted_by_service,
            });
        }
        let (mut nat_state, mut nat_expires_in_ms) = (None, None);
        if table == FlowTable::Nat {
            let reply = nat_reply_key(&maps.global_config()?, key, &b, &entry);
            if let Some(r) = maps.nat_reply(&reply)? {
                nat_state = Some(NatState::from_u8(r.state).name().to_owned());
                let left = r
                    .expires_ns
                    .saturating_sub(crate::dataplane::monotonic_ns());
                nat_expires_in_ms = Some(left / 1_000_000);
            }
        }
        return Ok(Decision::Conntrack {
            backend: from_addr16(b.addr),
            backend_port: port_of(&b),
            backend_id: entry.backend_id,
            admitted_by_service,
            table,
            nat_port: (entry.nat_port_be != 0).then(|| u16::from_be(entry.nat_port_be)),
            nat_state,
            nat_expires_in_ms,
        });
    }
    let seed = maps.global_config()?.hash_seed;
    let choice = table_choice(
        info,
        seed,
        key,
        |i| maps.list_entry(i).ok(),
        |c| maps.table_chunk(c).ok(),
    );
    Ok(match choice {
        Some(TableChoice {
            hash,
            slot,
            list_index,
            backend_id,
        }) => {
            let b = maps.backend(backend_id)?;
            Decision::Table {
                backend: from_addr16(b.addr),
                backend_port: port_of(&b),
                backend_id,
                hash,
                slot,
                table_size: info.table_size,
                list_index,
                list_len: info.list_len,
                stale_entry,
                syn_only: nat && key.proto == proto::TCP,
            }
        }
        None => Decision::NoBackend,
    })
}

/// The key of a `nat` flow's reply entry: backend → the node's NAT address and the
/// flow's port, as `lb-ebpf/src/nat.rs` builds it.
pub fn nat_reply_key(
    config: &GlobalConfig,
    key: &FlowKey,
    backend: &Backend,
    entry: &FlowEntry,
) -> FlowKey {
    let v6 = !lb_common::maps::is_v4_mapped(&key.dst);
    FlowKey {
        src: backend.addr,
        dst: if v6 { config.nat_v6 } else { config.nat_v4 },
        src_port_be: if backend.port_be != 0 {
            backend.port_be
        } else {
            key.dst_port_be
        },
        dst_port_be: entry.nat_port_be,
        proto: key.proto,
        _pad: 0,
        _pad2: 0,
    }
}

/// Explains `flow` from the maps behind `maps`.
///
/// # Errors
/// A map read failed.
pub fn explain(maps: &impl MapRead, flow: Flow) -> Result<Explanation, DataplaneError> {
    let key = flow.key();
    let mut vip_key = VipKey {
        addr: key.dst,
        port_be: key.dst_port_be,
        proto: key.proto,
        _pad: 0,
        _pad2: 0,
    };
    let info = match maps.vip(&vip_key)? {
        Some(info) => Some(info),
        None => {
            vip_key.port_be = 0;
            maps.vip(&vip_key)?
        }
    };
    let Some(info) = info else {
        return Ok(Explanation {
            flow,
            service: None,
            decision: Decision::NotAVip,
            encapsulation: None,
        });
    };
    let mode = ForwardingMode::from_u32(info.mode);
    let service = Some(MatchedVip {
        vip: vip_text(&vip_key),
        service_id: info.service_id,
        mode: mode_name(mode).to_owned(),
    });
    let decision = if mode == Some(ForwardingMode::L7) {
        Decision::PassL7
    } else {
        pinned_or_table(maps, &info, &key, mode == Some(ForwardingMode::Nat))?
    };
    let mut out = Explanation {
        flow,
        service,
        decision,
        encapsulation: None,
    };
    if let Some(m @ (ForwardingMode::Ipip | ForwardingMode::Gue)) = mode
        && let Some(backend) = out.backend()
    {
        out.encapsulation = Some(encapsulation(&maps.tunnel_config()?, m, &key, backend));
    }
    Ok(out)
}

/// The outer header `lb_xdp` writes for `key` towards `backend`.
fn encapsulation(
    cfg: &lb_common::TunnelConfig,
    mode: ForwardingMode,
    key: &FlowKey,
    backend: IpAddr,
) -> Encapsulation {
    use lb_common::tunnel::{flow_label, flow_mix, gue_source_port, outer_source};
    let mix = flow_mix(key);
    let outer6 = backend.is_ipv6();
    let gue = mode == ForwardingMode::Gue;
    let inner6 = !lb_common::maps::is_v4_mapped(&key.dst);
    Encapsulation {
        kind: if gue { "gue" } else { "ipip" }.to_owned(),
        outer_src: outer_source(cfg, outer6, mix).map(from_addr16),
        outer_dst: backend,
        ip_protocol: match (gue, inner6) {
            (true, _) => proto::UDP,
            (false, false) => 4,
            (false, true) => 41,
        },
        flow_label: outer6.then(|| flow_label(mix)),
        udp_ports: gue.then(|| (gue_source_port(mix), u16::from_be(cfg.gue_port_be))),
    }
}

fn port_of(b: &lb_common::Backend) -> Option<u16> {
    (b.port_be != 0).then(|| u16::from_be(b.port_be))
}

/// `addr:port/proto` of a VIP key (`[v6]:port/proto`; port `*` for all ports).
pub fn vip_text(key: &VipKey) -> String {
    let addr = from_addr16(key.addr);
    let port = match u16::from_be(key.port_be) {
        0 => "*".to_owned(),
        p => p.to_string(),
    };
    let proto =
        Protocol::from_number(key.proto).map_or_else(|| key.proto.to_string(), |p| p.to_string());
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}/{proto}"),
        IpAddr::V6(a) => format!("[{a}]:{port}/{proto}"),
    }
}

/// Name of a forwarding mode as the config spells it.
pub fn mode_name(mode: Option<ForwardingMode>) -> &'static str {
    match mode {
        Some(ForwardingMode::Dsr) => "dsr",
        Some(ForwardingMode::Nat) => "nat",
        Some(ForwardingMode::L7) => "l7",
        Some(ForwardingMode::Ipip) => "ipip",
        Some(ForwardingMode::Gue) => "gue",
        None => "unknown",
    }
}

#[cfg(test)]
mod tests;
