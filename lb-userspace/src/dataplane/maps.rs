//! Typed handles to the data plane's maps, shared by the agent (which also writes them
//! through [`super::MapOps`]) and by `lbctl`, which opens the pinned maps of a running
//! — or stopped — node to read and explain what it does.

use std::path::Path;

use aya::{
    Ebpf,
    maps::{Array, HashMap, Map, MapData, PerCpuArray},
};
use lb_common::{
    AddrKey, Backend, Counter, FlowEntry, FlowKey, GlobalConfig, TableChunk, TrafficStats, VipInfo,
    VipKey, maps::names,
};

use super::{DataplaneError, MapRead};

/// Every map lbd reads or writes, except the tail-call array.
pub struct MapSet {
    pub(super) vips: HashMap<MapData, VipKey, VipInfo>,
    pub(super) backends: Array<MapData, Backend>,
    pub(super) lists: Array<MapData, u32>,
    pub(super) chunks: Array<MapData, TableChunk>,
    pub(super) conntrack: HashMap<MapData, FlowKey, FlowEntry>,
    pub(super) config: Array<MapData, GlobalConfig>,
    pub(super) counters: PerCpuArray<MapData, u64>,
    pub(super) vip_stats: PerCpuArray<MapData, TrafficStats>,
    pub(super) backend_stats: PerCpuArray<MapData, TrafficStats>,
    pub(super) echo: HashMap<MapData, AddrKey, u32>,
}

impl std::fmt::Debug for MapSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapSet").finish_non_exhaustive()
    }
}

/// A map opener: by name, from a loaded object or from a pin directory.
trait Source {
    fn map(&mut self, name: &'static str) -> Result<Map, DataplaneError>;
}

impl Source for Ebpf {
    fn map(&mut self, name: &'static str) -> Result<Map, DataplaneError> {
        self.take_map(name)
            .ok_or(DataplaneError::Missing { what: "map", name })
    }
}

impl Source for &Path {
    fn map(&mut self, name: &'static str) -> Result<Map, DataplaneError> {
        let path = self.join(name);
        let pinned = |source| DataplaneError::Pinned {
            path: path.display().to_string(),
            source,
        };
        let data = MapData::from_pin(&path).map_err(pinned)?;
        Map::from_map_data(data).map_err(pinned)
    }
}

fn typed<T>(source: &mut impl Source, name: &'static str) -> Result<T, DataplaneError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    T::try_from(source.map(name)?).map_err(map_error("open", name))
}

pub(super) fn map_error(
    op: &'static str,
    map: &'static str,
) -> impl FnOnce(aya::maps::MapError) -> DataplaneError {
    move |source| DataplaneError::Map { op, map, source }
}

impl MapSet {
    /// Takes the maps out of a loaded object.
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<Self, DataplaneError> {
        Self::from_source(ebpf)
    }

    /// Opens the maps pinned under `pin_dir` by an agent (running or not). Needs the
    /// privileges of bpf(2) (root or CAP_BPF).
    ///
    /// # Errors
    /// [`DataplaneError::Pinned`] naming the first map that is missing or unreadable.
    pub fn open_pinned(pin_dir: &Path) -> Result<Self, DataplaneError> {
        Self::from_source(&mut { pin_dir })
    }

    fn from_source(source: &mut impl Source) -> Result<Self, DataplaneError> {
        Ok(Self {
            vips: typed(source, names::VIPS)?,
            backends: typed(source, names::BACKENDS)?,
            lists: typed(source, names::SERVICE_BACKENDS)?,
            chunks: typed(source, names::TABLE_CHUNKS)?,
            conntrack: typed(source, names::CONNTRACK)?,
            config: typed(source, names::CONFIG)?,
            counters: typed(source, names::COUNTERS)?,
            vip_stats: typed(source, names::VIP_STATS)?,
            backend_stats: typed(source, names::BACKEND_STATS)?,
            echo: typed(source, names::ECHO_ADDRS)?,
        })
    }

    /// A global counter summed over CPUs.
    ///
    /// # Errors
    /// The map read failed.
    pub fn counter(&self, counter: Counter) -> Result<u64, DataplaneError> {
        let per_cpu = self
            .counters
            .get(&(counter as u32), 0)
            .map_err(map_error("read", names::COUNTERS))?;
        Ok(per_cpu.iter().sum())
    }

    /// Every global counter summed over CPUs, in [`Counter::ALL`] order.
    ///
    /// # Errors
    /// A map read failed.
    pub fn counters(&self) -> Result<Vec<(Counter, u64)>, DataplaneError> {
        Counter::ALL
            .iter()
            .map(|&c| Ok((c, self.counter(c)?)))
            .collect()
    }

    /// Traffic of a service, summed over CPUs.
    ///
    /// # Errors
    /// The map read failed.
    pub fn vip_stats(&self, service_id: u32) -> Result<TrafficStats, DataplaneError> {
        sum_stats(&self.vip_stats, service_id, names::VIP_STATS)
    }

    /// Traffic of a backend, summed over CPUs.
    ///
    /// # Errors
    /// The map read failed.
    pub fn backend_stats(&self, backend_id: u32) -> Result<TrafficStats, DataplaneError> {
        sum_stats(&self.backend_stats, backend_id, names::BACKEND_STATS)
    }

    /// Every conntrack entry. The map changes while it is walked, so this is a close
    /// snapshot, not an atomic one.
    ///
    /// # Errors
    /// The walk failed.
    pub fn flows(&self) -> Result<Vec<(FlowKey, FlowEntry)>, DataplaneError> {
        let mut out = Vec::new();
        walk_flows(&self.conntrack, |key, entry| out.push((key, entry)))?;
        Ok(out)
    }

    /// Conntrack entries per backend id and in all (one walk of the map).
    ///
    /// # Errors
    /// The walk failed.
    pub fn flow_counts(&self) -> Result<FlowCounts, DataplaneError> {
        count_flows(&self.conntrack)
    }

    /// A second handle to the conntrack map, so that a walk — whose cost grows with
    /// the table, up to a million entries — can run on another thread than the one
    /// that programs the data plane.
    ///
    /// # Errors
    /// The kernel refused a new handle.
    pub fn conntrack_reader(&self) -> Result<ConntrackReader, DataplaneError> {
        use aya::maps::IterableMap as _;
        let open = map_error("reopen", names::CONNTRACK);
        let id = self.conntrack.map().info().map_err(open)?.id();
        let open = map_error("reopen", names::CONNTRACK);
        let data = MapData::from_id(id).map_err(open)?;
        let map = Map::from_map_data(data).map_err(map_error("reopen", names::CONNTRACK))?;
        Ok(ConntrackReader(
            HashMap::try_from(map).map_err(map_error("reopen", names::CONNTRACK))?,
        ))
    }

    /// Number of conntrack entries (walks the keys).
    pub fn flow_count(&self) -> usize {
        self.conntrack.keys().filter(Result::is_ok).count()
    }

    /// Removes a flow's conntrack entry, so its next packet is a new flow again.
    ///
    /// # Errors
    /// The map update failed (a missing entry is not an error).
    pub fn forget_flow(&mut self, key: &FlowKey) -> Result<(), DataplaneError> {
        match self.conntrack.remove(key) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(source) => Err(map_error("remove", names::CONNTRACK)(source)),
        }
    }
}

/// Conntrack entries per backend id, and in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowCounts {
    /// Entries per backend id.
    pub per_backend: std::collections::HashMap<u32, u64>,
    /// Entries in all.
    pub total: u64,
}

/// A handle to the conntrack map of its own (see [`MapSet::conntrack_reader`]).
pub struct ConntrackReader(HashMap<MapData, FlowKey, FlowEntry>);

impl std::fmt::Debug for ConntrackReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConntrackReader")
    }
}

impl ConntrackReader {
    /// Conntrack entries per backend id and in all (one walk of the map).
    ///
    /// # Errors
    /// The walk failed.
    pub fn counts(&self) -> Result<FlowCounts, DataplaneError> {
        count_flows(&self.0)
    }
}

fn count_flows(map: &HashMap<MapData, FlowKey, FlowEntry>) -> Result<FlowCounts, DataplaneError> {
    let mut counts = FlowCounts::default();
    walk_flows(map, |_, entry| {
        *counts.per_backend.entry(entry.backend_id).or_default() += 1;
        counts.total += 1;
    })?;
    Ok(counts)
}

/// Calls `each` for every conntrack entry. The map changes while it is walked, so this
/// is a close snapshot, not an atomic one.
fn walk_flows(
    map: &HashMap<MapData, FlowKey, FlowEntry>,
    mut each: impl FnMut(FlowKey, FlowEntry),
) -> Result<(), DataplaneError> {
    for item in map.iter() {
        match item {
            Ok((key, entry)) => each(key, entry),
            // An entry evicted between reading its key and its value.
            Err(aya::maps::MapError::KeyNotFound) => {}
            Err(source) => return Err(map_error("iterate", names::CONNTRACK)(source)),
        }
    }
    Ok(())
}

fn sum_stats(
    map: &PerCpuArray<MapData, TrafficStats>,
    index: u32,
    name: &'static str,
) -> Result<TrafficStats, DataplaneError> {
    let per_cpu = map.get(&index, 0).map_err(map_error("read", name))?;
    Ok(per_cpu
        .iter()
        .fold(TrafficStats::default(), |acc, s| acc.plus(*s)))
}

fn found<T>(
    result: Result<T, aya::maps::MapError>,
    op: &'static str,
    name: &'static str,
) -> Result<Option<T>, DataplaneError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(aya::maps::MapError::KeyNotFound) => Ok(None),
        Err(source) => Err(map_error(op, name)(source)),
    }
}

impl MapRead for MapSet {
    fn vips(&self) -> Result<Vec<(VipKey, VipInfo)>, DataplaneError> {
        self.vips
            .iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_error("iterate", names::VIPS))
    }

    fn vip(&self, key: &VipKey) -> Result<Option<VipInfo>, DataplaneError> {
        found(self.vips.get(key, 0), "get", names::VIPS)
    }

    fn flow(&self, key: &FlowKey) -> Result<Option<FlowEntry>, DataplaneError> {
        found(self.conntrack.get(key, 0), "get", names::CONNTRACK)
    }

    fn global_config(&self) -> Result<GlobalConfig, DataplaneError> {
        self.config
            .get(&0, 0)
            .map_err(map_error("get", names::CONFIG))
    }

    fn backend(&self, id: u32) -> Result<Backend, DataplaneError> {
        self.backends
            .get(&id, 0)
            .map_err(map_error("get", names::BACKENDS))
    }

    fn list_entry(&self, index: u32) -> Result<u32, DataplaneError> {
        self.lists
            .get(&index, 0)
            .map_err(map_error("get", names::SERVICE_BACKENDS))
    }

    fn table_chunk(&self, index: u32) -> Result<TableChunk, DataplaneError> {
        self.chunks
            .get(&index, 0)
            .map_err(map_error("get", names::TABLE_CHUNKS))
    }

    fn echo_addrs(&self) -> Result<Vec<[u8; 16]>, DataplaneError> {
        self.echo
            .keys()
            .map(|k| k.map(|k| k.addr))
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_error("iterate", names::ECHO_ADDRS))
    }
}
