//! Resource bounds the host depends on: a fork bomb stops at `--pids`.

use std::process::Command;

use crate::common::{stderr, stdout};
use crate::harness::*;

/// With `--pids 64` a guest that starts up to 200 sleepers gets no more than 64 tasks: its shell's fork fails,
/// the run says the pids limit was reached (stderr and run.json), and the host keeps forking. Without a cgroup
/// (the unprivileged caller without a delegated one) the run must say the limit is not enforced instead. With
/// the supervisor and without.
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
            if record["enforcement"]["pids_cgroup"].is_null() {
                assert_eq!(caller, Caller::Unprivileged, "{at}: root has a cgroup: {err}");
                assert!(err.contains("pids limit not enforced"), "{at}: {err}");
                continue;
            }
            assert!(started < 64, "{at}: the guest started {started} sleepers under --pids 64");
            assert!(err.contains("pids limit reached"), "{at}: {err}");
            assert_eq!(record["enforcement"]["pids_limit_reached"], true, "{at}");
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
