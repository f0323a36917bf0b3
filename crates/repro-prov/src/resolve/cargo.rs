//! Rust crates: sources unpacked by Cargo under `…/registry/src/<index-dir>/<name>-<version>/`. Their record is
//! the `.crate` archive Cargo unpacked them from, kept in `…/registry/cache/<index-dir>/<name>-<version>.crate`:
//! each used file is checked against its entry there (matches, or modified after unpacking), the archive's sha256
//! is the component's `archive_sha256`, and when the run's working directory has a `Cargo.lock` that pins the
//! crate, the archive must be the one it pins (its `checksum`), else every file of the crate is `modified`. No
//! archive in the cache: not-recorded. Git checkouts (`…/git/checkouts/<repo>-<hash>/<rev>/`) name a
//! repository, not a crate: they are left loose.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::Path;

use repro_model::provenance::{Check, ComponentKind};
use serde::Deserialize;

use crate::identity::hex;

use super::{parts, purl, read_soft, Found, Input, Label, RootFs};

/// The largest `.crate` read (crates.io refuses uploads above 10 MiB).
const MAX_CRATE: u64 = 64 << 20;
/// The most bytes unpacked from one `.crate` (a gzip bomb stops there) and the most entries looked at.
const MAX_UNPACKED: u64 = 512 << 20;
const MAX_ENTRIES: usize = 100_000;
/// The largest Cargo.lock read.
const MAX_LOCK: u64 = 16 << 20;

/// The crate a normalised path is a file of.
pub(super) fn resolve(norm: &[u8]) -> Option<Label> {
    let (name, version, _, _) = locate(norm)?;
    let purl = purl::purl("cargo", &[], name, Some(version), &[]);
    Some(Label {
        kind: ComponentKind::Cargo,
        name: name.into(),
        version: Some(version.into()),
        purl: Some(purl),
        archive_sha256: None,
    })
}

/// For `<prefix>/registry/src/<index>/<name>-<version>/<rel>`: the name, the version, the archive's path
/// (`<prefix>/registry/cache/<index>/<name>-<version>.crate`) and `rel`.
fn locate(norm: &[u8]) -> Option<(&str, &str, Vec<u8>, String)> {
    let segs: Vec<&[u8]> = parts(norm).collect();
    let at = (0..segs.len().saturating_sub(4)).rev().find(|&i| segs[i] == b"registry" && segs[i + 1] == b"src")?;
    let dir = std::str::from_utf8(segs[at + 3]).ok()?;
    let (name, version) = split_name_version(dir)?;
    let mut archive = Vec::new();
    for s in &segs[..at] {
        archive.push(b'/');
        archive.extend_from_slice(s);
    }
    archive.extend_from_slice(b"/registry/cache/");
    archive.extend_from_slice(segs[at + 2]);
    archive.push(b'/');
    archive.extend_from_slice(dir.as_bytes());
    archive.extend_from_slice(b".crate");
    let rel: Vec<&str> = segs[at + 4..].iter().map(|s| std::str::from_utf8(s).ok()).collect::<Option<_>>()?;
    Some((name, version, archive, rel.join("/")))
}

/// What a `.crate` says: its sha256, and the sha256 of each wanted file in it (by path below `<name>-<version>/`).
struct CrateRecord {
    sha256: String,
    files: HashMap<String, String>,
}

/// Reads the archive at `host` (bounded) and hashes the entries named in `wanted`; `None` when it is missing,
/// too large or not a gzipped tar (the files are then not-recorded, never guessed).
fn read_crate(host: &Path, top: &str, wanted: &HashSet<String>) -> Option<CrateRecord> {
    use sha2::Digest as _;
    let data = read_soft(host, MAX_CRATE, false)?;
    let sha256 = hex(&sha2::Sha256::digest(&data));
    let unpacked = flate2::read::GzDecoder::new(&data[..]).take(MAX_UNPACKED);
    let mut archive = tar::Archive::new(unpacked);
    let mut files = HashMap::new();
    for (i, entry) in archive.entries().ok()?.enumerate() {
        if i >= MAX_ENTRIES || files.len() == wanted.len() {
            break;
        }
        let Ok(mut entry) = entry else { break };
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let Ok(path) = entry.path() else { continue };
        let Some(text) = path.to_str() else { continue };
        let Some(rel) = text.strip_prefix(top).and_then(|r| r.strip_prefix('/')) else { continue };
        if !wanted.contains(rel) {
            continue;
        }
        let rel = rel.to_string();
        let mut h = sha2::Sha256::new();
        if std::io::copy(&mut entry, &mut h).is_err() {
            break;
        }
        files.insert(rel, hex(&h.finalize()));
    }
    Some(CrateRecord { sha256, files })
}

#[derive(Deserialize)]
struct LockDoc {
    #[serde(default)]
    package: Vec<LockPackage>,
}

#[derive(Deserialize)]
struct LockPackage {
    name: String,
    version: String,
    #[serde(default)]
    checksum: Option<String>,
}

/// The checksums a Cargo.lock pins, by (name, version); none when it is missing or unreadable.
fn read_lock(host: Option<&Path>) -> BTreeMap<(String, String), String> {
    let Some(text) = host.and_then(|p| read_soft(p, MAX_LOCK, false)).and_then(|d| String::from_utf8(d).ok()) else {
        return BTreeMap::new();
    };
    let Ok(doc) = toml::from_str::<LockDoc>(&text) else { return BTreeMap::new() };
    doc.package.into_iter().filter_map(|p| Some(((p.name, p.version), p.checksum?))).collect()
}

/// Checks the files the crate resolver found against their crates' archives (and the archives against
/// `cargo_lock`, a guest path), setting each file's check and its label's `archive_sha256`.
pub(super) fn check(fs: &RootFs, inputs: &[Input], found: &mut [Option<Found>], cargo_lock: Option<&[u8]>) {
    let mut wanted: HashMap<Vec<u8>, (String, HashSet<String>)> = HashMap::new();
    for (input, slot) in inputs.iter().zip(found.iter()) {
        let (Some(f), Some(norm)) = (slot, input.norm.as_deref()) else { continue };
        if f.label.kind != ComponentKind::Cargo {
            continue;
        }
        let Some((name, version, archive, rel)) = locate(norm) else { continue };
        wanted.entry(archive).or_insert_with(|| (format!("{name}-{version}"), HashSet::new())).1.insert(rel);
    }
    if wanted.is_empty() {
        return;
    }
    let lock = read_lock(cargo_lock.and_then(|p| fs.host(p)).as_deref());
    let records: HashMap<Vec<u8>, Option<CrateRecord>> = wanted
        .iter()
        .map(|(archive, (top, rels))| (archive.clone(), fs.host(archive).and_then(|h| read_crate(&h, top, rels))))
        .collect();
    for (input, slot) in inputs.iter().zip(found.iter_mut()) {
        let (Some(f), Some(norm)) = (slot.as_mut(), input.norm.as_deref()) else { continue };
        if f.label.kind != ComponentKind::Cargo {
            continue;
        }
        let Some((name, version, archive, rel)) = locate(norm) else { continue };
        let Some(Some(record)) = records.get(&archive) else { continue };
        f.label.archive_sha256 = Some(record.sha256.clone());
        let pinned = lock.get(&(name.to_string(), version.to_string()));
        f.check = match (pinned, record.files.get(&rel)) {
            (Some(p), _) if *p != record.sha256 => Check::Modified,
            (_, Some(sha)) if *sha == input.file.sha256 => Check::Matches,
            (_, Some(_)) => Check::Modified,
            (_, None) => Check::NotRecorded,
        };
    }
}

/// `NAME-VERSION` split at the last `-` followed by a semantic version (a crate's name may have `-` in it, and
/// so may a pre-release).
pub(crate) fn split_name_version(dir: &str) -> Option<(&str, &str)> {
    let bytes = dir.as_bytes();
    (1..bytes.len()).rev().filter(|&i| bytes[i - 1] == b'-' && bytes[i].is_ascii_digit()).find_map(|i| {
        let (name, version) = (&dir[..i - 1], &dir[i..]);
        (is_crate_name(name) && is_semver(version)).then_some((name, version))
    })
}

fn is_crate_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.as_bytes()[0].is_ascii_alphabetic()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `MAJOR.MINOR.PATCH[-PRE][+BUILD]` (semver 2.0.0).
pub(crate) fn is_semver(s: &str) -> bool {
    if s.len() > 256 {
        return false;
    }
    let (rest, build) = match s.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    let ident = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let core: Vec<&str> = core.split('.').collect();
    core.len() == 3
        && core.iter().all(|n| numeric(n))
        && pre.is_none_or(|p| p.split('.').all(|x| ident(x) && (!x.bytes().all(|b| b.is_ascii_digit()) || numeric(x))))
        && build.is_none_or(|b| b.split('.').all(ident))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert_eq!(split_name_version("serde-1.0.228"), Some(("serde", "1.0.228")));
        assert_eq!(split_name_version("proc-macro2-1.0.86"), Some(("proc-macro2", "1.0.86")));
        assert_eq!(split_name_version("foo-2-1.0.0"), Some(("foo-2", "1.0.0")));
        assert_eq!(split_name_version("x-1.0.0-rc-1"), Some(("x", "1.0.0-rc-1")));
        assert_eq!(
            split_name_version("wasi-0.11.0+wasi-snapshot-preview1"),
            Some(("wasi", "0.11.0+wasi-snapshot-preview1"))
        );
        assert_eq!(split_name_version("noversion"), None);
        assert_eq!(split_name_version("-1.0.0"), None);
        assert_eq!(split_name_version("a-01.0.0"), None);
        assert_eq!(split_name_version("a-1.0"), None);
    }

    #[test]
    fn registry_paths() {
        let l =
            resolve(b"/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/serde-1.0.228/src/lib.rs").unwrap();
        assert_eq!((l.name.as_str(), l.version.as_deref()), ("serde", Some("1.0.228")));
        assert_eq!(l.purl.as_deref(), Some("pkg:cargo/serde@1.0.228"));
        // The directory itself, or a directory that is no crate, is not a crate's file.
        assert!(resolve(b"/c/registry/src/index/serde-1.0.228").is_none());
        assert!(resolve(b"/c/registry/src/index/not-a-crate/x.rs").is_none());
        assert!(resolve(b"/c/registry/cache/index/serde-1.0.228.crate").is_none());
        let l = resolve(b"/w/registry/src/a/registry/src/i/wasi-0.11.0+wasi-snapshot-preview1/src/lib.rs").unwrap();
        assert_eq!(l.purl.as_deref(), Some("pkg:cargo/wasi@0.11.0%2Bwasi-snapshot-preview1"));
    }
}
