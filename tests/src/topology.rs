//! The standard test topology: one L2 segment (a bridge in its own namespace) joining a
//! client, the load-balancer node and N backends.
//!
//! ```text
//!  client 198.18.0.1  2001:db8::1 ─┐                 ┌─ backend-1 198.18.0.11 2001:db8::11
//!  lb     198.18.0.2  2001:db8::2 ─┤── br0 (switch) ─┼─ backend-2 198.18.0.12 2001:db8::12
//!                                  │                 └─ backend-3 198.18.0.13 2001:db8::13
//!  VIPs 198.18.100.1 and 2001:db8:0:100::1 on every backend's lo
//! ```
//! The client routes the VIP subnet via the LB node; backends hold the VIP on `lo`
//! and answer the client directly (DSR). Every interface inside a host namespace is
//! called `eth0`.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::Netns;

/// The interface name inside every host namespace.
pub const HOST_IF: &str = "eth0";
/// Client address.
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Load-balancer node address.
pub const LB_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The VIP served by the backends.
pub const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 100, 1);
/// Client IPv6 address.
pub const CLIENT_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// Load-balancer node IPv6 address.
pub const LB_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
/// The IPv6 VIP served by the backends.
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0x100, 0, 0, 0, 1);

/// Address of backend `i` (0-based).
pub fn backend_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 0, 11 + i as u8)
}

/// IPv6 address of backend `i` (0-based).
pub fn backend_addr6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x11 + i as u16)
}

/// Shape of the topology.
#[derive(Clone, Debug)]
pub struct TopologyOptions {
    /// Number of backends.
    pub backends: usize,
    /// Prepare the LB's bridge port for native-mode XDP_TX: the veth peer gets a
    /// pass-through XDP program. Without one, frames sent by XDP_TX are dropped (no NAPI
    /// on the peer) or, with GRO on, sit in the peer's queue until other traffic wakes it.
    pub native_xdp: bool,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        Self {
            backends: 3,
            native_xdp: false,
        }
    }
}

/// The namespaces of one topology; all are deleted on drop.
#[derive(Debug)]
pub struct Topology {
    /// The pass program on the LB's bridge port (native mode only); detached on drop.
    pub peer_xdp: Option<PeerXdp>,
    /// Holds the bridge.
    pub switch: Netns,
    /// The client host.
    pub client: Netns,
    /// The load-balancer node.
    pub lb: Netns,
    /// The backend hosts.
    pub backends: Vec<Netns>,
}

impl Topology {
    /// Builds the topology.
    pub fn build(opts: &TopologyOptions) -> Self {
        let switch = Netns::new("sw");
        switch.ip(&["link", "add", "br0", "type", "bridge"]);
        switch.ip(&["link", "set", "br0", "up"]);
        let client = Netns::new("cl");
        let lb = Netns::new("lb");
        let backends: Vec<Netns> = (0..opts.backends)
            .map(|i| Netns::new(&format!("b{}", i + 1)))
            .collect();

        plug(&switch, &client, "p-client", CLIENT_ADDR, CLIENT_ADDR6);
        plug(&switch, &lb, "p-lb", LB_ADDR, LB_ADDR6);
        for (i, b) in backends.iter().enumerate() {
            plug(
                &switch,
                b,
                &format!("p-b{}", i + 1),
                backend_addr(i),
                backend_addr6(i),
            );
            b.ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
            b.ip(&["-6", "addr", "add", &format!("{VIP6}/128"), "dev", "lo"]);
            // Never answer ARP for the VIP held on lo (the usual DSR backend settings).
            b.sysctl("net.ipv4.conf.all.arp_ignore", "1");
            b.sysctl("net.ipv4.conf.all.arp_announce", "2");
        }
        let (lb4, lb6) = (LB_ADDR.to_string(), LB_ADDR6.to_string());
        client.ip(&["route", "add", &format!("{VIP}/32"), "via", &lb4]);
        client.ip(&["-6", "route", "add", &format!("{VIP6}/128"), "via", &lb6]);
        let peer_xdp = opts.native_xdp.then(|| PeerXdp::attach(&switch, "p-lb"));
        Self {
            peer_xdp,
            switch,
            client,
            lb,
            backends,
        }
    }
}

/// The load-balancer node's `nat` source addresses in the standard topology.
pub const NAT4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
/// IPv6 `nat` source address.
pub const NAT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 3);

impl Topology {
    /// Gives the LB node its `nat` source addresses ([`NAT4`], [`NAT6`]) on `eth0`, so
    /// backends resolve them.
    pub fn add_nat_addresses(&self) {
        self.lb
            .ip(&["addr", "add", &format!("{NAT4}/24"), "dev", HOST_IF]);
        self.lb.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{NAT6}/64"),
            "dev",
            HOST_IF,
            "nodad",
        ]);
    }
}

/// Connects `host` to the bridge with a veth pair: `eth0` in the host, `port` in the switch.
pub fn plug(switch: &Netns, host: &Netns, port: &str, addr: Ipv4Addr, addr6: Ipv6Addr) {
    switch.ip(&[
        "link",
        "add",
        port,
        "type",
        "veth",
        "peer",
        "name",
        HOST_IF,
        "netns",
        host.name(),
    ]);
    switch.ip(&["link", "set", port, "master", "br0", "up"]);
    host.ip(&["addr", "add", &format!("{addr}/24"), "dev", HOST_IF]);
    // nodad: usable at once, no duplicate-address-detection delay in a fresh namespace.
    host.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{addr6}/64"),
        "dev",
        HOST_IF,
        "nodad",
    ]);
    host.ip(&["link", "set", HOST_IF, "up"]);
    // Locally sent packets must carry full checksums: with offload on they leave with
    // partial ones, which native-mode receivers drop and generic mode never checks.
    host.exec("ethtool", &["-K", HOST_IF, "tx", "off"]);
}

/// A pass-through XDP program attached in driver mode to a veth peer.
pub struct PeerXdp {
    _ebpf: aya::Ebpf,
}

impl std::fmt::Debug for PeerXdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerXdp")
    }
}

impl PeerXdp {
    /// Loads `xdp_pass` from the agent's embedded object and attaches it to `interface`
    /// inside `ns`. The link lives as long as the returned value.
    pub fn attach(ns: &Netns, interface: &str) -> Self {
        let interface = interface.to_owned();
        let ebpf = ns.run(move || {
            let mut ebpf =
                aya::Ebpf::load(lb_dataplane::kernel::BPF_OBJECT).expect("load BPF object");
            let prog: &mut aya::programs::Xdp = ebpf
                .program_mut(lb_common::maps::names::XDP_PASS_PROGRAM)
                .expect("xdp_pass in object")
                .try_into()
                .expect("xdp_pass is XDP");
            prog.load().expect("load xdp_pass");
            prog.attach(&interface, aya::programs::XdpMode::Driver)
                .expect("attach xdp_pass");
            ebpf
        });
        Self { _ebpf: ebpf }
    }
}
