use std::path::PathBuf;

use repro_model::ExitCode;

/// Errors of the sandbox, each with the exit status it maps to.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A bad argument: names the argument and the expected form.
    #[error("{argument}: {message}")]
    Usage { argument: String, message: String },
    #[error("{what} '{path}': {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Sys(#[from] repro_sys::ns::SysError),
    /// Encoding a record or the init's configuration failed.
    #[error("cannot encode {what} as JSON: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// repro's own executable cannot be started for the init: its path holds a NUL byte.
    #[error("cannot start repro's init from '{}': the path contains a NUL byte", path.display())]
    ExePath { path: PathBuf },
    /// Entering the guest's user namespace (init `pid`) failed: writing its id maps, opening or idmapping a
    /// tree, passing the trees to the init.
    #[error("{what}: {source}")]
    Identity {
        pid: i32,
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A tree the guest must own cannot be idmapped for its user namespace (init `pid`).
    #[error(
        "cannot idmap {what} {} for the guest's user namespace ({source}): the guest's root would not own what \
         host root owns there; idmapped mounts need Linux 5.12 or later and a filesystem that supports them",
        path.display()
    )]
    Idmap {
        pid: i32,
        what: &'static str,
        path: PathBuf,
        #[source]
        source: repro_sys::ns::SysError,
    },
    /// A project file (`repro.toml`) that does not parse, or whose values are bad (exit 2).
    #[error(transparent)]
    ProjectFile(#[from] repro_model::project::ProjectFileError),
    #[error("no run matches '{0}' (see `repro runs`)")]
    NoSuchRun(String),
    #[error("run '{id}' is incomplete: it was interrupted before it finished")]
    Incomplete { id: String },
    #[error("corrupt run record '{path}': {message}")]
    Corrupt { path: PathBuf, message: String },
}

impl SandboxError {
    pub fn usage(argument: impl Into<String>, message: impl Into<String>) -> Self {
        SandboxError::Usage { argument: argument.into(), message: message.into() }
    }
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SandboxError::Io { what, path: path.into(), source }
    }
    /// The documented exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            SandboxError::Usage { .. }
            | SandboxError::NoSuchRun(_)
            | SandboxError::Incomplete { .. }
            | SandboxError::ProjectFile(_) => ExitCode::Usage.code(),
            SandboxError::Corrupt { .. } => ExitCode::Usage.code(),
            _ => ExitCode::Setup.code(),
        }
    }
}
