//! An in-memory [`MapOps`] that records every operation, for tests without root, and
//! can be told to fail one of them (the n-th write), so that tests can check what a
//! reconcile that fails part-way leaves behind, or to hold its writes at a gate, so
//! that they can check what happens while a reconcile is in the middle of them.

use lb_common::Addr;
use std::{
    collections::HashMap,
    sync::{Arc, Condvar, Mutex, PoisonError},
};

use lb_common::{
    Backend, Counter, FlowEntry, FlowKey, GlobalConfig, NatEntry, TableChunk, TunnelConfig,
    VipInfo, VipKey,
};

use super::{
    DataplaneError, FlowTable, MapOps, MapRead,
    select::{TableChoice, table_choice},
};

/// `ENOMEM`, what a kernel map update that cannot allocate fails with.
const ENOMEM: i32 = 12;

/// Maps held in memory, plus the order operations arrived in.
#[derive(Clone, Debug, Default)]
pub struct MemoryDataplane {
    /// Node settings.
    pub config: GlobalConfig,
    /// Tunnel settings.
    pub tunnel: TunnelConfig,
    /// The VIP-address prefilter's words that are not zero.
    pub vip_filter: HashMap<u32, u64>,
    /// VIP map.
    pub vips: HashMap<VipKey, VipInfo>,
    /// Backends by id.
    pub backends: HashMap<u32, Backend>,
    /// Service-backend pool entries that were written.
    pub lists: HashMap<u32, u32>,
    /// Table chunks that were written.
    pub chunks: HashMap<u32, TableChunk>,
    /// Addresses whose echo requests are answered.
    pub echo: std::collections::BTreeSet<Addr>,
    /// Flow-table entries (the control plane never writes them; tests may).
    pub flows: HashMap<(FlowTable, FlowKey), FlowEntry>,
    /// `nat` reply entries (likewise).
    pub nat: HashMap<FlowKey, NatEntry>,
    /// Operation names in call order (successful ones).
    pub log: Vec<&'static str>,
    /// Writes attempted so far, failed ones included.
    pub writes: usize,
    /// Fail the writes with these 0-based numbers (counting every write attempted),
    /// as kernel map updates can fail; a failed write changes nothing. Empty (the
    /// default): none fails.
    pub fail_writes: std::ops::Range<usize>,
    /// While set and closed, every write waits for it to open.
    pub gate: Option<Arc<WriteGate>>,
}

/// A gate writes wait at while it is closed (see [`MemoryDataplane::gate`]).
#[derive(Debug, Default)]
pub struct WriteGate {
    /// (closed, writers waiting now).
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

impl WriteGate {
    /// Makes later writes wait.
    pub fn close(&self) {
        self.lock().0 = true;
    }

    /// Lets every waiting and later write through.
    pub fn open(&self) {
        self.lock().0 = false;
        self.changed.notify_all();
    }

    /// Writes waiting at the gate now.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.lock().1
    }

    fn pass(&self) {
        let mut state = self.lock();
        state.1 += 1;
        while state.0 {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.1 -= 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (bool, usize)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MemoryDataplane {
    /// Counts a write named `op`; `Err` if it is the one to fail.
    fn write(&mut self, op: &'static str) -> Result<(), DataplaneError> {
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        let n = self.writes;
        self.writes += 1;
        if self.fail_writes.contains(&n) {
            return Err(DataplaneError::Map {
                op,
                map: "memory",
                source: Box::new(std::io::Error::from_raw_os_error(ENOMEM)),
            });
        }
        self.log.push(op);
        Ok(())
    }

    /// The choice the data plane makes for a new flow of `key` to service `vip`.
    pub fn choose(&self, vip: &VipKey, key: &FlowKey) -> Option<TableChoice> {
        let info = self.vips.get(vip)?;
        table_choice(
            info,
            self.config.hash_seed,
            key,
            |i| self.lists.get(&i).copied(),
            |c| self.chunks.get(&c).copied(),
        )
    }
}

impl MapOps for MemoryDataplane {
    fn set_config(&mut self, config: GlobalConfig) -> Result<(), DataplaneError> {
        self.write("set_config")?;
        self.config = config;
        Ok(())
    }

    fn set_tunnel(&mut self, tunnel: TunnelConfig) -> Result<(), DataplaneError> {
        self.write("set_tunnel")?;
        self.tunnel = tunnel;
        Ok(())
    }

    fn put_vip(&mut self, key: VipKey, info: VipInfo) -> Result<(), DataplaneError> {
        self.write("put_vip")?;
        self.vips.insert(key, info);
        Ok(())
    }

    fn delete_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        self.write("delete_vip")?;
        self.vips.remove(key);
        Ok(())
    }

    fn put_backend(&mut self, id: u32, backend: Backend) -> Result<(), DataplaneError> {
        self.write("put_backend")?;
        self.backends.insert(id, backend);
        Ok(())
    }

    fn put_list_entry(&mut self, index: u32, backend_id: u32) -> Result<(), DataplaneError> {
        self.write("put_list_entry")?;
        self.lists.insert(index, backend_id);
        Ok(())
    }

    fn put_table_chunk(&mut self, index: u32, chunk: TableChunk) -> Result<(), DataplaneError> {
        self.write("put_table_chunk")?;
        self.chunks.insert(index, chunk);
        Ok(())
    }

    fn put_vip_filter_word(&mut self, index: u32, word: u64) -> Result<(), DataplaneError> {
        self.write("put_vip_filter_word")?;
        if word == 0 {
            self.vip_filter.remove(&index);
        } else {
            self.vip_filter.insert(index, word);
        }
        Ok(())
    }

    fn put_echo_addr(&mut self, addr: Addr) -> Result<(), DataplaneError> {
        self.write("put_echo_addr")?;
        self.echo.insert(addr);
        Ok(())
    }

    fn delete_echo_addr(&mut self, addr: Addr) -> Result<(), DataplaneError> {
        self.write("delete_echo_addr")?;
        self.echo.remove(&addr);
        Ok(())
    }
}

impl super::Traffic for MemoryDataplane {
    /// Counters are the kernel's: the in-memory data plane forwards nothing.
    fn counter(&self, _counter: Counter) -> Result<u64, DataplaneError> {
        Ok(0)
    }

    fn vip_stats(&self, _service_id: u32) -> Result<lb_common::TrafficStats, DataplaneError> {
        Ok(lb_common::TrafficStats::default())
    }

    fn backend_stats(&self, _backend_id: u32) -> Result<lb_common::TrafficStats, DataplaneError> {
        Ok(lb_common::TrafficStats::default())
    }

    /// What tests put in the flow tables.
    fn flow_counts(&self) -> Result<super::FlowCounts, DataplaneError> {
        let mut counts = super::FlowCounts::default();
        for ((table, _), entry) in &self.flows {
            match table {
                FlowTable::Embryonic => counts.embryonic.entries += 1,
                FlowTable::Established | FlowTable::Nat => {
                    if *table == FlowTable::Established {
                        counts.conntrack.entries += 1;
                    }
                    counts.total += 1;
                    *counts.per_backend.entry(entry.backend_id).or_default() += 1;
                }
            }
        }
        counts.nat.entries = self.nat.len() as u64;
        Ok(counts)
    }
}

/// A copy as of the call: the in-memory data plane counts nothing that moves.
impl super::ShareTraffic for MemoryDataplane {
    type Reader = Self;

    fn share(&self) -> Result<Self, DataplaneError> {
        Ok(self.clone())
    }
}

impl MapRead for MemoryDataplane {
    fn vips(&self) -> Result<Vec<(VipKey, VipInfo)>, DataplaneError> {
        Ok(self.vips.iter().map(|(k, v)| (*k, *v)).collect())
    }

    fn vip(&self, key: &VipKey) -> Result<Option<VipInfo>, DataplaneError> {
        Ok(self.vips.get(key).copied())
    }

    fn flow(&self, table: FlowTable, key: &FlowKey) -> Result<Option<FlowEntry>, DataplaneError> {
        Ok(self.flows.get(&(table, *key)).copied())
    }

    fn nat_reply(&self, key: &FlowKey) -> Result<Option<NatEntry>, DataplaneError> {
        Ok(self.nat.get(key).copied())
    }

    fn global_config(&self) -> Result<GlobalConfig, DataplaneError> {
        Ok(self.config)
    }

    fn tunnel_config(&self) -> Result<TunnelConfig, DataplaneError> {
        Ok(self.tunnel)
    }

    fn backend(&self, id: u32) -> Result<Backend, DataplaneError> {
        Ok(self.backends.get(&id).copied().unwrap_or_default())
    }

    fn list_entry(&self, index: u32) -> Result<u32, DataplaneError> {
        Ok(self.lists.get(&index).copied().unwrap_or_default())
    }

    fn table_chunk(&self, index: u32) -> Result<TableChunk, DataplaneError> {
        Ok(self.chunks.get(&index).copied().unwrap_or_default())
    }

    fn echo_addrs(&self) -> Result<Vec<Addr>, DataplaneError> {
        Ok(self.echo.iter().copied().collect())
    }
}
