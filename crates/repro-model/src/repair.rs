//! The plain types of `repro repair`'s anti-weakening gates (computed by `repro-repair`, written into the repair
//! loop's JSON summary): test counts read from a runner's output, per-test outcomes, the gates' results and their
//! configuration. See docs/repair-gates.md.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Test counts read from a test runner's own output (its summary line, or a JUnit XML document).
///
/// `collected` is every test the runner knew of for this run, whatever became of it; `skipped` includes tests
/// deselected by configuration (pytest's `deselected`) and ignored ones (cargo's `ignored`); `xfailed` holds
/// expected failures and to-do tests (pytest's `xfailed`, node's `todo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestCounts {
    pub collected: u64,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
    pub xfailed: u64,
    pub errors: u64,
    /// The runners whose output gave these counts (`pytest`, `cargo-test`, `nextest`, `go-test`, `node-test`,
    /// `junit`), sorted, without repeats.
    #[serde(default)]
    pub runners: Vec<String>,
}

impl TestCounts {
    /// Tests that did not run as themselves: skipped plus expected failures.
    pub fn not_run(&self) -> u64 {
        self.skipped.saturating_add(self.xfailed)
    }

    /// Adds `other` to `self` (saturating), merging the runner lists.
    pub fn add(&mut self, other: &TestCounts) {
        self.collected = self.collected.saturating_add(other.collected);
        self.passed = self.passed.saturating_add(other.passed);
        self.failed = self.failed.saturating_add(other.failed);
        self.skipped = self.skipped.saturating_add(other.skipped);
        self.xfailed = self.xfailed.saturating_add(other.xfailed);
        self.errors = self.errors.saturating_add(other.errors);
        self.runners.extend(other.runners.iter().cloned());
        self.runners.sort();
        self.runners.dedup();
    }
}

impl fmt::Display for TestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} collected, {} passed, {} failed, {} skipped, {} xfailed, {} errors",
            self.collected, self.passed, self.failed, self.skipped, self.xfailed, self.errors
        )?;
        if !self.runners.is_empty() {
            write!(f, " ({})", self.runners.join(", "))?;
        }
        Ok(())
    }
}

/// What became of one test in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestStatus {
    Passed,
    Failed,
    Skipped,
    /// An expected failure or a to-do test.
    Xfailed,
    Error,
}

impl fmt::Display for TestStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TestStatus::Passed => "passed",
            TestStatus::Failed => "failed",
            TestStatus::Skipped => "skipped",
            TestStatus::Xfailed => "xfailed",
            TestStatus::Error => "error",
        })
    }
}

/// One test's result as a runner printed it: its id in the runner's own spelling (the one the failure signature
/// uses: `tests/test_a.py::test_b`, `module::tests::name`, `TestName/sub`, `classname.name` for JUnit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestOutcome {
    pub id: String,
    pub status: TestStatus,
    pub runner: String,
}

/// The anti-weakening gates, by their stable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateName {
    /// A protected path (tests, CI configuration, the contract) was added, removed or changed.
    ProtectedPathChanged,
    /// Fewer tests were collected than in the baseline run (or the candidate's cannot be counted).
    TestsCollectedFell,
    /// Fewer tests passed than in the baseline run (or the candidate's cannot be counted).
    TestsPassedFell,
    /// More tests were skipped or expected to fail than in the baseline run (or the candidate's cannot be
    /// counted).
    TestsSkippedRose,
    /// An added line holds a masking construct (`|| true`, `@pytest.mark.skip`, `#[ignore]`, a timeout raised
    /// tenfold, ...).
    MaskingConstruct,
    /// A failing test of the pack's signature did not run and pass in the candidate's run.
    FailingTestMissing,
    /// The diff is larger than its budget of lines.
    DiffTooLarge,
}

impl GateName {
    /// Every gate, in the order they are reported.
    pub const ALL: [GateName; 7] = [
        GateName::ProtectedPathChanged,
        GateName::TestsCollectedFell,
        GateName::TestsPassedFell,
        GateName::TestsSkippedRose,
        GateName::MaskingConstruct,
        GateName::FailingTestMissing,
        GateName::DiffTooLarge,
    ];

    /// The stable kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            GateName::ProtectedPathChanged => "protected-path-changed",
            GateName::TestsCollectedFell => "tests-collected-fell",
            GateName::TestsPassedFell => "tests-passed-fell",
            GateName::TestsSkippedRose => "tests-skipped-rose",
            GateName::MaskingConstruct => "masking-construct",
            GateName::FailingTestMissing => "failing-test-missing",
            GateName::DiffTooLarge => "diff-too-large",
        }
    }
}

impl fmt::Display for GateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One gate's verdict on a candidate change. `details` says why it fired, or, when it did not, what it could not
/// check (a gate disabled by configuration, a baseline without a test summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateResult {
    pub name: GateName,
    pub fired: bool,
    #[serde(default)]
    pub details: Vec<String>,
    /// Whether the gate could judge this change at all: false when what it reads is not there (no test summary
    /// on either side, no per-test results, no failing test named), or it was disabled. A gate that does not
    /// apply never fires; `details` says why it did not apply.
    #[serde(default = "default_true")]
    pub applicable: bool,
}

impl GateResult {
    /// A gate that could not judge the change, and why.
    pub fn not_applicable(name: GateName, why: impl Into<String>) -> GateResult {
        GateResult { name, fired: false, details: vec![why.into()], applicable: false }
    }
}

/// An added line that matched a masking pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaskingHit {
    /// The pattern's id (`python-pytest-skip`, ...).
    pub pattern: String,
    /// The file, relative to the working tree.
    pub path: String,
    /// The added line's number in the candidate's file (1-based).
    pub line: u64,
    /// The added line, trimmed.
    pub text: String,
}

/// Size of a candidate's change against the baseline tree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffStats {
    pub files_added: u64,
    pub files_removed: u64,
    pub files_modified: u64,
    pub lines_added: u64,
    pub lines_removed: u64,
    /// Changed files that are not text (noted, not diffed).
    #[serde(default)]
    pub binary_files: Vec<String>,
    /// Changed text files too large to diff.
    #[serde(default)]
    pub undiffed_files: Vec<String>,
}

/// The default budget of the `diff-too-large` gate, in changed lines (added plus removed).
pub const DEFAULT_MAX_DIFF_LINES: u64 = 400;

/// The gates' configuration (the `[repair.gates]` a project may set, or the loop's options).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// Globs added to the default protected paths.
    #[serde(default)]
    pub protected_add: Vec<String>,
    /// Default protected globs to drop (spelled exactly as in the default list).
    #[serde(default)]
    pub protected_remove: Vec<String>,
    /// A TOML file of masking patterns merged over the defaults (an entry with the same id replaces one).
    #[serde(default)]
    pub masking_file: Option<PathBuf>,
    /// The `diff-too-large` budget: lines added plus removed.
    #[serde(default = "default_max_diff_lines")]
    pub max_diff_lines: u64,
    /// Whether a run whose output holds no test summary, in the baseline as in the candidate, makes the counts
    /// gates fire (true) or do not apply (false, the default: they are reported not applicable, and why).
    #[serde(default)]
    pub require_counts: bool,
    /// Gates not evaluated: each is still reported, unfired, with the detail that it was disabled.
    #[serde(default)]
    pub disabled: Vec<GateName>,
}

fn default_max_diff_lines() -> u64 {
    DEFAULT_MAX_DIFF_LINES
}

fn default_true() -> bool {
    true
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            protected_add: Vec::new(),
            protected_remove: Vec::new(),
            masking_file: None,
            max_diff_lines: DEFAULT_MAX_DIFF_LINES,
            require_counts: false,
            disabled: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_names_are_kebab_case_and_round_trip() {
        for g in GateName::ALL {
            let v = serde_json::to_value(g).unwrap();
            assert_eq!(v, g.as_str());
            assert_eq!(serde_json::from_value::<GateName>(v).unwrap(), g);
        }
        assert!(serde_json::from_str::<GateName>("\"no-such-gate\"").is_err());
    }

    #[test]
    fn config_defaults_and_unknown_fields() {
        let c: GateConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(c, GateConfig::default());
        assert!(!c.require_counts);
        assert_eq!(c.max_diff_lines, DEFAULT_MAX_DIFF_LINES);
        let c: GateConfig = toml::from_str("max_diff_lines = 10\ndisabled = [\"diff-too-large\"]\n").unwrap();
        assert_eq!((c.max_diff_lines, c.disabled), (10, vec![GateName::DiffTooLarge]));
        assert!(serde_json::from_str::<GateConfig>(r#"{"max_diff_line": 3}"#).is_err());
    }

    #[test]
    fn counts_add_and_display() {
        let mut a =
            TestCounts { collected: 3, passed: 2, failed: 1, runners: vec!["pytest".into()], ..Default::default() };
        let b =
            TestCounts { collected: 1, skipped: 1, xfailed: 2, runners: vec!["pytest".into()], ..Default::default() };
        a.add(&b);
        assert_eq!((a.collected, a.not_run(), a.runners.len()), (4, 3, 1));
        assert_eq!(a.to_string(), "4 collected, 2 passed, 1 failed, 1 skipped, 2 xfailed, 0 errors (pytest)");
        let mut m = TestCounts { passed: u64::MAX, ..Default::default() };
        m.add(&TestCounts { passed: 1, ..Default::default() });
        assert_eq!(m.passed, u64::MAX);
    }
}
