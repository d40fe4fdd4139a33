//! An in-memory [`MapOps`] that records every operation, for tests without root.

use std::collections::HashMap;

use lb_common::{BackendSlot, Counter, GlobalConfig, VipInfo, VipKey};

use super::{DataplaneError, MapOps};

/// Maps held in memory, plus the order operations arrived in.
#[derive(Debug, Default)]
pub struct MemoryDataplane {
    /// Node settings.
    pub config: GlobalConfig,
    /// VIP map.
    pub vips: HashMap<VipKey, VipInfo>,
    /// Backend slots that were written.
    pub slots: HashMap<u32, BackendSlot>,
    /// Operation names in call order.
    pub log: Vec<String>,
}

impl MapOps for MemoryDataplane {
    fn set_config(&mut self, config: GlobalConfig) -> Result<(), DataplaneError> {
        self.config = config;
        self.log.push("set_config".into());
        Ok(())
    }

    fn vip(&self, key: &VipKey) -> Result<Option<VipInfo>, DataplaneError> {
        Ok(self.vips.get(key).copied())
    }

    fn put_vip(&mut self, key: VipKey, info: VipInfo) -> Result<(), DataplaneError> {
        self.vips.insert(key, info);
        self.log.push("put_vip".into());
        Ok(())
    }

    fn put_slot(&mut self, index: u32, slot: BackendSlot) -> Result<(), DataplaneError> {
        self.slots.insert(index, slot);
        self.log.push("put_slot".into());
        Ok(())
    }

    fn counter(&self, _counter: Counter) -> Result<u64, DataplaneError> {
        Ok(0)
    }
}
