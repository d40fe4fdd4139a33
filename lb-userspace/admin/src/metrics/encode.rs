//! Writing families from a collector: a descriptor, then one sample per row.
//!
//! Collectors write straight into the scrape's text, so these take the label set by
//! reference and the value by copy: nothing is allocated per series.

use std::fmt;

use prometheus_client::{
    encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, MetricEncoder, NoLabelSet},
    metrics::MetricType,
};

/// Starts a family: `# HELP` and `# TYPE` (the registry's prefix added).
pub(super) fn family<'e>(
    encoder: &'e mut DescriptorEncoder<'_>,
    name: &'e str,
    help: &str,
    kind: MetricType,
) -> Result<MetricEncoder<'e>, fmt::Error> {
    encoder.encode_descriptor(name, help, None, kind)
}

/// One counter sample of `family` with `labels`.
pub(super) fn counter_at(
    family: &mut MetricEncoder<'_>,
    labels: &impl EncodeLabelSet,
    value: u64,
) -> fmt::Result {
    family
        .encode_family(labels)?
        .encode_counter::<NoLabelSet, u64, u64>(&value, None)
}

/// One gauge sample of `family` with `labels`.
pub(super) fn gauge_at(
    family: &mut MetricEncoder<'_>,
    labels: &impl EncodeLabelSet,
    value: impl EncodeGaugeValue,
) -> fmt::Result {
    family.encode_family(labels)?.encode_gauge(&value)
}

/// A counter family of one unlabelled sample.
pub(super) fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> fmt::Result {
    family(encoder, name, help, MetricType::Counter)?
        .encode_counter::<NoLabelSet, u64, u64>(&value, None)
}

/// A gauge family of one unlabelled sample.
pub(super) fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: impl EncodeGaugeValue,
) -> fmt::Result {
    family(encoder, name, help, MetricType::Gauge)?.encode_gauge(&value)
}

/// A family drawn from rows of type `R`: name, help, and the value of a row.
pub(super) type Column<R, V> = (&'static str, &'static str, fn(&R) -> V);
