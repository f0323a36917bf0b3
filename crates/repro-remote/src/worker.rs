//! `repro worker`: a bot of the Remote Workers API (BuildGrid's Bots service). It opens a bot session offering
//! this machine's ISA and `OSFamily=linux`, takes a lease, fetches its Action, Command and input root from the
//! CAS into a private temporary directory (bounded, see [`crate::fetch`]), runs `repro replay --json DIR`,
//! uploads the report (stdout) and stderr, and completes the lease with the ActionResult (exit code = the
//! replay's). It loops until SIGINT/SIGTERM (or after one lease with `once`).

use crate::bots::{bot_status, lease_state, AnyMsg, BotSession, Device, Lease, Property, RpcStatus, Worker};
use crate::digest::Blobs;
use crate::fetch::TreeLimits;
use crate::{Remote, RemoteError};
use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use prost::Message;
use repro_model::remote::{RemoteEndpoint, WorkerSummary};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ACTION: &str = "build.bazel.remote.execution.v2.Action";
const DIGEST: &str = "build.bazel.remote.execution.v2.Digest";
const ACTION_RESULT: &str = "build.bazel.remote.execution.v2.ActionResult";
/// How long one UpdateBotSession may wait for work (a stop request is seen within this). BuildGrid waits 80% of
/// the deadline and assigns nothing when that is under its NETWORK_TIMEOUT of 3 s: 5 s leaves it 4 s.
const POLL: Duration = Duration::from_secs(5);

pub struct WorkerOptions {
    /// The bot's id (unique per worker).
    pub bot_id: String,
    /// Stop after one lease.
    pub once: bool,
    /// The `repro` that runs the replays.
    pub repro_exe: PathBuf,
    pub limits: TreeLimits,
}

/// Runs the worker until SIGINT/SIGTERM, or one lease with `once`.
pub fn run(ep: &RemoteEndpoint, opts: &WorkerOptions) -> Result<WorkerSummary, RemoteError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(RemoteError::Runtime)?;
    }
    let r = Remote::connect(ep)?;
    let isa = crate::action::platform(std::env::consts::ARCH);
    let props = isa.properties.iter().map(|p| Property { key: p.name.clone(), value: p.value.clone() }).collect();
    let mut s = r.create_bot_session(BotSession {
        bot_id: opts.bot_id.clone(),
        status: bot_status::OK,
        worker: Some(Worker {
            devices: vec![Device { handle: opts.bot_id.clone(), properties: props }],
            ..Default::default()
        }),
        ..Default::default()
    })?;
    let mut summary = WorkerSummary::default();
    let mut done_ids = std::collections::BTreeSet::new();
    loop {
        if stop.load(Ordering::Relaxed) {
            summary.interrupted = true;
            s.status = bot_status::BOT_TERMINATING;
            let _ = r.update_bot_session(s, POLL);
            return Ok(summary);
        }
        if let Some(next) = r.update_bot_session(s.clone(), POLL)? {
            s = next;
        }
        // BuildGrid hands a lease over already ACTIVE (its job is EXECUTING once assigned); a PENDING one is
        // accepted first, as the API describes.
        let Some(i) = s.leases.iter().position(|l| {
            (l.state == lease_state::PENDING || l.state == lease_state::ACTIVE) && !done_ids.contains(&l.id)
        }) else {
            continue;
        };
        if s.leases[i].state == lease_state::PENDING {
            s.leases[i].state = lease_state::ACTIVE;
            if let Some(next) = r.update_bot_session(s.clone(), POLL)? {
                s = next;
            }
        }
        let id = s.leases.get(i).map(|l| l.id.clone()).unwrap_or_default();
        let lease = s.leases.iter_mut().find(|l| l.id == id && l.state == lease_state::ACTIVE);
        let Some(lease) = lease else {
            continue; // cancelled meanwhile
        };
        done_ids.insert(id);
        let done = execute_lease(&r, lease, opts);
        lease.state = lease_state::COMPLETED;
        match done {
            Ok(result) => {
                lease.status = Some(RpcStatus::default());
                lease.result = Some(AnyMsg::pack(ACTION_RESULT, &result));
            }
            Err(e) => {
                eprintln!("[repro worker] lease {}: {e}", lease.id);
                // FAILED_PRECONDITION: not retried; the client sees the message.
                lease.status = Some(RpcStatus { code: 9, message: e.to_string() });
            }
        }
        summary.leases += 1;
        if let Some(next) = r.update_bot_session(s.clone(), POLL)? {
            s = next;
        }
        s.leases.retain(|l| l.state != lease_state::COMPLETED && l.state != lease_state::CANCELLED);
        if opts.once {
            return Ok(summary);
        }
    }
}

/// Fetches the lease's Action, checks its Command is the replay's, materializes the input root and replays it.
fn execute_lease(r: &Remote, lease: &Lease, opts: &WorkerOptions) -> Result<re::ActionResult, RemoteError> {
    let bad = |detail: String| RemoteError::Protocol { uri: r.uri.clone(), detail };
    let payload = lease.payload.as_ref().ok_or_else(|| bad(format!("lease {} has no payload", lease.id)))?;
    let action: re::Action = if payload.is(ACTION) {
        re::Action::decode(payload.value.as_slice()).map_err(|e| bad(format!("lease {}: Action: {e}", lease.id)))?
    } else if payload.is(DIGEST) {
        let d = re::Digest::decode(payload.value.as_slice()).map_err(|e| bad(format!("lease payload: {e}")))?;
        r.read_message(&d, "Action")?
    } else {
        return Err(bad(format!("lease {}: a payload of type '{}'", lease.id, payload.type_url)));
    };
    let command: re::Command = r.read_message(&action.command_digest.clone().unwrap_or_default(), "Command")?;
    if command.arguments != crate::action::replay_argv() {
        return Err(bad(format!(
            "this worker runs only `repro replay --json .` (the Command of a pack's Action), not {:?}",
            command.arguments
        )));
    }
    let base = repro_pack::store::cache_dir();
    std::fs::create_dir_all(&base).map_err(|e| RemoteError::io("cannot create", &base, e))?;
    let work = tempfile::Builder::new()
        .prefix("worker-")
        .tempdir_in(&base)
        .map_err(|e| RemoteError::io("cannot create a directory in", &base, e))?;
    let input = work.path().join("input");
    std::fs::create_dir(&input).map_err(|e| RemoteError::io("cannot create", &input, e))?;
    r.materialize(&action.input_root_digest.clone().unwrap_or_default(), &input, opts.limits)?;
    let out = std::process::Command::new(&opts.repro_exe)
        .args(["replay", "--json"])
        .arg(&input)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| RemoteError::io("cannot run", &opts.repro_exe, e))?;
    let mut blobs = Blobs::new();
    let stdout_digest = blobs.add_bytes(out.stdout);
    let stderr_digest = blobs.add_bytes(out.stderr);
    r.upload(&blobs)?;
    // A replay killed by a signal: 128 + the signal, as a shell reports it.
    let exit_code = out
        .status
        .code()
        .unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&out.status).unwrap_or(0));
    Ok(re::ActionResult {
        exit_code,
        stdout_digest: Some(stdout_digest),
        stderr_digest: Some(stderr_digest),
        ..Default::default()
    })
}
