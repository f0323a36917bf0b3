//! Checks and verdicts, computed only from a run directory.
use repro_model::ExitCode;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{ChaosError, Result};
use crate::fsutil::{read_jsonl, sha256_hex};
use crate::limits::Limits;
use crate::load::{parse_adapter_with, parse_experiment_with};
use crate::model::*;

mod checks;
pub mod history;

use crate::check_result::tail;
pub use crate::check_result::{CheckResult, Outcome};
pub use checks::{aggregate, metric_series, sample_value};
use checks::{experiment_check, workload_checks};

/// Marker file present while a run is in progress; a killed harness leaves it behind.
pub const INCOMPLETE_MARKER: &str = "INCOMPLETE";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "XFAIL")]
    Xfail,
    #[serde(rename = "FAIL")]
    Fail,
    #[serde(rename = "ERROR")]
    Error,
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Xfail => "XFAIL",
            Verdict::Fail => "FAIL",
            Verdict::Error => "ERROR",
            Verdict::NotApplicable => "n/a",
        }
    }
    /// PASS 0, XFAIL 0, FAIL 1, ERROR 2, n/a 0.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Pass | Verdict::Xfail | Verdict::NotApplicable => ExitCode::Success.code(),
            Verdict::Fail => ExitCode::Failure.code(),
            Verdict::Error => ExitCode::Usage.code(),
        }
    }
}

/// A verdict with the checks and the reason.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evaluation {
    pub verdict: Verdict,
    pub exit_code: i32,
    pub reason: String,
    pub checks: Vec<CheckResult>,
    pub experiment: Value,
    pub adapter: Value,
    pub run_dir: PathBuf,
    pub evaluated_at: String,
}

impl Evaluation {
    pub fn lines(&self) -> Vec<String> {
        self.checks.iter().flat_map(CheckResult::lines).collect()
    }
}

/// `*` and `?` glob matching.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// Applies expectations to results.
pub fn apply_expectations(results: &mut [CheckResult], expectations: &[Expectation]) {
    for r in results.iter_mut() {
        let hit = expectations.iter().find(|x| x.checks.iter().any(|g| glob_match(g, &r.key) || glob_match(g, &r.id)));
        let Some(x) = hit else { continue };
        r.issue = Some(x.issue.value.clone());
        r.outcome = match (x.kind, r.passed) {
            (ExpectationKind::Known, false) => Outcome::Xfail,
            (ExpectationKind::Known, true) => Outcome::Xpass,
            (ExpectationKind::Flaky, false) => Outcome::Flaky,
            (ExpectationKind::Flaky, true) => Outcome::Ok,
        };
    }
}

/// The verdict of checks that all ran (no harness error).
pub fn verdict_of(results: &[CheckResult]) -> (Verdict, String) {
    let bad: Vec<&CheckResult> =
        results.iter().filter(|r| matches!(r.outcome, Outcome::Fail | Outcome::Xpass)).collect();
    if !bad.is_empty() {
        let names: Vec<String> = bad
            .iter()
            .map(|r| if r.outcome == Outcome::Xpass { format!("{} (XPASS)", r.id) } else { r.id.clone() })
            .collect();
        return (Verdict::Fail, format!("failed: {}", names.join(", ")));
    }
    let known: Vec<&CheckResult> =
        results.iter().filter(|r| matches!(r.outcome, Outcome::Xfail | Outcome::Flaky)).collect();
    if !known.is_empty() {
        let mut issues: Vec<String> = known.iter().filter_map(|r| r.issue.clone()).collect();
        issues.dedup();
        return (Verdict::Xfail, format!("only known failures: {}", issues.join(", ")));
    }
    (Verdict::Pass, "every check passed".into())
}

/// Reads the `env` file of an instance (`KEY='value'` lines).
pub fn read_env_file(path: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(path) else {
        return out;
    };
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else { continue };
        out.insert(k.to_string(), shell_unquote(v));
    }
    out
}

pub fn shell_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', "'\\''"))
}

fn shell_unquote(v: &str) -> String {
    let mut out = String::new();
    let mut in_q = false;
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => in_q = !in_q,
            '\\' if !in_q => {
                if let Some(n) = chars.next() {
                    out.push(n);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Everything evaluation needs, read from a run directory.
pub struct RunData {
    pub run_dir: PathBuf,
    pub experiment: Experiment,
    pub experiment_text: String,
    pub experiment_path: PathBuf,
    pub adapter: Adapter,
    pub adapter_text: String,
    pub timeline: Vec<Value>,
}

impl RunData {
    pub fn read(run_dir: &Path, experiment_file: Option<&Path>) -> Result<RunData> {
        RunData::read_with(run_dir, experiment_file, &Limits::default())
    }

    /// [`RunData::read`], checking the experiment and adapter against `limits`.
    pub fn read_with(run_dir: &Path, experiment_file: Option<&Path>, limits: &Limits) -> Result<RunData> {
        let not_run = |reason: &str| ChaosError::NotARun { path: run_dir.to_path_buf(), reason: reason.to_string() };
        if !run_dir.is_dir() {
            return Err(not_run("no such directory"));
        }
        let exp_path = match experiment_file {
            Some(p) => p.to_path_buf(),
            None => run_dir.join("experiment.yaml"),
        };
        if !exp_path.is_file() {
            return Err(not_run("no experiment.yaml"));
        }
        let experiment_text = std::fs::read_to_string(&exp_path).map_err(|e| ChaosError::io(&exp_path, e))?;
        let experiment = parse_experiment_with(&exp_path, &experiment_text, limits)?;
        let ad_path = run_dir.join("adapter.yaml");
        let adapter_text = std::fs::read_to_string(&ad_path).map_err(|_| not_run("no adapter.yaml"))?;
        let adapter = parse_adapter_with(&ad_path, &adapter_text, limits)?;
        let tl = run_dir.join("timeline.jsonl");
        let timeline = if tl.is_file() { read_jsonl(&tl)? } else { vec![] };
        Ok(RunData {
            run_dir: run_dir.to_path_buf(),
            experiment,
            experiment_text,
            experiment_path: exp_path,
            adapter,
            adapter_text,
            timeline,
        })
    }
}

/// The check results the harness recorded in `path` (preflight, adapter checks); none if it recorded none.
/// A file that cannot be read or parsed is an error: the run's own record is damaged.
fn read_recorded(path: &Path) -> Result<Vec<CheckResult>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(ChaosError::io(path, e)),
    };
    serde_json::from_str(&text).map_err(|e| ChaosError::io(path, e.into()))
}

fn read_steady(path: &Path) -> Result<Vec<crate::steady::Probed>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(ChaosError::io(path, e)),
    };
    serde_json::from_str(&text).map_err(|e| ChaosError::io(path, e.into()))
}

/// Evaluates a run directory. `in_progress` is set by the harness itself, which evaluates before it
/// marks the run complete.
pub fn evaluate(data: &RunData, in_progress: bool) -> Evaluation {
    let run_dir = &data.run_dir;
    let recorded_preflight = read_recorded(&run_dir.join("system/preflight.json"));
    let recorded_adapter_checks = read_recorded(&run_dir.join("system/adapter-checks.json"));
    let tl = &data.timeline;
    let experiment = json!({
        "id": data.experiment.id.value,
        "version": data.experiment.version,
        "path": data.experiment_path,
        "sha256": sha256_hex(data.experiment_text.as_bytes()),
    });
    let adapter = json!({
        "name": data.adapter.name,
        "sha256": sha256_hex(data.adapter_text.as_bytes()),
    });
    let finish = |verdict: Verdict, reason: String, checks: Vec<CheckResult>| Evaluation {
        verdict,
        exit_code: verdict.exit_code(),
        reason,
        checks,
        experiment: experiment.clone(),
        adapter: adapter.clone(),
        run_dir: run_dir.clone(),
        evaluated_at: crate::fsutil::rfc3339(crate::fsutil::now()),
    };
    let (mut checks, adapter_checks) = match (recorded_preflight, recorded_adapter_checks) {
        (Ok(p), Ok(a)) => (p, a),
        (Err(e), _) | (_, Err(e)) => {
            return finish(Verdict::Error, format!("the run's records are damaged: {e}"), vec![]);
        }
    };
    let steady: Vec<crate::steady::Probed> = match read_steady(&run_dir.join(crate::steady::STEADY_FILE)) {
        Ok(s) => s,
        Err(e) => return finish(Verdict::Error, format!("the run's records are damaged: {e}"), vec![]),
    };
    // Before the flow: context (a failure there made the run ERROR); after it: checks like any other.
    checks.extend(steady.iter().filter(|p| p.phase == "before" && !p.result.passed).map(|p| p.result.clone()));
    if !in_progress && run_dir.join(INCOMPLETE_MARKER).exists() {
        let why = std::fs::read_to_string(run_dir.join(crate::common::INTERRUPTED_MARKER))
            .map(|t| format!(" ({})", t.trim()))
            .unwrap_or_default(); // no marker: the harness was killed before it could say why
        return finish(
            Verdict::Error,
            format!("the run is incomplete: the harness did not finish it, so there is no verdict{why}"),
            checks,
        );
    }
    if let Some(na) = tl.iter().find(|e| e["event"] == "run.not-applicable") {
        return finish(Verdict::NotApplicable, na["reason"].as_str().unwrap_or("not applicable").to_string(), checks);
    }
    let errors: Vec<String> = tl
        .iter()
        .filter(|e| e["event"] == "harness.error")
        .map(|e| e["reason"].as_str().unwrap_or("harness error").to_string())
        .collect();
    if let Some(pf) = checks.iter().find(|c| c.scope == "preflight" && !c.passed) {
        let id = pf.id.clone();
        return finish(Verdict::Error, format!("preflight check {id} failed; the flow did not run"), checks);
    }
    if !errors.is_empty() {
        checks.extend(adapter_checks);
        return finish(Verdict::Error, errors.join("; "), checks);
    }
    let mut results = Vec::new();
    for w in &data.experiment.workloads {
        results.extend(workload_checks(data, w));
    }
    for c in &data.experiment.checks {
        let (passed, details, extra) = match c.kind.value {
            CheckKind::Linearizable | CheckKind::Set | CheckKind::Counter => history::history_check(&data.run_dir, c),
            _ => {
                let (p, d) = experiment_check(data, c);
                (p, d, None)
            }
        };
        let mut r = CheckResult::new(
            "experiment",
            format!("experiment/{}", c.name.value),
            format!("experiment/{}", c.name.value),
            passed,
            details,
        );
        r.data = extra;
        results.push(r);
    }
    results.extend(steady.iter().filter(|p| p.phase == "after").map(|p| p.result.clone()));
    results.extend(adapter_checks);
    apply_expectations(&mut results, &data.experiment.expectations);
    let (verdict, reason) = verdict_of(&results);
    checks.extend(results);
    finish(verdict, reason, checks)
}

/// The directories of the workload's instances, in instance order; none if no instance started.
#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: &str, passed: bool) -> CheckResult {
        let key = id.to_string();
        CheckResult::new("experiment", id.into(), key, passed, vec![])
    }

    fn x(kind: ExpectationKind, checks: &[&str]) -> Expectation {
        Expectation {
            issue: At::new("ISSUE-1".into()),
            kind,
            checks: checks.iter().map(|s| At::new(s.to_string())).collect(),
            description: String::new(),
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("counter/*", "counter/exited-ok"));
        assert!(glob_match("*/exited-ok", "counter/exited-ok"));
        assert!(glob_match("c?unter/e*k", "counter/exited-ok"));
        assert!(!glob_match("counter/exited", "counter/exited-ok"));
        assert!(glob_match("*", ""));
    }

    #[test]
    fn verdicts() {
        let mut v = vec![r("experiment/a", true), r("experiment/b", true)];
        assert_eq!(verdict_of(&v).0, Verdict::Pass);
        v[1].passed = false;
        v[1].outcome = Outcome::Fail;
        assert_eq!(verdict_of(&v).0, Verdict::Fail);
        apply_expectations(&mut v, &[x(ExpectationKind::Known, &["experiment/b"])]);
        assert_eq!(v[1].outcome, Outcome::Xfail);
        assert_eq!(verdict_of(&v).0, Verdict::Xfail);
        let mut xp = vec![r("experiment/a", true)];
        apply_expectations(&mut xp, &[x(ExpectationKind::Known, &["experiment/*"])]);
        assert_eq!(xp[0].outcome, Outcome::Xpass);
        assert_eq!(verdict_of(&xp).0, Verdict::Fail);
        let mut fl = vec![r("experiment/a", true), r("experiment/b", false)];
        apply_expectations(&mut fl, &[x(ExpectationKind::Flaky, &["experiment/*"])]);
        assert_eq!(fl[0].outcome, Outcome::Ok);
        assert_eq!(fl[1].outcome, Outcome::Flaky);
        assert_eq!(verdict_of(&fl).0, Verdict::Xfail);
        assert_eq!(Verdict::Fail.exit_code(), 1);
        assert_eq!(Verdict::Error.exit_code(), 2);
        assert_eq!(Verdict::NotApplicable.exit_code(), 0);
    }

    #[test]
    fn env_file_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("env");
        std::fs::write(&p, format!("A={}\nB={}\n", shell_quote("it's x"), shell_quote("a=b"))).unwrap();
        let e = read_env_file(&p);
        assert_eq!(e["A"], "it's x");
        assert_eq!(e["B"], "a=b");
    }

    pub(super) fn run_data(dir: &Path) -> RunData {
        let text = "apiVersion: repro.dev/chaos/v1\nid: t\nversion: 1\ntitle: t\nhypothesis: h\ntimeout: 1m\nworkloads:\n  - name: w\n    kind: shell\n    run: 'true'\n    checks:\n      - {name: ok, kind: exit-code}\nflow: w\n";
        RunData {
            run_dir: dir.to_path_buf(),
            experiment: crate::load::parse_experiment(Path::new("e.yaml"), text).unwrap(),
            experiment_text: text.into(),
            experiment_path: dir.join("experiment.yaml"),
            adapter: crate::load::builtin_process_adapter().adapter,
            adapter_text: String::new(),
            timeline: vec![],
        }
    }

    #[test]
    fn damaged_records_are_an_error_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        let data = run_data(d.path());
        let ev = evaluate(&data, true);
        assert_eq!(ev.verdict, Verdict::Fail, "{}", ev.reason);
        assert!(ev.checks.iter().any(|c| c.details.iter().any(|l| l == "no instance of w ran")), "{:?}", ev.checks);
        std::fs::create_dir_all(d.path().join("system")).unwrap();
        std::fs::write(d.path().join("system/preflight.json"), "[{\"truncated").unwrap();
        let ev = evaluate(&data, true);
        assert_eq!(ev.verdict, Verdict::Error);
        assert!(ev.reason.starts_with("the run's records are damaged: "), "{}", ev.reason);
        assert!(ev.reason.contains("system/preflight.json: "), "{}", ev.reason);
    }
}
