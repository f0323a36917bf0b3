//! automake's parallel test harness: the `.trs` file it writes beside each test's `.log` (`:test-result: PASS`,
//! one line per result, `:global-test-result:` for the test as a whole) and the `test-suite.log` it sums them up
//! in (`# TOTAL: 3`, `# PASS:  2`, ..., then a `FAIL: tests/t_total.sh` section per test whose log it copied).

use std::sync::OnceLock;

use regex::Regex;

use repro_model::repair::{TestCounts, TestOutcome, TestStatus};

use crate::counts::{clean, re};

const RUNNER: &str = "automake";

fn status(word: &str) -> Option<TestStatus> {
    Some(match word {
        "PASS" => TestStatus::Passed,
        // An unexpected pass is a failure of the suite (automake fails `make check` on it).
        "FAIL" | "XPASS" => TestStatus::Failed,
        "ERROR" => TestStatus::Error,
        "SKIP" => TestStatus::Skipped,
        "XFAIL" => TestStatus::Xfailed,
        _ => return None,
    })
}

fn rank(s: TestStatus) -> u8 {
    match s {
        TestStatus::Passed => 0,
        TestStatus::Skipped | TestStatus::Xfailed => 1,
        TestStatus::Failed => 2,
        TestStatus::Error => 3,
    }
}

/// The outcome of one test from its `.trs` file: `id` is the test's name (the `.trs` path without `.trs`, as
/// the harness names it), the status its `:global-test-result:`, else the worst of its `:test-result:` lines.
/// `None` when the text holds no result line (no `.trs` of the harness).
pub fn outcome_in_trs(id: &str, text: &str) -> Option<TestOutcome> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = re(&LINE, r"^\s*:(global-)?test-result:\s*([A-Z]+)\s*$");
    let mut global = None;
    let mut worst: Option<TestStatus> = None;
    for l in text.lines() {
        let l = clean(l);
        let Some(c) = line.captures(&l) else { continue };
        let Some(st) = status(&c[2]) else { continue };
        if c.get(1).is_some() {
            global = Some(st);
        } else if worst.is_none_or(|w| rank(st) > rank(w)) {
            worst = Some(st);
        }
    }
    let status = global.or(worst)?;
    Some(TestOutcome { id: id.to_string(), status, runner: RUNNER.into() })
}

/// The counts of a `test-suite.log`'s summary (`# TOTAL: 3`, `# PASS:  2`, `# SKIP:  0`, `# XFAIL: 0`,
/// `# FAIL:  1`, `# XPASS: 0`, `# ERROR: 0`): `None` unless it has the `# TOTAL:` line. XPASS counts as failed.
pub fn count_suite_log(text: &str) -> Option<TestCounts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = re(&LINE, r"^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR):\s*(\d+)\s*$");
    let mut k = TestCounts { runners: vec![RUNNER.into()], ..Default::default() };
    let mut total = false;
    for l in text.lines() {
        let l = clean(l);
        let Some(c) = line.captures(&l) else { continue };
        let n: u64 = c[2].parse().unwrap_or(u64::MAX);
        match &c[1] {
            "TOTAL" => {
                if total {
                    // The summary ends at the first block: a copied test log may hold another.
                    break;
                }
                total = true;
                k.collected = n;
            }
            "PASS" => k.passed = n,
            "SKIP" => k.skipped = n,
            "XFAIL" => k.xfailed = n,
            "FAIL" => k.failed = k.failed.saturating_add(n),
            "XPASS" => k.failed = k.failed.saturating_add(n),
            _ => k.errors = n,
        }
    }
    total.then_some(k)
}

/// The outcomes a `test-suite.log` names: each `RESULT: test` section title (a line of `=` under it) of the tests
/// whose log it copied (those that failed, by default).
pub fn outcomes_in_suite_log(text: &str) -> Vec<TestOutcome> {
    static TITLE: OnceLock<Regex> = OnceLock::new();
    let title = re(&TITLE, r"^(PASS|FAIL|XPASS|ERROR|SKIP|XFAIL): (\S.*?)\s*$");
    let lines: Vec<String> = text.lines().map(|l| clean(l).into_owned()).collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(c) = title.captures(l) else { continue };
        let underline = lines.get(i + 1).is_some_and(|u| u.len() == l.len() && u.bytes().all(|b| b == b'='));
        if let (true, Some(st)) = (underline, status(&c[1])) {
            out.push(TestOutcome { id: c[2].to_string(), status: st, runner: RUNNER.into() });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // As automake 1.16's harness writes them (lib/test-driver and lib/tap-driver.sh, check.am's global log).
    const TRS_FAIL: &str = ":test-result: FAIL\n:global-test-result: FAIL\n:recheck: yes\n:copy-in-global-log: yes\n";
    const TRS_PASS: &str = ":test-result: PASS\n:global-test-result: PASS\n:recheck: no\n:copy-in-global-log: no\n";
    const TRS_TAP: &str = ":test-result: PASS\n:test-result: SKIP\n:test-result: XFAIL\n:test-result: FAIL\n";
    const SUITE_LOG: &str = "\
==========================================
   calc 1.0: tests/test-suite.log
==========================================

# TOTAL: 3
# PASS:  1
# SKIP:  1
# XFAIL: 0
# FAIL:  1
# XPASS: 0
# ERROR: 0

.. contents:: :depth: 2

FAIL: t_total.sh
================

total: got 3, want 6
# TOTAL: 9
FAIL t_total.sh (exit_status: 1)

";

    #[test]
    fn trs_results() {
        let o = outcome_in_trs("tests/t_total.sh", TRS_FAIL).unwrap();
        assert_eq!((o.id.as_str(), o.status, o.runner.as_str()), ("tests/t_total.sh", TestStatus::Failed, "automake"));
        assert_eq!(outcome_in_trs("t", TRS_PASS).unwrap().status, TestStatus::Passed);
        // Without a global result (a TAP driver's partial file), the worst line.
        assert_eq!(outcome_in_trs("t", TRS_TAP).unwrap().status, TestStatus::Failed);
        assert_eq!(outcome_in_trs("t", ":test-result: SKIP\n").unwrap().status, TestStatus::Skipped);
        assert_eq!(outcome_in_trs("t", ":global-test-result: XPASS\n").unwrap().status, TestStatus::Failed);
        assert_eq!(outcome_in_trs("t", ":test-result: XFAIL\r\n").unwrap().status, TestStatus::Xfailed);
        assert_eq!(outcome_in_trs("t", ":test-result: ERROR\n").unwrap().status, TestStatus::Error);
        assert_eq!(outcome_in_trs("t", ""), None);
        assert_eq!(outcome_in_trs("t", ":test-result: MAYBE\nno result here\n"), None);
    }

    #[test]
    fn suite_log_summary_and_sections() {
        let k = count_suite_log(SUITE_LOG).unwrap();
        assert_eq!((k.collected, k.passed, k.skipped, k.xfailed, k.failed, k.errors), (3, 1, 1, 0, 1, 0));
        assert_eq!(k.runners, ["automake"]);
        assert_eq!(count_suite_log("FAIL: x\n"), None);
        let o = outcomes_in_suite_log(SUITE_LOG);
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!((o[0].id.as_str(), o[0].status), ("t_total.sh", TestStatus::Failed));
        // A title without its underline is a line of a copied log, not a section.
        assert!(outcomes_in_suite_log("FAIL: t_total.sh\nsomething\n").is_empty());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = outcome_in_trs("t", &s);
            let _ = count_suite_log(&s);
            let _ = outcomes_in_suite_log(&s);
        }
    }
}
