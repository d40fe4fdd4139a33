//! A latency histogram with fixed buckets, exposed the Prometheus way (cumulative
//! bucket counts, sum and count).

/// Upper bounds in seconds: reconciles take from microseconds (nothing changed) to
/// seconds (thousands of services at a cold start).
pub const RECONCILE_BUCKETS: [f64; 12] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Observations counted into buckets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each bound of [`RECONCILE_BUCKETS`] (not cumulative).
    counts: [u64; RECONCILE_BUCKETS.len()],
    /// Sum of all observations, seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&mut self, seconds: f64) {
        if let Some(i) = RECONCILE_BUCKETS.iter().position(|&b| seconds <= b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// `(upper bound, cumulative count)` per bucket, without `+Inf` (which is
    /// [`Histogram::count`]).
    pub fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        RECONCILE_BUCKETS
            .iter()
            .zip(self.counts.iter().scan(0, |acc, &c| {
                *acc += c;
                Some(*acc)
            }))
            .map(|(&b, c)| (b, c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_inf_counts_everything() {
        let mut h = Histogram::default();
        for s in [0.00005, 0.003, 0.003, 0.2, 60.0] {
            h.observe(s);
        }
        let c: Vec<(f64, u64)> = h.cumulative().collect();
        assert_eq!(c[0], (0.0001, 1));
        assert_eq!(c[3], (0.005, 3));
        assert_eq!(c[8], (0.25, 4));
        assert_eq!(c.last(), Some(&(5.0, 4)), "60 s is only in +Inf");
        assert_eq!(h.count, 5);
        assert!((h.sum - 60.20605).abs() < 1e-9);
    }
}
