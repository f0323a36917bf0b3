//! `manifest.json`: what a reproducer pack holds and how the run went, as plain serde types. See
//! docs/pack-format.md for the JSON Schema. The checks of a manifest that came from someone else are policy and
//! live in repro-pack (`repro_pack::manifest::ManifestCheck`); this module only has what every reader needs.
//!
//! Compatibility: `format` is 1 for every pack this version writes. A later version that adds a field gives it a
//! serde default so older manifests still parse; one that changes a field's meaning raises `format` and keeps
//! reading the older ones.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::run::ChangeKind;
use crate::tape::TAPE_VERSION;
use crate::DirOrder;

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
    /// Absent in packs written before tapes were recorded: no tapes, of version 1.
    #[serde(default = "Tapes::unversioned")]
    pub tapes: Tapes,
    /// Blobs are in the local store rather than in the pack (`--thin`).
    #[serde(default)]
    pub thin: bool,
    /// Credentials the capture found and left out or redacted; absent when it found none.
    #[serde(default, skip_serializing_if = "SecretsRecord::is_empty")]
    pub secrets: SecretsRecord,
    /// The environment the capture's run used (a JSON [`crate::provenance::Environment`]: its components, as the
    /// capturing host's package databases named them); absent in packs written before it was recorded. Readers
    /// check every file digest in it against `files` and recompute its identity: it is a claim of the capturer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<BlobRef>,
    /// Files packed although the run did not use them, because a fix typically needs them (the shell, rustdoc
    /// beside rustc): their entries in `files` carry no access kind. Absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub companions: Vec<CompanionFile>,
}

/// A file packed as a companion (see `repro_pack::companions`): its guest path and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompanionFile {
    pub path: String,
    pub reason: String,
}

/// What `repro capture` did with the credentials it found (see docs/pack-format.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SecretsRecord {
    /// `--secrets`: `exclude` (default), `redact` or `keep`.
    pub mode: SecretsMode,
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

/// What `repro capture` does with secrets it finds (`--secrets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretsMode {
    /// Files are left out of the pack (the manifest says which and why); output is redacted. The default.
    #[default]
    Exclude,
    /// Files and output are kept with each credential replaced by a marker.
    Redact,
    /// Everything is written as it is (with a warning).
    Keep,
}

impl SecretsMode {
    /// The name in `--secrets` and in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            SecretsMode::Exclude => "exclude",
            SecretsMode::Redact => "redact",
            SecretsMode::Keep => "keep",
        }
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
    /// The order of directory listings (`sorted`, `reversed`, `shuffled:SEED`); absent in older packs (sorted).
    #[serde(default)]
    pub dir_order: DirOrder,
    /// The guest's host name; absent in older packs.
    #[serde(default = "default_hostname")]
    pub hostname: String,
    /// The scheduler's policy and seed (`--sched`, `--sched-seed`): a replay runs the same interleaving. Absent in
    /// older packs and when it is the default (random, seed 0), so packs that do not vary it keep their ids.
    #[serde(default, skip_serializing_if = "is_default_sched")]
    pub sched: crate::sched::SchedSettings,
    /// The spin-loop watchdog's limit in milliseconds (`--spin-limit`): a replay refuses where the capture did.
    /// Absent when it is the default.
    #[serde(default = "crate::run::default_spin_limit_ms", skip_serializing_if = "crate::run::is_default_spin_limit")]
    pub spin_limit_ms: u64,
}

fn is_default_sched(s: &crate::sched::SchedSettings) -> bool {
    *s == crate::sched::SchedSettings::default()
}

fn default_hostname() -> String {
    "repro".into()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    pub cpus: u32,
    pub memory_bytes: u64,
    /// `--pids` of the captured run; packs made before it existed get the default. Written only when it is not
    /// the default, so that a pack's manifest (and its id) is what it was before the field existed.
    #[serde(default = "default_pids_max", skip_serializing_if = "is_default_pids_max")]
    pub pids_max: u64,
}

fn default_pids_max() -> u64 {
    crate::run::DEFAULT_PIDS
}

fn is_default_pids_max(n: &u64) -> bool {
    *n == crate::run::DEFAULT_PIDS
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
    pub outcome: Outcome,
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
    pub kind: ChangeKind,
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

/// How the guest used a path: `chdir`, `exec`, `list`, `map`, `open`, `readlink`, `stat` (declared in the order
/// of their names, so that a sorted list is sorted by name as it always was).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessKind {
    Chdir,
    Exec,
    List,
    Map,
    Open,
    Readlink,
    Stat,
}

impl AccessKind {
    pub const ALL: [AccessKind; 7] = [
        AccessKind::Chdir,
        AccessKind::Exec,
        AccessKind::List,
        AccessKind::Map,
        AccessKind::Open,
        AccessKind::Readlink,
        AccessKind::Stat,
    ];

    /// The name in the manifest and in the supervisor's access stream.
    pub fn name(self) -> &'static str {
        match self {
            AccessKind::Chdir => "chdir",
            AccessKind::Exec => "exec",
            AccessKind::List => "list",
            AccessKind::Map => "map",
            AccessKind::Open => "open",
            AccessKind::Readlink => "readlink",
            AccessKind::Stat => "stat",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<AccessKind> {
        AccessKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the guest read the content (open, exec, map): the file is packed whole.
    pub fn reads(self) -> bool {
        matches!(self, AccessKind::Open | AccessKind::Exec | AccessKind::Map)
    }
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
    /// How the guest used the path (sorted, each once); empty for the parents and links that were only passed
    /// through.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access: Vec<AccessKind>,
    /// The modification time on the host, in nanoseconds since the Unix epoch, of an entry of the host's
    /// installation (outside the working directory): the replay's root gets it back, so the guest sees the times
    /// the capture saw (Python checks its .pyc files against them). Absent for the working directory's entries
    /// (pinned in every run) and the directories above it (their times move with anything made beside it), and in
    /// packs written before it was recorded (their replays pin every time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ns: Option<i64>,
}

/// Recorded tapes; each is a blob holding a JSON document (see docs/pack-format.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tapes {
    /// The format of the tape documents ([`TAPE_VERSION`] for what this version writes); absent in the packs
    /// written before it was recorded, which hold version 1.
    #[serde(default = "first_tape_version")]
    pub version: u32,
    /// `none` (the guest had no network) or `record` (the guest used the host's; its sockets are on the tape).
    #[serde(default)]
    pub network_mode: NetworkMode,
    #[serde(default)]
    pub network: Option<BlobRef>,
    #[serde(default)]
    pub network_events: u64,
    #[serde(default)]
    pub proc: Option<BlobRef>,
    #[serde(default)]
    pub proc_reads: u64,
}

impl Default for Tapes {
    fn default() -> Tapes {
        Tapes {
            version: TAPE_VERSION,
            network_mode: NetworkMode::None,
            network: None,
            network_events: 0,
            proc: None,
            proc_reads: 0,
        }
    }
}

fn first_tape_version() -> u32 {
    1
}

impl Tapes {
    /// No tapes, as a pack written before the tape version was recorded reads (version 1).
    pub fn unversioned() -> Tapes {
        Tapes { version: first_tape_version(), ..Tapes::default() }
    }
}

/// Whether the guest had a network (`tapes.network_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// No network but `lo` (`""` is read as `none`: what a manifest with an empty `tapes` held before).
    #[default]
    #[serde(alias = "")]
    None,
    /// The guest used the host's network; its sockets are on the network tape.
    Record,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Record => "record",
        }
    }
}

impl std::fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the captured run ended (`result.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Exited,
    Signaled,
    ExecFailed,
    SetupFailed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Exited => "exited",
            Outcome::Signaled => "signaled",
            Outcome::ExecFailed => "exec_failed",
            Outcome::SetupFailed => "setup_failed",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is wrong with a manifest: the field (`files[/a].path_hex`, `determinism.dir_order`...) and why, or what
/// is wrong with the document as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("not JSON: {0}")]
    NotJson(String),
    /// The document does not have the manifest's shape where no one field is to blame (an unknown top-level
    /// field, a missing one).
    #[error("{0}")]
    Shape(String),
    #[error("{field}: {why}")]
    Field { field: String, why: String },
}

impl ManifestError {
    /// The error of `field`.
    pub fn field(field: impl Into<String>, why: impl Into<String>) -> ManifestError {
        ManifestError::Field { field: field.into(), why: why.into() }
    }
}

/// Why a `path` / `path_hex` pair does not name exact bytes (see [`exact_path`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadExactPath {
    #[error("'{0}' is not an even number of lowercase hex digits")]
    NotHex(String),
    #[error("names a UTF-8 path (expected path_hex only for a name that is not UTF-8)")]
    Utf8,
    #[error("its bytes read '{bytes}', not '{text}' (expected the text field to be their text with U+FFFD for invalid bytes)")]
    TextDiffers { bytes: String, text: String },
}

/// The exact bytes a `path` / `path_hex` pair names, checked: `path_hex` is an even number of lowercase hex
/// digits, its bytes are not UTF-8 (a UTF-8 name is in `path` alone) and `path` is their text with U+FFFD for the
/// invalid bytes. Without `path_hex`, the bytes of `path`. The error says what is wrong, for the field `path_hex`.
pub fn exact_path<'a>(path: &'a str, hex: Option<&str>) -> Result<Cow<'a, [u8]>, BadExactPath> {
    let Some(h) = hex else { return Ok(Cow::Borrowed(path.as_bytes())) };
    let not_hex = || BadExactPath::NotHex(h.chars().take(80).collect::<String>().escape_debug().to_string());
    if h.is_empty() || h.len() % 2 != 0 || !h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(not_hex());
    }
    let bytes = crate::pathenc::from_hex(h).ok_or_else(not_hex)?;
    if std::str::from_utf8(&bytes).is_ok() {
        return Err(BadExactPath::Utf8);
    }
    if String::from_utf8_lossy(&bytes) != path {
        return Err(BadExactPath::TextDiffers {
            bytes: String::from_utf8_lossy(&bytes).escape_debug().to_string(),
            text: path.escape_debug().to_string(),
        });
    }
    Ok(Cow::Owned(bytes))
}

impl FileEntry {
    /// The entry's exact path: the bytes of `path_hex` when present, else those of `path` (see [`exact_path`]).
    pub fn exact(&self) -> Result<Cow<'_, [u8]>, ManifestError> {
        exact_path(&self.path, self.path_hex.as_deref()).map_err(|why| {
            ManifestError::field(format!("files[{}].path_hex", self.path.escape_debug()), why.to_string())
        })
    }

    /// [`FileEntry::exact`] for a manifest that was validated (else the bytes of `path`).
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        // A validated manifest's `path_hex` is good; for one that is not, the text is the best name there is.
        self.exact().unwrap_or(Cow::Borrowed(self.path.as_bytes()))
    }

    /// A symlink's exact target: the bytes of `target_hex` when present (and valid), else those of `target`.
    pub fn target_bytes(&self) -> Option<Cow<'_, [u8]>> {
        let t = self.target.as_deref()?;
        // As in `bytes`: validation refused a bad `target_hex`; otherwise the text is the best target there is.
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
        for (name, t) in [
            ("tapes.network", &self.tapes.network),
            ("tapes.proc", &self.tapes.proc),
            ("environment", &self.environment),
        ] {
            if let Some(b) = t {
                v.push((name.to_string(), b.blake3.clone(), Some(b.size)));
            }
        }
        v
    }
}

/// The failure signature: what makes two failures "the same failure" (computed by `repro_pack::signature`):
/// the exit status, the last lines of stderr after normalization, and the failing test ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    pub exit_status: i32,
    /// The last non-empty lines of stderr, normalized.
    pub stderr_tail: Vec<String>,
    /// Test runners recognized in the output (`pytest`, `cargo-test`, `nextest`, `go-test`, `junit`).
    #[serde(default)]
    pub test_frameworks: Vec<String>,
    /// Failing test ids, sorted.
    #[serde(default)]
    pub failing_tests: Vec<String>,
}

impl Signature {
    /// What differs between the recorded signature (`self`) and another, one line per difference; empty when they
    /// match.
    pub fn differences(&self, other: &Signature) -> Vec<String> {
        let mut d = Vec::new();
        if self.exit_status != other.exit_status {
            d.push(format!("exit status: recorded {}, got {}", self.exit_status, other.exit_status));
        }
        if self.failing_tests != other.failing_tests {
            d.push(format!(
                "failing tests: recorded [{}], got [{}]",
                self.failing_tests.join(", "),
                other.failing_tests.join(", ")
            ));
        }
        if self.stderr_tail != other.stderr_tail {
            let n = self.stderr_tail.len().max(other.stderr_tail.len());
            for i in 0..n {
                let (a, b) = (self.stderr_tail.get(i), other.stderr_tail.get(i));
                if a != b {
                    d.push(format!(
                        "stderr line {} of the tail: recorded {:?}, got {:?}",
                        i + 1,
                        a.map(String::as_str).unwrap_or("(none)"),
                        b.map(String::as_str).unwrap_or("(none)")
                    ));
                    break;
                }
            }
        }
        d
    }

    /// A one-line summary: `exit 1; 2 failing tests; last stderr line: ...`.
    pub fn summary(&self) -> String {
        let mut s = format!("exit {}", self.exit_status);
        if !self.failing_tests.is_empty() {
            s.push_str(&format!("; failing: {}", self.failing_tests.join(", ")));
        }
        if let Some(last) = self.stderr_tail.last() {
            s.push_str(&format!("; stderr: {last}"));
        }
        s
    }
}

/// The text a directory order is written as, for the settings that still carry it as text.
impl From<DirOrder> for String {
    fn from(o: DirOrder) -> String {
        o.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tapes_without_a_version_are_version_1_and_an_empty_mode_is_none() {
        let t: Tapes = serde_json::from_str(r#"{"network_mode": "record", "network_events": 3}"#).unwrap();
        assert_eq!((t.version, t.network_mode, t.network_events), (1, NetworkMode::Record, 3));
        let t: Tapes = serde_json::from_str(r#"{"network_mode": ""}"#).unwrap();
        assert_eq!(t.network_mode, NetworkMode::None);
        let t: Tapes = serde_json::from_str("{}").unwrap();
        assert_eq!((t.version, t.network_mode), (1, NetworkMode::None));
        assert_eq!(Tapes::default().version, TAPE_VERSION);
        assert_eq!(Tapes::unversioned(), Tapes { version: 1, ..Tapes::default() });
        let json = serde_json::to_value(Tapes::default()).unwrap();
        assert_eq!(json["version"], TAPE_VERSION);
        assert_eq!(json["network_mode"], "none");
        assert!(serde_json::from_str::<Tapes>(r#"{"network_mode": "host"}"#).is_err());
    }

    #[test]
    fn modes_keep_their_strings() {
        for (o, s) in [
            (Outcome::Exited, "exited"),
            (Outcome::Signaled, "signaled"),
            (Outcome::ExecFailed, "exec_failed"),
            (Outcome::SetupFailed, "setup_failed"),
        ] {
            assert_eq!(serde_json::to_value(o).unwrap(), s);
            assert_eq!(o.to_string(), s);
            assert_eq!(serde_json::from_value::<Outcome>(s.into()).unwrap(), o);
        }
        assert!(serde_json::from_str::<Outcome>("\"exited \"").is_err());
        for k in [ChangeKind::Added, ChangeKind::Modified, ChangeKind::Deleted] {
            let s = serde_json::to_value(k).unwrap();
            assert!(["added", "modified", "deleted"].contains(&s.as_str().unwrap()), "{s}");
        }
        let d: DeterminismSpec = serde_json::from_str(
            r#"{"supervised": true, "seed": 1, "epoch_unix": 0, "epoch_rfc3339": "x", "clock_step_ns": 1}"#,
        )
        .unwrap();
        assert_eq!((d.dir_order, d.hostname.as_str()), (DirOrder::Sorted, "repro"));
        assert_eq!(String::from(DirOrder::Shuffled(4)), "shuffled:4");
        let names: Vec<&str> = AccessKind::ALL.iter().map(|k| k.name()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "the enum's order is the order of the names");
        for k in AccessKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
            assert_eq!(AccessKind::parse(k.name()), Some(k));
        }
        assert_eq!(AccessKind::parse("write"), None);
        for m in [SecretsMode::Exclude, SecretsMode::Redact, SecretsMode::Keep] {
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
        }
    }

    #[test]
    fn exact_paths_say_what_is_wrong() {
        assert_eq!(exact_path("a", None).unwrap().as_ref(), b"a");
        assert_eq!(exact_path("a\u{fffd}", Some("61ff")).unwrap().as_ref(), b"a\xff");
        assert_eq!(exact_path("a", Some("61")), Err(BadExactPath::Utf8));
        assert!(matches!(exact_path("a", Some("6")), Err(BadExactPath::NotHex(_))));
        assert!(matches!(exact_path("a", Some("6G")), Err(BadExactPath::NotHex(_))));
        assert!(matches!(exact_path("b\u{fffd}", Some("61ff")), Err(BadExactPath::TextDiffers { .. })));
        let f = FileEntry {
            path: "/a\u{fffd}".into(),
            path_hex: Some("2f61".into()),
            kind: EntryKind::Dir,
            mode: 0o755,
            size: None,
            blake3: None,
            target: None,
            target_hex: None,
            access: vec![],
            mtime_ns: None,
        };
        let e = f.exact().unwrap_err();
        assert!(e.to_string().starts_with("files[/a\u{fffd}].path_hex: names a UTF-8 path"), "{e}");
        assert_eq!(f.bytes().as_ref(), "/a\u{fffd}".as_bytes());
    }
}
