//! The VIP cache ([`lb_common::maps::VipSlot`]): a direct-mapped copy of the VIP map
//! that the data plane reads before hashing into the VIP map.
//!
//! Contract, which makes a slot a hit or a miss and never a wrong answer: every VIP
//! entry written goes to its slot after the VIP map (overwriting whatever key held the
//! slot, which is then found in the VIP map as before), and a slot holding a key is
//! cleared before that key leaves the VIP map. The map is not pinned: each load makes
//! its own and fills it from the VIP map it adopted, so no slot outlives the agent
//! that keeps it.

use aya::{
    Ebpf,
    maps::{Array, MapData},
};
use lb_common::{
    VipInfo, VipKey,
    maps::{VipSlot, names, vip_slot},
};
use lb_model::dataplane::DataplaneError;

use crate::maps::map_error;

/// The VIP cache of one loaded object.
pub struct VipSlots {
    map: Array<MapData, VipSlot>,
}

impl VipSlots {
    /// Takes the cache map out of a loaded object and fills it with `vips`; `None` for
    /// an object without one (an older build, as `lb-bench --against` measures: its
    /// programs only read the VIP map).
    ///
    /// # Errors
    /// A write fails.
    pub fn take(
        ebpf: &mut Ebpf,
        vips: impl IntoIterator<Item = (VipKey, VipInfo)>,
    ) -> Result<Option<Self>, DataplaneError> {
        let Some(map) = ebpf.take_map(names::VIP_SLOTS) else {
            return Ok(None);
        };
        let map = Array::try_from(map).map_err(map_error("open", names::VIP_SLOTS))?;
        let mut slots = Self { map };
        for (key, info) in vips {
            slots.put(key, info)?;
        }
        Ok(Some(slots))
    }

    /// Writes `key`'s entry to its slot (after the VIP map has it).
    ///
    /// # Errors
    /// The write fails.
    pub fn put(&mut self, key: VipKey, info: VipInfo) -> Result<(), DataplaneError> {
        self.map
            .set(vip_slot(&key), VipSlot { key, info }, 0)
            .map_err(map_error("set", names::VIP_SLOTS))
    }

    /// Clears `key`'s slot if `key` holds it (before the VIP map loses the key).
    ///
    /// # Errors
    /// A read or write fails.
    pub fn forget(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        let index = vip_slot(key);
        let slot = self
            .map
            .get(&index, 0)
            .map_err(map_error("get", names::VIP_SLOTS))?;
        if slot.key != *key {
            return Ok(());
        }
        self.map
            .set(index, VipSlot::default(), 0)
            .map_err(map_error("set", names::VIP_SLOTS))
    }
}
