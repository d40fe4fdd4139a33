//! Loading `lb_decap` from the embedded object and attaching it with TCX (Linux 6.6;
//! no clsact qdisc needed), appended after any TCX program already on the interface:
//! those see the outer packet first, as they would in front of a kernel tunnel device.
//!
//! The object holds the load balancer's programs and maps too. Only `lb_decap` is
//! loaded, and every map but its three is created with one entry: a backend has no use
//! for the node's conntrack, NAT or table pools (hundreds of MiB at their full sizes).

use std::path::{Path, PathBuf};

use aya::{
    Ebpf, EbpfLoader,
    programs::{
        LinkOrder, SchedClassifier, TcAttachType,
        links::PinnedLink,
        tc::{SchedClassifierLinkId, TcAttachOptions},
    },
};
use lb_common::maps::names;
use lb_model::dataplane::DataplaneError;

use super::{DecapMaps, DecapSettings, PINNED_MAPS, link_pin};
use crate::kernel::AttachOutcome;

/// How the program is attached.
#[derive(Debug)]
enum Attachment {
    /// Not attached.
    None,
    /// Owned by this process: detached when it goes away.
    Owned {
        interface: String,
        id: SchedClassifierLinkId,
    },
    /// Pinned: stays attached after this process exits.
    Pinned { interface: String, path: PathBuf },
}

/// `lb_decap` loaded (attached or not), with its maps.
pub struct Decap {
    ebpf: Ebpf,
    maps: DecapMaps,
    link: Attachment,
}

impl std::fmt::Debug for Decap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decap")
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

fn program_error(
    action: impl Into<String>,
) -> impl FnOnce(aya::programs::ProgramError) -> DataplaneError {
    let action = action.into();
    move |source| DataplaneError::Program {
        action,
        source: Box::new(source),
    }
}

fn failed<E: std::error::Error + Send + Sync + 'static>(
    action: impl Into<String>,
) -> impl FnOnce(E) -> DataplaneError {
    let action = action.into();
    move |source| DataplaneError::Program {
        action,
        source: Box::new(source),
    }
}

impl Decap {
    /// Loads `lb_decap` from `object` (an object built from `lb-ebpf`), unattached.
    /// With `pin_dir`, its maps are pinned there, and maps already pinned there (by an
    /// earlier run) are reused, counters and all.
    ///
    /// # Errors
    /// An object that does not parse or lacks the program or its maps, a verifier
    /// rejection, missing privileges, a pin directory that cannot be created.
    pub fn load(object: &[u8], pin_dir: Option<&Path>) -> Result<Self, DataplaneError> {
        let parsed = aya_obj::Object::parse(object).map_err(failed("parsing the BPF object"))?;
        let mut loader = EbpfLoader::new();
        for name in parsed.maps.keys() {
            if !PINNED_MAPS.contains(&name.as_str()) {
                loader.map_max_entries(name, 1);
            }
        }
        if let Some(dir) = pin_dir {
            std::fs::create_dir_all(dir)
                .map_err(failed(format!("creating pin directory {}", dir.display())))?;
            for name in PINNED_MAPS {
                loader.map_pin_path(name, dir.join(name));
            }
        }
        let mut ebpf = loader
            .load(object)
            .map_err(failed("loading the BPF object"))?;
        program_of(&mut ebpf)?
            .load()
            .map_err(program_error("loading lb_decap"))?;
        let maps = DecapMaps {
            vips: typed(&mut ebpf, names::DECAP_VIPS)?,
            config: typed(&mut ebpf, names::DECAP_CONFIG)?,
            counters: typed(&mut ebpf, names::DECAP_COUNTERS)?,
        };
        Ok(Self {
            ebpf,
            maps,
            link: Attachment::None,
        })
    }

    /// The program, e.g. for `BPF_PROG_TEST_RUN`.
    ///
    /// # Errors
    /// Only if the object lacks it, which `load` already ruled out.
    pub fn program(&mut self) -> Result<&mut SchedClassifier, DataplaneError> {
        program_of(&mut self.ebpf)
    }

    /// Makes the maps say what `settings` says (see [`DecapMaps::apply`]).
    ///
    /// # Errors
    /// A map update failed.
    pub fn configure(&mut self, settings: &DecapSettings) -> Result<(), DataplaneError> {
        self.maps.apply(settings)
    }

    /// The maps, for the counters.
    pub fn maps(&self) -> &DecapMaps {
        &self.maps
    }

    /// The interface the program is attached to, if it is.
    pub fn interface(&self) -> Option<&str> {
        match &self.link {
            Attachment::None => None,
            Attachment::Owned { interface, .. } | Attachment::Pinned { interface, .. } => {
                Some(interface)
            }
        }
    }

    /// Attaches the program to `interface`'s ingress (resolved in the calling thread's
    /// network namespace).
    ///
    /// With `pin_dir`, the attachment is a TCX link pinned there ([`link_pin`]) that
    /// outlives this process; one a previous run left for the interface is switched to
    /// this program in one atomic update.
    ///
    /// # Errors
    /// Unknown interface, a kernel without TCX, or a pin that is not a TCX link.
    pub fn attach(
        &mut self,
        interface: &str,
        pin_dir: Option<&Path>,
    ) -> Result<AttachOutcome, DataplaneError> {
        let what = |action: &str| format!("{action} lb_decap on {interface} (TCX ingress)");
        let prog = self.program()?;
        let Some(dir) = pin_dir else {
            let id = prog
                .attach_with_options(
                    interface,
                    TcAttachType::Ingress,
                    TcAttachOptions::TcxOrder(LinkOrder::default()),
                )
                .map_err(program_error(what("attaching")))?;
            self.link = Attachment::Owned {
                interface: interface.to_owned(),
                id,
            };
            return Ok(AttachOutcome::Attached);
        };
        let path = link_pin(dir, interface);
        // The link stays pinned; its descriptor is not needed here.
        let (outcome, _link) =
            crate::tcx::attach_pinned(prog, "lb_decap", interface, TcAttachType::Ingress, &path)?;
        self.link = Attachment::Pinned {
            interface: interface.to_owned(),
            path,
        };
        Ok(outcome)
    }

    /// Detaches the program (a pinned attachment too: its pin is removed).
    ///
    /// # Errors
    /// The kernel refused the detach or the pin could not be removed.
    pub fn detach(&mut self) -> Result<(), DataplaneError> {
        match std::mem::replace(&mut self.link, Attachment::None) {
            Attachment::None => Ok(()),
            Attachment::Owned { interface, id } => self.program()?.detach(id).map_err(
                program_error(format!("detaching lb_decap from {interface}")),
            ),
            Attachment::Pinned { path, .. } => unpin_link(&path),
        }
    }
}

/// Removes what `lbd decap --pin-path DIR` left running: every pinned link under
/// `pin_dir` (so the program detaches from its interface once nothing else holds the
/// link), the map pins, and the directory once empty. Returns the interfaces it
/// detached from.
///
/// # Errors
/// A pin that exists could not be removed.
pub fn remove_pinned(pin_dir: &Path) -> Result<Vec<String>, DataplaneError> {
    let interfaces = super::pinned_interfaces(pin_dir);
    for interface in &interfaces {
        unpin_link(&link_pin(pin_dir, interface))?;
    }
    for name in PINNED_MAPS {
        match std::fs::remove_file(pin_dir.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(failed(format!("removing the map pin {name}"))(e));
            }
            _ => {}
        }
    }
    if let Err(e) = std::fs::remove_dir(pin_dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %pin_dir.display(), error = %e, "pin directory not removed, leaving it");
    }
    Ok(interfaces)
}

/// Removes a link pin; the link (and so the attachment) goes with the last holder.
fn unpin_link(path: &Path) -> Result<(), DataplaneError> {
    let pinned = PinnedLink::from_pin(path).map_err(failed(format!(
        "opening the pinned link {}",
        path.display()
    )))?;
    pinned
        .unpin()
        .map_err(failed(format!("removing the link pin {}", path.display())))?;
    Ok(())
}

fn program_of(ebpf: &mut Ebpf) -> Result<&mut SchedClassifier, DataplaneError> {
    let missing = DataplaneError::Missing {
        what: "program",
        name: names::DECAP_PROGRAM,
    };
    ebpf.program_mut(names::DECAP_PROGRAM)
        .ok_or(missing)?
        .try_into()
        .map_err(program_error("lb_decap is not a TC classifier"))
}

fn typed<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, DataplaneError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or(DataplaneError::Missing { what: "map", name })?;
    T::try_from(map).map_err(crate::maps::map_error("open", name))
}
