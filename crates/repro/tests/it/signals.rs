//! Signals: forwarded to the guest; a killed `repro run` leaves nothing behind.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

fn spawn_run(w: &Workdir, script: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(repro_path())
        .current_dir(w.path())
        .args(["run", "-q", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

fn wait_ready(out: &mut BufReader<std::process::ChildStdout>) {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
}

fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status().unwrap().success());
}

fn poll(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigint_to_repro_reaches_the_guest() {
    let w = Workdir::new();
    let (mut child, mut out) =
        spawn_run(&w, "trap 'echo got-INT; exit 42' INT; echo ready; while :; do sleep 0.05; done");
    wait_ready(&mut out);
    signal(child.id(), "INT");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(rest, "got-INT\n");
    assert_eq!(status.code(), Some(42));
}

#[test]
fn sigterm_without_a_handler_gives_128_plus_15() {
    let w = Workdir::new();
    let (mut child, mut out) = spawn_run(&w, "echo ready; exec sleep 1000");
    wait_ready(&mut out);
    signal(child.id(), "TERM");
    assert_eq!(child.wait().unwrap().code(), Some(143));
}

/// The processes whose command line is `sleep <marker>`.
fn processes_with(marker: &str) -> Vec<u32> {
    let wanted = format!("sleep\0{marker}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c) == wanted)
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn sigkill_to_repro_leaves_no_process_mount_or_cgroup() {
    let w = Workdir::new();
    let marker = format!("{}", 900000 + std::process::id() % 99999);
    let (mut child, mut out) = spawn_run(&w, &format!("sleep {marker} & echo ready; exec sleep {marker}"));
    wait_ready(&mut out);
    let run = w.last_run();
    let id = run.file_name().unwrap().to_str().unwrap().to_string();
    let cgroups: Vec<std::path::PathBuf> = ["/sys/fs/cgroup/memory/repro", "/sys/fs/cgroup/repro"]
        .iter()
        .map(|b| std::path::Path::new(b).join(&id))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(cgroups.len(), 1, "the run has a cgroup");
    poll("both guest processes run", Duration::from_secs(10), || processes_with(&marker).len() == 2);
    signal(child.id(), "KILL");
    let _ = child.wait();
    poll("guest processes gone", Duration::from_secs(10), || processes_with(&marker).is_empty());
    poll("cgroup removed", Duration::from_secs(10), || !cgroups[0].exists());
    poll("scratch directories removed", Duration::from_secs(10), || {
        !run.join(".root").exists() && !run.join(".work").exists()
    });
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(run.to_str().unwrap()), "no mount of the run is left");
    // The run directory says it did not finish, and nothing claims it did.
    assert!(run.join("INCOMPLETE").exists());
    assert!(!run.join("run.json").exists());
    let o = repro().current_dir(w.path()).args(["runs"]).output().unwrap();
    let listing = stdout(&o);
    let line = listing.lines().find(|l| l.starts_with(&id)).map(|l| l.split_whitespace().collect::<Vec<_>>());
    assert_eq!(line.as_deref().map(|l| l[1]), Some("incomplete"), "{}", stdout(&o));
    let o = repro().current_dir(w.path()).args(["show", &id]).output().unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("is incomplete"));
}

#[test]
fn init_reaps_orphans_and_exits_with_the_guest() {
    let w = Workdir::new();
    // An orphaned grandchild is reaped by the sandbox's PID 1; the run ends with the guest.
    let o = w.sh("(sleep 0.1 &) ; ps -o pid=,comm= -p 1; echo $$; exit 5");
    assert_code(&o, 5);
    let out = stdout(&o);
    assert!(out.contains("repro-init") || out.lines().next().unwrap_or("").trim().starts_with('1'), "{out}");
    assert_eq!(out.lines().nth(1), Some("2"), "the guest is PID 2 in its own PID namespace: {out}");
}
