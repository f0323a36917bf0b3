//! The experiment and adapter schema (`apiVersion: repro.dev/chaos/v1`) as typed structs.
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// The only accepted `apiVersion`.
pub const API_VERSION: &str = "repro.dev/chaos/v1";

/// A value together with the line and column where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct At<T> {
    pub value: T,
    pub line: u64,
    pub column: u64,
}

impl<T> At<T> {
    pub fn new(value: T) -> Self {
        At { value, line: 0, column: 0 }
    }
}

impl<T> std::ops::Deref for At<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: fmt::Display> fmt::Display for At<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for At<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = serde_saphyr::Spanned::<T>::deserialize(d)?;
        Ok(At { value: s.value, line: s.referenced.line(), column: s.referenced.column() })
    }
}

impl<T: Serialize> Serialize for At<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// A duration written as `500ms`, `15s`, `5m`, `1h`, `1m30s`, `1.5s`, or a bare number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl Dur {
    pub fn secs(s: u64) -> Dur {
        Dur(Duration::from_secs(s))
    }
    pub fn millis(ms: u64) -> Dur {
        Dur(Duration::from_millis(ms))
    }
}

/// What a duration must look like (used in error messages).
pub const DURATION_EXPECTED: &str = "a duration such as 500ms, 15s, 5m, 1h or 1m30s (a bare number means seconds)";

/// Parses `500ms`, `15s`, `5m`, `1h`, `1m30s`, `1.5s`, `2` (seconds). None for anything else, including a
/// value too large for a `Duration` (see [`parse_duration_checked`] for the reason).
pub fn parse_duration(text: &str) -> Option<Duration> {
    parse_duration_checked(text).ok()
}

/// Like [`parse_duration`], with what was wrong: not a duration, or too large to represent.
pub fn parse_duration_checked(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("expected {DURATION_EXPECTED}, got {text:?}");
    let too_large = || format!("{text:?} is too large for a duration");
    if t.is_empty() {
        return Err(bad());
    }
    let secs = |n: f64| -> Result<Duration, String> {
        if !(n.is_finite() && n >= 0.0) {
            return Err(bad());
        }
        Duration::try_from_secs_f64(n).map_err(|_| too_large())
    };
    if let Ok(n) = t.parse::<f64>() {
        return secs(n);
    }
    // Summed as Durations (checked): what format_duration prints parses back, up to Duration::MAX.
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if num_len == 0 {
            return Err(bad());
        }
        let num = &rest[..num_len];
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit_ms: u32 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        // Whole numbers exactly (no float rounding near the largest Duration), fractions as floats.
        let part = match num.parse::<u128>() {
            Ok(n) => {
                let ms = n.checked_mul(u128::from(unit_ms)).ok_or_else(too_large)?;
                Duration::new(u64::try_from(ms / 1000).map_err(|_| too_large())?, (ms % 1000) as u32 * 1_000_000)
            }
            Err(_) => secs(num.parse::<f64>().map_err(|_| bad())? * f64::from(unit_ms) / 1000.0)?,
        };
        total = total.checked_add(part).ok_or_else(too_large)?;
    }
    Ok(total)
}

/// Checks a parsed duration against the limits of the parse running on this thread (if any).
fn limited(d: Duration) -> Result<Duration, String> {
    match crate::limits::parse_limits() {
        Some(l) => l.check_duration(d).map(|()| d),
        None => Ok(d),
    }
}

/// Formats a duration the way it is written in YAML (`500ms`, `15s`, `2m`, `1m30s`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else if s > 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(DURATION_EXPECTED)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                limited(Duration::from_secs(v)).map(Dur).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("expected {DURATION_EXPECTED}, got {v}"))),
                }
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Dur, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("{v} seconds is too large for a duration"))),
                }
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Dur, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) if v > 0 => Err(E::custom(format!("{v} seconds is too large for a duration"))),
                    Err(_) => Err(E::custom(format!("expected {DURATION_EXPECTED}, got {v}"))),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(E::custom(format!("expected {DURATION_EXPECTED}, got {v}")));
                }
                let d = Duration::try_from_secs_f64(v)
                    .map_err(|_| E::custom(format!("{v} seconds is too large for a duration")))?;
                limited(d).map(Dur).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                let d = parse_duration_checked(v).map_err(E::custom)?;
                limited(d).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

fn default_adapter() -> String {
    "process".to_string()
}
fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

/// A count (`instances`, `repeat: {times}`) checked against the limits of the running parse.
fn count_limited<'de, D: Deserializer<'de>>(d: D, what: &str) -> Result<u32, D::Error> {
    let v = u64::deserialize(d)?;
    if let Some(l) = crate::limits::parse_limits() {
        let limit = if what == "instances" { l.instances } else { l.repeats };
        if v > limit {
            return Err(de::Error::custom(crate::limits::Limits::exceeded(v, limit, what)));
        }
    }
    u32::try_from(v).map_err(|_| de::Error::custom(format!("{v} is too large (at most {})", u32::MAX)))
}

fn instances_limited<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    count_limited(d, "instances")
}

/// `repeat: {times: N}`.
struct Times(u32);

impl<'de> Deserialize<'de> for Times {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        count_limited(d, "repeats").map(Times)
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    One,
    All,
    Count(u32),
}

impl<'de> Deserialize<'de> for Select {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const EXP: &str = "`one`, `all` or a positive count";
        impl Visitor<'_> for V {
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
        }
    }
}

impl fmt::Display for Select {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Select::One => f.write_str("one"),
            Select::All => f.write_str("all"),
            Select::Count(n) => write!(f, "{n}"),
        }
    }
}

/// The built-in faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    Kill,
    Restart,
    RestartInPlace,
    Freeze,
    Outage,
}

impl Fault {
    pub const ALL: [Fault; 5] = [Fault::Kill, Fault::Restart, Fault::RestartInPlace, Fault::Freeze, Fault::Outage];
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Restart => "restart",
            Fault::RestartInPlace => "restart-in-place",
            Fault::Freeze => "freeze",
            Fault::Outage => "outage",
        }
    }
    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// Something the experiment does to the system during the flow.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Operation {
    pub name: At<String>,
    #[serde(default)]
    pub description: String,
    /// A built-in fault (`kill`, `restart`, `restart-in-place`, `freeze`, `outage`) or an adapter operation.
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
}

fn select_one() -> Select {
    Select::One
}

/// A workload condition a `wait` can wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Condition {
    /// Every instance has started.
    Started,
    /// Every instance has ended.
    Finished,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct WaitSpec {
    #[serde(default)]
    pub workload: Option<At<String>>,
    #[serde(default)]
    pub condition: Option<Condition>,
    #[serde(default)]
    pub signal: Option<At<String>>,
    /// Extra time to wait after the condition or signal.
    #[serde(default)]
    pub delay: Option<Dur>,
    #[serde(default)]
    pub timeout: Option<Dur>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepeatMode {
    For(Dur),
    Times(u32),
}

/// One node of the flow tree, with where it was written.
#[derive(Debug, Clone)]
pub struct FlowNode {
    pub line: u64,
    pub column: u64,
    pub kind: FlowKind,
}

#[derive(Debug, Clone)]
pub enum FlowKind {
    /// An operation or workload name.
    Leaf(String),
    Serial(Vec<FlowNode>),
    Parallel(Vec<FlowNode>),
    Wait(WaitSpec),
    Delay(Dur),
    Repeat {
        mode: RepeatMode,
        body: Box<FlowNode>,
    },
}

const FLOW_EXPECTED: &str = "an operation or workload name, or a map with one of serial, parallel, wait, delay, repeat";

impl<'de> Deserialize<'de> for FlowNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = serde_saphyr::Spanned::<FlowKind>::deserialize(d)?;
        Ok(FlowNode { line: s.referenced.line(), column: s.referenced.column(), kind: s.value })
    }
}

impl<'de> Deserialize<'de> for FlowKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FlowKind;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(FLOW_EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FlowKind, E> {
                if v.trim().is_empty() {
                    return Err(E::custom(format!("expected {FLOW_EXPECTED}, got an empty name")));
                }
                Ok(FlowKind::Leaf(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FlowKind, A::Error> {
                let mut body: Option<FlowKind> = None;
                let mut repeat_for: Option<Dur> = None;
                let mut repeat_times: Option<u32> = None;
                let mut is_repeat = false;
                while let Some(key) = map.next_key::<String>()? {
                    let node = match key.as_str() {
                        "serial" => FlowKind::Serial(map.next_value()?),
                        "parallel" => FlowKind::Parallel(map.next_value()?),
                        "wait" => FlowKind::Wait(map.next_value()?),
                        "delay" => FlowKind::Delay(map.next_value()?),
                        "do" => map.next_value::<FlowNode>()?.kind,
                        "repeat" => {
                            is_repeat = true;
                            let inner: RepeatBody = map.next_value()?;
                            repeat_for = inner.r#for;
                            repeat_times = inner.times;
                            inner.body
                        }
                        "for" => {
                            repeat_for = Some(map.next_value()?);
                            continue;
                        }
                        "times" => {
                            repeat_times = Some(map.next_value::<Times>()?.0);
                            continue;
                        }
                        other => {
                            return Err(de::Error::custom(format!(
                                "unknown flow key `{other}`, expected one of serial, parallel, wait, delay, repeat"
                            )))
                        }
                    };
                    if body.is_some() {
                        return Err(de::Error::custom(
                            "a flow map holds exactly one of serial, parallel, wait, delay, repeat; wrap several in serial",
                        ));
                    }
                    body = Some(node);
                }
                let body = body.ok_or_else(|| de::Error::custom(format!("expected {FLOW_EXPECTED}")))?;
                if is_repeat || repeat_for.is_some() || repeat_times.is_some() {
                    let mode = match (repeat_for, repeat_times) {
                        (Some(d), None) => RepeatMode::For(d),
                        (None, Some(n)) => RepeatMode::Times(n),
                        _ => {
                            return Err(de::Error::custom(
                                "repeat needs exactly one of `for: <duration>` or `times: <count>`",
                            ))
                        }
                    };
                    // `repeat: {for: .., serial: ..}` or `{for: .., serial: ..}` at the same level.
                    return Ok(FlowKind::Repeat { mode, body: Box::new(FlowNode { line: 0, column: 0, kind: body }) });
                }
                Ok(body)
            }
        }
        d.deserialize_any(V)
    }
}

/// The inside of `repeat: {for: 20m, serial: [...]}`.
struct RepeatBody {
    r#for: Option<Dur>,
    times: Option<u32>,
    body: FlowKind,
}

impl<'de> Deserialize<'de> for RepeatBody {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RepeatBody;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map with `for` or `times` and one of serial, parallel, wait, delay, do")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RepeatBody, A::Error> {
                let mut out = RepeatBody { r#for: None, times: None, body: FlowKind::Serial(vec![]) };
                let mut have_body = false;
                while let Some(key) = map.next_key::<String>()? {
                    let node = match key.as_str() {
                        "for" => {
                            out.r#for = Some(map.next_value()?);
                            continue;
                        }
                        "times" => {
                            out.times = Some(map.next_value::<Times>()?.0);
                            continue;
                        }
                        "serial" => FlowKind::Serial(map.next_value()?),
                        "parallel" => FlowKind::Parallel(map.next_value()?),
                        "wait" => FlowKind::Wait(map.next_value()?),
                        "delay" => FlowKind::Delay(map.next_value()?),
                        "do" => map.next_value::<FlowNode>()?.kind,
                        other => {
                            return Err(de::Error::custom(format!(
                                "unknown repeat key `{other}`, expected for, times, serial, parallel, wait, delay or do"
                            )))
                        }
                    };
                    if have_body {
                        return Err(de::Error::custom(
                            "repeat holds exactly one body (serial, parallel, wait, delay or do)",
                        ));
                    }
                    have_body = true;
                    out.body = node;
                }
                if !have_body {
                    return Err(de::Error::custom("repeat needs a body: one of serial, parallel, wait, delay or do"));
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for FlowNode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.kind {
            FlowKind::Leaf(name) => s.serialize_str(name),
            FlowKind::Serial(v) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("serial", v)?;
                m.end()
            }
            FlowKind::Parallel(v) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("parallel", v)?;
                m.end()
            }
            FlowKind::Wait(w) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("wait", w)?;
                m.end()
            }
            FlowKind::Delay(d) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("delay", d)?;
                m.end()
            }
            FlowKind::Repeat { mode, body } => {
                let mut m = s.serialize_map(Some(2))?;
                match mode {
                    RepeatMode::For(d) => m.serialize_entry("for", d)?,
                    RepeatMode::Times(n) => m.serialize_entry("times", n)?,
                }
                m.serialize_entry("do", body)?;
                m.end()
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckKind {
    Shell,
    Metric,
    Timeline,
}

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

// ---------------------------------------------------------------- adapter

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("15s"), Some(Duration::from_secs(15)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("57500ms"), Some(Duration::from_millis(57500)));
        assert_eq!(parse_duration("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("ms"), None);
        assert_eq!(parse_duration("-1"), None);
        assert_eq!(
            parse_duration_checked("99999999999999999999h").unwrap_err(),
            "\"99999999999999999999h\" is too large for a duration"
        );
        assert!(parse_duration_checked("1e400").is_err());
        assert!(parse_duration_checked("inf").is_err());
        assert_eq!(parse_duration_checked("18446744073709551615").ok(), None);
    }

    /// Regression (fuzz): seconds beyond what a Duration holds panicked in Duration::from_secs_f64.
    #[test]
    fn huge_durations_are_none_not_a_panic() {
        assert_eq!(parse_duration("99999999999999999999h"), None);
        assert_eq!(parse_duration("18446744073709551616"), None);
        assert_eq!(parse_duration("1e300"), None);
        assert_eq!(parse_duration("inf"), None);
        // Regression (fuzz, args target): the largest durations printed as minutes and seconds did not parse back.
        let d = parse_duration("18446744073709550000").unwrap();
        assert_eq!(format_duration(d), "307445734561825826m8s");
        assert_eq!(parse_duration(&format_duration(d)), Some(d));
        let d = parse_duration(".3s018446744073709551615s").unwrap();
        assert_eq!(format_duration(d), "18446744073709551615300ms");
        assert_eq!(parse_duration(&format_duration(d)), Some(d));
        let e = serde_json::from_str::<Dur>("1e300").unwrap_err().to_string();
        assert!(e.contains("too large for a duration"), "{e}");
    }

    proptest! {
        #[test]
        fn duration_round_trips(ms in 0u64..10_000_000) {
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse_duration(&format_duration(d)), Some(d));
        }

        #[test]
        fn duration_parser_never_panics(s in "\\PC{0,12}") {
            let _ = parse_duration(&s);
        }

        /// Huge numbers with any unit: a duration or an error, never a panic (Duration::from_secs_f64 panics).
        #[test]
        fn huge_durations_are_errors(n in any::<u128>(), unit in prop::sample::select(vec!["", "ms", "s", "m", "h", "h30m", ".9s"])) {
            let text = format!("{n}{unit}");
            match parse_duration_checked(&text) {
                Ok(d) => prop_assert!(d.as_secs_f64() <= u64::MAX as f64 * 1.001),
                Err(e) => prop_assert!(e.contains("too large") || e.contains("expected"), "{}", e),
            }
        }
    }
}
