//! The stage between "what should be served" and "what was written": a [`Plan`] says
//! which services change, with their Maglev tables already built, which go, and which
//! echo addresses change — computed from the programmer's state without touching the
//! data plane, so it can be printed (`lbd --check-config --plan`), tested, and applied
//! by [`super::Programmer::apply_plan`] in the order that keeps every packet on a
//! complete table.

use lb_common::Addr;
use std::{collections::BTreeSet, net::IpAddr};

use lb_common::{
    ForwardingMode, VipKey,
    maps::{MAX_BACKENDS_PER_SERVICE, MAX_TABLE_SIZE},
};

use super::Programmer;
use crate::{
    dataplane::{ServiceSpec, from_addr16},
    maglev,
};

/// A reconcile worked out: everything [`super::Programmer::apply_plan`] will write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// New or changed services, in the order they were given, each with its table.
    pub changes: Vec<Change>,
    /// Services that stay exactly as they are (they cost nothing).
    pub unchanged: usize,
    /// Services to delete: no longer listed (none while the programmer keeps unlisted
    /// services, see [`super::Programmer::keep_unlisted`]).
    pub removals: Vec<Removal>,
    /// VIP addresses whose echo requests XDP starts answering.
    pub echo_add: Vec<IpAddr>,
    /// VIP addresses whose echo requests XDP stops answering.
    pub echo_remove: Vec<IpAddr>,
    /// Services that cannot be programmed as given (too many backends, a table size
    /// that is not a usable prime), with why: they keep whatever they had, and the
    /// rest of the plan goes ahead — one bad service must not hold every other back.
    pub refused: Vec<Refusal>,
}

impl Plan {
    /// Whether applying this plan writes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
            && self.removals.is_empty()
            && self.echo_add.is_empty()
            && self.echo_remove.is_empty()
    }
}

/// One service to (re)program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// What it becomes.
    pub spec: ServiceSpec,
    /// Whether the data plane serves it already (its VIP entry is swapped atomically)
    /// or it is new.
    pub existing: bool,
    /// Whether what packets see stays the same: the same backends in the same order
    /// and the same table (a service adopted from the previous lbd is rewritten
    /// once, because its weights cannot be read back from the maps).
    pub same_table: bool,
    /// Its lookup table (slot → backend list index); empty when no backend takes new
    /// flows, which makes the VIP drop new flows while established ones continue.
    pub table: Vec<u16>,
    /// [`maglev::digest`] of `table`, as `lbctl services` shows it.
    pub digest: u64,
}

impl Change {
    /// Table slots each backend gets, in `spec.backends` order.
    #[must_use]
    pub fn slots_per_backend(&self) -> Vec<usize> {
        let mut slots = vec![0; self.spec.backends.len()];
        for &i in &self.table {
            if let Some(n) = slots.get_mut(usize::from(i)) {
                *n += 1;
            }
        }
        slots
    }
}

/// A service to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    /// Its VIP key.
    pub key: VipKey,
    /// Its name as last programmed.
    pub name: String,
}

/// A service the plan leaves out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The service.
    pub service: String,
    /// What is wrong with it.
    pub problem: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "service {}: {}", self.service, self.problem)
    }
}

impl Programmer {
    /// Works out what serving exactly `specs` takes from the current state. Pure: the
    /// data plane is not touched and the programmer not changed.
    #[must_use]
    pub fn plan(&self, specs: &[ServiceSpec]) -> Plan {
        let mut plan = Plan::default();
        for spec in specs {
            let previous = self.services.get(&spec.key);
            if previous.is_some_and(|p| p.spec == *spec) {
                plan.unchanged += 1;
                continue;
            }
            match table_size(spec) {
                Ok(size) => {
                    let table = if size == 0 {
                        Vec::new()
                    } else {
                        maglev::build_weighted(&spec.backends, &spec.weights, size)
                    };
                    let digest = maglev::digest(&table);
                    plan.changes.push(Change {
                        spec: spec.clone(),
                        existing: previous.is_some(),
                        same_table: previous.is_some_and(|p| {
                            p.digest == digest && p.backends == spec.backends && p.table == table
                        }),
                        digest,
                        table,
                    });
                }
                Err(problem) => plan.refused.push(Refusal {
                    service: spec.name.clone(),
                    problem,
                }),
            }
        }
        if !self.keep_unlisted {
            let listed: std::collections::HashSet<VipKey> = specs.iter().map(|s| s.key).collect();
            let mut removals: Vec<Removal> = self
                .services
                .iter()
                .filter(|(k, _)| !listed.contains(*k))
                .map(|(key, p)| Removal {
                    key: *key,
                    name: p.spec.name.clone(),
                })
                .collect();
            // Deterministic order, for printing and for tests.
            removals.sort_by(|a, b| a.name.cmp(&b.name));
            plan.removals = removals;
        }
        let want: BTreeSet<Addr> = if self.answer_ping {
            specs
                .iter()
                .filter(|s| s.mode != ForwardingMode::L7)
                .map(|s| s.key.addr)
                .collect()
        } else {
            BTreeSet::new()
        };
        plan.echo_add = want
            .difference(&self.echo)
            .map(|a| from_addr16(*a))
            .collect();
        if !self.keep_unlisted {
            plan.echo_remove = self
                .echo
                .difference(&want)
                .map(|a| from_addr16(*a))
                .collect();
        }
        plan
    }
}

/// The table size `spec` is programmed with (0: no backend takes new flows), or why
/// it cannot be programmed.
fn table_size(spec: &ServiceSpec) -> Result<u32, String> {
    let n = spec.backends.len();
    if n > MAX_BACKENDS_PER_SERVICE as usize {
        return Err(format!("{n} backends; at most {MAX_BACKENDS_PER_SERVICE}"));
    }
    if !spec.weights.is_empty() && spec.weights.len() != n {
        return Err(format!("{} weights for {n} backends", spec.weights.len()));
    }
    // Backends that take new flows decide whether there is a table at all.
    let weighted = (0..n)
        .filter(|&i| spec.weights.get(i).is_none_or(|&w| w > 0))
        .count();
    match (weighted, spec.table_size) {
        (0, _) => Ok(0),
        (_, Some(m)) if !maglev::is_prime(m) || m as usize <= n || m > MAX_TABLE_SIZE => {
            Err(format!(
                "table size {m} must be a prime above the backend count ({n}) and at most {MAX_TABLE_SIZE}"
            ))
        }
        (_, Some(m)) => Ok(m),
        (_, None) => Ok(maglev::default_size(n)),
    }
}
