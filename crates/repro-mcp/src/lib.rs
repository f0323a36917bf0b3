//! `repro mcp`: a Model Context Protocol server over stdio or streamable HTTP, built on rmcp.
//!
//! The server is a dispatcher: each tool call's typed input ([`tools`]) becomes the command line of the matching
//! `repro` subcommand with `--json`, which the executor ([`exec`]) runs as a child in its own process group, so
//! every tool runs in the same sandbox as the command line and the server runs nothing on the host itself. The
//! limits the server was started with ([`Settings`]) go to every child; tool inputs cannot add to them.

pub mod config;
pub mod error;
pub mod exec;
pub mod resources;
pub mod server;
pub mod tools;

use std::net::SocketAddr;
use std::time::Duration;

pub use config::{ProjectConfig, Settings};
pub use error::{ExecError, InputError, McpError};
pub use server::ReproServer;

/// Where the server talks to its client.
#[derive(Debug, Clone)]
pub enum Transport {
    /// JSON-RPC lines on stdin/stdout (the default; stderr stays free for logs).
    Stdio,
    /// Streamable HTTP on a loopback address.
    Http(SocketAddr),
}

/// Checks a `--listen` address: an IP and port on the loopback interface (the tools run commands: the server
/// must not be reachable from other machines).
pub fn parse_listen(value: &str) -> Result<SocketAddr, McpError> {
    let addr: SocketAddr = value.parse().map_err(|_| McpError::Listen {
        addr: value.to_string(),
        reason: "expected IP:PORT, e.g. 127.0.0.1:8765".to_string(),
    })?;
    if !addr.ip().is_loopback() {
        return Err(McpError::Listen {
            addr: value.to_string(),
            reason: "only a loopback address (127.0.0.1, ::1) is served: the tools run commands".to_string(),
        });
    }
    Ok(addr)
}

/// Serves until the client closes stdin (stdio), or until SIGINT/SIGTERM. `on_listening` is told the HTTP
/// address once it is bound (port 0 picks a free one). Calls still running at the end are stopped.
pub fn serve(settings: Settings, transport: Transport, on_listening: impl FnOnce(SocketAddr)) -> Result<(), McpError> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(McpError::Runtime)?;
    let server = ReproServer::new(settings);
    let handle = server.clone();
    let result = rt.block_on(async move {
        let serving = async {
            match transport {
                Transport::Stdio => serve_stdio(server).await,
                Transport::Http(addr) => serve_http(server, addr, on_listening).await,
            }
        };
        let result = tokio::select! {
            r = serving => r,
            _ = shutdown_signal() => Ok(()),
        };
        // The calls still running stop their children as on a cancellation (SIGTERM, SIGKILL after 10 s).
        handle.stop_calls(Duration::from_secs(15)).await;
        result
    });
    // What is left (stdin's reader is a blocking thread that may never return) is dropped; a call's future that
    // is dropped still stops its process group (exec's guard).
    rt.shutdown_timeout(Duration::from_millis(500));
    result
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        // Without handlers the default action (termination) still ends the server.
        _ => std::future::pending().await,
    }
}

async fn serve_stdio(server: ReproServer) -> Result<(), McpError> {
    use rmcp::ServiceExt;
    let running =
        server.serve(rmcp::transport::stdio()).await.map_err(|e| McpError::Initialize(server::error_chain(&e)))?;
    running.waiting().await.map_err(|e| McpError::Session(e.to_string()))?;
    Ok(())
}

async fn serve_http(
    server: ReproServer,
    addr: SocketAddr,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), McpError> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| McpError::Bind { addr, source })?;
    let bound = listener.local_addr().map_err(|source| McpError::Bind { addr, source })?;
    let service = TowerToHyperService::new(StreamableHttpService::new(
        move || Ok(server.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    ));
    on_listening(bound);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(c) => c,
            // A failed accept (a connection reset before it was taken, EMFILE) loses that connection only.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let service = service.clone();
        tokio::spawn(async move {
            // A connection's error (the client went away) ends that connection only.
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_is_loopback_only() {
        assert!(parse_listen("127.0.0.1:0").is_ok());
        assert!(parse_listen("[::1]:8080").is_ok());
        assert!(parse_listen("0.0.0.0:8080").is_err());
        assert!(parse_listen("localhost").is_err());
    }
}
