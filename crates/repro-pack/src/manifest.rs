//! `manifest.json`: what a pack holds and how the run went. See docs/pack-format.md for the JSON Schema.
//!
//! Compatibility: `format` is 1 for every pack this version writes. A later version that adds a field gives it a
//! serde default so older manifests still parse; one that changes a field's meaning raises `format` and keeps
//! reading the older ones.

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
    pub path: String,
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
    /// Absolute path in the guest.
    pub path: String,
    pub kind: EntryKind,
    /// Permission bits (e.g. 493 = 0o755).
    pub mode: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<Digest>,
    /// Symlink target, as stored in the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
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
        let mut prev: Option<&str> = None;
        for f in &self.files {
            if !f.path.starts_with('/') || f.path.split('/').any(|c| c == ".." || c == ".") {
                return Err(format!("files: path '{}' is not absolute and normal", f.path));
            }
            if let Some(p) = prev {
                if p >= f.path.as_str() {
                    return Err(format!("files: '{}' is out of order or repeated", f.path));
                }
            }
            prev = Some(&f.path);
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
