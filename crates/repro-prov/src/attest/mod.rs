//! `repro attest`, `repro attest verify`, `repro key gen`: in-toto Statement v1 in DSSE v1 envelopes, signed
//! with ed25519 keys.
//!
//! - [`keys`]: key generation and loading; the key id (securesystemslib's: sha256 of the canonical JSON of the
//!   public key's dictionary); the [`Signer`] and [`Verifier`] traits a keyless (Fulcio/Rekor) signer would
//!   implement too.
//! - [`dsse`]: PAE, signing, and the strict opening of an envelope from anyone.
//! - [`statement`]: the in-toto types.
//! - [`predicates`]: runtime-trace v0.1, test-result v0.1 and SLSA VSA v1.
//! - [`target`]: what is attested (a pack, a run directory), its subjects, and their check against what
//!   `verify` is given.
//! - [`read`]: the environment an envelope claims, as a side of `repro drift` (signature checked with keys).
//!
//! [`attest`] builds and signs a statement about a target; [`verify`] checks an envelope's signature, then its
//! subjects against a pack, a run directory or files, and returns the statement; [`describe`] puts what it
//! claims into words.

pub mod dsse;
pub mod keys;
pub mod predicates;
pub mod read;
pub mod statement;
pub mod target;

use std::io::Read;
use std::path::{Path, PathBuf};

use repro_model::provenance::Environment;

pub use dsse::Envelope;
pub use keys::{generate, key_id, GeneratedKey, PrivateKey, PublicKey, Signer, Verifier};
pub use predicates::{Claim, PredicateKind};
pub use statement::{ResourceDescriptor, Statement};
pub use target::{Against, Target};

use crate::ProvError;

/// Reads at most `limit` bytes of `path` (a larger file is an error).
pub(crate) fn read_bounded(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, ProvError> {
    let f = std::fs::File::open(path).map_err(|source| ProvError::Read { path: path.into(), source })?;
    let mut data = Vec::new();
    f.take(limit + 1).read_to_end(&mut data).map_err(|source| ProvError::Read { path: path.into(), source })?;
    if data.len() as u64 > limit {
        return Err(ProvError::TooLarge { path: path.into(), what, limit });
    }
    Ok(data)
}

/// Now, RFC 3339 UTC to the second.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0).unwrap_or(now).format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// What to attest about a target.
#[derive(Debug, Clone)]
pub struct Request {
    pub kind: PredicateKind,
    /// The evidence of a VSA: the JSON of `repro replay --runs N --json` (for a pack) or `repro run --verify
    /// --json` (for one of its runs).
    pub report: Option<PathBuf>,
    /// What the VSA claims (default: a failure for replay evidence, what the runs did for verify evidence).
    pub claim: Option<Claim>,
    /// The VSA's `timeVerified` (default: now).
    pub time_verified: Option<String>,
}

impl Request {
    pub fn new(kind: PredicateKind) -> Request {
        Request { kind, report: None, claim: None, time_verified: None }
    }
}

/// A signed statement.
#[derive(Debug, Clone)]
pub struct Attestation {
    pub statement: Statement,
    pub envelope: Envelope,
}

fn mismatch(path: &Path, reason: String) -> ProvError {
    ProvError::Parse { path: path.into(), line: None, reason }
}

/// The statement about `target` in `env` (required for a runtime trace; the others name it when known).
pub fn statement(target: &Target, env: Option<&Environment>, req: &Request) -> Result<Statement, ProvError> {
    let subjects = target.subjects().to_vec();
    match req.kind {
        PredicateKind::RuntimeTrace => {
            let Some(env) = env else {
                let path = match target {
                    Target::Pack(p) => p.path.clone(),
                    Target::Run(r) => r.dir.clone(),
                };
                return Err(ProvError::NoInputs { path });
            };
            Ok(Statement::new(subjects, predicates::RUNTIME_TRACE, &predicates::runtime_trace(target, env)))
        }
        PredicateKind::TestResult => {
            Ok(Statement::new(subjects, predicates::TEST_RESULT, &predicates::test_result(target, env)))
        }
        PredicateKind::Vsa => {
            let Some(report) = &req.report else {
                return Err(ProvError::Target {
                    arg: "--predicate vsa".into(),
                    reason: "a VSA needs its evidence: --report, the JSON of `repro replay PACK --runs N --json` or \
                             `repro run --verify --runs N --json`"
                        .into(),
                });
            };
            let evidence = predicates::read_evidence(report)?;
            check_evidence(target, &evidence, report)?;
            let time = req.time_verified.clone().unwrap_or_else(now_rfc3339);
            Ok(Statement::new(subjects, predicates::VSA, &predicates::vsa(target, env, &evidence, req.claim, time)))
        }
    }
}

/// Whether `evidence` (read from `report`) is about `target`: a replay of this pack, or a verify that ran this run.
fn check_evidence(target: &Target, evidence: &predicates::Evidence, report: &Path) -> Result<(), ProvError> {
    match (target, evidence.kind) {
        (Target::Pack(p), predicates::EvidenceKind::Replay) => {
            if evidence.recorded.as_ref() != Some(&p.manifest.signature) {
                return Err(mismatch(
                    report,
                    format!(
                        "a replay of another pack: its recorded signature is not the one of {} ({})",
                        p.path.display(),
                        p.manifest.signature.summary()
                    ),
                ));
            }
        }
        (Target::Run(r), predicates::EvidenceKind::Verify) => {
            if !evidence.runs.iter().any(|e| e.id == r.record.id) {
                return Err(mismatch(
                    report,
                    format!("the run {} is not one of this verification's runs", r.record.id),
                ));
            }
        }
        (Target::Pack(_), predicates::EvidenceKind::Verify) => {
            return Err(mismatch(
                report,
                "a `run --verify` report is evidence about its runs: attest one of them (a run directory)".into(),
            ))
        }
        (Target::Run(_), predicates::EvidenceKind::Replay) => {
            return Err(mismatch(report, "a replay report is evidence about a pack: attest the pack".into()))
        }
    }
    Ok(())
}

/// Signs a statement into a DSSE envelope.
pub fn sign(statement: &Statement, signer: &dyn Signer) -> Result<Envelope, ProvError> {
    dsse::sign(dsse::PAYLOAD_TYPE, &statement.to_json(), signer)
}

/// `repro attest TARGET`: the target (a pack or a run directory), its environment (a run needs `repro run
/// --record-inputs` for a runtime trace), the statement, signed.
pub fn attest(path: &Path, req: &Request, signer: &dyn Signer) -> Result<Attestation, ProvError> {
    let target = target::load(path)?;
    let env = match crate::open::environment_of(path) {
        Ok(e) => Some(e),
        Err(ProvError::NoInputs { .. }) if req.kind != PredicateKind::RuntimeTrace => None,
        Err(e) => return Err(e),
    };
    let statement = statement(&target, env.as_ref(), req)?;
    let envelope = sign(&statement, signer)?;
    Ok(Attestation { statement, envelope })
}

/// What `repro repair` signs about the fix it accepted.
#[derive(Debug, Clone)]
pub struct FixRequest {
    /// The pack the failure was captured in.
    pub pack: PathBuf,
    /// The evidence: the JSON of `repro replay PACK --with ... --runs N --json` with the patch laid over.
    pub report: PathBuf,
    /// The patch (a subject of the statement, named by its file name).
    pub patch: PathBuf,
    /// The repair's evidence; its `patch` is filled in from the file.
    pub repair: predicates::RepairEvidence,
    /// The VSA's `timeVerified` (default: now).
    pub time_verified: Option<String>,
}

/// The signed VSA of a repaired failure: "the fix held N/N times in environment X, passed these gates and the
/// contract". Its subjects are the pack's (so `repro attest verify --pack` checks it) and the patch (`--file`).
pub fn attest_fix(req: &FixRequest, signer: &dyn Signer) -> Result<Attestation, ProvError> {
    let target = Target::Pack(target::pack(&req.pack)?);
    let env = match crate::open::environment_of(&req.pack) {
        Ok(e) => Some(e),
        Err(ProvError::NoInputs { .. }) => None,
        Err(e) => return Err(e),
    };
    let evidence = predicates::read_evidence(&req.report)?;
    check_evidence(&target, &evidence, &req.report)?;
    let (sha, b3) = target::digests_of(&req.patch)?;
    let name = req.patch.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "fix.patch".into());
    let patch = ResourceDescriptor { media_type: "text/x-diff".into(), ..ResourceDescriptor::file(name, sha, b3) };
    let repair = predicates::RepairEvidence { patch: patch.clone(), ..req.repair.clone() };
    let time = req.time_verified.clone().unwrap_or_else(now_rfc3339);
    let vsa = predicates::repair_vsa(&target, env.as_ref(), &evidence, repair, time);
    let mut subjects = target.subjects().to_vec();
    subjects.push(patch);
    let statement = Statement::new(subjects, predicates::VSA, &vsa);
    let envelope = sign(&statement, signer)?;
    Ok(Attestation { statement, envelope })
}

/// A verified attestation.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The key id of the signature that verified.
    pub key_id: String,
    pub statement: Statement,
    /// The subjects matched against what was given (empty when nothing was).
    pub checked: Vec<String>,
    /// What they were checked against, in words.
    pub against: Vec<String>,
}

/// `repro attest verify`: the envelope's signature by `verifier`, then the statement, then its subjects against
/// each of `against`. A refusal is [`ProvError::Unverified`] naming the reason; `path` names the envelope.
pub fn verify(envelope: &[u8], path: &Path, verifier: &dyn Verifier, against: &Against) -> Result<Verified, ProvError> {
    let opened = dsse::open(envelope, path, verifier)?;
    let no = |reason: String| ProvError::Unverified { path: path.into(), reason };
    // The signature verified: the payload is what the key's holder signed; whether it is a statement is next.
    let statement = Statement::parse(&opened.payload).map_err(|e| no(e.to_string()))?;
    let mut checked = Vec::new();
    let mut words = Vec::new();
    if let Some(p) = &against.pack {
        checked.extend(target::check_pack(&statement, p)?.map_err(no)?);
        words.push(format!("the pack {}", p.display()));
    }
    if let Some(d) = &against.run {
        checked.extend(target::check_run(&statement, d)?.map_err(no)?);
        words.push(format!("the run {}", d.display()));
    }
    for f in &against.files {
        checked.push(target::check_file(&statement, f)?.map_err(no)?);
        words.push(f.display().to_string());
    }
    Ok(Verified { key_id: opened.key_id, statement, checked, against: words })
}

/// [`verify`] of an envelope file.
pub fn verify_file(path: &Path, verifier: &dyn Verifier, against: &Against) -> Result<Verified, ProvError> {
    let bytes = dsse::read(path)?;
    verify(&bytes, path, verifier, against)
}

/// What a verified statement claims, in lines for `repro attest verify`.
pub fn describe(v: &Verified) -> Vec<String> {
    let s = &v.statement;
    let mut out = vec![format!("verified   signature by key {}", v.key_id)];
    out.push(format!("statement  {}", s.predicate_type));
    let blobs = s.subject.iter().filter(|x| x.name.starts_with("blobs/")).count();
    let others: Vec<&str> =
        s.subject.iter().filter(|x| !x.name.starts_with("blobs/")).map(|x| x.name.as_str()).collect();
    let mut subj = others.join(", ");
    if blobs > 0 {
        subj.push_str(&format!(
            "{}{blobs} blob{}",
            if others.is_empty() { "" } else { " and " },
            if blobs == 1 { "" } else { "s" }
        ));
    }
    out.push(format!("subjects   {} ({subj})", s.subject.len()));
    if v.against.is_empty() {
        out.push(
            "checked    nothing: the subjects were not compared with any file (give --pack, --run or --file)".into(),
        );
    } else {
        out.push(format!("checked    {} subjects match {}", v.checked.len(), v.against.join(", ")));
    }
    let predicate = serde_json::Value::Object(s.predicate.clone());
    let bad = |e: serde_json::Error| vec![format!("predicate  does not parse as {}: {e}", s.predicate_type)];
    let lines = match s.predicate_type.as_str() {
        predicates::RUNTIME_TRACE => match serde_json::from_value::<predicates::RuntimeTrace>(predicate) {
            Ok(p) => describe_trace(&p),
            Err(e) => bad(e),
        },
        predicates::TEST_RESULT => match serde_json::from_value::<predicates::TestResult>(predicate) {
            Ok(p) => describe_test(&p),
            Err(e) => bad(e),
        },
        predicates::VSA => match serde_json::from_value::<predicates::Vsa>(predicate) {
            Ok(p) => describe_vsa(&p),
            Err(e) => bad(e),
        },
        _ => vec!["predicate  (a type repro does not describe: see --json)".into()],
    };
    out.extend(lines);
    out
}

fn describe_trace(p: &predicates::RuntimeTrace) -> Vec<String> {
    let mut out = vec![format!("event      {}", p.monitored_process.event)];
    out.push(format!("host       {}", p.monitored_process.host_id));
    for proc_ in &p.monitor_log.process {
        out.push(format!("command    {} (exit {})", predicates::shell_line(&proc_.command), proc_.exit_status));
    }
    if let Some(e) = &p.environment {
        out.push(format!("system     {} {}", e.arch, e.kernel_release));
        out.push(format!("inputs     {} files in {} components", p.monitor_log.file_access.len(), e.components.len()));
        for c in &e.components {
            let v = c.version.as_deref().map(|v| format!(" {v}")).unwrap_or_default();
            out.push(format!(
                "  {:<6} {}{v} ({} file{})",
                c.kind,
                c.name,
                c.files,
                if c.files == 1 { "" } else { "s" }
            ));
        }
    } else {
        out.push(format!("inputs     {} files", p.monitor_log.file_access.len()));
    }
    if let Some(tp) = &p.monitor.trace_policy {
        let s: Vec<String> = tp.identity_settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push(format!("settings   {}", s.join(" ")));
    }
    out
}

fn describe_test(p: &predicates::TestResult) -> Vec<String> {
    let result = serde_json::to_value(p.result).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    let mut out = vec![format!("result     {result}")];
    for c in &p.configuration {
        if let Some(cmd) = c.annotations.as_ref().and_then(|a| a.get("command")).and_then(|v| v.as_str()) {
            out.push(format!("command    {cmd}"));
        }
        if let Some(env) = c.annotations.as_ref().and_then(|a| a.get("environment")).and_then(|v| v.as_str()) {
            out.push(format!("environment {env}"));
        }
    }
    for (what, list) in [("passed", &p.passed_tests), ("warned", &p.warned_tests), ("failed", &p.failed_tests)] {
        if !list.is_empty() {
            out.push(format!("{what:<10} {}", list.join(", ")));
        }
    }
    out
}

fn describe_vsa(p: &predicates::Vsa) -> Vec<String> {
    let result = serde_json::to_value(p.verification_result).ok().and_then(|v| v.as_str().map(String::from));
    let mut out = vec![format!("result     {} ({})", result.unwrap_or_default(), p.verified_levels.join(", "))];
    if let Some(r) = &p.reproduction {
        out.push(format!("claim      {}", r.summary));
    }
    out.push(format!("resource   {}", p.resource_uri));
    out.push(format!("verifier   {} at {}", p.verifier.id, p.time_verified));
    out.push(format!("policy     {}", p.policy.uri));
    for a in &p.input_attestations {
        let d = a.digest.get("sha256").map(|d| format!(" sha256:{d}")).unwrap_or_default();
        out.push(format!("evidence   {}{d}", a.name));
    }
    if let Some(r) = &p.repair {
        out.push(format!("repair     {}: iteration {} of {}, agent {}", r.repair, r.iteration, r.iterations, r.agent));
        let d = r.patch.digest.get("sha256").map(|d| format!(" sha256:{d}")).unwrap_or_default();
        out.push(format!(
            "patch      {}{d} (+{} -{} in {} files)",
            r.patch.name, r.lines_added, r.lines_removed, r.files_changed
        ));
        out.push(format!("gates      passed: {}", r.gates_passed.join(", ")));
        if !r.gates_fired.is_empty() {
            out.push(format!("gates      FIRED: {}", r.gates_fired.join(", ")));
        }
        for g in &r.gates_not_applicable {
            out.push(format!("gates      not applicable: {g}"));
        }
        if let Some(w) = &r.weak {
            out.push(format!("accept     {w}"));
        }
        match &r.contract {
            Some(c) if c.passed => out.push("contract   verify passed".into()),
            Some(c) => out.push(format!("contract   verify FAILED: {}", c.failed_steps.join(", "))),
            None => out.push("contract   none (the project has no repro.toml contract)".into()),
        }
    }
    out
}

#[cfg(test)]
mod tests;
