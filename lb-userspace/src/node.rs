//! lbd on a real node: the kernel data plane loaded and attached, the node's neighbour
//! table and forwarding sysctls; start, leave running, shut down, clean up. The agent
//! itself ([`lb_control::agent::Agent`]) knows nothing of the kernel; this is where it
//! meets it.

use std::{net::IpAddr, path::Path};

use lb_control::agent::{
    Agent, AgentError, Host, Parts, TunnelRoute, dsr_backends, global_config, service_specs,
};
use lb_dataplane::{
    bpffs,
    kernel::{AttachOutcome, KernelDataplane, LINK_PIN, TC_LINK_PIN, link_pin},
    maps::MapSet,
    neighbour::Neighbours,
    policy, possible_cpus,
    probe::PROBE_LINK_PIN,
    sysctl::Forwarding,
};
use lb_model::{
    config::{Hook, ValidConfig},
    dataplane::{MapOps as _, MapRead, Programmer, from_addr16},
};

/// The agent lbd runs: over the kernel's data plane, changing this node.
pub type NodeAgent = Agent<KernelDataplane, KernelHost>;

/// The node itself, as a reconcile changes it: managed neighbour entries for backends
/// on the interface, forwarding enabled (with the previous values, to restore them).
#[derive(Debug)]
pub struct KernelHost {
    ifindex: u32,
    interface: String,
    forwarding: Vec<Forwarding>,
    /// One rtnetlink socket for the agent's life.
    neighbours: Neighbours,
}

impl Host for KernelHost {
    fn keep_resolved(&mut self, addrs: &[IpAddr]) -> Result<(), AgentError> {
        let mut failures = self.neighbours.ensure_managed(self.ifindex, addrs);
        if failures.len() > 1 {
            tracing::warn!(
                interface = %self.interface,
                failed = failures.len(),
                of = addrs.len(),
                "cannot keep some backends' neighbours resolved; the first is reported"
            );
        }
        match failures.drain(..).next() {
            None => Ok(()),
            Some((addr, source)) => Err(AgentError::Neighbour {
                addr,
                interface: self.interface.clone(),
                source,
            }),
        }
    }

    fn tunnel_route(&mut self, addr: IpAddr) -> Option<TunnelRoute> {
        let route = match lb_dataplane::route::get(addr) {
            Ok(route) => route,
            Err(err) => {
                tracing::warn!(backend = %addr, error = %err, "no route towards a tunnel backend");
                return None;
            }
        };
        if route.oif != self.ifindex {
            tracing::warn!(backend = %addr, oif = route.oif, interface = %self.interface, "the route towards a tunnel backend leaves by another interface than the data plane's");
        }
        Some(TunnelRoute {
            next_hop: (route.oif == self.ifindex).then_some(route.next_hop),
            source: route.source,
        })
    }

    fn route_probes(&mut self, v6: bool, gateway: Option<IpAddr>) {
        let family = if v6 { "ipv6" } else { "ipv4" };
        let result = match gateway {
            Some(g) => policy::install(v6, g, self.ifindex),
            None => policy::remove(v6),
        };
        match (result, gateway) {
            (Ok(()), Some(g)) => tracing::info!(
                family,
                gateway = %g,
                interface = %self.interface,
                table = policy::PROBE_TABLE,
                "health probes of tunnel services routed to lb_probe"
            ),
            (Ok(()), None) => {}
            (Err(err), _) => tracing::warn!(
                family,
                error = %err,
                "cannot set the policy route of tunnel health probes: they fail, and their backends show unhealthy"
            ),
        }
    }

    fn enable_ipv6_forwarding(&mut self) -> Result<(), AgentError> {
        if self.forwarding.len() < 2 {
            let f = enable_forwarding("ipv6", &self.interface)?;
            self.forwarding.push(f);
        }
        Ok(())
    }
}

/// Loads the data plane, programs every service, makes the kernel keep backend
/// neighbours resolved, enables forwarding, then attaches — in that order, so the first
/// packet already sees complete tables.
///
/// # Errors
/// [`AgentError`] saying which step of loading or attaching failed; nothing stays
/// attached in that case. Programming what the sources say is not among them (see
/// [`Agent::assemble`]).
///
/// With a pin directory, a data plane left running by a previous agent is adopted: its
/// maps (conntrack included) are reused, its services taken over, and its XDP link
/// switched to the new program atomically.
pub fn start(config: ValidConfig) -> Result<NodeAgent, AgentError> {
    let interface = config.node.interface.clone();
    let ifindex = ifindex(&interface)?;
    let pin_dir = config.node.pin_dir().map(Path::to_path_buf);
    if let Some(dir) = &pin_dir {
        bpffs::ensure(dir).map_err(|source| AgentError::PinDir {
            path: dir.display().to_string(),
            source,
        })?;
    }
    let object = crate::dataplane_object();
    let hook = config.node.hook;
    let mut dataplane =
        KernelDataplane::load_hook(hook, object, pin_dir.as_deref(), &config.flow_tables)?;
    let mut programmer = Programmer::default();
    programmer.set_answer_ping(config.node.answer_ping);
    let adopted = programmer.adopt(dataplane.maps())?;
    if adopted > 0 {
        tracing::info!(
            services = adopted,
            "adopted the services of the pinned data plane"
        );
    }
    // Before the program is attached: a new prefilter map starts empty, which would
    // pass the adopted VIPs' traffic as not ours.
    programmer.sync_filter(&mut dataplane)?;
    dataplane.set_config(global_config(&config, possible_cpus()))?;
    let host = KernelHost {
        ifindex,
        interface: interface.clone(),
        forwarding: vec![enable_forwarding("ipv4", &interface)?],
        neighbours: Neighbours::open().map_err(|source| AgentError::Netlink { source })?,
    };
    let xdp_mode = config.node.xdp_mode;
    let mut agent = Agent::assemble(config, dataplane, host, programmer);
    let pin = pin_dir.as_ref().map(|d| d.join(link_pin(hook)));
    match agent
        .dataplane_mut()
        .attach(&interface, xdp_mode, pin.as_deref())?
    {
        AttachOutcome::Replaced => {
            tracing::info!(
                interface = %interface,
                hook = hook.name(),
                "took over the running program's link"
            );
        }
        AttachOutcome::Attached => {}
    }
    // Health probes of tunnel services leave through lb_probe on TC egress (see
    // lb_dataplane::probe); without it they would skip the tunnel.
    let probe_pin = pin_dir.as_ref().map(|d| d.join(PROBE_LINK_PIN));
    match agent
        .dataplane_mut()
        .attach_probe(&interface, probe_pin.as_deref())
    {
        Ok(true) => tracing::info!(interface = %interface, "took over the running lb_probe link"),
        Ok(false) => {}
        Err(err) => tracing::warn!(
            interface = %interface,
            error = %err,
            "cannot attach lb_probe on TC egress: health probes of ipip/gue services do not go through the tunnel"
        ),
    }
    // A previous agent on the other hook: its program goes now that this one runs
    // (both ran for this instant: the other hook's passes are this one's input).
    if let Some(dir) = &pin_dir {
        let other = match hook {
            Hook::Xdp => TC_LINK_PIN,
            Hook::Tc => LINK_PIN,
        };
        match std::fs::remove_file(dir.join(other)) {
            Ok(()) => tracing::info!(
                interface = %interface,
                hook = hook.name(),
                "detached the previous agent's program from the other hook"
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                path = %dir.join(other).display(),
                error = %e,
                "cannot remove the other hook's link pin: both programs stay attached"
            ),
        }
    }
    // Flow tables of another shape were copied before the attach; the flows the
    // previous program admitted since then are copied now.
    agent.dataplane_mut().finish_migration()?;
    Ok(agent)
}

/// Exits leaving the data plane running: pinned maps and link keep forwarding, with
/// conntrack, until the next agent adopts them. Without a pin directory there is nothing
/// to leave behind, so this is [`shutdown`].
///
/// # Errors
/// As [`shutdown`] when pinning is off.
pub fn leave_running(agent: NodeAgent) -> Result<(), AgentError> {
    match agent.config().node.pin_dir() {
        Some(dir) => {
            tracing::info!(
                path = %dir.display(),
                "leaving the data plane running for the next lbd"
            );
            Ok(())
        }
        None => shutdown(agent),
    }
}

/// Tears everything down: detaches the program, removes the pins and the neighbour
/// entries the agent made, and restores the interface's forwarding settings.
///
/// # Errors
/// The detach failed (the program is still detached when the agent is dropped).
pub fn shutdown(agent: NodeAgent) -> Result<(), AgentError> {
    let Parts {
        mut dataplane,
        host,
        config,
        applied,
        drained,
    } = agent.into_parts();
    dataplane.detach()?;
    if let Err(err) = dataplane.detach_probe() {
        tracing::warn!(error = %err, "cannot detach lb_probe");
    }
    remove_probe_routes();
    if let Some(dir) = config.node.pin_dir()
        && let Err(err) = KernelDataplane::unpin_maps(dir)
    {
        tracing::warn!(
            path = %dir.display(),
            error = %err,
            "cannot remove the map pins, leaving them"
        );
    }
    let mut made = dsr_backends(&applied);
    made.extend(drained);
    made.sort_unstable();
    made.dedup();
    let mut neighbours = host.neighbours;
    remove_neighbours(&mut neighbours, host.ifindex, &made);
    for f in host.forwarding {
        if let Err(err) = f.restore() {
            tracing::warn!(
                interface = %config.node.interface,
                error = %err,
                "cannot restore the interface's forwarding setting"
            );
        }
    }
    Ok(())
}

/// Removes a data plane that an agent left running (`lbd --cleanup`): the pinned XDP
/// link (which detaches the program), the map pins and the backends' neighbour entries.
///
/// # Errors
/// A pin that exists could not be removed.
pub fn cleanup(config: &ValidConfig) -> Result<(), AgentError> {
    let mut backends = dsr_backends(&service_specs(config));
    if let Some(dir) = config.node.pin_dir() {
        // What was programmed — from the file, EndpointSlices or etcd alike — is in
        // the pinned maps; read it before the pins go.
        if let Ok(maps) = MapSet::open_pinned(dir) {
            backends.extend(programmed_backends(&maps));
        }
        let pin_error = |source| AgentError::PinDir {
            path: dir.display().to_string(),
            source,
        };
        for pin in [LINK_PIN, TC_LINK_PIN, PROBE_LINK_PIN] {
            match std::fs::remove_file(dir.join(pin)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(pin_error(e)),
                _ => {}
            }
        }
        KernelDataplane::unpin_maps(dir).map_err(pin_error)?;
    }
    remove_probe_routes();
    backends.sort_unstable();
    backends.dedup();
    if let Ok(index) = ifindex(&config.node.interface) {
        match Neighbours::open() {
            Ok(mut neighbours) => remove_neighbours(&mut neighbours, index, &backends),
            Err(err) => tracing::warn!(
                error = %err,
                "cannot open a netlink socket, leaving the backends' neighbour entries"
            ),
        }
    }
    Ok(())
}

/// Removes the policy rules and routes of tunnel health probes (both families; what
/// is not there is fine), warning for what stays.
fn remove_probe_routes() {
    for v6 in [false, true] {
        if let Err(err) = policy::remove(v6) {
            tracing::warn!(v6, error = %err, "cannot remove the policy route of tunnel health probes");
        }
    }
}

/// Removes the neighbour entries of `addrs`, warning for each that stays.
fn remove_neighbours(neighbours: &mut Neighbours, ifindex: u32, addrs: &[IpAddr]) {
    for (addr, err) in neighbours.remove(ifindex, addrs) {
        tracing::warn!(
            backend = %addr,
            error = %err,
            "cannot remove the backend's neighbour entry, leaving it"
        );
    }
}

/// Backends in the lists of the `dsr` and `nat` services of a data plane: those whose
/// neighbour entries lbd keeps resolved.
fn programmed_backends(maps: &impl MapRead) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for (_, info) in maps.vips().unwrap_or_default() {
        if lb_common::ForwardingMode::from_u32(info.mode) == Some(lb_common::ForwardingMode::L7) {
            continue;
        }
        for i in 0..info.list_len {
            let backend = maps
                .list_entry(info.list_base + i)
                .and_then(|id| maps.backend(id));
            if let Ok(b) = backend {
                out.push(from_addr16(b.addr));
            }
        }
    }
    out
}

fn enable_forwarding(family: &'static str, interface: &str) -> Result<Forwarding, AgentError> {
    Forwarding::enable(family, interface).map_err(|source| AgentError::Sysctl {
        family,
        interface: interface.to_owned(),
        source,
    })
}

/// The interface index of `name` in the calling thread's network namespace.
///
/// # Errors
/// [`AgentError::NoSuchInterface`].
pub fn ifindex(name: &str) -> Result<u32, AgentError> {
    let missing = || AgentError::NoSuchInterface {
        name: name.to_owned(),
    };
    // SIOCGIFINDEX asks any socket of the namespace; a UDP one costs nothing.
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|_| missing())?;
    rustix::net::netdevice::name_to_index(&sock, name).map_err(|_| missing())
}
