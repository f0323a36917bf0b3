//! The flow of an experiment: a tree of serial, parallel, wait, delay and repeat nodes over operation and
//! workload names, each node with the line and column where it was written.
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::at::{deserialize_located, At};
use super::duration::Dur;
use super::experiment::Select;
use super::limits::count_limited;

/// `repeat: {times: N}`.
struct Times(u32);

impl<'de> Deserialize<'de> for Times {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        count_limited(d, "repeats").map(Times)
    }
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

impl Condition {
    /// The name written in YAML.
    pub fn name(self) -> &'static str {
        match self {
            Condition::Started => "started",
            Condition::Finished => "finished",
        }
    }
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

/// `{op: kill-one, select: [w-1], duration: 500ms}`: an operation run here with its selection and/or duration
/// replaced (what `repro chaos shrink` writes to pin a schedule).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct OpCall {
    #[serde(rename = "op")]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub select: Option<Select>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<Dur>,
}

/// `random: {pick: K, from: [...]}`: K of the children, drawn from the seed, run one after another in the
/// order drawn.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RandomSpec {
    #[serde(default = "one")]
    pub pick: u32,
    pub from: Vec<FlowNode>,
}

fn one() -> u32 {
    1
}

/// One choice of a `schedule`: a flow node and its relative rate.
#[derive(Debug, Clone, Serialize)]
pub struct Weighted {
    #[serde(rename = "do")]
    pub node: FlowNode,
    pub weight: u32,
}

impl<'de> Deserialize<'de> for Weighted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let at = deserialize_located::<_, WeightedRaw>(d)?;
        let mut w = at.value.0;
        if w.node.line == 0 {
            // The short form (a bare name): the node is where the name was written.
            (w.node.line, w.node.column) = (at.line, at.column);
        }
        Ok(w)
    }
}

struct WeightedRaw(Weighted);

impl<'de> Deserialize<'de> for WeightedRaw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "kebab-case", deny_unknown_fields)]
        struct Full {
            #[serde(rename = "do")]
            node: FlowNode,
            #[serde(default = "one")]
            weight: u32,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WeightedRaw;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an operation name, or a map with `do` (a flow node) and `weight` (a relative rate)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<WeightedRaw, E> {
                if v.trim().is_empty() {
                    return Err(E::custom("expected an operation name, got an empty name"));
                }
                let node = FlowNode { line: 0, column: 0, kind: FlowKind::Leaf(v.to_string()) };
                Ok(WeightedRaw(Weighted { node, weight: 1 }))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<WeightedRaw, A::Error> {
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(WeightedRaw(Weighted { node: f.node, weight: f.weight }))
            }
        }
        d.deserialize_any(V)
    }
}

/// `schedule: {from: [...], length: N, interval: 1s}`: a seeded sequence of `length` faults, Jepsen-nemesis
/// style: before each, a pause drawn uniformly from `[0, 2 * interval)`; then one choice of `from`, drawn with
/// probability proportional to its weight.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ScheduleSpec {
    pub from: Vec<Weighted>,
    #[serde(deserialize_with = "schedule_length")]
    pub length: u32,
    #[serde(default = "default_interval")]
    pub interval: Dur,
}

fn default_interval() -> Dur {
    Dur::secs(1)
}

fn schedule_length<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    count_limited(d, "repeats")
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
    /// `delay: 2s`, or `{delay: 2s, jitter: 500ms}`: a pause drawn uniformly from `[2s - 500ms, 2s + 500ms]`.
    Delay {
        base: Dur,
        jitter: Option<Dur>,
    },
    Random(RandomSpec),
    Schedule(ScheduleSpec),
    /// An operation with its selection or duration replaced.
    Op(OpCall),
    Repeat {
        mode: RepeatMode,
        body: Box<FlowNode>,
    },
}

const FLOW_EXPECTED: &str =
    "an operation or workload name, or a map with one of serial, parallel, wait, delay, repeat, random, schedule, op";

impl<'de> Deserialize<'de> for FlowNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let at = deserialize_located::<_, FlowKind>(d)?;
        Ok(FlowNode { line: at.line, column: at.column, kind: at.value })
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
                let mut jitter: Option<Dur> = None;
                let mut call: Option<OpCall> = None;
                let mut call_select: Option<Select> = None;
                let mut call_duration: Option<Dur> = None;
                while let Some(key) = map.next_key::<String>()? {
                    let node = match key.as_str() {
                        "op" => {
                            let name: String = map.next_value()?;
                            if name.trim().is_empty() {
                                return Err(de::Error::custom("op: expected an operation name, got an empty name"));
                            }
                            call = Some(OpCall { name, select: None, duration: None });
                            continue;
                        }
                        "select" => {
                            call_select = Some(map.next_value()?);
                            continue;
                        }
                        "duration" => {
                            call_duration = Some(map.next_value()?);
                            continue;
                        }
                        "serial" => FlowKind::Serial(map.next_value()?),
                        "parallel" => FlowKind::Parallel(map.next_value()?),
                        "wait" => FlowKind::Wait(map.next_value()?),
                        "delay" => FlowKind::Delay { base: map.next_value()?, jitter: None },
                        "random" => FlowKind::Random(map.next_value()?),
                        "schedule" => FlowKind::Schedule(map.next_value()?),
                        "jitter" => {
                            jitter = Some(map.next_value()?);
                            continue;
                        }
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
                            "unknown flow key `{other}`, expected one of serial, parallel, wait, delay (with jitter), \
                                 repeat, random, schedule"
                        )))
                        }
                    };
                    if body.is_some() {
                        return Err(de::Error::custom(
                            "a flow map holds exactly one of serial, parallel, wait, delay, repeat, random, schedule; \
                             wrap several in serial",
                        ));
                    }
                    body = Some(node);
                }
                if let Some(mut c) = call {
                    if body.is_some() || is_repeat || jitter.is_some() {
                        return Err(de::Error::custom(
                            "`op` stands alone in its map, with only `select` and `duration`: {op: kill-one, select: [w-1]}",
                        ));
                    }
                    c.select = call_select;
                    c.duration = call_duration;
                    return Ok(FlowKind::Op(c));
                }
                if call_select.is_some() || call_duration.is_some() {
                    return Err(de::Error::custom(
                        "`select` and `duration` in a flow go with `op`: {op: kill-one, select: [w-1], duration: 1s}",
                    ));
                }
                let mut body = body.ok_or_else(|| de::Error::custom(format!("expected {FLOW_EXPECTED}")))?;
                if let Some(j) = jitter {
                    match &mut body {
                        FlowKind::Delay { base, jitter } => {
                            if j > *base {
                                return Err(de::Error::custom(format!(
                                    "jitter {j} is larger than its delay {base}: a delay cannot be negative"
                                )));
                            }
                            *jitter = Some(j);
                        }
                        _ => return Err(de::Error::custom("`jitter` goes with `delay`: {delay: 2s, jitter: 500ms}")),
                    }
                }
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
                        "delay" => FlowKind::Delay { base: map.next_value()?, jitter: None },
                        "random" => FlowKind::Random(map.next_value()?),
                        "schedule" => FlowKind::Schedule(map.next_value()?),
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
            FlowKind::Delay { base, jitter } => {
                let mut m = s.serialize_map(Some(if jitter.is_some() { 2 } else { 1 }))?;
                m.serialize_entry("delay", base)?;
                if let Some(j) = jitter {
                    m.serialize_entry("jitter", j)?;
                }
                m.end()
            }
            FlowKind::Random(r) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("random", r)?;
                m.end()
            }
            FlowKind::Schedule(sc) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("schedule", sc)?;
                m.end()
            }
            FlowKind::Op(c) => c.serialize(s),
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
