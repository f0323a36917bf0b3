//! The local content-addressed store, `$XDG_CACHE_HOME/repro/cas`: blobs named by their blake3 digest, written
//! once (temp file + rename), shared by every pack on the machine. Thin packs refer to it.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::manifest::Digest;
use crate::PackError;

/// The cache directory of repro: `$XDG_CACHE_HOME/repro`, else `$HOME/.cache/repro`, else `/tmp/repro-cache`.
pub fn cache_dir() -> PathBuf {
    let xdg = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache"));
    xdg.or(home).unwrap_or_else(|| PathBuf::from("/tmp/repro-cache")).join("repro")
}

/// `root/<first two hex digits of digest>/name`: a cache directory spread over 256 subdirectories.
fn sharded(root: &Path, digest: &str, name: &str) -> PathBuf {
    root.join(digest.get(..2).unwrap_or("xx")).join(name)
}

#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
}

impl Store {
    /// The store at its default location.
    pub fn default_store() -> Store {
        Store { root: cache_dir().join("cas") }
    }

    pub fn at(root: impl Into<PathBuf>) -> Store {
        Store { root: root.into() }
    }

    pub fn path_of(&self, digest: &str) -> PathBuf {
        sharded(&self.root, digest, digest)
    }

    pub fn has(&self, digest: &str) -> bool {
        self.path_of(digest).is_file()
    }

    /// Stores the content read from `src`, which must hash to `digest`. Does nothing when the blob is there.
    pub fn put_reader(&self, digest: &Digest, mut src: impl Read, what: &Path) -> Result<(), PackError> {
        let dest = self.path_of(digest);
        if dest.is_file() {
            return Ok(());
        }
        let dir = dest.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| PackError::io("cannot create the store directory", &dir, e))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".partial-")
            .tempfile_in(&dir)
            .map_err(|e| PackError::io("cannot create a file in the store", &dir, e))?;
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = src.read(&mut buf).map_err(|e| PackError::io("cannot read", what, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            tmp.write_all(&buf[..n]).map_err(|e| PackError::io("cannot write to the store", &dir, e))?;
        }
        let actual = hasher.finalize().to_hex().to_string();
        if &actual != digest {
            return Err(PackError::Closure {
                path: what.to_path_buf(),
                detail: format!("it changed while being stored (expected blake3 {digest}, read {actual})"),
            });
        }
        tmp.persist(&dest).map_err(|e| PackError::io("cannot store", &dest, e.error))?;
        Ok(())
    }

    /// Opens a stored blob.
    pub fn open(&self, digest: &str) -> Option<fs::File> {
        fs::File::open(self.path_of(digest)).ok()
    }
}

/// The frame cache, `$XDG_CACHE_HOME/repro/frames`: for each blob, the compressed zstd frame of its tar entry in a
/// pack, so that packing the same file again (the interpreter, its libraries) copies the frame instead of
/// compressing the file again. A pure cache: each file is written atomically and ends with the blake3 of the
/// frame, checked before use (a damaged frame is made again); the directory may be deleted at any time.
#[derive(Debug, Clone)]
pub struct FrameCache {
    pub root: PathBuf,
}

impl FrameCache {
    /// The cache at its default location.
    pub fn default_cache() -> FrameCache {
        FrameCache { root: cache_dir().join("frames") }
    }

    pub fn at(root: impl Into<PathBuf>) -> FrameCache {
        FrameCache { root: root.into() }
    }

    fn path_of(&self, digest: &str) -> PathBuf {
        sharded(&self.root, digest, &format!("{digest}.{}.zst", crate::frame::ZSTD_LEVEL))
    }

    /// Whether a frame of `digest` is kept (not checked).
    pub fn has(&self, digest: &str) -> bool {
        self.path_of(digest).is_file()
    }

    /// The cached frame of `digest`, when there is one and its trailer (the blake3 of the frame) checks.
    pub fn get(&self, digest: &str) -> Option<Vec<u8>> {
        let mut data = fs::read(self.path_of(digest)).ok()?;
        let at = data.len().checked_sub(32)?;
        let good = blake3::hash(&data[..at]).as_bytes() == &data[at..];
        data.truncate(at);
        good.then_some(data)
    }

    /// Keeps `frame` as the frame of `digest`. Best effort: a cache that cannot be written only costs time.
    pub fn put(&self, digest: &str, frame: &[u8]) {
        let dest = self.path_of(digest);
        let Some(dir) = dest.parent() else { return };
        // Best effort, as documented: the frame is made again next time.
        let _ = fs::create_dir_all(dir).and_then(|_| {
            let mut tmp = tempfile::Builder::new().prefix(".partial-").tempfile_in(dir)?;
            tmp.write_all(frame)?;
            tmp.write_all(blake3::hash(frame).as_bytes())?;
            tmp.persist(&dest).map_err(|e| e.error)?;
            Ok(())
        });
    }
}

/// The digests of host files hashed before, `$XDG_CACHE_HOME/repro/digests.json`, keyed by path and valid while
/// the file's device, inode, size, mtime and ctime are the ones hashed (the kernel moves ctime on every write and
/// it cannot be set back, so a changed file is hashed again). Files changed in the last seconds before hashing are
/// not remembered, against a write in the same clock tick. A pure cache, saved atomically, best effort.
#[derive(Debug, Default)]
pub struct DigestCache {
    path: Option<PathBuf>,
    entries: BTreeMap<String, Known>,
    dirty: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Known {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    blake3: Digest,
}

impl Known {
    fn of(md: &fs::Metadata, blake3: Digest) -> Known {
        Known {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
            blake3,
        }
    }
}

/// How old a file's last change must be for its digest to be remembered.
const SETTLED_SECS: i64 = 2;

impl DigestCache {
    /// The cache at its default location.
    pub fn default_cache() -> DigestCache {
        DigestCache::load(cache_dir().join("digests.json"))
    }

    /// Loads the cache kept at `path` (empty when it is missing or unreadable).
    pub fn load(path: impl Into<PathBuf>) -> DigestCache {
        let path = path.into();
        // As documented: a missing or damaged cache is empty, and files are hashed again.
        let entries = fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        DigestCache { path: Some(path), entries, dirty: false }
    }

    /// The digest of `path`, when it was hashed before and `md` says it has not changed since.
    pub fn lookup(&self, path: &Path, md: &fs::Metadata) -> Option<Digest> {
        let k = self.entries.get(path.to_str()?)?;
        (Known::of(md, k.blake3.clone()) == *k).then(|| k.blake3.clone())
    }

    /// Remembers that `path`, as `md` describes it, hashed to `digest`.
    pub fn remember(&mut self, path: &Path, md: &fs::Metadata, digest: &Digest) {
        let Some(p) = path.to_str() else { return };
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        if md.ctime() > now - SETTLED_SECS || md.mtime() > now - SETTLED_SECS || self.path.is_none() {
            return;
        }
        self.entries.insert(p.to_string(), Known::of(md, digest.clone()));
        self.dirty = true;
    }

    /// Writes the cache back when something was added (temp file + rename; errors only cost time later).
    pub fn save(&self) {
        let (Some(path), true) = (&self.path, self.dirty) else { return };
        let Some(dir) = path.parent() else { return };
        let Ok(json) = serde_json::to_vec(&self.entries) else { return };
        // Best effort, as documented: an unsaved cache only costs hashing again.
        let _ = fs::create_dir_all(dir).and_then(|_| {
            let mut tmp = tempfile::Builder::new().prefix(".digests-").tempfile_in(dir)?;
            tmp.write_all(&json)?;
            tmp.persist(path).map_err(|e| e.error)?;
            Ok(())
        });
    }
}

/// One of repro's caches under [`cache_dir`], for `repro pack cache`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheUsage {
    /// `cas`, `frames`, `digests`, `roots`.
    pub name: &'static str,
    pub path: PathBuf,
    pub files: u64,
    pub bytes: u64,
    /// Whether removing it only costs time (false for the store: thin packs refer to it).
    pub pure: bool,
}

fn usage_of(p: &Path) -> (u64, u64) {
    let Ok(md) = fs::symlink_metadata(p) else { return (0, 0) };
    if !md.is_dir() {
        return (1, md.len());
    }
    let mut total = (0, 0);
    for e in fs::read_dir(p).into_iter().flatten().flatten() {
        let (f, b) = usage_of(&e.path());
        total = (total.0 + f, total.1 + b);
    }
    total
}

/// The caches in `cache` (normally [`cache_dir`]) and what they hold.
pub fn cache_usage(cache: &Path) -> Vec<CacheUsage> {
    [("cas", "cas", false), ("frames", "frames", true), ("digests", "digests.json", true), ("roots", "roots", true)]
        .into_iter()
        .map(|(name, rel, pure)| {
            let path = cache.join(rel);
            let (files, bytes) = usage_of(&path);
            CacheUsage { name, path, files, bytes, pure }
        })
        .collect()
}

/// Removes the pure caches in `cache` (and, with `store`, the blob store too); returns what was removed.
pub fn clean_cache(cache: &Path, store: bool) -> Result<Vec<CacheUsage>, PackError> {
    let mut removed = Vec::new();
    for u in cache_usage(cache) {
        if !(u.pure || store) || fs::symlink_metadata(&u.path).is_err() {
            continue;
        }
        let r = if u.path.is_dir() { fs::remove_dir_all(&u.path) } else { fs::remove_file(&u.path) };
        r.map_err(|e| PackError::io("cannot remove", &u.path, e))?;
        removed.push(u);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_is_idempotent_and_checks_the_digest() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::at(d.path().join("cas"));
        let dg = crate::manifest::digest(b"hello");
        s.put_reader(&dg, &b"hello"[..], Path::new("mem")).unwrap();
        s.put_reader(&dg, &b"hello"[..], Path::new("mem")).unwrap();
        assert!(s.has(&dg));
        assert_eq!(fs::read(s.path_of(&dg)).unwrap(), b"hello");
        let bad = s.put_reader(&crate::manifest::digest(b"other"), &b"hello"[..], Path::new("mem"));
        assert!(bad.unwrap_err().to_string().contains("changed while being stored"));
    }

    #[test]
    fn frame_cache_checks_its_trailer() {
        let d = tempfile::tempdir().unwrap();
        let c = FrameCache::at(d.path());
        let dg = crate::manifest::digest(b"x");
        assert_eq!(c.get(&dg), None);
        c.put(&dg, b"frame bytes");
        assert_eq!(c.get(&dg).as_deref(), Some(&b"frame bytes"[..]));
        let mut damaged = fs::read(c.path_of(&dg)).unwrap();
        damaged[0] ^= 1;
        fs::write(c.path_of(&dg), damaged).unwrap();
        assert_eq!(c.get(&dg), None, "a damaged frame is not used");
    }

    #[test]
    fn digest_cache_forgets_changed_files() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        fs::write(&f, b"one").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        fs::File::options().write(true).open(&f).unwrap().set_modified(old).unwrap();
        let md = fs::metadata(&f).unwrap();
        let mut c = DigestCache::load(d.path().join("digests.json"));
        let dg = crate::manifest::digest(b"one");
        c.remember(&f, &md, &dg);
        // The ctime is now: too fresh to trust, so nothing is remembered.
        assert_eq!(c.lookup(&f, &md), None);
        // An entry for the file as it is now is used, and dropped once the file changes.
        c.entries.insert(f.to_str().unwrap().into(), Known::of(&md, dg.clone()));
        c.dirty = true;
        assert_eq!(c.lookup(&f, &md), Some(dg.clone()));
        c.save();
        let c2 = DigestCache::load(d.path().join("digests.json"));
        assert_eq!(c2.lookup(&f, &md), Some(dg.clone()), "saved and loaded");
        fs::write(&f, b"two").unwrap();
        assert_eq!(c2.lookup(&f, &fs::metadata(&f).unwrap()), None, "a write moves ctime");
    }

    #[test]
    fn cache_usage_and_clean() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::at(d.path().join("cas"));
        let dg = crate::manifest::digest(b"blob");
        s.put_reader(&dg, &b"blob"[..], Path::new("mem")).unwrap();
        FrameCache::at(d.path().join("frames")).put(&dg, b"frame");
        fs::write(d.path().join("digests.json"), b"{}").unwrap();
        let u = cache_usage(d.path());
        let by = |n: &str| u.iter().find(|c| c.name == n).unwrap().clone();
        assert_eq!((by("cas").files, by("cas").bytes), (1, 4));
        assert_eq!((by("frames").files, by("frames").bytes), (1, 5 + 32));
        assert_eq!((by("digests").files, by("roots").files), (1, 0));
        let removed: Vec<_> = clean_cache(d.path(), false).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(removed, ["frames", "digests"]);
        assert!(s.has(&dg), "the store stays: thin packs refer to it");
        clean_cache(d.path(), true).unwrap();
        assert!(!s.has(&dg));
    }
}
