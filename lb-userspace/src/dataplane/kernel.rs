//! The aya implementation: loads the embedded BPF object, attaches the XDP program and
//! writes its maps.

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray},
    programs::{Xdp, XdpMode, xdp::XdpLinkId},
};
use lb_common::{
    Backend, Counter, FlowEntry, FlowKey, GlobalConfig, TableChunk, TrafficStats, VipInfo, VipKey,
    maps::names,
};

use super::{DataplaneError, MapOps};
use crate::config;

/// The BPF object built from `lb-ebpf` by this crate's build script.
pub static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));

/// A loaded data plane: the program (attached or not) and handles to its maps.
pub struct KernelDataplane {
    ebpf: Ebpf,
    link: Option<(String, XdpLinkId)>,
    vips: HashMap<MapData, VipKey, VipInfo>,
    backends: Array<MapData, Backend>,
    lists: Array<MapData, u32>,
    chunks: Array<MapData, TableChunk>,
    conntrack: HashMap<MapData, FlowKey, FlowEntry>,
    config: Array<MapData, GlobalConfig>,
    counters: PerCpuArray<MapData, u64>,
    vip_stats: PerCpuArray<MapData, TrafficStats>,
    backend_stats: PerCpuArray<MapData, TrafficStats>,
}

fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, DataplaneError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or(DataplaneError::Missing { what: "map", name })?;
    T::try_from(map).map_err(|source| DataplaneError::Map {
        op: "open",
        map: name,
        source,
    })
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

impl KernelDataplane {
    /// Loads the embedded object and the XDP program into the kernel, unattached.
    ///
    /// # Errors
    /// Verifier rejection, missing privileges, or an object without the expected maps.
    pub fn load() -> Result<Self, DataplaneError> {
        let mut ebpf = Ebpf::load(BPF_OBJECT).map_err(|source| DataplaneError::Program {
            action: "loading the BPF object".into(),
            source: Box::new(source),
        })?;
        let prog = xdp_of(&mut ebpf)?;
        prog.load()
            .map_err(program_error("loading the XDP program"))?;
        Ok(Self {
            vips: take(&mut ebpf, names::VIPS)?,
            backends: take(&mut ebpf, names::BACKENDS)?,
            lists: take(&mut ebpf, names::SERVICE_BACKENDS)?,
            chunks: take(&mut ebpf, names::TABLE_CHUNKS)?,
            conntrack: take(&mut ebpf, names::CONNTRACK)?,
            config: take(&mut ebpf, names::CONFIG)?,
            counters: take(&mut ebpf, names::COUNTERS)?,
            vip_stats: take(&mut ebpf, names::VIP_STATS)?,
            backend_stats: take(&mut ebpf, names::BACKEND_STATS)?,
            ebpf,
            link: None,
        })
    }

    /// The XDP program, e.g. for `BPF_PROG_TEST_RUN`.
    ///
    /// # Errors
    /// Only if the object lacks the program, which `load` already ruled out.
    pub fn program(&mut self) -> Result<&mut Xdp, DataplaneError> {
        xdp_of(&mut self.ebpf)
    }

    /// Attaches the program to `interface` (resolved in the calling thread's network
    /// namespace).
    ///
    /// # Errors
    /// Unknown interface, or a driver that refuses the requested mode.
    pub fn attach(&mut self, interface: &str, mode: config::XdpMode) -> Result<(), DataplaneError> {
        let aya_mode = match mode {
            config::XdpMode::Native => XdpMode::Driver,
            config::XdpMode::Generic => XdpMode::Skb,
        };
        let id = self
            .program()?
            .attach(interface, aya_mode)
            .map_err(program_error(format!(
                "attaching XDP ({mode:?}) to {interface}"
            )))?;
        self.link = Some((interface.to_owned(), id));
        Ok(())
    }

    /// Detaches the program if attached. Dropping the data plane also detaches.
    ///
    /// # Errors
    /// The kernel refused the detach.
    pub fn detach(&mut self) -> Result<(), DataplaneError> {
        if let Some((interface, id)) = self.link.take() {
            self.program()?
                .detach(id)
                .map_err(program_error(format!("detaching XDP from {interface}")))?;
        }
        Ok(())
    }

    /// Traffic of a service, summed over CPUs.
    ///
    /// # Errors
    /// The map read failed.
    pub fn vip_stats(&self, service_id: u32) -> Result<TrafficStats, DataplaneError> {
        sum_stats(&self.vip_stats, service_id, names::VIP_STATS)
    }

    /// Traffic of a backend, summed over CPUs.
    ///
    /// # Errors
    /// The map read failed.
    pub fn backend_stats(&self, backend_id: u32) -> Result<TrafficStats, DataplaneError> {
        sum_stats(&self.backend_stats, backend_id, names::BACKEND_STATS)
    }

    /// The conntrack entry of a flow, if any.
    ///
    /// # Errors
    /// The map read failed.
    pub fn flow(&self, key: &FlowKey) -> Result<Option<FlowEntry>, DataplaneError> {
        match self.conntrack.get(key, 0) {
            Ok(entry) => Ok(Some(entry)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(source) => Err(map_error("get", names::CONNTRACK)(source)),
        }
    }

    /// Number of conntrack entries (walks the map).
    pub fn flow_count(&self) -> usize {
        self.conntrack.keys().filter(Result::is_ok).count()
    }
}

fn sum_stats(
    map: &PerCpuArray<MapData, TrafficStats>,
    index: u32,
    name: &'static str,
) -> Result<TrafficStats, DataplaneError> {
    let per_cpu = map.get(&index, 0).map_err(map_error("read", name))?;
    Ok(per_cpu
        .iter()
        .fold(TrafficStats::default(), |acc, s| acc.plus(*s)))
}

impl std::fmt::Debug for KernelDataplane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelDataplane")
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

fn xdp_of(ebpf: &mut Ebpf) -> Result<&mut Xdp, DataplaneError> {
    let missing = DataplaneError::Missing {
        what: "program",
        name: names::XDP_PROGRAM,
    };
    let prog = ebpf.program_mut(names::XDP_PROGRAM).ok_or(missing)?;
    prog.try_into()
        .map_err(program_error("the program is not XDP"))
}

fn map_error(
    op: &'static str,
    map: &'static str,
) -> impl FnOnce(aya::maps::MapError) -> DataplaneError {
    move |source| DataplaneError::Map { op, map, source }
}

impl MapOps for KernelDataplane {
    fn set_config(&mut self, config: GlobalConfig) -> Result<(), DataplaneError> {
        self.config
            .set(0, config, 0)
            .map_err(map_error("set", names::CONFIG))
    }

    fn put_vip(&mut self, key: VipKey, info: VipInfo) -> Result<(), DataplaneError> {
        self.vips
            .insert(key, info, 0)
            .map_err(map_error("insert", names::VIPS))
    }

    fn delete_vip(&mut self, key: &VipKey) -> Result<(), DataplaneError> {
        match self.vips.remove(key) {
            Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
            Err(source) => Err(map_error("remove", names::VIPS)(source)),
        }
    }

    fn put_backend(&mut self, id: u32, backend: Backend) -> Result<(), DataplaneError> {
        self.backends
            .set(id, backend, 0)
            .map_err(map_error("set", names::BACKENDS))
    }

    fn put_list_entry(&mut self, index: u32, backend_id: u32) -> Result<(), DataplaneError> {
        self.lists
            .set(index, backend_id, 0)
            .map_err(map_error("set", names::SERVICE_BACKENDS))
    }

    fn put_table_chunk(&mut self, index: u32, chunk: TableChunk) -> Result<(), DataplaneError> {
        self.chunks
            .set(index, chunk, 0)
            .map_err(map_error("set", names::TABLE_CHUNKS))
    }

    fn counter(&self, counter: Counter) -> Result<u64, DataplaneError> {
        let per_cpu = self
            .counters
            .get(&(counter as u32), 0)
            .map_err(map_error("read", names::COUNTERS))?;
        Ok(per_cpu.iter().sum())
    }
}
