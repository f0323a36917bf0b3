//! The commit time of the git HEAD of the working directory (the run's epoch when nothing else sets it), without
//! starting `git` (a few milliseconds of every run's start-up) when the answer is already known:
//!
//! - no `.git` in the directory or any ancestor (and none of the variables that point git elsewhere): git finds
//!   no repository either, so there is no commit time;
//! - HEAD's commit, read from the repository's own files (`HEAD`, the loose ref or `packed-refs`), has its time
//!   in the state directory's cache (`<state>/cache/git-head/`), written after `git` answered for the same
//!   repository and commit. A commit's time never changes (the commit id covers it).
//!
//! Anything else (a commit not in the cache, a ref that cannot be read here: reftable, a symbolic ref, a bare
//! repository, `GIT_DIR` set...) asks `git log -1 --format=%ct HEAD`, as before, and caches a successful answer.

use std::path::{Path, PathBuf};

/// git's variables that move or bound the repository git finds: with any of them set, git is asked.
const GIT_VARS: [&str; 6] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_OBJECT_DIRECTORY",
];

/// The cache's directory under the state directory.
pub const CACHE_DIR: &str = "cache/git-head";

/// What looking for the repository of a directory found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repo {
    /// No repository: git finds none either.
    None,
    /// A `.git` directory or file: the work tree holding it, the repository's own directory (HEAD) and its common
    /// directory (refs).
    Found { top: PathBuf, git_dir: PathBuf, common_dir: PathBuf },
    /// Something only git can tell (a bare repository, git's variables set, an unreadable `.git` file).
    AskGit,
}

/// The repository containing `cwd`, as git would discover it (`var` reads the environment).
pub fn discover(cwd: &Path, var: &dyn Fn(&str) -> Option<String>) -> Repo {
    if GIT_VARS.iter().any(|v| var(v).is_some()) {
        return Repo::AskGit;
    }
    for dir in cwd.ancestors() {
        let dot = dir.join(".git");
        match std::fs::metadata(&dot) {
            Ok(m) if m.is_dir() => return found(dir, dot),
            Ok(m) if m.is_file() => {
                // A linked worktree or a submodule: `gitdir: PATH`, relative to the directory holding the file.
                let Ok(text) = std::fs::read_to_string(&dot) else { return Repo::AskGit };
                let Some(target) = text.strip_prefix("gitdir:").map(str::trim).filter(|t| !t.is_empty()) else {
                    return Repo::AskGit;
                };
                return found(dir, dir.join(target));
            }
            Ok(_) => return Repo::AskGit,
            Err(_) => {}
        }
        // A bare repository (or the inside of a .git directory): git may take it.
        if dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir() {
            return Repo::AskGit;
        }
    }
    Repo::None
}

fn found(top: &Path, git_dir: PathBuf) -> Repo {
    // A linked worktree keeps its HEAD in its own directory and the refs in the common one.
    let common_dir = match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(c) if !c.trim().is_empty() => git_dir.join(c.trim()),
        _ => git_dir.clone(),
    };
    Repo::Found { top: top.to_path_buf(), git_dir, common_dir }
}

fn is_object_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// The commit HEAD names, read from the repository's files; `None` when that takes more than reading a file
/// (git then answers).
pub fn head_commit(git_dir: &Path, common_dir: &Path) -> Option<String> {
    let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    let head = head.trim_end_matches('\n');
    if is_object_id(head) {
        return Some(head.to_string()); // detached
    }
    let name = head.strip_prefix("ref: ")?.trim();
    if !name.starts_with("refs/") || name.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return None;
    }
    // Per-worktree refs live beside HEAD; branches in the common directory.
    for dir in [git_dir, common_dir] {
        if let Ok(v) = std::fs::read_to_string(dir.join(name)) {
            let v = v.trim_end_matches('\n');
            return is_object_id(v).then(|| v.to_string());
        }
    }
    let packed = std::fs::read_to_string(common_dir.join("packed-refs")).ok()?;
    packed.lines().filter(|l| !l.starts_with('#') && !l.starts_with('^')).find_map(|l| {
        let (id, r) = l.split_once(' ')?;
        (r == name && is_object_id(id)).then(|| id.to_string())
    })
}

/// The cache file of `commit` in the repository whose common directory is `common_dir`.
fn cache_file(state_dir: &Path, common_dir: &Path, commit: &str) -> PathBuf {
    let mut h = blake3::Hasher::new();
    h.update(common_dir.as_os_str().as_encoded_bytes());
    h.update(b"\0");
    h.update(commit.as_bytes());
    state_dir.join(CACHE_DIR).join(&h.finalize().to_hex()[..32])
}

/// The cached time of `commit` (the file holds `COMMIT TIME`: a file of another commit is not taken).
fn cached(file: &Path, commit: &str) -> Option<i64> {
    let text = std::fs::read_to_string(file).ok()?;
    let (c, t) = text.trim_end().split_once(' ')?;
    (c == commit).then(|| t.parse().ok()).flatten()
}

/// The commit time of HEAD of the repository containing `cwd`, if any; `state_dir`: where the cache is (none:
/// no cache). `var` reads the environment; `ask_git` is `git log -1 --format=%ct HEAD` in `cwd`.
pub fn head_time(
    cwd: &Path,
    state_dir: Option<&Path>,
    var: &dyn Fn(&str) -> Option<String>,
    ask_git: &dyn Fn(&Path) -> Option<i64>,
) -> Option<i64> {
    let (git_dir, common_dir) = match discover(cwd, var) {
        Repo::None => return None,
        Repo::AskGit => return ask_git(cwd),
        Repo::Found { git_dir, common_dir, .. } => (git_dir, common_dir),
    };
    let (Some(state), Some(commit)) = (state_dir, head_commit(&git_dir, &common_dir)) else { return ask_git(cwd) };
    let common = std::fs::canonicalize(&common_dir).unwrap_or(common_dir);
    let file = cache_file(state, &common, &commit);
    if let Some(t) = cached(&file, &commit) {
        return Some(t);
    }
    let t = ask_git(cwd)?;
    // Best effort: a cache that cannot be written only means git is asked next time.
    if let Some(parent) = file.parent() {
        if std::fs::create_dir_all(parent).is_ok() {
            let _ = crate::rundir::write_atomic(&file, format!("{commit} {t}\n").as_bytes(), false);
        }
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::fs;

    const C1: &str = "1111111111111111111111111111111111111111";
    const C2: &str = "2222222222222222222222222222222222222222";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn no_git_anywhere_is_no_repository_and_git_variables_leave_it_to_git() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("a/b");
        fs::create_dir_all(&sub).unwrap();
        // The temporary directory's ancestors (/tmp, /) hold no repository on a machine that runs the tests.
        assert_eq!(discover(&sub, &no_env), Repo::None);
        let gitdir = |k: &str| (k == "GIT_DIR").then(|| "/x".to_string());
        assert_eq!(discover(&sub, &gitdir), Repo::AskGit);
        fs::create_dir_all(d.path().join("a/.git")).unwrap();
        assert_eq!(
            discover(&sub, &no_env),
            Repo::Found {
                top: d.path().join("a"),
                git_dir: d.path().join("a/.git"),
                common_dir: d.path().join("a/.git")
            }
        );
        // A bare repository between: git decides.
        for p in ["a/b/objects", "a/b/refs"] {
            fs::create_dir_all(d.path().join(p)).unwrap();
        }
        fs::write(sub.join("HEAD"), format!("{C1}\n")).unwrap();
        assert_eq!(discover(&sub, &no_env), Repo::AskGit);
    }

    #[test]
    fn a_worktree_file_points_to_its_git_dir_and_common_dir() {
        let d = tempfile::tempdir().unwrap();
        let main = d.path().join("main/.git");
        let wt = main.join("worktrees/w");
        fs::create_dir_all(&wt).unwrap();
        fs::write(wt.join("commondir"), "../..\n").unwrap();
        fs::create_dir_all(d.path().join("w")).unwrap();
        fs::write(d.path().join("w/.git"), format!("gitdir: {}\n", wt.display())).unwrap();
        let Repo::Found { top, git_dir, common_dir } = discover(&d.path().join("w"), &no_env) else { panic!() };
        assert_eq!(top, d.path().join("w"));
        assert_eq!((git_dir.as_path(), common_dir.as_path()), (wt.as_path(), wt.join("../..").as_path()));
        fs::write(wt.join("HEAD"), "ref: refs/heads/topic\n").unwrap();
        fs::create_dir_all(main.join("refs/heads")).unwrap();
        fs::write(main.join("refs/heads/topic"), format!("{C2}\n")).unwrap();
        assert_eq!(head_commit(&git_dir, &common_dir).as_deref(), Some(C2));
        fs::write(d.path().join("w/.git"), "nonsense").unwrap();
        assert_eq!(discover(&d.path().join("w"), &no_env), Repo::AskGit);
    }

    #[test]
    fn head_is_read_from_loose_and_packed_refs_or_left_to_git() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path();
        fs::write(g.join("HEAD"), format!("{C1}\n")).unwrap();
        assert_eq!(head_commit(g, g).as_deref(), Some(C1), "detached");
        fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert_eq!(head_commit(g, g), None, "unborn branch");
        fs::write(
            g.join("packed-refs"),
            format!("# pack-refs with: peeled\n{C1} refs/heads/other\n{C2} refs/heads/main\n^{C1}\n"),
        )
        .unwrap();
        assert_eq!(head_commit(g, g).as_deref(), Some(C2), "packed");
        fs::create_dir_all(g.join("refs/heads")).unwrap();
        fs::write(g.join("refs/heads/main"), format!("{C1}\n")).unwrap();
        assert_eq!(head_commit(g, g).as_deref(), Some(C1), "a loose ref wins over packed-refs");
        fs::write(g.join("refs/heads/main"), "ref: refs/heads/other\n").unwrap();
        assert_eq!(head_commit(g, g), None, "symbolic refs are git's");
        fs::write(g.join("HEAD"), "ref: refs/heads/../../x\n").unwrap();
        assert_eq!(head_commit(g, g), None);
        fs::write(g.join("HEAD"), "ref: refs/heads/.invalid\n").unwrap();
        assert_eq!(head_commit(g, g), None, "reftable");
    }

    /// Against git itself: HEAD read here is `git rev-parse HEAD` on a branch, after `git pack-refs`, detached,
    /// and in a linked worktree; the time cached is `git log`'s.
    #[test]
    fn the_commit_read_here_is_the_one_git_names() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("w");
        fs::create_dir_all(&w).unwrap();
        let git = |dir: &Path, args: &[&str]| {
            let o = std::process::Command::new("git")
                .current_dir(dir)
                .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
                .args(args)
                .env("GIT_COMMITTER_DATE", "1600000000 +0000")
                .output()
                .expect("git runs");
            assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8(o.stdout).unwrap().trim().to_string()
        };
        let read = |dir: &Path| match discover(dir, &no_env) {
            Repo::Found { git_dir, common_dir, .. } => head_commit(&git_dir, &common_dir),
            other => panic!("{other:?}"),
        };
        git(&w, &["init", "-q", "-b", "main"]);
        git(&w, &["commit", "-q", "--allow-empty", "-m", "a"]);
        assert_eq!(read(&w).unwrap(), git(&w, &["rev-parse", "HEAD"]));
        git(&w, &["pack-refs", "--all"]);
        assert!(!w.join(".git/refs/heads/main").exists());
        assert_eq!(read(&w).unwrap(), git(&w, &["rev-parse", "HEAD"]));
        git(&w, &["commit", "-q", "--allow-empty", "-m", "b"]);
        git(&w, &["checkout", "-q", "--detach"]);
        assert_eq!(read(&w).unwrap(), git(&w, &["rev-parse", "HEAD"]));
        let linked = d.path().join("linked");
        git(&w, &["worktree", "add", "-q", "-b", "topic", linked.to_str().unwrap(), "HEAD~1"]);
        assert_eq!(read(&linked).unwrap(), git(&linked, &["rev-parse", "HEAD"]));
        let state = d.path().join("state");
        let t = head_time(&linked, Some(&state), &no_env, &crate::parse::git_head_time);
        assert_eq!(t, Some(1_600_000_000));
        assert_eq!(fs::read_dir(state.join(CACHE_DIR)).unwrap().count(), 1);
        assert_eq!(head_time(&linked, Some(&state), &no_env, &|_| None), Some(1_600_000_000), "cached");
    }

    #[test]
    fn git_is_asked_once_per_commit_and_only_where_there_is_a_repository() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let work = d.path().join("work");
        let g = work.join(".git");
        fs::create_dir_all(g.join("refs/heads")).unwrap();
        fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(g.join("refs/heads/main"), format!("{C1}\n")).unwrap();
        let asked = Cell::new(0);
        let answer = Cell::new(Some(1_600_000_000));
        let git = |_: &Path| {
            asked.set(asked.get() + 1);
            answer.get()
        };
        assert_eq!(head_time(&work, Some(&state), &no_env, &git), Some(1_600_000_000));
        assert_eq!(head_time(&work, Some(&state), &no_env, &git), Some(1_600_000_000));
        assert_eq!(asked.get(), 1, "the second answer came from the cache");
        // A new commit: git again.
        fs::write(g.join("refs/heads/main"), format!("{C2}\n")).unwrap();
        answer.set(Some(1_700_000_000));
        assert_eq!(head_time(&work, Some(&state), &no_env, &git), Some(1_700_000_000));
        assert_eq!(asked.get(), 2);
        // No cache: git every time; git failing (safe.directory, no git): no time, nothing cached.
        assert_eq!(head_time(&work, None, &no_env, &git), Some(1_700_000_000));
        assert_eq!(asked.get(), 3);
        fs::write(g.join("refs/heads/main"), format!("{}\n", "3".repeat(40))).unwrap();
        answer.set(None);
        assert_eq!(head_time(&work, Some(&state), &no_env, &git), None);
        assert_eq!(head_time(&work, Some(&state), &no_env, &git), None);
        assert_eq!(asked.get(), 5);
        // Outside any repository git is not asked.
        let bare = d.path().join("plain");
        fs::create_dir_all(&bare).unwrap();
        assert_eq!(head_time(&bare, Some(&state), &no_env, &git), None);
        assert_eq!(asked.get(), 5);
        // A cache file naming another commit is not taken.
        let file = cache_file(&state, &fs::canonicalize(&g).unwrap(), C1);
        fs::write(&file, format!("{C2} 5\n")).unwrap();
        fs::write(g.join("refs/heads/main"), format!("{C1}\n")).unwrap();
        answer.set(Some(7));
        assert_eq!(head_time(&work, Some(&state), &no_env, &git), Some(7));
    }
}
