//! The one error type of the crate.
use std::path::PathBuf;

/// Everything that can go wrong in `repro chaos`, with the context needed to act on it.
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// A YAML file could not be parsed into the schema.
    #[error("{}:{line}:{column}: {field}: {message}", path.display())]
    Yaml {
        path: PathBuf,
        line: u64,
        column: u64,
        /// Dotted path of the field, e.g. `workloads[0].instances`.
        field: String,
        /// What was wrong and what was expected.
        message: String,
    },
    /// The file parsed but its content is inconsistent (unknown reference, bad value).
    #[error("{}:{line}:{column}: {field}: {message}", path.display())]
    Invalid { path: PathBuf, line: u64, column: u64, field: String, message: String },
    /// Two experiment files under one directory have the same id: `path` is the later one.
    #[error("{}:{line}:{column}: id: duplicate experiment id {id:?}: {} has it too (an id must name one experiment)", path.display(), first.display())]
    DuplicateId { path: PathBuf, line: u64, column: u64, id: String, first: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("experiment {0:?} not found (looked for a file, then for an id under {1})")]
    NotFound(String, String),
    #[error("adapter {0:?} not found (looked for a file, then under {1})")]
    AdapterNotFound(String, String),
    #[error("{}: not a run directory ({reason})", path.display())]
    NotARun { path: PathBuf, reason: String },
    /// A finished run that `repro chaos shrink` cannot work on (nothing failed, no schedule, ...).
    #[error("{}: cannot shrink this run: {reason}", path.display())]
    CannotShrink { path: PathBuf, reason: String },
    /// SIGINT (2) or SIGTERM (15) stopped a command that runs experiments several times.
    #[error("interrupted by signal {signal}")]
    Interrupted { signal: i32 },
    #[error("{0}")]
    Harness(String),
    /// The run's evidence (its timeline, its log) could not be written: the run cannot be trusted.
    #[error("cannot record the run's evidence: {}: {source}", path.display())]
    Evidence {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The Docker engine failed (connecting, an API call).
    #[error(transparent)]
    Docker(#[from] crate::docker::DockerError),
}

impl ChaosError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ChaosError::Io { path: path.into(), source }
    }
}

pub type Result<T, E = ChaosError> = std::result::Result<T, E>;
