//! The flow interpreter: serial, parallel, repeat, delay and wait nodes, the step limit, the experiment's
//! timeout and cancellation (a harness error, SIGINT/SIGTERM). It knows nothing of processes or containers:
//! leaves (workloads, operations) and the conditions of waits are the [`Host`]'s, and time is a [`Clock`]'s, so
//! the semantics are unit-tested with a fake host and a fake clock.
use repro_model::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use repro_model::timeline::Event;

use crate::limits::Limits;
use crate::model::{Dur, FlowKind, FlowNode, OpCall, RepeatMode, WaitSpec};
use crate::proc::Cancel;
use repro_detcore::SplitMix64;

/// Why a flow node did not complete: the run was cancelled (a harness error, a signal, the timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Cancelled,
}

/// How the flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowOutcome {
    Completed,
    /// A harness error (a failing step, a driver failure, the timeout): the verdict is ERROR.
    Failed(String),
    /// SIGINT (2) or SIGTERM (15) interrupted it.
    Interrupted(i32),
}

impl FlowOutcome {
    /// The exit code of `repro chaos run` for this outcome alone: 0, 2 (ERROR) or 128 + the signal.
    pub fn exit_code(&self) -> i32 {
        match self {
            FlowOutcome::Completed => ExitCode::Success.code(),
            FlowOutcome::Failed(_) => ExitCode::Usage.code(),
            FlowOutcome::Interrupted(sig) => ExitCode::signalled(*sig),
        }
    }
}

/// After SIGINT/SIGTERM, the undo and the cleanup get this long (each step's timeout is cut to what is left).
pub const INTERRUPT_BUDGET: Duration = Duration::from_millis(1200);

/// Which signal interrupted the run, and when.
#[derive(Default)]
pub struct Interrupt {
    signal: AtomicI32,
    at: Mutex<Option<Instant>>,
}

impl Interrupt {
    pub fn signal(&self) -> Option<i32> {
        Some(self.signal.load(Ordering::SeqCst)).filter(|s| *s != 0)
    }
    /// Records signal `sig`; true if it is the first one.
    pub fn record(&self, sig: i32) -> bool {
        let first = self.signal.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        if first {
            *self.at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
        first
    }
    /// `d`, cut to what is left of the interrupt budget once a signal arrived.
    pub fn budget(&self, d: Duration) -> Duration {
        match *self.at.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(t) => d.min(INTERRUPT_BUDGET.saturating_sub(t.elapsed())),
            None => d,
        }
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    if sig == 2 {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}

/// A change counter that waiters can block on.
#[derive(Default)]
pub struct Notify {
    gen: Mutex<u64>,
    cv: Condvar,
}

impl Notify {
    pub fn bump(&self) {
        let mut g = self.gen.lock().unwrap_or_else(|e| e.into_inner());
        *g += 1;
        self.cv.notify_all();
    }
    /// Waits for a bump, at most `d`.
    pub fn wait(&self, d: Duration) {
        let g = self.gen.lock().unwrap_or_else(|e| e.into_inner());
        // Timing out is the normal end of a poll step; a poisoned lock still holds a usable counter.
        let _ = self.cv.wait_timeout(g, d);
    }
}

/// Time, as the interpreter sees it.
pub trait Clock: Send + Sync {
    /// Time since the clock started.
    fn now(&self) -> Duration;
    /// Sleeps `d` unless `cancel` fires first; false when cancelled.
    fn sleep(&self, cancel: &Cancel, d: Duration) -> bool;
    /// One step of a polling wait: returns after a bump of `notify` or at most `d`.
    fn pause(&self, notify: &Notify, d: Duration);
}

/// The wall clock.
pub struct RealClock(Instant);

impl Default for RealClock {
    fn default() -> Self {
        RealClock(Instant::now())
    }
}

impl Clock for RealClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
    fn sleep(&self, cancel: &Cancel, d: Duration) -> bool {
        cancel.sleep(d)
    }
    fn pause(&self, notify: &Notify, d: Duration) {
        notify.wait(d);
    }
}

/// What the interpreter asks of the engine.
pub trait Host: Sync {
    /// How many steps a leaf counts against the limit (a workload: its instances).
    fn leaf_steps(&self, name: &str) -> u64;
    /// Runs a leaf: a workload or an operation.
    fn run_leaf(&self, name: &str, path: &str) -> Result<(), Stop>;
    /// Runs an operation with its selection or duration replaced.
    fn run_call(&self, call: &OpCall, path: &str) -> Result<(), Stop>;
    /// Waits for a workload condition or an adapter signal, until `timeout`.
    fn wait(&self, w: &WaitSpec, path: &str, timeout: Duration) -> Result<(), Stop>;
    fn emit(&self, e: Event);
    /// Records a harness error (the verdict becomes ERROR) and cancels the run.
    fn harness_error(&self, reason: &str);
}

/// FNV-1a of a text: stable across versions, so a seed and a name mean the same draw forever.
pub fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The random stream of one flow node: a function of the run's seed and the node's path only (the path holds
/// every enclosing repeat round and schedule step), so a draw never depends on timing or on the order in which
/// parallel branches got there.
pub fn node_rng(seed: u64, path: &str) -> SplitMix64 {
    SplitMix64::new(seed ^ fnv1a(path).rotate_left(17) ^ 0x5eed_f10e_d4a7_0001)
}

/// A jittered delay: uniform in `[base - jitter, base + jitter]`, in whole milliseconds.
pub fn draw_delay(seed: u64, path: &str, base: Duration, jitter: Duration) -> Duration {
    let (b, j) = (base.as_millis() as u64, jitter.as_millis() as u64);
    let lo = b.saturating_sub(j);
    let span = b.saturating_add(j) - lo;
    Duration::from_millis(lo + node_rng(seed, path).below(span.saturating_add(1)))
}

/// The children a `random` node runs, in the order drawn: `pick` distinct indices below `n`.
pub fn draw_pick(seed: u64, path: &str, pick: u32, n: usize) -> Vec<usize> {
    let mut rng = node_rng(seed, path);
    let mut idx: Vec<usize> = (0..n).collect();
    let k = (pick as usize).min(n);
    for i in 0..k {
        let j = i + rng.below((n - i) as u64) as usize;
        idx.swap(i, j);
    }
    idx.truncate(k);
    idx
}

/// One step of a `schedule`: the pause before it (uniform in `[0, 2 * interval)`, whole milliseconds) and the
/// index of the choice, drawn with probability proportional to the weights.
pub fn draw_schedule_step(seed: u64, path: &str, interval: Duration, weights: &[u32]) -> (Duration, usize) {
    let mut rng = node_rng(seed, path);
    let two = (interval.as_millis() as u64).saturating_mul(2);
    let pause = Duration::from_millis(if two == 0 { 0 } else { rng.below(two) });
    let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
    let mut x = rng.below(total.max(1));
    let mut choice = 0;
    for (i, w) in weights.iter().enumerate() {
        if x < u64::from(*w) {
            choice = i;
            break;
        }
        x -= u64::from(*w);
    }
    (pause, choice)
}

/// Interprets a flow for a [`Host`].
pub struct Interpreter {
    pub cancel: Cancel,
    /// The run's seed: every draw of the flow (jitter, random, schedule) derives from it.
    pub seed: u64,
    pub clock: Box<dyn Clock>,
    pub notify: Notify,
    pub interrupt: Interrupt,
    steps: AtomicU64,
    max_steps: u64,
    /// The experiment's deadline on the clock, while the flow runs.
    deadline: Mutex<Option<(Duration, Duration)>>,
    timed_out: AtomicBool,
}

/// How long a polling wait sleeps between looks at its condition (a bump wakes it earlier).
pub const POLL: Duration = Duration::from_millis(20);

impl Interpreter {
    pub fn new(clock: Box<dyn Clock>, limits: &Limits, seed: u64) -> Interpreter {
        Interpreter {
            cancel: Cancel::default(),
            seed,
            clock,
            notify: Notify::default(),
            interrupt: Interrupt::default(),
            steps: AtomicU64::new(0),
            max_steps: limits.steps,
            deadline: Mutex::new(None),
            timed_out: AtomicBool::new(false),
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    pub fn check(&self) -> Result<(), Stop> {
        if self.cancel.is_cancelled() {
            Err(Stop::Cancelled)
        } else {
            Ok(())
        }
    }

    /// Cancels the run as SIGINT/SIGTERM does: records the signal, cancels, wakes the waiters. The signal
    /// handler calls this; tests call it to interrupt deterministically. False for a second signal.
    pub fn interrupt(&self, sig: i32, host: &dyn Host) -> bool {
        if !self.interrupt.record(sig) {
            return false;
        }
        let why = format!("interrupted by {}", signal_name(sig));
        host.emit(Event::harness_error(why.clone()));
        self.cancel.cancel(&why);
        self.notify.bump();
        true
    }

    /// Fires the experiment's timeout once the clock passed its deadline; true if it has fired.
    fn check_deadline(&self, host: &dyn Host) -> bool {
        let Some((at, timeout)) = *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) else { return false };
        if self.clock.now() < at {
            return false;
        }
        if !self.timed_out.swap(true, Ordering::SeqCst) && !self.cancel.is_cancelled() {
            host.harness_error(&format!("the experiment's timeout of {} ended the flow", Dur(timeout)));
        }
        true
    }

    /// Sleeps `d` (cut at the experiment's deadline); false if the run was cancelled meanwhile.
    pub fn sleep(&self, host: &dyn Host, d: Duration) -> bool {
        let d = match *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((at, _)) => d.min(at.saturating_sub(self.clock.now())),
            None => d,
        };
        let completed = self.clock.sleep(&self.cancel, d);
        !self.check_deadline(host) && completed && !self.cancel.is_cancelled()
    }

    /// The experiment's timeout while the flow runs (the default of waits and workloads).
    pub fn flow_timeout(&self) -> Duration {
        self.deadline.lock().unwrap_or_else(|e| e.into_inner()).map_or(Duration::MAX, |(_, t)| t)
    }

    /// One step of a polling wait (see [`POLL`]).
    pub fn pause(&self, host: &dyn Host) {
        self.clock.pause(&self.notify, POLL);
        self.check_deadline(host);
    }

    /// Counts `n` flow steps against the limit; over it, the run ends with a harness error.
    pub fn step(&self, host: &dyn Host, n: u64) -> Result<(), Stop> {
        let total = self.steps.fetch_add(n, Ordering::SeqCst).saturating_add(n);
        if total > self.max_steps {
            host.harness_error(&format!(
                "the flow ran {}",
                Limits::exceeded(format!("{total} steps"), self.max_steps, "steps")
            ));
            return Err(Stop::Cancelled);
        }
        Ok(())
    }

    /// Runs the flow within `timeout` (the experiment's): a watchdog cancels it when the time is up even
    /// while a leaf blocks outside the interpreter's sleeps.
    pub fn run(&self, host: &dyn Host, flow: &FlowNode, timeout: Duration) -> FlowOutcome {
        let now = self.clock.now();
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = Some((now.saturating_add(timeout), timeout));
        let done = Cancel::default();
        host.emit(Event::FlowStarted {});
        let res = std::thread::scope(|s| {
            s.spawn(|| {
                // The wall-clock watchdog; with a fake clock the deadline is checked at every sleep and poll.
                if done.sleep(timeout) {
                    self.check_deadline(host);
                }
            });
            let res = self.exec(host, flow, "flow");
            done.cancel("flow finished");
            res
        });
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = None;
        host.emit(Event::FlowFinished { ok: res.is_ok() });
        self.outcome()
    }

    /// How the run stands: interrupted, failed (cancelled by a harness error) or not.
    pub fn outcome(&self) -> FlowOutcome {
        if let Some(sig) = self.interrupt.signal() {
            FlowOutcome::Interrupted(sig)
        } else if let Some(reason) = self.cancel.reason() {
            FlowOutcome::Failed(reason)
        } else {
            FlowOutcome::Completed
        }
    }

    pub fn exec(&self, host: &dyn Host, node: &FlowNode, path: &str) -> Result<(), Stop> {
        self.check()?;
        match &node.kind {
            FlowKind::Leaf(name) => self.step(host, host.leaf_steps(name))?,
            FlowKind::Op(_) => self.step(host, 1)?,
            FlowKind::Wait(_) | FlowKind::Delay { .. } => self.step(host, 1)?,
            FlowKind::Serial(_)
            | FlowKind::Parallel(_)
            | FlowKind::Repeat { .. }
            | FlowKind::Random(_)
            | FlowKind::Schedule(_) => {}
        }
        match &node.kind {
            FlowKind::Leaf(name) => {
                host.emit(Event::NodeStarted {
                    node: path.into(),
                    name: Some(name.clone()),
                    delay: None,
                    repeat: None,
                });
                let res = host.run_leaf(name, path);
                host.emit(Event::NodeFinished { node: path.into(), name: name.clone(), ok: res.is_ok() });
                res
            }
            FlowKind::Op(call) => {
                host.emit(Event::NodeStarted {
                    node: path.into(),
                    name: Some(call.name.clone()),
                    delay: None,
                    repeat: None,
                });
                let res = host.run_call(call, path);
                host.emit(Event::NodeFinished { node: path.into(), name: call.name.clone(), ok: res.is_ok() });
                res
            }
            FlowKind::Serial(v) => {
                for (i, n) in v.iter().enumerate() {
                    self.exec(host, n, &format!("{path}.serial[{i}]"))?;
                }
                Ok(())
            }
            FlowKind::Parallel(v) => {
                let results: Vec<Result<(), Stop>> = std::thread::scope(|s| {
                    let handles: Vec<_> = v
                        .iter()
                        .enumerate()
                        .map(|(i, n)| {
                            let p = format!("{path}.parallel[{i}]");
                            s.spawn(move || self.exec(host, n, &p))
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap_or(Err(Stop::Cancelled))).collect()
                });
                results.into_iter().collect()
            }
            FlowKind::Delay { base, jitter } => {
                let d = match jitter {
                    Some(j) => {
                        let d = draw_delay(self.seed, path, base.0, j.0);
                        host.emit(Event::FlowDrawn {
                            node: path.into(),
                            draw: serde_json::json!({"kind": "delay", "delay_ms": d.as_millis() as u64}),
                        });
                        d
                    }
                    None => base.0,
                };
                self.pause_for(host, path, d)
            }
            FlowKind::Random(r) => {
                let picked = draw_pick(self.seed, path, r.pick, r.from.len());
                host.emit(Event::FlowDrawn {
                    node: path.into(),
                    draw: serde_json::json!({"kind": "random", "picked": picked}),
                });
                for i in picked {
                    self.exec(host, &r.from[i], &format!("{path}.random[{i}]"))?;
                }
                Ok(())
            }
            FlowKind::Schedule(sc) => {
                let weights: Vec<u32> = sc.from.iter().map(|w| w.weight).collect();
                for step in 0..sc.length {
                    let at = format!("{path}.schedule[{step}]");
                    let (pause, choice) = draw_schedule_step(self.seed, &at, sc.interval.0, &weights);
                    host.emit(Event::FlowDrawn {
                        node: at.clone(),
                        draw: serde_json::json!({
                            "kind": "schedule", "step": step, "pause_ms": pause.as_millis() as u64, "choice": choice
                        }),
                    });
                    self.step(host, 1)?;
                    self.pause_for(host, &at, pause)?;
                    self.exec(host, &sc.from[choice].node, &format!("{at}.do"))?;
                }
                Ok(())
            }
            FlowKind::Wait(w) => {
                let timeout = w.timeout.map_or_else(|| self.flow_timeout(), |d| d.0);
                host.wait(w, path, timeout)?;
                if let Some(d) = w.delay {
                    if !self.sleep(host, d.0) {
                        return Err(Stop::Cancelled);
                    }
                }
                Ok(())
            }
            FlowKind::Repeat { mode, body } => {
                let started = self.clock.now();
                let mut i = 0u32;
                loop {
                    match mode {
                        RepeatMode::Times(n) if i >= *n => break,
                        RepeatMode::For(d) if i > 0 && self.clock.now().saturating_sub(started) >= d.0 => break,
                        _ => {}
                    }
                    host.emit(Event::NodeStarted { node: path.into(), name: None, delay: None, repeat: Some(i + 1) });
                    self.exec(host, body, &format!("{path}.repeat[{i}]"))?;
                    i += 1;
                }
                Ok(())
            }
        }
    }

    /// A delay node's pause (or a schedule's pause before a step), as a `node.started` with its length.
    fn pause_for(&self, host: &dyn Host, path: &str, d: Duration) -> Result<(), Stop> {
        host.emit(Event::NodeStarted { node: path.into(), name: None, delay: Some(secs(d)), repeat: None });
        if !self.sleep(host, d) {
            return Err(Stop::Cancelled);
        }
        Ok(())
    }

    /// Polls `met` until it holds; after `timeout` (on the clock), a harness error `what` and Err.
    pub fn wait_until<T>(
        &self,
        host: &dyn Host,
        timeout: Duration,
        what: impl Fn() -> String,
        mut met: impl FnMut() -> Option<T>,
    ) -> Result<T, Stop> {
        let started = self.clock.now();
        loop {
            self.check()?;
            if let Some(v) = met() {
                return Ok(v);
            }
            if self.clock.now().saturating_sub(started) >= timeout {
                host.harness_error(&format!("{} timed out after {}", what(), Dur(timeout)));
                return Err(Stop::Cancelled);
            }
            self.pause(host);
        }
    }
}

/// Seconds, rounded to the millisecond (the timeline's precision).
pub fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeClock;

    /// A host whose leaves only record their name (and fail when named `fail`).
    #[derive(Default)]
    struct Recorder {
        leaves: Mutex<Vec<String>>,
        events: Mutex<Vec<String>>,
    }

    impl Host for Recorder {
        fn leaf_steps(&self, _name: &str) -> u64 {
            1
        }
        fn run_leaf(&self, name: &str, path: &str) -> Result<(), Stop> {
            self.leaves.lock().unwrap().push(format!("{name}@{path}"));
            if name == "fail" {
                self.harness_error("fail failed");
                return Err(Stop::Cancelled);
            }
            Ok(())
        }
        fn run_call(&self, call: &OpCall, path: &str) -> Result<(), Stop> {
            let sel = call.select.as_ref().map_or(String::new(), |s| format!(" {s}"));
            self.leaves.lock().unwrap().push(format!("{}{sel}@{path}", call.name));
            Ok(())
        }
        fn wait(&self, _w: &WaitSpec, _path: &str, _timeout: Duration) -> Result<(), Stop> {
            Ok(())
        }
        fn emit(&self, e: Event) {
            self.events.lock().unwrap().push(e.name());
        }
        fn harness_error(&self, reason: &str) {
            self.events.lock().unwrap().push(format!("harness.error {reason}"));
        }
    }

    fn flow(yaml: &str) -> FlowNode {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn interpreter(steps: u64) -> Interpreter {
        Interpreter::new(Box::new(FakeClock::default()), &Limits { steps, ..Limits::default() }, 42)
    }

    #[test]
    fn serial_and_repeat_run_in_order_with_their_paths() {
        let h = Recorder::default();
        let i = interpreter(100);
        let f = flow("serial: [a, {repeat: {times: 2, serial: [b]}}, c]");
        assert_eq!(i.run(&h, &f, Duration::from_secs(60)), FlowOutcome::Completed);
        assert_eq!(
            *h.leaves.lock().unwrap(),
            [
                "a@flow.serial[0]",
                "b@flow.serial[1].repeat[0].serial[0]",
                "b@flow.serial[1].repeat[1].serial[0]",
                "c@flow.serial[2]"
            ]
        );
    }

    #[test]
    fn a_failing_leaf_stops_the_serial_and_the_outcome_is_failed() {
        let h = Recorder::default();
        let i = interpreter(100);
        // The host records the error; the interpreter's cancel is what a real host's harness_error sets.
        let f = flow("serial: [a, fail, c]");
        i.cancel.cancel("fail failed");
        assert_eq!(i.run(&h, &f, Duration::from_secs(60)), FlowOutcome::Failed("fail failed".into()));
        assert!(h.leaves.lock().unwrap().is_empty(), "a cancelled run starts no leaf");
        let i = interpreter(100);
        assert_eq!(i.exec(&h, &f, "flow"), Err(Stop::Cancelled));
        assert_eq!(*h.leaves.lock().unwrap(), ["a@flow.serial[0]", "fail@flow.serial[1]"]);
    }

    #[test]
    fn parallel_runs_every_branch_and_steps_are_counted() {
        let h = Recorder::default();
        let i = interpreter(3);
        let f = flow("parallel: [a, b, c]");
        assert_eq!(i.run(&h, &f, Duration::from_secs(60)), FlowOutcome::Completed);
        let mut leaves = h.leaves.lock().unwrap().clone();
        leaves.sort();
        assert_eq!(leaves, ["a@flow.parallel[0]", "b@flow.parallel[1]", "c@flow.parallel[2]"]);
        // A fourth step is over the limit of 3.
        let f = flow("serial: [d]");
        assert_eq!(i.exec(&h, &f, "flow"), Err(Stop::Cancelled));
        assert!(h.events.lock().unwrap().iter().any(|e| e.starts_with("harness.error the flow ran 4 steps")));
    }

    #[test]
    fn an_interrupt_is_recorded_once_and_makes_the_outcome() {
        let h = Recorder::default();
        let i = interpreter(100);
        assert!(i.interrupt(15, &h));
        assert!(!i.interrupt(2, &h), "a second signal is not a new interrupt");
        assert_eq!(i.outcome(), FlowOutcome::Interrupted(15));
        assert_eq!(i.outcome().exit_code(), 143);
        assert!(i.interrupt.budget(Duration::from_secs(60)) <= INTERRUPT_BUDGET);
        assert!(!i.sleep(&h, Duration::from_secs(1)), "sleeps end at once after the interrupt");
    }

    fn leaves_with(seed: u64, yaml: &str) -> (Vec<String>, Vec<String>) {
        let h = Recorder::default();
        let i = Interpreter::new(Box::new(FakeClock::default()), &Limits::default(), seed);
        assert_eq!(i.run(&h, &flow(yaml), Duration::from_secs(3600)), FlowOutcome::Completed);
        let leaves = h.leaves.lock().unwrap().clone();
        let events = h.events.lock().unwrap().clone();
        (leaves, events)
    }

    #[test]
    fn random_picks_k_distinct_children_as_a_function_of_seed_and_path() {
        let y = "repeat: {times: 3, random: {pick: 2, from: [a, b, c, d, e]}}";
        let (a, ev) = leaves_with(7, y);
        assert_eq!(a.len(), 6, "{a:?}");
        for round in a.chunks(2) {
            assert_ne!(round[0].split('@').next(), round[1].split('@').next(), "distinct picks in one round");
        }
        assert!(a[0].contains(".random["), "the path names the child: {a:?}");
        assert_eq!(ev.iter().filter(|e| *e == "flow.drawn").count(), 3);
        assert_eq!(leaves_with(7, y).0, a, "same seed, same picks");
        let others: std::collections::BTreeSet<Vec<String>> = (0..20).map(|s| leaves_with(s, y).0).collect();
        assert!(others.len() > 5, "seeds pick differently: {others:?}");
    }

    #[test]
    fn jittered_delays_stay_in_bounds_and_replay_by_seed() {
        for seed in 0..200 {
            let d = draw_delay(seed, "flow.serial[1]", Duration::from_secs(2), Duration::from_millis(500));
            assert!(d >= Duration::from_millis(1500) && d <= Duration::from_millis(2500), "{d:?}");
            assert_eq!(d, draw_delay(seed, "flow.serial[1]", Duration::from_secs(2), Duration::from_millis(500)));
        }
        let all: std::collections::BTreeSet<Duration> =
            (0..200).map(|s| draw_delay(s, "flow", Duration::from_secs(2), Duration::from_millis(500))).collect();
        assert!(all.len() > 100, "spread over the range");
        assert_eq!(draw_delay(1, "x", Duration::from_millis(5), Duration::ZERO), Duration::from_millis(5));
        // The fake clock advanced by exactly the drawn delay.
        let clock = std::sync::Arc::new(FakeClock::default());
        let h = Recorder::default();
        let i = Interpreter::new(Box::new(clock.clone()), &Limits::default(), 9);
        let f = flow("{delay: 2s, jitter: 500ms}");
        assert_eq!(i.run(&h, &f, Duration::from_secs(60)), FlowOutcome::Completed);
        assert_eq!(clock.now(), draw_delay(9, "flow", Duration::from_secs(2), Duration::from_millis(500)));
    }

    #[test]
    fn a_schedule_runs_length_weighted_draws_with_bounded_pauses() {
        let y = "schedule: {from: [{do: a, weight: 3}, {do: b, weight: 1}, {do: never, weight: 0}], length: 400, interval: 1s}";
        let (leaves, ev) = leaves_with(3, y);
        assert_eq!(leaves.len(), 400);
        assert!(leaves.iter().all(|l| !l.starts_with("never@")), "weight 0 is never drawn");
        let a = leaves.iter().filter(|l| l.starts_with("a@")).count();
        assert!((240..=360).contains(&a), "about three quarters are a: {a}");
        assert!(leaves[0].ends_with("flow.schedule[0].do"), "{}", leaves[0]);
        assert_eq!(ev.iter().filter(|e| *e == "flow.drawn").count(), 400);
        assert_eq!(leaves_with(3, y).0, leaves, "same seed, same schedule");
        assert_ne!(leaves_with(4, y).0, leaves);
        for s in 0..100 {
            let (pause, choice) = draw_schedule_step(s, "p", Duration::from_secs(1), &[1, 1]);
            assert!(pause < Duration::from_secs(2) && choice < 2);
        }
    }
}
