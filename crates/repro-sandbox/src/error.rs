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
    #[error("sandbox setup failed: {0}")]
    Setup(String),
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
            SandboxError::Usage { .. } | SandboxError::NoSuchRun(_) | SandboxError::Incomplete { .. } => {
                ExitCode::Usage.code()
            }
            SandboxError::Corrupt { .. } => ExitCode::Usage.code(),
            _ => ExitCode::Setup.code(),
        }
    }
}
