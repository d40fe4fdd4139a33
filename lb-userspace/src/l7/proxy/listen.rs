//! Listening on a VIP and serving its connections: the connection limit, HTTP/1.1 and
//! h2c on the same port, head size/count limits and timeouts (hyper answers 431, 414
//! or 400 itself), idle connections closed, graceful shutdown on request.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use tokio::{net::TcpListener, sync::watch};

use super::{Shared, handler::ServiceState};

/// Requests running on one connection and when the last one ended, for the idle
/// timeout (a connection with a request in flight is never idle).
#[derive(Debug)]
pub struct Activity {
    active: AtomicU32,
    /// Milliseconds since `epoch` at the last request end.
    last: AtomicU64,
    epoch: Instant,
}

impl Activity {
    fn new() -> Self {
        Self {
            active: AtomicU32::new(0),
            last: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// A request started.
    pub fn request_started(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    /// A request's response ended (or was abandoned).
    pub fn request_done(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.active.fetch_sub(1, Ordering::Relaxed);
    }

    /// How long the connection has been idle; `None` while a request runs.
    fn idle_for(&self) -> Option<Duration> {
        if self.active.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        Some(self.epoch.elapsed().saturating_sub(last))
    }
}

/// Binds `addr` with `IP_FREEBIND`, so the listener can start before the VIP is on an
/// interface, `SO_REUSEADDR`, so a restarted lbd binds while old connections linger
/// in TIME_WAIT, and `SO_REUSEPORT`, so every worker has a listener of its own.
///
/// # Errors
/// The socket calls' errors.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    // One listener per worker on the same address; the kernel spreads connections.
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
        socket.set_freebind_v6(true)?;
    } else {
        socket.set_freebind_v4(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Live client connections across all services.
#[derive(Debug, Default)]
pub struct Connections {
    pub open: AtomicUsize,
    pub refused: AtomicU64,
    pub malformed: AtomicU64,
    pub idle_closed: AtomicU64,
}

/// What ends serving: the service going away, or the whole proxy draining.
#[derive(Clone, Debug)]
pub struct Stops {
    /// The service was removed.
    pub service: watch::Receiver<bool>,
    /// The proxy shuts down.
    pub drain: watch::Receiver<bool>,
}

impl Stops {
    fn now(&self) -> bool {
        *self.service.borrow() || *self.drain.borrow()
    }

    /// Resolves when either turns true.
    async fn wait(&mut self) {
        loop {
            if self.now() {
                return;
            }
            tokio::select! {
                r = self.service.changed() => if r.is_err() { std::future::pending::<()>().await },
                r = self.drain.changed() => if r.is_err() { std::future::pending::<()>().await },
            }
        }
    }
}

/// Accepts until a stop (then open connections are asked to finish).
pub async fn accept_loop(
    listener: TcpListener,
    service: Arc<ServiceState>,
    shared: Arc<Shared>,
    mut stops: Stops,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stops.wait() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                log::warn!("{}: accept: {e}", service.name);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let conns = &shared.connections;
        if conns.open.fetch_add(1, Ordering::AcqRel) >= shared.limits.max_connections {
            conns.open.fetch_sub(1, Ordering::AcqRel);
            conns.refused.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve(
            stream,
            peer,
            Arc::clone(&service),
            Arc::clone(&shared),
            stops.clone(),
        ));
    }
}

async fn serve(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    service: Arc<ServiceState>,
    shared: Arc<Shared>,
    mut stops: Stops,
) {
    let limits = shared.limits;
    let activity = Arc::new(Activity::new());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .max_buf_size(limits.max_header_bytes)
        .max_headers(limits.max_headers)
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let svc = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |req| {
            let service = Arc::clone(&service);
            let activity = Arc::clone(&activity);
            async move { Ok::<_, std::convert::Infallible>(service.handle(req, peer, activity).await) }
        })
    };
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let mut stopping = stops.now();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    let mut idle_check = tokio::time::interval(
        limits
            .idle_timeout
            .min(Duration::from_secs(1))
            .max(Duration::from_millis(50)),
    );
    let result = loop {
        tokio::select! {
            r = conn.as_mut() => break r,
            () = stops.wait(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = idle_check.tick(), if !stopping => {
                if activity.idle_for().is_some_and(|idle| idle >= limits.idle_timeout) {
                    stopping = true;
                    shared.connections.idle_closed.fetch_add(1, Ordering::Relaxed);
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    };
    if let Err(e) = result {
        note_error(&shared, peer, e.as_ref());
    }
    shared.connections.open.fetch_sub(1, Ordering::AcqRel);
}

/// Connection errors: a malformed request (hyper has answered it with a 4xx) is
/// counted and logged; a client that went away is not news.
fn note_error(shared: &Shared, peer: SocketAddr, e: &(dyn std::error::Error + 'static)) {
    if let Some(h) = e.downcast_ref::<hyper::Error>() {
        if h.is_parse() || h.is_parse_too_large() || h.is_parse_status() {
            shared.connections.malformed.fetch_add(1, Ordering::Relaxed);
            log::warn!("{peer}: malformed request: {h}");
            return;
        }
        if h.is_timeout() {
            log::debug!("{peer}: timed out: {h}");
            return;
        }
    }
    log::debug!("{peer}: connection ended: {e}");
}
