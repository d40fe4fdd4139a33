//! The data plane's families: every packet's verdict, the decisions on the way
//! (admission, identity, `nat` releases) and how full the flow tables are.

use std::fmt;

use lb_common::{Counter, CounterKind};
use prometheus_client::{
    collector::Collector, encoding::DescriptorEncoder, metrics::MetricType, registry::Registry,
};

use super::{
    encode::{counter, counter_at, family, gauge, gauge_at},
    labels::{FlowTable, Release, ReleaseLabels, TableLabels, Verdict, VerdictLabels, Why},
};
use crate::{FlowTablesStatus, Status};

/// Registers the data plane's families for `counters` (summed over CPUs; a counter
/// missing from the slice is 0) and the flow tables of `status`.
pub(super) fn register(registry: &mut Registry, status: &Status, counters: &[(Counter, u64)]) {
    let mut values = [0; Counter::COUNT as usize];
    for &(c, v) in counters {
        values[c as usize] = v;
    }
    registry.register_collector(Box::new(Dataplane {
        values,
        conntrack_entries: status.conntrack_entries,
        tables: status.flow_tables.clone(),
    }));
}

/// One scrape's kernel counters, indexed by [`Counter`].
#[derive(Debug)]
struct Dataplane {
    values: [u64; Counter::COUNT as usize],
    conntrack_entries: u64,
    tables: FlowTablesStatus,
}

impl Dataplane {
    fn get(&self, c: Counter) -> u64 {
        self.values[c as usize]
    }
}

impl Collector for Dataplane {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> fmt::Result {
        counter(
            &mut e,
            "xdp_packets",
            "Packets the XDP program saw.",
            self.get(Counter::Packets),
        )?;
        {
            let mut verdicts = family(
                &mut e,
                "xdp_verdicts",
                "Packets by what the XDP program did with them (pass, tx, redirect, drop) and why.",
                MetricType::Counter,
            )?;
            for c in Counter::ALL {
                if let CounterKind::Verdict { action, reason } = c.kind() {
                    let labels = VerdictLabels {
                        verdict: Verdict(action),
                        reason: Why(reason),
                    };
                    counter_at(&mut verdicts, &labels, self.get(c))?;
                }
            }
        }

        let t = &self.tables;
        gauge(
            &mut e,
            "conntrack_entries",
            "Established flows the node tracks (dsr conntrack and nat flows).",
            self.conntrack_entries,
        )?;
        let tables = [
            (FlowTable::Established, t.conntrack),
            (FlowTable::Embryonic, t.embryonic),
            (FlowTable::Nat, t.nat),
        ];
        {
            let mut entries = family(
                &mut e,
                "flow_table_entries",
                "Entries in a flow table (established, embryonic, nat).",
                MetricType::Gauge,
            )?;
            for (table, fill) in tables {
                gauge_at(&mut entries, &TableLabels { table }, fill.entries)?;
            }
        }
        {
            let mut capacity = family(
                &mut e,
                "flow_table_capacity",
                "Size of a flow table (node.conntrack_entries, embryonic_entries, nat_entries).",
                MetricType::Gauge,
            )?;
            for (table, fill) in tables {
                gauge_at(&mut capacity, &TableLabels { table }, fill.capacity)?;
            }
        }

        counter(
            &mut e,
            "conntrack_embryonic_created",
            "Flows admitted as half-open by a SYN or a first UDP datagram (dsr new flows).",
            t.embryonic_created,
        )?;
        for (name, help, c) in [
            (
                "conntrack_promoted",
                "Half-open flows established by their second packet.",
                Counter::EmbryonicPromoted,
            ),
            (
                "conntrack_non_syn_miss",
                "dsr TCP packets that were not a SYN and had no flow: forwarded by the table, no state made.",
                Counter::NonSynMiss,
            ),
            (
                "conntrack_identity_mismatch",
                "Flow entries ignored because their backend id now belongs to another service or generation.",
                Counter::IdentityMismatch,
            ),
            (
                "tunnel_mss_clamped",
                "TCP SYNs of ipip and gue flows whose MSS was lowered to fit the path MTU once encapsulated.",
                Counter::MssClamped,
            ),
        ] {
            counter(&mut e, name, help, self.get(c))?;
        }
        counter(
            &mut e,
            "conntrack_embryonic_evicted",
            "Half-open flows that left the embryonic table unpromoted (estimate).",
            t.embryonic_evicted,
        )?;
        let mut released = family(
            &mut e,
            "nat_released",
            "nat ports released, by how their flow ended (fin, rst, timeout).",
            MetricType::Counter,
        )?;
        for (reason, n) in [
            (Release::Fin, t.nat_released.fin),
            (Release::Rst, t.nat_released.rst),
            (Release::Timeout, t.nat_released.timeout),
        ] {
            counter_at(&mut released, &ReleaseLabels { reason }, n)?;
        }
        Ok(())
    }
}
