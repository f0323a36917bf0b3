//! Test counts and per-test outcomes read from test runners' own output: pytest's summary line, cargo test's
//! `test result:` lines, cargo nextest's `Summary`, go test `-v` (and `-json`), node's test runner (TAP and spec
//! reporters) and JUnit XML. The runner is recognised by content; `None` when no summary is recognised.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;
use repro_model::repair::{TestCounts, TestOutcome, TestStatus};

use crate::plain;
use crate::xml::{self, Tag};

pub(crate) fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    // The patterns are literals of this file, each compiled by the tests: a failure is a bug here.
    cell.get_or_init(|| Regex::new(pattern).unwrap_or_else(|e| panic!("built-in pattern {pattern}: {e}")))
}

/// A line without ANSI escapes, carriage returns or trailing blanks.
pub(crate) fn clean(line: &str) -> std::borrow::Cow<'_, str> {
    static ANSI: OnceLock<Regex> = OnceLock::new();
    let l = line.trim_end();
    let l = l.rsplit('\r').next().unwrap_or(l);
    if l.contains('\x1b') {
        std::borrow::Cow::Owned(re(&ANSI, r"\x1b\[[0-9;?]*[ -/]*[@-~]").replace_all(l, "").into_owned())
    } else {
        std::borrow::Cow::Borrowed(l)
    }
}

/// A count that may not fit: saturates.
fn num(s: &str) -> u64 {
    s.parse::<u64>().unwrap_or(u64::MAX)
}

fn counts(runner: &str) -> TestCounts {
    TestCounts { runners: vec![runner.to_string()], ..TestCounts::default() }
}

/// pytest's summary: `=== 1 failed, 3 passed, 1 skipped, 1 xfailed in 0.04s ===`, the `-q` form without the
/// rule, `no tests ran in 0.01s`. Deselected tests count as skipped, xpassed as passed.
fn pytest(text: &str) -> Option<TestCounts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    static ITEM: OnceLock<Regex> = OnceLock::new();
    let line = re(&LINE, r"^=*\s*(.+?)\s+in\s+[\d.]+\s*s(?:\s+\(\d+(?::\d+)+\))?\s*=*$");
    let item = re(&ITEM, r"^(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected|warnings?|rerun)$");
    let mut total: Option<TestCounts> = None;
    for raw in text.lines() {
        let l = clean(raw);
        let Some(c) = line.captures(&l) else { continue };
        let body = c.get(1).map_or("", |m| m.as_str());
        let mut k = counts("pytest");
        if body != "no tests ran" {
            let mut ok = true;
            for part in body.split(", ") {
                let Some(m) = item.captures(part.trim()) else {
                    ok = false;
                    break;
                };
                let n = num(&m[1]);
                let f = match &m[2] {
                    "passed" | "xpassed" => &mut k.passed,
                    "failed" => &mut k.failed,
                    "skipped" | "deselected" => &mut k.skipped,
                    "xfailed" => &mut k.xfailed,
                    "error" | "errors" => &mut k.errors,
                    _ => continue, // warnings, reruns: not tests
                };
                *f = f.saturating_add(n);
            }
            if !ok {
                continue;
            }
        }
        k.collected = k.passed.saturating_add(k.failed).saturating_add(k.not_run()).saturating_add(k.errors);
        total.get_or_insert_with(TestCounts::default).add(&k);
    }
    total
}

/// cargo test: every `test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out` line at the
/// start of a line (test binaries, doc tests), summed. Ignored tests count as skipped; filtered-out tests (the
/// command line's filter) are not collected.
fn cargo_test(text: &str) -> Option<TestCounts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = re(
        &LINE,
        r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; (\d+) measured; (\d+) filtered out",
    );
    let mut total: Option<TestCounts> = None;
    for raw in text.lines() {
        let l = clean(raw);
        let Some(c) = line.captures(&l) else { continue };
        let mut k = counts("cargo-test");
        k.passed = num(&c[1]);
        k.failed = num(&c[2]);
        k.skipped = num(&c[3]);
        k.collected = k.passed.saturating_add(k.failed).saturating_add(k.skipped);
        total.get_or_insert_with(TestCounts::default).add(&k);
    }
    total
}

/// cargo nextest: `Summary [   0.109s] 4 tests run: 3 passed, 1 failed, 2 skipped` (also `3/5 tests run` when
/// cancelled, `(1 slow)` notes, `timed out` counted as failed). Collected: the tests to run plus the skipped.
fn nextest(text: &str) -> Option<TestCounts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    static ITEM: OnceLock<Regex> = OnceLock::new();
    let line = re(&LINE, r"^\s*Summary \[\s*[\d.]+s\]\s+(\d+)(?:/(\d+))? tests? run: (.*)$");
    let item = re(&ITEM, r"^(\d+) ([a-z][a-z -]*?)(?: \([^)]*\))*$");
    let mut total: Option<TestCounts> = None;
    for raw in text.lines() {
        let l = clean(raw);
        let Some(c) = line.captures(&l) else { continue };
        let mut k = counts("nextest");
        let to_run = num(c.get(2).map_or(&c[1], |m| m.as_str()));
        for part in c[3].split(", ") {
            let Some(m) = item.captures(part.trim()) else { continue };
            let n = num(&m[1]);
            match &m[2] {
                "passed" => k.passed = k.passed.saturating_add(n),
                "failed" | "timed out" | "exec failed" | "exec fail" => k.failed = k.failed.saturating_add(n),
                "skipped" => k.skipped = k.skipped.saturating_add(n),
                _ => {} // leaky, flaky, slow: notes on tests counted elsewhere
            }
        }
        k.collected = to_run.saturating_add(k.skipped);
        total.get_or_insert_with(TestCounts::default).add(&k);
    }
    total
}

/// go test `-v` (`--- PASS: TestX`, `--- FAIL:`, `--- SKIP:`, subtests indented and counted too, a package
/// that did not build as one error) and `-json` (`"Action":"pass"` events of a test).
fn go_test(text: &str) -> Option<TestCounts> {
    let mut k = counts("go-test");
    let mut seen = false;
    for o in go_outcomes(text) {
        seen = true;
        bump(&mut k, o.status);
    }
    static BUILD: OnceLock<Regex> = OnceLock::new();
    for raw in text.lines() {
        if re(&BUILD, r"^FAIL\s+\S+\s+\[(?:build|setup) failed\]").is_match(&clean(raw)) {
            seen = true;
            k.errors = k.errors.saturating_add(1);
            k.collected = k.collected.saturating_add(1);
        }
    }
    seen.then_some(k)
}

pub(crate) fn bump(k: &mut TestCounts, s: TestStatus) {
    let f = match s {
        TestStatus::Passed => &mut k.passed,
        TestStatus::Failed => &mut k.failed,
        TestStatus::Skipped => &mut k.skipped,
        TestStatus::Xfailed => &mut k.xfailed,
        TestStatus::Error => &mut k.errors,
    };
    *f = f.saturating_add(1);
    k.collected = k.collected.saturating_add(1);
}

fn go_outcomes(text: &str) -> Vec<TestOutcome> {
    static V: OnceLock<Regex> = OnceLock::new();
    let v = re(&V, r"^\s*--- (PASS|FAIL|SKIP): (\S+)");
    let mut out = Vec::new();
    for raw in text.lines() {
        let l = clean(raw);
        if let Some(c) = v.captures(&l) {
            let status = match &c[1] {
                "PASS" => TestStatus::Passed,
                "FAIL" => TestStatus::Failed,
                _ => TestStatus::Skipped,
            };
            out.push(TestOutcome { id: c[2].to_string(), status, runner: "go-test".into() });
        } else if l.starts_with('{') && l.contains("\"Action\"") {
            #[derive(serde::Deserialize)]
            struct Event {
                #[serde(rename = "Action")]
                action: String,
                #[serde(rename = "Test")]
                test: Option<String>,
            }
            let Ok(e) = serde_json::from_str::<Event>(&l) else { continue };
            let Some(test) = e.test else { continue };
            let status = match e.action.as_str() {
                "pass" => TestStatus::Passed,
                "fail" => TestStatus::Failed,
                "skip" => TestStatus::Skipped,
                _ => continue,
            };
            out.push(TestOutcome { id: test, status, runner: "go-test".into() });
        }
    }
    out
}

/// node --test: the TAP reporter's `# tests 3` ... `# todo 0` and the spec reporter's `ℹ tests 3` ... lines. Pass
/// is passed, fail and cancelled failed, skipped skipped, todo xfailed; `tests` is collected.
fn node_test(text: &str) -> Option<TestCounts> {
    static LINE: OnceLock<Regex> = OnceLock::new();
    let line = re(&LINE, r"^(?:#|ℹ) (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) (\d+)(?:\.\d+)?$");
    let mut total: Option<TestCounts> = None;
    let mut cur: Option<TestCounts> = None;
    let mut flush = |cur: &mut Option<TestCounts>| {
        if let Some(k) = cur.take() {
            total.get_or_insert_with(TestCounts::default).add(&k);
        }
    };
    for raw in text.lines() {
        let l = clean(raw);
        let Some(c) = line.captures(&l) else { continue };
        let n = num(&c[2]);
        if &c[1] == "tests" {
            flush(&mut cur);
            cur = Some(TestCounts { collected: n, ..counts("node-test") });
            continue;
        }
        let Some(k) = cur.as_mut() else { continue };
        match &c[1] {
            "pass" => k.passed = n,
            "fail" => k.failed = k.failed.saturating_add(n),
            "cancelled" => k.failed = k.failed.saturating_add(n),
            "skipped" => k.skipped = n,
            "todo" => k.xfailed = n,
            _ => {}
        }
    }
    flush(&mut cur);
    total
}

/// The runners whose summary `text` holds, in the order they are tried.
pub fn detect_runners(text: &str) -> Vec<&'static str> {
    let mut v = Vec::new();
    let nextest_found = nextest(text).is_some();
    if nextest_found {
        v.push("nextest");
    }
    // nextest prints a failing test's captured output, `test result:` lines indented among it; cargo test's
    // own are at the start of a line, but a nextest summary wins.
    if !nextest_found && cargo_test(text).is_some() {
        v.push("cargo-test");
    }
    if pytest(text).is_some() {
        v.push("pytest");
    }
    if go_test(text).is_some() {
        v.push("go-test");
    }
    if node_test(text).is_some() {
        v.push("node-test");
    }
    for k in plain_counts(text) {
        for r in ["make-check", "ctest", "tap", "unittest"] {
            if k.runners.iter().any(|x| x == r) {
                v.push(r);
            }
        }
    }
    v
}

/// The counts of the runners without a summary line of their own ([`crate::plain`]): `make check` lines, TAP
/// (when node's summary did not already count it) and unittest.
fn plain_counts(text: &str) -> Vec<TestCounts> {
    let mut v: Vec<TestCounts> =
        plain::count_lines(&plain::make_check_outcomes(text), "make-check").into_iter().collect();
    v.extend(plain::count_lines(&plain::ctest_outcomes(text), "ctest"));
    if node_test(text).is_none() {
        v.extend(plain::count_lines(&plain::tap_outcomes(text), "tap"));
    }
    v.extend(plain::unittest(text));
    v
}

/// The test counts of a runner's console output: every recognised runner's summary, added up (a `make check`
/// may run two). `None` when there is none.
pub fn count_output(text: &str) -> Option<TestCounts> {
    let nx = nextest(text);
    let parts = [cargo_test(text).filter(|_| nx.is_none()), nx.clone(), pytest(text), go_test(text), node_test(text)];
    let mut total: Option<TestCounts> = None;
    for k in parts.into_iter().flatten().chain(plain_counts(text)) {
        total.get_or_insert_with(TestCounts::default).add(&k);
    }
    total
}

/// The outcomes of a JUnit XML document's `<testcase>` elements: a `<failure>` child is failed, `<error>` an
/// error, `<skipped>` skipped (xfailed when its type is `pytest.xfail`), none passed. Ids are `classname.name`
/// (or `name`), as the failure signature spells them. `None` when the text is no JUnit document.
pub fn outcomes_in_junit(text: &str) -> Option<Vec<TestOutcome>> {
    let mut out = Vec::new();
    let mut junit = false;
    // (depth of the open testcase, its index in `out`)
    let mut open: Option<(usize, usize)> = None;
    let mut depth = 0usize;
    for tag in xml::tags(text) {
        match tag {
            Tag::Start { name, attrs, empty } => {
                let get = |k: &str| attrs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                match name.as_str() {
                    "testsuites" | "testsuite" => junit = true,
                    "testcase" => {
                        junit = true;
                        let n = get("name").unwrap_or("");
                        let id = match get("classname") {
                            Some(c) if !c.is_empty() => format!("{c}.{n}"),
                            _ => n.to_string(),
                        };
                        out.push(TestOutcome { id, status: TestStatus::Passed, runner: "junit".into() });
                        if !empty {
                            open = Some((depth, out.len() - 1));
                        }
                    }
                    "failure" | "error" | "skipped" => {
                        if let Some((d, idx)) = open {
                            if depth == d + 1 {
                                let st = match name.as_str() {
                                    "failure" => TestStatus::Failed,
                                    "error" => TestStatus::Error,
                                    _ if get("type") == Some("pytest.xfail") => TestStatus::Xfailed,
                                    _ => TestStatus::Skipped,
                                };
                                if let Some(o) = out.get_mut(idx) {
                                    // A failure beats a skip written beside it; an error beats both.
                                    if rank(st) > rank(o.status) {
                                        o.status = st;
                                    }
                                }
                            }
                        }
                    }
                    _ => {}
                }
                if !empty {
                    depth += 1;
                }
            }
            Tag::End { name } => {
                depth = depth.saturating_sub(1);
                if name == "testcase" && open.is_some_and(|(d, _)| d == depth) {
                    open = None;
                }
            }
        }
    }
    junit.then_some(out)
}

fn rank(s: TestStatus) -> u8 {
    match s {
        TestStatus::Passed => 0,
        TestStatus::Skipped | TestStatus::Xfailed => 1,
        TestStatus::Failed => 2,
        TestStatus::Error => 3,
    }
}

/// The counts of a JUnit XML document (`None` when it is none).
pub fn count_junit(text: &str) -> Option<TestCounts> {
    let mut k = counts("junit");
    for o in outcomes_in_junit(text)? {
        bump(&mut k, o.status);
    }
    Some(k)
}

/// The counts of a run: its console output (stdout, then stderr) when it holds a recognised summary, else the
/// JUnit documents it wrote, added up. `None` when neither gives counts.
pub fn count_run(stdout: &[u8], stderr: &[u8], junit: &[&[u8]]) -> Option<TestCounts> {
    let mut console: Option<TestCounts> = None;
    for t in [stdout, stderr] {
        if let Some(k) = count_output(&String::from_utf8_lossy(t)) {
            console.get_or_insert_with(TestCounts::default).add(&k);
        }
    }
    if console.is_some() {
        return console;
    }
    let mut total: Option<TestCounts> = None;
    for doc in junit {
        if let Some(k) = count_junit(&String::from_utf8_lossy(doc)) {
            total.get_or_insert_with(TestCounts::default).add(&k);
        }
    }
    total
}

/// Per-test outcomes printed on the console: pytest `-v` (`path::test PASSED`) and `-rA`/xdist
/// (`PASSED path::test`), cargo test (`test name ... ok`), nextest (`PASS [ 0.1s] bin name`), go test `-v` and
/// `-json`, node's TAP (`ok 1 - name`, `# SKIP`, `# TODO`) and spec (`✔ name`, `✖`, `﹣`) reporters. An id
/// reported twice keeps its last status.
pub fn outcomes_in_output(text: &str) -> Vec<TestOutcome> {
    static PY_V: OnceLock<Regex> = OnceLock::new();
    static PY_RA: OnceLock<Regex> = OnceLock::new();
    static CARGO: OnceLock<Regex> = OnceLock::new();
    static NEXTEST: OnceLock<Regex> = OnceLock::new();
    static TAP: OnceLock<Regex> = OnceLock::new();
    static SPEC: OnceLock<Regex> = OnceLock::new();
    let py_v = re(&PY_V, r"^(\S+::.+?) (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)(?: .*)?$");
    let py_ra =
        re(&PY_RA, r"^(?:\[gw\d+\] \[\s*\d+%\] )?(PASSED|FAILED|XFAIL|XPASS|ERROR) (\S+::\S+|\S+\.py)(?: - .*)?$");
    let cargo = re(&CARGO, r"^test (\S+) \.\.\. (ok|FAILED|ignored)\b");
    let nextest = re(
        &NEXTEST,
        r"^\s*(PASS|FAIL|SKIP|SIGSEGV|SIGABRT|SIGKILL|TIMEOUT|LEAK|ABORT) \[\s*[\d.]+s\] (?:\(\s*\d+/\d+\) )?(.+)$",
    );
    let tap = re(&TAP, r"^\s*(ok|not ok) \d+ - (.+?)(?: # (SKIP|TODO)\b.*)?$");
    let spec = re(&SPEC, r"^\s*(✔|✖|﹣) (.+?)(?: \([\d.]+m?s\))?(?: # (SKIP|TODO)\b.*)?$");
    let mut out: Vec<TestOutcome> = Vec::new();
    let mut push = |runner: &str, id: String, status: TestStatus| {
        out.push(TestOutcome { id, status, runner: runner.to_string() });
    };
    let py_status = |s: &str| match s {
        "PASSED" | "XPASS" => TestStatus::Passed,
        "FAILED" => TestStatus::Failed,
        "SKIPPED" => TestStatus::Skipped,
        "XFAIL" => TestStatus::Xfailed,
        _ => TestStatus::Error,
    };
    for raw in text.lines() {
        let l = clean(raw);
        if let Some(c) = py_ra.captures(&l) {
            push("pytest", c[2].to_string(), py_status(&c[1]));
        } else if let Some(c) = py_v.captures(&l) {
            push("pytest", c[1].to_string(), py_status(&c[2]));
        } else if let Some(c) = cargo.captures(&l) {
            let st = match &c[2] {
                "ok" => TestStatus::Passed,
                "FAILED" => TestStatus::Failed,
                _ => TestStatus::Skipped,
            };
            push("cargo-test", c[1].to_string(), st);
        } else if let Some(c) = nextest.captures(&l) {
            let st = match &c[1] {
                "PASS" | "LEAK" => TestStatus::Passed,
                "SKIP" => TestStatus::Skipped,
                _ => TestStatus::Failed,
            };
            push("nextest", c[2].split_whitespace().collect::<Vec<_>>().join(" "), st);
        } else if let Some(c) = tap.captures(&l) {
            let st = match (c.get(3).map(|m| m.as_str()), &c[1]) {
                (Some("SKIP"), _) => TestStatus::Skipped,
                (Some(_), _) => TestStatus::Xfailed,
                (None, "ok") => TestStatus::Passed,
                (None, _) => TestStatus::Failed,
            };
            push("node-test", c[2].to_string(), st);
        } else if let Some(c) = spec.captures(&l).filter(|c| &c[2] != "failing tests:") {
            let st = match (c.get(3).map(|m| m.as_str()), &c[1]) {
                (Some("SKIP"), _) | (None, "﹣") => TestStatus::Skipped,
                (Some(_), _) => TestStatus::Xfailed,
                (None, "✔") => TestStatus::Passed,
                (None, _) => TestStatus::Failed,
            };
            push("node-test", c[2].to_string(), st);
        }
    }
    out.extend(go_outcomes(text));
    out.extend(plain::make_check_outcomes(text));
    out.extend(plain::ctest_outcomes(text));
    out.extend(plain::tap_outcomes(text));
    out.extend(plain::unittest_outcomes(text));
    // The last word on an id wins (nextest and pytest repeat failures in their final lists).
    let mut last: HashMap<(String, String), usize> = HashMap::new();
    for (i, o) in out.iter().enumerate() {
        last.insert((o.runner.clone(), o.id.clone()), i);
    }
    out.into_iter()
        .enumerate()
        .filter(|(i, o)| last.get(&(o.runner.clone(), o.id.clone())) == Some(i))
        .map(|(_, o)| o)
        .collect()
}

/// Why `text` gave no counts, when a runner is recognisable without its summary (a hint for the gate's detail).
pub fn missing_summary_hint(text: &str) -> Option<&'static str> {
    static GO_PKG: OnceLock<Regex> = OnceLock::new();
    let go_pkg = re(&GO_PKG, r"^(?:ok|FAIL|\?)\s+\S+\s+(?:[\d.]+s|\(cached\)|\[no test files\])");
    if text.lines().any(|l| go_pkg.is_match(&clean(l))) {
        return Some("go test without -v prints no per-test lines: run it with -v or -json");
    }
    if text.contains("test session starts") {
        return Some("pytest started but printed no summary line (interrupted, or its output was cut)");
    }
    if text.lines().any(|l| clean(l).starts_with("running ") && l.ends_with(" tests")) {
        return Some("cargo test started but printed no `test result:` line (a crash, or its output was cut)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(c: u64, p: u64, f: u64, s: u64, x: u64, e: u64, r: &[&str]) -> TestCounts {
        TestCounts {
            collected: c,
            passed: p,
            failed: f,
            skipped: s,
            xfailed: x,
            errors: e,
            runners: r.iter().map(|s| s.to_string()).collect(),
        }
    }

    const CARGO: &str = include_str!("../testdata/cargo_test.txt");
    const NEXTEST: &str = include_str!("../testdata/nextest.txt");
    const PYTEST: &str = include_str!("../testdata/pytest.txt");
    const PYTEST_Q: &str = include_str!("../testdata/pytest_q.txt");
    const PYTEST_V: &str = include_str!("../testdata/pytest_v_ra.txt");
    const PYTEST_DESEL: &str = include_str!("../testdata/pytest_deselected.txt");
    const JUNIT: &str = include_str!("../testdata/pytest_junit.xml");
    const GO_V: &str = include_str!("../testdata/go_test_v.txt");
    const GO_JSON: &str = include_str!("../testdata/go_test_json.txt");
    const NODE_TAP: &str = include_str!("../testdata/node_tap.txt");
    const NODE_SPEC: &str = include_str!("../testdata/node_spec.txt");

    #[test]
    fn pytest_real_output() {
        let want = k(7, 4, 1, 1, 1, 0, &["pytest"]);
        assert_eq!(count_output(PYTEST), Some(want.clone()));
        assert_eq!(count_output(PYTEST_Q), Some(want.clone()));
        assert_eq!(count_output(PYTEST_V), Some(want));
        assert_eq!(count_output(PYTEST_DESEL), Some(k(7, 0, 0, 7, 0, 0, &["pytest"])));
        assert_eq!(detect_runners(PYTEST), ["pytest"]);
    }

    #[test]
    fn pytest_summary_forms() {
        assert_eq!(
            count_output("=== 3 passed, 1 skipped, 2 xfailed in 0.12s ==="),
            Some(k(6, 3, 0, 1, 2, 0, &["pytest"]))
        );
        assert_eq!(count_output("3 passed, 1 skipped in 0.1s"), Some(k(4, 3, 0, 1, 0, 0, &["pytest"])));
        assert_eq!(count_output("no tests ran in 0.01s"), Some(k(0, 0, 0, 0, 0, 0, &["pytest"])));
        assert_eq!(count_output("==== no tests ran in 0.01s ====\n"), Some(k(0, 0, 0, 0, 0, 0, &["pytest"])));
        assert_eq!(
            count_output("\x1b[31m= 1 failed, 2 passed, 1 warning, 2 errors in 65.20s (0:01:05) =\x1b[0m"),
            Some(k(5, 2, 1, 0, 0, 2, &["pytest"]))
        );
        // Prose ending in "in 3s" is no summary.
        assert_eq!(count_output("downloaded 3 packages in 3s"), None);
        assert_eq!(count_output("3 passed, and then some in 0.1s"), None);
    }

    #[test]
    fn cargo_test_real_output_sums_every_binary() {
        // lib: 2 passed, 1 failed, 2 ignored; tests/it.rs: 1 passed; doc tests: 0.
        assert_eq!(count_output(CARGO), Some(k(6, 3, 1, 2, 0, 0, &["cargo-test"])));
        let o = outcomes_in_output(CARGO);
        let find = |id: &str| o.iter().find(|x| x.id == id).map(|x| x.status);
        assert_eq!(find("tests::broken"), Some(TestStatus::Failed));
        assert_eq!(find("tests::adds"), Some(TestStatus::Passed));
        assert_eq!(find("tests::net"), Some(TestStatus::Skipped));
        assert_eq!(find("integration_ok"), Some(TestStatus::Passed));
        assert_eq!(
            count_output(
                "test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s"
            ),
            Some(k(6, 5, 0, 1, 0, 0, &["cargo-test"]))
        );
    }

    #[test]
    fn nextest_real_output_ignores_the_captured_cargo_lines() {
        assert_eq!(count_output(NEXTEST), Some(k(6, 3, 1, 2, 0, 0, &["nextest"])));
        assert_eq!(detect_runners(NEXTEST), ["nextest"]);
        let o = outcomes_in_output(NEXTEST);
        let broken: Vec<&TestOutcome> = o.iter().filter(|x| x.id.contains("broken")).collect();
        assert_eq!(broken.len(), 1, "{o:?}");
        assert_eq!((broken[0].id.as_str(), broken[0].status), ("tinycrate tests::broken", TestStatus::Failed));
        assert!(o.iter().any(|x| x.id == "tinycrate::it integration_ok" && x.status == TestStatus::Passed));
        assert_eq!(
            count_output("     Summary [   0.1s] 5 tests run: 5 passed, 1 skipped"),
            Some(k(6, 5, 0, 1, 0, 0, &["nextest"]))
        );
        assert_eq!(
            count_output("Summary [ 2.0s] 3/5 tests run: 1 passed (1 slow), 1 failed, 1 timed out, 2 skipped"),
            Some(k(7, 1, 2, 2, 0, 0, &["nextest"]))
        );
        assert_eq!(count_output("Summary [ 0.0s] 1 test run: 1 passed"), Some(k(1, 1, 0, 0, 0, 0, &["nextest"])));
    }

    #[test]
    fn go_test_verbose_and_json() {
        // TestOK pass, TestBad fail, TestSkip skip, TestSub fail with one/two/three: pass/fail/skip.
        let want = k(7, 2, 3, 2, 0, 0, &["go-test"]);
        assert_eq!(count_output(GO_V), Some(want.clone()));
        assert_eq!(count_output(GO_JSON), Some(want));
        let o = outcomes_in_output(GO_V);
        assert!(o.iter().any(|x| x.id == "TestSub/two" && x.status == TestStatus::Failed));
        assert_eq!(outcomes_in_output(GO_JSON).len(), 7);
        assert_eq!(
            count_output("# example.com/x\n./a.go:3:1: syntax error\nFAIL\texample.com/x [build failed]\n"),
            Some(k(1, 0, 0, 0, 0, 1, &["go-test"]))
        );
        let quiet = "ok  \texample.com/x\t0.002s\n";
        assert_eq!(count_output(quiet), None);
        assert!(missing_summary_hint(quiet).unwrap().contains("-v"));
    }

    #[test]
    fn node_tap_and_spec() {
        let want = k(6, 2, 2, 1, 1, 0, &["node-test"]);
        assert_eq!(count_output(NODE_TAP), Some(want.clone()));
        assert_eq!(count_output(NODE_SPEC), Some(want));
        let o = outcomes_in_output(NODE_TAP);
        let find = |o: &[TestOutcome], id: &str| o.iter().find(|x| x.id == id).map(|x| x.status);
        assert_eq!(find(&o, "ok one"), Some(TestStatus::Passed));
        assert_eq!(find(&o, "inner bad"), Some(TestStatus::Failed));
        assert_eq!(find(&o, "skipped one"), Some(TestStatus::Skipped));
        assert_eq!(find(&o, "todo one"), Some(TestStatus::Xfailed));
        let o = outcomes_in_output(NODE_SPEC);
        assert_eq!(find(&o, "ok one"), Some(TestStatus::Passed));
        assert_eq!(find(&o, "bad one"), Some(TestStatus::Failed));
        assert_eq!(find(&o, "skipped one"), Some(TestStatus::Skipped));
        assert_eq!(find(&o, "todo one"), Some(TestStatus::Xfailed));
        assert_eq!(find(&o, "failing tests:"), None, "the spec reporter's closing list is no test");
    }

    #[test]
    fn junit_real_document() {
        assert_eq!(count_junit(JUNIT), Some(k(7, 4, 1, 1, 1, 0, &["junit"])));
        let o = outcomes_in_junit(JUNIT).unwrap();
        assert_eq!(o[1].id, "tests.test_a.test_bad");
        assert_eq!(o[1].status, TestStatus::Failed);
        assert_eq!(o[3].status, TestStatus::Xfailed);
        assert_eq!(count_junit("<testsuites/>"), Some(k(0, 0, 0, 0, 0, 0, &["junit"])));
        assert_eq!(count_junit("not xml at all"), None);
        let tricky = r#"<testsuite><testcase name="a"><system-out><![CDATA[<failure>]]></system-out></testcase>
<testcase name="b"><error message="x"/><skipped/></testcase><!-- <testcase name="c"/> --></testsuite>"#;
        let o = outcomes_in_junit(tricky).unwrap();
        assert_eq!(o.len(), 2);
        assert_eq!((o[0].status, o[1].status), (TestStatus::Passed, TestStatus::Error));
    }

    #[test]
    fn pytest_outcomes_verbose_and_ra() {
        let o = outcomes_in_output(PYTEST_V);
        let find = |id: &str| o.iter().find(|x| x.id == id).map(|x| x.status);
        assert_eq!(find("tests/test_a.py::test_ok"), Some(TestStatus::Passed));
        assert_eq!(find("tests/test_a.py::test_bad"), Some(TestStatus::Failed));
        assert_eq!(find("tests/test_a.py::test_skipped"), Some(TestStatus::Skipped));
        assert_eq!(find("tests/test_a.py::test_xf"), Some(TestStatus::Xfailed));
        assert_eq!(find("tests/test_a.py::test_xp"), Some(TestStatus::Passed));
        assert_eq!(find("tests/test_a.py::test_p[2]"), Some(TestStatus::Passed));
        // Without -v or -rA pytest names only failures.
        let o = outcomes_in_output(PYTEST);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].status, TestStatus::Failed);
    }

    #[test]
    fn run_prefers_the_console_then_junit() {
        assert_eq!(count_run(b"", b"", &[JUNIT.as_bytes()]), count_junit(JUNIT));
        assert_eq!(count_run(PYTEST.as_bytes(), b"", &[JUNIT.as_bytes()]), count_output(PYTEST));
        assert_eq!(count_run(b"hello", b"world", &[b"junk"]), None);
        // Two runners in one output add up.
        let both = format!("{PYTEST_Q}\n{CARGO}");
        assert_eq!(count_output(&both), Some(k(13, 7, 2, 3, 1, 0, &["cargo-test", "pytest"])));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC{0,400}") {
            let _ = count_output(&s);
            let _ = count_junit(&s);
            let _ = outcomes_in_output(&s);
            let _ = missing_summary_hint(&s);
            let _ = count_run(s.as_bytes(), s.as_bytes(), &[s.as_bytes()]);
        }

        #[test]
        fn summary_shaped_lines_never_panic(
            n in proptest::collection::vec(0u64..u64::MAX, 1..6),
            words in proptest::collection::vec("(passed|failed|skipped|xfailed|errors|ignored|todo|tests|pass|fail)", 1..6),
        ) {
            let body: Vec<String> = n.iter().zip(&words).map(|(n, w)| format!("{n}{n} {w}")).collect();
            let text = format!(
                "== {} in 0.1s ==\ntest result: ok. {} passed; 1 failed; 2 ignored; 0 measured; 0 filtered out\nSummary [ 1s] {}/{} tests run: {}\n# tests {}\n# pass {}\n",
                body.join(", "), n[0], n[0], n[0], body.join(", "), n[0], n[0]
            );
            let _ = count_output(&text);
            let _ = outcomes_in_output(&text);
        }

        #[test]
        fn damaged_samples_never_panic(cut in any::<proptest::sample::Index>(), at in any::<proptest::sample::Index>(), b in any::<u8>()) {
            for s in [CARGO, NEXTEST, PYTEST_V, JUNIT, GO_V, GO_JSON, NODE_TAP, NODE_SPEC] {
                let mut bytes = s.as_bytes().to_vec();
                let i = at.index(bytes.len());
                bytes[i] = b;
                bytes.truncate(cut.index(bytes.len() + 1));
                let t = String::from_utf8_lossy(&bytes);
                let _ = count_output(&t);
                let _ = count_junit(&t);
                let _ = outcomes_in_output(&t);
            }
        }
    }
}
