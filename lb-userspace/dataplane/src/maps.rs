//! Typed handles to the data plane's maps, shared by the agent (which also writes them
//! through [`lb_model::dataplane::MapOps`]) and by `lbctl`, which opens the pinned maps of a running
//! — or stopped — node to read and explain what it does.

use lb_common::Addr;
use std::path::Path;

use aya::{
    Ebpf,
    maps::{Array, HashMap, Map, MapData, PerCpuArray},
};
use lb_common::{
    AddrKey, Backend, Counter, FlowEntry, FlowKey, GlobalConfig, NatEntry, TableChunk,
    TrafficStats, TunnelConfig, VipInfo, VipKey, maps::names,
};

use lb_model::dataplane::{DataplaneError, Fill, FlowCounts, FlowTable, MapRead, Traffic};

use crate::halfopen::HalfOpenTable;

/// Every map lbd reads or writes, except the tail-call array.
pub struct MapSet {
    pub(crate) vips: HashMap<MapData, VipKey, VipInfo>,
    pub(crate) backends: Array<MapData, Backend>,
    pub(crate) lists: Array<MapData, u32>,
    pub(crate) chunks: Array<MapData, TableChunk>,
    pub(crate) conntrack: HashMap<MapData, FlowKey, FlowEntry>,
    pub(crate) embryonic: Embryonic,
    /// The half-open table's seed; absent in the pins of a release before it.
    pub(crate) embryonic_seed: Option<Array<MapData, u32>>,
    pub(crate) nat_flows: HashMap<MapData, FlowKey, FlowEntry>,
    pub(crate) nat: HashMap<MapData, FlowKey, NatEntry>,
    pub(crate) config: Array<MapData, GlobalConfig>,
    pub(crate) tunnel: Array<MapData, TunnelConfig>,
    pub(crate) vip_filter: Array<MapData, u64>,
    pub(crate) counters: PerCpuArray<MapData, u64>,
    pub(crate) vip_stats: PerCpuArray<MapData, TrafficStats>,
    pub(crate) backend_stats: PerCpuArray<MapData, TrafficStats>,
    pub(crate) echo: HashMap<MapData, AddrKey, u32>,
    /// `lb_probe`'s counters; absent in the pins of a data plane from before it.
    pub(crate) probe_counters: Option<PerCpuArray<MapData, u64>>,
    /// The flow cache's generation; absent in the pins of a data plane from before it.
    pub(crate) flow_cache_gen: Option<Array<MapData, u64>>,
}

impl std::fmt::Debug for MapSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MapSet").finish_non_exhaustive()
    }
}

/// A map opener: by name, from a loaded object or from a pin directory.
pub(crate) trait Source {
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
        let pinned = |source: aya::maps::MapError| DataplaneError::Pinned {
            path: path.display().to_string(),
            source: Box::new(source),
        };
        let data = MapData::from_pin(&path).map_err(pinned)?;
        Map::from_map_data(data).map_err(pinned)
    }
}

/// The maps of a [`MapSet`] opened again by id: handles of their own, for another
/// thread.
struct Reopen<'a>(&'a MapSet);

impl Source for Reopen<'_> {
    fn map(&mut self, name: &'static str) -> Result<Map, DataplaneError> {
        use aya::maps::IterableMap as _;
        let m = self.0;
        let data = match name {
            names::VIPS => m.vips.map(),
            names::BACKENDS => m.backends.map(),
            names::SERVICE_BACKENDS => m.lists.map(),
            names::TABLE_CHUNKS => m.chunks.map(),
            names::CONNTRACK => m.conntrack.map(),
            names::EMBRYONIC | names::EMBRYONIC_V1 => m.embryonic.map_data(),
            names::EMBRYONIC_SEED => match &m.embryonic_seed {
                Some(s) => s.map(),
                None => return Err(DataplaneError::Missing { what: "map", name }),
            },
            names::NAT_FLOWS => m.nat_flows.map(),
            names::NAT => m.nat.map(),
            names::CONFIG => m.config.map(),
            names::TUNNEL => m.tunnel.map(),
            names::VIP_FILTER => m.vip_filter.map(),
            names::COUNTERS => m.counters.map(),
            names::VIP_STATS => m.vip_stats.map(),
            names::BACKEND_STATS => m.backend_stats.map(),
            names::ECHO_ADDRS => m.echo.map(),
            names::PROBE_COUNTERS => match &m.probe_counters {
                Some(c) => c.map(),
                None => return Err(DataplaneError::Missing { what: "map", name }),
            },
            names::FLOW_CACHE_GEN => match &m.flow_cache_gen {
                Some(g) => g.map(),
                None => return Err(DataplaneError::Missing { what: "map", name }),
            },
            _ => return Err(DataplaneError::Missing { what: "map", name }),
        };
        reopen_map(data, name)
    }
}

/// The map `name` from `source`, typed (for a pin directory: `&mut { dir }`).
pub(crate) fn typed<T>(source: &mut impl Source, name: &'static str) -> Result<T, DataplaneError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    T::try_from(source.map(name)?).map_err(map_error("open", name))
}

/// A map removal's result, where the key being absent already is success: aya reports
/// that as `KeyNotFound` or as the syscall's `ENOENT`, depending on the call.
pub(crate) fn removed(
    result: Result<(), aya::maps::MapError>,
    name: &'static str,
) -> Result<(), DataplaneError> {
    match result {
        Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
        Err(aya::maps::MapError::SyscallError(e))
            if e.io_error.raw_os_error() == Some(rustix::io::Errno::NOENT.raw_os_error()) =>
        {
            Ok(())
        }
        Err(source) => Err(map_error("remove", name)(source)),
    }
}

pub(crate) fn map_error(
    op: &'static str,
    map: &'static str,
) -> impl FnOnce(aya::maps::MapError) -> DataplaneError {
    move |source| DataplaneError::Map {
        op,
        map,
        source: Box::new(source),
    }
}

impl MapSet {
    #[cfg(feature = "object")]
    /// Takes the maps out of a loaded object.
    pub(crate) fn take(ebpf: &mut Ebpf) -> Result<Self, DataplaneError> {
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

    /// The same maps through handles of their own (opened by id), for reading from
    /// another thread while this set is written.
    ///
    /// # Errors
    /// A map could not be opened again.
    pub fn reopen(&self) -> Result<Self, DataplaneError> {
        Self::from_source(&mut Reopen(self))
    }

    fn from_source(source: &mut impl Source) -> Result<Self, DataplaneError> {
        let embryonic_seed: Option<Array<MapData, u32>> = typed(source, names::EMBRYONIC_SEED).ok();
        let embryonic = match &embryonic_seed {
            Some(seed) => {
                Embryonic::Table(HalfOpenTable::new(typed(source, names::EMBRYONIC)?, seed)?)
            }
            // The pins of a node still running a release before the half-open table
            // (lbctl of the new release on a node not restarted yet).
            None => Embryonic::Legacy(typed(source, names::EMBRYONIC_V1)?),
        };
        Ok(Self {
            vips: typed(source, names::VIPS)?,
            backends: typed(source, names::BACKENDS)?,
            lists: typed(source, names::SERVICE_BACKENDS)?,
            chunks: typed(source, names::TABLE_CHUNKS)?,
            conntrack: typed(source, names::CONNTRACK)?,
            embryonic,
            embryonic_seed,
            nat_flows: typed(source, names::NAT_FLOWS)?,
            nat: typed(source, names::NAT)?,
            config: typed(source, names::CONFIG)?,
            tunnel: typed(source, names::TUNNEL)?,
            vip_filter: typed(source, names::VIP_FILTER)?,
            counters: typed(source, names::COUNTERS)?,
            vip_stats: typed(source, names::VIP_STATS)?,
            backend_stats: typed(source, names::BACKEND_STATS)?,
            echo: typed(source, names::ECHO_ADDRS)?,
            probe_counters: typed(source, names::PROBE_COUNTERS).ok(),
            flow_cache_gen: typed(source, names::FLOW_CACHE_GEN).ok(),
        })
    }

    /// `lb_probe`'s counters summed over CPUs, in [`lb_common::ProbeCounter::ALL`]
    /// order; `None` for a data plane without them.
    ///
    /// # Errors
    /// The map read failed.
    pub fn probe_counts(
        &self,
    ) -> Result<Option<[u64; lb_common::ProbeCounter::COUNT as usize]>, DataplaneError> {
        let Some(map) = &self.probe_counters else {
            return Ok(None);
        };
        let mut out = [0; lb_common::ProbeCounter::COUNT as usize];
        for c in lb_common::ProbeCounter::ALL {
            let per_cpu = map
                .get(&(c as u32), 0)
                .map_err(map_error("read", names::PROBE_COUNTERS))?;
            out[c as usize] = per_cpu.iter().sum();
        }
        Ok(Some(out))
    }

    /// A global counter summed over CPUs.
    ///
    /// # Errors
    /// The map read failed.
    pub fn counter(&self, counter: Counter) -> Result<u64, DataplaneError> {
        if counter == Counter::Packets {
            // Not counted by the data plane: every packet counts one verdict.
            return Counter::ALL
                .iter()
                .filter(|c| matches!(c.kind(), lb_common::CounterKind::Verdict { .. }))
                .map(|&c| self.counter(c))
                .sum();
        }
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

    /// Every established flow: the `dsr` conntrack entries, then the `nat` flows,
    /// each with its table. The maps change while they are walked, so this is a close
    /// snapshot, not an atomic one.
    ///
    /// # Errors
    /// A walk failed.
    pub fn flows(&self) -> Result<Vec<(FlowTable, FlowKey, FlowEntry)>, DataplaneError> {
        let mut out = Vec::new();
        for (table, map) in [
            (FlowTable::Established, &self.conntrack),
            (FlowTable::Nat, &self.nat_flows),
        ] {
            walk(map, table.map_name(), |key, entry| {
                out.push((table, key, entry));
            })?;
        }
        Ok(out)
    }

    /// Every half-open flow (embryonic table).
    ///
    /// # Errors
    /// The walk failed.
    pub fn embryonic_flows(&self) -> Result<Vec<(FlowKey, FlowEntry)>, DataplaneError> {
        let mut out = Vec::new();
        self.embryonic.walk(|key, entry| out.push((key, entry)))?;
        Ok(out)
    }

    /// Every `nat` reply entry (who owns each NAT port, in which state).
    ///
    /// # Errors
    /// The walk failed.
    pub fn nat_entries(&self) -> Result<Vec<(FlowKey, NatEntry)>, DataplaneError> {
        let mut out = Vec::new();
        walk(&self.nat, names::NAT, |key, entry| out.push((key, entry)))?;
        Ok(out)
    }

    /// Flows per backend id and in all, with the fill of every flow table (one walk
    /// of each).
    ///
    /// # Errors
    /// A walk failed.
    pub fn flow_counts(&self) -> Result<FlowCounts, DataplaneError> {
        self.reader()?.counts()
    }

    /// Handles of their own to the flow tables, so that a walk — whose cost grows with
    /// the tables, up to millions of entries — can run on another thread than the one
    /// that programs the data plane.
    ///
    /// # Errors
    /// The kernel refused a new handle.
    pub fn conntrack_reader(&self) -> Result<ConntrackReader, DataplaneError> {
        self.reader()
    }

    fn reader(&self) -> Result<ConntrackReader, DataplaneError> {
        Ok(ConntrackReader {
            conntrack: reopen(&self.conntrack, names::CONNTRACK)?,
            embryonic: self.embryonic.reopen()?,
            nat_flows: reopen(&self.nat_flows, names::NAT_FLOWS)?,
            nat: reopen(&self.nat, names::NAT)?,
        })
    }

    /// Number of established flows (`dsr` conntrack and `nat`; walks the keys).
    pub fn flow_count(&self) -> usize {
        self.conntrack.keys().filter(Result::is_ok).count()
            + self.nat_flows.keys().filter(Result::is_ok).count()
    }

    /// Removes a flow's entry from one table (a benchmark that replays a new flow
    /// touches only the table the flow was put in).
    ///
    /// # Errors
    /// The map update failed (a missing entry is not an error).
    pub fn forget_in(&mut self, table: FlowTable, key: &FlowKey) -> Result<(), DataplaneError> {
        self.evict(table, key)?;
        self.invalidate_flow_cache()
    }

    /// Removes a flow's entries (established, embryonic and `nat` client side), so its
    /// next packet is a new flow again.
    ///
    /// # Errors
    /// The map update failed (a missing entry is not an error).
    pub fn forget_flow(&mut self, key: &FlowKey) -> Result<(), DataplaneError> {
        for (map, name) in [
            (&mut self.conntrack, names::CONNTRACK),
            (&mut self.nat_flows, names::NAT_FLOWS),
        ] {
            removed(map.remove(key), name)?;
        }
        self.embryonic.remove(key)?;
        self.invalidate_flow_cache()
    }

    /// Writes a flow-table entry as the data plane would (fixtures use it to stage
    /// stale or foreign entries).
    ///
    /// # Errors
    /// The map update failed.
    pub fn put_flow(
        &mut self,
        table: FlowTable,
        key: &FlowKey,
        entry: FlowEntry,
    ) -> Result<(), DataplaneError> {
        let name = table.map_name();
        if table == FlowTable::Embryonic {
            self.embryonic.put(key, entry)?;
        } else {
            self.flow_map_mut(name)
                .insert(key, entry, 0)
                .map_err(map_error("insert", name))?;
        }
        self.invalidate_flow_cache()
    }

    /// Removes a flow's entry from one table as the LRU's eviction does: without a new
    /// flow-cache generation, so a CPU's cached copy may put it back (fixtures use it
    /// to stand for a full table).
    ///
    /// # Errors
    /// The map update failed (a missing entry is not an error).
    pub fn evict(&mut self, table: FlowTable, key: &FlowKey) -> Result<(), DataplaneError> {
        if table == FlowTable::Embryonic {
            return self.embryonic.remove(key);
        }
        let name = table.map_name();
        removed(self.flow_map_mut(name).remove(key), name)
    }

    /// Makes every CPU's flow cache forget what it holds (a new random generation,
    /// `lb_common::FlowCacheSlot`): after any removal or rewrite of a conntrack entry,
    /// which a cached copy would otherwise outlive. Nothing to do for a data plane
    /// without the cache.
    ///
    /// # Errors
    /// The map update failed, or the kernel gave no random bytes.
    pub fn invalidate_flow_cache(&mut self) -> Result<(), DataplaneError> {
        let Some(map) = &mut self.flow_cache_gen else {
            return Ok(());
        };
        let mut fresh = [0u8; 8];
        rustix::rand::getrandom(&mut fresh, rustix::rand::GetRandomFlags::empty()).map_err(
            |e| DataplaneError::Program {
                action: "drawing a flow-cache generation".into(),
                source: Box::new(std::io::Error::from(e)),
            },
        )?;
        map.set(0, u64::from_ne_bytes(fresh), 0)
            .map_err(map_error("set", names::FLOW_CACHE_GEN))
    }

    /// A flow hash table by map name (conntrack, `nat` flows), writable.
    pub(crate) fn flow_map_mut(&mut self, name: &str) -> &mut HashMap<MapData, FlowKey, FlowEntry> {
        match name {
            names::NAT_FLOWS => &mut self.nat_flows,
            _ => &mut self.conntrack,
        }
    }

    /// The half-open table (its seed, its buckets); `None` in the pins of a node still
    /// running a release before it (its embryonic LRU is read through the same calls).
    pub fn embryonic_table(&self) -> Option<&HalfOpenTable> {
        match &self.embryonic {
            Embryonic::Table(t) => Some(t),
            Embryonic::Legacy(_) => None,
        }
    }

    /// The half-open table, writable (the migration, fixtures staging a torn way).
    pub fn embryonic_table_mut(&mut self) -> Option<&mut HalfOpenTable> {
        match &mut self.embryonic {
            Embryonic::Table(t) => Some(t),
            Embryonic::Legacy(_) => None,
        }
    }

    #[cfg(feature = "object")]
    /// The `nat` reply map, writable.
    pub(crate) fn nat_map_mut(&mut self) -> &mut HashMap<MapData, FlowKey, NatEntry> {
        &mut self.nat
    }

    #[cfg(feature = "object")]
    /// A flow's established (`dsr`) conntrack entry.
    pub(crate) fn conntrack_entry(&self, key: &FlowKey) -> Option<FlowEntry> {
        self.conntrack.get(key, 0).ok()
    }

    /// Handles of their own to the `nat` maps (the sweeper's).
    pub(crate) fn nat_handles(&self) -> Result<NatHandles, DataplaneError> {
        Ok((
            reopen(&self.nat_flows, names::NAT_FLOWS)?,
            reopen(&self.nat, names::NAT)?,
        ))
    }

    #[cfg(feature = "object")]
    /// The `nat` maps, writable.
    pub(crate) fn nat_maps(
        &mut self,
    ) -> (
        &mut HashMap<MapData, FlowKey, FlowEntry>,
        &mut HashMap<MapData, FlowKey, NatEntry>,
    ) {
        (&mut self.nat_flows, &mut self.nat)
    }
}

impl Traffic for MapSet {
    fn counter(&self, counter: Counter) -> Result<u64, DataplaneError> {
        MapSet::counter(self, counter)
    }

    fn vip_stats(&self, service_id: u32) -> Result<TrafficStats, DataplaneError> {
        MapSet::vip_stats(self, service_id)
    }

    fn backend_stats(&self, backend_id: u32) -> Result<TrafficStats, DataplaneError> {
        MapSet::backend_stats(self, backend_id)
    }

    fn flow_counts(&self) -> Result<FlowCounts, DataplaneError> {
        MapSet::flow_counts(self)
    }
}

/// The `nat` client-side and reply maps.
pub(crate) type NatHandles = (
    HashMap<MapData, FlowKey, FlowEntry>,
    HashMap<MapData, FlowKey, NatEntry>,
);

/// A second handle to a hash map, opened by id.
fn reopen<K: aya::Pod, V: aya::Pod>(
    map: &HashMap<MapData, K, V>,
    name: &'static str,
) -> Result<HashMap<MapData, K, V>, DataplaneError> {
    use aya::maps::IterableMap as _;
    reopen_as(map.map(), name)
}

/// A second handle to the map of `data`, opened by id and typed (a hash map, an
/// array).
pub(crate) fn reopen_as<T>(data: &MapData, name: &'static str) -> Result<T, DataplaneError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    T::try_from(reopen_map(data, name)?).map_err(map_error("reopen", name))
}

/// A second handle to the map of `data`, opened by id.
fn reopen_map(data: &MapData, name: &'static str) -> Result<Map, DataplaneError> {
    let id = data.info().map_err(map_error("reopen", name))?.id();
    let data = MapData::from_id(id).map_err(map_error("reopen", name))?;
    Map::from_map_data(data).map_err(map_error("reopen", name))
}

/// Handles of their own to the flow tables (see [`MapSet::conntrack_reader`]).
pub struct ConntrackReader {
    conntrack: HashMap<MapData, FlowKey, FlowEntry>,
    embryonic: Embryonic,
    nat_flows: HashMap<MapData, FlowKey, FlowEntry>,
    nat: HashMap<MapData, FlowKey, NatEntry>,
}

impl std::fmt::Debug for ConntrackReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConntrackReader")
    }
}

impl ConntrackReader {
    /// Established flows per backend id and in all, and every table's fill (one walk
    /// of each table).
    ///
    /// # Errors
    /// A walk failed.
    pub fn counts(&self) -> Result<FlowCounts, DataplaneError> {
        let mut counts = FlowCounts::default();
        for (map, name, fill) in [
            (&self.conntrack, names::CONNTRACK, 0),
            (&self.nat_flows, names::NAT_FLOWS, 1),
        ] {
            let mut n = 0;
            walk(map, name, |_, entry: FlowEntry| {
                *counts.per_backend.entry(entry.backend_id).or_default() += 1;
                n += 1;
            })?;
            counts.total += n;
            if fill == 0 {
                counts.conntrack = Fill {
                    entries: n,
                    capacity: capacity(map, name)?,
                };
            }
        }
        let mut n = 0;
        self.embryonic.walk(|_, _| n += 1)?;
        counts.embryonic = Fill {
            entries: n,
            capacity: self.embryonic.capacity()?,
        };
        let mut n = 0;
        walk(&self.nat, names::NAT, |_, _| n += 1)?;
        counts.nat = Fill {
            entries: n,
            capacity: capacity(&self.nat, names::NAT)?,
        };
        Ok(counts)
    }
}

/// A map's `max_entries`.
fn capacity<K: aya::Pod, V: aya::Pod>(
    map: &HashMap<MapData, K, V>,
    name: &'static str,
) -> Result<u64, DataplaneError> {
    use aya::maps::IterableMap as _;
    let info = map.map().info().map_err(map_error("info", name))?;
    Ok(u64::from(info.max_entries()))
}

/// Calls `each` for every entry of a flow map. The map changes while it is walked, so
/// this is a close snapshot, not an atomic one.
fn walk<V: aya::Pod>(
    map: &HashMap<MapData, FlowKey, V>,
    name: &'static str,
    mut each: impl FnMut(FlowKey, V),
) -> Result<(), DataplaneError> {
    for item in map.iter() {
        match item {
            Ok((key, entry)) => each(key, entry),
            // An entry evicted between reading its key and its value.
            Err(aya::maps::MapError::KeyNotFound) => {}
            Err(source) => return Err(map_error("iterate", name)(source)),
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

    fn flow(&self, table: FlowTable, key: &FlowKey) -> Result<Option<FlowEntry>, DataplaneError> {
        let map = match table {
            FlowTable::Established => &self.conntrack,
            FlowTable::Embryonic => return self.embryonic.get(key),
            FlowTable::Nat => &self.nat_flows,
        };
        found(map.get(key, 0), "get", table.map_name())
    }

    fn nat_reply(&self, key: &FlowKey) -> Result<Option<NatEntry>, DataplaneError> {
        found(self.nat.get(key, 0), "get", names::NAT)
    }

    fn global_config(&self) -> Result<GlobalConfig, DataplaneError> {
        self.config
            .get(&0, 0)
            .map_err(map_error("get", names::CONFIG))
    }

    fn tunnel_config(&self) -> Result<TunnelConfig, DataplaneError> {
        self.tunnel
            .get(&0, 0)
            .map_err(map_error("get", names::TUNNEL))
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

    fn echo_addrs(&self) -> Result<Vec<Addr>, DataplaneError> {
        self.echo
            .keys()
            .map(|k| k.map(|k| k.addr))
            .collect::<Result<Vec<_>, _>>()
            .map_err(map_error("iterate", names::ECHO_ADDRS))
    }
}

/// The half-open table, or the embryonic LRU of the pins of a node still running a
/// release before it (read, and written as that release's data plane would).
pub(crate) enum Embryonic {
    Table(HalfOpenTable),
    Legacy(HashMap<MapData, FlowKey, FlowEntry>),
}

impl Embryonic {
    fn map_data(&self) -> &MapData {
        use aya::maps::IterableMap as _;
        match self {
            Self::Table(t) => t.map_data(),
            Self::Legacy(m) => m.map(),
        }
    }

    fn reopen(&self) -> Result<Self, DataplaneError> {
        Ok(match self {
            Self::Table(t) => Self::Table(t.reopen()?),
            Self::Legacy(m) => Self::Legacy(reopen(m, names::EMBRYONIC_V1)?),
        })
    }

    fn get(&self, key: &FlowKey) -> Result<Option<FlowEntry>, DataplaneError> {
        match self {
            Self::Table(t) => t.get(key),
            Self::Legacy(m) => found(m.get(key, 0), "get", names::EMBRYONIC_V1),
        }
    }

    fn put(&mut self, key: &FlowKey, entry: FlowEntry) -> Result<(), DataplaneError> {
        match self {
            Self::Table(t) => t.put(key, entry, lb_model::dataplane::monotonic_ns()),
            Self::Legacy(m) => m
                .insert(key, entry, 0)
                .map_err(map_error("insert", names::EMBRYONIC_V1)),
        }
    }

    fn remove(&mut self, key: &FlowKey) -> Result<(), DataplaneError> {
        match self {
            Self::Table(t) => t.remove(key),
            Self::Legacy(m) => removed(m.remove(key), names::EMBRYONIC_V1),
        }
    }

    fn walk(&self, each: impl FnMut(FlowKey, FlowEntry)) -> Result<(), DataplaneError> {
        match self {
            Self::Table(t) => t.walk(each),
            Self::Legacy(m) => walk(m, names::EMBRYONIC_V1, each),
        }
    }

    fn capacity(&self) -> Result<u64, DataplaneError> {
        match self {
            Self::Table(t) => Ok(t.capacity()),
            Self::Legacy(m) => capacity(m, names::EMBRYONIC_V1),
        }
    }
}
