//! The failure signature: what makes two failures "the same failure".
//!
//! It is the exit status, the last lines of stderr after normalization (addresses, temporary paths, durations
//! and pids replaced by placeholders), and the failing test ids when the output is recognized (pytest, cargo
//! test, cargo nextest, go test, JUnit XML files the command wrote).

use std::sync::OnceLock;

use regex::Regex;

/// How many non-empty stderr lines the signature keeps.
pub const STDERR_TAIL_LINES: usize = 8;

pub use repro_model::manifest::Signature;

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).unwrap_or_else(|e| panic!("built-in pattern {pattern}: {e}")))
}

/// Normalizes one line of output: strips ANSI escapes and trailing blanks, and replaces hex addresses with
/// `<addr>`, paths under /tmp, /var/tmp and /dev/shm with `<tmp>`, durations with `<dur>` and process ids with
/// `<pid>`. Idempotent.
pub fn normalize_line(line: &str) -> String {
    static ANSI: OnceLock<Regex> = OnceLock::new();
    static ADDR: OnceLock<Regex> = OnceLock::new();
    static TMP: OnceLock<Regex> = OnceLock::new();
    static DUR: OnceLock<Regex> = OnceLock::new();
    static PID: OnceLock<Regex> = OnceLock::new();
    let s = re(&ANSI, r"\x1b\[[0-9;?]*[ -/]*[@-~]").replace_all(line, "");
    let s = re(&ADDR, r"\b0[xX][0-9a-fA-F]+\b").replace_all(&s, "<addr>");
    let s = re(&TMP, r"(/var/tmp|/tmp|/dev/shm)/[^\s/:'\x22,;()\[\]]+").replace_all(&s, "<tmp>");
    let s = re(&DUR, r"\b\d+(\.\d+)?\s?(ns|us|µs|ms|s|sec|secs|seconds|second|min|minutes)\b").replace_all(&s, "<dur>");
    let s = re(&PID, r"(?i)\b(pid|process|thread|tid)([ =:#]+)\d+\b").replace_all(&s, "${1}${2}<pid>");
    s.trim_end().to_string()
}

/// The last [`STDERR_TAIL_LINES`] non-empty lines of `stderr`, normalized.
pub fn stderr_tail(stderr: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<String> = text.lines().map(normalize_line).filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
    lines[start..].to_vec()
}

/// Failing test ids found in the console output of known runners: `(framework, id)`.
pub fn failing_tests_in_output(text: &str) -> Vec<(&'static str, String)> {
    static PYTEST: OnceLock<Regex> = OnceLock::new();
    static CARGO: OnceLock<Regex> = OnceLock::new();
    static NEXTEST: OnceLock<Regex> = OnceLock::new();
    static GO: OnceLock<Regex> = OnceLock::new();
    let mut out = Vec::new();
    for raw in text.lines() {
        let line = raw.trim_end();
        if let Some(c) = re(&PYTEST, r"^(?:FAILED|ERROR) (\S+::\S+|\S+\.py)(?: - .*)?$").captures(line) {
            out.push(("pytest", c[1].to_string()));
        } else if let Some(c) = re(&CARGO, r"^test (\S+) \.\.\. FAILED$").captures(line) {
            out.push(("cargo-test", c[1].to_string()));
        } else if let Some(c) =
            re(&NEXTEST, r"^\s*(?:TRY \d+ )?(?:FAIL|SIGSEGV|SIGABRT|SIGKILL|ABORT|TIMEOUT) \[\s*[\d.]+s\] (?:\(\s*\d+/\d+\)\s+)?(.+)$").captures(line)
        {
            out.push(("nextest", c[1].split_whitespace().collect::<Vec<_>>().join(" ")));
        } else if let Some(c) = re(&GO, r"^\s*--- FAIL: (\S+)").captures(line) {
            out.push(("go-test", c[1].to_string()));
        }
    }
    out
}

/// Failing test cases of a JUnit XML document (`<testcase>` elements holding `<failure>` or `<error>`), as
/// `classname.name` (or `name` without a class name).
pub fn failing_tests_in_junit(xml: &str) -> Vec<String> {
    static CASE: OnceLock<Regex> = OnceLock::new();
    static ATTR: OnceLock<Regex> = OnceLock::new();
    let case = re(&CASE, r"(?s)<testcase\b([^>]*?)(?:/>|>(.*?)</testcase>)");
    let attr = re(&ATTR, r#"\b(name|classname)\s*=\s*(?:"([^"]*)"|'([^']*)')"#);
    let mut out = Vec::new();
    for c in case.captures_iter(xml) {
        let body = c.get(2).map(|m| m.as_str()).unwrap_or("");
        if !(body.contains("<failure") || body.contains("<error")) {
            continue;
        }
        let (mut name, mut class) = (None, None);
        for a in attr.captures_iter(&c[1]) {
            // The pattern always captures the value, quoted either way (an empty value is empty).
            let v = a.get(2).or(a.get(3)).map(|m| m.as_str().to_string()).unwrap_or_default();
            if &a[1] == "name" {
                name = Some(v);
            } else {
                class = Some(v);
            }
        }
        if let Some(n) = name {
            out.push(match class {
                Some(c) if !c.is_empty() => format!("{c}.{n}"),
                _ => n,
            });
        }
    }
    out
}

/// The signature of a finished run. `junit` holds the JUnit XML files the command wrote.
pub fn compute(exit_status: i32, stdout: &[u8], stderr: &[u8], junit: &[&[u8]]) -> Signature {
    let mut frameworks = Vec::new();
    let mut tests = Vec::new();
    for text in [stdout, stderr] {
        for (fw, id) in failing_tests_in_output(&String::from_utf8_lossy(text)) {
            frameworks.push(fw.to_string());
            tests.push(id);
        }
    }
    // A test the console already names is not named again in JUnit's dotted spelling (`tests/t.py::test_x` is
    // `tests.t.test_x`): a run that also writes a report (`repro repair` adds `--junitxml`) fails the same tests.
    let dotted: Vec<String> =
        tests.iter().map(|t| t.replace(".py::", ".").replace("::", ".").replace('/', ".")).collect();
    for doc in junit {
        let found = failing_tests_in_junit(&String::from_utf8_lossy(doc));
        if !found.is_empty() {
            frameworks.push("junit".into());
        }
        tests.extend(found.into_iter().filter(|id| !dotted.contains(id)));
    }
    frameworks.sort();
    frameworks.dedup();
    tests.sort();
    tests.dedup();
    Signature { exit_status, stderr_tail: stderr_tail(stderr), test_frameworks: frameworks, failing_tests: tests }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn normalizes_addresses_tmp_paths_durations_and_pids() {
        assert_eq!(
            normalize_line("\x1b[31mSegfault at 0x7ffd1234abcd in /tmp/tmp.Xy12/a.out pid 4242 after 1.25s\x1b[0m  "),
            "Segfault at <addr> in <tmp>/a.out pid <pid> after <dur>"
        );
        assert_eq!(normalize_line("took 35ms (thread #12)"), "took <dur> (thread #<pid>)");
        assert_eq!(
            normalize_line("  File \"/src/a.py\", line 3, in <module>"),
            "  File \"/src/a.py\", line 3, in <module>"
        );
    }

    #[test]
    fn tail_keeps_last_non_empty_lines() {
        let err: String = (1..=20).map(|i| format!("line {i}\n\n")).collect();
        let t = stderr_tail(err.as_bytes());
        assert_eq!(t.len(), STDERR_TAIL_LINES);
        assert_eq!(t.last().map(String::as_str), Some("line 20"));
        assert_eq!(t[0], "line 13");
    }

    #[test]
    fn recognizes_pytest_cargo_nextest_go() {
        let out = "\
=========================== short test summary info ============================
FAILED tests/test_math.py::test_add - assert 3 == 4
FAILED tests/test_math.py::TestX::test_y[1-2]
ERROR tests/test_db.py::test_conn - ConnectionError
test parse::tests::rejects_empty ... FAILED
test parse::tests::accepts ... ok
        FAIL [   0.004s] mycrate::it tests::slow_one
        FAIL [   0.012s] ( 3/12) mycrate::it tests::counted
  TRY 2 FAIL [   0.001s] (4/12) mycrate tests::retried
--- FAIL: TestHandler (0.00s)
    --- FAIL: TestHandler/sub_case (0.00s)
";
        let got: Vec<(&str, String)> = failing_tests_in_output(out);
        let ids: Vec<&str> = got.iter().map(|(_, i)| i.as_str()).collect();
        assert_eq!(
            ids,
            [
                "tests/test_math.py::test_add",
                "tests/test_math.py::TestX::test_y[1-2]",
                "tests/test_db.py::test_conn",
                "parse::tests::rejects_empty",
                "mycrate::it tests::slow_one",
                "mycrate::it tests::counted",
                "mycrate tests::retried",
                "TestHandler",
                "TestHandler/sub_case"
            ]
        );
        let fws: Vec<&str> = got.iter().map(|(f, _)| *f).collect();
        assert_eq!(fws[0], "pytest");
        assert_eq!(fws[3], "cargo-test");
        assert_eq!(fws[4], "nextest");
        assert_eq!(fws[5], "nextest");
        assert_eq!(fws[7], "go-test");
    }

    #[test]
    fn nextest_s_counter_is_no_part_of_the_test_id() {
        // cargo-nextest 0.9.143's output for a crate `nx` with one passing and one failing test (the failing one
        // is listed again in the summary; libtest's own lines are indented under it).
        let out = b"        PASS [   0.005s] (1/2) nx tests::ok_one
        FAIL [   0.106s] (2/2) nx tests::bad_one
    test tests::bad_one ... FAILED
    test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.10s
     Summary [   0.107s] 2 tests run: 1 passed, 1 failed, 0 skipped
        FAIL [   0.106s] (2/2) nx tests::bad_one
";
        let s = compute(100, b"", out, &[]);
        assert_eq!(s.failing_tests, ["nx tests::bad_one"]);
        assert_eq!(s.test_frameworks, ["nextest"]);
    }

    #[test]
    fn a_junit_failure_the_console_names_is_one_test() {
        let out = b"FAILED tests/test_calc.py::test_total - assert 3 == 6\n";
        let xml = br#"<testsuite><testcase classname="tests.test_calc" name="test_total"><failure/></testcase>
            <testcase classname="tests.test_calc" name="test_other"><failure/></testcase></testsuite>"#;
        let s = compute(1, out, b"", &[xml]);
        assert_eq!(s.failing_tests, ["tests.test_calc.test_other", "tests/test_calc.py::test_total"]);
        assert_eq!(s.failing_tests.len(), 2);
        assert_eq!(compute(1, out, b"", &[]).failing_tests, ["tests/test_calc.py::test_total"]);
    }

    #[test]
    fn recognizes_junit_failures_and_errors() {
        let xml = r#"<?xml version="1.0"?><testsuites><testsuite name="s">
<testcase classname="pkg.Mod" name="ok_one" time="0.1"/>
<testcase classname="pkg.Mod" name="bad_one" time="0.2"><failure message="x">boom</failure></testcase>
<testcase name='err_one'><error/></testcase>
<testcase classname="pkg.Mod" name="skipped"><skipped/></testcase>
</testsuite></testsuites>"#;
        assert_eq!(failing_tests_in_junit(xml), ["pkg.Mod.bad_one", "err_one"]);
    }

    #[test]
    fn compute_and_differences() {
        let a = compute(1, b"FAILED t.py::test_a - x\n", b"Traceback\nAssertionError: 0x1f\n", &[]);
        assert_eq!(a.failing_tests, ["t.py::test_a"]);
        assert_eq!(a.test_frameworks, ["pytest"]);
        assert_eq!(a.stderr_tail, ["Traceback", "AssertionError: <addr>"]);
        let same = compute(1, b"FAILED t.py::test_a - y\n", b"Traceback\nAssertionError: 0x2e\n", &[]);
        assert!(a.differences(&same).is_empty());
        let other = compute(2, b"", b"Traceback\nKeyError\n", &[]);
        let d = a.differences(&other);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].contains("recorded 1, got 2"));
        assert!(d[2].contains("AssertionError"));
    }

    proptest! {
        #[test]
        fn normalization_is_idempotent(s in "\\PC{0,80}") {
            let once = normalize_line(&s);
            prop_assert_eq!(normalize_line(&once), once.clone());
        }

        #[test]
        fn addresses_pids_and_durations_do_not_matter(a in 1u64.., b in 1u64.., p in 1u32..4_000_000, q in 1u32..4_000_000,
                                                        ms in 0u32..100_000, ms2 in 0u32..100_000) {
            let l1 = format!("fault at {a:#x} in pid {p} after {ms}ms");
            let l2 = format!("fault at {b:#x} in pid {q} after {ms2}ms");
            prop_assert_eq!(normalize_line(&l1), normalize_line(&l2));
        }

        #[test]
        fn other_text_is_kept(word in "[A-Za-z]{1,20}") {
            let line = format!("Error: {}", word);
            prop_assert!(normalize_line(&line).contains(&word));
        }
    }
}
