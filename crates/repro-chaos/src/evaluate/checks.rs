//! The checks evaluated from a run directory: workload checks per instance, and the experiment's shell,
//! metric and timeline checks.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{read_env_file, tail, CheckResult, RunData};
use crate::error::{ChaosError, Result};
use crate::fsutil::read_jsonl;
use crate::model::*;
use crate::proc::run_hook;
use crate::timeline::event_matches;

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

pub(super) fn workload_checks(data: &RunData, w: &Workload) -> Vec<CheckResult> {
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

pub(super) fn experiment_check(data: &RunData, c: &Check) -> (bool, Vec<String>) {
    match c.kind.value {
        CheckKind::Shell => {
            let mut env = BTreeMap::new();
            env.insert("CHAOS_RUN_DIR".to_string(), data.run_dir.display().to_string());
            env.insert("CHAOS_EXPERIMENT".to_string(), data.experiment.id.value.clone());
            shell_check(c.run.as_deref().unwrap_or("false"), &env, &data.run_dir, c.timeout)
        }
        CheckKind::Metric => metric_check(&data.run_dir, c),
        CheckKind::Timeline => timeline_check(&data.timeline, c),
        CheckKind::Linearizable | CheckKind::Set | CheckKind::Counter => {
            let (passed, details, _) = super::history::history_check(&data.run_dir, c);
            (passed, details)
        }
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
    use crate::evaluate::evaluate;
    use serde_json::json;

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

    fn run_data(dir: &Path) -> RunData {
        super::super::tests::run_data(dir)
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
