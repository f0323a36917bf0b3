//! Flaky failures on demand: `repro hunt` runs a command under many configurations (seed, epoch, directory
//! order, environment, CPUs, hostname, clock step) until it fails; `repro explain` varies one input at a time to
//! say which decides the outcome, and bisects the date boundary.
//!
//! Every configuration is executed as its own `repro run --json` process, so runs are isolated from each other
//! and from the orchestrator, and parallel jobs need no shared state.

pub mod config;
pub mod explain;
pub mod hunt;
pub mod runner;
pub mod shrink;

use std::path::PathBuf;

use repro_model::ExitCode;

/// Errors of hunting and explaining.
#[derive(Debug, thiserror::Error)]
pub enum HuntError {
    /// A bad argument: names it and the expected form.
    #[error("{argument}: {message}")]
    Usage { argument: String, message: String },
    #[error("cannot run {what}: {source}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("run {config} gave no usable record: {message}")]
    BadRecord { config: String, message: String },
    /// A file or directory of hunt's own work (shrink's scratch directory, a run's output) failed.
    #[error("{what} '{path}': {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing a pack failed: the pack's own error, with its exit status.
    #[error("{what} '{path}': {source}")]
    Pack {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: Box<repro_pack::PackError>,
    },
}

impl HuntError {
    pub fn usage(argument: impl Into<String>, message: impl Into<String>) -> Self {
        HuntError::Usage { argument: argument.into(), message: message.into() }
    }

    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HuntError::Io { what, path: path.into(), source }
    }

    /// The documented exit status: 2 for a bad argument, the pack's own status for a pack that cannot be read
    /// or written (2 for a bad pack), 125 when repro could not run or write.
    pub fn exit_code(&self) -> i32 {
        match self {
            HuntError::Usage { .. } => ExitCode::Usage.code(),
            HuntError::Pack { source, .. } => source.exit_code(),
            HuntError::Spawn { .. } | HuntError::BadRecord { .. } | HuntError::Io { .. } => ExitCode::Setup.code(),
        }
    }
}
