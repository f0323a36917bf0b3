//! SHA-256 digests (the digest function every REAPI server offers) and the blobs an Action needs.

use crate::RemoteError;
use bazel_remote_apis::build::bazel::remote::execution::v2::Digest;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where a blob's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blob {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Blob {
    /// The bytes (a file is read whole).
    pub fn read(&self) -> Result<Vec<u8>, RemoteError> {
        match self {
            Blob::Bytes(b) => Ok(b.clone()),
            Blob::File(p) => std::fs::read(p).map_err(|e| RemoteError::io("cannot read", p, e)),
        }
    }
}

/// Blobs by digest (hash, then size): each content once, in a fixed order.
#[derive(Debug, Clone, Default)]
pub struct Blobs(BTreeMap<(String, i64), (Digest, Blob)>);

impl Blobs {
    pub fn new() -> Blobs {
        Blobs::default()
    }

    /// Adds bytes; returns their digest.
    pub fn add_bytes(&mut self, bytes: Vec<u8>) -> Digest {
        let d = digest_of(&bytes);
        self.insert(d.clone(), Blob::Bytes(bytes));
        d
    }

    pub fn insert(&mut self, d: Digest, blob: Blob) {
        self.0.entry((d.hash.clone(), d.size_bytes)).or_insert((d, blob));
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Total bytes of the distinct blobs.
    pub fn total_bytes(&self) -> u64 {
        self.0.values().map(|(d, _)| d.size_bytes as u64).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Digest, &Blob)> {
        self.0.values().map(|(d, b)| (d, b))
    }

    pub fn get(&self, d: &Digest) -> Option<&Blob> {
        self.0.get(&(d.hash.clone(), d.size_bytes)).map(|(_, b)| b)
    }
}

/// The SHA-256 digest of `bytes`.
pub fn digest_of(bytes: &[u8]) -> Digest {
    Digest { hash: hex(&Sha256::digest(bytes)), size_bytes: bytes.len() as i64 }
}

/// The SHA-256 digest of a file, read in chunks.
pub fn digest_of_file(path: &Path) -> Result<Digest, RemoteError> {
    let mut f = std::fs::File::open(path).map_err(|e| RemoteError::io("cannot open", path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut size = 0i64;
    loop {
        let n = f.read(&mut buf).map_err(|e| RemoteError::io("cannot read", path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as i64;
    }
    Ok(Digest { hash: hex(&h.finalize()), size_bytes: size })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_inputs() {
        assert_eq!(digest_of(b"").hash, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let d = digest_of(b"abc");
        assert_eq!(
            (d.hash.as_str(), d.size_bytes),
            ("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", 3)
        );
    }
}
