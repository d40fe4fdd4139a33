//! Building this crate depends on the `bpf-linker` binary, which cargo cannot express.
//! Rebuild whenever the linker on PATH changes, so a reinstalled linker is picked up.

fn main() {
    match which::which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(err) => {
            println!("cargo:warning=bpf-linker not found on PATH ({err}); run `cargo xtask setup`")
        }
    }
}
