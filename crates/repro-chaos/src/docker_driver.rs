//! The Docker driver: each target is a container (created at its first start, removed when the run ends);
//! faults on targets go through the Engine API (kill, restart, stop, pause). Instances run in containers when
//! the adapter says so (`instance.container`), else as local processes.
use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use repro_model::timeline::Event;

use crate::common::expand;
use crate::docker::{self, DockerError, Engine};
use crate::driver::{Driver, DriverCx, DriverError, Exit, Hit, InstanceRt, OnExit, Started, Stopped, TargetRt, Victim};
use crate::engine::targets::container_name;
use crate::fsutil;
use crate::model::InstanceContainer;
use crate::proc;
use crate::process_driver::{self, hit_process, spawn_process_instance, thaw_processes};

/// Containers on the local Docker engine.
pub struct DockerDriver {
    pub engine: Engine,
    /// The adapter's instance container, if instances run in containers.
    pub instance: Option<InstanceContainer>,
}

fn docker_err(what: &'static str, name: &str, op: impl Into<String>) -> impl FnOnce(DockerError) -> DriverError {
    let (name, op) = (name.to_string(), op.into());
    move |source| DriverError::Docker { what, name, op, source }
}

/// How an instance container ended: a container that died of signal N exits 128+N and counts as killed.
fn instance_exit(code: i64) -> Exit {
    if code > 128 && code <= 128 + 64 {
        Exit { code: None, signal: Some(code - 128) }
    } else {
        Exit { code: Some(code), signal: None }
    }
}

/// How a target container ended, as the timeline records it: the exit code's low byte.
fn target_exit(code: i64) -> Exit {
    let st = std::process::ExitStatus::from_raw(((code & 0xff) as i32) << 8);
    Exit { code: st.code().map(i64::from), signal: st.signal().map(i64::from) }
}

impl DockerDriver {
    /// Creates the target's container (once) from its spec.
    fn create_target(
        &self,
        cx: &DriverCx,
        t: &TargetRt,
        env: &BTreeMap<String, String>,
    ) -> Result<String, DriverError> {
        let name = t.name().to_string();
        if let Some(id) = t.container() {
            return Ok(id);
        }
        let ct = t.spec.container.as_ref().ok_or_else(|| DriverError::Unsupported {
            what: "target",
            name: name.clone(),
            detail: "no container".into(),
        })?;
        let mut labels = HashMap::new();
        labels.insert(docker::RUN_LABEL.to_string(), cx.run_id.to_string());
        labels.insert(docker::TARGET_LABEL.to_string(), name.clone());
        labels.insert("repro.chaos.experiment".to_string(), cx.experiment.to_string());
        let mut ports = Vec::new();
        for (pname, cport) in &ct.ports {
            let key = format!("CHAOS_PORT_{}", pname.to_ascii_uppercase());
            let host: u16 = env.get(&key).and_then(|v| v.parse().ok()).ok_or_else(|| DriverError::Unsupported {
                what: "target",
                name: name.clone(),
                detail: format!("no port {key}"),
            })?;
            ports.push((cport.value, host));
        }
        let spec = docker::Spec {
            name: container_name(cx.run_id, &name),
            image: ct.image.value.clone(),
            command: ct.command.iter().map(|c| expand(c, env)).collect(),
            env: ct.env.iter().map(|(k, v)| format!("{k}={}", expand(v, env))).collect(),
            labels,
            ports,
            stop_timeout: t.spec.stop_timeout.map(|d| d.0.as_secs() as i64),
            ..Default::default()
        };
        let id = self.engine.create(&spec).map_err(docker_err("target", &name, format!("create {}", spec.image)))?;
        *t.container.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.clone());
        Ok(id)
    }

    /// Runs an instance in a new container (the previous start's container is removed first); a waiter
    /// records its end like a host instance's: a container that died of signal N exits 128+N and counts as
    /// killed; its log goes into logs/instance.log.
    fn spawn_container_instance(
        &self,
        cx: &DriverCx,
        ic: &InstanceContainer,
        inst: &InstanceRt,
        script: &Path,
        env: &BTreeMap<String, String>,
        on_exit: OnExit,
    ) -> Result<Started, DriverError> {
        let out = inst.dir.join("output");
        let old = inst.container.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(old) = old {
            if let Err(e) = self.engine.remove(&old) {
                let detail = format!("docker rm of the previous start: {e}");
                cx.emit(Event::HarnessWarning { target: None, instance: Some(inst.name.clone()), detail });
            }
        }
        let mut labels = HashMap::new();
        labels.insert(docker::RUN_LABEL.to_string(), cx.run_id.to_string());
        labels.insert("repro.chaos.instance".to_string(), inst.name.clone());
        labels.insert("repro.chaos.experiment".to_string(), cx.experiment.to_string());
        // The attempts file was just appended to: one line per start.
        let attempt = std::fs::read_to_string(out.join(".chaos/attempts")).map_or(1, |t| t.lines().count());
        let rd = cx.run_dir.display().to_string();
        let spec = docker::Spec {
            name: format!("repro-chaos-{}-{}-{attempt}", cx.run_id.to_ascii_lowercase(), inst.name),
            image: ic.image.value.clone(),
            command: vec![ic.shell.clone(), script.display().to_string()],
            env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            labels,
            binds: vec![format!("{rd}:{rd}")],
            working_dir: Some(out.display().to_string()),
            host_network: true,
            ..Default::default()
        };
        let name = inst.name.as_str();
        let id = self.engine.create(&spec).map_err(docker_err("instance", name, format!("create {}", spec.image)))?;
        *inst.container.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.clone());
        self.engine.start(&id).map_err(docker_err("instance", name, "start"))?;
        let pid = match self.engine.state(&id) {
            Ok(s) => s.pid,
            Err(e) => {
                // Its pid only serves the leak check and the instance's faults: recorded as unknown (0).
                cx.emit(Event::HarnessWarning {
                    target: None,
                    instance: Some(inst.name.clone()),
                    detail: format!("docker inspect: {e}"),
                });
                0
            }
        };
        let eng = self.engine.clone();
        let log = inst.dir.join("logs/instance.log");
        let id2 = id.clone();
        std::thread::spawn(move || {
            // A wait that fails reads as an exit code of -1 (Failed), like the engine's own unknown status.
            let code = eng.wait(&id2).unwrap_or(-1);
            // The log is evidence, not the outcome: an unreadable or unwritable log leaves a gap in
            // logs/instance.log and the end is still recorded.
            if let Ok(text) = eng.logs(&id2) {
                let _ = fsutil::append_line(&log, text.trim_end_matches('\n'));
            }
            on_exit(pid, instance_exit(code));
        });
        Ok(Started { pid, container: Some(id) })
    }
}

impl Driver for DockerDriver {
    fn kind(&self) -> &'static str {
        "docker"
    }

    fn start_target(
        &self,
        cx: &DriverCx,
        t: &TargetRt,
        env: &BTreeMap<String, String>,
        _previous: Option<i32>,
        adopt: bool,
        on_exit: OnExit,
    ) -> Result<Started, DriverError> {
        let name = t.name().to_string();
        let id = self.create_target(cx, t, env)?;
        if !adopt {
            self.engine.start(&id).map_err(docker_err("target", &name, "start"))?;
        }
        let pid = self.engine.state(&id).map_err(docker_err("target", &name, "inspect"))?.pid;
        let eng = self.engine.clone();
        let id2 = id.clone();
        std::thread::spawn(move || {
            // A wait that fails reads as an unknown exit (-1), like the engine's own.
            let code = eng.wait(&id2).unwrap_or(-1);
            on_exit(pid, target_exit(code));
        });
        Ok(Started { pid, container: Some(id) })
    }

    fn stop_target(&self, cx: &DriverCx, t: &TargetRt, why: &str) -> Option<Stopped> {
        let id = t.container()?;
        let name = t.name().to_string();
        cx.emit(Event::TargetStopping { target: name.clone(), reason: why.to_string() });
        if self.engine.state(&id).is_ok_and(|s| s.paused) {
            if let Err(e) = self.engine.unpause(&id) {
                cx.warn_target(&name, format!("docker unpause: {e}"));
            }
        }
        let timeout = cx.budget(t.spec.stop_timeout.map_or(Duration::from_secs(10), |d| d.0));
        let timeout = i32::try_from(timeout.as_secs()).unwrap_or(i32::MAX);
        if let Err(e) = self.engine.stop(&id, timeout) {
            cx.warn_target(&name, format!("docker stop: {e}"));
        }
        proc::poll_until(cx.budget(Duration::from_secs(5)), Duration::from_millis(10), || !t.running());
        match self.engine.logs(&id) {
            Ok(text) => {
                let path = cx.run_dir.join("logs").join(format!("{name}.log"));
                if let Err(e) = std::fs::write(&path, text) {
                    cx.warn_target(&name, format!("{}: {e}", path.display()));
                }
            }
            Err(e) => cx.warn_target(&name, format!("docker logs: {e}")),
        }
        if let Err(e) = self.engine.remove(&id) {
            cx.warn_target(&name, format!("docker rm: {e}"));
        }
        Some(Stopped { pid: t.pid().map(|p| p.0), container: Some(id) })
    }

    fn spawn_instance(
        &self,
        cx: &DriverCx,
        inst: &InstanceRt,
        script: &Path,
        env: &BTreeMap<String, String>,
        on_exit: OnExit,
    ) -> Result<Started, DriverError> {
        match &self.instance {
            Some(ic) => self.spawn_container_instance(cx, ic, inst, script, env, on_exit),
            None => spawn_process_instance(inst, script, env, on_exit),
        }
    }

    fn kill_instance(&self, cx: &DriverCx, inst: &InstanceRt) {
        ProcessDriver.kill_instance(cx, inst);
    }

    fn remove_instance(&self, cx: &DriverCx, inst: &InstanceRt) -> Result<(), DriverError> {
        let container = inst.container.lock().unwrap_or_else(|e| e.into_inner()).take();
        match container {
            Some(c) => self.engine.remove(&c).map_err(docker_err("instance", &inst.name, "rm")),
            None => ProcessDriver.remove_instance(cx, inst),
        }
    }

    fn hit(&self, v: &Victim, how: Hit) -> Result<(), DriverError> {
        let Victim::Container { name, id, stop_secs } = v else {
            hit_process(v, how);
            return Ok(());
        };
        let res = match how {
            Hit::Kill => self.engine.kill(id, "SIGKILL"),
            Hit::EngineRestart => self.engine.restart(id, *stop_secs),
            Hit::Terminate | Hit::Outage => self.engine.stop(id, *stop_secs),
            Hit::Freeze => self.engine.pause(id),
        };
        res.map_err(docker_err("target", name, self.api(how).unwrap_or("call")))
    }

    fn lingers(&self, v: &Victim) -> bool {
        ProcessDriver.lingers(v)
    }

    fn is_frozen(&self, v: &Victim) -> bool {
        match v {
            Victim::Container { id, .. } => self.engine.state(id).is_ok_and(|s| s.paused),
            Victim::Process { .. } => ProcessDriver.is_frozen(v),
        }
    }

    fn thaw(&self, cx: &DriverCx, victims: &[Victim], names: &[String]) -> (bool, String) {
        let containers: Vec<&String> = victims
            .iter()
            .filter_map(|v| match v {
                Victim::Container { id, .. } => Some(id),
                Victim::Process { .. } => None,
            })
            .collect();
        if containers.is_empty() {
            return thaw_processes(cx, victims, names);
        }
        let mut errors = Vec::new();
        for c in &containers {
            if let Err(e) = self.engine.unpause(c) {
                if !e.is_not_paused() {
                    errors.push(e.to_string());
                }
            }
        }
        let resumed = proc::poll_until(cx.budget(Duration::from_secs(5)), Duration::from_millis(10), || {
            containers.iter().all(|c| self.engine.state(c).is_ok_and(|s| !s.paused))
        });
        if resumed && errors.is_empty() {
            (true, format!("unpaused {}", names.join(", ")))
        } else {
            (false, format!("still paused: {}", errors.join("; ")))
        }
    }

    fn api(&self, how: Hit) -> Option<&'static str> {
        Some(match how {
            Hit::Kill => "kill",
            Hit::EngineRestart => "restart",
            Hit::Terminate | Hit::Outage => "stop",
            Hit::Freeze => "pause",
        })
    }

    fn restarts_in_engine(&self) -> bool {
        true
    }

    fn has_containers(&self) -> bool {
        true
    }
}

use process_driver::ProcessDriver;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_exit_codes() {
        assert_eq!(instance_exit(0), Exit { code: Some(0), signal: None });
        assert_eq!(instance_exit(3), Exit { code: Some(3), signal: None });
        assert_eq!(instance_exit(137), Exit { code: None, signal: Some(9) });
        assert_eq!(instance_exit(-1), Exit { code: Some(-1), signal: None }, "a failed wait is a failure");
        assert_eq!(target_exit(137), Exit { code: Some(137), signal: None });
        assert_eq!(target_exit(-1), Exit { code: Some(255), signal: None });
    }
}
