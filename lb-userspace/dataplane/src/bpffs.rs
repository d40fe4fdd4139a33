//! Making sure pins land on a bpf filesystem.

use std::{io, path::Path};

use rustix::mount::{MountFlags, mount};

/// `BPF_FS_MAGIC` from `linux/magic.h`.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// Where bpffs is conventionally mounted.
pub const DEFAULT_MOUNT: &str = "/sys/fs/bpf";

/// Whether `path` is on a bpf filesystem.
///
/// # Errors
/// `statfs` failed (e.g. the path does not exist).
pub fn is_bpffs(path: &Path) -> io::Result<bool> {
    let st = rustix::fs::statfs(path)?;
    Ok(st.f_type as i64 == BPF_FS_MAGIC)
}

/// Ensures `pin_dir` can hold pins: its nearest existing ancestor must be on bpffs. If
/// the directory is under the conventional `/sys/fs/bpf` and nothing is mounted there,
/// bpffs is mounted (as systemd and other BPF agents do).
///
/// # Errors
/// A clear error naming the directory when it is not on bpffs and cannot be made so.
pub fn ensure(pin_dir: &Path) -> io::Result<()> {
    let mut probe = pin_dir;
    while !probe.exists() {
        probe = probe.parent().unwrap_or(Path::new("/"));
    }
    if is_bpffs(probe)? {
        return Ok(());
    }
    let default = Path::new(DEFAULT_MOUNT);
    if pin_dir.starts_with(default) && default.is_dir() && !is_bpffs(default)? {
        mount(
            "bpffs",
            DEFAULT_MOUNT,
            "bpf",
            MountFlags::empty(),
            c"mode=0700",
        )?;
        tracing::info!(path = DEFAULT_MOUNT, "mounted a bpf filesystem");
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{} is not on a bpf filesystem (mount one: `mount -t bpf bpf DIR`), or set node.pin_path = \"\" to run without pinning",
            pin_dir.display()
        ),
    ))
}
