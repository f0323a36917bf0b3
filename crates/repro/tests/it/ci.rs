//! `--junit FILE` on run, run --verify, replay, hunt and chaos run, read back with an independent parser
//! (junitparser from PyPI); `repro ci init` validated against the published workflow schemas (check-jsonschema).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::*;
use crate::provenance::pyvenv;

/// Reads a JUnit file with junitparser and prints, as JSON, each suite's counts (its attributes and the counts
/// junitparser makes from the testcases), properties and testcases with their results.
const READ_JUNIT: &str = r#"
import json, sys
from junitparser import JUnitXml, TestSuite
xml = JUnitXml.fromfile(sys.argv[1])
suites = [xml] if isinstance(xml, TestSuite) else list(xml)
out = {"tests": xml.tests, "failures": xml.failures, "errors": xml.errors, "skipped": xml.skipped, "suites": []}
for s in suites:
    cases = []
    for c in s:
        cases.append({"classname": c.classname, "name": c.name, "time": c.time,
                      "results": [{"tag": r._tag, "message": r.message, "type": r.type, "text": r.text}
                                  for r in c.result]})
    counted = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
    for c in cases:
        for r in c["results"]:
            counted[{"failure": "failures", "error": "errors", "skipped": "skipped"}[r["tag"]]] += 1
    out["suites"].append({"name": s.name, "tests": s.tests, "failures": s.failures, "errors": s.errors,
                          "skipped": s.skipped, "counted": counted,
                          "properties": {p.name: p.value for p in s.properties()}, "cases": cases})
print(json.dumps(out))
"#;

fn read_junit(path: &Path) -> Value {
    let o = std::process::Command::new(pyvenv().join("bin/python"))
        .arg("-c")
        .arg(READ_JUNIT)
        .arg(path)
        .output()
        .expect("python runs");
    assert!(o.status.success(), "junitparser reads {}: {}\n{}", path.display(), stderr(&o), show(path));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn show(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

/// Checks the counts of the only suite (attributes and what the testcases say agree) and returns it.
fn suite(j: &Value, tests: u64, failures: u64, errors: u64, skipped: u64) -> Value {
    let s = &j["suites"][0];
    assert_eq!(j["suites"].as_array().unwrap().len(), 1, "{j}");
    let want = serde_json::json!({"tests": tests, "failures": failures, "errors": errors, "skipped": skipped});
    for (k, v) in want.as_object().unwrap() {
        assert_eq!(&s[k], v, "{k} in {s}");
        assert_eq!(&s["counted"][k], v, "counted {k} in {s}");
        assert_eq!(&j[k], v, "root {k} in {j}");
    }
    s.clone()
}

fn in_dir(w: &Workdir, args: &[&str]) -> Output {
    repro().current_dir(w.path()).args(args).timeout(HANG_GUARD).output().expect("repro runs")
}

/// The workflow's check that the tests passed: the root element of repro's JUnit has no failure or error.
fn junit_clean(path: &Path) -> bool {
    let check = format!("{}{}", repro_ci_check(), path.display());
    std::process::Command::new("sh").arg("-c").arg(check).status().unwrap().success()
}

fn repro_ci_check() -> &'static str {
    // The same text as repro_ci::pipeline::JUNIT_CLEAN_CHECK (the generated files hold it; the snapshot pins it).
    r#"grep -Eq '<testsuites [^>]*failures="0" errors="0"' "#
}

#[test]
fn run_junit_holds_the_signature_with_control_bytes_made_visible() {
    let w = Workdir::new();
    let script = r#"printf 'boom\000nul\033esc <&> "q"\n' >&2; exit 3"#;
    let junit = w.path().join("run.xml");
    let o = w.run(&["-q", "--junit", junit.to_str().unwrap()], &["sh", "-c", script]);
    assert_code(&o, 3);
    assert!(!junit_clean(&junit));
    let j = read_junit(&junit);
    let s = suite(&j, 1, 1, 0, 0);
    let case = &s["cases"][0];
    assert_eq!(case["classname"], "repro.run");
    let f = &case["results"][0];
    assert_eq!(f["tag"], "failure");
    assert_eq!(f["type"], "exit-status");
    assert_eq!(f["message"], r#"exit 3: boom\x00nul\x1besc <&> "q""#);
    let text = f["text"].as_str().unwrap();
    assert!(text.starts_with("exit status: 3\n"), "{text}");
    assert!(text.contains(r#"  boom\x00nul\x1besc <&> "q""#), "{text}");
    let id = s["properties"]["run_id"].as_str().unwrap();
    assert!(w.last_run().ends_with(id), "{id}");
    assert_eq!(s["properties"]["seed"], "0");
    // The same run with --json: the same status, the same record shape, with or without --junit.
    let plain = w.run(&["-q", "--json"], &["sh", "-c", script]);
    let with = w.run(&["-q", "--json", "--junit", junit.to_str().unwrap()], &["sh", "-c", script]);
    assert_code(&plain, 3);
    assert_code(&with, 3);
    let (a, b): (Value, Value) =
        (serde_json::from_slice(&plain.stdout).unwrap(), serde_json::from_slice(&with.stdout).unwrap());
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&a), keys(&b));
    assert_eq!(a["outcome"], b["outcome"]);
    assert_eq!(a["settings"]["command"], b["settings"]["command"]);
}

#[test]
fn a_passing_run_and_a_missing_junit_directory() {
    let w = Workdir::new();
    let junit = w.path().join("ok.xml");
    assert_code(&w.run(&["-q", "--junit", junit.to_str().unwrap()], &["true"]), 0);
    assert!(junit_clean(&junit));
    suite(&read_junit(&junit), 1, 0, 0, 0);
    // A directory that does not exist is a usage error before anything runs.
    let o = w.run(&["-q", "--junit", "no/such/dir/j.xml"], &["true"]);
    assert_code(&o, 2);
    assert!(
        stderr(&o).contains("--junit no/such/dir/j.xml: the directory no/such/dir does not exist"),
        "{}",
        stderr(&o)
    );
    assert!(
        !w.path().join(".repro/runs").exists() || std::fs::read_dir(w.path().join(".repro/runs")).unwrap().count() == 1
    );
    // A command that is not found is an error, not a failure.
    let nf = w.path().join("nf.xml");
    assert_code(&w.run(&["-q", "--junit", nf.to_str().unwrap()], &["no-such-command-x"]), 127);
    suite(&read_junit(&nf), 1, 0, 1, 0);
}

#[test]
fn verify_writes_one_testcase_per_run() {
    let w = Workdir::new();
    let junit = w.path().join("v.xml");
    let o = w.run(&["-q", "--verify", "--runs", "3", "--junit", junit.to_str().unwrap()], &["sh", "-c", "echo same"]);
    assert_code(&o, 0);
    let s = suite(&read_junit(&junit), 3, 0, 0, 0);
    let names: Vec<&str> = s["cases"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["run 1 of 3: sh -c 'echo same'", "run 2 of 3: sh -c 'echo same'", "run 3 of 3: sh -c 'echo same'"]
    );
    assert_eq!(s["properties"]["identical"], "true");
    // Runs that differ: without the supervisor, /dev/urandom is the host's.
    let differs = w.path().join("d.xml");
    let o = w.run(
        &["-q", "--verify", "--no-supervisor", "--junit", differs.to_str().unwrap()],
        &["sh", "-c", "od -An -N8 -tx8 /dev/urandom"],
    );
    assert_code(&o, 122);
    let s = suite(&read_junit(&differs), 2, 1, 0, 0);
    let f = &s["cases"][1]["results"][0];
    assert_eq!(f["type"], "verify-differs");
    assert!(f["text"].as_str().unwrap().contains("stdout differs at line 1"), "{f}");
    // A failing command verified: identical runs (exit 0) whose testcases fail; the workflow's check sees it.
    let failing = w.path().join("f.xml");
    let o = w.run(&["-q", "--verify", "--junit", failing.to_str().unwrap()], &["sh", "-c", "echo bad >&2; exit 1"]);
    assert_code(&o, 0);
    assert!(!junit_clean(&failing));
    let s = suite(&read_junit(&failing), 2, 2, 0, 0);
    assert_eq!(s["cases"][0]["results"][0]["message"], "exit 1: bad");
}

#[test]
fn replay_writes_one_testcase_per_replay_with_the_pack() {
    let w = Workdir::new();
    let aside = tempfile::tempdir().unwrap();
    let pack = aside.path().join("f.repro");
    let cache = aside.path().join("cache");
    let run = |args: &[&str]| {
        repro()
            .current_dir(w.path())
            .env("XDG_CACHE_HOME", &cache)
            .args(args)
            .timeout(HANG_GUARD)
            .output()
            .expect("repro runs")
    };
    let o = run(&["capture", "-q", "-o", pack.to_str().unwrap(), "--", "sh", "-c", "echo broken >&2; exit 4"]);
    assert_code(&o, 4);
    let junit = w.path().join("r.xml");
    let o = run(&["replay", pack.to_str().unwrap(), "--runs", "2", "--junit", junit.to_str().unwrap()]);
    assert_code(&o, 0);
    let s = suite(&read_junit(&junit), 2, 0, 0, 0);
    assert_eq!(s["properties"]["pack"], pack.to_str().unwrap());
    assert_eq!(s["properties"]["reproduced"], "2/2");
    assert_eq!(s["cases"][1]["name"], "replay 2 of 2: f.repro");
    // A variation that does not reproduce: failures naming the pack, and the same exit status and JSON keys.
    let o = run(&["replay", pack.to_str().unwrap(), "--env", "X=1", "--json"]);
    let nj = w.path().join("n.xml");
    let with = run(&["replay", pack.to_str().unwrap(), "--env", "X=1", "--json", "--junit", nj.to_str().unwrap()]);
    assert_eq!(o.status.code(), with.status.code());
    let (a, b): (Value, Value) =
        (serde_json::from_slice(&o.stdout).unwrap(), serde_json::from_slice(&with.stdout).unwrap());
    assert_eq!(a["exit_status"], b["exit_status"]);
    assert_eq!(a["reproduced"], b["reproduced"]);
    let j = read_junit(&nj);
    let s = &j["suites"][0];
    assert_eq!(s["tests"], 1);
    assert_eq!(s["failures"].as_u64().unwrap(), 1 - b["reproduced"].as_u64().unwrap());
}

#[test]
fn hunt_writes_one_testcase_per_attempt() {
    let w = Workdir::new();
    let junit = w.path().join("h.xml");
    // Fails for about half the seeds: the first byte of the guest's entropy stream.
    let script = "test $(od -An -N1 -tu1 /dev/urandom) -lt 128 || { echo unlucky >&2; exit 1; }";
    let o = in_dir(
        &w,
        &[
            "hunt",
            "--vary",
            "seed",
            "--seeds",
            "6",
            "--keep-going",
            "--max-runs",
            "6",
            "--jobs",
            "2",
            "--json",
            "--junit",
            junit.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    let failed = r["failed"].as_u64().unwrap();
    assert_code(&o, if failed > 0 { 1 } else { 0 });
    let s = suite(&read_junit(&junit), r["runs"].as_u64().unwrap(), failed, 0, 0);
    assert_eq!(s["tests"], 6);
    let cases = s["cases"].as_array().unwrap();
    assert_eq!(cases[0]["name"], "attempt 1: seed=0");
    for c in cases.iter().filter(|c| !c["results"].as_array().unwrap().is_empty()) {
        let f = &c["results"][0];
        assert_eq!(f["message"], "exit 1: unlucky");
        assert!(f["text"].as_str().unwrap().contains("seed: "), "{f}");
    }
}

#[test]
fn chaos_run_writes_one_testcase_per_check() {
    let w = Workdir::new();
    let exp = w.path().join("fail.yaml");
    std::fs::write(
        &exp,
        "apiVersion: repro.dev/chaos/v1\nid: jfail\nversion: 1\ntitle: jfail\nhypothesis: h\ntimeout: 1m\n\
         workloads:\n  - name: w\n    kind: shell\n    run: |\n      echo x > out; exit 3\n    checks:\n      \
         - name: exited-ok\n        kind: exit-code\n      - name: wrote\n        kind: shell\n        run: test -s out\n\
         flow: w\n",
    )
    .unwrap();
    let junit = w.path().join("c.xml");
    let run = |extra: &[&str]| {
        let mut args = vec!["chaos", "run", exp.to_str().unwrap(), "--state-dir", "state", "-q"];
        args.extend_from_slice(extra);
        in_dir(&w, &args)
    };
    let o = run(&["--junit", junit.to_str().unwrap()]);
    assert_code(&o, 1);
    let j = read_junit(&junit);
    let s = &j["suites"][0];
    assert_eq!(s["name"], "chaos jfail");
    assert_eq!(s["failures"], 1, "{s}");
    assert_eq!(s["errors"], 0);
    assert_eq!(s["counted"]["failures"], 1);
    assert_eq!(s["properties"]["verdict"], "FAIL");
    let cases = s["cases"].as_array().unwrap();
    let failed = cases.iter().find(|c| c["name"] == "w-0/exited-ok").expect("the exit-code check");
    assert_eq!(failed["results"][0]["message"], "exit code 3, want 0");
    assert!(cases.iter().any(|c| c["name"] == "w-0/wrote" && c["results"].as_array().unwrap().is_empty()));
    // --json and the status stay as they are with --junit.
    let a = run(&["--json"]);
    let b = run(&["--json", "--junit", junit.to_str().unwrap()]);
    assert_code(&a, 1);
    assert_code(&b, 1);
    let (a, b): (Value, Value) =
        (serde_json::from_slice(&a.stdout).unwrap(), serde_json::from_slice(&b.stdout).unwrap());
    assert_eq!(a["verdict"], b["verdict"]);
    assert_eq!(a["checks"], b["checks"]);
}

fn check_jsonschema(schema: &str, file: &Path) -> Output {
    std::process::Command::new(pyvenv().join("bin/check-jsonschema"))
        .args(["--builtin-schema", schema])
        .arg(file)
        .output()
        .expect("check-jsonschema runs")
}

#[test]
fn ci_init_writes_pipelines_that_validate_against_the_published_schemas() {
    let w = Workdir::new();
    let cases: [(&str, &str, PathBuf); 2] = [
        ("--github", "vendor.github-workflows", w.path().join(".github/workflows/repro.yml")),
        ("--gitlab", "vendor.gitlab-ci", w.path().join(".gitlab-ci.yml")),
    ];
    for (flag, schema, path) in &cases {
        // The default path, with the repair job.
        let o = in_dir(&w, &["ci", "init", flag, "--test-cmd", "cargo test -q", "--repair-agent", "./fix.sh"]);
        assert_code(&o, 0);
        let v = check_jsonschema(schema, path);
        assert!(v.status.success(), "{schema}: {}{}\n{}", stdout(&v), stderr(&v), show(path));
        let text = std::fs::read_to_string(path).unwrap();
        for want in [
            "repro run --verify --junit repro-junit.xml",
            "repro capture -o repro-failure.repro",
            "repro replay repro-failure.repro --runs 3 --junit",
            "repro repair repro-failure.repro --agent",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        // An existing file is kept unless --force.
        let o = in_dir(&w, &["ci", "init", flag, "--test-cmd", "make check"]);
        assert_code(&o, 2);
        assert!(stderr(&o).contains("already exists (--force replaces it)"), "{}", stderr(&o));
        assert_eq!(std::fs::read_to_string(path).unwrap(), text);
        let o = in_dir(&w, &["ci", "init", flag, "--test-cmd", "make check", "--force"]);
        assert_code(&o, 0);
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains("\"make check\"") && !text.contains("repro repair"), "{text}");
        assert!(check_jsonschema(schema, path).status.success());
        // -o elsewhere; and the validator does reject a broken file.
        let other = w.path().join(format!("other{flag}.yml"));
        assert_code(&in_dir(&w, &["ci", "init", flag, "--test-cmd", "true", "-o", other.to_str().unwrap()]), 0);
        let broken = match *flag {
            "--github" => text.replace("runs-on: ubuntu-24.04", "runs-on: {}").replace("steps:", "stepz:"),
            _ => text.replace("stage: test", "stage: [1, 2]").replace("when: on_failure", "when: sometimes"),
        };
        assert_ne!(broken, text);
        let bad = w.path().join("broken.yml");
        std::fs::write(&bad, broken).unwrap();
        let v = check_jsonschema(schema, &bad);
        assert!(!v.status.success(), "{schema} must reject the broken file: {}", stdout(&v));
    }
    // One provider is required.
    assert_code(&in_dir(&w, &["ci", "init", "--test-cmd", "true"]), 2);
    assert_code(&in_dir(&w, &["ci", "init", "--github", "--gitlab", "--test-cmd", "true"]), 2);
}
