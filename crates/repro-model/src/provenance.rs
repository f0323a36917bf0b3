//! Provenance documents: the files a run actually used ([`UsedFile`]) and the environment derived from them
//! ([`Environment`]: components with purls and an identity digest), kept as `environment.json` of a run
//! directory (`repro run --record-inputs`) and as the `environment` blob of a pack. See docs/provenance.md.
//!
//! These documents may come from someone else (a pack, a file passed to `repro drift`): readers parse them with
//! `deny_unknown_fields` and the limits of repro-prov, never trusting a count or a path.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::manifest::AccessKind;

/// The format of environment documents this version writes (and the newest it reads).
pub const PROVENANCE_FORMAT: u32 = 1;

/// One file whose content the guest used (opened, executed or mapped), with the digests of the bytes it saw.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsedFile {
    /// Absolute path in the guest, as text (a name that is not UTF-8 with U+FFFD for its invalid bytes).
    pub path: String,
    /// The exact bytes of `path` in lowercase hex, only when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    /// How the guest used it (sorted, each once).
    pub uses: Vec<AccessKind>,
    pub size: u64,
    /// Lowercase hex sha256 of the content.
    pub sha256: String,
    /// Lowercase hex blake3 of the content.
    pub blake3: String,
    /// Lowercase hex SHA-1 of the content: not for trust (SHA-1 collides), only because SPDX 2.3 requires it of
    /// every file it lists. Absent in documents written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
}

impl UsedFile {
    /// Whether the guest executed or mapped it (a program or a library): such files come first in a drift.
    pub fn executed(&self) -> bool {
        self.uses.iter().any(|k| matches!(k, AccessKind::Exec | AccessKind::Map))
    }
}

/// A used path whose content could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnreadFile {
    pub path: String,
    pub reason: String,
}

/// The sandbox settings recorded with an environment. `identity` are the ones that enter the identity digest
/// (they change what any program sees: the guest's environment variables, CPU count, memory limit, whether the
/// supervisor answered time and entropy, directory order, the user namespace); `run` are recorded but left out
/// (the seed, epoch and clock step are the variables of one run that `hunt` varies: one environment hosts them
/// all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub identity: BTreeMap<String, String>,
    #[serde(default)]
    pub run: BTreeMap<String, String>,
}

/// Components known to have executed or mapped files although an environment lists none of their files (a
/// component-level summary such as a VSA or a test result), by (kind, name, digest).
pub type Executed = BTreeSet<(ComponentKind, String, String)>;

/// What a component is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComponentKind {
    /// A Debian package (owner from dpkg's database).
    Deb,
    /// A Python distribution (`*.dist-info`).
    Python,
    /// A Rust crate (Cargo registry source or Cargo.lock).
    Cargo,
    /// An npm package (`node_modules/NAME/package.json`).
    Npm,
    /// A Go module (`$GOMODCACHE/PATH@VERSION`).
    Golang,
    /// A file no package owns.
    File,
}

impl ComponentKind {
    pub fn name(self) -> &'static str {
        match self {
            ComponentKind::Deb => "deb",
            ComponentKind::Python => "python",
            ComponentKind::Cargo => "cargo",
            ComponentKind::Npm => "npm",
            ComponentKind::Golang => "golang",
            ComponentKind::File => "file",
        }
    }
}

/// Whether a used file matches what its package recorded for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// The package's record (dpkg md5sums, RECORD sha256) matches the bytes the guest used.
    Matches,
    /// The package's record differs: the file was modified after installation.
    Modified,
    /// The package records no digest for this file (a conffile, a RECORD line without hash, a loose file).
    NotRecorded,
    /// The digest could not be checked (the file changed on the host since the run, and the run kept no copy).
    Unknown,
}

/// One used file of a component.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentFile {
    pub path: String,
    pub uses: Vec<AccessKind>,
    pub size: u64,
    pub sha256: String,
    pub blake3: String,
    /// SHA-1 of the content, for SPDX only (see [`UsedFile::sha1`]); not part of any digest repro computes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
    pub check: Check,
}

/// A package (or a loose file) the run used, with the files of it that were used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Component {
    pub kind: ComponentKind,
    /// The package's name (for a loose file: its path).
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Package URL (purl spec), e.g. `pkg:deb/debian/bash@5.2.15-2%2Bb2?arch=amd64`; absent for a loose file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purl: Option<String>,
    /// The component's digest: blake3 over its used files' sorted `path sha256` lines.
    pub digest: String,
    /// Lowercase hex sha256 of the package archive its files were checked against (a crate's `.crate` in Cargo's
    /// cache), when there is one; outside the identity (the files are what was used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_sha256: Option<String>,
    /// Sorted by path.
    pub files: Vec<ComponentFile>,
}

impl Component {
    /// Whether any of its used files was executed or mapped.
    pub fn executed(&self) -> bool {
        self.files.iter().any(|f| f.uses.iter().any(|k| matches!(k, AccessKind::Exec | AccessKind::Map)))
    }

    /// The files that do not match their package's record.
    pub fn modified(&self) -> impl Iterator<Item = &ComponentFile> {
        self.files.iter().filter(|f| f.check == Check::Modified)
    }
}

/// Where an environment document came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "lowercase")]
pub enum EnvSource {
    /// A run (`repro run --record-inputs`, or the run of `repro capture`), by its id.
    Run { run_id: String },
    /// A pack, by its id (blake3 of its manifest); set when the pack is read, never stored in it.
    Pack { pack: String },
    /// `repro env snapshot`: the host's view of the same paths, at `host` (its hostname).
    Snapshot { host: String, of: String },
}

/// The environment a run used: `repro env --json`, the input of `repro sbom` and `repro drift`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub format: u32,
    pub repro_version: String,
    pub source: EnvSource,
    /// When the inputs were recorded (the run's start, the capture's, the snapshot's), RFC 3339 UTC: the
    /// timestamp of the SBOMs made from it, so the same run gives the same bytes.
    pub recorded_at: String,
    pub arch: String,
    pub kernel_release: String,
    pub settings: Settings,
    /// `blake3:HEX` over the sorted (kind, name, version, digest) of every component, the kernel release, the
    /// architecture and `settings.identity` (see docs/provenance.md for the exact bytes).
    pub identity: String,
    /// Sorted by (kind, name, version).
    pub components: Vec<Component>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<UnreadFile>,
}

/// What `repro drift A B` found (`--json`): the differences among the inputs the two used, most likely to matter
/// first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drift {
    /// No difference that enters the identity (the identities are equal).
    pub same: bool,
    pub a: DriftSide,
    pub b: DriftSide,
    /// Ordered by `rank`, then subject.
    pub changes: Vec<DriftChange>,
}

/// One side of a drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftSide {
    /// What was given on the command line.
    pub name: String,
    pub source: EnvSource,
    pub identity: String,
    /// When the side is a DSSE envelope (`repro attest`): which statement said so, and whether its signature
    /// was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<AttestationSource>,
}

/// An environment read from a signed statement (`repro attest`) rather than recorded by this repro: what the
/// statement is, by which key, and whether the signature was checked (`repro drift --key`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttestationSource {
    /// `runtime-trace`, `test-result` or `vsa`.
    pub predicate: String,
    /// The statement's `predicateType` URI.
    pub predicate_type: String,
    /// The key that verified the signature; when it was not checked, the key id the envelope names (a claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// Whether a signature was verified with a key given (`--key`).
    pub verified: bool,
    /// Whether the statement lists each file (a runtime trace) or only each component (a VSA, a test result):
    /// then a content change names no file.
    pub files_listed: bool,
}

/// What kind of difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriftKind {
    /// A component only B used.
    Added,
    /// A component only A used.
    Removed,
    /// The same component at another version.
    Version,
    /// The same component and version with other file contents (or other files used).
    Content,
    /// A file that matched its package's record in A and does not in B (or the reverse).
    Modified,
    Arch,
    Kernel,
    /// A sandbox setting that enters the identity.
    Setting,
    /// A run variable (seed, epoch, ...): recorded, outside the identity; does not make the two differ.
    RunSetting,
}

/// One difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftChange {
    /// 0 executed programs and libraries, 1 architecture and kernel, 2 other files read, 3 settings, 4 run
    /// variables.
    pub rank: u8,
    pub kind: DriftKind,
    /// The component (`deb bash`), file, or setting.
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b: Option<String>,
    /// Which files differ, for a content change (at most a few, then a count).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}
