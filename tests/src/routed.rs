//! The tunnel topology: backends in another subnet behind a router, so L2 DSR cannot
//! reach them and only an encapsulating mode (`ipip`, `gue`) or `nat` can.
//!
//! ```text
//!  client 198.18.0.1  2001:db8::1 ─┐             ┌─ router 198.18.0.254 2001:db8::fe
//!  lb     198.18.0.2  2001:db8::2 ─┴── br0 ───────┘         │
//!                                                   router 198.19.0.254 2001:db8:1::fe
//!                                                           │
//!  backend-i 198.19.0.(11+i) 2001:db8:1::(11+i) ─── br1 ────┘
//!  VIPs 198.18.100.1 and 2001:db8:0:100::1 on every backend's lo
//! ```
//! The client routes the VIPs via the LB node; the LB routes the backend subnets via
//! the router; backends route everything via the router, so their replies go to the
//! client without passing the LB. The router checks no source (the replies come from
//! the VIPs, which it has no route for). Every interface inside a host namespace is
//! called `eth0` (the router has `eth0` and `eth1`).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::{
    Netns,
    topology::{CLIENT_ADDR, CLIENT_ADDR6, HOST_IF, LB_ADDR, LB_ADDR6, PeerXdp, VIP, VIP6, plug},
};

/// The router's address on the client/LB segment.
pub const ROUTER_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 254);
/// The router's IPv6 address on the client/LB segment.
pub const ROUTER_A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xfe);
/// The router's address on the backends' segment.
pub const ROUTER_B: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 254);
/// The router's IPv6 address on the backends' segment.
pub const ROUTER_B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0xfe);

/// Routed backend `i` (0-based).
pub fn routed_backend(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 0, 11 + i as u8)
}

/// Routed IPv6 backend `i` (0-based).
pub fn routed_backend6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x11 + i as u16)
}

/// The namespaces of one routed topology; all are deleted on drop.
#[derive(Debug)]
pub struct RoutedTopology {
    /// The pass program on the LB's bridge port (native mode only).
    pub peer_xdp: Option<PeerXdp>,
    /// Holds both bridges.
    pub switch: Netns,
    /// The client host.
    pub client: Netns,
    /// The load-balancer node.
    pub lb: Netns,
    /// The router between the segments.
    pub router: Netns,
    /// The backend hosts.
    pub backends: Vec<Netns>,
}

impl RoutedTopology {
    /// Builds it with `backends` backends; `native_xdp` prepares the LB's bridge port
    /// for native-mode `XDP_TX` (see [`crate::TopologyOptions::native_xdp`]).
    pub fn build(backends: usize, native_xdp: bool) -> Self {
        let switch = Netns::new("rsw");
        for br in ["br0", "br1"] {
            switch.ip(&["link", "add", br, "type", "bridge"]);
            switch.ip(&["link", "set", br, "up"]);
        }
        let client = Netns::new("rcl");
        let lb = Netns::new("rlb");
        let router = Netns::new("rtr");
        let hosts: Vec<Netns> = (0..backends)
            .map(|i| Netns::new(&format!("rb{}", i + 1)))
            .collect();
        plug(&switch, &client, "p-client", CLIENT_ADDR, CLIENT_ADDR6);
        plug(&switch, &lb, "p-lb", LB_ADDR, LB_ADDR6);
        plug(&switch, &router, "p-ra", ROUTER_A, ROUTER_A6);
        // The router's second leg, on br1.
        switch.ip(&[
            "link",
            "add",
            "p-rb",
            "type",
            "veth",
            "peer",
            "name",
            "eth1",
            "netns",
            router.name(),
        ]);
        switch.ip(&["link", "set", "p-rb", "master", "br1", "up"]);
        router.ip(&["addr", "add", &format!("{ROUTER_B}/24"), "dev", "eth1"]);
        router.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{ROUTER_B6}/64"),
            "dev",
            "eth1",
            "nodad",
        ]);
        router.ip(&["link", "set", "eth1", "up"]);
        router.exec("ethtool", &["-K", "eth1", "tx", "off"]);
        for key in ["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"] {
            router.sysctl(key, "1");
        }
        for key in [
            "net.ipv4.conf.all.rp_filter",
            "net.ipv4.conf.default.rp_filter",
        ] {
            router.sysctl(key, "0");
        }
        for (i, b) in hosts.iter().enumerate() {
            let port = format!("p-rb{}", i + 1);
            switch.ip(&[
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                HOST_IF,
                "netns",
                b.name(),
            ]);
            switch.ip(&["link", "set", &port, "master", "br1", "up"]);
            b.ip(&[
                "addr",
                "add",
                &format!("{}/24", routed_backend(i)),
                "dev",
                HOST_IF,
            ]);
            b.ip(&[
                "-6",
                "addr",
                "add",
                &format!("{}/64", routed_backend6(i)),
                "dev",
                HOST_IF,
                "nodad",
            ]);
            b.ip(&["link", "set", HOST_IF, "up"]);
            b.exec("ethtool", &["-K", HOST_IF, "tx", "off"]);
            b.ip(&["route", "add", "default", "via", &ROUTER_B.to_string()]);
            b.ip(&[
                "-6",
                "route",
                "add",
                "default",
                "via",
                &ROUTER_B6.to_string(),
            ]);
            b.ip(&["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
            b.ip(&["-6", "addr", "add", &format!("{VIP6}/128"), "dev", "lo"]);
        }
        let (lb4, lb6) = (LB_ADDR.to_string(), LB_ADDR6.to_string());
        client.ip(&["route", "add", &format!("{VIP}/32"), "via", &lb4]);
        client.ip(&["-6", "route", "add", &format!("{VIP6}/128"), "via", &lb6]);
        client.ip(&[
            "route",
            "add",
            "198.19.0.0/24",
            "via",
            &ROUTER_A.to_string(),
        ]);
        client.ip(&[
            "-6",
            "route",
            "add",
            "2001:db8:1::/64",
            "via",
            &ROUTER_A6.to_string(),
        ]);
        lb.ip(&[
            "route",
            "add",
            "198.19.0.0/24",
            "via",
            &ROUTER_A.to_string(),
        ]);
        lb.ip(&[
            "-6",
            "route",
            "add",
            "2001:db8:1::/64",
            "via",
            &ROUTER_A6.to_string(),
        ]);
        let peer_xdp = native_xdp.then(|| PeerXdp::attach(&switch, "p-lb"));
        Self {
            peer_xdp,
            switch,
            client,
            lb,
            router,
            backends: hosts,
        }
    }
}

/// `lbd decap` running in the foreground in a backend's namespace: `lb_decap` stays
/// attached to its `eth0` while this lives; dropping it stops the process (SIGTERM),
/// which detaches the program.
#[derive(Debug)]
pub struct DecapProcess {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl DecapProcess {
    /// Starts `lbd decap` on `eth0` of `ns` for `vips` (and GUE on `gue_port`), and
    /// waits until it says the program is attached.
    ///
    /// # Panics
    /// If it does not attach within 20 s.
    pub fn start(ns: &Netns, vips: &[std::net::IpAddr], gue_port: u16) -> Self {
        use std::process::{Command, Stdio};
        let log = std::env::temp_dir().join(format!("lbd-decap-{}.log", ns.name()));
        let out = std::fs::File::create(&log).expect("decap log");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns.name()])
            .arg(crate::lbd::lbd_binary())
            .args([
                "decap",
                "--interface",
                HOST_IF,
                "--gue-port",
                &gue_port.to_string(),
            ]);
        for v in vips {
            cmd.args(["--vip", &v.to_string()]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out)
            .spawn()
            .expect("spawn lbd decap");
        let me = Self { child, log };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !me.output().contains("detaches on SIGINT/SIGTERM") {
            assert!(
                std::time::Instant::now() < deadline,
                "lbd decap did not attach in {}: {}",
                ns.name(),
                me.output()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        me
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for DecapProcess {
    fn drop(&mut self) {
        // SAFETY: a plain signal to our own child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
