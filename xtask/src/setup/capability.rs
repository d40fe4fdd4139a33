//! What the project needs of a machine, each as a check that exercises it.
//!
//! A check returns `Ok(detail)` (a version, or what it proved) or `Err(why)`. Checks
//! are quick (the slowest, linking a BPF object, takes well under a second) and
//! leave nothing behind: scratch files go to a per-process directory that is removed,
//! and the network-namespace check deletes the namespace it made.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cmd::is_root;

/// bpf-linker's version, verified with LLVM 22 in shared/TOOLCHAIN.md.
pub const BPF_LINKER_VERSION: &str = "0.13.0";
/// Where Debian's LLVM 22 lives; bpf-linker's LLVM major must equal nightly rustc's.
pub const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
/// The LLVM major nightly rustc and bpf-linker must share.
const LLVM_MAJOR: &str = "22";

/// One thing the project needs, how to prove it, and what provides it.
pub struct Capability {
    /// What an operator would search for: "protoc with the well-known types".
    pub name: &'static str,
    /// Exercises the capability.
    pub check: fn() -> Result<String, String>,
    /// What installs it.
    pub provider: Provider,
}

/// What installs a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Debian packages.
    Apt(&'static [&'static str]),
    /// A rustup component of a toolchain.
    Rustup {
        /// `nightly` or `stable`.
        toolchain: &'static str,
        /// The component, e.g. `rust-src`.
        component: &'static str,
    },
    /// `cargo install bpf-linker` built against Debian's LLVM 22.
    BpfLinker,
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::Apt(packages) => write!(f, "apt-get install {}", packages.join(" ")),
            Provider::Rustup {
                toolchain,
                component,
            } => write!(
                f,
                "rustup component add {component} --toolchain {toolchain}"
            ),
            Provider::BpfLinker => write!(
                f,
                "cargo install bpf-linker@{BPF_LINKER_VERSION} --features llvm-22 (needs llvm-22-dev)"
            ),
        }
    }
}

/// Every capability, in install order: apt packages first (bpf-linker builds against
/// LLVM 22 from apt), then toolchain components, then bpf-linker.
pub fn capabilities() -> Vec<Capability> {
    vec![
        Capability {
            name: "LLVM 22 (llvm-config)",
            check: llvm,
            provider: Provider::Apt(&["llvm-22-dev", "libpolly-22-dev"]),
        },
        Capability {
            name: "protoc with the well-known types",
            check: protoc,
            provider: Provider::Apt(&["protobuf-compiler", "libprotobuf-dev"]),
        },
        Capability {
            name: "etcd server",
            check: etcd,
            provider: Provider::Apt(&["etcd-server"]),
        },
        Capability {
            name: "network namespaces (ip netns)",
            check: ip_netns,
            provider: Provider::Apt(&["iproute2"]),
        },
        Capability {
            name: "ethtool",
            check: ethtool,
            provider: Provider::Apt(&["ethtool"]),
        },
        Capability {
            name: "openssl",
            check: openssl,
            provider: Provider::Apt(&["openssl"]),
        },
        Capability {
            name: "stable rustfmt",
            check: || cargo_tool("stable", "fmt"),
            provider: Provider::Rustup {
                toolchain: "stable",
                component: "rustfmt",
            },
        },
        Capability {
            name: "stable clippy",
            check: || cargo_tool("stable", "clippy"),
            provider: Provider::Rustup {
                toolchain: "stable",
                component: "clippy",
            },
        },
        Capability {
            name: "nightly rust-src (build-std for bpfel)",
            check: nightly_rust_src,
            provider: Provider::Rustup {
                toolchain: "nightly",
                component: "rust-src",
            },
        },
        Capability {
            name: "nightly clippy (BPF target lint)",
            check: || cargo_tool("nightly", "clippy"),
            provider: Provider::Rustup {
                toolchain: "nightly",
                component: "clippy",
            },
        },
        Capability {
            name: "bpf-linker links a BPF object",
            check: bpf_linker,
            provider: Provider::BpfLinker,
        },
    ]
}

/// Runs a program; `Ok(stdout)` when it exits 0, else why not (its stderr's last line).
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    run_cmd(Command::new(program).args(args))
}

fn run_cmd(cmd: &mut Command) -> Result<String, String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .output()
        .map_err(|e| format!("`{program}` cannot run: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
    Err(format!(
        "`{program}` failed ({}): {}",
        out.status,
        last.unwrap_or("no output").trim()
    ))
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_owned()
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("lbsetup-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(Self(dir))
    }

    fn write(&self, name: &str, text: &str) -> Result<PathBuf, String> {
        let path = self.0.join(name);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn llvm() -> Result<String, String> {
    let version = run(&format!("{LLVM_PREFIX}/bin/llvm-config"), &["--version"])?;
    let version = version.trim();
    if version.split('.').next() != Some(LLVM_MAJOR) {
        return Err(format!("llvm-config says {version}, not {LLVM_MAJOR}.x"));
    }
    Ok(format!("LLVM {version}"))
}

/// protoc must find `google/protobuf/descriptor.proto` on its own, as the etcd
/// client's build script expects (Debian: the files come with libprotobuf-dev).
fn protoc() -> Result<String, String> {
    let scratch = Scratch::new("protoc")?;
    let proto = scratch.write(
        "probe.proto",
        "syntax = \"proto3\";\n\
         import \"google/protobuf/descriptor.proto\";\n\
         extend google.protobuf.FieldOptions { string lb_probe = 50000; }\n\
         message Probe { string name = 1 [(lb_probe) = \"x\"]; }\n",
    )?;
    let out = scratch.0.join("probe.pb");
    let include = format!("-I{}", scratch.0.display());
    let descriptor = format!("--descriptor_set_out={}", out.display());
    run("protoc", &[&include, &descriptor, &proto.to_string_lossy()])?;
    let version = run("protoc", &["--version"])?;
    Ok(format!(
        "{}; compiled a file importing google/protobuf/descriptor.proto",
        first_line(&version)
    ))
}

fn etcd() -> Result<String, String> {
    let version = run("etcd", &["--version"])?;
    Ok(first_line(&version))
}

/// As root: a namespace is made, entered and deleted. Otherwise `ip netns list`
/// must run (making one needs root; the tests that do are root-only).
fn ip_netns() -> Result<String, String> {
    let version = first_line(&run("ip", &["-V"])?);
    if !is_root() {
        run("ip", &["netns", "list"])?;
        return Ok(format!("{version}; not root, so only listed namespaces"));
    }
    let name = format!("lbsetup-{}", std::process::id());
    run("ip", &["netns", "add", &name])?;
    let entered = run("ip", &["netns", "exec", &name, "ip", "link", "show", "lo"]);
    let deleted = run("ip", &["netns", "del", &name]);
    entered?;
    deleted?;
    Ok(format!("{version}; made, entered and deleted a namespace"))
}

/// ethtool must read a device's offload settings (inside a scratch namespace as
/// root, so the host's interfaces are never touched).
fn ethtool() -> Result<String, String> {
    let version = first_line(&run("ethtool", &["--version"])?);
    if !is_root() {
        return Ok(version);
    }
    let name = format!("lbsetup-eth-{}", std::process::id());
    run("ip", &["netns", "add", &name])?;
    let read = run("ip", &["netns", "exec", &name, "ethtool", "-k", "lo"]);
    let deleted = run("ip", &["netns", "del", &name]);
    read?;
    deleted?;
    Ok(format!("{version}; read offloads of a namespace's lo"))
}

fn openssl() -> Result<String, String> {
    let version = first_line(&run("openssl", &["version"])?);
    // The TLS test makes a key pair; prove the same operation works.
    run(
        "openssl",
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ],
    )?;
    Ok(format!("{version}; generated a P-256 key"))
}

fn rustup_run<'a>(toolchain: &'a str, args: &[&'a str]) -> Result<String, String> {
    let mut full = vec!["run", toolchain];
    full.extend_from_slice(args);
    run("rustup", &full)
}

fn cargo_tool(toolchain: &str, tool: &str) -> Result<String, String> {
    Ok(first_line(&rustup_run(
        toolchain,
        &["cargo", tool, "--version"],
    )?))
}

/// nightly must exist, carry LLVM 22 (bpf-linker's) and have `rust-src` for
/// `-Z build-std=core` on `bpfel-unknown-none`.
fn nightly_rust_src() -> Result<String, String> {
    let version = rustup_run("nightly", &["rustc", "-vV"])?;
    let llvm = version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .unwrap_or("unknown");
    if llvm.split('.').next() != Some(LLVM_MAJOR) {
        return Err(format!(
            "nightly rustc uses LLVM {llvm}; bpf-linker here is built for LLVM {LLVM_MAJOR}"
        ));
    }
    let sysroot = rustup_run("nightly", &["rustc", "--print", "sysroot"])?;
    let core = Path::new(sysroot.trim()).join("lib/rustlib/src/rust/library/core/src/lib.rs");
    if !core.exists() {
        return Err(format!("{} is absent", core.display()));
    }
    Ok(format!(
        "{}, LLVM {llvm}, rust-src present",
        first_line(&version)
    ))
}

/// Links a one-function LLVM 22 module into a BPF ELF object: what building lb-ebpf
/// asks of bpf-linker, without building it.
fn bpf_linker() -> Result<String, String> {
    let version = first_line(&run("bpf-linker", &["--version"])?);
    if !version.contains(BPF_LINKER_VERSION) {
        return Err(format!("found {version}, need {BPF_LINKER_VERSION}"));
    }
    let scratch = Scratch::new("bpf-linker")?;
    let ir = scratch.write(
        "probe.ll",
        "target datalayout = \"e-m:e-p:64:64-i64:64-i128:128-n32:64-S128\"\n\
         target triple = \"bpfel\"\n\
         define i32 @lb_probe(ptr %ctx) section \"xdp\" {\n  ret i32 2\n}\n",
    )?;
    let bitcode = scratch.0.join("probe.bc");
    run(
        &format!("{LLVM_PREFIX}/bin/llvm-as"),
        &[&ir.to_string_lossy(), "-o", &bitcode.to_string_lossy()],
    )?;
    let object = scratch.0.join("probe.o");
    run(
        "bpf-linker",
        &[
            "--export",
            "lb_probe",
            "-o",
            &object.to_string_lossy(),
            &bitcode.to_string_lossy(),
        ],
    )?;
    let elf = std::fs::read(&object).map_err(|e| format!("reading the linked object: {e}"))?;
    // ELF magic, and e_machine (offset 18, little endian) = EM_BPF (247).
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(18..20) != Some(&[247, 0]) {
        return Err("bpf-linker's output is not a BPF ELF object".into());
    }
    Ok(format!(
        "{version}; linked an LLVM 22 module into a BPF object"
    ))
}
