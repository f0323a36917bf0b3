//! `repro remote replay PACK`: the pack's Action is uploaded, looked up in the Action Cache (unless `no_cache`),
//! else executed (Execute, then WaitExecution while the stream ends before the Operation is done) within a
//! deadline; the result's stdout is the remote replay's JSON report.

use crate::{action_of_pack, Remote, RemoteError};
use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use bazel_remote_apis::google::longrunning::{operation, Operation};
use prost::Message;
use repro_model::remote::{RemoteEndpoint, RemoteReplay};
use std::path::Path;
use std::time::{Duration, Instant};

pub struct ReplayRemoteOptions {
    /// Skip the Action Cache (lookup and Execute's own lookup).
    pub no_cache: bool,
    /// How long to wait for the result.
    pub timeout: Duration,
}

impl Remote {
    /// Execute, following the Operation to its ExecuteResponse within `timeout`.
    pub fn execute(
        &self,
        action: &re::Digest,
        skip_cache: bool,
        timeout: Duration,
    ) -> Result<re::ExecuteResponse, RemoteError> {
        let mut c = re::execution_client::ExecutionClient::new(self.channel.clone());
        let r = re::ExecuteRequest {
            instance_name: self.endpoint.instance.clone(),
            skip_cache_lookup: skip_cache,
            action_digest: Some(action.clone()),
            digest_function: re::digest_function::Value::Sha256 as i32,
            ..Default::default()
        };
        let follow = async {
            let mut stream = c.execute(self.req(r)).await.map_err(self.rpc_err("Execute"))?.into_inner();
            let mut rpc = "Execute";
            loop {
                let mut name = None;
                while let Some(op) = stream.message().await.map_err(self.rpc_err(rpc))? {
                    if op.done {
                        return self.response_of(op);
                    }
                    name = Some(op.name);
                }
                // The stream ended before the Operation was done: wait on it by name.
                let name = name.ok_or_else(|| RemoteError::Protocol {
                    uri: self.uri.clone(),
                    detail: format!("{rpc} ended without an Operation"),
                })?;
                rpc = "WaitExecution";
                let w = re::WaitExecutionRequest { name };
                stream = c.wait_execution(self.req(w)).await.map_err(self.rpc_err(rpc))?.into_inner();
            }
        };
        match self.rt.block_on(async { tokio::time::timeout(timeout, follow).await }) {
            Ok(r) => r,
            Err(_) => Err(RemoteError::Timeout { uri: self.uri.clone(), secs: timeout.as_secs() }),
        }
    }

    fn response_of(&self, op: Operation) -> Result<re::ExecuteResponse, RemoteError> {
        let bad = |detail: String| RemoteError::Protocol { uri: self.uri.clone(), detail };
        let resp = match op.result {
            Some(operation::Result::Response(any)) => re::ExecuteResponse::decode(any.value.as_ref())
                .map_err(|e| bad(format!("Operation {}: not an ExecuteResponse: {e}", op.name)))?,
            Some(operation::Result::Error(st)) => {
                return Err(bad(format!("Operation {} failed: code {}: {}", op.name, st.code, st.message)))
            }
            None => return Err(bad(format!("Operation {} is done without a result", op.name))),
        };
        if let Some(st) = resp.status.as_ref().filter(|s| s.code != 0) {
            return Err(bad(format!("the execution failed: code {}: {}", st.code, st.message)));
        }
        Ok(resp)
    }
}

/// Uploads the pack's Action, then takes its result from the Action Cache or executes it.
pub fn replay(ep: &RemoteEndpoint, pack: &Path, opts: &ReplayRemoteOptions) -> Result<RemoteReplay, RemoteError> {
    let t = Instant::now();
    let base = repro_pack::store::cache_dir();
    std::fs::create_dir_all(&base).map_err(|e| RemoteError::io("cannot create", &base, e))?;
    let work = tempfile::Builder::new()
        .prefix("remote-replay-")
        .tempdir_in(&base)
        .map_err(|e| RemoteError::io("cannot create a directory in", &base, e))?;
    let a = action_of_pack(pack, work.path())?;
    let r = Remote::connect(ep)?;
    r.upload(&a.blobs)?;
    let cached = if opts.no_cache { None } else { r.get_action_result(&a.action_digest)? };
    let (result, from_cache) = match cached {
        Some(res) => (res, true),
        None => {
            let resp = r.execute(&a.action_digest, opts.no_cache, opts.timeout)?;
            let res = resp.result.clone().ok_or_else(|| RemoteError::Protocol {
                uri: r.uri.clone(),
                detail: "the ExecuteResponse has no ActionResult".into(),
            })?;
            (res, resp.cached_result)
        }
    };
    let text = |d: &Option<re::Digest>| -> Result<String, RemoteError> {
        match d {
            Some(d) => Ok(String::from_utf8_lossy(&r.read_blob(d)?).into_owned()),
            None => Ok(String::new()),
        }
    };
    let report = text(&result.stdout_digest)?;
    let stderr = text(&result.stderr_digest)?;
    let json: Option<serde_json::Value> = serde_json::from_str(&report).ok();
    let d = &a.action_digest;
    Ok(RemoteReplay {
        pack: pack.to_path_buf(),
        instance: ep.instance.clone(),
        action_digest: format!("{}/{}", d.hash, d.size_bytes),
        cached: from_cache,
        exit_code: result.exit_code,
        reproduced: json.as_ref().and_then(|v| v.get("reproduced")).and_then(|v| v.as_u64()),
        runs: json.as_ref().and_then(|v| v.get("runs")).and_then(|v| v.as_array()).map(|a| a.len() as u64),
        report,
        stderr,
        elapsed_ms: t.elapsed().as_millis() as u64,
    })
}
