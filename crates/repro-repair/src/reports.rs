//! The files a test harness writes its results in, besides the console and JUnit XML: automake's parallel
//! harness (`*.trs` per test, `test-suite.log`, [`crate::automake`]). Each file is told apart by its name.

use repro_model::repair::{TestCounts, TestOutcome};

use crate::automake;
use crate::gates::ReportFile;

/// Whether a run's working directory file at `path` (relative) is one of the harness files read here.
pub fn is_report(path: &str) -> bool {
    path.ends_with(".trs") || file_name(path) == "test-suite.log"
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The per-test outcomes of `files`: each `.trs` file's test (named by its path without `.trs`, relative to the
/// working directory as the harness's console lines name it when `make check` runs there), then the tests a
/// `test-suite.log` names that no `.trs` file gave.
pub fn outcomes(files: &[ReportFile]) -> Vec<TestOutcome> {
    let mut out: Vec<TestOutcome> = Vec::new();
    for f in files {
        if let Some(id) = f.path.strip_suffix(".trs") {
            out.extend(automake::outcome_in_trs(id, &String::from_utf8_lossy(&f.text)));
        }
    }
    for f in files.iter().filter(|f| file_name(&f.path) == "test-suite.log") {
        let dir = f.path.strip_suffix("test-suite.log").unwrap_or("");
        for mut o in automake::outcomes_in_suite_log(&String::from_utf8_lossy(&f.text)) {
            o.id = format!("{dir}{}", o.id);
            if !out.iter().any(|x| x.id == o.id) {
                out.push(o);
            }
        }
    }
    out
}

/// The counts of `files`: the `test-suite.log` summaries added up, else the `.trs` outcomes counted. `None` when
/// no file gives any.
pub fn counts(files: &[ReportFile]) -> Option<TestCounts> {
    let mut total: Option<TestCounts> = None;
    for f in files.iter().filter(|f| file_name(&f.path) == "test-suite.log") {
        if let Some(k) = automake::count_suite_log(&String::from_utf8_lossy(&f.text)) {
            total.get_or_insert_with(TestCounts::default).add(&k);
        }
    }
    if total.is_some() {
        return total;
    }
    let trs: Vec<TestOutcome> = files
        .iter()
        .filter_map(|f| Some((f.path.strip_suffix(".trs")?, f)))
        .filter_map(|(id, f)| automake::outcome_in_trs(id, &String::from_utf8_lossy(&f.text)))
        .collect();
    if trs.is_empty() {
        return None;
    }
    let mut k = TestCounts { runners: vec!["automake".into()], ..Default::default() };
    for o in trs {
        crate::counts::bump(&mut k, o.status);
    }
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use repro_model::repair::TestStatus;

    fn file(path: &str, text: &str) -> ReportFile {
        ReportFile { path: path.into(), text: text.as_bytes().to_vec() }
    }

    #[test]
    fn trs_files_then_the_suite_log() {
        let files = [
            file("tests/t_one.sh.trs", ":test-result: PASS\n:global-test-result: PASS\n"),
            file("tests/t_total.sh.trs", ":test-result: FAIL\n:global-test-result: FAIL\n"),
            file("tests/test-suite.log", "# TOTAL: 3\n# PASS:  1\n# FAIL:  2\n\nFAIL: t_total.sh\n================\n\nFAIL: t_x.sh\n============\n"),
            file("notes.log", "FAIL: nothing\n=============\n"),
        ];
        let got: Vec<(String, TestStatus)> = outcomes(&files).into_iter().map(|o| (o.id, o.status)).collect();
        assert_eq!(
            got,
            [
                ("tests/t_one.sh".to_string(), TestStatus::Passed),
                ("tests/t_total.sh".to_string(), TestStatus::Failed),
                ("tests/t_x.sh".to_string(), TestStatus::Failed),
            ]
        );
        let k = counts(&files).unwrap();
        assert_eq!((k.collected, k.passed, k.failed), (3, 1, 2), "the suite log's summary first");
        let k = counts(&files[..2]).unwrap();
        assert_eq!((k.collected, k.passed, k.failed, k.runners.as_slice()), (2, 1, 1, &["automake".to_string()][..]));
        assert_eq!(counts(&files[3..]), None);
        assert!(outcomes(&[]).is_empty());
        assert!(is_report("a/b.sh.trs") && is_report("test-suite.log") && is_report("sub/test-suite.log"));
        assert!(!is_report("my-test-suite.log.txt") && !is_report("x.log"));
    }
}
