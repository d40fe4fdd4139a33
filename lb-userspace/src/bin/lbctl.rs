//! `lbctl`: inspect and explain what the node's load balancer does.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use lb_userspace::config;

/// Inspect and explain the load balancer on this node.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file without touching the data plane.
    Check {
        /// The file to check.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Config {
            command: ConfigCommand::Check { file },
        } => match config::load(&file) {
            Ok(cfg) => {
                println!("{}: ok ({} services)", file.display(), cfg.services.len());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("lbctl: {err}");
                ExitCode::FAILURE
            }
        },
    }
}
