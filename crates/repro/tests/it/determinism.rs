//! `repro run` with the determinism supervisor, end to end: the guest's clock, entropy and identity are a
//! function of (command, files, seed, epoch); `--verify` proves it by running twice.

use crate::common::*;

const PROBE: &str = r#"
import os, random, time, uuid, datetime
print(time.time(), time.monotonic(), datetime.datetime.now().isoformat())
print(random.random(), os.urandom(8).hex(), uuid.uuid4())
print(os.getpid(), os.uname().nodename, os.cpu_count(), open('/proc/sys/kernel/random/boot_id').read().strip())
print(sorted(os.listdir('.')) == os.listdir('.'))
"#;

fn probe(w: &Workdir, args: &[&str]) -> String {
    let o = w.run(&[&["-q"], args].concat(), &["python3", "-c", PROBE]);
    assert_code(&o, 0);
    stdout(&o)
}

#[test]
fn same_inputs_same_view_of_the_world() {
    // The probe also runs natively, with the host's python3.
    require_cmd("python3");
    let w = Workdir::new();
    // A directory filled in an order of its own.
    for name in ["zeta", "alpha", "mid", "beta", "omega"] {
        std::fs::write(w.path().join(name), name).unwrap();
    }
    let a = probe(&w, &[]);
    let b = probe(&w, &[]);
    assert_eq!(a, b, "two runs see the same world");
    assert!(a.lines().nth(3) == Some("True"), "directory listings are sorted: {a}");
    assert!(a.starts_with("1735689600."), "time starts at the default epoch: {a}");
    let seeded = probe(&w, &["--seed", "1"]);
    assert_eq!(a.lines().next(), seeded.lines().next(), "the seed does not move the clock");
    assert_ne!(a.lines().nth(1), seeded.lines().nth(1), "another seed, other random bytes");
    let later = probe(&w, &["--epoch", "2030-01-01T00:00:00Z"]);
    assert!(later.starts_with("1893456000."), "{later}");
    assert_eq!(a.lines().nth(1), later.lines().nth(1), "the epoch does not change the entropy stream");
    // Natively the same program differs from run to run.
    let native = |_: ()| {
        std::process::Command::new("python3").args(["-c", PROBE]).current_dir(w.path()).output().unwrap().stdout
    };
    assert_ne!(native(()), native(()));
}

#[test]
fn sleeping_costs_no_wall_time() {
    // A day of sleep under a guard of two minutes: only a skipped sleep gets the run to its end (how fast a
    // sleep returns is measured by bench/boundary-cost.sh and bench/compare.sh, not here).
    let w = Workdir::new();
    let o = repro()
        .current_dir(w.path())
        .args(["run", "-q", "--", "sh", "-c", "date +%s; sleep 86400; date +%s"])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_code(&o, 0);
    let t: Vec<i64> = stdout(&o).lines().map(|l| l.parse().unwrap()).collect();
    assert!(t[1] - t[0] >= 86400, "the guest saw a day pass: {t:?}");
    // The run record's wall time is below the day the guest's logical clock moved.
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(w.last_run().join("run.json")).unwrap()).unwrap();
    let wall_ms = record["duration_ms"].as_u64().expect("run.json has duration_ms");
    assert!(wall_ms < 86_400_000, "run.json: {record}");
}

#[test]
fn verify_identical_runs() {
    let w = Workdir::new();
    let o = w.run(
        &["--verify", "--runs", "3"],
        &["sh", "-c", "date; head -c 16 /dev/urandom | od -An -tx1; echo $$ > pid; ls -i pid"],
    );
    assert_code(&o, 0);
    assert!(stderr(&o).contains("repro: verified: 3 runs identical"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(w.path().join(".repro/runs")).unwrap().count(), 3);
}

#[test]
fn verify_explains_what_differs() {
    let w = Workdir::new();
    // Without the supervisor the clock and entropy are the host's: the runs differ.
    let script = "echo fixed; date +%N; head -c 8 /dev/urandom > random.bin";
    let o = w.run(&["--verify", "--no-supervisor"], &["sh", "-c", script]);
    assert_code(&o, 122);
    let err = stderr(&o);
    assert!(err.contains("repro: NOT reproducible: 2 runs differ"), "{err}");
    assert!(err.contains("stdout: run 2 differs from run 1 at line 2 (byte 6):\n      fixed\n"), "{err}");
    assert!(err.contains("file random.bin: content differs between run 1 and run 2 from byte"), "{err}");
    let o = w.run(&["--verify", "--no-supervisor", "--json"], &["sh", "-c", script]);
    assert_code(&o, 122);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["identical"], false);
    assert_eq!(v["exit_status"], 122);
    let kinds: Vec<&str> = v["differences"].as_array().unwrap().iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["output", "file-content"]);
    // The same script under the supervisor verifies.
    let o = w.run(&["--verify"], &["sh", "-c", script]);
    assert_code(&o, 0);
}

#[test]
fn a_frozen_clock_polled_in_a_loop_is_stopped_and_reported() {
    let w = Workdir::new();
    let o = w.run(
        &["--clock-step-ns", "0"],
        &["python3", "-c", "import time\nt = time.time()\nwhile time.time() == t: pass\nprint('moved')"],
    );
    assert_code(&o, 121);
    let err = stderr(&o);
    assert!(err.contains("[repro] determinism not enforced: "), "{err}");
    assert!(err.contains("NOT reproducible"), "{err}");
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.last_run().join("run.json")).unwrap()).unwrap();
    assert_eq!(rec["exit_status"], 121);
    assert!(!rec["determinism"]["not_enforced"].as_array().unwrap().is_empty());
    // With a clock that steps on reads, the same loop ends.
    let o = w
        .run(&["-q"], &["python3", "-c", "import time\nt = time.time()\nwhile time.time() == t: pass\nprint('moved')"]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "moved\n");
}

#[test]
fn the_run_record_says_what_was_mediated() {
    let w = Workdir::new();
    let o = w.run(&["-q", "--json"], &["sh", "-c", "date; ls /"]);
    assert_code(&o, 0);
    let rec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rec["determinism"]["supervised"], true);
    assert!(rec["determinism"]["execs"].as_u64().unwrap() >= 3, "sh, date, ls: {rec}");
    assert!(rec["determinism"]["mediated"]
        .as_object()
        .unwrap()
        .keys()
        .any(|k| k.contains("clock") || k.contains("time")));
    let o = w.run(&["-q", "--json", "--no-supervisor"], &["true"]);
    let rec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rec["determinism"]["supervised"], false);
}

#[test]
fn a_timer_on_the_host_clock_is_reported_not_hidden() {
    // alarm and ITIMER_REAL run in logical time (tests/it/timers.rs); ITIMER_PROF counts the host's CPU time.
    let w = Workdir::new();
    let prof =
        "import signal; signal.setitimer(signal.ITIMER_PROF, 30); signal.setitimer(signal.ITIMER_PROF, 0); print('ok')";
    let o = w.run(&["-q"], &["python3", "-c", prof]);
    assert_code(&o, 121);
    assert!(stderr(&o)
        .contains("[repro] determinism not enforced: the guest armed a timer on the host's clock (setitimer)"));
    // Disarming only is harmless.
    let o = w.run(&["-q"], &["python3", "-c", "import signal; signal.setitimer(signal.ITIMER_PROF, 0); print('ok')"]);
    assert_code(&o, 0);
    let o = w.run(&["-q"], &["python3", "-c", "import signal; signal.alarm(30); signal.alarm(0); print('ok')"]);
    assert_code(&o, 0);
}

#[test]
fn installed_files_keep_their_times_the_working_directory_is_pinned() {
    // A file of the "installation" (outside the working directory, on the host's disk) and one in the working
    // directory, both last modified on 2020-02-02T00:00:00Z.
    let installed = tempfile::Builder::new().prefix("repro-it-inst-").tempdir_in("/var/tmp").unwrap();
    let w = Workdir::new();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_580_601_600);
    for p in [installed.path().join("lib.txt"), w.path().join("src.txt")] {
        std::fs::write(&p, "x").unwrap();
        std::fs::File::options().write(true).open(&p).unwrap().set_modified(t).unwrap();
    }
    let script =
        format!("stat -c '%Y %X %n' {}/lib.txt src.txt; touch new; stat -c '%Y' new", installed.path().display());
    let o = w.run(&["--verify"], &["sh", "-c", &script]);
    assert_code(&o, 0);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("1580601600 1580601600 "), "host times, atime read as mtime: {out}");
    assert!(lines[1].starts_with("1735689599 1735689599 "), "the working directory: pinned before the epoch: {out}");
    let new: i64 = lines[2].parse().unwrap();
    assert!(new >= 1_735_689_600, "written during the run: logical time: {out}");
    assert!(stderr(&o).contains("verified"), "{}", stderr(&o));
}

#[test]
fn python_uses_the_installed_bytecode() {
    // Python checks each .pyc against its source's modification time: with the installation's times pinned it
    // compiled every module again on every run (twice the time of a test suite, and .pyc files written).
    require_cmd("python3");
    let stale = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stderr).lines().filter(|l| l.contains("bytecode is stale")).count()
    };
    let w = Workdir::new();
    let cmd = ["python3", "-v", "-c", "import json, email.parser, argparse"];
    let native = std::process::Command::new("/usr/bin/python3").args(&cmd[1..]).current_dir(w.path()).output().unwrap();
    let o = w.run(&["-q"], &["/usr/bin/python3", cmd[1], cmd[2], cmd[3]]);
    assert_code(&o, 0);
    let imported = String::from_utf8_lossy(&o.stderr).matches("code object from").count();
    assert!(imported > 20, "python -v lists the modules it loads: {}", stderr(&o));
    assert_eq!(stale(&o), stale(&native), "as many stale .pyc files as natively: {}", stderr(&o));
}
