//! `lbctl`: inspect and explain what the node's load balancer does.
//!
//! One module per verb. Commands that need lbd's view (`status`, `services`,
//! `backends`) ask its admin socket; commands that need only the data plane (`flows`,
//! `stats`, `explain`) read the pinned maps, so they work while lbd is down; `routes`
//! and `config check` read files. Every
//! failure is one line on stderr and a non-zero exit.

mod backends;
mod config;
mod explain;
mod flows;
mod output;
mod routes;
mod services;
mod stats;
mod status;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use clap::{Parser, Subcommand, ValueEnum};

pub use output::Table;

/// Inspect and explain the load balancer on this node.
#[derive(Debug, Parser)]
#[command(name = "lbctl", version)]
pub struct Cli {
    /// lbd's admin socket (node.admin_socket).
    #[arg(
        long,
        global = true,
        default_value = "/run/lbd/admin.sock",
        env = "LBCTL_SOCKET"
    )]
    socket: PathBuf,
    /// Where lbd pins its maps (node.pin_path).
    #[arg(
        long,
        global = true,
        default_value = "/sys/fs/bpf/lb",
        env = "LBCTL_PIN_PATH"
    )]
    pin_path: PathBuf,
    /// Output format.
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(subcommand)]
    command: Command,
}

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// JSON for scripts (one document; `stats --watch` prints one per line).
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// lbd's version, uptime, interface, config generation and last reconcile.
    Status,
    /// Services: VIP, mode, backends, table size and digest, traffic.
    Services,
    /// Backends: state, configured and effective weight, fade-in, health, flows.
    Backends(backends::Args),
    /// Established flows from the conntrack table (works without lbd).
    Flows(flows::Args),
    /// Data-plane counters, per VIP and per backend (works without lbd).
    Stats(stats::Args),
    /// Which backend a flow goes to, and why (works without lbd).
    Explain(explain::Args),
    /// Check an eskip route file, or explain which route a request takes and what it
    /// does (works without lbd).
    Routes(routes::Args),
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: config::Command,
    },
}

/// What a command prints to stdout, or the one-line error.
pub type Outcome = Result<(), String>;

/// Runs lbctl with the process's arguments.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let ctx = Context {
        socket: cli.socket,
        pin_path: cli.pin_path,
        format: cli.output,
    };
    let result = match cli.command {
        Command::Status => status::run(&ctx),
        Command::Services => services::run(&ctx),
        Command::Backends(args) => backends::run(&ctx, &args),
        Command::Flows(args) => flows::run(&ctx, &args),
        Command::Stats(args) => stats::run(&ctx, &args),
        Command::Explain(args) => explain::run(&ctx, &args),
        Command::Routes(args) => routes::run(&ctx, &args),
        Command::Config { command } => config::run(&ctx, &command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("lbctl: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Options every command may use.
#[derive(Debug)]
pub struct Context {
    /// The admin socket.
    pub socket: PathBuf,
    /// The pin directory.
    pub pin_path: PathBuf,
    /// Output format.
    pub format: Format,
}

impl Context {
    /// `GET path` from lbd.
    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, String> {
        lb_admin::client::get(&self.socket, path).map_err(|e| e.to_string())
    }

    /// The pinned maps, with an error that says what to check.
    fn maps(&self) -> Result<lb_dataplane::maps::MapSet, String> {
        open_pinned(&self.pin_path)
    }

    /// Service names by data-plane id, if lbd answers (names are lbd's knowledge; the
    /// maps only hold ids). Empty when lbd is down.
    fn service_names(&self) -> std::collections::HashMap<u32, String> {
        self.get::<Vec<lb_admin::ServiceView>>("/v1/services")
            .map(|services| {
                services
                    .into_iter()
                    .filter_map(|s| Some((s.service_id?, s.name)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Prints `value` as JSON or `table` as text, per the chosen format.
    fn print<T: serde::Serialize>(&self, value: &T, table: impl FnOnce() -> String) -> Outcome {
        match self.format {
            Format::Json => {
                emit(&(serde_json::to_string_pretty(value).map_err(|e| e.to_string())? + "\n"))
            }
            Format::Table => emit(&table()),
        }
    }
}

fn open_pinned(dir: &Path) -> Result<lb_dataplane::maps::MapSet, String> {
    lb_dataplane::maps::MapSet::open_pinned(dir).map_err(|e| {
        let hint = if !dir.exists() {
            " (no pin directory: has lbd run on this node with node.pin_path set?)"
        } else {
            " (opening pinned maps needs root or CAP_BPF)"
        };
        format!("{e}{hint}")
    })
}

/// Writes to stdout; a closed pipe (`lbctl flows | head`) ends quietly.
fn emit(text: &str) -> Outcome {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing output: {e}")),
    }
}
