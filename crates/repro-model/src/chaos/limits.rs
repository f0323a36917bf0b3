//! Bounds on what one experiment may ask of the harness, checked when it is loaded.
//!
//! An experiment is YAML that may come from anyone; `instances: 100000000` or `timeout: 99999999999h` must be
//! refused with a located error before anything is created, not discovered when the host runs out of inodes.
//! The limits are the runner's (flags of `repro chaos`), never the experiment's own: a file cannot raise them.
//!
//! The type lives here, beside the schema, because the schema's deserializers check durations and counts
//! against the limits of the running parse (so their errors carry the value's own line and column); the
//! loader in repro-chaos sets them with [`with_parse_limits`].
use std::cell::Cell;
use std::time::Duration;

use super::duration::format_duration;

/// A duration over [`Limits::duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} exceeds the limit of {} for a duration (raise it with --max-duration)",
    format_duration(*value),
    format_duration(*limit)
)]
pub struct DurationOverLimit {
    pub value: Duration,
    pub limit: Duration,
}

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

    pub fn check_duration(&self, d: Duration) -> Result<(), DurationOverLimit> {
        if d > self.duration {
            Err(DurationOverLimit { value: d, limit: self.duration })
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
pub fn with_parse_limits<T>(limits: &Limits, f: impl FnOnce() -> T) -> T {
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
pub fn parse_limits() -> Option<Limits> {
    PARSE_LIMITS.with(Cell::get)
}

/// A count (`instances`, `repeat: {times}`) checked against the limits of the running parse.
pub(crate) fn count_limited<'de, D: serde::Deserializer<'de>>(d: D, what: &str) -> Result<u32, D::Error> {
    let v = <u64 as serde::Deserialize>::deserialize(d)?;
    if let Some(l) = parse_limits() {
        let limit = if what == "instances" { l.instances } else { l.repeats };
        if v > limit {
            return Err(serde::de::Error::custom(Limits::exceeded(v, limit, what)));
        }
    }
    u32::try_from(v).map_err(|_| serde::de::Error::custom(format!("{v} is too large (at most {})", u32::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_seen_only_inside_the_parse_and_restored_after() {
        assert_eq!(parse_limits(), None);
        let outer = Limits { repeats: 7, ..Limits::default() };
        let inner = Limits { repeats: 9, ..Limits::default() };
        with_parse_limits(&outer, || {
            assert_eq!(parse_limits(), Some(outer));
            with_parse_limits(&inner, || assert_eq!(parse_limits(), Some(inner)));
            assert_eq!(parse_limits(), Some(outer));
        });
        assert_eq!(parse_limits(), None);
    }

    #[test]
    fn messages_name_the_flag() {
        let l = Limits::default();
        assert_eq!(
            l.check_duration(Duration::from_secs(25 * 3600)).unwrap_err().to_string(),
            "25h exceeds the limit of 24h for a duration (raise it with --max-duration)"
        );
        assert!(l.check_duration(Duration::from_secs(3600)).is_ok());
        assert_eq!(
            Limits::exceeded(65, 64, "parallel branches"),
            "65 exceeds the limit of 64 parallel branches (raise it with --max-parallel)"
        );
    }
}
