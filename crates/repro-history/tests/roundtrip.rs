//! Histories written as JSON lines (as the workload helpers write them: each process's operations one after
//! the other, lines in time order across processes) parse back to the operations they describe.
use proptest::prelude::*;
use repro_history::{check_register, parse, LinearOptions, Outcome};
use serde_json::{json, Value};

/// One generated operation: (process, f, value, read result, outcome, call, ret).
type Gen = (u8, String, Value, Value, Outcome, u64, u64);

fn history() -> impl Strategy<Value = Vec<Gen>> {
    // Per process: a sequence of (f, a, b, gap before the call, duration, outcome).
    let one = (0u8..3, 0u8..3, 0u8..3, 0u64..20, 0u64..20, 0u8..10);
    proptest::collection::vec(proptest::collection::vec(one, 0..6), 2..=4).prop_map(|procs| {
        let mut out = Vec::new();
        for (p, ops) in procs.into_iter().enumerate() {
            let mut t = 0u64;
            for (f, a, b, gap, dur, o) in ops {
                let call = t + gap;
                let ret = call + dur;
                t = ret;
                let outcome = match o {
                    0 => Outcome::Fail,
                    1 => Outcome::Info,
                    _ => Outcome::Ok,
                };
                let (f, value, result) = match f {
                    0 => ("read", Value::Null, json!(a)),
                    1 => ("write", json!(a), json!(a)),
                    _ => ("cas", json!([a, b]), Value::Null),
                };
                out.push((p as u8, f.to_string(), value, result, outcome, call, ret));
            }
        }
        out
    })
}

/// The JSON lines of `ops`: invokes and completions sorted by time (invokes first at equal times, then by
/// process), as concurrent writers appending to one file would leave them.
fn lines(ops: &[Gen]) -> String {
    let mut events: Vec<(u64, u8, u8, usize)> = Vec::new();
    for (i, (p, ..)) in ops.iter().enumerate() {
        events.push((ops[i].5, 0, *p, i));
        events.push((ops[i].6, 1, *p, i));
    }
    // A process's completion and its next invoke may share a time: its completion comes first.
    events.sort_by_key(|&(t, kind, p, i)| (t, p, i, kind));
    let mut text = String::new();
    for (t, kind, p, i) in events {
        let (_, f, value, result, outcome, ..) = &ops[i];
        let (ty, v) = match (kind, outcome) {
            (0, _) => ("invoke", value),
            (_, Outcome::Ok) => ("ok", if f == "read" { result } else { value }),
            (_, Outcome::Fail) => ("fail", value),
            (_, Outcome::Info) => ("info", value),
        };
        let line = json!({"process": p, "type": ty, "f": f, "value": v, "time": t});
        text.push_str(&line.to_string());
        text.push('\n');
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn written_histories_parse_back(ops in history()) {
        let text = lines(&ops);
        let h = parse("h.jsonl", &text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(h.ops.len(), ops.len());
        // Per process, the parsed operations are the generated ones, in order.
        for p in 0u8..4 {
            let generated: Vec<&Gen> = ops.iter().filter(|g| g.0 == p).collect();
            let parsed: Vec<_> =
                h.ops.iter().filter(|o| o.process == repro_history::Process::Int(i64::from(p))).collect();
            prop_assert_eq!(parsed.len(), generated.len());
            for (op, g) in parsed.into_iter().zip(generated) {
                prop_assert_eq!((&op.f, op.call, &op.value, op.outcome), (&g.1, g.5, &g.2, g.4));
                prop_assert_eq!(op.ret, if g.4 == Outcome::Info { None } else { Some(g.6) });
                if g.4 == Outcome::Ok && g.1 == "read" {
                    prop_assert_eq!(&op.result, &g.3);
                }
                prop_assert!(op.line >= 1 && op.complete_line.is_some_and(|c| c > op.line));
            }
        }
        // The checkers never fail on a well-formed register history.
        check_register(&h, &LinearOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}
