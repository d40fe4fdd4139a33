//! The kernel side of the data plane, through aya: the typed handles to every map
//! ([`maps::MapSet`], also opened from the pins of a running or stopped node), and with
//! the `object` feature the embedded BPF object, its loading, attaching and pinning
//! ([`kernel::KernelDataplane`]), the migration of flow tables of another shape, the
//! nat sweeper, and the node's own kernel state the agent changes: neighbour entries
//! (netlink), forwarding sysctls, the bpf filesystem; and [`decap`], the backends'
//! `lb_decap` for `ipip`/`gue` services. With `object-log` also the log
//! build of the object, whose records [`logrelay`] forwards to the `log` crate.
//!
//! This is the only crate whose build needs the BPF toolchain (nightly, bpf-linker,
//! LLVM), and only with `object`: `lbctl` reads pinned maps without it.

pub mod bpffs;
pub mod decap;
pub mod halfopen;
#[cfg(feature = "object")]
pub mod kernel;
#[cfg(feature = "object")]
pub mod logrelay;
pub mod maps;
#[cfg(feature = "object")]
mod migrate;
pub mod natsweep;
pub mod neighbour;
pub mod policy;
#[cfg(feature = "object")]
pub mod probe;
pub mod route;
pub mod sysctl;
#[cfg(feature = "object")]
pub mod tcx;
#[cfg(feature = "object")]
pub mod vipslots;

/// The kernel's possible CPUs (what per-CPU maps are sized for), or 1 if unknown: the
/// NAT port range is split into that many slices.
#[must_use]
pub fn possible_cpus() -> u32 {
    aya::util::nr_cpus().map_or(1, |n| u32::try_from(n.max(1)).unwrap_or(u32::MAX))
}
