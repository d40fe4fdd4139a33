//! `lbd` run as a real process inside a namespace.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::Netns;

/// Path of the `lbd` binary: `$LBD_BIN`, else the workspace's debug build.
pub fn lbd_binary() -> PathBuf {
    binary("LBD_BIN", "lbd")
}

/// Path of the `lbctl` binary: `$LBCTL_BIN`, else the workspace's debug build.
pub fn lbctl_binary() -> PathBuf {
    binary("LBCTL_BIN", "lbctl")
}

fn binary(var: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(var).map_or_else(
        || crate::target_dir().join("debug").join(name),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} not found: build it first (`cargo build -p lb-userspace`) or run `cargo xtask test`",
        path.display()
    );
    path
}

/// A running `lbd`; torn down (SIGINT) and reaped on drop.
///
/// Its pins live on a private bpffs mounted in the test's own temporary directory:
/// `ip netns exec` gives lbd a fresh /sys, so /sys/fs/bpf would not outlive one lbd
/// process, and a shared path would collide between tests running in parallel. The
/// config's `[node]` table gets a `pin_path` pointing there.
#[derive(Debug)]
pub struct LbdProcess {
    child: Option<Child>,
    /// The soft and hard open-file limits lbd starts with (`None`: the test's own;
    /// a hard `None` keeps the test's).
    nofile: Option<(u64, Option<u64>)>,
    log: PathBuf,
    ns_name: String,
    config: PathBuf,
    bpffs: BpfFs,
    _dir: TempDir,
}

impl LbdProcess {
    /// Writes `config` to a temporary file and starts `lbd` on it inside `ns`, then
    /// waits (at most 20 s) until it reports the program attached and its admin socket
    /// served.
    pub fn start(ns: &Netns, config: &str) -> Self {
        Self::start_with_state(ns, config, &[])
    }

    /// Like [`LbdProcess::start`], with files written into lbd's state directory first
    /// (e.g. `fade-in.json` with ramp start times).
    pub fn start_with_state(ns: &Netns, config: &str, state: &[(&str, &str)]) -> Self {
        Self::start_full(ns, config, state, None)
    }

    /// Like [`LbdProcess::start`], with lbd's soft open-file limit set to `soft` — as
    /// service managers start daemons with 1024 — and its hard limit to `hard` (`None`
    /// keeps the test's).
    pub fn start_with_nofile(ns: &Netns, config: &str, soft: u64, hard: Option<u64>) -> Self {
        Self::start_full(ns, config, &[], Some((soft, hard)))
    }

    fn start_full(
        ns: &Netns,
        config: &str,
        state: &[(&str, &str)],
        nofile: Option<(u64, Option<u64>)>,
    ) -> Self {
        let dir = TempDir::new("lbd");
        let state_dir = dir.path().join("state");
        std::fs::create_dir_all(&state_dir).expect("state dir");
        for (name, contents) in state {
            std::fs::write(state_dir.join(name), contents).expect("state file");
        }
        let bpffs = BpfFs::mount(&dir.path().join("bpf"));
        let config_path = dir.path().join("lbd.toml");
        let mut lbd = Self {
            child: None,
            nofile,
            log: dir.path().join("lbd.log"),
            ns_name: ns.name().to_owned(),
            config: config_path,
            bpffs,
            _dir: dir,
        };
        lbd.write_config(config);
        lbd.spawn();
        lbd
    }

    /// The running lbd's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The pin directory lbd uses.
    pub fn pin_dir(&self) -> PathBuf {
        self.bpffs.path().join("lb")
    }

    /// lbd's config file.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// lbd's admin socket.
    pub fn admin_socket(&self) -> PathBuf {
        self._dir.path().join("admin.sock")
    }

    /// Runs `lbctl` against this lbd (its socket and pin directory) with `args`;
    /// returns the exit code, stdout and stderr.
    pub fn lbctl(&self, args: &[&str]) -> (Option<i32>, String, String) {
        self.lbctl_via(&[], &lbctl_binary(), args)
    }

    /// Like [`LbdProcess::lbctl`], running the `lbctl` at `bin` through `wrapper` (a
    /// command and its arguments, e.g. `setpriv` dropping privileges).
    pub fn lbctl_via(
        &self,
        wrapper: &[&str],
        bin: &Path,
        args: &[&str],
    ) -> (Option<i32>, String, String) {
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let out = cmd
            .arg("--socket")
            .arg(self.admin_socket())
            .arg("--pin-path")
            .arg(self.pin_dir())
            .args(args)
            .output()
            .expect("run lbctl");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs `lbctl -o json <args>`, requires success and parses the output.
    pub fn lbctl_json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = vec!["-o", "json"];
        full.extend_from_slice(args);
        let (code, out, err) = self.lbctl(&full);
        assert_eq!(code, Some(0), "lbctl {args:?} failed: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("lbctl {args:?}: {e}: {out}"))
    }

    /// The source of `kind` (`config`, `endpointslices`, `etcd`, `routes`) in `lbctl
    /// status`, if lbd reports one.
    pub fn source(&self, kind: &str) -> Option<serde_json::Value> {
        let status = self.lbctl_json(&["status"]);
        status["sources"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["kind"] == kind).cloned())
    }

    /// Waits (15 s at most, polling the admin API) until the source of `kind`
    /// satisfies `ok`, and returns it; panics with `what`, the source and the log
    /// otherwise (also when lbd exits meanwhile).
    pub fn wait_source(
        &mut self,
        kind: &str,
        what: &str,
        ok: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let start = Instant::now();
        loop {
            self.assert_running(what);
            let src = self.source(kind).unwrap_or_default();
            if ok(&src) {
                return src;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{what}: the {kind} source is {src}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Panics (with `what` and the log) if lbd has exited.
    pub fn assert_running(&mut self, what: &str) {
        if let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!("{what}: lbd exited with {status}:\n{}", self.log());
        }
    }

    /// Stops lbd with SIGTERM, which leaves the pinned data plane forwarding without
    /// an agent; returns the exit code.
    pub fn stop_leaving_running(&mut self) -> Option<i32> {
        self.signal_and_wait(libc::SIGTERM)
    }

    /// lbd's state directory (fade-in start times).
    pub fn state_dir(&self) -> PathBuf {
        self._dir.path().join("state")
    }

    fn write_config(&self, config: &str) {
        let pinned = config.replacen(
            "[node]\n",
            &format!(
                "[node]\npin_path = \"{}\"\nstate_dir = \"{}\"\nadmin_socket = \"{}\"\n",
                self.pin_dir().display(),
                self.state_dir().display(),
                self.admin_socket().display()
            ),
            1,
        );
        assert_ne!(pinned, config, "the config needs a [node] table");
        std::fs::write(&self.config, pinned).expect("write config");
    }

    fn spawn(&mut self) {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log");
        // lbd logs its admin socket after attaching: waiting for that line means lbctl
        // can talk to it as soon as this returns.
        let before = self.log().matches("admin API on").count();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns_name])
            .arg(lbd_binary())
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup log"))
            .stderr(log_file);
        if let Some((soft, hard)) = self.nofile {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: between fork and exec the child only calls getrlimit and
            // setrlimit, which are async-signal-safe; `ip netns exec` and lbd inherit
            // the limit.
            unsafe {
                cmd.pre_exec(move || {
                    let mut lim = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    lim.rlim_max = hard.map_or(lim.rlim_max, |h| h.min(lim.rlim_max));
                    lim.rlim_cur = soft.min(lim.rlim_max);
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().expect("spawn lbd");
        self.child = Some(child);
        self.wait_for_log("admin API on", before + 1, Duration::from_secs(20));
    }

    /// Stops lbd with SIGTERM (it leaves the pinned data plane forwarding), waits for
    /// it to exit, and starts a new lbd on the same config; returns the old one's exit
    /// code.
    pub fn restart(&mut self) -> Option<i32> {
        let code = self.signal_and_wait(libc::SIGTERM);
        self.spawn();
        code
    }

    /// A zero-downtime restart: starts a second lbd on the same config while this one
    /// runs; the new one takes over the l7 sockets and the old one drains and exits by
    /// itself. Waits until the new lbd serves its admin socket, then (at most 20 s)
    /// for the old one to exit; returns its exit code, or `None` if it had not exited
    /// (it is then sent SIGTERM, as a service manager would stop it).
    pub fn take_over(&mut self) -> Option<i32> {
        /// Stops (SIGTERM) and reaps the old lbd however this ends, a panic included.
        struct Old(Child);
        impl Drop for Old {
            fn drop(&mut self) {
                if let Ok(None) = self.0.try_wait() {
                    // SAFETY: kill on a pid we own and have not reaped.
                    unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
                    let _ = self.0.wait();
                }
            }
        }
        let mut old = Old(self.child.take().expect("lbd runs"));
        self.spawn();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(status)) = old.0.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Replaces the config file and sends SIGHUP; waits until lbd logs the outcome
    /// (`reloaded` or `reload rejected`) and returns that log line.
    pub fn reload(&mut self, config: &str) -> String {
        if config.contains("[node]\n") {
            self.write_config(config);
        } else {
            std::fs::write(&self.config, config).expect("write config");
        }
        let before = self.log().lines().filter(|l| l.contains("reload")).count();
        let pid = self.child.as_ref().expect("running").id() as i32;
        // SAFETY: kill on a pid we own and have not reaped.
        unsafe { libc::kill(pid, libc::SIGHUP) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            let log = self.log();
            let lines: Vec<&str> = log.lines().filter(|l| l.contains("reload")).collect();
            if lines.len() > before {
                return lines[before].to_owned();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("lbd did not report the reload:\n{}", self.log());
    }

    /// Rewrites the config file without signalling lbd (it watches the file).
    pub fn edit_config(&self, config: &str) {
        self.write_config(config);
    }

    /// Everything `lbd` has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_for_log(&mut self, needle: &str, count: usize, limit: Duration) {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.log().matches(needle).count() >= count {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "lbd exited with {status} before {needle:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "lbd did not log {needle:?} within {limit:?}:\n{}",
            self.log()
        );
    }

    /// Sends SIGINT (tear everything down) and waits for a clean exit; returns the exit
    /// code and the log.
    pub fn stop(mut self) -> (Option<i32>, String) {
        let status = self.signal_and_wait(libc::SIGINT);
        (status, self.log())
    }

    fn signal_and_wait(&mut self, signal: libc::c_int) -> Option<i32> {
        let mut child = self.child.take()?;
        // `ip netns exec` execs lbd, so the child pid is lbd's.
        // SAFETY: kill on a pid we own and have not reaped.
        unsafe { libc::kill(child.id() as i32, signal) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

impl Drop for LbdProcess {
    fn drop(&mut self) {
        self.signal_and_wait(libc::SIGINT);
    }
}

/// A private bpf filesystem mounted on a directory; unmounted (and every pin in it
/// released) on drop.
#[derive(Debug)]
pub struct BpfFs(PathBuf);

impl BpfFs {
    /// Mounts bpffs at `path` (created if missing).
    pub fn mount(path: &Path) -> Self {
        std::fs::create_dir_all(path).expect("create bpffs mount point");
        crate::run(
            "mount",
            &["-t", "bpf", "bpf", path.to_str().expect("utf-8 path")],
        );
        Self(path.to_owned())
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A temporary directory removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates a fresh directory under the system temp dir.
    pub fn new(prefix: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("lbt-{prefix}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes a file in the directory and returns its path.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        let mut f = std::fs::File::create(&path).expect("create file");
        f.write_all(contents.as_bytes()).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `lbd` with `args` to completion (e.g. `--check-config`), returning its exit code
/// and combined output.
pub fn run_lbd(args: &[&str]) -> (Option<i32>, String) {
    collect(Command::new(lbd_binary()).args(args))
}

/// Like [`run_lbd`], inside a namespace.
pub fn run_lbd_in(ns: &Netns, args: &[&str]) -> (Option<i32>, String) {
    collect(
        Command::new("ip")
            .args(["netns", "exec", ns.name()])
            .arg(lbd_binary())
            .args(args),
    )
}

fn collect(cmd: &mut Command) -> (Option<i32>, String) {
    let out = cmd.output().expect("run lbd");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// A service in a generated config: name, VIP, port, protocol ("tcp"/"udp").
pub type ServiceLine<'a> = (&'a str, std::net::IpAddr, u16, &'a str);

/// An lbd config for the standard topology (`eth0`), `xdp_mode`, and `services` that
/// all use `backends`.
pub fn config(
    xdp_mode: &str,
    services: &[ServiceLine<'_>],
    backends: &[std::net::IpAddr],
) -> String {
    let list: Vec<String> = backends
        .iter()
        .map(|b| format!("{{ address = \"{b}\" }}"))
        .collect();
    let list = list.join(", ");
    let mut text = format!("[node]\ninterface = \"eth0\"\nxdp_mode = \"{xdp_mode}\"\n");
    for (name, vip, port, proto) in services {
        text.push_str(&format!(
            "\n[[service]]\nname = \"{name}\"\nvip = \"{vip}\"\nport = {port}\nprotocol = \"{proto}\"\nbackends = [{list}]\n"
        ));
    }
    text
}

/// Like [`config`] with every service in `nat` mode from `nat_addresses`.
pub fn nat_config(
    xdp_mode: &str,
    services: &[ServiceLine<'_>],
    backends: &[std::net::IpAddr],
    nat_addresses: &[std::net::IpAddr],
) -> String {
    let list: Vec<String> = nat_addresses.iter().map(|a| format!("\"{a}\"")).collect();
    config(xdp_mode, services, backends)
        .replacen(
            "[node]\n",
            &format!("[node]\nnat_addresses = [{}]\n", list.join(", ")),
            1,
        )
        .replace("protocol = ", "mode = \"nat\"\nprotocol = ")
}

/// A value from lbd's `data plane counters:` shutdown line (absent means zero).
///
/// # Panics
/// If the log has no counters line.
pub fn counter_in_log(log: &str, name: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.contains("data plane counters:"))
        .unwrap_or_else(|| panic!("no counters line in lbd's log:\n{log}"));
    line.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map_or(0, |(_, v)| v.parse().expect("counter value"))
}

/// `GET /metrics` from lbd's default metrics address inside `ns` (its loopback); the
/// body, checked to be served as OpenMetrics text and to end in `# EOF`.
pub fn scrape_metrics(ns: &Netns) -> String {
    use std::io::{Read as _, Write as _};
    ns.run(|| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", 9470)).expect("connect to metrics");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("request");
        let mut raw = String::new();
        s.read_to_string(&mut raw).expect("response");
        assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
        let (head, body) = raw.split_once("\r\n\r\n").expect("body");
        assert!(
            head.lines().any(|l| l.eq_ignore_ascii_case(
                "content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"
            )),
            "not served as OpenMetrics:\n{head}"
        );
        assert!(
            body.ends_with("# EOF\n"),
            "OpenMetrics text ends in # EOF:\n{body}"
        );
        body.to_owned()
    })
}
