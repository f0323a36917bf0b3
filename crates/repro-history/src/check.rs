//! Runs a checker by its name ([`Checker`]); what each returns is [`crate::verdict`]'s.
use crate::verdict::{CheckResult, Checker};

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
