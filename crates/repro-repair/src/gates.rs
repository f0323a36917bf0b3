//! The gates: given the baseline and candidate trees' diff, both runs' test counts, the failing tests of the
//! pack's signature and the candidate run's output, each gate says whether it fired, and why.

use std::collections::HashSet;
use std::path::Path;

use repro_model::repair::{GateConfig, GateName, GateResult, TestCounts, TestOutcome, TestStatus};

use crate::counts;
use crate::glob::GlobList;
use crate::masking::MaskingSet;
use crate::tree::{ChangeKind, DiffLine, FileDiffKind, LineTag, TreeDiff};
use crate::{RepairError, Result};

/// The protected paths by default: tests, test data, test runner and CI configuration, the contract.
pub const DEFAULT_PROTECTED: &[&str] = &[
    "tests/**",
    "test/**",
    "**/tests/**",
    "**/test/**",
    "**/__tests__/**",
    "**/testdata/**",
    "**/*_test.go",
    "**/test_*.py",
    "**/*_test.py",
    "**/conftest.py",
    "**/*.test.js",
    "**/*.spec.js",
    "**/*.test.mjs",
    "**/*.spec.mjs",
    "**/*.test.cjs",
    "**/*.test.ts",
    "**/*.spec.ts",
    "**/*.test.tsx",
    "**/*.spec.tsx",
    "t/**",
    "**/*.t",
    ".github/**",
    ".gitlab-ci.yml",
    ".gitlab/**",
    ".circleci/**",
    ".travis.yml",
    "azure-pipelines.yml",
    "Jenkinsfile",
    ".ci/**",
    "repro.toml",
    "pytest.ini",
    "tox.ini",
    "noxfile.py",
    ".config/nextest.toml",
    "jest.config.*",
    "vitest.config.*",
    ".mocharc*",
];

/// At most this many details per gate; the rest are counted in a last line.
pub const MAX_DETAILS: usize = 50;

/// The candidate run's output, as the loop captured it.
#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The JUnit XML documents the run wrote.
    pub junit: Vec<Vec<u8>>,
    /// Other files the run's test harness wrote its results in (automake's `*.trs` and `test-suite.log`, ctest's
    /// `Testing/Temporary/LastTest.log`): [`crate::reports`].
    pub reports: Vec<ReportFile>,
}

/// A file a test harness wrote its results in: its path relative to the run's working directory, its text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportFile {
    pub path: String,
    pub text: Vec<u8>,
}

impl RunOutput {
    /// [`counts::count_run`] of this output, else the counts of its harness files ([`crate::reports::counts`]).
    pub fn counts(&self) -> Option<TestCounts> {
        let junit: Vec<&[u8]> = self.junit.iter().map(Vec::as_slice).collect();
        counts::count_run(&self.stdout, &self.stderr, &junit).or_else(|| crate::reports::counts(&self.reports))
    }

    /// Every per-test outcome of the JUnit documents and the harness files, then those of the console that none
    /// of them already gives (by any spelling of its id): what the runner wrote as its results is preferred over
    /// lines read from its console.
    pub fn outcomes(&self) -> Vec<TestOutcome> {
        let mut v = Vec::new();
        for doc in &self.junit {
            v.extend(counts::outcomes_in_junit(&String::from_utf8_lossy(doc)).unwrap_or_default());
        }
        for o in crate::reports::outcomes(&self.reports) {
            let seen: HashSet<String> = v.iter().flat_map(|o| spellings(&o.id)).collect();
            if !spellings(&o.id).iter().any(|s| seen.contains(s)) {
                v.push(o);
            }
        }
        let seen: HashSet<String> = v.iter().flat_map(|o| spellings(&o.id)).collect();
        for t in [&self.stdout, &self.stderr] {
            let console = counts::outcomes_in_output(&String::from_utf8_lossy(t));
            v.extend(console.into_iter().filter(|o| !spellings(&o.id).iter().any(|s| seen.contains(s))));
        }
        v
    }

    fn text(&self) -> String {
        format!("{}\n{}", String::from_utf8_lossy(&self.stdout), String::from_utf8_lossy(&self.stderr))
    }
}

/// What the gates look at.
#[derive(Debug, Clone, Copy)]
pub struct GateInput<'a> {
    /// The candidate tree against the baseline ([`crate::tree::diff`]).
    pub diff: &'a TreeDiff,
    /// The baseline run's counts (the pack's failing run), `None` when its output had no test summary.
    pub baseline_counts: Option<&'a TestCounts>,
    /// The candidate run's counts, `None` when its output had no test summary.
    pub candidate_counts: Option<&'a TestCounts>,
    /// The failing test ids of the pack's signature.
    pub failing_tests: &'a [String],
    /// The candidate run's output, for the failing tests' outcomes.
    pub candidate: &'a RunOutput,
}

/// The gates, configured.
#[derive(Debug, Clone)]
pub struct GateSet {
    protected: GlobList,
    masking: MaskingSet,
    max_diff_lines: u64,
    require_counts: bool,
    disabled: Vec<GateName>,
}

impl GateSet {
    /// The gates of `config`: the default protected globs with `protected_add` added and `protected_remove`
    /// dropped (a glob to drop that is not a default is an error: it would drop nothing), the default masking
    /// patterns with `masking_file` merged over them.
    pub fn new(config: &GateConfig) -> Result<GateSet> {
        let masking = match &config.masking_file {
            Some(p) => MaskingSet::with_user_file(p)?,
            None => MaskingSet::defaults()?,
        };
        GateSet::with_masking(config, masking)
    }

    /// As [`GateSet::new`], with the masking patterns given.
    pub fn with_masking(config: &GateConfig, masking: MaskingSet) -> Result<GateSet> {
        for r in &config.protected_remove {
            if !DEFAULT_PROTECTED.contains(&r.as_str()) {
                return Err(RepairError::BadGlob {
                    glob: r.clone(),
                    reason: "protected_remove names a glob that is not a default (see DEFAULT_PROTECTED)".into(),
                });
            }
        }
        let mut globs: Vec<String> = DEFAULT_PROTECTED
            .iter()
            .filter(|g| !config.protected_remove.iter().any(|r| r == *g))
            .map(|g| g.to_string())
            .collect();
        globs.extend(config.protected_add.iter().cloned());
        let protected = GlobList::new(&globs).map_err(|(glob, reason)| RepairError::BadGlob { glob, reason })?;
        Ok(GateSet {
            protected,
            masking,
            max_diff_lines: config.max_diff_lines,
            require_counts: config.require_counts,
            disabled: config.disabled.clone(),
        })
    }

    pub fn masking(&self) -> &MaskingSet {
        &self.masking
    }

    /// Every gate's result, in [`GateName::ALL`]'s order.
    pub fn evaluate(&self, input: &GateInput<'_>) -> Vec<GateResult> {
        GateName::ALL
            .iter()
            .map(|&name| {
                if self.disabled.contains(&name) {
                    return GateResult::not_applicable(name, "disabled by configuration");
                }
                let applies = |(fired, details): (bool, Vec<String>)| (fired, details, true);
                let (fired, details, applicable) = match name {
                    GateName::ProtectedPathChanged => applies(self.protected_paths(input)),
                    GateName::TestsCollectedFell => self.counts_gate(input, name),
                    GateName::TestsPassedFell => self.counts_gate(input, name),
                    GateName::TestsSkippedRose => self.counts_gate(input, name),
                    GateName::MaskingConstruct => applies(self.masking_gate(input)),
                    GateName::FailingTestMissing => failing_tests(input),
                    GateName::DiffTooLarge => applies(self.diff_size(input)),
                };
                GateResult { name, fired, details: cap(details), applicable }
            })
            .collect()
    }

    fn protected_paths(&self, input: &GateInput<'_>) -> (bool, Vec<String>) {
        let mut d = Vec::new();
        for (path, kind) in input.diff.change.all() {
            let p = path.to_string_lossy();
            if let Some(g) = self.protected.first_match(&p) {
                d.push(format!("{p}: {kind} (protected by {})", g.as_str()));
            }
        }
        (!d.is_empty(), d)
    }

    /// `(fired, details, applicable)`. Not applicable when neither run has a test summary (unless
    /// `require_counts`), or only the candidate's has one (nothing to compare with). A candidate without a summary
    /// when the baseline had one fires: its runner was silenced or did not run.
    fn counts_gate(&self, input: &GateInput<'_>, name: GateName) -> (bool, Vec<String>, bool) {
        let hint = || counts::missing_summary_hint(&input.candidate.text()).map(|h| format!("({h})"));
        let (base, cand) = match (input.baseline_counts, input.candidate_counts) {
            (None, None) if !self.require_counts => {
                let mut d = vec!["not applicable: neither the baseline's nor the candidate's output has a test summary repro can read".to_string()];
                d.extend(hint());
                return (false, d, false);
            }
            (b, None) => {
                let mut d = match b {
                    Some(b) => vec![format!(
                        "no test summary found in the candidate's output, while the baseline's had one ({b}): its runner was silenced or did not run"
                    )],
                    None => vec![
                        "no test summary found in the candidate's output: its tests cannot be counted".to_string(),
                        "nor in the baseline's (require_counts = true)".to_string(),
                    ],
                };
                d.extend(hint());
                return (true, d, true);
            }
            (None, Some(c)) => {
                return (
                    false,
                    vec![format!(
                        "not applicable: the baseline's output has no test summary to compare with (candidate: {c})"
                    )],
                    false,
                );
            }
            (Some(b), Some(c)) => (b, c),
        };
        let (label, was, now, fired) = match name {
            GateName::TestsCollectedFell => {
                ("collected", base.collected, cand.collected, cand.collected < base.collected)
            }
            GateName::TestsPassedFell => ("passed", base.passed, cand.passed, cand.passed < base.passed),
            _ => ("skipped + xfailed", base.not_run(), cand.not_run(), cand.not_run() > base.not_run()),
        };
        let mut d = Vec::new();
        if fired {
            d.push(format!("{label}: {was} in the baseline, {now} in the candidate"));
        }
        if base.runners != cand.runners {
            d.push(format!(
                "counted from different runners: baseline [{}], candidate [{}]",
                base.runners.join(", "),
                cand.runners.join(", ")
            ));
        }
        (fired, d, true)
    }

    fn masking_gate(&self, input: &GateInput<'_>) -> (bool, Vec<String>) {
        let hits = self.masking.scan(input.diff);
        let mut d: Vec<String> =
            hits.iter().map(|h| format!("{}: {}:{}: {}", h.pattern, h.path, h.line, h.text)).collect();
        let fired = !d.is_empty();
        for f in &input.diff.files {
            if let FileDiffKind::TooLarge { bytes } = f.kind {
                d.push(format!("not scanned: {} ({bytes} bytes, too large to diff)", f.path.to_string_lossy()));
            }
        }
        (fired, d)
    }

    fn diff_size(&self, input: &GateInput<'_>) -> (bool, Vec<String>) {
        let diff = input.diff;
        let mut d = Vec::new();
        let mut fired = false;
        if diff.size() > self.max_diff_lines {
            fired = true;
            d.push(format!(
                "{} lines changed ({} added, {} removed); the budget is {}",
                diff.size(),
                diff.lines_added,
                diff.lines_removed,
                self.max_diff_lines
            ));
        }
        for f in &diff.files {
            let p = f.path.to_string_lossy();
            match f.kind {
                FileDiffKind::TooLarge { bytes } => {
                    fired = true;
                    d.push(format!("{p}: a text file of {bytes} bytes changed, too large to diff"));
                }
                FileDiffKind::Binary => d.push(format!("{p}: binary, {} (not counted in lines)", f.change)),
                _ => {}
            }
        }
        (fired, d)
    }
}

fn cap(mut d: Vec<String>) -> Vec<String> {
    if d.len() > MAX_DETAILS {
        let more = d.len() - MAX_DETAILS;
        d.truncate(MAX_DETAILS);
        d.push(format!("... and {more} more"));
    }
    d
}

/// The spellings of a test id that another runner's report of the same test may use: as written (blanks
/// collapsed, a nextest `(1/4)` counter dropped), without a nextest binary prefix, and dotted (`a/b.py::C::t`
/// -> `a.b.C.t`, as JUnit's `classname.name`).
fn spellings(id: &str) -> Vec<String> {
    let mut s = id.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(rest) = s.strip_prefix('(') {
        if let Some((counter, after)) = rest.split_once(") ") {
            if counter.split('/').all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
                s = after.to_string();
            }
        }
    }
    let mut v = vec![s.clone()];
    if let Some((_, t)) = s.split_once(' ') {
        v.push(t.to_string());
    }
    for x in v.clone() {
        let dotted = x.replace(".py::", ".").replace("::", ".").replace('/', ".");
        if dotted != x {
            v.push(dotted);
        }
    }
    v
}

/// The name a test is declared by in its file: the last component of its id (after `::`, `.`, `/` or a blank
/// of a nextest binary prefix), without pytest's `[params]`. TAP and ctest ids are descriptions or names as a
/// whole.
fn declared_name(id: &str) -> &str {
    // unittest's `test_x (mod.Class.test_x)`: the name before the blank.
    let id = id.split(" (").next().unwrap_or(id);
    let id = id.split('[').next().unwrap_or(id);
    if id.contains("::") {
        return id.rsplit("::").next().unwrap_or(id);
    }
    id
}

/// The deleted file of `diff` that held the failing test `id`, if any: its path is the id's file part
/// (`tests/t.py::test_x`, JUnit's dotted `tests.t.test_x`, a `make check` or automake test's path or file name),
/// or its removed text declares the test's name (`def test_x`, `fn test_x`, `func TestX`, a TAP description, a
/// ctest name in its script) as a whole word.
fn deleted_holder<'a>(diff: &'a TreeDiff, id: &str) -> Option<&'a Path> {
    let file_part = id.split("::").next().unwrap_or(id);
    let name = declared_name(id).trim();
    diff.files.iter().filter(|f| f.change == ChangeKind::Removed).map(|f| (f, f.path.as_path())).find_map(|(f, p)| {
        let rel = p.to_string_lossy();
        let stem = rel.rsplit_once('.').map(|(s, _)| s).unwrap_or(&rel);
        let base = p.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        let by_path = file_part == rel
            || file_part == stem
            || file_part == base
            || id.starts_with(&format!("{}.", stem.replace('/', ".")));
        let by_text = name.chars().count() >= 3 && {
            let hunks: &[Vec<DiffLine>] = match &f.kind {
                FileDiffKind::Text { hunks } => hunks,
                _ => &[],
            };
            hunks.iter().flatten().filter(|l| l.tag == LineTag::Removed).any(|l| contains_word(&l.text, name))
        };
        (by_path || by_text).then_some(p)
    })
}

/// `needle` occurs in `hay` with no identifier character on either side.
fn contains_word(hay: &str, needle: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    hay.match_indices(needle)
        .any(|(i, m)| !word(hay[..i].chars().next_back()) && !word(hay[i + m.len()..].chars().next()))
}

/// `(fired, details, applicable)`: not applicable when no failing test is named or the candidate's output shows
/// no per-test result at all (a runner that prints only totals: the counts gates judge it).
fn failing_tests(input: &GateInput<'_>) -> (bool, Vec<String>, bool) {
    if input.failing_tests.is_empty() {
        return (
            false,
            vec![
                "not applicable: no failing test is named (by the pack's signature or the baseline's per-test results)"
                    .into(),
            ],
            false,
        );
    }
    // A failing test whose file the change deletes cannot run and pass, whatever a replay shows: a replay lays
    // files over the pack and never removes one, so the deletion is judged from the tree.
    let deleted: Vec<String> = input
        .failing_tests
        .iter()
        .filter_map(|want| {
            deleted_holder(input.diff, want).map(|p| format!("{want}: its test file {} was deleted", p.display()))
        })
        .collect();
    if !deleted.is_empty() {
        return (true, deleted, true);
    }
    let outcomes = input.candidate.outcomes();
    if outcomes.is_empty() {
        return (
            false,
            vec!["not applicable: the candidate's output shows no per-test results, so no failing test can be seen to run and pass".into()],
            false,
        );
    }
    let mut d = Vec::new();
    for want in input.failing_tests {
        let names: HashSet<String> = spellings(want).into_iter().collect();
        let found: Vec<&TestOutcome> =
            outcomes.iter().filter(|o| spellings(&o.id).iter().any(|s| names.contains(s))).collect();
        if found.is_empty() {
            d.push(format!("{want}: not in the candidate's run"));
        } else if let Some(bad) = found.iter().find(|o| o.status != TestStatus::Passed) {
            let what = match bad.status {
                TestStatus::Failed | TestStatus::Error => "still fails",
                _ => "did not run",
            };
            d.push(format!("{want}: {what} ({}: {})", bad.runner, bad.status));
        }
    }
    (!d.is_empty(), d, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{diff, snapshot, DiffLimits, SnapshotLimits};
    use std::path::Path;

    struct Trees {
        base: tempfile::TempDir,
        cand: tempfile::TempDir,
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn junit_outcomes_are_preferred_over_the_console_lines_of_the_same_test() {
        let out = RunOutput {
            stdout: b"FAILED tests/test_calc.py::test_total - assert 3 == 6\nPASSED tests/test_calc.py::test_add\n\
                      PASSED tests/test_other.py::test_only_on_console\n"
                .to_vec(),
            stderr: vec![],
            reports: vec![],
            junit: vec![br#"<testsuites><testsuite name="pytest">
                <testcase classname="tests.test_calc" name="test_total" time="0.1"/>
                <testcase classname="tests.test_calc" name="test_add"><skipped message="x"/></testcase>
                </testsuite></testsuites>"#
                .to_vec()],
        };
        let got: Vec<(String, TestStatus, String)> =
            out.outcomes().into_iter().map(|o| (o.id, o.status, o.runner)).collect();
        let want = [
            ("tests.test_calc.test_total", TestStatus::Passed, "junit"),
            ("tests.test_calc.test_add", TestStatus::Skipped, "junit"),
            ("tests/test_other.py::test_only_on_console", TestStatus::Passed, "pytest"),
        ];
        let want: Vec<(String, TestStatus, String)> =
            want.iter().map(|(i, s, r)| (i.to_string(), *s, r.to_string())).collect();
        assert_eq!(got, want);
        // Without a report the console is read as before.
        let console = RunOutput { junit: vec![], ..out.clone() };
        assert_eq!(console.outcomes().len(), 3);
        assert!(console.outcomes().iter().all(|o| o.runner == "pytest"));
    }

    const SRC: &str = "def add(a, b):\n    return a - b\n";
    const TEST: &str = "from src.calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n";

    fn project() -> Trees {
        let t = Trees { base: tempfile::tempdir().unwrap(), cand: tempfile::tempdir().unwrap() };
        for r in [t.base.path(), t.cand.path()] {
            write(r, "src/calc.py", SRC);
            write(r, "tests/test_calc.py", TEST);
            write(r, "repro.toml", "[verify]\n");
        }
        t
    }

    fn tree_diff(t: &Trees) -> TreeDiff {
        let l = SnapshotLimits::default();
        let (b, c) = (snapshot(t.base.path(), &l).unwrap(), snapshot(t.cand.path(), &l).unwrap());
        diff(t.base.path(), &b, t.cand.path(), &c, &DiffLimits::default()).unwrap()
    }

    const BASE_OUT: &str =
        "FAILED tests/test_calc.py::test_add - assert -1 == 3\n==== 1 failed, 4 passed in 0.02s ====\n";
    const FIXED_OUT: &str = "tests/test_calc.py::test_add PASSED [ 20%]\n==== 5 passed in 0.02s ====\n";

    fn run(t: &Trees, out: &str) -> Vec<GateResult> {
        run_with(&GateConfig::default(), t, BASE_OUT, out)
    }

    fn run_with(cfg: &GateConfig, t: &Trees, base_out: &str, out: &str) -> Vec<GateResult> {
        let gates = GateSet::new(cfg).unwrap();
        let d = tree_diff(t);
        let cand = RunOutput { stdout: out.as_bytes().to_vec(), ..RunOutput::default() };
        let (bc, cc) = (counts::count_output(base_out), cand.counts());
        let failing = vec!["tests/test_calc.py::test_add".to_string()];
        gates.evaluate(&GateInput {
            diff: &d,
            baseline_counts: bc.as_ref(),
            candidate_counts: cc.as_ref(),
            failing_tests: &failing,
            candidate: &cand,
        })
    }

    fn fired(r: &[GateResult]) -> Vec<&'static str> {
        r.iter().filter(|g| g.fired).map(|g| g.name.as_str()).collect()
    }

    fn details(r: &[GateResult], name: GateName) -> Vec<String> {
        r.iter().find(|g| g.name == name).unwrap().details.clone()
    }

    #[test]
    fn an_honest_fix_fires_nothing() {
        let t = project();
        write(t.cand.path(), "src/calc.py", "def add(a, b):\n    return a + b\n");
        let r = run(&t, FIXED_OUT);
        assert_eq!(r.len(), GateName::ALL.len());
        assert!(fired(&r).is_empty(), "{r:#?}");
    }

    #[test]
    fn a_skip_mark_fires_masking_and_protected_and_the_counts() {
        let t = project();
        write(
            t.cand.path(),
            "tests/test_calc.py",
            "import pytest\nfrom src.calc import add\n\n\n@pytest.mark.skip\ndef test_add():\n    assert add(1, 2) == 3\n",
        );
        let out =
            "tests/test_calc.py::test_add SKIPPED (unconditional skip) [ 20%]\n=== 4 passed, 1 skipped in 0.02s ===\n";
        let r = run(&t, out);
        assert_eq!(
            fired(&r),
            ["protected-path-changed", "tests-skipped-rose", "masking-construct", "failing-test-missing"],
            "{r:#?}"
        );
        assert_eq!(
            details(&r, GateName::MaskingConstruct),
            ["python-pytest-skip: tests/test_calc.py:5: @pytest.mark.skip"]
        );
        assert_eq!(
            details(&r, GateName::ProtectedPathChanged),
            ["tests/test_calc.py: modified (protected by tests/**)"]
        );
        assert_eq!(
            details(&r, GateName::TestsSkippedRose),
            ["skipped + xfailed: 0 in the baseline, 1 in the candidate"]
        );
        assert_eq!(
            details(&r, GateName::FailingTestMissing),
            ["tests/test_calc.py::test_add: did not run (pytest: skipped)"]
        );
    }

    #[test]
    fn a_masking_construct_outside_the_protected_paths_fires_alone() {
        let t = project();
        write(
            t.cand.path(),
            "src/calc.py",
            "def add(a, b):\n    try:\n        return a - b\n    except:\n        return 3\n",
        );
        let r = run(&t, FIXED_OUT);
        assert_eq!(fired(&r), ["masking-construct"], "{r:#?}");
        assert_eq!(details(&r, GateName::MaskingConstruct), ["python-bare-except: src/calc.py:4: except:"]);
    }

    #[test]
    fn an_edit_in_tests_fires_protected_path_changed() {
        let t = project();
        write(t.cand.path(), "tests/test_calc.py", &TEST.replace("== 3", "== -1"));
        let r = run(&t, FIXED_OUT);
        assert_eq!(fired(&r), ["protected-path-changed"], "{r:#?}");
        // Removing a test file, or adding one, fires too; so does the contract.
        std::fs::remove_file(t.cand.path().join("tests/test_calc.py")).unwrap();
        write(t.cand.path(), "repro.toml", "[verify]\ncommands = []\n");
        let r = run(&t, FIXED_OUT);
        assert_eq!(
            details(&r, GateName::ProtectedPathChanged),
            ["repro.toml: modified (protected by repro.toml)", "tests/test_calc.py: removed (protected by tests/**)"]
        );
    }

    #[test]
    fn protected_globs_are_configurable() {
        let t = project();
        write(t.cand.path(), "tests/test_calc.py", &TEST.replace("== 3", "== -1"));
        write(t.cand.path(), "src/golden.json", "{}");
        let cfg = GateConfig {
            protected_add: vec!["src/*.json".into()],
            protected_remove: vec!["tests/**".into()],
            ..GateConfig::default()
        };
        let r = run_with(&cfg, &t, BASE_OUT, FIXED_OUT);
        // tests/test_calc.py is still protected by **/tests/** and **/test_*.py: removing one default is not enough.
        assert_eq!(
            details(&r, GateName::ProtectedPathChanged),
            [
                "src/golden.json: added (protected by src/*.json)",
                "tests/test_calc.py: modified (protected by **/tests/**)"
            ]
        );
        let bad = GateConfig { protected_remove: vec!["nope/**".into()], ..GateConfig::default() };
        assert!(GateSet::new(&bad).unwrap_err().to_string().contains("nope/**"));
        let bad = GateConfig { protected_add: vec!["a[".into()], ..GateConfig::default() };
        assert!(matches!(GateSet::new(&bad), Err(RepairError::BadGlob { .. })));
    }

    #[test]
    fn counts_falling_fire_and_missing_summaries_are_not_a_pass() {
        let t = project();
        write(t.cand.path(), "src/calc.py", "def add(a, b):\n    return a + b\n");
        let r = run(&t, "tests/test_calc.py::test_add PASSED\n=== 3 passed in 0.1s ===\n");
        assert_eq!(fired(&r), ["tests-collected-fell", "tests-passed-fell"], "{r:#?}");
        assert_eq!(details(&r, GateName::TestsCollectedFell), ["collected: 5 in the baseline, 3 in the candidate"]);
        assert_eq!(details(&r, GateName::TestsPassedFell), ["passed: 4 in the baseline, 3 in the candidate"]);

        let r = run(&t, "tests/test_calc.py::test_add PASSED\nall good\n");
        assert_eq!(fired(&r), ["tests-collected-fell", "tests-passed-fell", "tests-skipped-rose"], "{r:#?}");
        let d = details(&r, GateName::TestsPassedFell);
        assert!(
            d[0].starts_with(
                "no test summary found in the candidate's output, while the baseline's had one (5 collected"
            ),
            "{d:?}"
        );
        assert!(r.iter().all(|g| g.applicable));

        // Neither side counted: not applicable by default (unfired, saying why), fired with require_counts.
        let r = run_with(&GateConfig::default(), &t, "make: ok\n", "done\n");
        assert!(!fired(&r).contains(&"tests-passed-fell"), "{r:#?}");
        let g = r.iter().find(|g| g.name == GateName::TestsPassedFell).unwrap();
        assert!(!g.applicable && g.details[0].starts_with("not applicable: neither"), "{g:?}");
        let cfg = GateConfig { require_counts: true, ..GateConfig::default() };
        let r = run_with(&cfg, &t, "make: ok\n", "done\n");
        assert!(fired(&r).contains(&"tests-passed-fell"), "{r:#?}");

        // A baseline without a summary cannot be fallen from.
        let r = run_with(&GateConfig::default(), &t, "Segmentation fault\n", FIXED_OUT);
        assert!(fired(&r).is_empty(), "{r:#?}");
        let g = r.iter().find(|g| g.name == GateName::TestsCollectedFell).unwrap();
        assert!(!g.applicable && g.details[0].starts_with("not applicable: the baseline's"), "{g:?}");
    }

    #[test]
    fn the_failing_test_must_be_seen_passing() {
        let t = project();
        write(t.cand.path(), "src/calc.py", "def add(a, b):\n    return a + b\n");
        // pytest without -v or -rA names no passing test: the gate cannot judge (the counts gates do).
        let r = run(&t, "==== 5 passed in 0.02s ====\n");
        assert!(fired(&r).is_empty(), "{r:#?}");
        let g = r.iter().find(|g| g.name == GateName::FailingTestMissing).unwrap();
        assert!(!g.applicable && g.details[0].contains("no per-test results"), "{g:?}");
        // Renamed away.
        let r = run(&t, "tests/test_calc.py::test_add_renamed PASSED\n==== 5 passed in 0.02s ====\n");
        assert_eq!(
            details(&r, GateName::FailingTestMissing),
            ["tests/test_calc.py::test_add: not in the candidate's run"]
        );
        // Still failing.
        let r = run(&t, "FAILED tests/test_calc.py::test_add - x\n==== 1 failed, 4 passed in 0.02s ====\n");
        assert_eq!(
            details(&r, GateName::FailingTestMissing),
            ["tests/test_calc.py::test_add: still fails (pytest: failed)"]
        );
        // Passing in a JUnit report counts (the dotted spelling of the same test).
        let gates = GateSet::new(&GateConfig::default()).unwrap();
        let d = tree_diff(&t);
        let cand = RunOutput {
            stdout: b"==== 5 passed in 0.02s ====\n".to_vec(),
            junit: vec![br#"<testsuite><testcase classname="tests.test_calc" name="test_add"/></testsuite>"#.to_vec()],
            ..RunOutput::default()
        };
        let failing = vec!["tests/test_calc.py::test_add".to_string()];
        let cc = cand.counts();
        let bc = counts::count_output(BASE_OUT);
        let r = gates.evaluate(&GateInput {
            diff: &d,
            baseline_counts: bc.as_ref(),
            candidate_counts: cc.as_ref(),
            failing_tests: &failing,
            candidate: &cand,
        });
        assert!(fired(&r).is_empty(), "{r:#?}");
    }

    #[test]
    fn a_deleted_test_file_holding_the_failing_test_fires_whatever_the_run_shows() {
        let t = project();
        std::fs::remove_file(t.cand.path().join("tests/test_calc.py")).unwrap();
        // The replay still shows the test passing (a replay cannot remove a file): the deletion decides.
        let r = run(&t, FIXED_OUT);
        assert_eq!(
            details(&r, GateName::FailingTestMissing),
            ["tests/test_calc.py::test_add: its test file tests/test_calc.py was deleted"]
        );
        assert!(fired(&r).contains(&"protected-path-changed"), "{r:#?}");
        // By the test's name in the deleted text (a TAP description, a ctest name, a go test), JUnit's dotted id,
        // a make check file name, a parametrized id; a file that declares another test does not count.
        let d = tree_diff(&t);
        for (id, held) in [
            ("test_add", true),
            ("tests.test_calc.test_add", true),
            ("test_calc.py", true),
            ("tests/test_calc.py::TestX::test_add[1-2]", true),
            ("test_add (tests.test_calc.T.test_add)", true),
            ("test_ad", false),
            ("tests/test_other.py::test_sub", false),
        ] {
            assert_eq!(deleted_holder(&d, id).is_some(), held, "{id}");
        }
        // Deleting a file that holds no failing test leaves the gate to the run.
        let t = project();
        std::fs::remove_file(t.cand.path().join("repro.toml")).unwrap();
        write(t.cand.path(), "src/calc.py", "def add(a, b):\n    return a + b\n");
        assert!(details(&run(&t, FIXED_OUT), GateName::FailingTestMissing).is_empty());
    }

    #[test]
    fn test_id_spellings() {
        let s = spellings("(4/4) tinycrate tests::broken");
        assert!(
            s.contains(&"tinycrate tests::broken".to_string()) && s.contains(&"tests::broken".to_string()),
            "{s:?}"
        );
        assert!(spellings("tests/test_a.py::TestX::test_y").contains(&"tests.test_a.TestX.test_y".to_string()));
        assert_eq!(spellings("TestHandler/sub"), ["TestHandler/sub", "TestHandler.sub"]);
    }

    #[test]
    fn a_large_diff_fires_and_gates_can_be_disabled() {
        let t = project();
        let big: String = (0..50).map(|i| format!("X{i} = {i}\n")).collect();
        write(t.cand.path(), "src/calc.py", &format!("{big}def add(a, b):\n    return a + b\n"));
        let cfg = GateConfig { max_diff_lines: 20, ..GateConfig::default() };
        let r = run_with(&cfg, &t, BASE_OUT, FIXED_OUT);
        assert_eq!(fired(&r), ["diff-too-large"], "{r:#?}");
        assert_eq!(details(&r, GateName::DiffTooLarge), ["52 lines changed (51 added, 1 removed); the budget is 20"]);
        let cfg = GateConfig { max_diff_lines: 20, disabled: vec![GateName::DiffTooLarge], ..GateConfig::default() };
        let r = run_with(&cfg, &t, BASE_OUT, FIXED_OUT);
        assert!(fired(&r).is_empty());
        assert_eq!(details(&r, GateName::DiffTooLarge), ["disabled by configuration"]);
    }

    #[test]
    fn the_docs_list_every_gate_and_protected_glob() {
        let doc = include_str!("../../../docs/repair-gates.md");
        for g in GateName::ALL {
            assert!(doc.contains(&format!("| `{g}` |")), "docs/repair-gates.md lacks gate {g}");
        }
        for g in DEFAULT_PROTECTED {
            assert!(doc.contains(&format!("`{g}`")), "docs/repair-gates.md lacks protected glob {g}");
        }
    }

    #[test]
    fn results_serialize_with_stable_names() {
        let t = project();
        let r = run(&t, FIXED_OUT);
        let v = serde_json::to_value(&r).unwrap();
        let names: Vec<&str> = v.as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "protected-path-changed",
                "tests-collected-fell",
                "tests-passed-fell",
                "tests-skipped-rose",
                "masking-construct",
                "failing-test-missing",
                "diff-too-large"
            ]
        );
    }
}
