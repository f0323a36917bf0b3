//! Which software component each used file belongs to: the package databases below a root ("/" in production)
//! name the owner of each path, first match wins: dpkg ([`dpkg`]), a Python distribution's `RECORD`
//! ([`python`]), a Cargo registry source directory ([`cargo`]), an npm package's `package.json` ([`npm`]), a Go
//! module cache directory ([`golang`]); a file none of them claims is a loose [`ComponentKind::File`].
//!
//! Everything here is hostile input: the paths come from a guest (anything, `..` included), and the databases
//! may be huge or malformed. Every read is bounded, no database is read outside the root (symbolic links are
//! followed by hand, within it), and a malformed line or file yields no match, never a panic. Only dpkg's own
//! database (the system's) gives errors: one that exists and cannot be read, or is larger than its bound, is an
//! error naming the file; a missing database means "no such packages". The metadata of the language ecosystems
//! sits in whatever directory a guest used, so an unreadable or oversized one there just yields no match.

mod cargo;
mod dpkg;
mod golang;
mod npm;
mod purl;
mod python;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io::{ErrorKind, Read as _};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use repro_model::provenance::{Check, Component, ComponentFile, ComponentKind, UsedFile};

use crate::ProvError;

/// The bytes the guest saw for a used file, when still available (a pack's blob, or the host file when its
/// sha256 still equals the recorded one). Used to check a file against a package database that records a
/// different digest (dpkg's md5sums).
pub trait Contents {
    fn bytes(&self, file: &UsedFile) -> Option<Vec<u8>>;
}

/// The longest guest path resolved (longer ones are loose files).
const MAX_PATH: usize = 16 << 10;
/// The most symbolic links followed while resolving one path (the kernel's limit).
const MAX_HOPS: u32 = 40;

/// Groups `files` (absolute guest paths, all outside the working directory) into components, reading the
/// package databases below `root` ("/" in production; a temp dir in tests): every file lands in exactly one
/// component; order: dpkg owner first, then Python dist, Rust crate, npm package, Go module, else a loose
/// `ComponentKind::File` component (name = the path, no version, no purl). Components sorted by (kind, name,
/// version), their files by path; each component's `digest` = blake3 hex over its files' sorted
/// "PATH SHA256\n" lines.
pub fn components(root: &Path, files: &[UsedFile], contents: &dyn Contents) -> Result<Vec<Component>, ProvError> {
    components_with(root, files, contents, None)
}

/// [`components`], with the crates' archives checked against `cargo_lock` (a guest path: the run's working
/// directory's `Cargo.lock`) when it exists.
pub fn components_with(
    root: &Path,
    files: &[UsedFile],
    contents: &dyn Contents,
    cargo_lock: Option<&[u8]>,
) -> Result<Vec<Component>, ProvError> {
    let fs = RootFs::new(root);
    let inputs: Vec<Input> = files.iter().map(Input::new).collect();
    let mut found: Vec<Option<Found>> = vec![None; inputs.len()];
    dpkg::resolve(&fs, &inputs, contents, &mut found)?;
    python::resolve(&fs, &inputs, contents, &mut found);
    let mut npm_packages = HashMap::new();
    for (input, slot) in inputs.iter().zip(found.iter_mut()) {
        if slot.is_some() {
            continue;
        }
        let Some(norm) = input.norm.as_deref() else { continue };
        *slot = cargo::resolve(norm)
            .or_else(|| npm::resolve(&fs, norm, &mut npm_packages))
            .or_else(|| golang::resolve(norm))
            .map(|label| Found { label, check: Check::NotRecorded });
    }
    cargo::check(&fs, &inputs, &mut found, cargo_lock);
    let mut groups: BTreeMap<Label, Vec<ComponentFile>> = BTreeMap::new();
    for (input, slot) in inputs.iter().zip(found) {
        let f = input.file;
        let Found { label, check } = slot.unwrap_or_else(|| Found {
            label: Label {
                kind: ComponentKind::File,
                name: f.path.clone(),
                version: None,
                purl: None,
                archive_sha256: None,
            },
            check: Check::NotRecorded,
        });
        groups.entry(label).or_default().push(ComponentFile {
            path: f.path.clone(),
            uses: f.uses.clone(),
            size: f.size,
            sha256: f.sha256.clone(),
            blake3: f.blake3.clone(),
            sha1: f.sha1.clone(),
            check,
        });
    }
    // The map's order is (kind, name, version, purl): the order asked for, ties (one package for two
    // architectures) broken by the purl.
    Ok(groups
        .into_iter()
        .map(|(label, mut files)| {
            files.sort();
            Component {
                kind: label.kind,
                name: label.name,
                version: label.version,
                purl: label.purl,
                digest: crate::identity::component_digest(&files),
                archive_sha256: label.archive_sha256,
                files,
            }
        })
        .collect())
}

/// What a component is, as the resolvers name it: the files with equal labels are one component.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Label {
    pub(crate) kind: ComponentKind,
    pub(crate) name: String,
    pub(crate) version: Option<String>,
    pub(crate) purl: Option<String>,
    /// The package archive the files were checked against (see `cargo.rs`).
    pub(crate) archive_sha256: Option<String>,
}

/// A resolver's answer for one file.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) label: Label,
    pub(crate) check: Check,
}

/// A used file with its path as bytes.
pub(crate) struct Input<'a> {
    pub(crate) file: &'a UsedFile,
    /// The exact bytes of the path (from `path_hex` when the name is not UTF-8), when it is one this module
    /// resolves: absolute, without NUL, at most [`MAX_PATH`] bytes.
    pub(crate) raw: Option<Vec<u8>>,
    /// `raw` normalised lexically (see [`normalize`]).
    pub(crate) norm: Option<Vec<u8>>,
}

impl<'a> Input<'a> {
    fn new(file: &'a UsedFile) -> Self {
        let bytes = match file.path_hex.as_deref() {
            Some(h) => unhex(h),
            None => Some(file.path.as_bytes().to_vec()),
        };
        let raw = bytes.filter(|b| b.first() == Some(&b'/') && b.len() <= MAX_PATH && !b.contains(&0));
        let norm = raw.as_deref().map(normalize);
        Input { file, raw, norm }
    }
}

fn unhex(h: &str) -> Option<Vec<u8>> {
    let h = h.as_bytes();
    if !h.len().is_multiple_of(2) || h.len() > 2 * MAX_PATH {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    h.chunks(2).map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8)).collect()
}

/// The source a compiled Python file was made from, `D/NAME.py` for `D/__pycache__/NAME.TAG[.opt-N].pyc` (and
/// for Python 2's `D/NAME.pyc`): Python writes these beside an installed module after installation, so no
/// package database lists them; they belong to the source's package, with nothing recorded to check them by.
pub(crate) fn pyc_source(path: &[u8]) -> Option<Vec<u8>> {
    let stem = path.strip_suffix(b".pyc")?;
    let slash = stem.iter().rposition(|&b| b == b'/')?;
    let (dir, file) = (&stem[..slash], &stem[slash + 1..]);
    let name = file.split(|&b| b == b'.').next().unwrap_or_default();
    if name.is_empty() {
        return None;
    }
    match dir.strip_suffix(b"/__pycache__") {
        Some(parent) if name.len() < file.len() => Some([parent, b"/", name, b".py"].concat()),
        Some(_) => None,
        None => (name.len() == file.len()).then(|| [stem, b".py"].concat()),
    }
}

/// `path`'s components other than empty ones and `.` (`..` kept).
pub(crate) fn parts(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".")
}

/// An absolute path normalised lexically: no empty or `.` components, each `..` removing the one before it
/// (never above `/`).
pub(crate) fn normalize(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + 1);
    for c in parts(path) {
        if c == b".." {
            pop(&mut out);
        } else {
            out.push(b'/');
            out.extend_from_slice(c);
        }
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// Removes the last component of `/a/b` (to `/a`; `/a` to the empty string).
fn pop(path: &mut Vec<u8>) {
    let at = path.iter().rposition(|&b| b == b'/').unwrap_or(0);
    path.truncate(at);
}

/// What one path below the root is (its own entry, not followed).
#[derive(Clone)]
enum Node {
    Missing,
    Plain,
    Link(Vec<u8>),
}

/// The root's file system, with symbolic links resolved by hand so that nothing outside the root is read: an
/// absolute link target is taken relative to the root, `..` never climbs above it.
pub(crate) struct RootFs<'a> {
    root: &'a Path,
    /// Each path looked at (canonical within the root), with what it is.
    nodes: RefCell<HashMap<Vec<u8>, Node>>,
}

impl<'a> RootFs<'a> {
    pub(crate) fn new(root: &'a Path) -> Self {
        RootFs { root, nodes: RefCell::new(HashMap::new()) }
    }

    /// The host path of a canonical guest path (no links in it): the root joined with it.
    fn join(&self, canonical: &[u8]) -> PathBuf {
        let rel = canonical.strip_prefix(b"/").unwrap_or(canonical);
        if rel.is_empty() {
            self.root.to_path_buf()
        } else {
            self.root.join(OsStr::from_bytes(rel))
        }
    }

    fn node(&self, canonical: &[u8]) -> Node {
        if let Some(n) = self.nodes.borrow().get(canonical) {
            return n.clone();
        }
        let host = self.join(canonical);
        let node = match std::fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&host) {
                Ok(t) if !t.as_os_str().is_empty() && t.as_os_str().len() <= MAX_PATH => {
                    Node::Link(t.as_os_str().as_bytes().to_vec())
                }
                _ => Node::Missing,
            },
            Ok(_) => Node::Plain,
            Err(_) => Node::Missing,
        };
        self.nodes.borrow_mut().insert(canonical.to_vec(), node.clone());
        node
    }

    /// The canonical form of the absolute guest path `path` within the root: every symbolic link among its
    /// directories resolved (and its last component too when `follow_last`), `..` taken after the link before
    /// it. Components that do not exist are kept as they are. `None` after [`MAX_HOPS`] links.
    pub(crate) fn canonical(&self, path: &[u8], follow_last: bool) -> Option<Vec<u8>> {
        let mut todo: Vec<Vec<u8>> = parts(path).rev().map(<[u8]>::to_vec).collect();
        let mut done: Vec<u8> = Vec::with_capacity(path.len());
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            if c == b".." {
                pop(&mut done);
                continue;
            }
            let before = done.len();
            done.push(b'/');
            done.extend_from_slice(&c);
            if todo.is_empty() && !follow_last {
                break;
            }
            if let Node::Link(target) = self.node(&done) {
                hops += 1;
                if hops > MAX_HOPS {
                    return None;
                }
                done.truncate(before);
                if target.first() == Some(&b'/') {
                    done.clear();
                }
                todo.extend(parts(&target).rev().map(<[u8]>::to_vec));
            }
        }
        if done.is_empty() {
            done.push(b'/');
        }
        Some(done)
    }

    /// Where the guest path `path` is on the host, every link in it resolved within the root.
    pub(crate) fn host(&self, path: &[u8]) -> Option<PathBuf> {
        self.canonical(path, true).map(|c| self.join(&c))
    }
}

/// Whether an I/O error means "there is no such file" (rather than "it cannot be read").
fn is_missing(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// A database file of dpkg's: `None` when it does not exist or is not a regular file; an error when it exists
/// and cannot be read, or is larger than `limit`.
pub(crate) fn read_db(path: &Path, limit: u64, what: &'static str) -> Result<Option<Vec<u8>>, ProvError> {
    let read_err = |source| ProvError::Read { path: path.to_path_buf(), source };
    let md = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if is_missing(&e) => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    if !md.is_file() {
        return Ok(None);
    }
    let too_large = || ProvError::TooLarge { path: path.to_path_buf(), what, limit };
    if md.len() > limit {
        return Err(too_large());
    }
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if is_missing(&e) => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    let mut data = Vec::with_capacity(md.len() as usize);
    f.take(limit + 1).read_to_end(&mut data).map_err(read_err)?;
    if data.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(Some(data))
}

/// At most the first `limit` bytes of a regular file, or `None` for anything else (missing, unreadable, not a
/// regular file) and, unless `prefix`, for a file larger than `limit`.
pub(crate) fn read_soft(path: &Path, limit: u64, prefix: bool) -> Option<Vec<u8>> {
    let md = std::fs::symlink_metadata(path).ok()?;
    if !md.is_file() || (!prefix && md.len() > limit) {
        return None;
    }
    let f = std::fs::File::open(path).ok()?;
    let mut data = Vec::new();
    f.take(limit + 1).read_to_end(&mut data).ok()?;
    if data.len() as u64 > limit {
        if !prefix {
            return None;
        }
        data.truncate(limit as usize);
    }
    Some(data)
}

/// Text of a name or version from a database: UTF-8, 1 to 256 characters, no control characters or spaces.
pub(crate) fn token(s: &str) -> Option<&str> {
    let s = s.trim();
    (!s.is_empty() && s.len() <= 256 && !s.chars().any(|c| c.is_control() || c.is_whitespace())).then_some(s)
}
