//! Load-balancing algorithms over an [`EndpointSet`].
//!
//! Contract, for every algorithm: a pick allocates nothing and copies nothing (it
//! reads the set in place); weights — health, the agent's fade-in and a route's
//! `fadeIn` — enter as weights, so realized shares follow them; a set of one endpoint
//! returns it without any other work; when nothing fades, fade-in costs one
//! comparison. State that must outlive updates (the round-robin counter, in-flight
//! counts) lives outside the set.

pub mod rng;
mod set;
#[cfg(test)]
mod tests;

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::SystemTime,
};

pub use set::{EndpointSet, EndpointSpec, EndpointStats, InFlight, Registry};

/// The algorithms, by their skipper names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Algorithm {
    /// `roundRobin`: a shared counter walks a low-discrepancy sequence over the
    /// weights (plain modulo when the weights are equal).
    RoundRobin,
    /// `random`: a weighted uniform draw.
    Random,
    /// `consistentHash`: weighted rendezvous hashing of the request's key; with a
    /// balance factor, endpoints over `factor ×` the average in-flight load are
    /// passed over in score order.
    ConsistentHash {
        /// `consistentHashBalanceFactor`, if set (> 1).
        balance_factor: Option<f64>,
    },
    /// `powerOfRandomNChoices`: `n` distinct weighted draws, the least loaded per
    /// weight wins (the first drawn on a tie).
    PowerOfRandomNChoices {
        /// Choices per pick (default 2).
        n: usize,
    },
    /// `leastConnections`: the fewest in-flight requests per weight; ties are broken
    /// from a rotating start.
    LeastConnections,
}

/// Largest `n` of `powerOfRandomNChoices` (draws are kept on the stack).
pub const MAX_CHOICES: usize = 8;

impl Algorithm {
    /// Parses a skipper algorithm name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "roundRobin" => Self::RoundRobin,
            "random" => Self::Random,
            "consistentHash" => Self::ConsistentHash {
                balance_factor: None,
            },
            "powerOfRandomNChoices" => Self::PowerOfRandomNChoices { n: 2 },
            "leastConnections" | "leastRequests" => Self::LeastConnections,
            _ => return None,
        })
    }

    /// The skipper name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::RoundRobin => "roundRobin",
            Self::Random => "random",
            Self::ConsistentHash { .. } => "consistentHash",
            Self::PowerOfRandomNChoices { .. } => "powerOfRandomNChoices",
            Self::LeastConnections => "leastConnections",
        }
    }
}

/// What a pick needs to know about the request.
#[derive(Clone, Copy, Debug)]
pub struct Pick {
    /// Wall-clock time (fade-in ramps).
    pub now: SystemTime,
    /// Hash of the consistent-hash key (see [`rng::fnv`]); ignored by the others.
    pub key: u64,
}

/// An algorithm with the state it keeps across picks and set updates.
#[derive(Debug)]
pub struct Balancer {
    algorithm: Algorithm,
    /// Round-robin position; also the rotating tie-break start of leastConnections.
    counter: AtomicU64,
}

impl Balancer {
    /// A balancer; the round-robin counter starts at a random offset so that proxies
    /// started together do not send their first requests to the same endpoint.
    pub fn new(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            counter: AtomicU64::new(rng::next()),
        }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The index in `set` of the endpoint for this request; `None` if the set is empty.
    #[inline]
    pub fn pick(&self, set: &EndpointSet, req: &Pick) -> Option<usize> {
        let n = set.len();
        if n <= 1 {
            return (n == 1).then_some(0);
        }
        let fading = set.fading(req.now);
        Some(match self.algorithm {
            Algorithm::RoundRobin => self.round_robin(set, fading, req.now),
            Algorithm::Random => {
                if set.uniform && !fading {
                    rng::below(n as u64) as usize
                } else {
                    let total = set.total_at(fading, req.now);
                    set.locate(rng::below(total), fading, req.now)
                }
            }
            Algorithm::ConsistentHash { balance_factor } => {
                consistent_hash(set, req, fading, balance_factor)
            }
            Algorithm::PowerOfRandomNChoices { n: choices } => {
                power_of_choices(set, choices, fading, req.now)
            }
            Algorithm::LeastConnections => self.least_connections(set, fading, req.now),
        })
    }

    fn round_robin(&self, set: &EndpointSet, fading: bool, now: SystemTime) -> usize {
        let c = self.counter.fetch_add(1, Ordering::Relaxed);
        if set.uniform && !fading {
            return (c % set.len() as u64) as usize;
        }
        // The Weyl sequence c·φ mod 1 fills [0, 1) evenly at every length, so
        // consecutive picks spread over the weights like a smooth weighted round robin
        // without any per-endpoint state to update.
        let total = set.total_at(fading, now);
        let x = rng::scale(c.wrapping_mul(0x9E37_79B9_7F4A_7C15), total);
        set.locate(x, fading, now)
    }

    fn least_connections(&self, set: &EndpointSet, fading: bool, now: SystemTime) -> usize {
        let n = set.len();
        let start = (self.counter.fetch_add(1, Ordering::Relaxed) % n as u64) as usize;
        let mut best = start;
        let mut best_load = load(set, start);
        let mut best_w = set.weight_at(start, fading, now);
        for k in 1..n {
            let i = if start + k >= n {
                start + k - n
            } else {
                start + k
            };
            let l = load(set, i);
            let w = set.weight_at(i, fading, now);
            // l/w < best_load/best_w, cross-multiplied: no division.
            if l * best_w < best_load * w {
                (best, best_load, best_w) = (i, l, w);
            }
        }
        best
    }
}

#[inline]
fn load(set: &EndpointSet, i: usize) -> u64 {
    u64::from(set.endpoints[i].stats.inflight.load(Ordering::Relaxed))
}

/// `n` distinct weighted draws (successive sampling without replacement, exact: each
/// draw is over the weight left after removing the earlier ones), the least loaded
/// per weight wins; on a tie the earliest draw, which keeps shares equal to the
/// weights when nothing is in flight.
fn power_of_choices(set: &EndpointSet, choices: usize, fading: bool, now: SystemTime) -> usize {
    let n = set.len();
    let choices = choices.clamp(1, MAX_CHOICES).min(n);
    let total = set.total_at(fading, now);
    // Drawn indices, kept sorted so a draw can skip over them in index order.
    let mut drawn = [0usize; MAX_CHOICES];
    let mut drawn_weight = 0u64;
    let mut best = usize::MAX;
    let (mut best_load, mut best_w) = (0u64, 1u64);
    for d in 0..choices {
        let mut x = rng::below(total - drawn_weight);
        // Shift x past the excluded intervals that start at or before it.
        let i = if fading {
            locate_excluding_scan(set, x, &drawn[..d], now)
        } else {
            for &e in &drawn[..d] {
                if x >= set.cumulative[e] {
                    x += set.weight_at(e, false, now);
                }
            }
            set.locate(x, false, now)
        };
        let w = set.weight_at(i, fading, now);
        let l = load(set, i);
        if best == usize::MAX || l * best_w < best_load * w {
            (best, best_load, best_w) = (i, l, w);
        }
        drawn_weight += w;
        let at = drawn[..d].partition_point(|&e| e < i);
        drawn.copy_within(at..d, at + 1);
        drawn[at] = i;
    }
    best
}

/// [`EndpointSet::locate`] over the endpoints not in `excluded` (sorted), while fading.
fn locate_excluding_scan(set: &EndpointSet, x: u64, excluded: &[usize], now: SystemTime) -> usize {
    let mut left = x;
    let mut last = 0;
    for i in 0..set.len() {
        if excluded.binary_search(&i).is_ok() {
            continue;
        }
        last = i;
        let w = set.weight_at(i, true, now);
        if left < w {
            return i;
        }
        left -= w;
    }
    last
}

/// Weighted rendezvous hashing: each endpoint scores `w / -ln(u)` with `u` a uniform
/// hash of (key, endpoint); the highest wins. The winner's share of keys is exactly
/// its share of weight, and raising one endpoint's weight (fading in) only moves keys
/// to it, so a key moves to a fading endpoint at most once. With a balance factor,
/// endpoints whose in-flight count exceeds `factor ×` the average are passed over, in
/// score order.
fn consistent_hash(set: &EndpointSet, req: &Pick, fading: bool, factor: Option<f64>) -> usize {
    let score = |i: usize| {
        let h = rng::mix(req.key ^ set.endpoints[i].seed);
        // 53 bits into (0, 1): never 0, so ln is finite.
        let u = ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
        set.weight_at(i, fading, req.now) as f64 / -u.ln()
    };
    let best_below = |ceiling: f64| {
        let mut best = usize::MAX;
        let mut best_score = f64::NEG_INFINITY;
        for i in 0..set.len() {
            let s = score(i);
            if s < ceiling && s > best_score {
                (best, best_score) = (i, s);
            }
        }
        (best, best_score)
    };
    let (first, first_score) = best_below(f64::INFINITY);
    let Some(factor) = factor else {
        return first;
    };
    let total: u64 = (0..set.len()).map(|i| load(set, i)).sum();
    let limit = ((total + 1) as f64 * factor / set.len() as f64).ceil() as u64;
    let (mut candidate, mut ceiling) = (first, first_score);
    for _ in 0..set.len() {
        if load(set, candidate) <= limit {
            return candidate;
        }
        (candidate, ceiling) = best_below(ceiling);
        if candidate == usize::MAX {
            break;
        }
    }
    first
}
