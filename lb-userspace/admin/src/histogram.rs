//! A latency histogram with fixed buckets: the agent counts reconciles into it with
//! [`Histogram::observe`], `status` shows [`Histogram::count`], and `/metrics`
//! registers it as a `prometheus-client` histogram ([`EncodeMetric`]), which writes
//! the cumulative buckets (`+Inf` included), the sum and the count.

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::MetricType,
};

/// Upper bounds in seconds: reconciles take from microseconds (nothing changed) to
/// seconds (thousands of services at a cold start).
pub const RECONCILE_BUCKETS: [f64; 12] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Observations counted into buckets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each bound of [`RECONCILE_BUCKETS`] and above the one
    /// before (not cumulative).
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

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> std::fmt::Result {
        // prometheus-client takes each bucket's own count and accumulates them.
        let mut buckets = [(f64::INFINITY, 0); RECONCILE_BUCKETS.len() + 1];
        for (slot, (&bound, &n)) in buckets
            .iter_mut()
            .zip(RECONCILE_BUCKETS.iter().zip(&self.counts))
        {
            *slot = (bound, n);
        }
        let bounded: u64 = self.counts.iter().sum();
        buckets[RECONCILE_BUCKETS.len()].1 = self.count - bounded;
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
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

    #[test]
    fn encodes_as_an_openmetrics_histogram() {
        let mut h = Histogram::default();
        for s in [0.00005, 0.003, 60.0] {
            h.observe(s);
        }
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_with_unit(
            "took",
            "Time taken",
            prometheus_client::registry::Unit::Seconds,
            h,
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "# TYPE took_seconds histogram");
        assert_eq!(lines[2], "# UNIT took_seconds seconds");
        assert!(lines.contains(&"took_seconds_count 3"), "{text}");
        assert!(
            lines.contains(&"took_seconds_bucket{le=\"0.0001\"} 1"),
            "{text}"
        );
        assert!(
            lines.contains(&"took_seconds_bucket{le=\"0.005\"} 2"),
            "{text}"
        );
        assert!(
            lines.contains(&"took_seconds_bucket{le=\"5.0\"} 2"),
            "{text}"
        );
        assert!(
            lines.contains(&"took_seconds_bucket{le=\"+Inf\"} 3"),
            "{text}"
        );
        assert_eq!(lines.last(), Some(&"# EOF"));
    }
}
