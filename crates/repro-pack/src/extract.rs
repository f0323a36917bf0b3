//! Writing a pack's content to disk: a pack is untrusted data. Everything is written below a staging directory
//! made beside the target, through directory descriptors ([`repro_sys::beneath::Beneath`]: openat2 with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, `O_EXCL`, one descriptor per level, never a
//! joined path), and the staging directory is renamed into place only when everything succeeded. A failure at
//! any point (a damaged blob, a truncated pack, a full disk) leaves nothing behind.

use std::fs;
use std::path::{Path, PathBuf};

pub use repro_sys::beneath::Beneath;

use crate::manifest::{Manifest, ManifestCheck};
use crate::PackError;

/// Default limit of the bytes a pack may unpack to (`--max-unpacked-size`).
pub const DEFAULT_MAX_UNPACKED_SIZE: u64 = 8 << 30;
/// Default limit of the entries (paths and blobs) a pack may hold (`--max-entries`).
pub const DEFAULT_MAX_ENTRIES: u64 = 1_000_000;
/// manifest.json may take at most this many bytes per allowed entry (plus [`MANIFEST_BASE_BYTES`]): a real
/// entry takes about 200 bytes, so the default limits allow a manifest of about 270 MB, and a small pack that
/// claims more (a zstd bomb) is refused before it is read.
pub const MANIFEST_BYTES_PER_ENTRY: u64 = 256;
pub const MANIFEST_BASE_BYTES: u64 = 16 << 20;

/// How much a pack may unpack to; checked against the manifest before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_unpacked_size: u64,
    pub max_entries: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_unpacked_size: DEFAULT_MAX_UNPACKED_SIZE, max_entries: DEFAULT_MAX_ENTRIES }
    }
}

impl Limits {
    /// The largest manifest.json read (its tar header is checked before it is read).
    pub fn max_manifest_bytes(&self) -> u64 {
        MANIFEST_BASE_BYTES.saturating_add(self.max_entries.saturating_mul(MANIFEST_BYTES_PER_ENTRY))
    }

    /// Checks the manifest's declared footprint against the limits.
    pub fn check(&self, pack: &Path, m: &Manifest) -> Result<(), PackError> {
        let (bytes, entries) = m.unpacked_footprint();
        if entries > self.max_entries {
            return Err(PackError::Limit {
                path: pack.into(),
                what: format!("it holds {entries} entries ({} paths and their blobs)", m.files.len()),
                limit: self.max_entries,
                flag: "--max-entries",
            });
        }
        if bytes > self.max_unpacked_size {
            return Err(PackError::Limit {
                path: pack.into(),
                what: format!("it unpacks to {bytes} bytes"),
                limit: self.max_unpacked_size,
                flag: "--max-unpacked-size",
            });
        }
        Ok(())
    }
}

/// Checks that what the manifest declares fits in the filesystem of `dir` (bytes and inodes), before anything
/// is written there.
pub fn check_space(pack: &Path, m: &Manifest, dir: &Beneath, shown: &Path) -> Result<(), PackError> {
    let (bytes, entries) = m.unpacked_footprint();
    let (free, inodes) = dir.free_space().map_err(|e| PackError::io("cannot read the free space of", shown, e))?;
    if bytes > free {
        return Err(PackError::NoSpace { path: pack.into(), dir: shown.into(), needed: bytes, free, unit: "bytes" });
    }
    if let Some(free) = inodes {
        if entries > free {
            return Err(PackError::NoSpace {
                path: pack.into(),
                dir: shown.into(),
                needed: entries,
                free,
                unit: "inodes",
            });
        }
    }
    Ok(())
}

/// A directory being filled beside `target`, renamed onto it by [`Staging::finish`]; removed with everything
/// in it when dropped before that.
#[derive(Debug)]
pub struct Staging {
    tmp: tempfile::TempDir,
    pub dir: Beneath,
}

impl Staging {
    /// A new hidden directory `.<name>.partial-*` next to `target` (whose parent is created when missing).
    pub fn beside(target: &Path) -> Result<Staging, PackError> {
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&parent).map_err(|e| PackError::io("cannot create", &parent, e))?;
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "pack".into());
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}.partial-"))
            .tempdir_in(&parent)
            .map_err(|e| PackError::io("cannot create a directory in", &parent, e))?;
        let dir = Beneath::open(tmp.path()).map_err(|e| PackError::io("cannot open", tmp.path(), e))?;
        Ok(Staging { tmp, dir })
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Puts the staged content at `target`: a missing target is the staging directory renamed (with mode
    /// `mode`); an existing empty directory (perhaps the current one) keeps its own inode and receives the staged
    /// entries one by one (rename, never replacing; moved back if one fails). On failure nothing is left.
    pub fn finish(self, target: &Path, mode: u32) -> Result<(), PackError> {
        let fail = |e| PackError::io("cannot move the unpacked pack to", target, e);
        if fs::symlink_metadata(target).is_err() {
            self.dir.chmod(mode).map_err(|e| PackError::io("cannot chmod", self.tmp.path(), e))?;
            fs::rename(self.tmp.path(), target).map_err(fail)?;
            // Renamed: nothing left to remove (`keep` only disarms the removal; its path is gone).
            let _ = self.tmp.keep();
            return Ok(());
        }
        let to = Beneath::open(target).map_err(fail)?;
        let names: Vec<String> = fs::read_dir(self.tmp.path())
            .map_err(fail)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let mut moved: Vec<&String> = Vec::new();
        for n in &names {
            if let Err(e) = self.dir.rename_noreplace(n, &to, n) {
                for m in &moved {
                    // Undoing after a failure that is reported below; what cannot be moved back stays in target.
                    let _ = to.rename_noreplace(m, &self.dir, m);
                }
                return Err(fail(e));
            }
            moved.push(n);
        }
        Ok(())
    }
}
