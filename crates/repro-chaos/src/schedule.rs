//! The fault schedule of a run, derived from its timeline ([`from_timeline`]), and how two schedules differ
//! ([`difference`]): what `repro chaos replay` reports.
use serde_json::Value;

use crate::model::{Draw, Schedule, ScheduledOp, SCHEDULE_VERSION};

fn s(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

fn strings(v: &Value, k: &str) -> Vec<String> {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The schedule recorded in a timeline (its events as JSON objects, in file order).
pub fn from_timeline(seed: u64, timeline: &[Value]) -> Schedule {
    let t = |e: &Value| e.get("t").and_then(Value::as_f64).unwrap_or(0.0);
    let flow_t = timeline.iter().find(|e| s(e, "event").as_deref() == Some("flow.started")).map_or(0.0, t);
    let rel = |e: &Value| ((t(e) - flow_t).max(0.0) * 1000.0).round() / 1000.0;
    let mut operations: Vec<ScheduledOp> = Vec::new();
    let mut draws = Vec::new();
    let key = |e: &Value| (s(e, "operation").unwrap_or_default(), e.get("run").and_then(Value::as_u64).unwrap_or(0));
    for e in timeline {
        let find = |ops: &mut Vec<ScheduledOp>| {
            let (op, run) = key(e);
            ops.iter_mut().rposition(|o| o.operation == op && u64::from(o.run) == run)
        };
        match s(e, "event").as_deref() {
            Some("flow.drawn") => draws.push(Draw {
                node: s(e, "node").unwrap_or_default(),
                draw: e.get("draw").cloned().unwrap_or_default(),
            }),
            Some("operation.selected") => {
                let (operation, run) = key(e);
                operations.push(ScheduledOp {
                    node: s(e, "node").unwrap_or_default(),
                    operation,
                    uses: String::new(),
                    run: u32::try_from(run).unwrap_or(u32::MAX),
                    target: None,
                    selected: strings(e, "selected"),
                    hit: vec![],
                    start: rel(e),
                    end: None,
                    skipped: None,
                });
            }
            Some("operation.started") => {
                if let Some(i) = find(&mut operations) {
                    let o = &mut operations[i];
                    o.uses = s(e, "uses").unwrap_or_default();
                    o.target = s(e, "target");
                    o.hit = strings(e, "instances");
                }
            }
            Some("operation.skipped") => {
                if let Some(i) = find(&mut operations) {
                    operations[i].skipped = s(e, "reason");
                }
            }
            Some("operation.finished") => {
                if let Some(i) = find(&mut operations) {
                    operations[i].end = Some(rel(e));
                }
            }
            _ => {}
        }
    }
    Schedule { version: SCHEDULE_VERSION, seed, operations, draws }
}

/// The first way `b` differs from `a` in what was done (the operations' nodes, names, selections and what
/// they hit, every draw), or None. Times are not compared: they are the host's, not the schedule's.
pub fn difference(a: &Schedule, b: &Schedule) -> Option<String> {
    if a.seed != b.seed {
        return Some(format!("seed {} against {}", b.seed, a.seed));
    }
    for (i, (x, y)) in a.draws.iter().zip(&b.draws).enumerate() {
        if x != y {
            return Some(format!(
                "draw {}: {} drew {} where the original drew {} at {}",
                i + 1,
                y.node,
                y.draw,
                x.draw,
                x.node
            ));
        }
    }
    if a.draws.len() != b.draws.len() {
        return Some(format!("{} draws against {}", b.draws.len(), a.draws.len()));
    }
    let what =
        |o: &ScheduledOp| (o.node.clone(), o.operation.clone(), o.selected.clone(), o.hit.clone(), o.skipped.is_some());
    // Parallel branches may start their operations in another order: compare as multisets.
    let mut xa: Vec<_> = a.operations.iter().map(what).collect();
    let mut xb: Vec<_> = b.operations.iter().map(what).collect();
    xa.sort();
    xb.sort();
    for (x, y) in xa.iter().zip(&xb) {
        if x != y {
            let show = |o: &(String, String, Vec<String>, Vec<String>, bool)| {
                format!(
                    "{} at {} selected [{}] hit [{}]{}",
                    o.1,
                    o.0,
                    o.2.join(", "),
                    o.3.join(", "),
                    if o.4 { " (skipped)" } else { "" }
                )
            };
            return Some(format!("{} where the original ran {}", show(y), show(x)));
        }
    }
    if xa.len() != xb.len() {
        return Some(format!("{} operations ran against {}", xb.len(), xa.len()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn timeline() -> Vec<Value> {
        vec![
            json!({"event": "run.started", "t": 0.0}),
            json!({"event": "flow.started", "t": 0.5}),
            json!({"event": "flow.drawn", "t": 0.5, "node": "flow.serial[0]", "draw": {"kind": "delay", "delay_ms": 812}}),
            json!({"event": "operation.selected", "t": 1.3, "operation": "kill-one", "run": 1, "node": "flow.serial[1]", "selected": ["w-1"], "candidates": ["w-0", "w-1"], "seed": 5, "select": "one"}),
            json!({"event": "operation.started", "t": 1.301, "operation": "kill-one", "run": 1, "uses": "kill", "target": "w", "scope": "workload", "instances": ["w-1"]}),
            json!({"event": "operation.finished", "t": 1.4, "operation": "kill-one", "run": 1}),
            json!({"event": "operation.selected", "t": 2.0, "operation": "kill-one", "run": 2, "node": "flow.serial[2]", "selected": ["w-0"], "candidates": [], "seed": 5, "select": "one"}),
            json!({"event": "operation.skipped", "t": 2.0, "operation": "kill-one", "run": 2, "reason": "nothing selected is running"}),
            json!({"event": "operation.finished", "t": 2.0, "operation": "kill-one", "run": 2}),
        ]
    }

    #[test]
    fn a_timeline_gives_its_operations_draws_and_relative_times() {
        let sc = from_timeline(5, &timeline());
        assert_eq!(sc.draws.len(), 1);
        assert_eq!(sc.operations.len(), 2);
        let o = &sc.operations[0];
        assert_eq!(
            (o.node.as_str(), o.uses.as_str(), o.hit.clone(), o.start, o.end),
            ("flow.serial[1]", "kill", vec!["w-1".to_string()], 0.8, Some(0.9))
        );
        assert_eq!(sc.operations[1].skipped.as_deref(), Some("nothing selected is running"));
        let back: Schedule = serde_json::from_value(serde_json::to_value(&sc).unwrap()).unwrap();
        assert_eq!(back, sc);
    }

    #[test]
    fn differences_name_what_was_done_otherwise_and_ignore_times() {
        let a = from_timeline(5, &timeline());
        let mut b = a.clone();
        b.operations[0].start += 0.2;
        b.operations.reverse();
        assert_eq!(difference(&a, &b), None, "times and the order of parallel starts do not count");
        let mut c = a.clone();
        c.operations[0].hit = vec!["w-0".into()];
        let d = difference(&a, &c).unwrap();
        assert!(d.contains("kill-one at flow.serial[1] selected [w-1] hit [w-0]"), "{d}");
        let mut e = a.clone();
        e.draws[0].draw = json!({"kind": "delay", "delay_ms": 900});
        assert!(difference(&a, &e).unwrap().starts_with("draw 1: flow.serial[0] drew"));
        let mut f = a.clone();
        f.operations.pop();
        assert_eq!(difference(&a, &f).unwrap(), "1 operations ran against 2");
    }
}
