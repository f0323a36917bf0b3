//! `repro chaos` stays bounded under absurd experiments: refused at load time, no directory created, no
//! panic; SIGINT/SIGTERM undo what was injected and end the run (how fast: bench/chaos.sh).
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{assert_code, repro, repro_path, stderr, wait_bounded, SmallFs, Workdir, HANG_GUARD};

fn header(id: &str, timeout: &str) -> String {
    format!("apiVersion: repro.dev/chaos/v1\nid: {id}\nversion: 1\ntitle: {id}\nhypothesis: h\ntimeout: {timeout}\n")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `timeout 120 repro chaos <args>` with the tmpfs as working directory (a hang guard: `timeout` exits 124).
fn chaos_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .arg(HANG_GUARD.as_secs().to_string())
        .arg(repro_path())
        .arg("chaos")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("timeout runs repro")
}

#[test]
fn a_hundred_million_instances_are_refused_at_load_time_and_nothing_is_created() {
    let fs = SmallFs::mount("repro-chaos-bounds-", "size=64m,nr_inodes=2000");
    let exp = write(
        fs.path(),
        "huge.yaml",
        &format!(
            "{}workloads:\n  - name: w\n    kind: shell\n    instances: 100000000\n    run: \"true\"\nflow: w\n",
            header("huge", "1m")
        ),
    );
    let before = fs.inodes_used();
    // Refused before anything is built: no instance, directory or inode (checked below), whatever the speed.
    let o = chaos_in(fs.path(), &["run", "huge.yaml", "--state-dir", "state", "-q"]);
    assert_code(&o, 2);
    assert_eq!(
        stderr(&o).trim(),
        "repro: huge.yaml:10:16: workloads[0].instances: 100000000 exceeds the limit of 1000 instances (raise it with --max-instances)"
    );
    assert!(!fs.path().join("state").exists(), "no run directory");
    assert_eq!(fs.inodes_used(), before, "no inode used");
    // validate says the same without running anything; a raised limit lets it load.
    let o = chaos_in(fs.path(), &["validate", exp.to_str().unwrap()]);
    assert_code(&o, 2);
    assert!(stderr(&o).contains("huge.yaml:10:16: workloads[0].instances"), "{}", stderr(&o));
    let o = chaos_in(fs.path(), &["validate", "huge.yaml", "--max-instances", "100000000", "--max-steps", "100000000"]);
    assert_code(&o, 0);
}

#[test]
fn instance_directories_are_created_when_an_instance_starts() {
    // 300 instances; the adapter's create hook fails for instance 5, which ends the run: only the
    // instances that got as far as starting (0 to 5) have a directory, not all 300.
    let fs = SmallFs::mount("repro-chaos-bounds-", "size=64m,nr_inodes=2000");
    std::fs::create_dir_all(fs.path().join("adapters")).unwrap();
    write(
        fs.path(),
        "adapters/picky.yaml",
        "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: picky\ndriver: process\ninstance:\n  create: '[ \"$CHAOS_EXPERIMENT_WORKLOAD_INSTANCE_INDEX\" != 5 ]'\n",
    );
    write(
        fs.path(),
        "lazy.yaml",
        &format!(
            "{}default-adapter: picky\nworkloads:\n  - name: w\n    kind: shell\n    instances: 300\n    run: \"true\"\nflow: w\n",
            header("lazy", "1m")
        ),
    );
    let before = fs.inodes_used();
    let o = chaos_in(fs.path(), &["run", "lazy.yaml", "--state-dir", "state", "-q"]);
    assert_code(&o, 2);
    let run = std::fs::read_dir(fs.path().join("state/lazy")).unwrap().next().unwrap().unwrap().path();
    let mut names: Vec<String> = std::fs::read_dir(run.join("workloads/w/instances"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["w-0", "w-1", "w-2", "w-3", "w-4", "w-5"]);
    assert!(fs.inodes_used() - before < 200, "{} inodes", fs.inodes_used() - before);
}

#[test]
fn the_step_limit_also_holds_while_the_flow_runs() {
    // `repeat: {for}` cannot be counted in advance: the runner stops it at --max-steps.
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "spin.yaml",
        &format!("{}flow:\n  repeat: {{for: 1h, do: {{delay: 0s}}}}\n", header("spin", "2h")),
    );
    // The guard kills a run that spins for its hour: no exit code.
    let o = repro()
        .current_dir(wd.path())
        .args(["chaos", "run"])
        .arg(&exp)
        .args(["--state-dir", "state", "-q", "--max-steps", "50"])
        .timeout(HANG_GUARD)
        .output()
        .unwrap();
    assert_code(&o, 2);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("the flow ran 51 steps exceeds the limit of 50 steps (raise it with --max-steps)"), "{out}");
}

#[test]
fn an_overflowing_timeout_is_a_located_error_with_exit_2() {
    let wd = Workdir::new();
    for (value, want) in [
        ("99999999999999999999h", "o.yaml:6:10: timeout: \"99999999999999999999h\" is too large for a duration"),
        ("99999999999999999999", "o.yaml:6:10: timeout: "),
        ("25h", "o.yaml:6:10: timeout: 25h exceeds the limit of 24h for a duration (raise it with --max-duration)"),
    ] {
        write(wd.path(), "o.yaml", &format!("{}flow: {{delay: 1s}}\n", header("o", value)));
        for cmd in ["run", "validate", "show", "preflight"] {
            let o = repro().current_dir(wd.path()).args(["chaos", cmd, "o.yaml"]).output().unwrap();
            assert_code(&o, 2);
            let err = stderr(&o);
            assert!(err.starts_with(&format!("repro: {want}")), "{cmd} {value}: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
    write(wd.path(), "o.yaml", &format!("{}flow: {{delay: 1s}}\n", header("o", "25h")));
    let o =
        repro().current_dir(wd.path()).args(["chaos", "validate", "o.yaml", "--max-duration", "48h"]).output().unwrap();
    assert_code(&o, 0);
    let o = repro()
        .current_dir(wd.path())
        .args(["chaos", "validate", "o.yaml", "--max-duration", "99999999999999999999h"])
        .output()
        .unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("too large for a duration"), "{}", stderr(&o));
}

/// An experiment that SIGSTOPs its own workload instance (a `sleep 300`), then sleeps for 5 minutes.
fn frozen_experiment(dir: &Path) -> PathBuf {
    write(
        dir,
        "frz.yaml",
        &format!(
            "{}workloads:\n  - name: w\n    kind: shell\n    run: exec sleep 300\noperations:\n  - {{name: freeze-it, uses: freeze, target: w}}\nflow:\n  parallel:\n    - w\n    - serial: [{{wait: {{workload: w, condition: started}}}}, freeze-it, {{delay: 300s}}]\n",
            header("frz", "10m")
        ),
    )
}

fn state(pid: i64) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(") ").next()?.chars().next()
}

fn timeline(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("timeline.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Starts the frozen experiment, waits until the freeze is verified, sends `sig`, and checks: exit with `code`
/// before the flow's 300 s delay (how fast: bench/chaos.sh), the instance resumed by the undo and then killed,
/// the run directory marked.
fn interrupt_mid_experiment(sig: &str, code: i32) {
    let wd = Workdir::new();
    let exp = frozen_experiment(wd.path());
    let child = Command::new(repro_path())
        .current_dir(wd.path())
        .args(["chaos", "run"])
        .arg(&exp)
        .args(["--state-dir", "state", "-q"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (dir, pid) = loop {
        assert!(Instant::now() < deadline, "the freeze was never verified");
        let found = std::fs::read_dir(wd.path().join("state/frz")).ok().and_then(|mut rd| rd.next());
        if let Some(d) = found.map(|e| e.unwrap().path()) {
            let tl = timeline(&d);
            if tl.iter().any(|e| e["event"] == "operation.verified") {
                let created = tl.iter().find(|e| e["event"] == "instance.created").unwrap();
                break (d, created["pid"].as_i64().unwrap());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(state(pid), Some('T'), "the instance is stopped by the fault");
    assert!(Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap().success());
    let out = wait_bounded(child, &format!("chaos run after SIG{sig}"));
    assert_code(&out, code);
    // Nothing of the run is left: the instance (resumed, then killed) is gone or a zombie being reaped (by
    // init, once the harness is gone: poll with a hang guard).
    let t = Instant::now();
    while !matches!(state(pid), None | Some('Z')) && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let gone = matches!(state(pid), None | Some('Z'));
    assert!(gone, "the instance {pid} is still there: {:?}", state(pid));
    let tl = timeline(&dir);
    let undo: Vec<&Value> = tl.iter().filter(|e| e["event"] == "operation.undo").collect();
    assert_eq!(undo.len(), 1, "{tl:?}");
    assert_eq!(undo[0]["ok"], true, "the freeze was undone: {:?}", undo[0]);
    assert_eq!(undo[0]["detail"], "resumed w-0");
    let marker = std::fs::read_to_string(dir.join("INTERRUPTED")).expect("the run is marked interrupted");
    let name = if sig == "INT" { "SIGINT" } else { "SIGTERM" };
    assert!(marker.starts_with(&format!("interrupted by {name}")), "{marker}");
    assert!(!dir.join("INCOMPLETE").exists());
    let verdict: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(verdict["verdict"], "ERROR");
    assert_eq!(verdict["reason"], format!("interrupted by {name}"));
    let last = tl.last().unwrap();
    assert_eq!(last["event"], "run.finished");
    assert_eq!(last["interrupted"], name);
}

#[test]
fn sigterm_mid_experiment_undoes_the_fault_and_exits_143() {
    interrupt_mid_experiment("TERM", 143);
}

#[test]
fn sigint_mid_experiment_undoes_the_fault_and_exits_130() {
    interrupt_mid_experiment("INT", 130);
}

#[test]
fn a_cleanup_that_overruns_is_cut_at_the_deadline() {
    // An adapter operation whose undo hook ignores SIGTERM and sleeps: the cleanup budget cuts it (the undo is
    // recorded as failed rather than waited out), and the run still ends.
    let wd = Workdir::new();
    std::fs::create_dir_all(wd.path().join("adapters")).unwrap();
    write(
        wd.path(),
        "adapters/slow.yaml",
        "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: slow\ndriver: process\noperations:\n  - name: slow-undo\n    run: \"true\"\n    undo: \"trap '' TERM; sleep 30\"\n",
    );
    let exp = write(
        wd.path(),
        "slow.yaml",
        &format!(
            "{}default-adapter: slow\noperations:\n  - {{name: op, uses: slow-undo}}\nflow:\n  serial: [op, {{delay: 300s}}]\n",
            header("slow", "10m")
        ),
    );
    let child = Command::new(repro_path())
        .current_dir(wd.path())
        .args(["chaos", "run"])
        .arg(&exp)
        .args(["--state-dir", "state", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let dir = loop {
        assert!(Instant::now() < deadline, "the operation never ran");
        let found = std::fs::read_dir(wd.path().join("state/slow")).ok().and_then(|mut rd| rd.next());
        if let Some(d) = found.map(|e| e.unwrap().path()) {
            if timeline(&d).iter().any(|e| e["event"] == "node.started" && e["delay"].is_number()) {
                break d;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
    let out = wait_bounded(child, "chaos run after SIGTERM");
    assert_eq!(out.status.code(), Some(143));
    assert!(dir.join("INTERRUPTED").is_file());
    let undo: Vec<Value> = timeline(&dir).into_iter().filter(|e| e["event"] == "operation.undo").collect();
    assert_eq!(undo.len(), 1);
    assert_eq!(undo[0]["ok"], false, "the undo hook was cut short: {:?}", undo[0]);
}
