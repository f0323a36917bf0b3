//! What every checker returns.
use serde::{Deserialize, Serialize};

use crate::counter::CounterDetails;
use crate::linear::LinearDetails;
use crate::set::SetDetails;

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

/// Runs one checker (`opts` is used by the linearizability checkers only).
pub fn check(
    checker: Checker,
    history: &crate::History,
    opts: &crate::LinearOptions,
) -> Result<CheckResult, crate::HistoryError> {
    match checker {
        Checker::LinearizableRegister => crate::linear::check_register(history, opts),
        Checker::LinearizableKv => crate::linear::check_kv(history, opts),
        Checker::Set => crate::set::check_set(history),
        Checker::Counter => crate::counter::check_counter(history),
    }
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
