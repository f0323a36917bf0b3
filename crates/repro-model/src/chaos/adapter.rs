//! The adapter (`kind: adapter`): binds the harness to a system through a driver (process, docker,
//! kubernetes), with targets, operations, observers, signals and checks.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::at::At;
use super::duration::Dur;
use super::experiment::{Fault, ShellCheck};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Driver {
    /// Instances are local processes, each in its own process group.
    Process,
    /// Targets are Docker containers driven through the Docker Engine API.
    Docker,
    /// Targets are pods; loads and validates, and says n/a when no cluster is reachable.
    Kubernetes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SignalScope {
    /// Signals go to the target's whole process group.
    #[default]
    Group,
    /// Signals go to the target's main process only (its children are left to notice).
    Process,
}

/// An adapter: binds the harness to a system.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Adapter {
    #[serde(rename = "apiVersion")]
    pub api_version: At<String>,
    pub kind: At<String>,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub driver: Driver,
    /// Variables exported to every hook, workload and check (values may use `${VAR}`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of free 127.0.0.1 ports to pick per run, exported as `CHAOS_PORT_<NAME>`.
    #[serde(default)]
    pub ports: Vec<At<String>>,
    #[serde(default)]
    pub instance: InstanceHooks,
    #[serde(default)]
    pub targets: Vec<Target>,
    #[serde(default)]
    pub operations: Vec<AdapterOperation>,
    #[serde(default)]
    pub observers: Observers,
    #[serde(default)]
    pub signals: Vec<SignalSpec>,
    #[serde(default)]
    pub preflight: Vec<ShellCheck>,
    /// Post-run checks, polled until they pass or time out.
    #[serde(default)]
    pub checks: Vec<PollCheck>,
    /// Files and directories next to the adapter (relative paths) its hooks use: copied into the run
    /// directory (`inputs/adapter/`) with every `$CHAOS_ADAPTER_DIR/<path>` its hooks name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<At<String>>,
}

/// Extra hooks around the built-in process lifecycle of an instance.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct InstanceHooks {
    #[serde(default)]
    pub create: Option<String>,
    #[serde(default)]
    pub collect: Option<String>,
    #[serde(default)]
    pub delete: Option<String>,
    /// Docker driver: run each instance in its own container of this image instead of on the host.
    #[serde(default)]
    pub container: Option<InstanceContainer>,
}

/// The container an instance runs in (docker driver): the script runs as `<shell> run.sh` with the instance's
/// variables, its output directory as working directory, the run directory mounted at the same path, and the
/// host's network (targets are on 127.0.0.1, as for host instances).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct InstanceContainer {
    pub image: At<String>,
    /// The shell that runs the workload script inside (default `sh`; `bash` if the image has it).
    #[serde(default = "default_shell")]
    pub shell: String,
}

fn default_shell() -> String {
    "sh".into()
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Health {
    pub run: String,
    #[serde(default)]
    pub timeout: Option<Dur>,
    #[serde(default)]
    pub interval: Option<Dur>,
}

/// A long-running process the adapter starts: a server under test.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Target {
    pub name: At<String>,
    #[serde(default)]
    pub description: String,
    /// Run once before the first start (e.g. initdb).
    #[serde(default)]
    pub setup: Option<String>,
    /// Runs the server in the foreground (use `exec`); the harness owns its process group. Process driver only.
    #[serde(default)]
    pub start: String,
    /// The container of a `docker` target.
    #[serde(default)]
    pub container: Option<ContainerSpec>,
    /// The pods of a `kubernetes` target.
    #[serde(default)]
    pub pod: Option<PodSpec>,
    #[serde(default)]
    pub health: Option<Health>,
    /// Prints the server's version for the manifest.
    #[serde(default)]
    pub version: Option<String>,
    /// Adapter ports (names from `ports:`) this target serves through the harness's TCP proxy, so network
    /// faults can act on them: the server binds `CHAOS_LISTEN_PORT_<NAME>`, and every client's
    /// `CHAOS_PORT_<NAME>` is its own listener of the proxy (see docs/chaos.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxy: Vec<At<String>>,
    /// The built-in faults this target supports (default: all).
    #[serde(default)]
    pub faults: Option<Vec<Fault>>,
    #[serde(default)]
    pub signal_scope: SignalScope,
    /// How long a graceful stop may take before SIGKILL (default 10s).
    #[serde(default)]
    pub stop_timeout: Option<Dur>,
}

/// A container the `docker` driver creates (never pulls: the image must be present locally).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ContainerSpec {
    /// A local image: `name:tag` (a preflight warning: not pinned), `name@sha256:...` or `sha256:<id>`.
    pub image: At<String>,
    /// The command (default: the image's).
    #[serde(default)]
    pub command: Vec<String>,
    /// Environment of the container (`${VAR}` is expanded).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Adapter port name -> container port: published on 127.0.0.1:`CHAOS_PORT_<NAME>`.
    #[serde(default)]
    pub ports: BTreeMap<String, At<u16>>,
}

/// The pods of a `kubernetes` target.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PodSpec {
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// A label selector naming the target's pods, e.g. `app=redis`.
    pub selector: At<String>,
    /// The deployment or statefulset that owns them (`deployment/redis`), for `outage` (scale to 0 and back).
    #[serde(default)]
    pub owner: Option<At<String>>,
    /// The container `freeze` and signals exec into (default: the pod's first).
    #[serde(default)]
    pub container: Option<String>,
}

fn default_namespace() -> String {
    "default".into()
}

/// An operation defined by the adapter: a hook and its undo.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct AdapterOperation {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub run: String,
    #[serde(default)]
    pub undo: Option<String>,
    #[serde(default)]
    pub timeout: Option<Dur>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Observers {
    #[serde(default)]
    pub metrics: Vec<Scrape>,
    #[serde(default)]
    pub watchers: Vec<WatcherSpec>,
}

/// A Prometheus endpoint scraped during the run.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Scrape {
    /// Names the files `system/metrics/<target>.jsonl` and `<target>.types.json`.
    pub target: String,
    /// `http://127.0.0.1:<port>/<path>`; `${VAR}` is expanded.
    pub url: String,
    #[serde(default)]
    pub interval: Option<Dur>,
}

/// Any command; every line it prints is timestamped and saved.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct WatcherSpec {
    pub name: String,
    pub run: String,
}

/// A named regex over a watcher's lines, for `wait: {signal: ...}`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SignalSpec {
    pub name: String,
    pub watcher: String,
    pub pattern: At<String>,
}

/// A post-run adapter check: polled until it passes or `timeout` ends.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PollCheck {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub run: String,
    #[serde(default)]
    pub timeout: Option<Dur>,
    #[serde(default)]
    pub interval: Option<Dur>,
}
