//! `repro chaos ...` (owned by the fault-injection work).
use clap::Subcommand;

use crate::CliError;

#[derive(Debug, Subcommand)]
pub enum ChaosCommand {
    /// List the experiments found.
    List,
}

pub fn dispatch(cmd: ChaosCommand) -> Result<i32, CliError> {
    match cmd {
        ChaosCommand::List => Err(CliError::new(2, "chaos: not built yet")),
    }
}
