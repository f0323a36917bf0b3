//! Operations: which candidates a run hits, the built-in faults (written once, for every driver, in terms
//! of the driver's hits), adapter operations, and the undo of what they did.
use std::sync::atomic::Ordering;
use std::time::Duration;

use repro_model::timeline::{Event, UndoOutcome};

use crate::common::{expand, select};
use crate::driver::{short, Hit, Victim};
use crate::engine::{Ctx, UndoAction};
use crate::flow::Stop;
use crate::model::*;
use crate::proc;
use crate::undo::Undo;

/// Where an operation's candidates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Target,
    Workload,
    Adapter,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Target => "target",
            Scope::Workload => "workload",
            Scope::Adapter => "adapter",
        }
    }
}

impl Ctx {
    /// Runs one operation for the flow node at `path`.
    pub fn run_operation(&self, op: &Operation, path: &str) -> Result<(), Stop> {
        self.flow.check()?;
        let run = {
            let mut g = self.op_runs.lock().unwrap_or_else(|e| e.into_inner());
            let n = g.entry(op.name.value.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let target = op.target.as_ref().map(|t| t.value.clone());
        let (scope, candidates): (Scope, Vec<String>) = match &target {
            Some(t) if self.targets.contains_key(t) => (Scope::Target, vec![t.clone()]),
            // A network fault on groups (network.between) names no target.
            None if Fault::from_name(&op.uses).is_some_and(Fault::is_network) => (Scope::Target, vec![]),
            Some(t) => (Scope::Workload, self.instance_list(t).iter().map(|i| i.name.clone()).collect()),
            None => (Scope::Adapter, vec![]),
        };
        let selected = select(self.seed, &op.name.value, run, &candidates, &op.select);
        self.emit(Event::OperationSelected {
            operation: op.name.value.clone(),
            run,
            node: Some(path.to_string()),
            seed: self.seed,
            select: op.select.to_string(),
            candidates,
            selected: selected.clone(),
        });
        if scope == Scope::Workload && selected.is_empty() {
            self.emit(Event::OperationSkipped {
                operation: op.name.value.clone(),
                run,
                reason: "the workload has no instances yet".into(),
            });
            return Ok(());
        }
        let res = match Fault::from_name(&op.uses) {
            Some(f) if f.is_network() => self.run_net_fault(op, f, run),
            Some(f) => self.run_fault(op, f, run, scope, &selected),
            None => self.run_adapter_op(op, run, target.as_deref(), scope, &selected),
        };
        self.emit(Event::OperationFinished { operation: op.name.value.clone(), run });
        res
    }

    /// The running victims among the selected candidates.
    fn victims(&self, scope: Scope, selected: &[String]) -> Vec<Victim> {
        let mut out = Vec::new();
        for name in selected {
            if scope == Scope::Target {
                let Some(t) = self.targets.get(name) else { continue };
                if self.driver.has_containers() {
                    if let (Some(id), true) = (t.container(), t.running()) {
                        let stop_secs =
                            t.spec.stop_timeout.map_or(10, |d| i32::try_from(d.0.as_secs()).unwrap_or(i32::MAX));
                        out.push(Victim::Container { name: name.clone(), id, stop_secs });
                    }
                } else if let Some((pid, true)) = t.pid() {
                    out.push(Victim::Process {
                        name: name.clone(),
                        pid,
                        group: t.spec.signal_scope == SignalScope::Group,
                    });
                }
            } else {
                for i in self.all_instances().iter().filter(|i| &i.name == name) {
                    if i.running.load(Ordering::SeqCst) {
                        if let Some(pid) = i.pid() {
                            out.push(Victim::Process { name: name.clone(), pid, group: true });
                        }
                    }
                }
            }
        }
        out
    }

    /// Whether a hit victim is gone: its target no longer runs that incarnation, and nothing of it lingers.
    fn gone(&self, v: &Victim) -> bool {
        let state_says_gone = match v {
            Victim::Process { name, pid, .. } => self.targets.get(name).is_none_or(|t| t.pid() != Some((*pid, true))),
            Victim::Container { name, .. } => self.targets.get(name).is_none_or(|t| !t.running()),
        };
        state_says_gone && !self.driver.lingers(v)
    }

    /// Hits every victim, then verifies they are gone (escalating a graceful stop to a kill).
    fn hit_and_verify(&self, op: &Operation, run: u32, victims: &[Victim], how: Hit, api: bool) -> Result<(), Stop> {
        for v in victims {
            if let Err(e) = self.driver.hit(v, how) {
                return self.fail(&format!("{}: {e}", op.name.value));
            }
        }
        let timeout = if how == Hit::Terminate {
            victims
                .iter()
                .filter_map(|v| self.targets.get(v.name()))
                .filter_map(|t| t.spec.stop_timeout.map(|d| d.0))
                .max()
                .unwrap_or(Duration::from_secs(10))
        } else {
            Duration::from_secs(5)
        };
        let all_gone = || victims.iter().all(|v| self.gone(v));
        let mut ok = proc::poll_until(timeout, Duration::from_millis(2), all_gone);
        if !ok && how == Hit::Terminate {
            for v in victims {
                if let Err(e) = self.driver.hit(v, Hit::Kill) {
                    return self.fail(&format!("{}: {e}", op.name.value));
                }
            }
            self.emit(Event::OperationEscalated { operation: op.name.value.clone(), run, signal: "SIGKILL".into() });
            ok = proc::poll_until(Duration::from_secs(5), Duration::from_millis(2), all_gone);
        }
        if !ok {
            return self.fail(&format!("{}: the {} did not take effect: still running", op.name.value, op.uses.value));
        }
        self.reap_target_events();
        self.emit(Event::OperationVerified {
            operation: op.name.value.clone(),
            run,
            effect: "gone".into(),
            api: if api { self.driver.api(how).map(str::to_string) } else { None },
            instances: Some(victims.iter().map(|v| v.name().to_string()).collect()),
            output: None,
            rules: None,
        });
        Ok(())
    }

    /// Starts the named targets or instances again after a fault (`adopt`: the engine restarted them).
    fn restart_candidates(&self, op: &Operation, scope: Scope, names: &[String], adopt: bool) -> Result<(), Stop> {
        for name in names {
            if scope == Scope::Target {
                if let Some(t) = self.targets.get(name) {
                    if let Err(e) = self.start_target_with(t, op.uses.value.as_str(), Some(&op.name.value), adopt) {
                        return self.fail(&e.to_string());
                    }
                }
            } else if let Some(inst) = self.find_instance(name) {
                if let Err(e) = self.spawn_instance(&inst, op.uses.value.as_str()) {
                    return self.fail(&e.to_string());
                }
                inst.restarting.store(false, Ordering::SeqCst);
            }
        }
        Ok(())
    }

    fn reverted(&self, op: &Operation, run: u32, detail: &str) {
        self.emit(Event::OperationReverted(UndoOutcome {
            operation: op.name.value.clone(),
            uses: op.uses.value.clone(),
            run,
            ok: true,
            detail: detail.into(),
            stats: None,
        }));
    }

    /// Sleeps the operation's duration, then runs undo `id` (unless the end-of-run sweep took it).
    pub(crate) fn hold_then_undo(&self, d: Duration, ids: &[u64]) -> Result<(), Stop> {
        let completed = self.sleep(d);
        for id in ids {
            if let Some(u) = self.undo.take(*id) {
                self.run_undo(u, false);
            }
        }
        if completed {
            Ok(())
        } else {
            Err(Stop::Cancelled)
        }
    }

    fn run_fault(&self, op: &Operation, fault: Fault, run: u32, scope: Scope, selected: &[String]) -> Result<(), Stop> {
        let victims = self.victims(scope, selected);
        let names: Vec<String> = victims.iter().map(|v| v.name().to_string()).collect();
        let containers = scope == Scope::Target && self.driver.has_containers();
        let (ids, short_ids) = if containers {
            let c = victims
                .iter()
                .filter_map(|v| match v {
                    Victim::Container { id, .. } => Some(short(id)),
                    Victim::Process { .. } => None,
                })
                .collect();
            (None, Some(c))
        } else {
            let p = victims
                .iter()
                .filter_map(|v| match v {
                    Victim::Process { pid, .. } => Some(serde_json::json!(pid)),
                    Victim::Container { .. } => None,
                })
                .collect();
            (Some(p), None)
        };
        self.emit(Event::OperationStarted {
            operation: op.name.value.clone(),
            uses: op.uses.value.clone(),
            run,
            target: op.target.as_ref().map(|t| t.value.clone()),
            scope: scope.name().into(),
            instances: names.clone(),
            ids,
            containers: short_ids,
        });
        if victims.is_empty() {
            self.emit(Event::OperationSkipped {
                operation: op.name.value.clone(),
                run,
                reason: "nothing selected is running".into(),
            });
            return Ok(());
        }
        let restarts = matches!(fault, Fault::Restart | Fault::RestartInPlace | Fault::Outage);
        if scope == Scope::Workload && restarts {
            self.set_restarting(&names, true);
        }
        let res = self.apply_fault(op, fault, run, scope, &victims, &names, containers);
        if scope == Scope::Workload && restarts {
            self.set_restarting(&names, false);
        }
        res
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_fault(
        &self,
        op: &Operation,
        fault: Fault,
        run: u32,
        scope: Scope,
        victims: &[Victim],
        names: &[String],
        containers: bool,
    ) -> Result<(), Stop> {
        let start_again =
            |n: &String| self.undo.push(&op.name.value, &op.uses.value, run, UndoAction::StartTarget(n.clone()));
        match fault {
            Fault::Kill => {
                self.hit_and_verify(op, run, victims, Hit::Kill, containers)?;
                if scope == Scope::Target {
                    names.iter().for_each(|n| {
                        start_again(n);
                    });
                }
            }
            Fault::Restart if containers && self.driver.restarts_in_engine() => {
                self.hit_and_verify(op, run, victims, Hit::EngineRestart, containers)?;
                self.restart_candidates(op, scope, names, true)?;
                self.reverted(op, run, "restarted by the engine");
            }
            Fault::Restart | Fault::RestartInPlace => {
                let how = if fault == Fault::Restart { Hit::Terminate } else { Hit::Kill };
                self.hit_and_verify(op, run, victims, how, containers)?;
                self.restart_candidates(op, scope, names, false)?;
                self.reverted(op, run, "started again");
            }
            Fault::Outage => {
                self.hit_and_verify(op, run, victims, Hit::Outage, containers)?;
                let undo_ids: Vec<u64> =
                    if scope == Scope::Target { names.iter().map(start_again).collect() } else { vec![] };
                // An outage without a duration is a stop and an immediate start again.
                self.hold_then_undo(op.duration.map(|d| d.0).unwrap_or_default(), &undo_ids)?;
                if scope == Scope::Workload {
                    self.restart_candidates(op, scope, names, false)?;
                    self.reverted(op, run, "started again");
                }
            }
            Fault::Latency
            | Fault::Loss
            | Fault::Duplicate
            | Fault::Reorder
            | Fault::Corrupt
            | Fault::Bandwidth
            | Fault::Partition
            | Fault::Reset => return self.run_net_fault(op, fault, run),
            Fault::Stress => return self.start_stress(op, run, names, containers),
            Fault::Freeze => {
                for v in victims {
                    if let Err(e) = self.driver.hit(v, Hit::Freeze) {
                        return self.fail(&format!("{}: {e}", op.name.value));
                    }
                }
                let action = UndoAction::Thaw { victims: victims.to_vec(), names: names.to_vec() };
                let undo_id = self.undo.push(&op.name.value, &op.uses.value, run, action);
                let frozen = proc::poll_until(Duration::from_secs(5), Duration::from_millis(2), || {
                    victims.iter().all(|v| self.driver.is_frozen(v))
                });
                if !frozen {
                    let what = if containers { "pause" } else { "freeze" };
                    return self.fail(&format!("{}: the {what} did not take effect", op.name.value));
                }
                self.emit(Event::OperationVerified {
                    operation: op.name.value.clone(),
                    run,
                    effect: "stopped".into(),
                    api: if containers { self.driver.api(Hit::Freeze).map(str::to_string) } else { None },
                    instances: Some(names.to_vec()),
                    output: None,
                    rules: None,
                });
                if let Some(d) = op.duration {
                    self.hold_then_undo(d.0, &[undo_id])?;
                }
            }
        }
        Ok(())
    }

    fn set_restarting(&self, names: &[String], on: bool) {
        for n in names {
            if let Some(i) = self.find_instance(n) {
                i.restarting.store(on, Ordering::SeqCst);
            }
        }
        if !on {
            self.flow.notify.bump();
        }
    }

    fn run_adapter_op(
        &self,
        op: &Operation,
        run: u32,
        target: Option<&str>,
        scope: Scope,
        selected: &[String],
    ) -> Result<(), Stop> {
        let Some(spec) = self.adapter.operations.iter().find(|o| o.name == op.uses.value) else {
            return self.fail(&format!("{}: adapter has no operation {}", op.name.value, op.uses.value));
        };
        // The pids of the running selected candidates (a container target's: its init process).
        let pids: Vec<String> = match scope {
            Scope::Adapter => vec![],
            Scope::Target => selected
                .iter()
                .filter_map(|n| self.targets.get(n)?.pid())
                .filter(|(_, running)| *running)
                .map(|(pid, _)| pid.to_string())
                .collect(),
            Scope::Workload => self
                .victims(scope, selected)
                .iter()
                .filter_map(|v| match v {
                    Victim::Process { pid, .. } => Some(pid.to_string()),
                    Victim::Container { .. } => None,
                })
                .collect(),
        };
        let duration = op.duration.map(|d| d.0.as_secs_f64().to_string());
        let mut env = self.hook_env(&[
            ("CHAOS_OPERATION", op.name.value.clone()),
            ("CHAOS_OPERATION_RUN", run.to_string()),
            ("CHAOS_TARGET", target.unwrap_or("").to_string()),
            ("CHAOS_SELECTED", selected.join(" ")),
            ("CHAOS_PIDS", pids.join(" ")),
            // Set and empty when the operation has no duration.
            ("CHAOS_DURATION_SECONDS", duration.unwrap_or_default()),
        ]);
        for (k, v) in &op.env {
            let expanded = expand(v, &env);
            env.insert(k.clone(), expanded);
        }
        self.emit(Event::OperationStarted {
            operation: op.name.value.clone(),
            uses: op.uses.value.clone(),
            run,
            target: target.map(str::to_string),
            scope: "adapter".into(),
            instances: selected.to_vec(),
            ids: Some(pids.iter().map(|p| serde_json::json!(p)).collect()),
            containers: None,
        });
        let timeout = spec.timeout.map_or(Duration::from_secs(120), |d| d.0);
        let undo_id = spec.undo.as_ref().map(|u| {
            self.undo.push(
                &op.name.value,
                &op.uses.value,
                run,
                UndoAction::Hook { script: u.clone(), env: env.clone() },
            )
        });
        match proc::run_hook(&spec.run, &env, &self.run_dir, timeout, Some(&self.flow.cancel)) {
            Ok(o) if o.ok() => self.emit(Event::OperationVerified {
                operation: op.name.value.clone(),
                run,
                effect: "hook succeeded".into(),
                api: None,
                instances: None,
                output: Some(o.output.trim().to_string()),
                rules: None,
            }),
            Ok(o) => {
                return self.fail(&format!(
                    "{}: adapter operation {} failed: {}: {}",
                    op.name.value,
                    spec.name,
                    o.describe(),
                    o.output.trim()
                ))
            }
            Err(e) => {
                return self.fail(&format!("{}: adapter operation {} could not run: {e}", op.name.value, spec.name))
            }
        }
        if let (Some(d), Some(id)) = (op.duration, undo_id) {
            self.hold_then_undo(d.0, &[id])?;
        }
        Ok(())
    }

    /// Runs an undo and records its outcome; `at_end` says whether the end-of-run sweep runs it.
    pub fn run_undo(&self, u: Undo<UndoAction>, at_end: bool) -> bool {
        let mut stats = None;
        let (ok, detail) = match &u.action {
            UndoAction::StartTarget(name) => match self.targets.get(name) {
                Some(t) if t.running() => (true, "already running".to_string()),
                // Started again only to be stopped with the run a moment later: not within the signal's budget.
                Some(_) if self.flow.interrupt.signal().is_some() => {
                    (true, "not started again: the run was interrupted and every target is stopped".to_string())
                }
                Some(t) => match self.start_target(t, if at_end { "undo" } else { "revert" }, Some(&u.operation)) {
                    Ok(true) => (true, "restarted and healthy".to_string()),
                    Ok(false) => (false, "restarted but not healthy".to_string()),
                    Err(e) => {
                        self.harness_error(&e.to_string());
                        (false, e.to_string())
                    }
                },
                None => (false, format!("no target {name}")),
            },
            UndoAction::Thaw { victims, names } => self.driver.thaw(&self.dcx(), victims, names),
            UndoAction::NetRules(n) => {
                let (ok, detail, s) = self.undo_net_rules(&u.operation, n);
                stats = Some(s);
                (ok, detail)
            }
            UndoAction::StopStress(s) => self.stop_stress(&u.operation, u.run, s),
            UndoAction::Hook { script, env } => {
                match proc::run_hook(script, env, &self.run_dir, self.budget(Duration::from_secs(120)), None) {
                    Ok(o) if o.ok() => (true, o.output.trim().to_string()),
                    Ok(o) => {
                        let msg = format!("undo hook of {} failed: {}: {}", u.operation, o.describe(), o.output.trim());
                        self.harness_error(&msg);
                        (false, msg)
                    }
                    Err(e) => {
                        let msg = format!("undo hook of {} could not run: {e}", u.operation);
                        self.harness_error(&msg);
                        (false, msg)
                    }
                }
            }
        };
        let outcome = UndoOutcome { operation: u.operation, uses: u.uses, run: u.run, ok, detail, stats };
        self.emit(if at_end { Event::OperationUndo(outcome) } else { Event::OperationReverted(outcome) });
        ok
    }

    /// The end-of-run sweep: every undo still registered, newest first.
    pub fn undo_all(&self) {
        while let Some(u) = self.undo.pop() {
            self.run_undo(u, true);
        }
    }
}
