//! The HTTP proxy of `l7` services: worker threads of its own (see [`workers`]; the
//! agent's loop stays single-threaded and never waits for HTTP), each listening on
//! every VIP:port with its own pooled keep-alive connections to backends, and a drain
//! on shutdown.
//!
//! The agent drives it with [`Proxy::apply`]: each call says which services exist,
//! their routes and their endpoints (health and fade-in already in the weights);
//! listeners start and stop, route tables are swapped whole, endpoint sets are
//! replaced in place — requests in flight keep the table and set they started with.

mod activity;
mod apply;
mod body;
mod client_body;
mod coarse;
mod failure;
pub(crate) mod forward;
mod h1;
mod handler;
pub mod headers;
mod listen;
mod pending;
mod record;
mod rewind;
mod service;
#[cfg(test)]
mod tests;
pub use lb_model::config::TrustedProxies;
mod tls;
mod tunnel;
mod upstream;
mod woken;
pub mod workers;
mod writer;

/// The fuzz target `h1_response`: a backend's response bytes through the response
/// parser and the chunked decoder of the proxy's own HTTP/1.1 client.
#[doc(hidden)]
pub use upstream::fuzz::response as fuzz_backend_response;

/// The fuzz target `h1_request`: a client's bytes through the request head parser
/// and the request body decoding of the proxy's own HTTP/1.x server.
#[doc(hidden)]
pub use h1::fuzz::request as fuzz_client_request;

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::SystemTime,
};

pub use apply::ApplyError;
use apply::{compile, update};
use arc_swap::ArcSwap;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
pub use lb_model::config::{L7Config, Limits};
pub use listen::bind;
pub use service::ServiceState;
pub use tls::TlsSetupError;
use tokio::sync::watch;

use super::{
    accesslog::AccessLog,
    balance::{EndpointSpec, Registry},
};

/// What every service shares.
#[derive(Debug)]
pub struct Shared {
    pub(crate) limits: Limits,
    /// One backend connection pool per worker, for plain endpoints named by a host
    /// name; those written `ip:port` use the worker's own pool ([`upstream`]).
    pub(crate) clients: Vec<Client<HttpConnector, body::UpBody>>,
    /// One pool per worker for `https://` endpoints ([`tls`]).
    pub(crate) tls_clients: Vec<Client<tls::TlsConnector, body::UpBody>>,
    pub(crate) access_log: Option<Arc<AccessLog>>,
    /// Log requests of routes without an access-log rule.
    pub(crate) log_default: bool,
    pub(crate) registry: Registry,
    pub(crate) connections: listen::Connections,
}

/// Per-service request counters.
#[derive(Debug, Default)]
pub struct ServiceStats {
    /// Responses by class: 1xx … 5xx (index 0 unused).
    pub responses: [AtomicU64; 6],
    /// Requests no route matched.
    pub no_route: AtomicU64,
    /// Further attempts after a failed connect.
    pub retries: AtomicU64,
    /// Requests answered 502/503/504 by the proxy.
    pub upstream_errors: AtomicU64,
    /// Requests whose TLS handshake with an `https://` backend failed (each also
    /// counts as its endpoint's failure and in `responses`).
    pub tls_failures: AtomicU64,
}

impl ServiceStats {
    fn count(&self, status: http::StatusCode) {
        let class = usize::from(status.as_u16() / 100).min(5);
        self.responses[class].fetch_add(1, Ordering::Relaxed);
    }
}

/// One `l7` service as the agent sees it now.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceInput {
    /// Name.
    pub name: String,
    /// VIP and port to listen on.
    pub listen: SocketAddr,
    /// eskip text; `None` for the default `* -> <roundRobin>` over the endpoints.
    pub routes: Option<Arc<str>>,
    /// Where the routes came from, for errors (file path or `service NAME routes`).
    pub routes_origin: String,
    /// The service's endpoints with effective weights.
    pub endpoints: Vec<EndpointSpec>,
}

struct Running {
    /// What is in force: the routes text last compiled, the endpoints last applied.
    input: ServiceInput,
    state: Arc<ServiceState>,
    stop: watch::Sender<bool>,
    /// The last route text that did not compile, and why.
    rejected: Option<(Arc<str>, crate::routes::RoutesError)>,
    /// A second descriptor of each listening socket, to hand them to the next lbd.
    /// Dropped with the service, so a removed service's port closes.
    listeners: Vec<std::net::TcpListener>,
}

/// The proxy.
pub struct Proxy {
    workers: Option<workers::Workers>,
    shared: Arc<Shared>,
    services: HashMap<String, Running>,
    /// Tells every connection to finish (graceful shutdown).
    drain: watch::Sender<bool>,
    /// Listening sockets a previous lbd handed over, by address, until the first
    /// [`Proxy::apply`] serves them (or closes those no service wants).
    inherited: HashMap<SocketAddr, Vec<std::net::TcpListener>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("services", &self.services.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Starts `workers` worker threads (0 = one per CPU).
    ///
    /// # Errors
    /// A worker cannot start, or `backend_ca_file` cannot be read (a
    /// [`TlsSetupError`] inside the `io::Error`).
    pub fn start(
        limits: Limits,
        workers: usize,
        access_log: Option<AccessLog>,
        log_default: bool,
    ) -> std::io::Result<Self> {
        let n = if workers == 0 {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        } else {
            workers
        };
        let tls = tls::client_config(
            limits.backend_ca_file.as_deref(),
            limits.backend_tls_insecure_skip_verify,
        )
        .map_err(std::io::Error::other)?;
        let pool = workers::Workers::start(n)?;
        let tcp = || {
            let mut connector = HttpConnector::new();
            connector.set_connect_timeout(Some(limits.connect_timeout));
            connector.set_nodelay(true);
            connector
        };
        let builder = || {
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_idle_timeout(std::time::Duration::from_secs(90))
                .pool_max_idle_per_host(256);
            b
        };
        let clients = (0..n).map(|_| builder().build(tcp())).collect();
        let tls_clients = (0..n)
            .map(|_| {
                let mut connector = tcp();
                connector.enforce_http(false);
                builder().build(tls::TlsConnector::new(
                    connector,
                    Arc::clone(&tls),
                    limits.connect_timeout,
                ))
            })
            .collect();
        let access_log = access_log.map(Arc::new);
        if let Some(log) = &access_log {
            // Buffered lines go out every 100 ms, from a thread of their own: a write
            // of 100 ms of lines must not stall a worker's requests.
            let log = Arc::downgrade(log);
            std::thread::Builder::new()
                .name("lbd-l7-log".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        let Some(log) = log.upgrade() else { return };
                        if let Err(e) = log.flush() {
                            tracing::error!(
                                error = %e,
                                "access log lines lost: writing them failed"
                            );
                        }
                    }
                })?;
        }
        let shared = Arc::new(Shared {
            limits,
            clients,
            tls_clients,
            access_log,
            log_default,
            registry: Registry::default(),
            connections: listen::Connections::default(),
        });
        Ok(Self {
            workers: Some(pool),
            shared,
            services: HashMap::new(),
            drain: watch::channel(false).0,
            inherited: HashMap::new(),
        })
    }

    /// Serves `listeners` (sockets a previous lbd handed over) for the services of the
    /// next [`Proxy::apply`] with their address, instead of binding new ones: clients
    /// waiting in their backlogs are served, not refused.
    pub fn adopt(&mut self, listeners: Vec<std::net::TcpListener>) {
        for l in listeners {
            match l.local_addr() {
                Ok(addr) => self.inherited.entry(addr).or_default().push(l),
                Err(e) => tracing::warn!(
                    error = %e,
                    "a handed-over l7 socket has no address, closing it"
                ),
            }
        }
    }

    /// Every listening socket, to hand over to the next lbd.
    pub fn listeners(&self) -> Vec<&std::net::TcpListener> {
        self.services
            .values()
            .flat_map(|r| r.listeners.iter())
            .collect()
    }

    /// Makes the running services match `inputs`. Each service is applied on its own:
    /// one whose routes do not compile keeps its previous routes (or does not start),
    /// the others are applied. A refused route text is refused again by every apply
    /// while it is the input (compiled once). Returns the errors.
    pub fn apply(&mut self, inputs: &[ServiceInput]) -> Vec<ApplyError> {
        let now = SystemTime::now();
        let mut errors = Vec::new();
        self.services.retain(|name, running| {
            let keep = inputs
                .iter()
                .any(|i| &i.name == name && i.listen == running.input.listen);
            if !keep {
                // Stop accepting; open connections finish what they have.
                let _ = running.stop.send(true);
                tracing::info!(
                    service = %name,
                    listen = %running.input.listen,
                    "l7 service stopped listening, open connections finish"
                );
            }
            keep
        });
        for input in inputs {
            match self.services.get_mut(&input.name) {
                Some(running) => {
                    if let Err(e) = update(running, input, &self.shared.registry, now) {
                        errors.push(e);
                    }
                }
                None => match self.launch(input, now) {
                    Ok(running) => {
                        self.services.insert(input.name.clone(), running);
                    }
                    Err(e) => errors.push(e),
                },
            }
        }
        let listed: std::collections::HashSet<&str> = inputs
            .iter()
            .flat_map(|i| i.endpoints.iter().map(|e| e.authority.as_str()))
            .collect();
        self.shared.registry.prune(&listed);
        // Handed-over sockets no service took close now.
        for (addr, unused) in self.inherited.drain() {
            tracing::info!(
                listen = %addr,
                sockets = unused.len(),
                "closing handed-over l7 sockets: no service listens there now"
            );
        }
        errors
    }

    /// Compiles a new service's routes and listens on its VIP:port on every worker
    /// (with the sockets handed over for it, if any).
    fn launch(&mut self, input: &ServiceInput, now: SystemTime) -> Result<Running, ApplyError> {
        let Some(workers) = &self.workers else {
            return Err(ApplyError::Listen {
                service: input.name.clone(),
                addr: input.listen,
                source: std::io::Error::other("the proxy is shut down"),
            });
        };
        let table = compile(input, &self.shared.registry, None, now).map_err(|source| {
            ApplyError::Routes {
                origin: input.routes_origin.clone(),
                source,
            }
        })?;
        // At least one listener per worker, all bound before any is served. Handed-over
        // sockets come first and are all served (closing one would reset the
        // connections in its backlog); a worker may then serve more than one.
        let listen_err = |source| ApplyError::Listen {
            service: input.name.clone(),
            addr: input.listen,
            source,
        };
        let mut listeners = self.inherited.remove(&input.listen).unwrap_or_default();
        let adopted = listeners.len();
        while listeners.len() < workers.handles().len() {
            listeners.push(bind(input.listen).map_err(listen_err)?);
        }
        let kept = listeners
            .iter()
            .map(std::net::TcpListener::try_clone)
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(listen_err)?;
        let state = Arc::new(ServiceState {
            name: input.name.clone(),
            routes: ArcSwap::from_pointee(table),
            shared: Arc::clone(&self.shared),
            stats: ServiceStats::default(),
        });
        let (stop, _) = watch::channel(false);
        for (handle, listener) in workers.handles().iter().cycle().zip(listeners) {
            let (state, shared) = (Arc::clone(&state), Arc::clone(&self.shared));
            let stops = listen::Stops {
                service: stop.subscribe(),
                drain: self.drain.subscribe(),
            };
            handle.spawn(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => listen::accept_loop(l, state, shared, stops).await,
                    Err(e) => tracing::error!(
                        service = %state.name,
                        error = %e,
                        "l7 listener unusable, this worker does not accept on it"
                    ),
                }
            });
        }
        tracing::info!(
            service = %input.name,
            listen = %input.listen,
            handed_over = adopted,
            "l7 service listening"
        );
        Ok(Running {
            input: input.clone(),
            state,
            stop,
            rejected: None,
            listeners: kept,
        })
    }

    /// Every running service with its address.
    pub fn services(&self) -> impl Iterator<Item = (SocketAddr, &Arc<ServiceState>)> {
        self.services.values().map(|r| (r.input.listen, &r.state))
    }

    /// The endpoint counters.
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    /// Access-log lines written so far.
    pub fn access_log_lines(&self) -> u64 {
        self.shared.access_log.as_ref().map_or(0, |l| l.lines())
    }

    /// The live state of a service.
    pub fn service(&self, name: &str) -> Option<&Arc<ServiceState>> {
        self.services.get(name).map(|r| &r.state)
    }

    /// Client connections open now, refused over the limit, malformed requests, and
    /// connections closed for idleness.
    pub fn connection_counts(&self) -> (usize, u64, u64, u64) {
        let c = &self.shared.connections;
        (
            c.open.load(Ordering::Relaxed),
            c.refused.load(Ordering::Relaxed),
            c.malformed.load(Ordering::Relaxed),
            c.idle_closed.load(Ordering::Relaxed),
        )
    }

    /// Connections without a request head closed to make room for new ones.
    pub fn evicted(&self) -> u64 {
        self.shared.connections.pending.evicted()
    }

    /// Stops accepting, lets requests in flight finish (up to the shutdown timeout),
    /// stops the workers and writes out the access log. Blocks the calling thread.
    pub fn shutdown(mut self) {
        let Some(workers) = self.workers.take() else {
            return;
        };
        let _ = self.drain.send(true);
        // The accept loops have let go of their sockets; without these copies too the
        // ports close, and a client is refused at once rather than left waiting in a
        // backlog nobody accepts from.
        for r in self.services.values_mut() {
            r.listeners.clear();
        }
        let open = || self.shared.connections.open.load(Ordering::Acquire);
        let deadline = std::time::Instant::now() + self.shared.limits.shutdown_timeout;
        while open() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if open() > 0 {
            tracing::warn!(
                connections = open(),
                shutdown_timeout_ms = self.shared.limits.shutdown_timeout.as_millis() as u64,
                "l7 connections still open after the shutdown timeout, closing them"
            );
        }
        workers.stop();
        if let Some(log) = &self.shared.access_log
            && let Err(e) = log.flush()
        {
            tracing::error!(error = %e, "access log lines lost: writing them failed");
        }
    }
}
