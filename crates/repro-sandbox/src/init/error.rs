//! The init's errors: each names the system call, the path or the descriptor that failed. The init reports one
//! as the run's setup failure (`RunOutcome::SetupFailed`, exit 125).

use std::fmt::Display;

use repro_sys::ns::SysError;

/// Why the init could not build the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A system call failed (it names the call and its arguments).
    #[error(transparent)]
    Sys(#[from] SysError),
    /// A file operation failed on `path`.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The configuration from `repro run` could not be decoded.
    #[error("{0}")]
    Config(#[from] serde_json::Error),
    /// A path, descriptor or setting the init refuses (or never received), and why.
    #[error("{0}")]
    Refused(String),
    /// What the init was building when `source` failed.
    #[error("{context}: {source}")]
    In {
        context: String,
        #[source]
        source: Box<InitError>,
    },
    /// `source`, with a note on what was being done.
    #[error("{source} ({note})")]
    Noted {
        #[source]
        source: Box<InitError>,
        note: String,
    },
}

impl InitError {
    /// A failed file operation `op` on `path`.
    pub fn io(op: &'static str, path: impl Display, source: std::io::Error) -> Self {
        InitError::Io { op, path: path.to_string(), source }
    }
    /// `self`, as part of `context`.
    pub fn within(self, context: impl Into<String>) -> Self {
        InitError::In { context: context.into(), source: Box::new(self) }
    }
    /// `self` with a note in parentheses.
    pub fn noted(self, note: impl Into<String>) -> Self {
        InitError::Noted { source: Box::new(self), note: note.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_failed() {
        let e = InitError::io("mkdir", "/r/tmp", std::io::Error::from_raw_os_error(28));
        assert!(e.to_string().starts_with("mkdir /r/tmp: No space left on device"), "{e}");
        let e = e.within("the writable layer (--disk)");
        assert!(e.to_string().starts_with("the writable layer (--disk): mkdir /r/tmp: "), "{e}");
        let e = InitError::Refused("x".into()).noted("a cgroup namespace");
        assert_eq!(e.to_string(), "x (a cgroup namespace)");
        assert!(std::error::Error::source(&e).is_some());
    }
}
