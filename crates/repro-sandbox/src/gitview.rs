//! Git as the user has it: from a subdirectory of a repository, or in a linked worktree whose `.git` file points
//! into the main repository, the guest's working directory (a mount of its own) holds no `.git`, or one naming a
//! directory the guest does not see. The guest is shown the repository read-only at the same paths (idmapped as
//! root, like every bind, so its files are the guest's own and git does not call them of dubious ownership):
//! the work tree under the working directory's writable overlay, and a linked worktree's common git directory.
//! Nothing but the repository's own tree and metadata, and only when git would find it the same way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repro_model::run::{BindMount, RepositoryView};

use crate::githead::{discover, Repo};

/// The variable that lets git's discovery cross from the working directory's overlay into the work tree's mount.
const ACROSS: &str = "GIT_DISCOVERY_ACROSS_FILESYSTEM";

/// What of the repository holding `cwd` the guest must be shown beyond `cwd` (`var` reads the host's
/// environment); `None` when `cwd` is not in a repository, when it is the root of an ordinary one (the guest
/// sees all of it already), when git's variables point elsewhere, when the work tree would be `/` or `$HOME`
/// (a dotfiles repository: the whole home directory), or when a `.git` file names something that is not a git
/// directory.
pub fn view(cwd: &Path, var: &dyn Fn(&str) -> Option<String>) -> Option<RepositoryView> {
    let Repo::Found { top, git_dir, common_dir } = discover(cwd, var) else { return None };
    let top = crate::parse::normalize(&top);
    let home = var("HOME").filter(|h| !h.is_empty()).map(|h| crate::parse::normalize(Path::new(&h)));
    if top == Path::new("/") || home.as_deref() == Some(top.as_path()) {
        return None;
    }
    let (git_dir, common_dir) = (crate::parse::normalize(&git_dir), crate::parse::normalize(&common_dir));
    if !is_git_dir(&common_dir) || !git_dir.join("HEAD").is_file() {
        return None;
    }
    let mut paths: Vec<PathBuf> = Vec::new();
    if top != cwd {
        paths.push(top.clone());
    }
    for dir in [&common_dir, &git_dir] {
        if !dir.starts_with(&top) && !paths.iter().any(|p| dir.starts_with(p)) {
            paths.push(dir.clone());
        }
    }
    if paths.is_empty() {
        return None;
    }
    let mut variables = BTreeMap::new();
    if top != cwd {
        variables.insert(ACROSS.to_string(), "1".to_string());
    }
    let reason = match (top != cwd, git_dir.starts_with(&top)) {
        (true, true) => format!("the working directory lies in the git repository {}", top.display()),
        (true, false) => format!(
            "the working directory lies in the git worktree {} of the repository {}",
            top.display(),
            common_dir.display()
        ),
        (false, _) => format!("the working directory is the git worktree of the repository {}", common_dir.display()),
    };
    Some(RepositoryView {
        top: top.to_string_lossy().into_owned(),
        paths: paths.iter().map(|p| p.to_string_lossy().into_owned()).collect(),
        variables,
        reason,
    })
}

/// A repository's git directory: HEAD, objects and refs.
fn is_git_dir(d: &Path) -> bool {
    d.join("HEAD").is_file() && d.join("objects").is_dir() && d.join("refs").is_dir()
}

/// Passes the view to the guest: its read-only binds (a path the user already binds, or one below it, is left to
/// the user's bind) and its variables (unless `user_set` says an `--env` names the variable).
pub fn pass(
    view: &RepositoryView,
    user_set: &dyn Fn(&str) -> bool,
    env: &mut BTreeMap<String, String>,
    binds: &mut Vec<BindMount>,
) {
    for (k, v) in &view.variables {
        if !user_set(k) {
            env.insert(k.clone(), v.clone());
        }
    }
    for p in &view.paths {
        let taken = binds.iter().any(|b| Path::new(p).starts_with(&b.guest));
        if !taken {
            binds.push(BindMount { host: p.clone(), guest: p.clone(), writable: false });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn git_dir(d: &Path) {
        for sub in ["objects", "refs/heads"] {
            fs::create_dir_all(d.join(sub)).unwrap();
        }
        fs::write(d.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_subdirectory_shows_the_work_tree_and_the_root_nothing() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().join("repo");
        git_dir(&top.join(".git"));
        fs::create_dir_all(top.join("pkg/tests")).unwrap();
        assert_eq!(view(&top, &no_env), None);
        let v = view(&top.join("pkg/tests"), &no_env).unwrap();
        assert_eq!(v.paths, vec![top.to_string_lossy().into_owned()]);
        assert_eq!(v.variables.get(ACROSS).map(String::as_str), Some("1"));
        let home = |k: &str| (k == "HOME").then(|| top.to_string_lossy().into_owned());
        assert_eq!(view(&top.join("pkg"), &home), None, "a dotfiles repository is not shown");
    }

    #[test]
    fn a_worktree_shows_the_common_dir_and_a_bogus_gitdir_nothing() {
        let d = tempfile::tempdir().unwrap();
        let main = d.path().join("main/.git");
        git_dir(&main);
        let wt = main.join("worktrees/w");
        fs::create_dir_all(&wt).unwrap();
        fs::write(wt.join("commondir"), "../..\n").unwrap();
        fs::write(wt.join("HEAD"), "ref: refs/heads/topic\n").unwrap();
        let w = d.path().join("w");
        fs::create_dir_all(w.join("sub")).unwrap();
        fs::write(w.join(".git"), format!("gitdir: {}\n", wt.display())).unwrap();
        let v = view(&w, &no_env).unwrap();
        assert_eq!(v.paths, vec![main.to_string_lossy().into_owned()]);
        assert!(v.variables.is_empty());
        let v = view(&w.join("sub"), &no_env).unwrap();
        assert_eq!(v.paths, vec![w.to_string_lossy().into_owned(), main.to_string_lossy().into_owned()]);
        // A `.git` file naming a directory that is not a repository's (`~/.ssh`) shows nothing.
        let secret = d.path().join("secret");
        fs::create_dir_all(&secret).unwrap();
        fs::write(secret.join("HEAD"), "x").unwrap();
        fs::write(w.join(".git"), format!("gitdir: {}\n", secret.display())).unwrap();
        assert_eq!(view(&w, &no_env), None);
    }
}
