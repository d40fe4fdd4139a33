//! The agent's and `lbctl`'s handle to the half-open (embryonic) table
//! (`lb_common::halfopen`): its array of buckets, with the seed and mask the data plane
//! was loaded with, so a key is looked for in the bucket the data plane wrote it to.
//!
//! Writes go through `bpf(2)` a bucket at a time: a write here rewrites the bucket's
//! other ways with what it read a moment before, so a flow the data plane wrote into
//! the same bucket in between is lost (its next packet then goes by the table, see
//! `lookup::dsr`). The agent writes only to remove one flow (`lbctl`, benchmarks) and to
//! copy flows in at an upgrade, before and just after the new program attaches.

use aya::maps::{Array, Map, MapData};
use lb_common::{
    FlowEntry, FlowKey,
    halfopen::{self, Bucket, WAYS},
    maps::names,
};
use lb_model::dataplane::DataplaneError;

use crate::maps::map_error;

/// The half-open table, with the seed its buckets were filled with.
pub struct HalfOpenTable {
    buckets: Array<MapData, Bucket>,
    seed: u32,
}

impl HalfOpenTable {
    /// The table and its seed (`LB_CT_EMBRYONIC_SEED_V1` at index 0).
    ///
    /// # Errors
    /// The seed map cannot be read, or the table's size is not a power of two (not a
    /// table this release's data plane could have written).
    pub fn new(
        buckets: Array<MapData, Bucket>,
        seed: &Array<MapData, u32>,
    ) -> Result<Self, DataplaneError> {
        let seed = seed
            .get(&0, 0)
            .map_err(map_error("get", names::EMBRYONIC_SEED))?;
        if !buckets.len().is_power_of_two() {
            return Err(DataplaneError::Invalid {
                service: names::EMBRYONIC.into(),
                problem: format!("{} buckets is not a power of two", buckets.len()),
            });
        }
        Ok(Self { buckets, seed })
    }

    /// The table's map (to open it again by id).
    pub(crate) fn map_data(&self) -> &MapData {
        use aya::maps::IterableMap as _;
        self.buckets.map()
    }

    /// The seed of the bucket hash.
    pub fn seed(&self) -> u32 {
        self.seed
    }

    /// Flows the table holds at most.
    pub fn capacity(&self) -> u64 {
        u64::from(self.buckets.len()) * WAYS as u64
    }

    /// A second handle to the same table, opened by id.
    ///
    /// # Errors
    /// The kernel refused a new handle.
    pub fn reopen(&self) -> Result<Self, DataplaneError> {
        use aya::maps::IterableMap as _;
        let name = names::EMBRYONIC;
        let id = self
            .buckets
            .map()
            .info()
            .map_err(map_error("reopen", name))?
            .id();
        let data = MapData::from_id(id).map_err(map_error("reopen", name))?;
        let map = Map::from_map_data(data).map_err(map_error("reopen", name))?;
        Ok(Self {
            buckets: Array::try_from(map).map_err(map_error("reopen", name))?,
            seed: self.seed,
        })
    }

    /// The bucket a key's flow is written to.
    pub fn bucket_index(&self, key: &FlowKey) -> u32 {
        halfopen::bucket_of(self.seed, self.buckets.len() - 1, key)
    }

    /// A bucket as the data plane wrote it.
    ///
    /// # Errors
    /// The map read failed (or `index` is past the table).
    pub fn bucket(&self, index: u32) -> Result<Bucket, DataplaneError> {
        self.buckets
            .get(&index, 0)
            .map_err(map_error("get", names::EMBRYONIC))
    }

    /// Replaces a bucket whole, checks and all (fixtures stage torn or foreign ways
    /// with it; see the module's note on writes).
    ///
    /// # Errors
    /// The map update failed.
    pub fn set_bucket(&mut self, index: u32, bucket: Bucket) -> Result<(), DataplaneError> {
        self.buckets
            .set(index, bucket, 0)
            .map_err(map_error("set", names::EMBRYONIC))
    }

    /// The entry of a half-open flow.
    ///
    /// # Errors
    /// The map read failed.
    pub fn get(&self, key: &FlowKey) -> Result<Option<FlowEntry>, DataplaneError> {
        let bucket = self.bucket(self.bucket_index(key))?;
        Ok(bucket
            .ways
            .iter()
            .find(|w| halfopen::holds(self.seed, w, key))
            .map(|w| w.entry))
    }

    /// Writes a half-open flow as the data plane would at `now_ns` (monotonic): into
    /// the way holding its key, else a free way, else the oldest.
    ///
    /// # Errors
    /// The map update failed.
    pub fn put(
        &mut self,
        key: &FlowKey,
        entry: FlowEntry,
        now_ns: u64,
    ) -> Result<(), DataplaneError> {
        let index = self.bucket_index(key);
        let mut bucket = self.bucket(index)?;
        let stamp = halfopen::stamp(now_ns);
        let at = bucket
            .ways
            .iter()
            .position(|w| halfopen::holds(self.seed, w, key))
            .unwrap_or_else(|| halfopen::victim(bucket.ways.map(|w| (w.check, w.stamp)), stamp));
        bucket.ways[at] = halfopen::way(self.seed, key, &entry, stamp);
        self.set_bucket(index, bucket)
    }

    /// Removes a half-open flow (absent already is success).
    ///
    /// # Errors
    /// The map update failed.
    pub fn remove(&mut self, key: &FlowKey) -> Result<(), DataplaneError> {
        let index = self.bucket_index(key);
        let mut bucket = self.bucket(index)?;
        let mut changed = false;
        for w in &mut bucket.ways {
            if halfopen::holds(self.seed, w, key) {
                w.check = 0;
                changed = true;
            }
        }
        if !changed {
            return Ok(());
        }
        self.set_bucket(index, bucket)
    }

    /// Calls `each` for every half-open flow (one read per bucket; the table changes
    /// meanwhile, so this is a close snapshot, not an atomic one).
    ///
    /// # Errors
    /// A map read failed.
    pub fn walk(&self, mut each: impl FnMut(FlowKey, FlowEntry)) -> Result<(), DataplaneError> {
        for index in 0..self.buckets.len() {
            for w in self.bucket(index)?.ways {
                if halfopen::holds(self.seed, &w, &w.key) {
                    each(w.key, w.entry);
                }
            }
        }
        Ok(())
    }
}
