//! The ABI shared by the XDP programs (`lb-ebpf`) and the agent (`lb-userspace`).
//!
//! Contract:
//! - Every map key and value is `#[repr(C)]`, `Copy`, has no implicit padding (explicit
//!   `_pad` fields instead) and a compile-time size assertion, so the kernel and
//!   userspace agree byte for byte.
//! - Fields that hold network-byte-order data end in `_be`: their in-memory bytes are the
//!   bytes on the wire, which is what the XDP program reads straight out of a packet.
//! - Flags and modes are `u32`, never `bool`.
//! - Map names are part of the ABI (maps are pinned by name); a layout change gets a new
//!   name with a version suffix.
//!
//! With the `user` feature every key and value implements `aya::Pod`.
#![no_std]

pub mod addr;
pub mod counters;
pub mod decap;
pub mod halfopen;
pub mod hash;
pub mod maps;
pub mod probe;
pub mod tunnel;

pub use addr::Addr;
pub use counters::{
    BackendStats, Counter, CounterKind, Reason, Sent, TrafficStats, VipStats, XdpAction,
};
pub use decap::{DecapConfig, DecapCounter};
pub use hash::flow_hash;
pub use maps::{
    AddrKey, Backend, FlowEntry, FlowKey, ForwardingMode, GlobalConfig, NatEntry, NatState,
    NatTimeouts, TableChunk, TunnelConfig, VipInfo, VipKey,
};
pub use probe::ProbeCounter;
