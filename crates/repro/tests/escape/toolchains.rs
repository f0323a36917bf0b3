//! Escape attempts: toolchain finding (see main.rs for the rules these tests follow). repro shows the installed
//! toolchains a command reaches; a venv or a link planted in the project that points into `~/.ssh` must not make
//! the keys visible, for either caller, and a bind naming them is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::{assert_code, stderr, stdout};
use crate::harness::*;

const KEY: &str = "PRIVATE-KEY-7c1e";

/// `repro run -q [args] -- CMD` as `caller` in `dir` with `HOME`, bounded by `timeout 60`.
fn run_as(caller: Caller, dir: &Path, home: &Path, args: &[&str], cmd: &[&str]) -> Output {
    let c = repro_as(caller, dir);
    let mut t = Command::new("timeout");
    t.arg("60").arg(c.get_program()).args(c.get_args()).args(["run", "-q"]).args(args).arg("--").args(cmd);
    t.current_dir(dir).env_remove("REPRO_STATE_DIR").env("HOME", home);
    t.output().expect("repro runs")
}

fn own(caller: Caller, p: &Path) {
    if caller == Caller::Unprivileged {
        std::os::unix::fs::lchown(p, Some(NOBODY), Some(NOBODY)).unwrap();
    }
}

#[test]
fn a_planted_venv_or_link_never_shows_ssh_keys() {
    for caller in CALLERS {
        let top = workdir(caller);
        let home = top.path().join("home");
        let keys = home.join(".ssh");
        std::fs::create_dir_all(keys.join("bin")).unwrap();
        std::fs::write(keys.join("id_ed25519"), format!("{KEY}\n")).unwrap();
        std::fs::write(keys.join("bin/python"), format!("#!/bin/sh\ncat {}/id_ed25519\n", keys.display())).unwrap();
        std::fs::set_permissions(keys.join("bin/python"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let proj = top.path().join("proj");
        std::fs::create_dir_all(proj.join("venv/bin")).unwrap();
        std::fs::write(proj.join("venv/pyvenv.cfg"), format!("home = {}/bin\n", keys.display())).unwrap();
        std::os::unix::fs::symlink(keys.join("bin/python"), proj.join("venv/bin/python")).unwrap();
        std::os::unix::fs::symlink(&keys, proj.join("keys")).unwrap();
        for p in [&home, &keys, &keys.join("bin"), &keys.join("id_ed25519"), &keys.join("bin/python")] {
            own(caller, p);
        }
        for p in [&proj, &proj.join("venv"), &proj.join("venv/bin")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        let o = run_as(caller, &proj, &home, &[], &["venv/bin/python"]);
        assert!(!stdout(&o).contains(KEY), "{caller:?}: {}", stderr(&o));
        assert!(o.status.code().is_some_and(|c| c == 126 || c == 127), "{caller:?}: {:?} {}", o.status, stderr(&o));
        let o = run_as(
            caller,
            &proj,
            &home,
            &[],
            &["sh", "-c", "cat keys/id_ed25519 ./keys/id_ed25519; ./venv/bin/python"],
        );
        assert!(!stdout(&o).contains(KEY), "{caller:?}: {}", stderr(&o));
        let o = run_as(caller, &proj, &home, &["--bind", "keys"], &["true"]);
        assert_code(&o, 2);
        assert!(stderr(&o).contains("holds ssh keys (secret path rule '.ssh')"), "{caller:?}: {}", stderr(&o));
    }
}
