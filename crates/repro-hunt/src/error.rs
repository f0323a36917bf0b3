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
    /// SIGINT or SIGTERM stopped the search: what was found so far is reported, the exit status is 128 + it.
    #[error("interrupted by signal {signal}")]
    Interrupted { signal: i32 },
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
    /// or written (2 for a bad pack), 128 + the signal for an interrupted search, 125 when repro could not run or write.
    pub fn exit_code(&self) -> i32 {
        match self {
            HuntError::Usage { .. } => ExitCode::Usage.code(),
            HuntError::Pack { source, .. } => source.exit_code(),
            HuntError::Interrupted { signal } => ExitCode::signalled(*signal),
            HuntError::Spawn { .. } | HuntError::BadRecord { .. } | HuntError::Io { .. } => ExitCode::Setup.code(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn errors_keep_the_pack_s_status_and_their_source() {
        let open = repro_pack::PackError::Open {
            path: "p.repro".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        let e = HuntError::Pack { what: "cannot read PACK", path: "p.repro".into(), source: Box::new(open) };
        assert_eq!(e.exit_code(), ExitCode::Usage.code());
        assert!(e.to_string().starts_with("cannot read PACK 'p.repro': cannot open the pack 'p.repro'"), "{e}");
        assert!(e.source().and_then(|s| s.source()).is_some(), "the chain goes down to the io error");
        let e = HuntError::io("cannot create", "/w/blobs", std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert_eq!(e.exit_code(), ExitCode::Setup.code());
        assert!(e.to_string().starts_with("cannot create '/w/blobs': "), "{e}");
        assert_eq!(HuntError::usage("--seeds 'x'", "expected a count").exit_code(), 2);
    }
}
