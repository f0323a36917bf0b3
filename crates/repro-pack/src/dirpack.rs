//! A pack laid out as a directory (the input root of a Remote Execution API Action, see docs/remote.md), made a
//! pack file again so `repro replay DIR` replays it:
//!
//! ```text
//! manifest.json     the pack's manifest
//! root/             the guest's files at their paths (`file` entries with their content)
//! blobs/<blake3>    the other blobs the manifest names (stdout, stderr, tapes, environment)
//! ```
//!
//! The directory is untrusted (it came from a remote CAS): manifest.json is bounded and validated as a pack's is,
//! every file is opened through directory descriptors without following any link ([`Beneath`]), read at most to
//! its declared size, and re-hashed with blake3 against the manifest. `listed` and `sized` entries come from the
//! manifest alone (their content is not part of a pack).

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::archive::{parse_manifest, write_pack, BlobSource};
use crate::extract::{Beneath, Limits};
use crate::manifest::Digest;
use crate::PackError;
use repro_model::manifest::EntryKind;

/// The name of the input root's directory of non-file blobs.
pub const BLOBS_DIR: &str = "blobs";
/// The name of the input root's directory of the guest's files.
pub const ROOT_DIR: &str = "root";

/// Whether `path` is a pack directory (a directory holding manifest.json) rather than a pack file.
pub fn is_pack_dir(path: &Path) -> bool {
    path.is_dir()
}

/// Writes the pack of directory `dir` as `out` (a new file), checking every blob against the manifest.
pub fn pack_of_dir(dir: &Path, out: &Path, limits: &Limits) -> Result<(), PackError> {
    fn open_err<'a>(what: &'static str, p: &'a Path) -> impl Fn(std::io::Error) -> PackError + 'a {
        move |e| PackError::io(what, p, e)
    }
    let top = Beneath::open(dir).map_err(open_err("cannot open", dir))?;
    let mpath = dir.join("manifest.json");
    let mut mbytes = Vec::new();
    let max = limits.max_manifest_bytes();
    top.open_file("manifest.json").and_then(|f| f.take(max.saturating_add(1)).read_to_end(&mut mbytes)).map_err(
        |e| match e.kind() {
            // Bad input, not a failure of this machine: exit 2, like a damaged pack file.
            std::io::ErrorKind::NotFound => PackError::BadEntry {
                path: dir.into(),
                entry: "manifest.json".into(),
                why: "missing: a pack directory holds manifest.json, root/ and blobs/ (an Action's input root)".into(),
            },
            _ => PackError::io("cannot read", &mpath, e),
        },
    )?;
    if mbytes.len() as u64 > max {
        return Err(PackError::Limit {
            path: dir.into(),
            what: format!("its manifest.json has more than {max} bytes"),
            limit: max,
            flag: "--max-entries",
        });
    }
    let manifest = parse_manifest(&mpath, &mbytes)?;
    limits.check(dir, &manifest)?;
    let staging = out
        .parent()
        .unwrap_or(Path::new("."))
        .join(format!(".{}.blobs", out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()));
    fs::create_dir(&staging).map_err(open_err("cannot create", &staging))?;
    let result = (|| {
        let mut blobs: BTreeMap<Digest, BlobSource> = BTreeMap::new();
        let bad = |entry: &str, why: String| PackError::BadEntry { path: dir.into(), entry: entry.into(), why };
        for e in &manifest.files {
            if e.kind != EntryKind::File {
                continue;
            }
            let (Some(b3), Some(size)) = (e.blake3.as_ref(), e.size) else {
                return Err(bad(&e.path, "a file entry without blake3 or size".into()));
            };
            if blobs.contains_key(b3) {
                continue;
            }
            let comps: Vec<&str> = e.path.split('/').filter(|c| !c.is_empty()).collect();
            let Some((last, parents)) = comps.split_last() else {
                return Err(bad(&e.path, "an empty path".into()));
            };
            let mut d = top.subdir(ROOT_DIR, None).map_err(|e2| bad(&e.path, format!("{ROOT_DIR}/: {e2}")))?;
            for c in parents {
                d = d.subdir(*c, None).map_err(|e2| bad(&e.path, format!("directory '{c}': {e2}")))?;
            }
            let f = d.open_file(*last).map_err(|e2| bad(&e.path, e2.to_string()))?;
            let staged = stage(f, size, b3, &staging).map_err(|why| bad(&e.path, why))?;
            blobs.insert(b3.clone(), BlobSource::File(staged));
        }
        for (field, b3, size) in manifest.blob_refs() {
            if blobs.contains_key(&b3) || field.starts_with("files[") {
                continue;
            }
            let entry = format!("{BLOBS_DIR}/{b3}");
            let bd = top.subdir(BLOBS_DIR, None).map_err(|e2| bad(&entry, format!("{field}: {e2}")))?;
            let f = bd.open_file(b3.as_str()).map_err(|e2| bad(&entry, format!("{field}: {e2}")))?;
            let staged = stage(f, size.unwrap_or(0), &b3, &staging).map_err(|why| bad(&entry, why))?;
            blobs.insert(b3, BlobSource::File(staged));
        }
        write_pack(out, &manifest, &blobs, None, None)
    })();
    let _ = fs::remove_dir_all(&staging);
    result
}

/// Copies at most `size` + 1 bytes of `f` to `staging/<blake3>`, checking its size and blake3.
fn stage(f: fs::File, size: u64, b3: &str, staging: &Path) -> Result<PathBuf, String> {
    if b3.len() != 64 || !b3.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("'{b3}' is not a blake3 digest"));
    }
    let path = staging.join(b3);
    let mut out = fs::File::create_new(&path).map_err(|e| format!("cannot create '{}': {e}", path.display()))?;
    let mut h = blake3::Hasher::new();
    let mut r = f.take(size.saturating_add(1));
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf).map_err(|e| format!("cannot read: {e}"))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        out.write_all(&buf[..k]).map_err(|e| format!("cannot write '{}': {e}", path.display()))?;
        n += k as u64;
    }
    if n != size {
        return Err(format!(
            "{} bytes where the manifest says {size}",
            if n > size { "more".into() } else { n.to_string() }
        ));
    }
    let got = h.finalize().to_hex().to_string();
    if got != b3 {
        return Err(format!("its content has blake3 {got}, not the manifest's {b3}"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_a_manifest_is_bad_input() {
        let d = tempfile::tempdir().unwrap();
        let e = pack_of_dir(d.path(), &d.path().join("out.repro"), &Limits::default()).unwrap_err();
        assert!(matches!(&e, PackError::BadEntry { entry, .. } if entry == "manifest.json"), "{e}");
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("missing"), "{e}");
    }
}
