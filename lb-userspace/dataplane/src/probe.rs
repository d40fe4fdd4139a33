//! `lb_probe` on the node: the TC egress program that sends health probes of
//! `ipip`/`gue` services through the tunnel (lb-ebpf's `probe.rs`), attached with TCX
//! on the node's interface and pinned like the ingress link, so a restarted lbd swaps
//! its program in place; and its counters.
//!
//! It shares the object's maps (backends, tunnel settings, next hops) with the ingress
//! programs, so it is loaded from the same [`KernelDataplane`].

use std::path::{Path, PathBuf};

use aya::programs::{
    Link as _, SchedClassifier, TcAttachType,
    tc::{SchedClassifierLink, SchedClassifierLinkId},
};
use lb_common::{ProbeCounter, maps::names};
use lb_model::dataplane::DataplaneError;

use crate::kernel::{KernelDataplane, program_error, remove_link_pin};

/// File name of `lb_probe`'s pinned TCX egress link in the pin directory.
pub const PROBE_LINK_PIN: &str = "link_probe";

/// How `lb_probe` is attached.
#[derive(Debug)]
pub(crate) enum ProbeLink {
    /// Owned by this process: detached when the data plane is dropped.
    Owned { id: SchedClassifierLinkId },
    /// Pinned in bpffs: stays attached after this process exits.
    Pinned {
        path: PathBuf,
        link: SchedClassifierLink,
    },
}

/// `lb_probe`'s counters, summed over CPUs, in [`ProbeCounter::ALL`] order.
pub type ProbeCounts = [u64; ProbeCounter::COUNT as usize];

impl KernelDataplane {
    /// `lb_probe`, loaded into the kernel on first use.
    ///
    /// # Errors
    /// The object lacks it, or the verifier refused it.
    pub fn probe_program(&mut self) -> Result<&mut SchedClassifier, DataplaneError> {
        let name = names::PROBE_PROGRAM;
        let prog: &mut SchedClassifier = self
            .ebpf_mut()
            .program_mut(name)
            .ok_or(DataplaneError::Missing {
                what: "program",
                name,
            })?
            .try_into()
            .map_err(program_error(format!("{name} is not a TC classifier")))?;
        if prog.fd().is_err() {
            prog.load()
                .map_err(program_error(format!("loading {name}")))?;
        }
        Ok(prog)
    }

    /// Attaches `lb_probe` on TCX egress of `interface` (kernel 6.6 or later). With
    /// `link_pin` the link is pinned there, and a link a previous agent pinned runs
    /// this program from now on (one atomic update). Returns whether a pinned link was
    /// taken over.
    ///
    /// # Errors
    /// Unknown interface, a kernel without TCX, or a pin that is not a TCX link.
    pub fn attach_probe(
        &mut self,
        interface: &str,
        link_pin: Option<&Path>,
    ) -> Result<bool, DataplaneError> {
        let failed =
            |what: &str| program_error(format!("{what} lb_probe on TC egress of {interface}"));
        let prog = self.probe_program()?;
        let Some(path) = link_pin else {
            let id = prog
                .attach(interface, TcAttachType::Egress)
                .map_err(failed("attaching"))?;
            self.probe_link = Some(ProbeLink::Owned { id });
            return Ok(false);
        };
        let (outcome, link) =
            crate::tcx::attach_pinned(prog, "lb_probe", interface, TcAttachType::Egress, path)?;
        let replaced = outcome == crate::kernel::AttachOutcome::Replaced;
        self.probe_link = Some(ProbeLink::Pinned {
            path: path.to_owned(),
            link,
        });
        Ok(replaced)
    }

    /// Detaches `lb_probe` (a pinned link's pin removed too); nothing if not attached.
    ///
    /// # Errors
    /// The kernel refused the detach or the pin could not be removed.
    pub fn detach_probe(&mut self) -> Result<(), DataplaneError> {
        let failed = || program_error("detaching lb_probe from TC egress");
        match self.probe_link.take() {
            None => Ok(()),
            Some(ProbeLink::Owned { id }) => self.probe_program()?.detach(id).map_err(failed()),
            Some(ProbeLink::Pinned { path, link }) => {
                remove_link_pin(&path)?;
                link.detach().map_err(failed())
            }
        }
    }

    /// `lb_probe`'s counters, summed over CPUs.
    ///
    /// # Errors
    /// The map is missing or cannot be read.
    pub fn probe_counts(&self) -> Result<ProbeCounts, DataplaneError> {
        self.maps().probe_counts()?.ok_or(DataplaneError::Missing {
            what: "map",
            name: names::PROBE_COUNTERS,
        })
    }
}
