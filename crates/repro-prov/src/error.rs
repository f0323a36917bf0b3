//! The crate's one error enum: each variant names the file, field or key it is about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ProvError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file (or a line of it) that is not what it should be.
    #[error("{path}{}: {reason}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Parse { path: PathBuf, line: Option<usize>, reason: String },
    /// A JSON document that does not parse or has the wrong shape.
    #[error("{path} is not a valid {what}")]
    Json {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A run directory or pack without an environment record.
    #[error(
        "{path} records no environment (a run needs `repro run --record-inputs`; a pack written by an older repro \
         has none: capture it again)"
    )]
    NoInputs { path: PathBuf },
    /// A pack that cannot be read, or a run that could not be made.
    #[error(transparent)]
    Pack(#[from] repro_pack::PackError),
    /// A command-line target that is neither a path nor a run.
    #[error("{arg}: not a run directory, pack or environment document, nor a run id ({reason})")]
    Target { arg: String, reason: String },
    /// A document larger than this crate reads.
    #[error("{path} is larger than {limit} bytes ({what})")]
    TooLarge { path: PathBuf, what: &'static str, limit: u64 },
    /// A key file that is not the key expected (attest: an ed25519 key, PKCS#8 or SPKI PEM).
    #[error("{path}: {reason}")]
    Key { path: PathBuf, reason: String },
    /// An attestation that does not verify: a bad signature, another key, a subject that does not match.
    #[error("{path}: not verified: {reason}")]
    Unverified { path: PathBuf, reason: String },
}

/// Why a DSSE payload is not an in-toto statement repro reads.
#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    #[error("the payload is not an in-toto statement: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the statement's _type is '{}' (repro reads in-toto Statement v1, '{expected}')", found.escape_debug())]
    Type { found: String, expected: &'static str },
    #[error("the statement has no subject")]
    NoSubject,
    #[error("{count} subjects (at most {limit})")]
    TooManySubjects { count: usize, limit: usize },
    #[error("subject[{index}] '{}' has no digest", name.escape_debug())]
    NoDigest { index: usize, name: String },
    #[error("subject[{index}] '{}': its {alg} '{}' is not 64 lowercase hex digits", name.escape_debug(), value.escape_debug())]
    BadDigest { index: usize, name: String, alg: String, value: String },
    #[error("the statement has no predicateType")]
    NoPredicateType,
}

/// Why a key file is not the PEM block expected.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("the file is empty")]
    Empty,
    #[error("no '-----BEGIN ...-----' line: not a PEM file")]
    NotPem,
    #[error("a malformed PEM header '{}'", line.escape_debug())]
    MalformedHeader { line: String },
    #[error("an OpenSSH public key line, not PEM")]
    OpenSsh,
    #[error("'{}' does not close '-----BEGIN {label}-----'", line.escape_debug())]
    WrongEnd { line: String, label: String },
    #[error("PEM headers ('{}'): an encrypted key, which repro does not read", line.escape_debug())]
    Encrypted { line: String },
    #[error("no '-----END {label}-----' line: the file is truncated")]
    Truncated { label: String },
    #[error("the PEM body is not base64 ({0}): the file is corrupt or truncated")]
    NotBase64(#[source] base64::DecodeError),
    #[error("the PEM block '{label}' is empty")]
    EmptyBlock { label: String },
}

/// `error` followed by each cause in its source chain, joined with ": ".
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let m = e.to_string();
        if !m.is_empty() && !text.contains(&m) {
            text.push_str(": ");
            text.push_str(&m);
        }
        cause = e.source();
    }
    text
}

impl ProvError {
    /// The documented exit status for this error (repro_model::ExitCode): bad input 2, a pack's own code, a
    /// failed write 125.
    pub fn exit_code(&self) -> i32 {
        use repro_model::ExitCode;
        match self {
            ProvError::Write { .. } => ExitCode::Setup.code(),
            ProvError::Pack(e) => e.exit_code(),
            ProvError::Unverified { .. } => ExitCode::Failure.code(),
            _ => ExitCode::Usage.code(),
        }
    }
}
