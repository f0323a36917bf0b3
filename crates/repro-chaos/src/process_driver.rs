//! The process driver: targets are started by their adapter's `start` hook, instances are `bash` scripts,
//! each in its own process group; faults are signals.
use std::collections::BTreeMap;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use repro_model::timeline::Event;

use crate::driver::{Driver, DriverCx, DriverError, Exit, Hit, InstanceRt, OnExit, Started, Stopped, TargetRt, Victim};
use crate::model::SignalScope;
use crate::proc;

/// Local processes.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessDriver;

/// Sends `sig` to a process, or to its group.
pub fn signal(id: i32, group: bool, sig: Signal) {
    // false only when nothing is left to signal: whether it took effect is verified by the caller.
    let _ = if group { proc::kill_group(id, sig) } else { proc::kill_pid(id, sig) };
}

/// Whether the process (or every live process of the group) is stopped.
pub fn is_stopped(id: i32, group: bool) -> bool {
    if group {
        let members: Vec<_> = proc::group_members(id).into_iter().filter(|p| p.state != 'Z').collect();
        !members.is_empty() && members.iter().all(|p| p.state == 'T' || p.state == 't')
    } else {
        proc::proc_info(id).is_some_and(|p| p.state == 'T' || p.state == 't')
    }
}

/// Spawns `cmd` with its output appended to `log` and a waiter that calls `on_exit` when it ends.
fn spawn_waited(
    cmd: std::process::Command,
    log: &Path,
    on_exit: OnExit,
    err: impl FnOnce(std::io::Error) -> DriverError,
) -> Result<i32, DriverError> {
    let mut child = proc::spawn_logged(cmd, log).map_err(err)?;
    let pid = child.id() as i32;
    std::thread::spawn(move || {
        // `wait` fails only if the child was already reaped, which nothing else does: no exit to report then.
        if let Ok(st) = child.wait() {
            on_exit(pid, Exit { code: st.code().map(i64::from), signal: st.signal().map(i64::from) });
        }
    });
    Ok(pid)
}

/// What the process driver does for a process victim; the Docker driver does the same for instances.
pub fn hit_process(v: &Victim, how: Hit) {
    let Victim::Process { pid, group, .. } = v else { return };
    match how {
        Hit::Kill | Hit::Outage => signal(*pid, *group, Signal::SIGKILL),
        Hit::Terminate | Hit::EngineRestart => {
            signal(*pid, *group, Signal::SIGCONT);
            signal(*pid, *group, Signal::SIGTERM);
        }
        Hit::Freeze => signal(*pid, *group, Signal::SIGSTOP),
    }
}

/// SIGCONT to frozen process victims, then wait until none is stopped.
pub fn thaw_processes(cx: &DriverCx, victims: &[Victim], names: &[String]) -> (bool, String) {
    let procs: Vec<(i32, bool)> = victims
        .iter()
        .filter_map(|v| match v {
            Victim::Process { pid, group, .. } => Some((*pid, *group)),
            Victim::Container { .. } => None,
        })
        .collect();
    for &(id, group) in &procs {
        signal(id, group, Signal::SIGCONT);
    }
    let thawed = proc::poll_until(
        cx.budget(Duration::from_secs(5)).max(Duration::from_millis(200)),
        Duration::from_millis(5),
        || procs.iter().all(|&(id, g)| !is_stopped(id, g)),
    );
    (thawed, if thawed { format!("resumed {}", names.join(", ")) } else { "still stopped".to_string() })
}

/// Starts an instance's script with bash in its own process group (both drivers without instance containers).
pub fn spawn_process_instance(
    inst: &InstanceRt,
    script: &Path,
    env: &BTreeMap<String, String>,
    on_exit: OnExit,
) -> Result<Started, DriverError> {
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(script).current_dir(inst.dir.join("output")).envs(env).process_group(0);
    let log = inst.dir.join("logs/instance.log");
    let err = |source| DriverError::Io { what: "instance", name: inst.name.clone(), op: "could not start", source };
    let pid = spawn_waited(cmd, &log, on_exit, err)?;
    Ok(Started { pid, container: None })
}

impl Driver for ProcessDriver {
    fn kind(&self) -> &'static str {
        "process"
    }

    fn start_target(
        &self,
        cx: &DriverCx,
        t: &TargetRt,
        env: &BTreeMap<String, String>,
        previous: Option<i32>,
        _adopt: bool,
        on_exit: OnExit,
    ) -> Result<Started, DriverError> {
        let name = t.name().to_string();
        // A new incarnation starts only after the previous one's group is empty.
        if let Some(pgid) = previous {
            let empty = || !proc::group_alive(pgid, proc::Zombies::Excluded);
            if !proc::poll_until(Duration::from_secs(5), Duration::from_millis(10), empty) {
                signal(pgid, true, Signal::SIGKILL);
                cx.emit(Event::TargetDrained { target: name.clone(), pgid });
                proc::poll_until(Duration::from_secs(5), Duration::from_millis(10), empty);
            }
        }
        let log = cx.run_dir.join("logs").join(format!("{name}.log"));
        let cmd = proc::shell(&t.spec.start, env, cx.run_dir);
        let err =
            |source| DriverError::Io { what: "target", name: name.clone(), op: "start hook could not run", source };
        let pid = spawn_waited(cmd, &log, on_exit, err)?;
        Ok(Started { pid, container: None })
    }

    fn stop_target(&self, cx: &DriverCx, t: &TargetRt, _why: &str) -> Option<Stopped> {
        let (pid, running) = t.pid()?;
        if running {
            let group = t.spec.signal_scope == SignalScope::Group;
            signal(pid, false, Signal::SIGCONT);
            signal(pid, true, Signal::SIGCONT);
            signal(pid, group, Signal::SIGTERM);
            let timeout = cx.budget(t.spec.stop_timeout.map_or(Duration::from_secs(10), |d| d.0));
            if !proc::poll_until(timeout, Duration::from_millis(10), || !t.running()) {
                signal(pid, true, Signal::SIGKILL);
            }
        }
        let wait = cx.budget(Duration::from_secs(5)).max(Duration::from_millis(200));
        proc::poll_until(wait, Duration::from_millis(10), || !proc::group_alive(pid, proc::Zombies::Excluded));
        signal(pid, true, Signal::SIGKILL);
        Some(Stopped { pid: Some(pid), container: None })
    }

    fn spawn_instance(
        &self,
        _cx: &DriverCx,
        inst: &InstanceRt,
        script: &Path,
        env: &BTreeMap<String, String>,
        on_exit: OnExit,
    ) -> Result<Started, DriverError> {
        spawn_process_instance(inst, script, env, on_exit)
    }

    fn kill_instance(&self, _cx: &DriverCx, inst: &InstanceRt) {
        let pid = inst.pid().unwrap_or(0);
        signal(pid, true, Signal::SIGCONT);
        signal(pid, true, Signal::SIGKILL);
    }

    fn remove_instance(&self, _cx: &DriverCx, inst: &InstanceRt) -> Result<(), DriverError> {
        // Whatever the instance left in its group goes with it.
        signal(inst.pid().unwrap_or(0), true, Signal::SIGKILL);
        Ok(())
    }

    fn hit(&self, v: &Victim, how: Hit) -> Result<(), DriverError> {
        match v {
            Victim::Process { .. } => {
                hit_process(v, how);
                Ok(())
            }
            Victim::Container { name, .. } => Err(DriverError::Unsupported {
                what: "target",
                name: name.clone(),
                detail: "the process driver has no containers".into(),
            }),
        }
    }

    fn lingers(&self, v: &Victim) -> bool {
        matches!(v, Victim::Process { pid, group: true, .. } if proc::group_alive(*pid, proc::Zombies::Excluded))
    }

    fn is_frozen(&self, v: &Victim) -> bool {
        matches!(v, Victim::Process { pid, group, .. } if is_stopped(*pid, *group))
    }

    fn thaw(&self, cx: &DriverCx, victims: &[Victim], names: &[String]) -> (bool, String) {
        thaw_processes(cx, victims, names)
    }

    fn api(&self, _how: Hit) -> Option<&'static str> {
        None
    }
}
