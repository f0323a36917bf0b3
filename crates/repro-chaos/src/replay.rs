//! `repro chaos replay RUN [--runs N]`: runs a finished run directory's experiment again, from the run
//! directory alone (its `experiment.yaml`, `adapter.yaml`, `inputs/` and the seed in `manifest.json`), and
//! says whether the verdict, every check's outcome and the fault schedule came out the same, N/N.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::common::{INTERRUPTED_MARKER, SCHEDULE_FILE};
use crate::error::{ChaosError, Result};
use crate::evaluate::{Evaluation, INCOMPLETE_MARKER};
use crate::limits::Limits;
use crate::load::{load_adapter_with, load_experiment_with, LoadedAdapter, LoadedExperiment};
use crate::model::Schedule;
use crate::runner::{self, RunOptions};

/// A run directory to replay, read back.
pub struct Original {
    pub dir: PathBuf,
    pub seed: u64,
    pub evaluation: Evaluation,
    pub schedule: Option<Schedule>,
    pub experiment: LoadedExperiment,
    pub adapter: LoadedAdapter,
}

fn not_run(dir: &Path, reason: impl Into<String>) -> ChaosError {
    ChaosError::NotARun { path: dir.to_path_buf(), reason: reason.into() }
}

/// The largest `verdict.json`, `manifest.json` or `schedule.json` read from a run directory (which may be
/// someone else's).
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| ChaosError::io(path, e))?;
    let mut text = String::new();
    f.take(MAX_RECORD_BYTES + 1).read_to_string(&mut text).map_err(|e| ChaosError::io(path, e))?;
    if text.len() as u64 > MAX_RECORD_BYTES {
        return Err(ChaosError::Harness(format!("{}: larger than {} MiB", path.display(), MAX_RECORD_BYTES >> 20)));
    }
    serde_json::from_str(&text).map_err(|e| ChaosError::Harness(format!("{}: line {}: {e}", path.display(), e.line())))
}

impl Original {
    /// Reads a complete run directory: one that has a verdict and was neither cut short nor interrupted.
    pub fn read(dir: &Path, limits: &Limits) -> Result<Original> {
        if !dir.is_dir() {
            return Err(not_run(dir, "no such directory"));
        }
        let dir = std::fs::canonicalize(dir).map_err(|e| ChaosError::io(dir, e))?;
        if dir.join(INCOMPLETE_MARKER).exists() {
            return Err(not_run(&dir, "the run did not finish (INCOMPLETE): there is no verdict to reproduce"));
        }
        if dir.join(INTERRUPTED_MARKER).exists() {
            return Err(not_run(&dir, "the run was interrupted (INTERRUPTED): there is no verdict to reproduce"));
        }
        for f in ["verdict.json", "manifest.json", "experiment.yaml", "adapter.yaml"] {
            if !dir.join(f).is_file() {
                return Err(not_run(&dir, format!("no {f}")));
            }
        }
        let evaluation: Evaluation = read_json(&dir.join("verdict.json"))?;
        let manifest: serde_json::Value = read_json(&dir.join("manifest.json"))?;
        let seed = manifest
            .get("seed")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| not_run(&dir, "manifest.json: \"seed\": expected an unsigned integer"))?;
        let schedule =
            if dir.join(SCHEDULE_FILE).is_file() { Some(read_json(&dir.join(SCHEDULE_FILE))?) } else { None };
        let experiment = load_experiment_with(&dir.join("experiment.yaml"), limits)?;
        let adapter = load_adapter_with(&dir.join("adapter.yaml"), limits)?;
        Ok(Original { dir, seed, evaluation, schedule, experiment, adapter })
    }
}

/// Options of a replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    pub runs: u32,
    /// Where the replays' run directories go (default: next to the original's, `<state>/<experiment>/`).
    pub state_dir: Option<PathBuf>,
    pub echo: bool,
    pub limits: Limits,
    /// This program, for each run's reaper (see [`crate::reaper`]).
    pub reaper: Option<PathBuf>,
}

/// One check whose outcome differed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CheckDifference {
    pub check: String,
    pub original: String,
    pub replay: String,
}

/// One replay.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayRun {
    pub run_dir: PathBuf,
    pub verdict: String,
    pub verdict_reproduced: bool,
    pub checks: Vec<CheckDifference>,
    /// The first way the fault schedule differed (None: the same operations, selections and draws).
    pub schedule_difference: Option<String>,
    pub reproduced: bool,
}

/// What `repro chaos replay` reports.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub original: PathBuf,
    pub experiment: String,
    pub seed: u64,
    pub verdict: String,
    pub runs: Vec<ReplayRun>,
    /// Replays that reproduced the verdict, every check's outcome and the schedule.
    pub reproduced: u32,
    pub requested: u32,
    /// SIGINT/SIGTERM stopped the replays (128 + it is the exit code).
    pub interrupted: Option<i32>,
}

impl ReplayReport {
    /// 0 when every replay reproduced, 122 when one did not, 128 + the signal when interrupted.
    pub fn exit_code(&self) -> i32 {
        if let Some(sig) = self.interrupted {
            repro_model::ExitCode::signalled(sig)
        } else if self.reproduced == self.requested {
            repro_model::ExitCode::Success.code()
        } else {
            repro_model::ExitCode::VerifyDiffers.code()
        }
    }
}

fn outcomes(e: &Evaluation) -> BTreeMap<String, String> {
    e.checks
        .iter()
        .map(|c| {
            (
                c.id.clone(),
                serde_json::to_value(c.outcome).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
            )
        })
        .collect()
}

/// How a replay's evaluation differs from the original's, check by check (a check only one of them has
/// counts as a difference).
pub fn check_differences(original: &Evaluation, replay: &Evaluation) -> Vec<CheckDifference> {
    let (a, b) = (outcomes(original), outcomes(replay));
    let mut out = Vec::new();
    for (id, o) in &a {
        let r = b.get(id).cloned().unwrap_or_else(|| "missing".into());
        if &r != o {
            out.push(CheckDifference { check: id.clone(), original: o.clone(), replay: r });
        }
    }
    for (id, r) in &b {
        if !a.contains_key(id) {
            out.push(CheckDifference { check: id.clone(), original: "missing".into(), replay: r.clone() });
        }
    }
    out
}

/// Replays `dir` `opts.runs` times; `each` sees every replay as it ends.
pub fn replay(dir: &Path, opts: &ReplayOptions, mut each: impl FnMut(u32, &ReplayRun)) -> Result<ReplayReport> {
    let orig = Original::read(dir, &opts.limits)?;
    let state_dir = opts
        .state_dir
        .clone()
        .or_else(|| orig.dir.parent().and_then(Path::parent).map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from(".repro/chaos"));
    let inputs = orig.dir.join("inputs");
    let run_opts = RunOptions {
        seed: Some(orig.seed),
        state_dir: Some(state_dir),
        echo: opts.echo,
        limits: opts.limits,
        experiment_dir: Some(inputs.join("experiment")),
        adapter_dir: Some(inputs.join("adapter")),
        replay_of: Some(orig.dir.clone()),
        reaper: opts.reaper.clone(),
    };
    let mut report = ReplayReport {
        original: orig.dir.clone(),
        experiment: orig.experiment.experiment.id.value.clone(),
        seed: orig.seed,
        verdict: orig.evaluation.verdict.as_str().to_string(),
        runs: vec![],
        reproduced: 0,
        requested: opts.runs,
        interrupted: None,
    };
    for i in 1..=opts.runs {
        let out = runner::run(&orig.experiment, &orig.adapter, &run_opts)?;
        if let Some(sig) = out.interrupted {
            report.interrupted = Some(sig);
            break;
        }
        let schedule: Option<Schedule> = read_json(&out.run_dir.join(SCHEDULE_FILE)).ok();
        let schedule_difference = match (&orig.schedule, &schedule) {
            (Some(a), Some(b)) => crate::schedule::difference(a, b),
            (None, _) => None,
            (Some(_), None) => Some("the replay wrote no schedule.json".into()),
        };
        let checks = check_differences(&orig.evaluation, &out.evaluation);
        let verdict_reproduced = out.evaluation.verdict == orig.evaluation.verdict;
        let r = ReplayRun {
            run_dir: out.run_dir,
            verdict: out.evaluation.verdict.as_str().to_string(),
            verdict_reproduced,
            reproduced: verdict_reproduced && checks.is_empty() && schedule_difference.is_none(),
            checks,
            schedule_difference,
        };
        if r.reproduced {
            report.reproduced += 1;
        }
        each(i, &r);
        report.runs.push(r);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::{CheckResult, Outcome, Verdict};

    fn ev(checks: &[(&str, Outcome)]) -> Evaluation {
        Evaluation {
            verdict: Verdict::Fail,
            exit_code: 1,
            reason: String::new(),
            checks: checks
                .iter()
                .map(|(id, o)| {
                    let mut c = CheckResult::new("workload", id.to_string(), id.to_string(), *o == Outcome::Ok, vec![]);
                    c.outcome = *o;
                    c
                })
                .collect(),
            experiment: serde_json::Value::Null,
            adapter: serde_json::Value::Null,
            run_dir: PathBuf::new(),
            evaluated_at: String::new(),
        }
    }

    #[test]
    fn check_differences_name_each_check_both_ways() {
        let a = ev(&[("w-0/ok", Outcome::Ok), ("experiment/acked", Outcome::Fail)]);
        assert!(check_differences(&a, &a).is_empty());
        let b = ev(&[("w-0/ok", Outcome::Ok), ("experiment/acked", Outcome::Ok), ("adapter/new", Outcome::Ok)]);
        let d = check_differences(&a, &b);
        assert_eq!(
            d,
            [
                CheckDifference { check: "experiment/acked".into(), original: "fail".into(), replay: "ok".into() },
                CheckDifference { check: "adapter/new".into(), original: "missing".into(), replay: "ok".into() },
            ]
        );
    }

    #[test]
    fn an_unfinished_or_interrupted_run_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let m = Original::read(&d.path().join("nope"), &Limits::default()).err().unwrap().to_string();
        assert!(m.contains("no such directory"), "{m}");
        std::fs::write(d.path().join(INCOMPLETE_MARKER), "x").unwrap();
        let m = Original::read(d.path(), &Limits::default()).err().unwrap().to_string();
        assert!(m.contains("did not finish"), "{m}");
        std::fs::remove_file(d.path().join(INCOMPLETE_MARKER)).unwrap();
        let m = Original::read(d.path(), &Limits::default()).err().unwrap().to_string();
        assert!(m.contains("no verdict.json"), "{m}");
    }
}
