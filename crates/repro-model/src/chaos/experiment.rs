//! The experiment (`kind` absent, `apiVersion: repro.dev/chaos/v1`): workloads, operations, checks,
//! expectations. The flow is in [`super::flow`], the adapter in [`super::adapter`].
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use super::at::At;
use super::duration::Dur;
use super::flow::FlowNode;
use super::limits::count_limited;
use super::network::NetworkSpec;
use super::stress::StressSpec;

/// The only accepted `apiVersion`.
pub const API_VERSION: &str = "repro.dev/chaos/v1";

fn default_adapter() -> String {
    "process".to_string()
}
fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

fn instances_limited<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    count_limited(d, "instances")
}

/// A fault-injection experiment.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Experiment {
    #[serde(rename = "apiVersion")]
    pub api_version: At<String>,
    pub id: At<String>,
    pub version: u32,
    pub title: String,
    pub hypothesis: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_adapter")]
    pub default_adapter: String,
    pub timeout: Dur,
    #[serde(default)]
    pub issues: Vec<String>,
    #[serde(default)]
    pub workloads: Vec<Workload>,
    #[serde(default)]
    pub operations: Vec<Operation>,
    #[serde(default)]
    pub flow: Option<FlowNode>,
    #[serde(default)]
    pub checks: Vec<Check>,
    #[serde(default)]
    pub metrics: Vec<MetricRef>,
    #[serde(default)]
    pub expectations: Vec<Expectation>,
    #[serde(default)]
    pub preflight: Vec<ShellCheck>,
    /// Files and directories next to the experiment (relative paths) its scripts use: copied into the run
    /// directory (`inputs/experiment/`) with every `$CHAOS_EXPERIMENT_DIR/<path>` its scripts name, so the run
    /// directory alone can run it again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<At<String>>,
    /// The steady-state hypothesis: probes checked before the flow (a failure there is ERROR: the system was
    /// not steady to begin with) and after it (a failure there fails the run like a check).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steady_state: Vec<Probe>,
}

/// One probe of the steady-state hypothesis: a script, and what its result must be.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Probe {
    pub name: At<String>,
    #[serde(default)]
    pub description: String,
    /// A bash script; cwd = the run directory.
    pub run: String,
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// Without one, exit 0 is within tolerance; with one, exit 0 and the trimmed output must match it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<At<Tolerance>>,
}

/// What a probe's output must be: a number within `range: [lo, hi]`, exactly `equals`, or matching `regex`
/// (exactly one of them).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Tolerance {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    Shell,
}

/// Something to run, `instances` times, each instance named `<name>-<i>`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Workload {
    pub name: At<String>,
    #[serde(default)]
    pub description: String,
    pub kind: WorkloadKind,
    #[serde(default = "one", deserialize_with = "instances_limited")]
    pub instances: u32,
    #[serde(default)]
    pub timeout: Option<Dur>,
    pub run: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub checks: Vec<WorkloadCheck>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadCheckKind {
    ExitCode,
    Shell,
}

/// A check run once per instance of its workload.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct WorkloadCheck {
    pub name: At<String>,
    #[serde(default)]
    pub description: String,
    pub kind: At<WorkloadCheckKind>,
    /// `exit-code`: the expected exit code (default 0).
    #[serde(default)]
    pub equals: Option<i32>,
    /// `shell`: the script; exit 0 means pass.
    #[serde(default)]
    pub run: Option<String>,
    #[serde(default)]
    pub timeout: Option<Dur>,
}

/// Which of a target's candidates an operation hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Select {
    One,
    All,
    Count(u32),
    /// Exactly these instances (those of them that exist when it runs): what `repro chaos shrink` pins.
    Names(Vec<String>),
}

impl<'de> Deserialize<'de> for Select {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXP: &str = "`one`, `all`, a positive count or a list of instance names";
        impl<'de> Visitor<'de> for V {
            type Value = Select;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(EXP)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Select, E> {
                match u32::try_from(v) {
                    Ok(n) if n > 0 => Ok(Select::Count(n)),
                    _ => Err(E::custom(format!("expected {EXP}, got {v}"))),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Select, E> {
                match u64::try_from(v) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!("expected {EXP}, got {v}"))),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Select, E> {
                match v {
                    "one" => Ok(Select::One),
                    "all" => Ok(Select::All),
                    other => match other.parse::<u64>() {
                        Ok(n) => self.visit_u64(n),
                        Err(_) => Err(E::custom(format!("expected {EXP}, got {other:?}"))),
                    },
                }
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Select, A::Error> {
                let mut names = Vec::new();
                while let Some(n) = seq.next_element::<String>()? {
                    if names.len() >= 10_000 {
                        return Err(de::Error::custom("a select list holds at most 10000 names"));
                    }
                    names.push(n);
                }
                Ok(Select::Names(names))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Select {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Select::One => s.serialize_str("one"),
            Select::All => s.serialize_str("all"),
            Select::Count(n) => s.serialize_u32(*n),
            Select::Names(v) => v.serialize(s),
        }
    }
}

impl fmt::Display for Select {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Select::One => f.write_str("one"),
            Select::All => f.write_str("all"),
            Select::Count(n) => write!(f, "{n}"),
            Select::Names(v) => write!(f, "[{}]", v.join(", ")),
        }
    }
}

/// The built-in faults: process faults (kill, restart, restart-in-place, freeze, outage) and network faults
/// (latency, loss, duplicate, reorder, corrupt, bandwidth, partition, reset), which act on the traffic of a
/// target's proxied ports (`proxy:` in the adapter) and take their parameters from `network:`, and `stress`
/// (stress-ng's CPU, memory and IO workers beside a target, parameters from `stress:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    Kill,
    Restart,
    RestartInPlace,
    Freeze,
    Outage,
    Latency,
    Loss,
    Duplicate,
    Reorder,
    Corrupt,
    Bandwidth,
    Partition,
    Reset,
    Stress,
}

impl Fault {
    pub const ALL: [Fault; 14] = [
        Fault::Kill,
        Fault::Restart,
        Fault::RestartInPlace,
        Fault::Freeze,
        Fault::Outage,
        Fault::Latency,
        Fault::Loss,
        Fault::Duplicate,
        Fault::Reorder,
        Fault::Corrupt,
        Fault::Bandwidth,
        Fault::Partition,
        Fault::Reset,
        Fault::Stress,
    ];
    /// The network faults: they act on traffic through the netproxy (their parameters are `network:`).
    pub const NETWORK: [Fault; 8] = [
        Fault::Latency,
        Fault::Loss,
        Fault::Duplicate,
        Fault::Reorder,
        Fault::Corrupt,
        Fault::Bandwidth,
        Fault::Partition,
        Fault::Reset,
    ];
    /// The process faults (what a target supports by default on every driver).
    pub const PROCESS: [Fault; 5] = [Fault::Kill, Fault::Restart, Fault::RestartInPlace, Fault::Freeze, Fault::Outage];
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Restart => "restart",
            Fault::RestartInPlace => "restart-in-place",
            Fault::Freeze => "freeze",
            Fault::Outage => "outage",
            Fault::Latency => "latency",
            Fault::Loss => "loss",
            Fault::Duplicate => "duplicate",
            Fault::Reorder => "reorder",
            Fault::Corrupt => "corrupt",
            Fault::Bandwidth => "bandwidth",
            Fault::Partition => "partition",
            Fault::Reset => "reset",
            Fault::Stress => "stress",
        }
    }
    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }
    /// Whether the fault acts on traffic through the netproxy (its parameters are `network:`).
    pub fn is_network(self) -> bool {
        Fault::NETWORK.contains(&self)
    }
}

/// Something the experiment does to the system during the flow.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Operation {
    pub name: At<String>,
    #[serde(default)]
    pub description: String,
    /// A built-in fault (`kill`, `restart`, `restart-in-place`, `freeze`, `outage`, or a network fault:
    /// `latency`, `loss`, `duplicate`, `reorder`, `corrupt`, `bandwidth`, `partition`, `reset`; or `stress`)
    /// or an adapter operation.
    pub uses: At<String>,
    /// An adapter target or a workload; adapter operations may leave it out.
    #[serde(default)]
    pub target: Option<At<String>>,
    #[serde(default = "select_one")]
    pub select: Select,
    #[serde(default)]
    pub duration: Option<Dur>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The parameters of a network fault (see [`NetworkSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<At<NetworkSpec>>,
    /// The parameters of the `stress` fault (see [`StressSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stress: Option<At<StressSpec>>,
}

fn select_one() -> Select {
    Select::One
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckKind {
    Shell,
    Metric,
    Timeline,
    /// A history (JSON lines) is linearizable: `model: register` (default) or `kv`.
    Linearizable,
    /// A history of `add`s and `read`s of a set: every acknowledged add is read.
    Set,
    /// A history of `add`/`incr`s and `read`s of a counter: every read is within its bounds.
    Counter,
}

/// What a `linearizable` check models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HistoryModel {
    #[default]
    Register,
    Kv,
}

/// Where history checks look by default: every instance's `history.jsonl`.
pub const DEFAULT_HISTORY: &str = "workloads/*/instances/*/output/history.jsonl";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Aggregate {
    Last,
    First,
    Min,
    Max,
    /// Last minus first, counting a drop (a counter reset) as a restart from zero.
    Increase,
}

impl Aggregate {
    /// The name written in YAML.
    pub fn name(self) -> &'static str {
        match self {
            Aggregate::Last => "last",
            Aggregate::First => "first",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
            Aggregate::Increase => "increase",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Cmp {
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
}

impl Cmp {
    pub fn apply(self, a: f64, b: f64) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }
    pub fn symbol(self) -> &'static str {
        match self {
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
        }
    }
}

impl<'de> Deserialize<'de> for Cmp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "==" | "eq" => Cmp::Eq,
            "!=" | "ne" => Cmp::Ne,
            "<" | "lt" => Cmp::Lt,
            "<=" | "le" => Cmp::Le,
            ">" | "gt" => Cmp::Gt,
            ">=" | "ge" => Cmp::Ge,
            other => return Err(de::Error::custom(format!("expected one of ==, !=, <, <=, >, >=, got {other:?}"))),
        })
    }
}

/// One event pattern of a timeline check.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EventMatch {
    pub event: String,
    /// Fields the event must have, compared as text (arrays match if they contain the value).
    #[serde(default, rename = "where")]
    pub where_: BTreeMap<String, String>,
}

/// An experiment-level check.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Check {
    pub name: At<String>,
    #[serde(default)]
    pub description: String,
    pub kind: At<CheckKind>,
    // shell
    #[serde(default)]
    pub run: Option<String>,
    #[serde(default)]
    pub timeout: Option<Dur>,
    // metric
    /// The scraped target (`system/metrics/<target>.jsonl`).
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub metric: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    #[serde(default)]
    pub op: Option<Cmp>,
    #[serde(default)]
    pub value: Option<f64>,
    // timeline
    #[serde(default)]
    pub event: Option<String>,
    #[serde(default, rename = "where")]
    pub where_: BTreeMap<String, String>,
    /// `true` (default): the event happened; `false`: it did not.
    #[serde(default = "yes")]
    pub happened: bool,
    /// These events happened, in this order.
    #[serde(default)]
    pub order: Vec<EventMatch>,
    // linearizable, set, counter
    /// The history files, a glob relative to the run directory (`*` and `?` within one path segment), merged
    /// by time (default [`DEFAULT_HISTORY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<HistoryModel>,
    /// The register's (or each key's) value before the history (default null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<serde_json::Value>,
    /// The linearizability search's bound (default 10 million steps); over it the check fails as unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
}

/// A metric family the experiment is about.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct MetricRef {
    pub target: String,
    pub family: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ExpectationKind {
    /// Must fail: a pass is an XPASS, which fails the run.
    #[default]
    Known,
    /// May pass or fail.
    Flaky,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Expectation {
    pub issue: At<String>,
    #[serde(default)]
    pub kind: ExpectationKind,
    /// `workload/check`, `experiment/check`, `preflight/check` or `adapter/check`; `*` and `?` globs allowed.
    pub checks: Vec<At<String>>,
    #[serde(default)]
    pub description: String,
}

/// A named shell script: a preflight check or a post-run adapter check.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ShellCheck {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub run: String,
    #[serde(default)]
    pub timeout: Option<Dur>,
}
