//! The errors of the MCP server: one enum for starting and serving, one for a tool call's input, one for running
//! the child `repro`.

use std::path::PathBuf;

/// Starting or serving failed.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("--listen {addr}: {reason}")]
    Listen { addr: String, reason: String },
    #[error("cannot listen on {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot read the current directory")]
    Cwd(#[source] std::io::Error),
    #[error("{flag} {path}: {reason}")]
    Setting { flag: &'static str, path: PathBuf, reason: String },
    #[error("the MCP session over stdio could not start: {0}")]
    Initialize(String),
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

/// A tool call's arguments cannot be turned into a `repro` command line. Shown to the client as a JSON-RPC
/// `invalid params` error.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// serde's message names the field: "unknown field `bind`, expected one of ...".
    #[error("tool `{tool}`: invalid arguments: {message}")]
    Invalid { tool: &'static str, message: String },
    #[error("tool `{tool}`: `{field}`: {message}")]
    Field { tool: &'static str, field: &'static str, message: String },
    /// The server's settings do not allow the tool at all.
    #[error("tool `{tool}`: {message}")]
    Refused { tool: &'static str, message: String },
}

/// The child `repro` could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot start {program}")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot wait for {program} (pid {pid})")]
    Wait {
        program: PathBuf,
        pid: u32,
        #[source]
        source: std::io::Error,
    },
}
