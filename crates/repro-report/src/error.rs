//! The one error type of the crate.
use std::path::PathBuf;

/// What can go wrong while reading a run directory or writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{}: not a run directory ({reason})", path.display())]
    NotARun { path: PathBuf, reason: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Malformed { path: PathBuf, message: String },
    #[error(transparent)]
    Chaos(#[from] repro_chaos::ChaosError),
    #[error("dashboard: no run directories given")]
    NoRuns,
    #[error("dashboard: cannot listen on 127.0.0.1:{port}: {source}")]
    Listen {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("dashboard: accept: {0}")]
    Accept(#[source] std::io::Error),
    #[error("dashboard: answering {peer}: {source}")]
    Answer {
        peer: String,
        #[source]
        source: std::io::Error,
    },
}

impl ReportError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ReportError::Io { path: path.into(), source }
    }
}

pub type Result<T, E = ReportError> = std::result::Result<T, E>;
