//! The flow of an experiment: a tree of serial, parallel, wait, delay and repeat nodes over operation and
//! workload names, each node with the line and column where it was written.
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::at::{deserialize_located, At};
use super::duration::Dur;
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
