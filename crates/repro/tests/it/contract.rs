//! `repro contract verify`: the `[contract]` of a project file run cold in a fresh copy, with real runs; and
//! repro's own contract.

use std::fs;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::*;

fn contract(dir: &Path, args: &[&str]) -> Output {
    let mut c = repro();
    c.current_dir(dir).args(["contract", "verify"]).args(args);
    c.timeout(HANG_GUARD).output().expect("repro runs")
}

fn project(toml: &str) -> tempfile::TempDir {
    let p = tempfile::Builder::new().prefix("repro-contract-").tempdir().unwrap();
    assert!(std::process::Command::new("git").args(["init", "-q"]).current_dir(p.path()).status().unwrap().success());
    fs::write(p.path().join("repro.toml"), toml).unwrap();
    fs::create_dir(p.path().join("src")).unwrap();
    fs::write(p.path().join("src/app.sh"), "echo app\n").unwrap();
    fs::write(p.path().join(".gitignore"), "ignored/\n").unwrap();
    fs::create_dir(p.path().join("ignored")).unwrap();
    fs::write(p.path().join("ignored/cache"), "not copied\n").unwrap();
    p
}

#[test]
fn a_contract_runs_setup_diagnose_and_verify_cold_without_touching_the_project() {
    let p = project(
        r#"
[run]
env = ["GREETING=hello"]

[contract]
setup = ["mkdir -p build && echo 42 > build/answer"]
diagnose = [["uname", "-m"], "exit 5"]
verify = [
  { name = "answer", run = "test \"$(cat build/answer)\" = 42" },
  { name = "env from [run]", run = "test \"$GREETING\" = hello" },
  { name = "ignored files are not copied", run = "test ! -e ignored/cache && test -f src/app.sh" },
]
"#,
    );
    let o = contract(p.path(), &["--json"]);
    assert_code(&o, 0);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["passed"], true, "{r}");
    let steps = r["steps"].as_array().unwrap();
    let stages: Vec<&str> = steps.iter().map(|s| s["stage"].as_str().unwrap()).collect();
    assert_eq!(stages, ["setup", "diagnose", "diagnose", "verify", "verify", "verify"]);
    // A diagnose step's facts are in the report; its failure is not fatal.
    assert_eq!(steps[1]["stdout_tail"].as_str().unwrap().trim(), std::env::consts::ARCH);
    assert_eq!((steps[2]["outcome"].as_str(), steps[2]["exit_status"].as_i64()), (Some("failed"), Some(5)));
    // Every step is a run of its own, recorded.
    for s in steps {
        assert!(Path::new(s["run_dir"].as_str().unwrap()).join("run.json").exists(), "{s}");
    }
    // The project itself is untouched and the copy is gone; the report is on disk.
    assert!(!p.path().join("build").exists());
    let dir = p.path().join(".repro/contracts").join(r["id"].as_str().unwrap());
    assert!(!dir.join("tree").exists());
    let on_disk: Value = serde_json::from_slice(&fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(on_disk, r);
}

#[test]
fn a_failing_setup_skips_the_rest_and_a_failing_verify_step_is_named() {
    let p = project("[contract]\nsetup = [\"exit 3\"]\nverify = [\"true\"]\n");
    let o = contract(p.path(), &["--json"]);
    assert_code(&o, 1);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["steps"][0]["exit_status"], 3);
    assert_eq!(r["steps"][1]["outcome"], "skipped");

    let p = project(
        "[contract]\nverify = [{ name = \"unit tests\", run = \"echo 'boom: 1 failed' >&2; exit 1\" }, \"true\"]\n",
    );
    let o = contract(p.path(), &[]);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("verify   unit tests: FAILED with exit 1"), "{err}");
    assert!(err.contains("! boom: 1 failed"), "{err}");
    assert!(err.contains("contract FAILED (2 steps, 1 failed)"), "{err}");
}

#[test]
fn a_bad_or_missing_contract_is_refused_with_the_file_and_line() {
    let p = project("[contract]\nverify = [\"true\"]\nsteup = [\"x\"]\n");
    let o = contract(p.path(), &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("repro.toml:3:1: unknown key `steup`"), "{}", stderr(&o));
    let p = project("[run]\nseed = 1\n");
    let o = contract(p.path(), &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("no [contract] table"), "{}", stderr(&o));
    let p = project("[contract]\nsetup = [\"true\"]\n");
    let o = contract(p.path(), &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("has no verify step"), "{}", stderr(&o));
    let empty = tempfile::tempdir().unwrap();
    let o = contract(empty.path(), &[]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("no repro.toml"), "{}", stderr(&o));
}

/// repro's own repository's contract (repro.toml at its root) passes cold.
#[test]
fn repros_own_contract_passes_cold() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let state = tempfile::tempdir().unwrap();
    let o = contract(
        &root,
        &[
            "--config",
            root.join("repro.toml").to_str().unwrap(),
            "--state-dir",
            state.path().to_str().unwrap(),
            "--json",
        ],
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_code(&o, 0);
    assert_eq!(r["passed"], true, "{r}");
    assert!(r["steps"].as_array().unwrap().iter().any(|s| s["name"] == "formatting" && s["outcome"] == "passed"));
}
