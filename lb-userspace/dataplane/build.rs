//! Builds the BPF object from `lb-ebpf` (release, bpfel, nightly + bpf-linker) and
//! leaves it in OUT_DIR, where `lb_dataplane::kernel` embeds it (feature `object`);
//! with `object-log` also the log build (lb-ebpf's feature `log`) beside it.

use std::path::Path;

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
    let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?;
    let out_dir = Path::new(&out_dir);
    // aya-build names the object after the binary (OUT_DIR/lb-ebpf): the log build goes
    // first and is renamed, so the default object is the one left under that name.
    if std::env::var_os("CARGO_FEATURE_OBJECT_LOG").is_some() {
        build(root.as_str(), &["log"])?;
        let (built, log) = (out_dir.join("lb-ebpf"), out_dir.join("lb-ebpf-log"));
        std::fs::rename(&built, &log)
            .with_context(|| format!("renaming {} to {}", built.display(), log.display()))?;
    }
    build(root.as_str(), &[])
}

fn build(root: &str, features: &[&str]) -> anyhow::Result<()> {
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "lb-ebpf",
            root_dir: root,
            features,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .with_context(|| {
        format!(
            "building the BPF object (features {features:?}); is the toolchain set up? \
             run `cargo xtask setup`"
        )
    })
}
