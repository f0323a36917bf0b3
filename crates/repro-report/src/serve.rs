//! `repro chaos dashboard`: a small HTTP/1.1 server on 127.0.0.1 that serves a page comparing runs
//! (`/`) and each run's full report (`/run/<n>/`). Run directories are read again on every request, so
//! a run still in progress shows its latest state.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{ReportError, Result};
use crate::html;
use crate::run::Run;

pub struct Dashboard {
    runs: Vec<PathBuf>,
    listener: TcpListener,
}

impl Dashboard {
    /// Checks that every run directory can be read, then binds 127.0.0.1:`port` (0: any free port).
    pub fn bind(runs: Vec<PathBuf>, port: u16) -> Result<Dashboard> {
        if runs.is_empty() {
            return Err(ReportError::NoRuns);
        }
        for r in &runs {
            Run::read(r)?;
        }
        let listener = TcpListener::bind(("127.0.0.1", port)).map_err(|source| ReportError::Listen { port, source })?;
        Ok(Dashboard { runs, listener })
    }

    pub fn url(&self) -> String {
        match self.listener.local_addr() {
            Ok(a) => format!("http://{a}/"),
            Err(_) => "http://127.0.0.1/".into(),
        }
    }

    /// Serves until the process is interrupted. A connection that fails (a client that hangs up, a request
    /// that times out) ends only itself: it is given to `on_error` and the server goes on.
    pub fn serve(self, mut on_error: impl FnMut(ReportError)) -> Result<()> {
        for conn in self.listener.incoming() {
            let stream = conn.map_err(ReportError::Accept)?;
            let peer = match stream.peer_addr() {
                Ok(a) => a.to_string(),
                Err(e) => format!("a client ({e})"),
            };
            if let Err(source) = self.handle(stream) {
                on_error(ReportError::Answer { peer, source });
            }
        }
        Ok(())
    }

    /// The page for `path`: (status, content type, body).
    pub fn page(&self, path: &str) -> (u16, &'static str, String) {
        let path = path.split('?').next().unwrap_or("/");
        if path == "/" || path == "/index.html" {
            let runs: Vec<Result<Run>> = self.runs.iter().map(|r| Run::read(r)).collect();
            let links: Vec<String> = (1..=self.runs.len()).map(|i| format!("/run/{i}/")).collect();
            return (200, "text/html; charset=utf-8", html::dashboard(&runs, &links));
        }
        if let Some(rest) = path.strip_prefix("/run/") {
            let n = rest.trim_end_matches('/').trim_end_matches("report.html").trim_end_matches('/');
            if let Some(dir) = n.parse::<usize>().ok().and_then(|i| i.checked_sub(1)).and_then(|i| self.runs.get(i)) {
                return match Run::read(dir) {
                    Ok(run) => (200, "text/html; charset=utf-8", html::report(&run)),
                    Err(e) => (500, "text/plain; charset=utf-8", format!("{e}\n")),
                };
            }
        }
        (404, "text/plain; charset=utf-8", format!("not found: {path}\n"))
    }

    fn handle(&self, mut s: TcpStream) -> std::io::Result<()> {
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 2048];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 64 * 1024 {
            let n = s.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&buf);
        let mut parts = text.lines().next().unwrap_or("").split_whitespace();
        let method = parts.next().unwrap_or("");
        let target = parts.next().unwrap_or("/");
        let (status, ctype, body) = if method == "GET" || method == "HEAD" {
            self.page(target)
        } else {
            (405, "text/plain; charset=utf-8", "only GET\n".to_string())
        };
        let reason = match status {
            200 => "OK",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Internal Server Error",
        };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes())?;
        if method != "HEAD" {
            s.write_all(body.as_bytes())?;
        }
        s.flush()
    }
}
