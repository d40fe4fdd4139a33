//! The HTTP proxy of `l7` services: one listener per VIP:port on a multi-threaded
//! runtime of its own (the agent's loop stays single-threaded and never waits for
//! HTTP), pooled keep-alive connections to backends, and a drain on shutdown.
//!
//! The agent drives it with [`Proxy::apply`]: each call says which services exist,
//! their routes and their endpoints (health and fade-in already in the weights);
//! listeners start and stop, route tables are swapped whole, endpoint sets are
//! replaced in place — requests in flight keep the table and set they started with.

mod body;
mod handler;
pub mod headers;
mod listen;
mod settings;
#[cfg(test)]
mod tests;

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::SystemTime,
};

use arc_swap::ArcSwap;
pub use handler::ServiceState;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
pub use listen::bind;
pub use settings::{L7Config, Limits};
use tokio::sync::watch;

use super::{
    accesslog::AccessLog,
    balance::{EndpointSpec, Registry},
    routes::{Context, RouteTable, RoutesError},
};

/// What every service shares.
#[derive(Debug)]
pub struct Shared {
    pub(crate) limits: Limits,
    pub(crate) client: Client<HttpConnector, body::UpBody>,
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
    input: ServiceInput,
    state: Arc<ServiceState>,
    stop: watch::Sender<bool>,
}

/// The proxy.
pub struct Proxy {
    runtime: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
    services: HashMap<String, Running>,
    /// Tells every connection to finish (graceful shutdown).
    drain: watch::Sender<bool>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("services", &self.services.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A service the proxy could not (fully) apply; it keeps what it had.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Its routes did not compile; the previous routes stay.
    #[error("{origin}: {source}; keeping the previous routes")]
    Routes {
        /// File or inline origin.
        origin: String,
        /// Why.
        source: RoutesError,
    },
    /// Its VIP:port could not be bound.
    #[error("service {service}: listening on {addr}: {source}")]
    Listen {
        /// Service.
        service: String,
        /// Address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl Proxy {
    /// Starts the worker runtime (`workers` threads, 0 = one per CPU).
    ///
    /// # Errors
    /// The runtime cannot start.
    pub fn start(
        limits: Limits,
        workers: usize,
        access_log: Option<AccessLog>,
        log_default: bool,
    ) -> std::io::Result<Self> {
        let mut rt = tokio::runtime::Builder::new_multi_thread();
        rt.enable_all().thread_name("lbd-l7");
        if workers > 0 {
            rt.worker_threads(workers);
        }
        let runtime = rt.build()?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(limits.connect_timeout));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .build(connector);
        let access_log = access_log.map(Arc::new);
        if let Some(log) = &access_log {
            // Buffered lines go out every 100 ms.
            let log = Arc::downgrade(log);
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
                loop {
                    tick.tick().await;
                    let Some(log) = log.upgrade() else { return };
                    if let Err(e) = log.flush() {
                        log::error!("writing the access log: {e}");
                    }
                }
            });
        }
        let shared = Arc::new(Shared {
            limits,
            client,
            access_log,
            log_default,
            registry: Registry::default(),
            connections: listen::Connections::default(),
        });
        Ok(Self {
            runtime: Some(runtime),
            shared,
            services: HashMap::new(),
            drain: watch::channel(false).0,
        })
    }

    /// Makes the running services match `inputs`. Each service is applied on its own:
    /// one whose routes do not compile keeps its previous routes (or does not start),
    /// the others are applied. Returns the errors.
    pub fn apply(&mut self, inputs: &[ServiceInput]) -> Vec<ApplyError> {
        let Some(runtime) = &self.runtime else {
            return Vec::new();
        };
        let _guard = runtime.enter();
        let now = SystemTime::now();
        let mut errors = Vec::new();
        self.services.retain(|name, running| {
            let keep = inputs
                .iter()
                .any(|i| &i.name == name && i.listen == running.input.listen);
            if !keep {
                // Stop accepting; open connections finish what they have.
                let _ = running.stop.send(true);
                log::info!(
                    "l7 service {name}: stopped listening on {}",
                    running.input.listen
                );
            }
            keep
        });
        for input in inputs {
            if let Some(running) = self.services.get_mut(&input.name) {
                if running.input == *input {
                    continue;
                }
                if running.input.routes != input.routes {
                    let previous = running.state.routes.load_full();
                    match compile(input, &self.shared.registry, Some(&previous), now) {
                        Ok(table) => {
                            running.state.routes.store(Arc::new(table));
                            log::info!(
                                "l7 service {}: routes from {} loaded",
                                input.name,
                                input.routes_origin
                            );
                        }
                        Err(source) => {
                            errors.push(ApplyError::Routes {
                                origin: input.routes_origin.clone(),
                                source,
                            });
                            // Keep the old text on record so the same broken text is
                            // not reported again; endpoints still apply below.
                            running.input.endpoints.clear();
                            let table = running.state.routes.load_full();
                            table.set_service_endpoints(
                                &input.endpoints,
                                &self.shared.registry,
                                now,
                            );
                            running.input.endpoints.clone_from(&input.endpoints);
                            continue;
                        }
                    }
                } else if running.input.endpoints != input.endpoints {
                    running.state.routes.load().set_service_endpoints(
                        &input.endpoints,
                        &self.shared.registry,
                        now,
                    );
                }
                running.input = input.clone();
                continue;
            }
            let table = match compile(input, &self.shared.registry, None, now) {
                Ok(t) => t,
                Err(source) => {
                    errors.push(ApplyError::Routes {
                        origin: input.routes_origin.clone(),
                        source,
                    });
                    continue;
                }
            };
            let listener = match bind(input.listen).and_then(tokio::net::TcpListener::from_std) {
                Ok(l) => l,
                Err(source) => {
                    errors.push(ApplyError::Listen {
                        service: input.name.clone(),
                        addr: input.listen,
                        source,
                    });
                    continue;
                }
            };
            let state = Arc::new(ServiceState {
                name: input.name.clone(),
                routes: ArcSwap::from_pointee(table),
                shared: Arc::clone(&self.shared),
                stats: ServiceStats::default(),
            });
            let (stop, stop_rx) = watch::channel(false);
            // A per-service stop and the node-wide drain, merged.
            let mut drain_rx = self.drain.subscribe();
            let (merged_tx, merged_rx) = watch::channel(false);
            let mut stop_rx2 = stop_rx.clone();
            runtime.spawn(async move {
                tokio::select! {
                    _ = stop_rx2.changed() => {}
                    _ = drain_rx.changed() => {}
                }
                let _ = merged_tx.send(true);
            });
            runtime.spawn(listen::accept_loop(
                listener,
                Arc::clone(&state),
                Arc::clone(&self.shared),
                merged_rx,
            ));
            log::info!(
                "l7 service {}: listening on http://{}",
                input.name,
                input.listen
            );
            self.services.insert(
                input.name.clone(),
                Running {
                    input: input.clone(),
                    state,
                    stop,
                },
            );
        }
        self.shared.registry.prune();
        errors
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

    /// Stops accepting, lets requests in flight finish (up to the shutdown timeout),
    /// and writes out the access log. Must not be called from inside an async runtime.
    pub fn shutdown(mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        let _ = self.drain.send(true);
        let shared = Arc::clone(&self.shared);
        let deadline = shared.limits.shutdown_timeout;
        runtime.block_on(async {
            let wait = async {
                while shared.connections.open.load(Ordering::Acquire) > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            };
            if tokio::time::timeout(deadline, wait).await.is_err() {
                log::warn!(
                    "l7: {} connections still open after {deadline:?}; closing them",
                    shared.connections.open.load(Ordering::Acquire)
                );
            }
        });
        drop(runtime);
        if let Some(log) = &self.shared.access_log
            && let Err(e) = log.flush()
        {
            log::error!("writing the access log: {e}");
        }
    }
}

fn compile(
    input: &ServiceInput,
    registry: &Registry,
    previous: Option<&RouteTable>,
    now: SystemTime,
) -> Result<RouteTable, RoutesError> {
    let cx = Context {
        registry,
        service_endpoints: &input.endpoints,
        previous,
        now,
    };
    match &input.routes {
        Some(text) => RouteTable::parse(text, &cx),
        None => Ok(RouteTable::service_default(&cx)),
    }
}
