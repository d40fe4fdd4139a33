//! The data plane's choice for a new flow, computed in userspace from map contents.
//!
//! This mirrors `lb-ebpf/src/lookup.rs` step for step (hash → slot → list index →
//! backend id); tests run both on the same flows and require the same answer.

use lb_common::{
    FlowKey, TableChunk, VipInfo, flow_hash,
    maps::{MAX_BACKENDS_PER_SERVICE, TABLE_CHUNK_SLOTS},
};

/// Where a new flow lands and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableChoice {
    /// The flow hash.
    pub hash: u32,
    /// The table slot it selects.
    pub slot: u32,
    /// The slot's index into the service's backend list.
    pub list_index: u32,
    /// The backend id at that index.
    pub backend_id: u32,
}

/// Computes the table choice for `key` given readers for the list and table pools.
/// `None` where the kernel would find no usable backend.
pub fn table_choice(
    vip: &VipInfo,
    seed: u32,
    key: &FlowKey,
    list_entry: impl Fn(u32) -> Option<u32>,
    table_chunk: impl Fn(u32) -> Option<TableChunk>,
) -> Option<TableChoice> {
    if vip.table_size == 0 || vip.list_len == 0 || vip.list_len > MAX_BACKENDS_PER_SERVICE {
        return None;
    }
    let hash = flow_hash(seed, key);
    let slot = hash % vip.table_size;
    let chunk = table_chunk(vip.table_base / TABLE_CHUNK_SLOTS + slot / TABLE_CHUNK_SLOTS)?;
    let list_index = u32::from(chunk.slots[(slot % TABLE_CHUNK_SLOTS) as usize]);
    if list_index >= vip.list_len {
        return None;
    }
    let backend_id = list_entry(vip.list_base + list_index)?;
    Some(TableChoice {
        hash,
        slot,
        list_index,
        backend_id,
    })
}
