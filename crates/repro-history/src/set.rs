//! A grow-only set: `add` (value: the element) and `read` (the `ok` value: a JSON array of the elements), as
//! Jepsen's set checker.
//!
//! Valid iff every acknowledged add that completed before the final read (the `ok` read that completed last)
//! began is in that read (else it is *lost*), and no `ok` read holds an element no add attempted (*unexpected*).
//! Adds that failed or are indeterminate but show up in the final read are counted as *recovered* (a failed one
//! separately: `fail` claims it did not happen). An acknowledged add still running when the final read began may
//! legitimately be missing from it: counted, not lost. Without any `ok` read the answer is unknown.
use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use crate::error::HistoryError;
use crate::history::{History, Outcome};
use crate::verdict::{CheckResult, Checker, Details, SetDetails, Validity};

/// How many elements the lists of [`SetDetails`] show.
pub const SHOWN: usize = 20;

/// Checks a set history.
pub fn check_set(history: &History) -> Result<CheckResult, HistoryError> {
    // Per element (canonical JSON): (first add's index, the value, ok, info, fail, ok-completed-times).
    struct Element {
        first: usize,
        value: Value,
        ok: bool,
        info: bool,
        earliest_ok_ret: Option<u64>,
    }
    let mut elements: BTreeMap<String, Element> = BTreeMap::new();
    let mut reads = Vec::new();
    for op in &history.ops {
        match op.f.as_str() {
            "add" => {
                let e = elements.entry(op.value.to_string()).or_insert_with(|| Element {
                    first: op.index,
                    value: op.value.clone(),
                    ok: false,
                    info: false,
                    earliest_ok_ret: None,
                });
                match op.outcome {
                    Outcome::Ok => {
                        e.ok = true;
                        let ret = op.ret.unwrap_or(op.call);
                        e.earliest_ok_ret = Some(e.earliest_ok_ret.map_or(ret, |r| r.min(ret)));
                    }
                    Outcome::Info => e.info = true,
                    Outcome::Fail => {}
                }
            }
            "read" => {
                if op.outcome != Outcome::Ok {
                    continue;
                }
                let Value::Array(items) = &op.result else {
                    return Err(HistoryError::field(
                        history.at(op.complete_line.unwrap_or(op.line)),
                        "value",
                        "a JSON array of the set's elements (an ok read)",
                        &op.result,
                    ));
                };
                reads.push((op, items));
            }
            other => {
                return Err(HistoryError::field(
                    history.at(op.line),
                    "f",
                    "add or read (a set)",
                    &Value::String(other.to_string()),
                ));
            }
        }
    }
    let mut d = SetDetails {
        attempted: elements.len(),
        acknowledged: elements.values().filter(|e| e.ok).count(),
        final_read_line: None,
        final_read_size: 0,
        lost_count: 0,
        lost: Vec::new(),
        unexpected_count: 0,
        unexpected: Vec::new(),
        recovered_count: 0,
        recovered_failed_count: 0,
        concurrent_missing_count: 0,
    };
    // Unexpected elements, in any ok read.
    let mut seen_unexpected = HashSet::new();
    for (_, items) in &reads {
        for v in items.iter() {
            let k = v.to_string();
            if !elements.contains_key(&k) && seen_unexpected.insert(k) {
                d.unexpected_count += 1;
                if d.unexpected.len() < SHOWN {
                    d.unexpected.push(v.clone());
                }
            }
        }
    }
    let final_read = reads.iter().max_by_key(|(op, _)| (op.ret.unwrap_or(op.call), op.index));
    let Some((fin, items)) = final_read else {
        let summary = format!("unknown: no ok read ({} elements attempted)", d.attempted);
        let valid = if d.unexpected_count > 0 { Validity::Invalid } else { Validity::Unknown };
        return Ok(CheckResult { checker: Checker::Set, valid, summary, details: Details::Set(d) });
    };
    d.final_read_line = Some(fin.complete_line.unwrap_or(fin.line));
    let present: HashSet<String> = items.iter().map(Value::to_string).collect();
    d.final_read_size = present.len();
    let mut lost: Vec<&Element> = Vec::new();
    for (k, e) in &elements {
        let here = present.contains(k);
        match (e.ok, here) {
            (true, false) => {
                if e.earliest_ok_ret.is_some_and(|r| r < fin.call) {
                    lost.push(e);
                } else {
                    d.concurrent_missing_count += 1;
                }
            }
            (false, true) => {
                d.recovered_count += 1;
                if !e.info {
                    d.recovered_failed_count += 1;
                }
            }
            _ => {}
        }
    }
    lost.sort_by_key(|e| e.first);
    d.lost_count = lost.len();
    d.lost = lost.iter().take(SHOWN).map(|e| e.value.clone()).collect();
    let valid = if d.lost_count == 0 && d.unexpected_count == 0 { Validity::Valid } else { Validity::Invalid };
    let summary = format!(
        "{}: {} acknowledged of {} attempted, {} lost, {} unexpected, {} recovered; final read at line {}: {} elements",
        if valid == Validity::Valid { "valid" } else { "invalid" },
        d.acknowledged,
        d.attempted,
        d.lost_count,
        d.unexpected_count,
        d.recovered_count,
        d.final_read_line.unwrap_or(0),
        d.final_read_size
    );
    Ok(CheckResult { checker: Checker::Set, valid, summary, details: Details::Set(d) })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::history::{Op, Process};

    fn op(f: &str, value: Value, outcome: Outcome, call: u64, ret: u64) -> Op {
        Op {
            index: 0,
            process: Process::Int(0),
            f: f.into(),
            key: None,
            value: if f == "add" { value.clone() } else { Value::Null },
            result: value,
            outcome,
            call,
            ret: (outcome != Outcome::Info).then_some(ret),
            line: 0,
            complete_line: None,
        }
    }

    fn set(ops: Vec<Op>) -> (Validity, SetDetails) {
        let mut h = History::from_ops("s", ops);
        for (i, o) in h.ops.iter_mut().enumerate() {
            o.line = i + 1;
            o.complete_line = Some(i + 1);
        }
        let c = check_set(&h).unwrap();
        let Details::Set(d) = c.details else { panic!() };
        (c.valid, d)
    }

    #[test]
    fn all_acknowledged_present_is_valid() {
        let (v, d) = set(vec![
            op("add", json!(1), Outcome::Ok, 0, 1),
            op("add", json!(2), Outcome::Ok, 2, 3),
            op("add", json!(3), Outcome::Info, 4, 5),
            op("add", json!(4), Outcome::Fail, 4, 5),
            op("read", json!([1, 2, 3]), Outcome::Ok, 10, 11),
        ]);
        assert_eq!(v, Validity::Valid);
        assert_eq!((d.attempted, d.acknowledged, d.recovered_count, d.final_read_size), (4, 2, 1, 3));
    }

    #[test]
    fn lost_unexpected_recovered() {
        let (v, d) = set(vec![
            op("add", json!(1), Outcome::Ok, 0, 1),
            op("add", json!("two"), Outcome::Ok, 2, 3),
            op("add", json!(3), Outcome::Fail, 4, 5),
            op("read", json!([1, 9]), Outcome::Ok, 6, 7),
            op("add", json!(5), Outcome::Ok, 9, 30),
            op("read", json!([1, 3]), Outcome::Ok, 10, 11),
            op("read", json!([1, 2]), Outcome::Fail, 12, 13),
        ]);
        assert_eq!(v, Validity::Invalid);
        assert_eq!(d.lost, vec![json!("two")]);
        assert_eq!((d.lost_count, d.unexpected_count, d.recovered_count, d.recovered_failed_count), (1, 1, 1, 1));
        assert_eq!(d.unexpected, vec![json!(9)]);
        assert_eq!(d.concurrent_missing_count, 1);
        assert_eq!(d.final_read_line, Some(6));
    }

    #[test]
    fn no_read_is_unknown_and_errors_name_the_line() {
        let (v, _) = set(vec![op("add", json!(1), Outcome::Ok, 0, 1)]);
        assert_eq!(v, Validity::Unknown);
        let mut h = History::from_ops("s", vec![op("read", json!(1), Outcome::Ok, 0, 1)]);
        h.ops[0].line = 4;
        let e = check_set(&h).unwrap_err().to_string();
        assert_eq!(e, "s:4: \"value\": expected a JSON array of the set's elements (an ok read), got 1");
        let h = History::from_ops("s", vec![op("cas", json!(1), Outcome::Ok, 0, 1)]);
        assert!(check_set(&h).unwrap_err().to_string().contains("expected add or read (a set)"));
    }

    #[test]
    fn lost_elements_are_capped() {
        let mut ops: Vec<Op> = (0..30).map(|i| op("add", json!(i), Outcome::Ok, i, i + 1)).collect();
        ops.push(op("read", json!([]), Outcome::Ok, 100, 101));
        let (v, d) = set(ops);
        assert_eq!(v, Validity::Invalid);
        assert_eq!((d.lost_count, d.lost.len()), (30, SHOWN));
        assert_eq!(d.lost[0], json!(0));
    }
}
