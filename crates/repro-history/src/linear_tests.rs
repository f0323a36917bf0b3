use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::history::Process;

/// One operation: `ret` None is info.
pub(crate) fn op(
    process: i64,
    f: &str,
    value: Value,
    result: Value,
    outcome: Outcome,
    call: u64,
    ret: Option<u64>,
) -> Op {
    Op {
        index: 0,
        process: Process::Int(process),
        f: f.to_string(),
        key: None,
        value,
        result,
        outcome,
        call,
        ret: if outcome == Outcome::Info { None } else { ret },
        line: 0,
        complete_line: None,
    }
}

fn w(p: i64, v: i64, call: u64, ret: u64) -> Op {
    op(p, "write", json!(v), json!(v), Outcome::Ok, call, Some(ret))
}
fn r(p: i64, v: Value, call: u64, ret: u64) -> Op {
    op(p, "read", Value::Null, v, Outcome::Ok, call, Some(ret))
}
fn cas(p: i64, e: i64, n: i64, outcome: Outcome, call: u64, ret: u64) -> Op {
    op(p, "cas", json!([e, n]), Value::Null, outcome, call, Some(ret))
}
fn info_w(p: i64, v: i64, call: u64) -> Op {
    op(p, "write", json!(v), Value::Null, Outcome::Info, call, None)
}

fn hist(ops: Vec<Op>) -> History {
    let mut h = History::from_ops("h", ops);
    for (i, o) in h.ops.iter_mut().enumerate() {
        o.line = i + 1;
    }
    h
}

fn reg(ops: Vec<Op>) -> CheckResult {
    check_register(&hist(ops), &LinearOptions::default()).unwrap()
}

fn window_of(c: &CheckResult) -> &Window {
    let Details::Linearizable(d) = &c.details else { panic!("not linearizable details") };
    d.window.as_ref().expect("a window")
}

#[test]
fn sequential_and_concurrent() {
    assert_eq!(reg(vec![]).valid, Validity::Valid);
    assert_eq!(reg(vec![w(0, 1, 0, 10), r(1, json!(1), 20, 30)]).valid, Validity::Valid);
    // A stale read after the write completed.
    let c = reg(vec![w(0, 1, 0, 10), r(1, Value::Null, 20, 30)]);
    assert_eq!(c.valid, Validity::Invalid, "{}", c.summary);
    assert!(c.summary.contains("the read of null by process 1 at line 2 cannot be linearized"), "{}", c.summary);
    // The same read overlapping the write may come first.
    assert_eq!(reg(vec![w(0, 1, 0, 10), r(1, Value::Null, 5, 15)]).valid, Validity::Valid);
    // Equal times count as concurrent.
    assert_eq!(reg(vec![w(0, 1, 0, 10), r(1, Value::Null, 10, 15)]).valid, Validity::Valid);
    // Two reads overlapping a write: both orders of old/new are fine, but not new then old once sequential.
    assert_eq!(reg(vec![w(0, 1, 0, 100), r(1, json!(1), 10, 20), r(2, Value::Null, 30, 40)]).valid, Validity::Invalid);
    assert_eq!(reg(vec![w(0, 1, 0, 100), r(1, Value::Null, 10, 20), r(2, json!(1), 30, 40)]).valid, Validity::Valid);
    // A read of a value never written.
    let c = reg(vec![w(0, 1, 0, 10), r(1, json!(7), 20, 30)]);
    assert_eq!(c.valid, Validity::Invalid);
}

#[test]
fn cas_and_failures() {
    let ok = Outcome::Ok;
    assert_eq!(reg(vec![w(0, 0, 0, 1), cas(0, 0, 1, ok, 2, 3), r(1, json!(1), 4, 5)]).valid, Validity::Valid);
    // A cas that swapped although the value was 2.
    let c = reg(vec![w(0, 0, 0, 1), w(1, 2, 2, 3), cas(0, 0, 1, ok, 4, 5)]);
    assert_eq!(c.valid, Validity::Invalid);
    assert_eq!(window_of(&c).failing.f, "cas");
    // A failed cas is dropped, and so is a failed write.
    let failed = cas(0, 5, 1, Outcome::Fail, 2, 3);
    assert_eq!(reg(vec![w(0, 0, 0, 1), failed, r(1, json!(0), 4, 5)]).valid, Validity::Valid);
    let failed_write = op(0, "write", json!(1), Value::Null, Outcome::Fail, 0, Some(1));
    let c = reg(vec![failed_write, r(1, json!(1), 4, 5)]);
    assert_eq!(c.valid, Validity::Invalid);
    assert_eq!(window_of(&c).initial, WindowInitial::Given(Value::Null));
    // The initial value is an option.
    let opts = LinearOptions { initial: json!(0), ..LinearOptions::default() };
    let c = check_register(&hist(vec![cas(0, 0, 1, ok, 0, 1), r(1, json!(1), 4, 5)]), &opts).unwrap();
    assert_eq!(c.valid, Validity::Valid);
}

#[test]
fn info_writes_may_or_may_not_take_effect() {
    // Taken effect: the read sees it.
    assert_eq!(reg(vec![info_w(0, 1, 0), r(1, json!(1), 10, 20)]).valid, Validity::Valid);
    // Not taken effect (yet, or ever).
    assert_eq!(reg(vec![info_w(0, 1, 0), r(1, Value::Null, 10, 20)]).valid, Validity::Valid);
    // Not taken effect, then taken effect.
    assert_eq!(reg(vec![info_w(0, 1, 0), r(1, Value::Null, 10, 20), r(1, json!(1), 30, 40)]).valid, Validity::Valid);
    // But once seen it cannot be undone.
    let c = reg(vec![info_w(0, 1, 0), r(1, json!(1), 10, 20), r(1, Value::Null, 30, 40)]);
    assert_eq!(c.valid, Validity::Invalid);
    // An info write cannot take effect before its call.
    assert_eq!(reg(vec![r(1, json!(1), 0, 5), info_w(0, 1, 10)]).valid, Validity::Invalid);
    // An info cas whose expected value never holds is not an error: it never took effect.
    let info_cas = op(0, "cas", json!([9, 1]), Value::Null, Outcome::Info, 0, None);
    assert_eq!(reg(vec![info_cas, r(1, Value::Null, 10, 20)]).valid, Validity::Valid);
    // Info reads are dropped.
    let info_read = op(0, "read", Value::Null, Value::Null, Outcome::Info, 0, None);
    let c = reg(vec![w(0, 1, 0, 1), info_read]);
    assert_eq!(c.valid, Validity::Valid);
    let Details::Linearizable(d) = &c.details else { panic!() };
    assert_eq!((d.ops, d.dropped), (1, 1));
}

#[test]
fn the_window_is_small_and_names_the_failing_op() {
    // 40 good operations, then a stale read among more good ones.
    let mut ops = Vec::new();
    let mut t = 0;
    for i in 0..20 {
        ops.push(w(0, i, t, t + 5));
        ops.push(r(1, json!(i), t + 6, t + 9));
        t += 10;
    }
    ops.push(w(0, 100, t, t + 5));
    ops.push(r(1, json!(19), t + 6, t + 9)); // stale
    t += 10;
    for i in 0..10 {
        ops.push(w(0, 200 + i, t, t + 5));
        t += 10;
    }
    let c = reg(ops);
    assert_eq!(c.valid, Validity::Invalid);
    let win = window_of(&c);
    assert_eq!(win.failing.line, 42);
    assert_eq!(win.initial, WindowInitial::Any);
    assert!(win.minimal);
    let lines: Vec<usize> = win.ops.iter().map(|o| o.line).collect();
    assert_eq!(lines, vec![41, 42], "{}", serde_json::to_string_pretty(win).unwrap());
    assert_eq!((win.start, win.end), (200, 209));
    // The result serializes with its verdict as a string.
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["valid"], json!("invalid"));
    assert_eq!(v["checker"], json!("linearizable-register"));
    assert_eq!(v["details"]["kind"], json!("linearizable"));
    let back: CheckResult = serde_json::from_value(v).unwrap();
    assert_eq!(back, c);
}

#[test]
fn bounds_give_unknown() {
    let ops = vec![w(0, 1, 0, 10), w(1, 2, 0, 10), r(2, json!(2), 20, 30)];
    let opts = LinearOptions { max_steps: 2, ..LinearOptions::default() };
    let c = check_register(&hist(ops.clone()), &opts).unwrap();
    assert_eq!(c.valid, Validity::Unknown, "{}", c.summary);
    assert!(c.summary.starts_with("unknown: "));
    let opts = LinearOptions { max_cache_bytes: 10, ..LinearOptions::default() };
    assert_eq!(check_register(&hist(ops), &opts).unwrap().valid, Validity::Unknown);
}

#[test]
fn errors_name_the_line() {
    let e = check_register(
        &hist(vec![w(0, 1, 0, 1), op(0, "cas", json!(3), json!(0), Outcome::Ok, 2, Some(3))]),
        &LinearOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "h:2: \"value\": expected [expected, new] for a cas, got 3");
    let e = check_register(
        &hist(vec![op(0, "add", json!(3), json!(0), Outcome::Ok, 2, Some(3))]),
        &LinearOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "h:1: \"f\": expected one of read, write, cas (a register), got \"add\"");
    let e = check_kv(&hist(vec![w(0, 1, 0, 1)]), &LinearOptions::default()).unwrap_err();
    assert!(e.to_string().starts_with("h:1: \"key\": expected a string"), "{e}");
}

fn keyed(mut o: Op, k: &str) -> Op {
    o.key = Some(k.to_string());
    o
}

#[test]
fn kv_checks_each_key() {
    let ops = vec![
        keyed(w(0, 1, 0, 10), "a"),
        keyed(w(1, 2, 0, 10), "b"),
        keyed(r(2, json!(1), 20, 30), "a"),
        keyed(r(3, json!(2), 20, 30), "b"),
    ];
    let c = check_kv(&hist(ops.clone()), &LinearOptions::default()).unwrap();
    assert_eq!(c.valid, Validity::Valid, "{}", c.summary);
    // As one register it is not linearizable.
    assert_eq!(check_register(&hist(ops.clone()), &LinearOptions::default()).unwrap().valid, Validity::Invalid);
    let mut bad = ops;
    bad.push(keyed(r(2, json!(1), 40, 50), "b"));
    let c = check_kv(&hist(bad), &LinearOptions::default()).unwrap();
    assert_eq!(c.valid, Validity::Invalid);
    assert!(c.summary.starts_with("not linearizable: key \"b\": "), "{}", c.summary);
    let Details::Linearizable(d) = &c.details else { panic!() };
    assert_eq!((d.key.as_deref(), d.keys), (Some("b"), 2));
    assert!(d.window.as_ref().unwrap().ops.iter().all(|o| o.key.as_deref() == Some("b")));
    let opts = LinearOptions { max_steps: 0, ..LinearOptions::default() };
    let ops = vec![keyed(w(0, 1, 0, 10), "a"), keyed(w(1, 2, 0, 10), "b")];
    let c = check_kv(&hist(ops), &opts).unwrap();
    assert_eq!(c.valid, Validity::Unknown);
    let Details::Linearizable(d) = &c.details else { panic!() };
    assert_eq!(d.unknown_keys, vec!["a".to_string(), "b".to_string()]);
}

// ---- a brute-force checker to compare with ----

/// Every order of the operations consistent with real time (info operations optional), from `initial` (`None`:
/// any initial value). Only for a handful of operations.
pub(crate) fn brute_linearizable(ops: &[Op], initial: Option<&Value>) -> bool {
    let ops: Vec<&Op> =
        ops.iter().filter(|o| o.outcome != Outcome::Fail && !(o.f == "read" && o.outcome != Outcome::Ok)).collect();
    fn apply(state: &Option<Value>, o: &Op) -> Option<Option<Value>> {
        let same = |v: &Value| state.as_ref().is_none_or(|s| s == v);
        match o.f.as_str() {
            "read" => same(&o.result).then(|| Some(o.result.clone())),
            "write" => Some(Some(o.value.clone())),
            "cas" => {
                let (e, n) = (&o.value[0], &o.value[1]);
                same(e).then(|| Some(n.clone()))
            }
            _ => None,
        }
    }
    fn dfs(ops: &[&Op], placed: &mut Vec<bool>, state: Option<Value>) -> bool {
        if ops.iter().zip(placed.iter()).all(|(o, &p)| p || o.ret.is_none()) {
            return true;
        }
        for i in 0..ops.len() {
            if placed[i] {
                continue;
            }
            let blocked = (0..ops.len()).any(|j| j != i && !placed[j] && ops[j].ret.is_some_and(|r| r < ops[i].call));
            if blocked {
                continue;
            }
            if let Some(next) = apply(&state, ops[i]) {
                placed[i] = true;
                if dfs(ops, placed, next) {
                    return true;
                }
                placed[i] = false;
            }
        }
        false
    }
    dfs(&ops, &mut vec![false; ops.len()], initial.cloned())
}

/// (f, a, b, process, call, duration, outcome) -> an operation over values 0..3 (null is the initial value).
fn random_op((f, a, b, p, call, dur, out): (u8, u8, u8, u8, u64, u64, u8)) -> Op {
    let val = |x: u8| if x == 3 { Value::Null } else { json!(x) };
    let outcome = match out {
        0 => Outcome::Fail,
        1 | 2 => Outcome::Info,
        _ => Outcome::Ok,
    };
    let ret = Some(call + dur);
    match f {
        0 => op(p.into(), "read", Value::Null, val(a), outcome, call, ret),
        1 => op(p.into(), "write", val(a % 3), Value::Null, outcome, call, ret),
        _ => op(p.into(), "cas", json!([val(a), val(b % 3)]), Value::Null, outcome, call, ret),
    }
}

fn random_history() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec((0u8..3, 0u8..4, 0u8..4, 0u8..4, 0u64..30, 0u64..15, 0u8..10), 0..=7)
        .prop_map(|v| v.into_iter().map(random_op).collect())
}

/// Plays (linearization point, operation, takes effect) on a real register in point order: reads get the value
/// then, writes and matching cas change it, a cas that does not match fails.
fn play_register(ops: &mut [(u64, Op, bool)]) {
    ops.sort_by_key(|(point, _, _)| *point);
    let mut state = Value::Null;
    for (_, o, effect) in ops.iter_mut() {
        match o.f.as_str() {
            "read" => o.result = state.clone(),
            "write" if *effect => state = o.value.clone(),
            "cas" if *effect => {
                if o.value[0] == state {
                    state = o.value[1].clone();
                } else if o.outcome == Outcome::Ok {
                    o.outcome = Outcome::Fail;
                }
            }
            _ => {}
        }
    }
}

/// A history of a real register: each operation takes effect at a point inside its interval (info ones maybe
/// not at all); reads return the value then, a cas that does not match fails.
fn simulated_history() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec((0u8..3, 0u8..3, 0u8..3, 0u8..4, 0u64..30, 0u64..15, 0u8..10, 0u64..1000), 0..=40)
        .prop_map(|v| {
            let mut ops: Vec<(u64, Op, bool)> = v
                .into_iter()
                .map(|(f, a, b, p, call, dur, out, at)| {
                    let mut o = random_op((f, a, b, p, call, dur, 5));
                    let point = call + at % (dur + 1);
                    // 0: info, took effect; 1: info, did not.
                    let effect = out != 1;
                    if out <= 1 {
                        o.outcome = Outcome::Info;
                        o.ret = None;
                    }
                    (point, o, effect)
                })
                .collect();
            play_register(&mut ops);
            ops.into_iter().map(|(_, o, _)| o).collect()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn wgl_agrees_with_brute_force(ops in random_history()) {
        let h = hist(ops);
        let c = check_register(&h, &LinearOptions::default()).unwrap();
        let brute = brute_linearizable(&h.ops, Some(&Value::Null));
        prop_assert_eq!(c.valid == Validity::Valid, brute, "{}", c.summary);
        prop_assert_ne!(c.valid, Validity::Unknown);
        if c.valid == Validity::Invalid {
            let win = window_of(&c);
            let initial = match &win.initial {
                WindowInitial::Any => None,
                WindowInitial::Given(v) => Some(v),
            };
            prop_assert!(!brute_linearizable(&win.ops, initial), "the window is linearizable: {:?}", win);
            if initial.is_none() {
                for v in [Value::Null, json!(0), json!(1), json!(2)] {
                    prop_assert!(!brute_linearizable(&win.ops, Some(&v)));
                }
            }
            prop_assert!(win.ops.iter().any(|o| o == &win.failing));
            for o in &win.ops {
                prop_assert!(h.ops.contains(o));
                prop_assert!(win.start <= o.call && o.ret.unwrap_or(o.call) <= win.end);
            }
            prop_assert!(win.minimal);
            // 1-minimal: without any one operation (but the failing one) the window is linearizable.
            for i in 0..win.ops.len() {
                if win.ops[i] == win.failing {
                    continue;
                }
                let mut fewer = win.ops.clone();
                fewer.remove(i);
                prop_assert!(brute_linearizable(&fewer, initial), "not minimal: {:?}", win);
            }
        }
    }

    #[test]
    fn a_real_register_is_linearizable(ops in simulated_history()) {
        let c = check_register(&hist(ops), &LinearOptions::default()).unwrap();
        prop_assert_eq!(c.valid, Validity::Valid, "{}", c.summary);
    }

    #[test]
    fn kv_is_each_key_as_a_register(a in random_history(), b in random_history()) {
        let ops: Vec<Op> = a.into_iter().map(|o| keyed(o, "a")).chain(b.into_iter().map(|o| keyed(o, "b"))).collect();
        let h = hist(ops);
        let c = check_kv(&h, &LinearOptions::default()).unwrap();
        let per_key = ["a", "b"].iter().all(|k| {
            let ops: Vec<Op> = h.ops.iter().filter(|o| o.key.as_deref() == Some(k)).cloned().collect();
            brute_linearizable(&ops, Some(&Value::Null))
        });
        prop_assert_eq!(c.valid == Validity::Valid, per_key, "{}", c.summary);
    }
}

/// A deterministic xorshift, for the large history.
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `n` operations of `procs` processes on a real register (reads 40%, writes 40%, cas 20%, some info).
fn real_register(n: usize, procs: usize, seed: u64) -> History {
    real_register_info(n, procs, seed, 50)
}

fn real_register_info(n: usize, procs: usize, seed: u64, info_one_in: u64) -> History {
    let mut rng = Rng(seed);
    let mut clock = vec![0u64; procs];
    let mut ops: Vec<(u64, Op, bool)> = Vec::new();
    for i in 0..n {
        let p = i % procs;
        let call = clock[p] + rng.next(50);
        let ret = call + 1 + rng.next(200);
        clock[p] = ret + 1;
        let point = call + rng.next(ret - call + 1);
        let mut o = match rng.next(5) {
            0 | 1 => w(p as i64, rng.next(10) as i64, call, ret),
            2 => cas(p as i64, rng.next(10) as i64, rng.next(10) as i64, Outcome::Ok, call, ret),
            _ => r(p as i64, Value::Null, call, ret),
        };
        // One in 50 is indeterminate; half of those took effect.
        let mut effect = true;
        if info_one_in > 0 && rng.next(info_one_in) == 0 {
            o.outcome = Outcome::Info;
            o.ret = None;
            effect = rng.next(2) == 0;
        }
        ops.push((point, o, effect));
    }
    play_register(&mut ops);
    let mut ops: Vec<Op> = ops.into_iter().map(|(_, o, _)| o).collect();
    ops.sort_by_key(|o| o.call);
    hist(ops)
}

#[test]
fn two_thousand_ops_from_five_processes_check_fast() {
    let h = real_register(2_000, 5, 0x9e37_79b9_7f4a_7c15);
    let start = std::time::Instant::now();
    let c = check_register(&h, &LinearOptions::default()).unwrap();
    let took = start.elapsed();
    eprintln!("2000 operations, 5 processes: {:?}, {}", took, c.summary);
    assert_eq!(c.valid, Validity::Valid, "{}", c.summary);
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    // One bad read breaks it, and the window is found quickly too (without info operations: each one that may
    // or may not have taken effect multiplies what a proof of non-linearizability explores; see linear.rs).
    let h = real_register_info(2_000, 5, 0x9e37_79b9_7f4a_7c15, 0);
    let mut bad = h.ops.clone();
    let last = bad.iter().rposition(|o| o.f == "read" && o.outcome == Outcome::Ok).unwrap();
    bad[last].result = json!(1000);
    let start = std::time::Instant::now();
    let c = check_register(&hist(bad), &LinearOptions::default()).unwrap();
    let took = start.elapsed();
    eprintln!("with a bad read: {:?}, {}", took, c.summary);
    assert_eq!(c.valid, Validity::Invalid);
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
}

#[test]
fn the_failing_op_is_not_a_read_of_a_write_called_after_it() {
    // The read of 1 is called before the write of 1, and linearized after it: fine. The stale read is not.
    let c = reg(vec![r(0, json!(1), 0, 100), w(1, 1, 10, 20), r(2, Value::Null, 200, 210)]);
    assert_eq!(c.valid, Validity::Invalid);
    let win = window_of(&c);
    assert_eq!(win.failing.line, 3, "{}", c.summary);
    assert_eq!(win.ops.iter().map(|o| o.line).collect::<Vec<_>>(), vec![2, 3]);
}

#[test]
fn info_writes_nobody_reads_are_dropped() {
    let c = reg(vec![info_w(0, 9, 0), w(1, 1, 0, 10), r(2, json!(1), 20, 30), info_w(3, 1, 40)]);
    assert_eq!(c.valid, Validity::Valid);
    let Details::Linearizable(d) = &c.details else { panic!() };
    // The info write of 9 is dropped, the one of 1 (a value read) is kept.
    assert_eq!((d.ops, d.dropped), (3, 1));
}
