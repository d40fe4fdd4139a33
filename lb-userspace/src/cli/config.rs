//! `lbctl config check FILE`.

use std::path::PathBuf;

use clap::Subcommand;

use super::{Outcome, emit};

/// Configuration commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a configuration file without touching the data plane.
    Check {
        /// The file to check.
        file: PathBuf,
    },
}

/// Runs a config command.
pub fn run(command: &Command) -> Outcome {
    match command {
        Command::Check { file } => {
            let cfg = crate::config::load(file).map_err(|e| e.to_string())?;
            emit(&format!(
                "{}: ok ({} services)\n",
                file.display(),
                cfg.services.len()
            ))
        }
    }
}
