//! Bounds on what one experiment may ask of the harness, checked when it is loaded.
//!
//! An experiment is YAML that may come from anyone; `instances: 100000000` or `timeout: 99999999999h` must be
//! refused with a located error before anything is created, not discovered when the host runs out of inodes.
//! The limits are the runner's (flags of `repro chaos`), never the experiment's own: a file cannot raise them.
use std::cell::Cell;
use std::time::Duration;

use crate::model::format_duration;

/// What one experiment may ask for. `Default` gives the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Instances of one workload, and of all workloads together (each gets a directory when it starts).
    pub instances: u64,
    /// `times` of one `repeat`.
    pub repeats: u64,
    /// Flow branches that may run at the same time (`parallel` children, nested ones multiplied out).
    pub parallel: u64,
    /// Flow steps one run may execute: every operation run and every instance start, with `repeat: {times}`
    /// multiplied out; also enforced while the flow runs (a `repeat: {for}` counts its real iterations).
    pub steps: u64,
    /// Check runs: each workload check once per instance, plus experiment checks and preflight checks.
    pub checks: u64,
    /// Any duration in an experiment or an adapter (timeouts, delays, `repeat: {for}`, intervals).
    pub duration: Duration,
    /// Size of an experiment or adapter file, in bytes.
    pub file_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            instances: 1000,
            repeats: 10_000,
            parallel: 64,
            steps: 100_000,
            checks: 10_000,
            duration: Duration::from_secs(24 * 3600),
            file_bytes: 1 << 20,
        }
    }
}

impl Limits {
    /// The flag that raises the limit called `what` (used in error messages).
    pub fn flag(what: &str) -> &'static str {
        match what {
            "instances" => "--max-instances",
            "repeats" => "--max-repeats",
            "parallel branches" => "--max-parallel",
            "steps" => "--max-steps",
            "check runs" => "--max-checks",
            "duration" => "--max-duration",
            _ => "--max-file-size",
        }
    }

    /// `N exceeds the limit of M <what> (raise it with --max-...)`.
    pub fn exceeded(value: impl std::fmt::Display, limit: impl std::fmt::Display, what: &str) -> String {
        format!("{value} exceeds the limit of {limit} {what} (raise it with {})", Limits::flag(what))
    }

    pub fn check_duration(&self, d: Duration) -> Result<(), String> {
        if d > self.duration {
            Err(format!(
                "{} exceeds the limit of {} for a duration (raise it with --max-duration)",
                format_duration(d),
                format_duration(self.duration)
            ))
        } else {
            Ok(())
        }
    }
}

thread_local! {
    /// The limits of the parse running on this thread (set by `load`), read by the deserializers of durations,
    /// counts and instances so their errors carry the value's own line and column.
    static PARSE_LIMITS: Cell<Option<Limits>> = const { Cell::new(None) };
}

/// Runs `f` with `limits` visible to the deserializers on this thread.
pub(crate) fn with_parse_limits<T>(limits: &Limits, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Limits>);
    impl Drop for Reset {
        fn drop(&mut self) {
            PARSE_LIMITS.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(PARSE_LIMITS.with(|c| c.replace(Some(*limits))));
    f()
}

/// The limits of the current parse, if one is running.
pub(crate) fn parse_limits() -> Option<Limits> {
    PARSE_LIMITS.with(Cell::get)
}
