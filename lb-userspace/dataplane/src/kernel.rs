//! The aya implementation: loads the embedded BPF object, attaches the XDP program (or
//! its TC twin, `node.hook = "tc"`) and writes its maps. A log build of the object (feature `object-log` embeds one) gets
//! its records relayed to the `log` crate for as long as the data plane lives.

use lb_common::Addr;
use std::path::{Path, PathBuf};

use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, ProgramArray},
    programs::{
        Link as _, SchedClassifier, TcAttachType, Xdp, XdpMode,
        links::{FdLink, PinnedLink},
        tc::{SchedClassifierLink, SchedClassifierLinkId},
        xdp::{XdpLink, XdpLinkId},
    },
};
use lb_common::{
    AddrKey, Backend, Counter, GlobalConfig, TableChunk, VipInfo, VipKey, maps::names,
};

use lb_model::{
    config::{self, Hook},
    dataplane::{DataplaneError, MapOps},
};

use crate::{
    logrelay::LogRelay,
    maps::{MapSet, map_error},
};

/// The BPF object built from `lb-ebpf` by this crate's build script.
pub static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));

/// The log build of the same programs (lb-ebpf's feature `log`): aya-log records at
/// drops, nat exhaustion and new flows, relayed to the `log` crate once loaded with
/// [`KernelDataplane::load_object`]. For debugging a node; each record costs the packet
/// that writes it.
#[cfg(feature = "object-log")]
pub static BPF_OBJECT_LOG: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf-log"));

/// Every map, pinned by name under the pin directory so a restarted agent (and `lbctl`)
/// finds the same maps, conntrack included.
pub const PINNED_MAPS: [&str; 22] = [
    names::FLOW_CACHE_GEN,
    names::ECHO_ADDRS,
    names::NAT_JOBS,
    names::TUNNEL_JOBS,
    names::NAT,
    names::NAT_FLOWS,
    names::EMBRYONIC,
    names::EMBRYONIC_SEED,
    names::PROGS,
    names::TC_PROGS,
    names::VIPS,
    names::BACKENDS,
    names::SERVICE_BACKENDS,
    names::TABLE_CHUNKS,
    names::CONNTRACK,
    names::CONFIG,
    names::TUNNEL,
    names::VIP_FILTER,
    names::COUNTERS,
    names::VIP_STATS,
    names::BACKEND_STATS,
    names::PROBE_COUNTERS,
];

/// File name of the pinned XDP link in the pin directory.
pub const LINK_PIN: &str = "link_xdp";

/// File name of the pinned TCX link (`node.hook = "tc"`) in the pin directory.
pub const TC_LINK_PIN: &str = "link_tc";

/// The pinned link's file name for `hook`.
#[must_use]
pub const fn link_pin(hook: Hook) -> &'static str {
    match hook {
        Hook::Xdp => LINK_PIN,
        Hook::Tc => TC_LINK_PIN,
    }
}

/// The programs of one hook: the ingress program, its tail-call array, and what goes in
/// each slot.
struct HookPrograms {
    ingress: &'static str,
    progs: &'static str,
    tail: [(u32, &'static str); 3],
}

const fn programs_of(hook: Hook) -> HookPrograms {
    match hook {
        Hook::Xdp => HookPrograms {
            ingress: names::XDP_PROGRAM,
            progs: names::PROGS,
            tail: [
                (0, names::NAT_PROGRAM),
                (1, names::NAT_ICMP_PROGRAM),
                (2, names::TUNNEL_PROGRAM),
            ],
        },
        Hook::Tc => HookPrograms {
            ingress: names::TC_PROGRAM,
            progs: names::TC_PROGS,
            tail: [
                (0, names::TC_NAT_PROGRAM),
                (1, names::TC_NAT_ICMP_PROGRAM),
                (2, names::TC_TUNNEL_PROGRAM),
            ],
        },
    }
}

/// How the program is attached.
#[derive(Debug)]
enum Attachment {
    /// Not attached.
    None,
    /// Owned by this process: detached when it goes away.
    Owned { interface: String, id: XdpLinkId },
    /// Pinned in bpffs: stays attached after this process exits.
    Pinned {
        interface: String,
        path: PathBuf,
        link: XdpLink,
    },
    /// `lb_tc` on TCX ingress, owned by this process.
    OwnedTc {
        interface: String,
        id: SchedClassifierLinkId,
    },
    /// `lb_tc` on TCX ingress, pinned in bpffs.
    PinnedTc {
        interface: String,
        path: PathBuf,
        link: SchedClassifierLink,
    },
}

/// How [`KernelDataplane::attach`] attached the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachOutcome {
    /// A new attachment.
    Attached,
    /// A pinned link left by a previous agent now runs this program (atomic swap).
    Replaced,
}

/// A loaded data plane: the program (attached or not) and handles to its maps.
pub struct KernelDataplane {
    ebpf: Ebpf,
    /// The hook whose programs are loaded.
    hook: Hook,
    link: Attachment,
    maps: MapSet,
    /// The VIP cache, kept with every VIP map write (see `vipslots.rs`); `None` for an
    /// object without one.
    vip_slots: Option<crate::vipslots::VipSlots>,
    /// Pinned flow tables of another shape, copied into this program's maps (see
    /// [`KernelDataplane::finish_migration`]).
    migration: Option<crate::migrate::Migration>,
    /// Tail-call targets; kept open so the entries stay while this process runs.
    _progs: ProgramArray<MapData>,
    /// A log build's records on their way to the `log` crate; stops on drop.
    _log_relay: Option<LogRelay>,
    /// `lb_probe` on TC egress (see `probe.rs`), once attached.
    pub(crate) probe_link: Option<crate::probe::ProbeLink>,
}

pub(crate) fn program_error(
    action: impl Into<String>,
) -> impl FnOnce(aya::programs::ProgramError) -> DataplaneError {
    let action = action.into();
    move |source| DataplaneError::Program {
        action,
        source: Box::new(source),
    }
}

impl KernelDataplane {
    /// Loads the embedded object and the XDP program into the kernel, unattached, with
    /// private maps.
    ///
    /// # Errors
    /// Verifier rejection, missing privileges, or an object without the expected maps.
    pub fn load() -> Result<Self, DataplaneError> {
        Self::load_with_pins(None)
    }

    /// Like [`KernelDataplane::load`], but every map is pinned under `pin_dir`: maps
    /// already pinned there (by a previous agent) are reused, contents and all.
    ///
    /// # Errors
    /// As `load`, plus a pin directory that cannot be created.
    pub fn load_with_pins(pin_dir: Option<&Path>) -> Result<Self, DataplaneError> {
        Self::load_sized(pin_dir, &config::FlowTables::default())
    }

    /// Like [`KernelDataplane::load_with_pins`], with the flow tables sized as
    /// `tables` says. A pinned flow table of another size or kind is replaced by a
    /// new one holding its entries (see `migrate.rs`); call
    /// [`KernelDataplane::finish_migration`] once the program is attached.
    ///
    /// # Errors
    /// As `load`, plus a pin directory that cannot be created or a pinned table that
    /// cannot be moved aside.
    pub fn load_sized(
        pin_dir: Option<&Path>,
        tables: &config::FlowTables,
    ) -> Result<Self, DataplaneError> {
        Self::load_object(BPF_OBJECT, pin_dir, tables)
    }

    /// Like [`KernelDataplane::load_sized`], from `object` (an object built from
    /// `lb-ebpf`: [`BPF_OBJECT`], or `BPF_OBJECT_LOG` with `object-log`). An object
    /// with aya-log's ring buffer (a log build) gets its records relayed to
    /// [`log::logger`] until the data plane is dropped; it writes records up to
    /// [`log::max_level`] as it is at this call.
    ///
    /// # Errors
    /// As `load_sized`, plus a log relay that cannot start.
    pub fn load_object(
        object: &[u8],
        pin_dir: Option<&Path>,
        tables: &config::FlowTables,
    ) -> Result<Self, DataplaneError> {
        Self::load_hook(Hook::Xdp, object, pin_dir, tables)
    }

    /// Like [`KernelDataplane::load_object`], with the programs of `hook`: `lb_xdp`
    /// and its tail-call programs, or their TC twins (`lb_tc`, ...), which share every
    /// map but the tail-call array.
    ///
    /// # Errors
    /// As `load_object`.
    pub fn load_hook(
        hook: Hook,
        object: &[u8],
        pin_dir: Option<&Path>,
        tables: &config::FlowTables,
    ) -> Result<Self, DataplaneError> {
        let level = crate::logrelay::ebpf_level();
        let embryonic_mask = lb_common::halfopen::buckets_for(tables.embryonic_entries) - 1;
        let embryonic_seed = embryonic_seed(pin_dir)?;
        let mut loader = EbpfLoader::new();
        loader
            .override_global(crate::logrelay::LOG_LEVEL, &level, false)
            .override_global(names::EMBRYONIC_MASK_GLOBAL, &embryonic_mask, true)
            .override_global(names::EMBRYONIC_SEED_GLOBAL, &embryonic_seed, true)
            .map_max_entries(names::CONNTRACK, tables.conntrack_entries)
            .map_max_entries(names::EMBRYONIC, embryonic_mask + 1)
            .map_max_entries(names::NAT, tables.nat_entries)
            .map_max_entries(names::NAT_FLOWS, tables.nat_entries);
        let mut migration = None;
        if let Some(dir) = pin_dir {
            std::fs::create_dir_all(dir).map_err(|source| DataplaneError::Program {
                action: format!("creating pin directory {}", dir.display()),
                source: Box::new(source),
            })?;
            // Maps of earlier releases that a newer one renamed: the program still
            // attached holds them while it runs; their pins only mislead readers.
            for stale in [names::PROGS_V1, names::COUNTERS_V4] {
                let _ = std::fs::remove_file(dir.join(stale));
            }
            let m = crate::migrate::Migration::prepare(dir, tables)?;
            if !m.is_empty() {
                migration = Some(m);
            }
            for name in PINNED_MAPS {
                loader.map_pin_path(name, dir.join(name));
            }
        }
        let mut ebpf = loader
            .load(object)
            .map_err(|source| DataplaneError::Program {
                action: "loading the BPF object".into(),
                source: Box::new(source),
            })?;
        // Before any flow is copied in, and before the programs run: the next agent
        // loads its program with the seed this table is filled with.
        store_embryonic_seed(&mut ebpf, embryonic_seed)?;
        // Before the programs load: they refer to the ring buffer the relay takes.
        let log_relay = LogRelay::start(&mut ebpf, log::logger(), hook)?;
        let hp = programs_of(hook);
        load_program(&mut ebpf, hook, hp.ingress)?;
        // The nat, nat-ICMP and tunnel programs run by tail call from the ingress
        // program; their slots are replaced in place on a restart (the pinned array
        // outlives lbd).
        let progs_map = ebpf.take_map(hp.progs).ok_or(DataplaneError::Missing {
            what: "map",
            name: hp.progs,
        })?;
        let mut progs = ProgramArray::try_from(progs_map).map_err(map_error("open", hp.progs))?;
        for (slot, name) in hp.tail {
            let fd = load_program(&mut ebpf, hook, name)?;
            progs
                .set(slot, &fd, 0)
                .map_err(map_error("set", hp.progs))?;
        }
        let mut maps = MapSet::take(&mut ebpf)?;
        let vips = maps.vips.iter().collect::<Result<Vec<_>, _>>();
        let vips = vips.map_err(map_error("iterate", names::VIPS))?;
        let vip_slots = crate::vipslots::VipSlots::take(&mut ebpf, vips)?;
        if let Some(m) = &migration {
            let copied = m.copy(&mut maps)?;
            tracing::info!(
                flows = copied,
                "copied the flows of pinned tables of another size into the new ones"
            );
        }
        Ok(Self {
            maps,
            vip_slots,
            _progs: progs,
            _log_relay: log_relay,
            ebpf,
            hook,
            link: Attachment::None,
            migration,
            probe_link: None,
        })
    }

    /// After the program is attached: copies the flows the previous program admitted
    /// since loading, and releases the pinned tables it replaced. Nothing to do unless
    /// a table changed shape.
    ///
    /// # Errors
    /// A map read failed or an old pin could not be removed.
    pub fn finish_migration(&mut self) -> Result<(), DataplaneError> {
        if let Some(m) = self.migration.take() {
            let copied = m.finish(&mut self.maps)?;
            tracing::info!(
                flows = copied,
                "copied the flows admitted meanwhile, released the replaced flow tables"
            );
        }
        Ok(())
    }

    /// The pass-everything program from the same object, loaded on first use: the
    /// floor that per-packet benchmarks are measured against.
    ///
    /// # Errors
    /// The object lacks it or the kernel refuses to load it.
    pub fn pass_program(&mut self) -> Result<&mut Xdp, DataplaneError> {
        let prog = xdp_of(&mut self.ebpf, names::XDP_PASS_PROGRAM)?;
        if prog.fd().is_err() {
            prog.load().map_err(program_error("loading xdp_pass"))?;
        }
        Ok(prog)
    }

    /// The XDP program, e.g. for `BPF_PROG_TEST_RUN` (loaded only with [`Hook::Xdp`]).
    ///
    /// # Errors
    /// Only if the object lacks the program, which `load` already ruled out.
    pub fn program(&mut self) -> Result<&mut Xdp, DataplaneError> {
        xdp_of(&mut self.ebpf, names::XDP_PROGRAM)
    }

    /// The loaded XDP program `name` (a tail-call target too), for tests that run one
    /// directly.
    ///
    /// # Errors
    /// No such XDP program in the object, or it is not loaded.
    pub fn xdp_program(&mut self, name: &'static str) -> Result<&mut Xdp, DataplaneError> {
        xdp_of(&mut self.ebpf, name)
    }

    /// Every loaded program with the number of instructions the verifier processed for
    /// it (`None` when the kernel does not say): what the per-packet benchmark reports
    /// next to each program's cost.
    pub fn verified_instructions(&self) -> Vec<(String, Option<u32>)> {
        let mut out: Vec<(String, Option<u32>)> = self
            .ebpf
            .programs()
            .filter_map(|(name, prog)| {
                let info = prog.info().ok()?;
                Some((name.to_owned(), info.verified_instruction_count()))
            })
            .collect();
        out.sort();
        out
    }

    /// The TC program `lb_tc` (loaded only with [`Hook::Tc`]).
    ///
    /// # Errors
    /// Only if the object lacks the program.
    pub fn tc_program(&mut self) -> Result<&mut SchedClassifier, DataplaneError> {
        tc_of(&mut self.ebpf)
    }

    /// The hook whose programs are loaded.
    #[must_use]
    pub fn hook(&self) -> Hook {
        self.hook
    }

    /// Attaches the program to `interface` (resolved in the calling thread's network
    /// namespace).
    ///
    /// With `link_pin`, the attachment is a pinned link that outlives this process; if a
    /// previous agent left one there, it is switched to this program in one atomic
    /// update (`bpf_link_update`), so not a packet goes unhandled during a restart.
    ///
    /// With [`Hook::Tc`] `lb_tc` is attached on TCX ingress instead (`mode` does not
    /// apply), pinned and replaced the same way.
    ///
    /// # Errors
    /// Unknown interface, a driver that refuses the requested mode, or a pin that is not
    /// an XDP link (a TCX link).
    pub fn attach(
        &mut self,
        interface: &str,
        mode: config::XdpMode,
        link_pin: Option<&Path>,
    ) -> Result<AttachOutcome, DataplaneError> {
        if self.hook == Hook::Tc {
            return self.attach_tc(interface, link_pin);
        }
        let aya_mode = match mode {
            config::XdpMode::Native => XdpMode::Driver,
            config::XdpMode::Generic => XdpMode::Skb,
        };
        let failed = |what: &str| program_error(format!("{what} XDP ({mode:?}) on {interface}"));
        let Some(path) = link_pin else {
            let id = self
                .program()?
                .attach(interface, aya_mode)
                .map_err(failed("attaching"))?;
            self.link = Attachment::Owned {
                interface: interface.to_owned(),
                id,
            };
            return Ok(AttachOutcome::Attached);
        };
        let outcome;
        let prog = self.program()?;
        let id = if path.exists() {
            let pinned = PinnedLink::from_pin(path).map_err(|source| DataplaneError::Program {
                action: format!("opening the pinned link {}", path.display()),
                source: Box::new(source),
            })?;
            let link = XdpLink::try_from(FdLink::from(pinned)).map_err(|source| {
                DataplaneError::Program {
                    action: format!("{} is not an XDP link", path.display()),
                    source: Box::new(source),
                }
            })?;
            outcome = AttachOutcome::Replaced;
            prog.attach_to_link(link)
                .map_err(failed("replacing the program of the pinned link for"))?
        } else {
            outcome = AttachOutcome::Attached;
            prog.attach(interface, aya_mode)
                .map_err(failed("attaching"))?
        };
        let link = prog.take_link(id).map_err(failed("taking the link of"))?;
        if outcome == AttachOutcome::Attached {
            let fd = FdLink::try_from(link).map_err(|source| DataplaneError::Program {
                action: "the XDP attachment is not a bpf_link (kernel older than 5.9?)".into(),
                source: Box::new(source),
            })?;
            let pinned = fd.pin(path).map_err(|source| DataplaneError::Program {
                action: format!("pinning the XDP link at {}", path.display()),
                source: Box::new(source),
            })?;
            let link = XdpLink::try_from(FdLink::from(pinned)).map_err(|source| {
                DataplaneError::Program {
                    action: "re-opening the pinned link".into(),
                    source: Box::new(source),
                }
            })?;
            self.link = Attachment::Pinned {
                interface: interface.to_owned(),
                path: path.to_owned(),
                link,
            };
        } else {
            self.link = Attachment::Pinned {
                interface: interface.to_owned(),
                path: path.to_owned(),
                link,
            };
        }
        Ok(outcome)
    }

    /// [`KernelDataplane::attach`] of `lb_tc`: TCX ingress (kernel 6.6 or later; no
    /// qdisc needed), first in the interface's chain as aya orders it by default.
    fn attach_tc(
        &mut self,
        interface: &str,
        link_pin: Option<&Path>,
    ) -> Result<AttachOutcome, DataplaneError> {
        let failed = |what: &str| program_error(format!("{what} TC ingress (TCX) on {interface}"));
        let prog = self.tc_program()?;
        let Some(path) = link_pin else {
            let id = prog
                .attach(interface, TcAttachType::Ingress)
                .map_err(failed("attaching"))?;
            self.link = Attachment::OwnedTc {
                interface: interface.to_owned(),
                id,
            };
            return Ok(AttachOutcome::Attached);
        };
        let (outcome, link) =
            crate::tcx::attach_pinned(prog, "lb_tc", interface, TcAttachType::Ingress, path)?;
        self.link = Attachment::PinnedTc {
            interface: interface.to_owned(),
            path: path.to_owned(),
            link,
        };
        Ok(outcome)
    }

    /// Detaches the program (also a pinned attachment, whose pin is removed).
    ///
    /// # Errors
    /// The kernel refused the detach or the pin could not be removed.
    pub fn detach(&mut self) -> Result<(), DataplaneError> {
        match std::mem::replace(&mut self.link, Attachment::None) {
            Attachment::None => Ok(()),
            Attachment::Owned { interface, id } => self
                .program()?
                .detach(id)
                .map_err(program_error(format!("detaching XDP from {interface}"))),
            Attachment::Pinned {
                interface,
                path,
                link,
            } => {
                remove_link_pin(&path)?;
                // With the pin gone, closing the last descriptor releases the link.
                link.detach()
                    .map_err(program_error(format!("detaching XDP from {interface}")))
            }
            Attachment::OwnedTc { interface, id } => self
                .tc_program()?
                .detach(id)
                .map_err(program_error(format!("detaching TC from {interface}"))),
            Attachment::PinnedTc {
                interface,
                path,
                link,
            } => {
                remove_link_pin(&path)?;
                link.detach()
                    .map_err(program_error(format!("detaching TC from {interface}")))
            }
        }
    }

    /// Removes the map pins under `pin_dir` (and the directory once empty). Maps stay
    /// alive while a program or process still uses them.
    ///
    /// # Errors
    /// A pin that exists could not be removed.
    pub fn unpin_maps(pin_dir: &Path) -> std::io::Result<()> {
        for name in PINNED_MAPS {
            match std::fs::remove_file(pin_dir.join(name)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        // Tables a migration left aside, and the pre-V2 nat map.
        if let Ok(entries) = std::fs::read_dir(pin_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.contains("_MIGRATING") || name == names::NAT_V1 {
                    std::fs::remove_file(entry.path())?;
                }
            }
        }
        match std::fs::remove_dir(pin_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(
                    path = %pin_dir.display(),
                    error = %e,
                    "pin directory not removed, leaving it"
                );
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The loaded object, for the programs outside the hook's set (`lb_probe`).
    pub(crate) fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// The maps, for reading counters, conntrack and tables.
    pub fn maps(&self) -> &MapSet {
        &self.maps
    }

    /// The maps, writable (tests forget conntrack entries).
    pub fn maps_mut(&mut self) -> &mut MapSet {
        &mut self.maps
    }
}

impl std::fmt::Debug for KernelDataplane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDataplane")
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

fn tc_of(ebpf: &mut Ebpf) -> Result<&mut SchedClassifier, DataplaneError> {
    let missing = DataplaneError::Missing {
        what: "program",
        name: names::TC_PROGRAM,
    };
    let prog = ebpf.program_mut(names::TC_PROGRAM).ok_or(missing)?;
    prog.try_into()
        .map_err(program_error("the program is not a TC classifier"))
}

/// Loads program `name` as a program of `hook`'s type; a descriptor of it for a
/// tail-call slot.
fn load_program(
    ebpf: &mut Ebpf,
    hook: Hook,
    name: &'static str,
) -> Result<aya::programs::ProgramFd, DataplaneError> {
    let prog = ebpf.program_mut(name).ok_or(DataplaneError::Missing {
        what: "program",
        name,
    })?;
    let fd = match hook {
        Hook::Xdp => {
            let prog: &mut Xdp = prog
                .try_into()
                .map_err(program_error(format!("{name} is not XDP")))?;
            prog.load()
                .map_err(program_error(format!("loading {name}")))?;
            prog.fd()
                .map_err(program_error(format!("{name} has no fd")))?
                .try_clone()
        }
        Hook::Tc => {
            let prog: &mut SchedClassifier = prog
                .try_into()
                .map_err(program_error(format!("{name} is not a TC classifier")))?;
            prog.load()
                .map_err(program_error(format!("loading {name}")))?;
            prog.fd()
                .map_err(program_error(format!("{name} has no fd")))?
                .try_clone()
        }
    };
    fd.map_err(|source| DataplaneError::Program {
        action: format!("duplicating the descriptor of {name}"),
        source: Box::new(source),
    })
}

/// Removes a pinned link's pin (the link itself goes when its last descriptor closes).
pub(crate) fn remove_link_pin(path: &Path) -> Result<(), DataplaneError> {
    std::fs::remove_file(path).map_err(|source| DataplaneError::Program {
        action: format!("removing the link pin {}", path.display()),
        source: Box::new(source),
    })
}

/// The XDP program `name` of `ebpf`.
fn xdp_of<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Xdp, DataplaneError> {
    let missing = DataplaneError::Missing {
        what: "program",
        name,
    };
    let prog = ebpf.program_mut(name).ok_or(missing)?;
    prog.try_into()
        .map_err(program_error(format!("{name} is not XDP")))
}

impl lb_model::dataplane::Traffic for KernelDataplane {
    fn counter(&self, counter: Counter) -> Result<u64, DataplaneError> {
        self.maps.counter(counter)
    }

    fn vip_stats(&self, service_id: u32) -> Result<lb_common::TrafficStats, DataplaneError> {
        self.maps.vip_stats(service_id)
    }

    fn backend_stats(&self, backend_id: u32) -> Result<lb_common::TrafficStats, DataplaneError> {
        self.maps.backend_stats(backend_id)
    }

    fn flow_counts(&self) -> Result<lb_model::dataplane::FlowCounts, DataplaneError> {
        self.maps.flow_counts()
    }
}

impl lb_model::dataplane::ShareTraffic for KernelDataplane {
    type Reader = MapSet;

    fn share(&self) -> Result<MapSet, DataplaneError> {
        self.maps.reopen()
    }
}

impl MapOps for KernelDataplane {
    fn set_config(&mut self, config: GlobalConfig) -> Result<(), DataplaneError> {
        self.maps
            .config
            .set(0, config, 0)
            .map_err(map_error("set", names::CONFIG))
    }

    fn set_tunnel(&mut self, tunnel: lb_common::TunnelConfig) -> Result<(), DataplaneError> {
        self.maps
            .tunnel
            .set(0, tunnel, 0)
            .map_err(map_error("set", names::TUNNEL))
    }

    fn put_vip(&mut self, key: VipKey, info: VipInfo) -> Result<(), DataplaneError> {
        self.maps
            .vips
            .insert(key, info, 0)
            .map_err(map_error("insert", names::VIPS))?;
        match &mut self.vip_slots {
            Some(slots) => slots.put(key, info),
            None => Ok(()),
        }
    }

    fn delete_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        if let Some(slots) = &mut self.vip_slots {
            slots.forget(key)?;
        }
        crate::maps::removed(self.maps.vips.remove(key), names::VIPS)
    }

    fn put_backend(&mut self, id: u32, backend: Backend) -> Result<(), DataplaneError> {
        self.maps
            .backends
            .set(id, backend, 0)
            .map_err(map_error("set", names::BACKENDS))
    }

    fn put_list_entry(&mut self, index: u32, backend_id: u32) -> Result<(), DataplaneError> {
        self.maps
            .lists
            .set(index, backend_id, 0)
            .map_err(map_error("set", names::SERVICE_BACKENDS))
    }

    fn put_table_chunk(&mut self, index: u32, chunk: TableChunk) -> Result<(), DataplaneError> {
        self.maps
            .chunks
            .set(index, chunk, 0)
            .map_err(map_error("set", names::TABLE_CHUNKS))
    }

    fn put_vip_filter_word(&mut self, index: u32, word: u64) -> Result<(), DataplaneError> {
        self.maps
            .vip_filter
            .set(index, word, 0)
            .map_err(map_error("set", names::VIP_FILTER))
    }

    fn put_echo_addr(&mut self, addr: Addr) -> Result<(), DataplaneError> {
        self.maps
            .echo
            .insert(AddrKey { addr }, 0, 0)
            .map_err(map_error("insert", names::ECHO_ADDRS))
    }

    fn delete_echo_addr(&mut self, addr: Addr) -> Result<(), DataplaneError> {
        crate::maps::removed(self.maps.echo.remove(&AddrKey { addr }), names::ECHO_ADDRS)
    }
}

/// The seed of the half-open table's bucket hash: the one pinned under `pin_dir` by an
/// earlier agent (its table, reused, was filled with it), else a new random one.
///
/// # Errors
/// The pinned seed cannot be read, or the kernel gave no random bytes.
fn embryonic_seed(pin_dir: Option<&Path>) -> Result<u32, DataplaneError> {
    if let Some(dir) = pin_dir
        && dir.join(names::EMBRYONIC_SEED).exists()
    {
        let map: aya::maps::Array<MapData, u32> =
            crate::maps::typed(&mut { dir }, names::EMBRYONIC_SEED)?;
        let seed = map
            .get(&0, 0)
            .map_err(map_error("get", names::EMBRYONIC_SEED))?;
        if seed != 0 {
            return Ok(seed);
        }
    }
    loop {
        let mut bytes = [0u8; 4];
        rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).map_err(
            |e| DataplaneError::Program {
                action: "drawing the half-open table's seed".into(),
                source: Box::new(std::io::Error::from(e)),
            },
        )?;
        // Zero stands for "not drawn yet" in the pinned map.
        let seed = u32::from_ne_bytes(bytes);
        if seed != 0 {
            return Ok(seed);
        }
    }
}

/// Writes the half-open table's seed into its pinned map.
fn store_embryonic_seed(ebpf: &mut Ebpf, seed: u32) -> Result<(), DataplaneError> {
    let name = names::EMBRYONIC_SEED;
    let map = ebpf
        .map_mut(name)
        .ok_or(DataplaneError::Missing { what: "map", name })?;
    let mut map: aya::maps::Array<&mut MapData, u32> =
        aya::maps::Array::try_from(map).map_err(map_error("open", name))?;
    map.set(0, seed, 0).map_err(map_error("set", name))
}
