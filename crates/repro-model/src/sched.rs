//! The deterministic scheduler's settings (`--sched POLICY --sched-seed N`): which guest thread runs next at each
//! scheduling point is chosen by `policy` from a stream seeded by `seed` (see repro-detcore's `sched`).

use serde::{Deserialize, Serialize};

/// How the supervisor picks the next guest thread to run among those ready. Written as `--sched` takes it
/// (`random`, `round-robin`, `pct`, `pct:d=3,k=2000`), in run.json too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SchedPolicy {
    /// A seeded pseudo-random choice at every scheduling point.
    #[default]
    Random,
    /// The ready threads in turn, by creation order, starting after the last one run.
    RoundRobin,
    /// Probabilistic concurrency testing (Burckhardt et al. 2010): seeded random priorities, `depth - 1` seeded
    /// change points among the first `steps` decisions; the ready thread of highest priority runs.
    Pct(PctParams),
}

/// PCT's parameters: the bug depth `d` it aims at and `k`, the estimated number of decisions in a run (among two
/// or more ready threads, as `--sched-log` counts them: `determinism.schedule.total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PctParams {
    pub depth: u32,
    pub steps: u64,
}

impl PctParams {
    /// `pct` alone: depth 3 over the first 2,000 decisions.
    pub const DEFAULT: PctParams = PctParams { depth: 3, steps: 2_000 };
    /// The deepest bug `d` may name (each level divides the guarantee by `k`).
    pub const MAX_DEPTH: u32 = 10;
    /// The most decisions `k` may name.
    pub const MAX_STEPS: u64 = 1_000_000_000;
}

impl Default for PctParams {
    fn default() -> Self {
        PctParams::DEFAULT
    }
}

/// The words `--sched` takes, in the order help lists them.
pub const SCHED_POLICY_EXPECTED: &str = "random, round-robin, pct or pct:d=DEPTH,k=STEPS";

impl SchedPolicy {
    /// PCT with its default parameters (`--sched pct`).
    pub const PCT: SchedPolicy = SchedPolicy::Pct(PctParams::DEFAULT);

    /// The policy's name, without parameters.
    pub fn name(self) -> &'static str {
        match self {
            SchedPolicy::Random => "random",
            SchedPolicy::RoundRobin => "round-robin",
            SchedPolicy::Pct(_) => "pct",
        }
    }
}

impl std::fmt::Display for SchedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchedPolicy::Pct(p) if *p != PctParams::DEFAULT => write!(f, "pct:d={},k={}", p.depth, p.steps),
            other => f.write_str(other.name()),
        }
    }
}

impl std::str::FromStr for SchedPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "random" => return Ok(SchedPolicy::Random),
            "round-robin" => return Ok(SchedPolicy::RoundRobin),
            "pct" => return Ok(SchedPolicy::PCT),
            _ => {}
        }
        let Some(params) = s.strip_prefix("pct:") else {
            return Err(format!("'{s}' is not a scheduling policy: expected {SCHED_POLICY_EXPECTED}"));
        };
        let mut p = PctParams::DEFAULT;
        let mut seen = (false, false);
        for part in params.split(',') {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let number = |what: &str| {
                value.parse::<u64>().map_err(|_| format!("'{s}': {key}= takes a whole number ({what}), not '{value}'"))
            };
            match key {
                "d" if !seen.0 => {
                    seen.0 = true;
                    let d = number("the bug depth")?;
                    if d == 0 || d > u64::from(PctParams::MAX_DEPTH) {
                        return Err(format!("'{s}': d (the bug depth) must be 1 to {}, not {d}", PctParams::MAX_DEPTH));
                    }
                    p.depth = d as u32;
                }
                "k" if !seen.1 => {
                    seen.1 = true;
                    let k = number("the estimated decisions in a run")?;
                    if k == 0 || k > PctParams::MAX_STEPS {
                        return Err(format!(
                            "'{s}': k (the estimated decisions in a run) must be 1 to {}, not {k}",
                            PctParams::MAX_STEPS
                        ));
                    }
                    p.steps = k;
                }
                "d" | "k" => return Err(format!("'{s}': {key}= is given twice")),
                _ => return Err(format!("'{s}': unknown pct parameter '{part}': expected d=DEPTH and k=STEPS")),
            }
        }
        Ok(SchedPolicy::Pct(p))
    }
}

impl Serialize for SchedPolicy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SchedPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where the scheduler decides (`--sched-points`). Every supervised run decides where a thread blocks (futex,
/// sched_yield, mediated calls) and where a new thread starts: enough for determinism, as one guest thread runs at a
/// time either way. Exploring interleavings (`repro race`, `repro hunt --vary schedule`) also needs the points
/// where another thread can see what one did: reads, writes and signals, which then cost a notification each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchedPoints {
    /// Blocking calls and thread starts only (the default; free for a single-threaded program).
    #[default]
    Blocking,
    /// Also before every `read`, `write`, `readv`, `writev`, `pread64`, `pwrite64`, `kill`, `tgkill` and `tkill`.
    Io,
}

/// The words `--sched-points` takes.
pub const SCHED_POINTS_EXPECTED: &str = "blocking or io";

impl SchedPoints {
    /// The name `--sched-points` takes and run.json records.
    pub fn name(self) -> &'static str {
        match self {
            SchedPoints::Blocking => "blocking",
            SchedPoints::Io => "io",
        }
    }

    /// Whether this is the default ([`SchedPoints::Blocking`]): not written in run.json or a pack.
    pub fn is_default(&self) -> bool {
        *self == SchedPoints::Blocking
    }

    /// Parses `--sched-points VALUE`; the error names the argument and what it takes.
    pub fn parse_arg(value: &str) -> Result<SchedPoints, String> {
        value.parse().map_err(|m: String| format!("--sched-points '{value}': {m}"))
    }
}

impl std::fmt::Display for SchedPoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SchedPoints {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "blocking" => Ok(SchedPoints::Blocking),
            "io" => Ok(SchedPoints::Io),
            _ => Err(format!("'{s}' is not a set of scheduling points: expected {SCHED_POINTS_EXPECTED}")),
        }
    }
}

impl Serialize for SchedPoints {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for SchedPoints {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The scheduler's policy, seed and decision points, as `settings.sched` in run.json. The seed is its own
/// (`--sched-seed`, default 0), not derived from `--seed`: the entropy stream and the interleaving vary
/// independently. `points` is written only when it is `io`: records and packs written before it existed, or
/// without it, read back as `blocking`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedSettings {
    #[serde(default)]
    pub policy: SchedPolicy,
    #[serde(default)]
    pub seed: u64,
    #[serde(default, skip_serializing_if = "SchedPoints::is_default")]
    pub points: SchedPoints,
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
    fn pct_takes_its_depth_and_steps_and_bad_ones_say_what_is_wrong() {
        let p = |s: &str| s.parse::<SchedPolicy>();
        assert_eq!(p("pct:d=3").unwrap(), SchedPolicy::PCT);
        assert_eq!(p("pct:d=2,k=50").unwrap(), SchedPolicy::Pct(PctParams { depth: 2, steps: 50 }));
        assert_eq!(p("pct:k=7,d=1").unwrap(), SchedPolicy::Pct(PctParams { depth: 1, steps: 7 }));
        let json = serde_json::to_string(&p("pct:d=5,k=100").unwrap()).unwrap();
        assert_eq!(json, "\"pct:d=5,k=100\"");
        assert_eq!(serde_json::from_str::<SchedPolicy>(&json).unwrap(), p("pct:d=5,k=100").unwrap());
        assert!(p("pct:d=0").unwrap_err().contains("d (the bug depth) must be 1 to 10, not 0"));
        assert!(p("pct:d=11").unwrap_err().contains("not 11"));
        assert!(p("pct:k=0").unwrap_err().contains("k (the estimated decisions in a run) must be 1"));
        assert!(p("pct:d=x").unwrap_err().contains("d= takes a whole number (the bug depth), not 'x'"));
        assert!(p("pct:d=2,d=3").unwrap_err().contains("given twice"));
        assert!(p("pct:depth=2").unwrap_err().contains("unknown pct parameter 'depth=2'"), "{:?}", p("pct:depth=2"));
        assert!(p("pct:").unwrap_err().contains("unknown pct parameter"));
        let e = serde_json::from_str::<SchedSettings>(r#"{"policy":"pct:d=99"}"#).unwrap_err();
        assert!(e.to_string().contains("not 99"), "{e}");
    }

    #[test]
    fn policies_are_written_in_kebab_case_and_parse_back() {
        for p in [SchedPolicy::Random, SchedPolicy::RoundRobin, SchedPolicy::PCT] {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.name()));
            assert_eq!(serde_json::from_str::<SchedPolicy>(&json).unwrap(), p);
            assert_eq!(p.name().parse::<SchedPolicy>().unwrap(), p);
        }
        assert!("fifo".parse::<SchedPolicy>().unwrap_err().contains("round-robin"));
        let s: SchedSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(s, SchedSettings { policy: SchedPolicy::Random, seed: 0, points: SchedPoints::Blocking });
    }

    #[test]
    fn points_default_to_blocking_are_written_only_when_io_and_bad_ones_name_the_argument() {
        let old: SchedSettings = serde_json::from_str(r#"{"policy":"pct","seed":4}"#).unwrap();
        assert_eq!(old.points, SchedPoints::Blocking, "a record from before --sched-points");
        assert_eq!(serde_json::to_string(&old).unwrap(), r#"{"policy":"pct","seed":4}"#);
        let io = SchedSettings { points: SchedPoints::Io, ..old };
        let json = serde_json::to_string(&io).unwrap();
        assert_eq!(json, r#"{"policy":"pct","seed":4,"points":"io"}"#);
        assert_eq!(serde_json::from_str::<SchedSettings>(&json).unwrap(), io);
        for p in [SchedPoints::Blocking, SchedPoints::Io] {
            assert_eq!(SchedPoints::parse_arg(p.name()).unwrap(), p);
        }
        assert_eq!(
            SchedPoints::parse_arg("all").unwrap_err(),
            "--sched-points 'all': 'all' is not a set of scheduling points: expected blocking or io"
        );
        let e = serde_json::from_str::<SchedSettings>(r#"{"points":"IO"}"#).unwrap_err();
        assert!(e.to_string().contains("'IO' is not a set of scheduling points"), "{e}");
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
