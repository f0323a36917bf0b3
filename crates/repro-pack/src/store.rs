//! The local content-addressed store, `$XDG_CACHE_HOME/repro/cas`: blobs named by their blake3 digest, written
//! once (temp file + rename), shared by every pack on the machine. Thin packs refer to it.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::manifest::Digest;
use crate::PackError;

/// The cache directory of repro: `$XDG_CACHE_HOME/repro`, else `$HOME/.cache/repro`, else `/tmp/repro-cache`.
pub fn cache_dir() -> PathBuf {
    let xdg = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache"));
    xdg.or(home).unwrap_or_else(|| PathBuf::from("/tmp/repro-cache")).join("repro")
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
        let shard = digest.get(..2).unwrap_or("xx");
        self.root.join(shard).join(digest)
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
}
