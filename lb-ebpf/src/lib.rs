//! Empty library target: `lb-userspace` lists this crate as a build-dependency so cargo
//! rebuilds the embedded BPF object when it changes, and a build-dependency must have a
//! library. The programs live in the `lb-ebpf` binary (`src/main.rs`).
#![no_std]
