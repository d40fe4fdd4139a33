//! `lbctl config check FILE`.

use std::path::PathBuf;

use clap::Subcommand;

use super::{Context, Outcome};

/// Configuration commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a configuration file without touching the data plane.
    Check {
        /// The file to check.
        file: PathBuf,
    },
}

/// What `config check` reports.
#[derive(Debug, serde::Serialize)]
struct Checked<'a> {
    file: &'a std::path::Path,
    services: usize,
}

/// Runs a config command.
pub fn run(ctx: &Context, command: &Command) -> Outcome {
    match command {
        Command::Check { file } => {
            let cfg =
                lb_model::config::load(file, lb_l7::check_routes).map_err(|e| e.to_string())?;
            let checked = Checked {
                file,
                services: cfg.services.len(),
            };
            ctx.print(&checked, || {
                format!("{}: ok ({} services)\n", file.display(), checked.services)
            })
        }
    }
}
