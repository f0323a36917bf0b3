//! Schedule search: `repro hunt --vary schedule` finds an interleaving of the guest's threads that fails, the pack
//! it captures records the scheduler's policy and seed and replays the failure every time, and `repro explain`
//! names scheduling as what decides the outcome.

use std::path::Path;

use crate::common::*;

/// A working directory holding the flaky fixtures, with the C race compiled.
fn fixtures() -> Workdir {
    require_cmd("gcc");
    let w = Workdir::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/flaky");
    let status =
        std::process::Command::new("cp").arg("-r").arg(format!("{}/.", src.display())).arg(w.path()).status().unwrap();
    assert!(status.success());
    let cc = std::process::Command::new("gcc")
        .args(["-O2", "-pthread", "-o", "sched_claim", "sched_claim.c"])
        .current_dir(w.path())
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    w
}

fn in_dir(w: &Workdir, args: &[&str]) -> std::process::Output {
    repro().current_dir(w.path()).args(args).output().unwrap()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(o), stderr(o)))
}

/// hunt finds a failing schedule of `cmd`, captures it, and the pack replays the failure 10 times out of 10 and
/// records the schedule (inspect shows it); the reported schedule fails again under `repro run`.
fn hunt_capture_replay(w: &Workdir, pack: &str, cmd: &[&str]) {
    let mut args = vec![
        "hunt",
        "--vary",
        "schedule",
        "--sched-seeds",
        "60",
        "--jobs",
        "2",
        "--capture",
        "-o",
        pack,
        "--json",
        "--",
    ];
    args.extend(cmd);
    let o = in_dir(w, &args);
    assert_code(&o, 1);
    let r = json(&o);
    assert!(r["failed"].as_u64().unwrap() >= 1, "{r}");
    let first = &r["failures"][0]["first"];
    let (policy, seed) = (first["sched"]["policy"].as_str().unwrap(), first["sched"]["seed"].as_u64().unwrap());
    assert_eq!(first["sched"]["points"], "io", "hunt decides at reads and writes too: {first}");
    let o = in_dir(w, &["replay", pack, "--runs", "10"]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("reproduced 10/10"), "{}", stderr(&o));
    let o = in_dir(w, &["inspect", pack]);
    assert!(stdout(&o).contains(&format!("sched {policy} seed {seed} points io")), "{}", stdout(&o));
    let seed = seed.to_string();
    let mut run = vec!["run", "-q", "--sched", policy, "--sched-seed", &seed, "--sched-points", "io", "--"];
    run.extend(cmd);
    for _ in 0..3 {
        assert_code(&in_dir(w, &run), 1);
    }
}

#[test]
fn hunt_finds_the_schedule_of_a_c_check_then_act_race_and_replays_it() {
    let w = fixtures();
    hunt_capture_replay(&w, "claim.repro", &["./sched_claim"]);
}

#[test]
fn hunt_finds_the_schedule_of_a_python_thread_pool_race_and_replays_it() {
    require_cmd("python3");
    let w = fixtures();
    hunt_capture_replay(&w, "pool.repro", &["python3", "pool_order.py"]);
}

#[test]
fn explain_names_scheduling_when_the_interleaving_decides() {
    let w = fixtures();
    let o = in_dir(
        &w,
        &["explain", "--vary", "schedule,seed,hostname", "--seeds", "4", "--sched-seeds", "30", "--", "./sched_claim"],
    );
    let text = stdout(&o);
    assert!(text.contains("schedule    DECIDES the outcome"), "{text}\n{}", stderr(&o));
    assert!(text.contains("scheduling: the interleaving of the guest's threads decides"), "{text}");
    assert!(text.contains("seed        no effect"), "{text}");
    // And for a pack: replayed under other schedules, the recorded one is the baseline.
    let o = in_dir(&w, &["capture", "--always", "-o", "base.repro", "--", "./sched_claim"]);
    assert!(o.status.code().is_some(), "{}", stderr(&o));
    let o = in_dir(&w, &["explain", "--vary", "schedule", "--sched-seeds", "30", "--json", "base.repro"]);
    let r = json(&o);
    let f = r["findings"].as_array().unwrap().iter().find(|f| f["dimension"] == "schedule").unwrap().clone();
    assert_eq!(f["changes_outcome"], true, "{r}");
}

#[test]
fn replay_and_hunt_reject_a_bad_schedule() {
    let w = fixtures();
    let o = in_dir(&w, &["run", "--sched", "fifo", "--", "true"]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("--sched 'fifo'"), "{}", stderr(&o));
    let o = in_dir(&w, &["hunt", "--vary", "schedule", "--sched-seeds", "x", "--", "true"]);
    assert_code(&o, 2);
    let o = in_dir(&w, &["capture", "-o", "t.repro", "--", "true"]);
    assert_code(&o, 0);
    let o = in_dir(&w, &["replay", "t.repro", "--sched", "lifo"]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("--sched 'lifo'"), "{}", stderr(&o));
}

/// The first scheduler seed (under `policy`, with the io points `repro race` uses) for which `cmd` fails.
fn failing_seed(w: &Workdir, policy: &str, cmd: &[&str]) -> u64 {
    for seed in 0..60u64 {
        let s = seed.to_string();
        let mut run = vec!["run", "-q", "--sched", policy, "--sched-seed", &s, "--sched-points", "io", "--"];
        run.extend(cmd);
        if in_dir(w, &run).status.code() == Some(1) {
            return seed;
        }
    }
    panic!("no seed of 60 fails {cmd:?} under {policy}");
}

/// `repro race` of a failing schedule: a minimal set of preemptions that still fails, the deciding decision with
/// its two threads and where they stood (the guest's symbols), and the two schedules, which fail and pass again
/// every time under `repro run --sched-script`.
fn race_report(w: &Workdir, policy: &str, cmd: &[&str], symbol: &str) {
    let seed = failing_seed(w, policy, cmd).to_string();
    let mut args = vec!["race", "--json", "--sched", policy, "--sched-seed", &seed, "--"];
    args.extend(cmd);
    let o = in_dir(w, &args);
    assert_code(&o, 0);
    let r = json(&o);
    assert_eq!(r["result"], "found", "{r}");
    assert_eq!(r["sched_points"], "io", "{r}");
    let minimal = r["minimal"].as_array().unwrap();
    assert!(!minimal.is_empty() && minimal.len() <= r["switches"].as_u64().unwrap() as usize, "{r}");
    assert_eq!((r["failing_exit"].as_i64(), r["passing_exit"].as_i64()), (Some(1), Some(0)), "{r}");
    assert_ne!(r["failing_task"], r["passing_task"], "{r}");
    let at = r["failing_at"]["at"].as_str().unwrap();
    assert!(at.contains(symbol), "the deciding thread's location names {symbol}: {at}");
    assert!(r["rows"].as_array().unwrap().iter().any(|row| row["step"] == r["step"]), "{r}");
    for (schedule, code) in [("failing_schedule", 1), ("passing_schedule", 0)] {
        let file = r[schedule].as_str().unwrap();
        let mut run = vec!["run", "-q", "--sched-points", "io", "--sched-script", file, "--"];
        run.extend(cmd);
        for _ in 0..5 {
            assert_code(&in_dir(w, &run), code);
        }
    }
    // The text report shows the decision side by side.
    args.retain(|a| *a != "--json");
    let o = in_dir(w, &args);
    let text = stdout(&o);
    assert!(text.contains("decide the outcome (minimal,"), "{text}");
    assert!(text.contains(&format!("at decision {} the failing run lets task", r["step"])), "{text}");
    assert!(text.contains("failing run (exit 1)") && text.contains("passing run (exit 0)"), "{text}");
    assert!(text.contains("failing schedule: repro run --sched-points io --sched-script "), "{text}");
    assert!(
        stderr(&o).contains("[race] scheduling points: io (before reads, writes and signals too"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn race_reports_the_deciding_decision_of_a_c_check_then_act_race() {
    let w = fixtures();
    // The deciding decision may be which thread starts first: a start names the code that created the thread
    // (main), any other decision the thread's own (claim): both in the program.
    race_report(&w, "random", &["./sched_claim"], " in sched_claim");
}

#[test]
fn race_reports_the_deciding_decision_of_a_python_thread_pool() {
    require_cmd("python3");
    let w = fixtures();
    race_report(&w, "pct", &["python3", "pool_order.py"], "libpython");
}

#[test]
fn race_says_when_there_is_no_race_and_a_bad_script_names_itself() {
    let w = fixtures();
    let o = in_dir(&w, &["race", "--", "true"]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("this schedule passes (exit 0)"), "{}", stdout(&o));
    // Fails whatever the schedule: no race of the scheduler's making.
    let o = in_dir(&w, &["race", "--", "sh", "-c", "exit 1"]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("fails without any preemption too"), "{}", stdout(&o));
    std::fs::write(w.path().join("bad.json"), "{\"switches\": [{\"step\": 1}]}").unwrap();
    let o = in_dir(&w, &["run", "--sched-script", "bad.json", "--", "true"]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("--sched-script bad.json") && stderr(&o).contains("line 1"), "{}", stderr(&o));
    let o = in_dir(&w, &["race", "--max-runs", "2", "--", "true"]);
    assert_code(&o, 2);
}

/// A racy program that exits 0 whatever it prints, made a test that fails for every output but the baseline
/// schedule's (`same_output.sh`): hunt finds a failing schedule, the pack replays it 10/10.
fn hunt_finds_a_racy_output(w: &Workdir, pack: &str, cmd: &[&str]) {
    let mut run = vec!["run", "-q", "--"];
    run.extend(cmd);
    let o = in_dir(w, &run);
    assert_code(&o, 0);
    std::fs::write(w.path().join("expected.txt"), stdout(&o)).unwrap();
    let mut wrapped = vec!["sh", "same_output.sh"];
    wrapped.extend(cmd);
    hunt_capture_replay(w, pack, &wrapped);
}

fn build(w: &Workdir, program: &str, args: &[&str]) {
    let o = std::process::Command::new(program).args(args).current_dir(w.path()).output().unwrap();
    assert!(o.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

fn guest(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/guests").join(rel).display().to_string()
}

#[test]
fn hunt_finds_and_replays_a_lost_update_counter_and_a_missed_wakeup() {
    let w = fixtures();
    build(&w, "gcc", &["-O2", "-pthread", "-o", "race_counter", &guest("c/race_counter.c")]);
    build(&w, "gcc", &["-O2", "-pthread", "-o", "race_condvar", &guest("c/race_condvar.c")]);
    hunt_finds_a_racy_output(&w, "counter.repro", &["./race_counter"]);
    hunt_finds_a_racy_output(&w, "condvar.repro", &["./race_condvar"]);
}

#[test]
fn hunt_finds_and_replays_a_rust_producer_race() {
    require_cmd("rustc");
    let w = fixtures();
    build(&w, "rustc", &["--edition", "2021", "-O", "-o", "race_producers", &guest("rust/race_producers.rs")]);
    hunt_finds_a_racy_output(&w, "producers.repro", &["./race_producers"]);
}

#[test]
fn hunt_finds_and_replays_a_go_select_race() {
    require_cmd("go");
    let w = fixtures();
    let o = std::process::Command::new("go")
        .args(["build", "-o", "race", &guest("go/race.go")])
        .current_dir(w.path())
        .env("GOCACHE", w.path().join(".gocache"))
        .env("GOPATH", w.path().join(".gopath"))
        .env("HOME", w.path())
        .env("GO111MODULE", "off")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(w.path().join(".gocache")).unwrap();
    // Two Go processors (OS threads the scheduler orders) whatever CPUs the guest sees; no asynchronous
    // preemption (docs/determinism.md).
    hunt_finds_a_racy_output(&w, "go.repro", &["env", "GOMAXPROCS=2", "GODEBUG=asyncpreemptoff=1", "./race"]);
}
