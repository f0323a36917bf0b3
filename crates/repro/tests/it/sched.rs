//! The deterministic scheduler (`--sched`, `--sched-seed`): racing threads, whose output varies natively from run to
//! run, give the same output under repro for a seed on every run, and another output for some other seed; a thread
//! that spins without a system call is preempted and the run says it is not deterministic (exit 121).

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::*;

/// Compiles tests/guests/c/NAME.c into the working directory as `./NAME`.
fn build_c(w: &Workdir, name: &str) {
    build_c_program(w, "tests/guests/c", name);
}

/// Copies tests/guests/python/NAME into the working directory.
fn copy_python(w: &Workdir, name: &str) {
    require_cmd("python3");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/guests/python/{name}"));
    std::fs::copy(src, w.path().join(name)).expect("the guest program is copied");
}

/// The stdout of `cmd` run natively (in the working directory), which must succeed.
fn native(w: &Workdir, cmd: &[&str]) -> String {
    let o = std::process::Command::new(cmd[0]).args(&cmd[1..]).current_dir(w.path()).output().expect("runs natively");
    assert!(o.status.success(), "{cmd:?} natively: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The stdout of `cmd` under repro with these scheduler options, which must exit 0.
fn under(w: &Workdir, sched: &[&str], cmd: &[&str]) -> String {
    let o = repro()
        .current_dir(w.path())
        .args(["run", "-q"])
        .args(sched)
        .arg("--")
        .args(cmd)
        .timeout(HANG_GUARD)
        .output()
        .expect("repro runs");
    assert_code(&o, 0);
    stdout(&o)
}

/// The case the issue names: natively at least two outputs (within 10 x `native_runs` runs), under repro one output over
/// `same_runs` runs with seed 1, and another output for some seed among 0..`seeds`.
fn varies_natively_fixed_by_seed(w: &Workdir, cmd: &[&str], native_runs: usize, same_runs: usize, seeds: u64) {
    // Natively the race is the kernel's: on CI's 2 busy cores 30 runs once all came out in one order, so runs go on
    // (up to 10x) until a second output shows; a program that never varies still fails here.
    let mut natively: BTreeSet<String> = BTreeSet::new();
    let mut ran = 0;
    while natively.len() < 2 && ran < native_runs * 10 {
        natively.insert(native(w, cmd));
        ran += 1;
    }
    assert!(natively.len() > 1, "{cmd:?} should vary natively, gave only {natively:?} in {ran} runs");
    let fixed: BTreeSet<String> = (0..same_runs).map(|_| under(w, &["--sched-seed", "1"], cmd)).collect();
    assert_eq!(fixed.len(), 1, "{cmd:?} under repro with one seed gave {fixed:?}");
    let first = fixed.into_iter().next().unwrap_or_default();
    let other = (0..seeds).map(|s| under(w, &["--sched-seed", &s.to_string()], cmd)).find(|o| *o != first);
    assert!(other.is_some(), "{cmd:?}: every seed of 0..{seeds} gave {first:?}");
}

#[test]
fn four_threads_finish_in_the_order_the_seed_gives() {
    let w = Workdir::new();
    build_c(&w, "race_order");
    varies_natively_fixed_by_seed(&w, &["./race_order"], 30, 10, 20);
}

#[test]
fn a_lost_update_counter_race_counts_the_same_for_a_seed() {
    let w = Workdir::new();
    build_c(&w, "race_counter");
    varies_natively_fixed_by_seed(&w, &["./race_counter"], 30, 5, 10);
}

#[test]
fn a_missed_condition_variable_wakeup_follows_the_seed() {
    let w = Workdir::new();
    build_c(&w, "race_condvar");
    varies_natively_fixed_by_seed(&w, &["./race_condvar"], 60, 5, 20);
}

/// Timed waits that can all end at once (a broadcast to four `pthread_cond_timedwait`s, parked by the waits
/// scheduler) are released one at a time in the order the policy chooses, not in task order: several orders across
/// seeds, one per seed, and the decision is in the schedule log.
#[test]
fn timed_waits_woken_together_are_released_in_the_order_the_seed_gives() {
    let w = Workdir::new();
    build_c(&w, "race_broadcast");
    varies_natively_fixed_by_seed(&w, &["./race_broadcast"], 40, 5, 10);
    let orders: BTreeSet<String> =
        (0..8).map(|s| under(&w, &["--sched-seed", &s.to_string()], &["./race_broadcast"])).collect();
    assert!(orders.len() >= 3, "8 seeds gave only {orders:?}");
    let o = repro()
        .current_dir(w.path())
        .args(["run", "--json", "--sched-log", "--sched-seed", "1", "--", "./race_broadcast"])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_code(&o, 0);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let decisions = r["determinism"]["schedule"]["decisions"].as_array().unwrap().clone();
    let releases = decisions.iter().filter(|d| {
        let ready = d["ready"].as_array().unwrap();
        ready.len() >= 2 && ready.iter().all(|t| t["call"].as_str().unwrap().contains("a timed wait that can end"))
    });
    assert!(releases.count() >= 1, "no release decision among {decisions:?}");
}

#[test]
fn every_policy_is_deterministic_and_recorded() {
    let w = Workdir::new();
    build_c(&w, "race_order");
    for policy in ["random", "round-robin", "pct"] {
        let args = ["--sched", policy, "--sched-seed", "3"];
        let a = under(&w, &args, &["./race_order"]);
        assert_eq!(a, under(&w, &args, &["./race_order"]), "{policy}");
        let run: serde_json::Value =
            serde_json::from_slice(&std::fs::read(w.last_run().join("run.json")).unwrap()).unwrap();
        assert_eq!(run["settings"]["sched"], serde_json::json!({"policy": policy, "seed": 3}));
        assert_eq!(run["determinism"]["not_enforced"], serde_json::json!([]), "{policy}: {run}");
    }
}

#[test]
fn verify_of_the_four_thread_program_is_identical() {
    let w = Workdir::new();
    build_c(&w, "race_order");
    let o = repro()
        .current_dir(w.path())
        .args(["run", "-q", "--verify", "--runs", "3", "--sched-seed", "7", "--", "./race_order"])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_code(&o, 0);
}

#[test]
fn a_python_thread_pool_completes_in_the_same_order_for_a_seed() {
    let w = Workdir::new();
    copy_python(&w, "pool_order.py");
    let cmd = ["python3", "pool_order.py"];
    let natively: BTreeSet<String> = (0..20).map(|_| native(&w, &cmd)).collect();
    assert!(natively.len() > 1, "the pool should complete in varying orders natively: {natively:?}");
    let fixed: BTreeSet<String> = (0..5).map(|_| under(&w, &["--sched-seed", "1"], &cmd)).collect();
    assert_eq!(fixed.len(), 1, "one order under repro for a seed: {fixed:?}");
}

#[test]
fn a_spin_loop_is_preempted_and_reported_with_where_it_spins() {
    let w = Workdir::new();
    build_c(&w, "spin");
    let o = w.run(&[], &["./spin"]);
    assert_code(&o, 121);
    assert_eq!(stdout(&o), "flag seen\n");
    let err = stderr(&o);
    let line = err.lines().find(|l| l.contains("without a system call")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.starts_with("[repro] determinism not enforced: thread 1 ran "), "{line}");
    assert!(line.contains(" ms without a system call (spin loop at spinner+0x"), "{line}");
    assert!(line.ends_with(" in spin)"), "{line}");
}

#[test]
fn a_computation_shorter_than_the_spin_limit_is_not_refused_and_a_longer_one_is() {
    // A thread computes ~0.4 s without a system call while another is ready: under the default limit (2 s) the
    // run is deterministic (the same output twice) and exits 0; with --spin-limit below the computation it is
    // preempted and refused. 0 and nonsense are usage errors naming the flag.
    let w = Workdir::new();
    build_c(&w, "compute");
    let first = w.run(&[], &["./compute"]);
    assert_code(&first, 0);
    assert!(!stderr(&first).contains("not enforced"), "{}", stderr(&first));
    let second = w.run(&["-q"], &["./compute"]);
    assert_code(&second, 0);
    assert_eq!(stdout(&first), stdout(&second));
    let short = w.run(&["--spin-limit", "50ms"], &["./compute"]);
    assert_code(&short, 121);
    let err = stderr(&short);
    assert!(err.contains("without a system call (spin loop at compute+0x"), "{err}");
    assert!(err.contains("--spin-limit raises the limit"), "{err}");
    for bad in ["0", "soon", "2h"] {
        let o = w.run(&["--spin-limit", bad], &["true"]);
        assert_code(&o, 2);
        assert!(stderr(&o).contains("--spin-limit"), "{}", stderr(&o));
    }
}

#[test]
fn a_loop_polling_with_a_zero_timeout_lets_the_thread_it_waits_for_run() {
    // poll(.., 0) and epoll_wait(.., 0) in a loop until a new thread sets a flag: the zero-timeout polls are
    // scheduling points, so the thread runs and the run is not refused (before: 121 after the spin-loop limit,
    // "spin loop at poll+0x.. in libc.so.6", the shape asgiref's asyncio suite had).
    let w = Workdir::new();
    build_c(&w, "pollspin");
    let outs: Vec<String> = (0..2)
        .map(|_| {
            let o = w.run(&[], &["./pollspin"]);
            assert_code(&o, 0);
            assert!(!stderr(&o).contains("not enforced"), "{}", stderr(&o));
            stdout(&o)
        })
        .collect();
    assert_eq!(outs[0], "round 0: the worker ran\nround 1: the worker ran\n");
    assert_eq!(outs[0], outs[1]);
}

#[test]
fn a_forked_child_spinning_on_zero_timeout_polls_lets_its_parent_run() {
    // Across processes too: the child's zero-timeout polls are scheduling points, so its loop lets the parent
    // (woken by the child's write, but not running: one guest thread runs at a time) run and write what the child
    // polls for. Were they not, the child would spin until the spin-loop watchdog preempted it ("task 1 ran 2040
    // ms without a system call while another process waited (at epoll_wait+0x13 in libc.so.6)").
    let w = Workdir::new();
    let prog = r#"
import os, select
r1, w1 = os.pipe()
r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    p = select.epoll()
    p.register(r2, select.EPOLLIN)
    os.write(w1, b'x')
    while not p.poll(0):
        pass
    os._exit(0)
os.read(r1, 1)
os.write(w2, b'y')
os.waitpid(pid, 0)
print('the child saw the parent write')
"#;
    let o = w.run(&[], &["python3", "-c", prog]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "the child saw the parent write\n");
    assert!(!stderr(&o).contains("without a system call"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("not enforced"), "{}", stderr(&o));
}

#[test]
fn a_single_threaded_run_is_not_held_and_says_nothing() {
    let w = Workdir::new();
    let o = w.run(&["--sched", "pct", "--sched-seed", "9"], &["sh", "-c", "echo one; sleep 1; echo two"]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "one\ntwo\n");
    assert!(!stderr(&o).contains("not enforced"), "{}", stderr(&o));
}

#[test]
fn without_sched_fifo_a_multithreaded_run_is_not_claimed_deterministic() {
    // As an unprivileged user (no CAP_SYS_NICE, RLIMIT_RTPRIO 0) the guest cannot run SCHED_FIFO: its threads
    // interleave as the kernel likes, and the run says so.
    require_cmd("setpriv");
    use std::os::unix::fs::PermissionsExt;
    let w = Workdir::new();
    build_c(&w, "race_order");
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("repro");
    std::fs::copy(repro_path(), &bin).unwrap();
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["run", "-q", "--", "./race_order"])
        .current_dir(w.path())
        .output()
        .unwrap();
    assert_code(&o, 121);
    assert!(stderr(&o).contains("the scheduler could not serialize the guest's threads"), "{}", stderr(&o));
}

#[test]
fn two_rust_producers_interleave_as_the_seed_says() {
    require_cmd("rustc");
    let w = Workdir::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/guests/rust/race_producers.rs");
    let o = std::process::Command::new("rustc")
        .args(["--edition", "2021", "-O", "-o", "race_producers"])
        .arg(&src)
        .current_dir(w.path())
        .output()
        .expect("rustc runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    varies_natively_fixed_by_seed(&w, &["./race_producers"], 30, 5, 10);
}

#[test]
fn a_guest_cannot_leave_the_scheduler_by_changing_its_policy() {
    // A thread that made itself SCHED_OTHER would run when the kernel likes, out of the scheduler's order: the
    // change is answered as done but not made (a refusal would fail glibc's pthread_create with an explicit
    // scheduling attribute), and the run says so; the guest still runs SCHED_FIFO afterwards.
    require_cmd("python3");
    let w = Workdir::new();
    let script = "import os\n\
                  try:\n    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))\n    print('changed')\n\
                  except PermissionError as e:\n    print('refused', e.errno)\n\
                  print('policy', 'fifo' if os.sched_getscheduler(0) == os.SCHED_FIFO else 'other')\n";
    let o = w.run(&[], &["python3", "-c", script]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "changed\npolicy fifo\n");
    assert!(stderr(&o).contains("change a thread's scheduling policy"), "{}", stderr(&o));
}
