//! `repro repair PACK --agent CMD` (docs/repair.md): the loop from a failing pack to a verified fix.
//!
//! 1. The project is copied twice into `STATE/repairs/ID/`: `base` (the original, never changed) and `work`
//!    (the agent's). The pack is replayed once: it must fail with its recorded signature, else there is nothing
//!    to repair.
//! 2. Each iteration the agent runs in `work` (through the [`Executor`]: for the real one a `repro run
//!    --keep-changes`, so it never touches the host), given the failure in `work/.repro-repair/`.
//! 3. Its change (the diff of `work` against `base`) is laid over the pack and replayed `runs` times: every replay
//!    must exit 0. Then the anti-weakening gates of `repro-repair` judge it, and the contract's verify steps
//!    (`repro.toml`'s `[contract]`) must pass on `work`. An accepted change is the fix (`fix.patch`); a refused
//!    one is explained to the agent in the next iteration's `feedback.txt`.
//!
//! The loop knows no process: the [`Executor`] replays, runs the agent and the contract (the real one spawns
//! `repro` children, [`exec::ReproExecutor`]; the tests use a fake).

pub mod exec;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use repro_model::repair::{GateConfig, GateName, GateResult, TestCounts, TestStatus};
use repro_model::repair_loop::{
    RepairContract, RepairIteration, RepairOutcome, RepairReplayRun, RepairSummary, TestVisibility, VisibilityVar,
};
use repro_repair::tree::{self, DiffLimits, EntryKind, SnapshotLimits};
use repro_repair::{GateInput, GateSet, RepairError, RunOutput};

/// The directory inside the working copy through which the agent is told about the failure; removed before the
/// change is judged, so it is never part of a fix.
pub const INPUT_DIR: &str = ".repro-repair";

/// Directories of the working copy that are not part of a change, besides the snapshot's defaults (`.git`,
/// `target`, `node_modules`, `__pycache__`).
pub const SKIP_DIRS: [&str; 7] =
    [INPUT_DIR, JUNIT_DIR, ".repro", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"];

/// Where a judging replay's pytest writes its JUnit XML report (`--junitxml`, relative to the directory pytest
/// runs in). The replay's working directory is an overlay: what the guest writes there never reaches the tree and
/// is kept in the run directory's `changes/`, which is where the loop reads it back from.
pub const JUNIT_DIR: &str = ".repro-repair-junit";

/// What went wrong around the loop (an agent that fails or cheats is a summary, not an error).
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("{argument}: {message}")]
    Usage { argument: String, message: String },
    #[error(transparent)]
    Gates(#[from] repro_repair::RepairError),
    #[error(transparent)]
    Contract(#[from] repro_contract::ContractError),
    #[error("cannot {what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{what}: {detail}")]
    Exec { what: String, detail: String },
    #[error(transparent)]
    Sandbox(#[from] repro_sandbox::SandboxError),
    /// The signing key could not be loaded (found before any agent runs).
    #[error("--key: {0}")]
    Key(repro_prov::ProvError),
    /// The fix was accepted (fix.patch and summary.json are written) but could not be signed.
    #[error("the fix was accepted but not signed: {0}")]
    Sign(repro_prov::ProvError),
}

impl LoopError {
    /// 2 for bad arguments or a bad gate configuration, 125 for what the host did not allow.
    pub fn exit_code(&self) -> i32 {
        use repro_repair::RepairError as R;
        match self {
            LoopError::Usage { .. } => 2,
            LoopError::Gates(R::BadGlob { .. } | R::MaskingFile { .. } | R::MaskingEntry { .. }) => 2,
            LoopError::Contract(e) => e.exit_code(),
            LoopError::Sandbox(e) => e.exit_code(),
            LoopError::Key(e) => e.exit_code(),
            LoopError::Sign(e) => e.exit_code(),
            _ => 125,
        }
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> LoopError + 'a {
    move |source| LoopError::Io { what, path: path.to_path_buf(), source }
}

/// One replay run, as the executor saw it.
#[derive(Debug, Clone)]
pub struct ReplayedRun {
    pub exit_status: i32,
    /// It failed with the pack's recorded signature.
    pub reproduced: bool,
    pub run_dir: PathBuf,
    pub output: RunOutput,
}

/// A replay of the pack (`runs` runs).
#[derive(Debug, Clone)]
pub struct ReplayResult {
    pub runs: Vec<ReplayedRun>,
    /// The failing tests of the pack's recorded signature.
    pub failing_tests: Vec<String>,
    /// The report as `repro replay --json` printed it: the evidence a signed fix statement cites.
    pub report: Vec<u8>,
}

/// The agent's run.
#[derive(Debug, Clone)]
pub struct AgentResult {
    pub run_id: String,
    pub exit_status: i32,
    /// It was stopped because the time budget ran out while it ran.
    pub timed_out: bool,
}

/// The contract's verify on a tree.
#[derive(Debug, Clone)]
pub struct ContractResult {
    pub passed: bool,
    pub report: PathBuf,
    pub failed_steps: Vec<String>,
}

/// What runs things for the loop.
pub trait Executor {
    /// Replays `pack` `runs` times from `tree`, with `with` (paths relative to `tree`) laid over the pack's copy
    /// of its working directory and `env` set on top of its recorded environment (`repro replay --env`).
    fn replay(
        &mut self,
        pack: &Path,
        tree: &Path,
        with: &[PathBuf],
        runs: u32,
        env: &[(String, String)],
    ) -> Result<ReplayResult, LoopError>;
    /// Runs the agent's shell command in `tree`, its changes kept there, with `env` set; stops it (and says so)
    /// when it is still running after `budget`.
    fn agent(
        &mut self,
        tree: &Path,
        command: &str,
        env: &[(String, String)],
        budget: Duration,
    ) -> Result<AgentResult, LoopError>;
    /// Runs the contract of `tree`'s project file, if it has one.
    fn contract(&mut self, tree: &Path) -> Result<Option<ContractResult>, LoopError>;
}

/// How to repair.
#[derive(Debug, Clone)]
pub struct Options {
    pub pack: PathBuf,
    /// The project (the directory the pack was captured in): what the agent gets a copy of.
    pub project: PathBuf,
    /// Where runs and repair directories go.
    pub state: PathBuf,
    /// The agent: a shell command line.
    pub agent: String,
    pub max_iterations: u32,
    pub time_budget: Duration,
    /// Replays that judge each change.
    pub runs: u32,
    pub gates: GateConfig,
    /// Keep `base` and `work` after the loop.
    pub keep_trees: bool,
    /// Sign a fix: the private key (`repro key gen`) of a VSA written as `fix.dsse.json`.
    pub key: Option<PathBuf>,
}

/// What the loop reports as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The baseline replay: its exit status, whether it failed as recorded, and what was added to it (and to
    /// every candidate's replay) to see each test's result.
    Baseline { exit_status: i32, reproduced: bool, dir: &'a Path, visibility: &'a TestVisibility },
    /// The agent of iteration N is about to run.
    AgentStarts { number: u32 },
    /// An iteration was judged.
    Iteration(&'a RepairIteration),
}

/// The repair's directory and summary.
#[derive(Debug)]
pub struct Repaired {
    pub dir: PathBuf,
    pub summary: RepairSummary,
}

fn check(opts: &Options) -> Result<(), LoopError> {
    let usage =
        |argument: &str, message: &str| Err(LoopError::Usage { argument: argument.into(), message: message.into() });
    if opts.agent.trim().is_empty() {
        return usage("--agent", "expected a command");
    }
    if opts.runs == 0 {
        return usage("--runs", "expected at least 1");
    }
    if opts.max_iterations == 0 {
        return usage("--max-iterations", "expected at least 1");
    }
    if !opts.pack.is_file() {
        return usage(&opts.pack.display().to_string(), "no such pack file");
    }
    if !opts.project.is_dir() {
        return usage("--project", &format!("{}: not a directory", opts.project.display()));
    }
    Ok(())
}

/// Runs the loop.
pub fn repair(
    opts: &Options,
    exec: &mut dyn Executor,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Repaired, LoopError> {
    check(opts)?;
    let gates = GateSet::new(&opts.gates)?;
    // A key that cannot sign is found before any agent runs, not after a fix.
    let signer = opts.key.as_deref().map(repro_prov::attest::PrivateKey::load).transpose().map_err(LoopError::Key)?;
    let mut unsigned: Option<LoopError> = None;
    let started = Instant::now();
    let id = repro_sandbox::rundir::new_id(time::OffsetDateTime::now_utc());
    let dir = opts.state.join("repairs").join(&id);
    let (base, work) = (dir.join("base"), dir.join("work"));
    for d in [&base, &work] {
        std::fs::create_dir_all(d).map_err(io("create", d))?;
        repro_contract::copy::project(&opts.project, d, &opts.state)?;
    }
    let mut summary = RepairSummary {
        id,
        pack: opts.pack.display().to_string(),
        agent: opts.agent.clone(),
        outcome: RepairOutcome::IterationsExhausted,
        failing_tests: vec![],
        baseline_exit_status: 0,
        baseline_counts: None,
        runs: opts.runs,
        iterations: vec![],
        patch: None,
        attestation: None,
        gates_fired: vec![],
        visibility: None,
        weak: None,
        duration_ms: 0,
    };

    // Every judging replay, the baseline's and each candidate's alike, runs with the same variables that make
    // the runners print each test's result; the pack's recorded command is never changed.
    let mut visibility = TestVisibility { env: visibility_vars(), applied: true, dropped_because: None };
    let mut env: Vec<(String, String)> = visibility.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect();
    let mut baseline = exec.replay(&opts.pack, &work, &[], 1, &env)?;
    if !reproduced(&baseline) {
        // The variables changed what the run printed to stderr or how it ended: judge as recorded instead.
        let with_them = describe_runs(&baseline);
        baseline = exec.replay(&opts.pack, &work, &[], 1, &[])?;
        visibility.applied = false;
        visibility.dropped_because =
            Some(format!("the baseline replay with them did not fail as recorded ({with_them})"));
        env.clear();
    }
    let first = baseline
        .runs
        .first()
        .ok_or_else(|| LoopError::Exec { what: "the baseline replay".into(), detail: "it made no run".into() })?;
    let reproduced = reproduced(&baseline);
    summary.failing_tests = failing_tests(&baseline);
    summary.baseline_exit_status = first.exit_status;
    summary.baseline_counts = first.output.counts();
    progress(Progress::Baseline {
        exit_status: first.exit_status,
        reproduced,
        dir: &first.run_dir,
        visibility: &visibility,
    });
    summary.visibility = Some(visibility);
    if !reproduced {
        summary.outcome = RepairOutcome::NotReproduced;
        return finish(opts, dir, summary, started);
    }

    let mut limits = SnapshotLimits::default();
    // Caches a test runner leaves in the tree are no part of a change.
    limits.skip_dirs.extend(SKIP_DIRS.iter().map(|d| d.to_string()));
    let base_snap = tree::snapshot(&base, &limits)?;
    let mut feedback = String::new();
    for number in 1..=opts.max_iterations {
        if started.elapsed() >= opts.time_budget {
            summary.outcome = RepairOutcome::TimeExhausted;
            break;
        }
        let it_started = Instant::now();
        let it_dir = dir.join("iterations").join(number.to_string());
        std::fs::create_dir_all(&it_dir).map_err(io("create", &it_dir))?;
        let agent_env = write_inputs(&work, number, &baseline, &summary.failing_tests, &feedback)?;
        progress(Progress::AgentStarts { number });
        let left = opts.time_budget.saturating_sub(started.elapsed());
        let agent = exec.agent(&work, &opts.agent, &agent_env, left)?;
        let inputs = work.join(INPUT_DIR);
        if inputs.exists() {
            std::fs::remove_dir_all(&inputs).map_err(io("remove", &inputs))?;
        }
        // A working copy past the snapshot's limits (files, bytes) is refused as this iteration's change, not
        // an error of the repair: the agent made it.
        let (cand_snap, diff, too_big) = match tree::snapshot(&work, &limits) {
            Ok(c) => {
                let d = tree::diff(&base, &base_snap, &work, &c, &DiffLimits::default())?;
                (c, d, None)
            }
            Err(e @ (RepairError::TooManyFiles { .. } | RepairError::TooManyBytes { .. })) => {
                (tree::Snapshot::default(), tree::TreeDiff::default(), Some(e.to_string()))
            }
            Err(e) => return Err(e.into()),
        };
        let patch = it_dir.join("change.patch");
        repro_sandbox::rundir::write_atomic(&patch, diff.unified.as_bytes(), false)?;
        let mut it = RepairIteration {
            number,
            agent_run: agent.run_id.clone(),
            agent_exit_status: agent.exit_status,
            diff: diff.stats(),
            patch: patch.display().to_string(),
            replays: vec![],
            replay_report: None,
            failure_gone: false,
            contract: None,
            counts: None,
            gates: vec![],
            accepted: false,
            refused_because: vec![],
            weak: None,
            duration_ms: 0,
        };
        let with: Vec<PathBuf> = diff
            .change
            .added
            .iter()
            .chain(&diff.change.modified)
            .filter(|p| cand_snap.entries.get(*p).is_some_and(|e| !matches!(e.kind, EntryKind::Dir)))
            .cloned()
            .collect();
        let links_out = tree::links_out_of_tree(&cand_snap, &with);
        if agent.timed_out {
            it.refused_because.push(format!(
                "the agent was stopped: the time budget ({} s) ran out while it ran",
                opts.time_budget.as_secs()
            ));
        } else if let Some(e) = too_big {
            it.refused_because.push(format!("the working copy cannot be judged: {e}"));
        } else if !links_out.is_empty() {
            let v: Vec<String> = links_out.iter().map(|(p, t)| format!("{} -> {}", p.display(), t.display())).collect();
            it.refused_because.push(format!(
                "symbolic links out of the working tree (a replay would lay the host files they point to over \
                 the pack): {}",
                v.join(", ")
            ));
        } else if diff.change.is_empty() {
            it.refused_because.push("the agent changed nothing".into());
        } else {
            if !diff.change.removed.is_empty() {
                // A replay lays files over the pack and never removes one, so a removal is refused; the change is
                // still replayed and gated, so the reasons say what the removal did (a deleted test file that held
                // the failing test fires failing-test-missing and protected-path-changed from the tree).
                let removed: Vec<String> = diff.change.removed.iter().map(|p| p.display().to_string()).collect();
                it.refused_because.push(format!(
                    "removed paths cannot be laid over the pack (a replay only adds and replaces files; the replays \
                     below still had them): {}",
                    removed.join(", ")
                ));
            }
            let replay = exec.replay(&opts.pack, &work, &with, opts.runs, &env)?;
            let report = it_dir.join("replay.json");
            repro_sandbox::rundir::write_atomic(&report, &replay.report, false)?;
            it.replay_report = Some(report.display().to_string());
            it.replays = replay
                .runs
                .iter()
                .map(|r| RepairReplayRun {
                    exit_status: r.exit_status,
                    reproduced: r.reproduced,
                    run_dir: r.run_dir.display().to_string(),
                })
                .collect();
            it.failure_gone = !replay.runs.is_empty() && replay.runs.iter().all(|r| r.exit_status == 0);
            if !it.failure_gone {
                let bad: Vec<String> = replay.runs.iter().map(|r| r.exit_status.to_string()).collect();
                it.refused_because.push(format!(
                    "the failure is not gone: the replays with the change exited {} (every one must exit 0)",
                    bad.join(", ")
                ));
            }
            let empty = RunOutput::default();
            let candidate = replay.runs.first().map(|r| &r.output).unwrap_or(&empty);
            let counts: Option<TestCounts> = candidate.counts();
            it.gates = gates.evaluate(&GateInput {
                diff: &diff,
                baseline_counts: summary.baseline_counts.as_ref(),
                candidate_counts: counts.as_ref(),
                failing_tests: &summary.failing_tests,
                candidate,
            });
            it.counts = counts;
            for g in it.gates.iter().filter(|g| g.fired) {
                let name = g.name.as_str().to_string();
                if !summary.gates_fired.contains(&name) {
                    summary.gates_fired.push(name.clone());
                }
                it.refused_because.push(format!("gate {name}: {}", g.details.join("; ")));
            }
            if it.refused_because.is_empty() {
                if let Some(c) = exec.contract(&work)? {
                    if !c.passed {
                        it.refused_because.push(format!("the contract's steps failed: {}", c.failed_steps.join(", ")));
                    }
                    it.contract = Some(RepairContract {
                        passed: c.passed,
                        report: c.report.display().to_string(),
                        failed_steps: c.failed_steps,
                    });
                }
            }
        }
        it.accepted = it.refused_because.is_empty();
        if it.accepted {
            it.weak = weakness(&it.gates, it.contract.as_ref());
            summary.weak = it.weak.clone();
        }
        it.duration_ms = it_started.elapsed().as_millis() as u64;
        let json = serde_json::to_vec_pretty(&it).unwrap_or_default();
        repro_sandbox::rundir::write_atomic(&it_dir.join("iteration.json"), &json, false)?;
        progress(Progress::Iteration(&it));
        feedback = it.refused_because.join("\n");
        let accepted = it.accepted;
        summary.iterations.push(it);
        if agent.timed_out {
            summary.outcome = RepairOutcome::TimeExhausted;
            break;
        }
        if accepted {
            let fix = dir.join("fix.patch");
            repro_sandbox::rundir::write_atomic(&fix, diff.unified.as_bytes(), true)?;
            summary.patch = Some(fix.display().to_string());
            summary.outcome = RepairOutcome::Fixed;
            if let Some(key) = &signer {
                // A fix that cannot be signed is still the fix: the summary is written, then the error returned.
                match sign_fix(opts, &dir, &summary, &fix, key) {
                    Ok(signed) => summary.attestation = Some(signed.display().to_string()),
                    Err(e) => unsigned = Some(e),
                }
            }
            break;
        }
    }
    let repaired = finish(opts, dir, summary, started)?;
    match unsigned {
        Some(e) => Err(e),
        None => Ok(repaired),
    }
}

/// The signed VSA of the accepted fix (the last iteration of `summary`): `fix.dsse.json` in `dir`.
fn sign_fix(
    opts: &Options,
    dir: &Path,
    summary: &RepairSummary,
    fix: &Path,
    key: &repro_prov::attest::PrivateKey,
) -> Result<PathBuf, LoopError> {
    use repro_prov::attest::predicates::{RepairContractEvidence, RepairEvidence};
    let it = summary.iterations.last().ok_or_else(|| LoopError::Exec {
        what: "signing the fix".into(),
        detail: "no iteration was accepted".into(),
    })?;
    let report = it.replay_report.as_ref().map(PathBuf::from).ok_or_else(|| LoopError::Exec {
        what: "signing the fix".into(),
        detail: "the accepted iteration has no replay report".into(),
    })?;
    let d = &it.diff;
    let repair = RepairEvidence {
        repair: summary.id.clone(),
        agent: summary.agent.clone(),
        iteration: it.number,
        iterations: summary.iterations.len() as u32,
        patch: Default::default(),
        lines_added: d.lines_added,
        lines_removed: d.lines_removed,
        files_changed: d.files_added + d.files_modified + d.files_removed,
        gates_passed: it
            .gates
            .iter()
            .filter(|g| !g.fired && g.applicable)
            .map(|g| g.name.as_str().to_string())
            .collect(),
        gates_fired: it.gates.iter().filter(|g| g.fired).map(|g| g.name.as_str().to_string()).collect(),
        gates_not_applicable: it
            .gates
            .iter()
            .filter(|g| !g.applicable)
            .map(|g| format!("{}: {}", g.name.as_str(), g.details.join("; ")))
            .collect(),
        weak: it.weak.clone(),
        contract: it
            .contract
            .as_ref()
            .map(|c| RepairContractEvidence { passed: c.passed, failed_steps: c.failed_steps.clone() }),
    };
    let req = repro_prov::attest::FixRequest {
        pack: opts.pack.clone(),
        report,
        patch: fix.to_path_buf(),
        repair,
        time_verified: None,
    };
    let signed = repro_prov::attest::attest_fix(&req, key).map_err(LoopError::Sign)?;
    let out = dir.join("fix.dsse.json");
    let mut line = signed.envelope.to_json();
    line.push(b'\n');
    repro_sandbox::rundir::write_atomic(&out, &line, true)?;
    Ok(out)
}

/// The variables every judging replay gets so that each test's result is printed, and why.
pub fn visibility_vars() -> Vec<VisibilityVar> {
    let var =
        |name: &str, value: &str, why: &str| VisibilityVar { name: name.into(), value: value.into(), why: why.into() };
    vec![
        var(
            "PYTEST_ADDOPTS",
            &format!("-rA --junitxml={JUNIT_DIR}/pytest.xml"),
            "pytest then lists every test's outcome (PASSED, FAILED, SKIPPED, XFAIL) in its short summary, and \
             writes them as JUnit XML to a file of the replay's own (its run directory's changes/), read first",
        ),
        var("GOFLAGS", "-v", "go test then prints a `--- PASS`/`--- FAIL` line for every test"),
    ]
}

/// Every run of the replay failed with the pack's recorded signature.
fn reproduced(r: &ReplayResult) -> bool {
    !r.runs.is_empty() && r.runs.iter().all(|r| r.reproduced)
}

fn describe_runs(r: &ReplayResult) -> String {
    let v: Vec<String> = r.runs.iter().map(|r| format!("exited {}, {}", r.exit_status, r.run_dir.display())).collect();
    v.join("; ")
}

/// The failing tests the change must make pass: the pack's signature's, else those the baseline's own per-test
/// results show failing (a `make check` line `FAIL t.sh`, unittest's `FAIL: test_x (...)` block).
fn failing_tests(baseline: &ReplayResult) -> Vec<String> {
    if !baseline.failing_tests.is_empty() {
        return baseline.failing_tests.clone();
    }
    let mut v: Vec<String> = baseline
        .runs
        .first()
        .map(|r| r.output.outcomes())
        .unwrap_or_default()
        .into_iter()
        .filter(|o| matches!(o.status, TestStatus::Failed | TestStatus::Error))
        .map(|o| o.id)
        .collect();
    v.dedup();
    v
}

/// The checks that read the tests' own results: the counts gates and `failing-test-missing` (when they apply)
/// and the contract (when there is one). Fewer than two of them behind an accepted change make it weak: the
/// accept then rests on the failure signature being gone and the tree-reading gates.
pub fn weakness(gates: &[GateResult], contract: Option<&RepairContract>) -> Option<String> {
    let reading = [
        GateName::TestsCollectedFell,
        GateName::TestsPassedFell,
        GateName::TestsSkippedRose,
        GateName::FailingTestMissing,
    ];
    let (applied, not): (Vec<&GateResult>, Vec<&GateResult>) =
        gates.iter().filter(|g| reading.contains(&g.name)).partition(|g| g.applicable);
    let mut names: Vec<&str> = applied.iter().map(|g| g.name.as_str()).collect();
    if contract.is_some() {
        names.push("the contract");
    }
    if names.len() >= 2 {
        return None;
    }
    let not: Vec<&str> = not.iter().map(|g| g.name.as_str()).collect();
    Some(format!(
        "weak: {} of the checks reading the tests' results applied ({}); not applicable: {}{}",
        names.len(),
        if names.is_empty() { "none".to_string() } else { names.join(", ") },
        if not.is_empty() { "none".to_string() } else { not.join(", ") },
        if contract.is_none() { "; no contract" } else { "" }
    ))
}

/// Writes what the agent of iteration `number` is told: `.repro-repair/` in the working copy, and the
/// variables naming it.
fn write_inputs(
    work: &Path,
    number: u32,
    baseline: &ReplayResult,
    failing_tests: &[String],
    feedback: &str,
) -> Result<Vec<(String, String)>, LoopError> {
    let dir = work.join(INPUT_DIR);
    std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    let run = baseline.runs.first();
    let mut failure = String::new();
    if let Some(r) = run {
        failure.push_str(&format!("exit status: {}\n", r.exit_status));
        failure.push_str("--- stdout\n");
        failure.push_str(&String::from_utf8_lossy(&r.output.stdout));
        failure.push_str("\n--- stderr\n");
        failure.push_str(&String::from_utf8_lossy(&r.output.stderr));
    }
    let files = [
        ("failure.txt", failure),
        ("failing-tests.txt", failing_tests.iter().map(|t| format!("{t}\n")).collect()),
        ("feedback.txt", if feedback.is_empty() { String::new() } else { format!("{feedback}\n") }),
    ];
    for (name, text) in files {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(io("write", &p))?;
    }
    Ok(vec![
        ("REPRO_REPAIR_DIR".into(), dir.display().to_string()),
        ("REPRO_REPAIR_ITERATION".into(), number.to_string()),
        ("REPRO_REPAIR_FAILING_TESTS".into(), failing_tests.join(" ")),
    ])
}

fn finish(opts: &Options, dir: PathBuf, mut summary: RepairSummary, started: Instant) -> Result<Repaired, LoopError> {
    summary.duration_ms = started.elapsed().as_millis() as u64;
    let json = serde_json::to_vec_pretty(&summary).unwrap_or_default();
    repro_sandbox::rundir::write_atomic(&dir.join("summary.json"), &json, true)?;
    if !opts.keep_trees {
        for d in [dir.join("base"), dir.join("work")] {
            std::fs::remove_dir_all(&d).map_err(io("remove", &d))?;
        }
    }
    Ok(Repaired { dir, summary })
}

#[cfg(test)]
mod tests;
