//! Mount points below host directories the guest cannot search (a `mktemp -d` under /var/tmp, a runner's
//! private work directory): the working directory and `--bind` targets there are reachable, and nothing else
//! those directories hold is visible.

use std::os::unix::fs::{chown, PermissionsExt};
use std::path::Path;

use crate::common::{stderr, stdout};
use crate::harness::{sh_as, Caller, CALLERS};

/// A private directory under /var/tmp (not /tmp: the guest's /tmp is its own), removed when dropped.
fn var_tmp_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("repro-escape-closed-").tempdir_in("/var/tmp").expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// Makes `dir` with `mode`, owned by `owner` (uid, gid), holding the directory `proj` (mode `proj_mode`) and a
/// file `secret` of root's: 0644 if the guest cannot search `dir` natively (then only the cover hides it), 0600 if
/// it can (`open`: readable by no one else, as on the host); returns `proj`.
fn closed_parent(dir: &Path, mode: u32, owner: (u32, u32), proj_mode: u32, open: bool) -> std::path::PathBuf {
    let proj = dir.join("proj");
    std::fs::create_dir_all(&proj).expect("mkdir");
    let secret = dir.join("secret");
    std::fs::write(&secret, "sibling secret\n").expect("write");
    let secret_mode = if open { 0o600 } else { 0o644 };
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(secret_mode)).expect("chmod");
    std::fs::set_permissions(&proj, std::fs::Permissions::from_mode(proj_mode)).expect("chmod");
    chown(dir, Some(owner.0), Some(owner.1)).expect("chown");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
    proj
}

/// What the guest sees of the parent: its listing (one name a line, or nothing if unlistable), whether it read
/// the sibling, whether it could write there.
const PROBE: &str = "pwd; echo work > mine && cat mine; echo ---; ls -A .. 2>/dev/null; echo ---; \
    cat ../secret 2>/dev/null || echo unread; touch ../new 2>/dev/null && echo wrote || echo readonly";

fn check(caller: Caller, proj: &Path, listing: Option<&str>) {
    let o = sh_as(caller, proj, &[], PROBE);
    let label = format!("{caller:?} in {}", proj.display());
    assert_eq!(o.status.code(), Some(0), "{label}: {}", stderr(&o));
    let out = stdout(&o);
    let parts: Vec<&str> = out.split("---\n").collect();
    assert_eq!(parts.len(), 3, "{label}: {out}");
    assert_eq!(parts[0], format!("{}\nwork\n", proj.display()), "{label}");
    if let Some(l) = listing {
        assert_eq!(parts[1], l, "{label}: the guest sees the parent's other entries");
    }
    assert_eq!(parts[2], "unread\nreadonly\n", "{label}: the sibling was read or the parent written");
    let parent = proj.parent().unwrap();
    assert!(!parent.join("new").exists(), "{label}: the guest wrote into the host's parent");
}

/// A working directory below a 0700 directory of root's, and below 0750 and 0711 ones of another user: the run
/// starts there (it was refused with `mkdir ...: Permission denied`), the guest sees only the path to its
/// working directory in a parent it could not search, and reads nothing else of it.
#[test]
fn working_directory_below_closed_parents_as_root() {
    let base = var_tmp_dir();
    for (name, mode, owner, listing) in [
        ("root0700", 0o700, (0, 0), "proj\n"),
        ("other0750", 0o750, (12345, 12345), "proj\n"),
        // Searchable, not listable: the host's own directory, as for any other user.
        ("other0711", 0o711, (12345, 12345), ""),
    ] {
        let proj = closed_parent(&base.path().join(name), mode, owner, 0o755, mode & 0o001 != 0);
        check(Caller::Root, &proj, Some(listing));
    }
    // Two closed levels: the outer one is covered, the inner one is then the cover's own directory.
    let outer = base.path().join("outer");
    let proj = closed_parent(&outer.join("inner"), 0o700, (0, 0), 0o755, false);
    std::fs::write(outer.join("outer-secret"), "x").unwrap();
    std::fs::set_permissions(&outer, std::fs::Permissions::from_mode(0o700)).unwrap();
    check(Caller::Root, &proj, Some("proj\n"));
    let o = sh_as(Caller::Root, &proj, &[], "ls -A ../..");
    assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "inner\n"), "{}", stderr(&o));
}

/// An unprivileged caller in a directory it reaches natively (a 0711 parent of root's, a 0710 one it reaches
/// through its group) runs there too, and reads nothing else of the parent.
#[test]
fn working_directory_below_closed_parents_as_unprivileged() {
    let base = var_tmp_dir();
    for (name, mode, owner) in [("root0711", 0o711, (0, 0)), ("group0710", 0o710, (0, crate::harness::NOBODY))] {
        let proj = closed_parent(&base.path().join(name), mode, owner, 0o777, true);
        check(Caller::Unprivileged, &proj, None);
    }
}

/// A `--bind` whose guest path lies below a 0700 directory of root's: mounted there, with nothing else of that
/// directory visible, as root and unprivileged.
#[test]
fn bind_target_below_a_closed_parent() {
    for caller in CALLERS {
        let base = var_tmp_dir();
        let src = base.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("data"), "bound data\n").unwrap();
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o755)).unwrap();
        let work = base.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
        let closed = base.path().join("closed");
        closed_parent(&closed, 0o700, (0, 0), 0o755, false);
        let target = closed.join("proj").join("data-dir");
        let bind = format!("{}:{}", src.display(), target.display());
        let script = format!(
            "cat {t}/data; ls -A {c}; cat {c}/secret 2>/dev/null || echo unread",
            t = target.display(),
            c = closed.display()
        );
        let o = sh_as(caller, &work, &["--bind", &bind], &script);
        assert_eq!(o.status.code(), Some(0), "{caller:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), "bound data\nproj\nunread\n", "{caller:?}");
    }
}
