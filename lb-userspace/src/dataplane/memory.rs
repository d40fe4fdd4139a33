//! An in-memory [`MapOps`] that records every operation, for tests without root.

use std::collections::HashMap;

use lb_common::{
    Backend, Counter, FlowEntry, FlowKey, GlobalConfig, NatEntry, TableChunk, VipInfo, VipKey,
};

use super::{
    DataplaneError, FlowTable, MapOps, MapRead,
    select::{TableChoice, table_choice},
};

/// Maps held in memory, plus the order operations arrived in.
#[derive(Debug, Default)]
pub struct MemoryDataplane {
    /// Node settings.
    pub config: GlobalConfig,
    /// VIP map.
    pub vips: HashMap<VipKey, VipInfo>,
    /// Backends by id.
    pub backends: HashMap<u32, Backend>,
    /// Service-backend pool entries that were written.
    pub lists: HashMap<u32, u32>,
    /// Table chunks that were written.
    pub chunks: HashMap<u32, TableChunk>,
    /// Addresses whose echo requests are answered.
    pub echo: std::collections::BTreeSet<[u8; 16]>,
    /// Flow-table entries (the control plane never writes them; tests may).
    pub flows: HashMap<(FlowTable, FlowKey), FlowEntry>,
    /// `nat` reply entries (likewise).
    pub nat: HashMap<FlowKey, NatEntry>,
    /// Operation names in call order.
    pub log: Vec<&'static str>,
}

impl MemoryDataplane {
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
        self.config = config;
        self.log.push("set_config");
        Ok(())
    }

    fn put_vip(&mut self, key: VipKey, info: VipInfo) -> Result<(), DataplaneError> {
        self.vips.insert(key, info);
        self.log.push("put_vip");
        Ok(())
    }

    fn delete_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        self.vips.remove(key);
        self.log.push("delete_vip");
        Ok(())
    }

    fn put_backend(&mut self, id: u32, backend: Backend) -> Result<(), DataplaneError> {
        self.backends.insert(id, backend);
        self.log.push("put_backend");
        Ok(())
    }

    fn put_list_entry(&mut self, index: u32, backend_id: u32) -> Result<(), DataplaneError> {
        self.lists.insert(index, backend_id);
        self.log.push("put_list_entry");
        Ok(())
    }

    fn put_table_chunk(&mut self, index: u32, chunk: TableChunk) -> Result<(), DataplaneError> {
        self.chunks.insert(index, chunk);
        self.log.push("put_table_chunk");
        Ok(())
    }

    fn counter(&self, _counter: Counter) -> Result<u64, DataplaneError> {
        Ok(0)
    }

    fn put_echo_addr(&mut self, addr: [u8; 16]) -> Result<(), DataplaneError> {
        self.echo.insert(addr);
        self.log.push("put_echo_addr");
        Ok(())
    }

    fn delete_echo_addr(&mut self, addr: [u8; 16]) -> Result<(), DataplaneError> {
        self.echo.remove(&addr);
        self.log.push("delete_echo_addr");
        Ok(())
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

    fn backend(&self, id: u32) -> Result<Backend, DataplaneError> {
        Ok(self.backends.get(&id).copied().unwrap_or_default())
    }

    fn list_entry(&self, index: u32) -> Result<u32, DataplaneError> {
        Ok(self.lists.get(&index).copied().unwrap_or_default())
    }

    fn table_chunk(&self, index: u32) -> Result<TableChunk, DataplaneError> {
        Ok(self.chunks.get(&index).copied().unwrap_or_default())
    }

    fn echo_addrs(&self) -> Result<Vec<[u8; 16]>, DataplaneError> {
        Ok(self.echo.iter().copied().collect())
    }
}
