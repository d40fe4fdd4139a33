//! Listening on a VIP and serving its connections: the connection limit, HTTP/1.x (our
//! own server, [`super::h1`], which answers 431, 414 or 400 to heads it refuses) and
//! h2c (hyper's server, handed the connection when its first bytes are HTTP/2's
//! preface) on the same port, timeouts, idle connections closed, graceful shutdown on
//! request.
//!
//! Timeouts a connection lives by:
//! - its first request head must be complete within `header_timeout` of the accept,
//!   whether it sent a byte or not (HTTP/2 has no head timer of its own);
//! - later HTTP/1 heads get `header_timeout` too, counted from the end of the
//!   previous response, so an idle HTTP/1 connection closes after the shorter of
//!   `header_timeout` and `idle_timeout` (only the latter counts as an idle close).
//!   This was hyper's `header_read_timeout`, which made a timer (an allocation and a
//!   timer-wheel entry) for every request head; the idle timer below, armed for the
//!   shorter of the two, does the same without any per request;
//! - between requests, `idle_timeout`;
//! - when the proxy is full, the oldest connection still without a head is closed to
//!   make room ([`super::pending`]).
//!
//! Draining (the service went away, or lbd stops or hands over): an HTTP/2 connection
//! gets GOAWAY at once and ends when its streams have; an HTTP/1 one ends only between
//! requests — the response in flight says `Connection: close`, and a connection idle
//! for [`DRAIN_IDLE`] is closed (one idle only for a moment likely has the client's
//! next request on its way, and closing it then would fail that request).

use std::{
    future::{Future, poll_fn},
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use hyper::server::conn::http2;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::watch};

use super::{
    Shared,
    activity::Activity,
    client_body::ClientBody,
    h1::{self, head::HeadLimits},
    headers::Peer,
    pending::Pending,
    rewind::Rewind,
    service::ServiceState,
    woken::{OnWake, Woken},
};
use lb_model::throttle::{AcceptBackoff, Throttle};

/// How long an HTTP/1 connection must have been idle before a drain closes it.
pub const DRAIN_IDLE: Duration = Duration::from_secs(1);

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
    /// Connections without a complete request head yet.
    pub(crate) pending: Pending,
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
    let mut backoff = AcceptBackoff::default();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stops.wait() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                backoff.reset();
                a
            }
            Err(e) => {
                // Out of file descriptors: a connection still without a request gives
                // one back. Either way the loop waits before the next try: the
                // connection in the backlog would wake it again at once.
                if rustix::io::Errno::from_io_error(&e)
                    .is_some_and(|n| n == rustix::io::Errno::MFILE || n == rustix::io::Errno::NFILE)
                {
                    shared.connections.pending.evict_oldest();
                }
                let (wait, log) = backoff.failed_quietly();
                if let Some(suppressed) = log {
                    tracing::warn!(
                        listener = "l7",
                        service = %service.name,
                        error = %e,
                        retry_ms = wait.as_millis() as u64,
                        suppressed,
                        "accept failed, waiting before the next"
                    );
                }
                tokio::select! {
                    () = tokio::time::sleep(wait) => continue,
                    () = stops.wait() => return,
                }
            }
        };
        let conns = &shared.connections;
        if conns.open.fetch_add(1, Ordering::AcqRel) >= shared.limits.max_connections
            && !conns.pending.evict_oldest()
        {
            // Full, and every connection has sent a request: refuse this one. (With a
            // connection evicted, the count stays over the cap until it has closed.)
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
    let limits = &shared.limits;
    let ticket = shared.connections.pending.enter();
    let evict = Arc::clone(&ticket.evict);
    let activity = Arc::new(Activity::new(Some((Arc::clone(&shared), ticket))));
    // The service's name for the log, after the request handler has taken `service`.
    let named = Arc::clone(&service);
    // One reference per request, to this connection's own: a clone of the service's
    // `Arc` per request wrote a count every worker's requests write.
    let serving = Arc::new(Serving {
        service,
        activity: Arc::clone(&activity),
        client: Peer::new(peer),
    });
    let h1 = {
        let conn = Arc::clone(&serving);
        let head = HeadLimits {
            max_bytes: limits.max_header_bytes,
            max_fields: limits.max_headers,
        };
        h1::Connection::new(stream, head, move |req| Arc::clone(&conn).serve(req))
    };
    // h2c with prior knowledge: hyper's HTTP/2 server takes the socket, the preface
    // read so far put back in front of it.
    let h2c = |stream, read| {
        let mut h2 = http2::Builder::new(StreamTasks);
        h2.timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
        let svc = h2_service(Arc::clone(&serving));
        Box::pin(h2.serve_connection(TokioIo::new(Rewind::new(read, stream)), svc))
    };
    let mut conn = Proto::first(h1, &h2c);
    // Types of both protocols' connections are only known here.
    macro_rules! graceful {
        ($conn:expr) => {
            match &mut $conn {
                Proto::H1(c) => c.graceful_shutdown(),
                Proto::H2(c) => c.as_mut().graceful_shutdown(),
            }
        };
    }
    // The first head's deadline, counted from the accept.
    let first_head = tokio::time::sleep(limits.header_timeout);
    tokio::pin!(first_head);
    // Re-armed to when the connection would have been idle long enough, or waited
    // too long for a later head. Never armed further out than the nearer of the two,
    // so that it fires in time for a request that ends after it was armed.
    let idle = tokio::time::sleep(limits.idle_timeout.min(limits.header_timeout));
    tokio::pin!(idle);
    let mut draining = false;
    let mut shut = false;
    let mut headless = true;
    // The stop signals, the timers and the eviction notice are polled only when they
    // fired, not on every wake-up of this task (see `woken`): the first head's timer
    // and the notice wait the whole `header_timeout` (10 s by default) after a
    // connection's first request, and were polled with each of its requests' reads
    // and writes meanwhile.
    let (stop_woken, idle_woken) = (Woken::new(), Woken::new());
    let (head_woken, evict_woken) = (Woken::new(), Woken::new());
    let result = loop {
        // The conditions are read when a round of waiting starts; a head may complete
        // during it, so the branches look again before they close anything.
        tokio::select! {
            biased;
            r = poll_fn(|cx| match &mut conn {
                Proto::H1(c) => Pin::new(c).poll(cx).map(Step::H1),
                Proto::H2(c) => c.as_mut().poll(cx).map(Step::H2),
            }) => match r {
                Step::H1(Ok(h1::Ended::H2(stream, read))) => {
                    let mut next = h2c(stream, read);
                    if shut {
                        next.as_mut().graceful_shutdown();
                    }
                    conn = Proto::H2(next);
                }
                Step::H1(r) => break r.map(drop).map_err(ServeError::H1),
                Step::H2(r) => break r.map_err(ServeError::H2),
            },
            () = OnWake::new(&head_woken, first_head.as_mut()), if headless => {
                headless = false;
                if !activity.seen_request() {
                    // Closed without an answer, as nginx does: there is no request to
                    // answer.
                    break Ok(());
                }
                // The idle timer may have been re-armed for the idle timeout an instant
                // before this head came: look again now the head deadline applies.
                idle.as_mut().reset(tokio::time::Instant::now());
            }
            () = OnWake::new(&evict_woken, Box::pin(evict.notified())), if headless => {
                if !activity.seen_request() {
                    break Ok(());
                }
            }
            () = OnWake::new(&stop_woken, Box::pin(stops.wait())), if !draining => {
                draining = true;
                if activity.start_draining() {
                    shut = true;
                    graceful!(conn);
                } else {
                    idle.as_mut().reset(tokio::time::Instant::now());
                }
            }
            () = OnWake::new(&idle_woken, idle.as_mut()), if !shut => {
                let limit = if draining { DRAIN_IDLE.min(limits.idle_timeout) } else { limits.idle_timeout };
                // A later HTTP/1 head's deadline, when it comes before the idle one.
                let head = (activity.seen_request() && !activity.speaks_h2())
                    .then_some(limits.header_timeout)
                    .filter(|&h| h < limit);
                let first = head.unwrap_or(limit);
                // Armed while a request runs, the timer fires at the latest when the
                // deadlines would if it ended now; a later end only re-arms it.
                match activity.idle_for() {
                    Some(idle_for) if idle_for >= first => {
                        shut = true;
                        if head.is_none() && !draining {
                            shared.connections.idle_closed.fetch_add(1, Ordering::Relaxed);
                        }
                        graceful!(conn);
                    }
                    Some(idle_for) => idle.as_mut().reset(tokio::time::Instant::now() + (first - idle_for)),
                    None => idle.as_mut().reset(tokio::time::Instant::now() + first),
                }
            }
        }
    };
    activity.leave_pending();
    // A head refused while the connection still read what the client sent after it
    // (`h1`'s lingering close) when a timer ended the connection: counted as refused.
    let result = match (result, &conn) {
        (Ok(()), Proto::H1(c)) => c
            .refused()
            .map_or(Ok(()), |e| Err(ServeError::H1(e.into()))),
        (r, _) => r,
    };
    if let Err(e) = result {
        note_error(&shared, &named.name, peer, &e);
    }
    shared.connections.open.fetch_sub(1, Ordering::AcqRel);
}

/// How hyper's HTTP/2 server runs each stream: a task of the worker's runtime, with
/// the stream's future boxed first. The future holds the request's whole handler
/// (about 4.7 KB), and tokio moves a task's future by value as it spawns it and as
/// the task finishes (into the call, into the task's cell, into its box, and its
/// stage rewritten whole twice): eight copies, a twelfth of an h2 request's
/// instructions. Boxed, the copies are of a pointer, for one allocation more per
/// stream. HTTP/1 requests are not spawned (the connection's task polls them), so
/// they do without the box.
#[derive(Clone, Copy, Debug)]
struct StreamTasks;

impl<F> hyper::rt::Executor<F> for StreamTasks
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(Box::pin(fut));
    }
}

/// The h2c connection's requests, through hyper's service interface.
fn h2_service(
    conn: Arc<Serving>,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<super::body::ProxyBody>,
    Error = std::convert::Infallible,
    Future = impl Future<
        Output = Result<http::Response<super::body::ProxyBody>, std::convert::Infallible>,
    > + Send,
> + Clone {
    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let serving = Arc::clone(&conn).serve(req.map(ClientBody::Hyper));
        async move { Ok(serving.await) }
    })
}

/// What a connection's requests are served with.
struct Serving {
    service: Arc<ServiceState>,
    activity: Arc<Activity>,
    client: Peer,
}

impl Serving {
    /// One request of the connection, from either protocol's server.
    async fn serve(
        self: Arc<Self>,
        req: http::Request<ClientBody>,
    ) -> http::Response<super::body::ProxyBody> {
        let activity = Arc::clone(&self.activity);
        self.service.handle(req, &self.client, activity).await
    }
}

/// The connection, in the protocol it turned out to speak.
enum Proto<A, B> {
    /// HTTP/1.x, by our own server (until it sees HTTP/2's preface).
    H1(A),
    /// h2c, by hyper's server.
    H2(Pin<Box<B>>),
}

impl<A, B> Proto<A, B> {
    /// An HTTP/1 connection that may become `make`'s HTTP/2 one (which names `B`).
    fn first<M>(h1: A, _make: &M) -> Self
    where
        M: Fn(tokio::net::TcpStream, bytes::Bytes) -> Pin<Box<B>>,
    {
        Proto::H1(h1)
    }
}

/// What a turn of [`Proto`] gave.
enum Step {
    H1(Result<h1::Ended, h1::ConnError>),
    H2(Result<(), hyper::Error>),
}

/// Why serving a connection ended early.
#[derive(Debug, thiserror::Error)]
enum ServeError {
    #[error(transparent)]
    H1(h1::ConnError),
    #[error(transparent)]
    H2(hyper::Error),
}

/// Connection errors: a malformed request head (answered with a 4xx) is counted and
/// logged; a client that went away is not news.
fn note_error(shared: &Shared, service: &str, client: SocketAddr, e: &ServeError) {
    if let ServeError::H1(h1::ConnError::Head(refused)) = e {
        shared.connections.malformed.fetch_add(1, Ordering::Relaxed);
        static MALFORMED: Throttle = Throttle::per_second();
        if let Some(suppressed) = MALFORMED.pass() {
            tracing::warn!(
                service,
                %client,
                error = %refused,
                status = refused.status().as_u16(),
                suppressed,
                "malformed request answered with 4xx, connection closed"
            );
        }
        return;
    }
    if let ServeError::H2(h) = e
        && h.is_timeout()
    {
        tracing::debug!(service, %client, error = %h, "connection timed out");
        return;
    }
    tracing::debug!(service, %client, error = %e, "connection ended");
}
