//! `manifest.json`: the plain types are repro-model's ([`repro_model::manifest`], re-exported here so paths keep
//! working); this module holds the policy on a manifest that came from someone else: [`ManifestCheck`].
//!
//! Compatibility: `format` is 1 for every pack this version writes. A later version that adds a field gives it a
//! serde default so older manifests still parse; one that changes a field's meaning raises `format` and keeps
//! reading the older ones. `tapes.version` is the format of the tape documents (absent in older packs: 1).

use std::borrow::Cow;
use std::collections::BTreeMap;

use repro_model::tape::TAPE_VERSION;

pub use repro_model::manifest::*;

/// The error of `field`.
fn bad(field: impl Into<String>, why: impl Into<String>) -> ManifestError {
    ManifestError::field(field, why)
}

/// The checks of a manifest: [`ManifestCheck::validate`] for one this repro made, and
/// [`ManifestCheck::validate_untrusted`] for one from a pack, plus the questions replay asks of a checked one.
pub trait ManifestCheck {
    /// Checks what serde cannot: the format version, absolute sorted unique paths, digests that look like digests.
    fn validate(&self) -> Result<(), ManifestError>;
    /// Every check of a manifest that came from someone else, field by field, beyond [`ManifestCheck::validate`]:
    /// what the pack sets in the sandbox (argv, cwd, env, hostname, CPUs, memory) within the bounds `repro run`
    /// accepts, every path normal, every entry's parents directories (an entry "under" a symbolic link of the
    /// pack would be written wherever the link points), no link or file where the sandbox mounts its own
    /// directories, modes only permission bits. Each error names the field or entry and what was expected.
    fn validate_untrusted(&self) -> Result<(), ManifestError>;
    /// Whether the guest path `p` (absolute, normal) passes through an entry of the pack that is not a
    /// directory, or is a link of the pack (so that creating or binding something at `p` in the pack's root would
    /// follow a link of the pack): the entry and its kind.
    fn non_dir_on_the_way(&self, p: &str) -> Option<(String, &'static str)>;
    /// What unpacking writes: bytes of content (every blob placed, once per path that uses it, plus the
    /// recorded output and tapes) and entries (paths of the closure plus distinct blobs). Sized files are
    /// sparse and count as entries only.
    fn unpacked_footprint(&self) -> (u64, u64);
}

impl ManifestCheck for Manifest {
    fn validate(&self) -> Result<(), ManifestError> {
        if self.format == 0 {
            return Err(bad("format", "must be at least 1"));
        }
        if self.command.argv.is_empty() {
            return Err(bad("command.argv", "empty"));
        }
        if !self.command.cwd.starts_with('/') {
            return Err(bad("command.cwd", format!("'{}' is not absolute", self.command.cwd)));
        }
        let mut prev: Option<Cow<[u8]>> = None;
        for f in &self.files {
            let exact = f.exact()?;
            if exact.first() != Some(&b'/') || exact.split(|&b| b == b'/').any(|c| c == b".." || c == b".") {
                return Err(bad("files", format!("path '{}' is not absolute and normal", f.path)));
            }
            // Sorted by exact bytes (for UTF-8 paths the order of their text), unique.
            if let Some(p) = &prev {
                if **p >= *exact {
                    return Err(bad("files", format!("'{}' is out of order or repeated", f.path)));
                }
            }
            prev = Some(exact);
            match f.kind {
                EntryKind::File if f.blake3.is_none() || f.size.is_none() => {
                    return Err(bad(format!("files[{}]", f.path), "a file needs blake3 and size"))
                }
                EntryKind::Symlink if f.target.is_none() => {
                    return Err(bad(format!("files[{}]", f.path), "a symlink needs a target"))
                }
                _ => {}
            }
        }
        for (field, d, _) in self.blob_refs() {
            if d.len() != 64 || !d.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(bad(field.clone(), format!("'{d}' is not a blake3 hex digest")));
            }
        }
        Ok(())
    }

    fn validate_untrusted(&self) -> Result<(), ManifestError> {
        // Paths first, so that the messages name the entry and say what is wrong with it; `path_hex` (the exact
        // bytes) is checked as `path` is.
        for f in &self.files {
            if let Some(why) = bad_guest_path(&f.path) {
                return Err(bad(format!("files[{}]", f.path.escape_debug()), why));
            }
            if let Some(why) = bad_guest_bytes(&f.exact()?) {
                return Err(bad(format!("files[{}].path_hex", f.path.escape_debug()), why));
            }
        }
        if let Some(why) = bad_guest_path(&self.command.cwd) {
            return Err(bad("command.cwd", format!("'{}': {why}", self.command.cwd.escape_debug())));
        }
        self.validate()?;
        if self.format > PACK_FORMAT {
            return Err(bad("format", format!("{} is newer than this repro reads (1 to {PACK_FORMAT})", self.format)));
        }
        if self.repro_version.len() > 64 || self.repro_version.chars().any(|c| c.is_control()) {
            return Err(bad("repro_version", "expected a version string of at most 64 printable characters"));
        }
        let c = &self.command;
        let mut bytes = 0usize;
        for (i, a) in c.argv.iter().enumerate() {
            if a.contains('\0') {
                return Err(bad(format!("command.argv[{i}]"), "contains a NUL byte"));
            }
            bytes = bytes.saturating_add(a.len() + 1);
        }
        if c.argv[0].is_empty() {
            return Err(bad("command.argv[0]", "empty (expected the program to run)"));
        }
        if let Some(why) = bad_guest_path(&c.cwd) {
            return Err(bad("command.cwd", format!("'{}': {why}", c.cwd.escape_debug())));
        }
        for d in NO_CWD_UNDER {
            if c.cwd == d || c.cwd.starts_with(&format!("{d}/")) {
                return Err(bad("command.cwd", format!("'{}' is under {d}, which the sandbox makes itself", c.cwd)));
            }
        }
        if c.cwd.contains(',') || c.cwd.contains(':') {
            return Err(bad("command.cwd", format!("'{}' contains ',' or ':', which overlayfs cannot take", c.cwd)));
        }
        for (k, v) in &c.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(bad(
                    "command.env",
                    format!("the name '{}' is not a variable name (expected no '=' and no NUL byte)", k.escape_debug()),
                ));
            }
            if v.contains('\0') {
                return Err(bad(format!("command.env[{k}]"), "the value contains a NUL byte"));
            }
            bytes = bytes.saturating_add(k.len() + v.len() + 2);
        }
        if bytes > MAX_ARGV_ENV_BYTES {
            return Err(bad(
                "command",
                format!("argv and env take {bytes} bytes, more than the {MAX_ARGV_ENV_BYTES} an exec can take"),
            ));
        }
        let d = &self.determinism;
        let h = &d.hostname;
        if h.is_empty() || h.len() > 63 || !h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.') {
            return Err(bad(
                "determinism.hostname",
                format!("'{}' (expected 1 to 63 letters, digits, '-' or '.')", h.escape_debug()),
            ));
        }
        if !(MIN_EPOCH..=MAX_EPOCH).contains(&d.epoch_unix) {
            return Err(bad(
                "determinism.epoch_unix",
                format!(
                    "{} (expected {MIN_EPOCH} to {MAX_EPOCH}, years 0000 to 9999, as repro run --epoch)",
                    d.epoch_unix
                ),
            ));
        }
        if d.epoch_rfc3339.len() > 64 {
            return Err(bad("determinism.epoch_rfc3339", "longer than 64 bytes"));
        }
        if let Some(why) = repro_model::run::bad_spin_limit_ms(d.spin_limit_ms) {
            return Err(bad("determinism.spin_limit_ms", why));
        }
        let r = &self.resources;
        if r.cpus == 0 || r.cpus > MAX_CPUS {
            return Err(bad("resources.cpus", format!("{} (expected 1 to {MAX_CPUS})", r.cpus)));
        }
        if !(MIN_MEMORY..=MAX_MEMORY).contains(&r.memory_bytes) {
            return Err(bad(
                "resources.memory_bytes",
                format!("{} (expected {MIN_MEMORY} to {MAX_MEMORY}, as repro run --memory)", r.memory_bytes),
            ));
        }
        if !(1..=repro_model::settings::MAX_PIDS).contains(&r.pids_max) {
            return Err(bad(
                "resources.pids_max",
                format!("{} (expected 1 to {}, as repro run --pids)", r.pids_max, repro_model::settings::MAX_PIDS),
            ));
        }
        for ch in &self.result.changes {
            if let Some(why) = bad_relative_path(&ch.path) {
                return Err(bad(format!("result.changes[{}]", ch.path.escape_debug()), why));
            }
            let exact = exact_path(&ch.path, ch.path_hex.as_deref())
                .map_err(|why| bad(format!("result.changes[{}].path_hex", ch.path.escape_debug()), why.to_string()))?;
            if let Some(why) = bad_relative_bytes(&exact) {
                return Err(bad(format!("result.changes[{}].path_hex", ch.path.escape_debug()), why));
            }
        }
        for l in &self.source.lockfiles {
            if let Some(why) = bad_relative_path(&l.path) {
                return Err(bad(format!("source.lockfiles[{}]", l.path.escape_debug()), why));
            }
        }
        if self.signature.stderr_tail.len() > 8 {
            return Err(bad(
                "signature.stderr_tail",
                format!("{} lines (expected at most 8)", self.signature.stderr_tail.len()),
            ));
        }
        if self.tapes.version == 0 || self.tapes.version > TAPE_VERSION {
            return Err(bad(
                "tapes.version",
                format!("{} (this repro reads tape version 1 to {TAPE_VERSION})", self.tapes.version),
            ));
        }
        let mut sizes: BTreeMap<&str, (String, Option<u64>)> = BTreeMap::new();
        let refs = self.blob_refs();
        for (field, d, size) in &refs {
            match sizes.get(d.as_str()) {
                Some((first, s)) if s != size => {
                    return Err(bad(
                        field.clone(),
                        format!("blob {d} declared with size {size:?}, but {first} says {s:?} (expected one size)"),
                    ))
                }
                _ => {
                    sizes.insert(d, (field.clone(), *size));
                }
            }
        }
        validate_files(self)
    }

    fn non_dir_on_the_way(&self, p: &str) -> Option<(String, &'static str)> {
        let by_path: BTreeMap<Cow<[u8]>, EntryKind> = self.files.iter().map(|f| (f.bytes(), f.kind)).collect();
        let on_the_way = ancestors(p.as_bytes()).find_map(|a| match by_path.get(a) {
            Some(k) if *k != EntryKind::Dir => Some((String::from_utf8_lossy(a).into_owned(), kind_name(*k))),
            _ => None,
        });
        // The path itself may be a file or directory of the pack (the bind covers it), not a link.
        on_the_way.or_else(|| {
            (by_path.get(p.as_bytes()) == Some(&EntryKind::Symlink))
                .then(|| (p.to_string(), kind_name(EntryKind::Symlink)))
        })
    }

    fn unpacked_footprint(&self) -> (u64, u64) {
        let bytes = self.blob_refs().iter().fold(0u64, |acc, (_, _, s)| acc.saturating_add(s.unwrap_or(0)));
        let distinct: std::collections::BTreeSet<&str> = self
            .files
            .iter()
            .filter_map(|f| f.blake3.as_deref())
            .chain([self.result.stdout.blake3.as_str(), self.result.stderr.blake3.as_str()])
            .collect();
        (bytes, (self.files.len() as u64).saturating_add(distinct.len() as u64 + 2))
    }
}

/// Directories the sandbox mounts something on in a pack's root (and `$HOME`): none of them, nor their parents,
/// may be anything but a directory in a pack.
pub const SANDBOX_DIRS: [&str; 7] = ["/proc", "/sys", "/dev", "/tmp", "/home", "/etc", "/home/repro"];
/// Files the sandbox binds its own versions onto.
pub const SANDBOX_FILES: [&str; 3] = ["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];
/// Where a pack's working directory may not be: filesystems the sandbox makes itself.
const NO_CWD_UNDER: [&str; 3] = ["/proc", "/sys", "/dev"];
/// Bounds of the fields a pack sets in the sandbox (those of `repro run` where it has them).
pub const MAX_ARGV_ENV_BYTES: usize = 2 << 20;
pub const MAX_PATH_BYTES: usize = 4095;
pub const MAX_NAME_BYTES: usize = 255;
pub const MAX_CPUS: u32 = 4096;
pub const MIN_MEMORY: u64 = 1 << 20;
pub const MAX_MEMORY: u64 = 1 << 50;
/// The epochs `repro run --epoch` accepts (what RFC 3339 can print: years 0000 to 9999).
pub const MIN_EPOCH: i64 = -62_167_219_200;
pub const MAX_EPOCH: i64 = 253_402_300_799;

/// Why `path` is not an absolute, normal guest path (`/a/b`: no empty, `.` or `..` component, no trailing `/`,
/// no NUL byte, bounded lengths), or `None` when it is one.
pub fn bad_guest_path(path: &str) -> Option<String> {
    bad_guest_bytes(path.as_bytes())
}

/// [`bad_guest_path`] of a path's exact bytes (a name need not be UTF-8).
pub fn bad_guest_bytes(path: &[u8]) -> Option<String> {
    if path.first() != Some(&b'/') {
        return Some("it is not absolute (expected a path starting with '/')".into());
    }
    if path.contains(&0) {
        return Some("it contains a NUL byte".into());
    }
    if path.len() > MAX_PATH_BYTES {
        return Some(format!("it is longer than {MAX_PATH_BYTES} bytes"));
    }
    if path == b"/" {
        return None;
    }
    for c in path[1..].split(|&b| b == b'/') {
        match c {
            b"" => return Some("it has an empty component ('//' or a trailing '/')".into()),
            b"." | b".." => {
                return Some(format!("it has a '{}' component (expected a normal path)", String::from_utf8_lossy(c)))
            }
            c if c.len() > MAX_NAME_BYTES => return Some(format!("a component is longer than {MAX_NAME_BYTES} bytes")),
            _ => {}
        }
    }
    None
}

/// Why `path` is not a relative, normal path (for paths relative to the working directory).
fn bad_relative_bytes(path: &[u8]) -> Option<String> {
    if path.first() == Some(&b'/') {
        return Some("it is absolute (expected a path relative to the working directory)".into());
    }
    bad_guest_bytes(&[b"/", path].concat())
}

fn bad_relative_path(path: &str) -> Option<String> {
    bad_relative_bytes(path.as_bytes())
}

/// The proper ancestors of an absolute normal path, nearest last: `/a/b/c` gives `/a`, `/a/b`.
fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter().enumerate().filter(|(_, &b)| b == b'/').skip(1).map(move |(i, _)| &path[..i])
}

fn shown(p: &[u8]) -> String {
    String::from_utf8_lossy(p).escape_debug().to_string()
}

fn kind_name(k: EntryKind) -> &'static str {
    match k {
        EntryKind::File => "a file",
        EntryKind::Sized => "a file (sized)",
        EntryKind::Listed => "a file (listed)",
        EntryKind::Dir => "a directory",
        EntryKind::Symlink => "a symbolic link",
    }
}

/// The closure's entries: normal paths, modes, links, and every parent a directory; then the sandbox's
/// mountpoints and the working directory.
fn validate_files(m: &Manifest) -> Result<(), ManifestError> {
    let exact: Vec<Cow<[u8]>> = m.files.iter().map(|f| f.exact()).collect::<Result<_, _>>()?;
    let mut kinds: BTreeMap<&[u8], EntryKind> = BTreeMap::new();
    for (f, path) in m.files.iter().zip(&exact) {
        let path: &[u8] = path;
        let name = f.path.escape_debug();
        if let Some(why) = bad_guest_bytes(path) {
            return Err(bad(format!("files[{name}]"), why));
        }
        if f.path == "/" && f.kind != EntryKind::Dir {
            return Err(bad("files[/]", format!("{} (expected a directory)", kind_name(f.kind))));
        }
        if f.mode > 0o7777 {
            return Err(bad(
                format!("files[{name}].mode"),
                format!("{:o} has bits beyond the permission bits (0o7777)", f.mode),
            ));
        }
        match (f.kind, &f.target) {
            (EntryKind::Symlink, Some(t)) if t.is_empty() || t.contains('\0') || t.len() > MAX_PATH_BYTES => {
                return Err(bad(
                    format!("files[{name}].target"),
                    format!("expected 1 to {MAX_PATH_BYTES} bytes without NUL"),
                ));
            }
            (EntryKind::Symlink, Some(t)) => {
                let b = exact_path(t, f.target_hex.as_deref())
                    .map_err(|why| bad(format!("files[{name}].target_hex"), why.to_string()))?;
                if b.contains(&0) || b.len() > MAX_PATH_BYTES {
                    return Err(bad(
                        format!("files[{name}].target_hex"),
                        format!("expected 1 to {MAX_PATH_BYTES} bytes without NUL"),
                    ));
                }
            }
            (EntryKind::Symlink, None) => {}
            (_, Some(_)) => return Err(bad(format!("files[{name}].target"), "only a symlink has a target")),
            _ => {}
        }
        if f.target.is_none() && f.target_hex.is_some() {
            return Err(bad(format!("files[{name}].target_hex"), "without a target"));
        }
        for a in ancestors(path) {
            match kinds.get(a) {
                None | Some(EntryKind::Dir) => {}
                Some(EntryKind::Symlink) => {
                    let a = shown(a);
                    return Err(bad(
                        format!("files[{name}]"),
                        format!(
                            "its parent {a} is a symbolic link in the pack (expected a directory: an \
                         entry under a link would be written wherever the link points)"
                        ),
                    ));
                }
                Some(k) => {
                    return Err(bad(
                        format!("files[{name}]"),
                        format!("its parent {} is {} (expected a directory)", shown(a), kind_name(*k)),
                    ))
                }
            }
        }
        kinds.insert(path, f.kind);
    }
    let must_be_dir = |field: &str, p: &str, self_too: bool| -> Result<(), ManifestError> {
        let pb = p.as_bytes();
        for a in ancestors(pb).chain(self_too.then_some(pb)) {
            match kinds.get(a) {
                None | Some(EntryKind::Dir) => {}
                Some(k) => {
                    return Err(bad(
                        format!("files[{}]", shown(a)),
                        format!(
                            "{} where {field} {p} needs a directory (the sandbox mounts or creates it)",
                            kind_name(*k)
                        ),
                    ))
                }
            }
        }
        Ok(())
    };
    must_be_dir("command.cwd", &m.command.cwd, true)?;
    for d in SANDBOX_DIRS {
        must_be_dir("the sandbox's", d, true)?;
    }
    for f in SANDBOX_FILES {
        must_be_dir("the sandbox's", f, false)?;
        if let Some(k @ (EntryKind::Dir | EntryKind::Symlink)) = kinds.get(f.as_bytes()) {
            return Err(bad(
                format!("files[{f}]"),
                format!("{} (expected a file: the sandbox binds its own over it)", kind_name(*k)),
            ));
        }
    }
    Ok(())
}
