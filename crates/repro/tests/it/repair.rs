//! `repro repair`: the example project's planted bug (examples/repair), a real pack of its failing pytest run, a
//! deterministic agent that fixes it in two iterations (accepted, the contract's tests passing too) and one that
//! skips the failing test (refused, by the gates' names). Every step is a real sandboxed run.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::*;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/repair")
}

/// A copy of the example project and a pack of its failing tests.
fn captured() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::Builder::new().prefix("repro-repair-").tempdir().unwrap();
    let project = t.path().join("project");
    let st = std::process::Command::new("cp").arg("-r").arg(example().join("project")).arg(&project).status();
    assert!(st.unwrap().success());
    let _ = fs::remove_dir_all(project.join(".repro"));
    let pack = t.path().join("failure.repro");
    let o = repro()
        .current_dir(&project)
        .args(["capture", "-o"])
        .arg(&pack)
        .args(["--", "/usr/bin/python3", "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests"])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "the planted bug fails the tests: {}", stderr(&o));
    assert!(stderr(&o).contains("failing: tests/test_calc.py::test_total"), "{}", stderr(&o));
    (t, pack)
}

fn repair(t: &Path, pack: &Path, agent: &str, extra: &[&str]) -> (Output, Value) {
    let agent = format!("sh {}", example().join(agent).canonicalize().unwrap().display());
    let o = repro()
        .current_dir(t.join("project"))
        .arg("repair")
        .arg(pack)
        .args(["--agent", &agent, "--json"])
        .args(extra)
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    (o, v)
}

#[test]
fn an_honest_agent_fixes_the_planted_bug_in_two_iterations() {
    let (t, pack) = captured();
    let out = t.path().join("fix.patch");
    let keys = t.path().join("ci");
    let o = repro().arg("key").arg("gen").arg("--out").arg(&keys).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let key = keys.with_extension("key");
    let (o, s) =
        repair(t.path(), &pack, "agent-fix.sh", &["-o", out.to_str().unwrap(), "--key", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{s:#}");
    assert_eq!(s["outcome"], "fixed");
    assert_eq!(s["failing_tests"], serde_json::json!(["tests/test_calc.py::test_total"]));
    assert_eq!(s["baseline_counts"]["passed"], 2, "{s:#}");
    let its = s["iterations"].as_array().unwrap();
    assert_eq!(its.len(), 2, "{s:#}");
    assert_eq!(its[0]["accepted"], false);
    assert_eq!(its[0]["failure_gone"], false);
    assert_eq!(its[1]["accepted"], true);
    let replays = its[1]["replays"].as_array().unwrap();
    assert!(replays.len() == 3 && replays.iter().all(|r| r["exit_status"] == 0), "{s:#}");
    assert_eq!(its[1]["contract"]["passed"], true, "the contract's tests ran on the fix: {s:#}");
    assert!(its[1]["gates"].as_array().unwrap().iter().all(|g| g["fired"] == false), "{s:#}");
    // The patch applies to the original project and makes its tests pass natively; the project is untouched.
    let patch = fs::read_to_string(&out).unwrap();
    assert!(patch.contains("+    for i in range(len(items)):"), "{patch}");
    let project = t.path().join("project");
    assert!(fs::read_to_string(project.join("src/calc.py")).unwrap().contains("range(len(items) - 1)"));
    let ok = std::process::Command::new("git").args(["apply", "--check"]).arg(&out).current_dir(&project).status();
    assert!(ok.unwrap().success(), "git apply --check {patch}");

    // The signed statement that the fix was verified: checked against the pack and the patch.
    let signed = PathBuf::from(s["attestation"].as_str().unwrap_or_else(|| panic!("no attestation: {s:#}")));
    let fix = PathBuf::from(s["patch"].as_str().unwrap());
    let public = keys.with_extension("pub");
    let verify = |file: &Path| {
        repro()
            .args(["attest", "verify"])
            .arg(&signed)
            .arg("--key")
            .arg(&public)
            .arg("--pack")
            .arg(&pack)
            .arg("--file")
            .arg(file)
            .output()
            .unwrap()
    };
    let o = verify(&fix);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    for want in [
        "https://slsa.dev/verification_summary/v1",
        "PASSED (REPRO_REPAIR_VERIFIED)",
        "the fix held: 3/3 runs passed in environment blake3:",
        "iteration 2 of 2",
        "fix.patch sha256:",
        "contract   verify passed",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    for gate in ["protected-path-changed", "masking-construct", "tests-skipped-rose", "failing-test-missing"] {
        assert!(text.lines().any(|l| l.starts_with("gates      passed:") && l.contains(gate)), "{gate}: {text}");
    }
    // A patch changed after signing is refused, naming the file.
    let edited = t.path().join("edited").join("fix.patch");
    fs::create_dir_all(edited.parent().unwrap()).unwrap();
    fs::write(&edited, format!("{patch}\n")).unwrap();
    let o = verify(&edited);
    assert_ne!(o.status.code(), Some(0), "an edited patch verified: {}", stdout(&o));
    assert!(stderr(&o).contains("fix.patch"), "{}", stderr(&o));
}

#[test]
fn an_agent_that_skips_the_failing_test_is_stopped_by_the_gates() {
    let (t, pack) = captured();
    let (o, s) = repair(t.path(), &pack, "agent-cheat.sh", &["--max-iterations", "2"]);
    assert_eq!(o.status.code(), Some(1), "{s:#}");
    assert_eq!(s["outcome"], "iterations-exhausted");
    let it = &s["iterations"][0];
    assert_eq!(it["failure_gone"], true, "skipping the test makes the replays pass: {s:#}");
    assert_eq!(it["accepted"], false);
    let fired: Vec<&str> = s["gates_fired"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for g in ["protected-path-changed", "masking-construct", "tests-skipped-rose", "failing-test-missing"] {
        assert!(fired.contains(&g), "{g} did not fire: {fired:?}");
    }
    assert!(s.get("patch").is_none());
    let text = String::from_utf8_lossy(&o.stderr);
    assert!(!text.contains("panicked"), "{text}");
}

#[test]
fn a_missing_pack_or_agent_is_a_usage_error() {
    let t = tempfile::tempdir().unwrap();
    let o = repro().current_dir(t.path()).args(["repair", "nope.repro", "--agent", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope.repro: no such pack file"), "{}", stderr(&o));
    fs::write(t.path().join("p.repro"), "x").unwrap();
    let o = repro().current_dir(t.path()).args(["repair", "p.repro", "--agent", " "]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--agent: expected a command"), "{}", stderr(&o));
}

#[test]
fn an_agent_still_running_when_the_time_budget_runs_out_is_stopped() {
    let (t, pack) = captured();
    let started = std::time::Instant::now();
    // A busy loop: a sleep would cost no wall time under the supervisor.
    let o = repro()
        .current_dir(t.path().join("project"))
        .arg("repair")
        .arg(&pack)
        .args(["--agent", "while :; do :; done", "--time-budget", "4s", "--json"])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    let took = started.elapsed();
    let s: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert_eq!(o.status.code(), Some(1), "{s:#}");
    assert_eq!(s["outcome"], "time-exhausted", "{s:#}");
    let its = s["iterations"].as_array().unwrap();
    assert_eq!(its.len(), 1, "{s:#}");
    let why = its[0]["refused_because"][0].as_str().unwrap();
    assert!(why.contains("time budget (4 s) ran out while it ran"), "{why}");
    assert!(its[0]["replays"].as_array().unwrap().is_empty(), "a stopped agent's change is not judged: {s:#}");
    // The budget, the baseline replay, and at most the SIGTERM grace: not the HANG_GUARD.
    assert!(took < std::time::Duration::from_secs(40), "took {took:?}");
}
