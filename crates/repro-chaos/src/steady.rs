//! The steady-state hypothesis (Chaos Toolkit's idea): probes run before the flow and after it. A probe that
//! is out of tolerance before means the system was not steady to begin with — the run is ERROR, the flow does
//! not run, nothing is said about the fault; out of tolerance after, it is a failing check
//! (`steady-state/<probe>`), covered by expectations like any other. Both phases are recorded in
//! `system/steady-state.json` and as `steady-state.probed` events.
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::check_result::{tail, CheckResult};
use crate::model::{Probe, Tolerance};

/// Where both phases are recorded.
pub const STEADY_FILE: &str = "system/steady-state.json";

/// A probe's default timeout.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// What is wrong with a probe's `tolerance:` (the loader puts it at the field's line and column).
#[derive(Debug, thiserror::Error)]
pub enum ToleranceError {
    #[error("expected exactly one of range: [lo, hi], equals: TEXT or regex: PATTERN")]
    NotOneKind,
    #[error("range: expected [lo, hi] with finite lo <= hi, got [{lo}, {hi}]")]
    Range { lo: f64, hi: f64 },
    #[error("regex: at most 4096 characters")]
    RegexTooLong,
    #[error("regex: {0}")]
    Regex(regex::Error),
}

/// Why a probe's result is not within tolerance.
#[derive(Debug, thiserror::Error)]
pub enum OutOfTolerance {
    /// The probe's command failed (`how`: its exit code, signal or timeout).
    #[error("the probe did not succeed: {how}")]
    Failed { how: String },
    #[error("expected a number in [{lo}, {hi}], got {output:?}")]
    NotANumber { lo: f64, hi: f64, output: String },
    #[error("{value} is outside [{lo}, {hi}]")]
    OutsideRange { value: f64, lo: f64, hi: f64 },
    #[error("expected {expected:?}, got {output:?}")]
    NotEqual { expected: String, output: String },
    #[error("regex: {0}")]
    Regex(regex::Error),
    #[error("{output:?} does not match /{pattern}/")]
    NoMatch { output: String, pattern: String },
}

/// Exactly one kind, a range with lo <= hi, a regex that compiles.
pub fn check_tolerance(t: &Tolerance) -> Result<(), ToleranceError> {
    let n = usize::from(t.range.is_some()) + usize::from(t.equals.is_some()) + usize::from(t.regex.is_some());
    if n != 1 {
        return Err(ToleranceError::NotOneKind);
    }
    if let Some([lo, hi]) = t.range {
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return Err(ToleranceError::Range { lo, hi });
        }
    }
    if let Some(r) = &t.regex {
        if r.len() > 4096 {
            return Err(ToleranceError::RegexTooLong);
        }
        regex::Regex::new(r).map_err(ToleranceError::Regex)?;
    }
    Ok(())
}

/// Whether a probe's result is within tolerance: Ok, or what was wrong.
pub fn judge(tolerance: Option<&Tolerance>, ok: bool, how: &str, output: &str) -> Result<(), OutOfTolerance> {
    if !ok {
        return Err(OutOfTolerance::Failed { how: how.to_string() });
    }
    let Some(t) = tolerance else { return Ok(()) };
    let out = output.trim();
    if let Some([lo, hi]) = t.range {
        let v: f64 = out.lines().last().unwrap_or("").trim().parse().map_err(|_| OutOfTolerance::NotANumber {
            lo,
            hi,
            output: out.to_string(),
        })?;
        if v < lo || v > hi {
            return Err(OutOfTolerance::OutsideRange { value: v, lo, hi });
        }
    }
    if let Some(e) = &t.equals {
        if out != e.trim() {
            return Err(OutOfTolerance::NotEqual { expected: e.clone(), output: out.to_string() });
        }
    }
    if let Some(r) = &t.regex {
        let re = regex::Regex::new(r).map_err(OutOfTolerance::Regex)?;
        if !re.is_match(out) {
            return Err(OutOfTolerance::NoMatch { output: out.to_string(), pattern: r.clone() });
        }
    }
    Ok(())
}

/// One probe's result in one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Probed {
    /// `before` or `after`.
    pub phase: String,
    pub result: CheckResult,
}

/// Runs one probe (cwd = the run directory) and judges it.
pub fn run_probe(
    p: &Probe,
    phase: &str,
    env: &std::collections::BTreeMap<String, String>,
    run_dir: &Path,
    cancel: Option<&crate::proc::Cancel>,
) -> Probed {
    let timeout = p.timeout.map_or(PROBE_TIMEOUT, |d| d.0);
    let id = format!("steady-state/{}", p.name.value);
    let (passed, details) = match crate::proc::run_hook(&p.run, env, run_dir, timeout, cancel) {
        Ok(o) => match judge(p.tolerance.as_ref().map(|t| &t.value), o.ok(), &o.describe(), &o.output) {
            Ok(()) => (true, vec![]),
            Err(why) => {
                let mut d = vec![format!("{phase}: {why}")];
                d.extend(tail(&o.output, 5));
                (false, d)
            }
        },
        Err(e) => (false, vec![format!("{phase}: the probe could not run: {e}")]),
    };
    Probed { phase: phase.to_string(), result: CheckResult::new("steady-state", id.clone(), id, passed, details) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(range: Option<[f64; 2]>, equals: Option<&str>, regex: Option<&str>) -> Tolerance {
        Tolerance { range, equals: equals.map(str::to_string), regex: regex.map(str::to_string) }
    }

    #[test]
    fn tolerances_judge_exit_codes_numbers_text_and_patterns() {
        assert!(judge(None, true, "exit code 0", "anything").is_ok());
        assert_eq!(
            judge(None, false, "exit code 3", "").unwrap_err().to_string(),
            "the probe did not succeed: exit code 3"
        );
        let r = t(Some([0.0, 10.0]), None, None);
        assert!(judge(Some(&r), true, "", "warming up\n 7.5 \n").is_ok(), "the last line is the value");
        assert_eq!(judge(Some(&r), true, "", "11").unwrap_err().to_string(), "11 is outside [0, 10]");
        assert!(judge(Some(&r), true, "", "n/a").unwrap_err().to_string().starts_with("expected a number in [0, 10]"));
        assert!(judge(Some(&t(None, Some("PONG"), None)), true, "", "PONG\n").is_ok());
        assert!(judge(Some(&t(None, Some("PONG"), None)), true, "", "LOADING").is_err());
        assert!(judge(Some(&t(None, None, Some("^role:master"))), true, "", "role:master\nx").is_ok());
        assert!(judge(Some(&t(None, None, Some("^role:master$"))), true, "", "role:slave").is_err());
    }

    #[test]
    fn a_tolerance_is_exactly_one_well_formed_kind() {
        assert!(check_tolerance(&t(None, None, None)).is_err());
        assert!(check_tolerance(&t(Some([1.0, 2.0]), Some("x"), None)).is_err());
        assert!(check_tolerance(&t(Some([3.0, 2.0]), None, None)).unwrap_err().to_string().contains("lo <= hi"));
        assert!(check_tolerance(&t(Some([f64::NAN, 2.0]), None, None)).is_err());
        assert!(check_tolerance(&t(None, None, Some("(unclosed"))).unwrap_err().to_string().starts_with("regex:"));
        assert!(check_tolerance(&t(None, Some("ok"), None)).is_ok());
    }
}
