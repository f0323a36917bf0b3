//! Signals: forwarded to the guest; a killed `repro run` leaves nothing behind.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// A running `repro run`, killed when dropped (so a failing test leaves nothing behind).
struct Running {
    child: Child,
    /// Kept open so a guest reading stdin blocks (a sleep would not: the supervisor skips it).
    _stdin: std::process::ChildStdin,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_run(w: &Workdir, script: &str) -> (Running, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(repro_path())
        .current_dir(w.path())
        .args(["run", "-q", "--", "sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let stdin = child.stdin.take().unwrap();
    (Running { child, _stdin: stdin }, out)
}

impl Running {
    /// Waits for the run to end: its exit code and what it printed on stderr (shown when an assertion fails).
    fn finish(&mut self) -> (Option<i32>, String) {
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        (status.code(), err)
    }
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
    let (mut run, mut out) =
        spawn_run(&w, "trap 'echo got-INT; exit 42' INT; echo ready; while :; do sleep 0.05; done");
    wait_ready(&mut out);
    signal(run.child.id(), "INT");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = run.child.wait().unwrap();
    assert_eq!(rest, "got-INT\n");
    assert_eq!(status.code(), Some(42));
}

#[test]
fn sigterm_without_a_handler_gives_128_plus_15() {
    let w = Workdir::new();
    let (mut run, mut out) = spawn_run(&w, "echo ready; exec cat");
    wait_ready(&mut out);
    signal(run.child.id(), "TERM");
    let (code, err) = run.finish();
    assert_eq!(code, Some(143), "stderr: {err}");
}

/// How long a guest's processes may take to end after a forwarded SIGTERM: about 0.04-0.3 s alone, but 3 s was
/// once not enough on CI's 2 cores with the whole suite running (other tests' guests busy-loop too). Children busy
/// on the CPU (`yes`) never end by themselves, so a signal that does not reach them still fails the test.
const SIGNAL_ENDS_WITHIN: Duration = Duration::from_secs(15);

#[test]
fn sigterm_ends_a_shells_background_children() {
    let w = Workdir::new();
    let (mut run, mut out) = spawn_run(&w, "yes >/dev/null & yes >/dev/null & echo ready; wait");
    wait_ready(&mut out);
    signal(run.child.id(), "TERM");
    poll("the run ends", SIGNAL_ENDS_WITHIN, || run.child.try_wait().unwrap().is_some());
    let (code, err) = run.finish();
    assert_eq!(code, Some(143), "stderr: {err}");
}

#[test]
fn sigterm_reaches_every_guest_process_not_only_the_guest() {
    // The shell handles SIGTERM and waits on: its children (one in a session of its own) must get the signal too,
    // as a terminal's Ctrl-C reaches the whole foreground process group.
    let w = Workdir::new();
    let script = "trap 'echo got-TERM' TERM; yes >/dev/null & a=$!; setsid yes >/dev/null & b=$!; echo ready; \
                  wait $a; wait $a; echo \"a: $?\"; wait $b; echo \"b: $?\"";
    let (mut run, mut out) = spawn_run(&w, script);
    wait_ready(&mut out);
    signal(run.child.id(), "TERM");
    poll("the run ends", SIGNAL_ENDS_WITHIN, || run.child.try_wait().unwrap().is_some());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest, "got-TERM\na: 143\nb: 143\n");
    assert_eq!(run.child.wait().unwrap().code(), Some(0), "the shell itself handled it and ended normally");
}

/// SIGTERM and SIGHUP sent to `repro run` reach a child of the guest's shell that traps them itself (in a session
/// of its own: not the shell's process group), whose handler writes a marker; the shell survives with a handler.
#[test]
fn a_shells_child_that_traps_the_signal_writes_its_marker() {
    for sig in ["TERM", "HUP"] {
        let w = Workdir::new();
        let script = format!(
            "trap : {sig}; exec 3<&0; setsid sh -c 'trap \"echo child-got-{sig}; exit 7\" {sig}; echo ready; read x \
             <&3' & c=$!; wait $c; wait $c; echo \"child: $?\""
        );
        let (mut run, mut out) = spawn_run(&w, &script);
        wait_ready(&mut out);
        signal(run.child.id(), sig);
        poll("the run ends", SIGNAL_ENDS_WITHIN, || run.child.try_wait().unwrap().is_some());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let (code, err) = run.finish();
        assert_eq!(rest, format!("child-got-{sig}\nchild: 7\n"), "SIG{sig}: {err}");
        assert_eq!(code, Some(0), "SIG{sig}: the shell handled it and ended normally: {err}");
    }
}

#[test]
fn a_second_sigterm_kills_a_guest_that_ignores_the_first() {
    let w = Workdir::new();
    let (mut run, mut out) = spawn_run(&w, "trap '' TERM; echo ready; exec cat");
    wait_ready(&mut out);
    signal(run.child.id(), "TERM");
    std::thread::sleep(Duration::from_millis(300));
    assert!(run.child.try_wait().unwrap().is_none(), "the guest ignores SIGTERM: the run goes on");
    signal(run.child.id(), "TERM");
    // The guest ignores SIGTERM and reads stdin forever: only the second SIGTERM's kill can end the run.
    poll("the run ends after the second SIGTERM", HANG_GUARD, || run.child.try_wait().unwrap().is_some());
    let status = run.child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "the run ended by the first SIGTERM");
    let mut err = String::new();
    std::io::Read::read_to_string(run.child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("repro: SIGTERM again: killing the sandbox"), "{err}");
}

/// Whether a process is alive (not a zombie).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().map(|r| !r.trim_start().starts_with('Z')).unwrap_or(false))
        .unwrap_or(false)
}

#[test]
fn sigkill_to_repro_leaves_no_process_mount_or_cgroup() {
    let w = Workdir::new();
    let (mut run, mut out) = spawn_run(&w, "mkfifo /tmp/f; cat /tmp/f & echo ready; exec cat");
    wait_ready(&mut out);
    let dir = w.last_run();
    let id = dir.file_name().unwrap().to_str().unwrap().to_string();
    // The run's cgroup is under the caller's own.
    let cgroups: Vec<std::path::PathBuf> =
        caller_memory_cgroup().map(|b| b.join(format!("repro-{id}"))).into_iter().filter(|p| p.exists()).collect();
    assert_eq!(cgroups.len(), 1, "the run has a cgroup under the caller's");
    // The init, the guest shell (now cat) and the background cat.
    let mut pids = Vec::new();
    poll("the guest processes run", Duration::from_secs(10), || {
        pids = std::fs::read_to_string(cgroups[0].join("cgroup.procs")).unwrap().lines().map(String::from).collect();
        pids.len() >= 3
    });
    signal(run.child.id(), "KILL");
    let _ = run.child.wait();
    poll("guest processes gone", Duration::from_secs(10), || !pids.iter().any(|p| alive(p)));
    poll("cgroup removed", Duration::from_secs(10), || !cgroups[0].exists());
    poll("scratch directories removed", Duration::from_secs(10), || {
        !dir.join(".scratch").exists() && !dir.join(".root").exists() && !dir.join(".work").exists()
    });
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.to_str().unwrap()), "no mount of the run is left");
    // The run directory says it did not finish, and nothing claims it did.
    assert!(dir.join("INCOMPLETE").exists());
    assert!(!dir.join("run.json").exists());
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
