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

pub use set::{
    Endpoint, EndpointSet, EndpointSpec, EndpointStats, HTTPS_PREFIX, InFlight, Registry,
};

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
        let fading = set.prepare(req.now);
        // Equal static weights and nothing fading: weights cannot change a pick.
        let flat = set.uniform && !fading;
        Some(match self.algorithm {
            Algorithm::RoundRobin => {
                let c = self.counter.fetch_add(1, Ordering::Relaxed);
                if flat {
                    // 32-bit modulo is several times cheaper than 64-bit; the
                    // sequence restarts once per 2^32 picks, which no one can see.
                    (c as u32 % n as u32) as usize
                } else {
                    // The Weyl sequence c·φ mod 1 fills [0, 1) evenly at every
                    // length, so consecutive picks spread over the weights like a
                    // smooth weighted round robin with no per-endpoint state.
                    let x = rng::scale(c.wrapping_mul(0x9E37_79B9_7F4A_7C15), set.total(fading));
                    set.locate(x, fading)
                }
            }
            Algorithm::Random => {
                if flat {
                    rng::below(n as u64) as usize
                } else {
                    set.locate(rng::below(set.total(fading)), fading)
                }
            }
            Algorithm::ConsistentHash { balance_factor } => {
                consistent_hash(set, req.key, fading, balance_factor)
            }
            Algorithm::PowerOfRandomNChoices { n: 2 } if flat => {
                // Two distinct uniform draws: the second skips over the first.
                let a = rng::below(n as u64) as usize;
                let mut b = rng::below(n as u64 - 1) as usize;
                b += usize::from(b >= a);
                if set.load(b) < set.load(a) { b } else { a }
            }
            Algorithm::PowerOfRandomNChoices { n: choices } => {
                power_of_choices(set, choices, fading)
            }
            Algorithm::LeastConnections => {
                let start =
                    (self.counter.fetch_add(1, Ordering::Relaxed) as u32 % n as u32) as usize;
                if flat {
                    least_loaded_flat(set, start)
                } else {
                    least_loaded(set, start, fading)
                }
            }
        })
    }
}

/// leastConnections with equal weights: the fewest in flight, scanning from `start`;
/// nobody beats 0, so the scan stops at the first idle endpoint.
fn least_loaded_flat(set: &EndpointSet, start: usize) -> usize {
    let (mut best, mut best_load) = (start, set.load(start));
    // Two plain ranges instead of a chained iterator: this loop is the whole cost at
    // large n.
    for range in [start + 1..set.len(), 0..start] {
        for i in range {
            if best_load == 0 {
                return best;
            }
            let l = set.load(i);
            if l < best_load {
                (best, best_load) = (i, l);
            }
        }
    }
    best
}

/// leastConnections with weights: the fewest in flight per weight (cross-multiplied,
/// no division), scanning from `start` so ties rotate.
fn least_loaded(set: &EndpointSet, start: usize, fading: bool) -> usize {
    let (mut best, mut best_load, mut best_w) = (start, set.load(start), set.weight(start, fading));
    for range in [start + 1..set.len(), 0..start] {
        for i in range {
            if best_load == 0 {
                return best;
            }
            let (l, w) = (set.load(i), set.weight(i, fading));
            if l * best_w < best_load * w {
                (best, best_load, best_w) = (i, l, w);
            }
        }
    }
    best
}

/// `n` distinct weighted draws (successive sampling without replacement, exact: each
/// draw is over the weight left after removing the earlier ones), the least loaded
/// per weight wins; on a tie the earliest draw, which keeps shares equal to the
/// weights when nothing is in flight.
fn power_of_choices(set: &EndpointSet, choices: usize, fading: bool) -> usize {
    let choices = choices.clamp(1, MAX_CHOICES).min(set.len());
    let total = set.total(fading);
    // Drawn indices, kept sorted so a draw can skip over their intervals in order.
    let mut drawn = [0usize; MAX_CHOICES];
    let mut drawn_weight = 0u64;
    let mut best = usize::MAX;
    let (mut best_load, mut best_w) = (0u64, 1u64);
    for d in 0..choices {
        let mut x = rng::below(total.saturating_sub(drawn_weight).max(1));
        for &e in &drawn[..d] {
            if x >= set.start_of(e, fading) {
                x += set.weight(e, fading);
            }
        }
        let i = set.locate(x, fading);
        let (w, l) = (set.weight(i, fading), set.load(i));
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

/// Weighted rendezvous hashing: each endpoint scores `w / -ln(u)` with `u` a uniform
/// hash of (key, endpoint); the highest wins. The winner's share of keys is exactly
/// its share of weight, and raising one endpoint's weight (fading in) only moves keys
/// to it, so a key moves to a fading endpoint at most once. With a balance factor,
/// endpoints whose in-flight count exceeds `factor ×` the average are passed over, in
/// score order.
fn consistent_hash(set: &EndpointSet, key: u64, fading: bool, factor: Option<f64>) -> usize {
    let score = |i: usize| {
        let h = rng::mix(key ^ set.endpoints[i].seed);
        // 53 bits into (0, 1): never 0, so ln is finite.
        let u = ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
        set.weight(i, fading) as f64 / -u.ln()
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
    let total: u64 = (0..set.len()).map(|i| set.load(i)).sum();
    let limit = ((total + 1) as f64 * factor / set.len() as f64).ceil() as u64;
    let (mut candidate, mut ceiling) = (first, first_score);
    for _ in 0..set.len() {
        if set.load(candidate) <= limit {
            return candidate;
        }
        (candidate, ceiling) = best_below(ceiling);
        if candidate == usize::MAX {
            break;
        }
    }
    first
}
