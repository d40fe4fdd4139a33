//! The node settings the data plane depends on.

use std::{fs, io, path::PathBuf};

/// IPv4 forwarding on one interface. `bpf_fib_lookup` refuses to resolve a next hop
/// for packets arriving on an interface without it (`BPF_FIB_LKUP_RET_FWD_DISABLED`).
#[derive(Debug)]
pub struct Ipv4Forwarding {
    path: PathBuf,
    previous: String,
}

impl Ipv4Forwarding {
    /// Enables forwarding on `interface` in the caller's network namespace and
    /// remembers the previous value.
    ///
    /// # Errors
    /// The sysctl could not be read or written (missing interface, no privilege).
    pub fn enable(interface: &str) -> io::Result<Self> {
        let path = PathBuf::from(format!("/proc/sys/net/ipv4/conf/{interface}/forwarding"));
        let previous = fs::read_to_string(&path)?.trim().to_owned();
        if previous != "1" {
            fs::write(&path, "1")?;
            log::info!("enabled IPv4 forwarding on {interface} (was {previous})");
        }
        Ok(Self { path, previous })
    }

    /// Puts the previous value back.
    ///
    /// # Errors
    /// The write failed.
    pub fn restore(self) -> io::Result<()> {
        if self.previous != "1" {
            fs::write(&self.path, &self.previous)?;
        }
        Ok(())
    }
}
