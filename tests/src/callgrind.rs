//! Instructions per proxied request, counted by callgrind: a figure that stays the
//! same from run to run of one build (it counts, it does not time), so two builds
//! compare on a shared machine where requests/s move by more than a change does.
//!
//! The proxy binary (`lb-l7bench --serve-stdin`) runs under `valgrind
//! --tool=callgrind` and serves every route of the benchmark in its own namespace;
//! h2load sends a warm-up, then the counters are zeroed, `requests` requests go
//! through one route, and the counters are dumped. Only the proxy's process is
//! counted (the backend, h2load and the other proxies are other processes), its
//! connection setup with h2load's 16 connections included. Closing the proxy's stdin
//! ends it, which removes its namespace and stops its backend.

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::lbd::TempDir;

/// One measured route of `lb-l7bench --serve-stdin`.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    pub name: &'static str,
    pub port: u16,
    /// h2c (prior knowledge, 4 streams per connection) instead of HTTP/1.1.
    pub h2: bool,
}

/// The address every route listens on.
const FRONT: &str = "198.18.0.1";

/// Runs `bin --serve-stdin` under callgrind and counts its instructions per request
/// for each of `routes`, `requests` requests each.
///
/// # Errors
/// valgrind or h2load missing or failing, a request not answered, or a dump that
/// cannot be read.
pub fn per_request(bin: &Path, requests: u64, routes: &[Route]) -> Result<Vec<f64>, String> {
    let dir = TempDir::new("callgrind");
    let out = dir.path().join("cg.out");
    let mut child = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(bin)
        .arg("--serve-stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting valgrind: {e}"))?;
    let serving = child.stdout.take().map(BufReader::new).and_then(|r| {
        r.lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with("namespace "))
    });
    let counted = match serving.as_deref().and_then(serving_at) {
        Some((namespace, pid)) => routes
            .iter()
            .zip(1..)
            .map(|(r, part)| route(&namespace, pid, &out, part, requests, r))
            .collect(),
        None => Err(format!(
            "{} under callgrind did not start serving",
            bin.display()
        )),
    };
    // EOF on its stdin ends the proxy, which cleans up after itself.
    drop(child.stdin.take());
    let deadline = Instant::now() + Duration::from_secs(60);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
        let _ = child.wait();
    }
    counted
}

/// The namespace and the proxy's pid from `lb-l7bench --serve-stdin`'s line.
fn serving_at(line: &str) -> Option<(String, u32)> {
    let namespace = line
        .strip_prefix("namespace ")?
        .split(':')
        .next()?
        .to_owned();
    let pid = line
        .split("(pid ")
        .nth(1)?
        .split(')')
        .next()?
        .parse()
        .ok()?;
    Some((namespace, pid))
}

/// One route's count: its dump is the `part`-th (zeroing writes none).
fn route(
    namespace: &str,
    pid: u32,
    out: &Path,
    part: u32,
    requests: u64,
    r: &Route,
) -> Result<f64, String> {
    h2load(namespace, r, 2000)?;
    callgrind_control("-z", pid)?;
    h2load(namespace, r, requests)?;
    callgrind_control("-d", pid)?;
    let dump = std::path::PathBuf::from(format!("{}.{part}", out.display()));
    Ok(dump_total(&dump)? as f64 / requests as f64)
}

fn h2load(namespace: &str, r: &Route, requests: u64) -> Result<(), String> {
    let url = format!("http://{FRONT}:{}/", r.port);
    let n = requests.to_string();
    let mut args = vec![
        "netns", "exec", namespace, "h2load", "-n", &n, "-c", "16", "-t", "1",
    ];
    args.extend(if r.h2 { ["-m", "4"] } else { ["--h1", "-m1"] });
    args.push(&url);
    let out = Command::new("ip")
        .args(&args)
        .output()
        .map_err(|e| format!("running h2load: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let succeeded = text
        .lines()
        .find_map(|l| l.strip_prefix("requests: "))
        .and_then(|l| l.split(", ").find_map(|p| p.strip_suffix(" succeeded")))
        .and_then(|n| n.parse::<u64>().ok());
    if succeeded != Some(requests) {
        return Err(format!(
            "h2load on {}: {requests} sent, {succeeded:?} answered",
            r.name
        ));
    }
    Ok(())
}

fn callgrind_control(what: &str, pid: u32) -> Result<(), String> {
    let status = Command::new("callgrind_control")
        .args([what, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("running callgrind_control: {e}"))?;
    if !status.success() {
        return Err(format!("callgrind_control {what} {pid}: {status}"));
    }
    Ok(())
}

/// The event total of the dump at `path`, from its last line (`totals:`), so a dump
/// still being written is not read. callgrind_control returns once it has asked;
/// the dump lands shortly after.
fn dump_total(path: &Path) -> Result<u64, String> {
    for _ in 0..300 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Some(total) = text.lines().find_map(|l| {
                l.strip_prefix("totals: ")
                    .and_then(|n| n.trim().parse().ok())
            })
        {
            return Ok(total);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("no callgrind dump at {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::serving_at;

    #[test]
    fn the_serving_line_gives_namespace_and_pid() {
        let line = "namespace lbt-l7b-21028-0: lbd's proxy (pid 21028) on 198.18.0.1:80 and :85-89, \
                    nginx (master pid 21038) on :81";
        assert_eq!(
            serving_at(line),
            Some(("lbt-l7b-21028-0".to_owned(), 21028))
        );
        assert_eq!(serving_at("namespace x: no pid here"), None);
    }
}
