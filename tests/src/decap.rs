//! Running the backends' `lb_decap` on crafted frames through `BPF_PROG_TEST_RUN`,
//! and building the tunnel packets the load balancer's `lb_xdp` sends.
//!
//! [`DecapRig`] loads the program (call it on a thread inside a namespace of the
//! test's own, [`crate::Netns::run`]); [`Tunnel`] wraps an inner IP packet in the
//! outer headers of `ipip` or `gue`, with valid IPv4 header checksums.

use std::net::IpAddr;

use aya::{TestRun as _, TestRunOptions};
use lb_common::DecapCounter;
use lb_dataplane::decap::{DecapCounts, DecapSettings, load::Decap};

use crate::packet::checksum;

/// `TC_ACT_OK`: the (decapsulated) packet goes on to the stack.
pub const TC_ACT_OK: i32 = 0;
/// `TC_ACT_SHOT`: dropped.
pub const TC_ACT_SHOT: i32 = 2;
/// `TC_ACT_UNSPEC`: passed untouched, the next TCX program (or the stack) decides.
pub const TC_ACT_UNSPEC: i32 = -1;

/// The return value `lb_decap` gives a packet it counts under `counter`.
pub fn action_of(counter: DecapCounter) -> i32 {
    match counter {
        DecapCounter::Passed => TC_ACT_UNSPEC,
        DecapCounter::DecapsulatedIpip | DecapCounter::DecapsulatedGue => TC_ACT_OK,
        _ => TC_ACT_SHOT,
    }
}

/// `lb_decap` loaded (unattached) with a VIP set and GUE ports.
#[derive(Debug)]
pub struct DecapRig {
    /// The program and its maps.
    pub decap: Decap,
}

impl DecapRig {
    /// Loads the default object's `lb_decap`, told `vips` and `gue_ports`.
    pub fn load(vips: &[IpAddr], gue_ports: &[u16]) -> Self {
        let decap = Decap::load(lb_dataplane::kernel::BPF_OBJECT, None).expect("load lb_decap");
        let mut rig = Self { decap };
        rig.configure(vips, gue_ports);
        rig
    }

    /// Replaces the VIPs and GUE ports.
    pub fn configure(&mut self, vips: &[IpAddr], gue_ports: &[u16]) {
        let settings = DecapSettings::new(vips, gue_ports).expect("valid settings");
        self.decap.configure(&settings).expect("configure lb_decap");
    }

    /// Runs one frame; the return value and the frame as the program left it.
    pub fn run(&mut self, frame: &[u8]) -> (i32, Vec<u8>) {
        let (action, out, _) = self.run_timed(frame);
        (action, out)
    }

    /// [`DecapRig::run`], and the kernel-measured run time.
    pub fn run_timed(&mut self, frame: &[u8]) -> (i32, Vec<u8>, std::time::Duration) {
        let mut out = vec![0u8; frame.len() + 256];
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(frame);
        opts.data_out = Some(&mut out);
        let result = self
            .decap
            .program()
            .expect("program")
            .test_run(opts)
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(result.data_size_out as usize);
        (result.return_value as i32, out, result.duration)
    }

    /// Runs `frame`, asserts the return value of `counter`'s verdict and that of the
    /// counters exactly `counter` moved, by one; the frame as the program left it.
    pub fn expect(&mut self, frame: &[u8], counter: DecapCounter) -> Vec<u8> {
        let before = self.counts();
        let (action, out) = self.run(frame);
        let moved = self.counts().since(&before);
        assert_eq!(
            action,
            action_of(counter),
            "return value for a frame expected to count {}; counters moved:\n{moved}",
            counter.name()
        );
        for c in DecapCounter::ALL {
            assert_eq!(
                moved.get(c),
                u64::from(c == counter),
                "counter {} (expected {} only)",
                c.name(),
                counter.name()
            );
        }
        out
    }

    /// The counters, summed over CPUs.
    pub fn counts(&self) -> DecapCounts {
        self.decap.maps().counts().expect("read decap counters")
    }
}

/// The outer headers of a tunnel packet.
#[derive(Clone, Copy, Debug)]
pub struct Tunnel {
    /// Outer source (the load balancer) and destination (the backend); both of one
    /// family, which may differ from the inner packet's.
    pub src: IpAddr,
    /// Outer destination.
    pub dst: IpAddr,
    /// `Some(port)`: GUE to that UDP port (source port 0xc123); `None`: IPIP.
    pub gue: Option<u16>,
}

impl Tunnel {
    /// IPIP (protocol 4 or 41 by the inner packet's version) from `src` to `dst`.
    pub fn ipip(src: IpAddr, dst: IpAddr) -> Self {
        Self {
            src,
            dst,
            gue: None,
        }
    }

    /// GUE variant 1 to UDP `port`.
    pub fn gue(src: IpAddr, dst: IpAddr, port: u16) -> Self {
        Self {
            src,
            dst,
            gue: Some(port),
        }
    }

    /// The outer IP payload around `inner` (an IP packet): the UDP header for GUE,
    /// then `inner`; and the outer protocol.
    pub fn payload(&self, inner: &[u8]) -> (u8, Vec<u8>) {
        match self.gue {
            Some(port) => {
                let mut udp = Vec::with_capacity(8 + inner.len());
                udp.extend_from_slice(&0xc123u16.to_be_bytes());
                udp.extend_from_slice(&port.to_be_bytes());
                udp.extend_from_slice(&((8 + inner.len()) as u16).to_be_bytes());
                udp.extend_from_slice(&[0, 0]);
                udp.extend_from_slice(inner);
                (17, udp)
            }
            None => (if inner[0] >> 4 == 6 { 41 } else { 4 }, inner.to_vec()),
        }
    }

    /// The outer IP packet around `inner` (an IP packet).
    pub fn packet(&self, inner: &[u8]) -> Vec<u8> {
        let (proto, payload) = self.payload(inner);
        let mut out = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = (20 + payload.len()) as u16;
                let mut ip = vec![0x45, 0];
                ip.extend_from_slice(&total.to_be_bytes());
                ip.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
                ip.extend_from_slice(&s.octets());
                ip.extend_from_slice(&d.octets());
                let c = checksum(&[&ip]);
                ip[10..12].copy_from_slice(&c.to_be_bytes());
                ip
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut ip = vec![0x60, 0x01, 0x23, 0x45];
                ip.extend_from_slice(&(payload.len() as u16).to_be_bytes());
                ip.extend_from_slice(&[proto, 64]);
                ip.extend_from_slice(&s.octets());
                ip.extend_from_slice(&d.octets());
                ip
            }
            _ => panic!("outer source and destination of one family"),
        };
        out.extend_from_slice(&payload);
        out
    }

    /// An Ethernet frame (`dst` ← `src` MACs) of [`Tunnel::packet`].
    pub fn frame(&self, dst: [u8; 6], src: [u8; 6], inner: &[u8]) -> Vec<u8> {
        let ether_type: u16 = if self.src.is_ipv6() { 0x86dd } else { 0x0800 };
        let mut out = Vec::new();
        out.extend_from_slice(&dst);
        out.extend_from_slice(&src);
        out.extend_from_slice(&ether_type.to_be_bytes());
        out.extend_from_slice(&self.packet(inner));
        out
    }
}
