//! Running commands, loudly: every command is printed before it runs.

use std::process::Command;

use anyhow::{Context as _, Result, bail};

/// Runs a command to completion, failing on a non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {}", describe(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("spawning {}", describe(cmd)))?;
    if !status.success() {
        bail!("`{}` failed: {status}", describe(cmd));
    }
    Ok(())
}

/// Whether a command runs and exits 0, without printing anything.
pub fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A command's stdout, or `None` if it cannot run or fails.
pub fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// `cargo <args>` with the cargo that runs xtask.
pub fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(Command::new(cargo).args(args))
}

/// `cargo <args>` on the nightly toolchain (the BPF target needs `-Z build-std`).
pub fn cargo_nightly(args: &[&str]) -> Result<()> {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo"]).args(args);
    // Same flags aya-build passes, so `build-ebpf` produces the object lbd embeds.
    cmd.env(
        "CARGO_ENCODED_RUSTFLAGS",
        [
            "--cfg=bpf_target_arch=\"x86_64\"",
            "-Cdebuginfo=2",
            "-Clink-arg=--btf",
        ]
        .join("\x1f"),
    );
    for var in [
        "RUSTC",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTUP_TOOLCHAIN",
        "CARGO",
    ] {
        cmd.env_remove(var);
    }
    run(&mut cmd)
}

/// Whether we run as root.
pub fn is_root() -> bool {
    output("id", &["-u"]).is_some_and(|uid| uid.trim() == "0")
}

/// Whether the `<pid>` in a test-bed name `lbt-<role>-<pid>-<n>` is a dead process.
fn stale(name: &str) -> bool {
    let mut parts = name.split('-');
    if parts.next() != Some("lbt") {
        return false;
    }
    parts
        .nth(1)
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// Deletes what a test run killed with SIGKILL could not clean up (CI machines are
/// reused): `lbt-<role>-<pid>-<n>` namespaces and temporary directories (with the
/// bpffs mounted in them) whose creating process is gone.
pub fn remove_stale_namespaces() -> Result<()> {
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if stale(&name) {
                let bpf = entry.path().join("bpf");
                if bpf.exists() {
                    let _ = Command::new("umount").arg("-l").arg(&bpf).status();
                }
                eprintln!("removing stale {}", entry.path().display());
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let Some(list) = output("ip", &["netns", "list"]) else {
        return Ok(());
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        if stale(name) {
            run(Command::new("ip").args(["netns", "del", name]))?;
        }
    }
    Ok(())
}

/// Test counts summed over every `test result:` line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TestTotals {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests marked ignored.
    pub ignored: u64,
}

impl TestTotals {
    /// Adds the counts of one libtest summary line, e.g.
    /// `test result: ok. 7 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; ...`.
    pub fn add_line(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(kind), Some(n)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match kind {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// `cargo test <args>`: streams the output through and sums the summary lines. A
/// failing run still returns its totals when cargo got as far as running tests.
pub fn cargo_test(args: &[&str]) -> Result<TestTotals> {
    use std::io::BufRead as _;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args).stdout(std::process::Stdio::piped());
    eprintln!("+ {}", describe(&cmd));
    let mut child = cmd.spawn().context("spawning cargo test")?;
    let stdout = child.stdout.take().context("cargo test stdout")?;
    let mut totals = TestTotals::default();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test output")?;
        println!("{line}");
        totals.add_line(&line);
    }
    let status = child.wait().context("waiting for cargo test")?;
    if !status.success() && totals.failed == 0 {
        bail!("`cargo test` failed before running every test: {status}");
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::TestTotals;

    #[test]
    fn sums_libtest_summaries() {
        let mut t = TestTotals::default();
        t.add_line("test result: ok. 7 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.72s");
        t.add_line("test result: FAILED. 2 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s");
        t.add_line("running 3 tests");
        assert_eq!(
            t,
            TestTotals {
                passed: 9,
                failed: 3,
                ignored: 1
            }
        );
    }
}
