//! `lbd` and `lbctl` are thin binaries over the lb-* crates (see README's layout):
//! [`node`] is the one piece of their own, where the agent meets the kernel, and
//! [`logging`] sets up lbd's log.

pub mod check;
pub mod decap;
pub mod logging;
pub mod node;

/// The BPF object lbd loads: the log build (feature `bpf-log`), whose records go to
/// lbd's log.
#[cfg(feature = "bpf-log")]
#[must_use]
pub fn dataplane_object() -> &'static [u8] {
    lb_dataplane::kernel::BPF_OBJECT_LOG
}

/// The BPF object lbd loads: the default one (feature `bpf-log` loads the log build).
#[cfg(not(feature = "bpf-log"))]
#[must_use]
pub fn dataplane_object() -> &'static [u8] {
    lb_dataplane::kernel::BPF_OBJECT
}
