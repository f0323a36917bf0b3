//! The record of a `repro repair` loop (docs/repair.md): `summary.json` of its directory and its `--json`
//! output. The gates' own types are in [`crate::repair`].

use serde::{Deserialize, Serialize};

use crate::repair::{DiffStats, GateResult, TestCounts};

/// How a repair ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairOutcome {
    /// An iteration's change made the failure go away N/N times, passed the contract's verify steps and fired
    /// no gate: its patch is the fix.
    Fixed,
    /// The baseline replay did not fail with the recorded signature: nothing to repair.
    NotReproduced,
    /// Every iteration was refused (the failure stayed, a gate fired, the contract failed) and the iteration
    /// budget ran out.
    IterationsExhausted,
    /// The wall-time budget ran out.
    TimeExhausted,
}

impl RepairOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RepairOutcome::Fixed => "fixed",
            RepairOutcome::NotReproduced => "not-reproduced",
            RepairOutcome::IterationsExhausted => "iterations-exhausted",
            RepairOutcome::TimeExhausted => "time-exhausted",
        }
    }
}

/// One replay run of the pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairReplayRun {
    pub exit_status: i32,
    /// It failed with the pack's recorded signature.
    pub reproduced: bool,
    pub run_dir: String,
}

/// The contract's verify steps on the candidate tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairContract {
    pub passed: bool,
    /// The contract's report (`STATE/contracts/ID/report.json`).
    pub report: String,
    /// The names of the steps that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_steps: Vec<String>,
}

/// What repro added to every judging replay (the baseline's and each candidate's alike) so that each test's
/// result is printed: variables set on top of the pack's recorded environment (`repro replay --env`). The pack's
/// recorded command is never changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestVisibility {
    /// `NAME=VALUE` of each variable set, with why.
    pub env: Vec<VisibilityVar>,
    /// Whether the replays used them: false when the baseline replay with them did not fail as recorded (the
    /// replays then ran as recorded, without them).
    pub applied: bool,
    /// Why they were not applied, when they were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_because: Option<String>,
}

/// One variable of [`TestVisibility`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisibilityVar {
    pub name: String,
    pub value: String,
    pub why: String,
}

/// One iteration: the agent ran, its change was replayed and judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairIteration {
    pub number: u32,
    /// The agent's run (a `repro run` in the working copy).
    pub agent_run: String,
    pub agent_exit_status: i32,
    pub diff: DiffStats,
    /// The iteration's patch against the original tree (`iterations/N/change.patch`).
    pub patch: String,
    /// The replays of the pack with the change laid over it; empty when the agent changed nothing.
    pub replays: Vec<RepairReplayRun>,
    /// The replays' report (`iterations/N/replay.json`, as `repro replay --json` printed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_report: Option<String>,
    /// Every replay exited 0.
    pub failure_gone: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<RepairContract>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<TestCounts>,
    pub gates: Vec<GateResult>,
    /// The change is the fix.
    pub accepted: bool,
    /// Why it was not (what the agent is told in the next iteration's `feedback.txt`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_because: Vec<String>,
    /// Set on an accepted change that fewer than two of the checks reading the tests' results could judge
    /// (the counts gates, `failing-test-missing`, the contract): why the acceptance is weak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weak: Option<String>,
    pub duration_ms: u64,
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairSummary {
    pub id: String,
    pub pack: String,
    pub agent: String,
    pub outcome: RepairOutcome,
    /// The failing tests of the pack's signature.
    pub failing_tests: Vec<String>,
    /// The baseline replay's exit status and test counts.
    pub baseline_exit_status: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_counts: Option<TestCounts>,
    /// How many replays judge each change.
    pub runs: u32,
    pub iterations: Vec<RepairIteration>,
    /// The accepted patch (`fix.patch` of the repair's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// The signed VSA of the fix (`fix.dsse.json`, with `repro repair --key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<String>,
    /// The names of the gates that fired in any iteration, in order of first firing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates_fired: Vec<String>,
    /// What repro added to the replays to see each test's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<TestVisibility>,
    /// Copied from the accepted iteration: why its acceptance is weak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weak: Option<String>,
    pub duration_ms: u64,
}
