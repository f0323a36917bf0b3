//! The tool table: each tool's typed input (its JSON schema, derived with schemars), the `repro` command line it
//! becomes, and how the server reads its progress. Inputs reject unknown fields, and no input has a field for a
//! bind, a variable, a resource limit, the network, the state directory or an output path: those are the server's
//! ([`Settings`]). Every value goes to the child as one `--flag=VALUE` word (a value cannot become a flag), and
//! the guest's command is an argv array after `--`, never a shell line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::config::{ProjectConfig, Settings};
use crate::error::InputError;

/// The scheduler's policy (`--sched`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Sched {
    Random,
    RoundRobin,
    Pct,
}

impl Sched {
    fn as_str(self) -> &'static str {
        match self {
            Sched::Random => "random",
            Sched::RoundRobin => "round-robin",
            Sched::Pct => "pct",
        }
    }
}

/// Where the scheduler decides (`--sched-points`): `io` also before reads, writes and signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SchedPoints {
    Blocking,
    Io,
}

impl SchedPoints {
    fn as_str(self) -> &'static str {
        match self {
            SchedPoints::Blocking => "blocking",
            SchedPoints::Io => "io",
        }
    }
}

/// What capture does with credentials it finds (`--secrets`; `keep` is the command line's only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Secrets {
    Exclude,
    Redact,
}

/// The attestation's predicate (`--predicate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Predicate {
    RuntimeTrace,
    TestResult,
    Vsa,
}

/// What a VSA claims (`--claim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Claim {
    Failure,
    Fix,
}

/// The run options every sandboxed-command tool shares, as one struct per tool (serde cannot combine
/// `flatten` with `deny_unknown_fields`).
macro_rules! sandbox_input {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// The command and its arguments as an argv array, e.g. ["sh", "-c", "echo hi"] (run directly, never
            /// through a host shell).
            pub command: Vec<String>,
            /// The run's epoch: Unix seconds or RFC 3339 (default as `repro run`: repro.toml, SOURCE_DATE_EPOCH,
            /// the git HEAD's commit time, 2025-01-01T00:00:00Z).
            #[serde(default)]
            pub epoch: Option<String>,
            /// Seed of the guest's entropy stream.
            #[serde(default)]
            pub seed: Option<u64>,
            /// CPUs the guest sees (1 to 256).
            #[serde(default)]
            pub cpus: Option<u32>,
            /// Logical nanoseconds each clock read advances the guest's clock; 0 freezes time between events.
            #[serde(default)]
            pub clock_step_ns: Option<u64>,
            /// The guest's host name.
            #[serde(default)]
            pub hostname: Option<String>,
            /// Directory listing order: sorted, reversed or shuffled:SEED.
            #[serde(default)]
            pub dir_order: Option<String>,
            /// How the scheduler picks the next guest thread.
            #[serde(default)]
            pub sched: Option<Sched>,
            /// Seed of the scheduler's choices.
            #[serde(default)]
            pub sched_seed: Option<u64>,
            /// Where the scheduler decides: blocking (default) or io (also before reads, writes and signals).
            #[serde(default)]
            pub sched_points: Option<SchedPoints>,
            /// The deadlock watchdog: 2s, 500ms, 1m; 0 turns it off.
            #[serde(default)]
            pub stuck_after: Option<String>,
            /// The spin-loop watchdog: 2s, 500ms.
            #[serde(default)]
            pub spin_limit: Option<String>,
            /// Stop the call (and every process it started) after this many seconds.
            #[serde(default)]
            pub timeout_secs: Option<u64>,
            $($(#[$fm])* #[serde(default)] pub $f: $t,)*
        }

        impl $name {
            fn push_sandbox(&self, tool: &'static str, argv: &mut Argv) -> Result<(), InputError> {
                check_command(tool, &self.command)?;
                if let Some(c) = self.cpus {
                    if !(1..=256).contains(&c) {
                        return Err(field(tool, "cpus", "expected 1 to 256"));
                    }
                }
                argv.opt("epoch", self.epoch.as_deref());
                argv.opt("seed", self.seed);
                argv.opt("cpus", self.cpus);
                argv.opt("clock-step-ns", self.clock_step_ns);
                argv.opt("hostname", self.hostname.as_deref());
                argv.opt("dir-order", self.dir_order.as_deref());
                argv.opt("sched", self.sched.map(Sched::as_str));
                argv.opt("sched-seed", self.sched_seed);
                argv.opt("sched-points", self.sched_points.map(SchedPoints::as_str));
                argv.opt("stuck-after", self.stuck_after.as_deref());
                argv.opt("spin-limit", self.spin_limit.as_deref());
                Ok(())
            }
        }
    };
}

sandbox_input!(
    /// `run`: one sandboxed run (`repro run --json`).
    RunInput {
        /// The hermetic boundary only, without the determinism supervisor.
        no_supervisor: Option<bool>,
        /// Record the files the guest used outside the working directory (for the `env`, `diff_runs` and
        /// `attest` tools).
        record_inputs: Option<bool>,
    }
);

sandbox_input!(
    /// `verify`: N runs from identical starting states, compared (`repro run --verify --json`).
    VerifyInput {
        /// How many runs (2 to 20, default 2).
        runs: Option<u32>,
        /// The hermetic boundary only, without the determinism supervisor.
        no_supervisor: Option<bool>,
        /// Record the files the first run used (as `run`'s `record_inputs`).
        record_inputs: Option<bool>,
    }
);

sandbox_input!(
    /// `capture`: a run that, when it fails, writes a reproducer pack into the state directory.
    CaptureInput {
        /// Write a pack even when the command succeeds.
        always: Option<bool>,
        /// Credentials found in packed files and output: exclude such files (default) or redact.
        secrets: Option<Secrets>,
        /// Keep the blobs in the local store and only refer to them from the pack.
        thin: Option<bool>,
    }
);

/// `replay`: run a pack from its own root, N times, and check the failure signature.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayInput {
    /// The pack file (absolute, or relative to the server's working directory).
    pub pack: String,
    /// How many runs (1 to 100, default 1). More than one sends progress notifications.
    #[serde(default)]
    pub runs: Option<u32>,
    /// Replay with another seed (a variation: the recorded signature is then not expected).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Replay at another epoch.
    #[serde(default)]
    pub epoch: Option<String>,
    /// Replay with another CPU count.
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Replay with another clock step.
    #[serde(default)]
    pub clock_step_ns: Option<u64>,
    /// Replay with another directory order.
    #[serde(default)]
    pub dir_order: Option<String>,
    /// Replay with another host name.
    #[serde(default)]
    pub hostname: Option<String>,
    /// Replay with another scheduling policy.
    #[serde(default)]
    pub sched: Option<Sched>,
    /// Replay with another scheduler seed.
    #[serde(default)]
    pub sched_seed: Option<u64>,
    /// Replay with other scheduling points: blocking or io.
    #[serde(default)]
    pub sched_points: Option<SchedPoints>,
    /// The deadlock watchdog.
    #[serde(default)]
    pub stuck_after: Option<String>,
    /// The spin-loop watchdog.
    #[serde(default)]
    pub spin_limit: Option<String>,
    /// Stop the call after this many seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// `inspect`: summarize a pack.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InspectInput {
    /// The pack file.
    pub pack: String,
}

/// `hunt`: run a command under many configurations until it fails.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HuntInput {
    /// The command and its arguments as an argv array.
    pub command: Vec<String>,
    /// Dimensions to vary: seed, epoch, dir-order, env, cpus, hostname, clock-step, schedule, or all (default).
    #[serde(default)]
    pub vary: Option<String>,
    /// Seeds to try: a count (0..N) or a range A..B.
    #[serde(default)]
    pub seeds: Option<String>,
    /// Scheduler seeds to try: a count or a range.
    #[serde(default)]
    pub sched_seeds: Option<String>,
    /// Dates to try besides the calendar edges: FROM..TO.
    #[serde(default)]
    pub epoch_range: Option<String>,
    /// The baseline epoch.
    #[serde(default)]
    pub epoch: Option<String>,
    /// Parallel runs (at most the server's --max-jobs).
    #[serde(default)]
    pub jobs: Option<usize>,
    /// Stop after this many runs (default 200).
    #[serde(default)]
    pub max_runs: Option<usize>,
    /// Stop after this long: 90s, 5m, 1h (default 10m).
    #[serde(default)]
    pub time_budget: Option<String>,
    /// Keep going after the first failure.
    #[serde(default)]
    pub keep_going: Option<bool>,
    /// Capture the first failing configuration as a pack (written into the state directory).
    #[serde(default)]
    pub capture: Option<bool>,
    /// Stop the call (and every run) after this many seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// `explain`: say which input decides the outcome of a command or a pack.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainInput {
    /// A pack file (a `.repro`); give this or `command`.
    #[serde(default)]
    pub pack: Option<String>,
    /// The command and its arguments as an argv array; give this or `pack`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Dimensions to vary (default all).
    #[serde(default)]
    pub vary: Option<String>,
    /// Seeds to try: a count or a range.
    #[serde(default)]
    pub seeds: Option<String>,
    /// The baseline epoch.
    #[serde(default)]
    pub epoch: Option<String>,
    /// Control runs with everything pinned (default 3).
    #[serde(default)]
    pub control: Option<usize>,
    /// Values each dimension gets before it may be dropped.
    #[serde(default)]
    pub patience: Option<usize>,
    /// Parallel runs (at most the server's --max-jobs).
    #[serde(default)]
    pub jobs: Option<usize>,
    /// Stop the call after this many seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// `shrink`: the smallest pack that still fails the same way (written into the state directory).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShrinkInput {
    /// The pack to shrink.
    pub pack: String,
    /// Replays per candidate that must all reproduce the signature (default 2).
    #[serde(default)]
    pub confirm: Option<u32>,
    /// Stop shrinking after this long (default 10m; the best pack so far is written).
    #[serde(default)]
    pub time_budget: Option<String>,
    /// Stop the call after this many seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// `diff_runs`: what differs between the inputs two runs or packs used (`repro drift`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffRunsInput {
    /// A run id (or unique prefix, or `last`), a pack, or an environment document.
    pub a: String,
    /// The other side.
    pub b: String,
}

/// `env`: the environment a run (recorded with inputs) or a pack used.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvInput {
    /// A run id (or unique prefix, or `last`), a pack, or an environment document.
    pub target: String,
}

/// `attest`: a signed in-toto attestation about a pack or run, with the server's --attest-key.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttestInput {
    /// A pack, or a run id (or unique prefix, or `last`).
    pub target: String,
    /// runtime-trace (default), test-result or vsa.
    #[serde(default)]
    pub predicate: Option<Predicate>,
    /// For a VSA: the JSON report of a replay or a verify, as a file.
    #[serde(default)]
    pub report: Option<String>,
    /// For a VSA: failure or fix.
    #[serde(default)]
    pub claim: Option<Claim>,
}

/// A parsed tool call.
#[derive(Debug, Clone)]
pub enum Call {
    Run(RunInput),
    Verify(VerifyInput),
    Capture(CaptureInput),
    Replay(ReplayInput),
    Inspect(InspectInput),
    Hunt(HuntInput),
    Explain(ExplainInput),
    Shrink(ShrinkInput),
    DiffRuns(DiffRunsInput),
    Env(EnvInput),
    Attest(AttestInput),
}

/// How a call's progress is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressSource {
    /// No progress notifications.
    None,
    /// `[hunt] N runs, ...` lines on the child's stderr; `total` is --max-runs.
    HuntLines { total: u64 },
    /// `[explain] ...` lines: each one is a step.
    ExplainLines,
    /// New run directories under the state directory (replay runs, shrink candidates).
    NewRuns { total: Option<u64> },
}

/// What the server runs for a call.
#[derive(Debug, Clone)]
pub struct Plan {
    pub tool: &'static str,
    /// Arguments of the `repro` binary (the subcommand first).
    pub argv: Vec<String>,
    pub progress: ProgressSource,
    pub timeout: Duration,
}

/// The tool names, in the order `tools/list` gives them.
pub const TOOL_NAMES: [&str; 11] =
    ["run", "verify", "capture", "replay", "inspect", "hunt", "explain", "shrink", "diff_runs", "env", "attest"];

/// Default and largest `timeout_secs`.
const DEFAULT_TIMEOUT: u64 = 900;
const DEFAULT_LONG_TIMEOUT: u64 = 3600;
const MAX_TIMEOUT: u64 = 6 * 3600;

/// The tool table, for `tools/list`.
pub fn tools() -> Vec<Tool> {
    fn tool<T: JsonSchema + 'static>(
        name: &'static str,
        title: &str,
        description: &'static str,
        read_only: bool,
    ) -> Tool {
        Tool::new(name, description, input_schema::<T>())
            .with_title(title)
            .with_annotations(ToolAnnotations::new().read_only(read_only).destructive(false).open_world(false))
    }
    vec![
        tool::<RunInput>(
            "run",
            "Run a command in the sandbox",
            "Run a command (an argv array) inside repro's hermetic, deterministic sandbox and record the run. \
             Returns the run record (exit status, outcome, settings, changes), the run id and its resources \
             repro://runs/<id>/stdout, /stderr, /changes.",
            false,
        ),
        tool::<VerifyInput>(
            "verify",
            "Check a command is deterministic",
            "Run a command N times from identical starting states and compare exit status, output and changed \
             files. `identical` says whether they match; `differences` what differs.",
            false,
        ),
        tool::<CaptureInput>(
            "capture",
            "Capture a failure as a reproducer pack",
            "Run a command like `run` and, when it fails, write a reproducer pack of its inputs into the state \
             directory. Returns the pack path, its failure signature and the run.",
            false,
        ),
        tool::<ReplayInput>(
            "replay",
            "Replay a reproducer pack",
            "Run a pack from its own root `runs` times and check the recorded failure signature. Sends progress \
             notifications per run; cancellable.",
            false,
        ),
        tool::<InspectInput>(
            "inspect",
            "Summarize a pack",
            "Summarize a reproducer pack (command, files, signature).",
            true,
        ),
        tool::<HuntInput>(
            "hunt",
            "Hunt a flaky failure",
            "Run a command under many configurations (seeds, dates, orders, environments, schedules) until it \
             fails. Sends progress notifications; cancellation stops every run.",
            false,
        ),
        tool::<ExplainInput>(
            "explain",
            "Explain what decides an outcome",
            "Vary one input at a time to say which one decides a command's or pack's outcome. Sends progress \
             notifications; cancellable.",
            false,
        ),
        tool::<ShrinkInput>(
            "shrink",
            "Shrink a pack",
            "Delta-debug a pack to the smallest inputs that still fail the same way; writes the smaller pack into \
             the state directory. Sends progress notifications; cancellable.",
            false,
        ),
        tool::<DiffRunsInput>(
            "diff_runs",
            "Diff the inputs of two runs",
            "What differs between the inputs two runs, packs or environment documents used (`same` is false \
             when they differ).",
            true,
        ),
        tool::<EnvInput>(
            "env",
            "Environment of a run or pack",
            "The environment (components, files, identity) a run recorded with inputs, or a pack, used.",
            true,
        ),
        tool::<AttestInput>(
            "attest",
            "Sign an attestation",
            "Sign an in-toto attestation (DSSE envelope) about a pack or run with the key the server was started \
             with (--attest-key).",
            false,
        ),
    ]
}

/// The input schema of `T` as MCP wants it (a JSON Schema object).
fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    // schemars output of these plain structs is always an object schema; rmcp's check only fails otherwise.
    rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|_| rmcp::handler::server::common::schema_for_type::<T>())
}

fn decode<T: DeserializeOwned>(tool: &'static str, args: JsonObject) -> Result<T, InputError> {
    serde_json::from_value(serde_json::Value::Object(args))
        .map_err(|e| InputError::Invalid { tool, message: e.to_string() })
}

/// Parses a call's arguments into its typed input.
pub fn parse(name: &str, args: JsonObject) -> Result<Call, InputError> {
    Ok(match name {
        "run" => Call::Run(decode("run", args)?),
        "verify" => Call::Verify(decode("verify", args)?),
        "capture" => Call::Capture(decode("capture", args)?),
        "replay" => Call::Replay(decode("replay", args)?),
        "inspect" => Call::Inspect(decode("inspect", args)?),
        "hunt" => Call::Hunt(decode("hunt", args)?),
        "explain" => Call::Explain(decode("explain", args)?),
        "shrink" => Call::Shrink(decode("shrink", args)?),
        "diff_runs" => Call::DiffRuns(decode("diff_runs", args)?),
        "env" => Call::Env(decode("env", args)?),
        "attest" => Call::Attest(decode("attest", args)?),
        other => return Err(InputError::UnknownTool(other.to_string())),
    })
}

/// A `repro` command line under construction.
#[derive(Debug, Default)]
struct Argv(Vec<String>);

impl Argv {
    fn new(words: &[&str]) -> Self {
        Argv(words.iter().map(|w| w.to_string()).collect())
    }
    fn flag(&mut self, name: &str, on: Option<bool>) {
        if on == Some(true) {
            self.0.push(format!("--{name}"));
        }
    }
    /// `--name=VALUE`: one word, so that a value starting with `-` stays a value.
    fn opt(&mut self, name: &str, value: Option<impl std::fmt::Display>) {
        if let Some(v) = value {
            self.0.push(format!("--{name}={v}"));
        }
    }
    fn path(&mut self, name: &str, p: &Path) {
        self.0.push(format!("--{name}={}", p.display()));
    }
    /// `--` and the positional words after it.
    fn rest(&mut self, words: impl IntoIterator<Item = String>) {
        self.0.push("--".into());
        self.0.extend(words);
    }
}

fn field(tool: &'static str, field: &'static str, message: impl Into<String>) -> InputError {
    InputError::Field { tool, field, message: message.into() }
}

fn check_command(tool: &'static str, command: &[String]) -> Result<(), InputError> {
    if command.is_empty() || command[0].is_empty() {
        return Err(field(tool, "command", "expected a non-empty argv array, e.g. [\"sh\", \"-c\", \"echo hi\"]"));
    }
    if command.iter().any(|w| w.contains('\0')) {
        return Err(field(tool, "command", "an argument contains a NUL byte"));
    }
    Ok(())
}

fn timeout(tool: &'static str, secs: Option<u64>, default: u64) -> Result<Duration, InputError> {
    match secs {
        Some(0) => Err(field(tool, "timeout_secs", "expected at least 1")),
        Some(s) if s > MAX_TIMEOUT => Err(field(tool, "timeout_secs", format!("at most {MAX_TIMEOUT}"))),
        s => Ok(Duration::from_secs(s.unwrap_or(default))),
    }
}

/// A file the call names: absolute, or relative to the server's working directory; it must exist.
fn existing_file(tool: &'static str, name: &'static str, cwd: &Path, value: &str) -> Result<PathBuf, InputError> {
    if value.is_empty() || value.contains('\0') {
        return Err(field(tool, name, "expected a file name"));
    }
    let p = cwd.join(value);
    match std::fs::metadata(&p) {
        Ok(m) if m.is_file() => std::fs::canonicalize(&p).map_err(|e| field(tool, name, format!("{value}: {e}"))),
        Ok(_) => Err(field(tool, name, format!("{value}: not a regular file"))),
        Err(e) => Err(field(tool, name, format!("{value}: {e}"))),
    }
}

/// A run (id, unique prefix, `last`) or a file: a file that exists is passed by its absolute path; anything else
/// must look like a run id.
fn target(tool: &'static str, name: &'static str, cwd: &Path, value: &str) -> Result<String, InputError> {
    if let Ok(p) = existing_file(tool, name, cwd, value) {
        return Ok(p.display().to_string());
    }
    if run_id_ok(value) {
        return Ok(value.to_string());
    }
    Err(field(tool, name, format!("'{value}': neither an existing file nor a run id")))
}

/// A run id as repro makes them (`20261129-095859.306-a1bd68`), a prefix of one, or `last`.
pub fn run_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with(['.', '-'])
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// The server's limits for commands that run a sandbox directly (run, verify, capture).
fn push_limits(argv: &mut Argv, s: &Settings) {
    argv.path("state-dir", &s.state_dir);
    for b in &s.binds {
        argv.opt("bind", Some(b));
    }
    for e in &s.env {
        argv.opt("env", Some(e));
    }
    argv.opt("memory", s.memory.as_deref());
    argv.opt("disk", s.disk.as_deref());
    match &s.config {
        ProjectConfig::Discover => {}
        ProjectConfig::File(f) => argv.path("config", f),
        ProjectConfig::Ignore => argv.0.push("--no-config".into()),
    }
}

/// The server's limits for hunt and explain (their every run gets them).
fn push_search_limits(argv: &mut Argv, s: &Settings) {
    argv.path("state-dir", &s.state_dir);
    argv.opt("memory", s.memory.as_deref());
    for b in &s.binds {
        argv.opt("bind", Some(b));
    }
    for e in &s.env {
        argv.opt("env", Some(e));
    }
}

fn jobs(tool: &'static str, asked: Option<usize>, s: &Settings) -> Result<usize, InputError> {
    match asked {
        Some(0) => Err(field(tool, "jobs", "expected at least 1")),
        Some(j) if j > s.max_jobs => {
            Err(field(tool, "jobs", format!("at most {} (the server's --max-jobs)", s.max_jobs)))
        }
        Some(j) => Ok(j),
        None => Ok(s.max_jobs),
    }
}

/// A file name in the state directory's `packs/` for a pack the call writes.
fn pack_out(s: &Settings, stem: &str) -> PathBuf {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    s.state_dir.join("packs").join(format!("{stem}-{stamp}-{}.repro", std::process::id()))
}

/// The command line of a call, under the server's settings.
pub fn plan(call: &Call, s: &Settings) -> Result<Plan, InputError> {
    let cwd = s.cwd.as_path();
    let plan = match call {
        Call::Run(i) => {
            let mut a = Argv::new(&["run", "--json"]);
            push_limits(&mut a, s);
            a.flag("no-supervisor", i.no_supervisor);
            a.flag("record-inputs", i.record_inputs);
            i.push_sandbox("run", &mut a)?;
            a.rest(i.command.iter().cloned());
            Plan {
                tool: "run",
                argv: a.0,
                progress: ProgressSource::None,
                timeout: timeout("run", i.timeout_secs, DEFAULT_TIMEOUT)?,
            }
        }
        Call::Verify(i) => {
            let runs = i.runs.unwrap_or(2);
            if !(2..=20).contains(&runs) {
                return Err(field("verify", "runs", "expected 2 to 20"));
            }
            let mut a = Argv::new(&["run", "--verify", "--json"]);
            a.opt("runs", Some(runs));
            push_limits(&mut a, s);
            a.flag("no-supervisor", i.no_supervisor);
            a.flag("record-inputs", i.record_inputs);
            i.push_sandbox("verify", &mut a)?;
            a.rest(i.command.iter().cloned());
            Plan {
                tool: "verify",
                argv: a.0,
                progress: ProgressSource::NewRuns { total: Some(runs.into()) },
                timeout: timeout("verify", i.timeout_secs, DEFAULT_TIMEOUT)?,
            }
        }
        Call::Capture(i) => {
            let mut a = Argv::new(&["capture", "--json"]);
            push_limits(&mut a, s);
            a.flag("always", i.always);
            a.flag("thin", i.thin);
            a.opt(
                "secrets",
                Some(match i.secrets.unwrap_or(Secrets::Exclude) {
                    Secrets::Exclude => "exclude",
                    Secrets::Redact => "redact",
                }),
            );
            i.push_sandbox("capture", &mut a)?;
            a.rest(i.command.iter().cloned());
            Plan {
                tool: "capture",
                argv: a.0,
                progress: ProgressSource::None,
                timeout: timeout("capture", i.timeout_secs, DEFAULT_TIMEOUT)?,
            }
        }
        Call::Replay(i) => {
            let pack = existing_file("replay", "pack", cwd, &i.pack)?;
            let runs = i.runs.unwrap_or(1);
            if !(1..=100).contains(&runs) {
                return Err(field("replay", "runs", "expected 1 to 100"));
            }
            let mut a = Argv::new(&["replay", "--json"]);
            a.path("state-dir", &s.state_dir);
            a.opt("runs", Some(runs));
            a.opt("seed", i.seed);
            a.opt("epoch", i.epoch.as_deref());
            a.opt("cpus", i.cpus);
            a.opt("clock-step-ns", i.clock_step_ns);
            a.opt("dir-order", i.dir_order.as_deref());
            a.opt("hostname", i.hostname.as_deref());
            a.opt("sched", i.sched.map(Sched::as_str));
            a.opt("sched-seed", i.sched_seed);
            a.opt("sched-points", i.sched_points.map(SchedPoints::as_str));
            a.opt("stuck-after", i.stuck_after.as_deref());
            a.opt("spin-limit", i.spin_limit.as_deref());
            a.rest([pack.display().to_string()]);
            Plan {
                tool: "replay",
                argv: a.0,
                progress: ProgressSource::NewRuns { total: Some(runs.into()) },
                timeout: timeout("replay", i.timeout_secs, DEFAULT_TIMEOUT)?,
            }
        }
        Call::Inspect(i) => {
            let pack = existing_file("inspect", "pack", cwd, &i.pack)?;
            let mut a = Argv::new(&["inspect", "--json"]);
            a.rest([pack.display().to_string()]);
            Plan { tool: "inspect", argv: a.0, progress: ProgressSource::None, timeout: Duration::from_secs(300) }
        }
        Call::Hunt(i) => {
            check_command("hunt", &i.command)?;
            let max_runs = i.max_runs.unwrap_or(200);
            if max_runs == 0 {
                return Err(field("hunt", "max_runs", "expected at least 1"));
            }
            let mut a = Argv::new(&["hunt", "--json"]);
            push_search_limits(&mut a, s);
            a.opt("vary", i.vary.as_deref());
            a.opt("seeds", i.seeds.as_deref());
            a.opt("sched-seeds", i.sched_seeds.as_deref());
            a.opt("epoch-range", i.epoch_range.as_deref());
            a.opt("epoch", i.epoch.as_deref());
            a.opt("jobs", Some(jobs("hunt", i.jobs, s)?));
            a.opt("max-runs", Some(max_runs));
            a.opt("time-budget", i.time_budget.as_deref());
            a.flag("keep-going", i.keep_going);
            if i.capture == Some(true) {
                a.0.push("--capture".into());
                a.path("output", &pack_out(s, "hunt"));
            }
            a.rest(i.command.iter().cloned());
            Plan {
                tool: "hunt",
                argv: a.0,
                progress: ProgressSource::HuntLines { total: max_runs as u64 },
                timeout: timeout("hunt", i.timeout_secs, DEFAULT_LONG_TIMEOUT)?,
            }
        }
        Call::Explain(i) => {
            let rest = match (&i.pack, &i.command) {
                (Some(p), None) => {
                    let pack = existing_file("explain", "pack", cwd, p)?;
                    if pack.extension().and_then(|e| e.to_str()) != Some("repro") {
                        return Err(field("explain", "pack", "a pack's name ends with .repro"));
                    }
                    vec![pack.display().to_string()]
                }
                (None, Some(c)) => {
                    check_command("explain", c)?;
                    c.clone()
                }
                _ => return Err(field("explain", "pack", "give exactly one of `pack` and `command`")),
            };
            let mut a = Argv::new(&["explain", "--json"]);
            push_search_limits(&mut a, s);
            a.opt("vary", i.vary.as_deref());
            a.opt("seeds", i.seeds.as_deref());
            a.opt("epoch", i.epoch.as_deref());
            a.opt("control", i.control);
            a.opt("patience", i.patience);
            a.opt("jobs", Some(jobs("explain", i.jobs, s)?));
            a.rest(rest);
            Plan {
                tool: "explain",
                argv: a.0,
                progress: ProgressSource::ExplainLines,
                timeout: timeout("explain", i.timeout_secs, DEFAULT_LONG_TIMEOUT)?,
            }
        }
        Call::Shrink(i) => {
            let pack = existing_file("shrink", "pack", cwd, &i.pack)?;
            let stem = pack.file_stem().and_then(|s| s.to_str()).unwrap_or("pack").to_string();
            let mut a = Argv::new(&["shrink", "--json"]);
            a.opt("confirm", i.confirm);
            a.opt("time-budget", i.time_budget.as_deref());
            a.path("output", &pack_out(s, &format!("{stem}.min")));
            a.rest([pack.display().to_string()]);
            Plan {
                tool: "shrink",
                argv: a.0,
                progress: ProgressSource::NewRuns { total: None },
                timeout: timeout("shrink", i.timeout_secs, DEFAULT_LONG_TIMEOUT)?,
            }
        }
        Call::DiffRuns(i) => {
            let mut a = Argv::new(&["drift", "--json"]);
            a.path("state-dir", &s.state_dir);
            a.rest([target("diff_runs", "a", cwd, &i.a)?, target("diff_runs", "b", cwd, &i.b)?]);
            Plan { tool: "diff_runs", argv: a.0, progress: ProgressSource::None, timeout: Duration::from_secs(300) }
        }
        Call::Env(i) => {
            let mut a = Argv::new(&["env", "--json"]);
            a.path("state-dir", &s.state_dir);
            a.rest([target("env", "target", cwd, &i.target)?]);
            Plan { tool: "env", argv: a.0, progress: ProgressSource::None, timeout: Duration::from_secs(300) }
        }
        Call::Attest(i) => {
            let Some(key) = &s.attest_key else {
                return Err(InputError::Refused {
                    tool: "attest",
                    message: "the server was started without --attest-key: it signs nothing".into(),
                });
            };
            let mut a = Argv::new(&["attest"]);
            a.path("key", key);
            a.path("state-dir", &s.state_dir);
            a.opt(
                "predicate",
                Some(match i.predicate.unwrap_or(Predicate::RuntimeTrace) {
                    Predicate::RuntimeTrace => "runtime-trace",
                    Predicate::TestResult => "test-result",
                    Predicate::Vsa => "vsa",
                }),
            );
            if let Some(r) = &i.report {
                a.path("report", &existing_file("attest", "report", cwd, r)?);
            }
            a.opt(
                "claim",
                i.claim.map(|c| match c {
                    Claim::Failure => "failure",
                    Claim::Fix => "fix",
                }),
            );
            a.rest([target("attest", "target", cwd, &i.target)?]);
            Plan { tool: "attest", argv: a.0, progress: ProgressSource::None, timeout: Duration::from_secs(300) }
        }
    };
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            repro: "/usr/bin/repro".into(),
            cwd: std::env::temp_dir(),
            state_dir: "/state".into(),
            binds: vec!["/opt/tool".into()],
            env: vec!["CI".into()],
            memory: Some("1G".into()),
            disk: None,
            config: ProjectConfig::Ignore,
            attest_key: None,
            max_jobs: 4,
        }
    }

    fn args(v: serde_json::Value) -> JsonObject {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn run_argv_has_the_servers_limits_and_the_command_after_dashes() {
        let call = parse("run", args(serde_json::json!({"command": ["sh", "-c", "echo hi"], "seed": 3}))).unwrap();
        let p = plan(&call, &settings()).unwrap();
        assert_eq!(
            p.argv,
            [
                "run",
                "--json",
                "--state-dir=/state",
                "--bind=/opt/tool",
                "--env=CI",
                "--memory=1G",
                "--no-config",
                "--seed=3",
                "--",
                "sh",
                "-c",
                "echo hi"
            ]
        );
    }

    #[test]
    fn sched_points_pass_as_the_flag_and_other_words_are_refused() {
        let call = parse("run", args(serde_json::json!({"command": ["true"], "sched_points": "io"}))).unwrap();
        assert!(plan(&call, &settings()).unwrap().argv.contains(&"--sched-points=io".to_string()));
        assert!(parse("run", args(serde_json::json!({"command": ["true"], "sched_points": "all"}))).is_err());
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        for (tool, extra) in [("run", "bind"), ("run", "env"), ("capture", "network"), ("hunt", "state_dir")] {
            let e = parse(tool, args(serde_json::json!({"command": ["true"], extra: "x"}))).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(&format!("unknown field `{extra}`")), "{tool}: {msg}");
        }
        assert!(matches!(parse("nope", JsonObject::new()), Err(InputError::UnknownTool(_))));
    }

    #[test]
    fn a_value_cannot_become_a_flag() {
        let call = parse("run", args(serde_json::json!({"command": ["true"], "epoch": "--bind=/"}))).unwrap();
        let p = plan(&call, &settings()).unwrap();
        assert!(p.argv.contains(&"--epoch=--bind=/".to_string()));
        assert!(!p.argv.contains(&"--bind=/".to_string()));
    }

    #[test]
    fn bad_values_are_input_errors() {
        let bad = [
            ("run", serde_json::json!({"command": []})),
            ("verify", serde_json::json!({"command": ["true"], "runs": 1})),
            ("hunt", serde_json::json!({"command": ["true"], "jobs": 99})),
            ("replay", serde_json::json!({"pack": "/no/such.repro"})),
            ("env", serde_json::json!({"target": "../x y"})),
            ("attest", serde_json::json!({"target": "last"})),
            ("run", serde_json::json!({"command": ["true"], "timeout_secs": 0})),
        ];
        for (tool, v) in bad {
            let call = parse(tool, args(v.clone())).unwrap();
            assert!(plan(&call, &settings()).is_err(), "{tool} {v}");
        }
    }

    #[test]
    fn every_tool_has_an_object_schema_without_extra_properties() {
        let tools = tools();
        assert_eq!(tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>(), TOOL_NAMES);
        for t in tools {
            assert_eq!(t.input_schema.get("type"), Some(&serde_json::json!("object")), "{}", t.name);
            assert_eq!(t.input_schema.get("additionalProperties"), Some(&serde_json::json!(false)), "{}", t.name);
        }
    }

    #[test]
    fn run_ids() {
        assert!(run_id_ok("20261129-095859.306-a1bd68"));
        assert!(run_id_ok("last"));
        for bad in ["", "..", "-x", "a/b", ".hidden", "a b"] {
            assert!(!run_id_ok(bad), "{bad}");
        }
    }
}
