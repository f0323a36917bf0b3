//! Executing configurations: each one is a `repro run --json` process; several run in parallel.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use repro_model::run::RunRecord;
use repro_model::ExitCode;
use repro_pack::signature::Signature;
use serde::Serialize;

use crate::cancel::Cancel;
use crate::config::Config;
use crate::HuntError;

/// How a run ended, as the hunt sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Pass,
    Fail,
    /// The supervisor could not enforce determinism (exit 121): the outcome is not evidence.
    Unenforced,
    /// repro itself failed (setup, usage): the configuration could not be tried.
    Error,
}

/// The result of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub index: usize,
    pub config: Config,
    pub verdict: Verdict,
    pub exit_status: i32,
    pub signature: Signature,
    /// blake3 of stdout, to tell outputs apart even when the outcome is the same.
    pub stdout_digest: String,
    pub duration_ms: u64,
    pub run_dir: PathBuf,
    pub not_enforced: Vec<String>,
    pub tasks_created: u64,
}

/// What every run shares: the repro binary, the command, the options that do not vary, and where run
/// directories go.
#[derive(Debug, Clone)]
pub struct Runner {
    pub repro: PathBuf,
    /// The command to run, or (`pack`) nothing: the pack's own command is replayed.
    pub command: Vec<String>,
    /// Replay this pack with each configuration instead of running `command`.
    pub pack: Option<PathBuf>,
    /// Options added to every `repro run` (--memory, --bind, --env that are not varied).
    pub base_args: Vec<String>,
    pub state_dir: PathBuf,
    pub cwd: PathBuf,
    /// Stops every run on SIGINT/SIGTERM (see [`crate::cancel`]).
    pub cancel: Arc<Cancel>,
}

impl Runner {
    /// Runs one configuration to completion.
    pub fn run(&self, index: usize, config: &Config) -> Result<Outcome, HuntError> {
        let mut cmd = Command::new(&self.repro);
        cmd.current_dir(&self.cwd);
        match &self.pack {
            None => {
                cmd.arg("run").arg("--json").arg("--state-dir").arg(&self.state_dir).args(config.to_args());
                cmd.args(&self.base_args).arg("--").args(&self.command);
            }
            Some(pack) => {
                cmd.arg("replay")
                    .arg(pack)
                    .arg("--json")
                    .arg("--state-dir")
                    .arg(&self.state_dir)
                    .args(config.to_args());
                // `--env` of the base options: values for the pack's redacted variables.
                for pair in self.base_args.chunks(2).filter(|p| p[0] == "--env") {
                    cmd.args(pair);
                }
            }
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let out = self.cancel.output(&mut cmd, &self.repro.display().to_string())?;
        let describe = || config.describe(&crate::config::Dimension::ALL);
        if self.pack.is_some() {
            // A replay report: its run directory holds the run record.
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| HuntError::BadRecord {
                config: describe(),
                message: format!("{e}; repro said: {}", String::from_utf8_lossy(&out.stderr).trim()),
            })?;
            let dir = PathBuf::from(v["runs"][0]["run_dir"].as_str().ok_or_else(|| HuntError::BadRecord {
                config: describe(),
                message: "the replay report has no runs[0].run_dir".into(),
            })?);
            let record: RunRecord = std::fs::read(dir.join("run.json"))
                .ok()
                .and_then(|d| serde_json::from_slice(&d).ok())
                .ok_or_else(|| HuntError::BadRecord {
                    config: describe(),
                    message: format!("no run.json in {}", dir.display()),
                })?;
            return outcome_of(index, config.clone(), &record, &dir);
        }
        let record: RunRecord = serde_json::from_slice(&out.stdout).map_err(|e| HuntError::BadRecord {
            config: describe(),
            message: format!("{e}; repro said: {}", String::from_utf8_lossy(&out.stderr).trim()),
        })?;
        let run_dir = self.state_dir.join("runs").join(&record.id);
        outcome_of(index, config.clone(), &record, &run_dir)
    }
}

/// The hunt's view of a finished run directory (output that is there but cannot be read is an error, not a run
/// with empty output).
pub fn outcome_of(index: usize, config: Config, record: &RunRecord, run_dir: &Path) -> Result<Outcome, HuntError> {
    let read = |name: &str| {
        let p = run_dir.join(name);
        match std::fs::read(&p) {
            // A run whose setup failed before its output was opened has none.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            r => r.map_err(|e| HuntError::io("cannot read the run's output", p, e)),
        }
    };
    let (stdout, stderr) = (read("stdout")?, read("stderr")?);
    let signature = repro_pack::signature::compute(record.exit_status, &stdout, &stderr, &[]);
    let verdict = match (&record.outcome, record.exit_status) {
        (repro_model::run::RunOutcome::SetupFailed { .. }, _) => Verdict::Error,
        (_, status) if status == ExitCode::NotDeterministic.code() && !record.determinism.not_enforced.is_empty() => {
            Verdict::Unenforced
        }
        (_, status) if status == ExitCode::Success.code() => Verdict::Pass,
        _ => Verdict::Fail,
    };
    Ok(Outcome {
        index,
        config,
        verdict,
        exit_status: record.exit_status,
        signature,
        stdout_digest: blake3::hash(&stdout).to_hex().to_string(),
        duration_ms: record.duration_ms,
        run_dir: run_dir.to_path_buf(),
        not_enforced: record.determinism.not_enforced.clone(),
        tasks_created: record.determinism.tasks_created,
    })
}

/// When to stop a batch.
#[derive(Debug, Clone)]
pub struct Budget {
    pub max_runs: usize,
    pub deadline: Option<Instant>,
    /// Stop at the first failure (runs already started finish).
    pub stop_on_failure: bool,
}

/// Runs `configs(i)` for i = 0.. on `jobs` worker threads until the budget ends. `progress` is called after
/// every run with the outcomes so far. Returns the outcomes in index order; an interrupted batch (see
/// [`Runner::cancel`]) returns those that finished.
pub fn run_parallel(
    runner: &Runner,
    jobs: usize,
    budget: &Budget,
    configs: &(dyn Fn(usize) -> Config + Sync),
    progress: &mut dyn FnMut(&[Outcome]),
) -> Result<Vec<Outcome>, HuntError> {
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Result<Outcome, HuntError>>();
    let mut outcomes = Vec::new();
    let mut first_error = None;
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            let (next, stop, tx) = (next.clone(), stop.clone(), tx.clone());
            scope.spawn(move || loop {
                if stop.load(Ordering::SeqCst) || budget.deadline.is_some_and(|d| Instant::now() >= d) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= budget.max_runs {
                    return;
                }
                let r = runner.run(i, &configs(i));
                if tx.send(r).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        for r in rx {
            match r {
                Ok(o) => {
                    if budget.stop_on_failure && o.verdict == Verdict::Fail {
                        stop.store(true, Ordering::SeqCst);
                    }
                    outcomes.push(o);
                    progress(&outcomes);
                }
                // Interrupted: the other workers stop at their next run; what finished is returned.
                Err(HuntError::Interrupted { .. }) => stop.store(true, Ordering::SeqCst),
                Err(e) => {
                    stop.store(true, Ordering::SeqCst);
                    first_error.get_or_insert(e);
                }
            }
        }
    });
    if let Some(e) = first_error {
        return Err(e);
    }
    outcomes.sort_by_key(|o| o.index);
    Ok(outcomes)
}

/// Rate and elapsed time for progress lines.
pub fn rate(done: usize, elapsed: Duration) -> f64 {
    if elapsed.as_secs_f64() > 0.0 {
        done as f64 / elapsed.as_secs_f64()
    } else {
        0.0
    }
}
