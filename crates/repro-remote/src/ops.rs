//! `repro remote check` and `repro remote upload`: the work behind the CLI.

use crate::{action_of_pack, Remote, RemoteError};
use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use repro_model::remote::{RemoteCheck, RemoteEndpoint, RemoteUpload};
use std::path::Path;

impl RemoteError {
    /// The exit code: 2 for bad input (endpoint, pack), 125 when the engine cannot be reached or refuses.
    pub fn exit_code(&self) -> i32 {
        use repro_model::ExitCode;
        match self {
            RemoteError::Pack(e) => e.exit_code(),
            RemoteError::BadUrl { .. }
            | RemoteError::BadHeader { .. }
            | RemoteError::BadInstance { .. }
            | RemoteError::NoRemote
            | RemoteError::Tree { .. } => ExitCode::Usage.code(),
            _ => ExitCode::Setup.code(),
        }
    }
}

fn version(v: Option<&bazel_remote_apis::build::bazel::semver::SemVer>) -> String {
    v.map(|v| format!("{}.{}", v.major, v.minor)).unwrap_or_else(|| "?".into())
}

/// GetCapabilities of the endpoint's instance.
pub fn check(ep: &RemoteEndpoint) -> Result<RemoteCheck, RemoteError> {
    let r = Remote::connect(ep)?;
    let caps = r.capabilities()?;
    let cache = caps.cache_capabilities.clone().unwrap_or_default();
    let name = |f: &i32| {
        re::digest_function::Value::try_from(*f).map(|v| v.as_str_name().to_string()).unwrap_or_else(|_| f.to_string())
    };
    Ok(RemoteCheck {
        url: ep.url(),
        instance: ep.instance.clone(),
        api_low: version(caps.low_api_version.as_ref()),
        api_high: version(caps.high_api_version.as_ref()),
        digest_functions: cache.digest_functions.iter().map(name).collect(),
        max_batch_total_size_bytes: cache.max_batch_total_size_bytes,
        action_cache_updates: cache.action_cache_update_capabilities.is_some_and(|c| c.update_enabled),
        execution: caps.execution_capabilities.is_some_and(|e| e.exec_enabled),
    })
}

/// Uploads a pack's Action and everything it names; says whether the Action Cache already has a result.
pub fn upload(ep: &RemoteEndpoint, pack: &Path) -> Result<RemoteUpload, RemoteError> {
    let work = tempfile_dir()?;
    let a = action_of_pack(pack, work.path())?;
    let r = Remote::connect(ep)?;
    let stats = r.upload(&a.blobs)?;
    let cached = r.get_action_result(&a.action_digest)?;
    let d = |d: &re::Digest| format!("{}/{}", d.hash, d.size_bytes);
    Ok(RemoteUpload {
        pack: pack.to_path_buf(),
        instance: ep.instance.clone(),
        action_digest: d(&a.action_digest),
        input_root_digest: d(&a.input_root_digest),
        blobs: stats.blobs,
        bytes: stats.bytes,
        already_present: stats.present,
        batched: stats.batched,
        streamed: stats.streamed,
        sent_bytes: stats.sent_bytes,
        cached_exit_code: cached.map(|c| c.exit_code),
    })
}

/// A private directory for the pack's extracted blobs, removed when dropped.
fn tempfile_dir() -> Result<tempfile::TempDir, RemoteError> {
    let base = repro_pack::store::cache_dir();
    std::fs::create_dir_all(&base).map_err(|e| RemoteError::io("cannot create", &base, e))?;
    tempfile::Builder::new()
        .prefix("remote-upload-")
        .tempdir_in(&base)
        .map_err(|e| RemoteError::io("cannot create a directory in", &base, e))
}
