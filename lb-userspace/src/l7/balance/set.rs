//! An endpoint set: the endpoints a route balances over, their weights, and the
//! per-endpoint counters that outlive set updates.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::SystemTime,
};

use crate::fadein::{FadeIn, WEIGHT_SCALE, age};

/// Counters of one endpoint, shared by every set and route that lists it, so in-flight
/// counts survive reloads and endpoint updates.
#[derive(Debug)]
pub struct EndpointStats {
    /// Requests sent and not yet answered.
    pub inflight: AtomicU32,
    /// Requests sent (attempts, retries included).
    pub requests: AtomicU64,
    /// Attempts that failed to connect or timed out.
    pub failures: AtomicU64,
    /// When this process first saw the endpoint: the ramp start for `fadeIn` routes
    /// without an `endpointCreated`.
    pub first_seen: SystemTime,
}

impl EndpointStats {
    fn new(now: SystemTime) -> Self {
        Self {
            inflight: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            first_seen: now,
        }
    }

    /// Counts a request to this endpoint until the guard drops.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }
}

/// A request in flight to an endpoint; dropping it ends the count.
#[derive(Debug)]
pub struct InFlight(Arc<EndpointStats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Endpoint counters by authority (`host:port`).
#[derive(Debug, Default)]
pub struct Registry {
    stats: Mutex<HashMap<String, Arc<EndpointStats>>>,
}

impl Registry {
    /// The counters of `authority`, created (first seen `now`) if new.
    pub fn stats(&self, authority: &str, now: SystemTime) -> Arc<EndpointStats> {
        let mut map = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            map.entry(authority.to_owned())
                .or_insert_with(|| Arc::new(EndpointStats::new(now))),
        )
    }

    /// Forgets endpoints no set holds any more (their counters restart if they return).
    pub fn prune(&self) {
        let mut map = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|_, s| Arc::strong_count(s) > 1);
    }

    /// `(authority, in flight, requests, failures)` of every known endpoint.
    pub fn snapshot(&self) -> Vec<(String, u32, u64, u64)> {
        let map = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<_> = map
            .iter()
            .map(|(a, s)| {
                (
                    a.clone(),
                    s.inflight.load(Ordering::Relaxed),
                    s.requests.load(Ordering::Relaxed),
                    s.failures.load(Ordering::Relaxed),
                )
            })
            .collect();
        out.sort();
        out
    }
}

/// One endpoint of a set.
#[derive(Debug)]
pub struct Endpoint {
    /// `host:port`, as requests are sent to it.
    pub authority: Arc<str>,
    /// Weight (> 0; health and the service's fade-in already applied by the agent).
    pub weight: u32,
    /// Start of its `fadeIn` ramp.
    pub created: SystemTime,
    /// Shared counters.
    pub stats: Arc<EndpointStats>,
    /// Per-endpoint seed of consistent hashing (hash of the authority).
    pub(super) seed: u64,
}

/// What a set is built from: authority, weight, and creation time if known.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointSpec {
    /// `host:port`.
    pub authority: String,
    /// Weight; 0 leaves the endpoint out (unhealthy or drained).
    pub weight: u32,
    /// Creation time (`endpointCreated`), else first sight.
    pub created: Option<SystemTime>,
}

/// The endpoints of one route or service, immutable once built: updates build a new
/// set and swap it in whole.
#[derive(Debug, Default)]
pub struct EndpointSet {
    pub(super) endpoints: Box<[Endpoint]>,
    /// Prefix sums of the static weights (`cumulative[i]` = sum of weights before `i`,
    /// scaled by [`WEIGHT_SCALE`]); lets weighted picks binary-search.
    pub(super) cumulative: Box<[u64]>,
    pub(super) total: u64,
    /// All static weights equal: plain modulo picks.
    pub(super) uniform: bool,
    /// The route's fade-in ramp, if any endpoint is on it.
    pub(super) fade: Option<FadeIn>,
    /// When the last ramp ends; `None` when nothing fades (then fade-in costs nothing).
    pub(super) fade_ends: Option<SystemTime>,
}

impl EndpointSet {
    /// Builds a set; endpoints of weight 0 are left out. `fade` is the route's
    /// `fadeIn`: endpoints that started later than the set's earliest fade in from
    /// their start (endpoints that all started together do not fade: nobody would
    /// carry their load).
    pub fn build(
        specs: &[EndpointSpec],
        fade: Option<FadeIn>,
        registry: &Registry,
        now: SystemTime,
    ) -> Self {
        let mut endpoints = Vec::with_capacity(specs.len());
        for s in specs.iter().filter(|s| s.weight > 0) {
            let stats = registry.stats(&s.authority, now);
            let created = s.created.unwrap_or(stats.first_seen);
            endpoints.push(Endpoint {
                seed: super::rng::mix(super::rng::fnv(
                    super::rng::FNV_START,
                    s.authority.as_bytes(),
                )),
                authority: Arc::from(s.authority.as_str()),
                weight: s.weight,
                created,
                stats,
            });
        }
        let mut cumulative = Vec::with_capacity(endpoints.len());
        let mut total = 0u64;
        for e in &endpoints {
            cumulative.push(total);
            total += u64::from(e.weight) * u64::from(WEIGHT_SCALE);
        }
        let uniform = endpoints.windows(2).all(|w| w[0].weight == w[1].weight);
        let fade_ends = fade.and_then(|f| {
            let earliest = endpoints.iter().map(|e| e.created).min()?;
            let latest = endpoints.iter().map(|e| e.created).max()?;
            (latest > earliest)
                .then(|| latest + f.window)
                .filter(|end| *end > now)
        });
        Self {
            endpoints: endpoints.into_boxed_slice(),
            cumulative: cumulative.into_boxed_slice(),
            total,
            uniform,
            fade,
            fade_ends,
        }
    }

    /// The endpoints, in the order they were given.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// Number of endpoints.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// Whether a ramp still runs at `now`.
    #[inline]
    pub fn fading(&self, now: SystemTime) -> bool {
        self.fade_ends.is_some_and(|end| now < end)
    }

    /// The effective weight of endpoint `i` at `now`, in [`WEIGHT_SCALE`] units:
    /// `w · max(min_weight, (age/window)^exponent)`, never 0.
    #[inline]
    pub fn weight_at(&self, i: usize, fading: bool, now: SystemTime) -> u64 {
        let e = &self.endpoints[i];
        let full = u64::from(e.weight) * u64::from(WEIGHT_SCALE);
        match (&self.fade, fading) {
            (Some(f), true) => ((full as f64 * f.fraction(age(e.created, now))) as u64).max(1),
            _ => full,
        }
    }

    /// The endpoint whose weight interval holds `x`, where `x` is below the total
    /// weight (static weights: binary search of the prefix sums; fading: a scan).
    #[inline]
    pub(super) fn locate(&self, x: u64, fading: bool, now: SystemTime) -> usize {
        if !fading {
            return self.cumulative.partition_point(|&c| c <= x) - 1;
        }
        let mut left = x;
        for i in 0..self.endpoints.len() {
            let w = self.weight_at(i, true, now);
            if left < w {
                return i;
            }
            left -= w;
        }
        self.endpoints.len() - 1
    }

    /// The total weight at `now`.
    #[inline]
    pub(super) fn total_at(&self, fading: bool, now: SystemTime) -> u64 {
        if !fading {
            return self.total;
        }
        (0..self.endpoints.len())
            .map(|i| self.weight_at(i, true, now))
            .sum()
    }
}
