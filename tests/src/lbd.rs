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
/// Everything this waits for is read from lbd's admin API (`/v1/status`,
/// `/v1/backends`), never from its log: log wording is for people and may change.
/// The log is kept (see [`LbdProcess::log`]) to show in failure messages.
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
    /// Extra arguments after `--config FILE` (e.g. `--log-format json`).
    args: Vec<String>,
    log: PathBuf,
    ns_name: String,
    config: PathBuf,
    bpffs: BpfFs,
    _dir: TempDir,
}

impl LbdProcess {
    /// Writes `config` to a temporary file and starts `lbd` on it inside `ns`, then
    /// waits (at most 20 s) until its admin socket answers `/v1/status` (lbd serves it
    /// once the program is attached and every service programmed).
    pub fn start(ns: &Netns, config: &str) -> Self {
        Self::start_with_state(ns, config, &[])
    }

    /// Like [`LbdProcess::start`], with files written into lbd's state directory first
    /// (e.g. `fade-in.json` with ramp start times).
    pub fn start_with_state(ns: &Netns, config: &str, state: &[(&str, &str)]) -> Self {
        Self::start_full(ns, config, state, None, &[])
    }

    /// Like [`LbdProcess::start`], with lbd's soft open-file limit set to `soft` — as
    /// service managers start daemons with 1024 — and its hard limit to `hard` (`None`
    /// keeps the test's).
    pub fn start_with_nofile(ns: &Netns, config: &str, soft: u64, hard: Option<u64>) -> Self {
        Self::start_full(ns, config, &[], Some((soft, hard)), &[])
    }

    /// Like [`LbdProcess::start`], with `args` added to lbd's command line (e.g.
    /// `["--log-format", "json"]`); restarts keep them.
    pub fn start_with_args(ns: &Netns, config: &str, args: &[&str]) -> Self {
        Self::start_full(ns, config, &[], None, args)
    }

    /// Like [`LbdProcess::start_with_nofile`] with `args` added, as
    /// [`LbdProcess::start_with_args`] does.
    pub fn start_with_nofile_and_args(
        ns: &Netns,
        config: &str,
        soft: u64,
        hard: Option<u64>,
        args: &[&str],
    ) -> Self {
        Self::start_full(ns, config, &[], Some((soft, hard)), args)
    }

    fn start_full(
        ns: &Netns,
        config: &str,
        state: &[(&str, &str)],
        nofile: Option<(u64, Option<u64>)>,
        args: &[&str],
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
            args: args.iter().map(|a| (*a).to_owned()).collect(),
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

    /// `GET path` on lbd's admin socket: the `data` of its answer.
    ///
    /// # Errors
    /// Nothing answers (lbd starting or gone), or lbd answered with an error.
    pub fn admin(&self, path: &str) -> Result<serde_json::Value, lb_admin::client::ClientError> {
        lb_admin::client::get(&self.admin_socket(), path)
    }

    /// `GET /v1/status`; panics with the log if lbd does not answer.
    pub fn status(&self) -> serde_json::Value {
        self.admin("/v1/status")
            .unwrap_or_else(|e| panic!("/v1/status: {e}\n{}", self.log()))
    }

    /// Polls `path` on the admin API (every 50 ms, `limit` at most) until `ok` holds for
    /// its answer, and returns that answer. Panics with `what`, the last answer and the
    /// log when time runs out or lbd exits.
    pub fn wait_admin(
        &mut self,
        what: &str,
        path: &str,
        limit: Duration,
        mut ok: impl FnMut(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let start = Instant::now();
        loop {
            self.assert_running(what);
            let last = match self.admin(path) {
                Ok(v) if ok(&v) => return v,
                Ok(v) => v.to_string(),
                Err(e) => e.to_string(),
            };
            assert!(
                start.elapsed() < limit,
                "{what}: not within {limit:?}; {path} answered {last}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The source of `kind` (`config`, `endpointslices`, `etcd`, `routes`) in `lbctl
    /// status`, if lbd reports one.
    pub fn source(&self, kind: &str) -> Option<serde_json::Value> {
        source_in(&self.status(), kind)
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
        let status = self.wait_admin(what, "/v1/status", Duration::from_secs(15), |s| {
            ok(&source_in(s, kind).unwrap_or_default())
        });
        source_in(&status, kind).unwrap_or_default()
    }

    /// Waits (`limit` at most) until backend `address` of `service` in `/v1/backends`
    /// satisfies `ok` (it is `Null` while the service lists no such backend), and
    /// returns it.
    pub fn wait_backend(
        &mut self,
        service: &str,
        address: std::net::IpAddr,
        limit: Duration,
        ok: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let find = |all: &serde_json::Value| {
            all.as_array()
                .and_then(|b| {
                    b.iter()
                        .find(|b| b["address"] == address.to_string())
                        .cloned()
                })
                .unwrap_or_default()
        };
        let path = format!("/v1/backends/{service}");
        let what = format!("backend {address} of {service}");
        let all = self.wait_admin(&what, &path, limit, |all| ok(&find(all)));
        find(&all)
    }

    /// A data-plane counter (`lbctl stats`: verdicts and reasons summed over CPUs, by
    /// the names `lbctl` and the metrics use; absent means zero).
    pub fn counter(&self, name: &str) -> u64 {
        let stats = self.lbctl_json(&["stats"]);
        stats["counters"]
            .as_array()
            .expect("counters")
            .iter()
            .find(|pair| pair[0] == name)
            .map_or(0, |pair| pair[1].as_u64().expect("counter value"))
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
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns_name])
            .arg(lbd_binary())
            .arg("--config")
            .arg(&self.config)
            .args(&self.args)
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
        // `ip netns exec` execs lbd, so the child pid is lbd's: an answer with it comes
        // from this lbd, not from one it is taking over from.
        let pid = u64::from(child.id());
        self.child = Some(child);
        self.wait_admin(
            "lbd serves its admin API",
            "/v1/status",
            Duration::from_secs(20),
            |s| s["pid"] == pid,
        );
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

    /// Replaces the config file and sends SIGHUP; waits (20 s at most) until the admin
    /// API shows the outcome and returns it: a new `config_generation` when the config
    /// applied, or a config source state that changed to `rejected, …` when it was
    /// refused (or failed part-way).
    ///
    /// A rejection that reads exactly like the one already shown cannot be told from
    /// no answer yet: consecutive rejected reloads must fail differently (or a good one
    /// must come between).
    pub fn reload(&mut self, config: &str) -> ReloadOutcome {
        let before = self.status();
        let generation = before["config_generation"].as_u64().expect("generation");
        let state = config_state(&before);
        if config.contains("[node]\n") {
            self.write_config(config);
        } else {
            std::fs::write(&self.config, config).expect("write config");
        }
        let pid = self.child.as_ref().expect("running").id() as i32;
        // SAFETY: kill on a pid we own and have not reaped.
        unsafe { libc::kill(pid, libc::SIGHUP) };
        let after = self.wait_admin(
            "lbd reports the reload",
            "/v1/status",
            Duration::from_secs(20),
            |s| {
                s["config_generation"].as_u64() > Some(generation)
                    || (config_state(s) != state && config_state(s).starts_with("rejected"))
            },
        );
        match after["config_generation"].as_u64() {
            Some(g) if g > generation => ReloadOutcome::Applied { generation: g },
            _ => ReloadOutcome::Rejected {
                state: config_state(&after),
            },
        }
    }

    /// Rewrites the config file without signalling lbd (it watches the file).
    pub fn edit_config(&self, config: &str) {
        self.write_config(config);
    }

    /// Everything `lbd` has logged so far (stdout and stderr), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// lbd's log as events, for an lbd started with `--log-format json`: one JSON
    /// object per line. Panics, naming the line, if a line is not one.
    pub fn log_events(&self) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line:?}"));
                assert!(v.is_object(), "not a JSON object: {line:?}");
                v
            })
            .collect()
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

/// What a SIGHUP reload came to, as the admin API tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The config loaded and applied; `config_generation` is now `generation`.
    Applied {
        /// The new generation.
        generation: u64,
    },
    /// Refused or failed part-way; the old config runs.
    Rejected {
        /// The config source's state in `/v1/status`: `rejected, running the last
        /// good config: ` and the error (file, line, field, problem).
        state: String,
    },
}

impl ReloadOutcome {
    /// Whether the config applied.
    pub fn applied(&self) -> bool {
        matches!(self, Self::Applied { .. })
    }

    /// The config source's state if the reload was refused.
    pub fn rejected(&self) -> Option<&str> {
        match self {
            Self::Applied { .. } => None,
            Self::Rejected { state } => Some(state),
        }
    }
}

impl std::fmt::Display for ReloadOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Applied { generation } => write!(f, "reloaded (config generation {generation})"),
            Self::Rejected { state } => write!(f, "reload {state}"),
        }
    }
}

/// The source of `kind` in a `/v1/status` answer.
fn source_in(status: &serde_json::Value, kind: &str) -> Option<serde_json::Value> {
    status["sources"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["kind"] == kind).cloned())
}

/// The config source's state in a `/v1/status` answer (`ok` or `rejected, …`).
fn config_state(status: &serde_json::Value) -> String {
    source_in(status, "config")
        .and_then(|s| s["state"].as_str().map(str::to_owned))
        .unwrap_or_default()
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
