//! The command line never panics on bad input: closed pipes, huge numbers, a missing output directory;
//! Ctrl-C stops `run --verify` and `replay --runs` as a whole (exit 130, no report).
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{assert_code, repro_path, stderr, stdout, wait_bounded, Workdir};

/// Runs `repro args` in `dir` with stdout a pipe whose reading end is closed before repro starts (closed before
/// the spawn, so repro cannot write into the pipe's buffer first and exit 0).
fn with_closed_stdout(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(repro_path())
        .args(args)
        .current_dir(dir)
        .env("XDG_CACHE_HOME", dir.join(".cache"))
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn no_panic(o: &Output, what: &str) {
    let err = stderr(o);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{what}: {err}");
}

#[test]
fn closed_pipes_end_quietly_without_a_panic() {
    let wd = Workdir::new();
    for _ in 0..2 {
        assert_code(&wd.sh("true"), 0);
    }
    let chaos_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/chaos");
    let chaos_dir = chaos_dir.to_str().unwrap();
    let hello = format!("{chaos_dir}/hello-world.yaml");
    for args in [
        vec!["runs"],
        vec!["show", "last"],
        vec!["show", "last", "--json"],
        vec!["runs", "--json"],
        vec!["chaos", "list", "--dir", chaos_dir],
        vec!["chaos", "show", &hello],
        vec!["chaos", "validate", &hello],
        vec!["completions", "bash"],
        vec!["doctor"],
    ] {
        let o = with_closed_stdout(wd.path(), &args);
        no_panic(&o, &args.join(" "));
        assert_eq!(o.status.code(), Some(141), "{args:?}: a closed stdout ends with 141\n{}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}: quietly");
    }
    // help is printed by the argument parser, which ignores a closed stdout.
    for args in [vec!["help"], vec!["--help"], vec!["chaos", "--help"], vec!["run", "--help"]] {
        let o = with_closed_stdout(wd.path(), &args);
        no_panic(&o, &args.join(" "));
        assert!(matches!(o.status.code(), Some(0 | 141)), "{args:?}: {:?}", o.status);
    }
    // The real thing: a shell pipeline into head.
    let repro = repro_path();
    for cmd in ["runs", "show last", "completions bash", "help", "chaos list --dir ../../examples/chaos"] {
        let script = format!("{} {cmd} | head -n 1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"", repro.display());
        let o = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(wd.path())
            .env("REPRO_STATE_DIR", wd.path().join(".repro"))
            .output()
            .unwrap();
        no_panic(&o, cmd);
        let code: i32 = stdout(&o).trim().parse().unwrap();
        assert!(code == 0 || code == 141, "{cmd}: {code}");
    }
}

#[test]
fn huge_numbers_in_numeric_flags_are_usage_errors_or_work_never_panics() {
    let wd = Workdir::new();
    let huge = "99999999999999999999999999";
    // (arguments, expected exit status)
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["run", "-q", "--seed", huge, "--", "true"], 2),
        (vec!["run", "-q", "--seed", "18446744073709551615", "--", "true"], 0),
        (vec!["run", "-q", "--cpus", huge, "--", "true"], 2),
        (vec!["run", "-q", "--cpus", "4294967295", "--", "true"], 0),
        (vec!["run", "-q", "--verify", "--runs", huge, "--", "true"], 2),
        (vec!["run", "-q", "--clock-step-ns", huge, "--", "true"], 2),
        (vec!["run", "-q", "--clock-step-ns", "18446744073709551615", "--", "date", "+%s"], 0),
        (vec!["run", "-q", "--memory", "99999999999999999999G", "--", "true"], 2),
        (vec!["run", "-q", "--memory", "18446744073709551615", "--", "true"], 2),
        (vec!["run", "-q", "--memory", "17179869184T", "--", "true"], 2),
        (vec!["run", "-q", "--epoch", huge, "--", "true"], 2),
        (vec!["run", "-q", "--epoch", "9223372036854775807", "--", "true"], 2),
        (vec!["run", "-q", "--epoch=-9223372036854775808", "--", "true"], 2),
        (vec!["run", "-q", "--epoch", "99999-01-01T00:00:00Z", "--", "true"], 2),
        (vec!["run", "-q", "--epoch", "9999-12-31T23:59:59Z", "--", "date", "+%Y"], 0),
        (vec!["run", "-q", "--epoch=-62135596800", "--", "date", "+%Y"], 0),
        (vec!["capture", "-q", "--seed", huge, "--", "true"], 2),
        (vec!["hunt", "--seeds", huge, "--", "true"], 2),
        (vec!["hunt", "--seeds", "0..99999999999999999999999", "--", "true"], 2),
        (vec!["hunt", "--max-runs", huge, "--", "true"], 2),
        (vec!["hunt", "--jobs", huge, "--", "true"], 2),
        (vec!["hunt", "--jobs", "4294967295", "--", "true"], 2),
        (vec!["hunt", "--time-budget", "99999999999999999999h", "--", "true"], 2),
        (vec!["replay", "--runs", huge, "x.repro"], 2),
        (vec!["replay", "--seed", huge, "x.repro"], 2),
        (vec!["chaos", "run", "x.yaml", "--seed", huge], 2),
        (vec!["chaos", "run", "x.yaml", "--max-instances", huge], 2),
        (vec!["chaos", "run", "x.yaml", "--max-duration", "99999999999999999999h"], 2),
        (vec!["chaos", "dashboard", ".", "--port", huge], 2),
    ];
    for (args, want) in cases {
        let t0 = Instant::now();
        let o = Command::new("timeout")
            .arg("60")
            .arg(repro_path())
            .args(&args)
            .current_dir(wd.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        no_panic(&o, &args.join(" "));
        assert_eq!(o.status.code(), Some(want), "{args:?} took {:?}\n{}", t0.elapsed(), stderr(&o));
        if want == 2 {
            assert!(!stderr(&o).is_empty(), "{args:?}: says what is wrong");
        }
    }
}

#[test]
fn capture_into_a_missing_directory_is_refused_before_the_command_runs() {
    let wd = Workdir::new();
    let missing = wd.path().join("no/such/dir/x.repro");
    let o = Command::new(repro_path())
        .args(["capture", "-o"])
        .arg(&missing)
        .args(["--", "sh", "-c", "echo the-command-ran; exit 1"])
        .current_dir(wd.path())
        .output()
        .unwrap();
    assert_code(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains(&format!("the directory {} does not exist", wd.path().join("no/such/dir").display())),
        "{err}"
    );
    assert!(!stdout(&o).contains("the-command-ran"), "the command did not run");
    assert!(!wd.path().join(".repro/runs").exists(), "no run was recorded");
    // A directory given as the pack file is refused as well.
    let o = Command::new(repro_path())
        .args(["capture", "-o"])
        .arg(wd.path())
        .args(["--", "true"])
        .current_dir(wd.path())
        .output()
        .unwrap();
    assert_code(&o, 2);
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
}

#[test]
fn usage_errors_exit_2_not_125() {
    let wd = Workdir::new();
    std::fs::write(wd.path().join("a-file"), "x").unwrap();
    let file = wd.path().join("a-file");
    let under_file = file.join("state");
    let cases: Vec<Vec<String>> = vec![
        vec![
            "run".into(),
            "-q".into(),
            "--state-dir".into(),
            under_file.display().to_string(),
            "--".into(),
            "true".into(),
        ],
        vec!["run".into(), "-q".into(), "--state-dir".into(), file.display().to_string(), "--".into(), "true".into()],
        vec!["run".into(), "-q".into(), "--bind".into(), "/no/such/path".into(), "--".into(), "true".into()],
        vec!["run".into(), "-q".into(), "--dir-order".into(), "bogus".into(), "--".into(), "true".into()],
        vec!["run".into(), "-q".into(), "--verify".into(), "--runs".into(), "1".into(), "--".into(), "true".into()],
        vec!["hunt".into(), "--jobs".into(), "100000".into(), "--".into(), "true".into()],
        vec!["replay".into(), "--runs".into(), "0".into(), file.display().to_string()],
        vec!["chaos".into(), "run".into(), "no-such-experiment".into()],
        vec!["chaos".into(), "evaluate".into(), file.display().to_string()],
    ];
    for args in cases {
        let o = Command::new(repro_path()).args(&args).current_dir(wd.path()).stdin(Stdio::null()).output().unwrap();
        no_panic(&o, &args.join(" "));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).starts_with("repro: "), "{args:?}: {}", stderr(&o));
    }
}

/// Run directories under `dir` (`.repro/runs`).
fn run_dirs(dir: &Path) -> usize {
    std::fs::read_dir(dir.join(".repro/runs")).map(|rd| rd.count()).unwrap_or(0)
}

/// Starts `repro args`, waits until a run directory exists, sends SIGINT and checks: exit 130 (under a hang
/// guard), no report, and no run started after it.
fn sigint_after_first_run(dir: &Path, args: &[&str], forbidden: &[&str]) -> Output {
    let child = Command::new(repro_path())
        .args(args)
        .current_dir(dir)
        .env("XDG_CACHE_HOME", dir.join(".cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let before = run_dirs(dir);
    let deadline = Instant::now() + Duration::from_secs(30);
    while run_dirs(dir) <= before {
        assert!(Instant::now() < deadline, "no run started");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let o = wait_bounded(child, &format!("{args:?} after SIGINT"));
    assert_code(&o, 130);
    let all = format!("{}{}", stdout(&o), stderr(&o));
    for f in forbidden {
        assert!(!all.contains(f), "{f:?} in:\n{all}");
    }
    assert!(all.contains("interrupted by SIGINT"), "{all}");
    let n = run_dirs(dir);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(run_dirs(dir), n, "no run starts after the interrupt");
    assert!(n - before < 40, "stopped early: {} runs", n - before);
    o
}

#[test]
fn sigint_during_run_verify_stops_everything_with_130_and_no_report() {
    let wd = Workdir::new();
    sigint_after_first_run(
        wd.path(),
        &["run", "--verify", "--runs", "200", "--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"],
        &["NOT reproducible", "verified:", "runs differ"],
    );
}

#[test]
fn sigint_during_replay_runs_stops_everything_with_130_and_no_report() {
    let wd = Workdir::new();
    let pack = wd.path().join(".cache/loop.repro");
    std::fs::create_dir_all(pack.parent().unwrap()).unwrap();
    let o = Command::new(repro_path())
        .args(["capture", "-q", "--always", "-o"])
        .arg(&pack)
        .args(["--", "sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 3"])
        .current_dir(wd.path())
        .env("XDG_CACHE_HOME", wd.path().join(".cache"))
        .output()
        .unwrap();
    assert_code(&o, 3);
    sigint_after_first_run(
        wd.path(),
        &["replay", "--runs", "200", pack.to_str().unwrap()],
        &["reproduced", "differs", "NOT reproducible"],
    );
}
