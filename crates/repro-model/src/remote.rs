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
