//! VIP, conntrack and table lookup. The control plane computes the tables; this only
//! indexes them.

use lb_common::{
    Backend, FlowEntry, FlowKey, ForwardingMode, VipInfo, VipKey, flow_hash,
    maps::{MAX_BACKENDS_PER_SERVICE, TABLE_CHUNK_SLOTS},
};

use crate::maps::{
    BACKENDS, CONFIG, CONNTRACK, ECHO_ADDRS, SERVICE_BACKENDS, TABLE_CHUNKS_MAP, VIPS,
};

/// Whether echo requests to `addr` are answered here.
#[inline(always)]
pub fn answers_echo(addr: &[u8; 16]) -> bool {
    let key = lb_common::AddrKey { addr: *addr };
    // SAFETY: the value is only tested for presence.
    unsafe { ECHO_ADDRS.get(key) }.is_some()
}

/// The backend that owns an existing flow (for ICMP errors about it): conntrack, else
/// what the table would choose; nothing is inserted.
#[inline(always)]
pub fn owner(vip: &VipInfo, key: &FlowKey) -> Option<Choice> {
    // SAFETY: as in `vip`.
    let backend_id = match unsafe { CONNTRACK.get(key) } {
        Some(entry) => entry.backend_id,
        None => table_choice(vip, key)?,
    };
    BACKENDS.get(backend_id).map(|backend| Choice {
        backend_id,
        backend,
        new_flow: false,
        nat_port_be: 0,
    })
}

/// The service owning this flow's (destination, port, protocol), trying the exact port
/// first and then an all-ports entry.
#[inline(always)]
pub fn vip(key: &FlowKey) -> Option<&'static VipInfo> {
    let mut vip = VipKey {
        addr: key.dst,
        port_be: key.dst_port_be,
        proto: key.proto,
        _pad: 0,
        _pad2: 0,
    };
    // SAFETY: values are plain data that userspace replaces whole; an update swaps the
    // element, so the reference stays valid for this program run.
    if let Some(info) = unsafe { VIPS.get(vip) } {
        return Some(info);
    }
    vip.port_be = 0;
    // SAFETY: as above.
    unsafe { VIPS.get(vip) }
}

/// A backend and whether this packet starts a new flow.
pub struct Choice {
    pub backend_id: u32,
    pub backend: &'static Backend,
    pub new_flow: bool,
    /// `nat` mode: the node's source port for the flow (network order).
    pub nat_port_be: u16,
}

/// Why no backend could be chosen.
pub enum NoChoice {
    /// The service has no usable backend, or its tables are inconsistent.
    NoBackend,
    /// `nat` mode: no free source port around this flow's hash.
    NatPortsExhausted,
}

/// The backend for this flow: the pinned one if conntrack knows the flow (whatever
/// the table says now), else the table's choice, which is then pinned (in `nat` mode
/// together with the NAT source port it claims).
#[inline(always)]
///
/// `NAT` compiles the port claim in: only `lb_nat` needs it, and leaving it out of
/// `lb_xdp` keeps that program's stack frame small.
pub fn backend<const NAT: bool>(
    vip: &VipInfo,
    key: &FlowKey,
    ipv6: bool,
) -> Result<Choice, NoChoice> {
    // SAFETY: as in `vip`.
    if let Some(entry) = unsafe { CONNTRACK.get(key) } {
        let backend_id = entry.backend_id;
        let nat_port_be = entry.nat_port_be;
        return BACKENDS
            .get(backend_id)
            .map(|backend| Choice {
                backend_id,
                backend,
                new_flow: false,
                nat_port_be,
            })
            .ok_or(NoChoice::NoBackend);
    }
    let backend_id = table_choice(vip, key).ok_or(NoChoice::NoBackend)?;
    let backend = BACKENDS.get(backend_id).ok_or(NoChoice::NoBackend)?;
    let nat_port_be = if NAT && vip.mode == ForwardingMode::Nat as u32 {
        crate::nat::claim_port(key, backend, ipv6).ok_or(NoChoice::NatPortsExhausted)?
    } else {
        0
    };
    let entry = FlowEntry {
        backend_id,
        service_id: vip.service_id,
        nat_port_be,
        _pad: 0,
        _pad2: 0,
    };
    // A full LRU evicts its oldest entry; an insert can only fail on memory pressure,
    // and then this packet is still forwarded and the next one tries again.
    let _ = CONNTRACK.insert(key, entry, 0);
    Ok(Choice {
        backend_id,
        backend,
        new_flow: true,
        nat_port_be,
    })
}

/// Maglev lookup: the seeded flow hash picks a slot, the slot a position in the
/// service's backend list, the list a backend id.
#[inline(always)]
fn table_choice(vip: &VipInfo, key: &FlowKey) -> Option<u32> {
    let size = vip.table_size;
    if size == 0 || vip.list_len == 0 || vip.list_len > MAX_BACKENDS_PER_SERVICE {
        return None;
    }
    let seed = CONFIG.get(0).map_or(0, |c| c.hash_seed);
    let slot = flow_hash(seed, key) % size;
    // table_base is a multiple of TABLE_CHUNK_SLOTS, so the chunk and the position in
    // it follow from the slot alone.
    let chunk =
        TABLE_CHUNKS_MAP.get(vip.table_base / TABLE_CHUNK_SLOTS + slot / TABLE_CHUNK_SLOTS)?;
    let index = *chunk.slots.get((slot % TABLE_CHUNK_SLOTS) as usize)? as u32;
    if index >= vip.list_len {
        return None;
    }
    SERVICE_BACKENDS.get(vip.list_base + index).copied()
}
