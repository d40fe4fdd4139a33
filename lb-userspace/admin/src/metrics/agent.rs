//! The agent's families: config loads, sources, reconciles (count, outcome,
//! duration histogram) and fade-in rebuilds.

use std::fmt;

use prometheus_client::{
    collector::Collector,
    encoding::DescriptorEncoder,
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
    registry::{Registry, Unit},
};

use super::{
    encode::{family, gauge_at},
    labels::{Shared, SourceLabels},
};
use crate::{Histogram, Status};

/// Registers the agent's families from `status` and the reconcile histogram.
pub(super) fn register(registry: &mut Registry, status: &Status, reconciles: &Histogram) {
    registry.register(
        "config_generation",
        "Successful config loads since lbd started",
        ConstGauge::new(status.config_generation),
    );
    registry.register_collector(Box::new(Sources(
        status.sources.iter().map(SourceRow::new).collect(),
    )));
    registry.register(
        "reconciles",
        "Data-plane reconciles (start, reload, slices, health, fade-in)",
        ConstCounter::new(reconciles.count),
    );
    let ok = status
        .last_reconcile
        .as_ref()
        .is_none_or(|r| r.error.is_none());
    registry.register(
        "last_reconcile_success",
        "Whether the latest reconcile succeeded (1) or failed (0)",
        ConstGauge::new(u32::from(ok)),
    );
    registry.register_with_unit(
        "reconcile_duration",
        "Time to compute and program a reconcile",
        Unit::Seconds,
        reconciles.clone(),
    );
    registry.register(
        "fade_in_rebuilds",
        "Table rebuilds done because a fade-in ramp moved weights",
        ConstCounter::new(status.fade_in_rebuilds),
    );
}

/// A source's labels and state.
#[derive(Debug)]
struct SourceRow {
    labels: SourceLabels,
    up: bool,
    /// etcd: the revision and the entries left out.
    revision: Option<(i64, usize)>,
}

impl SourceRow {
    fn new(s: &crate::SourceStatus) -> Self {
        Self {
            labels: SourceLabels {
                kind: Shared::from(s.kind.as_str()),
                location: Shared::from(s.location.as_str()),
            },
            up: s.state == "ok",
            revision: s.revision.map(|r| (r, s.rejected.len())),
        }
    }
}

/// One scrape's sources.
#[derive(Debug)]
struct Sources(Vec<SourceRow>);

impl Collector for Sources {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> fmt::Result {
        {
            let mut f = family(
                &mut e,
                "source_up",
                "Whether a source of services or endpoints reads cleanly (1) or not (0).",
                MetricType::Gauge,
            )?;
            for s in &self.0 {
                gauge_at(&mut f, &s.labels, u32::from(s.up))?;
            }
        }
        {
            let mut f = family(
                &mut e,
                "source_revision",
                "The etcd revision the node's state reflects.",
                MetricType::Gauge,
            )?;
            for s in &self.0 {
                if let Some((revision, _)) = s.revision {
                    gauge_at(&mut f, &s.labels, revision)?;
                }
            }
        }
        let mut f = family(
            &mut e,
            "source_rejected",
            "Entries of a source left out (bad JSON, invalid or clashing services).",
            MetricType::Gauge,
        )?;
        for s in &self.0 {
            if let Some((_, rejected)) = s.revision {
                gauge_at(&mut f, &s.labels, rejected)?;
            }
        }
        Ok(())
    }
}
