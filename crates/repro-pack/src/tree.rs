//! A pack's root: its closure laid out as a directory tree that the sandbox binds as the guest's `/`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use repro_sys::beneath::PERMISSION_BITS;

use crate::archive::{read_pack_checked, Pack};
use crate::extract::{Beneath, Limits, Staging};
use crate::manifest::EntryKind;
use crate::store::Store;
use crate::PackError;

/// Mountpoints the sandbox needs in any root.
pub const MOUNTPOINT_DIRS: [&str; 6] = ["/proc", "/sys", "/dev", "/tmp", "/home", "/etc"];
/// Files the sandbox binds its fixed versions onto.
pub const MOUNTPOINT_FILES: [&str; 3] = ["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];

/// The directories from a layout's root down to the one being filled: one descriptor per level, reused while
/// consecutive entries share their parents (the manifest is sorted by path).
struct Levels<'a> {
    root: &'a Beneath,
    open: Vec<(Vec<u8>, Beneath)>,
}

impl<'a> Levels<'a> {
    /// The directory `comps` (components below the root), each missing level created (mode 0755).
    fn dir(&mut self, comps: &[&[u8]]) -> std::io::Result<&Beneath> {
        let same = self.open.iter().zip(comps).take_while(|((a, _), b)| a.as_slice() == **b).count();
        self.open.truncate(same);
        for c in &comps[same..] {
            let next =
                self.open.last().map(|(_, d)| d).unwrap_or(self.root).subdir(OsStr::from_bytes(c), Some(0o755))?;
            self.open.push((c.to_vec(), next));
        }
        Ok(self.open.last().map(|(_, d)| d).unwrap_or(self.root))
    }
}

/// The components of an absolute normal guest path (`/` has none), as bytes: a name that is not UTF-8 (an
/// entry's `path_hex`) is created exactly.
fn components(guest: &[u8]) -> Vec<&[u8]> {
    guest.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect()
}

/// Lays out the pack's files in the directory `root` (empty, made by the caller, normally inside a staging
/// directory): blobs from `blobs/<digest>` (moved on their last use, copied before that, so `blobs` is
/// consumed), sized files as sparse files, listed names as empty files, then the mountpoints and the working
/// directory. Every name is created below `root` through directory descriptors, without following any link
/// (not even one the pack itself made: an entry "under" a link of the pack fails), files with `O_EXCL`; modes
/// keep only the permission bits (no setuid, setgid or sticky). The manifest was checked by
/// [`crate::manifest::ManifestCheck::validate_untrusted`]; this does not rely on it.
pub fn materialize(pack: &Pack, blobs: &Beneath, root: &Beneath, shown: &Path) -> Result<(), PackError> {
    let m = &pack.manifest;
    let err = |what: &'static str, guest: &str| {
        let p = shown.join(guest.trim_start_matches('/'));
        move |e| PackError::io(what, p, e)
    };
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for f in m.files.iter().filter(|f| f.kind == EntryKind::File) {
        *uses.entry(f.blake3.as_deref().unwrap_or("")).or_default() += 1;
    }
    let mut levels = Levels { root, open: Vec::new() };
    for f in &m.files {
        let exact = f.bytes();
        let comps = components(&exact);
        let Some((name, parents)) = comps.split_last() else {
            // `/` itself: the root directory, made by the caller.
            continue;
        };
        let parent = levels.dir(parents).map_err(err("cannot create the parent directory of", &f.path))?;
        let name = OsStr::from_bytes(name);
        match f.kind {
            EntryKind::Dir => {
                let d = parent.subdir(name, Some(0o700)).map_err(err("cannot create", &f.path))?;
                // The owner keeps rwx so that the layout (and its removal) can go on below it.
                d.chmod(f.mode | 0o700).map_err(err("cannot chmod", &f.path))?;
            }
            EntryKind::Symlink => {
                let t = f
                    .target_bytes()
                    .ok_or_else(|| std::io::Error::other("a symbolic link without a target"))
                    .map_err(err("cannot create the link", &f.path))?;
                parent.symlink(OsStr::from_bytes(&t), name).map_err(err("cannot create the link", &f.path))?;
            }
            EntryKind::File => {
                let d = f.blake3.as_deref().unwrap_or("");
                let left = uses.get_mut(d).map(|n| {
                    *n -= 1;
                    *n
                });
                if left == Some(0) {
                    blobs.rename_noreplace(d, parent, name).map_err(err("cannot move the blob to", &f.path))?;
                    let placed = parent.open_file(name).map_err(err("cannot open", &f.path))?;
                    placed
                        .set_permissions(fs::Permissions::from_mode(f.mode & PERMISSION_BITS))
                        .map_err(err("cannot chmod", &f.path))?;
                } else {
                    let mut src = blobs.open_file(d).map_err(err("cannot read the blob of", &f.path))?;
                    let mut dst = parent.create_file(name, f.mode).map_err(err("cannot create", &f.path))?;
                    std::io::copy(&mut src, &mut dst).map_err(err("cannot copy the blob to", &f.path))?;
                }
            }
            EntryKind::Sized | EntryKind::Listed => {
                let file = parent.create_file(name, f.mode).map_err(err("cannot create", &f.path))?;
                file.set_len(f.size.unwrap_or(0)).map_err(err("cannot size", &f.path))?;
            }
        }
    }
    let present: std::collections::HashSet<std::borrow::Cow<[u8]>> = m.files.iter().map(|f| f.bytes()).collect();
    for d in MOUNTPOINT_DIRS.iter().copied().chain([m.command.cwd.as_str(), "/home/repro"]) {
        if !present.contains(d.as_bytes()) {
            levels.dir(&components(d.as_bytes())).map_err(err("cannot create", d))?;
        }
    }
    for f in MOUNTPOINT_FILES {
        if !present.contains(f.as_bytes()) {
            let comps = components(f.as_bytes());
            if let Some((name, parents)) = comps.split_last() {
                let parent = levels.dir(parents).map_err(err("cannot create the parent directory of", f))?;
                match parent.create_file(OsStr::from_bytes(name), 0o644) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(err("cannot create", f)(e)),
                }
            }
        }
    }
    restore_times(m, &mut levels, &err)
}

/// Gives every entry that recorded one its host's modification time (and the same access time), deepest first, so
/// that nothing made later in a directory moves the time given to it; last, after the mountpoints and the working
/// directory were made. In a pack that recorded times, the entries without one (the working directory and the
/// directories above it) get the pinned time, one second before the recorded epoch, which is what a run shows
/// for them: the replay treats the whole root as the installation, and the time of the layout must not show.
/// `/` keeps its own (the sandbox's root is never the host's).
fn restore_times<'a, E>(
    m: &repro_model::manifest::Manifest,
    levels: &mut Levels<'a>,
    err: &dyn Fn(&'static str, &str) -> E,
) -> Result<(), PackError>
where
    E: FnOnce(std::io::Error) -> PackError,
{
    if !m.files.iter().any(|f| f.mtime_ns.is_some()) {
        return Ok(());
    }
    let pinned = m.determinism.epoch_unix.saturating_sub(1).saturating_mul(1_000_000_000);
    let mut timed: Vec<(&repro_model::manifest::FileEntry, std::borrow::Cow<[u8]>)> =
        m.files.iter().map(|f| (f, f.bytes())).collect();
    timed.sort_by(|a, b| components(&b.1).len().cmp(&components(&a.1).len()).then_with(|| a.1.cmp(&b.1)));
    for (f, exact) in &timed {
        let comps = components(exact);
        let Some((name, parents)) = comps.split_last() else { continue };
        let parent = levels.dir(parents).map_err(err("cannot open the parent directory of", &f.path))?;
        let ns = f.mtime_ns.unwrap_or(pinned);
        parent.set_times(OsStr::from_bytes(name), ns).map_err(err("cannot set the times of", &f.path))?;
    }
    Ok(())
}

/// The root of a pack in the cache (`<cache>/roots/<pack id>`), made on first use: the pack is read, checked
/// (with `limits`) and laid out in a staging directory beside it that is renamed into place, so a root in the
/// cache is always complete, and a failure leaves nothing.
pub fn cached_root(
    pack_path: &Path,
    cache: &Path,
    store: &Store,
    limits: &Limits,
) -> Result<(Pack, PathBuf), PackError> {
    let roots = cache.join("roots");
    // A root made earlier from the same manifest was checked blob by blob then: only the manifest is read.
    if let Ok((manifest, id)) = crate::archive::read_manifest(pack_path) {
        let root = roots.join(&id).join("root");
        if root.is_dir() {
            let compressed_bytes = fs::metadata(pack_path).map(|m| m.len()).unwrap_or(0);
            let blobs = manifest.blob_refs().into_iter().map(|(_, d, size)| (d, size.unwrap_or(0))).collect();
            return Ok((Pack { path: pack_path.into(), manifest, id, compressed_bytes, blobs }, root));
        }
    }
    let staging = Staging::beside(&roots.join("root"))?;
    let shown = staging.path().to_path_buf();
    let blobs = staging.dir.subdir("blobs", Some(0o700)).map_err(|e| PackError::io("cannot create in", &shown, e))?;
    let pack = read_pack_checked(pack_path, store, Some((&blobs, &shown.join("blobs"))), limits)?;
    let dest = roots.join(&pack.id);
    if dest.join("root").is_dir() {
        return Ok((pack, dest.join("root")));
    }
    // The tapes, next to the root: `<cache>/roots/<pack id>/tapes/{network,proc}.json`.
    let tapes = [("network.json", &pack.manifest.tapes.network), ("proc.json", &pack.manifest.tapes.proc)];
    if tapes.iter().any(|(_, t)| t.is_some()) {
        let td = staging.dir.subdir("tapes", Some(0o755)).map_err(|e| PackError::io("cannot create in", &shown, e))?;
        for (name, t) in tapes {
            if let Some(b) = t {
                copy_blob(&blobs, &b.blake3, &td, name)
                    .map_err(|e| PackError::io("cannot write", shown.join(name), e))?;
            }
        }
    }
    // Last: it moves blobs out of `blobs` (a tape may share a digest with a file).
    let root = staging.dir.subdir("root", Some(0o755)).map_err(|e| PackError::io("cannot create in", &shown, e))?;
    materialize(&pack, &blobs, &root, &shown.join("root"))?;
    drop(blobs);
    fs::remove_dir_all(shown.join("blobs")).map_err(|e| PackError::io("cannot remove", shown.join("blobs"), e))?;
    if let Err(err) = staging.finish(&dest, 0o755) {
        if !dest.join("root").is_dir() {
            return Err(err);
        }
    }
    Ok((pack, dest.join("root")))
}

/// Copies blob `digest` of `blobs` to a new file `name` of `to`.
pub(crate) fn copy_blob(blobs: &Beneath, digest: &str, to: &Beneath, name: &str) -> std::io::Result<()> {
    let mut src = blobs.open_file(digest)?;
    let mut dst = to.create_file(name, 0o644)?;
    std::io::copy(&mut src, &mut dst)?;
    Ok(())
}
