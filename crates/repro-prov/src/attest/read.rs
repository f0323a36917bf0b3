//! A DSSE envelope written by `repro attest` as one side of `repro drift` (and the target of `repro env`): the
//! environment its statement claims, checked against itself.
//!
//! - a runtime trace lists every file: the full environment is rebuilt (each file of `monitorLog.fileAccess` in
//!   the component its annotation names), every component's digest and the identity recomputed;
//! - a VSA (its reproduction extension) and a test result (an annotation of its configuration) carry the
//!   environment's summary: the component-level environment is rebuilt (components without files), its identity
//!   recomputed from the components' kind, name, version and digest, the system and the identity settings.
//!
//! A claimed identity that is not the one recomputed is refused (bad input). With keys, the envelope's signature
//! is checked first ([`super::dsse::open`]: a refusal is [`ProvError::Unverified`], exit 1); without, it is read
//! as [`super::dsse::open_unchecked`] does and the result says the signature was not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use repro_model::manifest::AccessKind;
use repro_model::provenance::{
    AttestationSource, Check, Component, ComponentFile, ComponentKind, EnvSource, Environment, Settings,
    PROVENANCE_FORMAT,
};

use super::dsse;
use super::keys::Verifier;
use super::predicates::{self, EnvironmentSummary, RuntimeTrace, TestResult, Vsa};
use super::statement::Statement;
use crate::ProvError;

/// The environment an envelope claims, with what the envelope is.
#[derive(Debug, Clone)]
pub struct Attested {
    pub environment: Environment,
    pub source: AttestationSource,
    /// The components the summary says were executed or mapped, by (kind, name, digest): a component-level
    /// environment has no files that would say it. Empty for a runtime trace (its files say it).
    pub executed: repro_model::provenance::Executed,
}

/// [`read`] of an envelope file (bounded: [`dsse::MAX_ENVELOPE`]).
pub fn read_file(path: &Path, keys: &[&dyn Verifier]) -> Result<Attested, ProvError> {
    let bytes = dsse::read(path)?;
    read(&bytes, path, keys)
}

/// The environment the envelope `bytes` (named `path` in errors) claims. With `keys`, a signature by one of
/// them must verify first.
pub fn read(bytes: &[u8], path: &Path, keys: &[&dyn Verifier]) -> Result<Attested, ProvError> {
    let (payload, key_id, verified) = if keys.is_empty() {
        let u = dsse::open_unchecked(bytes, path)?;
        (u.payload, u.key_ids.into_iter().next(), false)
    } else {
        let mut reasons = Vec::new();
        let mut opened = None;
        for k in keys {
            match dsse::open(bytes, path, *k) {
                Ok(o) => {
                    opened = Some(o);
                    break;
                }
                Err(ProvError::Unverified { reason, .. }) => reasons.push(reason),
                Err(e) => return Err(e),
            }
        }
        let Some(o) = opened else {
            let reason = if reasons.len() == 1 { reasons.remove(0) } else { reasons.join("; ") };
            return Err(ProvError::Unverified { path: path.into(), reason });
        };
        (o.payload, Some(o.key_id), true)
    };
    let bad = |reason: String| ProvError::Parse { path: path.into(), line: None, reason };
    let statement = Statement::parse(&payload).map_err(|e| bad(e.to_string()))?;
    let predicate = serde_json::Value::Object(statement.predicate.clone());
    let unparsed = |what: &str, e: serde_json::Error| bad(format!("the {what} predicate does not parse: {e}"));
    let source = |predicate: &str, files_listed: bool| AttestationSource {
        predicate: predicate.into(),
        predicate_type: statement.predicate_type.clone(),
        key_id: key_id.clone(),
        verified,
        files_listed,
    };
    match statement.predicate_type.as_str() {
        predicates::RUNTIME_TRACE => {
            let p: RuntimeTrace = serde_json::from_value(predicate).map_err(|e| unparsed("runtime-trace", e))?;
            let Some(summary) = &p.environment else {
                return Err(no_environment(path, "a runtime trace with its environment (reproEnvironment)"));
            };
            let from = resource(path, "monitoredProcess.event", &p.monitored_process.event)?;
            let want_host = format!("urn:repro:environment:{}", summary.identity);
            if p.monitored_process.host_id != want_host {
                return Err(bad(format!(
                    "monitoredProcess.hostID '{}' is not the environment of reproEnvironment ({want_host})",
                    p.monitored_process.host_id.escape_debug()
                )));
            }
            let environment = full(path, &p, summary, from)?;
            Ok(Attested { environment, source: source("runtime-trace", true), executed: BTreeSet::new() })
        }
        predicates::VSA => {
            let p: Vsa = serde_json::from_value(predicate).map_err(|e| unparsed("VSA", e))?;
            let Some(r) = &p.reproduction else {
                return Err(no_environment(
                    path,
                    &format!("a VSA by repro (with its extension {})", predicates::REPRODUCTION_FIELD),
                ));
            };
            let Some(summary) = &r.environment_summary else {
                return Err(no_environment(
                    path,
                    "a VSA with the environment's summary (its target recorded with `repro run --record-inputs`, \
                     attested by this version of repro)",
                ));
            };
            if r.environment.as_ref().is_some_and(|e| *e != summary.identity) {
                return Err(bad(format!(
                    "the VSA names the environment {} but its summary is of {}",
                    r.environment.as_deref().unwrap_or_default(),
                    summary.identity
                )));
            }
            let from = resource(path, "resourceUri", &p.resource_uri)?;
            let (environment, executed) = summarized(path, summary, from)?;
            Ok(Attested { environment, source: source("vsa", false), executed })
        }
        predicates::TEST_RESULT => {
            let p: TestResult = serde_json::from_value(predicate).map_err(|e| unparsed("test-result", e))?;
            let annotated = p.configuration.iter().find_map(|c| {
                let a = c.annotations.as_ref()?;
                Some((a.get(predicates::ENVIRONMENT_ANNOTATION)?, a.get("environment")))
            });
            let Some((summary, identity)) = annotated else {
                return Err(no_environment(
                    path,
                    &format!(
                        "a test result with the environment's summary (configuration annotation {}; its target \
                         recorded with `repro run --record-inputs`, attested by this version of repro)",
                        predicates::ENVIRONMENT_ANNOTATION
                    ),
                ));
            };
            let summary: EnvironmentSummary = serde_json::from_value(summary.clone()).map_err(|e| {
                bad(format!(
                    "configuration annotation {}: not an environment summary: {e}",
                    predicates::ENVIRONMENT_ANNOTATION
                ))
            })?;
            if identity.is_some_and(|i| i.as_str() != Some(summary.identity.as_str())) {
                return Err(bad(format!(
                    "the test result names the environment {} but its summary is of {}",
                    identity.map(|i| i.to_string()).unwrap_or_default(),
                    summary.identity
                )));
            }
            let Some(url) = &p.url else {
                return Err(bad("the test result has no url: not a test result by repro".into()));
            };
            let from = resource(path, "url", url)?;
            let (environment, executed) = summarized(path, &summary, from)?;
            Ok(Attested { environment, source: source("test-result", false), executed })
        }
        other => Err(bad(format!(
            "a statement of predicateType '{}': expected a runtime trace ({}), a test result ({}) or a VSA ({}), as \
             `repro attest` writes",
            other.escape_debug(),
            predicates::RUNTIME_TRACE,
            predicates::TEST_RESULT,
            predicates::VSA
        ))),
    }
}

fn no_environment(path: &Path, expected: &str) -> ProvError {
    ProvError::Parse {
        path: path.into(),
        line: None,
        reason: format!("the attestation records no environment: expected {expected}"),
    }
}

/// The run or pack a statement is about, from its URI (`urn:repro:run:ID`, `urn:repro:pack:blake3:ID`).
fn resource(path: &Path, field: &str, uri: &str) -> Result<EnvSource, ProvError> {
    if let Some(id) = uri.strip_prefix("urn:repro:run:").filter(|id| !id.is_empty()) {
        return Ok(EnvSource::Run { run_id: id.into() });
    }
    if let Some(id) = uri.strip_prefix("urn:repro:pack:blake3:").filter(|id| !id.is_empty()) {
        return Ok(EnvSource::Pack { pack: id.into() });
    }
    Err(ProvError::Parse {
        path: path.into(),
        line: None,
        reason: format!(
            "{field} '{}' is not a run or pack of repro (urn:repro:run:ID or urn:repro:pack:blake3:ID)",
            uri.escape_debug()
        ),
    })
}

fn kind_of(path: &Path, at: &str, kind: &str) -> Result<ComponentKind, ProvError> {
    serde_json::from_value(serde_json::Value::String(kind.into())).map_err(|_| ProvError::Parse {
        path: path.into(),
        line: None,
        reason: format!(
            "{at}: kind '{}' (expected deb, python, cargo, npm, golang or file)",
            kind.chars().take(64).collect::<String>().escape_debug()
        ),
    })
}

fn sort(components: &mut [Component]) {
    components.sort_by(|a, b| (a.kind, &a.name, &a.version).cmp(&(b.kind, &b.name, &b.version)));
}

/// The full environment of a runtime trace: its summary's components with the files of `fileAccess`, checked as
/// an environment document is (each component's digest, each file's digests, the identity).
fn full(path: &Path, p: &RuntimeTrace, s: &EnvironmentSummary, source: EnvSource) -> Result<Environment, ProvError> {
    let bad = |reason: String| ProvError::Parse { path: path.into(), line: None, reason };
    let mut components = Vec::with_capacity(s.components.len());
    let mut by_label: BTreeMap<String, usize> = BTreeMap::new();
    for (i, c) in s.components.iter().enumerate() {
        let kind = kind_of(path, &format!("reproEnvironment.components[{i}]"), &c.kind)?;
        // As predicates::runtime_trace labels each file.
        let label = match &c.version {
            Some(v) => format!("{} {} {v}", kind.name(), c.name),
            None => format!("{} {}", kind.name(), c.name),
        };
        if by_label.insert(label.clone(), i).is_some() {
            return Err(bad(format!(
                "reproEnvironment: two components are labelled '{}': their files cannot be told apart",
                label.escape_debug()
            )));
        }
        components.push(Component {
            kind,
            name: c.name.clone(),
            version: c.version.clone(),
            purl: c.purl.clone(),
            digest: c.digest.clone(),
            // Not in the statements (it enters no digest).
            archive_sha256: None,
            files: Vec::new(),
        });
    }
    for (i, f) in p.monitor_log.file_access.iter().enumerate() {
        let at =
            format!("monitorLog.fileAccess[{i}] ({})", f.name.chars().take(256).collect::<String>().escape_debug());
        let get = |k: &str| f.annotations.as_ref().and_then(|a| a.get(k));
        let missing = |what: &str| bad(format!("{at}: no {what}"));
        let label = get("component").and_then(|v| v.as_str()).ok_or_else(|| missing("annotations.component"))?;
        let &ci = by_label.get(label).ok_or_else(|| {
            bad(format!("{at}: its component '{}' is not one of reproEnvironment.components", label.escape_debug()))
        })?;
        let uses: Vec<AccessKind> = get("uses")
            .map(|v| serde_json::from_value(v.clone()))
            .transpose()
            .map_err(|e| bad(format!("{at}: annotations.uses: {e}")))?
            .ok_or_else(|| missing("annotations.uses"))?;
        let size = get("size").and_then(|v| v.as_u64()).ok_or_else(|| missing("annotations.size (a number)"))?;
        let check: Check = get("check")
            .map(|v| serde_json::from_value(v.clone()))
            .transpose()
            .map_err(|e| bad(format!("{at}: annotations.check: {e}")))?
            .ok_or_else(|| missing("annotations.check"))?;
        let digest = |alg: &str| f.digest.get(alg).cloned().ok_or_else(|| missing(&format!("{alg} digest")));
        components[ci].files.push(ComponentFile {
            path: f.name.clone(),
            uses,
            size,
            sha256: digest("sha256")?,
            blake3: digest("blake3")?,
            sha1: None,
            check,
        });
    }
    for (c, sc) in components.iter_mut().zip(&s.components) {
        c.files.sort();
        if c.files.len() != sc.files {
            return Err(bad(format!(
                "reproEnvironment: {} {} has {} files but fileAccess lists {}",
                c.kind.name(),
                c.name,
                sc.files,
                c.files.len()
            )));
        }
    }
    sort(&mut components);
    let policy = p.monitor.trace_policy.as_ref();
    let identity = policy.map(|t| t.identity_settings.clone()).unwrap_or_else(|| s.identity_settings.clone());
    if !s.identity_settings.is_empty() && s.identity_settings != identity {
        return Err(bad(
            "reproEnvironment.identitySettings are not monitor.tracePolicy.identitySettings: one was changed".into(),
        ));
    }
    let run = policy.map(|t| t.run_settings.clone()).unwrap_or_else(|| s.run_settings.clone());
    let env = Environment {
        format: PROVENANCE_FORMAT,
        repro_version: String::new(),
        source,
        recorded_at: s.recorded_at.clone(),
        arch: s.arch.clone(),
        kernel_release: s.kernel_release.clone(),
        settings: Settings { identity, run },
        identity: s.identity.clone(),
        components,
        unread: Vec::new(),
    };
    crate::env::check(path, env)
}

/// The component-level environment of a summary (components without files), its identity recomputed.
fn summarized(
    path: &Path,
    s: &EnvironmentSummary,
    source: EnvSource,
) -> Result<(Environment, repro_model::provenance::Executed), ProvError> {
    let bad = |reason: String| ProvError::Parse { path: path.into(), line: None, reason };
    let mut components = Vec::with_capacity(s.components.len());
    let mut executed = BTreeSet::new();
    for (i, c) in s.components.iter().enumerate() {
        let kind = kind_of(path, &format!("environmentSummary.components[{i}]"), &c.kind)?;
        if !crate::identity::is_hex(&c.digest, 64) {
            return Err(bad(format!(
                "environmentSummary.components[{i}] ({} {}): its digest is not 64 hex digits",
                kind.name(),
                c.name
            )));
        }
        if c.executed {
            executed.insert((kind, c.name.clone(), c.digest.clone()));
        }
        components.push(Component {
            kind,
            name: c.name.clone(),
            version: c.version.clone(),
            purl: c.purl.clone(),
            digest: c.digest.clone(),
            // Not in the statements (it enters no digest).
            archive_sha256: None,
            files: Vec::new(),
        });
    }
    sort(&mut components);
    let settings = Settings { identity: s.identity_settings.clone(), run: s.run_settings.clone() };
    let want = crate::identity::identity(&s.arch, &s.kernel_release, &settings, &components);
    if s.identity != want {
        return Err(bad(format!(
            "environmentSummary: identity {} is not the identity of its components, system and settings ({want})",
            s.identity
        )));
    }
    let env = Environment {
        format: PROVENANCE_FORMAT,
        repro_version: String::new(),
        source,
        recorded_at: s.recorded_at.clone(),
        arch: s.arch.clone(),
        kernel_release: s.kernel_release.clone(),
        settings,
        identity: want,
        components,
        unread: Vec::new(),
    };
    Ok((env, executed))
}

/// In words, for `repro drift` and `repro env`: "VSA (signature not checked: pass --key) of run ID; …".
/// `about` is what the statement is about (the environment's source, in words).
pub fn describe_source(a: &AttestationSource, about: &str) -> String {
    let what = match a.predicate.as_str() {
        "vsa" => "VSA",
        "runtime-trace" => "runtime trace",
        "test-result" => "test result",
        other => other,
    };
    let sig = match (a.verified, &a.key_id) {
        (true, Some(k)) => format!("signature verified: key {k}"),
        (true, None) => "signature verified".to_string(),
        (false, _) => "signature not checked: pass --key".to_string(),
    };
    let named = match (a.verified, &a.key_id) {
        (false, Some(k)) => format!("; it names key {k}"),
        _ => String::new(),
    };
    let level = if a.files_listed { "" } else { "; components only: a content change names no file" };
    format!("{what} ({sig}) of {about}{named}{level}")
}
