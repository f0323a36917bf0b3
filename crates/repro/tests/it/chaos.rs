//! End-to-end tests of `repro chaos`: real processes, real servers, real run directories.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    assert_code, repro, repro_path, require_cmd, require_cmds, require_postgres, stderr, stdout, wait_bounded, Workdir,
    HANG_GUARD,
};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/chaos")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// `repro chaos run EXP --state-dir <wd>/state -q [extra]` in the work dir, killed (no exit code) after
/// [`HANG_GUARD`].
fn chaos_run(wd: &Workdir, exp: &Path, extra: &[&str]) -> Output {
    let mut c = repro();
    c.current_dir(wd.path())
        .args(["chaos", "run"])
        .arg(exp)
        .arg("--state-dir")
        .arg(wd.path().join("state"))
        .arg("-q")
        .args(extra)
        .timeout(HANG_GUARD);
    c.output().expect("repro runs")
}

/// `repro chaos run EXP --state-dir <wd>/state -q [extra]` started in the background (stdout and stderr piped).
fn spawn_run(wd: &Workdir, exp: &Path, extra: &[&str]) -> std::process::Child {
    Command::new(repro_path())
        .current_dir(wd.path())
        .args(["chaos", "run"])
        .arg(exp)
        .arg("--state-dir")
        .arg(wd.path().join("state"))
        .arg("-q")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("repro runs")
}

/// Polls the first run directory under `state` until `found(dir, its timeline text)` says something, for at
/// most `within`.
fn poll_run<T>(state: &Path, within: Duration, mut found: impl FnMut(&Path, &str) -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let dir = std::fs::read_dir(state).ok().and_then(|mut rd| rd.next()).and_then(|e| e.ok()).map(|e| e.path());
        if let Some(d) = dir {
            let t = std::fs::read_to_string(d.join("timeline.jsonl")).unwrap_or_default();
            if let Some(v) = found(&d, &t) {
                return Some(v);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The harness's time (`t`, seconds since the run started) of the timeline's last event.
fn last_t(tl: &[Value]) -> f64 {
    tl.last().and_then(|e| e["t"].as_f64()).unwrap_or_else(|| panic!("a last event with a time: {tl:?}"))
}

/// The Debian packages of the process-redis adapter (its preflight would say the same, less plainly).
fn require_redis() {
    require_cmds(&["redis-server", "redis-cli", "prometheus-redis-exporter"]);
}

/// The run directory: the last line of `chaos run`'s output.
fn run_dir(o: &Output) -> PathBuf {
    PathBuf::from(stdout(o).lines().last().expect("output").trim())
}

fn timeline(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("timeline.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn events<'a>(tl: &'a [Value], name: &str) -> Vec<&'a Value> {
    tl.iter().filter(|e| e["event"] == name).collect()
}

fn header(id: &str) -> String {
    format!("apiVersion: repro.dev/chaos/v1\nid: {id}\nversion: 1\ntitle: {id}\nhypothesis: h\ntimeout: 1m\n")
}

/// One workload `w` whose script is `script`, an exit-code check and a shell check `out` on a file.
fn simple(id: &str, script: &str, extra: &str) -> String {
    format!(
        "{}workloads:\n  - name: w\n    kind: shell\n    run: |\n      {script}\n    checks:\n      - name: exited-ok\n        kind: exit-code\n      - name: wrote\n        kind: shell\n        run: test -s out\nflow: w\n{extra}",
        header(id)
    )
}

#[test]
fn hello_world_passes_and_leaves_a_complete_run_directory() {
    // Its speed (under 1 s) is measured by bench/chaos.sh, not here.
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("hello-world.yaml"), &["--seed", "0"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("  ok    hello-0/exited-ok\n"), "{out}");
    assert!(out.contains("  ok    hello-0/said-hello\n"), "{out}");
    assert!(out.contains("  ok    adapter/no-leaked-processes\n"), "{out}");
    assert!(out.contains("\nPASS\n"), "{out}");
    let dir = run_dir(&o);
    assert!(dir.starts_with(wd.path().join("state/hello-world").canonicalize().unwrap()));
    // The run writes its page as it finishes, and says where.
    assert!(out.contains(&format!("  report {}\n", dir.join("report.html").display())), "{out}");
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("hello-0/said-hello"), "report.html names the checks");
    for f in [
        "experiment.yaml",
        "adapter.yaml",
        "manifest.json",
        "timeline.jsonl",
        "verdict.json",
        "report.html",
        "logs/harness.log",
        "system/preflight.json",
        "system/adapter-checks.json",
        "workloads/hello/run.sh",
        "workloads/hello/instances/hello-0/env",
        "workloads/hello/instances/hello-0/logs/instance.log",
        "workloads/hello/instances/hello-0/output/greeting",
        "workloads/hello/instances/hello-0/output/.chaos/attempts",
        "workloads/hello/instances/hello-0/output/.chaos/exit_code",
    ] {
        assert!(dir.join(f).is_file(), "missing {f}");
    }
    assert!(!dir.join("INCOMPLETE").exists());
    let out_dir = dir.join("workloads/hello/instances/hello-0/output");
    assert_eq!(std::fs::read_to_string(out_dir.join("greeting")).unwrap(), "hello, world\n");
    assert_eq!(std::fs::read_to_string(out_dir.join(".chaos/exit_code")).unwrap(), "0\n");
    assert_eq!(std::fs::read_to_string(out_dir.join(".chaos/attempts")).unwrap().lines().count(), 1);
    let verdict: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(verdict["verdict"], "PASS");
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["seed"], 0);
    assert_eq!(manifest["experiment"]["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(manifest["adapter"]["name"], "process");
    let tl = timeline(&dir);
    assert_eq!(tl.first().unwrap()["event"], "run.started");
    assert_eq!(tl.last().unwrap()["event"], "run.finished");
    assert_eq!(tl.last().unwrap()["verdict"], "PASS");
    let ts: Vec<f64> = tl.iter().map(|e| e["t"].as_f64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "t is monotonic");
}

#[test]
fn a_failing_check_fails_the_run_with_exit_1() {
    let wd = Workdir::new();
    let exp = write(wd.path(), "fail.yaml", &simple("fail", "echo x > out; exit 3", ""));
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("  FAIL  w-0/exited-ok\n          exit code 3, want 0\n"), "{out}");
    assert!(out.contains("  ok    w-0/wrote\n"), "{out}");
    assert!(out.contains("\nFAIL\n"), "{out}");
}

#[test]
fn a_known_failure_is_xfail_with_exit_0() {
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "xfail.yaml",
        &simple(
            "xfail",
            "exit 3",
            "expectations:\n  - issue: BUG-1\n    kind: known\n    checks: [w/exited-ok, 'w/wr*']\n",
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("  xfail w-0/exited-ok (known: BUG-1)\n"), "{out}");
    assert!(out.contains("  xfail w-0/wrote (known: BUG-1)\n"), "{out}");
    assert!(out.contains("\nXFAIL\n"), "{out}");
}

#[test]
fn a_known_failure_that_passes_is_xpass_and_fails_the_run() {
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "xpass.yaml",
        &simple("xpass", "echo x > out", "expectations:\n  - issue: BUG-2\n    checks: [w/exited-ok]\n"),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("  XPASS w-0/exited-ok (known: BUG-2)\n"), "{out}");
    assert!(out.contains("\nFAIL\n"), "{out}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(run_dir(&o).join("verdict.json")).unwrap()).unwrap();
    assert!(v["reason"].as_str().unwrap().contains("XPASS"), "{v}");
}

#[test]
fn flaky_checks_may_pass_or_fail() {
    let wd = Workdir::new();
    // exited-ok passes, wrote fails: both are covered by a flaky expectation.
    let exp = write(
        wd.path(),
        "flaky.yaml",
        &simple("flaky", "true", "expectations:\n  - issue: RACE-3\n    kind: flaky\n    checks: ['w/*']\n"),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("  ok    w-0/exited-ok (flaky: RACE-3)\n"), "{out}");
    assert!(out.contains("  flaky w-0/wrote (flaky: RACE-3)\n"), "{out}");
    assert!(out.contains("\nXFAIL\n"), "{out}");
    // With everything passing, a flaky expectation leaves a PASS.
    let exp = write(
        wd.path(),
        "flaky2.yaml",
        &simple("flaky2", "echo x > out", "expectations:\n  - issue: RACE-3\n    kind: flaky\n    checks: ['w/*']\n"),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("\nPASS\n"), "{}", stdout(&o));
}

#[test]
fn a_broken_preflight_check_is_error_and_skips_the_flow() {
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "pre.yaml",
        &simple(
            "pre",
            "echo x > out",
            "preflight:\n  - name: has-frobnicator\n    run: echo no frobnicator here; exit 4\n",
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 2);
    let out = stdout(&o);
    assert!(
        out.contains("  FAIL  preflight/has-frobnicator\n          no frobnicator here\n          exit code 4\n"),
        "{out}"
    );
    assert!(out.contains("\nERROR\n"), "{out}");
    let dir = run_dir(&o);
    assert!(!dir.join("workloads/w").exists(), "the flow did not run");
    assert!(events(&timeline(&dir), "flow.skipped").len() == 1);
    // preflight alone says the same.
    let o = repro().current_dir(wd.path()).args(["chaos", "preflight"]).arg(&exp).output().unwrap();
    assert_code(&o, 2);
    assert!(stdout(&o).contains("ERROR"), "{}", stdout(&o));
}

#[test]
fn an_experiment_the_adapter_cannot_run_is_not_applicable() {
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "na.yaml",
        &format!(
            "{}operations:\n  - name: kill-db\n    uses: kill\n    target: database\nflow: kill-db\n",
            header("na")
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("n/a\n  operation kill-db targets database, which adapter process does not have"), "{out}");
    let o = repro().current_dir(wd.path()).args(["chaos", "preflight", "--json"]).arg(&exp).output().unwrap();
    assert_code(&o, 0);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["status"], "n/a");
}

/// An adapter with one long-running target (`sleep`), for freeze/kill tests without a real server.
const SLEEPER_ADAPTER: &str = r#"apiVersion: repro.dev/chaos/v1
kind: adapter
name: sleeper
driver: process
targets:
  - name: sleeper
    start: exec sleep 600
    health:
      run: test -d /proc
    stop-timeout: 2s
"#;

#[test]
fn sigint_runs_the_undo_and_ends_with_130_and_an_interrupted_run() {
    let wd = Workdir::new();
    let adapter = write(wd.path(), "adapters/sleeper.yaml", SLEEPER_ADAPTER);
    let exp = write(
        wd.path(),
        "freeze.yaml",
        &format!(
            "{}default-adapter: sleeper\noperations:\n  - name: freeze-it\n    uses: freeze\n    target: sleeper\nflow:\n  serial:\n    - freeze-it\n    - delay: 60s\n",
            header("freeze")
        ),
    );
    assert!(adapter.is_file());
    let child = spawn_run(&wd, &exp, &[]);
    // Wait until the freeze is verified in the timeline.
    let (dir, frozen_pid) = poll_run(&wd.path().join("state/freeze"), Duration::from_secs(20), |d, t| {
        t.contains("\"operation.verified\"").then(|| {
            let started: Value = t
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .find(|e| e["event"] == "operation.started")
                .unwrap();
            (d.to_path_buf(), started["ids"][0].as_i64().unwrap())
        })
    })
    .expect("freeze never verified");
    let stat = std::fs::read_to_string(format!("/proc/{frozen_pid}/stat")).unwrap();
    assert!(stat.split(") ").nth(1).unwrap().starts_with('T'), "the target is stopped: {stat}");
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    // How fast SIGINT ends a run is measured by bench/chaos.sh; here: it ends, and without the 60 s delay.
    let out = wait_bounded(child, "chaos run after SIGINT");
    assert_code(&out, 130);
    let tl = timeline(&dir);
    assert!(last_t(&tl) < 60.0, "the run did not wait out its 60 s delay: {tl:?}");
    let undo = events(&tl, "operation.undo");
    assert_eq!(undo.len(), 1, "{tl:?}");
    assert_eq!(undo[0]["operation"], "freeze-it");
    assert_eq!(undo[0]["ok"], true);
    let err = events(&tl, "harness.error");
    assert!(err.iter().any(|e| e["reason"] == "interrupted by SIGINT"), "{err:?}");
    assert_eq!(tl.last().unwrap()["verdict"], "ERROR");
    // The target was thawed before it was stopped, and nothing is left running or frozen.
    let checks: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("system/adapter-checks.json")).unwrap()).unwrap();
    let frozen = checks.as_array().unwrap().iter().find(|c| c["id"] == "adapter/nothing-frozen").unwrap();
    assert_eq!(frozen["passed"], true, "{checks}");
    assert!(
        !Path::new(&format!("/proc/{frozen_pid}")).exists() || {
            let s = std::fs::read_to_string(format!("/proc/{frozen_pid}/stat")).unwrap_or_default();
            s.is_empty() || s.contains(") Z")
        }
    );
    assert!(dir.join("verdict.json").is_file());
    assert!(!dir.join("INCOMPLETE").exists());
    let marker = std::fs::read_to_string(dir.join("INTERRUPTED")).unwrap();
    assert!(marker.starts_with("interrupted by SIGINT"), "{marker}");
}

#[test]
fn a_killed_harness_leaves_an_incomplete_run_without_a_verdict_and_its_reaper_stops_everything() {
    let wd = Workdir::new();
    let adapter = write(
        wd.path(),
        "adapter.yaml",
        "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: sleeper\ndriver: process\ntargets:\n  - name: server\n    start: exec sleep 300\n",
    );
    let exp = write(
        wd.path(),
        "long.yaml",
        &format!("{}workloads:\n  - name: w\n    kind: shell\n    run: sleep 30\nflow: w\n", header("long")),
    );
    let mut child = spawn_run(&wd, &exp, &["--adapter", adapter.to_str().unwrap()]);
    let dir = poll_run(&wd.path().join("state/long"), Duration::from_secs(20), |d, t| {
        t.contains("instance.created").then(|| d.to_path_buf())
    })
    .expect("an instance started");
    child.kill().unwrap();
    child.wait().unwrap();
    // The reaper kills the instance's and the target's process groups and removes the scratch directory.
    let tl = timeline(&dir);
    let inst = events(&tl, "instance.created")[0]["pid"].as_i64().unwrap();
    let target = events(&tl, "target.started")[0]["pid"].as_i64().unwrap();
    let until = |d: Duration, f: &dyn Fn() -> bool| {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        f()
    };
    let alive = |pid: i64| {
        Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
    };
    assert!(until(Duration::from_secs(10), &|| !alive(inst) && !alive(target)), "the reaper killed both groups");
    assert!(until(Duration::from_secs(5), &|| dir.join("system/reaped.json").is_file()));
    let reaped: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("system/reaped.json")).unwrap()).unwrap();
    let killed: Vec<i64> = reaped["groups_killed"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert!(killed.contains(&inst) && killed.contains(&target), "{reaped}");
    assert_eq!(reaped["scratch_removed"], true, "{reaped}");
    let scratch = std::env::temp_dir().join(format!("repro-chaos-{}", dir.file_name().unwrap().to_string_lossy()));
    assert!(!scratch.exists());
    assert!(dir.join("INCOMPLETE").is_file());
    assert!(!dir.join("verdict.json").exists());
    let o = repro().args(["chaos", "evaluate", "--json"]).arg(&dir).output().unwrap();
    assert_code(&o, 2);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["verdict"], "ERROR");
    assert!(v["reason"].as_str().unwrap().contains("incomplete"), "{v}");
    assert!(!dir.join("verdict.json").exists(), "evaluate never writes a verdict.json");

    // A run that finishes leaves its reaper nothing to do: no reaped.json.
    let o = chaos_run(&wd, &write(wd.path(), "quick.yaml", &simple("quick", "echo x > out", "")), &[]);
    assert_code(&o, 0);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!run_dir(&o).join("system/reaped.json").exists());
}

#[test]
fn the_same_seed_hits_the_same_instances() {
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "seeded.yaml",
        &format!(
            "{}workloads:\n  - name: w\n    kind: shell\n    instances: 6\n    run: sleep 0.5\noperations:\n  - name: kill-two\n    uses: kill\n    target: w\n    select: 2\nflow:\n  parallel:\n    - w\n    - serial: [{{wait: {{workload: w, condition: started}}}}, kill-two]\nchecks:\n  - name: two-killed\n    kind: shell\n    run: test \"$(grep -c '\"state\":\"Killed\"' timeline.jsonl)\" -eq 2\n",
            header("seeded")
        ),
    );
    let selected = |seed: &str| -> Vec<String> {
        let o = chaos_run(&wd, &exp, &["--seed", seed]);
        assert_code(&o, 0);
        let tl = timeline(&run_dir(&o));
        let sel = events(&tl, "operation.selected");
        assert_eq!(sel.len(), 1);
        assert_eq!(sel[0]["seed"].as_u64().unwrap().to_string(), seed);
        assert_eq!(sel[0]["candidates"].as_array().unwrap().len(), 6);
        let mut killed: Vec<String> = events(&tl, "instance.state")
            .iter()
            .filter(|e| e["state"] == "Killed")
            .map(|e| e["instance"].as_str().unwrap().to_string())
            .collect();
        killed.sort();
        let chosen: Vec<String> =
            sel[0]["selected"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        assert_eq!(killed, chosen, "the selected instances are the ones killed");
        chosen
    };
    let a = selected("11");
    assert_eq!(a.len(), 2);
    assert_eq!(a, selected("11"));
    let others: Vec<Vec<String>> = ["12", "13", "14"].iter().map(|s| selected(s)).collect();
    assert!(others.iter().any(|o| *o != a), "other seeds pick other instances: {a:?} {others:?}");
}

#[test]
fn evaluate_offline_with_a_newer_experiment() {
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("hello-world.yaml"), &[]);
    assert_code(&o, 0);
    let dir = run_dir(&o);
    let verdict_before = std::fs::read_to_string(dir.join("verdict.json")).unwrap();
    // Version 2 adds a timeline check that holds and a shell check that does not.
    let newer = std::fs::read_to_string(examples().join("hello-world.yaml"))
        .unwrap()
        .replace("version: 1", "version: 2")
        .replace(
            "flow: hello",
            "flow: hello\nchecks:\n  - name: hello-collected\n    kind: timeline\n    event: instance.collected\n    where: {instance: hello-0, exit_code: \"0\"}\n  - name: said-goodbye\n    kind: shell\n    run: grep -rq goodbye workloads/hello\n",
        );
    let newer_path = write(wd.path(), "hello-v2.yaml", &newer);
    let o = repro().args(["chaos", "evaluate", "--experiment"]).arg(&newer_path).arg(&dir).output().unwrap();
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("evaluated with"), "{out}");
    assert!(out.contains("  ok    experiment/hello-collected\n"), "{out}");
    assert!(out.contains("  FAIL  experiment/said-goodbye\n"), "{out}");
    assert!(out.contains("\nFAIL\n"), "{out}");
    let evals: Vec<PathBuf> = std::fs::read_dir(dir.join("evaluations")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(evals.len(), 1);
    let ev: Value = serde_json::from_str(&std::fs::read_to_string(&evals[0]).unwrap()).unwrap();
    assert_eq!(ev["verdict"], "FAIL");
    assert_eq!(ev["experiment"]["version"], 2);
    assert_eq!(std::fs::read_to_string(dir.join("verdict.json")).unwrap(), verdict_before, "verdict.json untouched");
    // Without --experiment the run's own experiment.yaml is used and the verdict is the original one.
    let o = repro().args(["chaos", "evaluate", "--json"]).arg(&dir).output().unwrap();
    assert_code(&o, 0);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["verdict"], "PASS");
    assert_eq!(std::fs::read_dir(dir.join("evaluations")).unwrap().count(), 2);
    // Moved elsewhere, the run directory still evaluates: checks read only the run directory.
    let moved = wd.path().join("moved-run");
    std::fs::rename(&dir, &moved).unwrap();
    let o = repro().args(["chaos", "evaluate"]).arg(&moved).output().unwrap();
    assert_code(&o, 0);
    assert!(stdout(&o).contains("  ok    hello-0/said-hello\n"), "{}", stdout(&o));
}

#[test]
fn yaml_errors_name_file_line_column_field_and_expectation() {
    let wd = Workdir::new();
    let cases: &[(&str, String)] = &[
        (
            "unknown-field",
            format!("{}workloads:\n  - name: w\n    kind: shell\n    colour: red\n    run: 'true'\n", header("e1")),
        ),
        (
            "bad-duration",
            header("e2").replace("timeout: 1m", "timeout: five minutes"),
        ),
        (
            "bad-select",
            format!("{}operations:\n  - name: k\n    uses: kill\n    target: w\n    select: some\n", header("e3")),
        ),
        (
            "unknown-flow-leaf",
            format!("{}workloads:\n  - name: w\n    kind: shell\n    run: 'true'\nflow:\n  serial:\n    - w\n    - v\n", header("e4")),
        ),
        ("missing-field", header("e5").replace("hypothesis: h\n", "")),
        (
            "wrong-api-version",
            header("e6").replace("repro.dev/chaos/v1", "chaos/v1alpha1"),
        ),
        (
            "bad-check-kind",
            format!("{}workloads:\n  - name: w\n    kind: shell\n    run: 'true'\n    checks:\n      - name: c\n        kind: exit-status\n", header("e7")),
        ),
        (
            "wait-without-target",
            format!("{}flow:\n  serial:\n    - wait: {{delay: 1s}}\n", header("e8")),
        ),
    ];
    let mut report = String::new();
    for (name, text) in cases {
        let p = write(wd.path(), &format!("{name}.yaml"), text);
        let o = repro().current_dir(wd.path()).args(["chaos", "show", &format!("{name}.yaml")]).output().unwrap();
        assert_code(&o, 2);
        assert!(p.is_file());
        report.push_str(&stderr(&o));
    }
    insta::assert_snapshot!("chaos_yaml_errors", report);
}

#[test]
fn list_reports_invalid_files_and_duplicate_ids() {
    let wd = Workdir::new();
    write(wd.path(), "exps/a.yaml", &simple("alpha", "true", ""));
    write(wd.path(), "exps/b.yaml", &simple("beta", "true", ""));
    // The same id again, a file naming the API that does not parse, one with an unknown field.
    write(wd.path(), "exps/c/again.yaml", &simple("alpha", "false", ""));
    write(wd.path(), "exps/broken.yaml", "apiVersion: repro.dev/chaos/v1\nid: [unclosed\n");
    write(wd.path(), "exps/typo.yaml", &simple("gamma", "true", "hypothesys: typo\n"));
    // YAML that is not the chaos API's is none of its business.
    write(wd.path(), "exps/compose.yaml", "services:\n  web: {image: x}\n");
    let o = repro().current_dir(wd.path()).args(["chaos", "list", "--dir", "exps"]).output().unwrap();
    assert_code(&o, 2);
    let out = stdout(&o);
    assert!(out.contains("alpha (v1)") && out.contains("beta (v1)"), "{out}");
    let invalid: Vec<&str> = out.lines().filter(|l| l.starts_with("INVALID ")).collect();
    assert_eq!(invalid.len(), 3, "{out}");
    assert!(
        invalid.iter().any(|l| l.contains("again.yaml:")
            && l.contains("duplicate experiment id \"alpha\"")
            && l.contains("a.yaml has it too")),
        "{out}"
    );
    assert!(invalid.iter().any(|l| l.contains("broken.yaml:")), "{out}");
    assert!(invalid.iter().any(|l| l.contains("typo.yaml:") && l.contains("hypothesys")), "{out}");
    assert!(!out.contains("compose"), "{out}");
    assert!(stderr(&o).contains("3 invalid experiment files"), "{}", stderr(&o));
    let o = repro().current_dir(wd.path()).args(["chaos", "list", "--dir", "exps", "--json"]).output().unwrap();
    assert_code(&o, 2);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["experiments"].as_array().unwrap().len(), 2, "{v:#}");
    let paths: Vec<&str> = v["invalid"].as_array().unwrap().iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths.len(), 3, "{v:#}");
    assert!(paths.iter().any(|p| p.ends_with("again.yaml")), "{v:#}");
    // An id two files claim is ambiguous: `show` and `run` by id refuse it, naming both.
    let o = repro().current_dir(wd.path()).args(["chaos", "show", "--dir", "exps", "alpha"]).output().unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stderr(&o).contains("duplicate experiment id") && stderr(&o).contains("a.yaml"), "{}", stderr(&o));
    let o = repro().current_dir(wd.path()).args(["chaos", "show", "--dir", "exps", "beta"]).output().unwrap();
    assert_code(&o, 0);
}

#[test]
fn list_show_and_issue_filter() {
    let wd = Workdir::new();
    write(wd.path(), "exps/a.yaml", &simple("alpha", "true", "issues: [ISSUE-7]\n"));
    write(
        wd.path(),
        "exps/b.yaml",
        &simple("beta", "true", "expectations:\n  - issue: ISSUE-8\n    checks: [w/wrote]\n"),
    );
    write(wd.path(), "exps/adapters/sleeper.yaml", SLEEPER_ADAPTER);
    let o = repro().current_dir(wd.path()).args(["chaos", "list", "--dir", "exps"]).output().unwrap();
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("alpha (v1)") && out.contains("beta (v1)"), "{out}");
    assert!(!out.contains("sleeper"), "adapters are not experiments: {out}");
    let o = repro()
        .current_dir(wd.path())
        .args(["chaos", "list", "--dir", "exps", "--issue", "ISSUE-8", "--json"])
        .output()
        .unwrap();
    assert_code(&o, 0);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let ids: Vec<&str> = v["experiments"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["beta"]);
    assert_eq!(v["invalid"], serde_json::json!([]));
    let o = repro().current_dir(wd.path()).args(["chaos", "show", "--dir", "exps", "beta"]).output().unwrap();
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.starts_with("beta (v1)\n"), "{out}");
    assert!(out.contains("ISSUE-8, known to fail:\n    w/wrote"), "{out}");
    let o =
        repro().current_dir(wd.path()).args(["chaos", "show", "--dir", "exps", "--json", "alpha"]).output().unwrap();
    assert_code(&o, 0);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["workloads"][0]["name"], "w");
    let o = repro().current_dir(wd.path()).args(["chaos", "show", "--dir", "exps", "gamma"]).output().unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("experiment \"gamma\" not found"), "{}", stderr(&o));
}

#[test]
fn smoke_example_passes() {
    require_cmd("python3");
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("smoke.yaml"), &["--seed", "5"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("\nPASS\n"), "{out}");
    let dir = run_dir(&o);
    assert!(dir.join("system/metrics/web.jsonl").is_file());
    assert!(dir.join("system/metrics/web.types.json").is_file());
    assert!(dir.join("system/watch/web-log.jsonl").is_file());
    assert!(dir.join("logs/watch-web-log.log").is_file());
    let tl = timeline(&dir);
    assert_eq!(events(&tl, "signal.matched").len(), 1);
    assert_eq!(events(&tl, "operation.reverted").len(), 2, "freeze thawed and web restarted");
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map(|t| t.lines().count()).unwrap_or(0)
}

#[test]
fn redis_keeps_acknowledged_writes_across_kill_9() {
    require_redis();
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("redis-kill-acked-writes.yaml"), &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("  ok    verifier-0/no-acknowledged-write-lost\n"), "{out}");
    assert!(out.contains("  ok    experiment/exporter-sees-redis-up\n"), "{out}");
    assert!(out.contains("\nPASS\n"), "{out}");
    let dir = run_dir(&o);
    let writer = dir.join("workloads/writer/instances/writer-0/output");
    assert!(lines(&writer.join("acked")) > 0 && lines(&writer.join("failed")) > 0);
    let tl = timeline(&dir);
    let exited = events(&tl, "target.exited");
    assert!(exited.iter().any(|e| e["target"] == "redis" && e["signal"] == 9), "redis got SIGKILL: {exited:?}");
    let types: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("system/metrics/redis.types.json")).unwrap()).unwrap();
    assert_eq!(types["redis_up"], "gauge");
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["systems"]["redis"].as_str().unwrap().starts_with("Redis server v="), "{manifest}");
}

#[test]
fn redis_clients_time_out_while_frozen_and_recover() {
    require_redis();
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("redis-freeze.yaml"), &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("  ok    client-0/timed-out-while-frozen\n"), "{out}");
    assert!(out.contains("  ok    client-0/recovered\n"), "{out}");
    assert!(out.contains("  ok    experiment/exporter-saw-redis-down\n"), "{out}");
    assert!(out.contains("  ok    adapter/nothing-frozen\n"), "{out}");
    assert!(out.contains("\nPASS\n"), "{out}");
}

#[test]
fn postgres_keeps_committed_rows_across_kill_9_of_the_postmaster() {
    require_postgres();
    require_cmd("prometheus-postgres-exporter");
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("postgres-kill-postmaster.yaml"), &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("  ok    verifier-0/every-committed-row-present\n"), "{out}");
    assert!(out.contains("  ok    experiment/crash-recovery-ran\n"), "{out}");
    assert!(out.contains("  ok    experiment/exporter-sees-postgres-up\n"), "{out}");
    assert!(out.contains("\nPASS\n"), "{out}");
    let dir = run_dir(&o);
    let ins = dir.join("workloads/inserter/instances/inserter-0/output");
    assert!(lines(&ins.join("committed")) > 0 && lines(&ins.join("failed")) > 0);
    let tl = timeline(&dir);
    assert!(events(&tl, "target.exited").iter().any(|e| e["target"] == "postgres" && e["signal"] == 9));
    let scratch = std::env::temp_dir().join(format!("repro-chaos-{}", dir.file_name().unwrap().to_string_lossy()));
    assert!(!scratch.exists(), "the data directory in the scratch directory is removed after the run");
}

/// A check that passes against the real system fails when the system loses data: the Redis
/// experiment with fsync off and the data thrown away on restart must FAIL (the checks can fail).
#[test]
fn redis_losing_writes_is_caught() {
    require_redis();
    let wd = Workdir::new();
    let adapter = std::fs::read_to_string(examples().join("adapters/process-redis.yaml"))
        .unwrap()
        .replace("--appendonly yes --appendfsync always", "--appendonly no")
        .replace(
            "setup: mkdir -p \"$CHAOS_TARGET_DIR/data\"",
            "setup: mkdir -p \"$CHAOS_TARGET_DIR/data\"\n    # no persistence at all",
        );
    let ad = write(wd.path(), "adapters/lossy-redis.yaml", &adapter);
    let o = chaos_run(&wd, &examples().join("redis-kill-acked-writes.yaml"), &["--adapter", ad.to_str().unwrap()]);
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("  FAIL  verifier-0/no-acknowledged-write-lost\n          lost "), "{out}");
}

#[test]
fn faults_on_targets_and_instances_adapter_operations_repeat_and_undo() {
    let wd = Workdir::new();
    let adapter = format!(
        "{SLEEPER_ADAPTER}operations:\n  - name: flag\n    run: echo \"$CHAOS_OPERATION $CHAOS_OPERATION_RUN pids=$CHAOS_PIDS\" >> \"$CHAOS_RUN_DIR/system/flag-runs\"\n    undo: echo \"undo $CHAOS_OPERATION $CHAOS_OPERATION_RUN\" >> \"$CHAOS_RUN_DIR/system/flag-undos\"\n"
    );
    write(wd.path(), "adapters/sleeper.yaml", &adapter);
    let exp = write(
        wd.path(),
        "ops.yaml",
        &format!(
            r#"{}default-adapter: sleeper
workloads:
  - name: w
    kind: shell
    instances: 2
    run: sleep 0.3; echo done > out
    checks:
      - name: exited-ok
        kind: exit-code
      - name: started-twice
        kind: shell
        run: test "$(wc -l < .chaos/attempts)" -eq 2 && test -s out
operations:
  - {{name: restart-w, uses: restart, target: w, select: all}}
  - {{name: flag-briefly, uses: flag, target: sleeper, duration: 50ms}}
  - {{name: flag-until-end, uses: flag}}
  - {{name: bounce, uses: restart-in-place, target: sleeper}}
  - {{name: kill-sleeper, uses: kill, target: sleeper}}
flow:
  serial:
    - parallel:
        - w
        - serial: [{{wait: {{workload: w, condition: started}}}}, restart-w]
    - repeat: {{times: 2, do: flag-briefly}}
    - flag-until-end
    - bounce
    - kill-sleeper
checks:
  - name: flagged-twice-and-reverted
    kind: shell
    run: |
      test "$(grep -c '^flag-briefly' system/flag-runs)" -eq 2
      test "$(grep -c 'undo flag-briefly' system/flag-undos)" -eq 2
      grep -q 'pids=[0-9]' system/flag-runs
  - name: undone-at-the-end
    kind: timeline
    order:
      - {{event: operation.undo, where: {{operation: kill-sleeper, ok: "true"}}}}
      - {{event: operation.undo, where: {{operation: flag-until-end, ok: "true"}}}}
  - name: restarted-in-place
    kind: timeline
    order:
      - {{event: operation.started, where: {{operation: bounce}}}}
      - {{event: target.restarted, where: {{target: sleeper, operation: bounce}}}}
      - {{event: operation.reverted, where: {{operation: bounce}}}}
"#,
            header("ops")
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    for line in [
        "  ok    w-0/started-twice\n",
        "  ok    w-1/started-twice\n",
        "  ok    experiment/flagged-twice-and-reverted\n",
        "  ok    experiment/undone-at-the-end\n",
        "  ok    experiment/restarted-in-place\n",
        "  ok    adapter/targets-healthy\n",
        "PASS\n",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    let dir = run_dir(&o);
    let tl = timeline(&dir);
    let runs: Vec<u64> = events(&tl, "operation.reverted")
        .iter()
        .filter(|e| e["operation"] == "flag-briefly")
        .map(|e| e["run"].as_u64().unwrap())
        .collect();
    assert_eq!(runs, [1, 2]);
    let undos = std::fs::read_to_string(dir.join("system/flag-undos")).unwrap();
    assert!(undos.contains("undo flag-until-end 1"), "{undos}");
}

#[test]
fn a_failing_adapter_operation_is_error() {
    let wd = Workdir::new();
    let adapter = format!("{SLEEPER_ADAPTER}operations:\n  - name: broken\n    run: echo cannot do it; exit 7\n");
    write(wd.path(), "adapters/sleeper.yaml", &adapter);
    let exp = write(
        wd.path(),
        "broken-op.yaml",
        &format!(
            "{}default-adapter: sleeper\noperations:\n  - {{name: b, uses: broken}}\nflow: b\n",
            header("broken-op")
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 2);
    let out = stdout(&o);
    assert!(out.contains("ERROR\n  b: adapter operation broken failed: exit code 7: cannot do it"), "{out}");
}

#[test]
fn timeouts_workload_and_experiment() {
    let wd = Workdir::new();
    // A workload timeout kills the instance: no exit code, the check fails.
    let exp = write(
        wd.path(),
        "wl-timeout.yaml",
        &format!(
            "{}workloads:\n  - name: w\n    kind: shell\n    timeout: 200ms\n    run: sleep 30\n    checks:\n      - {{name: exited-ok, kind: exit-code}}\nflow: w\n",
            header("wl-timeout")
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("  FAIL  w-0/exited-ok\n          no exit code recorded\n"), "{}", stdout(&o));
    let tl = timeline(&run_dir(&o));
    assert!(events(&tl, "instance.state").iter().any(|e| e["state"] == "TimedOut"));
    assert!(last_t(&tl) < 30.0, "the instance was killed, not waited for: {tl:?}");
    // The experiment's timeout ends the flow: ERROR.
    let exp = write(
        wd.path(),
        "exp-timeout.yaml",
        &format!("{}flow:\n  delay: 30s\n", header("exp-timeout").replace("timeout: 1m", "timeout: 300ms")),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 2);
    assert!(stdout(&o).contains("ERROR\n  the experiment's timeout of 300ms ended the flow"), "{}", stdout(&o));
    let tl = timeline(&run_dir(&o));
    assert!(last_t(&tl) < 30.0, "the flow's 30 s delay was cut: {tl:?}");
    // Something that is not a run directory is bad input.
    let o = repro().args(["chaos", "evaluate"]).arg(wd.path()).output().unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("not a run directory (no experiment.yaml)"), "{}", stderr(&o));
}

#[test]
fn the_steady_state_hypothesis_is_probed_before_and_after_the_flow() {
    let wd = Workdir::new();
    let level = "    run: cat \"$CHAOS_SCRATCH_DIR/level\" 2>/dev/null || echo 5\n    tolerance: {range: [0, 10]}\n";
    // Not steady before: ERROR, and the flow does not run.
    let exp = write(
        wd.path(),
        "unsteady.yaml",
        &format!(
            "{}steady-state:\n  - name: up\n    run: echo starting; exit 3\nworkloads:\n  - {{name: w, kind: shell, run: 'true'}}\nflow: w\n",
            header("unsteady")
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 2);
    let out = stdout(&o);
    assert!(out.contains("ERROR\n  the system was not in steady state before the experiment: steady-state/up: before: the probe did not succeed: exit code 3"), "{out}");
    let tl = timeline(&run_dir(&o));
    assert!(events(&tl, "instance.created").is_empty(), "the flow did not run");
    assert_eq!(events(&tl, "steady-state.probed").len(), 1);

    // Steady before, not after: the run FAILs on the probe, with what it measured.
    let exp = write(
        wd.path(),
        "drifts.yaml",
        &format!(
            "{}steady-state:\n  - name: level\n{level}workloads:\n  - {{name: w, kind: shell, run: 'echo 50 > \"$CHAOS_SCRATCH_DIR/level\"'}}\nflow: w\n",
            header("drifts")
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("FAIL  steady-state/level") && out.contains("after: 50 is outside [0, 10]"), "{out}");
    let dir = run_dir(&o);
    let probed = events(&timeline(&dir), "steady-state.probed")
        .iter()
        .map(|e| (e["phase"].clone(), e["ok"].clone()))
        .collect::<Vec<_>>();
    assert_eq!(probed, [(Value::from("before"), Value::from(true)), (Value::from("after"), Value::from(false))]);
    let rec: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("system/steady-state.json")).unwrap()).unwrap();
    assert_eq!(rec.as_array().unwrap().len(), 2);
    // Offline evaluation gives the same verdict from the record.
    let e = repro().args(["chaos", "evaluate"]).arg(&dir).output().unwrap();
    assert_code(&e, 1);
    let show = repro().args(["chaos", "show"]).arg(&exp).output().unwrap();
    assert!(
        stdout(&show)
            .contains("steady state (probed before and after the flow):\n  level: exit 0 and a value in [0, 10]\n"),
        "{}",
        stdout(&show)
    );

    // Steady throughout: PASS. A bad tolerance is a located error.
    let exp = write(
        wd.path(),
        "steady.yaml",
        &format!(
            "{}steady-state:\n  - name: level\n{level}workloads:\n  - {{name: w, kind: shell, run: 'true'}}\nflow: w\n",
            header("steady")
        ),
    );
    assert_code(&chaos_run(&wd, &exp, &[]), 0);
    let bad = write(
        wd.path(),
        "bad.yaml",
        &format!("{}steady-state:\n  - name: level\n    run: echo 1\n    tolerance: {{range: [5, 1]}}\nworkloads:\n  - {{name: w, kind: shell, run: 'true'}}\nflow: w\n", header("bad")),
    );
    let v = repro().args(["chaos", "validate"]).arg(&bad).output().unwrap();
    assert_code(&v, 2);
    assert!(
        stderr(&v).contains(
            "bad.yaml:10:16: steady-state[0].tolerance: range: expected [lo, hi] with finite lo <= hi, got [5, 1]"
        ),
        "{}",
        stderr(&v)
    );
}

#[path = "chaos_report.rs"]
mod report;

#[path = "chaos_docker.rs"]
mod docker;

#[path = "chaos_replay.rs"]
mod replay;

#[path = "chaos_history.rs"]
mod history;

#[path = "chaos_net.rs"]
mod net;

#[path = "chaos_stress.rs"]
mod stress;
