//! The events of a chaos run's timeline (`timeline.jsonl`).
//!
//! Each line of the file is one event: the harness adds `t` (seconds since the start) and `ts` (RFC 3339), and
//! the event's own fields follow, tagged by `event`. Optional fields that are absent are left out of the line,
//! except where a `null` is part of the format (`exit_code` and `signal` of an ended instance, the `pid` of a
//! stopped container target). Readers (the evaluation, reports) read the lines as JSON objects; this enum is the
//! one place the writer's vocabulary is defined.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One timeline event, serialized as `{"event": "<name>", ...fields}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum Event {
    #[serde(rename = "run.started")]
    RunStarted { run: String, experiment: String, version: u32, seed: u64, adapter: String, dir: PathBuf },
    #[serde(rename = "run.not-applicable")]
    RunNotApplicable { reason: String },
    #[serde(rename = "run.finished")]
    RunFinished { verdict: String, reason: String, interrupted: Option<String> },
    /// Something of the harness failed: the verdict becomes ERROR.
    #[serde(rename = "harness.error")]
    HarnessError { reason: String },
    /// Something of the harness failed without changing the verdict (a container's log could not be read).
    #[serde(rename = "harness.warning")]
    HarnessWarning {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        detail: String,
    },
    #[serde(rename = "preflight.warning")]
    PreflightWarning { check: String, detail: String },
    #[serde(rename = "check.finished")]
    CheckFinished {
        scope: String,
        check: String,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<serde_json::Value>,
    },
    #[serde(rename = "flow.skipped")]
    FlowSkipped { reason: String },
    #[serde(rename = "flow.started")]
    FlowStarted {},
    #[serde(rename = "flow.finished")]
    FlowFinished { ok: bool },
    /// A flow node began: a leaf (`name`), a delay (`delay`, seconds) or one round of a repeat (`repeat`).
    #[serde(rename = "node.started")]
    NodeStarted {
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delay: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repeat: Option<u32>,
    },
    #[serde(rename = "node.finished")]
    NodeFinished { node: String, name: String, ok: bool },
    /// A seeded draw of the flow: a jittered delay (`delay_ms`), the children a `random` node picked
    /// (`picked`, indices into its `from`), or one step of a `schedule` (`step`, its `pause_ms` and `choice`).
    /// Each is a function of the run's seed and the node's path only.
    /// A probe of the steady-state hypothesis, `before` the flow or `after` it.
    #[serde(rename = "steady-state.probed")]
    SteadyStateProbed {
        phase: String,
        probe: String,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    #[serde(rename = "flow.drawn")]
    FlowDrawn { node: String, draw: serde_json::Value },
    /// A wait began: for a workload's `condition`, or for an adapter `signal` seen by a `watcher`.
    #[serde(rename = "wait.started")]
    WaitStarted {
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workload: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        condition: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        watcher: Option<String>,
    },
    #[serde(rename = "wait.finished")]
    WaitFinished { node: String, workload: String, condition: String, after: f64 },
    #[serde(rename = "signal.matched")]
    SignalMatched { node: String, signal: String, line: String },
    #[serde(rename = "target.started")]
    TargetStarted(TargetIncarnation),
    #[serde(rename = "target.restarted")]
    TargetRestarted(TargetIncarnation),
    #[serde(rename = "target.healthy")]
    TargetHealthy { target: String, pid: i32, after: f64 },
    #[serde(rename = "target.unhealthy")]
    TargetUnhealthy { target: String, pid: i32, after: f64 },
    #[serde(rename = "target.exited")]
    TargetExited { target: String, pid: i32, code: Option<i64>, signal: Option<i64> },
    /// The previous incarnation's process group outlived it and was killed before a new start.
    #[serde(rename = "target.drained")]
    TargetDrained { target: String, pgid: i32 },
    #[serde(rename = "target.stopping")]
    TargetStopping { target: String, reason: String },
    #[serde(rename = "target.stopped")]
    TargetStopped {
        target: String,
        pid: Option<i32>,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container: Option<String>,
    },
    #[serde(rename = "instance.created")]
    InstanceCreated {
        workload: String,
        instance: String,
        pid: i32,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        container: Option<String>,
    },
    /// An instance ended (`Succeeded`, `Failed`, `Killed`, with `exit_code` and `signal`) or outlived its
    /// workload's timeout (`TimedOut`, with `timeout` in seconds).
    #[serde(rename = "instance.state")]
    InstanceState {
        workload: String,
        instance: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<i32>,
        state: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<Option<i64>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<Option<i64>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout: Option<f64>,
    },
    #[serde(rename = "instance.collected")]
    InstanceCollected { workload: String, instance: String, exit_code: Option<i32> },
    #[serde(rename = "instance.deleted")]
    InstanceDeleted { workload: String, instance: String },
    #[serde(rename = "operation.selected")]
    OperationSelected {
        operation: String,
        run: u32,
        /// The flow node that ran it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        seed: u64,
        select: String,
        candidates: Vec<String>,
        selected: Vec<String>,
    },
    #[serde(rename = "operation.skipped")]
    OperationSkipped { operation: String, run: u32, reason: String },
    /// An operation hit its victims: `ids` (pids) for processes, `containers` for a docker target.
    #[serde(rename = "operation.started")]
    OperationStarted {
        operation: String,
        uses: String,
        run: u32,
        target: Option<String>,
        scope: String,
        instances: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ids: Option<Vec<serde_json::Value>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        containers: Option<Vec<String>>,
    },
    /// A graceful stop did not take effect in time: the victims got SIGKILL.
    #[serde(rename = "operation.escalated")]
    OperationEscalated { operation: String, run: u32, signal: String },
    #[serde(rename = "operation.verified")]
    OperationVerified {
        operation: String,
        run: u32,
        effect: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instances: Option<Vec<String>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        /// A network fault: the proxy rules installed (`<target>:<port>/rule-<n>`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rules: Option<Vec<String>>,
    },
    /// An operation's effect was undone while the flow ran (its duration ended, or a restart).
    #[serde(rename = "operation.reverted")]
    OperationReverted(UndoOutcome),
    /// An undo run by the end-of-run sweep (newest first).
    #[serde(rename = "operation.undo")]
    OperationUndo(UndoOutcome),
    #[serde(rename = "operation.finished")]
    OperationFinished { operation: String, run: u32 },
    #[serde(rename = "watcher.started")]
    WatcherStarted {
        watcher: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
    },
    /// A Prometheus scrape of `target` failed (the error is also in its metrics file).
    #[serde(rename = "scrape.failed")]
    ScrapeFailed { target: String, url: String, error: String },
    #[serde(rename = "observers.stopped")]
    ObserversStopped {},
}

/// The fields of `target.started` and `target.restarted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetIncarnation {
    pub target: String,
    pub pid: i32,
    pub incarnation: u32,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// The container's short id (docker targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

/// The fields of `operation.reverted` and `operation.undo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UndoOutcome {
    pub operation: String,
    pub uses: String,
    pub run: u32,
    pub ok: bool,
    pub detail: String,
    /// A network fault: the proxy's counters of the affected clients when its rules were removed, per
    /// `<target>:<port>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<serde_json::Value>,
}

impl Event {
    /// The event's name (the `event` field of its line) and its other fields, from one serialization.
    pub fn split(&self) -> (String, serde_json::Map<String, serde_json::Value>) {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut m)) => {
                let name = match m.remove("event") {
                    Some(serde_json::Value::String(n)) => n,
                    // The tag is always a string for this enum.
                    _ => String::new(),
                };
                (name, m)
            }
            // Serializing a tagged enum of plain fields always gives an object.
            _ => (String::new(), serde_json::Map::new()),
        }
    }

    /// The event's name (the `event` field of its line).
    pub fn name(&self) -> String {
        self.split().0
    }

    /// The event's fields without `event`, as a JSON object.
    pub fn fields(&self) -> serde_json::Map<String, serde_json::Value> {
        self.split().1
    }

    /// A harness error with this reason.
    pub fn harness_error(reason: impl Into<String>) -> Event {
        Event::HarnessError { reason: reason.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(e: &Event) -> serde_json::Value {
        serde_json::to_value(e).unwrap()
    }

    #[test]
    fn events_serialize_to_the_timeline_format() {
        let e = Event::InstanceState {
            workload: "w".into(),
            instance: "w-0".into(),
            pid: Some(7),
            state: "Killed".into(),
            exit_code: Some(None),
            signal: Some(Some(9)),
            timeout: None,
        };
        assert_eq!(
            line(&e),
            json!({"event": "instance.state", "workload": "w", "instance": "w-0", "pid": 7, "state": "Killed", "exit_code": null, "signal": 9})
        );
        let e = Event::TargetStarted(TargetIncarnation {
            target: "db".into(),
            pid: 3,
            incarnation: 1,
            reason: "run".into(),
            operation: None,
            container: None,
        });
        assert_eq!(
            line(&e),
            json!({"event": "target.started", "target": "db", "pid": 3, "incarnation": 1, "reason": "run"})
        );
        assert_eq!(line(&Event::FlowStarted {}), json!({"event": "flow.started"}));
        assert_eq!(Event::ObserversStopped {}.name(), "observers.stopped");
        let undo = Event::OperationUndo(UndoOutcome {
            operation: "k".into(),
            uses: "kill".into(),
            run: 1,
            ok: true,
            detail: "d".into(),
            stats: None,
        });
        assert_eq!(undo.name(), "operation.undo");
        assert_eq!(undo.fields().get("detail"), Some(&json!("d")));
        assert!(!undo.fields().contains_key("event"));
    }

    #[test]
    fn events_read_back() {
        let e = Event::TargetStopped { target: "t".into(), pid: None, reason: "run ended".into(), container: None };
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(text, r#"{"event":"target.stopped","target":"t","pid":null,"reason":"run ended"}"#);
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), e);
    }
}
