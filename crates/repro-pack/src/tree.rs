//! A pack's root: its closure laid out as a directory tree that the sandbox binds as the guest's `/`.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::archive::{read_pack, Pack};
use crate::manifest::EntryKind;
use crate::store::Store;
use crate::PackError;

/// Mountpoints the sandbox needs in any root.
pub const MOUNTPOINT_DIRS: [&str; 6] = ["/proc", "/sys", "/dev", "/tmp", "/home", "/etc"];
/// Files the sandbox binds its fixed versions onto.
pub const MOUNTPOINT_FILES: [&str; 3] = ["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];

fn inside(root: &Path, guest: &str) -> PathBuf {
    root.join(guest.trim_start_matches('/'))
}

/// Lays out the pack's files under `root` (which must not exist): blobs from `blobs/<digest>` (moved there on
/// their first use, so `blobs` is consumed), sized files as sparse files, listed names as empty files, then the
/// mountpoints and the working directory. Directory modes are applied last.
pub fn materialize(pack: &Pack, blobs: &Path, root: &Path) -> Result<(), PackError> {
    let m = &pack.manifest;
    let e = |what: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |err| PackError::io(what, p, err)
    };
    fs::create_dir_all(root).map_err(e("cannot create", root))?;
    let mut dirs = Vec::new();
    let mut placed: std::collections::HashMap<&str, PathBuf> = std::collections::HashMap::new();
    for f in &m.files {
        let p = inside(root, &f.path);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(e("cannot create", parent))?;
        }
        match f.kind {
            EntryKind::Dir => {
                fs::create_dir_all(&p).map_err(e("cannot create", &p))?;
                dirs.push((p, f.mode));
            }
            EntryKind::Symlink => {
                let t = f.target.as_deref().unwrap_or("");
                symlink(t, &p).map_err(e("cannot create the link", &p))?;
            }
            EntryKind::File => {
                let d = f.blake3.as_deref().unwrap_or("");
                match placed.get(d) {
                    Some(first) => {
                        fs::copy(first, &p).map_err(e("cannot copy the blob to", &p))?;
                    }
                    None => {
                        fs::rename(blobs.join(d), &p).map_err(e("cannot move the blob to", &p))?;
                        placed.insert(d, p.clone());
                    }
                }
                fs::set_permissions(&p, fs::Permissions::from_mode(f.mode)).map_err(e("cannot chmod", &p))?;
            }
            EntryKind::Sized | EntryKind::Listed => {
                let file = fs::File::create(&p).map_err(e("cannot create", &p))?;
                file.set_len(f.size.unwrap_or(0)).map_err(e("cannot size", &p))?;
                fs::set_permissions(&p, fs::Permissions::from_mode(f.mode)).map_err(e("cannot chmod", &p))?;
            }
        }
    }
    for d in MOUNTPOINT_DIRS.iter().copied().chain([m.command.cwd.as_str(), "/home/repro"]) {
        let p = inside(root, d);
        if fs::symlink_metadata(&p).is_err() {
            fs::create_dir_all(&p).map_err(e("cannot create", &p))?;
        }
    }
    for f in MOUNTPOINT_FILES {
        let p = inside(root, f);
        if fs::symlink_metadata(&p).is_err() {
            fs::write(&p, b"").map_err(e("cannot create", &p))?;
        }
    }
    // Deepest first, so a read-only parent does not stop its children's chmod.
    dirs.sort_by(|a, b| b.0.cmp(&a.0));
    for (p, mode) in dirs {
        fs::set_permissions(&p, fs::Permissions::from_mode(mode | 0o700)).map_err(e("cannot chmod", &p))?;
    }
    Ok(())
}

/// The root of a pack in the cache (`<cache>/roots/<pack id>`), made on first use: the pack is read and checked
/// into a temporary directory that is renamed into place, so a root in the cache is always complete.
pub fn cached_root(pack_path: &Path, cache: &Path, store: &Store) -> Result<(Pack, PathBuf), PackError> {
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
    fs::create_dir_all(&roots).map_err(|e| PackError::io("cannot create", &roots, e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".partial-")
        .tempdir_in(&roots)
        .map_err(|e| PackError::io("cannot create a directory in", &roots, e))?;
    let blobs = tmp.path().join("blobs");
    let pack = read_pack(pack_path, store, Some(&blobs))?;
    let dest = roots.join(&pack.id);
    if dest.join("root").is_dir() {
        return Ok((pack, dest.join("root")));
    }
    // The tapes, next to the root: `<cache>/roots/<pack id>/tapes/{network,proc}.json`.
    for (name, t) in [("network.json", &pack.manifest.tapes.network), ("proc.json", &pack.manifest.tapes.proc)] {
        if let Some(b) = t {
            let td = tmp.path().join("tapes");
            fs::create_dir_all(&td).map_err(|e| PackError::io("cannot create", &td, e))?;
            fs::copy(blobs.join(&b.blake3), td.join(name))
                .map_err(|e| PackError::io("cannot write", td.join(name), e))?;
        }
    }
    // Last: it moves blobs out of `blobs` (a tape may share a digest with a file).
    materialize(&pack, &blobs, &tmp.path().join("root"))?;
    fs::remove_dir_all(&blobs).map_err(|e| PackError::io("cannot remove", &blobs, e))?;
    let staged = tmp.keep();
    if let Err(err) = fs::rename(&staged, &dest) {
        let _ = fs::remove_dir_all(&staged);
        if !dest.join("root").is_dir() {
            return Err(PackError::io("cannot move the root into", &dest, err));
        }
    }
    Ok((pack, dest.join("root")))
}
