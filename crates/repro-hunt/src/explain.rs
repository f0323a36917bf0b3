//! `repro explain`: which input decides the outcome? A control (everything pinned, k times), then each
//! dimension varied on its own; the epoch is bisected to the second, failing seeds are listed, environment
//! variables named.

use serde::Serialize;

use crate::config::{Config, Dimension, Space};
use crate::runner::{Outcome, Verdict};

/// What varying one dimension did.
#[derive(Debug, Clone, Serialize)]
pub struct DimensionFinding {
    pub dimension: Dimension,
    pub tried: usize,
    /// Values left untried: the dimension was dropped (its outcome did not move while another one decided), or
    /// the explanation was interrupted.
    pub untried: usize,
    /// Whether some value changed pass/fail.
    pub changes_outcome: bool,
    /// Whether some value changed stdout while the outcome stayed.
    pub changes_output: bool,
    /// Values that failed (when the control passes) or passed (when it fails), as shown in tables.
    pub deciding_values: Vec<String>,
    /// A narrowed statement: the epoch boundary, the failing seeds, the variable.
    pub detail: Option<String>,
}

/// An epoch boundary found by bisection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Boundary {
    /// The last second with the control's outcome... or the first, depending on `direction`.
    pub passes_at: i64,
    pub fails_at: i64,
}

impl Boundary {
    pub fn describe(&self) -> String {
        let (p, f) = (crate::config::rfc3339(self.passes_at), crate::config::rfc3339(self.fails_at));
        if self.passes_at < self.fails_at {
            format!("passes at {p}, fails from {f}")
        } else {
            format!("fails until {f}, passes from {p}")
        }
    }
}

/// The answer.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainReport {
    pub control_runs: usize,
    pub control_verdict: Verdict,
    /// The control's outcome varied with everything pinned.
    pub nondeterministic: bool,
    /// What the supervisor saw in the control runs when they varied.
    pub nondeterminism_notes: Vec<String>,
    pub findings: Vec<DimensionFinding>,
    pub epoch_boundaries: Vec<Boundary>,
    pub runs: usize,
    /// The control's epoch and where it came from (set by the caller).
    pub baseline_epoch: Option<BaselineEpoch>,
    /// SIGINT or SIGTERM stopped the explanation: the findings are those made until then.
    pub interrupted: bool,
}

/// The epoch of the baseline configuration and where it came from: `flag`, `SOURCE_DATE_EPOCH`, `git HEAD`,
/// `default` or `pack`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BaselineEpoch {
    pub unix: i64,
    pub rfc3339: String,
    pub source: String,
}

impl BaselineEpoch {
    pub fn new(unix: i64, source: impl Into<String>) -> BaselineEpoch {
        BaselineEpoch { unix, rfc3339: crate::config::rfc3339(unix), source: source.into() }
    }

    /// "epoch 2025-01-01T00:00:00Z (default)".
    pub fn describe(&self) -> String {
        format!("epoch {} ({})", self.rfc3339, self.source)
    }
}

/// Runs a batch of configurations and returns their outcomes in order. A batch cut short by a signal returns
/// [`crate::HuntError::Interrupted`], or the outcomes that finished, each with `index` its position in the batch
/// (fewer than asked: the explanation ends there, marked interrupted).
pub type Batch<'a> = dyn FnMut(&[Config]) -> Result<Vec<Outcome>, crate::HuntError> + 'a;

/// The values tried for one dimension alone.
pub fn values_for(d: Dimension, space: &Space, base: &Config) -> Vec<Config> {
    let with = |f: &dyn Fn(&mut Config)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    match d {
        Dimension::Seed => space.seeds.iter().map(|s| with(&|c| c.seed = *s)).collect(),
        Dimension::Epoch => space.epochs.iter().map(|e| with(&|c| c.epoch = *e)).collect(),
        Dimension::DirOrder => space.dir_orders.iter().map(|o| with(&|c| c.dir_order = *o)).collect(),
        Dimension::Env => space.envs.iter().skip(1).map(|e| with(&|c| c.env = e.clone())).collect(),
        Dimension::Cpus => space.cpus.iter().map(|n| with(&|c| c.cpus = *n)).collect(),
        Dimension::Hostname => space.hostnames.iter().map(|h| with(&|c| c.hostname = h.clone())).collect(),
        Dimension::ClockStep => space.clock_steps.iter().map(|s| with(&|c| c.clock_step_ns = *s)).collect(),
        Dimension::Schedule => space.schedules.iter().map(|s| with(&|c| c.sched = *s)).collect(),
    }
}

/// How explain spends its runs.
#[derive(Debug, Clone)]
pub struct ExplainOptions {
    /// Control runs with everything pinned.
    pub control_k: usize,
    /// Values every dimension gets before any is dropped: once some dimension flips the outcome, the others
    /// (each tried at least this many times without moving it) are dropped and the decider is tried in full.
    pub patience: usize,
    /// Values each undecided dimension gets per round after the first, while nothing has flipped.
    pub chunk: usize,
    /// Dates run in parallel per step of the epoch bisection (1: plain bisection).
    pub bisect_points: usize,
}

impl ExplainOptions {
    /// `control_k` controls, patience 3, rounds of `chunk` values, `chunk` dates per bisection step.
    pub fn new(control_k: usize, chunk: usize) -> ExplainOptions {
        ExplainOptions { control_k, patience: DEFAULT_PATIENCE, chunk, bisect_points: chunk }
    }
}

/// Tries per dimension before it may be dropped.
pub const DEFAULT_PATIENCE: usize = 3;

/// One dimension's progress.
struct DimState {
    dimension: Dimension,
    values: Vec<Config>,
    outcomes: Vec<Outcome>,
    /// Dropped untried values: the outcome did not move while another dimension decided.
    dropped: bool,
}

impl DimState {
    fn left(&self) -> usize {
        if self.dropped {
            0
        } else {
            self.values.len() - self.outcomes.len()
        }
    }

    fn flips(&self, control_fails: bool) -> Option<&Outcome> {
        self.outcomes.iter().find(|o| (o.verdict == Verdict::Fail) != control_fails)
    }
}

/// Runs the next `n` values of every dimension with values left in one batch. `Ok(false)`: interrupted.
fn round(
    states: &mut [DimState],
    n: impl Fn(&DimState) -> usize,
    batch: &mut Batch<'_>,
    runs: &mut usize,
) -> Result<bool, crate::HuntError> {
    let mut configs = Vec::new();
    let mut owners = Vec::new();
    for (k, st) in states.iter().enumerate() {
        let take = n(st).min(st.left());
        let from = st.outcomes.len();
        configs.extend(st.values[from..from + take].iter().cloned());
        owners.extend(std::iter::repeat_n(k, take));
    }
    if configs.is_empty() {
        return Ok(true);
    }
    let outcomes = match batch(&configs) {
        Err(crate::HuntError::Interrupted { .. }) => return Ok(false),
        r => r?,
    };
    *runs += outcomes.len();
    if outcomes.len() < configs.len() {
        // Cut short: the outcomes that finished, placed by their index in the batch.
        for o in outcomes {
            if let Some(k) = owners.get(o.index) {
                states[*k].outcomes.push(o);
            }
        }
        return Ok(false);
    }
    for (o, k) in outcomes.into_iter().zip(owners) {
        states[k].outcomes.push(o);
    }
    Ok(true)
}

/// Explains: `control_k` control runs, then the dimensions of `space.dims`, each varied alone, adaptively: every
/// dimension gets `patience` values; while none flips the outcome, each gets `chunk` more per round; once one
/// flips, the others are dropped and the flipping ones are tried in full (their deciding values listed, the epoch
/// bisected). `batch` runs configurations; `progress` gets one line per step. A batch interrupted by a signal
/// ([`crate::HuntError::Interrupted`]) ends the explanation with what was found so far
/// ([`ExplainReport::interrupted`]).
pub fn explain(
    base: &Config,
    space: &Space,
    opts: &ExplainOptions,
    batch: &mut Batch<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<ExplainReport, crate::HuntError> {
    let control = batch(&vec![base.clone(); opts.control_k.max(1)])?;
    if control.len() < opts.control_k.max(1) {
        // Cut short by a signal: no control, nothing to compare with.
        return Err(crate::HuntError::Interrupted { signal: 2 });
    }
    let mut runs = control.len();
    let first = &control[0];
    let nondeterministic = control.iter().any(|o| {
        o.verdict != first.verdict || o.stdout_digest != first.stdout_digest || o.signature != first.signature
    });
    let mut report = ExplainReport {
        control_runs: control.len(),
        control_verdict: first.verdict,
        nondeterministic,
        nondeterminism_notes: Vec::new(),
        findings: Vec::new(),
        epoch_boundaries: Vec::new(),
        runs,
        baseline_epoch: None,
        interrupted: false,
    };
    progress(&format!(
        "control {}/{}: {}{}",
        control.len(),
        control.len(),
        format!("{:?}", first.verdict).to_lowercase(),
        if nondeterministic { ", NOT stable" } else { ", stable" }
    ));
    if nondeterministic {
        report.nondeterminism_notes = nondeterminism_notes(&control, first);
        return Ok(report);
    }
    let fails = |o: &Outcome| o.verdict == Verdict::Fail;
    let control_fails = fails(first);
    let mut states: Vec<DimState> = space
        .dims
        .iter()
        .map(|d| DimState { dimension: *d, values: values_for(*d, space, base), outcomes: Vec::new(), dropped: false })
        .collect();
    let show = |states: &[DimState], progress: &mut dyn FnMut(&str)| {
        for st in states.iter().filter(|st| !st.dropped) {
            let what = match st.flips(control_fails) {
                Some(o) => format!("outcome flipped at {}", o.config.value(st.dimension)),
                None => "no change".to_string(),
            };
            progress(&format!("{} {}/{}: {what}", st.dimension.name(), st.outcomes.len(), st.values.len()));
        }
    };
    // Every dimension its first `patience` values; then rounds of `chunk` until something flips.
    let mut n = opts.patience.max(1);
    let mut interrupted = false;
    loop {
        if !round(&mut states, |_| n, batch, &mut runs)? {
            interrupted = true;
            break;
        }
        show(&states, progress);
        let flipped = states.iter().any(|st| st.flips(control_fails).is_some());
        if flipped {
            let dropped: Vec<&str> = states
                .iter()
                .filter(|st| st.flips(control_fails).is_none() && st.left() > 0)
                .map(|st| st.dimension.name())
                .collect();
            if !dropped.is_empty() {
                progress(&format!("dropping {} (no change in {}+ tries)", dropped.join(", "), opts.patience.max(1)));
            }
            for st in states.iter_mut().filter(|st| st.flips(control_fails).is_none()) {
                st.dropped = st.left() > 0;
            }
            // The deciders in full: every value that flips is named.
            if !round(&mut states, |_| usize::MAX, batch, &mut runs)? {
                interrupted = true;
            }
            show(&states, progress);
            break;
        }
        if states.iter().all(|st| st.left() == 0) {
            break;
        }
        n = opts.chunk.max(1);
    }
    for st in &states {
        let d = st.dimension;
        let outcomes = &st.outcomes;
        let deciding: Vec<&Outcome> = outcomes.iter().filter(|o| fails(o) != control_fails).collect();
        let changes_output =
            outcomes.iter().any(|o| fails(o) == control_fails && o.stdout_digest != first.stdout_digest);
        let mut finding = DimensionFinding {
            dimension: d,
            tried: outcomes.len(),
            untried: st.values.len() - outcomes.len(),
            changes_outcome: !deciding.is_empty(),
            changes_output,
            deciding_values: deciding.iter().map(|o| o.config.value(d)).collect(),
            detail: None,
        };
        if finding.changes_outcome {
            finding.detail = Some(match d {
                Dimension::Seed => format!(
                    "{} of {} seeds {}: {}",
                    deciding.len(),
                    outcomes.len(),
                    if control_fails { "pass" } else { "fail" },
                    short_list(&finding.deciding_values, 20)
                ),
                Dimension::Env => {
                    let mut names: Vec<String> =
                        deciding.iter().flat_map(|o| o.config.env.iter().map(|(k, _)| k.clone())).collect();
                    names.sort();
                    names.dedup();
                    format!(
                        "the variable{} {} decides: {}",
                        if names.len() == 1 { "" } else { "s" },
                        names.join(", "),
                        short_list(&finding.deciding_values, 8)
                    )
                }
                Dimension::Epoch if !interrupted => {
                    let (boundaries, stopped) =
                        bisect_epochs(outcomes, first, batch, &mut runs, opts.bisect_points, progress)?;
                    interrupted |= stopped;
                    let text = boundaries.iter().map(Boundary::describe).collect::<Vec<_>>().join("; ");
                    report.epoch_boundaries = boundaries;
                    text
                }
                Dimension::Schedule => format!(
                    "scheduling: the interleaving of the guest's threads decides; {} of {} schedules (deciding before \
                     reads, writes and signals too: --sched-points io) {}: {}",
                    deciding.len(),
                    outcomes.len(),
                    if control_fails { "pass" } else { "fail" },
                    short_list(&finding.deciding_values, 12)
                ),
                _ => format!("outcome changes for: {}", short_list(&finding.deciding_values, 8)),
            });
        }
        report.findings.push(finding);
    }
    report.interrupted = interrupted;
    report.runs = runs;
    Ok(report)
}

/// What the control runs say about an outcome that varied with everything pinned.
fn nondeterminism_notes(control: &[Outcome], first: &Outcome) -> Vec<String> {
    let mut notes: Vec<String> =
        control.iter().flat_map(|o| o.not_enforced.iter().map(|n| format!("not enforced: {n}"))).collect();
    let verdicts: Vec<String> = control.iter().map(|o| format!("{:?}", o.verdict).to_lowercase()).collect();
    notes.push(format!("control outcomes: {}", verdicts.join(", ")));
    if let Some(other) = control.iter().find(|o| o.stdout_digest != first.stdout_digest) {
        let read = |o: &Outcome| {
            let p = o.run_dir.join("stdout");
            std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        match (read(first), read(other)) {
            (Ok(a), Ok(b)) => notes.push(first_difference("stdout", &a, &b, other.index + 1)),
            (Err(why), _) | (_, Err(why)) => notes.push(format!("stdout differs ({why})")),
        }
    }
    let tasks = control.iter().map(|o| o.tasks_created).max().unwrap_or(0);
    if tasks > 0 {
        notes
            .push(format!("the guest started {tasks} more process(es) or thread(s): their interleaving is not pinned"));
    }
    notes.sort();
    notes.dedup();
    notes
}

/// "stdout differs between control runs 1 and N at line L: "a" vs "b"".
pub(crate) fn first_difference(stream: &str, a: &[u8], b: &[u8], run: usize) -> String {
    let (ta, tb) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let (la, lb): (Vec<&str>, Vec<&str>) = (ta.lines().collect(), tb.lines().collect());
    let i = (0..la.len().max(lb.len())).find(|i| la.get(*i) != lb.get(*i)).unwrap_or(0);
    format!(
        "{stream} differs between control runs 1 and {run} at line {}: {:?} vs {:?} (an input the supervisor does not pin)",
        i + 1,
        la.get(i).copied().unwrap_or("(end)"),
        lb.get(i).copied().unwrap_or("(end)")
    )
}

pub(crate) fn short_list(v: &[String], n: usize) -> String {
    if v.len() <= n {
        v.join(", ")
    } else {
        format!("{}, ... ({} in all)", v[..n].join(", "), v.len())
    }
}

/// Bisects every pass/fail transition among the sampled epochs down to one second.
/// Returns the boundaries found and whether a signal stopped the bisection.
pub(crate) fn bisect_epochs(
    outcomes: &[Outcome],
    control: &Outcome,
    batch: &mut Batch<'_>,
    runs: &mut usize,
    width: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<(Vec<Boundary>, bool), crate::HuntError> {
    use crate::config::rfc3339;
    let fails = |o: &Outcome| o.verdict == Verdict::Fail;
    let mut points: Vec<(i64, bool)> = outcomes.iter().map(|o| (o.config.epoch, fails(o))).collect();
    points.push((control.config.epoch, fails(control)));
    points.sort();
    points.dedup_by_key(|p| p.0);
    let mut boundaries = Vec::new();
    let template = control.config.clone();
    for w in points.windows(2) {
        let ((mut lo, lo_fails), (mut hi, hi_fails)) = (w[0], w[1]);
        if lo_fails == hi_fails {
            continue;
        }
        let mut steps = 0usize;
        while hi - lo > 1 {
            // `width` dates spread over (lo, hi), run in parallel: the first that differs from `lo` bounds
            // the transition (a (width+1)-ary search; width 1 is bisection).
            let k = (width.max(1) as i64).min(hi - lo - 1);
            let mids: Vec<i64> =
                (1..=k).map(|i| lo + ((hi - lo) as i128 * i as i128 / (k + 1) as i128) as i64).collect();
            let configs: Vec<Config> = mids
                .iter()
                .map(|m| {
                    let mut c = template.clone();
                    c.epoch = *m;
                    c
                })
                .collect();
            let o = match batch(&configs) {
                Err(crate::HuntError::Interrupted { .. }) => return Ok((boundaries, true)),
                r => r?,
            };
            *runs += o.len();
            if o.len() < mids.len() {
                return Ok((boundaries, true));
            }
            match mids.iter().zip(&o).position(|(_, o)| fails(o) != lo_fails) {
                Some(0) => hi = mids[0],
                Some(i) => (lo, hi) = (mids[i - 1], mids[i]),
                None => lo = mids[mids.len() - 1],
            }
            steps += 1;
            if steps.is_multiple_of(4) {
                progress(&format!("epoch bisecting: between {} and {}", rfc3339(lo), rfc3339(hi)));
            }
        }
        let b =
            if lo_fails { Boundary { passes_at: hi, fails_at: lo } } else { Boundary { passes_at: lo, fails_at: hi } };
        progress(&format!("epoch bisected: {}", b.describe()));
        boundaries.push(b);
        if boundaries.len() >= 4 {
            break;
        }
    }
    Ok((boundaries, false))
}

/// The report as text.
pub fn render(r: &ExplainReport) -> String {
    let mut out = String::new();
    if let Some(e) = &r.baseline_epoch {
        out.push_str(&format!("baseline: {}\n", e.describe()));
    }
    if r.interrupted {
        out.push_str("INTERRUPTED: what was found until the signal\n");
    }
    out.push_str(&format!(
        "control: {} run{}, {}{}\n",
        r.control_runs,
        if r.control_runs == 1 { "" } else { "s" },
        format!("{:?}", r.control_verdict).to_lowercase(),
        if r.nondeterministic { ", NOT stable" } else { ", stable" }
    ));
    if r.nondeterministic {
        out.push_str("the result varies with every input pinned: nondeterministic under pinning\n");
        for n in &r.nondeterminism_notes {
            out.push_str(&format!("  - {n}\n"));
        }
        return out;
    }
    for f in &r.findings {
        let verdict = if f.changes_outcome {
            "DECIDES the outcome"
        } else if f.changes_output {
            "changes the output, not the outcome"
        } else {
            "no effect"
        };
        let tried = if f.untried > 0 {
            format!("{} of {} values tried", f.tried, f.tried + f.untried)
        } else {
            format!("{} values tried", f.tried)
        };
        out.push_str(&format!("{:<11} {:<36} ({tried})\n", f.dimension.name(), verdict));
        if let Some(d) = &f.detail {
            out.push_str(&format!("            {d}\n"));
        }
    }
    out.push_str(&format!("{} runs in all\n", r.runs));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DirOrder, SpaceOptions};
    use crate::runner::Outcome;
    use repro_model::manifest::Signature;

    /// An outcome of `c` without a run: failing (exit 1) or passing, with `out` as its output digest.
    fn outcome(index: usize, c: &Config, fail: bool, out: &str) -> Outcome {
        let exit_status = i32::from(fail);
        Outcome {
            index,
            config: c.clone(),
            verdict: if fail { Verdict::Fail } else { Verdict::Pass },
            exit_status,
            signature: Signature { exit_status, stderr_tail: vec![], test_frameworks: vec![], failing_tests: vec![] },
            stdout_digest: out.into(),
            duration_ms: 1,
            run_dir: std::path::PathBuf::from("/nonexistent"),
            not_enforced: vec![],
            tasks_created: 0,
        }
    }

    fn space(dims: Vec<Dimension>) -> Space {
        let o = SpaceOptions {
            dims,
            seeds: Some((0..8).collect()),
            epoch_range: Some((1_000_000_000, 2_000_000_000)),
            env_variants: vec![],
            random_epochs: 4,
            sched_seeds: None,
        };
        Space::new(&o, 7)
    }

    #[test]
    fn the_epoch_decides_and_is_bisected_to_the_second() {
        const T: i64 = 1_700_000_000;
        let base = Config::baseline(1_500_000_000);
        let s = space(vec![Dimension::Epoch, Dimension::Seed, Dimension::DirOrder]);
        let mut seen = 0;
        let mut batch = |cs: &[Config]| -> Result<Vec<Outcome>, crate::HuntError> {
            seen += cs.len();
            Ok(cs.iter().enumerate().map(|(i, c)| outcome(i, c, c.epoch >= T, "same")).collect())
        };
        let r = explain(&base, &s, &ExplainOptions::new(3, 4), &mut batch, &mut |_| {}).unwrap();
        assert!(!r.nondeterministic);
        assert_eq!(r.control_verdict, Verdict::Pass);
        assert_eq!(r.runs, seen, "every run is counted");
        let by = |d: Dimension| r.findings.iter().find(|f| f.dimension == d).unwrap();
        assert!(by(Dimension::Epoch).changes_outcome);
        assert!(!by(Dimension::Seed).changes_outcome && !by(Dimension::DirOrder).changes_outcome);
        assert_eq!(r.epoch_boundaries.first(), Some(&Boundary { passes_at: T - 1, fails_at: T }));
        assert!(render(&r).contains("epoch       DECIDES the outcome"), "{}", render(&r));
    }

    #[test]
    fn a_control_that_varies_is_reported_as_nondeterministic() {
        let base = Config::baseline(1_500_000_000);
        let s = space(vec![Dimension::DirOrder]);
        let mut n = 0;
        let mut batch = |cs: &[Config]| -> Result<Vec<Outcome>, crate::HuntError> {
            Ok(cs
                .iter()
                .map(|c| {
                    n += 1;
                    outcome(n, c, n % 2 == 0 || c.dir_order == DirOrder::Reversed, "same")
                })
                .collect())
        };
        let r = explain(&base, &s, &ExplainOptions::new(4, 4), &mut batch, &mut |_| {}).unwrap();
        assert!(r.nondeterministic);
        assert!(r.nondeterminism_notes.iter().any(|n| n == "control outcomes: pass, fail, pass, fail"), "{r:?}");
    }

    #[test]
    fn a_failing_batch_stops_the_explanation_with_its_error() {
        let base = Config::baseline(0);
        let s = space(vec![Dimension::Seed]);
        let mut batch =
            |_: &[Config]| -> Result<Vec<Outcome>, crate::HuntError> { Err(crate::HuntError::usage("--x", "bad")) };
        let e = explain(&base, &s, &ExplainOptions::new(1, 4), &mut batch, &mut |_| {}).unwrap_err();
        assert_eq!(e.to_string(), "--x: bad");
    }
}
