//! Errors of `repro remote`: each names what was wrong and where.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("remote '{url}': {reason} (expected grpc://HOST:PORT or grpcs://HOST:PORT)")]
    BadUrl { url: String, reason: String },
    #[error("remote header '{header}': {reason} (expected NAME:VALUE, e.g. 'authorization: Bearer TOKEN')")]
    BadHeader { header: String, reason: String },
    #[error("remote instance name '{instance}': {reason}")]
    BadInstance { instance: String, reason: String },
    #[error(
        "no remote engine given: pass --remote grpc[s]://HOST:PORT or set url in the [remote] table of repro.toml"
    )]
    NoRemote,
    #[error("pack '{pack}': {path}: {reason}")]
    Tree { pack: PathBuf, path: String, reason: String },
    #[error(transparent)]
    Pack(#[from] repro_pack::PackError),
    #[error("{what} '{path}': {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("remote '{uri}': {detail}")]
    Connect { uri: String, detail: String },
    #[error("remote '{uri}': {rpc} failed: {code:?}: {message}")]
    Rpc { uri: String, rpc: &'static str, code: tonic::Code, message: String },
    #[error("remote '{uri}': the server refused blob {hash}/{size}: {message}")]
    BlobRefused { uri: String, hash: String, size: i64, message: String },
    #[error("remote '{uri}': {detail}")]
    Protocol { uri: String, detail: String },
    #[error("remote '{uri}': no result within {secs} s (--timeout): is a `repro worker` serving this instance?")]
    Timeout { uri: String, secs: u64 },
}

impl RemoteError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RemoteError::Io { what, path: path.into(), source }
    }
}
