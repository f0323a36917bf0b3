//! What the commands do: find experiments and adapters, list, show, preflight, run, evaluate.
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{ChaosError, Result};
use crate::evaluate::{self, CheckResult, Evaluation, RunData, Verdict};
use crate::fsutil;
use crate::limits::Limits;
use crate::load::{self, LoadedAdapter, LoadedExperiment};
use crate::model::*;
use crate::runner;

/// Where `list` and id lookups search when no directory is given: `examples/chaos` if present, else `.`.
pub fn default_search_dir() -> PathBuf {
    let ex = PathBuf::from("examples/chaos");
    if ex.is_dir() {
        ex
    } else {
        PathBuf::from(".")
    }
}

fn yaml_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let Some(name) = p.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if p.is_dir() {
            if depth > 0 {
                yaml_files(&p, depth - 1, out);
            }
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            out.push(p);
        }
    }
}

/// Every experiment under `dir` (adapters and other YAML are skipped); files that fail to parse come
/// back as errors.
pub fn find_experiments(dir: &Path) -> Vec<Result<LoadedExperiment>> {
    find_experiments_with(dir, &Limits::default())
}

/// [`find_experiments`] with the given limits. A file is an experiment file when it names the chaos API
/// (`apiVersion`) and no other kind; one that does but cannot be read, is larger than the limit or does not parse
/// is an error (never skipped), and so is an experiment whose id another file under `dir` already has.
pub fn find_experiments_with(dir: &Path, limits: &Limits) -> Vec<Result<LoadedExperiment>> {
    use std::io::Read;
    let mut files = Vec::new();
    yaml_files(dir, 4, &mut files);
    let mut out: Vec<Result<LoadedExperiment>> = Vec::new();
    let names_api = |b: &[u8]| b.windows(API_VERSION.len()).any(|w| w == API_VERSION.as_bytes());
    for f in files {
        let mut bytes = Vec::new();
        let read =
            std::fs::File::open(&f).and_then(|h| h.take(limits.file_bytes.saturating_add(1)).read_to_end(&mut bytes));
        if let Err(e) = read {
            out.push(Err(ChaosError::io(&f, e)));
            continue;
        }
        if bytes.len() as u64 > limits.file_bytes {
            if names_api(&bytes[..bytes.len().min(64 << 10)]) {
                out.push(Err(ChaosError::Invalid {
                    path: f.clone(),
                    line: 1,
                    column: 1,
                    field: "(document)".into(),
                    message: Limits::exceeded("the file's size", limits.file_bytes, "bytes"),
                }));
            }
            continue;
        }
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                if names_api(e.as_bytes()) {
                    let why = std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not UTF-8 text ({e})"));
                    out.push(Err(ChaosError::io(&f, why)));
                }
                continue;
            }
        };
        let is_experiment = match load::sniff_kind(&text) {
            Some((api, kind)) => api == API_VERSION && kind.as_deref().is_none_or(|k| k == "experiment"),
            // It does not parse far enough to say: an experiment file if it names the API (the parse says why).
            None => names_api(text.as_bytes()),
        };
        if is_experiment {
            out.push(load::parse_experiment_with(&f, &text, limits).map(|experiment| LoadedExperiment {
                path: f.clone(),
                text,
                experiment,
            }));
        }
    }
    // An id names one experiment: every later file with a taken id is an error naming the first.
    let mut first: std::collections::BTreeMap<String, PathBuf> = std::collections::BTreeMap::new();
    for r in out.iter_mut() {
        let Ok(l) = r else { continue };
        let id = &l.experiment.id;
        match first.get(&id.value) {
            Some(earlier) => {
                *r = Err(ChaosError::DuplicateId {
                    path: l.path.clone(),
                    line: id.line,
                    column: id.column,
                    id: id.value.clone(),
                    first: earlier.clone(),
                });
            }
            None => {
                first.insert(id.value.clone(), l.path.clone());
            }
        }
    }
    out
}

/// An experiment by path, or by id under `dir`.
pub fn resolve_experiment(arg: &str, dir: &Path) -> Result<LoadedExperiment> {
    resolve_experiment_with(arg, dir, &Limits::default())
}

/// [`resolve_experiment`], checked against `limits`.
pub fn resolve_experiment_with(arg: &str, dir: &Path, limits: &Limits) -> Result<LoadedExperiment> {
    let p = Path::new(arg);
    if p.is_file() {
        return load::load_experiment_with(p, limits);
    }
    // The first file with the id, unless another file claims it too (then the duplicate's error names both).
    let mut hit = None;
    for r in find_experiments_with(dir, limits) {
        match r {
            Err(e @ ChaosError::DuplicateId { .. }) if matches!(&e, ChaosError::DuplicateId { id, .. } if id == arg) => {
                return Err(e)
            }
            Ok(e) if hit.is_none() && e.experiment.id.value == arg => hit = Some(e),
            _ => {}
        }
    }
    if let Some(e) = hit {
        return Ok(e);
    }
    Err(ChaosError::NotFound(arg.to_string(), dir.display().to_string()))
}

/// An adapter by path, or by name next to the experiment (`adapters/<name>.yaml`, `../adapters/<name>.yaml`);
/// `process` is built in.
pub fn resolve_adapter(arg: Option<&str>, exp: &LoadedExperiment) -> Result<LoadedAdapter> {
    resolve_adapter_with(arg, exp, &Limits::default())
}

/// [`resolve_adapter`], checked against `limits`.
pub fn resolve_adapter_with(arg: Option<&str>, exp: &LoadedExperiment, limits: &Limits) -> Result<LoadedAdapter> {
    let a = resolve_adapter_only(arg, exp, limits)?;
    load::validate_against_adapter(&exp.path, &exp.experiment, &a.adapter)?;
    Ok(a)
}

fn resolve_adapter_only(arg: Option<&str>, exp: &LoadedExperiment, limits: &Limits) -> Result<LoadedAdapter> {
    let name = arg.unwrap_or(&exp.experiment.default_adapter);
    let p = Path::new(name);
    if p.is_file() {
        return load::load_adapter_with(p, limits);
    }
    let base = exp.path.parent().unwrap_or(Path::new("."));
    let candidates =
        [base.join("adapters").join(format!("{name}.yaml")), base.join("../adapters").join(format!("{name}.yaml"))];
    for c in &candidates {
        if c.is_file() {
            return load::load_adapter_with(c, limits);
        }
    }
    if name == "process" {
        return Ok(load::builtin_process_adapter());
    }
    Err(ChaosError::AdapterNotFound(name.to_string(), base.join("adapters").display().to_string()))
}

/// Issues an experiment mentions (its `issues` and its expectations').
pub fn issues_of(e: &Experiment) -> Vec<String> {
    let mut v: Vec<String> = e.issues.clone();
    for x in &e.expectations {
        if !v.contains(&x.issue.value) {
            v.push(x.issue.value.clone());
        }
    }
    v
}

#[derive(Debug, Serialize)]
pub struct ListEntry {
    pub id: String,
    pub version: u32,
    pub title: String,
    pub hypothesis: String,
    pub issues: Vec<String>,
    pub path: PathBuf,
}

pub fn list(dir: &Path, issue: Option<&str>) -> (Vec<ListEntry>, Vec<ChaosError>) {
    list_with(dir, issue, &Limits::default())
}

/// [`list`], checking each experiment against `limits`.
pub fn list_with(dir: &Path, issue: Option<&str>, limits: &Limits) -> (Vec<ListEntry>, Vec<ChaosError>) {
    let mut ok = Vec::new();
    let mut errs = Vec::new();
    for r in find_experiments_with(dir, limits) {
        match r {
            Ok(l) => {
                let e = &l.experiment;
                let issues = issues_of(e);
                if issue.is_some_and(|i| !issues.iter().any(|x| x == i)) {
                    continue;
                }
                ok.push(ListEntry {
                    id: e.id.value.clone(),
                    version: e.version,
                    title: e.title.clone(),
                    hypothesis: e.hypothesis.trim().to_string(),
                    issues,
                    path: l.path.clone(),
                });
            }
            Err(err) => errs.push(err),
        }
    }
    ok.sort_by(|a, b| a.id.cmp(&b.id));
    (ok, errs)
}

/// The experiment as JSON (for `show --json`).
pub fn show_json(l: &LoadedExperiment) -> Value {
    let mut v = serde_json::to_value(&l.experiment).unwrap_or(Value::Null);
    v["path"] = json!(l.path);
    v["sha256"] = json!(fsutil::sha256_hex(l.text.as_bytes()));
    v
}

fn wrap(text: &str, indent: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + w.len() > width {
            out.push(format!("{indent}{line}"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    if !line.is_empty() {
        out.push(format!("{indent}{line}"));
    }
    out
}

fn flow_text(n: &FlowNode) -> String {
    match &n.kind {
        FlowKind::Leaf(s) => s.clone(),
        FlowKind::Op(c) => {
            let mut s = c.name.clone();
            if let Some(sel) = &c.select {
                s.push_str(&format!(" select {sel}"));
            }
            if let Some(d) = c.duration {
                s.push_str(&format!(" for {d}"));
            }
            s
        }
        FlowKind::Serial(v) => format!("serial[{}]", v.iter().map(flow_text).collect::<Vec<_>>().join(", ")),
        FlowKind::Parallel(v) => format!("parallel[{}]", v.iter().map(flow_text).collect::<Vec<_>>().join(", ")),
        FlowKind::Delay { base, jitter: None } => format!("delay {base}"),
        FlowKind::Delay { base, jitter: Some(j) } => format!("delay {base}±{j}"),
        FlowKind::Random(r) => {
            format!("random {} of [{}]", r.pick, r.from.iter().map(flow_text).collect::<Vec<_>>().join(", "))
        }
        FlowKind::Schedule(sc) => format!(
            "schedule {} x [{}] every ~{}",
            sc.length,
            sc.from.iter().map(|w| format!("{}:{}", flow_text(&w.node), w.weight)).collect::<Vec<_>>().join(", "),
            sc.interval
        ),
        FlowKind::Wait(w) => {
            let mut s = match (&w.workload, &w.signal) {
                (Some(wl), _) => format!("wait {} {}", wl.value, w.condition.map_or("", Condition::name)),
                (_, Some(sig)) => format!("wait signal {}", sig.value),
                _ => "wait".into(),
            };
            if let Some(d) = w.delay {
                s.push_str(&format!(" +{d}"));
            }
            s
        }
        FlowKind::Repeat { mode, body } => match mode {
            RepeatMode::For(d) => format!("repeat for {d} {{{}}}", flow_text(body)),
            RepeatMode::Times(n) => format!("repeat {n}x {{{}}}", flow_text(body)),
        },
    }
}

/// The human description printed by `show`.
pub fn show_text(l: &LoadedExperiment) -> String {
    let e = &l.experiment;
    let mut o = vec![
        format!("{} (v{})", e.id.value, e.version),
        e.title.clone(),
        format!("default-adapter: {}   timeout: {}", e.default_adapter, e.timeout),
    ];
    let issues = issues_of(e);
    if !issues.is_empty() {
        o.push(format!("issues: {}", issues.join(", ")));
    }
    o.push(String::new());
    o.push("hypothesis:".into());
    o.extend(wrap(&e.hypothesis, "  ", 80));
    if !e.description.trim().is_empty() {
        o.push(String::new());
        o.push("description:".into());
        o.extend(wrap(&e.description, "  ", 80));
    }
    if !e.workloads.is_empty() {
        o.push(String::new());
        o.push("workloads:".into());
        for w in &e.workloads {
            let t = w.timeout.map(|d| format!(" (timeout {d})")).unwrap_or_default(); // none: nothing to show
            o.push(format!("  {} x{}{t}", w.name.value, w.instances));
            o.extend(wrap(&w.description, "    ", 80));
            for c in &w.checks {
                o.push(format!("    check {}:", c.name.value));
                o.extend(wrap(&c.description, "      ", 80));
            }
        }
    }
    if !e.operations.is_empty() {
        o.push(String::new());
        o.push("operations:".into());
        for op in &e.operations {
            o.push(format!("  {}: {}", op.name.value, op.uses.value));
            let mut on = String::new();
            if let Some(t) = &op.target {
                on.push_str(&format!("on target {}, select {}", t.value, op.select));
            }
            if let Some(d) = op.duration {
                on.push_str(&format!(" for {d}"));
            }
            if !on.is_empty() {
                o.push(format!("    {}", on.trim()));
            }
            o.extend(wrap(&op.description, "    ", 80));
        }
    }
    if !e.steady_state.is_empty() {
        o.push(String::new());
        o.push("steady state (probed before and after the flow):".into());
        for p in &e.steady_state {
            let tol = match p.tolerance.as_ref().map(|t| &t.value) {
                Some(t) => match (&t.range, &t.equals, &t.regex) {
                    (Some([lo, hi]), _, _) => format!("exit 0 and a value in [{lo}, {hi}]"),
                    (_, Some(eq), _) => format!("exit 0 and {eq:?}"),
                    (_, _, Some(re)) => format!("exit 0 and matching /{re}/"),
                    _ => "exit 0".to_string(),
                },
                None => "exit 0".to_string(),
            };
            o.push(format!("  {}: {tol}", p.name.value));
            o.extend(wrap(&p.description, "    ", 80));
        }
    }
    if let Some(f) = &e.flow {
        o.push(String::new());
        o.push("flow:".into());
        o.extend(wrap(&flow_text(f), "  ", 80));
    }
    if !e.checks.is_empty() {
        o.push(String::new());
        o.push("checks:".into());
        for c in &e.checks {
            let kind = match c.kind.value {
                CheckKind::Shell => "shell",
                CheckKind::Metric => "metric",
                CheckKind::Timeline => "timeline",
                CheckKind::Linearizable => "linearizable",
                CheckKind::Set => "set",
                CheckKind::Counter => "counter",
            };
            o.push(format!("  {} ({kind}):", c.name.value));
            o.extend(wrap(&c.description, "    ", 80));
        }
    }
    if !e.expectations.is_empty() {
        o.push(String::new());
        o.push("expectations:".into());
        for x in &e.expectations {
            let kind = match x.kind {
                ExpectationKind::Known => "known to fail",
                ExpectationKind::Flaky => "flaky",
            };
            o.push(format!("  {}, {kind}:", x.issue));
            for c in &x.checks {
                o.push(format!("    {c}"));
            }
        }
    }
    let mut s = o.join("\n");
    s.push('\n');
    s
}

#[derive(Debug, Serialize)]
pub struct PreflightReport {
    /// `ready`, `ERROR` or `n/a`.
    pub status: String,
    pub exit_code: i32,
    pub reason: String,
    pub adapter: String,
    pub checks: Vec<CheckResult>,
}

/// Runs the preflight checks only (nothing is started, no run directory is written).
pub fn preflight(exp: &LoadedExperiment, adapter: &LoadedAdapter) -> Result<PreflightReport> {
    let name = adapter.adapter.name.clone();
    if let Some(reason) = runner::not_applicable(&exp.experiment, &adapter.adapter) {
        return Ok(PreflightReport {
            status: "n/a".into(),
            exit_code: Verdict::NotApplicable.exit_code(),
            reason,
            adapter: name,
            checks: vec![],
        });
    }
    let tmp = std::env::temp_dir().join(format!("repro-chaos-preflight-{}", std::process::id()));
    fsutil::mkdirs(&tmp)?;
    let env = crate::common::base_env(exp, adapter, "preflight", &tmp, 0, &tmp, (None, None))
        .map_err(|e| ChaosError::Harness(format!("picking ports: {e}")));
    let checks = env.map(|env| runner::run_preflight(&exp.experiment, &adapter.adapter, &env, &tmp, |_| {}));
    let cleaned = std::fs::remove_dir_all(&tmp);
    let checks = checks?;
    match cleaned {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(ChaosError::io(&tmp, e)),
        _ => {}
    }
    let failed: Vec<&str> = checks.iter().filter(|c| !c.passed).map(|c| c.id.as_str()).collect();
    Ok(if failed.is_empty() {
        PreflightReport {
            status: "ready".into(),
            exit_code: 0,
            reason: "every preflight check passed".into(),
            adapter: name,
            checks,
        }
    } else {
        PreflightReport {
            status: "ERROR".into(),
            exit_code: Verdict::Error.exit_code(),
            reason: format!("failed: {}", failed.join(", ")),
            adapter: name,
            checks,
        }
    })
}

/// Re-evaluates a run offline and writes `evaluations/<ts>.json`; the original verdict.json is untouched.
pub fn evaluate_run(run_dir: &Path, experiment: Option<&Path>) -> Result<(Evaluation, PathBuf)> {
    evaluate_run_with(run_dir, experiment, &Limits::default())
}

/// [`evaluate_run`] with the limits the experiment is checked against.
pub fn evaluate_run_with(run_dir: &Path, experiment: Option<&Path>, limits: &Limits) -> Result<(Evaluation, PathBuf)> {
    let data = RunData::read_with(run_dir, experiment, limits)?;
    let ev = evaluate::evaluate(&data, false);
    let now = fsutil::now();
    let dir = run_dir.join("evaluations");
    let mut path = dir.join(format!("{}-{:03}.json", fsutil::compact_stamp(now), now.millisecond()));
    let mut n = 1;
    while path.exists() {
        path = dir.join(format!("{}-{:03}-{n}.json", fsutil::compact_stamp(now), now.millisecond()));
        n += 1;
    }
    let v = serde_json::to_value(&ev).map_err(|e| ChaosError::Harness(e.to_string()))?;
    fsutil::write_json_atomic(&path, &v)?;
    Ok((ev, path))
}
