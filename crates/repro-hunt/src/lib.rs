//! Flaky failures on demand: `repro hunt` runs a command under many configurations (seed, epoch, directory
//! order, environment, CPUs, hostname, clock step) until it fails; `repro explain` varies one input at a time to
//! say which decides the outcome, and bisects the date boundary.
//!
//! Every configuration is executed as its own `repro run --json` process, so runs are isolated from each other
//! and from the orchestrator, and parallel jobs need no shared state.

pub mod config;
pub mod explain;
pub mod hunt;
#[cfg(test)]
mod props;
pub mod runner;
pub mod shrink;

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
}

impl HuntError {
    pub fn usage(argument: impl Into<String>, message: impl Into<String>) -> Self {
        HuntError::Usage { argument: argument.into(), message: message.into() }
    }
}
