//! Every map the data plane uses. Sizes and layouts come from `lb-common`; names are
//! the ABI userspace opens them by.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};
use lb_common::{
    BackendSlot, Counter, GlobalConfig, VipInfo, VipKey, VipStats,
    maps::{BACKEND_SLOTS, MAX_SERVICES},
};

/// Which VIPs this node serves: (address, port, protocol) → service.
#[map(name = "LB_VIPS_V1")]
pub static VIPS: HashMap<VipKey, VipInfo> = HashMap::with_max_entries(MAX_SERVICES, 0);

/// Backend tables, two per service (see `VipInfo::table_id`).
#[map(name = "LB_BACKENDS_V1")]
pub static BACKENDS: Array<BackendSlot> = Array::with_max_entries(BACKEND_SLOTS, 0);

/// Node-wide settings at index 0.
#[map(name = "LB_CONFIG_V1")]
pub static CONFIG: Array<GlobalConfig> = Array::with_max_entries(1, 0);

/// Global verdict and reason counters, one slot per `Counter`.
#[map(name = "LB_COUNTERS_V1")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Per-service packets and bytes forwarded, indexed by `VipInfo::service_id`.
#[map(name = "LB_VIP_STATS_V1")]
pub static VIP_STATS: PerCpuArray<VipStats> = PerCpuArray::with_max_entries(MAX_SERVICES, 0);
