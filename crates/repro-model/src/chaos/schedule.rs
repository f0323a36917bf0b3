//! The fault schedule of a run (`RUN/schedule.json`): every operation the flow ran, where in the flow, when
//! (seconds since the flow started), on what, and every seeded draw of the flow. It is derived from the
//! timeline when the run ends; `repro chaos replay` compares the schedule of each replay with it, and
//! `repro chaos shrink` cuts it down.
use serde::{Deserialize, Serialize};

/// The version of the schedule format.
pub const SCHEDULE_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub version: u32,
    pub seed: u64,
    /// Every operation run, in the order they started.
    pub operations: Vec<ScheduledOp>,
    /// Every seeded draw of the flow (jittered delays, `random` picks, `schedule` steps), in the order drawn.
    pub draws: Vec<Draw>,
}

/// One run of an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledOp {
    /// The flow node that ran it (`flow.serial[1].repeat[3]`); empty in runs from before paths were recorded.
    pub node: String,
    pub operation: String,
    pub uses: String,
    /// Its run number (1 for the first run of this operation).
    pub run: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// What the seeded selection chose.
    pub selected: Vec<String>,
    /// What it hit (the selected ones that were running).
    #[serde(default)]
    pub hit: Vec<String>,
    /// Seconds since the flow started: when it was selected, and when it finished (None: it did not).
    pub start: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<f64>,
    /// Why it did nothing, if it did nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// One seeded draw: the node's path and what was drawn (see the `flow.drawn` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Draw {
    pub node: String,
    pub draw: serde_json::Value,
}
