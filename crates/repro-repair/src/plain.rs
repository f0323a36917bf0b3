//! Per-test lines of runners without a summary of their own that [`crate::counts`] reads: a `make check` of shell
//! tests (automake's `PASS: t.sh` / `FAIL: t.sh` and the plain `PASS t.sh` / `FAIL t.sh` many Makefiles echo),
//! ctest's `1/2 Test #1: name ... Passed` lines, TAP producers other than node (`ok 1 name`, `not ok 2 name # SKIP`, with or without the dash) and Python's
//! unittest (`Ran 3 tests`, `FAILED (failures=1)`, its `FAIL: test_x (mod.Class.test_x)` blocks and the
//! `test_x (mod.Class.test_x) ... ok` lines of `-v`).

use std::sync::OnceLock;

use regex::Regex;
use repro_model::repair::{TestCounts, TestOutcome, TestStatus};

use crate::counts::{clean, re};

fn bump(k: &mut TestCounts, s: TestStatus) {
    k.collected = k.collected.saturating_add(1);
    match s {
        TestStatus::Passed => k.passed += 1,
        TestStatus::Failed => k.failed += 1,
        TestStatus::Skipped => k.skipped += 1,
        TestStatus::Xfailed => k.xfailed += 1,
        TestStatus::Error => k.errors += 1,
    }
}

fn outcome(runner: &str, id: &str, status: TestStatus) -> TestOutcome {
    TestOutcome { id: id.split_whitespace().collect::<Vec<_>>().join(" "), status, runner: runner.into() }
}

/// `PASS: t.sh` (automake) and `PASS t.sh` lines; `SKIP`, `XFAIL`, `XPASS` and `ERROR` too. A name that opens
/// with `[` is nextest's, one followed by `(` is unittest's: neither is taken.
pub fn make_check_outcomes(text: &str) -> Vec<TestOutcome> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = re(&LINE, r"^(PASS|FAIL|SKIP|XFAIL|XPASS|ERROR):? ([^\s\[(][^(]*?)\s*$");
    text.lines()
        .filter_map(|raw| {
            let l = clean(raw);
            let c = line.captures(&l).filter(|c| !c[2].contains("::"))?;
            let st = match &c[1] {
                "PASS" | "XPASS" => TestStatus::Passed,
                "FAIL" => TestStatus::Failed,
                "SKIP" => TestStatus::Skipped,
                "XFAIL" => TestStatus::Xfailed,
                _ => TestStatus::Error,
            };
            Some(outcome("make-check", &c[2], st))
        })
        .collect()
}

/// TAP test lines (`ok 1 name`, `not ok 2 - name # TODO`); a line without a description is named by its number.
pub fn tap_outcomes(text: &str) -> Vec<TestOutcome> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = re(&LINE, r"^(ok|not ok) (\d+)(?:\s+(?:- )?(.*?))?(?:\s*# (SKIP|TODO)\b.*)?$");
    text.lines()
        .filter_map(|raw| {
            let l = clean(raw);
            let c = line.captures(&l)?;
            let st = match (c.get(4).map(|m| m.as_str()), &c[1]) {
                (Some("SKIP"), _) => TestStatus::Skipped,
                (Some(_), _) => TestStatus::Xfailed,
                (None, "ok") => TestStatus::Passed,
                (None, _) => TestStatus::Failed,
            };
            let name = c.get(3).map(|m| m.as_str()).filter(|n| !n.is_empty()).unwrap_or(&c[2]);
            Some(outcome("tap", name, st))
        })
        .collect()
}

/// ctest's per-test lines: `1/2 Test #1: name ....   Passed    0.01 sec`, `***Failed`, `***Timeout`,
/// `***Exception: ...`, `***Skipped`, `***Not Run (Disabled)` (skipped: a disabled test is still a test of the
/// project, while ctest's own summary stops counting it) and `***Not Run` (an error: its command is missing).
pub fn ctest_outcomes(text: &str) -> Vec<TestOutcome> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = re(
        &LINE,
        r"^\s*\d+/\d+ Test\s+#\d+: (\S+) \.*\s*(?:\*\*\*)?\s*(Passed|Failed|Timeout|Exception|Skipped|Not Run \(Disabled\)|Not Run)",
    );
    text.lines()
        .filter_map(|raw| {
            let l = clean(raw);
            let c = line.captures(&l)?;
            let st = match &c[2] {
                "Passed" => TestStatus::Passed,
                "Failed" | "Timeout" | "Exception" => TestStatus::Failed,
                "Skipped" | "Not Run (Disabled)" => TestStatus::Skipped,
                _ => TestStatus::Error,
            };
            Some(outcome("ctest", &c[1], st))
        })
        .collect()
}

/// Counts of a `make check` or TAP output from its per-test lines (`None` when there is none).
pub fn count_lines(outcomes: &[TestOutcome], runner: &str) -> Option<TestCounts> {
    let mut k = TestCounts { runners: vec![runner.into()], ..TestCounts::default() };
    for o in outcomes.iter().filter(|o| o.runner == runner) {
        bump(&mut k, o.status);
    }
    (k.collected > 0).then_some(k)
}

/// unittest's summary: `Ran 4 tests in 0.001s`, then `OK`, `OK (skipped=1)` or `FAILED (failures=1, errors=1,
/// skipped=1, expected failures=1, unexpected successes=1)`. Summaries of several runs add up.
pub fn unittest(text: &str) -> Option<TestCounts> {
    static RAN: OnceLock<Regex> = OnceLock::new();
    static END: OnceLock<Regex> = OnceLock::new();
    static ITEM: OnceLock<Regex> = OnceLock::new();
    let ran = re(&RAN, r"^Ran (\d+) tests? in [\d.]+s$");
    let end = re(&END, r"^(OK|FAILED)(?: \((.*)\))?$");
    let item = re(&ITEM, r"^(failures|errors|skipped|expected failures|unexpected successes)=(\d+)$");
    let mut total: Option<TestCounts> = None;
    let mut pending: Option<u64> = None;
    for raw in text.lines() {
        let l = clean(raw);
        if let Some(c) = ran.captures(&l) {
            pending = Some(c[1].parse().unwrap_or(u64::MAX));
            continue;
        }
        let Some(n) = pending else { continue };
        if l.is_empty() {
            continue;
        }
        pending = None;
        let Some(c) = end.captures(&l) else { continue };
        let mut k = TestCounts { collected: n, runners: vec!["unittest".into()], ..TestCounts::default() };
        for part in c.get(2).map_or("", |m| m.as_str()).split(", ").filter(|p| !p.is_empty()) {
            let Some(m) = item.captures(part) else { continue };
            let v: u64 = m[2].parse().unwrap_or(u64::MAX);
            match &m[1] {
                "failures" => k.failed = v,
                "errors" => k.errors = v,
                "skipped" => k.skipped = v,
                "expected failures" => k.xfailed = v,
                _ => {}
            }
        }
        k.passed =
            n.saturating_sub(k.failed).saturating_sub(k.errors).saturating_sub(k.skipped).saturating_sub(k.xfailed);
        total.get_or_insert_with(TestCounts::default).add(&k);
    }
    total
}

/// unittest's per-test results: the `FAIL: name (id)` / `ERROR: name (id)` headers of its failure blocks and the
/// `name (id) ... ok` lines of `-v`. The id is the dotted `module.Class.test` (Python 3.11 prints it whole; older
/// ones print `module.Class`, completed with the name).
pub fn unittest_outcomes(text: &str) -> Vec<TestOutcome> {
    static HEAD: OnceLock<Regex> = OnceLock::new();
    static VERBOSE: OnceLock<Regex> = OnceLock::new();
    let head = re(&HEAD, r"^(FAIL|ERROR): (\w+) \(([\w.]+)\)");
    let verbose =
        re(&VERBOSE, r"^(\w+) \(([\w.]+)\) \.\.\. (ok|FAIL|ERROR|skipped\b.*|expected failure|unexpected success)$");
    let id = |name: &str, scope: &str| {
        if scope.rsplit('.').next() == Some(name) {
            scope.to_string()
        } else {
            format!("{scope}.{name}")
        }
    };
    let mut out = Vec::new();
    for raw in text.lines() {
        let l = clean(raw);
        if let Some(c) = head.captures(&l) {
            let st = if &c[1] == "FAIL" { TestStatus::Failed } else { TestStatus::Error };
            out.push(outcome("unittest", &id(&c[2], &c[3]), st));
        } else if let Some(c) = verbose.captures(&l) {
            let st = match &c[3] {
                "ok" | "unexpected success" => TestStatus::Passed,
                "FAIL" => TestStatus::Failed,
                "ERROR" => TestStatus::Error,
                "expected failure" => TestStatus::Xfailed,
                _ => TestStatus::Skipped,
            };
            out.push(outcome("unittest", &id(&c[1], &c[2]), st));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[TestOutcome]) -> Vec<String> {
        v.iter().map(|o| format!("{} {} {}", o.runner, o.id, o.status)).collect()
    }

    #[test]
    fn make_check_lines_plain_and_automake() {
        let text = "sh t_add.sh\nPASS t_add.sh\nFAIL t_total.sh\nPASS: t_a.sh\nSKIP: t_b.sh\nXFAIL: t_c.sh\n\
                    PASS [ 0.1s] nextest::id\nERROR tests/t.py::t - x\nFAIL: test_x (m.C.test_x)\nPASS\nFAIL\tgo/pkg\t0.1s\n";
        let o = make_check_outcomes(text);
        assert_eq!(
            ids(&o),
            [
                "make-check t_add.sh passed",
                "make-check t_total.sh failed",
                "make-check t_a.sh passed",
                "make-check t_b.sh skipped",
                "make-check t_c.sh xfailed"
            ]
        );
        let k = count_lines(&o, "make-check").unwrap();
        assert_eq!((k.collected, k.passed, k.failed, k.not_run()), (5, 2, 1, 2));
        assert!(count_lines(&[], "make-check").is_none());
    }

    #[test]
    fn ctest_lines_real_output() {
        // ctest 3.25's output (tests/repair-corpus/ctest), the second test failing, then disabled.
        let failing = "Test project /tmp/p/build\n    Start 1: one\n1/2 Test #1: one ..............................   Passed    0.02 sec\n    Start 2: total\n2/2 Test #2: total ............................***Failed    0.01 sec\n\n50% tests passed, 1 tests failed out of 2\n";
        let v = ctest_outcomes(failing);
        assert_eq!(ids(&v), ["ctest one passed", "ctest total failed"]);
        let disabled = "1/2 Test #1: one ....   Passed    0.02 sec\n2/2 Test #2: total ....***Not Run (Disabled)   0.00 sec\n100% tests passed, 0 tests failed out of 1\n";
        let k = count_lines(&ctest_outcomes(disabled), "ctest").unwrap();
        assert_eq!((k.collected, k.passed, k.skipped, k.failed), (2, 1, 1, 0));
        let more = "10/12 Test #10: a.b ***Timeout 1.5 sec\n11/12 Test #11: c ***Exception: SegFault  0.1 sec\n12/12 Test #12: d ***Not Run   0.0 sec\n";
        let st: Vec<TestStatus> = ctest_outcomes(more).iter().map(|o| o.status).collect();
        assert_eq!(st, [TestStatus::Failed, TestStatus::Failed, TestStatus::Error]);
    }

    #[test]
    fn tap_lines_with_and_without_dash() {
        let text = "1..4\nok 1 adds\nnot ok 2 - totals\nok 3 # SKIP no db\nnot ok 4 later # TODO\nok\n";
        let o = tap_outcomes(text);
        assert_eq!(ids(&o), ["tap adds passed", "tap totals failed", "tap 3 skipped", "tap later xfailed"]);
        let k = count_lines(&o, "tap").unwrap();
        assert_eq!((k.collected, k.passed, k.failed, k.skipped, k.xfailed), (4, 1, 1, 1, 1));
    }

    #[test]
    fn unittest_summaries_and_blocks() {
        let fail = "F.\n======================================================================\n\
                    FAIL: test_total (test_calc.TestCalc.test_total)\n---\nTraceback\nAssertionError: 5 != 6\n\n\
                    ----------------------------------------------------------------------\n\
                    Ran 2 tests in 0.001s\n\nFAILED (failures=1, skipped=1)\n";
        let k = unittest(fail).unwrap();
        assert_eq!((k.collected, k.passed, k.failed, k.skipped), (2, 0, 1, 1));
        assert_eq!(ids(&unittest_outcomes(fail)), ["unittest test_calc.TestCalc.test_total failed"]);
        let old = "ERROR: test_total (test_calc.TestCalc)\n";
        assert_eq!(ids(&unittest_outcomes(old)), ["unittest test_calc.TestCalc.test_total error"]);
        let ok = "test_add (t.T.test_add) ... ok\ntest_b (t.T.test_b) ... skipped 'x'\n\nRan 2 tests in 0.000s\n\nOK (skipped=1)\n";
        let k = unittest(ok).unwrap();
        assert_eq!((k.collected, k.passed, k.skipped, k.runners.clone()), (2, 1, 1, vec!["unittest".to_string()]));
        assert_eq!(ids(&unittest_outcomes(ok)), ["unittest t.T.test_add passed", "unittest t.T.test_b skipped"]);
        assert!(unittest("Ran 3 tests in 0.1s\nsomething else\n").is_none());
    }

    proptest::proptest! {
        #[test]
        fn make_check_and_tap_lines_round_trip(tests in proptest::collection::vec((0u8..4, "[a-z_]{1,12}\\.sh"), 0..20)) {
            let word = ["PASS", "FAIL", "SKIP", "XFAIL"];
            let automake: String = tests.iter().map(|(s, n)| format!("{}: {n}\n", word[*s as usize])).collect();
            let plain: String = tests.iter().map(|(s, n)| format!("{} {n}\n", word[*s as usize])).collect();
            for text in [automake, plain] {
                let o = make_check_outcomes(&text);
                proptest::prop_assert_eq!(o.len(), tests.len());
                let k = count_lines(&o, "make-check");
                proptest::prop_assert_eq!(k.map_or(0, |k| k.collected), tests.len() as u64);
            }
            let tap: String = tests
                .iter()
                .enumerate()
                .map(|(i, (s, n))| match s {
                    0 => format!("ok {} {n}\n", i + 1),
                    1 => format!("not ok {} - {n}\n", i + 1),
                    2 => format!("ok {} {n} # SKIP x\n", i + 1),
                    _ => format!("not ok {} {n} # TODO\n", i + 1),
                })
                .collect();
            let o = tap_outcomes(&tap);
            let names: Vec<&str> = o.iter().map(|o| o.id.as_str()).collect();
            let want: Vec<&str> = tests.iter().map(|(_, n)| n.as_str()).collect();
            proptest::prop_assert_eq!(names, want);
        }
    }
}
