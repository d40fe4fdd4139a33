//! Per-VIP and per-backend families: traffic, tables, weights, health.
//!
//! Rows are made once per scrape: a service's name and VIP are one [`Shared`]
//! string each, found for a backend through a map from service name built once, so
//! the families cost O(services + backends), not a search of the services per
//! backend and family.

use std::{collections::HashMap, fmt};

use prometheus_client::{
    collector::Collector, encoding::DescriptorEncoder, metrics::MetricType, registry::Registry,
};

use super::{
    encode::{Column, counter_at, family, gauge_at},
    labels::{Addr, BackendLabels, ServiceLabels, Shared, TableInfoLabels},
};
use crate::{BackendView, ServiceView};

/// Registers the families of `services` and `backends`. A backend whose service is
/// not among `services` gets an empty `vip` label.
pub(super) fn register(
    registry: &mut Registry,
    services: &[ServiceView],
    backends: &[BackendView],
) {
    let rows: Vec<ServiceRow> = services.iter().map(ServiceRow::new).collect();
    let mut by_name = HashMap::with_capacity(services.len());
    for (view, row) in services.iter().zip(&rows) {
        // The first service of a name wins, as a search in order would.
        by_name.entry(view.name.as_str()).or_insert(&row.labels);
    }
    let no_vip = Shared::from("");
    let backends = backends
        .iter()
        .map(|b| {
            let service = match by_name.get(b.service.as_str()) {
                Some(&labels) => labels.clone(),
                None => ServiceLabels {
                    service: Shared::from(b.service.as_str()),
                    vip: no_vip.clone(),
                },
            };
            BackendRow::new(b, service)
        })
        .collect();
    registry.register_collector(Box::new(Traffic {
        services: rows,
        backends,
    }));
}

/// A service's labels and values.
#[derive(Debug)]
struct ServiceRow {
    labels: ServiceLabels,
    digest: Shared,
    table_size: u32,
    packets: u64,
    bytes: u64,
    new_flows: u64,
}

impl ServiceRow {
    fn new(v: &ServiceView) -> Self {
        Self {
            labels: ServiceLabels {
                service: Shared::from(v.name.as_str()),
                vip: Shared::from(v.vip.as_str()),
            },
            digest: Shared::from(v.table_digest.as_str()),
            table_size: v.table_size,
            packets: v.packets,
            bytes: v.bytes,
            new_flows: v.new_flows,
        }
    }
}

/// A backend's labels and values.
#[derive(Debug)]
struct BackendRow {
    labels: BackendLabels,
    packets: u64,
    bytes: u64,
    new_flows: u64,
    flows: u64,
    weight: u32,
    effective_weight: f64,
    fade_in_ratio: f64,
    /// `None` when no health check runs.
    healthy: Option<bool>,
}

impl BackendRow {
    fn new(b: &BackendView, service: ServiceLabels) -> Self {
        Self {
            labels: BackendLabels {
                service,
                backend: Addr(b.address),
            },
            packets: b.packets,
            bytes: b.bytes,
            new_flows: b.new_flows,
            flows: b.flows,
            weight: b.weight,
            effective_weight: b.effective_weight,
            fade_in_ratio: b.fade_in_percent / 100.0,
            healthy: match b.health.as_str() {
                "unchecked" => None,
                health => Some(health == "healthy"),
            },
        }
    }
}

/// One scrape's services and backends.
#[derive(Debug)]
struct Traffic {
    services: Vec<ServiceRow>,
    backends: Vec<BackendRow>,
}

impl Collector for Traffic {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> fmt::Result {
        let per_vip: [Column<ServiceRow, u64>; 3] = [
            ("vip_packets", "Packets forwarded for a VIP.", |v| v.packets),
            (
                "vip_bytes",
                "Bytes forwarded for a VIP, link-layer header included.",
                |v| v.bytes,
            ),
            ("vip_new_flows", "Flows admitted for a VIP.", |v| {
                v.new_flows
            }),
        ];
        for (name, help, value) in per_vip {
            let mut f = family(&mut e, name, help, MetricType::Counter)?;
            for v in &self.services {
                counter_at(&mut f, &v.labels, value(v))?;
            }
        }
        {
            let mut f = family(
                &mut e,
                "table_size",
                "Maglev table size of a service (0: no usable backend).",
                MetricType::Gauge,
            )?;
            for v in &self.services {
                gauge_at(&mut f, &v.labels, v.table_size)?;
            }
        }
        {
            let mut f = family(
                &mut e,
                "table",
                "The digest of a service's live table; equal on nodes with equal input.",
                MetricType::Info,
            )?;
            for v in &self.services {
                f.encode_info(&TableInfoLabels {
                    service: v.labels.clone(),
                    digest: v.digest.clone(),
                })?;
            }
        }

        let per_backend: [Column<BackendRow, u64>; 3] = [
            ("backend_packets", "Packets forwarded to a backend.", |b| {
                b.packets
            }),
            ("backend_bytes", "Bytes forwarded to a backend.", |b| {
                b.bytes
            }),
            ("backend_new_flows", "Flows admitted to a backend.", |b| {
                b.new_flows
            }),
        ];
        for (name, help, value) in per_backend {
            let mut f = family(&mut e, name, help, MetricType::Counter)?;
            for b in &self.backends {
                counter_at(&mut f, &b.labels, value(b))?;
            }
        }
        {
            let mut f = family(
                &mut e,
                "backend_flows",
                "Conntrack entries pinned to a backend.",
                MetricType::Gauge,
            )?;
            for b in &self.backends {
                gauge_at(&mut f, &b.labels, b.flows)?;
            }
        }
        {
            let mut f = family(
                &mut e,
                "backend_weight",
                "Configured weight of a backend (0: draining).",
                MetricType::Gauge,
            )?;
            for b in &self.backends {
                gauge_at(&mut f, &b.labels, b.weight)?;
            }
        }
        let ratios: [Column<BackendRow, f64>; 2] = [
            (
                "backend_effective_weight",
                "Weight the table is built with (fade-in and health applied).",
                |b| b.effective_weight,
            ),
            (
                "backend_fade_in_ratio",
                "Effective over configured weight, 0 to 1 (1: settled).",
                |b| b.fade_in_ratio,
            ),
        ];
        for (name, help, value) in ratios {
            let mut f = family(&mut e, name, help, MetricType::Gauge)?;
            for b in &self.backends {
                gauge_at(&mut f, &b.labels, value(b))?;
            }
        }
        let mut f = family(
            &mut e,
            "backend_healthy",
            "Health-check state of a checked backend (1 healthy, 0 unhealthy).",
            MetricType::Gauge,
        )?;
        for b in &self.backends {
            if let Some(healthy) = b.healthy {
                gauge_at(&mut f, &b.labels, u32::from(healthy))?;
            }
        }
        Ok(())
    }
}
