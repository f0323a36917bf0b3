//! Git as the user has it: `git status`, `git log` and `git describe` in the guest answer exactly as on the host
//! at a repository's root, in a subdirectory, and in a linked worktree (root and subdirectory), as root and as an
//! unprivileged caller.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::common::{require_cmds, stderr, stdout};
use crate::harness::{sh_as, Caller, CALLERS, NOBODY};

const SCRIPT: &str = "git status 2>&1; git log --oneline 2>&1; git describe --tags 2>&1; echo rc=$?";

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("HOME", "/nonexistent")
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// The script run natively by `caller` in `dir` (git's configuration from the system only, as in the guest).
fn native(caller: Caller, dir: &Path) -> String {
    let mut c = match caller {
        Caller::Root => Command::new("sh"),
        Caller::Unprivileged => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={NOBODY}"), format!("--regid={NOBODY}"), "--clear-groups".into(), "sh".into()]);
            c
        }
    };
    let o = c.args(["-c", SCRIPT]).current_dir(dir).env("HOME", "/nonexistent").output().expect("sh runs");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A repository `repo` with a tag, a change outside `pkg/tests` and an untracked file inside it, and a linked
/// worktree `wt` with a subdirectory; `.repro/` (the runs' state directory, hidden from the guest) is excluded.
fn repository(base: &Path) {
    let repo = base.join("repo");
    std::fs::create_dir_all(repo.join("pkg/tests")).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("top.txt"), "one\n").unwrap();
    std::fs::write(repo.join("pkg/tests/t.txt"), "t\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    git(&repo, &["tag", "v1"]);
    std::fs::write(repo.join("top.txt"), "two\n").unwrap();
    git(&repo, &["commit", "-qam", "second"]);
    std::fs::write(repo.join(".git/info/exclude"), ".repro/\n").unwrap();
    std::fs::write(repo.join("top.txt"), "three\n").unwrap();
    std::fs::write(repo.join("pkg/tests/new.txt"), "new\n").unwrap();
    git(&repo, &["worktree", "add", "-q", "../wt"]);
    std::fs::create_dir_all(base.join("wt/sub")).unwrap();
    std::fs::write(base.join("wt/sub/f.txt"), "f\n").unwrap();
}

#[test]
fn git_answers_as_on_the_host_in_a_repository_its_subdirectories_and_a_worktree() {
    require_cmds(&["git", "setpriv"]);
    for caller in CALLERS {
        // Under /var/tmp, not /tmp: the guest's /tmp is its own.
        let base = tempfile::Builder::new().prefix("repro-it-git-").tempdir_in("/var/tmp").unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        repository(base.path());
        if caller == Caller::Unprivileged {
            let o = Command::new("chown").args(["-R", &format!("{NOBODY}:{NOBODY}")]).arg(base.path()).output();
            assert!(o.is_ok_and(|o| o.status.success()), "chown");
        }
        for sub in ["repo", "repo/pkg/tests", "wt", "wt/sub"] {
            let dir = base.path().join(sub);
            let want = native(caller, &dir);
            assert!(want.contains("On branch") && want.ends_with("rc=0\n"), "{caller:?} {sub}: native: {want}");
            let o = sh_as(caller, &dir, &[], SCRIPT);
            assert_eq!(o.status.code(), Some(0), "{caller:?} {sub}: {}", stderr(&o));
            assert_eq!(stdout(&o), want, "{caller:?} {sub}: the guest's git answers differently");
        }
        // What was shown, and why, is in the run's record.
        let runs = base.path().join("repo/pkg/tests/.repro/runs");
        let run = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
        let rec: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
        let view = &rec["settings"]["repository"];
        let top = base.path().join("repo");
        assert_eq!(view["paths"], serde_json::json!([top.to_string_lossy()]), "{caller:?}: {rec}");
        assert!(view["reason"].as_str().is_some_and(|r| r.contains("git repository")), "{caller:?}: {view}");
    }
}
