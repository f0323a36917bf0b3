//! Opening what a command line names: a run directory, a pack, an environment document or a DSSE envelope, told
//! apart by content ([`classify`]), and the environment of the first three ([`environment_of`]; an envelope's is a
//! claim, read by `crate::attest::read` for `repro drift` and `repro env`). Everything read may come from someone
//! else: documents are bounded and checked against themselves, a pack's claim against the pack's own blobs.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use repro_model::manifest::EntryKind;
use repro_model::provenance::{EnvSource, Environment};
use serde::Deserialize;
use sha2::Digest as _;

use crate::env::{check, parse, read_limited, RUN_FILE};
use crate::identity::hex;
use crate::ProvError;

/// What a path given to `repro env`, `repro drift`, `repro sbom` or `repro attest` is.
pub enum Kind {
    RunDir(PathBuf),
    Pack(PathBuf),
    Document(PathBuf),
    /// A DSSE envelope (`repro attest`): JSON with a `payloadType` and a `payload`.
    Envelope(PathBuf),
}

/// Tells a run directory, a pack (zstd), a DSSE envelope and an environment document apart (by content).
pub fn classify(path: &Path) -> Result<Kind, ProvError> {
    let md = std::fs::metadata(path).map_err(|source| ProvError::Read { path: path.into(), source })?;
    if md.is_dir() {
        return Ok(Kind::RunDir(path.into()));
    }
    let mut head = [0u8; 4];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|source| ProvError::Read { path: path.into(), source })?;
    Ok(if n == 4 && head == [0x28, 0xb5, 0x2f, 0xfd] {
        Kind::Pack(path.into())
    } else if is_envelope_file(path) {
        Kind::Envelope(path.into())
    } else {
        Kind::Document(path.into())
    })
}

/// The environment of a run directory, a pack or an environment document.
pub fn environment_of(target: &Path) -> Result<Environment, ProvError> {
    match classify(target)? {
        Kind::RunDir(dir) => {
            let p = dir.join(RUN_FILE);
            if !p.exists() {
                return Err(ProvError::NoInputs { path: dir });
            }
            parse(&p, &read_limited(&p, "environment document")?)
        }
        Kind::Pack(p) => of_pack(&p),
        Kind::Document(p) => parse(&p, &read_limited(&p, "environment document")?),
        Kind::Envelope(p) => Err(ProvError::Parse {
            path: p,
            line: None,
            reason: "a DSSE envelope (repro attest), not a run, pack or environment document: its environment is a \
                     claim; `repro drift` and `repro env` read it (`repro drift --key PUB` checks its signature)"
                .into(),
        }),
    }
}

/// A pack's environment: its `environment` blob, each file checked against the pack's own files and blobs.
pub fn of_pack(path: &Path) -> Result<Environment, ProvError> {
    let staging = tempfile::tempdir().map_err(|source| ProvError::Write { path: std::env::temp_dir(), source })?;
    let pack = repro_pack::read_pack(path, &repro_pack::Store::default_store(), Some(staging.path()))?;
    let Some(blob) = &pack.manifest.environment else {
        return Err(ProvError::NoInputs { path: path.into() });
    };
    let where_ = path.join("environment");
    let blob_path = staging.path().join(&blob.blake3);
    let bytes = read_limited(&blob_path, "environment blob")?;
    let env: Environment = serde_json::from_slice(&bytes).map_err(|source| ProvError::Json {
        path: where_.clone(),
        what: "environment blob",
        source,
    })?;
    let files: BTreeMap<&str, (&Option<String>, EntryKind)> =
        pack.manifest.files.iter().map(|f| (f.path.as_str(), (&f.blake3, f.kind))).collect();
    let mut sha = BTreeMap::<String, (String, String)>::new();
    for c in &env.components {
        for f in &c.files {
            let bad = |reason: String| ProvError::Parse { path: where_.clone(), line: None, reason };
            match files.get(f.path.as_str()) {
                Some((Some(b3), EntryKind::File)) if *b3 == f.blake3 => {}
                Some(_) => return Err(bad(format!("{} is not the pack's file of that name (blake3 differs)", f.path))),
                None => return Err(bad(format!("{} is not a file of the pack", f.path))),
            }
            if !sha.contains_key(&f.blake3) {
                let data = std::fs::read(staging.path().join(&f.blake3))
                    .map_err(|source| ProvError::Read { path: staging.path().join(&f.blake3), source })?;
                sha.insert(f.blake3.clone(), (hex(&sha2::Sha256::digest(&data)), hex(&sha1::Sha1::digest(&data))));
            }
            let (sha256, sha1) = &sha[&f.blake3];
            if *sha256 != f.sha256 {
                return Err(bad(format!("{}: sha256 {} is not the sha256 of the pack's blob", f.path, f.sha256)));
            }
            if f.sha1.as_ref().is_some_and(|s| s != sha1) {
                return Err(bad(format!("{}: sha1 is not the sha1 of the pack's blob", f.path)));
            }
        }
    }
    let mut env = check(&where_, env)?;
    env.source = EnvSource::Pack { pack: pack.id.clone() };
    Ok(env)
}

/// A command-line target: an existing path (a run directory, a pack, a document), else a run id, a unique
/// prefix of one, or `last` in the state directory `state`.
pub fn resolve_target(arg: &str, state: &Path) -> Result<PathBuf, ProvError> {
    let p = Path::new(arg);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    match repro_sandbox::rundir::find(state, arg) {
        Ok(run) => Ok(run.path),
        Err(e) => Err(ProvError::Target { arg: arg.into(), reason: e.to_string() }),
    }
}

/// The first bytes of a DSSE envelope in JSON, when `bytes` are one: an object with a string `payloadType` and a
/// `payload` (other fields are the envelope parser's business).
#[derive(Deserialize)]
struct Probe {
    #[serde(rename = "payloadType")]
    #[allow(dead_code)]
    payload_type: String,
    #[allow(dead_code)]
    payload: serde::de::IgnoredAny,
}

/// Whether `bytes` are a DSSE envelope (JSON with a `payloadType` and a `payload`), whatever its payload type.
pub fn is_envelope(bytes: &[u8]) -> bool {
    looks_like_json_object(bytes) && serde_json::from_slice::<Probe>(bytes).is_ok()
}

/// [`is_envelope`] of a file, read as a stream (at most [`crate::attest::dsse::MAX_ENVELOPE`] bytes: a larger file is no envelope
/// repro reads). An unreadable file is not one (its reader says why).
pub fn is_envelope_file(path: &Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    if f.metadata().map_or(true, |m| !m.is_file() || m.len() > crate::attest::dsse::MAX_ENVELOPE) {
        return false;
    }
    let mut r = std::io::BufReader::new(f.take(crate::attest::dsse::MAX_ENVELOPE));
    let mut head = [0u8; 64];
    let Ok(n) = std::io::Read::read(&mut r, &mut head) else {
        return false;
    };
    if !looks_like_json_object(&head[..n]) {
        return false;
    }
    let rest = std::io::Read::chain(&head[..n], r);
    serde_json::from_reader::<_, Probe>(rest).is_ok()
}

fn looks_like_json_object(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}
