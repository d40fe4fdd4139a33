//! Real traffic: small HTTP and UDP servers on the backends, and bounded clients.
//!
//! Servers answer with their own name so the client can tell which backend served it.
//! Every loop is bounded in count and every socket has a timeout.

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::Netns;

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A server thread in a backend namespace; stopped and joined on drop.
#[derive(Debug)]
pub struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves HTTP on `addr:port` inside `ns`: every request gets `200 OK` with the body
    /// `<name>\n`, then the connection closes.
    pub fn http(ns: &Netns, addr: impl Into<IpAddr>, port: u16, name: &str) -> Self {
        Self::tcp(
            ns,
            SocketAddr::new(addr.into(), port),
            name,
            |conn, name, _| {
                let _ = serve_http(conn, name);
            },
        )
    }

    /// A TCP listener inside `ns` whose connections go to `handle` on their own threads.
    fn tcp(
        ns: &Netns,
        addr: SocketAddr,
        name: &str,
        handle: fn(TcpStream, &str, &AtomicBool),
    ) -> Self {
        let listener = ns.run(move || {
            let l = TcpListener::bind(addr).expect("bind tcp");
            l.set_nonblocking(true).expect("nonblocking");
            l
        });
        let name = name.to_owned();
        Self::spawn(move |stop| {
            let mut workers = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (name, stop) = (name.clone(), stop.clone());
                        workers.push(std::thread::spawn(move || handle(conn, &name, &stop)));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => break,
                }
            }
            for w in workers {
                let _ = w.join();
            }
        })
    }

    /// Serves UDP on `addr:port` inside `ns`: every datagram is answered, from the
    /// same address, with `<name> <payload>`.
    pub fn udp(ns: &Netns, addr: impl Into<IpAddr>, port: u16, name: &str) -> Self {
        let addr = addr.into();
        let sock = ns.run(move || {
            let s = UdpSocket::bind(SocketAddr::new(addr, port)).expect("bind udp");
            s.set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
            s
        });
        let name = name.to_owned();
        Self::spawn(move |stop| {
            let mut buf = [0u8; 1500];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, peer)) = sock.recv_from(&mut buf) {
                    let mut reply = format!("{name} ").into_bytes();
                    reply.extend_from_slice(&buf[..n]);
                    let _ = sock.send_to(&reply, peer);
                }
            }
        })
    }

    /// Serves long-lived TCP connections on `addr:port` inside `ns`: every line a
    /// client sends is answered with `<name> <line>`; each connection has its own thread.
    pub fn echo(ns: &Netns, addr: impl Into<IpAddr>, port: u16, name: &str) -> Self {
        Self::tcp(ns, SocketAddr::new(addr.into(), port), name, echo_lines)
    }

    fn spawn(body: impl FnOnce(Arc<AtomicBool>) + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        Self {
            stop,
            thread: Some(std::thread::spawn(move || body(flag))),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn echo_lines(conn: TcpStream, name: &str, stop: &AtomicBool) {
    use std::io::BufRead as _;
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(100)));
    let Ok(mut writer) = conn.try_clone() else {
        return;
    };
    let mut reader = std::io::BufReader::new(conn);
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {
                if writer
                    .write_all(format!("{name} {line}").as_bytes())
                    .is_err()
                {
                    return;
                }
                line.clear();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// A client connection held open across changes; [`Held::ask`] round-trips one line.
#[derive(Debug)]
pub struct Held {
    writer: TcpStream,
    reader: std::io::BufReader<TcpStream>,
}

impl Held {
    /// Opens `count` connections from inside `ns` to `target`.
    ///
    /// # Panics
    /// If any connection cannot be established.
    pub fn open(ns: &Netns, target: SocketAddr, count: usize) -> Vec<Held> {
        ns.run(move || {
            (0..count)
                .map(|i| {
                    let s = TcpStream::connect_timeout(&target, IO_TIMEOUT)
                        .unwrap_or_else(|e| panic!("held connection {i}: {e}"));
                    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
                    Held {
                        writer: s.try_clone().expect("clone"),
                        reader: std::io::BufReader::new(s),
                    }
                })
                .collect()
        })
    }

    /// The connection's own address (the client side of its 5-tuple).
    pub fn local_addr(&self) -> SocketAddr {
        self.writer.local_addr().expect("local address")
    }

    /// Sends `msg` and returns the name of the backend that answered.
    ///
    /// # Errors
    /// The connection failed (reset, timeout) or the answer was not an echo.
    pub fn ask(&mut self, msg: &str) -> Result<String, String> {
        use std::io::BufRead as _;
        self.writer
            .write_all(format!("{msg}\n").as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| format!("read: {e}"))?;
        line.trim_end()
            .strip_suffix(&format!(" {msg}"))
            .map(str::to_owned)
            .ok_or_else(|| format!("unexpected answer {line:?}"))
    }
}

/// Asserts that every held connection still answers, from the backend it started on
/// (`on`, what its first [`Held::ask`] returned); `round` names the moment.
///
/// # Panics
/// On the first connection that broke or moved.
pub fn assert_held_intact(held: &mut [Held], on: &[String], round: &str) {
    for (i, (conn, was)) in held.iter_mut().zip(on).enumerate() {
        let now = conn
            .ask(&format!("{round}-{i}"))
            .unwrap_or_else(|e| panic!("{round}: held connection {i} (on {was}) broke: {e}"));
        assert_eq!(&now, was, "{round}: held connection {i} moved");
    }
}

/// One short echo connection (call inside the client's namespace): connects, sends a
/// line, reads the answer, and closes first (so the client, not the backend, ends in
/// TIME_WAIT). Returns the name of the backend that answered.
///
/// # Errors
/// The connection or the exchange failed.
pub fn echo_once(target: SocketAddr, msg: &str) -> Result<String, String> {
    use std::io::BufRead as _;
    let s = TcpStream::connect_timeout(&target, IO_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut writer = s.try_clone().map_err(|e| e.to_string())?;
    writer
        .write_all(format!("{msg}\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut line = String::new();
    std::io::BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    s.shutdown(std::net::Shutdown::Both)
        .map_err(|e| format!("shutdown: {e}"))?;
    line.trim_end()
        .strip_suffix(&format!(" {msg}"))
        .map(str::to_owned)
        .ok_or_else(|| format!("unexpected answer {line:?}"))
}

fn serve_http(mut conn: TcpStream, name: &str) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        req.extend_from_slice(&buf[..n]);
    }
    let body = format!("{name}\n");
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(resp.as_bytes())
}

/// Outcome of a batch of requests: which backend answered how often, and failures.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Responses per backend name.
    pub served: BTreeMap<String, usize>,
    /// Requests that failed, with the first few errors.
    pub failures: Vec<String>,
}

impl Tally {
    /// Total successful responses.
    pub fn ok(&self) -> usize {
        self.served.values().sum()
    }

    /// After this many failures a batch stops early: the outcome is clear and waiting
    /// out every timeout would only make a broken run slow.
    pub const MAX_FAILURES: usize = 5;

    fn gave_up(&self) -> bool {
        self.failures.len() >= Self::MAX_FAILURES
    }

    fn record(&mut self, result: Result<String, String>) {
        match result {
            Ok(name) => *self.served.entry(name).or_default() += 1,
            Err(e) => self.failures.push(e),
        }
    }
}

/// From inside `ns`, makes `count` HTTP requests to `vip:port`, each on a new TCP
/// connection (so each gets its own source port and flow hash).
pub fn http_requests(ns: &Netns, vip: impl Into<IpAddr>, port: u16, count: usize) -> Tally {
    batch(ns, SocketAddr::new(vip.into(), port), count, http_get)
}

/// Runs `exchange` `count` times inside `ns`, stopping early after too many failures.
fn batch(
    ns: &Netns,
    target: SocketAddr,
    count: usize,
    exchange: fn(SocketAddr, usize) -> Result<String, String>,
) -> Tally {
    ns.run(move || {
        let mut tally = Tally::default();
        for i in 0..count {
            tally.record(exchange(target, i));
            if tally.gave_up() {
                break;
            }
        }
        tally
    })
}

/// From inside `ns`, makes one HTTP request from each source port in `ports` (bound
/// explicitly, so the flows — and the backend each lands on — are known in advance).
pub fn http_requests_from(
    ns: &Netns,
    source: IpAddr,
    vip: IpAddr,
    port: u16,
    ports: std::ops::Range<u16>,
) -> Vec<(u16, Result<String, String>)> {
    let target = SocketAddr::new(vip, port);
    ns.run(move || {
        ports
            .map(|sport| {
                let conn = connect_from(SocketAddr::new(source, sport), target)
                    .map_err(|e| format!("port {sport}: connect: {e}"));
                (
                    sport,
                    conn.and_then(|c| http_get_on(c, target, usize::from(sport))),
                )
            })
            .collect()
    })
}

fn connect_from(source: SocketAddr, target: SocketAddr) -> std::io::Result<TcpStream> {
    let domain = socket2::Domain::for_address(target);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.bind(&source.into())?;
    sock.connect_timeout(&target.into(), IO_TIMEOUT)?;
    Ok(sock.into())
}

/// One HTTP GET on a fresh connection; returns the body's first line (the backend name).
pub fn http_get(target: SocketAddr, i: usize) -> Result<String, String> {
    let conn = TcpStream::connect_timeout(&target, IO_TIMEOUT)
        .map_err(|e| format!("request {i}: connect: {e}"))?;
    http_get_on(conn, target, i)
}

fn http_get_on(mut conn: TcpStream, target: SocketAddr, i: usize) -> Result<String, String> {
    let fail = |what: &str, e: std::io::Error| format!("request {i}: {what}: {e}");
    conn.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| fail("timeout", e))?;
    let req =
        format!("GET /?request={i} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: lb-testbed\r\n\r\n");
    conn.write_all(req.as_bytes())
        .map_err(|e| fail("write", e))?;
    let mut resp = String::new();
    conn.read_to_string(&mut resp)
        .map_err(|e| fail("read", e))?;
    if !resp.starts_with("HTTP/1.1 200 OK\r\n") {
        return Err(format!("request {i}: unexpected response {resp:?}"));
    }
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.trim().to_owned())
        .ok_or_else(|| format!("request {i}: no body in {resp:?}"))?;
    Ok(body)
}

/// From inside `ns`, sends `count` UDP datagrams to `vip:port`, each from a new socket
/// (new source port), and waits for each answer.
pub fn udp_requests(ns: &Netns, vip: impl Into<IpAddr>, port: u16, count: usize) -> Tally {
    batch(ns, SocketAddr::new(vip.into(), port), count, udp_exchange)
}

fn udp_exchange(target: SocketAddr, i: usize) -> Result<String, String> {
    let any = if target.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    };
    udp_exchange_from(any.parse().expect("wildcard address"), target, i)
}

/// From inside `ns`, one datagram from the fixed client address and port `src` to
/// `target`; the answering backend's name. A fixed port makes the 5-tuple known (for
/// predicting the backend) and never repeated by chance.
pub fn udp_request_from(ns: &Netns, src: SocketAddr, target: SocketAddr) -> Result<String, String> {
    ns.run(move || udp_exchange_from(src, target, 0))
}

fn udp_exchange_from(bind: SocketAddr, target: SocketAddr, i: usize) -> Result<String, String> {
    let fail = |what: &str, e: std::io::Error| format!("datagram {i}: {what}: {e}");
    let sock = UdpSocket::bind(bind).map_err(|e| fail("bind", e))?;
    sock.connect(target).map_err(|e| fail("connect", e))?;
    sock.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| fail("timeout", e))?;
    let payload = format!("ping {i}");
    sock.send(payload.as_bytes()).map_err(|e| fail("send", e))?;
    let mut buf = [0u8; 1500];
    let n = sock.recv(&mut buf).map_err(|e| fail("recv", e))?;
    let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
    let name = reply
        .strip_suffix(&format!(" {payload}"))
        .ok_or_else(|| format!("datagram {i}: unexpected reply {reply:?}"))?;
    Ok(name.to_owned())
}

/// What a backend server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// [`Server::http`].
    Http,
    /// [`Server::udp`].
    Udp,
    /// [`Server::echo`].
    Echo,
}

/// Starts, on every backend of `topo`, one server per `(kind, port)` listening on
/// `addr(i)`, each named `backend-<i+1>`.
pub fn serve_backends(
    topo: &crate::Topology,
    addr: impl Fn(usize) -> IpAddr,
    servers: &[(ServerKind, u16)],
) -> Vec<Server> {
    topo.backends
        .iter()
        .enumerate()
        .flat_map(|(i, ns)| {
            let name = format!("backend-{}", i + 1);
            let a = addr(i);
            servers.iter().map(move |&(kind, port)| match kind {
                ServerKind::Http => Server::http(ns, a, port, &name),
                ServerKind::Udp => Server::udp(ns, a, port, &name),
                ServerKind::Echo => Server::echo(ns, a, port, &name),
            })
        })
        .collect()
}
