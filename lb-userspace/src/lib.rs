//! `lbd` and `lbctl` are thin binaries over the lb-* crates (see README's layout):
//! [`node`] is the one piece of their own, where the agent meets the kernel, and
//! [`logging`] sets up lbd's log.

pub mod check;
pub mod logging;
pub mod node;
