//! Desired services → ordered map writes, with atomic per-service swaps.
//!
//! Order for each changed service: backends, then its new backend list and new table
//! into regions nobody reads, then the VIP entry that points at them (one atomic
//! update), then the old regions are released into quarantine. Unchanged services cost
//! nothing. Backend ids are stable for a (service, address) pair, so conntrack entries
//! keep pointing at the same backend across every change.
//!
//! Identity: each backend record carries its service and a generation, bumped whenever
//! an id goes to a new (service, address); flow entries record both, and the data
//! plane ignores an entry whose backend is no longer its own. Ids are handed out fresh
//! first, and a restarted agent rebuilds from the pinned records which ids were used
//! (and at which generation), so it neither hands out an id that draining flows still
//! use as if it were fresh nor repeats a generation.

use lb_common::Addr;
use std::{
    collections::{BTreeSet, HashMap},
    net::IpAddr,
    time::Instant,
};

use lb_common::{
    Backend, TableChunk, VipInfo, VipKey,
    maps::{
        BACKEND_F_IPV6, BACKEND_F_NO_NEW, MAX_BACKENDS, MAX_SERVICES, SERVICE_BACKEND_SLOTS,
        TABLE_CHUNK_SLOTS, TABLE_CHUNKS,
    },
};

mod filter;
mod plan;
pub use plan::{Change, Plan, Refusal, Removal};

use super::{
    DataplaneError, MapOps, MapRead, ServiceSpec, addr16, from_addr16,
    pool::{IdPool, RegionPool},
};
use crate::maglev;

/// What one service looks like in the data plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Programmed {
    /// The live VIP entry.
    pub info: VipInfo,
    /// Backends in list order.
    pub backends: Vec<IpAddr>,
    /// Backend ids in list order.
    pub backend_ids: Vec<u32>,
    /// The live table (slot → list index).
    pub table: Vec<u16>,
    /// [`maglev::digest`] of `table`, computed once when the table is built.
    digest: u64,
    spec: ServiceSpec,
}

impl Programmed {
    /// The [`maglev::digest`] of the live table: equal on every node that programmed
    /// the same backends, weights and size, so operators (and tests) can compare
    /// nodes, or a node and the model, without reading 2 × M bytes each.
    #[must_use]
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The spec it was programmed from.
    #[must_use]
    pub fn spec(&self) -> &ServiceSpec {
        &self.spec
    }
}

/// What an [`Programmer::apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Services whose VIP entry was written (new or changed).
    pub programmed: usize,
    /// Services left as they were.
    pub unchanged: usize,
    /// Services removed.
    pub removed: usize,
    /// Services that could not be programmed as given; they keep what they had.
    pub refused: Vec<Refusal>,
}

/// The control plane's view of what is programmed, and the allocators behind it.
#[derive(Debug)]
pub struct Programmer {
    services: HashMap<VipKey, Programmed>,
    backend_ids: HashMap<(VipKey, IpAddr), u32>,
    /// The record last written for each backend id ever used, kept after the id is
    /// freed: its generation decides the next owner's, and a drained backend keeps
    /// its address for the flows still pinned to it.
    records: HashMap<u32, Backend>,
    /// Removed backends (id, generation) still to be marked as taking no new flows.
    undrained: Vec<(u32, u16)>,
    service_ids: IdPool,
    backend_id_pool: IdPool,
    lists: RegionPool,
    tables: RegionPool,
    /// VIP addresses whose echo requests XDP answers.
    echo: BTreeSet<Addr>,
    answer_ping: bool,
    /// Leave services that `apply` is not given alone (see [`Programmer::keep_unlisted`]).
    keep_unlisted: bool,
    /// The VIP-address prefilter as written.
    filter: filter::Filter,
}

impl Default for Programmer {
    fn default() -> Self {
        Self {
            services: HashMap::new(),
            backend_ids: HashMap::new(),
            records: HashMap::new(),
            undrained: Vec::new(),
            service_ids: IdPool::new(MAX_SERVICES),
            backend_id_pool: IdPool::new(MAX_BACKENDS),
            lists: RegionPool::new(SERVICE_BACKEND_SLOTS, 1),
            tables: RegionPool::new(TABLE_CHUNKS * TABLE_CHUNK_SLOTS, TABLE_CHUNK_SLOTS),
            echo: BTreeSet::new(),
            answer_ping: true,
            keep_unlisted: false,
            filter: filter::Filter::default(),
        }
    }
}

impl Programmer {
    /// Whether echo requests to `dsr` VIP addresses are answered from XDP (default
    /// yes: the node does not hold the VIPs, so nothing else would answer). L7 VIPs are
    /// never answered here: the node's stack owns them.
    pub fn set_answer_ping(&mut self, on: bool) {
        self.answer_ping = on;
    }

    /// While on, [`Programmer::apply`] programs what it is given but removes nothing:
    /// a restarted agent whose services partly come from a source it has not heard
    /// from yet (etcd) must not delete them — their established flows would break.
    pub fn keep_unlisted(&mut self, on: bool) {
        self.keep_unlisted = on;
    }

    /// Writes the VIP-address prefilter for the services held now (adopted ones
    /// included): call after [`Programmer::adopt`] and before the program is attached,
    /// so a new data plane's prefilter (a new map starts empty, which passes every
    /// packet as not ours) lets the adopted VIPs' traffic through from its first
    /// packet.
    ///
    /// # Errors
    /// A map write failed.
    pub fn sync_filter(&mut self, ops: &mut impl MapOps) -> Result<(), DataplaneError> {
        let want = filter::wanted(self.services.keys());
        self.filter.write(ops, &want)
    }

    /// The programmed state of a service.
    pub fn service(&self, key: &VipKey) -> Option<&Programmed> {
        self.services.get(key)
    }

    /// Takes over what a previous agent programmed (pinned maps): its services, regions
    /// and ids are recorded as in use, so the next [`Programmer::apply`] swaps them
    /// atomically like any change and backend ids — which conntrack entries point at —
    /// stay what they were. Returns the number of services adopted.
    ///
    /// # Errors
    /// A map read failed, or the maps are inconsistent (overlapping regions).
    pub fn adopt(&mut self, maps: &impl MapRead) -> Result<usize, DataplaneError> {
        self.echo = maps.echo_addrs()?.into_iter().collect();
        let vips = maps.vips()?;
        for (key, info) in &vips {
            let name = format!("adopted service {}", info.service_id);
            let corrupt = |what: &str| DataplaneError::Invalid {
                service: name.clone(),
                problem: format!("pinned state is inconsistent: {what}; remove the pin directory"),
            };
            if !self.service_ids.reserve(info.service_id) {
                return Err(corrupt("service id used twice"));
            }
            let mut backends = Vec::with_capacity(info.list_len as usize);
            let mut backend_ids = Vec::with_capacity(info.list_len as usize);
            let mut ports = Vec::with_capacity(info.list_len as usize);
            for i in 0..info.list_len {
                let id = maps.list_entry(info.list_base + i)?;
                let backend = maps.backend(id)?;
                let addr = from_addr16(backend.addr);
                ports.push(u16::from_be(backend.port_be));
                self.backend_id_pool.reserve(id);
                self.backend_ids.insert((*key, addr), id);
                backends.push(addr);
                backend_ids.push(id);
            }
            if info.list_len > 0 && !self.lists.reserve(info.list_base, info.list_len) {
                return Err(corrupt("backend lists overlap"));
            }
            let mut table = Vec::with_capacity(info.table_size as usize);
            if info.table_size > 0 {
                if !self.tables.reserve(info.table_base, info.table_size) {
                    return Err(corrupt("tables overlap"));
                }
                let first = info.table_base / TABLE_CHUNK_SLOTS;
                for c in 0..info.table_size.div_ceil(TABLE_CHUNK_SLOTS) {
                    table.extend_from_slice(&maps.table_chunk(first + c)?.slots);
                }
                table.truncate(info.table_size as usize);
            }
            let mode = lb_common::ForwardingMode::from_u32(info.mode)
                .ok_or_else(|| corrupt("unknown forwarding mode"))?;
            let spec = ServiceSpec {
                name,
                key: *key,
                mode,
                backends: backends.clone(),
                table_size: Some(info.table_size),
                // Not recoverable from the table: the first apply reprograms the
                // service (atomically, same backend ids).
                weights: Vec::new(),
                ports,
            };
            self.services.insert(
                *key,
                Programmed {
                    info: *info,
                    backends,
                    backend_ids,
                    digest: maglev::digest(&table),
                    table,
                    spec,
                },
            );
        }
        self.adopt_records(maps, Instant::now())?;
        Ok(vips.len())
    }

    /// Reads every backend record a previous agent left: ids in use keep their
    /// record; ids used before and free now are retired (reused only after every fresh
    /// id, at the next generation), so a restart never hands out as fresh an id that
    /// draining flows may still point at.
    fn adopt_records(&mut self, maps: &impl MapRead, now: Instant) -> Result<(), DataplaneError> {
        let in_use: std::collections::HashSet<u32> = self.backend_ids.values().copied().collect();
        for id in 0..MAX_BACKENDS {
            let record = maps.backend(id)?;
            if record == Backend::default() {
                continue;
            }
            self.records.insert(id, record);
            if !in_use.contains(&id) {
                self.backend_id_pool.retire(id, now);
            }
        }
        Ok(())
    }

    /// The record last written for a backend id, if any.
    pub fn record(&self, id: u32) -> Option<&Backend> {
        self.records.get(&id)
    }

    /// Makes the data plane serve exactly `specs`: [`Programmer::plan`], then
    /// [`Programmer::apply_plan`].
    ///
    /// # Errors
    /// As [`Programmer::apply_plan`].
    pub fn apply(
        &mut self,
        ops: &mut impl MapOps,
        specs: &[ServiceSpec],
        now: Instant,
    ) -> Result<ApplyReport, DataplaneError> {
        let plan = self.plan(specs);
        self.apply_plan(ops, plan, now)
    }

    /// Writes `plan`, made by [`Programmer::plan`] from this programmer's current
    /// state: changed services first (each swapped atomically), then removals, then
    /// echo addresses. Refused services are reported, not written.
    ///
    /// # Errors
    /// The first failed write; services before it are programmed, the failing one
    /// keeps its previous state, later ones are untouched (a retry finishes the job).
    pub fn apply_plan(
        &mut self,
        ops: &mut impl MapOps,
        plan: Plan,
        now: Instant,
    ) -> Result<ApplyReport, DataplaneError> {
        // Drains a failed apply could not write yet go first.
        self.flush_drains(ops)?;
        // Prefilter bits go up before the VIP entries that need them appear.
        let adding = filter::wanted(
            self.services
                .keys()
                .chain(plan.changes.iter().map(|c| &c.spec.key)),
        );
        self.filter.grow(ops, &adding)?;
        let mut report = ApplyReport {
            unchanged: plan.unchanged,
            refused: plan.refused,
            ..ApplyReport::default()
        };
        for change in plan.changes {
            self.program(ops, change, now)?;
            report.programmed += 1;
        }
        for Removal { key, .. } in plan.removals {
            ops.delete_vip(&key)?;
            if let Some(old) = self.services.remove(&key) {
                self.release(&old, now);
                self.service_ids.free(old.info.service_id, now);
                for addr in &old.backends {
                    if let Some(id) = self.backend_ids.remove(&(key, *addr)) {
                        self.backend_id_pool.free(id, now);
                        self.drain_later(id);
                    }
                }
            }
            report.removed += 1;
        }
        self.flush_drains(ops)?;
        // And come down only once no VIP entry needs them.
        self.filter
            .write(ops, &filter::wanted(self.services.keys()))?;
        for addr in plan.echo_add.into_iter().map(addr16) {
            ops.put_echo_addr(addr)?;
            self.echo.insert(addr);
        }
        for addr in plan.echo_remove.into_iter().map(addr16) {
            ops.delete_echo_addr(addr)?;
            self.echo.remove(&addr);
        }
        Ok(report)
    }

    /// Programs one planned service: its backends, list and table into fresh regions,
    /// then its VIP entry (the atomic swap), then releases what it replaced.
    fn program(
        &mut self,
        ops: &mut impl MapOps,
        change: Change,
        now: Instant,
    ) -> Result<(), DataplaneError> {
        let Change {
            spec,
            table,
            digest,
            ..
        } = change;
        let n = spec.backends.len();
        let previous = self.services.get(&spec.key).cloned();
        // What this call allocates: handed back if a write fails, so a failed
        // reconcile and its retries leak no id and no region.
        let mut fresh = Fresh::default();
        let written = self.write_regions(ops, &spec, &table, previous.as_ref(), now, &mut fresh);
        let Written {
            service_id,
            backend_ids,
            list_base,
            table_base,
        } = match written {
            Ok(done) => done,
            Err(e) => {
                self.roll_back(spec.key, fresh, now);
                return Err(e);
            }
        };
        let info = VipInfo {
            service_id,
            mode: spec.mode as u32,
            list_base,
            list_len: n as u32,
            table_base,
            table_size: table.len() as u32,
        };
        if let Err(e) = ops.put_vip(spec.key, info) {
            self.roll_back(spec.key, fresh, now);
            return Err(e);
        }
        if let Some(old) = &previous {
            self.release(old, now);
            for addr in old.backends.iter().filter(|a| !spec.backends.contains(a)) {
                if let Some(id) = self.backend_ids.remove(&(spec.key, *addr)) {
                    self.backend_id_pool.free(id, now);
                    self.drain_later(id);
                }
            }
        }
        tracing::debug!(
            service = %spec.name,
            vip = %super::from_addr16(spec.key.addr),
            port = u16::from_be(spec.key.port_be),
            proto = spec.key.proto,
            backends = spec.backends.len(),
            slots = table.len(),
            digest = %format_args!("{digest:016x}"),
            "service programmed"
        );
        self.services.insert(
            spec.key,
            Programmed {
                info,
                backends: spec.backends.clone(),
                backend_ids,
                table,
                digest,
                spec,
            },
        );
        Ok(())
    }

    /// Allocates what `spec` needs beyond what `previous` holds (recording it in
    /// `fresh`) and writes its backends, list and table — nothing a packet reads yet.
    fn write_regions(
        &mut self,
        ops: &mut impl MapOps,
        spec: &ServiceSpec,
        table: &[u16],
        previous: Option<&Programmed>,
        now: Instant,
        fresh: &mut Fresh,
    ) -> Result<Written, DataplaneError> {
        let n = spec.backends.len();
        let service_id = match previous {
            Some(p) => p.info.service_id,
            None => {
                let id = self
                    .service_ids
                    .alloc(now)
                    .ok_or_else(|| exhausted(spec, "service ids", MAX_SERVICES))?;
                fresh.service_id = Some(id);
                id
            }
        };
        let mut backend_ids = Vec::with_capacity(n);
        for (i, &addr) in spec.backends.iter().enumerate() {
            let (id, generation) = match self.backend_ids.get(&(spec.key, addr)) {
                Some(&id) => (id, self.records.get(&id).map_or(0, |r| r.generation)),
                None => {
                    let id = self
                        .backend_id_pool
                        .alloc(now)
                        .ok_or_else(|| exhausted(spec, "backend ids", MAX_BACKENDS))?;
                    self.backend_ids.insert((spec.key, addr), id);
                    fresh.backends.push(addr);
                    // A new owner of an id used before: flows of the old owner must
                    // not match this one.
                    let generation = self
                        .records
                        .get(&id)
                        .map_or(0, |r| r.generation.wrapping_add(1));
                    (id, generation)
                }
            };
            let mut flags = if addr.is_ipv6() { BACKEND_F_IPV6 } else { 0 };
            if spec.weights.get(i) == Some(&0) {
                flags |= BACKEND_F_NO_NEW;
            }
            let record = Backend {
                addr: addr16(addr),
                flags,
                port_be: spec.ports.get(i).copied().unwrap_or(0).to_be(),
                service_id: service_id as u16,
                generation,
            };
            ops.put_backend(id, record)?;
            self.records.insert(id, record);
            backend_ids.push(id);
        }
        let list_base = if n == 0 {
            0
        } else {
            let base = self
                .lists
                .alloc(n as u32, now)
                .ok_or_else(|| exhausted(spec, "backend-list slots", SERVICE_BACKEND_SLOTS))?;
            fresh.list = Some((base, n as u32));
            base
        };
        for (i, &id) in backend_ids.iter().enumerate() {
            ops.put_list_entry(list_base + i as u32, id)?;
        }
        let size = table.len() as u32;
        let table_base = if size == 0 {
            0
        } else {
            let base = self
                .tables
                .alloc(size, now)
                .ok_or_else(|| exhausted(spec, "table slots", TABLE_CHUNKS * TABLE_CHUNK_SLOTS))?;
            fresh.table = Some((base, size));
            base
        };
        for (c, slots) in table.chunks(TABLE_CHUNK_SLOTS as usize).enumerate() {
            let mut chunk = TableChunk::default();
            chunk.slots[..slots.len()].copy_from_slice(slots);
            ops.put_table_chunk(table_base / TABLE_CHUNK_SLOTS + c as u32, chunk)?;
        }
        Ok(Written {
            service_id,
            backend_ids,
            list_base,
            table_base,
        })
    }

    /// Queues a removed backend to be marked as taking no new flows: its established
    /// flows continue (its record stays until the id has a new owner), and a SYN that
    /// finds one of its stale entries chooses again. The write happens in
    /// [`Programmer::flush_drains`], so a failing write loses no bookkeeping: the id is
    /// already freed, and the next apply writes the mark.
    fn drain_later(&mut self, id: u32) {
        if let Some(record) = self.records.get(&id) {
            self.undrained.push((id, record.generation));
        }
    }

    /// Writes the pending no-new-flows marks, skipping ids that have a new owner
    /// (another generation) since.
    fn flush_drains(&mut self, ops: &mut impl MapOps) -> Result<(), DataplaneError> {
        while let Some(&(id, generation)) = self.undrained.last() {
            if let Some(record) = self.records.get_mut(&id)
                && record.generation == generation
                && record.flags & BACKEND_F_NO_NEW == 0
            {
                let marked = Backend {
                    flags: record.flags | BACKEND_F_NO_NEW,
                    ..*record
                };
                ops.put_backend(id, marked)?;
                *record = marked;
            }
            self.undrained.pop();
        }
        Ok(())
    }

    /// Hands back what a failed [`Programmer::program`] of `key` allocated. Nothing
    /// points at it (the VIP entry was not written), but it goes through quarantine
    /// like anything freed.
    fn roll_back(&mut self, key: VipKey, fresh: Fresh, now: Instant) {
        if let Some(id) = fresh.service_id {
            self.service_ids.free(id, now);
        }
        for addr in fresh.backends {
            if let Some(id) = self.backend_ids.remove(&(key, addr)) {
                self.backend_id_pool.free(id, now);
            }
        }
        if let Some((base, len)) = fresh.list {
            self.lists.free(base, len, now);
        }
        if let Some((base, len)) = fresh.table {
            self.tables.free(base, len, now);
        }
    }

    /// Ids and pool units in use: `(service ids, backend ids, list slots, table
    /// slots)`. A reconcile that fails and is retried must not make them grow.
    pub fn pool_usage(&self) -> (usize, usize, u32, u32) {
        (
            self.service_ids.in_use(),
            self.backend_id_pool.in_use(),
            self.lists.in_use(),
            self.tables.in_use(),
        )
    }

    /// Quarantines a replaced or removed service's regions.
    fn release(&mut self, old: &Programmed, now: Instant) {
        if old.info.list_len > 0 {
            self.lists.free(old.info.list_base, old.info.list_len, now);
        }
        if old.info.table_size > 0 {
            self.tables
                .free(old.info.table_base, old.info.table_size, now);
        }
    }
}

/// What [`Programmer::write_regions`] wrote, for the VIP entry that publishes it.
#[derive(Debug)]
struct Written {
    service_id: u32,
    backend_ids: Vec<u32>,
    list_base: u32,
    table_base: u32,
}

/// What one [`Programmer::program`] call allocated so far.
#[derive(Debug, Default)]
struct Fresh {
    service_id: Option<u32>,
    /// Backends that got a new id.
    backends: Vec<IpAddr>,
    /// `(base, len)` of the new backend list.
    list: Option<(u32, u32)>,
    /// `(base, size)` of the new table.
    table: Option<(u32, u32)>,
}

fn exhausted(spec: &ServiceSpec, what: &'static str, capacity: u32) -> DataplaneError {
    DataplaneError::Exhausted {
        what,
        service: spec.name.clone(),
        detail: format!("capacity {capacity}"),
    }
}

#[cfg(test)]
mod tests;
