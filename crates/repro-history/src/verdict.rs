//! What every checker returns: the verdict, and each checker's own findings.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::history::Op;

/// A checker's verdict: `"valid"`, `"invalid"` or `"unknown"` (the search hit its limit, or the history holds
/// too little to decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    Valid,
    Invalid,
    Unknown,
}

/// The result of one checker over one history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Which checker: `linearizable-register`, `linearizable-kv`, `set` or `counter`.
    pub checker: Checker,
    pub valid: Validity,
    /// One line for a human.
    pub summary: String,
    pub details: Details,
}

/// The checker's own findings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Details {
    Linearizable(LinearDetails),
    Set(SetDetails),
    Counter(CounterDetails),
}

/// The checkers, by the name a configuration would give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Checker {
    /// One register: `read`, `write`, `cas` (keys ignored).
    LinearizableRegister,
    /// A map of independent registers, one per `key`.
    LinearizableKv,
    /// A grow-only set: `add`, `read` (the whole set).
    Set,
    /// A counter: `add`/`incr` (non-negative deltas), `read`.
    Counter,
}

impl Checker {
    pub const ALL: [Checker; 4] =
        [Checker::LinearizableRegister, Checker::LinearizableKv, Checker::Set, Checker::Counter];

    /// The name in [`CheckResult::checker`] and configurations.
    pub fn name(self) -> &'static str {
        match self {
            Checker::LinearizableRegister => "linearizable-register",
            Checker::LinearizableKv => "linearizable-kv",
            Checker::Set => "set",
            Checker::Counter => "counter",
        }
    }

    /// The checker of a name, if there is one.
    pub fn from_name(name: &str) -> Option<Checker> {
        Checker::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Which model was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinearModel {
    Register,
    Kv,
}

/// What a linearizability check found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinearDetails {
    pub model: LinearModel,
    /// Operations searched (all keys).
    pub ops: usize,
    /// Operations dropped: `fail`ed ones, reads that did not complete `ok`, and `info` writes and cas whose value
    /// no read returns and no cas expects (they cannot matter).
    pub dropped: usize,
    /// Keys checked (1 for a register).
    pub keys: usize,
    /// Search steps used (without the window's).
    pub steps: u64,
    /// The key found not linearizable (a map only; the first in key order).
    pub key: Option<String>,
    /// Keys whose search hit a bound (a map; for a register, `[""]` when it did).
    pub unknown_keys: Vec<String>,
    /// A small non-linearizable part of the history, when one was found.
    pub window: Option<Window>,
}

/// A small set of operations that is not linearizable by itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// The operations, in call order.
    pub ops: Vec<Op>,
    /// The earliest call of the window.
    pub start: u64,
    /// The latest return (or call, for an operation that never returned) of the window.
    pub end: u64,
    /// The operation that could not be linearized (see the module documentation: the first non-linearizable cut
    /// of the history). It is in `ops`.
    pub failing: Op,
    /// From which initial values the window is not linearizable.
    pub initial: WindowInitial,
    /// No single operation can be dropped from `ops` with the window staying non-linearizable (false: the
    /// shrinking budget ran out first).
    pub minimal: bool,
}

/// The initial register values a [`Window`] is not linearizable from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowInitial {
    /// From no initial value at all.
    Any,
    /// From this one (the check's initial value): the anomaly involves it.
    Given(Value),
}

/// What the set checker found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetDetails {
    /// Distinct elements of all adds.
    pub attempted: usize,
    /// Distinct elements of `ok` adds.
    pub acknowledged: usize,
    /// The final read's line (its completion's), if there was an `ok` read.
    pub final_read_line: Option<usize>,
    /// Distinct elements in the final read.
    pub final_read_size: usize,
    /// Acknowledged before the final read began, missing from it.
    pub lost_count: usize,
    /// The first lost elements (in the order of their adds), at most [`crate::set::SHOWN`].
    pub lost: Vec<Value>,
    /// Elements of `ok` reads that no add attempted.
    pub unexpected_count: usize,
    pub unexpected: Vec<Value>,
    /// Elements of `info` or `fail` adds (never acknowledged) present in the final read.
    pub recovered_count: usize,
    /// Of those, the elements whose adds all `fail`ed.
    pub recovered_failed_count: usize,
    /// Acknowledged adds still running when the final read began and missing from it (not lost).
    pub concurrent_missing_count: usize,
}

/// What the counter checker found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterDetails {
    /// Adds counted (`ok` and `info`).
    pub adds: usize,
    /// `ok` reads checked.
    pub reads: usize,
    /// Reads out of their bounds.
    pub bad_reads: usize,
    /// The first read out of its bounds (in completion order).
    pub first_bad: Option<CounterRead>,
}

/// A read with its bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterRead {
    pub op: Op,
    /// The value read.
    pub value: Value,
    /// The sum of the `ok` adds completed before the read's invoke (at most `u64::MAX` here; compared exactly).
    pub lower: u64,
    /// The sum of the `ok` and `info` adds invoked before the read's completion (at most `u64::MAX` here).
    pub upper: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Checker::ALL {
            assert_eq!(Checker::from_name(c.name()), Some(c));
            assert_eq!(serde_json::to_value(c).unwrap(), serde_json::json!(c.name()));
        }
        assert_eq!(serde_json::to_value(Validity::Unknown).unwrap(), serde_json::json!("unknown"));
    }
}
