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
}
