//! Allocation of regions in the data plane's shared pools (backend lists, tables) and of
//! small integer ids (services, backends).
//!
//! Freed space is quarantined before reuse: a packet that read a service's old
//! `VipInfo` just before the swap may still index the old region for the rest of its
//! program run, so a region must not be rewritten the moment it is freed.

use std::{
    collections::{HashSet, VecDeque},
    time::{Duration, Instant},
};

/// How long freed regions and ids stay untouched: far longer than any program run.
pub const QUARANTINE: Duration = Duration::from_secs(2);

/// A first-fit allocator over `[0, capacity)` in units of `align`.
#[derive(Debug)]
pub struct RegionPool {
    align: u32,
    /// Free extents (start, len), sorted by start, coalesced.
    free: Vec<(u32, u32)>,
    /// Freed extents and when they may be reused.
    quarantined: Vec<(u32, u32, Instant)>,
    /// Units allocated or reserved and not freed since.
    in_use: u32,
}

impl RegionPool {
    /// A pool of `capacity` units handed out in multiples of `align`.
    pub fn new(capacity: u32, align: u32) -> Self {
        let usable = capacity - capacity % align;
        Self {
            align,
            free: vec![(0, usable)],
            quarantined: Vec::new(),
            in_use: 0,
        }
    }

    /// Allocates `len` units (rounded up to the alignment), or `None` when full.
    pub fn alloc(&mut self, len: u32, now: Instant) -> Option<u32> {
        self.release_quarantined(now);
        let len = len.div_ceil(self.align).max(1) * self.align;
        let pos = self.free.iter().position(|&(_, l)| l >= len)?;
        let (start, l) = self.free[pos];
        if l == len {
            self.free.remove(pos);
        } else {
            self.free[pos] = (start + len, l - len);
        }
        self.in_use += len;
        Some(start)
    }

    /// Returns a region; it becomes reusable after [`QUARANTINE`].
    pub fn free(&mut self, start: u32, len: u32, now: Instant) {
        let len = len.div_ceil(self.align).max(1) * self.align;
        self.in_use = self.in_use.saturating_sub(len);
        self.quarantined.push((start, len, now + QUARANTINE));
    }

    /// Marks `[start, start + len)` (rounded to the alignment) as in use: for adopting
    /// regions a previous agent allocated. Returns false if any part was not free.
    pub fn reserve(&mut self, start: u32, len: u32) -> bool {
        let len = len.div_ceil(self.align).max(1) * self.align;
        let end = start + len;
        let Some(pos) = self
            .free
            .iter()
            .position(|&(s, l)| s <= start && end <= s + l)
        else {
            return false;
        };
        let (s, l) = self.free.remove(pos);
        let mut at = pos;
        if s < start {
            self.free.insert(at, (s, start - s));
            at += 1;
        }
        if end < s + l {
            self.free.insert(at, (end, s + l - end));
        }
        self.in_use += len;
        true
    }

    /// Units allocated (or reserved) and not freed: what a leak would make grow.
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Units currently free (not counting quarantined ones).
    pub fn available(&self) -> u32 {
        self.free.iter().map(|&(_, l)| l).sum()
    }

    fn release_quarantined(&mut self, now: Instant) {
        let (ready, waiting): (Vec<_>, Vec<_>) = self
            .quarantined
            .drain(..)
            .partition(|&(_, _, at)| at <= now);
        self.quarantined = waiting;
        for (start, len, _) in ready {
            self.insert_free(start, len);
        }
    }

    fn insert_free(&mut self, start: u32, len: u32) {
        let pos = self.free.partition_point(|&(s, _)| s < start);
        self.free.insert(pos, (start, len));
        // Coalesce with the next, then the previous extent.
        if pos + 1 < self.free.len() && self.free[pos].0 + self.free[pos].1 == self.free[pos + 1].0
        {
            self.free[pos].1 += self.free[pos + 1].1;
            self.free.remove(pos + 1);
        }
        if pos > 0 && self.free[pos - 1].0 + self.free[pos - 1].1 == self.free[pos].0 {
            self.free[pos - 1].1 += self.free[pos].1;
            self.free.remove(pos);
        }
    }
}

/// Ids `0..limit`, fresh ones first, freed ones reused oldest-first after quarantine.
///
/// Fresh-first means an id is reused only after every other id has been handed out
/// once, so the id a draining flow points at stays its own for as long as possible;
/// when it is reused anyway, the backend generation (see the programmer) keeps old
/// flow entries from reaching the new owner.
#[derive(Debug)]
pub struct IdPool {
    next: u32,
    limit: u32,
    freed: VecDeque<(u32, Instant)>,
    /// Ids adopted from a previous agent, skipped when handing out fresh ones.
    reserved: HashSet<u32>,
    /// Ids an earlier agent used and freed: not fresh, they wait in `freed`.
    retired: HashSet<u32>,
    /// Ids handed out or reserved and not freed since.
    in_use: usize,
}

impl IdPool {
    /// Ids below `limit`.
    pub fn new(limit: u32) -> Self {
        Self {
            next: 0,
            limit,
            freed: VecDeque::new(),
            reserved: HashSet::new(),
            retired: HashSet::new(),
            in_use: 0,
        }
    }

    /// Marks an id as in use (adopted). Returns false if it was reserved already.
    pub fn reserve(&mut self, id: u32) -> bool {
        let fresh = id < self.limit && self.reserved.insert(id);
        self.in_use += usize::from(fresh);
        fresh
    }

    /// A free id, or `None` when all are taken or quarantined.
    pub fn alloc(&mut self, now: Instant) -> Option<u32> {
        let id = self.take(now)?;
        self.in_use += 1;
        Some(id)
    }

    fn take(&mut self, now: Instant) -> Option<u32> {
        while self.next < self.limit {
            self.next += 1;
            let id = self.next - 1;
            if !self.reserved.contains(&id) && !self.retired.contains(&id) {
                return Some(id);
            }
        }
        match self.freed.front() {
            Some(&(id, at)) if at <= now => {
                self.freed.pop_front();
                Some(id)
            }
            _ => None,
        }
    }

    /// Marks an id that an earlier agent used and nothing uses now: it is not handed
    /// out as fresh, and waits in the freed queue (behind the ones already there) as
    /// if freed at `freed_at`. Returns false if the id was in use or out of range.
    pub fn retire(&mut self, id: u32, freed_at: Instant) -> bool {
        if id >= self.limit || !self.reserved.insert(id) {
            return false;
        }
        self.reserved.remove(&id);
        self.retired.insert(id);
        self.freed.push_back((id, freed_at + QUARANTINE));
        true
    }

    /// Returns an id.
    pub fn free(&mut self, id: u32, now: Instant) {
        self.reserved.remove(&id);
        self.in_use = self.in_use.saturating_sub(1);
        self.freed.push_back((id, now + QUARANTINE));
    }

    /// Ids handed out (or reserved) and not freed: what a leak would make grow.
    pub fn in_use(&self) -> usize {
        self.in_use
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_and_reused_only_after_quarantine() {
        let t0 = Instant::now();
        let mut pool = RegionPool::new(256, 32);
        let a = pool.alloc(40, t0).expect("a");
        let b = pool.alloc(32, t0).expect("b");
        assert_eq!((a, b), (0, 64));
        assert_eq!(pool.available(), 256 - 96);
        pool.free(a, 40, t0);
        assert_eq!(
            pool.alloc(64, t0),
            Some(96),
            "quarantined space is not reused"
        );
        let later = t0 + QUARANTINE;
        assert_eq!(pool.alloc(64, later), Some(0), "reused after quarantine");
    }

    #[test]
    fn freed_neighbours_coalesce() {
        let t0 = Instant::now();
        let mut pool = RegionPool::new(96, 32);
        let a = pool.alloc(32, t0).expect("a");
        let b = pool.alloc(32, t0).expect("b");
        let c = pool.alloc(32, t0).expect("c");
        assert_eq!(pool.alloc(1, t0), None, "full");
        pool.free(a, 32, t0);
        pool.free(c, 32, t0);
        pool.free(b, 32, t0);
        assert_eq!(pool.alloc(96, t0 + QUARANTINE), Some(0), "one extent again");
    }

    #[test]
    fn reserved_regions_and_ids_are_skipped() {
        let t0 = Instant::now();
        let mut pool = RegionPool::new(256, 32);
        assert!(pool.reserve(64, 40));
        assert!(!pool.reserve(96, 1), "already taken");
        assert_eq!(pool.alloc(64, t0), Some(0));
        assert_eq!(pool.alloc(32, t0), Some(128));
        let mut ids = IdPool::new(4);
        assert!(ids.reserve(0) && ids.reserve(2));
        assert_eq!(
            (ids.alloc(t0), ids.alloc(t0), ids.alloc(t0)),
            (Some(1), Some(3), None)
        );
    }

    #[test]
    fn retired_ids_are_reused_only_after_every_fresh_one() {
        let t0 = Instant::now();
        let mut ids = IdPool::new(4);
        assert!(ids.reserve(0));
        assert!(ids.retire(2, t0));
        assert!(!ids.retire(0, t0), "in use");
        assert!(!ids.retire(9, t0), "out of range");
        let later = t0 + QUARANTINE;
        assert_eq!(
            (ids.alloc(later), ids.alloc(later), ids.alloc(later)),
            (Some(1), Some(3), Some(2)),
            "fresh 1 and 3 first, then the retired 2"
        );
        assert_eq!(ids.alloc(later), None);
    }

    #[test]
    fn ids_prefer_fresh_then_oldest_freed() {
        let t0 = Instant::now();
        let mut ids = IdPool::new(2);
        assert_eq!(ids.alloc(t0), Some(0));
        assert_eq!(ids.alloc(t0), Some(1));
        ids.free(1, t0);
        ids.free(0, t0);
        assert_eq!(ids.alloc(t0), None, "quarantined");
        assert_eq!(ids.alloc(t0 + QUARANTINE), Some(1));
        assert_eq!(ids.alloc(t0 + QUARANTINE), Some(0));
    }
}
