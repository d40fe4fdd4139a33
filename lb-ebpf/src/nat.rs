//! `nat` mode: one-arm full NAT.
//!
//! Towards the backend: destination → backend, source → the node's NAT address and a
//! port of its own, checksums updated incrementally. Replies are matched by the reply
//! key (backend → NAT address:port) and translated back to VIP → client.
//!
//! State lives in two plain hash maps, never evicted: `NAT_FLOWS` (client → VIP: the
//! backend and port) and `NAT` (the reply key: who owns the port, in which TCP state,
//! until when). Only a TCP SYN or a UDP datagram creates a flow: a spoofed ACK has no
//! translation and is dropped (counted), so it can never claim a port.
//!
//! Ports end with their flows: both directions move the reply entry through TCP's
//! states (SYN, established, FIN from either side, last ACK, TIME_WAIT, closed), each
//! with a timeout; activity refreshes the timeout at most once a second. A new flow
//! whose port is taken by an entry past its timeout takes the port over (counted by how
//! the old flow ended); userspace sweeps the rest. The port range is split into one
//! interleaved slice per possible CPU and a CPU only takes over ports of its own slice,
//! so two CPUs never race for one expired port.
//!
//! UDP with a zero checksum keeps it zero: "no checksum" over IPv4 (RFC 768), and
//! over IPv6 a tunnel's that its endpoints agreed on (RFC 6935/6936) or else one the
//! backend's stack drops. Either way it is the backend's to judge, as netfilter's NAT
//! and the TC hook (`BPF_F_MARK_MANGLED_0`) leave it; an update would make a wrong
//! checksum of it.

use aya_ebpf::{
    bindings::{BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR, BPF_NOEXIST},
    helpers::{bpf_get_smp_processor_id, bpf_l3_csum_replace, bpf_l4_csum_replace},
};
use lb_common::Addr;
use lb_common::{
    Backend, Counter, FlowEntry, FlowKey, GlobalConfig, NatEntry, NatState, VipInfo, flow_hash,
    maps::{
        FLOW_F_CLIENT_FIN, FLOW_F_DONE, FLOW_F_ESTABLISHED, NAT_EV_RST, NAT_TIMEOUT_SLOTS, proto,
    },
};

use crate::{
    Verdict, csum,
    ctx::Ctx,
    lookup::{Choice, NoChoice, entry_for, table_choice, valid},
    maps::{BACKENDS, CONFIG, NAT, NAT_FLOWS, NAT_JOBS, NAT_SCRATCH, PROG_NAT},
    mem,
    parse::{ETH_LEN, EthHdr, Ipv4Hdr, Ipv6Hdr, Kind, L4Ports, Packet, ptr_at, tcp},
    stats::count,
};

/// Ports tried for a new flow before giving up.
const PORT_ATTEMPTS: u32 = 8;
/// Stride between attempts (a prime, so attempts spread over the range).
const PORT_STRIDE: u32 = 7919;
/// Mixed into the seed so the port choice is independent of the backend choice.
const PORT_SEED_SALT: u32 = 0x4e41_5450;
/// `-EEXIST`: the key is taken.
const EEXIST: i32 = -17;
/// The client side refreshes the reply entry's timeout at most once per 2^30 ns.
const SEEN_SHIFT: u32 = 30;

/// Per-CPU scratch for keys and values: `lb_nat` has its own 512-byte stack, and a
/// few 40-byte keys on it leave the verifier no room.
#[repr(C)]
pub struct Scratch {
    /// A reply key being looked up or claimed.
    pub reply: FlowKey,
    /// A client-side key (of a flow whose port is taken over).
    pub client: FlowKey,
    /// A reply entry being written.
    pub entry: NatEntry,
}

/// What `lb_xdp` hands `lb_nat` (through [`NAT_JOBS`]): the packet as parsed, and
/// the VIP it found, or none for a packet to the NAT address (a reply).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Job {
    pub key: FlowKey,
    pub vip: VipInfo,
    pub ip_len: u16,
    /// 1 behind an 802.1Q tag.
    pub vlan: u8,
    pub ipv6: u8,
    pub tcp_flags: u8,
    /// 1 when `vip` holds the VIP, 0 for a reply.
    pub has_vip: u8,
    pub _pad: [u8; 2],
}

/// In `lb_xdp`: hands a TCP/UDP packet to `lb_nat` with its VIP (`None`: a packet to
/// the NAT address). Returns only if the tail call fails (the agent has not installed
/// `lb_nat`), and then the packet is dropped.
#[inline(always)]
pub fn hand_over(ctx: &impl Ctx, pkt: &Packet, vip: Option<&VipInfo>) -> Verdict {
    let unavailable = Verdict::drop(Counter::DropNatUnavailable);
    let Some(job) = NAT_JOBS.get_ptr_mut(0) else {
        return unavailable;
    };
    // SAFETY: this CPU's slot; the tail call below runs on this CPU next, before any
    // other program could write it.
    unsafe {
        crate::mem::store(&raw mut (*job).key, &pkt.key);
        if let Some(vip) = vip {
            crate::mem::store(&raw mut (*job).vip, vip);
        }
        (*job).has_vip = u8::from(vip.is_some());
        (*job).ip_len = pkt.ip_len;
        (*job).vlan = u8::from(pkt.l3 != ETH_LEN);
        (*job).ipv6 = u8::from(pkt.ipv6);
        (*job).tcp_flags = pkt.tcp_flags;
    }
    ctx.tail_call(PROG_NAT);
    unavailable
}

/// In `lb_nat`: the packet `lb_xdp` handed over, and its VIP (`None`: a reply);
/// `None` if the slot does not describe this frame (see `parse::describes`).
#[inline(always)]
pub fn take_job(ctx: &impl Ctx) -> Option<(Packet, Option<&'static VipInfo>)> {
    let job = NAT_JOBS.get_ptr(0)?;
    // SAFETY: this CPU's slot, written by `lb_xdp` just before the tail call; it lives
    // as long as the map, and nothing writes it during this run.
    let job: &'static Job = unsafe { &*job };
    let eth = ptr_at::<EthHdr>(ctx, 0)?;
    let pkt = crate::parse::handed_over(
        eth,
        &job.key,
        job.ipv6 != 0,
        job.vlan != 0,
        job.ip_len,
        Kind::Flow,
        job.tcp_flags,
    );
    if !crate::parse::describes(ctx, &pkt) {
        return None;
    }
    Some((pkt, (job.has_vip != 0).then_some(&job.vip)))
}

#[inline(always)]
fn config() -> Option<&'static GlobalConfig> {
    CONFIG.get(0)
}

/// The node's NAT address for this family, if configured.
#[inline(always)]
fn nat_addr(cfg: &GlobalConfig, ipv6: bool) -> Option<Addr> {
    let addr = if ipv6 { cfg.nat_v6 } else { cfg.nat_v4 };
    if cfg.nat_port_count == 0 || addr.is_zero() {
        None
    } else {
        Some(addr)
    }
}

/// The node's NAT address for a family, if configured.
#[inline(always)]
pub fn nat_addr_of(ipv6: bool) -> Option<Addr> {
    config().and_then(|c| nat_addr(c, ipv6))
}

/// Whether `dst` is the node's NAT address (so the packet may be a reply).
#[inline(always)]
pub fn is_nat_addr(dst: &Addr, ipv6: bool) -> bool {
    config()
        .and_then(|c| nat_addr(c, ipv6))
        .is_some_and(|a| a == *dst)
}

/// How long `state` holds a port.
#[inline(always)]
fn timeout(cfg: &GlobalConfig, state: u8, protocol: u8) -> u64 {
    if protocol == proto::UDP {
        return cfg.nat_timeouts.udp_ns;
    }
    // A mask, not a bounds check: the verifier then sees the offset bounded.
    cfg.nat_timeouts.tcp_ns[state as usize & (NAT_TIMEOUT_SLOTS - 1)]
}

/// Moves a reply entry to `state` and restarts its timeout.
#[inline(always)]
fn enter(cfg: &GlobalConfig, r: *mut NatEntry, state: NatState, protocol: u8, now: u64) {
    // SAFETY: `r` points into a map value (or the scratch) for this program run.
    unsafe {
        (*r).state = state as u8;
        (*r).expires_ns = now.saturating_add(timeout(cfg, state as u8, protocol));
        (*r).refreshed = (now >> SEEN_SHIFT) as u32;
    }
}

/// Restarts a reply entry's timeout after activity, unless its state is one that only
/// runs out (the close is done).
#[inline(always)]
fn refresh(cfg: &GlobalConfig, r: *mut NatEntry, protocol: u8, now: u64) {
    // SAFETY: as in `enter`.
    let state = unsafe { (*r).state };
    if state <= NatState::BackendFin as u8 {
        // SAFETY: as above.
        unsafe {
            (*r).expires_ns = now.saturating_add(timeout(cfg, state, protocol));
            (*r).refreshed = (now >> SEEN_SHIFT) as u32;
        }
    }
}

/// The counter a released port is counted under, from the state it ended in.
#[inline(always)]
fn release_reason(old: &NatEntry) -> Counter {
    if old.events & NAT_EV_RST != 0 {
        Counter::NatReleasedRst
    } else if old.state == NatState::Closed as u8 || old.state == NatState::TimeWait as u8 {
        Counter::NatReleasedFin
    } else {
        Counter::NatReleasedTimeout
    }
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

/// Fills the scratch reply key of a flow to `backend` through `nat_port_be`.
#[inline(always)]
fn set_reply_key(sc: *mut Scratch, backend: &Backend, nat: &Addr, key: &FlowKey, nat_port_be: u16) {
    // SAFETY: the scratch slot of this CPU, valid for this run.
    unsafe {
        let reply = &raw mut (*sc).reply;
        crate::mem::store(&raw mut (*reply).src, &backend.addr);
        crate::mem::store(&raw mut (*reply).dst, nat);
        (*reply).src_port_be = backend_port(backend, key.dst_port_be);
        (*reply).dst_port_be = nat_port_be;
        (*reply).proto = key.proto;
        (*reply)._pad = 0;
        (*reply)._pad2 = 0;
    }
}

/// The `nat` flow of a client packet, found or created, with its state tracked.
///
/// # Errors
/// [`NoChoice::NatNoFlow`] for a TCP packet other than a SYN without a flow;
/// [`NoChoice::NoBackend`], [`NoChoice::NatPortsExhausted`] and
/// [`NoChoice::NatTableFull`] for a new flow that cannot be made.
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "a key passed by value would be copied onto lb_nat's nearly full stack"
)]
#[inline(always)]
pub fn flow(vip: &VipInfo, pkt: &Packet, now: u64) -> Result<Choice, NoChoice> {
    let key = &pkt.key;
    if let Some(f) = NAT_FLOWS.get_ptr_mut(key) {
        // SAFETY: a valid pointer to the map value for this run.
        let entry = unsafe { *f };
        if let Some(backend) = valid(vip, &entry) {
            let pinned = Choice {
                backend_id: entry.backend_id,
                backend,
                new_flow: false,
                nat_port_be: entry.nat_port_be,
            };
            // The common case: an established segment within the second since the
            // last refresh touches nothing else.
            if quiet(&entry, pkt, now) {
                return Ok(pinned);
            }
            let cfg = config().ok_or(NoChoice::NoBackend)?;
            let nat = nat_addr(cfg, pkt.ipv6).ok_or(NoChoice::NoBackend)?;
            let sc = NAT_SCRATCH.get_ptr_mut(0).ok_or(NoChoice::NoBackend)?;
            set_reply_key(sc, backend, &nat, key, entry.nat_port_be);
            if track(cfg, f, &entry, sc, pkt, backend, now) {
                return Ok(pinned);
            }
        }
        // Not its own any more (identity), or a SYN for a backend that takes no new
        // flows: the flow is gone; a SYN starts a new one below.
        let _ = NAT_FLOWS.remove(key);
    }
    if !pkt.may_open() {
        return Err(NoChoice::NatNoFlow);
    }
    let cfg = config().ok_or(NoChoice::NoBackend)?;
    let nat = nat_addr(cfg, pkt.ipv6).ok_or(NoChoice::NoBackend)?;
    let sc = NAT_SCRATCH.get_ptr_mut(0).ok_or(NoChoice::NoBackend)?;
    let backend_id = table_choice(vip, key).ok_or(NoChoice::NoBackend)?;
    let backend = BACKENDS.get(backend_id).ok_or(NoChoice::NoBackend)?;
    let nat_port_be = claim_port(cfg, sc, &nat, key, backend, backend_id, now)?;
    let mut entry = entry_for(vip, backend_id, backend, nat_port_be);
    entry.seen = (now >> SEEN_SHIFT) as u32;
    if NAT_FLOWS.insert(key, entry, 0).is_err() {
        // SAFETY: the scratch still holds the claimed reply key.
        let _ = NAT.remove(unsafe { &(*sc).reply });
        return Err(NoChoice::NatTableFull);
    }
    Ok(Choice {
        backend_id,
        backend,
        new_flow: true,
        nat_port_be,
    })
}

/// Whether a client packet of an existing flow changes nothing: not TCP state that
/// moves (promotion, FIN, RST, the closing phase, a SYN on a used 5-tuple), and the
/// timeout was refreshed within the last second.
#[inline(always)]
fn quiet(entry: &FlowEntry, pkt: &Packet, now: u64) -> bool {
    let flags = entry.flags;
    let tcp_event = pkt.key.proto == proto::TCP
        && flags & FLOW_F_DONE == 0
        && (flags & FLOW_F_ESTABLISHED == 0
            || pkt.tcp_flags & (tcp::FIN | tcp::RST) != 0
            || flags & FLOW_F_CLIENT_FIN != 0);
    let reused = pkt.is_syn() && flags != 0;
    !tcp_event && !reused && entry.seen == (now >> SEEN_SHIFT) as u32
}

/// Tracks a client packet of an existing flow: promotion after the SYN, FIN, RST, the
/// final ACK, and a timeout refresh at most once a second; each needs the reply entry
/// (whose key is in the scratch). Returns false when the packet is a SYN that must
/// start a new flow instead: the old connection has ended (a reused 5-tuple) and its
/// backend takes no new flows.
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "a key passed by value would be copied onto lb_nat's nearly full stack"
)]
#[inline(always)]
fn track(
    cfg: &GlobalConfig,
    f: *mut FlowEntry,
    entry: &FlowEntry,
    sc: *mut Scratch,
    pkt: &Packet,
    backend: &Backend,
    now: u64,
) -> bool {
    let protocol = pkt.key.proto;
    let flags = entry.flags;
    let seen = (now >> SEEN_SHIFT) as u32;
    let syn = pkt.is_syn();
    let fin = pkt.tcp_flags & tcp::FIN != 0;
    let rst = pkt.tcp_flags & tcp::RST != 0;
    let reused = syn && flags != 0;
    // SAFETY: the scratch's reply key was set by the caller.
    let Some(r) = NAT.get_ptr_mut(unsafe { &(*sc).reply }) else {
        // The reply entry went (swept by userspace in the instant it expired, or never
        // written): a SYN re-asserts it below, any other packet keeps going.
        if syn {
            reassert(cfg, sc, pkt, entry, now);
        }
        return true;
    };
    // SAFETY: a valid pointer to the map value for this run.
    let state = unsafe { (*r).state };
    let mut new_flags = flags;
    if reused {
        if state < NatState::ClientFin as u8 {
            // A SYN on a live connection (a duplicate or a spoof): the backend answers
            // it; nothing changes here.
            return true;
        }
        if backend.flags & lb_common::maps::BACKEND_F_NO_NEW != 0 {
            return false;
        }
        // The client reuses its 5-tuple for a new connection: same backend, same port
        // (the backend's TIME_WAIT accepts a newer SYN on it), state from the start.
        // SAFETY: as above.
        unsafe { (*r).events = 0 };
        enter(cfg, r, NatState::SynSent, protocol, now);
        new_flags = 0;
    } else if protocol == proto::TCP && flags & FLOW_F_DONE == 0 {
        if rst {
            // SAFETY: as above.
            unsafe { (*r).events |= NAT_EV_RST };
            enter(cfg, r, NatState::Closed, protocol, now);
            new_flags |= FLOW_F_DONE;
        } else if fin && flags & FLOW_F_CLIENT_FIN == 0 {
            new_flags |= FLOW_F_CLIENT_FIN | FLOW_F_ESTABLISHED;
            if state == NatState::BackendFin as u8 {
                // The backend closed first: it holds TIME_WAIT on this port.
                enter(cfg, r, NatState::TimeWait, protocol, now);
                new_flags |= FLOW_F_DONE;
            } else if state < NatState::ClientFin as u8 {
                enter(cfg, r, NatState::ClientFin, protocol, now);
            }
        } else if flags & FLOW_F_CLIENT_FIN != 0 {
            if state == NatState::LastAck as u8 && !fin {
                // The final ACK: the backend's side of the connection is closed.
                enter(cfg, r, NatState::Closed, protocol, now);
                new_flags |= FLOW_F_DONE;
            } else if state >= NatState::TimeWait as u8 {
                new_flags |= FLOW_F_DONE;
            }
        } else if flags & FLOW_F_ESTABLISHED == 0 && !syn {
            // The client's packet after its SYN: the handshake is done.
            new_flags |= FLOW_F_ESTABLISHED;
            if state == NatState::SynSent as u8 {
                enter(cfg, r, NatState::Established, protocol, now);
            }
        } else {
            refresh(cfg, r, protocol, now);
        }
    } else {
        refresh(cfg, r, protocol, now);
    }
    // SAFETY: `f` is a valid pointer to the flow's map value for this run.
    unsafe {
        (*f).flags = new_flags;
        (*f).seen = seen;
    }
    true
}

/// Writes the reply entry of an existing flow back if it is missing (a SYN
/// retransmitted after userspace swept a just-expired entry).
#[inline(always)]
fn reassert(cfg: &GlobalConfig, sc: *mut Scratch, pkt: &Packet, entry: &FlowEntry, now: u64) {
    fill_entry(cfg, sc, &pkt.key, entry.backend_id, now);
    // SAFETY: the scratch slot of this CPU.
    let (reply, value) = unsafe { (&(*sc).reply, &(*sc).entry) };
    let _ = NAT.insert(reply, value, u64::from(BPF_NOEXIST));
}

/// Fills the scratch entry for a new flow of `key` to `backend_id`.
#[inline(always)]
fn fill_entry(cfg: &GlobalConfig, sc: *mut Scratch, key: &FlowKey, backend_id: u32, now: u64) {
    let state = if key.proto == proto::UDP {
        NatState::Established
    } else {
        NatState::SynSent
    };
    // SAFETY: the scratch slot of this CPU.
    unsafe {
        (*sc).entry = NatEntry {
            client: key.src,
            vip: key.dst,
            client_port_be: key.src_port_be,
            vip_port_be: key.dst_port_be,
            state: state as u8,
            events: 0,
            _pad: 0,
            expires_ns: now.saturating_add(timeout(cfg, state as u8, key.proto)),
            backend_id,
            refreshed: (now >> SEEN_SHIFT) as u32,
        };
    }
}

/// Claims a NAT source port for a new flow to `backend` and records how to translate
/// its replies; the claimed reply key stays in the scratch. Ports come from this CPU's
/// slice of the range, at the flow's hash and a few strides from it; a port whose
/// owner is past its timeout is taken over, and the old owner's client-side entry goes
/// with it.
#[inline(always)]
fn claim_port(
    cfg: &GlobalConfig,
    sc: *mut Scratch,
    nat: &Addr,
    key: &FlowKey,
    backend: &Backend,
    backend_id: u32,
    now: u64,
) -> Result<u16, NoChoice> {
    let count = u32::from(cfg.nat_port_count);
    let (slices, slice) = if cfg.nat_cpus > 1 && count >= cfg.nat_cpus {
        // SAFETY: a helper without arguments.
        (
            cfg.nat_cpus,
            unsafe { bpf_get_smp_processor_id() } % cfg.nat_cpus,
        )
    } else {
        (1, 0)
    };
    let per_slice = count / slices;
    // The time (in ~1 s steps) is mixed in: a client whose SYN found every candidate
    // port taken tries other ports when it retransmits, instead of the same ones.
    // (A retransmitted SYN of a flow that got a port finds its flow entry first.)
    let salt = PORT_SEED_SALT ^ (now >> SEEN_SHIFT) as u32;
    let base = flow_hash(cfg.hash_seed ^ salt, key);
    fill_entry(cfg, sc, key, backend_id, now);
    set_reply_key(sc, backend, nat, key, 0);
    let mut full = false;
    for attempt in 0..PORT_ATTEMPTS {
        let index = base
            .wrapping_add(attempt.wrapping_mul(PORT_STRIDE))
            .checked_rem(per_slice)
            .ok_or(NoChoice::NatPortsExhausted)?;
        let offset = index * slices + slice;
        let port_be = cfg.nat_port_first.wrapping_add(offset as u16).to_be();
        // SAFETY: the scratch slot of this CPU.
        let (reply, value) = unsafe {
            (*sc).reply.dst_port_be = port_be;
            (&(*sc).reply, &(*sc).entry)
        };
        match NAT.insert(reply, value, u64::from(BPF_NOEXIST)) {
            Ok(()) => return Ok(port_be),
            Err(EEXIST) => {
                if take_over(sc, now) {
                    return Ok(port_be);
                }
            }
            // E2BIG or ENOMEM: the map is full; an expired port may still be found.
            Err(_) => full = true,
        }
    }
    Err(if full {
        NoChoice::NatTableFull
    } else {
        NoChoice::NatPortsExhausted
    })
}

/// Takes over the port in the scratch's reply key if its owner is past its timeout.
#[inline(always)]
fn take_over(sc: *mut Scratch, now: u64) -> bool {
    // SAFETY: the scratch slot of this CPU.
    let reply = unsafe { &(*sc).reply };
    // SAFETY: plain data replaced whole by updates.
    let Some(old) = (unsafe { NAT.get(reply) }) else {
        return false;
    };
    if now < old.expires_ns {
        return false;
    }
    let old = *old;
    // SAFETY: as above.
    unsafe { (*sc).client = old.client_key(reply.proto) };
    // SAFETY: as above.
    let client = unsafe { &(*sc).client };
    // SAFETY: as above.
    if let Some(f) = unsafe { NAT_FLOWS.get(client) }
        && f.nat_port_be == reply.dst_port_be
        && f.backend_id == old.backend_id
    {
        let _ = NAT_FLOWS.remove(client);
    }
    // SAFETY: as above.
    let value = unsafe { &(*sc).entry };
    if NAT.insert(reply, value, 0).is_err() {
        return false;
    }
    count(release_reason(&old));
    true
}

/// Rewrites a client packet towards `backend` from the NAT address and `port_be`.
///
/// # Errors
/// The drop verdict when NAT is not configured for this family (the agent refuses such
/// a config, so this is a guard, not a path).
#[inline(always)]
pub fn to_backend(
    ctx: &impl Ctx,
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

/// Translates a reply from a backend back to VIP → client, tracking the backend's FIN
/// and RST, or says why not.
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "a key passed by value would be copied onto lb_nat's nearly full stack"
)]
#[inline(always)]
pub fn reply(ctx: &impl Ctx, pkt: &Packet, now: u64) -> Result<&'static NatEntry, Verdict> {
    let Some(r) = NAT.get_ptr_mut(&pkt.key) else {
        return Err(Verdict::pass(Counter::PassNatUnknown));
    };
    track_reply(r, pkt, now);
    // SAFETY: a valid pointer to the map value for this run.
    let entry: &'static NatEntry = unsafe { &*r };
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

/// The backend's side of the state machine: its FIN (after the client's, the backend
/// waits for the final ACK; before, it will hold TIME_WAIT), its RST, and a timeout
/// refresh at most once a second.
#[inline(always)]
fn track_reply(r: *mut NatEntry, pkt: &Packet, now: u64) {
    let protocol = pkt.key.proto;
    // SAFETY: a valid pointer to the map value for this run.
    let state = unsafe { (*r).state };
    let events = pkt.tcp_flags & (tcp::FIN | tcp::RST) != 0;
    let syn_sent = protocol == proto::TCP && state == NatState::SynSent as u8;
    // Within the second since the last refresh nothing else is needed (and a SYN's
    // deadline never moves for the backend, see below).
    // SAFETY: as above.
    let refreshed = unsafe { (*r).refreshed };
    if !(protocol == proto::TCP && events && state < NatState::TimeWait as u8)
        && (syn_sent || refreshed == (now >> SEEN_SHIFT) as u32)
    {
        return;
    }
    let Some(cfg) = config() else {
        return;
    };
    if protocol == proto::TCP && state < NatState::TimeWait as u8 {
        if pkt.tcp_flags & tcp::RST != 0 {
            // SAFETY: as above.
            unsafe { (*r).events |= NAT_EV_RST };
            enter(cfg, r, NatState::Closed, protocol, now);
            return;
        }
        if pkt.tcp_flags & tcp::FIN != 0 {
            if state == NatState::ClientFin as u8 {
                enter(cfg, r, NatState::LastAck, protocol, now);
            } else if state < NatState::ClientFin as u8 {
                enter(cfg, r, NatState::BackendFin, protocol, now);
            }
            return;
        }
    }
    // A backend retransmitting its SYN-ACK is no sign of life from the client (a
    // spoofed SYN gets exactly that): the SYN timeout runs from the client's SYN.
    if syn_sent {
        return;
    }
    refresh(cfg, r, protocol, now);
}

/// The addresses and ports a packet is rewritten to.
pub struct Rewrite {
    pub src: Addr,
    pub dst: Addr,
    pub sport_be: u16,
    pub dport_be: u16,
}

/// What rewriting `key`'s ports to `to`'s adds to a one's-complement sum.
#[inline(always)]
fn port_diff(key: &FlowKey, to: &Rewrite) -> u64 {
    csum::word_diff(
        u32::from(key.src_port_be) | (u32::from(key.dst_port_be) << 16),
        u32::from(to.sport_be) | (u32::from(to.dport_be) << 16),
    )
}

/// What rewriting `key`'s addresses to `to`'s adds to a one's-complement sum (the
/// IPv4 words alone for IPv4: the mapped prefix is not in the packet).
#[inline(always)]
fn addr_diff(key: &FlowKey, to: &Rewrite, ipv6: bool) -> u64 {
    if ipv6 {
        csum::addr_diff(&key.src, &to.src) + csum::addr_diff(&key.dst, &to.dst)
    } else {
        csum::word_diff(key.src.v4_word(), to.src.v4_word())
            + csum::word_diff(key.dst.v4_word(), to.dst.v4_word())
    }
}

/// Sets the packet's addresses and ports to `to`, updating the IPv4 header checksum and
/// the TCP/UDP checksum incrementally. False if the headers are not all in the packet.
/// The packet's current addresses and ports are `pkt.key`'s (it was parsed from these
/// bytes and nothing has changed them since).
// Inlined: a BPF-to-BPF call would receive the packet bounds as plain integers, and
// the verifier rejects the arithmetic the callee does on them.
#[inline(always)]
fn rewrite<C: Ctx>(ctx: &C, pkt: &Packet, to: &Rewrite) -> bool {
    if C::SKB {
        return rewrite_skb(ctx, pkt, to);
    }
    let Some(ports) = ptr_at::<L4Ports>(ctx, pkt.l4) else {
        return false;
    };
    let check_at = pkt.l4 + if pkt.key.proto == proto::TCP { 16 } else { 6 };
    let Some(check) = ptr_at::<[u8; 2]>(ctx, check_at) else {
        return false;
    };
    // Checksums are handled in their stored (network) byte order throughout, as the
    // kernel's own csum helpers do. The old words are the key's, loaded at parse time:
    // a dozen ALU instructions where `bpf_csum_diff` took five helper calls.
    let key = &pkt.key;
    let addrs = addr_diff(key, to, pkt.ipv6);
    // SAFETY: every pointer was bounds-checked by ptr_at; the packet is not resized.
    unsafe {
        let old_check = u16::from_ne_bytes(*check);
        let l4 = u64::from(!old_check) + port_diff(key, to) + addrs;
        if pkt.ipv6 {
            let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, pkt.l3) else {
                return false;
            };
            write_addrs(ip.cast(), to, true);
        } else {
            let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, pkt.l3) else {
                return false;
            };
            let l3 = u64::from(!u16::from_ne_bytes((*ip).check)) + addrs;
            mem::store_u16::<10>(ip.cast(), !csum::fold64(l3));
            write_addrs(ip.cast(), to, false);
        }
        let udp_without_checksum = key.proto == proto::UDP && old_check == 0;
        if !udp_without_checksum {
            let mut new = !csum::fold64(l4);
            if key.proto == proto::UDP && new == 0 {
                new = 0xffff;
            }
            mem::store_u16::<0>(check.cast(), new);
        }
        write_ports(ports, to);
    }
    true
}

/// Writes `to`'s addresses into the IP header at `ip` (IPv6 with `ipv6`) as word
/// stores ([`mem::store_u32`]): the byte arrays of the header's fields became a store
/// per byte.
///
/// # Safety
/// `ip` must point to a bounds-checked IPv6 header with `ipv6`, else IPv4.
#[inline(always)]
unsafe fn write_addrs(ip: *mut u8, to: &Rewrite, ipv6: bool) {
    // SAFETY: per the contract: IPv6 addresses at 8..40, IPv4 ones at 12..20.
    unsafe {
        if ipv6 {
            mem::store_ipv6_addrs(ip, &to.src, &to.dst);
        } else {
            mem::store_u32::<12>(ip, to.src.v4_word());
            mem::store_u32::<16>(ip, to.dst.v4_word());
        }
    }
}

/// Writes `to`'s ports (network order) at `ports`, as [`write_addrs`] writes the
/// addresses.
///
/// # Safety
/// `ports` must be bounds-checked.
#[inline(always)]
unsafe fn write_ports(ports: *mut L4Ports, to: &Rewrite) {
    // SAFETY: per the contract.
    unsafe {
        mem::store_u16::<0>(ports.cast(), to.sport_be);
        mem::store_u16::<2>(ports.cast(), to.dport_be);
    }
}

/// [`rewrite`] on an skb (TC), whose checksum may be `CHECKSUM_PARTIAL` (a GRO-merged
/// packet, or one a local sender left to offload): then the L4 field holds only the
/// pseudo header's sum, which must follow the addresses but not the ports. The
/// kernel's helpers know the skb's state and keep `skb->csum` of a `CHECKSUM_COMPLETE`
/// one right too; the differences are summed here as for XDP. A UDP checksum of zero
/// stays zero (`BPF_F_MARK_MANGLED_0`), and one that comes out zero is sent as 0xffff.
/// Packet pointers taken before are invalid afterwards (see `parse::refresh`).
#[inline(always)]
fn rewrite_skb<C: Ctx>(ctx: &C, pkt: &Packet, to: &Rewrite) -> bool {
    let skb = ctx.as_ptr().cast::<aya_ebpf::bindings::__sk_buff>();
    let Some(ports) = ptr_at::<L4Ports>(ctx, pkt.l4) else {
        return false;
    };
    let check_at = pkt.l4 + if pkt.key.proto == proto::TCP { 16 } else { 6 };
    let mangled = if pkt.key.proto == proto::UDP {
        u64::from(BPF_F_MARK_MANGLED_0)
    } else {
        0
    };
    // Differences as sums of 16 bits, which the helpers take as any other checksum.
    let port_diff = u32::from(csum::fold64(port_diff(&pkt.key, to)));
    let addr_diff = u32::from(csum::fold64(addr_diff(&pkt.key, to, pkt.ipv6)));
    // SAFETY: every pointer was bounds-checked by ptr_at; the helpers come after the
    // last access through one.
    unsafe {
        let ip_check_at = if pkt.ipv6 {
            let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, pkt.l3) else {
                return false;
            };
            write_addrs(ip.cast(), to, true);
            None
        } else {
            let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, pkt.l3) else {
                return false;
            };
            write_addrs(ip.cast(), to, false);
            Some(pkt.l3 + 10)
        };
        write_ports(ports, to);
        if let Some(at) = ip_check_at
            && bpf_l3_csum_replace(skb, at as u32, 0, u64::from(addr_diff), 0) != 0
        {
            return false;
        }
        let pseudo = u64::from(BPF_F_PSEUDO_HDR) | mangled;
        bpf_l4_csum_replace(skb, check_at as u32, 0, u64::from(addr_diff), pseudo) == 0
            && bpf_l4_csum_replace(skb, check_at as u32, 0, u64::from(port_diff), mangled) == 0
    }
}
