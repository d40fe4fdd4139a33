//! The ABI of `lb_probe`, the TC egress program on the node's interface that sends
//! health probes of `ipip`/`gue` services through the tunnel (lb-ebpf's `probe.rs`):
//! the socket mark that selects a packet and names its backend, and the counters.

/// Marks of probe sockets: `mark & PROBE_MARK_MASK == PROBE_MARK`. The rest of the
/// mark is [`PROBE_MARK_GUE`] and the backend id (backend ids are below
/// `MAX_BACKENDS` = 2^16).
pub const PROBE_MARK: u32 = 0x4c42_0000;
/// The bits of a mark that say "probe" (the policy rule's `fwmark` mask too).
pub const PROBE_MARK_MASK: u32 = 0xfffe_0000;
/// Set in a probe's mark: encapsulate in GUE (else IPIP).
pub const PROBE_MARK_GUE: u32 = 0x0001_0000;
/// The backend id's bits of a probe's mark.
pub const PROBE_MARK_BACKEND: u32 = 0x0000_ffff;

/// The mark of a probe to backend `backend_id` (`gue`: in GUE).
#[must_use]
pub const fn probe_mark(backend_id: u32, gue: bool) -> u32 {
    PROBE_MARK | (backend_id & PROBE_MARK_BACKEND) | if gue { PROBE_MARK_GUE } else { 0 }
}

const _: () = assert!(PROBE_MARK & !PROBE_MARK_MASK == 0);
const _: () = assert!(PROBE_MARK_MASK & (PROBE_MARK_GUE | PROBE_MARK_BACKEND) == 0);
const _: () = assert!(crate::maps::MAX_BACKENDS - 1 <= PROBE_MARK_BACKEND);

/// `lb_probe`'s counters (a per-CPU array indexed by these): every packet the
/// program sees counts exactly one of them.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeCounter {
    /// Not a probe (no probe mark): the node's own traffic, passed untouched.
    Passed = 0,
    /// A probe encapsulated in IPIP (or IP6IP6, 4-in-6, 6-in-4) and sent.
    EncapsulatedIpip,
    /// A probe encapsulated in GUE and sent.
    EncapsulatedGue,
    /// Dropped: the mark names a backend id with no backend.
    DropUnknownBackend,
    /// Dropped: not TCP/UDP over IPv4/IPv6 as a local socket sends it.
    DropMalformed,
    /// Dropped: no route or unresolved next hop towards the backend, or too big for
    /// the route once encapsulated, or the packet could not grow.
    DropNoRoute,
}

impl ProbeCounter {
    /// Number of counters (the size of the counter map).
    pub const COUNT: u32 = 6;

    /// Every counter, in index order.
    pub const ALL: [ProbeCounter; Self::COUNT as usize] = [
        ProbeCounter::Passed,
        ProbeCounter::EncapsulatedIpip,
        ProbeCounter::EncapsulatedGue,
        ProbeCounter::DropUnknownBackend,
        ProbeCounter::DropMalformed,
        ProbeCounter::DropNoRoute,
    ];

    /// Stable snake_case name (the `/metrics` label).
    pub const fn name(self) -> &'static str {
        match self {
            ProbeCounter::Passed => "passed",
            ProbeCounter::EncapsulatedIpip => "encapsulated_ipip",
            ProbeCounter::EncapsulatedGue => "encapsulated_gue",
            ProbeCounter::DropUnknownBackend => "drop_unknown_backend",
            ProbeCounter::DropMalformed => "drop_malformed",
            ProbeCounter::DropNoRoute => "drop_no_route",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_in_index_order_and_names_are_unique() {
        for (i, c) in ProbeCounter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            for other in &ProbeCounter::ALL[..i] {
                assert_ne!(c.name(), other.name());
            }
        }
    }

    #[test]
    fn marks_carry_the_backend_and_the_encapsulation() {
        assert_eq!(probe_mark(0xffff, true), 0x4c43_ffff);
        assert_eq!(probe_mark(7, false) & PROBE_MARK_MASK, PROBE_MARK);
        assert_eq!(probe_mark(7, false) & PROBE_MARK_BACKEND, 7);
    }
}
