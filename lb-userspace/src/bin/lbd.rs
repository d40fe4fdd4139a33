//! `lbd`: the load-balancer node agent.

use std::{path::PathBuf, process::ExitCode, time::Instant};

use anyhow::Context as _;
use clap::Parser;
use lb_admin::server;
use lb_control::answer::{Meta, answer};
use lb_dataplane::natsweep::{SWEEP_INTERVAL, SweeperThread};
use lb_l7::{handover, node::L7Node};
use lb_model::{config, dataplane::Traffic as _, filestamp::FileStamp};
use lb_userspace::node::{self, NodeAgent as Agent};

/// Load-balancer node agent: steers VIP traffic to backends with XDP.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Configuration file (TOML).
    #[arg(short, long, default_value = "/etc/lbd/lbd.toml")]
    config: PathBuf,
    /// Validate the configuration and exit: 0 if valid, 1 with the error if not.
    #[arg(long)]
    check_config: bool,
    /// Remove a data plane a previous lbd left running (SIGTERM leaves it forwarding
    /// for the next lbd): detach the XDP program, remove the pins, and exit.
    #[arg(long, conflicts_with = "check_config")]
    cleanup: bool,
    /// Log lines on stderr: `text` for people, `json` (one object a line) for log
    /// pipelines. `RUST_LOG` filters them (default `info`).
    #[arg(long, value_enum, default_value_t)]
    log_format: lb_userspace::logging::LogFormat,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let format = args.log_format;
    if let Err(err) = lb_userspace::logging::init(format) {
        eprintln!("lbd: error: setting up the log: {err}");
        return ExitCode::FAILURE;
    }
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            lb_userspace::logging::fatal(format, &format_args!("{err:#}"));
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let config = config::load(&args.config, lb_l7::check_routes)?;
    if args.check_config {
        println!(
            "{}: ok ({} services)",
            args.config.display(),
            config.services.len()
        );
        return Ok(());
    }
    if args.cleanup {
        node::cleanup(&config).context("cleaning up")?;
        println!("removed the data plane of {}", args.config.display());
        return Ok(());
    }
    let handover_path = handover::socket_path(&config.node.state_dir);
    // A running lbd for this node hands over its l7 sockets and stops its control
    // plane before this one touches the data plane.
    let mut predecessor = match handover::take_over(&handover_path) {
        Ok(Some(p)) => {
            log::info!(
                "taking over from the running lbd: {} l7 sockets",
                p.listeners.len()
            );
            Some(p)
        }
        Ok(None) => None,
        Err(e) => {
            log::error!("{e}; starting afresh");
            None
        }
    };
    lb_l7::nofile::raise_for(&config);
    let mut agent = node::start(config).context("starting the data plane")?;
    let node = agent.config().node.clone();
    log::info!(
        "attached to {} ({:?} XDP), {} services",
        node.interface,
        node.xdp_mode,
        agent.config().services.len()
    );
    // Ports of ended nat flows are released on a thread of its own.
    let sweeper = SweeperThread::spawn(agent.dataplane().maps(), SWEEP_INTERVAL)
        .map_err(|e| log::warn!("nat sweeper not started: {e}"))
        .ok();
    let sweep_stats = sweeper.as_ref().map(SweeperThread::stats);
    let mut l7 = L7Node::with_listeners(
        predecessor
            .as_mut()
            .map(|p| std::mem::take(&mut p.listeners))
            .unwrap_or_default(),
    );
    let started = Instant::now();
    let stop = loop {
        let paths = Paths {
            config: &args.config,
            handover: &handover_path,
        };
        let sweep = sweep_stats.clone();
        match run_until_shutdown(&mut agent, &mut l7, paths, started, &mut predecessor, sweep)? {
            Stop::HandOver(successor) => {
                log::info!("handing the l7 sockets over to the next lbd");
                match successor.hand_over(&l7.listeners()) {
                    Ok(()) => break Stop::HandOver(()),
                    // Its proxy never stopped: carry on as before.
                    Err(e) => log::error!("handover failed ({e}); resuming"),
                }
            }
            Stop::LeaveRunning => break Stop::LeaveRunning,
            Stop::TearDown => break Stop::TearDown,
        }
    };
    drop(sweeper);
    // HTTP requests in flight finish before the process goes.
    l7.shutdown();
    log_counters(&agent);
    match stop {
        Stop::HandOver(()) => {
            log::info!("handed over to the next lbd");
            node::leave_running(agent).context("stopping")?;
        }
        Stop::LeaveRunning => node::leave_running(agent).context("stopping")?,
        Stop::TearDown => {
            log::info!("shutting down: detaching from {}", node.interface);
            node::shutdown(agent).context("shutting down")?;
        }
    }
    Ok(())
}

/// The files lbd watches and serves on.
#[derive(Clone, Copy)]
struct Paths<'a> {
    config: &'a std::path::Path,
    handover: &'a std::path::Path,
}

/// Logs the non-zero data-plane counters, one `name=value` pair each.
fn log_counters(agent: &Agent) {
    match agent.dataplane().counters() {
        Ok(counters) => {
            let line: Vec<String> = counters
                .iter()
                .filter(|(_, v)| *v > 0)
                .map(|(c, v)| format!("{}={v}", c.name()))
                .collect();
            log::info!("data plane counters: {}", line.join(" "));
            log::info!("fade-in table rebuilds: {}", agent.fade_rebuilds());
        }
        Err(err) => log::warn!("reading data plane counters: {err}"),
    }
}

/// How lbd was asked to stop.
enum Stop<S = handover::Successor> {
    /// SIGTERM, as a service manager sends for a stop or restart: the pinned data plane
    /// keeps forwarding until the next lbd adopts it.
    LeaveRunning,
    /// SIGINT (Ctrl-C): detach and remove everything.
    TearDown,
    /// The next lbd asked for the l7 sockets (a zero-downtime restart); `()` once
    /// they are handed over.
    HandOver(S),
}

/// Serves signals until SIGINT or SIGTERM: SIGHUP — or an edit of the config file,
/// checked every second — reloads the config. A config that fails to load or apply is
/// reported and the running state is kept. Admin and metrics queries are answered
/// here, between the other events, from the agent's current state.
fn run_until_shutdown(
    agent: &mut Agent,
    l7: &mut L7Node,
    paths: Paths<'_>,
    started: Instant,
    predecessor: &mut Option<handover::Predecessor>,
    nat_sweep: Option<std::sync::Arc<lb_model::dataplane::SweepStats>>,
) -> anyhow::Result<Stop> {
    let path = paths.config;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the signal runtime")?;
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
        let mut hup = signal(SignalKind::hangup()).context("SIGHUP handler")?;
        // Fade-in steps: at most once a second (a tick with nothing fading does nothing).
        let mut fade = tokio::time::interval(std::time::Duration::from_secs(1));
        let (reports, mut results) = tokio::sync::mpsc::unbounded_channel();
        let mut prober = lb_control::health::Prober::default();
        prober.sync(agent.probe_targets(), &reports);
        let mut file = FileStamp::of(path);
        let mut meta = Meta {
            started,
            config_path: path.display().to_string(),
            generation: 1,
            config_error: None,
            l7: None,
            nat_sweep,
        };
        let (queries, mut asked) = tokio::sync::mpsc::channel(64);
        let (counted_tx, mut counted_rx) = tokio::sync::mpsc::unbounded_channel();
        let _socket = serve_admin(agent, queries).await;
        let (successors, mut successor) = tokio::sync::mpsc::channel(1);
        let _handover = match handover::serve(paths.handover, successors) {
            Ok(socket) => Some(socket),
            Err(e) => {
                log::error!(
                    "handover socket {}: {e}; a restart cannot take over the l7 sockets",
                    paths.handover.display()
                );
                None
            }
        };
        let (etcd_tx, mut etcd_rx) = tokio::sync::mpsc::unbounded_channel();
        if let Some(settings) = agent.config().node.etcd.clone() {
            log::info!("watching etcd {} under {}", settings.endpoints.join(","), settings.prefix);
            tokio::spawn(lb_control::sources::etcd::run(settings, etcd_tx));
        } else {
            drop(etcd_tx);
        }
        loop {
            // After whatever changed the agent's state: the l7 proxy follows it.
            l7.sync(agent.config(), agent.applied());
            // Serving now: the lbd that handed over its sockets may stop accepting.
            if let Some(p) = predecessor.take()
                && let Err(e) = p.serving()
            {
                log::warn!("telling the previous lbd that this one serves: {e}");
            }
            tokio::select! {
                Some(next) = successor.recv() => return Ok(Stop::HandOver(next)),
                _ = term.recv() => return Ok(Stop::LeaveRunning),
                _ = int.recv() => return Ok(Stop::TearDown),
                _ = hup.recv() => {
                    // The edit that came with the signal is loaded now; the watcher
                    // must not load it a second time.
                    file = FileStamp::of(path);
                    meta.reloaded(reload(agent, path));
                    prober.sync(agent.probe_targets(), &reports);
                }
                Some(first) = etcd_rx.recv() => {
                    // Everything already queued is applied with one reprogram.
                    let mut batch = vec![first];
                    while let Ok(more) = etcd_rx.try_recv() {
                        batch.push(more);
                    }
                    match agent.etcd_apply(batch, std::time::SystemTime::now()) {
                        Ok(Some(report)) => {
                            log::info!(
                                "etcd revision {}: {} services programmed, {} unchanged, {} removed",
                                agent.etcd().map_or(0, |e| e.revision),
                                report.programmed,
                                report.unchanged,
                                report.removed
                            );
                            prober.sync(agent.probe_targets(), &reports);
                        }
                        Ok(None) => {}
                        Err(err) => log::error!("applying etcd changes failed, retrying within a second: {err}"),
                    }
                }
                Some((query, reply)) = asked.recv() => {
                    meta.l7 = l7.snapshot();
                    if !query.needs_flows() {
                        let _ = reply.send(answer(agent, &meta, &query, None));
                        continue;
                    }
                    // Walking conntrack takes long at a million entries: a blocking
                    // thread does it with its own map handle, and the query comes back
                    // here with the counts while this loop goes on serving.
                    match agent.dataplane().maps().conntrack_reader() {
                        Ok(reader) => {
                            let counted = counted_tx.clone();
                            tokio::task::spawn_blocking(move || {
                                let _ = counted.send((query, reader.counts(), reply));
                            });
                        }
                        Err(_) => {
                            let _ = reply.send(answer(agent, &meta, &query, None));
                        }
                    }
                }
                Some((query, counts, reply)) = counted_rx.recv() => {
                    let reply_now = match counts {
                        Ok(counts) => answer(agent, &meta, &query, Some(counts)),
                        Err(e) => server::Reply::error(500, format!("walking conntrack: {e}")),
                    };
                    let _ = reply.send(reply_now);
                }
                Some((service, backend, outcome)) = results.recv() => {
                    if let Err(err) = agent.observe(&service, backend, &outcome, std::time::SystemTime::now()) {
                        log::error!("applying a health change failed: {err}");
                    }
                }
                _ = fade.tick() => {
                    if let Err(err) = agent.tick(std::time::SystemTime::now()) {
                        log::error!("fade-in step failed, retrying next second: {err}");
                    }
                    // The config file is watched too: an edit reloads like SIGHUP.
                    let now = FileStamp::of(path);
                    if now != file {
                        file = now;
                        log::info!("{} changed", path.display());
                        meta.reloaded(reload(agent, path));
                        prober.sync(agent.probe_targets(), &reports);
                    }
                }
            }
        }
    })
}

/// Starts the admin socket and the metrics listener the node settings ask for. Either
/// failing is reported and lbd runs on without it: the data plane matters more.
async fn serve_admin(agent: &Agent, queries: server::Queries) -> Option<server::AdminSocket> {
    let node = &agent.config().node;
    if !node.metrics_address.is_empty() {
        let addr = node.metrics_address.parse();
        match addr {
            Ok(addr) => match server::serve_metrics(addr, queries.clone()).await {
                Ok(local) => log::info!("serving Prometheus metrics on http://{local}/metrics"),
                Err(e) => log::error!(
                    "metrics on {addr} (node.metrics_address): {e}; not serving metrics"
                ),
            },
            Err(e) => log::error!("node.metrics_address: {e}"),
        }
    }
    if node.admin_socket.is_empty() {
        return None;
    }
    let path = std::path::Path::new(&node.admin_socket);
    match server::serve_unix(path, queries) {
        Ok(socket) => {
            log::info!("admin API on {}", path.display());
            Some(socket)
        }
        Err(e) => {
            log::error!(
                "admin socket {} (node.admin_socket): {e}; lbctl cannot reach this lbd",
                path.display()
            );
            None
        }
    }
}

/// Reloads the config file; the error (also logged) if it was rejected or failed.
fn reload(agent: &mut Agent, path: &std::path::Path) -> Result<(), String> {
    let config = match config::load(path, lb_l7::check_routes) {
        Ok(config) => config,
        Err(err) => {
            log::error!("reload rejected, keeping the running config: {err}");
            return Err(err.to_string());
        }
    };
    match agent.reload(config) {
        Ok(report) => {
            log::info!(
                "reloaded {}: {} services programmed, {} unchanged, {} removed",
                path.display(),
                report.programmed,
                report.unchanged,
                report.removed
            );
            Ok(())
        }
        Err(err) => {
            log::error!("reload failed part-way, will retry on the next SIGHUP: {err}");
            Err(format!("applying the config failed part-way: {err}"))
        }
    }
}
