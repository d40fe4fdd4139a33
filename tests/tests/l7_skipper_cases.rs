//! Every request-level case ported from skipper's own tests
//! (`lb-userspace/l7/testdata/skipper/*.toml`, format in the README there) through the
//! real proxy: one proxy for the whole run, one service per case on the VIP with the
//! case's routes, one echo backend at 198.18.0.11:80, and a raw HTTP/1.1 request per
//! case from the case's peer address, its target written out byte for byte.
//!
//! The contract with the case files: a case passes when the status, the listed
//! response headers and body, and (iff `[case.expect.upstream]` is given) what the
//! backend saw all match. All failures are collected and reported in one panic. A case
//! marked `pending` is run and reported but not counted as a failure; it fails the run
//! when it passes, so the mark goes away once the proxy is fixed.

use std::{
    collections::HashMap,
    fmt::Write as _,
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use lb_l7::proxy::{ApplyError, L7Config, ServiceInput};
use lb_testbed::{
    http::EchoBackend,
    l7::{VIP, backend_addr, client_addr, namespace, proxy_with, runtime, service},
};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What `$BACKEND` in a case's routes stands for.
const BACKEND_URL: &str = "http://198.18.0.11:80";
/// The echo backend's name: the first line of every answer it gives.
const ECHO_NAME: &str = "skipper-cases-echo";
/// The peer the proxy trusts as a proxy (`trusted = true` cases send from it).
const TRUSTED_PEER: &str = "198.18.0.28";
/// Services live on ports from here; a batch of cases takes consecutive ports.
const FIRST_PORT: u16 = 20_000;
/// Cases per applied batch of services.
const BATCH: usize = 128;

/// One case file: a list of `[[case]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    case: Vec<Case>,
}

/// One request against one route text, with what skipper answers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    /// Unique within its file.
    name: String,
    /// The skipper test it follows.
    from: String,
    /// eskip text; `$BACKEND` is the echo backend's URL.
    routes: String,
    /// Request method (default GET).
    #[serde(default = "default_method")]
    method: String,
    /// Request target as sent, origin form (default `/`).
    #[serde(default = "default_target")]
    target: String,
    /// Host header (default `www.example.org`).
    #[serde(default = "default_host")]
    host: String,
    /// Request headers in order.
    #[serde(default)]
    headers: Vec<(String, String)>,
    /// Client address, one of 198.18.0.20..=198.18.0.27 (default the first).
    peer: Option<IpAddr>,
    /// Whether the client is a trusted proxy (sends from 198.18.0.28; no `peer`).
    #[serde(default)]
    trusted: bool,
    /// Request body, sent with Content-Length.
    #[serde(default)]
    body: String,
    /// Why this case fails today: skipper's behaviour against ours.
    pending: Option<String>,
    /// What skipper answers.
    expect: Expect,
}

fn default_method() -> String {
    "GET".into()
}
fn default_target() -> String {
    "/".into()
}
fn default_host() -> String {
    "www.example.org".into()
}

/// The answer the client must get.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: u16,
    body: Option<String>,
    location: Option<String>,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    absent: Vec<String>,
    /// Present iff the backend must be asked.
    upstream: Option<Upstream>,
}

/// What the backend must have seen.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Upstream {
    target: Option<String>,
    host: Option<String>,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    absent: Vec<String>,
}

/// A case with where it came from.
struct Loaded {
    file: String,
    case: Case,
}

impl Loaded {
    fn label(&self) -> String {
        format!(
            "{}: {:?} (from {})",
            self.file, self.case.name, self.case.from
        )
    }
}

/// A response as it came over the wire.
#[derive(Debug)]
struct Response {
    status: u16,
    /// Names lowercased, in wire order.
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn values(&self, name: &str) -> Vec<&str> {
        values(&self.headers, name)
    }
}

/// What the echo backend reported: its request line's target and headers.
struct Seen {
    target: String,
    headers: Vec<(String, String)>,
}

fn values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../lb-userspace/l7/testdata/skipper")
}

/// Every case of every `*.toml` file, checked for the contract's static rules.
fn load() -> Vec<Loaded> {
    let dir = cases_dir();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let file = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).expect("read case file");
        let parsed: CaseFile = toml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut names = std::collections::HashSet::new();
        for case in parsed.case {
            assert!(
                names.insert(case.name.clone()),
                "{file}: duplicate case name {:?}",
                case.name
            );
            assert!(
                !case.from.trim().is_empty(),
                "{file}: {:?} names no skipper test",
                case.name
            );
            if let Some(peer) = case.peer {
                assert!(
                    !case.trusted,
                    "{file}: {:?}: `trusted` takes no `peer`",
                    case.name
                );
                let ok = (20..=27).any(|i| peer == client_addr(i - 20));
                assert!(
                    ok,
                    "{file}: {:?}: peer {peer} outside 198.18.0.20-27",
                    case.name
                );
            }
            out.push(Loaded {
                file: file.clone(),
                case,
            });
        }
    }
    out
}

/// The request bytes of `case`: its method and raw target, Host, its headers in
/// order, a Content-Length when it has a body, and `Connection: close` so the answer
/// ends with the connection.
fn request_bytes(case: &Case) -> Vec<u8> {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        case.method, case.target, case.host
    );
    for (k, v) in &case.headers {
        let _ = write!(head, "{k}: {v}\r\n");
    }
    if !case.body.is_empty() {
        let _ = write!(head, "Content-Length: {}\r\n", case.body.len());
    }
    head.push_str("Connection: close\r\n\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(case.body.as_bytes());
    bytes
}

/// Sends `bytes` to `to` from `from` and reads the answer to the end.
async fn exchange(
    from: IpAddr,
    to: SocketAddr,
    bytes: &[u8],
    head: bool,
) -> Result<Response, String> {
    let socket = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
    socket
        .bind(SocketAddr::new(from, 0))
        .map_err(|e| format!("bind {from}: {e}"))?;
    let mut s = socket
        .connect(to)
        .await
        .map_err(|e| format!("connect {to}: {e}"))?;
    s.write_all(bytes)
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .map_err(|_| "no end of answer in 5 s".to_owned())?
        .map_err(|e| format!("read: {e}"))?;
    parse_response(&out, head)
}

/// An HTTP/1.1 response: status line, headers, and a body by Content-Length,
/// chunked, or to the end (none for HEAD and 1xx/204/304).
fn parse_response(raw: &[u8], head: bool) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no response head in {:?}", String::from_utf8_lossy(raw)))?;
    let text = String::from_utf8_lossy(&raw[..end]);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[end + 4..];
    let no_body = head || status / 100 == 1 || status == 204 || status == 304;
    let body = if no_body {
        Vec::new()
    } else if values(&headers, "transfer-encoding")
        .iter()
        .any(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else if let Some(len) = values(&headers, "content-length").first() {
        let len: usize = len
            .parse()
            .map_err(|_| format!("bad content-length {len:?}"))?;
        rest.get(..len)
            .ok_or("body shorter than its content-length")?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line without end")?;
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(rest.get(..size).ok_or("chunk cut short")?);
        rest = rest.get(size + 2..).ok_or("chunk without its line end")?;
    }
}

/// What the echo backend saw, if this response is its answer: its body starts with
/// the backend's name (a HEAD answer has no body, but carries the echo's own header).
fn seen_by_backend(r: &Response) -> Option<Seen> {
    let mut lines = r.body.lines();
    if lines.next() != Some(ECHO_NAME) {
        return (!r.values("x-body-hash").is_empty()).then(|| Seen {
            target: "(HEAD: unknown)".into(),
            headers: Vec::new(),
        });
    }
    let target = lines
        .next()
        .and_then(|l| l.split_once(' '))
        .map(|(_, t)| t.to_owned())
        .unwrap_or_default();
    let headers = lines
        .take_while(|l| !l.starts_with("body: "))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Some(Seen { target, headers })
}

/// Every way `got` differs from `case.expect`, one line each.
fn compare(case: &Case, got: &Response) -> Vec<String> {
    let e = &case.expect;
    let mut diffs = Vec::new();
    if got.status != e.status {
        diffs.push(format!("status: expected {}, got {}", e.status, got.status));
    }
    if let Some(body) = &e.body
        && &got.body != body
    {
        diffs.push(format!("body: expected {body:?}, got {:?}", got.body));
    }
    if let Some(loc) = &e.location {
        let have = got.values("location");
        if have != [loc.as_str()] {
            diffs.push(format!("location: expected {loc:?}, got {have:?}"));
        }
    }
    header_diffs(
        "response header",
        &e.headers,
        &e.absent,
        &got.headers,
        &mut diffs,
    );
    match (&e.upstream, seen_by_backend(got)) {
        (None, Some(seen)) => diffs.push(format!(
            "the backend was asked (for {:?}) but must not be",
            seen.target
        )),
        (Some(_), None) => diffs.push(format!(
            "the backend was not asked; the answer was {:?}",
            got.body
        )),
        (Some(up), Some(seen)) => {
            if let Some(t) = &up.target
                && &seen.target != t
            {
                diffs.push(format!(
                    "upstream target: expected {t:?}, got {:?}",
                    seen.target
                ));
            }
            if let Some(h) = &up.host {
                let have = values(&seen.headers, "host");
                if have != [h.as_str()] {
                    diffs.push(format!("upstream host: expected {h:?}, got {have:?}"));
                }
            }
            header_diffs(
                "upstream header",
                &up.headers,
                &up.absent,
                &seen.headers,
                &mut diffs,
            );
        }
        (None, None) => {}
    }
    diffs
}

/// Each listed name's values must be exactly the listed ones, in order; each
/// `absent` name must be missing.
fn header_diffs(
    what: &str,
    want: &[(String, String)],
    absent: &[String],
    have: &[(String, String)],
    diffs: &mut Vec<String>,
) {
    let mut names: Vec<&str> = Vec::new();
    for (k, _) in want {
        if !names.iter().any(|n| n.eq_ignore_ascii_case(k)) {
            names.push(k);
        }
    }
    for name in names {
        let expected = values(want, name);
        let got = values(have, name);
        if expected != got {
            diffs.push(format!("{what} {name}: expected {expected:?}, got {got:?}"));
        }
    }
    for name in absent {
        let got = values(have, name);
        if !got.is_empty() {
            diffs.push(format!("{what} {name}: expected absent, got {got:?}"));
        }
    }
}

/// The outcome of one case.
enum Outcome {
    Pass,
    Fail(String),
}

async fn run_case(case: &Case, port: u16) -> Outcome {
    let from = if case.trusted {
        TRUSTED_PEER.parse().expect("trusted peer")
    } else {
        case.peer.unwrap_or_else(|| client_addr(0))
    };
    let to = SocketAddr::new(VIP.parse().expect("vip"), port);
    let head = case.method.eq_ignore_ascii_case("HEAD");
    match exchange(from, to, &request_bytes(case), head).await {
        Err(e) => Outcome::Fail(format!("transport: {e}")),
        Ok(got) => {
            let diffs = compare(case, &got);
            if diffs.is_empty() {
                Outcome::Pass
            } else {
                Outcome::Fail(diffs.join("; "))
            }
        }
    }
}

fn inputs(batch: &[Loaded]) -> Vec<ServiceInput> {
    batch
        .iter()
        .zip(FIRST_PORT..)
        .map(|(l, port)| {
            let routes = l.case.routes.replace("$BACKEND", BACKEND_URL);
            service(&format!("case{port}"), port, Some(&routes), vec![])
        })
        .collect()
}

#[test]
fn skipper_cases_through_the_real_proxy() {
    lb_testbed::needs_root!();
    let cases = load();
    assert!(!cases.is_empty(), "no cases in {}", cases_dir().display());
    let started = Instant::now();
    let (failures, pending_report, passed, served, echoed) = namespace().run(move || {
        let rt = runtime();
        let backend = rt.block_on(EchoBackend::start(backend_addr(0, 80), ECHO_NAME));
        let config = L7Config {
            trusted_proxies: vec![format!("{TRUSTED_PEER}/32")],
            ..L7Config::default()
        };
        let mut proxy = proxy_with(&config, None);
        let cases = Arc::new(cases);
        let (mut failures, mut pending, mut passed, mut echoed) = (Vec::new(), Vec::new(), 0, 0u64);
        for (b, batch) in cases.chunks(BATCH).enumerate() {
            let inputs = inputs(batch);
            let mut refused: HashMap<u16, String> = HashMap::new();
            for e in proxy.apply(&inputs) {
                match &e {
                    ApplyError::Routes { origin, .. } => {
                        let port = inputs
                            .iter()
                            .find(|i| &i.routes_origin == origin)
                            .map(|i| i.listen.port())
                            .expect("an error names its service");
                        refused.insert(port, format!("routes refused: {e}"));
                    }
                    other => panic!("batch {b}: {other}"),
                }
            }
            let outcomes = rt.block_on(async {
                let tasks: Vec<_> = (0..batch.len())
                    .map(|i| {
                        let cases = Arc::clone(&cases);
                        let port = FIRST_PORT + u16::try_from(i).expect("batch fits ports");
                        let at = b * BATCH + i;
                        tokio::spawn(async move { run_case(&cases[at].case, port).await })
                    })
                    .collect();
                let mut out = Vec::new();
                for t in tasks {
                    out.push(t.await.expect("case task"));
                }
                out
            });
            for ((l, outcome), port) in batch.iter().zip(outcomes).zip(FIRST_PORT..) {
                let outcome = match refused.remove(&port) {
                    Some(why) => Outcome::Fail(why),
                    None => outcome,
                };
                if let Outcome::Fail(_) = outcome {
                } else if l.case.expect.upstream.is_some() {
                    echoed += 1;
                }
                match (&l.case.pending, outcome) {
                    (None, Outcome::Pass) => passed += 1,
                    (None, Outcome::Fail(why)) => {
                        failures.push(format!("{}\n    {why}", l.label()))
                    }
                    (Some(p), Outcome::Pass) => failures.push(format!(
                        "{}\n    passes but is marked pending ({p}): remove the mark",
                        l.label()
                    )),
                    (Some(p), Outcome::Fail(why)) => {
                        pending.push(format!("{}\n    pending: {p}\n    now: {why}", l.label()));
                    }
                }
            }
        }
        proxy.shutdown();
        let served = backend.served.load(Ordering::Relaxed);
        (failures, pending, passed, served, echoed)
    });
    let mut report = format!(
        "{passed} skipper cases passed through the real proxy, {} pending, {} failed, in {:.1} s\n",
        pending_report.len(),
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    for p in &pending_report {
        let _ = writeln!(report, "PENDING {p}");
    }
    println!("{report}");
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Every passing case that expects the backend reached it once; failing or pending
    // ones may have reached it too.
    assert!(
        served >= echoed,
        "the backend answered {served} requests, {echoed} passing cases expect it"
    );
}
