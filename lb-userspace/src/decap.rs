//! `lbd decap`: what a backend of `ipip`/`gue` services runs. It loads `lb_decap`
//! (see `lb_dataplane::decap`), tells it the host's VIPs and GUE ports, and attaches
//! it to an interface's TC ingress with TCX.
//!
//! Two ways to run it: in the foreground (no pin directory), attached while the
//! process lives and detached on SIGINT/SIGTERM, counters printed at exit; or pinned
//! (`--pin-path DIR`), attached until `lbd decap --detach --pin-path DIR`, the process
//! returning at once. A pinned run again with the same directory changes the VIPs and
//! GUE ports in place and swaps the program atomically; `--status` prints what the
//! pins hold and the counters.

use std::{io::Write, net::IpAddr, path::PathBuf};

use lb_dataplane::decap::{
    DecapCounts, DecapMaps, DecapSettings, SettingsError, gue_ports_of, load::Decap,
    pinned_interfaces,
};
use lb_model::dataplane::DataplaneError;

/// What `lbd decap` was asked to do.
#[derive(Debug)]
pub enum DecapCommand {
    /// Load, configure and attach `lb_decap`.
    Run {
        /// The interface tunnelled packets arrive on.
        interface: String,
        /// VIPs and GUE ports.
        settings: DecapSettings,
        /// Pin the maps and the link here and return; `None`: stay in the
        /// foreground until a signal.
        pin_dir: Option<PathBuf>,
    },
    /// Detach what a pinned run left and remove its pins.
    Detach {
        /// The run's pin directory.
        pin_dir: PathBuf,
    },
    /// Print what a pinned run holds and its counters.
    Status {
        /// The run's pin directory.
        pin_dir: PathBuf,
    },
}

/// Why `lbd decap` failed.
#[derive(Debug, thiserror::Error)]
pub enum DecapError {
    /// The VIPs or ports cannot be given to the program.
    #[error("invalid decap settings")]
    Settings(#[source] SettingsError),
    /// Loading, attaching or a map operation failed.
    #[error("{what}")]
    Dataplane {
        /// What was being done.
        what: String,
        /// The data plane's error.
        #[source]
        source: DataplaneError,
    },
    /// The pin directory is not on a bpf filesystem.
    #[error("pin directory {path}")]
    Bpffs {
        /// The directory.
        path: PathBuf,
        /// Why it cannot hold pins.
        #[source]
        source: std::io::Error,
    },
    /// Nothing is pinned there.
    #[error("no lb_decap is pinned under {path} (was `lbd decap --pin-path` run with it?)")]
    NotPinned {
        /// The directory.
        path: PathBuf,
    },
    /// Waiting for a signal failed.
    #[error("waiting for SIGINT/SIGTERM")]
    Signal(#[source] std::io::Error),
    /// Writing the report failed.
    #[error("writing the report")]
    Output(#[source] std::io::Error),
}

impl From<SettingsError> for DecapError {
    fn from(e: SettingsError) -> Self {
        Self::Settings(e)
    }
}

fn dataplane(what: impl Into<String>) -> impl FnOnce(DataplaneError) -> DecapError {
    let what = what.into();
    move |source| DecapError::Dataplane { what, source }
}

/// Runs `command`, writing what it did to `out`.
///
/// # Errors
/// [`DecapError`] saying which step failed; a run that fails leaves nothing attached
/// that it attached.
pub fn run(object: &[u8], command: DecapCommand, out: &mut impl Write) -> Result<(), DecapError> {
    match command {
        DecapCommand::Run {
            interface,
            settings,
            pin_dir,
        } => {
            if let Some(dir) = &pin_dir {
                lb_dataplane::bpffs::ensure(dir).map_err(|source| DecapError::Bpffs {
                    path: dir.clone(),
                    source,
                })?;
            }
            warn_strict_rp_filter(&interface);
            let mut decap =
                Decap::load(object, pin_dir.as_deref()).map_err(dataplane("loading lb_decap"))?;
            decap
                .configure(&settings)
                .map_err(dataplane("writing the VIPs and GUE ports"))?;
            let outcome = decap
                .attach(&interface, pin_dir.as_deref())
                .map_err(dataplane(format!("attaching lb_decap to {interface}")))?;
            let line = format!(
                "lb_decap {} on {interface} ingress: VIPs {}; GUE ports {}",
                match outcome {
                    lb_dataplane::kernel::AttachOutcome::Attached => "attached",
                    lb_dataplane::kernel::AttachOutcome::Replaced => "replaced",
                },
                join(settings.vips()),
                ports_text(&settings.gue_ports().collect::<Vec<_>>()),
            );
            tracing::info!(interface = %interface, pinned = pin_dir.is_some(), "{line}");
            let Some(dir) = pin_dir else {
                writeln!(out, "{line}; detaches on SIGINT/SIGTERM").map_err(DecapError::Output)?;
                out.flush().map_err(DecapError::Output)?;
                wait_for_signal()?;
                let counts = decap.maps().counts();
                decap
                    .detach()
                    .map_err(dataplane(format!("detaching lb_decap from {interface}")))?;
                let counts = counts.map_err(dataplane("reading the counters"))?;
                write!(out, "detached from {interface}; counters:\n{counts}")
                    .map_err(DecapError::Output)?;
                return Ok(());
            };
            writeln!(
                out,
                "{line}; pinned under {} (lbd decap --detach --pin-path {0} removes it)",
                dir.display()
            )
            .map_err(DecapError::Output)
        }
        DecapCommand::Detach { pin_dir } => {
            if !pin_dir.exists() {
                return Err(DecapError::NotPinned { path: pin_dir });
            }
            let interfaces = lb_dataplane::decap::load::remove_pinned(&pin_dir)
                .map_err(dataplane(format!("removing {}", pin_dir.display())))?;
            writeln!(
                out,
                "lb_decap detached from {}; pins under {} removed",
                if interfaces.is_empty() {
                    "no interface".to_owned()
                } else {
                    interfaces.join(", ")
                },
                pin_dir.display()
            )
            .map_err(DecapError::Output)
        }
        DecapCommand::Status { pin_dir } => {
            let maps = DecapMaps::open_pinned(&pin_dir).map_err(|source| match source {
                DataplaneError::Pinned { .. } if !pin_dir.exists() => DecapError::NotPinned {
                    path: pin_dir.clone(),
                },
                source => DecapError::Dataplane {
                    what: format!("opening the pins under {}", pin_dir.display()),
                    source,
                },
            })?;
            let read = dataplane("reading the pinned maps");
            let vips = maps.vips();
            let config = maps.config();
            let counts = maps.counts();
            let (vips, config, counts) = match (vips, config, counts) {
                (Ok(v), Ok(c), Ok(n)) => (v, c, n),
                (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => return Err(read(e)),
            };
            let report = status_report(
                &pinned_interfaces(&pin_dir),
                &vips,
                &gue_ports_of(&config),
                &counts,
            );
            out.write_all(report.as_bytes()).map_err(DecapError::Output)
        }
    }
}

/// What `lbd decap --status` prints: where it is attached, what it serves, and every
/// counter (one `name value` line each, names as in the program).
#[must_use]
pub fn status_report(
    interfaces: &[String],
    vips: &[IpAddr],
    gue_ports: &[u16],
    counts: &DecapCounts,
) -> String {
    let attached = if interfaces.is_empty() {
        "(not attached)".to_owned()
    } else {
        interfaces.join(", ")
    };
    format!(
        "attached  {attached}\nvips      {}\ngue ports {}\n{counts}",
        join(vips.iter().copied()),
        ports_text(gue_ports)
    )
}

fn join(addrs: impl Iterator<Item = IpAddr>) -> String {
    let v: Vec<String> = addrs.map(|a| a.to_string()).collect();
    if v.is_empty() {
        "(none)".to_owned()
    } else {
        v.join(", ")
    }
}

fn ports_text(ports: &[u16]) -> String {
    if ports.is_empty() {
        "(none: GUE off)".to_owned()
    } else {
        ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Strict reverse-path filtering (`rp_filter=1`, the larger of `all` and the
/// interface's) drops a decapsulated packet unless the route back to its client goes
/// out of the interface it came in on; said once at start, since the drop is silent.
fn warn_strict_rp_filter(interface: &str) {
    let read = |scope: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{scope}/rp_filter"))
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    if read("all").max(read(interface)) == 1 {
        tracing::warn!(
            interface,
            "strict rp_filter: decapsulated packets from clients not routed via this interface are dropped by the kernel; set net.ipv4.conf.{{all,{interface}}}.rp_filter to 2 (loose) or 0"
        );
    }
}

fn wait_for_signal() -> Result<(), DecapError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(DecapError::Signal)?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok(())
    })
    .map_err(DecapError::Signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_report_names_every_counter() {
        let vips: Vec<IpAddr> = vec![
            "198.18.100.1".parse().expect("v4"),
            "2001:db8::100:1".parse().expect("v6"),
        ];
        let text = status_report(&["eth0".into()], &vips, &[6080], &DecapCounts::default());
        assert!(text.starts_with(
            "attached  eth0\nvips      198.18.100.1, 2001:db8::100:1\ngue ports 6080\n"
        ));
        for c in lb_common::DecapCounter::ALL {
            assert!(text.contains(&format!("\n{:<20} 0\n", c.name())), "{text}");
        }
        let off = status_report(&[], &[], &[], &DecapCounts::default());
        assert!(
            off.contains("(not attached)") && off.contains("GUE off"),
            "{off}"
        );
    }
}
