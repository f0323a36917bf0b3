//! What the guest changed in the working directory: read from the overlay's upper layer.
//!
//! The upper layer lives on the run's writable layer (a tmpfs bounded by `--disk`, reached after the run through
//! the descriptor the init sent); whiteouts (deletions) are taken out of it and listed in `changes.json` with
//! every added and modified file, and what remains is copied to `changes/` in the run directory.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use repro_model::pathenc;
use repro_model::run::{Change, ChangeKind, Changes, FileKind};

use crate::SandboxError;

/// Turns the upper layer `changes_dir` into the list of changes against `lower` (the real
/// working directory), removing whiteouts from the directory. Copied-up files whose content and mode equal the
/// lower's are not changes and are removed too.
pub fn collect(changes_dir: &Path, lower: &Path) -> Result<Changes, SandboxError> {
    let mut out = Vec::new();
    walk(changes_dir, Path::new(""), lower, &mut out)?;
    out.sort();
    Ok(Changes { changes: out })
}

fn walk(root: &Path, rel: &Path, lower: &Path, out: &mut Vec<Change>) -> Result<(), SandboxError> {
    let dir = root.join(rel);
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| SandboxError::io("cannot read", &dir, e))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    entries.sort();
    for name in entries {
        let rel_path = rel.join(&name);
        let path = root.join(&rel_path);
        let lower_path = lower.join(&rel_path);
        let meta = fs::symlink_metadata(&path).map_err(|e| SandboxError::io("cannot stat", &path, e))?;
        let (rel_s, rel_hex) = pathenc::encode(rel_path.as_os_str());
        let lower_meta = fs::symlink_metadata(&lower_path).ok();
        if repro_sys::ns::is_whiteout(&meta) {
            fs::remove_file(&path).map_err(|e| SandboxError::io("cannot remove whiteout", &path, e))?;
            if let Some(lm) = lower_meta {
                deleted(&lower_path, &rel_path, &lm, out);
            }
            continue;
        }
        if meta.is_dir() {
            let opaque = repro_sys::ns::get_xattr(&path.to_string_lossy(), "trusted.overlay.opaque")
                .or_else(|| repro_sys::ns::get_xattr(&path.to_string_lossy(), "user.overlay.opaque"))
                .is_some_and(|v| v == b"y");
            match &lower_meta {
                Some(lm) if lm.is_dir() => {
                    if opaque {
                        // The directory was removed and made again: everything below the lower one is gone.
                        for child in list_sorted(&lower_path) {
                            let child_rel = rel_path.join(&child);
                            if !path.join(&child).exists() {
                                if let Ok(cm) = fs::symlink_metadata(lower.join(&child_rel)) {
                                    deleted(&lower.join(&child_rel), &child_rel, &cm, out);
                                }
                            }
                        }
                    }
                }
                Some(lm) => {
                    deleted(&lower_path, &rel_path, lm, out);
                    out.push(Change {
                        path: rel_s.clone(),
                        path_hex: rel_hex.clone(),
                        kind: ChangeKind::Added,
                        file: FileKind::Dir,
                        size: None,
                        blake3: None,
                    });
                }
                None => out.push(Change {
                    path: rel_s.clone(),
                    path_hex: rel_hex.clone(),
                    kind: ChangeKind::Added,
                    file: FileKind::Dir,
                    size: None,
                    blake3: None,
                }),
            }
            walk(root, &rel_path, lower, out)?;
            continue;
        }
        let (file, digest, size) = if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).map_err(|e| SandboxError::io("cannot read link", &path, e))?;
            (FileKind::Symlink, blake3::hash(target.as_os_str().as_encoded_bytes()).to_hex().to_string(), None)
        } else {
            (FileKind::File, hash_file(&path)?, Some(meta.len()))
        };
        let kind = match &lower_meta {
            None => ChangeKind::Added,
            Some(lm) => {
                let same = if file == FileKind::Symlink {
                    lm.file_type().is_symlink() && fs::read_link(&lower_path).ok() == fs::read_link(&path).ok()
                } else {
                    lm.is_file()
                        && lm.mode() == meta.mode()
                        && lm.len() == meta.len()
                        && hash_file(&lower_path).ok().as_ref() == Some(&digest)
                };
                if same {
                    // Copied up without a change of content or mode.
                    fs::remove_file(&path).map_err(|e| SandboxError::io("cannot remove", &path, e))?;
                    continue;
                }
                ChangeKind::Modified
            }
        };
        out.push(Change { path: rel_s, path_hex: rel_hex, kind, file, size, blake3: Some(digest) });
    }
    Ok(())
}

fn deleted(lower_path: &Path, rel: &Path, meta: &fs::Metadata, out: &mut Vec<Change>) {
    let file = if meta.is_dir() {
        FileKind::Dir
    } else if meta.file_type().is_symlink() {
        FileKind::Symlink
    } else {
        FileKind::File
    };
    if file == FileKind::Dir {
        for child in list_sorted(lower_path) {
            let cp = lower_path.join(&child);
            if let Ok(cm) = fs::symlink_metadata(&cp) {
                deleted(&cp, &rel.join(&child), &cm, out);
            }
        }
    }
    let (path, path_hex) = pathenc::encode(rel.as_os_str());
    out.push(Change { path, path_hex, kind: ChangeKind::Deleted, file, size: None, blake3: None });
}

fn list_sorted(dir: &Path) -> Vec<std::ffi::OsString> {
    // A lower directory the caller cannot list has no entries to report as deleted; its own deletion still is.
    let mut v: Vec<_> = fs::read_dir(dir).map(|r| r.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    v.sort();
    v
}

/// blake3 of a file's content, hex.
pub fn hash_file(path: &Path) -> Result<String, SandboxError> {
    let mut f = fs::File::open(path).map_err(|e| SandboxError::io("cannot open", path, e))?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|e| SandboxError::io("cannot read", path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().to_hex().to_string())
}

/// Copies the upper layer `src` (after [`collect`]) to `dst` on the host: directories, regular files and
/// symbolic links, owned by the caller; setuid, setgid and sticky bits are dropped from files, and anything else
/// (fifos, sockets, device nodes) is left out.
pub fn copy_tree(src: &Path, dst: &Path) -> Result<(), SandboxError> {
    fs::create_dir(dst).map_err(|e| SandboxError::io("cannot create", dst, e))?;
    let entries = fs::read_dir(src).map_err(|e| SandboxError::io("cannot read", src, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SandboxError::io("cannot read", src, e))?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let meta = fs::symlink_metadata(&from).map_err(|e| SandboxError::io("cannot stat", &from, e))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            copy_tree(&from, &to)?;
            fs::set_permissions(&to, fs::Permissions::from_mode(meta.mode() & 0o777))
                .map_err(|e| SandboxError::io("cannot chmod", &to, e))?;
        } else if ft.is_symlink() {
            let link = fs::read_link(&from).map_err(|e| SandboxError::io("cannot read link", &from, e))?;
            std::os::unix::fs::symlink(&link, &to).map_err(|e| SandboxError::io("cannot create link", &to, e))?;
        } else if ft.is_file() {
            fs::copy(&from, &to).map_err(|e| SandboxError::io("cannot copy", &from, e))?;
            fs::set_permissions(&to, fs::Permissions::from_mode(meta.mode() & 0o777))
                .map_err(|e| SandboxError::io("cannot chmod", &to, e))?;
        }
    }
    Ok(())
}

/// Applies the changes to the real working directory (`--keep-changes`): deletions first, then directories,
/// then files and links copied from `changes_dir`.
pub fn apply(changes: &Changes, changes_dir: &Path, target: &Path) -> Result<(), SandboxError> {
    let rel = |c: &Change| {
        c.rel_path().map_err(|e| SandboxError::Corrupt {
            path: changes_dir.join("..").join("changes.json"),
            message: e.to_string(),
        })
    };
    let mut deletions: Vec<&Change> = changes.changes.iter().filter(|c| c.kind == ChangeKind::Deleted).collect();
    // Deepest first, so directories are empty when removed.
    deletions.sort_by_key(|c| std::cmp::Reverse(c.path.matches('/').count()));
    for c in deletions {
        let p = target.join(rel(c)?);
        let r = if c.file == FileKind::Dir { fs::remove_dir(&p) } else { fs::remove_file(&p) };
        if let Err(e) = r {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(SandboxError::io("cannot delete", p, e));
            }
        }
    }
    for c in changes.changes.iter().filter(|c| c.kind != ChangeKind::Deleted) {
        let rel = rel(c)?;
        let src = changes_dir.join(&rel);
        let dst: PathBuf = target.join(&rel);
        match c.file {
            FileKind::Dir => {
                fs::create_dir_all(&dst).map_err(|e| SandboxError::io("cannot create", &dst, e))?;
                if let Ok(m) = fs::metadata(&src) {
                    fs::set_permissions(&dst, fs::Permissions::from_mode(kept_mode(m.mode())))
                        .map_err(|e| SandboxError::io("cannot set the mode of", &dst, e))?;
                }
            }
            FileKind::Symlink => {
                let link = fs::read_link(&src).map_err(|e| SandboxError::io("cannot read link", &src, e))?;
                // Nothing there is fine; what cannot be removed makes the symlink below fail with its error.
                let _ = fs::remove_file(&dst);
                std::os::unix::fs::symlink(&link, &dst).map_err(|e| SandboxError::io("cannot create link", &dst, e))?;
            }
            FileKind::File => {
                if let Some(parent) = dst.parent() {
                    fs::create_dir_all(parent).map_err(|e| SandboxError::io("cannot create", parent, e))?;
                }
                // Replace, never write through: a hard link or a read-only file in the target is not followed.
                let tmp = dst.with_file_name(format!(".repro-keep-{}", std::process::id()));
                fs::copy(&src, &tmp).map_err(|e| SandboxError::io("cannot copy", &src, e))?;
                let mode = fs::metadata(&tmp).map_err(|e| SandboxError::io("cannot read", &tmp, e))?.mode();
                fs::set_permissions(&tmp, fs::Permissions::from_mode(kept_mode(mode)))
                    .map_err(|e| SandboxError::io("cannot chmod", &tmp, e))?;
                fs::rename(&tmp, &dst).map_err(|e| SandboxError::io("cannot replace", &dst, e))?;
            }
        }
    }
    Ok(())
}

/// The mode a kept file or directory gets: the guest's, without setuid and setgid. Kept files belong to the user
/// who ran repro (they are copied by it), so a guest's setuid program must not become one of that user's, root's
/// included.
fn kept_mode(mode: u32) -> u32 {
    mode & 0o1777
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collect_and_apply_without_overlay() {
        // An upper layer made by hand (no whiteouts: those need mknod): one added, one modified, one copied up
        // unchanged.
        let lower = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        fs::write(lower.path().join("same"), "x").unwrap();
        fs::write(lower.path().join("mod"), "old").unwrap();
        fs::write(upper.path().join("same"), "x").unwrap();
        fs::set_permissions(upper.path().join("same"), fs::metadata(lower.path().join("same")).unwrap().permissions())
            .unwrap();
        fs::write(upper.path().join("mod"), "new").unwrap();
        fs::create_dir(upper.path().join("d")).unwrap();
        fs::write(upper.path().join("d/new"), "n").unwrap();
        let c = collect(upper.path(), lower.path()).unwrap();
        let got: Vec<(String, ChangeKind)> = c.changes.iter().map(|c| (c.path.clone(), c.kind)).collect();
        assert_eq!(
            got,
            vec![
                ("d".into(), ChangeKind::Added),
                ("d/new".into(), ChangeKind::Added),
                ("mod".into(), ChangeKind::Modified)
            ]
        );
        assert!(!upper.path().join("same").exists());
        fs::set_permissions(upper.path().join("d/new"), fs::Permissions::from_mode(0o6755)).unwrap();
        apply(&c, upper.path(), lower.path()).unwrap();

        // The copy to the run directory keeps files, directories and links, without setuid bits.
        std::os::unix::fs::symlink("mod", upper.path().join("d/link")).unwrap();
        fs::set_permissions(upper.path().join("d/new"), fs::Permissions::from_mode(0o4755)).unwrap();
        let out = tempfile::tempdir().unwrap();
        copy_tree(upper.path(), &out.path().join("c")).unwrap();
        assert_eq!(fs::read_to_string(out.path().join("c/d/new")).unwrap(), "n");
        assert_eq!(fs::metadata(out.path().join("c/d/new")).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(fs::read_link(out.path().join("c/d/link")).unwrap(), Path::new("mod"));
        assert_eq!(fs::read_to_string(lower.path().join("mod")).unwrap(), "new");
        let kept = fs::metadata(lower.path().join("d/new")).unwrap().mode() & 0o7777;
        assert_eq!(kept, 0o755, "setuid and setgid are not kept");
        assert_eq!(fs::read_to_string(lower.path().join("d/new")).unwrap(), "n");
    }

    #[test]
    fn non_utf8_names_are_kept_and_applied() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let lower = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        let name = OsStr::from_bytes(b"caf\xe9-\xff");
        fs::create_dir(upper.path().join(name)).unwrap();
        fs::write(upper.path().join(name).join(name), "bytes").unwrap();
        let c = collect(upper.path(), lower.path()).unwrap();
        assert_eq!(c.changes.len(), 2, "{c:?}");
        assert!(c.changes.iter().all(|c| c.path_hex.is_some()), "{c:?}");
        let json = serde_json::to_string(&c).unwrap();
        let back: Changes = serde_json::from_str(&json).unwrap();
        apply(&back, upper.path(), lower.path()).unwrap();
        assert_eq!(fs::read(lower.path().join(name).join(name)).unwrap(), b"bytes");
    }
}
