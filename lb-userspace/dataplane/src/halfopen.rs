//! The agent's and `lbctl`'s handle to the half-open (embryonic) table
//! (`lb_common::halfopen`): its array of buckets, with the seed and mask the data plane
//! was loaded with, so a key is looked for in the bucket the data plane wrote it to.
//!
//! The table is created `BPF_F_MMAPABLE` and read and written here through a shared
//! mapping of its memory, a way at a time with the data plane's own protocol (the
//! check word written last, a way taken only when its check matches): a write here
//! never rewrites the other ways of a bucket, so it cannot lose a flow the data plane
//! wrote into the same bucket meanwhile, and a walk of the whole table reads memory
//! instead of making a `bpf(2)` call per bucket.

use std::ptr::NonNull;

use aya::maps::{Array, MapData};
use lb_common::{
    FlowEntry, FlowKey,
    halfopen::{self, Bucket, WAYS, Way},
    maps::names,
};
use lb_model::dataplane::DataplaneError;

use crate::maps::map_error;

/// The half-open table, with the seed its buckets were filled with.
pub struct HalfOpenTable {
    buckets: Array<MapData, Bucket>,
    memory: Mapping,
    seed: u32,
}

/// The table's memory, mapped shared.
struct Mapping {
    base: NonNull<Bucket>,
    buckets: u32,
    len: usize,
}

// SAFETY: the mapping is memory the kernel keeps alive while it is mapped, shared by
// design with the data plane on every CPU; it is only read and written a word or a
// way at a time with volatile accesses, which any thread may do.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(map: &MapData, buckets: u32) -> Result<Self, DataplaneError> {
        let bytes = buckets as usize * size_of::<Bucket>();
        let len = bytes.next_multiple_of(rustix::param::page_size());
        // SAFETY: a new shared mapping of the map's fd at no fixed address; the kernel
        // checks the length against the map's memory.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                map.fd(),
                0,
            )
        }
        .map_err(|e| DataplaneError::Program {
            action: format!(
                "mapping {} (a table created BPF_F_MMAPABLE)",
                names::EMBRYONIC
            ),
            source: Box::new(std::io::Error::from(e)),
        })?;
        let base = NonNull::new(ptr.cast::<Bucket>()).ok_or(DataplaneError::Missing {
            what: "map",
            name: names::EMBRYONIC,
        })?;
        Ok(Self { base, buckets, len })
    }

    /// Way `way` of bucket `index`; both are in range (the callers mask and bound them).
    fn way(&self, index: u32, way: usize) -> *mut Way {
        assert!(
            index < self.buckets && way < WAYS,
            "way {way} of bucket {index}"
        );
        // SAFETY: in range (asserted), inside the mapping.
        unsafe { (&raw mut (*self.base.as_ptr().add(index as usize)).ways[way]).cast() }
    }

    /// A copy of bucket `index`, a way at a time.
    fn read(&self, index: u32) -> Bucket {
        let mut b = Bucket::default();
        for (i, w) in b.ways.iter_mut().enumerate() {
            // SAFETY: a way of the mapping (see `way`); the data plane may be writing
            // it, which a copy's check then tells.
            *w = unsafe { std::ptr::read_volatile(self.way(index, i)) };
        }
        b
    }

    /// Writes `way` into way `at` of bucket `index` as the data plane does: the check
    /// word last.
    fn write(&self, index: u32, at: usize, way: &Way) {
        let p = self.way(index, at);
        // SAFETY: a way of the mapping (see `way`); word-sized volatile stores.
        unsafe {
            std::ptr::write_volatile(&raw mut (*p).key, way.key);
            std::ptr::write_volatile(&raw mut (*p).entry, way.entry);
            std::ptr::write_volatile(&raw mut (*p).stamp, way.stamp);
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            std::ptr::write_volatile(&raw mut (*p).check, way.check);
        }
    }

    /// Frees way `at` of bucket `index` if it still holds `check`.
    fn free(&self, index: u32, at: usize, check: u32) {
        let p = self.way(index, at);
        // SAFETY: as in `write`.
        unsafe {
            let c = &raw mut (*p).check;
            if std::ptr::read_volatile(c) == check {
                std::ptr::write_volatile(c, 0);
            }
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
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
        Self::with_seed(buckets, seed)
    }

    /// The table, filled with `seed`, mapped.
    fn with_seed(buckets: Array<MapData, Bucket>, seed: u32) -> Result<Self, DataplaneError> {
        if !buckets.len().is_power_of_two() {
            return Err(DataplaneError::Invalid {
                service: names::EMBRYONIC.into(),
                problem: format!("{} buckets is not a power of two", buckets.len()),
            });
        }
        let memory = {
            use aya::maps::IterableMap as _;
            Mapping::new(buckets.map(), buckets.len())?
        };
        Ok(Self {
            buckets,
            memory,
            seed,
        })
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
        let buckets = crate::maps::reopen_as(self.map_data(), names::EMBRYONIC)?;
        Self::with_seed(buckets, self.seed)
    }

    /// The bucket a key's flow is written to.
    pub fn bucket_index(&self, key: &FlowKey) -> u32 {
        halfopen::bucket_of(self.seed, self.buckets.len() - 1, key)
    }

    /// A bucket as the data plane wrote it.
    ///
    /// # Errors
    /// `index` is past the table.
    pub fn bucket(&self, index: u32) -> Result<Bucket, DataplaneError> {
        self.check_index(index)?;
        Ok(self.memory.read(index))
    }

    /// Replaces a bucket's ways, checks and all (fixtures stage torn or foreign ways
    /// with it), each way check word last.
    ///
    /// # Errors
    /// `index` is past the table.
    pub fn set_bucket(&mut self, index: u32, bucket: Bucket) -> Result<(), DataplaneError> {
        self.check_index(index)?;
        for (at, way) in bucket.ways.iter().enumerate() {
            self.memory.write(index, at, way);
        }
        Ok(())
    }

    fn check_index(&self, index: u32) -> Result<(), DataplaneError> {
        if index < self.buckets.len() {
            Ok(())
        } else {
            Err(DataplaneError::Invalid {
                service: names::EMBRYONIC.into(),
                problem: format!("bucket {index} of {}", self.buckets.len()),
            })
        }
    }

    /// The entry of a half-open flow.
    ///
    /// # Errors
    /// None today (the table is mapped memory); kept for the other tables' shape.
    pub fn get(&self, key: &FlowKey) -> Result<Option<FlowEntry>, DataplaneError> {
        let bucket = self.memory.read(self.bucket_index(key));
        Ok(bucket
            .ways
            .iter()
            .find(|w| halfopen::holds(self.seed, w, key))
            .map(|w| w.entry))
    }

    /// Writes a half-open flow as the data plane would at `now_ns` (monotonic): into
    /// the way holding its key, else a free way, else the oldest; the bucket's other
    /// ways are not touched.
    ///
    /// # Errors
    /// None today (the table is mapped memory).
    pub fn put(
        &mut self,
        key: &FlowKey,
        entry: FlowEntry,
        now_ns: u64,
    ) -> Result<(), DataplaneError> {
        let index = self.bucket_index(key);
        let bucket = self.memory.read(index);
        let stamp = halfopen::stamp(now_ns);
        let at = bucket
            .ways
            .iter()
            .position(|w| halfopen::holds(self.seed, w, key))
            .unwrap_or_else(|| halfopen::victim(bucket.ways.map(|w| (w.check, w.stamp)), stamp));
        self.memory
            .write(index, at, &halfopen::way(self.seed, key, &entry, stamp));
        Ok(())
    }

    /// Removes a half-open flow (absent already is success).
    ///
    /// # Errors
    /// None today (the table is mapped memory).
    pub fn remove(&mut self, key: &FlowKey) -> Result<(), DataplaneError> {
        let index = self.bucket_index(key);
        let bucket = self.memory.read(index);
        for (at, w) in bucket.ways.iter().enumerate() {
            if halfopen::holds(self.seed, w, key) {
                self.memory.free(index, at, w.check);
            }
        }
        Ok(())
    }

    /// Calls `each` for every half-open flow (the table changes meanwhile, so this is
    /// a close snapshot, not an atomic one).
    ///
    /// # Errors
    /// None today (the table is mapped memory).
    pub fn walk(&self, mut each: impl FnMut(FlowKey, FlowEntry)) -> Result<(), DataplaneError> {
        for index in 0..self.buckets.len() {
            for w in self.memory.read(index).ways {
                if w.is_whole(self.seed) {
                    each(w.key, w.entry);
                }
            }
        }
        Ok(())
    }
}
