//! Keeping flows across a change of the flow tables' shape.
//!
//! A pinned map is reused as it is by the next agent, whatever the object now says:
//! its size and flags are fixed when it is created. When `node.conntrack_entries` (or
//! another table's size) changes, or a new release changes a table's kind, the old
//! pin is moved aside before the object is loaded, the new map is created in its
//! place, and the entries are copied across twice — once before the new program is
//! attached (so it starts with every flow) and once after (for the flows the old
//! program admitted in between). Then the old map is released. The `nat` maps of
//! agents before `LB_NAT_V2` (an LRU of a shorter reply entry, its client side in
//! conntrack) are translated the same way.

use lb_common::Addr;
use std::path::{Path, PathBuf};

use aya::maps::{Array, HashMap, Map, MapData};
use lb_common::{
    FlowEntry, FlowKey, NatEntry, NatState, NatTimeouts,
    halfopen::{self, Bucket},
    maps::{FLOW_F_ESTABLISHED, names},
};

use lb_model::{config::FlowTables, dataplane::DataplaneError};

use crate::maps::MapSet;

/// The flow tables whose shape the config (or a release) decides, and the flags the
/// object creates them with.
fn shaped(tables: &FlowTables) -> [(&'static str, u32, u32); 4] {
    [
        (names::CONNTRACK, tables.conntrack_entries, 0),
        (
            names::EMBRYONIC,
            halfopen::buckets_for(tables.embryonic_entries),
            halfopen::MAP_FLAGS,
        ),
        (names::NAT, tables.nat_entries, 0),
        (names::NAT_FLOWS, tables.nat_entries, 0),
    ]
}

/// Most pins of one table kept aside at once (unfinished migrations).
const MAX_ASIDE: u32 = 4;

/// Where a replaced table's map is pinned while its flows are copied (bpffs refuses
/// names with a dot).
fn aside_pin(pin_dir: &Path, name: &str, n: u32) -> PathBuf {
    pin_dir.join(format!("{name}_MIGRATING{n}"))
}

/// Pinned maps moved aside, to be copied into their replacements.
#[derive(Debug, Default)]
pub struct Migration {
    /// (map name, the old map, where its pin was moved).
    moved: Vec<(&'static str, MapData, PathBuf)>,
    /// The pre-V2 `nat` reply map and the old conntrack (its client side).
    legacy_nat: Option<(MapData, PathBuf)>,
    /// The embryonic table of releases before `LB_CT_EMBRYONIC_V2` (an LRU hash).
    legacy_embryonic: Option<(MapData, PathBuf)>,
    /// When the timeouts of migrated `nat` entries start.
    timeouts: NatTimeouts,
}

fn io_error(action: String) -> impl FnOnce(std::io::Error) -> DataplaneError {
    move |source| DataplaneError::Program {
        action,
        source: Box::new(source),
    }
}

fn pinned_error(path: &Path) -> impl FnOnce(aya::maps::MapError) -> DataplaneError + '_ {
    move |source| DataplaneError::Pinned {
        path: path.display().to_string(),
        source: Box::new(source),
    }
}

impl Migration {
    /// Before loading: moves aside every pinned flow table whose size or flags differ
    /// from what `tables` asks for, and the pre-V2 `nat` map.
    ///
    /// # Errors
    /// A pin that cannot be opened or renamed.
    pub fn prepare(pin_dir: &Path, tables: &FlowTables) -> Result<Self, DataplaneError> {
        let mut migration = Self {
            timeouts: tables.nat_timeouts,
            ..Self::default()
        };
        for (name, entries, flags) in shaped(tables) {
            // Pins left aside by a migration that did not finish (lbd stopped in
            // between): their flows are copied again.
            for n in 0..MAX_ASIDE {
                let aside = aside_pin(pin_dir, name, n);
                if aside.exists() {
                    let data = MapData::from_pin(&aside).map_err(pinned_error(&aside))?;
                    migration.moved.push((name, data, aside));
                }
            }
            let pin = pin_dir.join(name);
            if !pin.exists() {
                continue;
            }
            let data = MapData::from_pin(&pin).map_err(pinned_error(&pin))?;
            let info = data.info().map_err(pinned_error(&pin))?;
            if info.max_entries() == entries && info.map_flags() == flags {
                continue;
            }
            tracing::info!(
                map = name,
                pinned_entries = info.max_entries(),
                pinned_flags = %format_args!("{:#x}", info.map_flags()),
                entries,
                flags = %format_args!("{flags:#x}"),
                "pinned map has another size, copying its flows into a new map"
            );
            // bpffs renames nothing: the old map is pinned a second time aside, then
            // unpinned from its name, so it always has a pin (and lbd stopping here
            // leaves it aside, where the next start finds it).
            let aside = (0..MAX_ASIDE)
                .map(|n| aside_pin(pin_dir, name, n))
                .find(|p| !p.exists())
                .ok_or_else(|| DataplaneError::Invalid {
                    service: name.into(),
                    problem: format!(
                        "{MAX_ASIDE} unfinished migrations pinned aside in {}; remove them",
                        pin_dir.display()
                    ),
                })?;
            data.pin(&aside).map_err(|source| DataplaneError::Program {
                action: format!("pinning {} aside at {}", pin.display(), aside.display()),
                source: Box::new(source),
            })?;
            std::fs::remove_file(&pin).map_err(io_error(format!("unpinning {}", pin.display())))?;
            migration.moved.push((name, data, aside));
        }
        let legacy = pin_dir.join(names::NAT_V1);
        if legacy.exists() {
            let data = MapData::from_pin(&legacy).map_err(pinned_error(&legacy))?;
            migration.legacy_nat = Some((data, legacy));
        }
        let legacy = pin_dir.join(names::EMBRYONIC_V1);
        if legacy.exists() {
            let data = MapData::from_pin(&legacy).map_err(pinned_error(&legacy))?;
            migration.legacy_embryonic = Some((data, legacy));
        }
        Ok(migration)
    }

    /// Whether anything is to be copied.
    pub fn is_empty(&self) -> bool {
        self.moved.is_empty() && self.legacy_nat.is_none() && self.legacy_embryonic.is_none()
    }

    /// Copies the old maps' entries into `maps` (entries already there are kept:
    /// the new program's own are newer). Returns the number copied.
    ///
    /// # Errors
    /// A map read failed.
    pub fn copy(&self, maps: &mut MapSet) -> Result<usize, DataplaneError> {
        let mut copied = 0;
        for (name, data, aside) in &self.moved {
            copied += match *name {
                names::NAT => copy_into(data, aside, maps.nat_map_mut())?,
                names::EMBRYONIC => copy_half_open(data, aside, maps)?,
                _ => copy_into(data, aside, maps.flow_map_mut(name))?,
            };
        }
        if let Some((data, pin)) = &self.legacy_nat {
            copied += self.translate_legacy(data, pin, maps)?;
        }
        if let Some((data, pin)) = &self.legacy_embryonic {
            let old: HashMap<MapData, FlowKey, FlowEntry> = open_as(data, pin)?;
            let flows: Vec<(FlowKey, FlowEntry)> = old.iter().filter_map(Result::ok).collect();
            copied += put_half_open(flows, maps)?;
        }
        Ok(copied)
    }

    /// The pre-V2 `nat` state: reply entries (client, VIP, ports) in `LB_NAT_V1`, the
    /// client side (backend, port) in conntrack. Each pair becomes a V2 reply entry
    /// and a `nat` flow, both established with a fresh timeout.
    fn translate_legacy(
        &self,
        data: &MapData,
        pin: &Path,
        maps: &mut MapSet,
    ) -> Result<usize, DataplaneError> {
        let old: HashMap<MapData, FlowKey, LegacyNatEntry> = open_as(data, pin)?;
        let now = lb_model::dataplane::monotonic_ns();
        let expires_ns = now.saturating_add(self.timeouts.tcp_ns[NatState::Established as usize]);
        let mut copied = 0;
        let mut pairs = Vec::new();
        for item in old.iter() {
            let Ok((reply, legacy)) = item else { continue };
            let client = FlowKey {
                src: legacy.client,
                dst: legacy.vip,
                src_port_be: legacy.client_port_be,
                dst_port_be: legacy.vip_port_be,
                proto: reply.proto,
                _pad: 0,
                _pad2: 0,
            };
            pairs.push((reply, legacy, client));
        }
        for (reply, legacy, client) in pairs {
            let Some(mut flow) = maps.conntrack_entry(&client) else {
                continue;
            };
            flow.flags = FLOW_F_ESTABLISHED;
            let entry = NatEntry {
                client: legacy.client,
                vip: legacy.vip,
                client_port_be: legacy.client_port_be,
                vip_port_be: legacy.vip_port_be,
                state: NatState::Established as u8,
                events: 0,
                _pad: 0,
                expires_ns: if reply.proto == lb_common::maps::proto::UDP {
                    now.saturating_add(self.timeouts.udp_ns)
                } else {
                    expires_ns
                },
                backend_id: flow.backend_id,
                refreshed: (now >> 30) as u32,
            };
            let (flows, nat) = maps.nat_maps();
            if nat.insert(reply, entry, u64::from(aya_noexist())).is_ok()
                && flows.insert(client, flow, u64::from(aya_noexist())).is_ok()
            {
                copied += 1;
            }
        }
        Ok(copied)
    }

    /// After the new program is attached: copies once more (flows the old program
    /// admitted meanwhile), then removes the old pins; the old maps go when the last
    /// handle closes.
    ///
    /// # Errors
    /// A map read failed or a pin could not be removed.
    pub fn finish(self, maps: &mut MapSet) -> Result<usize, DataplaneError> {
        let copied = self.copy(maps)?;
        for (_, _, aside) in &self.moved {
            std::fs::remove_file(aside)
                .map_err(io_error(format!("removing {}", aside.display())))?;
        }
        for (_, pin) in self.legacy_nat.iter().chain(&self.legacy_embryonic) {
            std::fs::remove_file(pin).map_err(io_error(format!("removing {}", pin.display())))?;
        }
        Ok(copied)
    }
}

/// `BPF_NOEXIST`: copy without overwriting what the new program wrote itself.
const fn aya_noexist() -> u32 {
    1
}

/// A handle of its own to an old map, typed (a hash map or an array).
fn open_as<T>(data: &MapData, pin: &Path) -> Result<T, DataplaneError>
where
    T: TryFrom<Map, Error = aya::maps::MapError>,
{
    let info = data.info().map_err(pinned_error(pin))?;
    let again = MapData::from_id(info.id()).map_err(pinned_error(pin))?;
    let map = Map::from_map_data(again).map_err(pinned_error(pin))?;
    T::try_from(map).map_err(pinned_error(pin))
}

fn copy_into<V: aya::Pod>(
    data: &MapData,
    pin: &Path,
    into: &mut HashMap<MapData, FlowKey, V>,
) -> Result<usize, DataplaneError> {
    let old: HashMap<MapData, FlowKey, V> = open_as(data, pin)?;
    let mut copied = 0;
    let entries: Vec<(FlowKey, V)> = old.iter().filter_map(Result::ok).collect();
    for (key, value) in entries {
        if into.insert(key, value, u64::from(aya_noexist())).is_ok() {
            copied += 1;
        }
    }
    Ok(copied)
}

/// Copies the flows of a half-open table of another size (the same seed: the seed map
/// outlives the table) into the new one.
fn copy_half_open(data: &MapData, pin: &Path, maps: &mut MapSet) -> Result<usize, DataplaneError> {
    let old: Array<MapData, Bucket> = open_as(data, pin)?;
    let seed = maps.embryonic_table().ok_or_else(not_loaded)?.seed();
    let mut flows = Vec::new();
    for bucket in old.iter() {
        let bucket = bucket.map_err(pinned_error(pin))?;
        for way in bucket.ways {
            if way.is_whole(seed) {
                flows.push((way.key, way.entry));
            }
        }
    }
    put_half_open(flows, maps)
}

/// The maps of a loaded object always have the half-open table.
fn not_loaded() -> DataplaneError {
    DataplaneError::Missing {
        what: "map",
        name: names::EMBRYONIC,
    }
}

/// Writes half-open flows the new table does not hold yet (its own are newer).
fn put_half_open(
    flows: Vec<(FlowKey, FlowEntry)>,
    maps: &mut MapSet,
) -> Result<usize, DataplaneError> {
    let now = lb_model::dataplane::monotonic_ns();
    let table = maps.embryonic_table_mut().ok_or_else(not_loaded)?;
    let mut copied = 0;
    for (key, entry) in flows {
        if table.get(&key)?.is_none() {
            table.put(&key, entry, now)?;
            copied += 1;
        }
    }
    Ok(copied)
}

/// The reply entry of `LB_NAT_V1`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct LegacyNatEntry {
    client: Addr,
    vip: Addr,
    client_port_be: u16,
    vip_port_be: u16,
    _pad: u32,
}
const _: () = assert!(std::mem::size_of::<LegacyNatEntry>() == 40);

// SAFETY: repr(C), Copy, no padding (size asserted), every bit pattern valid.
unsafe impl aya::Pod for LegacyNatEntry {}
