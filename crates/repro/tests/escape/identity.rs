//! Escape attempts: identity (see main.rs for the rules these tests follow). The guest's root must not be the
//! host's: a user namespace always, a range of unprivileged host ids as root, idmapped working directory and
//! `:rw` binds, the run's cgroup under the caller's own seen as `/`, and an init the guest cannot ptrace.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{caller_memory_cgroup, stderr, stdout};
use crate::harness::*;

fn uid_of(c: Caller) -> u32 {
    match c {
        Caller::Root => 0,
        Caller::Unprivileged => NOBODY,
    }
}

fn ok(o: &Output, what: &str) -> String {
    assert_eq!(o.status.code(), Some(0), "{what}: stdout:\n{}\nstderr:\n{}", stdout(o), stderr(o));
    stdout(o)
}

/// The run directory of the last run in `dir` (state directory `.repro`).
fn last_run(dir: &Path) -> PathBuf {
    let runs = dir.join(".repro/runs");
    let mut ids: Vec<_> = std::fs::read_dir(&runs).expect("runs").flatten().map(|e| e.path()).collect();
    ids.sort();
    ids.pop().expect("a run")
}

fn record(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(last_run(dir).join("run.json")).expect("run.json")).expect("json")
}

#[test]
fn guest_root_is_not_host_root_and_cannot_read_root_only_files() {
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    for c in CALLERS {
        let w = workdir(c);
        let o = sh_as(
            c,
            w.path(),
            &[],
            "id -u; cat /proc/self/uid_map /proc/self/gid_map; \
             cat /etc/shadow && echo SHADOW-READ; ls /root >/dev/null && echo ROOT-LISTED; true",
        );
        let out = ok(&o, &format!("{c:?}"));
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("0"), "{c:?}: the guest is root inside");
        let maps: Vec<Vec<u64>> = lines
            .by_ref()
            .take(2)
            .map(|l| l.split_whitespace().map(|n| n.parse().expect("map field")).collect())
            .collect();
        for m in &maps {
            assert_eq!(m[0], 0, "{c:?}: {out}");
            match c {
                // Root maps a range of ids no host account has: never host root.
                Caller::Root => assert!(m[1] >= 65536 && m[2] == 65536, "{c:?}: {out}"),
                Caller::Unprivileged => assert_eq!((m[1], m[2]), (NOBODY as u64, 1), "{c:?}: {out}"),
            }
        }
        let r = record(w.path());
        assert_eq!(r["settings"]["user_namespace"], true);
        assert_eq!(r["settings"]["identity"]["uid_map"]["outside"].as_u64(), Some(maps[0][1]), "recorded mapping");
        assert!(!out.contains("SHADOW-READ") && !out.contains("ROOT-LISTED"), "{c:?}: {out}");
        if let Some(first) = shadow.lines().next() {
            assert!(!out.contains(first), "{c:?}: /etc/shadow leaked");
        }
    }
}

#[test]
fn rw_bind_writes_land_as_the_invoking_user() {
    for c in CALLERS {
        let canary = Tmpfs::canary();
        let w = workdir(c);
        let bind = format!("{}:/tmp/canary:rw", canary.path().display());
        let o = sh_as(c, w.path(), &["--bind", &bind], "echo made > /tmp/canary/made && stat -c %u /tmp/canary/made");
        let out = ok(&o, &format!("{c:?}"));
        assert_eq!(out.trim(), "0", "{c:?}: the guest sees its file as its root's");
        let meta = std::fs::metadata(canary.path().join("made")).expect("the guest wrote through the bind");
        assert_eq!((meta.uid(), meta.gid()), (uid_of(c), uid_of(c)), "{c:?}: the file is the invoking user's");
    }
}

#[test]
fn the_working_directory_looks_as_on_the_host_and_changes_come_back_as_the_invoking_user() {
    // As root: a file of host root in the working directory is guest root's, the guest can chown it, setuid to
    // another id works, and the copies in changes/ belong to the invoking user.
    let w = workdir(Caller::Root);
    std::fs::write(w.path().join("owned"), "x\n").unwrap();
    std::fs::set_permissions(w.path().join("owned"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = sh_as(
        Caller::Root,
        w.path(),
        &[],
        "stat -c %u:%g owned; echo y >> owned && cat owned; chown 42:43 owned && stat -c %u:%g owned; \
         setpriv --reuid=42 --regid=42 --clear-groups id -u; echo new > new",
    );
    let out = ok(&o, "root");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["0:0", "x", "y", "42:43", "42"], "{out}");
    // The writable layer is the init's tmpfs; what `repro run` copies out of it into changes/ is the invoking
    // user's, whatever the guest made it.
    let changes = last_run(w.path()).join("changes");
    assert_eq!(std::fs::metadata(changes.join("new")).unwrap().uid(), 0, "changes/ belongs to the invoking user");
    assert_eq!(std::fs::metadata(changes.join("owned")).unwrap().uid(), 0, "changes/ belongs to the invoking user");
    assert_eq!(std::fs::read_to_string(w.path().join("owned")).unwrap(), "x\n", "the real file is untouched");
}

#[test]
fn keep_changes_are_owned_by_the_invoking_user_without_setuid() {
    for c in CALLERS {
        let w = workdir(c);
        let o = sh_as(
            c,
            w.path(),
            &["--keep-changes"],
            "echo a > kept; mkdir d; echo b > d/f; cp /bin/true s; chmod 6755 s; chmod 2755 d",
        );
        ok(&o, &format!("{c:?}"));
        for p in ["kept", "d", "d/f", "s"] {
            let m = std::fs::metadata(w.path().join(p)).unwrap_or_else(|e| panic!("{c:?}: {p}: {e}"));
            assert_eq!((m.uid(), m.gid()), (uid_of(c), uid_of(c)), "{c:?}: {p} belongs to the invoking user");
            assert_eq!(m.mode() & 0o6000, 0, "{c:?}: {p} kept without setuid/setgid");
        }
    }
}

#[test]
fn the_run_cgroup_is_under_the_callers_and_the_guest_sees_it_as_the_root() {
    for c in CALLERS {
        let w = workdir(c);
        let out = ok(&sh_as(c, w.path(), &[], "cat /proc/self/cgroup"), &format!("{c:?}"));
        for l in out.lines() {
            assert!(l.ends_with(":/"), "{c:?}: the guest sees its cgroup as the root: {out}");
        }
        if c == Caller::Root {
            let cg = record(w.path())["enforcement"]["cgroup"].as_str().map(PathBuf::from);
            let cg = cg.expect("root gets a memory cgroup");
            let parent = caller_memory_cgroup().expect("the caller's cgroup");
            assert_eq!(cg.parent(), Some(parent.as_path()), "the run's cgroup is a child of the caller's");
            assert!(!cg.exists(), "the run's cgroup is removed at the end");
        }
    }
}

/// `sh_as` under `timeout -k 5 40`: a hung sandbox (an init stopped by its guest's ptrace) is killed, not waited
/// for.
fn sh_as_bounded(c: Caller, dir: &Path, args: &[&str], script: &str) -> Output {
    let r = repro_as(c, dir);
    let mut t = Command::new("timeout");
    t.args(["-k", "5", "40"]).arg(r.get_program()).args(r.get_args());
    t.arg("run").arg("-q").args(args).args(["--", "sh", "-c", script]);
    t.current_dir(dir).env_remove("REPRO_STATE_DIR");
    t.output().expect("repro runs")
}

#[test]
fn ptrace_of_the_init_fails_and_the_run_ends() {
    let script = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for req, name in ((16, "ATTACH"), (0x4206, "SEIZE")):
    r = libc.ptrace(req, 1, 0, 0)
    print(name, r, ctypes.get_errno())
for f in ("mem", "environ"):
    try:
        open("/proc/1/" + f, "rb").read(1)
        print(f, "readable")
    except OSError as e:
        print(f, "denied", e.errno)
"#;
    for c in CALLERS {
        for extra in [&[][..], &["--no-supervisor"][..]] {
            let w = workdir(c);
            std::fs::write(w.path().join("t.py"), script).unwrap();
            std::fs::set_permissions(w.path().join("t.py"), std::fs::Permissions::from_mode(0o644)).unwrap();
            // A hung run is killed by sh_as_bounded's `timeout` (exit 124), which `ok` refuses.
            let o = sh_as_bounded(c, w.path(), extra, "python3 t.py");
            let out = ok(&o, &format!("{c:?} {extra:?}"));
            assert!(out.contains("ATTACH -1 1\n") && out.contains("SEIZE -1 1\n"), "{c:?} {extra:?}: {out}");
            assert!(!out.contains("readable"), "{c:?} {extra:?}: {out}");
        }
    }
}

#[test]
fn the_guest_binds_port_80_on_its_loopback() {
    for c in CALLERS {
        let w = workdir(c);
        let o = sh_as(
            c,
            w.path(),
            &[],
            "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 80)); s.listen(); print(\"bound\")'",
        );
        assert_eq!(ok(&o, &format!("{c:?}")).trim(), "bound");
    }
}

#[test]
fn a_bind_that_cannot_be_idmapped_fails_the_setup_clearly() {
    // sysfs does not support idmapped mounts: rather than hand the guest a bind whose ownership is wrong, the run
    // fails with 125 before the guest starts (the guest command would only have listed it).
    let w = workdir(Caller::Root);
    let o = sh_as(Caller::Root, w.path(), &["--bind", "/sys/kernel:/tmp/k:rw"], "echo STARTED");
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(!stdout(&o).contains("STARTED"));
    assert!(stderr(&o).contains("cannot idmap --bind /sys/kernel"), "{}", stderr(&o));
    assert_eq!(record(w.path())["outcome"]["kind"], "setup-failed");
}

#[test]
fn a_project_inside_a_private_directory_works_as_root() {
    // A project under /root (mode 700, host root's): the guest's root, an unprivileged host id, cannot traverse
    // it by name, so the init reaches the run directory and the binds through descriptors.
    let private = tempfile::Builder::new().prefix("repro-private-").tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let project = private.path().join("project");
    let data = private.path().join("data");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("input"), "in\n").unwrap();
    let bind = format!("{}:/tmp/data", data.display());
    let o = sh_as(Caller::Root, &project, &["--bind", &bind], "cat /tmp/data/input; echo out > result; cat result");
    assert_eq!(ok(&o, "root").lines().collect::<Vec<_>>(), ["in", "out"]);
}
