//! Linearizability of a register and of a key-value map of registers.
//!
//! The search is Wing and Gong's, with Lowe's memoization, laid out as Porcupine's checker: every operation
//! gives a call entry and a return entry, sorted by time (at equal times calls first: such operations count as
//! concurrent) in a doubly linked list; the search walks the list from its head, *lifts* a call it can apply to
//! the model (removing the call and its return), pushes it and starts again from the head; reaching a return
//! entry means that operation could not be linearized in time: pop the last lifted call, *unlift* it, and try the
//! next call after it. The set of the linearized operations and the model state after them form the cache: a
//! (set, state) already seen is not explored again.
//!
//! One departure from Porcupine and Knossos: the cache holds a 128-bit hash of the set of linearized
//! operations, not the set: the XOR of a pseudo-random 128-bit key per operation (Zobrist hashing), updated in
//! constant time as operations are lifted and unlifted. A bitset per entry costs n/8 bytes and n/64 words of
//! copying per step, which for a history of 100,000 operations exhausts any reasonable memory in a few thousand
//! steps; the hash costs 16 bytes. The price: two different sets with the same hash would wrongly prune a branch.
//! With at most 10^8 entries, the chance of any collision is below 10^16 / 2^128, about 3 x 10^-23.
//!
//! Before the search, `info` writes and cas whose value nothing consumes (no `ok` read returns it, no cas expects
//! it) are dropped: in a linearization holding one, the operation right after it can only be a write (nothing
//! succeeds on its value but a write), so the same order without it is one too. With unique values per write (as
//! Jepsen's workloads write them), that is most of them.
//!
//! Cost: a linearizable history is confirmed along one path, in a few steps per operation (200,000 operations
//! of 5 processes: under a million steps, 0.16 s in a release build). Proving a history *not* linearizable
//! explores every configuration up to the anomaly, and every pending `info` operation multiplies those (did it
//! take effect, and when): 2,000 operations on 10 values with one bad read at the end take 50,000 steps without
//! `info` operations, 206,000 with 5 of them, and reach the 10 million step bound (`unknown`) with 31. Knossos'
//! search has the same weakness; a key-value history split into many short keys suffers least.
//!
//! A key-value history is checked key by key: linearizability is compositional (Herlihy and Wing's locality,
//! Porcupine's P-compositionality), so the map is linearizable iff each key's register is.
//!
//! The search is bounded ([`LinearOptions::max_steps`], [`LinearOptions::max_cache_bytes`]); beyond the bound the
//! answer is [`Validity::Unknown`], never a hang.
//!
//! When a history is not linearizable, [`Window`] is a small part of it that is not linearizable by itself.
//! First the shortest non-linearizable *cut*: the first k operations in call order, those that returned before
//! the k-th call as they are and the others pending (as if the history had been stopped then). Cuts grow
//! monotonically (a history whose cut is not linearizable is not either), so a binary search finds the first;
//! the operation that could not be linearized is the first to return of those the failing cut holds as returned
//! and the one before did not. The window starts as those k operations with their real returns. If it is not
//! linearizable from *any* initial value, it is shrunk under that reading ([`WindowInitial::Any`]: the earliest
//! operations are dropped while it stays so, as writes before the window only choose its initial value);
//! otherwise the anomaly involves the initial value itself ([`WindowInitial::Given`]). Then operations are
//! dropped one at a time, reads first (dropping a read never makes a window less linearizable), while the window
//! stays non-linearizable, until no single operation can be dropped ([`Window::minimal`]) or the shrinking budget
//! ([`LinearOptions::max_window_steps`]) runs out. Note that dropping a write can make a window non-linearizable
//! on its own: the window is a subset that is not linearizable, read it beside the history around it.
use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use crate::error::HistoryError;
use crate::history::{History, Op, Outcome};
use crate::verdict::{CheckResult, Checker, Details, LinearDetails, LinearModel, Validity, Window, WindowInitial};

/// The bounds and initial value of a linearizability check.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearOptions {
    /// The register's value before the first operation (of every key, for a map).
    pub initial: Value,
    /// Search steps (entries visited, plus one per operation for each search's setup) for the whole check, all
    /// keys together.
    pub max_steps: u64,
    /// The memoization cache's memory, roughly (48 bytes an entry), per search.
    pub max_cache_bytes: usize,
    /// Search steps for finding and shrinking the window of a non-linearizable history.
    pub max_window_steps: u64,
}

impl Default for LinearOptions {
    fn default() -> Self {
        LinearOptions {
            initial: Value::Null,
            max_steps: 10_000_000,
            max_cache_bytes: 256 << 20,
            max_window_steps: 2_000_000,
        }
    }
}

/// Checks a register history: `read` (its `ok` value is what was read), `write` (value), `cas` (value
/// `[expected, new]`; `ok` means it swapped). Keys are ignored.
pub fn check_register(history: &History, opts: &LinearOptions) -> Result<CheckResult, HistoryError> {
    let ops: Vec<&Op> = history.ops.iter().collect();
    let mut steps = 0u64;
    let prep = prepare(history, &ops, &opts.initial)?;
    let dropped = ops.len() - prep.ops.len();
    let n = prep.ops.len();
    let outcome = search(&prep.ops, prep.init, &mut steps, opts.max_steps, opts.max_cache_bytes);
    let mut details = LinearDetails {
        model: LinearModel::Register,
        ops: n,
        dropped,
        keys: 1,
        steps,
        key: None,
        unknown_keys: Vec::new(),
        window: None,
    };
    let (valid, summary) = match outcome {
        Search::Valid => {
            (Validity::Valid, format!("linearizable: {n} operations ({dropped} dropped), {steps} search steps"))
        }
        Search::Unknown => {
            details.unknown_keys.push(String::new());
            (Validity::Unknown, unknown_summary(opts, steps, n))
        }
        Search::Invalid => {
            let w = window(history, &prep, opts);
            let s = format!("not linearizable: {}", describe_window(&w));
            details.window = Some(w);
            (Validity::Invalid, s)
        }
    };
    Ok(CheckResult { checker: Checker::LinearizableRegister, valid, summary, details: Details::Linearizable(details) })
}

/// Checks a key-value history: every operation has a `key`, each key is an independent register (see
/// [`check_register`]); the first key (in key order) found not linearizable is reported with its window.
pub fn check_kv(history: &History, opts: &LinearOptions) -> Result<CheckResult, HistoryError> {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &history.ops {
        let Some(key) = op.key.as_deref() else {
            return Err(HistoryError::field(
                history.at(op.line),
                "key",
                "a string (the linearizable-kv checker needs every operation's key)",
                &Value::Null,
            ));
        };
        by_key.entry(key).or_default().push(op);
    }
    let mut steps = 0u64;
    let mut details = LinearDetails {
        model: LinearModel::Kv,
        ops: 0,
        dropped: 0,
        keys: by_key.len(),
        steps: 0,
        key: None,
        unknown_keys: Vec::new(),
        window: None,
    };
    // Prepare every key first: a malformed operation is an error whichever key it is in.
    let mut prepared = Vec::with_capacity(by_key.len());
    for (key, ops) in &by_key {
        let prep = prepare(history, ops, &opts.initial)?;
        details.dropped += ops.len() - prep.ops.len();
        details.ops += prep.ops.len();
        prepared.push((*key, prep));
    }
    // Once the step budget is spent, every later key's search stops at its first step: unknown too.
    for (key, prep) in &prepared {
        match search(&prep.ops, prep.init, &mut steps, opts.max_steps, opts.max_cache_bytes) {
            Search::Valid => {}
            Search::Unknown => details.unknown_keys.push(key.to_string()),
            Search::Invalid => {
                details.key = Some(key.to_string());
                details.window = Some(window(history, prep, opts));
                break;
            }
        }
    }
    details.steps = steps;
    let (n, dropped, keys) = (details.ops, details.dropped, details.keys);
    let (valid, summary) = if let (Some(key), Some(w)) = (&details.key, &details.window) {
        (Validity::Invalid, format!("not linearizable: key {key:?}: {}", describe_window(w)))
    } else if !details.unknown_keys.is_empty() {
        let k = details.unknown_keys.len();
        (Validity::Unknown, format!("{} ({k} of {keys} keys undecided)", unknown_summary(opts, steps, n)))
    } else {
        (
            Validity::Valid,
            format!("linearizable: {n} operations on {keys} keys ({dropped} dropped), {steps} search steps"),
        )
    };
    Ok(CheckResult { checker: Checker::LinearizableKv, valid, summary, details: Details::Linearizable(details) })
}

fn unknown_summary(opts: &LinearOptions, steps: u64, n: usize) -> String {
    format!(
        "unknown: the search of {n} operations stopped at a bound ({steps} steps of max_steps {}, or the cache \
         over max_cache_bytes {})",
        opts.max_steps, opts.max_cache_bytes
    )
}

fn describe_window(w: &Window) -> String {
    let f = &w.failing;
    let what = match f.f.as_str() {
        "read" => format!("read of {}", crate::error::shown(&f.result)),
        _ => format!("{} of {}", f.f, crate::error::shown(&f.value)),
    };
    let from = match &w.initial {
        WindowInitial::Any => "from any initial value".to_string(),
        WindowInitial::Given(v) => format!("from initial value {}", crate::error::shown(v)),
    };
    let which = if w.minimal { "smallest window" } else { "window (not shrunk further: its step budget ran out)" };
    format!(
        "the {what} by process {} at line {} cannot be linearized; {which}: {} operations in [{}, {}] ns, not \
         linearizable {from}",
        f.process,
        f.line,
        w.ops.len(),
        w.start,
        w.end
    )
}

// ---- the model ----

/// A register operation over interned values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ROp {
    Read(u32),
    Write(u32),
    Cas(u32, u32),
}

/// The state "any value": the first read or cas fixes it.
const ANY: u32 = u32::MAX;

fn step(state: u32, op: ROp) -> Option<u32> {
    match op {
        ROp::Read(v) => (state == v || state == ANY).then_some(v),
        ROp::Write(v) => Some(v),
        ROp::Cas(e, n) => (state == e || state == ANY).then_some(n),
    }
}

/// An operation as the search sees it.
#[derive(Debug, Clone, Copy)]
struct COp {
    op: ROp,
    call: u64,
    /// `None`: at infinity (info).
    ret: Option<u64>,
    /// Its index in `History::ops`.
    src: usize,
}

struct Prepared {
    ops: Vec<COp>,
    init: u32,
}

#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
}

impl Interner {
    fn id(&mut self, v: &Value) -> u32 {
        let next = u32::try_from(self.ids.len()).unwrap_or(ANY - 1).min(ANY - 1);
        *self.ids.entry(v.to_string()).or_insert(next)
    }
}

fn prepare(history: &History, ops: &[&Op], initial: &Value) -> Result<Prepared, HistoryError> {
    let mut values = Interner::default();
    let init = values.id(initial);
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        if op.outcome == Outcome::Fail {
            continue;
        }
        let rop = match op.f.as_str() {
            "read" => {
                if op.outcome != Outcome::Ok {
                    continue;
                }
                ROp::Read(values.id(&op.result))
            }
            "write" => ROp::Write(values.id(&op.value)),
            "cas" => match &op.value {
                Value::Array(a) if a.len() == 2 => ROp::Cas(values.id(&a[0]), values.id(&a[1])),
                other => {
                    return Err(HistoryError::field(history.at(op.line), "value", "[expected, new] for a cas", other));
                }
            },
            other => {
                return Err(HistoryError::field(
                    history.at(op.line),
                    "f",
                    "one of read, write, cas (a register)",
                    &Value::String(other.to_string()),
                ));
            }
        };
        let ret = op.ret.map(|r| r.max(op.call));
        out.push(COp { op: rop, call: op.call, ret, src: op.index });
    }
    // An info operation whose value nothing consumes (no ok read returns it, no cas expects it) is dropped: in a
    // linearization that holds it, what follows it until the next write succeeds on any value, so the same order
    // without it is one too.
    let mut consumed = HashSet::new();
    for o in &out {
        match o.op {
            ROp::Read(v) | ROp::Cas(v, _) => {
                consumed.insert(v);
            }
            ROp::Write(_) => {}
        }
    }
    out.retain(|o| match o.op {
        ROp::Write(v) | ROp::Cas(_, v) => o.ret.is_some() || consumed.contains(&v),
        ROp::Read(_) => true,
    });
    Ok(Prepared { ops: out, init })
}

// ---- the search ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    Valid,
    Invalid,
    Unknown,
}

const NIL: usize = usize::MAX;

/// The Wing–Gong–Lowe search over `ops` from state `init`; `steps` counts on from its value, up to `max_steps`.
fn search(ops: &[COp], init: u32, steps: &mut u64, max_steps: u64, max_cache_bytes: usize) -> Search {
    let n = ops.len();
    if n == 0 {
        return Search::Valid;
    }
    // Setting up costs about one step per operation: charged, so that many small searches (the window's) are
    // bounded by the same budget as one long one.
    *steps = steps.saturating_add(n as u64);
    if *steps > max_steps {
        return Search::Unknown;
    }
    // Entries sorted: (at infinity, time, call before return, op).
    let mut events: Vec<(bool, u64, u8, usize)> = Vec::with_capacity(2 * n);
    for (i, o) in ops.iter().enumerate() {
        events.push((false, o.call, 0, i));
        match o.ret {
            Some(r) => events.push((false, r, 1, i)),
            None => events.push((true, 0, 1, i)),
        }
    }
    events.sort_unstable();
    let head = 2 * n;
    let mut next = vec![NIL; 2 * n + 1];
    let mut prev = vec![NIL; 2 * n + 1];
    let mut ret_node = vec![0usize; n];
    let mut last = head;
    for (pos, ev) in events.iter().enumerate() {
        if ev.2 == 1 {
            ret_node[ev.3] = pos;
        }
        next[last] = pos;
        prev[pos] = last;
        last = pos;
    }
    // A cache entry: a 128-bit hash of the linearized set and the state, with the table's overhead, roughly.
    let entry_bytes = 48usize;
    let keys: Vec<u128> = (0..n as u64).map(zobrist).collect();
    let mut set_hash = 0u128;
    let mut cache: HashSet<(u128, u32)> = HashSet::new();
    let mut calls: Vec<(usize, u32)> = Vec::new();
    let mut state = init;
    let mut entry = next[head];
    loop {
        if entry == NIL || next[head] == NIL {
            return Search::Valid;
        }
        *steps = steps.saturating_add(1);
        if *steps > max_steps {
            return Search::Unknown;
        }
        let (infinite, _, kind, i) = events[entry];
        if kind == 0 {
            match step(state, ops[i].op) {
                Some(new) => {
                    set_hash ^= keys[i];
                    if cache.insert((set_hash, new)) {
                        if cache.len().saturating_mul(entry_bytes) > max_cache_bytes {
                            return Search::Unknown;
                        }
                        calls.push((entry, state));
                        state = new;
                        // lift
                        let r = ret_node[i];
                        next[prev[entry]] = next[entry];
                        prev[next[entry]] = prev[entry];
                        next[prev[r]] = next[r];
                        if next[r] != NIL {
                            prev[next[r]] = prev[r];
                        }
                        entry = next[head];
                    } else {
                        set_hash ^= keys[i];
                        entry = next[entry];
                    }
                }
                None => entry = next[entry],
            }
        } else {
            if infinite {
                // Every operation left returns at infinity (info): they need not take effect.
                return Search::Valid;
            }
            let Some((e, s)) = calls.pop() else {
                return Search::Invalid;
            };
            state = s;
            let j = events[e].3;
            set_hash ^= keys[j];
            // unlift
            let r = ret_node[j];
            next[prev[r]] = r;
            if next[r] != NIL {
                prev[next[r]] = r;
            }
            next[prev[e]] = e;
            prev[next[e]] = e;
            entry = next[e];
        }
    }
}

/// The pseudo-random key of operation `i` (splitmix64, twice): fixed, so that a check is reproducible.
fn zobrist(i: u64) -> u128 {
    let mix = |x: u64| {
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (u128::from(mix(2 * i)) << 64) | u128::from(mix(2 * i + 1))
}

// ---- the window ----

fn window(history: &History, prep: &Prepared, opts: &LinearOptions) -> Window {
    let mut steps = 0u64;
    let max = opts.max_window_steps;
    let mut order: Vec<usize> = (0..prep.ops.len()).collect();
    order.sort_by_key(|&i| (prep.ops[i].call, prep.ops[i].ret.is_none(), prep.ops[i].ret, prep.ops[i].src));
    let check = |set: &[usize], init: u32, steps: &mut u64| -> Search {
        let sub: Vec<COp> = set.iter().map(|&i| prep.ops[i]).collect();
        search(&sub, init, steps, max, opts.max_cache_bytes)
    };
    // The shortest non-linearizable prefix in call order, cut in time: P(k) is the first k operations, those
    // returning before the k-th call as they are, the others pending (they may or may not have taken effect by
    // then). Unlike a plain prefix (which loses a write called after a read but linearized before it), a history
    // whose cut is not linearizable is not either, and cuts grow monotonically: a binary search finds the first.
    // P(n + 1) is the history itself. P(lo) linearizable, P(hi) not.
    let n = order.len();
    let cut = |k: usize| -> Vec<usize> { order[..k.min(n)].to_vec() };
    let cut_time = |k: usize| if k > n { u64::MAX } else { prep.ops[order[k - 1]].call };
    let check_cut = |k: usize, steps: &mut u64| -> Search {
        if k > n {
            return check(&order, prep.init, steps);
        }
        let t = cut_time(k);
        let sub: Vec<COp> = order[..k]
            .iter()
            .map(|&i| {
                let mut o = prep.ops[i];
                if o.ret.is_some_and(|r| r >= t) {
                    o.ret = None;
                }
                o
            })
            .collect();
        search(&sub, prep.init, steps, max, opts.max_cache_bytes)
    };
    let (mut lo, mut hi) = (0usize, n + 1);
    let mut exact = true;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match check_cut(mid, &mut steps) {
            Search::Invalid => hi = mid,
            Search::Valid => lo = mid,
            Search::Unknown => {
                exact = false;
                break;
            }
        }
    }
    // The operation that could not be linearized: of those P(hi) holds as returned and P(lo) did not, the first
    // to return.
    let (t_lo, t_hi) = (if lo == 0 { 0 } else { cut_time(lo) }, cut_time(hi));
    let mut set: Vec<usize> = cut(hi);
    let failing = set
        .iter()
        .copied()
        .filter(|&i| prep.ops[i].ret.is_some_and(|r| r < t_hi && (lo == 0 || r >= t_lo)))
        .min_by_key(|&i| (prep.ops[i].ret, i))
        .unwrap_or(set[set.len() - 1]);
    let any = exact && check(&set, ANY, &mut steps) == Search::Invalid;
    let init = if any { ANY } else { prep.init };
    if any {
        // Drop the earliest operations (not the failing one) while the rest is not linearizable from any value:
        // s_lo fails, s_hi is untried or linearizable.
        let last = set.iter().position(|&i| i == failing).unwrap_or(0);
        let (mut s_lo, mut s_hi) = (0usize, last);
        if check(&set[last..], ANY, &mut steps) == Search::Invalid {
            s_lo = last;
        } else {
            while s_hi - s_lo > 1 {
                let mid = s_lo + (s_hi - s_lo) / 2;
                match check(&set[mid..], ANY, &mut steps) {
                    Search::Invalid => s_lo = mid,
                    Search::Valid => s_hi = mid,
                    Search::Unknown => break,
                }
            }
        }
        set.drain(..s_lo);
    }
    // Drop single operations, reads first, until none can go.
    let mut minimal = exact;
    'passes: loop {
        let mut candidates: Vec<usize> = set.iter().copied().filter(|&i| i != failing).collect();
        candidates.sort_by_key(|&i| !matches!(prep.ops[i].op, ROp::Read(_)));
        let mut dropped_any = false;
        for c in candidates {
            if steps >= max {
                minimal = false;
                break 'passes;
            }
            let without: Vec<usize> = set.iter().copied().filter(|&i| i != c).collect();
            if check(&without, init, &mut steps) == Search::Invalid {
                set = without;
                dropped_any = true;
            }
        }
        if !dropped_any {
            break;
        }
    }
    let ops: Vec<Op> = set.iter().map(|&i| history.ops[prep.ops[i].src].clone()).collect();
    let start = ops.iter().map(|o| o.call).min().unwrap_or(0);
    let end = ops.iter().map(|o| o.ret.unwrap_or(o.call).max(o.call)).max().unwrap_or(0);
    let initial = if any { WindowInitial::Any } else { WindowInitial::Given(opts.initial.clone()) };
    Window { ops, start, end, failing: history.ops[prep.ops[failing].src].clone(), initial, minimal }
}

#[cfg(test)]
#[path = "linear_tests.rs"]
mod tests;
