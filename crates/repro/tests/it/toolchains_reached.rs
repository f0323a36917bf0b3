//! Toolchains found the way the command reaches them (issue 39): a venv named by its path whose base is a pyenv
//! version, cargo through `env PATH=...`, make and a CI script; the host PATH's interpreter kept; secret paths
//! never shown. Each run is compared with the same command run natively.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::*;

fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").expect("HOME is set"))
}

/// `repro run -q -- CMD` in `w`, with `path` as repro's (and so the host's) PATH when given.
fn run_in(w: &Workdir, path: Option<&str>, args: &[&str], cmd: &[&str]) -> Output {
    let mut c = Command::new(repro_path());
    c.current_dir(w.path()).args(["run", "-q"]).args(args).arg("--").args(cmd);
    if let Some(p) = path {
        c.env("PATH", p);
    }
    wait_bounded(c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(), "repro run")
}

/// The same command run natively in `w`.
fn native(w: &Workdir, path: Option<&str>, cmd: &[&str]) -> Output {
    let mut c = Command::new(cmd[0]);
    c.current_dir(w.path()).args(&cmd[1..]);
    if let Some(p) = path {
        c.env("PATH", p);
    }
    c.output().unwrap()
}

fn record(w: &Workdir) -> serde_json::Value {
    serde_json::from_slice(&fs::read(w.last_run().join("run.json")).unwrap()).unwrap()
}

fn same_as_native(w: &Workdir, path: Option<&str>, cmd: &[&str]) -> Output {
    let n = native(w, path, cmd);
    assert_code(&n, 0);
    let o = run_in(w, path, &[], cmd);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), stdout(&n), "{cmd:?}: {}", stderr(&o));
    o
}

/// A pyenv version with a python3 that makes venvs (3.x), as installed on this machine.
fn pyenv_python() -> PathBuf {
    let root = std::env::var("PYENV_ROOT").map(PathBuf::from).unwrap_or_else(|_| home().join(".pyenv"));
    let mut versions: Vec<PathBuf> = fs::read_dir(root.join("versions"))
        .unwrap_or_else(|e| panic!("this test needs pyenv versions in {}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path().join("bin/python3")))
        .filter(|p| p.is_file() && !p.to_string_lossy().contains("/2."))
        .collect();
    versions.sort();
    versions.pop().expect("a pyenv 3.x version")
}

fn cargo_home() -> PathBuf {
    let h = std::env::var("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|_| home().join(".cargo"));
    assert!(h.join("bin/cargo").is_file(), "this test needs rustup's cargo in {}", h.display());
    h
}

/// `venv/bin/python -m ...` with no `activate` (tox, nox, IDEs): the venv links into a pyenv version under the
/// closed /root; it runs on that interpreter, as natively.
#[test]
fn a_venv_named_by_its_path_runs_on_its_pyenv_base() {
    let python = pyenv_python();
    let w = Workdir::new();
    let made =
        Command::new(&python).current_dir(w.path()).args(["-m", "venv", "--without-pip", "venv"]).output().unwrap();
    assert_code(&made, 0);
    let script = "import sys; print(sys.version, sys.prefix, sys.base_prefix)";
    let o = same_as_native(&w, None, &["venv/bin/python", "-c", script]);
    assert!(stdout(&o).contains(&w.path().join("venv").display().to_string()), "{}", stdout(&o));
    let t = &record(&w)["settings"]["toolchains"][0];
    assert_eq!(t["name"], "virtualenv");
    let base = fs::canonicalize(python.parent().unwrap().parent().unwrap()).unwrap();
    assert!(t["paths"].as_array().unwrap().iter().any(|p| p == base.to_str().unwrap()), "{t}");
    assert!(t["reason"].as_str().unwrap().contains("named by its path"), "{t}");
}

/// cargo reached through `env PATH=...`, a make recipe and a CI script (which also calls the host PATH's
/// python3, pyenv's): the same output as natively.
#[test]
fn cargo_and_python_reached_through_env_make_and_a_script() {
    let cargo_home = cargo_home();
    let w = Workdir::new();
    let env_path = format!("PATH={}/bin:/usr/bin:/bin", cargo_home.display());
    same_as_native(&w, None, &["env", &env_path, "cargo", "--version"]);
    assert_eq!(record(&w)["settings"]["toolchains"][0]["name"], "rustup");
    fs::write(w.path().join("Makefile"), "all:\n\t@cargo --version\n").unwrap();
    require_cmd("make");
    same_as_native(&w, None, &["make", "-s"]);
    let t = &record(&w)["settings"]["toolchains"][0];
    assert!(t["reason"].as_str().unwrap().contains("reached through"), "{t}");
    // The host PATH's python3 is pyenv's (its shims first, as on this machine), not /usr/bin/python3.
    let python = pyenv_python();
    let path = format!("{}:{}", python.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    fs::write(
        w.path().join("ci.sh"),
        "#!/bin/sh\nset -e\npython3 -c 'import sys; print(sys.executable, sys.version)'\ncargo --version\n",
    )
    .unwrap();
    fs::set_permissions(w.path().join("ci.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    for cmd in [&["sh", "ci.sh"][..], &["./ci.sh"][..]] {
        let o = same_as_native(&w, Some(&path), cmd);
        assert!(stdout(&o).starts_with(python.to_str().unwrap()), "{}", stdout(&o));
        let names: Vec<_> = record(&w)["settings"]["toolchains"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        assert!(names.contains(&"rustup".into()) && names.contains(&"pyenv".into()), "{names:?}");
    }
}

/// A program of the host's PATH in a directory the guest sees is found there; one the guest cannot be shown is
/// said on stderr and in run.json, never swapped in silence.
#[test]
fn the_guest_path_finds_the_hosts_program_or_says_why_not() {
    let w = Workdir::new();
    let bin = w.path().join("tools/bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(bin.join("greet"), "#!/bin/sh\necho from tools\n").unwrap();
    fs::set_permissions(bin.join("greet"), fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    same_as_native(&w, Some(&path), &["sh", "-c", "greet"]);
    // A python3 first on the host's PATH in a hidden directory that is no known toolchain.
    let hidden = tempfile::Builder::new().prefix("repro-pathfid-").tempdir().unwrap();
    fs::write(hidden.path().join("python3"), "#!/bin/sh\necho host python\n").unwrap();
    fs::set_permissions(hidden.path().join("python3"), fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", hidden.path().display());
    let o = run_in(&w, Some(&path), &[], &["sh", "-c", "python3 -c 'print(1)'"]);
    assert_code(&o, 0);
    let note = format!(
        "PATH: `python3` is {}/python3 on the host's PATH but the guest runs /usr/bin/python3",
        hidden.path().display()
    );
    assert!(stderr(&o).contains(&format!("repro: warning: {note}")), "{}", stderr(&o));
    let notes = record(&w)["settings"]["path_notes"].clone();
    assert!(notes[0].as_str().unwrap().starts_with(&note), "{notes}");
}

/// Lay out a "toolchain" in `dir` (hidden from the guest: under /tmp): `bin/python` prints the secret.
fn planted(dir: &Path) {
    fs::create_dir_all(dir.join("bin")).unwrap();
    fs::write(dir.join("id_ed25519"), "PRIVATE\n").unwrap();
    fs::write(dir.join("bin/python"), format!("#!/bin/sh\ncat {}/id_ed25519\n", dir.display())).unwrap();
    fs::set_permissions(dir.join("bin/python"), fs::Permissions::from_mode(0o755)).unwrap();
}

/// A venv whose pyvenv.cfg `home` and `bin/python` point into a `.ssh` directory, and a link to it in the working
/// directory: nothing of it is shown, and a bind naming it is refused with the rule. The same layout under another
/// name is shown (what the policy alone prevents).
#[test]
fn secret_directories_are_never_shown() {
    let outside = tempfile::Builder::new().prefix("repro-secret-").tempdir().unwrap();
    for (name, shown) in [("tools", true), (".ssh", false)] {
        let dir = outside.path().join(name);
        planted(&dir);
        let w = Workdir::new();
        fs::create_dir_all(w.path().join("venv/bin")).unwrap();
        fs::write(w.path().join("venv/pyvenv.cfg"), format!("home = {}/bin\n", dir.display())).unwrap();
        std::os::unix::fs::symlink(dir.join("bin/python"), w.path().join("venv/bin/python")).unwrap();
        std::os::unix::fs::symlink(&dir, w.path().join("keys")).unwrap();
        let o = run_in(&w, None, &[], &["venv/bin/python"]);
        assert_eq!(stdout(&o).contains("PRIVATE"), shown, "{name}: {}", stderr(&o));
        let o = run_in(&w, None, &[], &["sh", "-c", "cat keys/id_ed25519 ./keys/id_ed25519"]);
        assert!(!stdout(&o).contains("PRIVATE"), "{name}");
        // A link in the project naming the secret directory is refused as the directory itself would be.
        let dir_s = dir.to_str().unwrap();
        let o = run_in(&w, None, &["--bind", if shown { dir_s } else { "keys" }], &["true"]);
        if shown {
            assert_code(&o, 0);
        } else {
            assert_code(&o, 2);
            assert!(stderr(&o).contains("holds ssh keys (secret path rule '.ssh')"), "{}", stderr(&o));
        }
    }
}

/// A failure on a path the sandbox hid (here a program under the host's /tmp, given through a variable repro
/// cannot resolve before the run) ends with one hint per directory naming the bind that shows it.
#[test]
fn a_failure_on_a_hidden_path_gets_a_hint() {
    let hidden = tempfile::Builder::new().prefix("repro-hidden-").tempdir().unwrap();
    let bin = hidden.path().join("bin");
    fs::create_dir_all(&bin).unwrap();
    fs::write(bin.join("tool"), "#!/bin/sh\necho tool ran\n").unwrap();
    fs::set_permissions(bin.join("tool"), fs::Permissions::from_mode(0o755)).unwrap();
    let w = Workdir::new();
    let script = format!("T={}; $T/tool; $T/tool", bin.display());
    let o = run_in(&w, None, &[], &["sh", "-c", &script]);
    assert_ne!(o.status.code(), Some(0));
    let hint = format!(
        "[repro] the guest could not read {}: the guest has its own /tmp; --bind {} (or binds in repro.toml) shows \
         it read-only",
        bin.display(),
        bin.display()
    );
    assert_eq!(stderr(&o).matches(&hint).count(), 1, "{}", stderr(&o));
    let o = run_in(&w, None, &["--bind", bin.to_str().unwrap()], &["sh", "-c", &script]);
    assert_code(&o, 0);
    assert_eq!(stdout(&o), "tool ran\ntool ran\n");
}
