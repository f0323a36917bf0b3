//! `repro chaos shrink RUN`: cuts a failing run's fault schedule down to the fewest operations (and the
//! shortest durations) that still fail the same check.
//!
//! The run's flow is first **pinned**: every draw replaced by what was drawn (a jittered delay by its length, a
//! `random` node by the children it picked, a `schedule` by its steps and pauses), every repeat unrolled to the
//! rounds that ran, and every operation that ran replaced by `{op: NAME, select: [what it selected]}` at the
//! same place — so the pinned experiment does what the run did without depending on the seed. Then delta
//! debugging (Zeller's ddmin) over those operations: a candidate leaves some out (each replaced by a delay as
//! long as it took, so the later ones keep their times) and is run `runs` times; it reproduces only if every
//! run fails the check (a flake is not a reproduction). Last, each remaining duration is halved while that still
//! fails. The result is written as a new experiment file with the run directory of its last reproduction.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::error::{ChaosError, Result};
use crate::evaluate::{Evaluation, Outcome, Verdict};
use crate::fsutil::{mkdirs, write_atomic, write_json_atomic};
use crate::limits::Limits;
use crate::load::{parse_experiment_with, LoadedExperiment};
use crate::model::{Dur, Experiment, FlowKind, FlowNode, OpCall, RepeatMode, Schedule, Select};
use crate::replay::Original;
use crate::runner::{self, RunOptions};

/// One operation that ran, as a slot of the pinned flow (in the flow's pre-order).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Slot {
    pub operation: String,
    /// Where it ran in the original flow.
    pub node: String,
    pub selected: Vec<String>,
    /// Its duration (the operation's own), if it has one.
    pub duration: Option<Duration>,
    /// How long it took in the original run (seconds): a left-out slot is a delay this long.
    pub elapsed: f64,
}

fn node(kind: FlowKind) -> FlowNode {
    FlowNode { line: 0, column: 0, kind }
}

/// How many rounds each `repeat` node ran (its `node.started` events with `repeat`), by path.
pub fn repeat_rounds(timeline: &[Value]) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    for e in timeline.iter().filter(|e| e["event"] == "node.started") {
        if let (Some(p), Some(r)) = (e["node"].as_str(), e["repeat"].as_u64()) {
            let r = u32::try_from(r).unwrap_or(u32::MAX);
            let n = out.entry(p.to_string()).or_insert(0);
            *n = (*n).max(r);
        }
    }
    out
}

struct Pin<'a> {
    exp: &'a Experiment,
    schedule: &'a Schedule,
    rounds: &'a BTreeMap<String, u32>,
    slots: Vec<Slot>,
    /// Nodes the pinned flow may still hold: a run directory from someone else cannot make it unbounded.
    budget: u64,
}

impl Pin<'_> {
    fn draw(&self, path: &str) -> Option<&Value> {
        self.schedule.draws.iter().find(|d| d.node == path).map(|d| &d.draw)
    }

    fn op_slot(&mut self, name: &str, path: &str, duration: Option<Dur>) -> FlowNode {
        let Some(o) = self.schedule.operations.iter().find(|o| o.node == path) else {
            // It never ran (the flow ended before it): nothing to pin.
            return node(FlowKind::Serial(vec![]));
        };
        let own = self.exp.operations.iter().find(|op| op.name.value == name).and_then(|op| op.duration);
        let duration = duration.or(own);
        self.slots.push(Slot {
            operation: name.to_string(),
            node: path.to_string(),
            selected: o.selected.clone(),
            duration: duration.map(|d| d.0),
            elapsed: o.end.map_or(0.0, |e| (e - o.start).max(0.0)),
        });
        node(FlowKind::Op(OpCall { name: name.to_string(), select: Some(Select::Names(o.selected.clone())), duration }))
    }

    fn pin(&mut self, n: &FlowNode, path: &str) -> FlowNode {
        if self.budget == 0 {
            return node(FlowKind::Serial(vec![]));
        }
        self.budget -= 1;
        match &n.kind {
            FlowKind::Leaf(name) if self.exp.operations.iter().any(|o| &o.name.value == name) => {
                self.op_slot(name, path, None)
            }
            FlowKind::Op(c) => self.op_slot(&c.name, path, c.duration),
            FlowKind::Leaf(_) | FlowKind::Wait(_) | FlowKind::Delay { jitter: None, .. } => n.clone(),
            FlowKind::Delay { base, jitter: Some(_) } => {
                let ms = self.draw(path).and_then(|d| d["delay_ms"].as_u64());
                let d = ms.map_or(*base, |ms| Dur(Duration::from_millis(ms)));
                node(FlowKind::Delay { base: d, jitter: None })
            }
            FlowKind::Serial(v) => node(FlowKind::Serial(
                v.iter().enumerate().map(|(i, c)| self.pin(c, &format!("{path}.serial[{i}]"))).collect(),
            )),
            FlowKind::Parallel(v) => node(FlowKind::Parallel(
                v.iter().enumerate().map(|(i, c)| self.pin(c, &format!("{path}.parallel[{i}]"))).collect(),
            )),
            FlowKind::Random(r) => {
                let picked: Vec<usize> = self
                    .draw(path)
                    .and_then(|d| d["picked"].as_array())
                    .map(|a| {
                        a.iter().filter_map(|i| i.as_u64()).map(|i| i as usize).filter(|i| *i < r.from.len()).collect()
                    })
                    .unwrap_or_default();
                node(FlowKind::Serial(
                    picked.iter().map(|i| self.pin(&r.from[*i], &format!("{path}.random[{i}]"))).collect(),
                ))
            }
            FlowKind::Schedule(sc) => {
                let mut steps = Vec::new();
                for k in 0..sc.length {
                    let at = format!("{path}.schedule[{k}]");
                    let Some(d) = self.draw(&at).cloned() else { break };
                    let pause = d["pause_ms"].as_u64().unwrap_or(0);
                    let choice = d["choice"].as_u64().map_or(0, |c| c as usize).min(sc.from.len().saturating_sub(1));
                    steps.push(node(FlowKind::Delay { base: Dur(Duration::from_millis(pause)), jitter: None }));
                    steps.push(self.pin(&sc.from[choice].node, &format!("{at}.do")));
                }
                node(FlowKind::Serial(steps))
            }
            FlowKind::Repeat { mode, body } => {
                let rounds = match mode {
                    RepeatMode::Times(t) => *t,
                    RepeatMode::For(_) => self.rounds.get(path).copied().unwrap_or(0),
                };
                let rounds = rounds.min(u32::try_from(self.budget).unwrap_or(u32::MAX));
                node(FlowKind::Serial((0..rounds).map(|i| self.pin(body, &format!("{path}.repeat[{i}]"))).collect()))
            }
        }
    }
}

/// The run's flow with every draw, repeat and selection pinned, and its operation slots in pre-order; at most
/// `max_nodes` nodes (a run directory from someone else cannot make it unbounded).
pub fn pin_flow(
    exp: &Experiment,
    schedule: &Schedule,
    rounds: &BTreeMap<String, u32>,
    max_nodes: u64,
) -> (Option<FlowNode>, Vec<Slot>) {
    let mut p = Pin { exp, schedule, rounds, slots: vec![], budget: max_nodes };
    let flow = exp.flow.as_ref().map(|f| p.pin(f, "flow"));
    (flow, p.slots)
}

/// An experiment that could not be written as YAML.
#[derive(Debug, thiserror::Error)]
#[error("experiment {id:?}: cannot write it as YAML: {source}")]
pub struct ExperimentYamlError {
    pub id: String,
    #[source]
    pub source: serde_saphyr::ser::Error,
}

/// An experiment as YAML (what `shrink` writes; it loads back as the same experiment).
pub fn experiment_yaml(e: &Experiment) -> std::result::Result<String, ExperimentYamlError> {
    serde_saphyr::to_string(e).map_err(|source| ExperimentYamlError { id: e.id.value.clone(), source })
}

/// What a candidate does with each slot: run it (for this long, if it has a duration) or leave it out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Choice {
    Run(Option<Duration>),
    Leave,
}

fn delay_node(secs: f64) -> FlowNode {
    node(FlowKind::Delay { base: Dur(Duration::from_millis((secs.max(0.0) * 1000.0).round() as u64)), jitter: None })
}

/// The pinned flow with each slot (in pre-order) run or left out as `choices` say.
pub fn candidate_flow(pinned: &FlowNode, slots: &[Slot], choices: &[Choice]) -> FlowNode {
    fn walk(n: &FlowNode, slots: &[Slot], choices: &[Choice], next: &mut usize) -> FlowNode {
        match &n.kind {
            FlowKind::Op(c) => {
                let i = *next;
                *next += 1;
                let (Some(slot), Some(choice)) = (slots.get(i), choices.get(i)) else { return n.clone() };
                match choice {
                    Choice::Leave => delay_node(slot.elapsed),
                    Choice::Run(d) => {
                        let mut c = c.clone();
                        c.duration = d.map(Dur).or(c.duration);
                        let op = node(FlowKind::Op(c));
                        match (slot.duration, *d) {
                            // A shortened fault keeps the later ones at their times.
                            (Some(full), Some(short)) if short < full => {
                                node(FlowKind::Serial(vec![op, delay_node((full - short).as_secs_f64())]))
                            }
                            _ => op,
                        }
                    }
                }
            }
            FlowKind::Serial(v) => node(FlowKind::Serial(v.iter().map(|c| walk(c, slots, choices, next)).collect())),
            FlowKind::Parallel(v) => {
                node(FlowKind::Parallel(v.iter().map(|c| walk(c, slots, choices, next)).collect()))
            }
            _ => n.clone(),
        }
    }
    let mut next = 0;
    walk(pinned, slots, choices, &mut next)
}

/// Options of a shrink.
#[derive(Debug, Clone)]
pub struct ShrinkOptions {
    /// Runs of each candidate; it reproduces only if all of them fail the check.
    pub runs: u32,
    /// The check to keep failing (default: the original's first failing check).
    pub check: Option<String>,
    /// Where the shrunk experiment is written (default `RUN/shrink/<id>-shrunk.yaml`).
    pub output: Option<PathBuf>,
    /// At most this many candidates are tried.
    pub max_candidates: u32,
    pub echo: bool,
    pub limits: Limits,
    /// This program, for each run's reaper (see [`crate::reaper`]).
    pub reaper: Option<PathBuf>,
}

impl Default for ShrinkOptions {
    fn default() -> Self {
        ShrinkOptions {
            runs: 3,
            check: None,
            output: None,
            max_candidates: 64,
            echo: false,
            limits: Limits::default(),
            reaper: None,
        }
    }
}

/// One candidate tried.
#[derive(Debug, Clone, Serialize)]
pub struct Tried {
    pub kept: Vec<usize>,
    pub durations: Vec<Option<f64>>,
    /// Runs that failed the check, of those made (a candidate stops at its first run that does not).
    pub failed: u32,
    pub runs: u32,
    pub reproduced: bool,
}

/// What `repro chaos shrink` reports.
#[derive(Debug, Clone, Serialize)]
pub struct ShrinkReport {
    pub original: PathBuf,
    pub check: String,
    pub slots: Vec<Slot>,
    /// The slots of the smallest schedule that still fails the check, and their durations.
    pub kept: Vec<usize>,
    pub durations: Vec<Option<f64>>,
    pub experiment: PathBuf,
    pub run_dir: PathBuf,
    pub candidates: Vec<Tried>,
    pub runs: u32,
    pub seconds: f64,
}

/// Why a run has no check for a shrink to keep failing.
#[derive(Debug, thiserror::Error)]
pub enum TargetCheckError {
    /// `--check` named a check that did not fail.
    #[error("check {wanted} did not fail in this run; the failing checks: {}", list(failing))]
    NotFailing { wanted: String, failing: Vec<String> },
    #[error("no check failed in this run (verdict {verdict}): there is nothing to shrink")]
    NoneFailed { verdict: String },
}

/// The check a shrink keeps failing: `wanted`, or the first check that failed (or passed against a known
/// expectation) in the original.
pub fn target_check(e: &Evaluation, wanted: Option<&str>) -> std::result::Result<String, TargetCheckError> {
    let failing: Vec<&str> = e
        .checks
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Fail | Outcome::Xpass))
        .map(|c| c.id.as_str())
        .collect();
    match wanted {
        Some(w) if failing.contains(&w) => Ok(w.to_string()),
        Some(w) => Err(TargetCheckError::NotFailing {
            wanted: w.to_string(),
            failing: failing.iter().map(|s| s.to_string()).collect(),
        }),
        None => failing
            .first()
            .map(|s| s.to_string())
            .ok_or_else(|| TargetCheckError::NoneFailed { verdict: e.verdict.as_str().to_string() }),
    }
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

struct Runner<'a> {
    orig: &'a Original,
    base: Experiment,
    pinned: FlowNode,
    slots: Vec<Slot>,
    check: String,
    opts: &'a ShrinkOptions,
    dir: PathBuf,
    tried: Vec<Tried>,
    runs: u32,
    last_repro: Option<PathBuf>,
}

impl Runner<'_> {
    fn experiment(&self, choices: &[Choice]) -> Experiment {
        let mut e = self.base.clone();
        e.flow = Some(candidate_flow(&self.pinned, &self.slots, choices));
        e
    }

    fn write(&self, e: &Experiment, path: &Path) -> Result<LoadedExperiment> {
        let text = serde_saphyr::to_string(e)
            .map_err(|err| ChaosError::Harness(format!("writing {}: {err}", path.display())))?;
        // What is written must load (and be what runs).
        let experiment = parse_experiment_with(path, &text, &self.opts.limits)?;
        write_atomic(path, text.as_bytes())?;
        Ok(LoadedExperiment { path: path.to_path_buf(), text, experiment })
    }

    /// Runs a candidate up to `runs` times; true if every run failed the check.
    fn test(&mut self, choices: &[Choice]) -> Result<bool> {
        let n = self.tried.len() + 1;
        let e = self.experiment(choices);
        let loaded = self.write(&e, &self.dir.join(format!("candidate-{n}.yaml")))?;
        let inputs = self.orig.dir.join("inputs");
        let ro = RunOptions {
            seed: Some(self.orig.seed),
            state_dir: Some(self.dir.join("runs")),
            echo: self.opts.echo,
            limits: self.opts.limits,
            experiment_dir: Some(inputs.join("experiment")),
            adapter_dir: Some(inputs.join("adapter")),
            replay_of: Some(self.orig.dir.clone()),
            reaper: self.opts.reaper.clone(),
        };
        let mut failed = 0;
        let mut made = 0;
        let mut last = None;
        for _ in 0..self.opts.runs {
            made += 1;
            self.runs += 1;
            let out = runner::run(&loaded, &self.orig.adapter, &ro)?;
            if let Some(sig) = out.interrupted {
                return Err(ChaosError::Interrupted { signal: sig });
            }
            let fails = out.evaluation.verdict != Verdict::Error
                && out
                    .evaluation
                    .checks
                    .iter()
                    .any(|c| c.id == self.check && matches!(c.outcome, Outcome::Fail | Outcome::Xpass));
            if !fails {
                break;
            }
            failed += 1;
            last = Some(out.run_dir);
        }
        let reproduced = failed == self.opts.runs;
        if reproduced {
            self.last_repro = last;
        }
        self.tried.push(Tried { kept: kept(choices), durations: durations(choices), failed, runs: made, reproduced });
        Ok(reproduced)
    }

    fn budget_left(&self) -> bool {
        (self.tried.len() as u32) < self.opts.max_candidates
    }
}

fn kept(choices: &[Choice]) -> Vec<usize> {
    choices.iter().enumerate().filter(|(_, c)| matches!(c, Choice::Run(_))).map(|(i, _)| i).collect()
}

fn durations(choices: &[Choice]) -> Vec<Option<f64>> {
    choices
        .iter()
        .filter_map(|c| match c {
            Choice::Run(d) => Some(d.map(|d| d.as_secs_f64())),
            Choice::Leave => None,
        })
        .collect()
}

fn choices_for(n: usize, keep: &[usize], durs: &[Option<Duration>]) -> Vec<Choice> {
    (0..n).map(|i| if keep.contains(&i) { Choice::Run(durs[i]) } else { Choice::Leave }).collect()
}

/// A ddmin test: Some(true) the subset still fails, Some(false) it does not, None out of budget.
pub type SubsetTest<'a, E> = dyn FnMut(&[usize]) -> std::result::Result<Option<bool>, E> + 'a;

/// Zeller's ddmin over `items`: the smallest subset (1-minimal within the budget) for which `test` holds.
pub fn ddmin<E>(items: Vec<usize>, test: &mut SubsetTest<'_, E>) -> std::result::Result<Vec<usize>, E> {
    let mut cur = items;
    let mut n = 2usize;
    while cur.len() >= 2 {
        let chunk = cur.len().div_ceil(n);
        let parts: Vec<Vec<usize>> = cur.chunks(chunk).map(<[usize]>::to_vec).collect();
        let mut reduced = false;
        for p in &parts {
            match test(p)? {
                Some(true) => {
                    cur = p.clone();
                    n = 2;
                    reduced = true;
                    break;
                }
                Some(false) => {}
                None => return Ok(cur),
            }
        }
        if !reduced && parts.len() > 2 {
            for p in &parts {
                let complement: Vec<usize> = cur.iter().copied().filter(|i| !p.contains(i)).collect();
                match test(&complement)? {
                    Some(true) => {
                        cur = complement;
                        n = (n - 1).max(2);
                        reduced = true;
                        break;
                    }
                    Some(false) => {}
                    None => return Ok(cur),
                }
            }
        }
        if !reduced {
            if n >= cur.len() {
                break;
            }
            n = (n * 2).min(cur.len());
        }
    }
    Ok(cur)
}

/// Shrinks the schedule of the failing run `dir`; `progress` sees each candidate as it ends.
pub fn shrink(dir: &Path, opts: &ShrinkOptions, progress: &mut dyn FnMut(&Tried)) -> Result<ShrinkReport> {
    let started = std::time::Instant::now();
    let orig = Original::read(dir, &opts.limits)?;
    let check = target_check(&orig.evaluation, opts.check.as_deref())
        .map_err(|m| ChaosError::CannotShrink { path: orig.dir.clone(), reason: m.to_string() })?;
    let schedule = orig.schedule.clone().ok_or_else(|| ChaosError::CannotShrink {
        path: orig.dir.clone(),
        reason: "no schedule.json (a run from before schedules were recorded): run it again to shrink it".into(),
    })?;
    let timeline = crate::evaluate::RunData::read_with(&orig.dir, None, &opts.limits)?.timeline;
    let rounds = repeat_rounds(&timeline);
    let max_nodes = opts.limits.steps.saturating_mul(4);
    let (pinned, slots) = pin_flow(&orig.experiment.experiment, &schedule, &rounds, max_nodes);
    let pinned = pinned.ok_or_else(|| ChaosError::CannotShrink {
        path: orig.dir.clone(),
        reason: "the experiment has no flow".into(),
    })?;
    if slots.is_empty() {
        return Err(ChaosError::CannotShrink {
            path: orig.dir.clone(),
            reason: "no operation ran: there is no schedule to shrink".into(),
        });
    }
    let sdir = orig.dir.join("shrink");
    mkdirs(&sdir)?;
    let mut base = orig.experiment.experiment.clone();
    base.id.value = format!("{}-shrunk", base.id.value);
    base.title = format!("{} (shrunk)", base.title);
    base.description = format!(
        "Shrunk by repro chaos shrink from {} (seed {}) to the fewest operations that still fail {check}.",
        orig.dir.display(),
        orig.seed
    );
    base.files.clear();
    let mut r = Runner {
        orig: &orig,
        base,
        pinned,
        slots: slots.clone(),
        check: check.clone(),
        opts,
        dir: sdir.clone(),
        tried: vec![],
        runs: 0,
        last_repro: None,
    };
    let n = slots.len();
    let mut durs: Vec<Option<Duration>> = slots.iter().map(|s| s.duration).collect();
    let all: Vec<usize> = (0..n).collect();
    if !r.test(&choices_for(n, &all, &durs))? {
        let t = r.tried.last().cloned();
        return Err(ChaosError::CannotShrink {
            path: orig.dir.clone(),
            reason: format!(
            "the pinned schedule of {} operations does not reproduce the failure of {check} ({} of {} runs failed it): \
             it depends on more than the schedule (timing, state outside the run)",
            n,
            t.as_ref().map_or(0, |t| t.failed),
            t.as_ref().map_or(0, |t| t.runs)
        ),
        });
    }
    progress(r.tried.last().expect("one tried"));
    let keep = ddmin(all, &mut |subset: &[usize]| {
        if !r.budget_left() {
            return Ok::<_, ChaosError>(None);
        }
        let res = r.test(&choices_for(n, subset, &durs))?;
        if let Some(t) = r.tried.last() {
            progress(t);
        }
        Ok(Some(res))
    })?;
    // A single fault left: does the check fail without any?
    let keep = if keep.len() == 1 && r.budget_left() {
        let none = r.test(&choices_for(n, &[], &durs))?;
        progress(r.tried.last().expect("one tried"));
        if none {
            vec![]
        } else {
            keep
        }
    } else {
        keep
    };
    // Durations: halve each remaining one while it still fails (down to 100ms, three tries each).
    for &i in &keep {
        for _ in 0..3 {
            let Some(d) = durs[i] else { break };
            let half = d / 2;
            if half < Duration::from_millis(100) || !r.budget_left() {
                break;
            }
            let mut trial = durs.clone();
            trial[i] = Some(half);
            let ok = r.test(&choices_for(n, &keep, &trial))?;
            progress(r.tried.last().expect("one tried"));
            if !ok {
                break;
            }
            durs = trial;
        }
    }
    let final_choices = choices_for(n, &keep, &durs);
    let e = r.experiment(&final_choices);
    let out_path = opts.output.clone().unwrap_or_else(|| sdir.join(format!("{}.yaml", e.id.value)));
    r.write(&e, &out_path)?;
    let run_dir = r.last_repro.clone().unwrap_or_default();
    let report = ShrinkReport {
        original: orig.dir.clone(),
        check,
        slots,
        kept: keep.clone(),
        durations: keep.iter().map(|i| durs[*i].map(|d| d.as_secs_f64())).collect(),
        experiment: out_path,
        run_dir,
        candidates: r.tried.clone(),
        runs: r.runs,
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    };
    let v = serde_json::to_value(&report).map_err(|err| ChaosError::Harness(err.to_string()))?;
    write_json_atomic(&sdir.join("summary.json"), &v)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::parse_experiment;

    #[test]
    fn ddmin_finds_the_one_that_matters_and_a_pair() {
        let mut calls = 0;
        let one = ddmin((0..5).collect(), &mut |s: &[usize]| {
            calls += 1;
            Ok::<_, ()>(Some(s.contains(&3)))
        })
        .unwrap();
        assert_eq!(one, [3]);
        assert!(calls <= 8, "{calls} tests");
        let pair =
            ddmin((0..8).collect(), &mut |s: &[usize]| Ok::<_, ()>(Some(s.contains(&1) && s.contains(&6)))).unwrap();
        assert_eq!(pair, [1, 6]);
        // Out of budget: what it has so far.
        let cut = ddmin((0..8).collect(), &mut |_s: &[usize]| Ok::<_, ()>(None)).unwrap();
        assert_eq!(cut.len(), 8);
    }

    const EXP: &str = "apiVersion: repro.dev/chaos/v1\nid: e\nversion: 1\ntitle: t\nhypothesis: h\ntimeout: 1m\nworkloads:\n  - {name: w, kind: shell, instances: 3, run: sleep 1}\noperations:\n  - {name: k, uses: kill, target: w}\n  - {name: f, uses: freeze, target: w, duration: 1s}\nflow:\n  parallel:\n    - w\n    - serial:\n        - {delay: 1s, jitter: 500ms}\n        - schedule: {from: [k, f], length: 2, interval: 100ms}\n        - repeat: {times: 2, do: k}\n";

    fn sched() -> Schedule {
        let tl: Vec<Value> = serde_json::from_str(
            r#"[
            {"event": "flow.started", "t": 0},
            {"event": "flow.drawn", "t": 0, "node": "flow.parallel[1].serial[0]", "draw": {"kind": "delay", "delay_ms": 700}},
            {"event": "flow.drawn", "t": 1, "node": "flow.parallel[1].serial[1].schedule[0]", "draw": {"kind": "schedule", "step": 0, "pause_ms": 50, "choice": 1}},
            {"event": "operation.selected", "t": 1, "operation": "f", "run": 1, "node": "flow.parallel[1].serial[1].schedule[0].do", "selected": ["w-2"]},
            {"event": "operation.finished", "t": 2, "operation": "f", "run": 1},
            {"event": "flow.drawn", "t": 2, "node": "flow.parallel[1].serial[1].schedule[1]", "draw": {"kind": "schedule", "step": 1, "pause_ms": 120, "choice": 0}},
            {"event": "operation.selected", "t": 2.2, "operation": "k", "run": 1, "node": "flow.parallel[1].serial[1].schedule[1].do", "selected": ["w-0"]},
            {"event": "operation.finished", "t": 2.3, "operation": "k", "run": 1},
            {"event": "operation.selected", "t": 2.3, "operation": "k", "run": 2, "node": "flow.parallel[1].serial[2].repeat[0]", "selected": ["w-1"]},
            {"event": "operation.finished", "t": 2.3, "operation": "k", "run": 2},
            {"event": "operation.selected", "t": 2.4, "operation": "k", "run": 3, "node": "flow.parallel[1].serial[2].repeat[1]", "selected": ["w-2"]},
            {"event": "operation.finished", "t": 2.4, "operation": "k", "run": 3}
        ]"#,
        )
        .unwrap();
        crate::schedule::from_timeline(9, &tl)
    }

    #[test]
    fn the_pinned_flow_does_what_the_run_did_and_candidates_keep_the_times() {
        let e = parse_experiment(Path::new("e.yaml"), EXP).unwrap();
        let (flow, slots) = pin_flow(&e, &sched(), &BTreeMap::new(), 10_000);
        let flow = flow.unwrap();
        let names: Vec<(&str, Vec<String>)> =
            slots.iter().map(|s| (s.operation.as_str(), s.selected.clone())).collect();
        assert_eq!(
            names,
            [
                ("f", vec!["w-2".to_string()]),
                ("k", vec!["w-0".into()]),
                ("k", vec!["w-1".into()]),
                ("k", vec!["w-2".into()])
            ]
        );
        assert_eq!(slots[0].duration, Some(Duration::from_secs(1)));
        assert!((slots[0].elapsed - 1.0).abs() < 1e-9);
        let y = serde_json::to_string(&flow).unwrap();
        assert!(y.contains(r#"{"delay":"700ms"}"#) && y.contains(r#"{"delay":"50ms"}"#), "{y}");
        assert!(y.contains(r#"{"op":"f","select":["w-2"],"duration":"1s"}"#), "{y}");
        assert!(!y.contains("schedule") && !y.contains("jitter") && !y.contains("repeat"), "{y}");

        // Only slot 2, with the freeze left out as a delay as long as it took.
        let c = candidate_flow(&flow, &slots, &[Choice::Leave, Choice::Leave, Choice::Run(None), Choice::Leave]);
        let y = serde_json::to_string(&c).unwrap();
        assert_eq!(y.matches(r#""op""#).count(), 1, "{y}");
        assert!(y.contains(r#"{"op":"k","select":["w-1"]}"#) && y.contains(r#"{"delay":"1s"}"#), "{y}");
        // A shortened freeze is followed by the rest of its time.
        let c = candidate_flow(
            &flow,
            &slots,
            &[Choice::Run(Some(Duration::from_millis(250))), Choice::Leave, Choice::Leave, Choice::Leave],
        );
        let y = serde_json::to_string(&c).unwrap();
        assert!(y.contains(r#"{"serial":[{"op":"f","select":["w-2"],"duration":"250ms"},{"delay":"750ms"}]}"#), "{y}");
        // And the whole experiment with it is a valid experiment.
        let mut e2 = e.clone();
        e2.flow = Some(c);
        let text = serde_saphyr::to_string(&e2).unwrap();
        parse_experiment(Path::new("c.yaml"), &text).unwrap();
    }

    #[test]
    fn a_hostile_round_count_is_bounded() {
        let y = EXP.replace("repeat: {times: 2, do: k}", "repeat: {for: 1s, do: k}");
        let e = parse_experiment(Path::new("e.yaml"), &y).unwrap();
        let rounds: BTreeMap<String, u32> = [("flow.parallel[1].serial[2]".to_string(), u32::MAX)].into();
        let (flow, _) = pin_flow(&e, &sched(), &rounds, 1000);
        let text = serde_json::to_string(&flow).unwrap();
        assert!(text.len() < 100_000, "{}", text.len());
    }

    #[test]
    fn the_check_to_keep_failing_is_named_or_the_first_failure() {
        use crate::evaluate::CheckResult;
        let mut ev = Evaluation {
            verdict: Verdict::Fail,
            exit_code: 1,
            reason: String::new(),
            checks: vec![
                CheckResult::new("workload", "w-0/ok".into(), "w/ok".into(), true, vec![]),
                CheckResult::new("experiment", "experiment/acked".into(), "experiment/acked".into(), false, vec![]),
            ],
            experiment: Value::Null,
            adapter: Value::Null,
            run_dir: PathBuf::new(),
            evaluated_at: String::new(),
        };
        ev.checks[1].outcome = Outcome::Fail;
        assert_eq!(target_check(&ev, None).unwrap(), "experiment/acked");
        assert!(target_check(&ev, Some("w-0/ok"))
            .unwrap_err()
            .to_string()
            .contains("did not fail in this run; the failing checks: experiment/acked"));
        ev.checks[1].outcome = Outcome::Ok;
        assert!(target_check(&ev, None).unwrap_err().to_string().contains("no check failed"));
    }
}
