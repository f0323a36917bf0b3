//! `repro hunt` and `repro explain` on fixtures that fail only under some inputs.

use std::path::Path;

use crate::common::*;

/// A working directory holding the flaky fixtures.
fn fixtures() -> Workdir {
    let w = Workdir::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/flaky");
    let status =
        std::process::Command::new("cp").arg("-r").arg(format!("{}/.", src.display())).arg(w.path()).status().unwrap();
    assert!(status.success());
    w
}

fn in_dir(w: &Workdir, args: &[&str]) -> std::process::Output {
    repro().current_dir(w.path()).args(args).output().unwrap()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(o), stderr(o)))
}

#[test]
fn hunt_finds_a_failing_seed_and_it_reproduces() {
    let w = fixtures();
    let o = in_dir(
        &w,
        &["hunt", "--vary", "seed", "--seeds", "60", "--jobs", "2", "--json", "--", "python3", "seed_flaky.py"],
    );
    assert_code(&o, 1);
    let r = json(&o);
    assert!(r["failed"].as_u64().unwrap() >= 1);
    assert!(r["runs"].as_u64().unwrap() < 60, "stops soon after the first failure");
    let class = &r["failures"][0];
    assert_eq!(class["signature"]["exit_status"], 1);
    assert_eq!(class["signature"]["stderr_tail"][0], "FAILED test_sample: unlucky draw");
    let seed = class["first"]["seed"].as_u64().unwrap().to_string();
    // The failing configuration fails again, every time, and its neighbour does not have to.
    for _ in 0..2 {
        let again = in_dir(
            &w,
            &["run", "-q", "--seed", &seed, "--epoch", "2025-01-01T00:00:00Z", "--", "python3", "seed_flaky.py"],
        );
        assert_code(&again, 1);
    }
    // Human output: a table and the reproduce line.
    let o = in_dir(&w, &["hunt", "--vary", "seed", "--seeds", "60", "--jobs", "2", "--", "python3", "seed_flaky.py"]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("failure 1 ("), "{}", stdout(&o));
    assert!(stdout(&o).contains("reproduce: repro run --seed"), "{}", stdout(&o));
}

#[test]
fn hunt_reports_distinct_failures_apart_and_nothing_when_all_pass() {
    let w = fixtures();
    std::fs::write(
        w.path().join("two_ways.sh"),
        "n=$(nproc); [ \"$n\" = 4 ] && { echo 'four cpus' >&2; exit 3; }; [ \"$n\" = 64 ] && { echo 'many cpus' >&2; exit 4; }; exit 0\n",
    )
    .unwrap();
    let o =
        in_dir(&w, &["hunt", "--vary", "cpus", "--keep-going", "--max-runs", "8", "--json", "--", "sh", "two_ways.sh"]);
    assert_code(&o, 1);
    let r = json(&o);
    let mut statuses: Vec<i64> =
        r["failures"].as_array().unwrap().iter().map(|c| c["signature"]["exit_status"].as_i64().unwrap()).collect();
    statuses.sort();
    assert_eq!(statuses, [3, 4]);
    let rows = r["table"].as_array().unwrap();
    let row = |v: &str| rows.iter().find(|x| x["value"] == v).unwrap().clone();
    assert_eq!((row("1")["pass"].as_u64(), row("1")["fail"].as_u64()), (Some(2), Some(0)));
    assert_eq!(row("4")["fail"], 2);
    let o = in_dir(&w, &["hunt", "--vary", "cpus", "--max-runs", "4", "--", "true"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("no failure found"));
}

#[test]
fn explain_bisects_the_date_boundary_to_the_second() {
    let w = fixtures();
    let o = in_dir(&w, &["explain", "--vary", "epoch,seed", "--seeds", "5", "--json", "--", "python3", "date_bomb.py"]);
    assert_code(&o, 0);
    let r = json(&o);
    assert_eq!(r["control_verdict"], "fail", "the default epoch (2025) is after the expiry");
    let b = &r["epoch_boundaries"][0];
    assert_eq!(b["passes_at"], 1701475199);
    assert_eq!(b["fails_at"], 1701475200);
    let o = in_dir(&w, &["explain", "--vary", "epoch,seed", "--seeds", "5", "--", "python3", "date_bomb.py"]);
    let text = stdout(&o);
    assert!(text.contains("epoch       DECIDES the outcome"), "{text}");
    assert!(text.contains("passes at 2023-12-01T23:59:59Z, fails from 2023-12-02T00:00:00Z"), "{text}");
    assert!(text.contains("seed        no effect"), "{text}");
}

#[test]
fn explain_a_pack_varies_its_recorded_inputs() {
    let w = fixtures();
    let o = in_dir(&w, &["capture", "-o", "bomb.repro", "--", "python3", "date_bomb.py"]);
    assert_code(&o, 1);
    let o = in_dir(&w, &["explain", "--vary", "epoch,seed", "--seeds", "3", "--json", "bomb.repro"]);
    assert_code(&o, 0);
    let r = json(&o);
    assert_eq!(r["control_verdict"], "fail");
    assert_eq!(r["epoch_boundaries"][0]["fails_at"], 1701475200);
    // A replay with one input changed is a variation, not a reproduction.
    let o = in_dir(&w, &["replay", "bomb.repro", "--epoch", "2020-01-01T00:00:00Z"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("reproduced 0/1"), "{}", stderr(&o));
    let o = in_dir(&w, &["explain", "missing.repro"]);
    assert_code(&o, 2);
}

#[test]
fn explain_names_the_seed_the_variable_and_the_cpus() {
    let w = fixtures();
    let o = in_dir(&w, &["explain", "--vary", "seed", "--seeds", "30", "--", "python3", "seed_flaky.py"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("seed        DECIDES the outcome"), "{}", stdout(&o));
    assert!(stdout(&o).contains("seeds fail: "), "{}", stdout(&o));
    let o = in_dir(&w, &["explain", "--vary", "env,cpus", "--", "python3", "tz_bug.py"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("the variable TZ decides: TZ=Asia/Kolkata"), "{}", stdout(&o));
    assert!(stdout(&o).contains("cpus        no effect"), "{}", stdout(&o));
    let o = in_dir(&w, &["explain", "--vary", "cpus,env", "--json", "--", "python3", "cpus.py"]);
    let r = json(&o);
    let cpus = r["findings"].as_array().unwrap().iter().find(|f| f["dimension"] == "cpus").unwrap().clone();
    assert_eq!(cpus["changes_outcome"], true);
    assert_eq!(cpus["deciding_values"], serde_json::json!(["4", "64"]));
    let env = r["findings"].as_array().unwrap().iter().find(|f| f["dimension"] == "env").unwrap().clone();
    assert_eq!(env["changes_outcome"], false);
}

#[test]
fn hunt_and_explain_find_a_directory_order_dependence() {
    let w = fixtures();
    let o = in_dir(
        &w,
        &["hunt", "--vary", "dir-order", "--json", "--capture", "-o", "order.repro", "--", "python3", "dir_order.py"],
    );
    assert_code(&o, 1);
    let r = json(&o);
    let order = r["failures"][0]["first"]["dir_order"].clone();
    assert_ne!(order, "sorted", "{r}");
    // The pack records the directory order, so the failure replays.
    let o = in_dir(&w, &["replay", "order.repro", "--runs", "2"]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("reproduced 2/2"), "{}", stderr(&o));
    let o = in_dir(&w, &["explain", "--vary", "dir-order,hostname", "--", "python3", "dir_order.py"]);
    assert_code(&o, 0);
    let text = stdout(&o);
    assert!(text.contains("dir-order   DECIDES the outcome"), "{text}");
    assert!(text.contains("outcome changes for: reversed"), "{text}");
    assert!(text.contains("hostname    no effect"), "{text}");
    // The reported order reproduces with repro run.
    let o = in_dir(&w, &["run", "-q", "--dir-order", "reversed", "--", "python3", "dir_order.py"]);
    assert_code(&o, 1);
    let o = in_dir(&w, &["run", "-q", "--hostname", "ci-runner-7", "--", "sh", "-c", "hostname; uname -n"]);
    assert_eq!(stdout(&o), "ci-runner-7\nci-runner-7\n");
}

#[test]
fn explain_reports_a_program_that_varies_with_everything_pinned() {
    let w = fixtures();
    // The host's softirq counters are not pinned by the supervisor.
    let o = in_dir(&w, &["explain", "--vary", "seed", "--seeds", "2", "--", "sh", "-c", "cat /proc/softirqs"]);
    assert_code(&o, 121);
    let text = stdout(&o);
    assert!(text.contains("nondeterministic under pinning"), "{text}");
    assert!(text.contains("stdout differs between control runs 1 and"), "{text}");
}

#[test]
fn hunt_and_explain_reject_bad_input() {
    let w = fixtures();
    for (args, msg) in [
        (vec!["hunt", "--vary", "moon", "--", "true"], "--vary 'moon': unknown dimension 'moon'"),
        (vec!["hunt", "--seeds", "x", "--", "true"], "--seeds 'x': expected a count (100) or a range (0..100)"),
        (vec!["hunt", "--time-budget", "soon", "--", "true"], "--time-budget: 'soon' is not a duration"),
        (vec!["explain", "--epoch-range", "2030-01-01..2020-01-01", "--", "true"], "FROM must be before TO"),
        (vec!["hunt", "--env-variant", "TZ", "--", "true"], "--env-variant 'TZ': expected NAME=V1,V2,..."),
        (vec!["hunt"], "required arguments were not provided"),
    ] {
        let o = in_dir(&w, &args);
        assert_code(&o, 2);
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn hunt_captures_the_first_failure_as_a_pack_that_replays() {
    let w = fixtures();
    let o = in_dir(
        &w,
        &[
            "hunt",
            "--vary",
            "seed",
            "--seeds",
            "60",
            "--capture",
            "-o",
            "found.repro",
            "--",
            "python3",
            "seed_flaky.py",
        ],
    );
    assert_code(&o, 1);
    assert!(stdout(&o).contains("captured: found.repro"), "{}", stdout(&o));
    let o = in_dir(&w, &["replay", "found.repro", "--runs", "2"]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("reproduced 2/2"), "{}", stderr(&o));
}

/// The pytest fixture: 40 data files, one test per file, and one date-dependent test that reads one file.
#[test]
fn shrink_keeps_the_failure_and_drops_what_it_does_not_need() {
    require_python_module("pytest", "python3-pytest");
    let w = Workdir::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pytest-suite");
    assert!(std::process::Command::new("cp")
        .arg("-r")
        .arg(format!("{}/.", src.display()))
        .arg(w.path())
        .status()
        .unwrap()
        .success());
    let o = in_dir(
        &w,
        &[
            "capture",
            "-o",
            "suite.repro",
            "--",
            "/usr/bin/python3", // the python3 with python3-pytest (the host PATH's may be pyenv's)
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_inventory.py",
        ],
    );
    assert_code(&o, 1);
    let o = in_dir(&w, &["shrink", "suite.repro", "-o", "small.repro", "--confirm", "1", "--json"]);
    assert_code(&o, 0);
    let r = json(&o);
    assert_eq!(r["test_selection"], serde_json::json!(["test_inventory.py::test_featured_item_has_not_expired"]));
    let removed: Vec<&str> = r["removed_files"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for i in 1..=40 {
        let name = format!("data/item_{i:02}.json");
        assert_eq!(removed.contains(&name.as_str()), i != 17, "{name}: removed {removed:?}");
    }
    assert!(!removed.contains(&"test_inventory.py"));
    assert!(r["removed_env"].as_array().unwrap().len() >= 5, "{}", r["removed_env"]);
    assert!(r["after"]["files"].as_u64() < r["before"]["files"].as_u64());
    // The smaller pack fails the same way, for the same reason.
    let o = in_dir(&w, &["replay", "small.repro", "--runs", "2"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("AssertionError"), "{}", stdout(&o));
    assert!(stderr(&o).contains("reproduced 2/2"));
    // A pack that does not reproduce cannot be shrunk.
    let o = in_dir(&w, &["shrink", "no-such.repro"]);
    assert_code(&o, 2);
}

/// Every fixture: hunt finds its failure varying the right dimension, captures it, and the pack replays.
#[test]
fn hunt_captures_each_kind_of_flaky_failure_as_a_replayable_pack() {
    let w = fixtures();
    for (vary, extra, script) in [
        ("epoch", vec!["--epoch", "2023-01-01"], "date_bomb.py"),
        ("env", vec![], "tz_bug.py"),
        ("cpus", vec![], "cpus.py"),
    ] {
        let pack = format!("{script}.repro");
        let mut args = vec!["hunt", "--vary", vary, "--capture", "-o", &pack, "--json"];
        args.extend(extra.iter().copied());
        args.extend(["--", "python3", script]);
        let o = in_dir(&w, &args);
        assert_code(&o, 1);
        let r = json(&o);
        assert!(r["failed"].as_u64().unwrap() >= 1, "{script}: {r}");
        let o = in_dir(&w, &["replay", &pack, "--runs", "2"]);
        assert_code(&o, 0);
        assert!(stderr(&o).contains("reproduced 2/2"), "{script}: {}", stderr(&o));
    }
}
