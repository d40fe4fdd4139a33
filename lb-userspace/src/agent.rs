//! The agent: turns a validated config into a programmed, attached data plane and
//! takes it down again cleanly.

use std::{ffi::CString, net::Ipv4Addr};

use lb_common::{Counter, ForwardingMode, GlobalConfig};

use crate::{
    config::{ForwardingModeConfig, ValidConfig},
    dataplane::{
        DataplaneError, ServiceProgram, kernel::KernelDataplane, neighbour, program_service,
        vip_key,
    },
    sysctl::Ipv4Forwarding,
};

/// Why the agent could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configured interface does not exist in this network namespace.
    #[error("interface {name:?} not found (node.interface)")]
    NoSuchInterface {
        /// The configured name.
        name: String,
    },
    /// The data plane could not be loaded, programmed or attached.
    #[error(transparent)]
    Dataplane(#[from] DataplaneError),
    /// A node setting the data plane needs could not be applied.
    #[error("{setting} on {interface}: {source}")]
    Sysctl {
        /// The setting.
        setting: &'static str,
        /// The interface.
        interface: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A managed neighbour entry for a backend could not be created.
    #[error("keeping backend {addr} resolved on {interface}: {source}")]
    Neighbour {
        /// The backend.
        addr: Ipv4Addr,
        /// The interface.
        interface: String,
        /// The kernel's error.
        #[source]
        source: std::io::Error,
    },
}

/// A running data plane for one config.
#[derive(Debug)]
pub struct Agent {
    dataplane: KernelDataplane,
    config: ValidConfig,
    ifindex: u32,
    forwarding: Ipv4Forwarding,
}

/// What the data plane is told for each configured service, in config order (the
/// position is the service id).
pub fn service_programs(config: &ValidConfig) -> Vec<ServiceProgram> {
    config
        .services
        .iter()
        .enumerate()
        .map(|(id, svc)| ServiceProgram {
            key: vip_key(svc.vip, svc.port, svc.protocol.number()),
            service_id: id as u32,
            mode: match svc.mode {
                ForwardingModeConfig::Dsr => ForwardingMode::Dsr,
            },
            backends: svc.backends.iter().map(|b| b.address).collect(),
        })
        .collect()
}

impl Agent {
    /// Loads the data plane, programs every service, makes the kernel keep backend
    /// neighbours resolved, then attaches — in that order, so the first packet already
    /// sees complete tables.
    ///
    /// # Errors
    /// [`AgentError`] saying which step failed; nothing stays attached in that case.
    pub fn start(config: ValidConfig) -> Result<Self, AgentError> {
        let ifindex = ifindex(&config.node.interface)?;
        let mut dataplane = KernelDataplane::load()?;
        dataplane.set_config(GlobalConfig {
            hash_seed: config.node.hash_seed,
            flags: 0,
        })?;
        for svc in service_programs(&config) {
            program_service(&mut dataplane, &svc)?;
            for &addr in &svc.backends {
                neighbour::ensure_managed(ifindex, addr).map_err(|source| {
                    AgentError::Neighbour {
                        addr,
                        interface: config.node.interface.clone(),
                        source,
                    }
                })?;
            }
        }
        let forwarding = Ipv4Forwarding::enable(&config.node.interface).map_err(|source| {
            AgentError::Sysctl {
                setting: "net.ipv4.conf.<interface>.forwarding",
                interface: config.node.interface.clone(),
                source,
            }
        })?;
        dataplane.attach(&config.node.interface, config.node.xdp_mode)?;
        Ok(Self {
            dataplane,
            config,
            ifindex,
            forwarding,
        })
    }

    /// The loaded data plane (counters, maps).
    pub fn dataplane(&self) -> &KernelDataplane {
        &self.dataplane
    }

    /// Every global counter, summed over CPUs, in index order.
    ///
    /// # Errors
    /// A map read failed.
    pub fn counters(&self) -> Result<Vec<(Counter, u64)>, DataplaneError> {
        Counter::ALL
            .iter()
            .map(|&c| Ok((c, self.dataplane.counter(c)?)))
            .collect()
    }

    /// The config this agent runs.
    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    /// Detaches the program, removes the neighbour entries the agent made and restores
    /// the interface's forwarding setting.
    ///
    /// # Errors
    /// The detach failed (the program is still detached when the agent is dropped).
    pub fn shutdown(mut self) -> Result<(), AgentError> {
        self.dataplane.detach()?;
        for svc in &self.config.services {
            for b in &svc.backends {
                if let Err(err) = neighbour::remove(self.ifindex, b.address) {
                    log::warn!("removing neighbour entry for {}: {err}", b.address);
                }
            }
        }
        if let Err(err) = self.forwarding.restore() {
            log::warn!(
                "restoring IPv4 forwarding on {}: {err}",
                self.config.node.interface
            );
        }
        Ok(())
    }
}

use crate::dataplane::MapOps as _;

/// The interface index of `name` in the calling thread's network namespace.
///
/// # Errors
/// [`AgentError::NoSuchInterface`].
pub fn ifindex(name: &str) -> Result<u32, AgentError> {
    let missing = || AgentError::NoSuchInterface {
        name: name.to_owned(),
    };
    let c_name = CString::new(name).map_err(|_| missing())?;
    // SAFETY: c_name is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if index == 0 {
        Err(missing())
    } else {
        Ok(index)
    }
}
