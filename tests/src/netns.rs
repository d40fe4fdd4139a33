//! A network namespace that exists exactly as long as its guard.

use std::{
    fs::File,
    os::fd::AsRawFd,
    sync::atomic::{AtomicU32, Ordering},
};

use crate::run;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A uniquely named network namespace, deleted on drop (also during a panic unwind).
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `lbt-<role>-<pid>-<n>`; the name fits in 64 characters and is unique
    /// per process, so parallel tests and a stale namespace of a crashed run never clash.
    pub fn new(role: &str) -> Self {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("lbt-{role}-{}-{n}", std::process::id());
        run("ip", &["netns", "add", &name]);
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"]);
        // No duplicate address detection on interfaces made later: a tentative
        // link-local address cannot source neighbour discovery, so the first IPv6
        // connection of a test would race DAD and fail with "network unreachable".
        ns.sysctl("net.ipv6.conf.default.accept_dad", "0");
        ns.sysctl("net.ipv6.conf.all.accept_dad", "0");
        ns
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip <args>` inside the namespace, panicking on failure.
    pub fn ip(&self, args: &[&str]) {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        run("ip", &full);
    }

    /// Runs any command inside the namespace, panicking on failure.
    pub fn exec(&self, program: &str, args: &[&str]) {
        let mut full = vec!["netns", "exec", &self.name, program];
        full.extend_from_slice(args);
        run("ip", &full);
    }

    /// Sets a sysctl inside the namespace.
    pub fn sysctl(&self, key: &str, value: &str) {
        self.exec("sysctl", &["-qw", &format!("{key}={value}")]);
    }

    /// Runs `f` on a new thread that has entered this namespace, and returns its result.
    /// Sockets and aya calls made by `f` live in the namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let handle = self.spawn(f);
        handle
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// Like [`Netns::run`] but returns the thread handle.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/run/netns/{}", self.name);
        let file = File::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
        std::thread::spawn(move || {
            // SAFETY: setns on an open namespace fd affects only this thread.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            drop(file);
            f()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace destroys its interfaces (and the veth peers elsewhere).
        let status = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("warning: could not delete network namespace {}", self.name);
        }
    }
}
