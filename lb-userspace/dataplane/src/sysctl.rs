//! The node settings the data plane depends on.

use std::{fs, io, path::PathBuf};

/// IP forwarding on one interface for one family. `bpf_fib_lookup` refuses to resolve
/// a next hop for packets arriving on an interface without it
/// (`BPF_FIB_LKUP_RET_FWD_DISABLED`).
#[derive(Debug)]
pub struct Forwarding {
    path: PathBuf,
    previous: String,
}

impl Forwarding {
    /// Enables forwarding of `family` ("ipv4" or "ipv6") on `interface` in the caller's
    /// network namespace and remembers the previous value.
    ///
    /// # Errors
    /// The sysctl could not be read or written (missing interface, no privilege).
    pub fn enable(family: &str, interface: &str) -> io::Result<Self> {
        let path = PathBuf::from(format!(
            "/proc/sys/net/{family}/conf/{interface}/forwarding"
        ));
        let previous = fs::read_to_string(&path)?.trim().to_owned();
        if previous != "1" {
            fs::write(&path, "1")?;
            tracing::info!(
                family,
                interface,
                previous = %previous,
                "enabled forwarding on the interface"
            );
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
