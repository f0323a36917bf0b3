//! Checks and verdicts, computed only from a run directory.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{ChaosError, Result};
use crate::fsutil::{read_jsonl, sha256_hex};
use crate::limits::Limits;
use crate::load::{parse_adapter_with, parse_experiment_with};
use crate::model::*;
use crate::proc::run_hook;
use crate::timeline::event_matches;

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
            Verdict::Pass | Verdict::Xfail | Verdict::NotApplicable => 0,
            Verdict::Fail => 1,
            Verdict::Error => 2,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Passed (with no expectation, or a flaky one).
    Ok,
    /// Failed with no expectation.
    Fail,
    /// Failed, as a known expectation says.
    Xfail,
    /// Passed although a known expectation says it fails: fails the run.
    Xpass,
    /// Failed, and a flaky expectation allows it.
    Flaky,
}

/// One check's result as recorded (preflight, adapter) or evaluated (workload, experiment).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResult {
    /// `preflight`, `workload`, `experiment` or `adapter`.
    pub scope: String,
    /// What the check lines show: `hello-0/exited-ok`, `experiment/recovered`.
    pub id: String,
    /// What expectations match: `hello/exited-ok`, `experiment/recovered`.
    pub key: String,
    pub passed: bool,
    #[serde(default)]
    pub details: Vec<String>,
    #[serde(default = "outcome_ok")]
    pub outcome: Outcome,
    #[serde(default)]
    pub issue: Option<String>,
}

fn outcome_ok() -> Outcome {
    Outcome::Ok
}

impl CheckResult {
    pub fn new(scope: &str, id: String, key: String, passed: bool, details: Vec<String>) -> Self {
        CheckResult {
            scope: scope.to_string(),
            id,
            key,
            passed,
            details,
            outcome: if passed { Outcome::Ok } else { Outcome::Fail },
            issue: None,
        }
    }

    /// The check line: `ok    hello-0/exited-ok`, then indented details for anything not ok.
    pub fn lines(&self) -> Vec<String> {
        let (tag, suffix) = match (self.outcome, &self.issue) {
            (Outcome::Ok, Some(i)) => ("ok   ", format!(" (flaky: {i})")),
            (Outcome::Ok, None) => ("ok   ", String::new()),
            (Outcome::Fail, _) => ("FAIL ", String::new()),
            (Outcome::Xfail, i) => ("xfail", format!(" (known: {})", i.as_deref().unwrap_or(""))),
            (Outcome::Xpass, i) => ("XPASS", format!(" (known: {})", i.as_deref().unwrap_or(""))),
            (Outcome::Flaky, i) => ("flaky", format!(" (flaky: {})", i.as_deref().unwrap_or(""))),
        };
        let mut out = vec![format!("  {tag} {}{suffix}", self.id)];
        if self.outcome != Outcome::Ok || !self.passed {
            for d in &self.details {
                out.push(format!("          {d}"));
            }
        } else {
            // A passing check may still warn (an image referred to by a tag only).
            for d in self.details.iter().filter(|d| d.starts_with("warning:")) {
                out.push(format!("          {d}"));
            }
        }
        if self.outcome == Outcome::Xpass {
            out.push("          passed although expected to fail: update the expectation".into());
        }
        out
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

fn tail(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].iter().map(|l| l.to_string()).collect()
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
    if !in_progress && run_dir.join(INCOMPLETE_MARKER).exists() {
        let why = std::fs::read_to_string(run_dir.join(crate::runner::INTERRUPTED_MARKER))
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
        let (passed, details) = experiment_check(data, c);
        results.push(CheckResult::new(
            "experiment",
            format!("experiment/{}", c.name.value),
            format!("experiment/{}", c.name.value),
            passed,
            details,
        ));
    }
    results.extend(adapter_checks);
    apply_expectations(&mut results, &data.experiment.expectations);
    let (verdict, reason) = verdict_of(&results);
    checks.extend(results);
    finish(verdict, reason, checks)
}

/// The directories of the workload's instances, in instance order; none if no instance started.
fn instance_dirs(run_dir: &Path, w: &Workload) -> Result<Vec<(String, PathBuf)>> {
    let base = run_dir.join("workloads").join(&w.name.value).join("instances");
    let rd = match std::fs::read_dir(&base) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(ChaosError::io(&base, e)),
    };
    let mut out: Vec<(usize, String, PathBuf)> = Vec::new();
    for e in rd {
        let e = e.map_err(|err| ChaosError::io(&base, err))?;
        if !e.path().is_dir() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(idx) = name.rsplit('-').next().and_then(|i| i.parse().ok()) {
            out.push((idx, name, e.path()));
        }
    }
    out.sort();
    Ok(out.into_iter().map(|(_, n, p)| (n, p)).collect())
}

/// The variables a workload check sees, rebased on the run directory where it is now.
fn instance_env(data: &RunData, w: &Workload, name: &str, dir: &Path) -> BTreeMap<String, String> {
    let mut env = read_env_file(&dir.join("env"));
    let out = dir.join("output");
    env.insert("CHAOS_RUN_DIR".into(), data.run_dir.display().to_string());
    env.insert("CHAOS_EXPERIMENT".into(), data.experiment.id.value.clone());
    env.insert("CHAOS_EXPERIMENT_WORKLOAD".into(), w.name.value.clone());
    env.insert("CHAOS_EXPERIMENT_WORKLOAD_INSTANCE".into(), name.to_string());
    env.insert("CHAOS_EXPERIMENT_WORKLOAD_INSTANCE_OUTPUT_DIR".into(), out.display().to_string());
    env.insert("CHAOS_EXPERIMENT_WORKLOAD_INSTANCE_DIR".into(), dir.display().to_string());
    env
}

fn workload_checks(data: &RunData, w: &Workload) -> Vec<CheckResult> {
    let (dirs, unreadable) = match instance_dirs(&data.run_dir, w) {
        Ok(d) => (d, None),
        Err(e) => (vec![], Some(e.to_string())),
    };
    let mut out = Vec::new();
    for c in &w.checks {
        let key = format!("{}/{}", w.name.value, c.name.value);
        if let Some(e) = &unreadable {
            out.push(CheckResult::new(
                "workload",
                key.clone(),
                key,
                false,
                vec![format!("cannot list the instances: {e}")],
            ));
            continue;
        }
        if dirs.is_empty() {
            out.push(CheckResult::new(
                "workload",
                key.clone(),
                key,
                false,
                vec![format!("no instance of {} ran", w.name.value)],
            ));
            continue;
        }
        for (name, dir) in &dirs {
            let id = format!("{name}/{}", c.name.value);
            let out_dir = dir.join("output");
            let (passed, details) = match c.kind.value {
                WorkloadCheckKind::ExitCode => {
                    let want = c.equals.unwrap_or(0);
                    match std::fs::read_to_string(out_dir.join(".chaos/exit_code")) {
                        Ok(t) => match t.trim().parse::<i32>() {
                            Ok(code) if code == want => (true, vec![]),
                            Ok(code) => (false, vec![format!("exit code {code}, want {want}")]),
                            Err(_) => (false, vec![format!("unreadable exit code {:?}", t.trim())]),
                        },
                        Err(_) => (false, vec!["no exit code recorded".into()]),
                    }
                }
                WorkloadCheckKind::Shell => {
                    let env = instance_env(data, w, name, dir);
                    let cwd = if out_dir.is_dir() { out_dir.clone() } else { data.run_dir.clone() };
                    shell_check(c.run.as_deref().unwrap_or("false"), &env, &cwd, c.timeout)
                }
            };
            out.push(CheckResult::new("workload", id, key.clone(), passed, details));
        }
    }
    out
}

fn shell_check(script: &str, env: &BTreeMap<String, String>, cwd: &Path, timeout: Option<Dur>) -> (bool, Vec<String>) {
    let timeout = timeout.map(|d| d.0).unwrap_or(Duration::from_secs(60));
    match run_hook(script, env, cwd, timeout, None) {
        Ok(o) if o.ok() => (true, tail(&o.output, 20)),
        Ok(o) => {
            let mut d = tail(&o.output, 20);
            d.push(o.describe());
            (false, d)
        }
        Err(e) => (false, vec![format!("could not run the check: {e}")]),
    }
}

fn experiment_check(data: &RunData, c: &Check) -> (bool, Vec<String>) {
    match c.kind.value {
        CheckKind::Shell => {
            let mut env = BTreeMap::new();
            env.insert("CHAOS_RUN_DIR".to_string(), data.run_dir.display().to_string());
            env.insert("CHAOS_EXPERIMENT".to_string(), data.experiment.id.value.clone());
            shell_check(c.run.as_deref().unwrap_or("false"), &env, &data.run_dir, c.timeout)
        }
        CheckKind::Metric => metric_check(&data.run_dir, c),
        CheckKind::Timeline => timeline_check(&data.timeline, c),
    }
}

/// A scraped sample value as recorded: a number, or "NaN", "+Inf", "-Inf" (or a number in a string).
pub fn sample_value(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "+Inf" => Some(f64::INFINITY),
            "-Inf" => Some(f64::NEG_INFINITY),
            _ => s.parse().ok(),
        },
        _ => None,
    }
}

/// The matching series summed per scrape, in scrape order.
pub fn metric_series(scrapes: &[Value], metric: &str, labels: &BTreeMap<String, String>) -> Vec<f64> {
    let mut out = Vec::new();
    for s in scrapes {
        let Some(samples) = s["samples"].as_array() else { continue };
        let mut sum = None;
        for x in samples {
            if x["name"].as_str() != Some(metric) {
                continue;
            }
            let ok = labels.iter().all(|(k, v)| x["labels"].get(k).and_then(Value::as_str) == Some(v.as_str()));
            if !ok {
                continue;
            }
            if let Some(v) = sample_value(&x["value"]) {
                sum = Some(sum.unwrap_or(0.0) + v);
            }
        }
        if let Some(v) = sum {
            out.push(v);
        }
    }
    out
}

pub fn aggregate(values: &[f64], how: Aggregate) -> Option<f64> {
    let first = *values.first()?;
    Some(match how {
        Aggregate::Last => *values.last()?,
        Aggregate::First => first,
        Aggregate::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        Aggregate::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Aggregate::Increase => {
            let mut inc = 0.0;
            for w in values.windows(2) {
                inc += if w[1] >= w[0] { w[1] - w[0] } else { w[1] };
            }
            inc
        }
    })
}

fn metric_check(run_dir: &Path, c: &Check) -> (bool, Vec<String>) {
    let target = c.target.as_deref().unwrap_or("");
    let metric = c.metric.as_deref().unwrap_or("");
    let path = run_dir.join("system/metrics").join(format!("{target}.jsonl"));
    let scrapes = match read_jsonl(&path) {
        Ok(s) => s,
        Err(_) => return (false, vec![format!("no scrapes of {target}: {} is missing", path.display())]),
    };
    let ok_scrapes = scrapes.iter().filter(|s| s.get("samples").is_some()).count();
    let series = metric_series(&scrapes, metric, &c.labels);
    let how = c.aggregate.unwrap_or(Aggregate::Last);
    let op = c.op.unwrap_or(Cmp::Eq);
    let want = c.value.unwrap_or(0.0);
    let sel = if c.labels.is_empty() {
        metric.to_string()
    } else {
        let l: Vec<String> = c.labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        format!("{metric}{{{}}}", l.join(","))
    };
    match aggregate(&series, how) {
        None => (false, vec![format!("{sel} is in none of the {ok_scrapes} scrapes of {target}")]),
        Some(v) => {
            let passed = op.apply(v, want);
            let how_s = how.name();
            (passed, vec![format!("{how_s} of {sel} over {} scrapes = {v}, want {} {want}", series.len(), op.symbol())])
        }
    }
}

fn timeline_check(tl: &[Value], c: &Check) -> (bool, Vec<String>) {
    if let Some(ev) = &c.event {
        let found = tl.iter().find(|e| event_matches(e, ev, &c.where_));
        let desc = if c.where_.is_empty() { ev.clone() } else { format!("{ev} {:?}", c.where_) };
        return match (found, c.happened) {
            (Some(e), true) => (true, vec![format!("{desc} at t={}", e["t"])]),
            (None, true) => (false, vec![format!("no {desc} in the timeline")]),
            (None, false) => (true, vec![]),
            (Some(e), false) => (false, vec![format!("{desc} happened at t={}", e["t"])]),
        };
    }
    let mut from = 0;
    for m in &c.order {
        match tl[from..].iter().position(|e| event_matches(e, &m.event, &m.where_)) {
            Some(i) => from += i + 1,
            None => return (false, vec![format!("no {} {:?} after the events before it", m.event, m.where_)]),
        }
    }
    (true, vec![])
}

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
    fn aggregates_with_counter_reset() {
        let v = [5.0, 7.0, 2.0, 4.0];
        assert_eq!(aggregate(&v, Aggregate::Increase), Some(6.0));
        assert_eq!(aggregate(&v, Aggregate::Min), Some(2.0));
        assert_eq!(aggregate(&v, Aggregate::Max), Some(7.0));
        assert_eq!(aggregate(&v, Aggregate::Last), Some(4.0));
        assert_eq!(aggregate(&[], Aggregate::Last), None);
    }

    #[test]
    fn series_sums_matching_labels() {
        let scrapes = vec![
            json!({"samples": [{"name": "m", "labels": {"a": "1"}, "value": 2}, {"name": "m", "labels": {"a": "2"}, "value": 3}]}),
            json!({"error": "down"}),
            json!({"samples": [{"name": "m", "labels": {"a": "1"}, "value": "NaN"}]}),
        ];
        assert_eq!(metric_series(&scrapes, "m", &BTreeMap::new()).len(), 2);
        let mut l = BTreeMap::new();
        l.insert("a".to_string(), "2".to_string());
        assert_eq!(metric_series(&scrapes, "m", &l), vec![3.0]);
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

    fn run_data(dir: &Path) -> RunData {
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

    #[test]
    fn an_unreadable_instance_directory_fails_the_check_with_the_reason() {
        let d = tempfile::tempdir().unwrap();
        let data = run_data(d.path());
        // A file where the directory of instances should be: listing it fails (not "no instance ran").
        std::fs::create_dir_all(d.path().join("workloads/w")).unwrap();
        std::fs::write(d.path().join("workloads/w/instances"), "").unwrap();
        let ev = evaluate(&data, true);
        let c = ev.checks.iter().find(|c| c.id == "w/ok").unwrap();
        assert!(!c.passed);
        assert!(c.details[0].starts_with("cannot list the instances: "), "{:?}", c.details);
        assert!(c.details[0].contains("workloads/w/instances"), "{:?}", c.details);
    }
}
