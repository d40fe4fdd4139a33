//! Programming the XDP data plane.
//!
//! [`MapOps`] is the narrow kernel interface (one method per map operation) with an aya
//! implementation ([`kernel::KernelDataplane`]) and an in-memory one
//! ([`memory::MemoryDataplane`]) so that the ordering logic in [`program_service`] is
//! tested without root.

pub mod kernel;
pub mod memory;
pub mod neighbour;

use std::net::Ipv4Addr;

use lb_common::{
    BackendSlot, Counter, ForwardingMode, GlobalConfig, VipInfo, VipKey,
    maps::{MAX_BACKENDS_PER_SERVICE, TABLES_PER_SERVICE},
};

/// A failed map operation.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// A map update or lookup failed in the kernel.
    #[error("{op} on map {map}: {source}")]
    Map {
        /// The operation, e.g. "insert".
        op: &'static str,
        /// The map's pinned name.
        map: &'static str,
        /// The kernel's error.
        #[source]
        source: aya::maps::MapError,
    },
    /// The embedded object lacks a map or program this agent expects.
    #[error("the BPF object has no {what} named {name}")]
    Missing {
        /// "map" or "program".
        what: &'static str,
        /// The expected name.
        name: &'static str,
    },
    /// Loading or attaching the program failed.
    #[error("{action}: {source}")]
    Program {
        /// What was being done.
        action: String,
        /// aya's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A service has more backends than a table holds.
    #[error("{count} backends exceed the per-service limit of {MAX_BACKENDS_PER_SERVICE}")]
    TooManyBackends {
        /// Backends requested.
        count: usize,
    },
}

/// The map operations the control plane needs. Implementations apply each call
/// immediately and in order; callers rely on that order for atomic table swaps.
pub trait MapOps {
    /// Writes node-wide settings.
    fn set_config(&mut self, config: GlobalConfig) -> Result<(), DataplaneError>;
    /// Reads a VIP entry.
    fn vip(&self, key: &VipKey) -> Result<Option<VipInfo>, DataplaneError>;
    /// Inserts or replaces a VIP entry (one atomic element replacement).
    fn put_vip(&mut self, key: VipKey, info: VipInfo) -> Result<(), DataplaneError>;
    /// Writes one backend slot.
    fn put_slot(&mut self, index: u32, slot: BackendSlot) -> Result<(), DataplaneError>;
    /// A global counter summed over CPUs.
    fn counter(&self, counter: Counter) -> Result<u64, DataplaneError>;
}

/// What the data plane should do for one service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceProgram {
    /// VIP, port and protocol.
    pub key: VipKey,
    /// Dense index for counters, `< MAX_SERVICES`.
    pub service_id: u32,
    /// Forwarding mode.
    pub mode: ForwardingMode,
    /// Backends in table order.
    pub backends: Vec<Ipv4Addr>,
}

/// Builds the VIP key for an address, port and IP protocol number.
pub fn vip_key(addr: Ipv4Addr, port: u16, proto: u8) -> VipKey {
    VipKey {
        addr_be: u32::from_ne_bytes(addr.octets()),
        port_be: port.to_be(),
        proto,
        _pad: 0,
    }
}

/// Programs one service so that readers see the old table or the new one, never a mix:
/// the new backends go into the table the VIP entry does not point at, then the VIP
/// entry is replaced in one update that switches tables.
///
/// # Errors
/// The first failing map operation; the live table is untouched in that case.
pub fn program_service(ops: &mut impl MapOps, svc: &ServiceProgram) -> Result<(), DataplaneError> {
    if svc.backends.len() > MAX_BACKENDS_PER_SERVICE as usize {
        return Err(DataplaneError::TooManyBackends {
            count: svc.backends.len(),
        });
    }
    let first = svc.service_id * TABLES_PER_SERVICE;
    let table_id = match ops.vip(&svc.key)? {
        Some(live) if live.table_id == first => first + 1,
        _ => first,
    };
    let base = table_id * MAX_BACKENDS_PER_SERVICE;
    for (i, addr) in svc.backends.iter().enumerate() {
        let slot = BackendSlot {
            addr_be: u32::from_ne_bytes(addr.octets()),
            backend_id: i as u32,
        };
        ops.put_slot(base + i as u32, slot)?;
    }
    ops.put_vip(
        svc.key,
        VipInfo {
            service_id: svc.service_id,
            table_id,
            backend_count: svc.backends.len() as u32,
            mode: svc.mode as u32,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{memory::MemoryDataplane, *};

    fn svc(backends: &[[u8; 4]]) -> ServiceProgram {
        ServiceProgram {
            key: vip_key(Ipv4Addr::new(198, 18, 0, 100), 80, 6),
            service_id: 3,
            mode: ForwardingMode::Dsr,
            backends: backends.iter().map(|b| Ipv4Addr::from(*b)).collect(),
        }
    }

    #[test]
    fn tables_alternate_and_vip_is_written_last() {
        let mut dp = MemoryDataplane::default();
        program_service(&mut dp, &svc(&[[198, 18, 0, 11], [198, 18, 0, 12]])).expect("first");
        let first = dp.vips[&svc(&[]).key];
        assert_eq!(first.table_id, 6);
        assert_eq!(first.backend_count, 2);
        assert_eq!(dp.log.last().map(String::as_str), Some("put_vip"));

        program_service(&mut dp, &svc(&[[198, 18, 0, 13]])).expect("second");
        let second = dp.vips[&svc(&[]).key];
        assert_eq!(second.table_id, 7, "the inactive table is filled");
        // The old table is intact until the flip, so a reader mid-update sees it whole.
        let old_base = first.table_base();
        assert_eq!(
            dp.slots[&old_base].addr_be,
            u32::from_ne_bytes([198, 18, 0, 11])
        );
        assert_eq!(
            dp.slots[&second.table_base()].addr_be,
            u32::from_ne_bytes([198, 18, 0, 13])
        );
        assert_eq!(
            dp.log,
            ["put_slot", "put_slot", "put_vip", "put_slot", "put_vip"]
        );

        program_service(&mut dp, &svc(&[[198, 18, 0, 14]])).expect("third");
        assert_eq!(dp.vips[&svc(&[]).key].table_id, 6, "and back");
    }

    #[test]
    fn too_many_backends_is_refused_before_any_write() {
        let mut dp = MemoryDataplane::default();
        let mut big = svc(&[]);
        big.backends = vec![Ipv4Addr::new(198, 18, 1, 1); 257];
        let err = program_service(&mut dp, &big).expect_err("too many");
        assert!(matches!(
            err,
            DataplaneError::TooManyBackends { count: 257 }
        ));
        assert!(dp.log.is_empty());
    }

    #[test]
    fn vip_key_is_in_network_order() {
        let key = vip_key(Ipv4Addr::new(198, 18, 0, 100), 80, 17);
        assert_eq!(key.addr_be.to_ne_bytes(), [198, 18, 0, 100]);
        assert_eq!(key.port_be.to_ne_bytes(), [0, 80]);
        assert_eq!(key.proto, 17);
    }
}
