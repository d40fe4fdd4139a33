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

use lb_model::fadein::{FadeIn, WEIGHT_SCALE, age};

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

    /// Forgets endpoints no set holds any more and `listed` does not name (a backend
    /// out of rotation, e.g. unhealthy, keeps its counters while it is listed).
    pub fn prune(&self, listed: &std::collections::HashSet<&str>) {
        let mut map = self
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|a, s| Arc::strong_count(s) > 1 || listed.contains(a.as_str()));
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

/// The prefix of an [`EndpointSpec::authority`] that names a TLS endpoint.
pub const HTTPS_PREFIX: &str = "https://";

/// One endpoint of a set.
#[derive(Debug)]
pub struct Endpoint {
    /// `host:port`, as requests are sent to it (without a scheme, also for TLS).
    pub authority: Arc<str>,
    /// Whether requests go to it over TLS (an `https://` endpoint).
    pub tls: bool,
    /// The same, parsed once for request URIs (cloning it shares the bytes); `None`
    /// if it does not parse as a URI authority.
    pub uri_authority: Option<http::uri::Authority>,
    /// The Host header requests get when nothing else chose one, made once: cloning
    /// it shares the bytes, where building it per request would copy them.
    /// `None` if `authority` is no valid header value.
    pub host_header: Option<http::HeaderValue>,
    /// The address of a plain-HTTP endpoint written as `ip:port`: the proxy connects
    /// to it directly (no resolver) and keeps its connections in the worker's own
    /// pool. `None` for names (resolved by the general client) and for TLS.
    pub socket: Option<std::net::SocketAddr>,
    /// Weight (> 0; health and the service's fade-in already applied by the agent).
    pub weight: u32,
    /// Start of its `fadeIn` ramp.
    pub created: SystemTime,
    /// Shared counters.
    pub stats: Arc<EndpointStats>,
    /// Per-endpoint seed of consistent hashing (hash of the authority).
    pub(super) seed: u64,
}

impl Endpoint {
    /// The endpoint as operators name it: `host:port`, or `https://host:port`.
    pub fn address(&self) -> impl std::fmt::Display + '_ {
        struct Address<'a>(&'a Endpoint);
        impl std::fmt::Display for Address<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                if self.0.tls {
                    f.write_str(HTTPS_PREFIX)?;
                }
                f.write_str(&self.0.authority)
            }
        }
        Address(self)
    }
}

/// What a set is built from: authority, weight, and creation time if known.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointSpec {
    /// Where the endpoint is: `host:port` for plain HTTP, or [`HTTPS_PREFIX`] and
    /// `host:port` for TLS. The whole text is the endpoint's identity (its counters,
    /// its hash), so an http and an https endpoint on one `host:port` are two.
    pub authority: String,
    /// Weight; 0 leaves the endpoint out (unhealthy or drained).
    pub weight: u32,
    /// Creation time (`endpointCreated`), else first sight.
    pub created: Option<SystemTime>,
}

/// The endpoints of one route or service, immutable once built (updates build a new
/// set and swap it in whole), except for the cached fade-in weights.
#[derive(Debug, Default)]
pub struct EndpointSet {
    pub(super) endpoints: Box<[Endpoint]>,
    /// Static weights in [`WEIGHT_SCALE`] units, contiguous for scans.
    pub(super) weights: Box<[u64]>,
    /// The endpoints' counters, contiguous for scans (the same as in `endpoints`).
    pub(super) stats: Box<[Arc<EndpointStats>]>,
    /// Prefix sums of `weights` (`cumulative[i]` = sum before `i`): weighted picks
    /// binary-search them.
    pub(super) cumulative: Box<[u64]>,
    pub(super) total: u64,
    /// All static weights equal: plain modulo picks.
    pub(super) uniform: bool,
    /// The route's fade-in ramp, if any endpoint is on it.
    pub(super) fade: Option<FadeIn>,
    /// When the last ramp ends; `None` when nothing fades (then fade-in costs one
    /// comparison per pick).
    pub(super) fade_ends: Option<SystemTime>,
    /// Effective weights while fading, recomputed at most every
    /// [`FADE_REFRESH_MS`] of request time, so a pick reads them like static ones.
    faded: Option<Faded>,
}

/// How long computed fade-in weights are used: ramps last seconds to minutes, so
/// 10 ms steps are invisible in the shares and keep `powf` off the per-pick path.
pub const FADE_REFRESH_MS: u64 = 10;

/// Cached effective weights of a fading set. Written by whichever pick finds them
/// stale (one wins a compare-exchange), read by all; a pick racing a refresh may see
/// old and new values mixed for one pick, which only nudges that pick.
#[derive(Debug)]
struct Faded {
    /// Request time (ms since the epoch) the weights are for.
    at_ms: AtomicU64,
    weights: Box<[AtomicU64]>,
    cumulative: Box<[AtomicU64]>,
    total: AtomicU64,
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
            let (tls, authority) = match s.authority.strip_prefix(HTTPS_PREFIX) {
                Some(rest) => (true, rest),
                None => (false, s.authority.as_str()),
            };
            endpoints.push(Endpoint {
                seed: super::rng::mix(super::rng::fnv(
                    super::rng::FNV_START,
                    s.authority.as_bytes(),
                )),
                authority: Arc::from(authority),
                tls,
                uri_authority: http::uri::Authority::from_maybe_shared(
                    bytes::Bytes::copy_from_slice(authority.as_bytes()),
                )
                .ok(),
                host_header: http::HeaderValue::from_str(authority).ok(),
                socket: if tls { None } else { authority.parse().ok() },
                weight: s.weight,
                created,
                stats,
            });
        }
        let weights: Box<[u64]> = endpoints
            .iter()
            .map(|e| u64::from(e.weight) * u64::from(WEIGHT_SCALE))
            .collect();
        let (cumulative, total) = prefix_sums(&weights);
        let uniform = endpoints.windows(2).all(|w| w[0].weight == w[1].weight);
        let fade_ends = fade.and_then(|f| {
            let earliest = endpoints.iter().map(|e| e.created).min()?;
            let latest = endpoints.iter().map(|e| e.created).max()?;
            (latest > earliest)
                .then(|| latest + f.window)
                .filter(|end| *end > now)
        });
        let faded = fade_ends.map(|_| Faded {
            at_ms: AtomicU64::new(u64::MAX),
            weights: weights.iter().map(|&w| AtomicU64::new(w)).collect(),
            cumulative: cumulative.iter().map(|&c| AtomicU64::new(c)).collect(),
            total: AtomicU64::new(total),
        });
        let stats = endpoints.iter().map(|e| Arc::clone(&e.stats)).collect();
        Self {
            endpoints: endpoints.into_boxed_slice(),
            weights,
            stats,
            cumulative: cumulative.into_boxed_slice(),
            total,
            uniform,
            fade,
            fade_ends,
            faded,
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

    /// Whether a ramp runs at `now`; if so, makes sure the cached effective weights
    /// are at most [`FADE_REFRESH_MS`] old.
    #[inline(always)]
    pub(super) fn prepare(&self, now: SystemTime) -> bool {
        // The common case, nothing fading, is one test of an Option and stays inline.
        if self.fade_ends.is_none() {
            return false;
        }
        self.prepare_fading(now)
    }

    #[inline(never)]
    fn prepare_fading(&self, now: SystemTime) -> bool {
        if !self.fading(now) {
            return false;
        }
        if let (Some(f), Some(fade)) = (&self.faded, &self.fade) {
            let ms = millis(now);
            let at = f.at_ms.load(Ordering::Acquire);
            if (at == u64::MAX || ms.abs_diff(at) >= FADE_REFRESH_MS)
                && f.at_ms
                    .compare_exchange(at, ms, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                let mut total = 0;
                for (i, e) in self.endpoints.iter().enumerate() {
                    let w = ((self.weights[i] as f64 * fade.fraction(age(e.created, now))) as u64)
                        .max(1);
                    f.weights[i].store(w, Ordering::Relaxed);
                    f.cumulative[i].store(total, Ordering::Relaxed);
                    total += w;
                }
                f.total.store(total, Ordering::Release);
            }
        }
        true
    }

    /// The effective weight of endpoint `i` (in [`WEIGHT_SCALE`] units):
    /// `w · max(min_weight, (age/window)^exponent)` while `fading` (as of the last
    /// [`Self::prepare`]), else the static weight. Never 0.
    #[inline]
    pub fn weight(&self, i: usize, fading: bool) -> u64 {
        match (&self.faded, fading) {
            (Some(f), true) => f.weights[i].load(Ordering::Relaxed),
            _ => self.weights[i],
        }
    }

    /// Start of endpoint `i`'s weight interval.
    #[inline]
    pub(super) fn start_of(&self, i: usize, fading: bool) -> u64 {
        match (&self.faded, fading) {
            (Some(f), true) => f.cumulative[i].load(Ordering::Relaxed),
            _ => self.cumulative[i],
        }
    }

    /// The total weight.
    #[inline]
    pub(super) fn total(&self, fading: bool) -> u64 {
        match (&self.faded, fading) {
            (Some(f), true) => f.total.load(Ordering::Acquire),
            _ => self.total,
        }
    }

    /// The endpoint whose weight interval holds `x` (binary search of the prefix
    /// sums); the last one if `x` is beyond the total (a racing refresh).
    #[inline]
    pub(super) fn locate(&self, x: u64, fading: bool) -> usize {
        if !(fading && self.faded.is_some()) {
            return self
                .cumulative
                .partition_point(|&c| c <= x)
                .saturating_sub(1);
        }
        let (mut lo, mut hi) = (0, self.endpoints.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.start_of(mid, true) <= x {
                lo = mid + 1
            } else {
                hi = mid
            }
        }
        lo.saturating_sub(1)
    }

    /// In-flight requests of endpoint `i`.
    #[inline]
    pub(super) fn load(&self, i: usize) -> u64 {
        u64::from(self.stats[i].inflight.load(Ordering::Relaxed))
    }
}

fn prefix_sums(weights: &[u64]) -> (Vec<u64>, u64) {
    let mut total = 0;
    let cumulative = weights
        .iter()
        .map(|&w| {
            let start = total;
            total += w;
            start
        })
        .collect();
    (cumulative, total)
}
