//! A counter: `add` or `incr` (value: a non-negative integer delta, 1 when absent) and `read` (the `ok` value:
//! an integer), as Jepsen's counter checker.
//!
//! Each `ok` read must lie within [the sum of the `ok` adds completed before the read was invoked, the sum of
//! the `ok` and `info` adds invoked before the read completed]. `fail`ed adds count in neither bound. The bounds
//! hold only if no delta is negative (a negative add would lower the lower bound of later reads), so a negative
//! delta is an error naming its line, not a silently wrong answer. Without any `ok` read the answer is unknown.
use serde_json::Value;

use crate::error::HistoryError;
use crate::history::{History, Op, Outcome};
use crate::verdict::{CheckResult, Checker, CounterDetails, CounterRead, Details, Validity};

/// Checks a counter history.
pub fn check_counter(history: &History) -> Result<CheckResult, HistoryError> {
    // (ret, delta) of ok adds; (call, delta) of ok and info adds; the ok reads with their values.
    let mut done: Vec<(u64, u128)> = Vec::new();
    let mut begun: Vec<(u64, u128)> = Vec::new();
    let mut reads: Vec<(&Op, i128, u64)> = Vec::new();
    for op in &history.ops {
        match op.f.as_str() {
            "add" | "incr" => {
                if op.outcome == Outcome::Fail {
                    continue;
                }
                let delta = match &op.value {
                    Value::Null => 1,
                    Value::Number(n) if n.as_u64().is_some() => n.as_u64().unwrap_or_default(),
                    other => {
                        return Err(HistoryError::field(
                            history.at(op.line),
                            "value",
                            "a non-negative integer delta, or null for 1 (the counter checker assumes deltas are \
                             never negative)",
                            other,
                        ));
                    }
                };
                begun.push((op.call, u128::from(delta)));
                if op.outcome == Outcome::Ok {
                    done.push((op.ret.unwrap_or(op.call).max(op.call), u128::from(delta)));
                }
            }
            "read" => {
                if op.outcome != Outcome::Ok {
                    continue;
                }
                let value = match &op.result {
                    Value::Number(n) if n.as_i64().is_some() => i128::from(n.as_i64().unwrap_or_default()),
                    Value::Number(n) if n.as_u64().is_some() => i128::from(n.as_u64().unwrap_or_default()),
                    other => {
                        return Err(HistoryError::field(
                            history.at(op.complete_line.unwrap_or(op.line)),
                            "value",
                            "an integer (an ok read of a counter)",
                            other,
                        ));
                    }
                };
                reads.push((op, value, op.ret.unwrap_or(op.call).max(op.call)));
            }
            other => {
                return Err(HistoryError::field(
                    history.at(op.line),
                    "f",
                    "add, incr or read (a counter)",
                    &Value::String(other.to_string()),
                ));
            }
        }
    }
    let prefix = |v: &mut Vec<(u64, u128)>| -> Vec<u128> {
        v.sort_unstable();
        let mut sums = Vec::with_capacity(v.len() + 1);
        let mut s = 0u128;
        sums.push(0);
        for (_, d) in v.iter() {
            s = s.saturating_add(*d);
            sums.push(s);
        }
        sums
    };
    let done_sums = prefix(&mut done);
    let begun_sums = prefix(&mut begun);
    reads.sort_by_key(|(op, _, ret)| (*ret, op.index));
    let mut d = CounterDetails { adds: begun.len(), reads: reads.len(), bad_reads: 0, first_bad: None };
    for (op, value, ret) in &reads {
        let lower = done_sums[done.partition_point(|(t, _)| *t < op.call)];
        let upper = begun_sums[begun.partition_point(|(t, _)| *t < *ret)];
        let inside =
            i128::try_from(lower).is_ok_and(|l| l <= *value) && u128::try_from(*value).is_ok_and(|v| v <= upper);
        if !inside {
            d.bad_reads += 1;
            if d.first_bad.is_none() {
                let cap = |x: u128| u64::try_from(x).unwrap_or(u64::MAX);
                let read =
                    CounterRead { op: (*op).clone(), value: op.result.clone(), lower: cap(lower), upper: cap(upper) };
                d.first_bad = Some(read);
            }
        }
    }
    let (valid, summary) = match &d.first_bad {
        Some(b) => (
            Validity::Invalid,
            format!(
                "invalid: {} of {} reads out of bounds; the first, by process {} at line {}, read {} outside [{}, {}]",
                d.bad_reads,
                d.reads,
                b.op.process,
                b.op.complete_line.unwrap_or(b.op.line),
                b.value,
                b.lower,
                b.upper
            ),
        ),
        None if d.reads == 0 => (Validity::Unknown, format!("unknown: no ok read ({} adds)", d.adds)),
        None => (Validity::Valid, format!("valid: {} reads within their bounds ({} adds)", d.reads, d.adds)),
    };
    Ok(CheckResult { checker: Checker::Counter, valid, summary, details: Details::Counter(d) })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::history::Process;

    fn op(f: &str, v: Value, outcome: Outcome, call: u64, ret: u64) -> Op {
        Op {
            index: 0,
            process: Process::Int(1),
            f: f.into(),
            key: None,
            value: if f == "read" { Value::Null } else { v.clone() },
            result: if f == "read" { v } else { Value::Null },
            outcome,
            call,
            ret: (outcome != Outcome::Info).then_some(ret),
            line: 0,
            complete_line: None,
        }
    }

    fn counter(ops: Vec<Op>) -> CheckResult {
        let mut h = History::from_ops("c", ops);
        for (i, o) in h.ops.iter_mut().enumerate() {
            o.line = i + 1;
        }
        check_counter(&h).unwrap()
    }

    #[test]
    fn reads_within_bounds() {
        let c = counter(vec![
            op("add", json!(2), Outcome::Ok, 0, 10),
            op("incr", Value::Null, Outcome::Ok, 0, 10),
            op("read", json!(3), Outcome::Ok, 20, 30),
            // Concurrent with an add of 5 (ok) and an info add of 1: anything in [3, 9].
            op("add", json!(5), Outcome::Ok, 40, 60),
            op("add", json!(1), Outcome::Info, 40, 0),
            op("add", json!(100), Outcome::Fail, 40, 41),
            op("read", json!(3), Outcome::Ok, 45, 50),
            op("read", json!(9), Outcome::Ok, 45, 50),
            op("read", json!(8), Outcome::Ok, 70, 80),
            op("read", json!(7), Outcome::Fail, 70, 80),
        ]);
        assert_eq!(c.valid, Validity::Valid, "{}", c.summary);
        let Details::Counter(d) = c.details else { panic!() };
        assert_eq!((d.adds, d.reads), (4, 4));
    }

    #[test]
    fn out_of_bounds_reads() {
        let c = counter(vec![
            op("add", json!(2), Outcome::Ok, 0, 10),
            op("read", json!(1), Outcome::Ok, 20, 30),
            op("read", json!(3), Outcome::Ok, 20, 31),
            op("read", json!(-1), Outcome::Ok, 20, 32),
        ]);
        assert_eq!(c.valid, Validity::Invalid);
        assert!(
            c.summary.contains("3 of 3 reads out of bounds; the first, by process 1 at line 2, read 1 outside [2, 2]"),
            "{}",
            c.summary
        );
        let Details::Counter(d) = &c.details else { panic!() };
        let b = d.first_bad.as_ref().unwrap();
        assert_eq!((&b.value, b.lower, b.upper), (&json!(1), 2, 2));
        // The bounds serialize as plain numbers.
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["details"]["first_bad"]["upper"], json!(2));
        assert_eq!(serde_json::from_value::<CheckResult>(v).unwrap(), c);
    }

    #[test]
    fn errors_and_unknown() {
        let mut h = History::from_ops("c", vec![op("add", json!(-1), Outcome::Ok, 0, 1)]);
        h.ops[0].line = 3;
        let e = check_counter(&h).unwrap_err().to_string();
        assert!(e.starts_with("c:3: \"value\": expected a non-negative integer delta"), "{e}");
        assert!(e.ends_with("got -1"), "{e}");
        let h = History::from_ops("c", vec![op("read", json!("x"), Outcome::Ok, 0, 1)]);
        assert!(check_counter(&h).unwrap_err().to_string().contains("an integer (an ok read of a counter)"));
        let h = History::from_ops("c", vec![op("write", json!(1), Outcome::Ok, 0, 1)]);
        assert!(check_counter(&h).unwrap_err().to_string().contains("add, incr or read"));
        let c = counter(vec![op("add", json!(1), Outcome::Ok, 0, 1)]);
        assert_eq!(c.valid, Validity::Unknown);
        // Huge deltas do not overflow.
        let c = counter(vec![
            op("add", json!(u64::MAX), Outcome::Ok, 0, 1),
            op("add", json!(u64::MAX), Outcome::Ok, 0, 1),
            op("read", json!(u64::MAX), Outcome::Ok, 5, 6),
        ]);
        assert_eq!(c.valid, Validity::Invalid);
    }
}
