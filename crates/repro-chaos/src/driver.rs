//! The `Driver` trait: what the engine asks of the system under test (start and stop a target or an instance,
//! hit it with a fault, tell whether it is gone or frozen, undo a freeze), and the runtime state of targets and
//! instances that drivers and the engine share. The process adapter ([`crate::process_driver`]), the Docker
//! adapter ([`crate::docker_driver`]) and a fake for tests implement it; the engine (operations, undo, the flow)
//! never looks at a pid or a container itself.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use repro_model::timeline::Event;

use crate::flow::Interrupt;
use crate::model::Target;
use crate::timeline::Timeline;

/// What a driver failed to do, with the target or instance and the operation.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A system call or hook of a process target or instance failed.
    #[error("{what} {name}: {op}: {source}")]
    Io {
        what: &'static str,
        name: String,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A Docker Engine API call failed.
    #[error("{what} {name}: docker {op}: {source}")]
    Docker {
        what: &'static str,
        name: String,
        op: String,
        #[source]
        source: crate::docker::DockerError,
    },
    /// The driver cannot do this for this target or instance (a missing port, no container spec).
    #[error("{what} {name}: {detail}")]
    Unsupported { what: &'static str, name: String, detail: String },
    /// The run's files for it could not be prepared.
    #[error("{what} {name}: {source}")]
    Files {
        what: &'static str,
        name: String,
        #[source]
        source: Box<crate::error::ChaosError>,
    },
}

/// How a process or container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exit {
    pub code: Option<i64>,
    pub signal: Option<i64>,
}

/// Called once, from the driver's waiter thread, when a started target or instance ends: its pid (as in
/// [`Started`]) and how it ended.
pub type OnExit = Box<dyn FnOnce(i32, Exit) + Send>;

/// What a stop stopped: the last pid, and the container it removed (Docker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    pub pid: Option<i32>,
    pub container: Option<String>,
}

/// A started incarnation of a target or an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// Its process (the container's init for Docker; 0 when the engine does not tell).
    pub pid: i32,
    /// Its container's full id (Docker).
    pub container: Option<String>,
}

/// What the engine hits with a fault: a process (alone or with its group) or a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Victim {
    Process { name: String, pid: i32, group: bool },
    Container { name: String, id: String, stop_secs: i32 },
}

impl Victim {
    pub fn name(&self) -> &str {
        match self {
            Victim::Process { name, .. } | Victim::Container { name, .. } => name,
        }
    }
}

/// A fault's primitive action on one victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// SIGKILL (`docker kill`).
    Kill,
    /// A graceful stop that a restart follows: SIGTERM for a process (escalated by the engine).
    Terminate,
    /// The engine's own restart of a container.
    EngineRestart,
    /// An outage's stop: SIGKILL for a process, `docker stop` for a container.
    Outage,
    /// SIGSTOP, or `docker pause`.
    Freeze,
}

/// What drivers see of the run: the timeline, the interrupt budget, the run directory and ids.
pub struct DriverCx<'a> {
    pub tl: &'a Timeline,
    pub interrupt: &'a Interrupt,
    pub run_dir: &'a Path,
    pub run_id: &'a str,
    pub experiment: &'a str,
}

impl DriverCx<'_> {
    pub fn emit(&self, e: Event) {
        self.tl.emit(e);
    }
    /// `d`, cut to what is left of the cleanup budget once SIGINT/SIGTERM arrived.
    pub fn budget(&self, d: Duration) -> Duration {
        self.interrupt.budget(d)
    }
    pub fn warn_target(&self, target: &str, detail: String) {
        self.emit(Event::HarnessWarning { target: Some(target.to_string()), instance: None, detail });
    }
}

/// The system under test, as the engine drives it.
pub trait Driver: Send + Sync {
    /// The driver's name (`process`, `docker`, `fake`).
    fn kind(&self) -> &'static str;

    /// Starts a new incarnation of target `t` (`adopt`: the engine already restarted its container; only
    /// record it). `previous` is the pid of the last incarnation. `on_exit` is called when it ends.
    fn start_target(
        &self,
        cx: &DriverCx,
        t: &TargetRt,
        env: &BTreeMap<String, String>,
        previous: Option<i32>,
        adopt: bool,
        on_exit: OnExit,
    ) -> Result<Started, DriverError>;

    /// Stops target `t` gracefully (its state tells its pid and whether it still runs); None if it never
    /// started.
    fn stop_target(&self, cx: &DriverCx, t: &TargetRt, why: &str) -> Option<Stopped>;

    /// Starts one instance's script (`script`) in its output directory with `env`; `on_exit` is called
    /// when it ends.
    fn spawn_instance(
        &self,
        cx: &DriverCx,
        inst: &InstanceRt,
        script: &Path,
        env: &BTreeMap<String, String>,
        on_exit: OnExit,
    ) -> Result<Started, DriverError>;

    /// Kills what is left of an instance's start (SIGKILL to its group; its container for Docker).
    fn kill_instance(&self, cx: &DriverCx, inst: &InstanceRt);

    /// Removes what an ended instance leaves behind (its container, its group's stragglers).
    fn remove_instance(&self, cx: &DriverCx, inst: &InstanceRt) -> Result<(), DriverError>;

    /// Hits a victim. Process victims are hit the same way by every driver (instances are process groups).
    fn hit(&self, v: &Victim, how: Hit) -> Result<(), DriverError>;

    /// Whether anything of the victim still runs outside what the engine's state tells (a process group's
    /// other members). Containers: never (their state is the engine's).
    fn lingers(&self, v: &Victim) -> bool;

    /// Whether the victim is frozen (every live process stopped; the container paused).
    fn is_frozen(&self, v: &Victim) -> bool;

    /// Resumes frozen victims: (all resumed, what was done).
    fn thaw(&self, cx: &DriverCx, victims: &[Victim], names: &[String]) -> (bool, String);

    /// The name of the engine API call behind a hit, for the timeline (`kill`, `pause` ...); None for processes.
    fn api(&self, how: Hit) -> Option<&'static str>;

    /// Whether a restart is the engine's own (`Hit::EngineRestart`) rather than a stop and a start.
    fn restarts_in_engine(&self) -> bool {
        false
    }

    /// Whether targets are containers (victims are [`Victim::Container`]).
    fn has_containers(&self) -> bool {
        false
    }
}

// ------------------------------------------------------------------ runtime state

/// A target of the adapter while the run lasts.
pub struct TargetRt {
    pub spec: Target,
    /// (pid of the current incarnation, whether it is still running)
    pub state: Mutex<(Option<i32>, bool)>,
    pub incarnation: AtomicU32,
    /// The container of a docker target (created at its first start, removed when the run ends).
    pub container: Mutex<Option<String>>,
}

impl TargetRt {
    pub fn new(spec: Target) -> TargetRt {
        TargetRt { spec, state: Mutex::new((None, false)), incarnation: AtomicU32::new(0), container: Mutex::new(None) }
    }
    pub fn name(&self) -> &str {
        &self.spec.name.value
    }
    /// (pid, running) of the current incarnation.
    pub fn pid(&self) -> Option<(i32, bool)> {
        let g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.0.map(|p| (p, g.1))
    }
    pub fn running(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1
    }
    pub fn container(&self) -> Option<String> {
        self.container.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One instance of a workload.
pub struct InstanceRt {
    pub workload: String,
    pub name: String,
    pub index: u32,
    pub dir: PathBuf,
    pub pid: Mutex<Option<i32>>,
    pub running: AtomicBool,
    /// Set while an operation restarts the instance, so its workload does not count it as ended.
    pub restarting: AtomicBool,
    pub started: AtomicBool,
    /// Its variables; set (with its directory created) when it first starts.
    pub env: OnceLock<BTreeMap<String, String>>,
    /// The container of the current start (docker driver with instance containers).
    pub container: Mutex<Option<String>>,
}

impl InstanceRt {
    pub fn new(workload: &str, index: u32, dir: PathBuf) -> InstanceRt {
        InstanceRt {
            workload: workload.to_string(),
            name: format!("{workload}-{index}"),
            index,
            dir,
            pid: Mutex::new(None),
            running: AtomicBool::new(false),
            restarting: AtomicBool::new(false),
            started: AtomicBool::new(false),
            env: OnceLock::new(),
            container: Mutex::new(None),
        }
    }
    pub fn pid(&self) -> Option<i32> {
        *self.pid.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The first 12 characters of a container id, as the timeline shows it.
pub fn short(id: &str) -> String {
    id.chars().take(12).collect()
}
