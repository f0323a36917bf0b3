//! Where a Remote Execution API v2 engine is (`--remote grpc[s]://HOST:PORT`, `[remote]` in repro.toml).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How the channel to the engine is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteTransport {
    /// `grpc://`: plain HTTP/2 (loopback, a trusted network).
    Plain,
    /// `grpcs://`: TLS, the server checked against the system's roots or `ca_cert`.
    Tls,
}

/// A checked remote endpoint: every field validated by `repro_remote::config`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteEndpoint {
    pub transport: RemoteTransport,
    /// Host name or address (an IPv6 address without brackets).
    pub host: String,
    pub port: u16,
    /// The REAPI instance name (`""` is the server's default instance).
    pub instance: String,
    /// Extra request headers (e.g. `authorization: Bearer ...`), lowercase names, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// A PEM file of the certificate authority for `grpcs://`, instead of the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<PathBuf>,
}

impl RemoteEndpoint {
    /// The endpoint as the user writes it (`grpc://HOST:PORT`, `grpcs://HOST:PORT`), for messages.
    pub fn url(&self) -> String {
        let scheme = match self.transport {
            RemoteTransport::Plain => "grpc",
            RemoteTransport::Tls => "grpcs",
        };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }

    /// The URI tonic connects to (`http://` or `https://`).
    pub fn uri(&self) -> String {
        let scheme = match self.transport {
            RemoteTransport::Plain => "http",
            RemoteTransport::Tls => "https",
        };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }
}

/// What `repro remote check` found (GetCapabilities).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteCheck {
    pub url: String,
    pub instance: String,
    /// `major.minor` of the lowest and highest API version the server speaks.
    pub api_low: String,
    pub api_high: String,
    /// The CAS's digest functions (`SHA256`, ...).
    pub digest_functions: Vec<String>,
    /// The largest BatchUpdateBlobs/BatchReadBlobs request, 0 for no limit.
    pub max_batch_total_size_bytes: i64,
    pub action_cache_updates: bool,
    /// Whether the instance executes Actions.
    pub execution: bool,
}

/// What `repro remote upload` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteUpload {
    pub pack: PathBuf,
    pub instance: String,
    /// `HASH/SIZE` of the Action (SHA-256).
    pub action_digest: String,
    pub input_root_digest: String,
    pub blobs: usize,
    pub bytes: u64,
    pub already_present: usize,
    pub batched: usize,
    pub streamed: usize,
    pub sent_bytes: u64,
    /// The exit code of the Action Cache's result for this Action, if it has one.
    pub cached_exit_code: Option<i32>,
}

/// What `repro remote replay` got: the replay's result from the engine (run by a `repro worker`), or from the
/// Action Cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemoteReplay {
    pub pack: PathBuf,
    pub instance: String,
    /// `HASH/SIZE` of the Action (SHA-256).
    pub action_digest: String,
    /// The result came from the Action Cache (no execution).
    pub cached: bool,
    /// The remote `repro replay`'s exit code (0: the failure was reproduced, as locally).
    pub exit_code: i32,
    /// From the replay's JSON report: how many runs reproduced the recorded failure, of how many.
    pub reproduced: Option<u64>,
    pub runs: Option<u64>,
    /// The replay's JSON report (its stdout) and its stderr, as the worker uploaded them.
    pub report: String,
    pub stderr: String,
    /// Wall time from the upload's start to the result, in milliseconds.
    pub elapsed_ms: u64,
}

/// What a `repro worker` did before it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSummary {
    /// Leases completed (with a result or an error status).
    pub leases: u64,
    /// It stopped at SIGINT/SIGTERM.
    pub interrupted: bool,
}
