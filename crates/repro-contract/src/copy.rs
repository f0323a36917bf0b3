//! The fresh copy of the project a contract runs in: git's tracked and untracked-but-not-ignored files when the
//! project is a git work tree (what a clean clone plus the uncommitted work has; no `target/`, no `.repro/`), else
//! every file below it except the state directory. Regular files keep their mode bits, symbolic links are copied
//! as links; anything else is skipped. Bounded: a project larger than the limits is refused, not half-copied.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::ContractError;

/// The most files and bytes copied.
const MAX_FILES: usize = 200_000;
const MAX_BYTES: u64 = 8 << 30;

/// Copies `project` into `tree` (an empty directory), leaving out `state`.
pub fn project(project: &Path, tree: &Path, state: &Path) -> Result<(), ContractError> {
    let state = std::fs::canonicalize(state).unwrap_or_else(|_| state.to_path_buf());
    // A project inside the state directory (a repair's working copy) is copied whole.
    let skip_state = !project.starts_with(&state);
    let files = match git_files(project) {
        Some(f) => f,
        None => walk(project, &state)?,
    };
    if files.len() > MAX_FILES {
        return Err(ContractError::Copy(format!("{} has more than {MAX_FILES} files", project.display())));
    }
    // Through repro_sys::treecopy: a link of the project (or one listed before a path below it) is copied as a
    // link and never followed, on either side; fifos and other special files are left out.
    let fail = |path: &Path, source| ContractError::Io { what: "open", path: path.into(), source };
    let from = repro_sys::beneath::Beneath::open(project).map_err(|e| fail(project, e))?;
    let to = repro_sys::beneath::Beneath::open(tree).map_err(|e| fail(tree, e))?;
    let limits = repro_sys::treecopy::Limits {
        max_file_bytes: MAX_BYTES,
        max_total_bytes: MAX_BYTES,
        max_entries: MAX_FILES as u64 * 2,
        max_depth: repro_sys::treecopy::MAX_DEPTH,
        max_dir_entries: MAX_FILES,
        keep_free: 0,
    };
    let mut copier = repro_sys::treecopy::Copier::new(limits);
    for rel in files {
        let src = project.join(&rel);
        if (skip_state && src.starts_with(&state)) || rel.components().any(|c| c.as_os_str() == ".git") {
            continue;
        }
        let (Some(name), parent) = (rel.file_name(), rel.parent().unwrap_or(Path::new(""))) else { continue };
        // A path deleted but still in the index, or below a link of the project, has nothing to copy.
        let Ok(sp) = repro_sys::treecopy::walk_to(&from, parent, false) else { continue };
        if sp.stat(name).is_err() {
            continue;
        }
        let dp = repro_sys::treecopy::walk_to_with(&to, parent, Some(0o755))
            .map_err(|e| ContractError::Copy(format!("{}: {e}", tree.join(parent).display())))?;
        copier.copy_entry(&sp, name, &dp, name, &rel, false, 0);
    }
    for s in copier.finish().skipped {
        if s.why != repro_sys::treecopy::Why::Special {
            return Err(ContractError::Copy(format!("{}: {}", project.join(&s.rel).display(), s.why)));
        }
    }
    Ok(())
}

/// `git ls-files --cached --others --exclude-standard` of `project`, when it is a git work tree's top.
fn git_files(project: &Path) -> Option<Vec<PathBuf>> {
    if !project.join(".git").exists() {
        return None;
    }
    let out = Command::new("git")
        .arg("-C")
        .arg(project)
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    use std::os::unix::ffi::OsStrExt;
    Some(
        out.stdout
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
            .collect(),
    )
}

/// Every file and link below `project` (relative paths), not entering `state` or `.git`.
fn walk(project: &Path, state: &Path) -> Result<Vec<PathBuf>, ContractError> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let dir = project.join(&rel);
        let rd =
            std::fs::read_dir(&dir).map_err(|source| ContractError::Io { what: "list", path: dir.clone(), source })?;
        for e in rd {
            let e = e.map_err(|source| ContractError::Io { what: "list", path: dir.clone(), source })?;
            let r = rel.join(e.file_name());
            let ft = e.file_type().map_err(|source| ContractError::Io { what: "stat", path: e.path(), source })?;
            if ft.is_dir() {
                if e.path() != state && e.file_name() != ".git" {
                    todo.push(r);
                }
            } else {
                out.push(r);
            }
            if out.len() > MAX_FILES {
                return Err(ContractError::Copy(format!("{} has more than {MAX_FILES} files", project.display())));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_copied_without_the_state_dir_keeping_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let p = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(p.path().join("src/deep")).unwrap();
        std::fs::write(p.path().join("src/deep/a.txt"), "a").unwrap();
        std::fs::write(p.path().join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p.path().join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("src/deep/a.txt", p.path().join("link")).unwrap();
        std::fs::create_dir_all(p.path().join(".repro/runs")).unwrap();
        std::fs::write(p.path().join(".repro/runs/x"), "state").unwrap();
        let t = tempfile::tempdir().unwrap();
        project(p.path(), t.path(), &p.path().join(".repro")).unwrap();
        assert_eq!(std::fs::read_to_string(t.path().join("src/deep/a.txt")).unwrap(), "a");
        let mode = std::fs::metadata(t.path().join("run.sh")).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111);
        assert_eq!(std::fs::read_link(t.path().join("link")).unwrap(), Path::new("src/deep/a.txt"));
        assert!(!t.path().join(".repro").exists());
    }
}
