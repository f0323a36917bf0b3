//! The engine of one run: its state (targets, instances, undo stack, watcher lines) and the [`Host`] the flow
//! interpreter drives. Its children are the parts of [`Ctx`]: targets in [`targets`], instances and workloads in
//! [`instances`], operations and faults in [`ops`] (network faults through the proxies of [`network`], stress
//! faults in [`stress`]), the watchers and scrapes whose lines it waits for in [`observers`]; everything the
//! system under test does goes through the [`Driver`].
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use repro_model::timeline::Event;

use crate::driver::{Driver, DriverCx, InstanceRt, TargetRt, Victim};
use crate::flow::{secs, Clock, Host, Interpreter, Stop};
use crate::limits::Limits;
use crate::model::*;
use crate::timeline::Timeline;
use crate::undo::UndoStack;
use observers::WatchLines;

pub mod instances;
pub mod network;
pub mod observers;
pub mod ops;
pub mod stress;
pub mod targets;
#[cfg(test)]
mod tests;

/// What an undo does.
#[derive(Debug, Clone, PartialEq)]
pub enum UndoAction {
    /// Start the target again if it is down.
    StartTarget(String),
    /// Resume the frozen victims (SIGCONT, `docker unpause`).
    Thaw { victims: Vec<Victim>, names: Vec<String> },
    /// An adapter operation's undo hook.
    Hook { script: String, env: BTreeMap<String, String> },
    /// Remove a network fault's proxy rules.
    NetRules(network::NetUndo),
    /// Stop a stress fault's stress-ng.
    StopStress(stress::StressUndo),
}

/// The state of one run, shared by the flow's branches, the waiters and the observers.
pub struct Ctx {
    pub exp: Experiment,
    pub adapter: Adapter,
    pub run_dir: PathBuf,
    pub run_id: String,
    pub seed: u64,
    pub tl: Timeline,
    pub flow: Interpreter,
    pub driver: Box<dyn Driver>,
    /// The variables of every hook (see [`crate::common::base_env`]).
    pub env: BTreeMap<String, String>,
    /// The run's variables before the adapter's `env:` (to make each identity's view: [`Ctx::identity_env`]).
    pub env_raw: BTreeMap<String, String>,
    /// The proxies of the targets' proxied ports.
    pub net: network::Network,
    pub targets: BTreeMap<String, Arc<TargetRt>>,
    pub instances: Mutex<BTreeMap<String, Vec<Arc<InstanceRt>>>>,
    pub op_runs: Mutex<HashMap<String, u32>>,
    pub undo: UndoStack<UndoAction>,
    pub watch_lines: Mutex<HashMap<String, WatchLines>>,
    /// Process groups of every instance ever started (for the leak check).
    pub groups: Mutex<Vec<i32>>,
    /// Process groups of watchers (killed with the rest if the cleanup after a signal overruns).
    pub watcher_groups: Mutex<Vec<i32>>,
    /// Target incarnations whose exit has not been recorded yet.
    pub pending: Mutex<Vec<PendingExit>>,
    /// Set once the run directory is final; the deadline after a signal leaves it alone from then on.
    pub finished: Mutex<bool>,
    /// The docker events watcher: its stop flag and its end.
    pub docker_events: Mutex<Option<EventStream>>,
    /// Itself, for the waiter threads of the instances it starts.
    me: std::sync::Weak<Ctx>,
}

/// A running event stream: its stop flag and the receiver of its end.
pub type EventStream = (Arc<AtomicBool>, std::sync::mpsc::Receiver<()>);

/// A target incarnation's exit, delivered by its waiter: (target, pid, exit).
pub type PendingExit = (String, i32, std::sync::mpsc::Receiver<crate::driver::Exit>);

/// What a run is made of, to build its [`Ctx`].
pub struct CtxParts {
    pub exp: Experiment,
    pub adapter: Adapter,
    pub run_dir: PathBuf,
    pub run_id: String,
    pub seed: u64,
    pub tl: Timeline,
    pub clock: Box<dyn Clock>,
    pub driver: Box<dyn Driver>,
    pub env: BTreeMap<String, String>,
    /// `env` before the adapter's `env:`.
    pub env_raw: BTreeMap<String, String>,
    pub net: network::Network,
    pub limits: Limits,
}

impl Ctx {
    pub fn new(p: CtxParts) -> Arc<Ctx> {
        let targets =
            p.adapter.targets.iter().map(|t| (t.name.value.clone(), Arc::new(TargetRt::new(t.clone())))).collect();
        Arc::new_cyclic(|me| Ctx {
            me: me.clone(),
            exp: p.exp,
            adapter: p.adapter,
            run_dir: p.run_dir,
            run_id: p.run_id,
            seed: p.seed,
            tl: p.tl,
            flow: Interpreter::new(p.clock, &p.limits, p.seed),
            driver: p.driver,
            env: p.env,
            env_raw: p.env_raw,
            net: p.net,
            targets,
            instances: Mutex::new(BTreeMap::new()),
            op_runs: Mutex::new(HashMap::new()),
            undo: UndoStack::default(),
            watch_lines: Mutex::new(HashMap::new()),
            groups: Mutex::new(Vec::new()),
            watcher_groups: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            finished: Mutex::new(false),
            docker_events: Mutex::new(None),
        })
    }

    pub fn emit(&self, e: Event) {
        self.tl.emit(e);
    }

    /// The shared handle of this run (for threads that outlive a call).
    pub fn arc(&self) -> Option<Arc<Ctx>> {
        self.me.upgrade()
    }

    /// Records a harness error (the run's verdict becomes ERROR) and stops the flow.
    pub fn harness_error(&self, reason: &str) {
        self.emit(Event::harness_error(reason));
        self.flow.cancel.cancel(reason);
        self.flow.notify.bump();
    }

    /// Records a harness error and returns the flow's stop.
    pub fn fail(&self, reason: &str) -> Result<(), Stop> {
        self.harness_error(reason);
        Err(Stop::Cancelled)
    }

    pub fn dcx(&self) -> DriverCx<'_> {
        DriverCx {
            tl: &self.tl,
            interrupt: &self.flow.interrupt,
            run_dir: &self.run_dir,
            run_id: &self.run_id,
            experiment: &self.exp.id.value,
        }
    }

    /// `d`, cut to what is left of the cleanup budget once SIGINT/SIGTERM arrived.
    pub fn budget(&self, d: Duration) -> Duration {
        self.flow.interrupt.budget(d)
    }

    /// Sleeps `d` in the flow (an operation's duration); false if the run was cancelled meanwhile.
    pub fn sleep(&self, d: Duration) -> bool {
        self.flow.sleep(self, d)
    }

    pub fn hook_env(&self, extra: &[(&str, String)]) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        for (k, v) in extra {
            env.insert((*k).to_string(), v.clone());
        }
        env
    }

    /// The instances of a workload (none before its first start).
    pub fn instance_list(&self, workload: &str) -> Vec<Arc<InstanceRt>> {
        self.instances.lock().unwrap_or_else(|e| e.into_inner()).get(workload).cloned().unwrap_or_default()
    }

    pub fn find_instance(&self, name: &str) -> Option<Arc<InstanceRt>> {
        self.instances
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|v| v.iter())
            .find(|i| i.name == name)
            .cloned()
    }

    pub fn all_instances(&self) -> Vec<Arc<InstanceRt>> {
        self.instances.lock().unwrap_or_else(|e| e.into_inner()).values().flatten().cloned().collect()
    }

    /// Waits for a workload's condition.
    fn wait_workload(&self, wl: &str, cond: Condition, path: &str, timeout: Duration) -> Result<(), Stop> {
        let started = self.flow.clock.now();
        self.emit(Event::WaitStarted {
            node: path.into(),
            workload: Some(wl.to_string()),
            condition: Some(cond_name(cond)),
            signal: None,
            watcher: None,
        });
        let total = self.exp.workloads.iter().find(|x| x.name.value == wl).map_or(0, |x| x.instances as usize);
        let what = || format!("wait for {wl} {cond:?}");
        self.flow.wait_until(self, timeout, what, || {
            let insts = self.instance_list(wl);
            let met = insts.len() == total
                && match cond {
                    Condition::Started => insts.iter().all(|i| i.started.load(Ordering::SeqCst)),
                    Condition::Finished => insts.iter().all(|i| {
                        i.started.load(Ordering::SeqCst)
                            && !i.running.load(Ordering::SeqCst)
                            && !i.restarting.load(Ordering::SeqCst)
                    }),
                };
            met.then_some(())
        })?;
        self.emit(Event::WaitFinished {
            node: path.into(),
            workload: wl.to_string(),
            condition: cond_name(cond),
            after: secs(self.flow.clock.now().saturating_sub(started)),
        });
        Ok(())
    }

    /// Waits for an adapter signal: a line of its watcher, printed after the wait began, that matches.
    fn wait_signal(&self, sig: &str, path: &str, timeout: Duration) -> Result<(), Stop> {
        let Some(spec) = self.adapter.signals.iter().find(|s| s.name == sig) else {
            return self.fail(&format!("adapter has no signal {sig}"));
        };
        let re = match regex::Regex::new(&spec.pattern) {
            Ok(re) => re,
            Err(e) => return self.fail(&format!("signal {sig}: pattern {:?}: {e}", spec.pattern)),
        };
        let mut seen =
            self.watch_lines.lock().unwrap_or_else(|e| e.into_inner()).get(&spec.watcher).map_or(0, WatchLines::total);
        self.emit(Event::WaitStarted {
            node: path.into(),
            workload: None,
            condition: None,
            signal: Some(sig.to_string()),
            watcher: Some(spec.watcher.clone()),
        });
        let what = || format!("wait for signal {sig}");
        let line = self.flow.wait_until(self, timeout, what, || {
            let g = self.watch_lines.lock().unwrap_or_else(|e| e.into_inner());
            let lines = g.get(&spec.watcher)?;
            let hit = lines.since(seen).find(|l| re.is_match(l)).cloned();
            seen = lines.total();
            hit
        })?;
        self.emit(Event::SignalMatched { node: path.into(), signal: sig.to_string(), line });
        Ok(())
    }
}

/// A condition as the timeline names it (its serde name).
fn cond_name(c: Condition) -> String {
    match serde_json::to_value(c) {
        Ok(serde_json::Value::String(s)) => s,
        // Condition is a plain unit enum: it always serializes to a string.
        _ => format!("{c:?}"),
    }
}

impl Host for Ctx {
    fn leaf_steps(&self, name: &str) -> u64 {
        self.exp.workloads.iter().find(|w| w.name.value == name).map_or(1, |w| u64::from(w.instances))
    }

    fn run_leaf(&self, name: &str, path: &str) -> Result<(), Stop> {
        if let Some(w) = self.exp.workloads.iter().find(|w| w.name.value == name) {
            let w = w.clone();
            self.run_workload(&w)
        } else if let Some(op) = self.exp.operations.iter().find(|o| o.name.value == name) {
            let op = op.clone();
            self.run_operation(&op, path)
        } else {
            self.fail(&format!("flow names unknown {name}"))
        }
    }

    fn run_call(&self, call: &OpCall, path: &str) -> Result<(), Stop> {
        let Some(op) = self.exp.operations.iter().find(|o| o.name.value == call.name) else {
            return self.fail(&format!("flow names unknown operation {}", call.name));
        };
        let mut op = op.clone();
        if let Some(s) = &call.select {
            op.select = s.clone();
        }
        if let Some(d) = call.duration {
            op.duration = Some(d);
        }
        self.run_operation(&op, path)
    }

    fn wait(&self, w: &WaitSpec, path: &str, timeout: Duration) -> Result<(), Stop> {
        if let Some(wl) = &w.workload {
            self.wait_workload(&wl.value, w.condition.unwrap_or(Condition::Started), path, timeout)
        } else if let Some(sig) = &w.signal {
            self.wait_signal(&sig.value, path, timeout)
        } else {
            Ok(())
        }
    }

    fn emit(&self, e: Event) {
        self.tl.emit(e);
    }

    fn harness_error(&self, reason: &str) {
        Ctx::harness_error(self, reason);
    }
}
