//! Workloads and their instances: directories and variables, starts (through the driver), ends, collection.
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use repro_model::timeline::Event;

use crate::common::expand;
use crate::driver::{short, DriverError, Exit, InstanceRt};
use crate::engine::Ctx;
use crate::error::Result;
use crate::evaluate::shell_quote;
use crate::flow::{secs, Stop};
use crate::fsutil::{self, mkdirs, write_atomic};
use crate::model::Workload;
use crate::proc;

impl Ctx {
    /// Creates (first run) or reuses the instances of a workload. Nothing is written for an instance until it
    /// starts ([`Ctx::instance_env`]).
    pub fn prepare_instances(&self, w: &Workload) -> Result<Vec<Arc<InstanceRt>>> {
        let mut g = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = g.get(&w.name.value) {
            return Ok(v.clone());
        }
        let wdir = self.run_dir.join("workloads").join(&w.name.value);
        mkdirs(&wdir.join("instances"))?;
        write_atomic(&wdir.join("run.sh"), w.run.as_bytes())?;
        let v: Vec<Arc<InstanceRt>> = (0..w.instances)
            .map(|i| {
                let dir = wdir.join("instances").join(format!("{}-{i}", w.name.value));
                Arc::new(InstanceRt::new(&w.name.value, i, dir))
            })
            .collect();
        g.insert(w.name.value.clone(), v.clone());
        Ok(v)
    }

    /// The instance's variables; its directory (output/.chaos, logs, env) is created the first time.
    pub fn instance_env(&self, inst: &InstanceRt) -> Result<BTreeMap<String, String>> {
        if let Some(env) = inst.env.get() {
            return Ok(env.clone());
        }
        let w = self.exp.workloads.iter().find(|w| w.name.value == inst.workload);
        let wdir = self.run_dir.join("workloads").join(&inst.workload);
        let dir = &inst.dir;
        let out = dir.join("output");
        mkdirs(&out.join(".chaos"))?;
        mkdirs(&dir.join("logs"))?;
        let mut env = self.identity_env(crate::engine::network::Identity::Instance(&inst.name))?;
        for (k, val) in w.map(|w| &w.env).into_iter().flatten() {
            let expanded = expand(val, &env);
            env.insert(k.clone(), expanded);
        }
        env.insert("CHAOS_EXPERIMENT_WORKLOAD".into(), inst.workload.clone());
        env.insert("CHAOS_EXPERIMENT_WORKLOAD_INSTANCE".into(), inst.name.clone());
        env.insert("CHAOS_EXPERIMENT_WORKLOAD_INSTANCE_INDEX".into(), inst.index.to_string());
        env.insert("CHAOS_EXPERIMENT_WORKLOAD_INSTANCES".into(), w.map_or(1, |w| w.instances).to_string());
        env.insert("CHAOS_EXPERIMENT_WORKLOAD_INSTANCE_OUTPUT_DIR".into(), out.display().to_string());
        env.insert("CHAOS_EXPERIMENT_WORKLOAD_INSTANCE_DIR".into(), dir.display().to_string());
        env.insert("CHAOS_WORKLOAD_SCRIPT".into(), wdir.join("run.sh").display().to_string());
        let text: String = env.iter().map(|(k, v)| format!("{k}={}\n", shell_quote(v))).collect();
        write_atomic(&dir.join("env"), text.as_bytes())?;
        Ok(inst.env.get_or_init(|| env).clone())
    }

    /// Runs an instance hook of the adapter (create, collect, delete); a failure is a harness error.
    fn instance_hook(&self, which: &str, script: &Option<String>, inst: &InstanceRt) {
        let Some(script) = script else { return };
        let env = match self.instance_env(inst) {
            Ok(env) => env,
            Err(e) => return self.harness_error(&format!("instance {}: {e}", inst.name)),
        };
        match proc::run_hook(script, &env, &self.run_dir, self.budget(Duration::from_secs(60)), None) {
            Ok(o) if o.ok() => {}
            Ok(o) => self.harness_error(&format!(
                "instance {} hook {which} failed: {}: {}",
                inst.name,
                o.describe(),
                o.output.trim()
            )),
            Err(e) => self.harness_error(&format!("instance {} hook {which} could not run: {e}", inst.name)),
        }
    }

    /// Starts one instance (through the driver); a waiter records its end.
    pub fn spawn_instance(&self, inst: &Arc<InstanceRt>, reason: &str) -> std::result::Result<(), DriverError> {
        let files = |source| DriverError::Files { what: "instance", name: inst.name.clone(), source: Box::new(source) };
        let out = inst.dir.join("output");
        let env = self.instance_env(inst).map_err(files)?;
        // A line per start in .chaos/attempts; .chaos/exit_code only once this start has ended.
        let exit_code = out.join(".chaos/exit_code");
        match std::fs::remove_file(&exit_code) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(files(crate::error::ChaosError::io(exit_code, e)));
            }
            _ => {}
        }
        fsutil::append_line(&out.join(".chaos/attempts"), &format!("{} {reason}", fsutil::rfc3339(fsutil::now())))
            .map_err(files)?;
        let Some(me) = self.arc() else {
            // Only reachable while the run is being torn down: nothing may start then.
            return Err(DriverError::Unsupported {
                what: "instance",
                name: inst.name.clone(),
                detail: "the run is over".into(),
            });
        };
        let inst2 = Arc::clone(inst);
        let on_exit = Box::new(move |pid: i32, exit: Exit| me.instance_ended(&inst2, pid, exit));
        let script = self.run_dir.join("workloads").join(&inst.workload).join("run.sh");
        let started = {
            // Held while starting: an end that comes at once still finds this start's pid.
            let mut g = inst.pid.lock().unwrap_or_else(|e| e.into_inner());
            let started = self.driver.spawn_instance(&self.dcx(), inst, &script, &env, on_exit)?;
            *g = Some(started.pid);
            inst.running.store(true, Ordering::SeqCst);
            inst.started.store(true, Ordering::SeqCst);
            started
        };
        if started.pid > 0 {
            self.groups.lock().unwrap_or_else(|e| e.into_inner()).push(started.pid);
        }
        self.emit(Event::InstanceCreated {
            workload: inst.workload.clone(),
            instance: inst.name.clone(),
            pid: started.pid,
            reason: reason.to_string(),
            container: started.container.map(|c| short(&c)),
        });
        self.flow.notify.bump();
        Ok(())
    }

    /// Records the end of an instance's start `pid`: its exit code (written before the instance counts as
    /// ended, so collect and the checks see it), the instance.state event, and, unless a restart replaced it
    /// meanwhile, that it no longer runs.
    pub fn instance_ended(&self, inst: &InstanceRt, pid: i32, exit: Exit) {
        if let Some(c) = exit.code {
            let p = inst.dir.join("output/.chaos/exit_code");
            if let Err(e) = write_atomic(&p, format!("{c}\n").as_bytes()) {
                self.harness_error(&format!("instance {}: {e}", inst.name));
            }
        }
        let state = match (exit.code, exit.signal) {
            (Some(0), _) => "Succeeded",
            (Some(_), _) => "Failed",
            _ => "Killed",
        };
        self.emit(Event::InstanceState {
            workload: inst.workload.clone(),
            instance: inst.name.clone(),
            pid: Some(pid),
            state: state.into(),
            exit_code: Some(exit.code),
            signal: Some(exit.signal),
            timeout: None,
        });
        if inst.pid() == Some(pid) {
            inst.running.store(false, Ordering::SeqCst);
        }
        self.flow.notify.bump();
    }

    /// A workload leaf: start every instance, wait until all have ended (or the timeout).
    pub fn run_workload(&self, w: &Workload) -> std::result::Result<(), Stop> {
        let insts = match self.prepare_instances(w) {
            Ok(v) => v,
            Err(e) => return self.fail(&format!("workload {}: {e}", w.name.value)),
        };
        for inst in &insts {
            self.instance_hook("create", &self.adapter.instance.create, inst);
            self.flow.check()?;
            if let Err(e) = self.spawn_instance(inst, "flow") {
                return self.fail(&e.to_string());
            }
        }
        let timeout = w.timeout.map_or_else(|| self.exp.timeout.0, |d| d.0);
        let started = self.flow.clock.now();
        let mut timed_out = false;
        loop {
            let busy = insts.iter().any(|i| i.running.load(Ordering::SeqCst) || i.restarting.load(Ordering::SeqCst));
            if !busy || self.flow.is_cancelled() {
                break;
            }
            if self.flow.clock.now().saturating_sub(started) >= timeout {
                timed_out = true;
                break;
            }
            self.flow.pause(self);
        }
        for inst in &insts {
            if inst.running.load(Ordering::SeqCst) {
                if timed_out {
                    self.emit(Event::InstanceState {
                        workload: inst.workload.clone(),
                        instance: inst.name.clone(),
                        pid: None,
                        state: "TimedOut".into(),
                        exit_code: None,
                        signal: None,
                        timeout: Some(secs(timeout)),
                    });
                }
                self.stop_instance(inst);
            }
            self.collect_instance(inst);
        }
        self.flow.check()
    }

    /// Kills a running instance and waits (within the budget) until its end is recorded.
    pub fn stop_instance(&self, inst: &InstanceRt) {
        self.driver.kill_instance(&self.dcx(), inst);
        proc::poll_until(
            self.budget(Duration::from_secs(5)).max(Duration::from_millis(200)),
            Duration::from_millis(5),
            || !inst.running.load(Ordering::SeqCst),
        );
    }

    /// The collect and delete hooks of an ended instance, and what the driver removes after it.
    pub fn collect_instance(&self, inst: &InstanceRt) {
        let code = match std::fs::read_to_string(inst.dir.join("output/.chaos/exit_code")) {
            Ok(t) => t.trim().parse::<i64>().ok(),
            // No exit code: the instance never started, or was killed (its state says which).
            Err(_) => None,
        };
        self.instance_hook("collect", &self.adapter.instance.collect, inst);
        self.emit(Event::InstanceCollected {
            workload: inst.workload.clone(),
            instance: inst.name.clone(),
            exit_code: code.and_then(|c| i32::try_from(c).ok()),
        });
        if let Err(e) = self.driver.remove_instance(&self.dcx(), inst) {
            self.emit(Event::HarnessWarning { target: None, instance: Some(inst.name.clone()), detail: e.to_string() });
        }
        self.instance_hook("delete", &self.adapter.instance.delete, inst);
        self.emit(Event::InstanceDeleted { workload: inst.workload.clone(), instance: inst.name.clone() });
    }

    /// Kills and collects the instances still running (a cancelled flow).
    pub fn stop_remaining_instances(&self) {
        for inst in self.all_instances() {
            if inst.running.load(Ordering::SeqCst) {
                self.stop_instance(&inst);
                self.collect_instance(&inst);
            }
        }
    }
}
