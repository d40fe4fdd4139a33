//! `lbd`: the load-balancer node agent.

use std::{path::PathBuf, process::ExitCode, time::Instant};

use anyhow::Context as _;
use clap::Parser;
use lb_control::runtime::{self, Ended, Settings, Stop};
use lb_dataplane::natsweep::{SWEEP_INTERVAL, SweeperThread};
use lb_l7::{handover, node::L7Node};
use lb_model::{config, dataplane::Traffic as _};
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
    /// With --check-config: also print what the data plane would hold — each service's
    /// backends, weights and table slots — planned against the running node's pinned
    /// maps (what a reload would change) or against empty ones.
    #[arg(long, requires = "check_config")]
    plan: bool,
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
        if args.plan {
            print!("{}", lb_userspace::check::plan_text(config));
        }
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
            tracing::info!(
                sockets = p.listeners.len(),
                "taking over the l7 sockets of the running lbd"
            );
            Some(p)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::error!(error = %e, "taking over from the running lbd failed, starting afresh");
            None
        }
    };
    lb_l7::nofile::raise_for(&config);
    let agent = node::start(config).context("starting the data plane")?;
    let interface = agent.config().node.interface.clone();
    tracing::info!(
        interface = %interface,
        hook = agent.config().node.hook.name(),
        xdp_mode = ?agent.config().node.xdp_mode,
        services = agent.config().services.len(),
        "attached"
    );
    // Ports of ended nat flows are released on a thread of its own.
    let sweeper = SweeperThread::spawn(agent.dataplane().maps(), SWEEP_INTERVAL)
        .map_err(|e| tracing::warn!(error = %e, "nat sweeper not started"))
        .ok();
    let l7 = L7Node::with_listeners(
        predecessor
            .as_mut()
            .map(|p| std::mem::take(&mut p.listeners))
            .unwrap_or_default(),
    );
    let settings = Settings {
        config_path: args.config.clone(),
        handover_path,
        started: Instant::now(),
        nat_sweep: sweeper.as_ref().map(SweeperThread::stats),
        stop: None,
    };
    let Ended { agent, l7, stop } =
        runtime::run(agent, l7, predecessor, settings).context("running")?;
    drop(sweeper);
    // HTTP requests in flight finish before the process goes.
    l7.shutdown();
    log_counters(&agent);
    match stop {
        Stop::HandedOver | Stop::LeaveRunning => node::leave_running(agent).context("stopping")?,
        Stop::TearDown => {
            tracing::info!(interface = %interface, "shutting down: detaching");
            node::shutdown(agent).context("shutting down")?;
        }
    }
    Ok(())
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
            tracing::info!(
                counters = %line.join(" "),
                fade_in_rebuilds = agent.fade_rebuilds(),
                "data plane counters at exit"
            );
        }
        Err(err) => tracing::warn!(error = %err, "reading data plane counters failed"),
    }
}
