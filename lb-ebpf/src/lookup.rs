//! VIP, conntrack and table lookup. The control plane computes the tables; this only
//! indexes them.

use aya_ebpf::bindings::BPF_NOEXIST;
use lb_common::Addr;
use lb_common::{
    Backend, Counter, FlowEntry, FlowKey, VipInfo, VipKey, flow_hash,
    maps::{BACKEND_F_NO_NEW, MAX_BACKENDS_PER_SERVICE, TABLE_CHUNK_SLOTS, proto},
};

use crate::{
    flowcache,
    maps::{
        BACKENDS, CONFIG, CONNTRACK, ECHO_ADDRS, SERVICE_BACKENDS, TABLE_CHUNKS_MAP, VIP_SLOTS,
        VIPS,
    },
    stats::count,
};

/// Whether `addr` may be a VIP's: its prefilter bit is set. A clear bit is certain
/// (no VIP has that address); a set one leaves it to the VIP map.
#[inline(always)]
pub fn may_be_vip(addr: &Addr) -> bool {
    let (word, bit) = lb_common::maps::vip_filter_slot(addr);
    crate::maps::VIP_FILTER
        .get(word)
        .is_some_and(|w| *w & bit != 0)
}

/// Whether echo requests to `addr` are answered here.
#[inline(always)]
pub fn answers_echo(addr: &Addr) -> bool {
    let key = lb_common::AddrKey { addr: *addr };
    // SAFETY: the value is only tested for presence.
    unsafe { ECHO_ADDRS.get(key) }.is_some()
}

/// The backend that owns an existing flow (for ICMP errors about it): the established
/// entry, else the embryonic one, else what the table would choose; nothing is
/// inserted.
#[inline(always)]
pub fn owner(vip: &VipInfo, key: &FlowKey) -> Option<Choice> {
    // SAFETY: values are plain data replaced whole by updates.
    let pinned = match unsafe { CONNTRACK.get(key) } {
        Some(entry) => Some(*entry),
        None => crate::halfopen::Bucket::of(key)
            .and_then(|b| b.find(key))
            .map(|f| f.entry),
    };
    if let Some(entry) = pinned
        && let Some(backend) = valid(vip, &entry)
    {
        return Some(Choice::pinned(entry.backend_id, backend));
    }
    let backend_id = table_choice(vip, key)?;
    BACKENDS
        .get(backend_id)
        .map(|backend| Choice::pinned(backend_id, backend))
}

/// The backend of a flow entry found for `vip`, if the entry is still its own: the
/// backend id must still belong to the service that admitted the flow, in the same
/// generation. A backend id is reused only after its owner is gone, and reuse bumps the
/// generation, so an old entry can never reach another service's backend.
#[inline(always)]
pub fn valid(vip: &VipInfo, entry: &FlowEntry) -> Option<&'static Backend> {
    let backend = BACKENDS.get(entry.backend_id)?;
    let service = vip.service_id as u16;
    if entry.service_id == service
        && backend.service_id == service
        && backend.generation == entry.backend_gen
    {
        Some(backend)
    } else {
        count(Counter::IdentityMismatch);
        None
    }
}

/// The service owning this flow's (destination, port, protocol), trying the exact port
/// first (its cache slot, then the VIP map) and then an all-ports entry.
#[inline(always)]
pub fn vip(key: &FlowKey) -> Option<&'static VipInfo> {
    let mut vip = VipKey {
        addr: key.dst,
        port_be: key.dst_port_be,
        proto: key.proto,
        _pad: 0,
        _pad2: 0,
    };
    if let Some(slot) = VIP_SLOTS.get(lb_common::maps::vip_slot(&vip))
        && slot.key.addr == vip.addr
        && slot.key.port_be == vip.port_be
        && slot.key.proto == vip.proto
    {
        return Some(&slot.info);
    }
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

impl Choice {
    /// A backend the flow already had.
    #[inline(always)]
    pub fn pinned(backend_id: u32, backend: &'static Backend) -> Self {
        Self {
            backend_id,
            backend,
            new_flow: false,
            nat_port_be: 0,
        }
    }
}

/// Why no backend could be chosen.
pub enum NoChoice {
    /// The service has no usable backend, or its tables are inconsistent.
    NoBackend,
    /// `nat` mode: no free source port around this flow's hash.
    NatPortsExhausted,
    /// `nat` mode: the NAT maps are full.
    NatTableFull,
    /// `nat` mode: not a SYN, and no flow to translate it with.
    NatNoFlow,
}

/// A flow entry for a new flow to `backend_id`.
#[inline(always)]
pub fn entry_for(vip: &VipInfo, backend_id: u32, backend: &Backend, nat_port_be: u16) -> FlowEntry {
    FlowEntry {
        backend_id,
        service_id: vip.service_id as u16,
        flags: 0,
        nat_port_be,
        backend_gen: backend.generation,
        seen: 0,
    }
}

/// The backend of a `dsr` packet. Flow state is admitted in two steps, so that packets
/// that cannot complete a handshake never displace flows that did:
///
/// 1. An established entry wins (whatever the table says now): from this CPU's flow
///    cache ([`flowcache`]) when it holds the flow, else from conntrack. A SYN finding
///    one whose backend no longer takes new flows (or whose identity fails) is a new
///    connection on a reused 5-tuple: the entry goes and the SYN is a new flow.
/// 2. A packet that may open a flow (TCP SYN, any UDP datagram) and has no entry takes
///    the table's choice into the embryonic table (a retransmitted SYN keeps the choice
///    it made); its next packet (the handshake's ACK, the next datagram) moves it to the
///    established table.
/// 3. A TCP packet that is not a SYN and has neither entry is forwarded by the table as
///    it is now, creating nothing (counted `non_syn_miss`): a flood of spoofed ACKs
///    costs lookups, not state.
///
/// `now` is `forward::now`.
#[inline(always)]
pub fn dsr(vip: &VipInfo, key: &FlowKey, may_open: bool, now: u64) -> Result<Choice, NoChoice> {
    let slot = flowcache::Slot::of(key);
    let syn = may_open && key.proto == proto::TCP;
    let probe = slot
        .as_ref()
        .map_or(flowcache::Probe::Miss, |s| s.probe(key, now));
    let found = match probe {
        flowcache::Probe::Fresh(entry) => Some(entry),
        flowcache::Probe::Expired(lost) => established(key, slot.as_ref(), Some(lost), now),
        flowcache::Probe::Miss => established(key, slot.as_ref(), None, now),
    };
    if let Some(entry) = found {
        match valid(vip, &entry) {
            Some(backend) if !syn || backend.flags & BACKEND_F_NO_NEW == 0 => {
                return Ok(Choice::pinned(entry.backend_id, backend));
            }
            // Stale (identity) or a SYN for a backend that takes no new flows.
            _ => {
                let _ = CONNTRACK.remove(key);
                flowcache::invalidate();
            }
        }
    }
    // A SYN looks the half-open table up too: a retransmission keeps its first choice
    // (unless that backend stopped taking new flows, or the entry is not its own any
    // more). For a new flow the insert below writes the bucket this lookup read.
    let bucket = crate::halfopen::Bucket::of(key).ok_or(NoChoice::NoBackend)?;
    if let Some(half) = bucket.find(key) {
        let entry = half.entry;
        match valid(vip, &entry) {
            Some(backend) if !syn => {
                // The flow's second packet: it is established now.
                let _ = CONNTRACK.insert(key, entry, 0);
                if let Some(slot) = &slot {
                    slot.fill(key, &entry, now);
                }
                bucket.remove(&half);
                count(Counter::EmbryonicPromoted);
                return Ok(Choice::pinned(entry.backend_id, backend));
            }
            Some(backend) if backend.flags & BACKEND_F_NO_NEW == 0 => {
                return Ok(Choice::pinned(entry.backend_id, backend));
            }
            // Stale: its way is free for the insert below.
            _ => bucket.remove(&half),
        }
    }
    let backend_id = table_choice(vip, key).ok_or(NoChoice::NoBackend)?;
    let backend = BACKENDS.get(backend_id).ok_or(NoChoice::NoBackend)?;
    if !may_open {
        count(Counter::NonSynMiss);
        return Ok(Choice::pinned(backend_id, backend));
    }
    // Another CPU may be writing the same flow at the same time (a retransmission on
    // another queue): both chose from the same table, and the last write stands.
    bucket.insert(key, &entry_for(vip, backend_id, backend, 0), now);
    // Counted as the service's new flow (its per-VIP counters), not again here: a
    // per-CPU counter costs ~8 ns, a tenth of this path's own work.
    Ok(Choice {
        backend_id,
        backend,
        new_flow: true,
        nat_port_be: 0,
    })
}

/// A flow's established entry from conntrack (which then fills the cache slot), for a
/// flow without a fresh slot. `expired` is the entry of the flow's expired
/// slot: if conntrack lost it, it is put back (only eviction loses an entry without a
/// new generation, and the flow is still live).
#[inline(always)]
fn established(
    key: &FlowKey,
    slot: Option<&flowcache::Slot>,
    expired: Option<FlowEntry>,
    now: u64,
) -> Option<FlowEntry> {
    // SAFETY: as in `vip`.
    let mut found = unsafe { CONNTRACK.get(key) }.copied();
    if found.is_none()
        && let Some(lost) = expired
    {
        // Another CPU may have put it back (or promoted a new flow) since the lookup:
        // what the table holds then stands.
        found = match CONNTRACK.insert(key, lost, u64::from(BPF_NOEXIST)) {
            Ok(()) => Some(lost),
            // SAFETY: as in `vip`.
            Err(_) => unsafe { CONNTRACK.get(key) }.copied(),
        };
    }
    if let (Some(entry), Some(slot)) = (&found, slot) {
        slot.fill(key, entry, now);
    }
    found
}

/// Maglev lookup: the seeded flow hash picks a slot, the slot a position in the
/// service's backend list, the list a backend id.
#[inline(always)]
pub fn table_choice(vip: &VipInfo, key: &FlowKey) -> Option<u32> {
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
