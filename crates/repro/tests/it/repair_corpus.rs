//! The repair corpus (tests/repair-corpus): one project per runner (pytest with its default output and with
//! `-q`, unittest, `make check` printing `PASS x`/`FAIL x`, `make check` running a TAP script, `node --test`,
//! plain `go test ./...`, `env PATH=$HOME/.cargo/bin:/usr/bin:/bin cargo test` with rustup's cargo, pytest with
//! parametrized tests in a class, automake's parallel harness (`make check`), ctest and perl's `prove -v`),
//! each with one planted bug, an honest one-line fix and cheats of several kinds. Every agent runs through a real
//! `repro capture` of the project's plain test command and `repro repair`: the honest fix is accepted with
//! every replay passing, each cheat is refused, by the gate its case's `expect` file names (docs/repair.md
//! has the measured table).

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/repair-corpus").canonicalize().unwrap()
}

/// `(agent file, expected)`: `fixed`, or the name of a gate that must fire.
fn expectations(case: &Path) -> Vec<(String, String)> {
    let text = fs::read_to_string(case.join("expect")).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap().to_string(), w.next().unwrap().to_string())
        })
        .collect()
}

fn run_case(name: &str) {
    let case = corpus().join(name);
    let t = tempfile::Builder::new().prefix("repro-corpus-").tempdir().unwrap();
    let project = t.path().join("project");
    let st = std::process::Command::new("cp").arg("-r").arg(case.join("project")).arg(&project).status();
    assert!(st.unwrap().success());
    // `$HOME` is expanded as the caller's shell would before repro sees the command (`repro capture -- env
    // PATH=$HOME/.cargo/bin:/usr/bin:/bin cargo test`).
    let home = std::env::var("HOME").unwrap_or_default();
    let command: Vec<String> =
        fs::read_to_string(case.join("command")).unwrap().lines().map(|l| l.replace("$HOME", &home)).collect();
    // A missing runner fails with what provides it (scripts/install-deps.sh installs them), never a silent pass.
    require_cmd(Path::new(&command[0]).file_name().unwrap().to_str().unwrap());
    assert!(Path::new(&command[0]).is_file(), "{name}: needs {}", command[0]);
    if command.iter().any(|a| a == "cargo") {
        assert!(
            Path::new(&home).join(".cargo/bin/cargo").is_file(),
            "{name}: needs rustup's cargo in $HOME/.cargo/bin"
        );
    }
    if command.iter().any(|a| a == "pytest") {
        require_python_module("pytest", "python3-pytest");
    }
    // A case's `setup` (autoreconf and configure for automake) runs on the host in the copy, before the capture:
    // the tree a developer has before running the test command.
    if let Ok(setup) = fs::read_to_string(case.join("setup")) {
        for tool in setup.split_whitespace().filter(|w| ["autoreconf", "cmake"].contains(w)) {
            require_cmd(tool);
        }
        let st = std::process::Command::new("sh").arg("-c").arg(setup.trim()).current_dir(&project).status();
        assert!(st.unwrap().success(), "{name}: setup {setup}");
    }
    for tool in ["ctest", "prove"] {
        if command.iter().any(|a| a.split_whitespace().any(|w| w == tool)) {
            require_cmd(tool);
        }
    }
    // A case's `capture-args`, extra `repro capture` flags, one a line.
    let capture_args: Vec<String> = fs::read_to_string(case.join("capture-args"))
        .map(|t| t.lines().map(str::to_string).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default();
    let pack = t.path().join("failure.repro");
    let o = repro()
        .current_dir(&project)
        .args(["capture", "-o"])
        .arg(&pack)
        .args(&capture_args)
        .arg("--")
        .args(&command)
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "{name}: the planted bug fails the tests: {}", stderr(&o));
    assert!(pack.is_file(), "{name}: a pack was written: {}", stderr(&o));
    let expect = expectations(&case);
    // Every agent file of the case is expected something: none is left out of the table.
    let mut agents: Vec<String> = fs::read_dir(&case)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sh"))
        .collect();
    agents.sort();
    let mut listed: Vec<String> = expect.iter().map(|(a, _)| a.clone()).collect();
    listed.sort();
    assert_eq!(agents, listed, "{name}: every agent has an expectation");
    assert!(expect.iter().filter(|(a, _)| a.starts_with("cheat-")).count() >= 3, "{name}: three cheats at least");
    for (agent, want) in &expect {
        let cmd = format!("sh {}", case.join(agent).display());
        let o = repro()
            .current_dir(&project)
            .arg("repair")
            .arg(&pack)
            .args(["--agent", &cmd, "--json", "--max-iterations", "1"])
            .timeout(HANG_GUARD)
            .output()
            .unwrap();
        let s: Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{name} {agent}: {e}: {}", stderr(&o)));
        let vis = &s["visibility"];
        assert_eq!(vis["applied"], true, "{name} {agent}: the visibility variables held: {s:#}");
        let it = &s["iterations"][0];
        let fired: Vec<&str> = it["gates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["fired"] == true)
            .filter_map(|g| g["name"].as_str())
            .collect();
        let na: Vec<&str> = it["gates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["applicable"] == false)
            .filter_map(|g| g["name"].as_str())
            .collect();
        // The measured row of docs/repair.md's table (cargo test -- --nocapture shows it).
        eprintln!(
            "corpus | {name} | {agent} | {} | fired: {} | not applicable: {}",
            s["outcome"],
            fired.join(", "),
            na.join(", ")
        );
        if want == "fixed" {
            assert_eq!(s["outcome"], "fixed", "{name} {agent}: the honest fix is accepted: {s:#}");
            assert_eq!(o.status.code(), Some(0));
            let replays = it["replays"].as_array().unwrap();
            assert!(replays.len() == 3 && replays.iter().all(|r| r["exit_status"] == 0), "{name}: {s:#}");
            assert!(fired.is_empty(), "{name} {agent}: {fired:?}");
            if command.iter().any(|a| a == "pytest") {
                // pytest wrote its JUnit report beside the replay (its run directory's changes/), never in the tree.
                for r in replays {
                    let dir = Path::new(r["run_dir"].as_str().unwrap());
                    let xml = fs::read_to_string(dir.join("changes/.repro-repair-junit/pytest.xml"))
                        .unwrap_or_else(|e| panic!("{name}: the replay's JUnit report in {}: {e}", dir.display()));
                    assert!(xml.contains("<testcase") && xml.contains("test_total"), "{name}: {xml}");
                }
                assert!(!project.join(".repro-repair-junit").exists(), "{name}: nothing written in the project");
            }
        } else {
            assert_eq!(s["outcome"], "iterations-exhausted", "{name} {agent}: the cheat is refused: {s:#}");
            if it["diff"]["files_removed"].as_u64().unwrap_or(0) > 0 {
                // A replay cannot remove a file: a cheat that deletes the failing test's file is judged from the
                // tree, and the refusal says the file was deleted.
                let why = it["refused_because"].to_string();
                assert!(why.contains("was deleted") && why.contains("removed paths"), "{name} {agent}: {s:#}");
            } else {
                assert_eq!(it["failure_gone"], true, "{name} {agent}: the cheat makes the replays pass: {s:#}");
            }
            assert!(fired.contains(&want.as_str()), "{name} {agent}: gate {want} fired: {fired:?}");
            assert!(s["patch"].is_null());
        }
    }
}

#[test]
fn corpus_pytest_default_output() {
    run_case("pytest-default");
}

#[test]
fn corpus_pytest_q() {
    run_case("pytest-q");
}

#[test]
fn corpus_unittest() {
    run_case("unittest");
}

#[test]
fn corpus_make_check_pass_fail_lines() {
    run_case("make-plain");
}

#[test]
fn corpus_make_check_tap() {
    run_case("make-tap");
}

#[test]
fn corpus_node_test() {
    run_case("node-test");
}

#[test]
fn corpus_go_test() {
    run_case("go-test");
}

#[test]
fn corpus_pytest_parametrized_class() {
    run_case("pytest-param");
}

#[test]
fn corpus_automake_parallel_harness() {
    run_case("automake");
}

#[test]
fn corpus_ctest() {
    run_case("ctest");
}

#[test]
fn corpus_prove_tap() {
    run_case("prove-tap");
}

#[test]
fn corpus_cargo_test() {
    run_case("cargo-test");
}
