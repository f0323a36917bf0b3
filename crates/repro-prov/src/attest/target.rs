//! What an attestation is about (a pack, or a run directory), its subjects, and the check of a statement's
//! subjects against a pack, a run directory or files given to `repro attest verify`.
//!
//! Subjects, each by sha256 and blake3:
//! - a pack: the pack file (named by its file name), then each of its blobs (`blobs/<blake3>`, sorted);
//! - a run directory: `stdout`, `stderr`, `run.json` (the run's record: its command, settings and outcome), then
//!   each file of `changes.json` the run added or modified (`changes/<path>`, from the run's `changes/` copy).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use repro_model::manifest::Manifest;
use repro_model::run::{ChangeKind, Changes, FileKind, RunRecord};
use sha2::Digest as _;

use super::statement::{ResourceDescriptor, Statement};
use crate::ProvError;

/// The largest `changes.json` read.
const MAX_CHANGES_JSON: u64 = 64 << 20;

/// A pack to attest.
#[derive(Debug, Clone)]
pub struct PackTarget {
    pub path: PathBuf,
    /// Its file name: the name of its subject.
    pub name: String,
    /// The pack's id (blake3 of its manifest).
    pub id: String,
    pub manifest: Manifest,
    pub subjects: Vec<ResourceDescriptor>,
}

/// A run directory to attest.
#[derive(Debug, Clone)]
pub struct RunTarget {
    pub dir: PathBuf,
    pub record: RunRecord,
    /// The failure signature of its output (exit status, stderr tail, failing tests).
    pub signature: repro_model::manifest::Signature,
    pub subjects: Vec<ResourceDescriptor>,
}

/// What `repro attest` signs a statement about.
#[derive(Debug, Clone)]
pub enum Target {
    Pack(PackTarget),
    Run(RunTarget),
}

impl Target {
    pub fn subjects(&self) -> &[ResourceDescriptor] {
        match self {
            Target::Pack(p) => &p.subjects,
            Target::Run(r) => &r.subjects,
        }
    }

    /// A URI for the resource: `urn:repro:pack:blake3:<pack id>` or `urn:repro:run:<run id>`.
    pub fn uri(&self) -> String {
        match self {
            Target::Pack(p) => format!("urn:repro:pack:blake3:{}", p.id),
            Target::Run(r) => format!("urn:repro:run:{}", r.record.id),
        }
    }

    /// The command, its working directory and repro's exit status for it.
    pub fn command(&self) -> (&[String], &str, i32) {
        match self {
            Target::Pack(p) => (&p.manifest.command.argv, &p.manifest.command.cwd, p.manifest.result.exit_status),
            Target::Run(r) => (&r.record.settings.command, &r.record.settings.cwd, r.record.exit_status),
        }
    }
}

/// sha256 and blake3 (lowercase hex) of a file, streamed.
pub fn digests_of(path: &Path) -> Result<(String, String), ProvError> {
    let mut f = std::fs::File::open(path).map_err(|source| ProvError::Read { path: path.into(), source })?;
    let mut sha = sha2::Sha256::new();
    let mut b3 = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|source| ProvError::Read { path: path.into(), source })?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        b3.update(&buf[..n]);
    }
    Ok((crate::identity::hex(&sha.finalize()), b3.finalize().to_hex().to_string()))
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

/// Reads a pack (checked as `repro_pack::read_pack` checks any pack) and its subjects.
pub fn pack(path: &Path) -> Result<PackTarget, ProvError> {
    let (sha, b3) = digests_of(path)?;
    let staging = tempfile::tempdir().map_err(|source| ProvError::Write { path: std::env::temp_dir(), source })?;
    let pack = repro_pack::read_pack(path, &repro_pack::Store::default_store(), Some(staging.path()))?;
    let name = file_name(path);
    let mut subjects = vec![ResourceDescriptor::file(name.clone(), sha, b3)];
    for digest in pack.blobs.keys() {
        let (sha, b3) = digests_of(&staging.path().join(digest))?;
        subjects.push(ResourceDescriptor::file(format!("blobs/{digest}"), sha, b3));
    }
    Ok(PackTarget { path: path.into(), name, id: pack.id, manifest: pack.manifest, subjects })
}

fn parse_err(path: &Path, e: impl std::fmt::Display) -> ProvError {
    ProvError::Parse { path: path.into(), line: None, reason: e.to_string() }
}

/// Reads a run directory's record and its subjects.
pub fn run(dir: &Path) -> Result<RunTarget, ProvError> {
    let record = repro_sandbox::rundir::read_record(dir).map_err(|e| parse_err(dir, e))?;
    let mut subjects = Vec::new();
    for name in ["stdout", "stderr", "run.json"] {
        let (sha, b3) = digests_of(&dir.join(name))?;
        subjects.push(ResourceDescriptor::file(name, sha, b3));
    }
    let cj = dir.join("changes.json");
    if cj.exists() {
        let data = super::read_bounded(&cj, MAX_CHANGES_JSON, "changes.json")?;
        let changes: Changes = serde_json::from_slice(&data).map_err(|source| ProvError::Json {
            path: cj.clone(),
            what: "changes.json",
            source,
        })?;
        let mut files: Vec<_> = changes
            .changes
            .iter()
            .filter(|c| c.file == FileKind::File && c.kind != ChangeKind::Deleted)
            .map(|c| c.rel_path().map(|p| (c.path.clone(), p)).map_err(|e| parse_err(&cj, e)))
            .collect::<Result<_, _>>()?;
        files.sort();
        for (shown, rel) in files {
            if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
                return Err(parse_err(
                    &cj,
                    format!("a change of '{}' outside the run's changes/", shown.escape_debug()),
                ));
            }
            let (sha, b3) = digests_of(&dir.join("changes").join(&rel))?;
            subjects.push(ResourceDescriptor::file(format!("changes/{shown}"), sha, b3));
        }
    }
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::File::open(&p)
            .and_then(|f| {
                let mut v = Vec::new();
                f.take(16 << 20).read_to_end(&mut v).map(|_| v)
            })
            .map_err(|source| ProvError::Read { path: p, source })
    };
    // The last 16 MiB of output are plenty for the stderr tail; failing test lines may be anywhere, but a
    // longer log is cut.
    let signature = repro_pack::signature::compute(record.exit_status, &read("stdout")?, &read("stderr")?, &[]);
    Ok(RunTarget { dir: dir.into(), record, signature, subjects })
}

/// A pack or a run directory (an environment document has no subjects of its own to sign).
pub fn load(path: &Path) -> Result<Target, ProvError> {
    match crate::open::classify(path)? {
        crate::open::Kind::Pack(p) => Ok(Target::Pack(pack(&p)?)),
        crate::open::Kind::RunDir(d) => Ok(Target::Run(run(&d)?)),
        crate::open::Kind::Document(p) => Err(ProvError::Target {
            arg: p.display().to_string(),
            reason: "repro attests a pack or a run directory (an environment document is neither)".into(),
        }),
        crate::open::Kind::Envelope(p) => Err(ProvError::Target {
            arg: p.display().to_string(),
            reason: "repro attests a pack or a run directory (a DSSE envelope is neither: `repro attest verify` \
                     checks one)"
                .into(),
        }),
    }
}

/// The digests of `ours` that `theirs` (a statement's subject) also has must be equal; at least one must be in
/// common. The error says which differs.
fn same_digest(theirs: &ResourceDescriptor, ours: &ResourceDescriptor) -> Result<(), String> {
    let mut common = 0;
    // sha256 first: the digest every in-toto tool knows, so the one a message shows.
    let mut algs: Vec<(&String, &String)> = ours.digest.iter().collect();
    algs.sort_by_key(|(alg, _)| alg.as_str() != "sha256");
    for (alg, mine) in algs {
        if let Some(v) = theirs.digest.get(alg) {
            common += 1;
            if v != mine {
                return Err(format!(
                    "its {alg} is {mine}, the statement's subject '{}' has {v}",
                    theirs.name.escape_debug()
                ));
            }
        }
    }
    if common == 0 {
        let algs: Vec<&str> = theirs.digest.keys().map(String::as_str).collect();
        return Err(format!(
            "the statement's subject '{}' has no sha256 or blake3 digest (only {})",
            theirs.name.escape_debug(),
            algs.join(", ")
        ));
    }
    Ok(())
}

/// What the subjects were checked against.
#[derive(Debug, Clone, Default)]
pub struct Against {
    pub pack: Option<PathBuf>,
    pub run: Option<PathBuf>,
    pub files: Vec<PathBuf>,
}

impl Against {
    pub fn is_empty(&self) -> bool {
        self.pack.is_none() && self.run.is_none() && self.files.is_empty()
    }
}

/// Checks the statement's subjects against a pack: the pack file's digests first (so that any change to the
/// pack, a replaced blob included, is found before the pack is read), then each blob both ways. Returns the
/// names of the subjects matched; `Err` is the reason (for [`ProvError::Unverified`]), or a pack that cannot be
/// read.
pub fn check_pack(statement: &Statement, path: &Path) -> Result<Result<Vec<String>, String>, ProvError> {
    let (sha, b3) = digests_of(path)?;
    let ours = ResourceDescriptor::file(file_name(path), sha, b3);
    let files: Vec<&ResourceDescriptor> = statement.subject.iter().filter(|s| !s.name.starts_with("blobs/")).collect();
    let Some(pack_subject) = files.iter().find(|s| same_digest(s, &ours).is_ok()) else {
        return Ok(Err(match files.as_slice() {
            [] => "the statement names no pack file among its subjects (is it about a pack?)".into(),
            [one] => format!(
                "the pack {} is not the attested pack: {} (the pack was changed or replaced)",
                path.display(),
                same_digest(one, &ours).err().unwrap_or_default()
            ),
            many => format!(
                "the pack {} is none of the statement's {} non-blob subjects (its sha256 is {})",
                path.display(),
                many.len(),
                ours.digest["sha256"]
            ),
        }));
    };
    let mut matched = vec![pack_subject.name.clone()];
    let target = match pack(path) {
        Ok(t) => t,
        // The file is the attested one, byte for byte, but no pack: the statement is about something else.
        Err(ProvError::Pack(e)) => {
            return Ok(Err(format!(
                "{} is the statement's subject '{}' but not a pack ({e})",
                path.display(),
                pack_subject.name.escape_debug()
            )))
        }
        Err(e) => return Err(e),
    };
    let by_name: BTreeMap<&str, &ResourceDescriptor> =
        statement.subject.iter().filter(|s| s.name.starts_with("blobs/")).map(|s| (s.name.as_str(), s)).collect();
    for ours in &target.subjects[1..] {
        match by_name.get(ours.name.as_str()) {
            None => return Ok(Err(format!("the pack holds {}, which the statement does not name", ours.name))),
            Some(theirs) => {
                if let Err(e) = same_digest(theirs, ours) {
                    return Ok(Err(format!("{} of the pack: {e}", ours.name)));
                }
            }
        }
        matched.push(ours.name.clone());
    }
    let held: std::collections::BTreeSet<&str> = target.subjects.iter().map(|s| s.name.as_str()).collect();
    if let Some(missing) = by_name.keys().find(|n| !held.contains(**n)) {
        return Ok(Err(format!(
            "the statement names {missing}, which the pack does not hold (a blob was removed or replaced)"
        )));
    }
    Ok(Ok(matched))
}

/// Checks the statement's subjects against a run directory, both ways: every output of the run is a subject
/// with its digests, and every subject is an output of the run.
pub fn check_run(statement: &Statement, dir: &Path) -> Result<Result<Vec<String>, String>, ProvError> {
    let target = run(dir)?;
    let by_name: BTreeMap<&str, &ResourceDescriptor> = statement.subject.iter().map(|s| (s.name.as_str(), s)).collect();
    let mut matched = Vec::new();
    for ours in &target.subjects {
        match by_name.get(ours.name.as_str()) {
            None => {
                return Ok(Err(format!(
                    "the run's {} is not a subject of the statement (is it about this run?)",
                    ours.name.escape_debug()
                )))
            }
            Some(theirs) => {
                if let Err(e) = same_digest(theirs, ours) {
                    return Ok(Err(format!("the run's {}: {e}", ours.name.escape_debug())));
                }
            }
        }
        matched.push(ours.name.clone());
    }
    let held: std::collections::BTreeSet<&str> = target.subjects.iter().map(|s| s.name.as_str()).collect();
    if let Some(missing) = by_name.keys().find(|n| !held.contains(**n)) {
        return Ok(Err(format!("the statement names {}, which the run does not have", missing.escape_debug())));
    }
    Ok(Ok(matched))
}

/// Checks one file against the statement: the subjects named like it (its path as given, its file name, or a
/// name ending in `/<file name>`) must include one with its digests.
pub fn check_file(statement: &Statement, path: &Path) -> Result<Result<String, String>, ProvError> {
    let (sha, b3) = digests_of(path)?;
    let base = file_name(path);
    let ours = ResourceDescriptor::file(base.clone(), sha, b3);
    let given = path.to_string_lossy();
    let suffix = format!("/{base}");
    let named: Vec<&ResourceDescriptor> =
        statement.subject.iter().filter(|s| s.name == given || s.name == base || s.name.ends_with(&suffix)).collect();
    if let Some(s) = named.iter().find(|s| same_digest(s, &ours).is_ok()) {
        return Ok(Ok(s.name.clone()));
    }
    Ok(Err(match named.as_slice() {
        [] => format!("{} is not a subject of the statement (no subject is named {base})", path.display()),
        [one] => format!(
            "{}: {} (the file was changed, or is another one)",
            path.display(),
            same_digest(one, &ours).err().unwrap_or_default()
        ),
        many => format!("{}: none of the {} subjects named like it has its digests", path.display(), many.len()),
    }))
}
