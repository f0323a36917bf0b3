//! The `repro` command line: clap definitions and human/JSON output. The work itself is done by the library
//! crates; this crate only parses, dispatches and prints.

mod chaos;
mod error;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

pub use error::CliError;

/// Exit status for a usage error (bad option or argument).
pub const EXIT_USAGE: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "repro",
    version,
    about = "Make any failing Linux command reproducible on demand",
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fault-injection experiments: run, list, show, preflight, evaluate.
    #[command(subcommand)]
    Chaos(chaos::ChaosCommand),
    /// Print a shell completion script.
    Completions {
        /// The shell: bash, zsh or fish.
        shell: clap_complete::Shell,
    },
}

/// Entry point used by the `repro` binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(err) => {
            eprintln!("repro: {err}");
            ExitCode::from(err.code.clamp(0, 255) as u8)
        }
    }
}

fn dispatch(cli: Cli) -> Result<i32, CliError> {
    match cli.command {
        Command::Chaos(cmd) => chaos::dispatch(cmd),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "repro", &mut std::io::stdout());
            Ok(0)
        }
    }
}
