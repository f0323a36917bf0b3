//! `repro run`: prepares the settings, starts the init in new namespaces, pumps the guest's output, forwards
//! signals, and writes the run directory.
//!
//! `execute_with` runs in named stages, one file each: `config.rs` (`config::configure`: the scratch directory
//! and the init's configuration and descriptors), `start.rs` (`start::start`: the cgroup, the cleanup process,
//! the init cloned into new namespaces, its id maps, the pumps of its output), `wait.rs` (`wait::wait_for_end`:
//! signals forwarded until the init is done, its output and result read) and `finish.rs` (`finish::tear_down`,
//! `finish::collect_changes`: the teardown beside the collection of the changes). `prepare.rs` validates the
//! options into a [`RunRequest`].

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use repro_model::run::{Enforcement, Epoch, RunRecord, RunSettings, RUN_FORMAT};
use repro_sys::ns;

use crate::init::{Accessed, INIT_SIGNALS};
use crate::parse;
use crate::rundir::{self, RunDir};
use crate::SandboxError;

pub use crate::settings::{DEFAULT_CLOCK_STEP_NS, DEFAULT_MEMORY, DOMAINNAME, HOSTNAME, UMASK};
pub use prepare::RunRequest;
/// The options of a run and what `capture` and `replay` add are repro-model's; re-exported for their users.
pub use repro_model::settings::{RunExtras, RunOptions};

mod config;
mod finish;
mod prepare;
mod start;
mod wait;

/// The options the stage tests start from: `true`, epoch 0, one CPU.
#[cfg(test)]
fn test_options() -> RunOptions {
    RunOptions {
        command: vec!["true".into()],
        epoch: Some("0".into()),
        cpus: 1,
        clock_step_ns: DEFAULT_CLOCK_STEP_NS,
        ..Default::default()
    }
}

/// Where the guest's output goes besides the run directory.
#[derive(Debug, Clone, Copy)]
pub struct Echo {
    pub stdout: bool,
    pub stderr: bool,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub record: RunRecord,
    pub dir: PathBuf,
    /// The paths the guest used (with [`RunExtras::record_access`]).
    pub accessed: Vec<Accessed>,
    /// The tapes recorded, and whether a replay diverged from its tapes.
    pub tapes: crate::init::TapesOut,
    /// The SIGINT/SIGTERM/SIGHUP that repro itself received during the run (forwarded to the guest): a
    /// caller running several runs (`--verify`, `replay --runs`) stops there.
    pub interrupted: Option<i32>,
}

/// Starts a thread that may run beside [`execute_with`]: a run waits for its init through a signalfd, so a
/// SIGCHLD (or SIGINT/SIGTERM/SIGHUP) delivered to a thread that does not block it would be lost and the run would
/// never end. The thread blocks those signals before `f`.
pub fn spawn_beside<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let owned = name.to_string();
    std::thread::Builder::new().name(name.into()).spawn(move || {
        if let Err(e) = ns::block_signals(&INIT_SIGNALS) {
            eprintln!(
                "repro: warning: thread {owned}: cannot block the run's signals ({e}): a run may wait for a lost \
                 SIGCHLD"
            );
        }
        f()
    })
}

/// Holds SIGINT/SIGTERM/SIGHUP from here on (as each run does while it lasts), so one that arrives between two
/// runs of `--verify` or `replay --runs`, or before the first run reads its signals, is seen by the next run as
/// an interrupt: the loop then stops with 128 + the signal instead of dying half-way.
pub fn hold_interrupts() -> Result<(), SandboxError> {
    Ok(ns::block_signals(&INIT_SIGNALS)?)
}

/// repro's own executable, which a run starts again as `__init` and `__reap` (`/proc/self/exe` itself when the
/// link cannot be read: it names the same file).
pub fn self_exe() -> PathBuf {
    fs::read_link("/proc/self/exe").unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
}

/// Runs the request. `exe` is repro's own executable (for `__init` and `__reap`).
pub fn execute(req: &RunRequest, exe: &Path, echo: Echo) -> Result<RunReport, SandboxError> {
    execute_with(req, exe, echo, &RunExtras::default())
}

/// Runs the request with the additions of `extras`.
pub fn execute_with(req: &RunRequest, exe: &Path, echo: Echo, extras: &RunExtras) -> Result<RunReport, SandboxError> {
    // The guest inherits the caller's terminal as its standard input: whatever it left changed (echo off, raw
    // mode; also when it was killed) is put back when this returns, on every path.
    let _terminal = repro_sys::term::SavedTerminal::stdin();
    let started = Instant::now();
    let now = time::OffsetDateTime::now_utc();
    let s = &req.settings;
    let id = rundir::new_id(now);
    let dir = RunDir::create(&req.state_dir, &id)?;
    let mut warnings = setting_warnings(s);
    repro_sys::startup::mark("run: run directory created");

    let configured = config::configure(req, extras, &dir)?;
    let (sandbox, watch, cleanup) = start::start(req, extras, exe, echo, &id, &dir, configured, &mut warnings)?;
    let wait::Ended {
        interrupted,
        init_exit,
        stdout_bytes,
        stderr_bytes,
        outcome,
        exit_status,
        determinism,
        accessed,
        tapes,
    } = wait::wait_for_end(req, &dir, &sandbox, watch, &mut warnings)?;
    let finish::TornDown { pids_refused, teardown } =
        finish::tear_down(s, exe, &sandbox, cleanup, &init_exit, &mut warnings)?;
    let start::Sandbox { identity, cgroup, pids_rlimit, layer_sock, .. } = sandbox;
    let (changes, disk_limit_reached) = finish::collect_changes(s, extras, &dir, layer_sock, &mut warnings)?;

    let record = RunRecord {
        format: RUN_FORMAT,
        id: id.clone(),
        repro_version: env!("CARGO_PKG_VERSION").to_string(),
        // Secret variables are recorded as markers; only the guest got their values.
        settings: RunSettings { user_namespace: true, identity: Some(identity), ..s.redacted() },
        started_at: parse::rfc3339(now.unix_timestamp()),
        duration_ms: started.elapsed().as_millis() as u64,
        outcome,
        exit_status,
        stdout_bytes,
        stderr_bytes,
        changes: changes.summary(s.keep_changes),
        enforcement: Enforcement {
            cgroup: cgroup.as_ref().map(|c| c.path.to_string_lossy().into_owned()),
            pids_cgroup: cgroup.as_ref().and_then(|c| c.pids.as_ref()).map(|p| p.to_string_lossy().into_owned()),
            pids_rlimit,
            warnings,
            disk_limit_reached,
            pids_limit_reached: pids_refused.is_some(),
        },
        determinism,
    };
    dir.finish(&record)?;
    repro_sys::startup::mark("run: run.json written, run directory complete");
    // Returns when the cleanup is done, or at once if the thread could not start.
    let _ = teardown.recv();
    Ok(RunReport { record, dir: dir.path, accessed, tapes, interrupted })
}

/// What the settings themselves warn about: more CPUs asked than there are, a `--disk` larger than `--memory`.
fn setting_warnings(s: &RunSettings) -> Vec<String> {
    let mut warnings = Vec::new();
    // Supervised, the guest runs on one CPU whatever it sees (settings::affinity_for): nothing to warn about.
    if !s.supervised && (s.cpus as usize) > s.cpu_affinity.len() {
        warnings.push(format!(
            "--cpus {}: only {} CPU(s) are available here; the guest is pinned to {:?}",
            s.cpus,
            s.cpu_affinity.len(),
            s.cpu_affinity
        ));
    }
    if s.disk_bytes > s.memory_bytes {
        warnings.push(format!(
            "--disk {} MiB is more than --memory {} MiB: the writable layer is memory, so the memory limit stops \
             the guest's writes first (and the kernel kills the sandbox)",
            s.disk_bytes >> 20,
            s.memory_bytes >> 20
        ));
    }
    warnings
}

/// The run directory's scratch directory (see [`InitConfig::scratch`]); gone when the run ends.
pub const SCRATCH: &str = ".scratch";

/// The environment as a sorted list, for display (secret values as markers).
pub fn env_lines(env: &BTreeMap<String, String>) -> Vec<String> {
    env.iter().map(|(k, v)| format!("{k}={}", repro_model::secrets::redact_value(k, v))).collect()
}

/// The epoch as shown to users.
pub fn describe_epoch(e: &Epoch) -> String {
    format!("{} ({}; {})", e.rfc3339, e.unix, e.source.describe())
}
