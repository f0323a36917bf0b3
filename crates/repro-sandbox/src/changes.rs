//! What the guest changed in the working directory: read from the overlay's upper layer.
//!
//! The upper layer lives on the run's writable layer (a tmpfs bounded by `--disk`, reached after the run through
//! the descriptor the init sent); whiteouts (deletions) are taken out of it and listed in `changes.json` with
//! every added and modified file, and what remains is copied to `changes/` in the run directory.
//!
//! Everything in the layer is the guest's: it is read as hostile input. Entries are reached through directory
//! descriptors ([`Beneath`]: nothing is followed), files are opened `O_NONBLOCK | O_NOFOLLOW` and checked with
//! fstat (a fifo never blocks the collection), fifos, sockets and device nodes are recorded by kind and never
//! opened, and every copy (to the run directory, back to the working directory) goes through
//! [`repro_sys::treecopy`]: bounded by the layer's size, sparse files kept sparse, links made again as links,
//! never written through. What is not copied is listed in `changes.json` (`skipped`) with why.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use repro_model::pathenc;
use repro_model::run::{Change, ChangeKind, Changes, FileKind, SkipReason, Skipped};
use repro_sys::beneath::{Beneath, Stat};
use repro_sys::treecopy::{self, Copier, Extent, Limits, Why};

use crate::SandboxError;

pub use repro_sys::treecopy::Limits as CopyLimits;

/// Entries of one lower (host) directory listed when looking for what the guest deleted below it.
const MAX_LOWER_ENTRIES: usize = 1 << 20;

/// Turns the upper layer `changes_dir` into the list of changes against `lower` (the real working directory),
/// removing whiteouts from the directory. Copied-up files whose content and mode equal the lower's are not
/// changes and are removed too. Entries that are not files, directories or links, files larger than
/// `limits.max_file_bytes` and entries that cannot be read are listed in `skipped`.
pub fn collect(changes_dir: &Path, lower: &Path, limits: &Limits) -> Result<Changes, SandboxError> {
    let up = Beneath::open(changes_dir).map_err(|e| SandboxError::io("cannot open", changes_dir, e))?;
    // A working directory the caller cannot open has nothing to compare with: everything is added.
    let low = Beneath::open(lower).ok();
    let mut w = Walk { limits, out: Vec::new(), skipped: Vec::new() };
    w.walk(&up, low.as_ref(), Path::new(""), 0);
    w.out.sort();
    w.skipped.sort();
    Ok(Changes { changes: w.out, skipped: w.skipped })
}

struct Walk<'a> {
    limits: &'a Limits,
    out: Vec<Change>,
    skipped: Vec<Skipped>,
}

/// A skipped entry of the record, from the copy's `why`; `stage` says which copy (`not copied to the run
/// directory`, `not kept`).
fn skipped(rel: &Path, kind: Option<FileKind>, why: &Why, stage: &str) -> Skipped {
    let (path, path_hex) = pathenc::encode(rel.as_os_str());
    let reason = match why {
        Why::Special => SkipReason::SpecialFile,
        Why::TooLarge { .. } => SkipReason::TooLarge,
        Why::OverBudget { .. } => SkipReason::OverBudget,
        Why::NoSpace { .. } => SkipReason::NoSpace,
        Why::Failed(_) | Why::NotFollowed(_) => SkipReason::Failed,
    };
    let what = kind.map(|k| format!("{}: ", k.word())).unwrap_or_default();
    Skipped { path, path_hex, file: kind, reason, message: format!("{stage}: {what}{why}") }
}

impl Walk<'_> {
    fn skip(&mut self, rel: &Path, kind: Option<FileKind>, why: Why) {
        self.skipped.push(skipped(rel, kind, &why, "not copied"));
    }

    fn change(&mut self, rel: &Path, kind: ChangeKind, file: FileKind, size: Option<u64>, blake3: Option<String>) {
        let (path, path_hex) = pathenc::encode(rel.as_os_str());
        self.out.push(Change { path, path_hex, kind, file, size, blake3 });
    }

    fn walk(&mut self, up: &Beneath, low: Option<&Beneath>, rel: &Path, depth: usize) {
        let names = match up.list(self.limits.max_dir_entries) {
            Ok(n) => n,
            Err(e) => return self.skip(rel, Some(FileKind::Dir), Why::Failed(format!("cannot list: {e}"))),
        };
        for name in names {
            let rel_path = rel.join(&name);
            let st = match up.stat(&name) {
                Ok(s) => s,
                Err(e) => {
                    self.skip(&rel_path, None, Why::Failed(format!("cannot read its status: {e}")));
                    continue;
                }
            };
            let lower_st = low.and_then(|l| l.stat(&name).ok());
            if st.is_whiteout() {
                if let Err(e) = up.remove(&name, false) {
                    self.skip(&rel_path, Some(st.kind), Why::Failed(format!("cannot remove the whiteout: {e}")));
                }
                if let (Some(l), Some(ls)) = (low, lower_st) {
                    self.deleted(l, &name, &rel_path, &ls, depth);
                }
                continue;
            }
            match st.kind {
                FileKind::Dir => self.dir(up, low, &name, &rel_path, lower_st, depth),
                FileKind::Symlink => self.symlink(up, low, &name, &rel_path, lower_st),
                FileKind::File => self.file(up, low, &name, &rel_path, &st, lower_st),
                other => {
                    // Never opened: recorded by kind, not copied.
                    let kind = if lower_st.is_some() { ChangeKind::Modified } else { ChangeKind::Added };
                    self.change(&rel_path, kind, other, None, None);
                    self.skip(&rel_path, Some(other), Why::Special);
                }
            }
        }
    }

    fn dir(&mut self, up: &Beneath, low: Option<&Beneath>, name: &OsStr, rel: &Path, ls: Option<Stat>, depth: usize) {
        let sub = match up.subdir(name, None) {
            Ok(s) => s,
            Err(e) => return self.skip(rel, Some(FileKind::Dir), Why::Failed(format!("cannot open: {e}"))),
        };
        let low_sub = match ls {
            Some(l) if l.kind == FileKind::Dir => low.and_then(|l| l.subdir(name, None).ok()),
            _ => None,
        };
        match ls {
            Some(l) if l.kind == FileKind::Dir => {
                let opaque = sub
                    .get_xattr("trusted.overlay.opaque")
                    .or_else(|| sub.get_xattr("user.overlay.opaque"))
                    .is_some_and(|v| v == b"y");
                if let (true, Some(lsub)) = (opaque, &low_sub) {
                    // The directory was removed and made again: everything below the lower one is gone.
                    for child in lsub.list(MAX_LOWER_ENTRIES).unwrap_or_default() {
                        if sub.stat(&child).is_err() {
                            if let Ok(cs) = lsub.stat(&child) {
                                self.deleted(lsub, &child, &rel.join(&child), &cs, depth + 1);
                            }
                        }
                    }
                }
            }
            Some(l) => {
                if let Some(low) = low {
                    self.deleted(low, name, rel, &l, depth);
                }
                self.change(rel, ChangeKind::Added, FileKind::Dir, None, None);
            }
            None => self.change(rel, ChangeKind::Added, FileKind::Dir, None, None),
        }
        if depth + 1 >= self.limits.max_depth {
            let limit = self.limits.max_depth as u64;
            return self.skip(rel, Some(FileKind::Dir), Why::OverBudget { what: "levels of directories", limit });
        }
        self.walk(&sub, low_sub.as_ref(), rel, depth + 1);
    }

    fn symlink(&mut self, up: &Beneath, low: Option<&Beneath>, name: &OsStr, rel: &Path, ls: Option<Stat>) {
        let target = match up.read_link(name) {
            Ok(t) => t,
            Err(e) => {
                return self.skip(rel, Some(FileKind::Symlink), Why::Failed(format!("cannot read the link: {e}")))
            }
        };
        let digest = blake3::hash(target.as_encoded_bytes()).to_hex().to_string();
        let kind = match ls {
            None => ChangeKind::Added,
            Some(l) => {
                let same = l.kind == FileKind::Symlink && low.and_then(|low| low.read_link(name).ok()) == Some(target);
                if same && up.remove(name, false).is_ok() {
                    // Copied up without a change.
                    return;
                }
                ChangeKind::Modified
            }
        };
        self.change(rel, kind, FileKind::Symlink, None, Some(digest));
    }

    fn file(&mut self, up: &Beneath, low: Option<&Beneath>, name: &OsStr, rel: &Path, st: &Stat, ls: Option<Stat>) {
        let kind = if ls.is_some() { ChangeKind::Modified } else { ChangeKind::Added };
        if st.size > self.limits.max_file_bytes {
            self.change(rel, kind, FileKind::File, Some(st.size), None);
            let limit = self.limits.max_file_bytes;
            return self.skip(rel, Some(FileKind::File), Why::TooLarge { size: st.size, limit });
        }
        let digest = match hash_at(up, name) {
            Ok(d) => d,
            Err(e) => {
                self.change(rel, kind, FileKind::File, Some(st.size), None);
                return self.skip(rel, Some(FileKind::File), Why::Failed(format!("cannot read: {e}")));
            }
        };
        if let (Some(l), Some(low)) = (ls, low) {
            let same = l.kind == FileKind::File
                && l.mode == st.mode
                && l.size == st.size
                && hash_at(low, name).ok().as_ref() == Some(&digest);
            if same && up.remove(name, false).is_ok() {
                // Copied up without a change of content or mode.
                return;
            }
        }
        self.change(rel, kind, FileKind::File, Some(st.size), Some(digest));
    }

    /// Records `name` of the lower directory `low` (and what is below it) as deleted.
    fn deleted(&mut self, low: &Beneath, name: &OsStr, rel: &Path, st: &Stat, depth: usize) {
        if st.kind == FileKind::Dir && depth < self.limits.max_depth {
            // A lower directory the caller cannot list has no entries to report as deleted; its own deletion
            // still is.
            if let Ok(sub) = low.subdir(name, None) {
                for child in sub.list(MAX_LOWER_ENTRIES).unwrap_or_default() {
                    if let Ok(cs) = sub.stat(&child) {
                        self.deleted(&sub, &child, &rel.join(&child), &cs, depth + 1);
                    }
                }
            }
        }
        self.change(rel, ChangeKind::Deleted, st.kind, None, None);
    }
}

/// blake3 of the regular file `name` of `dir`, hex: opened without following a link and without blocking (a
/// fifo put in its place is refused by the fstat check); the holes of a sparse file are hashed as the zeros they
/// read as, without reading them.
pub fn hash_at(dir: &Beneath, name: &OsStr) -> std::io::Result<String> {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    let f = dir.open_file(name)?;
    let len = f.metadata()?.len();
    let mut h = blake3::Hasher::new();
    treecopy::for_each_extent(&f, len, |_, e| {
        match e {
            Extent::Data(d) => {
                h.update(d);
            }
            Extent::Hole(mut n) => {
                while n > 0 {
                    let k = n.min(ZEROS.len() as u64);
                    h.update(&ZEROS[..k as usize]);
                    n -= k;
                }
            }
        }
        Ok(())
    })?;
    Ok(h.finalize().to_hex().to_string())
}

/// Copies the upper layer `src` (after [`collect`]) to the new directory `dst` on the host (the run directory's
/// `changes/`) with [`repro_sys::treecopy`], within `limits`; what is not copied is added to `changes.skipped`
/// (once: what [`collect`] already listed is not listed again).
pub fn copy_tree(src: &Path, dst: &Path, limits: &Limits, changes: &mut Changes) -> Result<(), SandboxError> {
    let from = Beneath::open(src).map_err(|e| SandboxError::io("cannot open", src, e))?;
    let (parent, name) = match (dst.parent(), dst.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => return Err(SandboxError::io("cannot create", dst, std::io::ErrorKind::InvalidInput.into())),
    };
    let to = Beneath::open(parent).map_err(|e| SandboxError::io("cannot open", parent, e))?;
    let report =
        treecopy::copy_tree(&from, &to, name, *limits).map_err(|e| SandboxError::io("cannot create", dst, e))?;
    merge_skipped(changes, report.skipped, "not copied to the run directory");
    Ok(())
}

fn merge_skipped(changes: &mut Changes, new: Vec<treecopy::Skip>, stage: &str) {
    let known: BTreeSet<(String, Option<String>)> =
        changes.skipped.iter().map(|s| (s.path.clone(), s.path_hex.clone())).collect();
    for s in new {
        let k = skipped(&s.rel, s.kind, &s.why, stage);
        if !known.contains(&(k.path.clone(), k.path_hex.clone())) {
            changes.skipped.push(k);
        }
    }
    changes.skipped.sort();
}

/// Applies the changes to the real working directory (`--keep-changes`): deletions first, then directories,
/// files and links copied from `changes_dir` (the run directory's copy), all through [`repro_sys::treecopy`]:
/// every path resolved beneath `target` without following a link, files written under an unpredictable name
/// and renamed into place, links made as links. What is not applied (skipped before, or failing now: a link in
/// the way is never followed) is added to `changes.skipped`.
pub fn apply(changes: &mut Changes, changes_dir: &Path, target: &Path, limits: &Limits) -> Result<(), SandboxError> {
    let src = Beneath::open(changes_dir).map_err(|e| SandboxError::io("cannot open", changes_dir, e))?;
    let dst = Beneath::open(target).map_err(|e| SandboxError::io("cannot open", target, e))?;
    let rel = |c: &Change| {
        c.rel_path().map_err(|e| SandboxError::Corrupt {
            path: changes_dir.join("..").join("changes.json"),
            message: e.to_string(),
        })
    };
    let left_out: BTreeSet<(String, Option<String>)> =
        changes.skipped.iter().map(|s| (s.path.clone(), s.path_hex.clone())).collect();
    let mut copier = Copier::new(*limits);
    let mut deletions: Vec<&Change> = changes.changes.iter().filter(|c| c.kind == ChangeKind::Deleted).collect();
    // Deepest first, so directories are empty when removed.
    deletions.sort_by_key(|c| std::cmp::Reverse(c.path.matches('/').count()));
    for c in deletions {
        let p = rel(c)?;
        let Some(name) = p.file_name() else { continue };
        let r = treecopy::walk_to(&dst, p.parent().unwrap_or(Path::new("")), false)
            .and_then(|d| d.remove(name, c.file == FileKind::Dir));
        match r {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                copier.skip(&p, None, Why::Failed(format!("cannot delete: {e}")));
            }
            _ => {}
        }
    }
    for c in changes.changes.iter().filter(|c| c.kind != ChangeKind::Deleted) {
        if left_out.contains(&(c.path.clone(), c.path_hex.clone()))
            || !matches!(c.file, FileKind::File | FileKind::Dir | FileKind::Symlink)
        {
            continue;
        }
        let p: PathBuf = rel(c)?;
        let Some(name) = p.file_name() else { continue };
        let parent = p.parent().unwrap_or(Path::new(""));
        let dirs = treecopy::walk_to(&src, parent, false).and_then(|s| Ok((s, treecopy::walk_to(&dst, parent, true)?)));
        match dirs {
            Ok((from, to)) => copier.copy_entry(&from, name, &to, name, &p, false, 0),
            Err(e) => copier.skip(&p, None, Why::Failed(format!("cannot reach its directory: {e}"))),
        }
    }
    copier.set_pending_modes(&dst);
    merge_skipped(changes, copier.finish().skipped, "not kept");
    Ok(())
}

/// One line for the run's warnings about what was not copied (`None` when everything was): how many, and the
/// first few with why.
pub fn skipped_warning(changes: &Changes) -> Option<String> {
    if changes.skipped.is_empty() {
        return None;
    }
    let first: Vec<String> = changes.skipped.iter().take(3).map(|s| format!("{} ({})", s.path, s.message)).collect();
    let more = changes.skipped.len().saturating_sub(first.len());
    Some(format!(
        "{} entr{} of the working directory left by the guest not copied (listed in changes.json): {}{}",
        changes.skipped.len(),
        if changes.skipped.len() == 1 { "y" } else { "ies" },
        first.join("; "),
        if more > 0 { format!("; and {more} more") } else { String::new() }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn limits() -> Limits {
        Limits::for_layer(1 << 30, 1 << 16)
    }

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
        let mut c = collect(upper.path(), lower.path(), &limits()).unwrap();
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
        apply(&mut c, upper.path(), lower.path(), &limits()).unwrap();

        // The copy to the run directory keeps files, directories and links, without setuid bits.
        std::os::unix::fs::symlink("mod", upper.path().join("d/link")).unwrap();
        fs::set_permissions(upper.path().join("d/new"), fs::Permissions::from_mode(0o4755)).unwrap();
        let out = tempfile::tempdir().unwrap();
        copy_tree(upper.path(), &out.path().join("c"), &limits(), &mut c).unwrap();
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
        let c = collect(upper.path(), lower.path(), &limits()).unwrap();
        assert_eq!(c.changes.len(), 2, "{c:?}");
        assert!(c.changes.iter().all(|c| c.path_hex.is_some()), "{c:?}");
        let json = serde_json::to_string(&c).unwrap();
        let mut back: Changes = serde_json::from_str(&json).unwrap();
        apply(&mut back, upper.path(), lower.path(), &limits()).unwrap();
        assert_eq!(fs::read(lower.path().join(name).join(name)).unwrap(), b"bytes");
    }
}
