//! The deterministic scheduler's settings (`--sched POLICY --sched-seed N`): which guest thread runs next at each
//! scheduling point is chosen by `policy` from a stream seeded by `seed` (see repro-detcore's `sched`).

use serde::{Deserialize, Serialize};

/// How the supervisor picks the next guest thread to run among those ready.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedPolicy {
    /// A seeded pseudo-random choice at every scheduling point.
    #[default]
    Random,
    /// The ready threads in turn, by creation order, starting after the last one run.
    RoundRobin,
    /// Probabilistic concurrency testing: seeded random priorities with a few seeded change points; the ready
    /// thread of highest priority runs.
    Pct,
}

/// The words `--sched` takes, in the order help lists them.
pub const SCHED_POLICY_EXPECTED: &str = "random, round-robin or pct";

impl SchedPolicy {
    /// The policy as `--sched` and run.json write it.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedPolicy::Random => "random",
            SchedPolicy::RoundRobin => "round-robin",
            SchedPolicy::Pct => "pct",
        }
    }
}

impl std::fmt::Display for SchedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SchedPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "random" => Ok(SchedPolicy::Random),
            "round-robin" => Ok(SchedPolicy::RoundRobin),
            "pct" => Ok(SchedPolicy::Pct),
            _ => Err(format!("'{s}' is not a scheduling policy: expected {SCHED_POLICY_EXPECTED}")),
        }
    }
}

/// The scheduler's policy and seed, as `settings.sched` in run.json. The seed is its own (`--sched-seed`, default
/// 0), not derived from `--seed`: the entropy stream and the interleaving vary independently.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedSettings {
    #[serde(default)]
    pub policy: SchedPolicy,
    #[serde(default)]
    pub seed: u64,
}

/// A forced schedule (`repro run --sched-script FILE`, written by `repro race`): at each scheduling decision (a
/// point where two or more guest threads were ready, counted from 0 as `step`), the scheduler runs the task a
/// switch names, if it is ready; at every other decision it runs the non-preemptive choice: the task that ran last
/// if it is ready, else the ready task created first. No switches at all is the schedule without preemption.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedScript {
    pub switches: Vec<SchedSwitch>,
}

/// At decision `step`, run task `task` (task ids count the guest's threads and processes in creation order, from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedSwitch {
    pub step: u64,
    pub task: u64,
}

/// Why a schedule script cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SchedScriptError {
    #[error(
        "line {line}, column {column}: {message} (expected {{\"switches\": [{{\"step\": N, \"task\": T}}, ...]}})"
    )]
    Syntax { line: usize, column: usize, message: String },
    #[error("switches[{index}]: step {step} is listed twice")]
    DuplicateStep { index: usize, step: u64 },
    #[error("{count} switches: at most {max} are allowed")]
    TooMany { count: usize, max: usize },
}

/// The most switches a script may hold (a schedule log holds at most [`SCHED_LOG_LIMIT`] decisions).
pub const SCHED_SCRIPT_MAX: usize = SCHED_LOG_LIMIT;

impl SchedScript {
    /// Parses a script (JSON); every error names where and what was expected.
    pub fn parse(text: &[u8]) -> Result<SchedScript, SchedScriptError> {
        let s: SchedScript = serde_json::from_slice(text).map_err(|e| SchedScriptError::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        if s.switches.len() > SCHED_SCRIPT_MAX {
            return Err(SchedScriptError::TooMany { count: s.switches.len(), max: SCHED_SCRIPT_MAX });
        }
        let mut seen = std::collections::BTreeSet::new();
        for (index, sw) in s.switches.iter().enumerate() {
            if !seen.insert(sw.step) {
                return Err(SchedScriptError::DuplicateStep { index, step: sw.step });
            }
        }
        Ok(s)
    }
}

/// The most decisions a schedule log holds; later ones are only counted.
pub const SCHED_LOG_LIMIT: usize = 20_000;

/// The scheduler's decisions in a run (`repro run --sched-log`), in `run.json` as `determinism.schedule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedLog {
    /// The first [`SCHED_LOG_LIMIT`] decisions.
    pub decisions: Vec<SchedDecision>,
    /// Every decision made, logged or not.
    pub total: u64,
}

/// One scheduling decision: the guest threads that were ready, where each stood, and which one ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedDecision {
    pub step: u64,
    /// The task let go.
    pub chosen: u64,
    /// The task the non-preemptive choice would have let go (the last one run, if ready): `chosen` differs from it
    /// exactly where the schedule switched.
    pub default: u64,
    /// The ready tasks, by task id.
    pub ready: Vec<SchedReady>,
}

/// A thread held at a scheduling point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedReady {
    pub task: u64,
    /// The system call it stopped at, with what tells it apart (`futex(WAKE, 0x7f3a..)`, `write(fd 1)`).
    pub call: String,
    /// Where: the system call's instruction and, found by scanning the thread's stack for a return address into
    /// a program rather than the C library, its caller (`__GI___futex... in libc.so.6 <- worker+0x2a in race`).
    pub at: String,
}

impl SchedLog {
    /// The decisions where the schedule switched away from the non-preemptive choice, as a script that forces them.
    pub fn switches(&self) -> Vec<SchedSwitch> {
        self.decisions
            .iter()
            .filter(|d| d.chosen != d.default)
            .map(|d| SchedSwitch { step: d.step, task: d.chosen })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_written_in_kebab_case_and_parse_back() {
        for p in [SchedPolicy::Random, SchedPolicy::RoundRobin, SchedPolicy::Pct] {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<SchedPolicy>(&json).unwrap(), p);
            assert_eq!(p.as_str().parse::<SchedPolicy>().unwrap(), p);
        }
        assert!("fifo".parse::<SchedPolicy>().unwrap_err().contains("round-robin"));
        let s: SchedSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(s, SchedSettings { policy: SchedPolicy::Random, seed: 0 });
    }

    #[test]
    fn a_script_parses_and_bad_ones_name_what_is_wrong() {
        let s = SchedScript::parse(br#"{"switches":[{"step":3,"task":1},{"step":9,"task":0}]}"#).unwrap();
        assert_eq!(s.switches, [SchedSwitch { step: 3, task: 1 }, SchedSwitch { step: 9, task: 0 }]);
        assert_eq!(SchedScript::parse(br#"{"switches":[]}"#).unwrap(), SchedScript::default());
        let e = SchedScript::parse(b"{\n \"switches\": [{\"step\": -1, \"task\": 0}]}").unwrap_err();
        assert!(matches!(e, SchedScriptError::Syntax { line: 2, .. }), "{e}");
        assert!(e.to_string().contains("expected {\"switches\""), "{e}");
        let e = SchedScript::parse(br#"{"switches":[{"step":1,"task":0,"x":1}]}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
        let e = SchedScript::parse(br#"{"switches":[{"step":1,"task":0},{"step":1,"task":2}]}"#).unwrap_err();
        assert_eq!(e, SchedScriptError::DuplicateStep { index: 1, step: 1 });
    }

    #[test]
    fn a_log_switches_where_the_choice_was_not_the_default() {
        let d = |step, chosen, default| SchedDecision { step, chosen, default, ready: Vec::new() };
        let log = SchedLog { decisions: vec![d(0, 0, 0), d(1, 2, 0), d(2, 2, 2), d(3, 1, 2)], total: 4 };
        assert_eq!(log.switches(), [SchedSwitch { step: 1, task: 2 }, SchedSwitch { step: 3, task: 1 }]);
    }
}
