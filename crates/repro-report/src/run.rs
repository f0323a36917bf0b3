//! A run directory read for reporting: the experiment, verdict, manifest, timeline and scraped metrics,
//! and the timeline turned into lanes (states over time), operation bands and marks.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repro_model::chaos::Experiment;
use serde_json::Value;

use crate::error::{ReportError, Result};

/// One scrape of one target.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub t: f64,
    pub ts: String,
    pub samples: Vec<Sample>,
    pub error: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Everything scraped from one target.
#[derive(Debug, Clone, Default)]
pub struct TargetMetrics {
    pub scrapes: Vec<Scrape>,
    /// family -> type (`# TYPE`).
    pub types: BTreeMap<String, String>,
}

/// A run directory, read once.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    pub id: String,
    pub experiment: Experiment,
    pub adapter: String,
    pub manifest: Value,
    /// `verdict.json`; `None` while the run is incomplete.
    pub verdict: Option<Value>,
    pub incomplete: bool,
    pub timeline: Vec<Value>,
    /// target -> metrics, in name order.
    pub metrics: BTreeMap<String, TargetMetrics>,
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| ReportError::io(path, e))
}

/// JSON lines; a torn last line (the harness was killed mid-write) is skipped, any other bad line is an error.
pub fn read_jsonl(path: &Path) -> Result<Vec<Value>> {
    let text = read_text(path)?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(l) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => {
                return Err(ReportError::Malformed {
                    path: path.to_path_buf(),
                    message: format!("line {}: {e}", i + 1),
                })
            }
        }
    }
    Ok(out)
}

fn read_json(path: &Path) -> Result<Value> {
    let text = read_text(path)?;
    serde_json::from_str(&text).map_err(|e| ReportError::Malformed { path: path.to_path_buf(), message: e.to_string() })
}

pub use repro_chaos::evaluate::sample_value;

#[derive(serde::Deserialize)]
struct RawScrape {
    t: f64,
    #[serde(default)]
    ts: String,
    #[serde(default)]
    samples: Vec<RawSample>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(serde::Deserialize)]
struct RawSample {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    value: Value,
}

/// One line of `system/metrics/<target>.jsonl`, parsed straight into a scrape (a busy exporter writes
/// hundreds of samples per line).
fn parse_scrape_line(line: &str) -> Option<Scrape> {
    let raw: RawScrape = serde_json::from_str(line).ok()?;
    let error = raw.error.map(|e| e.as_str().map(str::to_string).unwrap_or_else(|| e.to_string()));
    let samples = raw
        .samples
        .into_iter()
        .filter_map(|x| Some(Sample { name: x.name, labels: x.labels, value: sample_value(&x.value)? }))
        .collect();
    Some(Scrape { t: raw.t, ts: raw.ts, samples, error })
}

/// The scrapes of a metrics file; a torn last line is skipped, any other bad line is an error.
fn read_scrapes(path: &Path) -> Result<Vec<Scrape>> {
    let text = read_text(path)?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match parse_scrape_line(l) {
            Some(s) => out.push(s),
            None if i + 1 == lines.len() && !text.ends_with('\n') => {}
            None => {
                return Err(ReportError::Malformed {
                    path: path.to_path_buf(),
                    message: format!("line {}: not a scrape ({{\"t\", \"ts\", \"samples\"|\"error\"}})", i + 1),
                })
            }
        }
    }
    Ok(out)
}

impl Run {
    /// Reads `dir`; only the run directory is read, nothing else.
    pub fn read(dir: &Path) -> Result<Run> {
        let not_run = |reason: &str| ReportError::NotARun { path: dir.to_path_buf(), reason: reason.to_string() };
        if !dir.is_dir() {
            return Err(not_run("no such directory"));
        }
        let exp_path = dir.join("experiment.yaml");
        if !exp_path.is_file() {
            return Err(not_run("no experiment.yaml"));
        }
        let experiment = repro_chaos::load::parse_experiment(&exp_path, &read_text(&exp_path)?)?;
        let manifest_path = dir.join("manifest.json");
        let manifest = if manifest_path.is_file() { read_json(&manifest_path)? } else { Value::Null };
        let verdict_path = dir.join("verdict.json");
        let incomplete = dir.join("INCOMPLETE").exists();
        let verdict = if verdict_path.is_file() && !incomplete { Some(read_json(&verdict_path)?) } else { None };
        let tl_path = dir.join("timeline.jsonl");
        let timeline = if tl_path.is_file() { read_jsonl(&tl_path)? } else { Vec::new() };
        let adapter = manifest["adapter"]["name"]
            .as_str()
            .or_else(|| timeline.first().and_then(|e| e["adapter"].as_str()))
            .unwrap_or("?")
            .to_string();
        let mut metrics = BTreeMap::new();
        let mdir = dir.join("system/metrics");
        let rd = match std::fs::read_dir(&mdir) {
            Ok(rd) => Some(rd),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None, // nothing was scraped
            Err(e) => return Err(ReportError::io(&mdir, e)),
        };
        if let Some(rd) = rd {
            let mut files: Vec<PathBuf> = Vec::new();
            for e in rd {
                files.push(e.map_err(|e| ReportError::io(&mdir, e))?.path());
            }
            files.sort();
            for f in files {
                let Some(name) = f.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
                let Some(target) = name.strip_suffix(".jsonl") else { continue };
                let scrapes = read_scrapes(&f)?;
                let types_path = mdir.join(format!("{target}.types.json"));
                let types = if types_path.is_file() {
                    let v = read_json(&types_path)?;
                    let m = v.as_object().ok_or_else(|| ReportError::Malformed {
                        path: types_path.clone(),
                        message: "expected an object of family types".into(),
                    })?;
                    m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("untyped").to_string())).collect()
                } else {
                    BTreeMap::new()
                };
                metrics.insert(target.to_string(), TargetMetrics { scrapes, types });
            }
        }
        let id = manifest["run"].as_str().map(str::to_string).unwrap_or_else(|| match dir.file_name() {
            Some(n) => n.to_string_lossy().into_owned(),
            None => dir.display().to_string(),
        });
        Ok(Run { dir: dir.to_path_buf(), id, experiment, adapter, manifest, verdict, incomplete, timeline, metrics })
    }

    /// The verdict word: PASS, FAIL, XFAIL, ERROR, n/a, or INCOMPLETE.
    pub fn verdict_word(&self) -> String {
        match &self.verdict {
            Some(v) => v["verdict"].as_str().unwrap_or("?").to_string(),
            None => "INCOMPLETE".to_string(),
        }
    }

    pub fn verdict_reason(&self) -> String {
        match &self.verdict {
            Some(v) => v["reason"].as_str().unwrap_or("").to_string(),
            None => "the run is incomplete (INCOMPLETE marker or no verdict.json)".to_string(),
        }
    }

    /// The checks of verdict.json (none while the run has no verdict).
    pub fn checks(&self) -> Vec<Value> {
        self.verdict.as_ref().and_then(|v| v["checks"].as_array().cloned()).unwrap_or_default()
    }

    /// Seconds from the start to the last thing recorded.
    pub fn duration(&self) -> f64 {
        let mut end: f64 = 0.0;
        for e in &self.timeline {
            if let Some(t) = e["t"].as_f64() {
                end = end.max(t);
            }
        }
        for m in self.metrics.values() {
            for s in &m.scrapes {
                end = end.max(s.t);
            }
        }
        end
    }
}

/// What a lane is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LaneKind {
    Target,
    Instance,
}

/// A state held from `start` to `end`.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub start: f64,
    pub end: f64,
    pub state: String,
}

#[derive(Debug, Clone)]
pub struct Lane {
    pub name: String,
    pub kind: LaneKind,
    pub segments: Vec<Segment>,
}

/// One run of an operation, from its start to its end (finished or reverted, whichever is later).
#[derive(Debug, Clone)]
pub struct Band {
    pub operation: String,
    pub run: u64,
    pub uses: String,
    pub start: f64,
    /// `None` while it never ended (the run was cut short).
    pub end: Option<f64>,
    pub reverted: bool,
    pub hits: Vec<String>,
}

impl Band {
    pub fn end_or(&self, run_end: f64) -> f64 {
        self.end.unwrap_or(run_end)
    }
}

/// A point event: a signal, a check result, a harness error.
#[derive(Debug, Clone)]
pub struct Mark {
    pub t: f64,
    pub kind: MarkKind,
    pub label: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    Signal,
    CheckOk,
    CheckFailed,
    Error,
}

#[derive(Debug, Clone, Default)]
pub struct Lanes {
    pub lanes: Vec<Lane>,
    pub bands: Vec<Band>,
    pub marks: Vec<Mark>,
    pub end: f64,
}

fn str_field<'a>(e: &'a Value, k: &str) -> Option<&'a str> {
    e.get(k).and_then(Value::as_str)
}

fn list_field(e: &Value, k: &str) -> Vec<String> {
    e.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default() // an event without the field
}

struct LaneState {
    kind: LaneKind,
    order: usize,
    current: Option<(String, f64)>,
    /// The state before a freeze, restored when it is reverted.
    before_freeze: Option<String>,
    segments: Vec<Segment>,
}

impl LaneState {
    fn set(&mut self, t: f64, state: &str) {
        if let Some((s, since)) = self.current.take() {
            if s == state {
                self.current = Some((s, since));
                return;
            }
            if t > since {
                self.segments.push(Segment { start: since, end: t, state: s });
            }
        }
        self.current = Some((state.to_string(), t));
    }
}

/// Turns the timeline into lanes (targets first, then instances, each in order of appearance), operation
/// bands and marks.
pub fn lanes(run: &Run) -> Lanes {
    let end = run.duration();
    let mut states: BTreeMap<String, LaneState> = BTreeMap::new();
    let mut bands: Vec<Band> = Vec::new();
    let mut marks = Vec::new();
    let lane = |states: &mut BTreeMap<String, LaneState>, name: &str, kind: LaneKind| {
        let order = states.len();
        states.entry(name.to_string()).or_insert(LaneState {
            kind,
            order,
            current: None,
            before_freeze: None,
            segments: Vec::new(),
        });
    };
    for e in &run.timeline {
        let Some(t) = e["t"].as_f64() else { continue };
        let Some(ev) = str_field(e, "event") else { continue };
        let target = str_field(e, "target");
        let instance = str_field(e, "instance");
        match ev {
            "target.started" | "target.restarted" | "target.healthy" | "target.unhealthy" | "target.exited"
            | "target.stopping" | "target.stopped" => {
                let Some(name) = target else { continue };
                lane(&mut states, name, LaneKind::Target);
                let st = match ev {
                    "target.started" | "target.restarted" => "starting",
                    "target.healthy" => "up",
                    "target.unhealthy" => "unhealthy",
                    "target.exited" => "down",
                    _ => "stopped",
                };
                if let Some(l) = states.get_mut(name) {
                    // An exit after the stop at the end of the run stays "stopped".
                    let stopped = l.current.as_ref().is_some_and(|c| c.0 == "stopped");
                    if !(stopped && ev == "target.exited") {
                        l.set(t, st);
                    }
                }
            }
            "instance.created" => {
                let Some(name) = instance else { continue };
                lane(&mut states, name, LaneKind::Instance);
                if let Some(l) = states.get_mut(name) {
                    l.set(t, "running");
                }
            }
            "instance.state" => {
                let Some(name) = instance else { continue };
                lane(&mut states, name, LaneKind::Instance);
                let st = str_field(e, "state").unwrap_or("ended").to_ascii_lowercase();
                if let Some(l) = states.get_mut(name) {
                    l.set(t, &st);
                }
            }
            "operation.started" => {
                let op = str_field(e, "operation").unwrap_or("?").to_string();
                let run_no = e["run"].as_u64().unwrap_or(1);
                let mut hits = list_field(e, "instances");
                if hits.is_empty() {
                    hits = list_field(e, "selected");
                }
                bands.push(Band {
                    operation: op,
                    run: run_no,
                    uses: str_field(e, "uses").unwrap_or("").to_string(),
                    start: t,
                    end: None,
                    reverted: false,
                    hits,
                });
            }
            "operation.finished" | "operation.reverted" | "operation.undo" => {
                let op = str_field(e, "operation").unwrap_or("?");
                let run_no = e["run"].as_u64().unwrap_or(1);
                if let Some(b) = bands.iter_mut().rev().find(|b| b.operation == op && b.run == run_no) {
                    let extends = match ev {
                        "operation.finished" | "operation.reverted" => true,
                        // An undo at the end of the flow ends a fault still in effect (a freeze without a
                        // duration); a kill's undo (start again) is not part of the fault.
                        _ => !b.reverted && matches!(b.uses.as_str(), "freeze" | "outage"),
                    };
                    if ev == "operation.reverted" {
                        b.reverted = true;
                    }
                    if extends {
                        b.end = Some(b.end.map_or(t, |x: f64| x.max(t)));
                    }
                }
                if ev != "operation.finished" {
                    for name in frozen_of(&bands, op, run_no) {
                        if let Some(l) = states.get_mut(&name) {
                            if let Some(prev) = l.before_freeze.take() {
                                l.set(t, &prev);
                            }
                        }
                    }
                }
            }
            "operation.verified" => {
                let effect = str_field(e, "effect").unwrap_or("");
                let hit = list_field(e, "instances");
                for name in &hit {
                    let Some(l) = states.get_mut(name) else { continue };
                    match effect {
                        "stopped" => {
                            l.before_freeze = l.current.as_ref().map(|c| c.0.clone());
                            l.set(t, "frozen");
                        }
                        // An instance's end is its instance.state (Killed); a target is down until restarted.
                        "gone" if l.kind == LaneKind::Target => l.set(t, "down"),
                        _ => {}
                    }
                }
            }
            "signal.matched" => marks.push(Mark {
                t,
                kind: MarkKind::Signal,
                label: format!(
                    "signal {}: {}",
                    str_field(e, "signal").unwrap_or("?"),
                    str_field(e, "line").unwrap_or("")
                ),
            }),
            "check.finished" => {
                let ok = e["ok"].as_bool().unwrap_or(false);
                let outcome = str_field(e, "outcome").unwrap_or(if ok { "ok" } else { "failed" });
                marks.push(Mark {
                    t,
                    kind: if ok { MarkKind::CheckOk } else { MarkKind::CheckFailed },
                    label: format!("check {}: {outcome}", str_field(e, "check").unwrap_or("?")),
                });
            }
            "harness.error" => marks.push(Mark {
                t,
                kind: MarkKind::Error,
                label: format!("harness error: {}", str_field(e, "reason").unwrap_or("")),
            }),
            _ => {}
        }
    }
    let mut out: Vec<(LaneKind, usize, Lane)> = states
        .into_iter()
        .map(|(name, mut l)| {
            if let Some((s, since)) = l.current.take() {
                if end > since {
                    l.segments.push(Segment { start: since, end, state: s });
                }
            }
            (l.kind, l.order, Lane { name, kind: l.kind, segments: l.segments })
        })
        .collect();
    out.sort_by_key(|a| (a.0, a.1));
    Lanes { lanes: out.into_iter().map(|x| x.2).collect(), bands, marks, end }
}

fn frozen_of(bands: &[Band], op: &str, run: u64) -> Vec<String> {
    bands.iter().filter(|b| b.operation == op && b.run == run).flat_map(|b| b.hits.clone()).collect()
}

/// A time series: one sample name and label set over the scrapes.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn label(&self) -> String {
        if self.labels.is_empty() {
            return self.name.clone();
        }
        let l: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        format!("{}{{{}}}", self.name, l.join(","))
    }
}

/// The families scraped from a target, each with its series (sample names grouped by `# TYPE` family).
pub fn families(m: &TargetMetrics) -> BTreeMap<String, Vec<Series>> {
    type Key = (String, Vec<(String, String)>);
    let mut by: BTreeMap<String, BTreeMap<Key, Series>> = BTreeMap::new();
    for s in &m.scrapes {
        for x in &s.samples {
            let fam = repro_chaos::prom::family_of(&x.name, &m.types).to_string();
            let key = (x.name.clone(), x.labels.iter().map(|(a, b)| (a.clone(), b.clone())).collect());
            by.entry(fam)
                .or_default()
                .entry(key)
                .or_insert_with(|| Series { name: x.name.clone(), labels: x.labels.clone(), points: Vec::new() })
                .points
                .push((s.t, x.value));
        }
    }
    by.into_iter().map(|(k, v)| (k, v.into_values().collect())).collect()
}

/// Times of failed scrapes.
pub fn scrape_errors(m: &TargetMetrics) -> Vec<(f64, String)> {
    m.scrapes.iter().filter_map(|s| s.error.as_ref().map(|e| (s.t, e.clone()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run_of(timeline: Vec<Value>) -> Run {
        let yaml = "apiVersion: repro.dev/chaos/v1\nid: t\nversion: 1\ntitle: t\nhypothesis: h\ntimeout: 1m\n";
        Run {
            dir: PathBuf::from("r"),
            id: "r".into(),
            experiment: repro_chaos::load::parse_experiment(Path::new("e.yaml"), yaml).unwrap(),
            adapter: "a".into(),
            manifest: Value::Null,
            verdict: None,
            incomplete: true,
            timeline,
            metrics: BTreeMap::new(),
        }
    }

    fn states(l: &Lane) -> Vec<(f64, f64, &str)> {
        l.segments.iter().map(|s| (s.start, s.end, s.state.as_str())).collect()
    }

    #[test]
    fn the_timeline_becomes_lanes_bands_and_marks() {
        let r = run_of(vec![
            json!({"t": 0.0, "event": "target.started", "target": "db"}),
            json!({"t": 0.5, "event": "target.healthy", "target": "db"}),
            json!({"t": 1.0, "event": "instance.created", "instance": "w-0"}),
            json!({"t": 2.0, "event": "operation.started", "operation": "crash", "uses": "kill", "run": 1, "instances": ["db"]}),
            json!({"t": 2.1, "event": "operation.verified", "operation": "crash", "run": 1, "effect": "gone", "instances": ["db"]}),
            json!({"t": 2.2, "event": "operation.finished", "operation": "crash", "run": 1}),
            json!({"t": 3.0, "event": "operation.started", "operation": "pause", "uses": "freeze", "run": 1, "instances": ["w-0"]}),
            json!({"t": 3.1, "event": "operation.verified", "operation": "pause", "run": 1, "effect": "stopped", "instances": ["w-0"]}),
            json!({"t": 4.0, "event": "operation.reverted", "operation": "pause", "run": 1, "ok": true}),
            json!({"t": 4.0, "event": "operation.finished", "operation": "pause", "run": 1}),
            json!({"t": 4.5, "event": "signal.matched", "signal": "ready", "line": "up"}),
            json!({"t": 4.6, "event": "instance.created", "instance": "w-1"}),
            json!({"t": 4.7, "event": "instance.state", "instance": "w-1", "state": "Killed"}),
            json!({"t": 4.8, "event": "operation.verified", "operation": "k", "run": 1, "effect": "gone", "instances": ["w-1"]}),
            json!({"t": 5.0, "event": "instance.state", "instance": "w-0", "state": "Succeeded"}),
            json!({"t": 6.0, "event": "operation.undo", "operation": "crash", "uses": "kill", "run": 1, "ok": true}),
            json!({"t": 6.0, "event": "target.restarted", "target": "db"}),
            json!({"t": 6.5, "event": "target.healthy", "target": "db"}),
            json!({"t": 7.0, "event": "target.stopping", "target": "db"}),
            json!({"t": 7.2, "event": "target.exited", "target": "db"}),
            json!({"t": 7.3, "event": "check.finished", "check": "adapter/x", "ok": false}),
            json!({"t": 8.0, "event": "run.finished"}),
        ]);
        let l = lanes(&r);
        assert_eq!(l.lanes.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["db", "w-0", "w-1"]);
        assert_eq!(states(&l.lanes[2]), [(4.6, 4.7, "running"), (4.7, 8.0, "killed")]);
        assert_eq!(
            states(&l.lanes[0]),
            [
                (0.0, 0.5, "starting"),
                (0.5, 2.1, "up"),
                (2.1, 6.0, "down"),
                (6.0, 6.5, "starting"),
                (6.5, 7.0, "up"),
                (7.0, 8.0, "stopped")
            ]
        );
        assert_eq!(
            states(&l.lanes[1]),
            [(1.0, 3.1, "running"), (3.1, 4.0, "frozen"), (4.0, 5.0, "running"), (5.0, 8.0, "succeeded")]
        );
        // A kill's band ends when it finished (its undo at the end is not part of it); a freeze's when reverted.
        assert_eq!(
            l.bands.iter().map(|b| (b.operation.as_str(), b.start, b.end)).collect::<Vec<_>>(),
            [("crash", 2.0, Some(2.2)), ("pause", 3.0, Some(4.0))]
        );
        assert_eq!(l.marks.iter().map(|m| m.kind).collect::<Vec<_>>(), [MarkKind::Signal, MarkKind::CheckFailed]);
    }

    #[test]
    fn torn_last_lines_are_skipped_other_bad_lines_are_errors() {
        let d = std::env::temp_dir().join(format!("repro-report-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("x.jsonl");
        std::fs::write(&p, "{\"t\": 1}\n{\"t\": 2").unwrap();
        assert_eq!(read_jsonl(&p).unwrap().len(), 1);
        std::fs::write(&p, "{\"t\": 1}\nnope\n{\"t\": 2}\n").unwrap();
        assert!(read_jsonl(&p)
            .unwrap_err()
            .to_string()
            .ends_with("x.jsonl: line 2: expected ident at line 1 column 2"));
        std::fs::write(&p, "{\"t\": 0.5, \"ts\": \"x\", \"samples\": [{\"name\": \"up\", \"value\": \"NaN\"}]}\n")
            .unwrap();
        let s = read_scrapes(&p).unwrap();
        assert!(s[0].samples[0].value.is_nan() && s[0].samples[0].labels.is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
