//! The async side of the run loop: signals, health probes, etcd, the admin API, the l7
//! proxy and the handover socket. Nothing here blocks: what would (answering from the
//! maps, walking conntrack) runs on tokio's blocking threads, and the agent's work is
//! the control thread's.

use std::{
    sync::{Arc, mpsc::Sender},
    thread::JoinHandle,
};

use lb_admin::server::{self, Queries};
use lb_l7::{handover, node::L7Node};
use lb_model::dataplane::{MapOps, ShareTraffic, Traffic};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::{mpsc, watch},
};

use super::{
    Ended, Published, RuntimeError, Settings, Stop,
    control::{self, Event, State},
};
use crate::{
    agent::{Agent, Host},
    answer::{Meta, answer},
    health::Prober,
};

/// What the control thread hands back when it stops: the agent, its own state and its
/// channel, enough to resume it.
pub(super) type Paused<D, H> = (Agent<D, H>, State, std::sync::mpsc::Receiver<Event>);

/// The control thread as the async side holds it.
pub(super) type Control<D, H> = JoinHandle<Paused<D, H>>;

/// Everything the async side runs with.
pub(super) struct Sides<D, H, R> {
    pub(super) thread: Control<D, H>,
    pub(super) events: Sender<Event>,
    pub(super) published: watch::Receiver<Arc<Published>>,
    pub(super) reader: Arc<R>,
    pub(super) l7: L7Node,
    pub(super) predecessor: Option<handover::Predecessor>,
    pub(super) settings: Settings,
}

/// Starts (or resumes) the control thread.
pub(super) fn spawn_control<D, H>(
    agent: Agent<D, H>,
    state: State,
    events: std::sync::mpsc::Receiver<Event>,
) -> Result<Control<D, H>, RuntimeError>
where
    D: MapOps + Send + 'static,
    H: Host + Send + 'static,
{
    std::thread::Builder::new()
        .name("lbd-control".into())
        .spawn(move || control::run(agent, state, events))
        .map_err(|source| RuntimeError::Setup {
            what: "starting the control thread",
            source,
        })
}

/// Serves until a stop signal or a handover; then stops the control thread and returns
/// the agent.
pub(super) async fn serve<D, H, R>(sides: Sides<D, H, R>) -> Result<Ended<D, H>, RuntimeError>
where
    D: MapOps + ShareTraffic<Reader = R> + Send + 'static,
    H: Host + Send + 'static,
    R: Traffic + Send + Sync + 'static,
{
    let Sides {
        mut thread,
        events,
        mut published,
        reader,
        mut l7,
        mut predecessor,
        mut settings,
    } = sides;
    // Completes once, with the stop asked for; never if nobody can ask.
    let stop_asked = settings.stop.take();
    let asked_to_stop = async move {
        if let Some(stop) = stop_asked
            && let Ok(stop) = stop.await
        {
            return stop;
        }
        std::future::pending().await
    };
    tokio::pin!(asked_to_stop);
    let setup = |what| move |source| RuntimeError::Setup { what, source };
    let mut term = signal(SignalKind::terminate()).map_err(setup("SIGTERM handler"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(setup("SIGINT handler"))?;
    let mut hup = signal(SignalKind::hangup()).map_err(setup("SIGHUP handler"))?;
    let first = Arc::clone(&published.borrow_and_update());
    // Health results go to the control thread as they come.
    let (reports, mut results) = mpsc::unbounded_channel();
    let forward = events.clone();
    tokio::spawn(async move {
        while let Some(report) = results.recv().await {
            if forward.send(Event::Health(report)).is_err() {
                return;
            }
        }
    });
    let mut prober = Prober::default();
    prober.sync(&first.probes, &reports);
    if let Some(etcd) = first.agent.config.node.etcd.clone() {
        tracing::info!(
            source = "etcd",
            endpoints = %etcd.endpoints.join(","),
            prefix = %etcd.prefix,
            "watching etcd"
        );
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(crate::sources::etcd::run(etcd, tx));
        let forward = events.clone();
        tokio::spawn(async move {
            while let Some(message) = rx.recv().await {
                if forward.send(Event::Etcd(message)).is_err() {
                    return;
                }
            }
        });
    }
    let (queries, mut asked) = mpsc::channel(64);
    let mut admin = Some(serve_admin(&first.agent.config.node, queries.clone()).await);
    let (successors, mut successor) = mpsc::channel(1);
    let _handover = match handover::serve(&settings.handover_path, successors) {
        Ok(socket) => Some(socket),
        Err(e) => {
            tracing::error!(
                listener = "handover",
                path = %settings.handover_path.display(),
                error = %e,
                "no handover socket: a restart cannot take over the l7 sockets"
            );
            None
        }
    };
    let mut snap = first;
    // Route files are watched by the l7 proxy's sync: once a second at least.
    let mut routes = tokio::time::interval(std::time::Duration::from_secs(1));
    let stop = loop {
        l7.sync(&snap.agent.config, &snap.agent.applied);
        // Serving now: the lbd that handed its sockets over may stop accepting.
        if let Some(p) = predecessor.take()
            && let Err(e) = p.serving()
        {
            tracing::warn!(error = %e, "telling the previous lbd that this one serves failed");
        }
        tokio::select! {
            Some(next) = successor.recv() => {
                tracing::info!("handing the l7 sockets over to the next lbd");
                let (agent, state, receiver) = stop_control(thread, &events)?;
                // The next lbd binds the admin socket and the metrics port as soon as
                // it has the l7 sockets: they must be free by then.
                drop(admin.take());
                match next.hand_over(&l7.listeners()) {
                    Ok(()) => {
                        tracing::info!("handed over to the next lbd");
                        return Ok(Ended { agent, l7, stop: Stop::HandedOver });
                    }
                    Err(e) => {
                        // Its proxy never stopped: carry on as before.
                        tracing::error!(error = %e, "handover failed, resuming");
                        thread = spawn_control(agent, state, receiver)?;
                        admin = Some(serve_admin(&snap.agent.config.node, queries.clone()).await);
                    }
                }
            }
            _ = term.recv() => break Stop::LeaveRunning,
            _ = int.recv() => break Stop::TearDown,
            stop = &mut asked_to_stop => break stop,
            _ = hup.recv() => {
                let _ = events.send(Event::Reload);
            }
            changed = published.changed() => {
                if changed.is_err() {
                    // Only a panic drops the control thread's sender.
                    return Err(RuntimeError::ControlPanicked);
                }
                snap = Arc::clone(&published.borrow_and_update());
                let changes = prober.sync(&snap.probes, &reports);
                if changes.started + changes.stopped > 0 {
                    tracing::info!(
                        started = changes.started,
                        stopped = changes.stopped,
                        running = prober.len(),
                        "health probes changed"
                    );
                }
            }
            Some((query, reply)) = asked.recv() => {
                let meta = Meta {
                    started: settings.started,
                    config_path: settings.config_path.display().to_string(),
                    generation: snap.generation,
                    config_error: snap.config_error.clone(),
                    l7: l7.snapshot(),
                    nat_sweep: settings.nat_sweep.clone(),
                };
                let (snap, reader) = (Arc::clone(&snap), Arc::clone(&reader));
                // Map reads (and the conntrack walk some answers need) block.
                tokio::task::spawn_blocking(move || {
                    let _ = reply.send(answer(&snap.agent, &meta, &*reader, &query, None));
                });
            }
            _ = routes.tick() => {}
        }
    };
    let (agent, _, _) = stop_control(thread, &events)?;
    drop(admin.take());
    Ok(Ended { agent, l7, stop })
}

/// Tells the control thread to stop and waits for it (it finishes the step it is in).
fn stop_control<D, H>(
    thread: Control<D, H>,
    events: &Sender<Event>,
) -> Result<Paused<D, H>, RuntimeError> {
    let _ = events.send(Event::Stop);
    thread.join().map_err(|_| RuntimeError::ControlPanicked)
}

/// lbd's admin socket and metrics listener, while they serve.
struct Admin {
    _socket: Option<server::AdminSocket>,
    _metrics: Option<server::MetricsListener>,
}

/// Starts the admin socket and the metrics listener the node settings ask for. Either
/// failing is reported and lbd runs on without it: the data plane matters more.
async fn serve_admin(node: &lb_model::config::NodeConfig, queries: Queries) -> Admin {
    let mut metrics = None;
    if !node.metrics_address.is_empty() {
        match node.metrics_address.parse() {
            Ok(addr) => match server::serve_metrics(addr, queries.clone()).await {
                Ok(listener) => {
                    tracing::info!(
                        listener = "metrics",
                        listen = %listener.local_addr(),
                        "serving Prometheus metrics on /metrics"
                    );
                    metrics = Some(listener);
                }
                Err(e) => tracing::error!(
                    listener = "metrics",
                    listen = %addr,
                    error = %e,
                    "cannot listen (node.metrics_address): not serving metrics"
                ),
            },
            Err(e) => tracing::error!(
                listener = "metrics",
                error = %e,
                "node.metrics_address is not an address: not serving metrics"
            ),
        }
    }
    if node.admin_socket.is_empty() {
        return Admin {
            _socket: None,
            _metrics: metrics,
        };
    }
    let path = std::path::Path::new(&node.admin_socket);
    let socket = match server::serve_unix(path, queries) {
        Ok(socket) => {
            tracing::info!(listener = "admin", path = %path.display(), "admin API served");
            Some(socket)
        }
        Err(e) => {
            tracing::error!(
                listener = "admin",
                path = %path.display(),
                error = %e,
                "no admin socket (node.admin_socket): lbctl cannot reach this lbd"
            );
            None
        }
    };
    Admin {
        _socket: socket,
        _metrics: metrics,
    }
}
