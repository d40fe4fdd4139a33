//! Builds the BPF object from `lb-ebpf` (release, bpfel, nightly + bpf-linker) and
//! leaves it in OUT_DIR, where `lb_dataplane::kernel` embeds it (feature `object`).

use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    // Without `object` nothing is embedded, and the BPF toolchain is not needed.
    if std::env::var_os("CARGO_FEATURE_OBJECT").is_none() {
        return Ok(());
    }
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .iter()
        .find(|p| p.name.as_str() == "lb-ebpf")
        .ok_or_else(|| anyhow!("lb-ebpf package not found in the workspace"))?;
    let root = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "lb-ebpf",
            root_dir: root.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context("building the BPF object; is the toolchain set up? run `cargo xtask setup`")
}
