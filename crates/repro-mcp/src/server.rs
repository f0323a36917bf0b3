//! The MCP server: tools (the dispatcher: a call becomes a [`Plan`](crate::tools::Plan) the executor runs as a child
//! `repro`), resources (run outputs), progress and cancellation.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

use crate::config::Settings;
use crate::exec::{self, Ended};
use crate::resources;
use crate::tools;

/// The runs `resources/list` shows (the newest); any other run is still readable by its URI.
const LISTED_RUNS: usize = 50;

/// The server's handler: cheap to clone (one per HTTP session).
#[derive(Debug, Clone)]
pub struct ReproServer {
    settings: Arc<Settings>,
    /// Set when the server ends: every call in flight stops its child.
    shutdown: Arc<tokio::sync::watch::Sender<bool>>,
    /// Calls in flight.
    active: Arc<AtomicUsize>,
}

/// Counts a call in flight while it lives.
struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ReproServer {
    pub fn new(settings: Settings) -> Self {
        ReproServer {
            settings: Arc::new(settings),
            shutdown: Arc::new(tokio::sync::watch::channel(false).0),
            active: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Stops every call in flight (as a cancellation would) and waits, at most `limit`, until they have
    /// answered; false when some were still running at the limit.
    pub async fn stop_calls(&self, limit: std::time::Duration) -> bool {
        self.shutdown.send_replace(true);
        let deadline = tokio::time::Instant::now() + limit;
        while self.active.load(Ordering::SeqCst) > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        true
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let call = tools::parse(&request.name, args).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let plan = tools::plan(&call, &self.settings).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let token = context.meta.get_progress_token();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<exec::Progress>();
        let peer = context.peer.clone();
        let forward = tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                let Some(token) = &token else { continue };
                let mut param = ProgressNotificationParam::new(token.clone(), p.progress).with_message(p.message);
                if let Some(t) = p.total {
                    param = param.with_total(t);
                }
                // A client that went away misses its progress; the call itself still ends normally.
                let _ = peer.notify_progress(param).await;
            }
        });
        self.active.fetch_add(1, Ordering::SeqCst);
        let _active = Active(Arc::clone(&self.active));
        let ct = context.ct.clone();
        let mut shutdown = self.shutdown.subscribe();
        let cancelled = async move {
            tokio::select! {
                _ = ct.cancelled() => {}
                // An error means the sender is gone: the server is ending anyway.
                _ = shutdown.wait_for(|stop| *stop) => {}
            }
        };
        let ended = exec::execute(&self.settings, &plan, cancelled, tx).await;
        // Every progress notification goes out before the result.
        let _ = forward.await;
        let ended = ended.map_err(|e| ErrorData::internal_error(error_chain(&e), None))?;
        Ok(self.result(plan.tool, &plan.argv, ended))
    }

    /// The tool result of a finished child: its JSON report as structured content, with the run ids and resources
    /// it names; or, when it printed no JSON (a usage or setup error), an error result with its message.
    fn result(&self, tool: &str, argv: &[String], ended: Ended) -> CallToolResult {
        let out = match ended {
            Ended::Exited(out) => out,
            Ended::Cancelled => {
                return CallToolResult::structured_error(json!({
                    "tool": tool, "cancelled": true,
                    "error": "cancelled by the client: every process of the call was stopped",
                }))
            }
            Ended::TimedOut(d) => {
                return CallToolResult::structured_error(json!({
                    "tool": tool, "timed_out": true,
                    "error": format!("timed out after {} s (timeout_secs): every process of the call was stopped",
                                     d.as_secs()),
                }))
            }
        };
        let parsed: Option<Value> = serde_json::from_slice(&out.stdout).ok();
        let subcommand = argv.first().map(String::as_str).unwrap_or("");
        let Some(report) = parsed else {
            let message = last_error(&out.stderr_tail).unwrap_or_else(|| "no output".to_string());
            return CallToolResult::structured_error(json!({
                "tool": tool,
                "exit_status": out.status,
                "error": format!("repro {subcommand} failed (exit status {}): {message}",
                                 out.status.map_or("none: killed by a signal".to_string(), |c| c.to_string())),
                "stderr_tail": out.stderr_tail,
            }));
        };
        let state = &self.settings.state_dir;
        let runs: Vec<Value> = resources::runs_in(state, &report)
            .into_iter()
            .map(|(id, dir)| {
                json!({
                    "id": id,
                    "dir": dir,
                    "stdout": resources::uri(&id, "stdout"),
                    "stderr": resources::uri(&id, "stderr"),
                    "changes": resources::uri(&id, "changes"),
                })
            })
            .collect();
        let run_id = runs.first().and_then(|r| r.get("id")).cloned().unwrap_or(Value::Null);
        CallToolResult::structured(json!({
            "tool": tool,
            "exit_status": out.status,
            "run_id": run_id,
            "runs": runs,
            "result": report,
            "stderr_tail": tail_chars(&out.stderr_tail, 4000),
        }))
    }
}

/// The last `repro: ...` line of a child's stderr (its error message), else its last line.
fn last_error(tail: &str) -> Option<String> {
    let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
    lines.iter().rev().find(|l| l.starts_with("repro: ")).or(lines.last()).map(|l| l.to_string())
}

/// At most the last `n` characters of `s`.
fn tail_chars(s: &str, n: usize) -> &str {
    let count = s.chars().count();
    if count <= n {
        return s;
    }
    let skip = s.char_indices().nth(count - n).map(|(i, _)| i).unwrap_or(0);
    &s[skip..]
}

/// An error and its sources, `a: b: c`.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

impl ServerHandler for ReproServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("repro", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "repro runs Linux commands in a hermetic, deterministic sandbox and records every run. Tools: run, \
                 verify (is it deterministic?), capture (a failure as a reproducer pack), replay, inspect, hunt \
                 (flaky failures across seeds, dates, orders), explain, shrink, diff_runs, env, attest. Commands \
                 are argv arrays. Run outputs are resources repro://runs/<id>/stdout, stderr and changes.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context).await.map(CallToolResponse::from)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut list = Vec::new();
        for id in resources::recent_runs(&self.settings.state_dir, LISTED_RUNS) {
            for (kind, _, mime) in resources::KINDS {
                list.push(Resource::new(resources::uri(&id, kind), format!("run {id} {kind}")).with_mime_type(mime));
            }
        }
        Ok(ListResourcesResult::with_all_items(list))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = resources::KINDS
            .iter()
            .map(|(kind, file, mime)| {
                ResourceTemplate::new(format!("repro://runs/{{id}}/{kind}"), format!("run {kind}"))
                    .with_description(format!("The {file} of a recorded run"))
                    .with_mime_type(*mime)
            })
            .collect();
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let (data, truncated, mime) = resources::read(&self.settings.state_dir, &uri)
            .map_err(|m| ErrorData::resource_not_found(m, Some(json!({ "uri": uri }))))?;
        let contents = match String::from_utf8(data) {
            Ok(text) => ResourceContents::text(text, uri.clone()).with_mime_type(mime),
            Err(e) => {
                use base64::Engine as _;
                let blob = base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
                ResourceContents::blob(blob, uri.clone()).with_mime_type("application/octet-stream")
            }
        };
        let contents = if truncated {
            let mut meta = rmcp::model::MetaObject::new();
            meta.insert("truncated".into(), json!(true));
            meta.insert("max_bytes".into(), json!(resources::MAX_BYTES));
            contents.with_meta(meta)
        } else {
            contents
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines() {
        assert_eq!(last_error("x\nrepro: --epoch 'q': bad\nmore\n").as_deref(), Some("repro: --epoch 'q': bad"));
        assert_eq!(last_error("only\n").as_deref(), Some("only"));
        assert_eq!(tail_chars("abcdef", 3), "def");
    }
}
