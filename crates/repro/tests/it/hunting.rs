//! `repro hunt`, `explain` and `shrink` as a user drives them: SIGINT/SIGTERM stop every child run and exit
//! 128 + the signal, progress shows on stderr (and `--quiet` silences it), explain stops the dimensions that do
//! not move, and both state the baseline epoch with its source.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// The pids of live processes whose command line contains `needle` (zombies and this test excluded).
fn processes_with(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let me = std::process::id();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        // A process that ended meanwhile has no cmdline: it is not left over.
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .map(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
            .unwrap_or(true);
        if text.contains(needle) && !zombie {
            found.push((pid, text));
        }
    }
    found
}

/// Waits (bounded) until `f` holds.
fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `repro ARGS` in `dir` on a guest that blocks for real when `when` (a shell condition) holds (reading a
/// fifo nobody writes), waits until a guest has been blocked for 2 s, sends `signal`, and checks the exit
/// status, the message, and that no child run or guest is left.
fn interrupt(dir: &Path, args: &[&str], when: &str, signal: &str, code: i32) -> std::process::Output {
    let token = format!("hunting-fifo-{}-{}", std::process::id(), args[0]);
    let fifo = dir.join(&token);
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let script = format!("if {when}; then read x < ./{token}; fi; echo done");
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["--", "sh", "-c", &script]);
    let child = Command::new(repro_path())
        .current_dir(dir)
        .args(&full)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // A guest blocked in open(2) on the fifo (the same one for 2 s): the interrupt finds it mid-run.
    let guests = || -> Vec<u32> {
        processes_with(&format!("read x < ./{token}"))
            .into_iter()
            .filter(|(_, c)| c.starts_with("sh "))
            .map(|p| p.0)
            .collect()
    };
    wait_until("a guest to block", Duration::from_secs(90), || {
        let before = guests();
        std::thread::sleep(Duration::from_secs(2));
        guests().iter().any(|g| before.contains(g))
    });
    let sent = Instant::now();
    assert!(Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap().success());
    let out = wait_bounded(child, &format!("repro {} after SIG{signal}", args[0]));
    assert_eq!(out.status.code(), Some(code), "{}\n{}", stdout(&out), stderr(&out));
    assert!(sent.elapsed() < Duration::from_secs(20), "took {:?} to stop", sent.elapsed());
    assert!(stderr(&out).contains(&format!("interrupted by SIG{signal}")), "{}", stderr(&out));
    // Nothing left: neither the `repro run` children nor their guests.
    wait_until("the child runs to be gone", Duration::from_secs(10), || processes_with(&token).is_empty());
    out
}

#[test]
fn sigint_stops_a_hunt_and_its_child_runs_with_130() {
    let w = Workdir::new();
    let out = interrupt(
        w.path(),
        &["hunt", "--vary", "seed", "--seeds", "20", "--jobs", "2", "--epoch", "2024-06-01", "--json"],
        "true",
        "INT",
        130,
    );
    // What was found so far is printed: a report that says it was interrupted.
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(v["interrupted"], true, "{v}");
    assert_eq!(v["failed"], 0, "{v}");
    assert_eq!(v["baseline_epoch"]["source"], "flag", "{v}");
    assert_eq!(v["baseline_epoch"]["rfc3339"], "2024-06-01T00:00:00Z", "{v}");
}

#[test]
fn sigterm_stops_an_explain_with_143_and_prints_what_it_has() {
    let w = Workdir::new();
    let out =
        interrupt(w.path(), &["explain", "--vary", "seed,cpus", "--control", "2", "--jobs", "2"], "true", "TERM", 143);
    // The guests never ended, so no run finished: an interruption during the control.
    assert!(stderr(&out).contains("during the control runs"), "{}", stderr(&out));
}

#[test]
fn sigint_in_the_middle_of_an_explain_prints_the_findings_so_far() {
    let w = Workdir::new();
    // Only the 4-CPU run blocks: the control and the other values finish, then the signal comes.
    let out = interrupt(
        w.path(),
        &["explain", "--vary", "cpus", "--control", "1", "--jobs", "2", "--json"],
        "[ \"$(nproc)\" = 4 ]",
        "INT",
        130,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(v["interrupted"], true, "{v}");
    assert_eq!(v["control_verdict"], "pass", "{v}");
    let cpus = &v["findings"][0];
    assert_eq!(cpus["dimension"], "cpus", "{v}");
    // 1 and 2 CPUs finished and are reported; 4 was stopped, 64 never started.
    assert_eq!((cpus["tried"].as_u64(), cpus["untried"].as_u64()), (Some(2), Some(2)), "{v}");
    assert_eq!(v["runs"], 3, "{v}");
    assert!(stderr(&out).contains("[explain] control 1/1: pass, stable"), "{}", stderr(&out));
}

#[test]
fn explain_drops_unmoved_dimensions_shows_progress_and_states_the_epoch() {
    let w = Workdir::new();
    // Fails from 2023-12-02 on; the baseline (2022) passes.
    std::fs::write(
        w.path().join("expiry.py"),
        "import sys, time\nif time.time() >= 1701475200:\n    print('FAILED test_cert: expired', file=sys.stderr)\n    sys.exit(1)\n",
    )
    .unwrap();
    let o = repro()
        .current_dir(w.path())
        .args(["explain", "--vary", "seed,epoch,hostname", "--seeds", "30", "--epoch", "2022-01-01", "--json"])
        .args(["--", "python3", "expiry.py"])
        .output()
        .unwrap();
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    let finding = |d: &str| v["findings"].as_array().unwrap().iter().find(|f| f["dimension"] == d).unwrap().clone();
    assert_eq!(finding("epoch")["changes_outcome"], true, "{v}");
    assert_eq!(v["epoch_boundaries"][0]["fails_at"], 1_701_475_200, "{v}");
    // The seed did not move the outcome in its first 3 tries while the epoch did: 27 seeds are not run.
    assert_eq!(finding("seed")["tried"], 3, "{v}");
    assert_eq!(finding("seed")["untried"], 27, "{v}");
    assert_eq!(finding("seed")["changes_outcome"], false, "{v}");
    assert_eq!(v["baseline_epoch"]["source"], "flag", "{v}");
    assert_eq!(v["interrupted"], false, "{v}");
    let err = stderr(&o);
    assert!(err.contains("[explain] baseline epoch 2022-01-01T00:00:00Z (flag)"), "{err}");
    assert!(err.contains("[explain] control 3/3: pass, stable"), "{err}");
    assert!(err.contains("[explain] dropping seed, hostname"), "{err}");
    assert!(
        err.contains("[explain] epoch bisected: passes at 2023-12-01T23:59:59Z, fails from 2023-12-02T00:00:00Z"),
        "{err}"
    );

    // --quiet: the same answer, nothing on stderr; the text summary names the epoch and its source.
    let q = repro()
        .current_dir(w.path())
        .args(["explain", "--quiet", "--vary", "seed,hostname", "--seeds", "4", "--", "python3", "expiry.py"])
        .output()
        .unwrap();
    assert_code(&q, 0);
    assert_eq!(stderr(&q), "", "--quiet prints no progress");
    // Not a git checkout and no SOURCE_DATE_EPOCH: the default, and the summary says so.
    assert!(stdout(&q).contains("baseline: epoch 2025-01-01T00:00:00Z (default)"), "{}", stdout(&q));
}

#[test]
fn hunt_states_the_epoch_from_source_date_epoch_and_reports_progress_lines() {
    let w = Workdir::new();
    let o = repro()
        .current_dir(w.path())
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .args(["hunt", "--vary", "seed", "--seeds", "3", "--max-runs", "3", "--jobs", "1", "--", "true"])
        .output()
        .unwrap();
    assert_code(&o, 0);
    assert!(stdout(&o).contains("baseline: epoch 2023-11-14T22:13:20Z (SOURCE_DATE_EPOCH)"), "{}", stdout(&o));
    assert!(stderr(&o).contains("[hunt] baseline epoch 2023-11-14T22:13:20Z (SOURCE_DATE_EPOCH)"), "{}", stderr(&o));
    assert!(stderr(&o).contains("[hunt] 1 runs, 0 failing"), "{}", stderr(&o));
}
