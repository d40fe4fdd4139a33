//! `nat` mode: one-arm full NAT.
//!
//! Towards the backend: destination → backend, source → the node's NAT address and a
//! port of its own, checksums updated incrementally. The port is chosen from the flow
//! hash within the configured range; the reply key (backend → NAT address:port) is
//! claimed with `BPF_NOEXIST`, trying a few ports on a collision, so two flows can never
//! share one. Replies are matched by that key and translated back to VIP → client.
//! UDP over IPv4 with a zero checksum keeps it zero (no checksum, RFC 768).

use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_csum_diff, programs::XdpContext};
use lb_common::{Backend, Counter, FlowKey, GlobalConfig, NatEntry, flow_hash, maps::proto};

use crate::{
    Verdict, csum,
    maps::{CONFIG, NAT},
    parse::{Ipv4Hdr, Ipv6Hdr, L4Ports, Packet, ptr_at},
};

/// Ports tried for a new flow before giving up.
const PORT_ATTEMPTS: u32 = 4;
/// Stride between attempts (a prime, so attempts spread over the range).
const PORT_STRIDE: u32 = 7919;
/// Mixed into the seed so the port choice is independent of the backend choice.
const PORT_SEED_SALT: u32 = 0x4e41_5450;

#[inline(always)]
fn config() -> Option<&'static GlobalConfig> {
    CONFIG.get(0)
}

/// The node's NAT address for this family, if configured.
#[inline(always)]
fn nat_addr(cfg: &GlobalConfig, ipv6: bool) -> Option<[u8; 16]> {
    let addr = if ipv6 { cfg.nat_v6 } else { cfg.nat_v4 };
    if cfg.nat_port_count == 0 || addr == [0; 16] {
        None
    } else {
        Some(addr)
    }
}

/// The node's NAT address for a family, if configured.
#[inline(always)]
pub fn nat_addr_of(ipv6: bool) -> Option<[u8; 16]> {
    config().and_then(|c| nat_addr(c, ipv6))
}

/// Whether `dst` is the node's NAT address (so the packet may be a reply).
#[inline(always)]
pub fn is_nat_addr(dst: &[u8; 16], ipv6: bool) -> bool {
    config()
        .and_then(|c| nat_addr(c, ipv6))
        .is_some_and(|a| a == *dst)
}

/// Claims a NAT source port for a new flow to `backend` and records how to translate
/// its replies. Returns the port (network order), or `None` when the range is full
/// around this flow's hash (or NAT is not configured).
#[inline(always)]
pub fn claim_port(key: &FlowKey, backend: &Backend, ipv6: bool) -> Option<u16> {
    let cfg = config()?;
    let nat = nat_addr(cfg, ipv6)?;
    let count = u32::from(cfg.nat_port_count);
    let base = flow_hash(cfg.hash_seed ^ PORT_SEED_SALT, key);
    let entry = NatEntry {
        client: key.src,
        vip: key.dst,
        client_port_be: key.src_port_be,
        vip_port_be: key.dst_port_be,
        _pad: 0,
    };
    let mut reply = FlowKey {
        src: backend.addr,
        dst: nat,
        src_port_be: backend_port(backend, key.dst_port_be),
        dst_port_be: 0,
        proto: key.proto,
        _pad: 0,
        _pad2: 0,
    };
    for attempt in 0..PORT_ATTEMPTS {
        let offset = base
            .wrapping_add(attempt.wrapping_mul(PORT_STRIDE))
            .checked_rem(count)?;
        reply.dst_port_be = (cfg.nat_port_first.wrapping_add(offset as u16)).to_be();
        #[expect(
            clippy::needless_borrows_for_generic_args,
            reason = "moving the 40-byte key and value would copy them onto a nearly full stack"
        )]
        let claimed = NAT.insert(&reply, &entry, u64::from(BPF_NOEXIST)).is_ok();
        if claimed {
            return Some(reply.dst_port_be);
        }
    }
    None
}

/// The port a flow to `vip_port_be` reaches `backend` on: its own port if it has one
/// (network order both).
#[inline(always)]
pub fn backend_port(backend: &Backend, vip_port_be: u16) -> u16 {
    if backend.port_be != 0 {
        backend.port_be
    } else {
        vip_port_be
    }
}

/// Rewrites a client packet towards `backend` from the NAT address and `port_be`.
///
/// # Errors
/// The drop verdict when NAT is not configured for this family (the agent refuses such
/// a config, so this is a guard, not a path).
#[inline(always)]
pub fn to_backend(
    ctx: &XdpContext,
    pkt: &Packet,
    backend: &Backend,
    port_be: u16,
) -> Result<(), Verdict> {
    let no_route = Verdict::drop(Counter::DropNoRoute);
    let nat = config()
        .and_then(|c| nat_addr(c, pkt.ipv6))
        .ok_or(no_route)?;
    let to = Rewrite {
        src: nat,
        dst: backend.addr,
        sport_be: port_be,
        dport_be: backend_port(backend, pkt.key.dst_port_be),
    };
    if rewrite(ctx, pkt, &to) {
        Ok(())
    } else {
        Err(Verdict::drop(Counter::DropMalformed))
    }
}

/// Translates a reply from a backend back to VIP → client, or says why not.
#[inline(always)]
pub fn reply(ctx: &XdpContext, pkt: &Packet) -> Result<&'static NatEntry, Verdict> {
    // SAFETY: plain data replaced whole by updates.
    #[expect(
        clippy::needless_borrows_for_generic_args,
        reason = "passing the key by value would copy 40 bytes onto a nearly full stack"
    )]
    let Some(entry) = (unsafe { NAT.get(&pkt.key) }) else {
        return Err(Verdict::pass(Counter::PassNatUnknown));
    };
    let to = Rewrite {
        src: entry.vip,
        dst: entry.client,
        sport_be: entry.vip_port_be,
        dport_be: entry.client_port_be,
    };
    if !rewrite(ctx, pkt, &to) {
        return Err(Verdict::drop(Counter::DropMalformed));
    }
    Ok(entry)
}

/// The addresses and ports a packet is rewritten to. 8-byte aligned so the IPv4 part
/// of each address (its last four bytes) is word-aligned for `bpf_csum_diff`.
#[repr(C, align(8))]
pub struct Rewrite {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport_be: u16,
    pub dport_be: u16,
}

/// `bpf_csum_diff` over `len` bytes at `old` (in the packet) and `new` (on the stack),
/// continuing the one's-complement sum `seed`.
///
/// # Safety
/// Both pointers must be valid for `len` bytes; `len` a multiple of 4.
#[inline(always)]
unsafe fn diff(old: *const u8, new: *const u8, len: u32, seed: u32) -> u32 {
    // SAFETY: per the contract; the helper only reads.
    unsafe { bpf_csum_diff(old as *mut u32, len, new as *mut u32, len, seed) as u32 }
}

/// Sets the packet's addresses and ports to `to`, updating the IPv4 header checksum and
/// the TCP/UDP checksum incrementally. False if the headers are not all in the packet.
// Inlined: a BPF-to-BPF call would receive the packet bounds as plain integers, and
// the verifier rejects the arithmetic the callee does on them.
#[inline(always)]
fn rewrite(ctx: &XdpContext, pkt: &Packet, to: &Rewrite) -> bool {
    let (src, dst, sport_be, dport_be) = (&to.src, &to.dst, to.sport_be, to.dport_be);
    let Some(ports) = ptr_at::<L4Ports>(ctx, pkt.l4) else {
        return false;
    };
    let check_at = pkt.l4 + if pkt.key.proto == proto::TCP { 16 } else { 6 };
    let Some(check) = ptr_at::<[u8; 2]>(ctx, check_at) else {
        return false;
    };
    // Checksums are handled in their stored (network) byte order throughout, as the
    // kernel's own csum helpers do; `bpf_csum_diff` does the per-word work, which in
    // BPF code would spill every byte of an IPv6 address to the stack.
    // SAFETY: every pointer was bounds-checked by ptr_at; the packet is not resized.
    unsafe {
        let new_ports = {
            let (s, d) = (sport_be.to_ne_bytes(), dport_be.to_ne_bytes());
            [s[0], s[1], d[0], d[1]]
        };
        let old_check = u16::from_ne_bytes(*check);
        let mut l4 = u32::from(!old_check);
        l4 = diff(ports.cast(), new_ports.as_ptr(), 4, l4);
        if pkt.ipv6 {
            let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, pkt.l3) else {
                return false;
            };
            l4 = diff((*ip).src.as_ptr(), src.as_ptr(), 16, l4);
            l4 = diff((*ip).dst.as_ptr(), dst.as_ptr(), 16, l4);
            (*ip).src = *src;
            (*ip).dst = *dst;
        } else {
            let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, pkt.l3) else {
                return false;
            };
            let (src4, dst4) = (src.as_ptr().add(12), dst.as_ptr().add(12));
            let mut l3 = u32::from(!u16::from_ne_bytes((*ip).check));
            l3 = diff((*ip).src.as_ptr(), src4, 4, l3);
            l3 = diff((*ip).dst.as_ptr(), dst4, 4, l3);
            (*ip).check = (!csum::fold(l3)).to_ne_bytes();
            l4 = diff((*ip).src.as_ptr(), src4, 4, l4);
            l4 = diff((*ip).dst.as_ptr(), dst4, 4, l4);
            (*ip).src = csum::v4_of(src);
            (*ip).dst = csum::v4_of(dst);
        }
        let udp_without_checksum = !pkt.ipv6 && pkt.key.proto == proto::UDP && old_check == 0;
        if !udp_without_checksum {
            let mut new = !csum::fold(l4);
            if pkt.key.proto == proto::UDP && new == 0 {
                new = 0xffff;
            }
            *check = new.to_ne_bytes();
        }
        (*ports).src = sport_be.to_ne_bytes();
        (*ports).dst = dport_be.to_ne_bytes();
    }
    true
}
