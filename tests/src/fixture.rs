//! Running the real XDP program on crafted packets through `BPF_PROG_TEST_RUN`.
//!
//! [`FixtureHost`] is a namespace with one veth (`eth0`, 198.18.0.2/24, forwarding on)
//! and permanent neighbour entries for the backends, so `bpf_fib_lookup` resolves next
//! hops exactly as on a node. [`XdpRig`] loads the data plane inside that namespace
//! (call [`FixtureHost::run`]) and feeds it packets as if they arrived on `eth0`.
//!
//! The rig runs either hook's programs: `lb_xdp` or its TC twin `lb_tc`, whichever the
//! calling test runs under ([`with_hook`]; [`hook_tests!`](crate::hook_tests) makes one
//! test per hook of each case). TC verdicts are reported in XDP terms, so a case reads
//! the same for both: `TC_ACT_OK` as `XDP_PASS`, `TC_ACT_SHOT` as `XDP_DROP`, and
//! `TC_ACT_REDIRECT` (how `lb_tc` sends back out, as XDP_TX does, or elsewhere) as
//! `XDP_TX`; the `Tx`/`Redirect` counters that every fixture checks tell the two apart.

use std::{
    cell::Cell,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Instant,
};

use aya::{TestRun as _, TestRunOptions};
use lb_common::{Counter, CounterKind, FlowKey, ForwardingMode, GlobalConfig, flow_hash};
use lb_dataplane::kernel::KernelDataplane;
use lb_model::config::FlowTables;
pub use lb_model::config::Hook;
use lb_model::dataplane::{MapOps as _, MapRead as _, Programmer, ServiceSpec, Traffic as _};

use crate::Netns;

/// MAC of the fixture host's `eth0`.
pub const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// A client MAC (the frame's source as it arrives).
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The host's address on `eth0`.
pub const HOST_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The host's IPv6 address on `eth0`.
pub const HOST_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

/// Pins the calling thread to one CPU (`BPF_PROG_TEST_RUN` runs a program on the
/// caller's CPU, so per-CPU state follows this).
///
/// # Errors
/// `sched_setaffinity` failed (no such CPU, or not allowed).
pub fn pin_thread_to_cpu(cpu: usize) -> std::io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is empty; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Backend `i` (0-based) of the fixture host: address and the MAC its permanent
/// neighbour entry resolves to.
pub fn backend(i: u8) -> (IpAddr, [u8; 6]) {
    let addr = Ipv4Addr::new(198, 18, 0, 11 + i);
    (IpAddr::V4(addr), [0x02, 0, 0, 0, 0, 0x11 + i])
}

/// A service on `vip:port` for `proto`, forwarding by `mode` to `backends` with the
/// rest at its defaults (the table's own size, equal weights, no port list): what
/// most data-plane tests and benchmarks program.
pub fn service(
    name: impl Into<String>,
    vip: IpAddr,
    port: u16,
    proto: u8,
    mode: ForwardingMode,
    backends: Vec<IpAddr>,
) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        key: lb_model::dataplane::vip_key(vip, port, proto),
        mode,
        backends,
        table_size: None,
        weights: Vec::new(),
        ports: Vec::new(),
    }
}

/// IPv6 backend `i` (0-based): address and MAC.
pub fn backend6(i: u8) -> (IpAddr, [u8; 6]) {
    let addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x11 + u16::from(i));
    (IpAddr::V6(addr), [0x02, 0, 0, 0, 0x06, 0x11 + i])
}

/// The MAC the fixture host resolves a backend address (IPv4 or IPv6) to.
///
/// # Panics
/// If the address has no neighbour entry there.
pub fn mac_of(addr: IpAddr) -> [u8; 6] {
    (0..RESOLVED_BACKENDS)
        .flat_map(|i| [backend(i), backend6(i)])
        .find(|(a, _)| *a == addr)
        .map(|(_, m)| m)
        .unwrap_or_else(|| panic!("{addr} has no neighbour entry"))
}

/// The node's `nat` source addresses in fixtures.
pub const NAT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
/// IPv6 `nat` source address.
pub const NAT_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 3);
/// The client's addresses, resolved to [`CLIENT_MAC`] in the fixture host (replies of
/// `nat` flows are sent to them).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// IPv6 client address.
pub const CLIENT_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// Backends with a neighbour entry.
pub const RESOLVED_BACKENDS: u8 = 4;

/// A router on `eth0` with a permanent neighbour entry: the next hop of the routed
/// backend prefixes [`ROUTED_V4`] and [`ROUTED_V6`] (backends in another subnet, as
/// tunnel modes have them).
pub const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 254);
/// The router's IPv6 address.
pub const ROUTER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xfe);
/// The router's MAC.
pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
/// Backends behind the router: 198.19.0.0/24.
pub const ROUTED_V4: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 0);
/// IPv6 backends behind the router: 2001:db8:1::/64.
pub const ROUTED_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0);

thread_local! {
    /// The hook rigs of this thread load (see [`with_hook`]).
    static HOOK: Cell<Hook> = const { Cell::new(Hook::Xdp) };
}

/// Runs `f` with rigs (and fixture hosts) made on this thread loading `hook`'s
/// programs.
pub fn with_hook<T>(hook: Hook, f: impl FnOnce() -> T) -> T {
    let before = HOOK.replace(hook);
    let out = f();
    HOOK.set(before);
    out
}

/// The hook rigs made on this thread load.
pub fn current_hook() -> Hook {
    HOOK.get()
}

/// Makes each named case (a `fn()` test body) a test per hook: `xdp::<case>` and
/// `tc::<case>`, the same packets and expectations through `lb_xdp` and `lb_tc`.
#[macro_export]
macro_rules! hook_tests {
    ($($case:ident),* $(,)?) => {
        mod xdp {
            $(
                #[test]
                fn $case() {
                    $crate::fixture::with_hook($crate::fixture::Hook::Xdp, super::$case);
                }
            )*
        }
        mod tc {
            $(
                #[test]
                fn $case() {
                    $crate::fixture::with_hook($crate::fixture::Hook::Tc, super::$case);
                }
            )*
        }
    };
}

/// The namespace fixtures run in.
#[derive(Debug)]
pub struct FixtureHost {
    ns: Netns,
    /// The hook of the thread that made it, which its threads run under.
    hook: Hook,
}

impl FixtureHost {
    /// Creates the namespace, its veth and the backends' neighbour entries.
    pub fn new() -> Self {
        let ns = Netns::new("fx");
        ns.ip(&[
            "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
        ]);
        let mac = fmt_mac(HOST_MAC);
        ns.ip(&["link", "set", "eth0", "address", &mac]);
        ns.ip(&["addr", "add", &format!("{HOST_ADDR}/24"), "dev", "eth0"]);
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{HOST_ADDR6}/64"),
            "dev",
            "eth0",
            "nodad",
        ]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["link", "set", "peer0", "up"]);
        let clients = [
            (IpAddr::V4(CLIENT_ADDR), CLIENT_MAC),
            (IpAddr::V6(CLIENT_ADDR6), CLIENT_MAC),
            (IpAddr::V4(ROUTER), ROUTER_MAC),
            (IpAddr::V6(ROUTER6), ROUTER_MAC),
        ];
        for (addr, mac) in (0..RESOLVED_BACKENDS)
            .flat_map(|i| [backend(i), backend6(i)])
            .chain(clients)
        {
            ns.ip(&[
                "neigh",
                "replace",
                &addr.to_string(),
                "lladdr",
                &fmt_mac(mac),
                "dev",
                "eth0",
                "nud",
                "permanent",
            ]);
        }
        ns.ip(&[
            "route",
            "add",
            &format!("{ROUTED_V4}/24"),
            "via",
            &ROUTER.to_string(),
        ]);
        ns.ip(&[
            "-6",
            "route",
            "add",
            &format!("{ROUTED_V6}/64"),
            "via",
            &ROUTER6.to_string(),
        ]);
        ns.sysctl("net.ipv4.conf.eth0.forwarding", "1");
        ns.sysctl("net.ipv6.conf.eth0.forwarding", "1");
        Self {
            ns,
            hook: current_hook(),
        }
    }

    /// Runs `ip ARGS` in the namespace (a test's own routes or neighbours).
    pub fn ip(&self, args: &[&str]) {
        self.ns.ip(args);
    }

    /// Runs `f` on a thread inside the namespace, under this host's hook.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let hook = self.hook;
        self.ns.run(move || with_hook(hook, f))
    }
}

impl Default for FixtureHost {
    fn default() -> Self {
        Self::new()
    }
}

fn fmt_mac(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// What the program did with one packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The XDP action (`XDP_PASS` = 2, `XDP_TX` = 3, `XDP_DROP` = 1).
    pub action: u32,
    /// The packet as the program left it.
    pub bytes: Vec<u8>,
}

/// TC actions, as numbers the kernel returns.
mod tc_action {
    pub const OK: i32 = 0;
    pub const SHOT: i32 = 2;
    pub const REDIRECT: i32 = 7;
}

/// XDP actions, as numbers the kernel returns.
pub mod action {
    /// `XDP_ABORTED`.
    pub const ABORTED: u32 = 0;
    /// `XDP_DROP`.
    pub const DROP: u32 = 1;
    /// `XDP_PASS`.
    pub const PASS: u32 = 2;
    /// `XDP_TX`.
    pub const TX: u32 = 3;
}

/// A loaded (unattached) data plane inside the fixture namespace.
#[derive(Debug)]
pub struct XdpRig {
    /// The data plane under test.
    pub dataplane: KernelDataplane,
    /// What is programmed.
    pub programmer: Programmer,
    specs: Vec<ServiceSpec>,
    seed: u32,
    ifindex: u32,
    /// Which program packets run through.
    pub hook: Hook,
}

impl XdpRig {
    /// Loads the data plane with `seed`; call from inside [`FixtureHost::run`].
    pub fn load(seed: u32) -> Self {
        Self::load_pinned(seed, None)
    }

    /// Like [`XdpRig::load`], with the maps pinned under `pin_dir` (on a bpffs) so a
    /// reader can open them as `lbctl` does.
    pub fn load_pinned(seed: u32, pin_dir: Option<&std::path::Path>) -> Self {
        Self::load_sized(seed, pin_dir, &FlowTables::default())
    }

    /// Like [`XdpRig::load_pinned`], with the flow tables sized as `tables` says.
    pub fn load_sized(seed: u32, pin_dir: Option<&std::path::Path>, tables: &FlowTables) -> Self {
        let dataplane = KernelDataplane::load_hook(
            current_hook(),
            lb_dataplane::kernel::BPF_OBJECT,
            pin_dir,
            tables,
        )
        .expect("load data plane");
        Self::with(dataplane, seed)
    }

    /// Like [`XdpRig::load`], from another build of the object (e.g.
    /// `kernel::BPF_OBJECT_LOG`, whose records the data plane relays to `log`).
    pub fn load_object(seed: u32, object: &[u8]) -> Self {
        let dataplane =
            KernelDataplane::load_hook(current_hook(), object, None, &FlowTables::default())
                .expect("load data plane");
        Self::with(dataplane, seed)
    }

    fn with(mut dataplane: KernelDataplane, seed: u32) -> Self {
        let hook = dataplane.hook();
        dataplane
            .set_config(GlobalConfig {
                hash_seed: seed,
                ..GlobalConfig::default()
            })
            .expect("set config");
        let ifindex = lb_userspace::node::ifindex("eth0").expect("eth0 in fixture netns");
        Self {
            dataplane,
            programmer: Programmer::default(),
            specs: Vec::new(),
            seed,
            ifindex,
            hook,
        }
    }

    /// Configures `nat` mode: source addresses and `count` ports from `first`.
    pub fn set_nat(&mut self, first: u16, count: u16) {
        self.dataplane
            .set_config(GlobalConfig {
                hash_seed: self.seed,
                nat_port_first: first,
                nat_port_count: count,
                nat_v4: lb_model::dataplane::addr16(NAT_ADDR.into()),
                nat_v6: lb_model::dataplane::addr16(NAT_ADDR6.into()),
                ..GlobalConfig::default()
            })
            .expect("set config");
    }

    /// Configures the tunnel modes' outer sources and GUE port.
    pub fn set_tunnel(&mut self, tunnel: lb_common::TunnelConfig) {
        self.dataplane
            .set_tunnel(tunnel)
            .expect("set tunnel config");
    }

    /// Sets the `nat` timeouts (keeping the other settings).
    pub fn set_nat_timeouts(&mut self, timeouts: lb_common::NatTimeouts) {
        let mut config = self.dataplane.maps().global_config().expect("read config");
        config.nat_timeouts = timeouts;
        self.dataplane.set_config(config).expect("set config");
    }

    /// Removes the service of `key` and reprograms.
    pub fn remove(&mut self, key: &lb_common::VipKey) {
        self.specs.retain(|s| s.key != *key);
        self.programmer
            .apply(&mut self.dataplane, &self.specs, Instant::now())
            .expect("program services");
    }

    /// Adds or replaces a service (by VIP key) and reprograms.
    pub fn program(&mut self, spec: ServiceSpec) {
        self.specs.retain(|s| s.key != spec.key);
        self.specs.push(spec);
        self.programmer
            .apply(&mut self.dataplane, &self.specs, Instant::now())
            .expect("program services");
    }

    /// The backend a new flow must get, from the programmed table (computed in
    /// userspace, independently of the kernel's lookup).
    pub fn expected_backend(&self, vip: &lb_common::VipKey, key: &FlowKey) -> IpAddr {
        let p = self.programmer.service(vip).expect("service programmed");
        let slot = flow_hash(self.seed, key) % p.info.table_size;
        p.backends[usize::from(p.table[slot as usize])]
    }

    /// The fixture's `eth0`, which packets are run as received on.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Runs one packet through the program as if received on `eth0`.
    pub fn run(&mut self, packet: &[u8]) -> Outcome {
        self.run_timed(packet, false).0
    }

    /// Runs one packet through the loaded XDP program `name` itself (a tail-call
    /// target, as an agent's older `lb_xdp` would reach it), not through `lb_xdp`.
    pub fn run_program(&mut self, name: &'static str, packet: &[u8]) -> Outcome {
        let ifindex = self.ifindex;
        let prog = self.dataplane.xdp_program(name).expect("program");
        test_run_xdp(prog, ifindex, packet).0
    }

    /// Runs one packet through the load balancer (or, with `floor`, through the
    /// pass-everything program) and returns the kernel-measured run time too.
    pub fn run_timed(&mut self, packet: &[u8], floor: bool) -> (Outcome, std::time::Duration) {
        if self.hook == Hook::Tc && !floor {
            return self.run_tc(packet, 0);
        }
        let ifindex = self.ifindex;
        let prog = if floor {
            self.dataplane.pass_program()
        } else {
            self.dataplane.program()
        };
        test_run_xdp(prog.expect("program"), ifindex, packet)
    }

    /// Runs one packet through `lb_tc` as an skb received on `eth0`, GSO with
    /// `gso_size` payload bytes per segment if not 0 (as GRO would have merged it);
    /// the action in XDP terms (module doc).
    ///
    /// # Panics
    /// If the rig runs the XDP hook.
    pub fn run_tc(&mut self, packet: &[u8], gso_size: u32) -> (Outcome, std::time::Duration) {
        assert_eq!(self.hook, Hook::Tc, "run_tc needs a TC rig");
        let mut out = vec![0u8; packet.len() + 256];
        // struct __sk_buff (192 bytes): only the fields BPF_PROG_TEST_RUN takes may be
        // set; ingress_ifindex at 36, ifindex at 40 (the device the skb is built
        // on), gso_segs at 164, gso_size at 176.
        let mut skb = [0u8; 192];
        skb[36..40].copy_from_slice(&self.ifindex.to_ne_bytes());
        skb[40..44].copy_from_slice(&self.ifindex.to_ne_bytes());
        if gso_size != 0 {
            let segs = (packet.len() as u32).div_ceil(gso_size);
            skb[164..168].copy_from_slice(&segs.to_ne_bytes());
            skb[176..180].copy_from_slice(&gso_size.to_ne_bytes());
        }
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(packet);
        opts.data_out = Some(&mut out);
        opts.ctx_in = Some(&skb);
        let result = self
            .dataplane
            .tc_program()
            .expect("program")
            .test_run(opts)
            .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN of {} bytes: {e}", packet.len()));
        out.truncate(result.data_size_out as usize);
        let action = match result.return_value as i32 {
            tc_action::OK => action::PASS,
            tc_action::SHOT => action::DROP,
            tc_action::REDIRECT => action::TX,
            other => panic!("lb_tc returned TC action {other}"),
        };
        (Outcome { action, bytes: out }, result.duration)
    }

    /// Runs `packet`, asserts the action, and that of the verdict counters exactly
    /// `reason` (besides `Packets`) moved by one. Event counters are not checked (see
    /// [`XdpRig::expect_events`]).
    pub fn expect(&mut self, packet: &[u8], action: u32, reason: Counter) -> Outcome {
        self.counted(packet, action, reason, None)
    }

    /// [`XdpRig::expect`], and of the event counters exactly those in `events` moved,
    /// by one each.
    pub fn expect_events(
        &mut self,
        packet: &[u8],
        action: u32,
        reason: Counter,
        events: &[Counter],
    ) -> Outcome {
        self.counted(packet, action, reason, Some(events))
    }

    fn counted(
        &mut self,
        packet: &[u8],
        want_action: u32,
        reason: Counter,
        events: Option<&[Counter]>,
    ) -> Outcome {
        let before = self.counters();
        let out = self.run(packet);
        assert_eq!(
            out.action,
            want_action,
            "action for a packet expected to count {}",
            reason.name()
        );
        let after = self.counters();
        for c in Counter::ALL {
            let want = match (c.kind(), events) {
                (CounterKind::Event, None) => continue,
                (CounterKind::Event, Some(events)) => u64::from(events.contains(&c)),
                _ => u64::from(c == reason || c == Counter::Packets),
            };
            assert_eq!(
                after[c as usize] - before[c as usize],
                want,
                "counter {} (expected reason {}, events {events:?})",
                c.name(),
                reason.name()
            );
        }
        out
    }

    /// A global counter, summed over CPUs.
    pub fn counter(&self, counter: Counter) -> u64 {
        self.dataplane.counter(counter).expect("read counter")
    }

    /// Every global counter, in index order.
    pub fn counters(&self) -> Vec<u64> {
        Counter::ALL.iter().map(|c| self.counter(*c)).collect()
    }
}

/// One `BPF_PROG_TEST_RUN` of the XDP program `prog` on `packet`, as if received on
/// interface `ifindex`: the outcome and the kernel-measured run time.
/// Runs one packet through `prog` (BPF_PROG_TEST_RUN, repeat 1) as if received on
/// `ifindex`: the verdict, the output bytes and the kernel-measured run time.
pub fn test_run_xdp(
    prog: &mut aya::programs::Xdp,
    ifindex: u32,
    packet: &[u8],
) -> (Outcome, std::time::Duration) {
    let mut out = vec![0u8; packet.len() + 256];
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
    // egress_ifindex. The kernel wants data = meta length (0) and data_end = size.
    let md: [u32; 6] = [0, packet.len() as u32, 0, ifindex, 0, 0];
    let md_bytes: Vec<u8> = md.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(packet);
    opts.data_out = Some(&mut out);
    opts.ctx_in = Some(&md_bytes);
    let result = prog.test_run(opts).expect("BPF_PROG_TEST_RUN");
    out.truncate(result.data_size_out as usize);
    let outcome = Outcome {
        action: result.return_value,
        bytes: out,
    };
    (outcome, result.duration)
}
