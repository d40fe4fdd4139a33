//! Header views and the bounds-checked parser.
//!
//! Header structs hold byte arrays only (alignment 1), because headers sit at arbitrary
//! offsets in the frame. Every pointer comes from [`ptr_at`], which proves to the
//! verifier that the whole header lies inside the packet.

use core::mem::size_of;

use aya_ebpf::programs::XdpContext;
use lb_common::{Counter, maps::proto};

use crate::Verdict;

/// Ethernet II header.
#[repr(C)]
pub struct EthHdr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub ether_type: [u8; 2],
}

/// IPv4 header without options.
#[repr(C)]
pub struct Ipv4Hdr {
    pub version_ihl: u8,
    pub tos: u8,
    pub tot_len: [u8; 2],
    pub id: [u8; 2],
    pub frag: [u8; 2],
    pub ttl: u8,
    pub proto: u8,
    pub check: [u8; 2],
    pub src: [u8; 4],
    pub dst: [u8; 4],
}

/// The first four bytes of a TCP or UDP header.
#[repr(C)]
pub struct L4Ports {
    pub src: [u8; 2],
    pub dst: [u8; 2],
}

const ETH_LEN: usize = size_of::<EthHdr>();
const IPV4_LEN: usize = size_of::<Ipv4Hdr>();
const ETH_P_IPV4: [u8; 2] = 0x0800u16.to_be_bytes();
/// More-fragments flag and fragment offset bits of the IPv4 `frag` field.
const IPV4_FRAG_MASK: u16 = 0x3fff;
const TCP_MIN_LEN: u16 = 20;
const UDP_LEN: u16 = 8;

/// A bounds-checked pointer to a `T` at `offset` bytes into the packet.
#[inline(always)]
pub fn ptr_at<T>(ctx: &XdpContext, offset: usize) -> Option<*mut T> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + offset + size_of::<T>() > end {
        return None;
    }
    Some((start + offset) as *mut T)
}

/// An IPv4 TCP or UDP packet, with the fields the lookup and the forwarder need.
pub struct Ipv4L4 {
    /// The Ethernet header, for the MAC rewrite.
    pub eth: *mut EthHdr,
    pub src_be: u32,
    pub dst_be: u32,
    pub src_port_be: u16,
    pub dst_port_be: u16,
    pub proto: u8,
    /// IPv4 total length, host order.
    pub tot_len: u16,
}

/// Parses Ethernet → IPv4 (no options, not a fragment) → TCP/UDP ports.
///
/// # Errors
/// The verdict for anything else: pass for traffic that is simply not ours (counted by
/// kind), drop for frames that are truncated or whose lengths contradict each other.
#[inline(always)]
pub fn ipv4_l4(ctx: &XdpContext) -> Result<Ipv4L4, Verdict> {
    let malformed = Verdict::drop(Counter::DropMalformed);
    let eth: *mut EthHdr = ptr_at(ctx, 0).ok_or(malformed)?;
    // SAFETY: ptr_at checked that the header lies inside the packet.
    if unsafe { (*eth).ether_type } != ETH_P_IPV4 {
        return Err(Verdict::pass(Counter::PassNotIpv4));
    }
    let ip: *const Ipv4Hdr = ptr_at(ctx, ETH_LEN).ok_or(malformed)?;
    // SAFETY: as above.
    let ip = unsafe { &*ip };
    let ihl = ip.version_ihl & 0x0f;
    if ip.version_ihl >> 4 != 4 || ihl < 5 {
        return Err(malformed);
    }
    if ihl != 5 {
        return Err(Verdict::pass(Counter::PassIpv4Options));
    }
    if u16::from_be_bytes(ip.frag) & IPV4_FRAG_MASK != 0 {
        return Err(Verdict::pass(Counter::PassFragment));
    }
    let l4_min = match ip.proto {
        proto::TCP => TCP_MIN_LEN,
        proto::UDP => UDP_LEN,
        _ => return Err(Verdict::pass(Counter::PassNotVip)),
    };
    let tot_len = u16::from_be_bytes(ip.tot_len);
    let frame_len = ctx.data_end() - ctx.data();
    if tot_len < IPV4_LEN as u16 + l4_min || ETH_LEN + tot_len as usize > frame_len {
        return Err(malformed);
    }
    let ports: *const L4Ports = ptr_at(ctx, ETH_LEN + IPV4_LEN).ok_or(malformed)?;
    // SAFETY: as above.
    let ports = unsafe { &*ports };
    Ok(Ipv4L4 {
        eth,
        src_be: u32::from_ne_bytes(ip.src),
        dst_be: u32::from_ne_bytes(ip.dst),
        src_port_be: u16::from_ne_bytes(ports.src),
        dst_port_be: u16::from_ne_bytes(ports.dst),
        proto: ip.proto,
        tot_len,
    })
}
