//! The predicates repro signs, as typed serde structs with the field names of their specifications:
//!
//! - `https://in-toto.io/attestation/runtime-trace/v0.1` ([`RuntimeTrace`]): what a run (or a pack's run) used,
//!   as the monitor (repro's supervisor) saw it: every file of its environment with its digests, the command,
//!   the environment's identity (as `monitoredProcess.hostID`) and the sandbox settings (`monitor.tracePolicy`).
//! - `https://in-toto.io/attestation/test-result/v0.1` ([`TestResult`]): a test command's outcome.
//! - `https://slsa.dev/verification_summary/v1` ([`Vsa`]): "this failure (or this fix) reproduced N/N times in
//!   environment X", from the JSON of `repro replay --runs N` or `repro run --verify`; N/N, the identity and the
//!   environment's summary are in the extension field [`REPRODUCTION_FIELD`] (the VSA spec allows extension
//!   fields named by URIs).
//!
//! Reading them back ignores unknown fields (the in-toto parsing rules).

use std::collections::BTreeMap;
use std::path::Path;

use repro_model::manifest::Signature;
use repro_model::provenance::Environment;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use super::statement::ResourceDescriptor;
use super::target::Target;
use crate::ProvError;

pub const RUNTIME_TRACE: &str = "https://in-toto.io/attestation/runtime-trace/v0.1";
pub const TEST_RESULT: &str = "https://in-toto.io/attestation/test-result/v0.1";
pub const VSA: &str = "https://slsa.dev/verification_summary/v1";

/// The base of repro's own URIs (the workspace's `repository`; a unit test keeps them equal).
pub const REPRO_URI: &str = "https://example.invalid/repro";
/// `monitor.type` of a runtime trace: repro's supervisor.
pub const MONITOR_TYPE: &str = "https://example.invalid/repro/supervisor/v1";
/// `monitoredProcess.type`: a command run in repro's sandbox.
pub const RUN_TYPE: &str = "https://example.invalid/repro/run/v1";
/// `verifier.id` of a VSA.
pub const VERIFIER_ID: &str = "https://example.invalid/repro/verifier/v1";
/// The VSA's policy: [`POLICY`].
pub const POLICY_URI: &str = "https://example.invalid/repro/policy/reproduced/v1";
/// The VSA extension field holding N/N, the claim and the environment.
pub const REPRODUCTION_FIELD: &str = "https://example.invalid/repro/vsa/reproduction/v1";

/// The VSA extension field of a fix `repro repair` accepted: the patch, the gates it passed, the contract.
pub const REPAIR_FIELD: &str = "https://example.invalid/repro/vsa/repair/v1";

/// The annotation of a test result's configuration holding the [`EnvironmentSummary`].
pub const ENVIRONMENT_ANNOTATION: &str = "environmentSummary";

/// The replay policy a VSA's `policy.digest` is the sha256 of.
pub const POLICY: &str = "repro reproduction policy v1\n\
A claim about a command holds when every one of the N runs given as evidence shows it.\n\
failure, from `repro replay PACK --runs N`: each run ends with the pack's recorded failure signature (exit \
status, normalized stderr tail, failing tests).\n\
failure, from `repro run --verify --runs N`: the runs are identical and each exits non-zero.\n\
fix, from `repro replay PACK --with PATHS --runs N`: each run exits 0.\n\
fix, from `repro run --verify --runs N`: the runs are identical and each exits 0.\n\
fix, from `repro repair PACK`: as a fix from `repro replay --with`, the patch laid over the pack; and no \
anti-weakening gate fired on the patch, and the contract's verify steps (when the project has a contract) passed.
A run that diverged from the pack's tapes or was stopped as stuck does not count; `run --verify` evidence with a \
source the supervisor could not enforce fails.\n";

/// Which predicate `repro attest` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PredicateKind {
    RuntimeTrace,
    TestResult,
    Vsa,
}

impl std::str::FromStr for PredicateKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "runtime-trace" => Ok(PredicateKind::RuntimeTrace),
            "test-result" => Ok(PredicateKind::TestResult),
            "vsa" => Ok(PredicateKind::Vsa),
            _ => Err("expected runtime-trace, test-result or vsa".into()),
        }
    }
}

impl PredicateKind {
    pub fn type_uri(self) -> &'static str {
        match self {
            PredicateKind::RuntimeTrace => RUNTIME_TRACE,
            PredicateKind::TestResult => TEST_RESULT,
            PredicateKind::Vsa => VSA,
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// runtime-trace v0.1

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeTrace {
    pub monitor: Monitor,
    pub monitored_process: MonitoredProcess,
    pub monitor_log: MonitorLog,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TraceMetadata>,
    /// Extension: the environment the run used (identity, system, components).
    #[serde(default, rename = "reproEnvironment", skip_serializing_if = "Option::is_none")]
    pub environment: Option<EnvironmentSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Monitor {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_source: Option<ResourceDescriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_policy: Option<TracePolicy>,
}

/// repro's trace policy: the sandbox settings of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TracePolicy {
    /// Whether the determinism supervisor ran (it sees every file opened, executed or mapped).
    #[serde(default)]
    pub supervised: bool,
    /// The settings that enter the environment's identity.
    #[serde(default)]
    pub identity_settings: BTreeMap<String, String>,
    /// The run's own variables (seed, epoch, ...), recorded only.
    #[serde(default)]
    pub run_settings: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonitoredProcess {
    /// `urn:repro:environment:<identity>`: the environment the process ran in.
    #[serde(rename = "hostID")]
    pub host_id: String,
    #[serde(rename = "type")]
    pub type_: String,
    /// The run (`urn:repro:run:<id>`) or pack (`urn:repro:pack:blake3:<id>`).
    pub event: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MonitorLog {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process: Vec<ProcessEntry>,
    /// Always empty from repro: the sandbox has no network (a pack's network is a replayed tape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<serde_json::Value>,
    /// Every file of the environment the guest used, with its digests and (annotations) how it was used, its
    /// component and whether it matches its package's record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_access: Vec<ResourceDescriptor>,
}

/// repro's process entry (the format of `monitorLog.process` is the monitor's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessEntry {
    pub command: Vec<String>,
    #[serde(default)]
    pub cwd: String,
    pub exit_status: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_started_on: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_finished_on: Option<String>,
}

/// The environment in brief: its identity, what enters it (the system, the identity settings, each component's
/// kind, name, version and digest) and each component's purl, file count and whether it was executed or mapped.
/// A runtime trace lists each component's files in `fileAccess`; a VSA and a test result carry only this, enough
/// for `repro drift` at the component level (the identity is recomputed from it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentSummary {
    pub identity: String,
    pub arch: String,
    pub kernel_release: String,
    pub recorded_at: String,
    /// The sandbox settings that enter the identity (absent in statements of an older repro).
    #[serde(default)]
    pub identity_settings: BTreeMap<String, String>,
    /// The run's own variables, recorded only.
    #[serde(default)]
    pub run_settings: BTreeMap<String, String>,
    #[serde(default)]
    pub components: Vec<ComponentSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentSummary {
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purl: Option<String>,
    pub digest: String,
    pub files: usize,
    /// Whether any of its used files was executed or mapped (a program, a library).
    #[serde(default)]
    pub executed: bool,
}

/// The summary of an environment, as the predicates carry it.
pub fn environment_summary(env: &Environment) -> EnvironmentSummary {
    EnvironmentSummary {
        identity: env.identity.clone(),
        arch: env.arch.clone(),
        kernel_release: env.kernel_release.clone(),
        recorded_at: env.recorded_at.clone(),
        identity_settings: env.settings.identity.clone(),
        run_settings: env.settings.run.clone(),
        components: env
            .components
            .iter()
            .map(|c| ComponentSummary {
                kind: c.kind.name().into(),
                name: c.name.clone(),
                version: c.version.clone(),
                purl: c.purl.clone(),
                digest: c.digest.clone(),
                files: c.files.len(),
                executed: c.executed(),
            })
            .collect(),
    }
}

/// `urn:repro:environment:<identity>`.
pub fn environment_uri(env: &Environment) -> String {
    format!("urn:repro:environment:{}", env.identity)
}

/// The runtime trace of a target in its environment.
pub fn runtime_trace(target: &Target, env: &Environment) -> RuntimeTrace {
    let (argv, cwd, exit_status) = target.command();
    let mut file_access = Vec::new();
    for c in &env.components {
        let component = match &c.version {
            Some(v) => format!("{} {} {v}", c.kind.name(), c.name),
            None => format!("{} {}", c.kind.name(), c.name),
        };
        for f in &c.files {
            let mut rd = ResourceDescriptor::file(f.path.clone(), f.sha256.clone(), f.blake3.clone());
            let mut a = serde_json::Map::new();
            a.insert("uses".into(), serde_json::to_value(&f.uses).unwrap_or_default());
            a.insert("size".into(), f.size.into());
            a.insert("component".into(), component.clone().into());
            if let Some(p) = &c.purl {
                a.insert("purl".into(), p.clone().into());
            }
            a.insert("check".into(), serde_json::to_value(f.check).unwrap_or_default());
            rd.annotations = Some(a);
            file_access.push(rd);
        }
    }
    let (supervised, started, finished) = match target {
        Target::Pack(p) => (p.manifest.determinism.supervised, Some(env.recorded_at.clone()), None),
        Target::Run(r) => {
            let finished =
                time::OffsetDateTime::parse(&r.record.started_at, &time::format_description::well_known::Rfc3339)
                    .ok()
                    .map(|t| t + time::Duration::milliseconds(r.record.duration_ms.min(i64::MAX as u64) as i64))
                    .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok());
            (r.record.settings.supervised, Some(r.record.started_at.clone()), finished)
        }
    };
    RuntimeTrace {
        monitor: Monitor {
            type_: MONITOR_TYPE.into(),
            config_source: None,
            trace_policy: Some(TracePolicy {
                supervised,
                identity_settings: env.settings.identity.clone(),
                run_settings: env.settings.run.clone(),
            }),
        },
        monitored_process: MonitoredProcess {
            host_id: environment_uri(env),
            type_: RUN_TYPE.into(),
            event: target.uri(),
        },
        monitor_log: MonitorLog {
            process: vec![ProcessEntry { command: argv.to_vec(), cwd: cwd.to_string(), exit_status }],
            network: Vec::new(),
            file_access,
        },
        metadata: Some(TraceMetadata { build_started_on: started, build_finished_on: finished }),
        environment: Some(environment_summary(env)),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// test-result v0.1

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TestOutcome {
    Passed,
    Warned,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestResult {
    pub result: TestOutcome,
    pub configuration: Vec<ResourceDescriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default)]
    pub passed_tests: Vec<String>,
    #[serde(default)]
    pub warned_tests: Vec<String>,
    #[serde(default)]
    pub failed_tests: Vec<String>,
}

/// A command line as a shell would read it back.
pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The test result of a target: PASSED when the command exited 0 (WARNED when the supervisor could not enforce
/// everything, so the pass may not repeat), else FAILED with the failing tests the output names (or the command
/// itself).
pub fn test_result(target: &Target, env: Option<&Environment>) -> TestResult {
    let (argv, cwd, exit_status) = target.command();
    let command = shell_line(argv);
    let (config, signature, not_enforced) = match target {
        Target::Pack(p) => (
            ResourceDescriptor {
                name: "manifest.json".into(),
                digest: BTreeMap::from([("blake3".into(), p.id.clone())]),
                media_type: "application/json".into(),
                ..Default::default()
            },
            &p.manifest.signature,
            false,
        ),
        Target::Run(r) => {
            let run_json = r.subjects.iter().find(|s| s.name == "run.json").cloned().unwrap_or_default();
            (
                ResourceDescriptor { media_type: "application/json".into(), ..run_json },
                &r.signature,
                !r.record.determinism.not_enforced.is_empty(),
            )
        }
    };
    let mut a = serde_json::Map::new();
    a.insert("command".into(), command.clone().into());
    a.insert("cwd".into(), cwd.into());
    a.insert("exitStatus".into(), exit_status.into());
    if let Some(env) = env {
        a.insert("environment".into(), env.identity.clone().into());
        // The summary in an annotation: the test-result schema has no field for it (and is parsed strictly).
        a.insert(ENVIRONMENT_ANNOTATION.into(), serde_json::to_value(environment_summary(env)).unwrap_or_default());
    }
    let config = ResourceDescriptor { annotations: Some(a), ..config };
    let result = match (exit_status, not_enforced) {
        (0, false) => TestOutcome::Passed,
        (0, true) => TestOutcome::Warned,
        _ => TestOutcome::Failed,
    };
    let failed =
        if signature.failing_tests.is_empty() { vec![command.clone()] } else { signature.failing_tests.clone() };
    TestResult {
        result,
        configuration: vec![config],
        url: Some(target.uri()),
        passed_tests: if result == TestOutcome::Passed { vec![command.clone()] } else { Vec::new() },
        warned_tests: if result == TestOutcome::Warned { vec![command] } else { Vec::new() },
        failed_tests: if result == TestOutcome::Failed { failed } else { Vec::new() },
    }
}

// ---------------------------------------------------------------------------------------------------------------
// SLSA VSA v1

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum VerificationResult {
    Passed,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifierId {
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vsa {
    pub verifier: VerifierId,
    pub time_verified: String,
    pub resource_uri: String,
    pub policy: ResourceDescriptor,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_attestations: Vec<ResourceDescriptor>,
    pub verification_result: VerificationResult,
    pub verified_levels: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dependency_levels: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slsa_version: Option<String>,
    #[serde(
        default,
        rename = "https://example.invalid/repro/vsa/reproduction/v1",
        skip_serializing_if = "Option::is_none"
    )]
    pub reproduction: Option<Reproduction>,
    #[serde(default, rename = "https://example.invalid/repro/vsa/repair/v1", skip_serializing_if = "Option::is_none")]
    pub repair: Option<RepairEvidence>,
}

/// The VSA extension of a fix `repro repair` accepted ([`REPAIR_FIELD`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairEvidence {
    /// The repair's id (its directory under `STATE/repairs/`).
    pub repair: String,
    /// The agent's command line.
    pub agent: String,
    /// The iteration whose change is the fix, of how many run.
    pub iteration: u32,
    pub iterations: u32,
    /// The patch (also a subject of the statement), by its digests.
    pub patch: ResourceDescriptor,
    pub lines_added: u64,
    pub lines_removed: u64,
    pub files_changed: u64,
    /// The anti-weakening gates evaluated on the patch, each by name, and those that fired (a fix has none).
    pub gates_passed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates_fired: Vec<String>,
    /// The gates that could not judge the patch (nothing to count, no per-test results), each with why: they
    /// are in neither list above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates_not_applicable: Vec<String>,
    /// Why the accept is weak (fewer than two checks reading the tests' results applied), when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weak: Option<String>,
    /// The contract's verify on the fixed tree, when the project has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<RepairContractEvidence>,
}

/// The contract's verify of a repair's fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairContractEvidence {
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_steps: Vec<String>,
}

/// What the claim is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Claim {
    /// The failure reproduces.
    Failure,
    /// The fix holds: the command passes.
    Fix,
}

impl std::str::FromStr for Claim {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "failure" => Ok(Claim::Failure),
            "fix" => Ok(Claim::Fix),
            _ => Err("expected failure or fix".into()),
        }
    }
}

/// Which report the evidence came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvidenceKind {
    /// `repro replay PACK --runs N --json`.
    Replay,
    /// `repro run --verify --runs N --json`.
    Verify,
}

/// The VSA extension: N/N, the claim, the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reproduction {
    pub claim: Claim,
    pub evidence: EvidenceKind,
    pub runs: u32,
    /// How many of the runs showed the claim.
    pub reproduced: u32,
    /// The environment's identity, when the target recorded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The environment in brief (components, system, identity settings), when the target recorded one: what
    /// `repro drift` compares at the component level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_summary: Option<EnvironmentSummary>,
    /// The pack's recorded failure signature (replay evidence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
    pub exit_statuses: Vec<i32>,
    pub run_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_enforced: Vec<String>,
    /// In words: "the failure (exit 3; stderr: boom) reproduced 3/3 times in environment blake3:…".
    pub summary: String,
}

/// One run of the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceRun {
    pub id: String,
    pub exit_status: i32,
    /// Replay: its signature is the recorded one; verify: it is identical to the first run.
    pub same: bool,
    /// Replay: it diverged from the tapes or was stopped as stuck.
    pub trouble: Option<String>,
}

/// A replay or verify report, read.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub kind: EvidenceKind,
    pub recorded: Option<Signature>,
    pub runs: Vec<EvidenceRun>,
    pub not_enforced: Vec<String>,
    pub interrupted: bool,
    /// The report file, by its digests (the VSA's input attestation).
    pub report: ResourceDescriptor,
}

#[derive(Deserialize)]
struct ReplayDoc {
    recorded: Signature,
    runs: Vec<ReplayRunDoc>,
    reproduced: u32,
    #[serde(default)]
    interrupted: Option<i32>,
}

#[derive(Deserialize)]
struct ReplayRunDoc {
    exit_status: i32,
    differences: Vec<String>,
    run_dir: std::path::PathBuf,
    #[serde(default)]
    diverged: Option<String>,
    #[serde(default)]
    stuck: Option<String>,
}

#[derive(Deserialize)]
struct VerifyDoc {
    identical: bool,
    runs: Vec<VerifyRunDoc>,
    differences: Vec<serde_json::Value>,
    #[serde(default)]
    not_enforced: Vec<String>,
}

#[derive(Deserialize)]
struct VerifyRunDoc {
    id: String,
    exit_status: i32,
}

/// The largest report read.
const MAX_REPORT: u64 = 64 << 20;

/// Reads the JSON of `repro replay --runs N --json` or `repro run --verify --json`.
pub fn read_evidence(path: &Path) -> Result<Evidence, ProvError> {
    let bytes = super::read_bounded(path, MAX_REPORT, "replay or verify report")?;
    let bad = |reason: String| ProvError::Parse { path: path.into(), line: None, reason };
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|source| ProvError::Json {
        path: path.into(),
        what: "report (repro replay --json, repro run --verify --json)",
        source,
    })?;
    let report = ResourceDescriptor {
        name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        digest: BTreeMap::from([
            ("blake3".into(), blake3::hash(&bytes).to_hex().to_string()),
            ("sha256".into(), crate::identity::hex(&sha2::Sha256::digest(&bytes))),
        ]),
        media_type: "application/json".into(),
        ..Default::default()
    };
    let json_err = |source| ProvError::Json { path: path.into(), what: "report", source };
    if value.get("reproduced").is_some() {
        let doc: ReplayDoc = serde_json::from_value(value).map_err(json_err)?;
        let runs: Vec<EvidenceRun> = doc
            .runs
            .iter()
            .map(|r| EvidenceRun {
                id: r.run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                exit_status: r.exit_status,
                same: r.differences.is_empty(),
                trouble: r
                    .diverged
                    .clone()
                    .map(|d| format!("diverged: {d}"))
                    .or(r.stuck.clone().map(|s| format!("stuck: {s}"))),
            })
            .collect();
        let counted = runs.iter().filter(|r| r.same && r.trouble.is_none()).count() as u32;
        if counted != doc.reproduced {
            return Err(bad(format!(
                "it says reproduced {} but {counted} of its runs match the recorded signature: an edited report",
                doc.reproduced
            )));
        }
        Ok(Evidence {
            kind: EvidenceKind::Replay,
            recorded: Some(doc.recorded),
            runs,
            not_enforced: Vec::new(),
            interrupted: doc.interrupted.is_some(),
            report,
        })
    } else if value.get("identical").is_some() {
        let doc: VerifyDoc = serde_json::from_value(value).map_err(json_err)?;
        let differing: std::collections::BTreeSet<u64> =
            doc.differences.iter().filter_map(|d| d.get("run").and_then(|r| r.as_u64())).collect();
        if doc.identical != differing.is_empty() {
            return Err(bad("its `identical` disagrees with its differences: an edited report".into()));
        }
        let runs = doc
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| EvidenceRun {
                id: r.id.clone(),
                exit_status: r.exit_status,
                // The differences name runs by number (the first is 1, which the others are compared with).
                same: !differing.contains(&(i as u64 + 1)),
                trouble: None,
            })
            .collect();
        Ok(Evidence {
            kind: EvidenceKind::Verify,
            recorded: None,
            runs,
            not_enforced: doc.not_enforced,
            interrupted: false,
            report,
        })
    } else {
        Err(bad("not a report of `repro replay --json` (no `reproduced`) nor of `repro run --verify --json` (no `identical`)".into()))
    }
}

/// The claim, N/N and whether it holds under [`POLICY`]. `claim` defaults to a failure for replay evidence and
/// to what the first run did for verify evidence.
pub fn reproduction(evidence: &Evidence, claim: Option<Claim>, env: Option<&Environment>) -> (Reproduction, bool) {
    let n = evidence.runs.len() as u32;
    let claim = claim.unwrap_or(match evidence.kind {
        EvidenceKind::Replay => Claim::Failure,
        EvidenceKind::Verify => {
            if evidence.runs.first().is_some_and(|r| r.exit_status == 0) {
                Claim::Fix
            } else {
                Claim::Failure
            }
        }
    });
    let shows = |r: &EvidenceRun| {
        r.trouble.is_none()
            && match (evidence.kind, claim) {
                (EvidenceKind::Replay, Claim::Failure) => r.same,
                (EvidenceKind::Replay, Claim::Fix) => r.exit_status == 0,
                (EvidenceKind::Verify, Claim::Failure) => r.same && r.exit_status != 0,
                (EvidenceKind::Verify, Claim::Fix) => r.same && r.exit_status == 0,
            }
    };
    let k = evidence.runs.iter().filter(|r| shows(r)).count() as u32;
    let passed = n > 0 && k == n && !evidence.interrupted && evidence.not_enforced.is_empty();
    let place = match env {
        Some(e) => format!("in environment {}", e.identity),
        None => "in an environment that was not recorded (repro run --record-inputs records it)".into(),
    };
    let summary = match claim {
        Claim::Failure => {
            let what = match &evidence.recorded {
                Some(s) => format!("the failure ({})", s.summary()),
                None => format!("the failure (exit {})", evidence.runs.first().map_or(0, |r| r.exit_status)),
            };
            format!("{what} reproduced {k}/{n} times {place}")
        }
        Claim::Fix => format!("the fix held: {k}/{n} runs passed {place}"),
    };
    let summary = if evidence.not_enforced.is_empty() {
        summary
    } else {
        format!("{summary}; not enforced: {}", evidence.not_enforced.join(", "))
    };
    (
        Reproduction {
            claim,
            evidence: evidence.kind,
            runs: n,
            reproduced: k,
            environment: env.map(|e| e.identity.clone()),
            environment_summary: env.map(environment_summary),
            signature: evidence.recorded.clone(),
            exit_statuses: evidence.runs.iter().map(|r| r.exit_status).collect(),
            run_ids: evidence.runs.iter().map(|r| r.id.clone()).collect(),
            not_enforced: evidence.not_enforced.clone(),
            summary,
        },
        passed,
    )
}

/// The VSA of a target from its evidence, verified at `time_verified` (RFC 3339).
pub fn vsa(
    target: &Target,
    env: Option<&Environment>,
    evidence: &Evidence,
    claim: Option<Claim>,
    time_verified: String,
) -> Vsa {
    let (reproduction, passed) = reproduction(evidence, claim, env);
    let level = match reproduction.claim {
        Claim::Failure => "REPRO_FAILURE_REPRODUCED",
        Claim::Fix => "REPRO_FIX_VERIFIED",
    };
    Vsa {
        verifier: VerifierId { id: VERIFIER_ID.into() },
        time_verified,
        resource_uri: target.uri(),
        policy: ResourceDescriptor {
            uri: POLICY_URI.into(),
            digest: BTreeMap::from([("sha256".into(), crate::identity::hex(&sha2::Sha256::digest(POLICY.as_bytes())))]),
            ..Default::default()
        },
        input_attestations: vec![evidence.report.clone()],
        verification_result: if passed { VerificationResult::Passed } else { VerificationResult::Failed },
        verified_levels: vec![if passed { level.to_string() } else { "FAILED".to_string() }],
        dependency_levels: BTreeMap::new(),
        slsa_version: Some("1.0".into()),
        reproduction: Some(reproduction),
        repair: None,
    }
}

/// The VSA of a fix `repro repair` accepted: [`vsa`] of the replays with the patch laid over the pack (a fix
/// claim), with the repair's evidence. It passes only when the replays do, no gate fired and the contract (if
/// any) passed; the verified level is then `REPRO_REPAIR_VERIFIED`.
pub fn repair_vsa(
    target: &Target,
    env: Option<&Environment>,
    evidence: &Evidence,
    repair: RepairEvidence,
    time_verified: String,
) -> Vsa {
    let mut v = vsa(target, env, evidence, Some(Claim::Fix), time_verified);
    let held = v.verification_result == VerificationResult::Passed
        && repair.gates_fired.is_empty()
        && repair.contract.as_ref().is_none_or(|c| c.passed);
    if let Some(r) = v.reproduction.as_mut() {
        let contract = match &repair.contract {
            Some(c) if c.passed => "; the contract's verify passed".to_string(),
            Some(c) => format!("; the contract's verify FAILED ({})", c.failed_steps.join(", ")),
            None => String::new(),
        };
        let gates = if repair.gates_fired.is_empty() {
            let na = match repair.gates_not_applicable.len() {
                0 => String::new(),
                n => format!(", {n} not applicable"),
            };
            let weak = if repair.weak.is_some() { " (a weak accept)" } else { "" };
            format!("{} gates passed{na}{weak}", repair.gates_passed.len())
        } else {
            format!("gates FIRED: {}", repair.gates_fired.join(", "))
        };
        r.summary = format!(
            "{}; the patch (+{} -{} in {} files, iteration {} of {}): {gates}{contract}",
            r.summary,
            repair.lines_added,
            repair.lines_removed,
            repair.files_changed,
            repair.iteration,
            repair.iterations
        );
    }
    v.verification_result = if held { VerificationResult::Passed } else { VerificationResult::Failed };
    v.verified_levels = vec![if held { "REPRO_REPAIR_VERIFIED" } else { "FAILED" }.to_string()];
    v.repair = Some(repair);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repro_uris_are_the_workspace_repository() {
        let workspace = include_str!("../../../../Cargo.toml");
        assert!(workspace.contains(&format!("repository = \"{REPRO_URI}\"")), "the workspace's repository changed");
        for u in [MONITOR_TYPE, RUN_TYPE, VERIFIER_ID, POLICY_URI, REPRODUCTION_FIELD, REPAIR_FIELD] {
            assert!(u.starts_with(&format!("{REPRO_URI}/")), "{u}");
        }
        // The serde name of the extension field is the constant.
        let v = Vsa {
            verifier: VerifierId { id: "x".into() },
            time_verified: String::new(),
            resource_uri: String::new(),
            policy: ResourceDescriptor::default(),
            input_attestations: Vec::new(),
            verification_result: VerificationResult::Passed,
            verified_levels: Vec::new(),
            dependency_levels: BTreeMap::new(),
            slsa_version: None,
            reproduction: Some(Reproduction {
                claim: Claim::Fix,
                evidence: EvidenceKind::Verify,
                runs: 1,
                reproduced: 1,
                environment: None,
                environment_summary: None,
                signature: None,
                exit_statuses: vec![0],
                run_ids: vec!["r".into()],
                not_enforced: Vec::new(),
                summary: String::new(),
            }),
            repair: Some(RepairEvidence {
                repair: "r".into(),
                agent: "a".into(),
                iteration: 1,
                iterations: 1,
                patch: ResourceDescriptor::default(),
                lines_added: 1,
                lines_removed: 1,
                files_changed: 1,
                gates_passed: vec!["protected-path".into()],
                gates_fired: vec![],
                gates_not_applicable: vec![],
                weak: None,
                contract: None,
            }),
        };
        let j = serde_json::to_value(&v).unwrap();
        assert!(j.get(REPRODUCTION_FIELD).is_some(), "{j}");
        assert!(j.get(REPAIR_FIELD).is_some(), "{j}");
        assert_eq!(j["verificationResult"], "PASSED");
    }

    #[test]
    fn shell_lines_quote_what_needs_it() {
        let a = |v: &[&str]| shell_line(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(a(&["sh", "-c", "exit 3"]), "sh -c 'exit 3'");
        assert_eq!(a(&["echo", "it's", ""]), "echo 'it'\\''s' ''");
        assert_eq!(a(&["python3", "-m", "pytest", "tests/x.py::t"]), "python3 -m pytest tests/x.py::t");
    }

    fn run(id: &str, exit: i32, same: bool) -> EvidenceRun {
        EvidenceRun { id: id.into(), exit_status: exit, same, trouble: None }
    }

    fn evidence(kind: EvidenceKind, runs: Vec<EvidenceRun>) -> Evidence {
        Evidence {
            kind,
            recorded: None,
            runs,
            not_enforced: Vec::new(),
            interrupted: false,
            report: ResourceDescriptor::default(),
        }
    }

    #[test]
    fn n_of_n_under_the_policy() {
        let e = evidence(EvidenceKind::Replay, vec![run("a", 3, true), run("b", 3, true), run("c", 3, true)]);
        let (r, ok) = reproduction(&e, None, None);
        assert!(ok);
        assert_eq!((r.claim, r.runs, r.reproduced), (Claim::Failure, 3, 3));
        assert!(r.summary.contains("reproduced 3/3 times"), "{}", r.summary);
        let e = evidence(EvidenceKind::Replay, vec![run("a", 3, true), run("b", 0, false)]);
        let (r, ok) = reproduction(&e, None, None);
        assert!(!ok);
        assert_eq!(r.reproduced, 1);
        // A replay with the fix laid over: every run passes.
        let e = evidence(EvidenceKind::Replay, vec![run("a", 0, false), run("b", 0, false)]);
        let (r, ok) = reproduction(&e, Some(Claim::Fix), None);
        assert!(ok && r.summary.contains("fix held: 2/2"), "{}", r.summary);
        // run --verify: the claim follows the exit status; a difference or a source not enforced fails.
        let e = evidence(EvidenceKind::Verify, vec![run("a", 0, true), run("b", 0, true)]);
        assert_eq!(reproduction(&e, None, None).0.claim, Claim::Fix);
        assert!(reproduction(&e, None, None).1);
        assert!(!reproduction(&e, Some(Claim::Failure), None).1);
        let mut e = evidence(EvidenceKind::Verify, vec![run("a", 1, true), run("b", 1, false)]);
        assert_eq!(reproduction(&e, None, None).0.claim, Claim::Failure);
        assert!(!reproduction(&e, None, None).1);
        e.runs[1].same = true;
        e.not_enforced = vec!["rdtsc".into()];
        assert!(!reproduction(&e, None, None).1);
        // No runs: nothing was shown.
        assert!(!reproduction(&evidence(EvidenceKind::Replay, vec![]), None, None).1);
    }
}
