//! Forwarding: next hop (and its MTU) from the kernel's FIB, MAC rewrite, transmit.
//! `dsr` and `nat` send the packet as it is (rewritten); `ipip`/`gue` resolve the hop
//! for the outer header first (see `tunnel.rs`).

use core::mem::size_of;

use aya_ebpf::{
    bindings::{
        BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, bpf_fib_lookup as FibParams,
        xdp_action,
    },
    helpers::{bpf_fib_lookup, bpf_jiffies64, bpf_ktime_get_coarse_ns},
};
use lb_common::Addr;
use lb_common::{Backend, Counter, maps::BACKEND_F_IPV6};

use crate::{
    Verdict,
    ctx::Ctx,
    maps::{CLIENT_HOPS, CLOCK, FIB_SCRATCH, NEXT_HOPS},
    parse::{EthHdr, Packet},
};

/// How long a cached next hop is trusted before the FIB is asked again. Bounds how
/// long a changed neighbour (a backend moved to another MAC) can be missed.
const NEXT_HOP_TTL_NS: u64 = 1_000_000_000;

/// A backend's (or client's) next hop as the FIB last resolved it, cached per CPU: the
/// FIB lookup costs more than the rest of the established-flow path together.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NextHop {
    /// The address this entry is for (a backend id can be reused later; clients
    /// share slots).
    pub addr: Addr,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub ifindex: u32,
    /// `bpf_ktime_get_coarse_ns` time after which the entry is stale; 0 = empty.
    pub expires_ns: u64,
    /// The route's MTU as the FIB reported it.
    pub mtu: u32,
    pub _pad: u32,
}

// The cache entry's MACs are read as aligned words (see `Hop`).
const _: () = assert!(core::mem::align_of::<NextHop>() >= 4);
const _: () = assert!(core::mem::offset_of!(NextHop, dmac) % 4 == 0);
const _: () = assert!(core::mem::offset_of!(NextHop, smac) % 4 == 2);

/// Where a packet goes next: what [`resolve`] found.
///
/// The MACs are held as the words [`send`] stores (the destination as its first four
/// bytes and last two, the source as its first two and last four, each word aligned
/// in the cache entry it is read from): held as six-byte arrays, LLVM kept a
/// register, and a stack slot, per byte and put the words together again for every
/// packet.
#[derive(Clone, Copy)]
pub struct Hop {
    pub dmac: (u32, u16),
    pub smac: (u16, u32),
    pub ifindex: u32,
    /// The route's MTU: the largest IP packet the egress takes.
    pub mtu: u32,
}

/// What the FIB is asked: a packet of `proto` from `src` to `dst` (IPv4-mapped for
/// IPv4), `tot_len` bytes of IP (0: no MTU check by the FIB).
pub struct Query<'a> {
    pub ipv6: bool,
    pub src: &'a Addr,
    pub dst: &'a Addr,
    pub proto: u8,
    pub tot_len: u16,
}

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// A MAC address's bytes as [`Hop`] holds the destination's.
#[inline(always)]
fn dst_words(mac: &[u8; 6]) -> (u32, u16) {
    (
        u32::from_ne_bytes([mac[0], mac[1], mac[2], mac[3]]),
        u16::from_ne_bytes([mac[4], mac[5]]),
    )
}

/// A MAC address's bytes as [`Hop`] holds the source's.
#[inline(always)]
fn src_words(mac: &[u8; 6]) -> (u16, u32) {
    (
        u16::from_ne_bytes([mac[0], mac[1]]),
        u32::from_ne_bytes([mac[2], mac[3], mac[4], mac[5]]),
    )
}

/// Sends the packet, unchanged above layer 2, towards `backend`.
///
/// The next hop is a forwarding lookup as the kernel would do for a packet arriving on
/// the ingress interface (so the egress may be another interface), which needs
/// forwarding enabled on the ingress interface (`bpf_fib_lookup` checks it; the agent
/// sets it). A backend whose neighbour entry is unresolved sends this packet to the
/// stack once (the agent keeps backend neighbours "managed", so the kernel resolves
/// them on its own). DSR cannot change the address family: a backend of the other
/// family has no route.
#[inline(always)]
pub fn to_backend(
    ctx: &impl Ctx,
    pkt: &Packet,
    backend_id: u32,
    backend: &Backend,
    now: u64,
) -> Verdict {
    if (backend.flags & BACKEND_F_IPV6 != 0) != pkt.ipv6 {
        return Verdict::drop(Counter::DropNoRoute);
    }
    let q = Query {
        ipv6: pkt.ipv6,
        src: &pkt.key.src,
        dst: &backend.addr,
        proto: pkt.key.proto,
        tot_len: ctx.fib_len(pkt.ip_len),
    };
    match resolve(ctx, &q, NEXT_HOPS.get_ptr_mut(backend_id), now) {
        Ok(hop) => send(ctx, pkt.eth, &hop),
        Err(verdict) => verdict,
    }
}

/// Sends a (translated) reply towards `client`: the FIB picks the next hop, cached per
/// CPU in the client's slot (a client's replies come in runs; another client in the
/// slot replaces it).
#[inline(always)]
pub fn to_client(ctx: &impl Ctx, pkt: &Packet, client: &Addr, now: u64) -> Verdict {
    let q = Query {
        ipv6: pkt.ipv6,
        src: &pkt.key.src,
        dst: client,
        proto: pkt.key.proto,
        tot_len: ctx.fib_len(pkt.ip_len),
    };
    match resolve(
        ctx,
        &q,
        CLIENT_HOPS.get_ptr_mut(lb_common::maps::client_hop_slot(client)),
        now,
    ) {
        Ok(hop) => send(ctx, pkt.eth, &hop),
        Err(verdict) => verdict,
    }
}

/// The coarse clock as [`now`] last read it on this CPU.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Clock {
    /// `bpf_jiffies64` when it was read.
    pub jiffies: u64,
    /// `bpf_ktime_get_coarse_ns` then.
    pub ns: u64,
}

/// Now, on the clock of every deadline in the data plane (`CLOCK_MONOTONIC`,
/// jiffy-coarse): read once per packet and passed down, a helper call saved per use.
///
/// The coarse clock moves only when the tick moves jiffies on, so it is read once per
/// jiffy and CPU and kept in [`CLOCK`]: `bpf_jiffies64` is no call (the verifier
/// inlines it as a load, kernel 5.5), and a helper call and its return cost 20-30 ns
/// on hosts whose kernel mitigates SRSO with "safe RET". The tick moves jiffies just
/// before it moves the clock, so a packet in between may keep the last tick's time
/// for one more tick (1-10 ms), against deadlines of 134 ms and more.
#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: a helper without arguments (inlined by the verifier).
    let jiffies = unsafe { bpf_jiffies64() };
    let Some(clock) = CLOCK.get_ptr_mut(0) else {
        // SAFETY: as below.
        return unsafe { bpf_ktime_get_coarse_ns() };
    };
    // SAFETY: this CPU's slot, valid for this run; no other CPU writes it.
    unsafe {
        if (*clock).jiffies == jiffies && (*clock).ns != 0 {
            return (*clock).ns;
        }
        // SAFETY: a helper without arguments.
        let ns = bpf_ktime_get_coarse_ns();
        (*clock).jiffies = jiffies;
        (*clock).ns = ns;
        ns
    }
}

/// The next hop for `q`: from `cache` (a slot of a per-CPU cache) when it holds `q`'s
/// destination and is fresh, else from the FIB, which then fills it. `now` is [`now`].
///
/// # Errors
/// The verdict when there is none: an unresolved neighbour passes the packet to the
/// stack once; no route (or, with `tot_len`, a packet over the route's MTU) drops it.
#[inline(always)]
pub fn resolve(
    ctx: &impl Ctx,
    q: &Query<'_>,
    cache: Option<*mut NextHop>,
    now: u64,
) -> Result<Hop, Verdict> {
    if let Some(hop) = cache.and_then(|hop| cached(hop, q.dst, now)) {
        return Ok(hop);
    }
    ask_fib(ctx, q, cache, now)
}

/// The next hop `cache` holds for `dst`, if it is fresh at `now`.
#[inline(always)]
pub fn cached(cache: *mut NextHop, dst: &Addr, now: u64) -> Option<Hop> {
    // SAFETY: this CPU's slot, valid for this run.
    let hop = unsafe { &*cache };
    if now >= hop.expires_ns || hop.addr != *dst {
        return None;
    }
    let dmac = (&raw const hop.dmac).cast::<u8>();
    let smac = (&raw const hop.smac).cast::<u8>();
    // SAFETY: the fields' bytes, each read aligned (asserted above).
    let (dmac, smac) = unsafe {
        (
            (dmac.cast::<u32>().read(), dmac.add(4).cast::<u16>().read()),
            (smac.cast::<u16>().read(), smac.add(2).cast::<u32>().read()),
        )
    };
    Some(Hop {
        dmac,
        smac,
        ifindex: hop.ifindex,
        mtu: hop.mtu,
    })
}

/// The next hop for `q` from the FIB, filling `cache` with it (see [`resolve`]).
///
/// # Errors
/// As [`resolve`].
#[inline(always)]
pub fn ask_fib(
    ctx: &impl Ctx,
    q: &Query<'_>,
    cache: Option<*mut NextHop>,
    now: u64,
) -> Result<Hop, Verdict> {
    // The parameters live in a per-CPU scratch slot rather than on the stack, where the
    // struct would get a 64-byte memset call per packet. Every input field is written
    // here; the rest are outputs of the helper.
    let Some(fib) = FIB_SCRATCH.get_ptr_mut(0) else {
        return Err(Verdict::drop(Counter::DropNoRoute));
    };
    // SAFETY: fib points to this CPU's slot of the scratch map, valid for this run.
    let rc = unsafe {
        (*fib).l4_protocol = q.proto;
        (*fib).sport = 0;
        (*fib).dport = 0;
        (*fib).__bindgen_anon_1.tot_len = q.tot_len;
        (*fib).ifindex = ctx.ingress_ifindex();
        (*fib).__bindgen_anon_2.flowinfo = 0;
        if q.ipv6 {
            (*fib).family = AF_INET6;
            crate::mem::store(&raw mut (*fib).__bindgen_anon_3.ipv6_src, &q.src.0);
            crate::mem::store(&raw mut (*fib).__bindgen_anon_4.ipv6_dst, &q.dst.0);
        } else {
            (*fib).family = AF_INET;
            (*fib).__bindgen_anon_3.ipv4_src = q.src.v4_word();
            (*fib).__bindgen_anon_4.ipv4_dst = q.dst.v4_word();
        }
        bpf_fib_lookup(ctx.as_ptr(), fib, size_of::<FibParams>() as i32, 0)
    };
    // SAFETY: as above; the helper has filled the outputs read below.
    let fib = unsafe { &*fib };
    match rc as u32 {
        BPF_FIB_LKUP_RET_SUCCESS => {}
        BPF_FIB_LKUP_RET_NO_NEIGH => return Err(Verdict::pass(Counter::PassNoNeighbour)),
        _ => return Err(Verdict::drop(Counter::DropNoRoute)),
    }
    // On success the helper reports the route's MTU where `tot_len` was.
    // SAFETY: a plain integer of the union the helper wrote.
    let mtu = u32::from(unsafe { fib.__bindgen_anon_1.mtu_result });
    if let Some(hop) = cache {
        // SAFETY: this CPU's slot, valid for this run.
        unsafe {
            crate::mem::store(&raw mut (*hop).addr, q.dst);
            crate::mem::store(&raw mut (*hop).dmac, &fib.dmac);
            crate::mem::store(&raw mut (*hop).smac, &fib.smac);
            (*hop).ifindex = fib.ifindex;
            (*hop).mtu = mtu;
            (*hop).expires_ns = now + NEXT_HOP_TTL_NS;
        }
    }
    Ok(Hop {
        dmac: dst_words(&fib.dmac),
        smac: src_words(&fib.smac),
        ifindex: fib.ifindex,
        mtu,
    })
}

/// Rewrites the MACs of the frame at `eth` and transmits: back out of the ingress
/// interface, or redirected.
#[inline(always)]
pub fn send(ctx: &impl Ctx, eth: *mut EthHdr, hop: &Hop) -> Verdict {
    let at = eth.cast::<u8>();
    // SAFETY: the caller's eth was bounds-checked for this (possibly resized) packet:
    // its twelve bytes of MACs.
    unsafe {
        crate::mem::store_u32::<0>(at, hop.dmac.0);
        crate::mem::store_u16::<4>(at, hop.dmac.1);
        crate::mem::store_u16::<6>(at, hop.smac.0);
        crate::mem::store_u32::<8>(at, hop.smac.1);
    }
    if hop.ifindex == ctx.ingress_ifindex() {
        Verdict::forward(xdp_action::XDP_TX, Counter::Tx)
    } else {
        Verdict::forward(ctx.redirect(hop.ifindex), Counter::Redirect)
    }
}
