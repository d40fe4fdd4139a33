//! `lbd`: the load-balancer node agent.

use std::{net::IpAddr, path::PathBuf, process::ExitCode, time::Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use lb_control::runtime::{self, Ended, Settings, Stop};
use lb_dataplane::natsweep::{SWEEP_INTERVAL, SweeperThread};
use lb_l7::{handover, node::L7Node};
use lb_model::{config, dataplane::Traffic as _};
use lb_userspace::node::{self, NodeAgent as Agent};

/// Load-balancer node agent: steers VIP traffic to backends with XDP.
#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Args {
    /// Without a command: run the agent of a load-balancer node.
    #[command(subcommand)]
    command: Option<Command>,
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

#[derive(Debug, Subcommand)]
enum Command {
    /// On a backend of `ipip`/`gue` services: strip the load balancer's encapsulation
    /// of packets for this host's VIPs (hold the VIPs on `lo` or a dummy interface).
    /// Without --pin-path it runs until SIGINT/SIGTERM and then detaches; with it, it
    /// stays attached after lbd exits, until `lbd decap --detach --pin-path DIR`.
    Decap(DecapArgs),
}

#[derive(Debug, clap::Args)]
struct DecapArgs {
    /// The interface tunnelled packets arrive on (TCX ingress).
    #[arg(long, value_name = "IF", required_unless_present_any = ["detach", "status"])]
    interface: Option<String>,
    /// The VIP addresses this backend serves (IPv4 or IPv6); tunnelled packets for
    /// any other address are dropped and counted (refused_not_vip).
    #[arg(long = "vip", value_name = "ADDR", num_args = 1.., required_unless_present_any = ["detach", "status"])]
    vips: Vec<IpAddr>,
    /// UDP port of the load balancers' GUE encapsulation (their `gue_port`); up to 4,
    /// so a port change can roll out. Without: only IPIP (protocols 4 and 41).
    #[arg(long = "gue-port", value_name = "N")]
    gue_ports: Vec<u16>,
    /// Pin the maps and the TCX link in this directory (on a bpf filesystem) so the
    /// program outlives lbd; running again with it updates the VIPs in place.
    #[arg(long, value_name = "DIR")]
    pin_path: Option<PathBuf>,
    /// Detach what a run with --pin-path left attached, and remove its pins.
    #[arg(long, requires = "pin_path", conflicts_with_all = ["status", "interface", "vips", "gue_ports"])]
    detach: bool,
    /// Print where a run with --pin-path is attached, its VIPs and its counters.
    #[arg(long, requires = "pin_path", conflicts_with_all = ["interface", "vips", "gue_ports"])]
    status: bool,
}

impl DecapArgs {
    fn command(self) -> anyhow::Result<lb_userspace::decap::DecapCommand> {
        use lb_userspace::decap::DecapCommand;
        Ok(match (self.detach, self.status, self.pin_path) {
            (true, _, Some(pin_dir)) => DecapCommand::Detach { pin_dir },
            (_, true, Some(pin_dir)) => DecapCommand::Status { pin_dir },
            (_, _, pin_dir) => DecapCommand::Run {
                interface: self.interface.context("--interface is required")?,
                settings: lb_dataplane::decap::DecapSettings::new(&self.vips, &self.gue_ports)?,
                pin_dir,
            },
        })
    }
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
    if let Some(Command::Decap(decap)) = args.command {
        let command = decap.command()?;
        return lb_userspace::decap::run(
            lb_userspace::dataplane_object(),
            command,
            &mut std::io::stdout().lock(),
        )
        .context("lbd decap");
    }
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
