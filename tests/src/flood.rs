//! Spoofed traffic for flood tests: raw Ethernet frames written to a host's `eth0`
//! with an `AF_PACKET` socket, from random source addresses and ports that no real
//! host owns, so nothing answers them.
//!
//! Bounded: a flood sends exactly `count` frames and returns. Sources come from
//! 198.19.0.0/16 and 2001:db8:ffff::/48 (inside the test ranges); give the node a
//! blackhole route for them ([`blackhole_flood_sources`]) so that whatever it would
//! send back is dropped at once instead of waiting on neighbour resolution.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use crate::{
    Netns,
    packet::Packet,
    rng::{Rng as _, SeedableRng as _, StdRng},
    topology::HOST_IF,
};

/// The IPv4 prefix flood sources are drawn from.
pub const FLOOD_NET4: &str = "198.19.0.0/16";
/// The IPv6 prefix flood sources are drawn from.
pub const FLOOD_NET6: &str = "2001:db8:ffff::/48";

/// What one flood sends.
#[derive(Clone, Copy, Debug)]
pub struct FloodSpec {
    /// Destination (a VIP and port).
    pub target: SocketAddr,
    /// TCP flags of every segment (e.g. SYN, or ACK).
    pub tcp_flags: u8,
    /// Frames to send.
    pub count: u64,
    /// Seed of the source addresses and ports (from [`crate::rng::seed`], which prints
    /// it, so a failure replays).
    pub seed: u64,
}

/// What a flood did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloodReport {
    /// Frames the kernel accepted for sending.
    pub sent: u64,
    /// How long it took.
    pub elapsed: std::time::Duration,
}

/// The MAC address of `eth0` in `ns` (asked of the namespace's kernel with
/// `SIOCGIFHWADDR`: `/sys` in a thread that only entered the network namespace still
/// shows the host's interfaces).
pub fn mac_of(ns: &Netns) -> [u8; 6] {
    ns.run(|| {
        // SAFETY: plain socket(2); the descriptor is owned below.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        assert!(raw >= 0, "socket: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: a zeroed ifreq is valid; the name is copied in below.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in req.ifr_name.iter_mut().zip(HOST_IF.bytes()) {
            *dst = src as libc::c_char;
        }
        // SAFETY: SIOCGIFHWADDR fills the ifreq it is given.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) };
        assert_eq!(rc, 0, "SIOCGIFHWADDR: {}", std::io::Error::last_os_error());
        // SAFETY: the kernel filled the hardware-address member of the union.
        let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
        let mut mac = [0u8; 6];
        for (m, d) in mac.iter_mut().zip(data.iter()) {
            *m = *d as u8;
        }
        mac
    })
}

/// Routes the flood prefixes to a blackhole on `node`, so its answers to spoofed
/// sources are dropped by its FIB (and by `bpf_fib_lookup`) instead of resolved.
pub fn blackhole_flood_sources(node: &Netns) {
    node.ip(&["route", "add", "blackhole", FLOOD_NET4]);
    node.ip(&["-6", "route", "add", "blackhole", FLOOD_NET6]);
}

/// A random source of the flood prefixes, of `target`'s family.
fn source(rng: &mut StdRng, v6: bool) -> IpAddr {
    let r = rng.next_u64();
    if v6 {
        IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0xffff,
            0,
            0,
            (r >> 48) as u16,
            (r >> 32) as u16,
            r as u16,
        ))
    } else {
        IpAddr::V4(Ipv4Addr::new(198, 19, (r >> 8) as u8, r as u8))
    }
}

/// Sends `spec.count` TCP segments from `from`'s `eth0` to `dst_mac` (the next hop
/// towards the target, e.g. the load balancer), each from a new random source address
/// and port.
///
/// # Panics
/// If the socket cannot be opened or a send fails for a reason other than a full
/// queue (retried).
pub fn tcp_flood(from: &Netns, dst_mac: [u8; 6], spec: FloodSpec) -> FloodReport {
    let src_mac = mac_of(from);
    from.run(move || {
        let started = std::time::Instant::now();
        let sock = PacketSocket::open(HOST_IF);
        let v6 = spec.target.is_ipv6();
        let mut rng = StdRng::seed_from_u64(spec.seed);
        let mut sent = 0u64;
        const BATCH: usize = 64;
        while sent < spec.count {
            let n = BATCH.min((spec.count - sent) as usize);
            let frames: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let sport = (rng.next_u64() as u16) | 1024;
                    let ether_type = if v6 { 0x86dd } else { 0x0800 };
                    let eth = Packet::eth(dst_mac, src_mac, ether_type);
                    let p = match (source(&mut rng, v6), spec.target.ip()) {
                        (IpAddr::V4(s), IpAddr::V4(d)) => {
                            Packet::tcp4(eth, s, sport, d, spec.target.port(), b"")
                        }
                        (IpAddr::V6(s), IpAddr::V6(d)) => {
                            Packet::tcp6(eth, s, sport, d, spec.target.port(), b"")
                        }
                        _ => unreachable!("source of the target's family"),
                    };
                    p.with_tcp_flags(spec.tcp_flags).bytes
                })
                .collect();
            sent += sock.send_all(&frames);
        }
        FloodReport {
            sent,
            elapsed: started.elapsed(),
        }
    })
}

/// An `AF_PACKET` socket bound to one interface.
struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

impl PacketSocket {
    fn open(interface: &str) -> Self {
        let name = std::ffi::CString::new(interface).expect("interface name");
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        assert!(ifindex > 0, "no interface {interface}");
        let protocol = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2).
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(protocol)) };
        assert!(
            raw >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: zeroed sockaddr_ll is valid; the fields set are its documented ones.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol;
        addr.sll_ifindex = ifindex;
        // SAFETY: addr is a valid sockaddr_ll of the size given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(rc, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
        Self { fd, ifindex }
    }

    /// Sends every frame (with sendmmsg), retrying while the queue is full. Returns
    /// how many were accepted.
    fn send_all(&self, frames: &[Vec<u8>]) -> u64 {
        let mut done = 0usize;
        let mut stalls = 0u32;
        while done < frames.len() {
            let mut iovs: Vec<libc::iovec> = frames[done..]
                .iter()
                .map(|f| libc::iovec {
                    iov_base: f.as_ptr() as *mut libc::c_void,
                    iov_len: f.len(),
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = iovs
                .iter_mut()
                .map(|iov| {
                    // SAFETY: zeroed msghdr is valid; the iovec outlives the call.
                    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
                    hdr.msg_iov = iov;
                    hdr.msg_iovlen = 1;
                    libc::mmsghdr {
                        msg_hdr: hdr,
                        msg_len: 0,
                    }
                })
                .collect();
            // SAFETY: msgs and the buffers they point at are valid for the call.
            let n = unsafe {
                libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, 0)
            };
            if n < 0 {
                let err = std::io::Error::last_os_error();
                let retry = matches!(err.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN));
                assert!(
                    retry && stalls < 10_000,
                    "sendmmsg on ifindex {}: {err}",
                    self.ifindex
                );
                stalls += 1;
                std::thread::sleep(std::time::Duration::from_micros(50));
                continue;
            }
            done += n as usize;
        }
        done as u64
    }
}
