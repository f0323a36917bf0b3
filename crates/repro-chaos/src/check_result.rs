//! One check's result ([`CheckResult`], its [`Outcome`]), a leaf shared by the steady-state probes
//! ([`crate::steady`]) and the evaluation ([`crate::evaluate`], which re-exports both).
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Passed (with no expectation, or a flaky one).
    Ok,
    /// Failed with no expectation.
    Fail,
    /// Failed, as a known expectation says.
    Xfail,
    /// Passed although a known expectation says it fails: fails the run.
    Xpass,
    /// Failed, and a flaky expectation allows it.
    Flaky,
}

/// One check's result as recorded (preflight, adapter) or evaluated (workload, experiment).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResult {
    /// `preflight`, `workload`, `experiment` or `adapter`.
    pub scope: String,
    /// What the check lines show: `hello-0/exited-ok`, `experiment/recovered`.
    pub id: String,
    /// What expectations match: `hello/exited-ok`, `experiment/recovered`.
    pub key: String,
    pub passed: bool,
    #[serde(default)]
    pub details: Vec<String>,
    #[serde(default = "outcome_ok")]
    pub outcome: Outcome,
    #[serde(default)]
    pub issue: Option<String>,
    /// What a checker found, as data (a history check: its whole result, with the non-linearizable window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

fn outcome_ok() -> Outcome {
    Outcome::Ok
}

impl CheckResult {
    pub fn new(scope: &str, id: String, key: String, passed: bool, details: Vec<String>) -> Self {
        CheckResult {
            scope: scope.to_string(),
            id,
            key,
            passed,
            details,
            outcome: if passed { Outcome::Ok } else { Outcome::Fail },
            issue: None,
            data: None,
        }
    }

    /// The check line: `ok    hello-0/exited-ok`, then indented details for anything not ok.
    pub fn lines(&self) -> Vec<String> {
        let (tag, suffix) = match (self.outcome, &self.issue) {
            (Outcome::Ok, Some(i)) => ("ok   ", format!(" (flaky: {i})")),
            (Outcome::Ok, None) => ("ok   ", String::new()),
            (Outcome::Fail, _) => ("FAIL ", String::new()),
            (Outcome::Xfail, i) => ("xfail", format!(" (known: {})", i.as_deref().unwrap_or(""))),
            (Outcome::Xpass, i) => ("XPASS", format!(" (known: {})", i.as_deref().unwrap_or(""))),
            (Outcome::Flaky, i) => ("flaky", format!(" (flaky: {})", i.as_deref().unwrap_or(""))),
        };
        let mut out = vec![format!("  {tag} {}{suffix}", self.id)];
        if self.outcome != Outcome::Ok || !self.passed {
            for d in &self.details {
                out.push(format!("          {d}"));
            }
        } else {
            // A passing check may still warn (an image referred to by a tag only).
            for d in self.details.iter().filter(|d| d.starts_with("warning:")) {
                out.push(format!("          {d}"));
            }
        }
        if self.outcome == Outcome::Xpass {
            out.push("          passed although expected to fail: update the expectation".into());
        }
        out
    }
}

/// The last `n` non-empty lines of `text` (a failing check's details).
pub(crate) fn tail(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].iter().map(|l| l.to_string()).collect()
}
