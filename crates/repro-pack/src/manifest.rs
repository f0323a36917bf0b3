//! `manifest.json`: what a pack holds and how the run went. See docs/pack-format.md for the JSON Schema.
//!
//! Compatibility: `format` is 1 for every pack this version writes. A later version that adds a field gives it a
//! serde default so older manifests still parse; one that changes a field's meaning raises `format` and keeps
//! reading the older ones.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::signature::Signature;

/// The manifest format this version writes (and the newest it reads).
pub const PACK_FORMAT: u32 = 1;

/// A content digest: lowercase hex blake3 of the bytes.
pub type Digest = String;

/// The digest of some bytes.
pub fn digest(data: &[u8]) -> Digest {
    blake3::hash(data).to_hex().to_string()
}

/// The manifest of a pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    pub repro_version: String,
    pub command: CommandSpec,
    pub determinism: DeterminismSpec,
    pub resources: Resources,
    pub system: System,
    #[serde(default)]
    pub source: Source,
    pub result: RunResult,
    pub signature: Signature,
    /// The guest's file closure, sorted by path.
    pub files: Vec<FileEntry>,
    #[serde(default)]
    pub tapes: Tapes,
    /// Blobs are in the local store rather than in the pack (`--thin`).
    #[serde(default)]
    pub thin: bool,
    /// Credentials the capture found and left out or redacted; absent when it found none.
    #[serde(default, skip_serializing_if = "SecretsRecord::is_empty")]
    pub secrets: SecretsRecord,
}

/// What `repro capture` did with the credentials it found (see docs/pack-format.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SecretsRecord {
    /// `--secrets`: `exclude` (default), `redact` or `keep`.
    pub mode: String,
    /// Files of the closure left out of the pack (a replay does not have them), with why.
    #[serde(default)]
    pub excluded: Vec<SecretFile>,
    /// Files packed with their credentials replaced by markers.
    #[serde(default)]
    pub redacted: Vec<SecretFile>,
    /// Recorded outputs (`stdout`, `stderr`) whose credentials were replaced by markers; a replay replaces them in
    /// its own output the same way before it compares signatures.
    #[serde(default)]
    pub output_redacted: Vec<String>,
    /// Files and outputs written as they were with credentials in them (`--secrets keep`).
    #[serde(default)]
    pub kept: Vec<SecretFile>,
}

impl SecretsRecord {
    pub fn is_empty(&self) -> bool {
        self.excluded.is_empty() && self.redacted.is_empty() && self.output_redacted.is_empty() && self.kept.is_empty()
    }
}

/// A file (or output) holding credentials, and what was found in it (never the credential itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretFile {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    pub argv: Vec<String>,
    pub cwd: String,
    /// The guest's effective environment.
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeterminismSpec {
    pub supervised: bool,
    pub seed: u64,
    pub epoch_unix: i64,
    pub epoch_rfc3339: String,
    pub clock_step_ns: u64,
    /// The order of directory listings (`sorted`, `reversed`, `shuffled:SEED`); absent in older packs.
    #[serde(default = "default_dir_order")]
    pub dir_order: String,
    /// The guest's host name; absent in older packs.
    #[serde(default = "default_hostname")]
    pub hostname: String,
}

fn default_dir_order() -> String {
    "sorted".into()
}

fn default_hostname() -> String {
    "repro".into()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    pub cpus: u32,
    pub memory_bytes: u64,
}

/// The machine the pack was captured on (informative: replay does not need it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct System {
    pub arch: String,
    pub kernel_release: String,
    pub libc_version: String,
}

/// Where the working directory's code came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub git: Option<GitState>,
    /// Lockfiles found in the working directory, sorted by path.
    pub lockfiles: Vec<Lockfile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitState {
    pub commit: String,
    /// blake3 of `git diff HEAD` plus the untracked files' names and contents; `None` when the tree is clean.
    pub uncommitted_digest: Option<Digest>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lockfile {
    /// Relative to the working directory.
    pub path: String,
    pub blake3: Digest,
}

/// A blob of the pack with its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobRef {
    pub blake3: Digest,
    pub size: u64,
}

impl BlobRef {
    pub fn of(data: &[u8]) -> BlobRef {
        BlobRef { blake3: digest(data), size: data.len() as u64 }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunResult {
    /// `exited`, `signaled`, `exec_failed` or `setup_failed`.
    pub outcome: String,
    /// repro's exit status for the run (the guest's, or 128+signal).
    pub exit_status: i32,
    pub stdout: BlobRef,
    pub stderr: BlobRef,
    /// Files of the working directory the run added, modified or deleted.
    pub changes: Vec<ChangedFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangedFile {
    /// Relative to the working directory, as text (a name that is not UTF-8 with U+FFFD for its invalid bytes).
    pub path: String,
    /// The exact bytes of `path` in lowercase hex, only when it is not UTF-8 (see [`exact_path`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    /// `added`, `modified` or `deleted`.
    pub kind: String,
    pub blake3: Option<Digest>,
}

/// What an entry of the closure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file whose content the guest read or executed; the content is a blob.
    File,
    /// A regular file the guest only stat'ed: replayed as a sparse file of the same size.
    Sized,
    /// A name the guest only saw in a directory listing: replayed as an empty file.
    Listed,
    Dir,
    Symlink,
}

/// One path of the guest's file closure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Absolute path in the guest, as text (a name that is not UTF-8 with U+FFFD for its invalid bytes).
    pub path: String,
    /// The exact bytes of `path` in lowercase hex, only when it is not UTF-8: readers use these bytes (see
    /// [`exact_path`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub kind: EntryKind,
    /// Permission bits (e.g. 493 = 0o755).
    pub mode: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<Digest>,
    /// Symlink target, as stored in the link (as text, like `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The exact bytes of `target` in lowercase hex, only when it is not UTF-8 (as `path_hex` for `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_hex: Option<String>,
    /// How the guest used the path: `open`, `exec`, `map`, `stat`, `list`, `readlink`, `chdir`; empty for the
    /// parents and links that were only passed through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access: Vec<String>,
}

/// Recorded tapes; each is a blob holding a JSON document (see docs/pack-format.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Tapes {
    /// `none` (the guest had no network) or `record` (the guest used the host's; its sockets are on the tape).
    #[serde(default = "default_network")]
    pub network_mode: String,
    #[serde(default)]
    pub network: Option<BlobRef>,
    #[serde(default)]
    pub network_events: u64,
    #[serde(default)]
    pub proc: Option<BlobRef>,
    #[serde(default)]
    pub proc_reads: u64,
}

fn default_network() -> String {
    "none".into()
}

/// The exact bytes a `path` / `path_hex` pair names, checked: `path_hex` is an even number of lowercase hex
/// digits, its bytes are not UTF-8 (a UTF-8 name is in `path` alone) and `path` is their text with U+FFFD for the
/// invalid bytes. Without `path_hex`, the bytes of `path`. The error says what is wrong, for the field `path_hex`.
pub fn exact_path<'a>(path: &'a str, hex: Option<&str>) -> Result<Cow<'a, [u8]>, String> {
    let Some(h) = hex else { return Ok(Cow::Borrowed(path.as_bytes())) };
    if h.is_empty() || h.len() % 2 != 0 || !h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        let shown: String = h.chars().take(80).collect();
        return Err(format!("'{}' is not an even number of lowercase hex digits", shown.escape_debug()));
    }
    let bytes = repro_model::pathenc::from_hex(h).ok_or_else(|| "is not hex".to_string())?;
    if std::str::from_utf8(&bytes).is_ok() {
        return Err("names a UTF-8 path (expected path_hex only for a name that is not UTF-8)".into());
    }
    if String::from_utf8_lossy(&bytes) != path {
        return Err(format!(
            "its bytes read '{}', not '{}' (expected the text field to be their text with U+FFFD for invalid bytes)",
            String::from_utf8_lossy(&bytes).escape_debug(),
            path.escape_debug()
        ));
    }
    Ok(Cow::Owned(bytes))
}

impl FileEntry {
    /// The entry's exact path: the bytes of `path_hex` when present, else those of `path` (see [`exact_path`]).
    pub fn exact(&self) -> Result<Cow<'_, [u8]>, String> {
        exact_path(&self.path, self.path_hex.as_deref())
            .map_err(|why| format!("files[{}].path_hex: {why}", self.path.escape_debug()))
    }

    /// [`FileEntry::exact`] for a manifest that was validated (else the bytes of `path`).
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        self.exact().unwrap_or(Cow::Borrowed(self.path.as_bytes()))
    }

    /// A symlink's exact target: the bytes of `target_hex` when present (and valid), else those of `target`.
    pub fn target_bytes(&self) -> Option<Cow<'_, [u8]>> {
        let t = self.target.as_deref()?;
        Some(exact_path(t, self.target_hex.as_deref()).unwrap_or(Cow::Borrowed(t.as_bytes())))
    }
}

impl Manifest {
    /// Every blob the manifest refers to, with the field that refers to it.
    pub fn blob_refs(&self) -> Vec<(String, Digest, Option<u64>)> {
        let mut v = vec![
            ("result.stdout".to_string(), self.result.stdout.blake3.clone(), Some(self.result.stdout.size)),
            ("result.stderr".to_string(), self.result.stderr.blake3.clone(), Some(self.result.stderr.size)),
        ];
        for f in &self.files {
            if let Some(d) = &f.blake3 {
                v.push((format!("files[{}]", f.path), d.clone(), f.size));
            }
        }
        for (name, t) in [("tapes.network", &self.tapes.network), ("tapes.proc", &self.tapes.proc)] {
            if let Some(b) = t {
                v.push((name.to_string(), b.blake3.clone(), Some(b.size)));
            }
        }
        v
    }

    /// Checks what serde cannot: the format version, absolute sorted unique paths, digests that look like digests.
    pub fn validate(&self) -> Result<(), String> {
        if self.format == 0 {
            return Err("format: must be at least 1".into());
        }
        if self.command.argv.is_empty() {
            return Err("command.argv: empty".into());
        }
        if !self.command.cwd.starts_with('/') {
            return Err(format!("command.cwd: '{}' is not absolute", self.command.cwd));
        }
        let mut prev: Option<Cow<[u8]>> = None;
        for f in &self.files {
            let exact = f.exact()?;
            if exact.first() != Some(&b'/') || exact.split(|&b| b == b'/').any(|c| c == b".." || c == b".") {
                return Err(format!("files: path '{}' is not absolute and normal", f.path));
            }
            // Sorted by exact bytes (for UTF-8 paths the order of their text), unique.
            if let Some(p) = &prev {
                if **p >= *exact {
                    return Err(format!("files: '{}' is out of order or repeated", f.path));
                }
            }
            prev = Some(exact);
            match f.kind {
                EntryKind::File if f.blake3.is_none() || f.size.is_none() => {
                    return Err(format!("files[{}]: a file needs blake3 and size", f.path))
                }
                EntryKind::Symlink if f.target.is_none() => {
                    return Err(format!("files[{}]: a symlink needs a target", f.path))
                }
                _ => {}
            }
        }
        for (field, d, _) in self.blob_refs() {
            if d.len() != 64 || !d.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(format!("{field}: '{d}' is not a blake3 hex digest"));
            }
        }
        Ok(())
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

impl Manifest {
    /// Every check of a manifest that came from someone else, field by field, beyond [`Manifest::validate`]:
    /// what the pack sets in the sandbox (argv, cwd, env, hostname, directory order, CPUs, memory) within the
    /// bounds `repro run` accepts, every path normal, every entry's parents directories (an entry "under" a
    /// symbolic link of the pack would be written wherever the link points), no link or file where the sandbox
    /// mounts its own directories, modes only permission bits. Each error names the field or entry and what was
    /// expected.
    pub fn validate_untrusted(&self) -> Result<(), String> {
        // Paths first, so that the messages name the entry and say what is wrong with it; `path_hex` (the exact
        // bytes) is checked as `path` is.
        for f in &self.files {
            if let Some(why) = bad_guest_path(&f.path) {
                return Err(format!("files[{}]: {why}", f.path.escape_debug()));
            }
            if let Some(why) = bad_guest_bytes(&f.exact()?) {
                return Err(format!("files[{}].path_hex: {why}", f.path.escape_debug()));
            }
        }
        if let Some(why) = bad_guest_path(&self.command.cwd) {
            return Err(format!("command.cwd: '{}': {why}", self.command.cwd.escape_debug()));
        }
        self.validate()?;
        if self.format > PACK_FORMAT {
            return Err(format!("format: {} is newer than this repro reads (1 to {PACK_FORMAT})", self.format));
        }
        if self.repro_version.len() > 64 || self.repro_version.chars().any(|c| c.is_control()) {
            return Err("repro_version: expected a version string of at most 64 printable characters".into());
        }
        let c = &self.command;
        let mut bytes = 0usize;
        for (i, a) in c.argv.iter().enumerate() {
            if a.contains('\0') {
                return Err(format!("command.argv[{i}]: contains a NUL byte"));
            }
            bytes = bytes.saturating_add(a.len() + 1);
        }
        if c.argv[0].is_empty() {
            return Err("command.argv[0]: empty (expected the program to run)".into());
        }
        if let Some(why) = bad_guest_path(&c.cwd) {
            return Err(format!("command.cwd: '{}': {why}", c.cwd.escape_debug()));
        }
        for d in NO_CWD_UNDER {
            if c.cwd == d || c.cwd.starts_with(&format!("{d}/")) {
                return Err(format!("command.cwd: '{}' is under {d}, which the sandbox makes itself", c.cwd));
            }
        }
        if c.cwd.contains(',') || c.cwd.contains(':') {
            return Err(format!("command.cwd: '{}' contains ',' or ':', which overlayfs cannot take", c.cwd));
        }
        for (k, v) in &c.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(format!(
                    "command.env: the name '{}' is not a variable name (expected no '=' and no NUL byte)",
                    k.escape_debug()
                ));
            }
            if v.contains('\0') {
                return Err(format!("command.env[{k}]: the value contains a NUL byte"));
            }
            bytes = bytes.saturating_add(k.len() + v.len() + 2);
        }
        if bytes > MAX_ARGV_ENV_BYTES {
            return Err(format!(
                "command: argv and env take {bytes} bytes, more than the {MAX_ARGV_ENV_BYTES} an exec can take"
            ));
        }
        let d = &self.determinism;
        let order_ok = d.dir_order == "sorted"
            || d.dir_order == "reversed"
            || d.dir_order.strip_prefix("shuffled:").is_some_and(|n| n.parse::<u64>().is_ok());
        if !order_ok {
            return Err(format!(
                "determinism.dir_order: '{}' (expected sorted, reversed or shuffled:SEED)",
                d.dir_order.escape_debug()
            ));
        }
        let h = &d.hostname;
        if h.is_empty() || h.len() > 63 || !h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.') {
            return Err(format!(
                "determinism.hostname: '{}' (expected 1 to 63 letters, digits, '-' or '.')",
                h.escape_debug()
            ));
        }
        if !(MIN_EPOCH..=MAX_EPOCH).contains(&d.epoch_unix) {
            return Err(format!(
                "determinism.epoch_unix: {} (expected {MIN_EPOCH} to {MAX_EPOCH}, years 0000 to 9999, as repro run --epoch)",
                d.epoch_unix
            ));
        }
        if d.epoch_rfc3339.len() > 64 {
            return Err("determinism.epoch_rfc3339: longer than 64 bytes".into());
        }
        let r = &self.resources;
        if r.cpus == 0 || r.cpus > MAX_CPUS {
            return Err(format!("resources.cpus: {} (expected 1 to {MAX_CPUS})", r.cpus));
        }
        if !(MIN_MEMORY..=MAX_MEMORY).contains(&r.memory_bytes) {
            return Err(format!(
                "resources.memory_bytes: {} (expected {MIN_MEMORY} to {MAX_MEMORY}, as repro run --memory)",
                r.memory_bytes
            ));
        }
        if !["exited", "signaled", "exec_failed", "setup_failed"].contains(&self.result.outcome.as_str()) {
            return Err(format!(
                "result.outcome: '{}' (expected exited, signaled, exec_failed or setup_failed)",
                self.result.outcome.escape_debug()
            ));
        }
        for ch in &self.result.changes {
            if let Some(why) = bad_relative_path(&ch.path) {
                return Err(format!("result.changes[{}]: {why}", ch.path.escape_debug()));
            }
            let exact = exact_path(&ch.path, ch.path_hex.as_deref())
                .map_err(|why| format!("result.changes[{}].path_hex: {why}", ch.path.escape_debug()))?;
            if let Some(why) = bad_relative_bytes(&exact) {
                return Err(format!("result.changes[{}].path_hex: {why}", ch.path.escape_debug()));
            }
            if !["added", "modified", "deleted"].contains(&ch.kind.as_str()) {
                return Err(format!("result.changes[{}].kind: expected added, modified or deleted", ch.path));
            }
        }
        for l in &self.source.lockfiles {
            if let Some(why) = bad_relative_path(&l.path) {
                return Err(format!("source.lockfiles[{}]: {why}", l.path.escape_debug()));
            }
        }
        if self.signature.stderr_tail.len() > 8 {
            return Err(format!(
                "signature.stderr_tail: {} lines (expected at most 8)",
                self.signature.stderr_tail.len()
            ));
        }
        // "" is what a manifest without `tapes` deserializes to (the struct's Default): no network, as `none`.
        if !["", "none", "record"].contains(&self.tapes.network_mode.as_str()) {
            return Err(format!(
                "tapes.network_mode: '{}' (expected none or record)",
                self.tapes.network_mode.escape_debug()
            ));
        }
        let mut sizes: BTreeMap<&str, (String, Option<u64>)> = BTreeMap::new();
        let refs = self.blob_refs();
        for (field, d, size) in &refs {
            match sizes.get(d.as_str()) {
                Some((first, s)) if s != size => {
                    return Err(format!(
                        "{field}: blob {d} declared with size {size:?}, but {first} says {s:?} (expected one size)"
                    ))
                }
                _ => {
                    sizes.insert(d, (field.clone(), *size));
                }
            }
        }
        self.validate_files()
    }

    /// The closure's entries: normal paths, modes, links, and every parent a directory; then the sandbox's
    /// mountpoints and the working directory.
    fn validate_files(&self) -> Result<(), String> {
        let exact: Vec<Cow<[u8]>> = self.files.iter().map(|f| f.exact()).collect::<Result<_, _>>()?;
        let mut kinds: BTreeMap<&[u8], EntryKind> = BTreeMap::new();
        for (f, path) in self.files.iter().zip(&exact) {
            let path: &[u8] = path;
            let name = f.path.escape_debug();
            if let Some(why) = bad_guest_bytes(path) {
                return Err(format!("files[{name}]: {why}"));
            }
            if f.path == "/" && f.kind != EntryKind::Dir {
                return Err(format!("files[/]: {} (expected a directory)", kind_name(f.kind)));
            }
            if f.mode > 0o7777 {
                return Err(format!("files[{name}].mode: {:o} has bits beyond the permission bits (0o7777)", f.mode));
            }
            match (f.kind, &f.target) {
                (EntryKind::Symlink, Some(t)) if t.is_empty() || t.contains('\0') || t.len() > MAX_PATH_BYTES => {
                    return Err(format!("files[{name}].target: expected 1 to {MAX_PATH_BYTES} bytes without NUL"));
                }
                (EntryKind::Symlink, Some(t)) => {
                    let b = exact_path(t, f.target_hex.as_deref())
                        .map_err(|why| format!("files[{name}].target_hex: {why}"))?;
                    if b.contains(&0) || b.len() > MAX_PATH_BYTES {
                        return Err(format!(
                            "files[{name}].target_hex: expected 1 to {MAX_PATH_BYTES} bytes without NUL"
                        ));
                    }
                }
                (EntryKind::Symlink, None) => {}
                (_, Some(_)) => return Err(format!("files[{name}].target: only a symlink has a target")),
                _ => {}
            }
            if f.target.is_none() && f.target_hex.is_some() {
                return Err(format!("files[{name}].target_hex: without a target"));
            }
            for a in ancestors(path) {
                match kinds.get(a) {
                    None | Some(EntryKind::Dir) => {}
                    Some(EntryKind::Symlink) => {
                        let a = shown(a);
                        return Err(format!(
                            "files[{name}]: its parent {a} is a symbolic link in the pack (expected a directory: an \
                             entry under a link would be written wherever the link points)"
                        ));
                    }
                    Some(k) => {
                        return Err(format!(
                            "files[{name}]: its parent {} is {} (expected a directory)",
                            shown(a),
                            kind_name(*k)
                        ))
                    }
                }
            }
            kinds.insert(path, f.kind);
        }
        let must_be_dir = |field: &str, p: &str, self_too: bool| -> Result<(), String> {
            let pb = p.as_bytes();
            for a in ancestors(pb).chain(self_too.then_some(pb)) {
                match kinds.get(a) {
                    None | Some(EntryKind::Dir) => {}
                    Some(k) => {
                        return Err(format!(
                            "files[{}]: {} where {field} {p} needs a directory (the sandbox mounts or creates it)",
                            shown(a),
                            kind_name(*k)
                        ))
                    }
                }
            }
            Ok(())
        };
        must_be_dir("command.cwd", &self.command.cwd, true)?;
        for d in SANDBOX_DIRS {
            must_be_dir("the sandbox's", d, true)?;
        }
        for f in SANDBOX_FILES {
            must_be_dir("the sandbox's", f, false)?;
            if let Some(k @ (EntryKind::Dir | EntryKind::Symlink)) = kinds.get(f.as_bytes()) {
                return Err(format!(
                    "files[{f}]: {} (expected a file: the sandbox binds its own over it)",
                    kind_name(*k)
                ));
            }
        }
        Ok(())
    }

    /// Whether the guest path `p` (absolute, normal) passes through an entry of the pack that is not a directory,
    /// or is a link of the pack (so that creating or binding something at `p` in the pack's root would follow a link of the pack): the
    /// entry and its kind.
    pub fn non_dir_on_the_way(&self, p: &str) -> Option<(String, &'static str)> {
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

    /// What unpacking writes: bytes of content (every blob placed, once per path that uses it, plus the
    /// recorded output and tapes) and entries (paths of the closure plus distinct blobs). Sized files are
    /// sparse and count as entries only.
    pub fn unpacked_footprint(&self) -> (u64, u64) {
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
