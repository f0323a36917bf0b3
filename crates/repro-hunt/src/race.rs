//! The race report (`repro race`): for a schedule under which the command fails, the fewest preemptions that still
//! make it fail, and the one decision whose order decides, shown side by side with the passing run that differs
//! from the failing one only there.
//!
//! A schedule is read as the decisions where it switched away from the non-preemptive choice (the thread that ran
//! last goes on while it is ready; see `repro_model::sched::SchedScript`). Forcing all of a failing run's switches
//! replays it exactly; forcing none is the schedule without preemption. Delta debugging over the switches
//! ([`crate::shrink::ddmin`]) finds a smallest set that still fails with the same signature; dropping the last of
//! them gives a passing run whose decisions agree with the failing one's up to that point.

use std::path::PathBuf;

use repro_model::sched::{SchedDecision, SchedLog, SchedReady, SchedScript, SchedSwitch};
use repro_pack::signature::Signature;
use serde::Serialize;

use crate::runner::Verdict;
use crate::HuntError;

/// One run under a schedule, as the race needs it.
#[derive(Debug, Clone)]
pub struct Trial {
    pub verdict: Verdict,
    pub exit_status: i32,
    pub signature: Signature,
    /// The scheduler's decisions (runs are logged).
    pub log: SchedLog,
    pub run_dir: PathBuf,
}

/// Runs the command under the original schedule (`None`) or a forced one.
pub trait ScheduleRunner {
    fn run(&mut self, script: Option<&SchedScript>) -> Result<Trial, HuntError>;
}

/// Why there is no race to report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum NoRace {
    /// The schedule given does not fail.
    Passes { exit_status: i32 },
    /// The run was not deterministic (exit 121): nothing can be concluded.
    Unenforced,
    /// The command fails without any preemption as well: its threads' interleaving does not decide.
    FailsWithoutPreemption,
    /// Forcing the failing run's own switches did not fail the same way (the log was cut at its limit, or the run
    /// depends on something besides the schedule).
    NotReplayable { logged: usize, total: u64 },
}

/// A line of the side-by-side view: what ran at one decision in each run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub step: u64,
    pub failing: Option<SchedReady>,
    pub passing: Option<SchedReady>,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct RaceReport {
    /// Decisions of the original failing run, and how many of them were preemptions.
    pub decisions: u64,
    pub switches: usize,
    /// The smallest set of preemptions found that still fails.
    pub minimal: Vec<SchedSwitch>,
    /// The decision whose order decides: the failing run lets `failing_task` go, the passing one `passing_task`.
    pub step: u64,
    pub failing_task: u64,
    pub passing_task: u64,
    /// Where the two tasks stood at that decision, in the failing run.
    pub failing_at: Option<SchedReady>,
    pub passing_at: Option<SchedReady>,
    pub failing_exit: i32,
    pub passing_exit: i32,
    pub rows: Vec<Row>,
    /// The two schedules, for `repro run --sched-script`.
    pub failing_script: SchedScript,
    pub passing_script: SchedScript,
    pub failing_run: PathBuf,
    pub passing_run: PathBuf,
    /// Runs made, and whether the run budget cut the search short (the set is then small, not minimal).
    pub runs: usize,
    pub budget_reached: bool,
}

/// The outcome of a race search.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum RaceOutcome {
    Found(Box<RaceReport>),
    NoRace { why: NoRace, runs: usize },
}

/// Decisions shown before and after the deciding one.
const CONTEXT_BEFORE: u64 = 3;
const CONTEXT_AFTER: u64 = 6;

/// Finds the race. `max_runs` bounds the delta debugging's runs (the first three are always made).
pub fn race(
    exec: &mut dyn ScheduleRunner,
    max_runs: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<RaceOutcome, HuntError> {
    let original = exec.run(None)?;
    let mut runs = 1;
    match original.verdict {
        Verdict::Fail => {}
        Verdict::Unenforced => return Ok(RaceOutcome::NoRace { why: NoRace::Unenforced, runs }),
        _ => return Ok(RaceOutcome::NoRace { why: NoRace::Passes { exit_status: original.exit_status }, runs }),
    }
    let all = original.log.switches();
    progress(&format!(
        "the failing schedule made {} decisions, {} of them preemptions; replaying them forced",
        original.log.total,
        all.len()
    ));
    let same = |t: &Trial| t.verdict == Verdict::Fail && t.signature == original.signature;
    let forced = exec.run(Some(&SchedScript { switches: all.clone() }))?;
    runs += 1;
    if !same(&forced) {
        let why = NoRace::NotReplayable { logged: original.log.decisions.len(), total: original.log.total };
        return Ok(RaceOutcome::NoRace { why, runs });
    }
    let none = exec.run(Some(&SchedScript::default()))?;
    runs += 1;
    if same(&none) {
        return Ok(RaceOutcome::NoRace { why: NoRace::FailsWithoutPreemption, runs });
    }
    // Delta debugging over the switches; each candidate is one run (the schedule is forced: no flake to tell apart).
    let mut budget_reached = false;
    let mut error = None;
    let mut last_failing: Option<(Vec<SchedSwitch>, Trial)> = Some((all.clone(), forced));
    let minimal = crate::shrink::ddmin(all.clone(), &mut |subset: &[SchedSwitch]| {
        if subset.is_empty() {
            return false; // Run above: passes.
        }
        if error.is_some() || runs >= max_runs {
            budget_reached |= error.is_none();
            return false;
        }
        runs += 1;
        match exec.run(Some(&SchedScript { switches: subset.to_vec() })) {
            Ok(t) => {
                let fails = same(&t);
                if fails {
                    progress(&format!("{} preemptions still fail (run {runs})", subset.len()));
                    last_failing = Some((subset.to_vec(), t));
                }
                fails
            }
            Err(e) => {
                error = Some(e);
                false
            }
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    // The failing run of the minimal set (ddmin's last success is it, unless it was the whole set).
    let failing = match last_failing {
        Some((set, t)) if set == minimal => t,
        _ => {
            runs += 1;
            exec.run(Some(&SchedScript { switches: minimal.clone() }))?
        }
    };
    // The passing neighbour: the minimal set less one switch, the latest first (its run agrees longest).
    let mut passing = None;
    for drop in (0..minimal.len()).rev() {
        let mut set = minimal.clone();
        set.remove(drop);
        runs += 1;
        let t = exec.run(Some(&SchedScript { switches: set.clone() }))?;
        if !same(&t) {
            passing = Some((set, t));
            break;
        }
    }
    let Some((passing_set, passing)) = passing else {
        // Not 1-minimal (the budget ran out): no passing neighbour differs by one switch. The run without
        // preemption passes, so compare with it.
        return Ok(report(&original, minimal.clone(), failing, (Vec::new(), none), runs, true));
    };
    Ok(report(&original, minimal, failing, (passing_set, passing), runs, budget_reached))
}

fn report(
    original: &Trial,
    minimal: Vec<SchedSwitch>,
    failing: Trial,
    (passing_set, passing): (Vec<SchedSwitch>, Trial),
    runs: usize,
    budget_reached: bool,
) -> RaceOutcome {
    let by_step = |log: &SchedLog| -> std::collections::BTreeMap<u64, SchedDecision> {
        log.decisions.iter().map(|d| (d.step, d.clone())).collect()
    };
    let (f, p) = (by_step(&failing.log), by_step(&passing.log));
    // The first decision where the two runs let different tasks go.
    let step = f
        .values()
        .find(|d| p.get(&d.step).is_none_or(|q| q.chosen != d.chosen))
        .map(|d| d.step)
        .unwrap_or_else(|| minimal.last().map_or(0, |s| s.step));
    let failing_task = f.get(&step).map_or(0, |d| d.chosen);
    let passing_task = p.get(&step).map_or(0, |d| d.chosen);
    let at = |task: u64| f.get(&step).and_then(|d| d.ready.iter().find(|r| r.task == task).cloned());
    let chosen = |m: &std::collections::BTreeMap<u64, SchedDecision>, s: u64| {
        m.get(&s).and_then(|d| d.ready.iter().find(|r| r.task == d.chosen).cloned())
    };
    let rows = (step.saturating_sub(CONTEXT_BEFORE)..=step + CONTEXT_AFTER)
        .filter(|s| f.contains_key(s) || p.contains_key(s))
        .map(|s| Row { step: s, failing: chosen(&f, s), passing: chosen(&p, s) })
        .collect();
    RaceOutcome::Found(Box::new(RaceReport {
        decisions: original.log.total,
        switches: original.log.switches().len(),
        step,
        failing_task,
        passing_task,
        failing_at: at(failing_task),
        passing_at: at(passing_task),
        failing_exit: failing.exit_status,
        passing_exit: passing.exit_status,
        rows,
        failing_script: SchedScript { switches: minimal.clone() },
        passing_script: SchedScript { switches: passing_set },
        minimal,
        failing_run: failing.run_dir,
        passing_run: passing.run_dir,
        runs,
        budget_reached,
    }))
}

/// The real runs: `repro run --sched-log` of the command with the configuration, the forced schedules written as
/// files beside the runs.
pub struct Runs {
    pub runner: crate::runner::Runner,
    pub config: crate::config::Config,
    /// Where the schedule files go.
    pub dir: PathBuf,
    made: usize,
}

impl Runs {
    pub fn new(runner: crate::runner::Runner, config: crate::config::Config, dir: PathBuf) -> Runs {
        Runs { runner, config, dir, made: 0 }
    }

    /// Writes a schedule as `--sched-script` reads it.
    pub fn write_script(&self, name: &str, script: &SchedScript) -> Result<PathBuf, HuntError> {
        let path = self.dir.join(name);
        let text = serde_json::to_vec_pretty(script).map_err(|e| HuntError::io("cannot encode", &path, e.into()))?;
        std::fs::write(&path, text).map_err(|e| HuntError::io("cannot write the schedule", &path, e))?;
        Ok(path)
    }
}

impl ScheduleRunner for Runs {
    fn run(&mut self, script: Option<&SchedScript>) -> Result<Trial, HuntError> {
        self.made += 1;
        let mut runner = self.runner.clone();
        runner.base_args.push("--sched-log".into());
        if let Some(script) = script {
            let path = self.write_script(&format!("schedule-{}.json", self.made), script)?;
            runner.base_args.push("--sched-script".into());
            runner.base_args.push(path.to_string_lossy().into_owned());
        }
        let out = runner.run(self.made, &self.config)?;
        if let Some(signal) = self.runner.cancel.signal() {
            return Err(HuntError::Interrupted { signal });
        }
        let record_path = out.run_dir.join("run.json");
        let record: repro_model::run::RunRecord = std::fs::read(&record_path)
            .map_err(|e| HuntError::io("cannot read the run record", &record_path, e))
            .and_then(|d| {
                serde_json::from_slice(&d)
                    .map_err(|e| HuntError::io("cannot read the run record", &record_path, e.into()))
            })?;
        Ok(Trial {
            verdict: out.verdict,
            exit_status: out.exit_status,
            signature: out.signature,
            log: record.determinism.schedule.unwrap_or_default(),
            run_dir: out.run_dir,
        })
    }
}

/// The report for people; `points` are the decision points its runs used (the commands it shows name them).
pub fn render(
    outcome: &RaceOutcome,
    failing_script: &str,
    passing_script: &str,
    command: &str,
    points: repro_model::SchedPoints,
) -> String {
    let r = match outcome {
        RaceOutcome::Found(r) => r,
        RaceOutcome::NoRace { why, runs } => {
            let why = match why {
                NoRace::Passes { exit_status } => {
                    format!("this schedule passes (exit {exit_status}): give one that fails (repro hunt --vary schedule finds one)")
                }
                NoRace::Unenforced => "the run was not deterministic (exit 121): see its warnings".into(),
                NoRace::FailsWithoutPreemption => {
                    "it fails without any preemption too: the order of its threads' system calls does not decide".into()
                }
                NoRace::NotReplayable { logged, total } => format!(
                    "forcing the failing run's own preemptions did not fail the same way ({logged} of {total} \
                     decisions logged): the outcome depends on more than the scheduler's choices"
                ),
            };
            return format!("race: none found after {runs} runs: {why}\n");
        }
    };
    let mut s = String::new();
    let minimality = if r.budget_reached { "small (the run budget ended the search)" } else { "minimal" };
    s.push_str(&format!(
        "race: {} of the failing schedule's {} preemptions ({} decisions) decide the outcome ({minimality}, {} runs)\n",
        r.minimal.len(),
        r.switches,
        r.decisions,
        r.runs
    ));
    s.push_str(&format!(
        "  at decision {} the failing run lets task {} go first, the passing run task {}\n",
        r.step, r.failing_task, r.passing_task
    ));
    let stand = |t: u64, a: &Option<SchedReady>| match a {
        Some(a) => format!("    task {t}: {} at {}\n", a.call, a.at),
        None => format!("    task {t}\n"),
    };
    s.push_str(&stand(r.failing_task, &r.failing_at));
    s.push_str(&stand(r.passing_task, &r.passing_at));
    s.push('\n');
    let cell = |c: &Option<SchedReady>| match c {
        Some(c) => format!("task {} {} @ {}", c.task, c.call, caller(&c.at)),
        None => "-".into(),
    };
    let left: Vec<String> = r.rows.iter().map(|row| cell(&row.failing)).collect();
    let width = left.iter().map(|l| l.chars().count()).max().unwrap_or(0).max(20);
    let head = format!("failing run (exit {})", r.failing_exit);
    s.push_str(&format!("  {:>8}  {head:<width$}  passing run (exit {})\n", "decision", r.passing_exit));
    for (row, l) in r.rows.iter().zip(&left) {
        let mark = if row.step == r.step { ">" } else { " " };
        s.push_str(&format!("{mark} {:>8}  {l:<width$}  {}\n", row.step, cell(&row.passing)));
    }
    s.push('\n');
    let opts = if points.is_default() { String::new() } else { format!("--sched-points {points} ") };
    s.push_str(&format!("  failing schedule: repro run {opts}--sched-script {failing_script} -- {command}\n"));
    s.push_str(&format!("  passing schedule: repro run {opts}--sched-script {passing_script} -- {command}\n"));
    s
}

/// The program location of a `SchedReady::at` (its caller when the stack scan found one).
fn caller(at: &str) -> &str {
    at.rsplit(" <- ").next().unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use repro_model::SchedPoints;

    /// A program of two tasks whose outcome depends on one decision: it fails when task 2 runs at step 4 (and the
    /// schedule reaches step 4 only through the switches before, like a real run whose later steps shift).
    struct Fake {
        /// The switches of the "original" random schedule.
        original: Vec<SchedSwitch>,
        runs: usize,
    }

    fn signature(exit: i32) -> Signature {
        repro_pack::signature::compute(exit, b"", if exit == 0 { b"" } else { b"FAILED\n" }, &[])
    }

    impl ScheduleRunner for Fake {
        fn run(&mut self, script: Option<&SchedScript>) -> Result<Trial, HuntError> {
            self.runs += 1;
            let switches = script.map_or(self.original.clone(), |s| s.switches.clone());
            let forced: std::collections::BTreeMap<u64, u64> = switches.iter().map(|s| (s.step, s.task)).collect();
            let mut last: Option<u64> = None;
            let mut decisions = Vec::new();
            for step in 0..10u64 {
                let ready = [1u64, 2];
                let default = repro_detcore::sched::non_preemptive(last, &ready);
                let chosen = forced.get(&step).copied().filter(|t| ready.contains(t)).unwrap_or(default);
                let r = |task| SchedReady { task, call: "sched_yield".into(), at: format!("claim+{task:#x}") };
                decisions.push(SchedDecision { step, chosen, default, ready: vec![r(1), r(2)] });
                last = Some(chosen);
            }
            let fails = decisions[4].chosen == 2;
            let exit = i32::from(fails);
            let log = SchedLog { total: decisions.len() as u64, decisions };
            Ok(Trial {
                verdict: if fails { Verdict::Fail } else { Verdict::Pass },
                exit_status: exit,
                signature: signature(exit),
                log,
                run_dir: PathBuf::from(format!("run{}", self.runs)),
            })
        }
    }

    fn sw(step: u64, task: u64) -> SchedSwitch {
        SchedSwitch { step, task }
    }

    #[test]
    fn the_race_is_cut_to_the_one_switch_that_decides() {
        // Nothing ran yet: task 1 starts; the schedule switches at 1, 2, 4 (to 2, the deciding one) and 7.
        let mut fake = Fake { original: vec![sw(1, 2), sw(2, 1), sw(4, 2), sw(7, 1)], runs: 0 };
        let out = race(&mut fake, 100, &mut |_| {}).unwrap();
        let RaceOutcome::Found(r) = out else { panic!("{out:?}") };
        assert_eq!(r.minimal, [sw(4, 2)]);
        assert_eq!((r.step, r.failing_task, r.passing_task), (4, 2, 1));
        assert_eq!((r.failing_exit, r.passing_exit), (1, 0));
        assert!(r.passing_script.switches.is_empty());
        assert_eq!(r.runs, fake.runs);
        assert!(!r.budget_reached);
        let text = render(&RaceOutcome::Found(r.clone()), "f.json", "p.json", "./claim", SchedPoints::Io);
        assert!(text.contains("race: 1 of the failing schedule's 4 preemptions (10 decisions) decide"), "{text}");
        assert!(text.contains("at decision 4 the failing run lets task 2 go first, the passing run task 1"), "{text}");
        assert!(text.contains(">        4  task 2 sched_yield @ claim+0x2"), "{text}");
        assert!(text.contains("repro run --sched-points io --sched-script f.json -- ./claim"), "{text}");
        let text = render(&RaceOutcome::Found(r.clone()), "f.json", "p.json", "./claim", SchedPoints::Blocking);
        assert!(text.contains("repro run --sched-script p.json -- ./claim"), "{text}");
    }

    #[test]
    fn a_passing_schedule_or_one_that_fails_without_preemption_is_no_race() {
        // Task 2 runs at 2, task 1 again from 3: task 1 runs at step 4.
        let mut fake = Fake { original: vec![sw(2, 2), sw(3, 1)], runs: 0 };
        let out = race(&mut fake, 100, &mut |_| {}).unwrap();
        assert!(matches!(out, RaceOutcome::NoRace { why: NoRace::Passes { exit_status: 0 }, runs: 1 }), "{out:?}");
        assert!(render(&out, "", "", "", SchedPoints::Io).contains("this schedule passes"));
        struct AlwaysFails;
        impl ScheduleRunner for AlwaysFails {
            fn run(&mut self, _: Option<&SchedScript>) -> Result<Trial, HuntError> {
                Ok(Trial {
                    verdict: Verdict::Fail,
                    exit_status: 1,
                    signature: signature(1),
                    log: SchedLog::default(),
                    run_dir: PathBuf::new(),
                })
            }
        }
        let out = race(&mut AlwaysFails, 100, &mut |_| {}).unwrap();
        assert!(matches!(out, RaceOutcome::NoRace { why: NoRace::FailsWithoutPreemption, runs: 3 }), "{out:?}");
    }

    #[test]
    fn the_run_budget_stops_the_search_and_says_so() {
        let original: Vec<SchedSwitch> =
            (0..10).map(|s| sw(s, if s % 2 == 0 { 2 } else { 1 })).chain([]).collect::<Vec<_>>();
        let mut fake = Fake { original, runs: 0 };
        let out = race(&mut fake, 4, &mut |_| {}).unwrap();
        let RaceOutcome::Found(r) = out else { panic!("{out:?}") };
        assert!(r.budget_reached, "{r:?}");
        assert!(r.minimal.len() > 1);
        assert_eq!(r.failing_exit, 1);
    }
}
