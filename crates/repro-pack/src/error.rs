use std::path::PathBuf;

use repro_model::manifest::ManifestError;
use repro_model::ExitCode;

/// Errors of reading, writing and checking reproducer packs. Every variant names the pack or file and what is
/// wrong with it; all of them are bad input for the command line (exit 2) except [`PackError::Io`] on writing.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("{what} '{path}': {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the pack '{path}': {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pack '{path}' is truncated: {detail}")]
    Truncated { path: PathBuf, detail: String },
    #[error("pack '{path}' is corrupt: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error("pack '{path}': blob {entry} does not match its digest (its content hashes to {actual}): the pack was tampered with or damaged")]
    DigestMismatch { path: PathBuf, entry: String, actual: String },
    #[error("pack '{path}': {field} refers to blob {digest}, which is not in the pack{store}")]
    MissingBlob { path: PathBuf, field: String, digest: String, store: String },
    #[error("pack '{path}': blob {digest} has {actual} bytes but {field} says {expected}")]
    SizeMismatch { path: PathBuf, field: String, digest: String, expected: u64, actual: u64 },
    /// The manifest is not JSON, not of the manifest's shape, or a field of it is refused (named by the source).
    #[error("pack '{path}': manifest.json: {source}")]
    Manifest {
        path: PathBuf,
        #[source]
        source: ManifestError,
    },
    #[error("pack '{path}' has format {found}, but this repro reads formats 1 to {supported}: upgrade repro")]
    UnsupportedFormat { path: PathBuf, found: u32, supported: u32 },
    /// The pack's tapes are in a format this repro does not read (`tapes.version`).
    #[error("pack '{path}': tapes.version {found}, this repro reads tape version {supported}: upgrade repro")]
    UnsupportedTapes { path: PathBuf, found: u64, supported: u32 },
    #[error("pack '{path}': unexpected entry '{entry}' ({why})")]
    UnexpectedEntry { path: PathBuf, entry: String, why: &'static str },
    /// The run itself could not be set up (carries the sandbox's exit status).
    #[error("{0}")]
    Sandbox(#[from] repro_sandbox::SandboxError),
    /// A bad argument: names it.
    #[error("{argument}: {message}")]
    Usage { argument: String, message: String },
    /// An entry of the tar stream that a pack may not hold (a link, a device, an absolute or `..` name...).
    #[error("pack '{path}': entry '{entry}': {why}")]
    BadEntry { path: PathBuf, entry: String, why: String },
    /// The pack is bigger than the limits allow (checked before anything is written).
    #[error("pack '{path}': {what}, more than the limit of {limit} ({flag} raises it)")]
    Limit { path: PathBuf, what: String, limit: u64, flag: &'static str },
    /// The pack does not fit where it would be unpacked (checked before anything is written).
    #[error("pack '{path}': unpacking needs {needed} {unit} but {dir} has only {free} free; nothing was written")]
    NoSpace { path: PathBuf, dir: PathBuf, needed: u64, free: u64, unit: &'static str },
    #[error("pack '{path}': tape {tape}: {source}")]
    Tape { path: PathBuf, tape: PathBuf, source: repro_model::tape::TapeError },
    #[error("cannot pack '{path}': {detail}")]
    Closure { path: PathBuf, detail: String },
}

impl PackError {
    /// The documented exit status: 2 for bad input (a damaged pack, a bad argument), 125 when repro could not
    /// write or set up, the sandbox's own status for its errors.
    pub fn exit_code(&self) -> i32 {
        match self {
            PackError::Sandbox(e) => e.exit_code(),
            PackError::Io { .. } | PackError::Closure { .. } | PackError::NoSpace { .. } => ExitCode::Setup.code(),
            _ => ExitCode::Usage.code(),
        }
    }

    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PackError::Io { what, path: path.into(), source }
    }
}
