//! Resource bounds the host depends on: a fork bomb stops at `--pids`.

use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::common::{stderr, stdout};
use crate::harness::*;

/// With `--pids 64` a guest that starts up to 200 sleepers gets no more than 64 tasks: its shell's fork fails,
/// the run says the pids limit was reached (stderr and run.json), and the host keeps forking. Without a cgroup
/// (the unprivileged caller without a delegated one) the bound is the guest's RLIMIT_NPROC, recorded in
/// run.json (nothing counts the refused forks there, so "reached" is not said). With the supervisor and
/// without.
#[test]
fn fork_bomb_stops_at_the_pids_limit() {
    for caller in CALLERS {
        for supervisor in [&[][..], &["--no-supervisor"][..]] {
            let d = workdir(caller);
            let args: Vec<&str> = ["--pids", "64"].iter().copied().chain(supervisor.iter().copied()).collect();
            let o =
                sh_as(caller, d.path(), &args, "i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); echo $i; done");
            let (out, err) = (stdout(&o), stderr(&o));
            let started: u32 = out.lines().filter_map(|l| l.trim().parse().ok()).max().unwrap_or(0);
            let at = format!("{caller:?} {supervisor:?}");
            let runs = d.path().join(".repro/runs");
            let run = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
            let record: serde_json::Value =
                serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
            assert_eq!(record["settings"]["pids_max"], 64, "{at}");
            assert!(started < 64, "{at}: the guest started {started} sleepers under --pids 64: {err}");
            assert!(started > 32, "{at}: the guest started only {started} sleepers under --pids 64: {err}");
            if record["enforcement"]["pids_cgroup"].is_null() {
                assert_eq!(caller, Caller::Unprivileged, "{at}: root has a cgroup: {err}");
                assert_eq!(record["enforcement"]["pids_rlimit"], 64, "{at}: {record}");
                assert!(!err.contains("pids limit not enforced"), "{at}: {err}");
            } else {
                assert!(err.contains("pids limit reached"), "{at}: {err}");
                assert_eq!(record["enforcement"]["pids_limit_reached"], true, "{at}");
            }
            let host = Command::new("sh").args(["-c", "true & wait"]).status().expect("the host forks");
            assert!(host.success(), "{at}");
        }
    }
    // Zero tasks is a usage error naming the argument.
    let d = workdir(Caller::Root);
    let o = sh_as(Caller::Root, d.path(), &["--pids", "0"], "true");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--pids"), "{}", stderr(&o));
}

/// The RLIMIT_NPROC that bounds an unprivileged caller's guest without a cgroup counts the guest's tasks in its
/// own user namespace only: with 100 other processes of the caller's user running on the host (more than
/// `--pids 64`), the guest still starts its 20 sleepers; counted per host user, it could start none.
#[test]
fn the_rlimit_bound_does_not_count_the_callers_other_processes() {
    let mut others = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c"])
        .arg("i=0; while [ $i -lt 100 ]; do sleep 60 & i=$((i+1)); done; echo ready; wait")
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("setpriv runs");
    let group = others.id();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(others.stdout.take().unwrap()), &mut line).unwrap();
    let d = workdir(Caller::Unprivileged);
    let o = sh_as(
        Caller::Unprivileged,
        d.path(),
        &["--pids", "64", "--no-supervisor"],
        "i=0; while [ $i -lt 20 ]; do sleep 30 & i=$((i+1)); echo $i; done",
    );
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{group}")]).status();
    let _ = others.wait();
    assert_eq!(line.trim(), "ready");
    let (out, err) = (stdout(&o), stderr(&o));
    let runs = d.path().join(".repro/runs");
    let run = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
    if record["enforcement"]["pids_cgroup"].is_string() {
        // A delegated cgroup bounds it: the rlimit is not used (nothing to show here).
        assert!(record["enforcement"]["pids_rlimit"].is_null(), "{record}");
        return;
    }
    assert_eq!(record["enforcement"]["pids_rlimit"], 64, "{record}");
    let started: u32 = out.lines().filter_map(|l| l.trim().parse().ok()).max().unwrap_or(0);
    assert_eq!(started, 20, "the caller's 100 other processes were counted against --pids 64: {err}");
    assert_eq!(o.status.code(), Some(0), "{err}");
}
