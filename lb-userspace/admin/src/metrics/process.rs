//! The process's families: which build runs and since when.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::{
    metrics::{gauge::ConstGauge, info::Info},
    registry::{Registry, Unit},
};

use super::labels::{BuildLabels, Shared};
use crate::Status;

/// Registers `lbd_build_info` and `lbd_start_time_seconds` (now less the uptime).
pub(super) fn register(registry: &mut Registry, status: &Status, now: SystemTime) {
    registry.register(
        "build",
        "lbd's version",
        Info::new(BuildLabels {
            version: Shared::from(status.version.as_str()),
        }),
    );
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    registry.register_with_unit(
        "start_time",
        "When lbd started, seconds since the Unix epoch",
        Unit::Seconds,
        ConstGauge::new(now - status.uptime_seconds),
    );
}
