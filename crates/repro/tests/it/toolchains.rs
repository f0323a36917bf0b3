//! Toolchains found without flags (rustup, pyenv, a virtualenv), the hint for a command only the host has,
//! `repro.toml`, the epoch stated in the summary line, and Ctrl-C during `run --verify`.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::*;

/// `repro run ARGS -- CMD` in `w` with the test's environment changed by `env` (`None` removes a variable).
fn run_with(w: &Workdir, env: &[(&str, Option<&str>)], args: &[&str], cmd: &[&str]) -> Output {
    let mut c = Command::new(repro_path());
    c.current_dir(w.path()).arg("run").args(args).arg("--").args(cmd).env_remove("SOURCE_DATE_EPOCH");
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    wait_bounded(c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(), "repro run")
}

fn record(w: &Workdir) -> serde_json::Value {
    serde_json::from_slice(&fs::read(w.last_run().join("run.json")).unwrap()).unwrap()
}

fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").expect("HOME is set"))
}

/// rustup's `cargo` (CARGO_HOME/bin on the host's PATH) runs a crate's tests with no flag; CARGO_HOME and
/// RUSTUP_HOME are bound read-only (the test inside the guest proves it), and the record says what and why.
#[test]
fn cargo_test_with_rustup_needs_no_flags() {
    let cargo_home = std::env::var("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|_| home().join(".cargo"));
    assert!(
        cargo_home.join("bin/cargo").is_file(),
        "this test needs rustup's cargo in {} (CI installs Rust with rustup)",
        cargo_home.display()
    );
    let w = Workdir::new();
    fs::write(w.path().join("Cargo.toml"), "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n")
        .unwrap();
    fs::create_dir(w.path().join("src")).unwrap();
    fs::write(
        w.path().join("src/lib.rs"),
        "#[test]\nfn cargo_home_is_read_only() {\n    let h = std::env::var(\"CARGO_HOME\").unwrap();\n    let e = \
         std::fs::write(format!(\"{h}/repro-probe\"), b\"x\").unwrap_err();\n    assert_eq!(e.raw_os_error(), \
         Some(30), \"{e}\");\n}\n",
    )
    .unwrap();
    let o = run_with(&w, &[], &[], &["cargo", "test", "--offline", "-q"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("test result: ok. 1 passed"), "{}", stdout(&o));
    let r = record(&w);
    let t = &r["settings"]["toolchains"][0];
    assert_eq!(t["name"], "rustup");
    assert_eq!(t["command"], cargo_home.join("bin/cargo").to_str().unwrap());
    assert_eq!(t["variables"]["CARGO_HOME"], cargo_home.to_str().unwrap());
    assert!(t["reason"].as_str().unwrap().contains("CARGO_HOME/bin"), "{t}");
    let binds = r["settings"]["binds"].as_array().unwrap();
    let real_home = fs::canonicalize(&cargo_home).unwrap();
    assert!(binds.iter().any(|b| b["host"] == real_home.to_str().unwrap() && b["writable"] == false), "{binds:?}");
    assert!(!cargo_home.join("repro-probe").exists());
}

/// A pyenv shim resolves to the interpreter pyenv would run here, and the guest runs that one, as natively.
#[test]
fn a_pyenv_shim_runs_the_real_interpreter() {
    let root = std::env::var("PYENV_ROOT").map(PathBuf::from).unwrap_or_else(|_| home().join(".pyenv"));
    let shim = root.join("shims/python3");
    assert!(shim.is_file(), "this test needs pyenv with a python3 shim in {}", root.display());
    let w = Workdir::new();
    let script = "import sys; print(sys.executable, sys.version_info[:2])";
    let native = Command::new(&shim).current_dir(w.path()).args(["-c", script]).output().unwrap();
    assert_code(&native, 0);
    let o = run_with(&w, &[], &["-q"], &["python3", "-c", script]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), stdout(&native));
    assert!(stdout(&o).starts_with(&root.join("versions").display().to_string()), "{}", stdout(&o));
    let t = &record(&w)["settings"]["toolchains"][0];
    assert_eq!(t["name"], "pyenv");
    assert!(t["reason"].as_str().unwrap().contains("pyenv shim"), "{t}");
    // Of a directory closed to the guest (/root), it sees the mount point of the version and nothing else; the
    // version is read-only.
    let prefix = PathBuf::from(t["paths"][0].as_str().unwrap());
    let parent = prefix.parent().unwrap();
    let probe = format!(
        "import os, errno\nprint(os.listdir({parent:?}))\ntry:\n    open({file:?}, 'w')\nexcept OSError as e:\n             print(errno.errorcode[e.errno])",
        parent = parent.to_str().unwrap(),
        file = prefix.join("repro-probe").to_str().unwrap()
    );
    let o = run_with(&w, &[], &["-q"], &["python3", "-c", &probe]);
    assert_code(&o, 0);
    let name = prefix.file_name().unwrap().to_str().unwrap();
    assert_eq!(stdout(&o), format!("['{name}']\nEROFS\n"));
    assert!(!prefix.join("repro-probe").exists());
    // A version pinned for the project wins, as with pyenv itself.
    let versions: Vec<String> = fs::read_dir(root.join("versions"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("bin/python3").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let other = versions.iter().find(|v| !stdout(&native).contains(&format!("/versions/{v}/"))).cloned();
    if let Some(v) = other {
        fs::write(w.path().join(".python-version"), format!("{v}\n")).unwrap();
        let o = run_with(&w, &[], &["-q"], &["python3", "-c", "import sys; print(sys.executable)"]);
        assert_code(&o, 0);
        assert_eq!(stdout(&o).trim(), root.join("versions").join(&v).join("bin/python3").to_str().unwrap());
    }
}

/// `pytest`-style: a program of an activated virtualenv (made with the system's python3 in a temp dir the guest
/// does not otherwise see) runs inside it.
#[test]
fn an_activated_virtualenv_is_passed() {
    assert!(Path::new("/usr/bin/python3").is_file(), "this test needs the system's python3 (Debian's python3-venv)");
    let venv_dir = tempfile::Builder::new().prefix("repro-venv-").tempdir().unwrap();
    let venv = venv_dir.path().join("v");
    let made = Command::new("/usr/bin/python3").args(["-m", "venv", "--without-pip"]).arg(&venv).output().unwrap();
    assert_code(&made, 0);
    // A console script as pip would write it.
    let tool = venv.join("bin/hello-tool");
    fs::write(&tool, format!("#!{}/bin/python\nimport sys\nprint(sys.prefix)\n", venv.display())).unwrap();
    fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}/bin:{}", venv.display(), std::env::var("PATH").unwrap_or_default());
    let w = Workdir::new();
    let venv_s = venv.to_str().unwrap();
    let o = run_with(&w, &[("VIRTUAL_ENV", Some(venv_s)), ("PATH", Some(&path))], &["-q"], &["hello-tool"]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o).trim(), venv_s);
    let t = &record(&w)["settings"]["toolchains"][0];
    assert_eq!((t["name"].as_str(), t["variables"]["VIRTUAL_ENV"].as_str()), (Some("virtualenv"), Some(venv_s)));
    // Not activated, but on the host's PATH: its `#!` line names the venv's python by path, so the venv is shown
    // and the guest's PATH finds the program the host's finds (VIRTUAL_ENV stays unset, as on the host).
    let o = run_with(&w, &[("VIRTUAL_ENV", None), ("PATH", Some(&path))], &["-q"], &["hello-tool"]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o).trim(), venv_s);
    let r = record(&w);
    let t = &r["settings"]["toolchains"][0];
    assert_eq!(t["name"], "virtualenv");
    assert!(t["reason"].as_str().unwrap().contains("reached through the #! line of"), "{t}");
    assert_eq!(r["settings"]["env"].get("VIRTUAL_ENV"), None);
}

/// A program the host has outside the guest's view: exit 127 with the flag that fixes it; with that flag, it runs.
#[test]
fn a_command_only_the_host_has_gets_a_hint() {
    let tools = tempfile::Builder::new().prefix("repro-opt-").tempdir().unwrap();
    let bin = tools.path().join("foo/bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(bin.join("foo-tool"), "#!/bin/sh\necho foo ran\n").unwrap();
    fs::set_permissions(bin.join("foo-tool"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", std::env::var("PATH").unwrap_or_default(), bin.display());
    let w = Workdir::new();
    let o = run_with(&w, &[("PATH", Some(&path))], &["-q"], &["foo-tool"]);
    assert_code(&o, 127);
    let prefix = tools.path().join("foo");
    let expected = format!(
        "repro: cannot execute 'foo-tool': No such file or directory (it is {}/foo-tool on the host: add --bind {} \
         or [run] binds in repro.toml",
        bin.display(),
        prefix.display()
    );
    assert!(stderr(&o).contains(&expected), "{}", stderr(&o));
    let full = bin.join("foo-tool");
    let o = run_with(&w, &[], &["-q", "--bind", prefix.to_str().unwrap()], &[full.to_str().unwrap()]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "foo ran\n");
}

fn summary(o: &Output) -> String {
    stderr(o).lines().rfind(|l| l.starts_with("repro: exit")).unwrap_or_default().to_string()
}

/// Every run says its epoch and where it came from.
#[test]
fn the_summary_line_states_the_epoch_and_its_source() {
    let w = Workdir::new();
    let o = run_with(&w, &[], &["--no-config"], &["true"]);
    assert_code(&o, 0);
    assert!(
        summary(&o).contains(
            "; epoch 2025-01-01T00:00:00Z (default: no --epoch, no SOURCE_DATE_EPOCH, not a git checkout); run "
        ),
        "{}",
        stderr(&o)
    );
    let o = run_with(&w, &[("SOURCE_DATE_EPOCH", Some("1700000000"))], &[], &["true"]);
    assert!(summary(&o).contains("; epoch 2023-11-14T22:13:20Z (SOURCE_DATE_EPOCH); "), "{}", stderr(&o));
    let o = run_with(&w, &[("SOURCE_DATE_EPOCH", Some("1700000000"))], &["--epoch", "0"], &["true"]);
    assert!(summary(&o).contains("; epoch 1970-01-01T00:00:00Z (--epoch); "), "{}", stderr(&o));
    let git = Command::new("git")
        .current_dir(w.path())
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "init", "-q"])
        .status()
        .unwrap();
    assert!(git.success());
    let commit = Command::new("git")
        .current_dir(w.path())
        .env("GIT_COMMITTER_DATE", "1600000000 +0000")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x"])
        .status()
        .unwrap();
    assert!(commit.success());
    let o = run_with(&w, &[], &[], &["true"]);
    assert!(summary(&o).contains("; epoch 2020-09-13T12:26:40Z (the commit time of git HEAD); "), "{}", stderr(&o));
}

/// git is started for the epoch only inside a repository, and once per commit (the state directory caches HEAD's
/// commit time): a `git` first on PATH logs each call and runs the real one.
#[test]
fn git_is_started_only_in_a_repository_and_once_per_commit() {
    use std::os::unix::fs::PermissionsExt;
    require_cmd("git");
    let real = find_on_path("git", &std::env::var_os("PATH").unwrap_or_default()).unwrap();
    let bin = tempfile::tempdir().unwrap();
    let log = bin.path().join("calls");
    let logging_git = bin.path().join("git");
    fs::write(
        &logging_git,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n", log.display(), real.display()),
    )
    .unwrap();
    fs::set_permissions(&logging_git, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let w = Workdir::new();
    let run = || {
        let o = run_with(&w, &[("PATH", Some(&path))], &[], &["true"]);
        assert_code(&o, 0);
        summary(&o)
    };
    assert!(run().contains("(default: no --epoch, no SOURCE_DATE_EPOCH, not a git checkout)"));
    assert!(!log.exists(), "outside a repository git is not started");
    let commit = |date: &str| {
        let ok = Command::new(&real)
            .current_dir(w.path())
            .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "--allow-empty", "-m", "x"])
            .env("GIT_COMMITTER_DATE", date)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    assert!(Command::new(&real).current_dir(w.path()).args(["init", "-q"]).status().unwrap().success());
    commit("1600000000 +0000");
    for _ in 0..2 {
        assert!(run().contains("; epoch 2020-09-13T12:26:40Z (the commit time of git HEAD); "));
    }
    let calls = || fs::read_to_string(&log).unwrap_or_default().lines().count();
    assert_eq!(calls(), 1, "the second run took the time from the cache");
    commit("1700000000 +0000");
    assert!(run().contains("; epoch 2023-11-14T22:13:20Z (the commit time of git HEAD); "));
    assert_eq!(calls(), 2, "a new commit: git again");
}

/// `repro.toml`: found from a subdirectory, applied under the flags, recorded; bad ones refused by file and line.
#[test]
fn repro_toml_sets_the_run_and_flags_win() {
    let w = Workdir::new();
    fs::write(
        w.path().join("repro.toml"),
        "[run]\nenv = [\"GREETING=from-file\"]\nepoch = 2024-02-29T12:00:00Z\nseed = 4\nmemory = \"1G\"\n",
    )
    .unwrap();
    // A git root above the file's directory would stop the search there; here the file is at the top.
    fs::create_dir(w.path().join("sub")).unwrap();
    let script = "echo $GREETING; date -u +%F";
    let mut c = Command::new(repro_path());
    c.current_dir(w.path().join("sub")).args(["run", "--", "sh", "-c", script]).env_remove("SOURCE_DATE_EPOCH");
    let o = wait_bounded(c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(), "repro run in sub");
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "from-file\n2024-02-29\n");
    let file = w.path().join("repro.toml");
    assert!(
        summary(&o).contains(&format!("; epoch 2024-02-29T12:00:00Z (epoch in {}); ", file.display())),
        "{}",
        stderr(&o)
    );
    let runs = w.path().join("sub/.repro/runs");
    let dir = fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    let r: serde_json::Value = serde_json::from_slice(&fs::read(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(r["settings"]["project_file"], file.to_str().unwrap());
    assert_eq!((r["settings"]["seed"].as_u64(), r["settings"]["memory_bytes"].as_u64()), (Some(4), Some(1 << 30)));
    assert_eq!(r["settings"]["epoch"]["source"], "project-file");

    // Flags win; --no-config ignores the file; --config names another.
    let o = run_with(&w, &[], &["-q", "--epoch", "0", "--env", "GREETING=flag"], &["sh", "-c", script]);
    assert_eq!(stdout(&o), "flag\n1970-01-01\n");
    let o = run_with(&w, &[], &["-q", "--no-config"], &["sh", "-c", script]);
    assert_eq!(stdout(&o), "\n2025-01-01\n");
    fs::write(w.path().join("other.toml"), "[run]\nenv = [\"GREETING=other\"]\n").unwrap();
    let o = run_with(&w, &[], &["-q", "--config", "other.toml"], &["sh", "-c", script]);
    assert_eq!(stdout(&o), "other\n2025-01-01\n");

    // Bad files: exit 2, the file, the line and the key.
    for (text, expected) in [
        ("[run]\nseed = 1\nenvs = [\"A\"]\n", ":3:1: unknown key `envs`, expected one of"),
        ("[run]\nmemory = \"lots\"\n", "--memory: 'lots' is not a size"),
        ("[run]\nepoch = \"soon\"\n", "repro.toml [run] epoch: 'soon' is not a date"),
        ("[runs]\n", ":1:2: unknown key `runs`, expected one of `run`, `contract`, `remote`"),
    ] {
        fs::write(w.path().join("repro.toml"), text).unwrap();
        let o = run_with(&w, &[], &[], &["true"]);
        assert_code(&o, 2);
        assert!(stderr(&o).contains(expected), "{text:?}: {}", stderr(&o));
        if expected.starts_with(':') {
            assert!(stderr(&o).contains(&format!("repro: {}{expected}", file.display())), "{}", stderr(&o));
        }
    }
}

/// Ctrl-C (or SIGTERM) during `run --verify` stops everything: no second run starts, exit 128 + the signal.
#[test]
fn an_interrupted_verify_stops_and_exits_with_the_signal() {
    for (sig, code, name) in [("INT", 130, "SIGINT"), ("TERM", 143, "SIGTERM")] {
        let w = Workdir::new();
        let fifo = w.path().join("fifo");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        // The guest blocks for real (a fifo nobody writes to), not in a sleep the supervisor would skip.
        let mut child = Command::new(repro_path())
            .current_dir(w.path())
            .args(["run", "--verify", "--", "sh", "-c", "echo ready; exec cat fifo"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        assert!(Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap().success());
        let o = wait_bounded(child, "repro run --verify after a signal");
        assert_code(&o, code);
        assert!(
            stderr(&o).contains(&format!("repro: --verify interrupted by {name} during run 1 of 2: stopped")),
            "{}",
            stderr(&o)
        );
        let runs: Vec<_> = fs::read_dir(w.path().join(".repro/runs")).unwrap().collect();
        assert_eq!(runs.len(), 1, "a second run was started");
    }
}

/// The same for `repro replay --runs N`: Ctrl-C during run 1 stops the loop with 130.
#[test]
fn an_interrupted_replay_with_runs_stops_and_exits_130() {
    let w = Workdir::new();
    let pack = w.path().join("cat.repro");
    // Captured with stdin at its end: `cat` returns at once (`--always`: a pack of a success). `exec`: the signal
    // reaches `cat` itself, not a shell that waits for it.
    let o = wait_bounded(
        Command::new(repro_path())
            .current_dir(w.path())
            .args(["capture", "-q", "--always", "-o", pack.to_str().unwrap(), "--", "sh", "-c", "echo ready; exec cat"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        "repro capture",
    );
    assert_code(&o, 0);
    // Replayed with stdin held open: `cat` blocks for real.
    let mut child = Command::new(repro_path())
        .current_dir(w.path())
        .args(["replay", pack.to_str().unwrap(), "--runs", "3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let o = wait_bounded(child, "repro replay --runs 3 after SIGINT");
    drop(stdin);
    assert_code(&o, 130);
    assert!(stderr(&o).contains("interrupted by SIGINT during run 1 of 3: stopped"), "{}", stderr(&o));
}
