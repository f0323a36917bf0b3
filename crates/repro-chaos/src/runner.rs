//! The harness: run directory, targets, instances, operations, the flow engine, observers, undo.
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::docker;
use crate::error::{ChaosError, Result};
use crate::evaluate::{self, shell_quote, CheckResult, Evaluation, RunData, INCOMPLETE_MARKER};
use crate::fsutil::{self, mkdirs, write_atomic, write_json_atomic, write_json_durable};
use crate::limits::Limits;
use crate::load::{LoadedAdapter, LoadedExperiment};
use crate::model::*;
use crate::proc::{self, Cancel};
use crate::prom;
use crate::timeline::Timeline;

/// Options of `repro chaos run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub seed: Option<u64>,
    /// Where runs go: `<state_dir>/<experiment>/<run-id>/` (default `.repro/chaos`).
    pub state_dir: Option<PathBuf>,
    /// Echo timeline events to stderr.
    pub echo: bool,
    /// What the experiment may ask for; the flow's steps are also counted against `limits.steps` while it runs.
    pub limits: Limits,
}

pub struct RunOutcome {
    pub run_dir: PathBuf,
    pub evaluation: Evaluation,
    /// The signal (SIGINT 2, SIGTERM 15) that interrupted the run, if one did: the run directory holds
    /// `INTERRUPTED`, the verdict is ERROR, and `repro chaos run` exits 128 + the signal.
    pub interrupted: Option<i32>,
}

/// Name of the marker file of a run that SIGINT or SIGTERM ended (its content: which, and what was undone).
pub const INTERRUPTED_MARKER: &str = "INTERRUPTED";

/// After SIGINT/SIGTERM, the undo and the cleanup get this long (each step's timeout is cut to what is left).
const INTERRUPT_BUDGET: Duration = Duration::from_millis(1200);
/// ... and if they are not done by then, every process group of the run is killed and the harness exits.
const INTERRUPT_DEADLINE: Duration = Duration::from_millis(1700);

/// Which signal interrupted the run, and when.
#[derive(Default)]
struct Interrupt {
    signal: AtomicI32,
    at: Mutex<Option<Instant>>,
}

impl Interrupt {
    fn signal(&self) -> Option<i32> {
        Some(self.signal.load(Ordering::SeqCst)).filter(|s| *s != 0)
    }
    /// `d`, cut to what is left of the interrupt budget once a signal arrived.
    fn budget(&self, d: Duration) -> Duration {
        match *self.at.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(t) => d.min(INTERRUPT_BUDGET.saturating_sub(t.elapsed())),
            None => d,
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    if sig == 2 {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}

// ------------------------------------------------------------------ small helpers

/// splitmix64: stable across versions, so a seed means the same thing forever.
pub use repro_detcore::SplitMix64 as Rng;

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Which candidates an operation's run hits: depends only on seed, operation name and run number.
pub fn select(seed: u64, op: &str, run: u32, candidates: &[String], how: Select) -> Vec<String> {
    let k = match how {
        Select::One => 1,
        Select::All => candidates.len(),
        Select::Count(n) => (n as usize).min(candidates.len()),
    };
    if k >= candidates.len() {
        return candidates.to_vec();
    }
    let mut rng = Rng::new(seed ^ fnv1a(op) ^ u64::from(run).wrapping_mul(0x9E37_79B9));
    let mut idx: Vec<usize> = (0..candidates.len()).collect();
    for i in 0..k {
        let j = i + rng.below((idx.len() - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut chosen: Vec<usize> = idx[..k].to_vec();
    chosen.sort_unstable();
    chosen.into_iter().map(|i| candidates[i].clone()).collect()
}

/// Expands `${VAR}` from `env`.
pub fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let re = regex::Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}").expect("static regex");
    re.replace_all(s, |c: &regex::Captures| env.get(&c[1]).cloned().unwrap_or_default()).into_owned()
}

fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// A change counter that waiters can block on.
#[derive(Default)]
struct Notify {
    gen: Mutex<u64>,
    cv: Condvar,
}

impl Notify {
    fn bump(&self) {
        let mut g = self.gen.lock().unwrap_or_else(|e| e.into_inner());
        *g += 1;
        self.cv.notify_all();
    }
    fn wait(&self, d: Duration) {
        let g = self.gen.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.cv.wait_timeout(g, d);
    }
}

// ------------------------------------------------------------------ runtime state

struct TargetRt {
    spec: Target,
    /// (pid of the current incarnation, whether it is still running)
    state: Mutex<(Option<i32>, bool)>,
    incarnation: AtomicU32,
    /// The container of a docker target (created at its first start, removed when the run ends).
    container: Mutex<Option<String>>,
}

struct InstanceRt {
    workload: String,
    name: String,
    index: u32,
    dir: PathBuf,
    pid: Mutex<Option<i32>>,
    running: AtomicBool,
    /// Set while an operation restarts the instance, so its workload does not count it as ended.
    restarting: AtomicBool,
    started: AtomicBool,
    /// Its variables; set (with its directory created) when it first starts.
    env: std::sync::OnceLock<BTreeMap<String, String>>,
    /// The container of the current start (docker driver with instance containers).
    container: Mutex<Option<String>>,
}

struct Undo {
    id: u64,
    operation: String,
    uses: String,
    run: u32,
    action: UndoAction,
}

enum UndoAction {
    /// Start the target again if it is down.
    StartTarget(String),
    /// SIGCONT the frozen processes.
    Thaw { group: bool, ids: Vec<i32>, names: Vec<String> },
    /// An adapter operation's undo hook.
    Hook { script: String, env: BTreeMap<String, String> },
    /// Unpause paused containers.
    Unpause { containers: Vec<String>, names: Vec<String> },
}

#[derive(Debug)]
enum FlowError {
    Cancelled,
}

struct Ctx {
    exp: Experiment,
    adapter: Adapter,
    run_dir: PathBuf,
    seed: u64,
    tl: Timeline,
    cancel: Cancel,
    notify: Notify,
    env: BTreeMap<String, String>,
    targets: BTreeMap<String, Arc<TargetRt>>,
    instances: Mutex<BTreeMap<String, Vec<Arc<InstanceRt>>>>,
    op_runs: Mutex<HashMap<String, u32>>,
    undo: Mutex<Vec<Undo>>,
    undo_seq: AtomicU32,
    watch_lines: Mutex<HashMap<String, WatchLines>>,
    /// Process groups of every instance ever started (for the leak check).
    groups: Mutex<Vec<i32>>,
    /// Target incarnations whose exit has not been recorded yet.
    pending: Mutex<Vec<PendingExit>>,
    run_id: String,
    /// The Docker engine, for the docker driver (None: not that driver, or not reachable).
    docker: Option<docker::Engine>,
    docker_error: Option<String>,
    /// The docker events watcher: its stop flag and its end.
    docker_events: Mutex<Option<(Arc<AtomicBool>, std::sync::mpsc::Receiver<()>)>>,
    limits: Limits,
    /// Flow steps run so far (instance starts, operation runs, waits, delays), against `limits.steps`.
    steps: AtomicU64,
    interrupt: Arc<Interrupt>,
    /// Process groups of watchers (killed with the rest if the cleanup after a signal overruns).
    watcher_groups: Mutex<Vec<i32>>,
    /// Set once the run directory is final; the deadline after a signal leaves it alone from then on.
    finished: Mutex<bool>,
}

impl Ctx {
    fn emit(&self, event: &str, fields: Value) {
        self.tl.emit(event, fields);
    }

    /// Records a harness error (the run's verdict becomes ERROR) and stops the flow.
    fn harness_error(&self, reason: &str) {
        self.emit("harness.error", json!({ "reason": reason }));
        self.cancel.cancel(reason);
        self.notify.bump();
    }

    fn hook_env(&self, extra: &[(&str, String)]) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        for (k, v) in extra {
            env.insert((*k).to_string(), v.clone());
        }
        env
    }

    fn check_cancel(&self) -> std::result::Result<(), FlowError> {
        if self.cancel.is_cancelled() {
            Err(FlowError::Cancelled)
        } else {
            Ok(())
        }
    }

    // -------------------------------------------------------------- targets

    fn target_dir(&self, name: &str) -> PathBuf {
        self.run_dir.join("system/targets").join(name)
    }

    /// The variables of a target's hooks: CHAOS_TARGET, CHAOS_TARGET_DIR and, for a docker target,
    /// CHAOS_CONTAINER (its name, for `docker exec` in a health check).
    fn target_env(&self, t: &TargetRt) -> BTreeMap<String, String> {
        let name = t.spec.name.value.clone();
        let mut extra =
            vec![("CHAOS_TARGET", name.clone()), ("CHAOS_TARGET_DIR", self.target_dir(&name).display().to_string())];
        if self.docker.is_some() {
            extra.push(("CHAOS_CONTAINER", self.container_name(&name)));
        }
        self.hook_env(&extra)
    }

    /// Starts a target and waits until it is healthy. Err means the start hook itself broke.
    fn start_target(
        &self,
        t: &Arc<TargetRt>,
        reason: &str,
        operation: Option<&str>,
    ) -> std::result::Result<bool, String> {
        self.start_target_with(t, reason, operation, false)
    }

    fn container_name(&self, target: &str) -> String {
        format!("repro-chaos-{}-{target}", self.run_id.to_ascii_lowercase())
    }

    /// Starts (or, with `adopt`, records an engine-side restart of) a docker target's container: its pid and
    /// a waiter that notices its exit.
    fn start_container(
        &self,
        eng: &docker::Engine,
        t: &Arc<TargetRt>,
        adopt: bool,
    ) -> std::result::Result<(i32, std::sync::mpsc::Receiver<std::process::ExitStatus>), String> {
        use std::os::unix::process::ExitStatusExt;
        let name = t.spec.name.value.clone();
        let existing = t.container.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let id = match existing {
            Some(id) => id,
            None => {
                let ct = t.spec.container.as_ref().ok_or_else(|| format!("target {name}: no container"))?;
                let mut labels = std::collections::HashMap::new();
                labels.insert(docker::RUN_LABEL.to_string(), self.run_id.clone());
                labels.insert(docker::TARGET_LABEL.to_string(), name.clone());
                labels.insert("repro.chaos.experiment".to_string(), self.exp.id.value.clone());
                let mut ports = Vec::new();
                for (pname, cport) in &ct.ports {
                    let key = format!("CHAOS_PORT_{}", pname.to_ascii_uppercase());
                    let host: u16 = self
                        .env
                        .get(&key)
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| format!("target {name}: no port {key}"))?;
                    ports.push((cport.value, host));
                }
                let spec = docker::Spec {
                    name: self.container_name(&name),
                    image: ct.image.value.clone(),
                    command: ct.command.iter().map(|c| expand(c, &self.env)).collect(),
                    env: ct.env.iter().map(|(k, v)| format!("{k}={}", expand(v, &self.env))).collect(),
                    labels,
                    ports,
                    stop_timeout: t.spec.stop_timeout.map(|d| d.0.as_secs() as i64),
                    ..Default::default()
                };
                let id = eng.create(&spec).map_err(|e| format!("target {name}: docker create {}: {e}", spec.image))?;
                *t.container.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.clone());
                id
            }
        };
        if !adopt {
            eng.start(&id).map_err(|e| format!("target {name}: docker start: {e}"))?;
        }
        let st = eng.state(&id).map_err(|e| format!("target {name}: docker inspect: {e}"))?;
        let pid = st.pid;
        let (tx, rx) = std::sync::mpsc::channel::<std::process::ExitStatus>();
        let t2 = Arc::clone(t);
        let eng2 = eng.clone();
        std::thread::spawn(move || {
            let code = eng2.wait(&id).unwrap_or(-1);
            let mut g = t2.state.lock().unwrap_or_else(|e| e.into_inner());
            if g.0 == Some(pid) {
                g.1 = false;
            }
            drop(g);
            let _ = tx.send(std::process::ExitStatus::from_raw(((code & 0xff) as i32) << 8));
        });
        Ok((pid, rx))
    }

    fn start_target_with(
        &self,
        t: &Arc<TargetRt>,
        reason: &str,
        operation: Option<&str>,
        adopt: bool,
    ) -> std::result::Result<bool, String> {
        let name = t.spec.name.value.clone();
        if let Some(eng) = &self.docker {
            let (pid, rx) = self.start_container(eng, t, adopt)?;
            return self.after_start(t, pid, rx, reason, operation);
        }
        // A new incarnation starts only after the previous one's group is empty.
        let old = t.state.lock().unwrap_or_else(|e| e.into_inner()).0;
        if let Some(pgid) = old {
            if !proc::poll_until(Duration::from_secs(5), Duration::from_millis(10), || !proc::group_alive(pgid)) {
                proc::kill_group(pgid, Signal::SIGKILL);
                self.emit("target.drained", json!({"target": name, "pgid": pgid}));
                proc::poll_until(Duration::from_secs(5), Duration::from_millis(10), || !proc::group_alive(pgid));
            }
        }
        let env = self.target_env(t);
        let log = self.run_dir.join("logs").join(format!("{name}.log"));
        let cmd = proc::shell(&t.spec.start, &env, &self.run_dir);
        let mut child =
            proc::spawn_logged(cmd, &log).map_err(|e| format!("target {name}: start hook could not run: {e}"))?;
        let pid = child.id() as i32;
        *t.state.lock().unwrap_or_else(|e| e.into_inner()) = (Some(pid), true);
        let t2 = Arc::clone(t);
        let (tx, rx) = std::sync::mpsc::channel::<std::process::ExitStatus>();
        std::thread::spawn(move || {
            if let Ok(st) = child.wait() {
                let mut g = t2.state.lock().unwrap_or_else(|e| e.into_inner());
                if g.0 == Some(pid) {
                    g.1 = false;
                }
                let _ = tx.send(st);
            }
        });
        self.after_start(t, pid, rx, reason, operation)
    }

    /// Records a new incarnation of a target and waits until it is healthy.
    fn after_start(
        &self,
        t: &Arc<TargetRt>,
        pid: i32,
        rx: std::sync::mpsc::Receiver<std::process::ExitStatus>,
        reason: &str,
        operation: Option<&str>,
    ) -> std::result::Result<bool, String> {
        let name = t.spec.name.value.clone();
        let env = self.target_env(t);
        let inc = t.incarnation.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let mut g = t.state.lock().unwrap_or_else(|e| e.into_inner());
            if self.docker.is_some() {
                *g = (Some(pid), true);
            }
        }
        let mut fields = json!({"target": name, "pid": pid, "incarnation": inc, "reason": reason});
        if let Some(op) = operation {
            fields["operation"] = json!(op);
        }
        if let Some(c) = t.container.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            fields["container"] = json!(c.chars().take(12).collect::<String>());
        }
        self.emit(if inc == 1 { "target.started" } else { "target.restarted" }, fields);
        // The exit is recorded in the timeline by `reap_target_events`.
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).push((name.clone(), pid, rx));
        let Some(h) = &t.spec.health else {
            return Ok(true);
        };
        let timeout = h.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(30));
        let interval = h.interval.map(|d| d.0).unwrap_or(Duration::from_millis(50));
        let started = Instant::now();
        // The end-of-run undo restarts targets after a cancel too, and must see them healthy.
        let watch_cancel = reason != "undo";
        let mut cancelled = false;
        let healthy = proc::poll_until(timeout, interval, || {
            if !t.state.lock().unwrap_or_else(|e| e.into_inner()).1 {
                return true; // exited: stop polling, reported below
            }
            if watch_cancel && self.cancel.is_cancelled() {
                cancelled = true;
                return true;
            }
            let cancel = if watch_cancel { Some(&self.cancel) } else { None };
            proc::run_hook(&h.run, &env, &self.run_dir, interval.max(Duration::from_secs(5)), cancel)
                .map(|o| o.ok())
                .unwrap_or(false)
        }) && !cancelled
            && t.state.lock().unwrap_or_else(|e| e.into_inner()).1;
        self.reap_target_events();
        if healthy {
            self.emit("target.healthy", json!({"target": name, "pid": pid, "after": secs(started.elapsed())}));
        } else {
            self.emit("target.unhealthy", json!({"target": name, "pid": pid, "after": secs(started.elapsed())}));
        }
        Ok(healthy)
    }

    /// Records `target.exited` for incarnations that have ended.
    fn reap_target_events(&self) {
        let mut g = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|(name, pid, rx)| match rx.try_recv() {
            Ok(st) => {
                use std::os::unix::process::ExitStatusExt;
                self.emit(
                    "target.exited",
                    json!({"target": name, "pid": pid, "code": st.code(), "signal": st.signal()}),
                );
                false
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => true,
            Err(_) => false,
        });
    }

    fn target_pid(&self, t: &TargetRt) -> Option<(i32, bool)> {
        let g = t.state.lock().unwrap_or_else(|e| e.into_inner());
        g.0.map(|p| (p, g.1))
    }

    /// Stops a target gracefully (SIGTERM, then SIGKILL after its stop timeout).
    fn stop_target(&self, t: &TargetRt, why: &str) {
        if let Some(eng) = &self.docker {
            self.stop_container(eng, t, why);
            return;
        }
        let Some((pid, running)) = self.target_pid(t) else { return };
        let group = t.spec.signal_scope == SignalScope::Group;
        if running {
            proc::kill_pid(pid, Signal::SIGCONT);
            proc::kill_group(pid, Signal::SIGCONT);
            if group {
                proc::kill_group(pid, Signal::SIGTERM);
            } else {
                proc::kill_pid(pid, Signal::SIGTERM);
            }
            let timeout = self.budget(t.spec.stop_timeout.map(|d| d.0).unwrap_or(Duration::from_secs(10)));
            if !proc::poll_until(timeout, Duration::from_millis(10), || !self.target_running(t)) {
                proc::kill_group(pid, Signal::SIGKILL);
            }
        }
        let wait = self.budget(Duration::from_secs(5)).max(Duration::from_millis(200));
        proc::poll_until(wait, Duration::from_millis(10), || !proc::group_alive(pid));
        proc::kill_group(pid, Signal::SIGKILL);
        self.reap_target_events();
        self.emit("target.stopped", json!({"target": t.spec.name, "pid": pid, "reason": why}));
    }

    /// Stops and removes a docker target's container (its log goes to logs/<target>.log first).
    fn stop_container(&self, eng: &docker::Engine, t: &TargetRt, why: &str) {
        let Some(id) = t.container.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return };
        let name = &t.spec.name.value;
        self.emit("target.stopping", json!({"target": name, "reason": why}));
        if eng.state(&id).is_ok_and(|s| s.paused) {
            let _ = eng.unpause(&id);
        }
        let timeout = self.budget(t.spec.stop_timeout.map(|d| d.0).unwrap_or(Duration::from_secs(10)));
        let timeout = i32::try_from(timeout.as_secs()).unwrap_or(i32::MAX);
        if let Err(e) = eng.stop(&id, timeout) {
            self.emit("harness.warning", json!({"target": name, "detail": format!("docker stop: {e}")}));
        }
        proc::poll_until(self.budget(Duration::from_secs(5)), Duration::from_millis(10), || !self.target_running(t));
        self.reap_target_events();
        match eng.logs(&id) {
            Ok(text) => {
                let _ = std::fs::write(self.run_dir.join("logs").join(format!("{name}.log")), text);
            }
            Err(e) => self.emit("harness.warning", json!({"target": name, "detail": format!("docker logs: {e}")})),
        }
        let pid = self.target_pid(t).map(|p| p.0);
        if let Err(e) = eng.remove(&id) {
            self.emit("harness.warning", json!({"target": name, "detail": format!("docker rm: {e}")}));
        }
        self.emit(
            "target.stopped",
            json!({"target": name, "pid": pid, "reason": why, "container": id.chars().take(12).collect::<String>()}),
        );
    }

    fn target_running(&self, t: &TargetRt) -> bool {
        t.state.lock().unwrap_or_else(|e| e.into_inner()).1
    }

    // -------------------------------------------------------------- instances

    fn instance_list(&self, workload: &str) -> Vec<Arc<InstanceRt>> {
        self.instances.lock().unwrap_or_else(|e| e.into_inner()).get(workload).cloned().unwrap_or_default()
    }

    /// Creates (first run) or reuses the instances of a workload. Nothing is written for an instance until it
    /// starts ([`Ctx::instance_env`]).
    fn prepare_instances(&self, w: &Workload) -> Result<Vec<Arc<InstanceRt>>> {
        let mut g = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = g.get(&w.name.value) {
            return Ok(v.clone());
        }
        let wdir = self.run_dir.join("workloads").join(&w.name.value);
        mkdirs(&wdir.join("instances"))?;
        write_atomic(&wdir.join("run.sh"), w.run.as_bytes())?;
        let v: Vec<Arc<InstanceRt>> = (0..w.instances)
            .map(|i| {
                let name = format!("{}-{i}", w.name.value);
                Arc::new(InstanceRt {
                    workload: w.name.value.clone(),
                    dir: wdir.join("instances").join(&name),
                    name,
                    index: i,
                    pid: Mutex::new(None),
                    running: AtomicBool::new(false),
                    restarting: AtomicBool::new(false),
                    started: AtomicBool::new(false),
                    env: std::sync::OnceLock::new(),
                    container: Mutex::new(None),
                })
            })
            .collect();
        g.insert(w.name.value.clone(), v.clone());
        Ok(v)
    }

    /// The instance's variables; its directory (output/.chaos, logs, env) is created the first time.
    fn instance_env(&self, inst: &InstanceRt) -> Result<BTreeMap<String, String>> {
        if let Some(env) = inst.env.get() {
            return Ok(env.clone());
        }
        let w = self.exp.workloads.iter().find(|w| w.name.value == inst.workload);
        let wdir = self.run_dir.join("workloads").join(&inst.workload);
        let dir = &inst.dir;
        let out = dir.join("output");
        mkdirs(&out.join(".chaos"))?;
        mkdirs(&dir.join("logs"))?;
        let mut env = self.env.clone();
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

    /// Counts `n` flow steps against the limit; over it, the run ends with a harness error.
    fn step(&self, n: u64) -> std::result::Result<(), FlowError> {
        let total = self.steps.fetch_add(n, Ordering::SeqCst).saturating_add(n);
        if total > self.limits.steps {
            self.harness_error(&format!(
                "the flow ran {}",
                Limits::exceeded(format!("{total} steps"), self.limits.steps, "steps")
            ));
            return Err(FlowError::Cancelled);
        }
        Ok(())
    }

    /// `d`, cut to what is left of the cleanup budget once SIGINT/SIGTERM arrived.
    fn budget(&self, d: Duration) -> Duration {
        self.interrupt.budget(d)
    }

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

    /// Spawns one instance's script in its own process group.
    fn spawn_instance(self: &Arc<Self>, inst: &Arc<InstanceRt>, reason: &str) -> std::result::Result<(), String> {
        let wdir = self.run_dir.join("workloads").join(&inst.workload);
        let out = inst.dir.join("output");
        let env = self.instance_env(inst).map_err(|e| format!("instance {}: {e}", inst.name))?;
        // A line per start in .chaos/attempts; .chaos/exit_code only once this start has ended.
        let _ = std::fs::remove_file(out.join(".chaos/exit_code"));
        fsutil::append_line(&out.join(".chaos/attempts"), &format!("{} {reason}", fsutil::rfc3339(fsutil::now())))
            .map_err(|e| format!("instance {}: {e}", inst.name))?;
        if let (Some(eng), Some(ic)) = (self.docker.clone(), self.adapter.instance.container.clone()) {
            return self.spawn_instance_container(&eng, &ic, inst, reason);
        }
        let mut cmd = std::process::Command::new("bash");
        {
            use std::os::unix::process::CommandExt;
            cmd.arg(wdir.join("run.sh")).current_dir(&out).envs(&env).process_group(0);
        }
        let log = inst.dir.join("logs/instance.log");
        let mut child =
            proc::spawn_logged(cmd, &log).map_err(|e| format!("instance {}: could not start: {e}", inst.name))?;
        let pid = child.id() as i32;
        *inst.pid.lock().unwrap_or_else(|e| e.into_inner()) = Some(pid);
        self.groups.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
        inst.running.store(true, Ordering::SeqCst);
        inst.started.store(true, Ordering::SeqCst);
        self.emit(
            "instance.created",
            json!({"workload": inst.workload, "instance": inst.name, "pid": pid, "reason": reason}),
        );
        self.notify.bump();
        let ctx = Arc::clone(self);
        let inst2 = Arc::clone(inst);
        std::thread::spawn(move || {
            use std::os::unix::process::ExitStatusExt;
            let st = child.wait().ok();
            let code = st.and_then(|s| s.code());
            let signal = st.and_then(|s| s.signal());
            ctx.instance_ended(&inst2, pid, code.map(i64::from), signal.map(i64::from));
        });
        Ok(())
    }

    /// Records the end of an instance's process or container `pid`: its exit code (written before the instance
    /// counts as ended, so collect and the checks see it), the instance.state event, and, unless a restart
    /// replaced it meanwhile, that it no longer runs.
    fn instance_ended(&self, inst: &InstanceRt, pid: i32, code: Option<i64>, signal: Option<i64>) {
        if let Some(c) = code {
            let p = inst.dir.join("output/.chaos/exit_code");
            if let Err(e) = write_atomic(&p, format!("{c}\n").as_bytes()) {
                self.harness_error(&format!("instance {}: {e}", inst.name));
            }
        }
        let state = match (code, signal) {
            (Some(0), _) => "Succeeded",
            (Some(_), _) => "Failed",
            _ => "Killed",
        };
        self.emit(
            "instance.state",
            json!({"workload": inst.workload, "instance": inst.name, "pid": pid, "state": state, "exit_code": code, "signal": signal}),
        );
        if *inst.pid.lock().unwrap_or_else(|e| e.into_inner()) == Some(pid) {
            inst.running.store(false, Ordering::SeqCst);
        }
        self.notify.bump();
    }

    /// Runs an instance in a new container (the previous start's container is removed first); a waiter
    /// records its end like a host instance's: exit code (a container that died of signal N exits 128+N and
    /// counts as Killed), instance.state, the log into logs/instance.log.
    fn spawn_instance_container(
        self: &Arc<Self>,
        eng: &docker::Engine,
        ic: &InstanceContainer,
        inst: &Arc<InstanceRt>,
        reason: &str,
    ) -> std::result::Result<(), String> {
        let wdir = self.run_dir.join("workloads").join(&inst.workload);
        let out = inst.dir.join("output");
        let env = self.instance_env(inst).map_err(|e| format!("instance {}: {e}", inst.name))?;
        if let Some(old) = inst.container.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = eng.remove(&old);
        }
        let mut labels = std::collections::HashMap::new();
        labels.insert(docker::RUN_LABEL.to_string(), self.run_id.clone());
        labels.insert("repro.chaos.instance".to_string(), inst.name.clone());
        labels.insert("repro.chaos.experiment".to_string(), self.exp.id.value.clone());
        let attempt = std::fs::read_to_string(out.join(".chaos/attempts")).map(|t| t.lines().count()).unwrap_or(1);
        let rd = self.run_dir.display().to_string();
        let spec = docker::Spec {
            name: format!("repro-chaos-{}-{}-{attempt}", self.run_id.to_ascii_lowercase(), inst.name),
            image: ic.image.value.clone(),
            command: vec![ic.shell.clone(), wdir.join("run.sh").display().to_string()],
            env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            labels,
            binds: vec![format!("{rd}:{rd}")],
            working_dir: Some(out.display().to_string()),
            host_network: true,
            ..Default::default()
        };
        let id = eng.create(&spec).map_err(|e| format!("instance {}: docker create {}: {e}", inst.name, spec.image))?;
        *inst.container.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.clone());
        eng.start(&id).map_err(|e| format!("instance {}: docker start: {e}", inst.name))?;
        let pid = eng.state(&id).map(|s| s.pid).unwrap_or(0);
        *inst.pid.lock().unwrap_or_else(|e| e.into_inner()) = Some(pid);
        if pid > 0 {
            self.groups.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
        }
        inst.running.store(true, Ordering::SeqCst);
        inst.started.store(true, Ordering::SeqCst);
        self.emit(
            "instance.created",
            json!({"workload": inst.workload, "instance": inst.name, "pid": pid, "reason": reason, "container": id.chars().take(12).collect::<String>()}),
        );
        self.notify.bump();
        let ctx = Arc::clone(self);
        let inst2 = Arc::clone(inst);
        let eng2 = eng.clone();
        std::thread::spawn(move || {
            let code = eng2.wait(&id).unwrap_or(-1);
            if let Ok(text) = eng2.logs(&id) {
                let _ = fsutil::append_line(&inst2.dir.join("logs/instance.log"), text.trim_end_matches('\n'));
            }
            let (code, signal) =
                if code > 128 && code <= 128 + 64 { (None, Some(code - 128)) } else { (Some(code), None) };
            ctx.instance_ended(&inst2, pid, code, signal);
        });
        Ok(())
    }

    /// A workload leaf: start every instance, wait until all have ended (or the timeout).
    fn run_workload(self: &Arc<Self>, w: &Workload) -> std::result::Result<(), FlowError> {
        let insts = match self.prepare_instances(w) {
            Ok(v) => v,
            Err(e) => {
                self.harness_error(&format!("workload {}: {e}", w.name.value));
                return Err(FlowError::Cancelled);
            }
        };
        for inst in &insts {
            self.instance_hook("create", &self.adapter.instance.create, inst);
            self.check_cancel()?;
            if let Err(e) = self.spawn_instance(inst, "flow") {
                self.harness_error(&e);
                return Err(FlowError::Cancelled);
            }
        }
        let timeout = w.timeout.map(|d| d.0).unwrap_or(self.exp.timeout.0);
        let started = Instant::now();
        let mut timed_out = false;
        loop {
            let busy = insts.iter().any(|i| i.running.load(Ordering::SeqCst) || i.restarting.load(Ordering::SeqCst));
            if !busy {
                break;
            }
            if self.cancel.is_cancelled() {
                break;
            }
            if started.elapsed() >= timeout {
                timed_out = true;
                break;
            }
            self.notify.wait(Duration::from_millis(20));
        }
        for inst in &insts {
            if inst.running.load(Ordering::SeqCst) {
                let pid = inst.pid.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(0);
                proc::kill_group(pid, Signal::SIGCONT);
                proc::kill_group(pid, Signal::SIGKILL);
                if timed_out {
                    self.emit(
                        "instance.state",
                        json!({"workload": inst.workload, "instance": inst.name, "state": "TimedOut", "timeout": secs(timeout)}),
                    );
                }
                proc::poll_until(self.budget(Duration::from_secs(5)), Duration::from_millis(5), || {
                    !inst.running.load(Ordering::SeqCst)
                });
            }
            self.collect_instance(inst);
        }
        self.check_cancel()
    }

    fn collect_instance(&self, inst: &InstanceRt) {
        let code = std::fs::read_to_string(inst.dir.join("output/.chaos/exit_code"))
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok());
        self.instance_hook("collect", &self.adapter.instance.collect, inst);
        self.emit("instance.collected", json!({"workload": inst.workload, "instance": inst.name, "exit_code": code}));
        let pid = inst.pid.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(0);
        if let (Some(eng), Some(c)) = (&self.docker, inst.container.lock().unwrap_or_else(|e| e.into_inner()).take()) {
            if let Err(e) = eng.remove(&c) {
                self.emit("harness.warning", json!({"instance": inst.name, "detail": format!("docker rm: {e}")}));
            }
        } else {
            proc::kill_group(pid, Signal::SIGKILL);
        }
        self.instance_hook("delete", &self.adapter.instance.delete, inst);
        self.emit("instance.deleted", json!({"workload": inst.workload, "instance": inst.name}));
    }

    // -------------------------------------------------------------- operations

    fn push_undo(&self, op: &Operation, run: u32, action: UndoAction) -> u64 {
        let id = u64::from(self.undo_seq.fetch_add(1, Ordering::SeqCst));
        self.undo.lock().unwrap_or_else(|e| e.into_inner()).push(Undo {
            id,
            operation: op.name.value.clone(),
            uses: op.uses.value.clone(),
            run,
            action,
        });
        id
    }

    fn take_undo(&self, id: u64) -> Option<Undo> {
        let mut g = self.undo.lock().unwrap_or_else(|e| e.into_inner());
        let pos = g.iter().position(|u| u.id == id)?;
        Some(g.remove(pos))
    }

    /// Runs an undo and records its outcome; `at_end` says whether the end-of-run sweep runs it.
    fn run_undo(&self, u: Undo, at_end: bool) -> bool {
        let (ok, detail) = match &u.action {
            UndoAction::StartTarget(name) => match self.targets.get(name) {
                Some(t) if self.target_running(t) => (true, "already running".to_string()),
                // Started again only to be stopped with the run a moment later: not within the signal's budget.
                Some(_) if self.interrupt.signal().is_some() => {
                    (true, "not started again: the run was interrupted and every target is stopped".to_string())
                }
                Some(t) => match self.start_target(t, if at_end { "undo" } else { "revert" }, Some(&u.operation)) {
                    Ok(true) => (true, "restarted and healthy".to_string()),
                    Ok(false) => (false, "restarted but not healthy".to_string()),
                    Err(e) => {
                        self.harness_error(&e);
                        (false, e)
                    }
                },
                None => (false, format!("no target {name}")),
            },
            UndoAction::Thaw { group, ids, names } => {
                for &id in ids {
                    if *group {
                        proc::kill_group(id, Signal::SIGCONT);
                    } else {
                        proc::kill_pid(id, Signal::SIGCONT);
                    }
                }
                let thawed = proc::poll_until(
                    self.budget(Duration::from_secs(5)).max(Duration::from_millis(200)),
                    Duration::from_millis(5),
                    || ids.iter().all(|&id| !is_stopped(id, *group)),
                );
                (thawed, if thawed { format!("resumed {}", names.join(", ")) } else { "still stopped".to_string() })
            }
            UndoAction::Unpause { containers, names } => match &self.docker {
                Some(eng) => {
                    let mut errors = Vec::new();
                    for c in containers {
                        if let Err(e) = eng.unpause(c) {
                            if !e.contains("is not paused") {
                                errors.push(e);
                            }
                        }
                    }
                    let resumed =
                        proc::poll_until(self.budget(Duration::from_secs(5)), Duration::from_millis(10), || {
                            containers.iter().all(|c| eng.state(c).is_ok_and(|s| !s.paused))
                        });
                    if resumed && errors.is_empty() {
                        (true, format!("unpaused {}", names.join(", ")))
                    } else {
                        (false, format!("still paused: {}", errors.join("; ")))
                    }
                }
                None => (false, "no Docker engine".to_string()),
            },
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
        self.emit(
            if at_end { "operation.undo" } else { "operation.reverted" },
            json!({"operation": u.operation, "uses": u.uses, "run": u.run, "ok": ok, "detail": detail}),
        );
        ok
    }

    fn run_operation(self: &Arc<Self>, op: &Operation) -> std::result::Result<(), FlowError> {
        self.check_cancel()?;
        let run = {
            let mut g = self.op_runs.lock().unwrap_or_else(|e| e.into_inner());
            let n = g.entry(op.name.value.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let target = op.target.as_ref().map(|t| t.value.clone());
        let (scope, candidates): (&str, Vec<String>) = match &target {
            Some(t) if self.targets.contains_key(t) => ("target", vec![t.clone()]),
            Some(t) => ("workload", self.instance_list(t).iter().map(|i| i.name.clone()).collect()),
            None => ("adapter", vec![]),
        };
        let selected = select(self.seed, &op.name.value, run, &candidates, op.select);
        self.emit(
            "operation.selected",
            json!({"operation": op.name.value, "run": run, "seed": self.seed, "select": op.select.to_string(), "candidates": candidates, "selected": selected}),
        );
        if scope == "workload" && selected.is_empty() {
            self.emit(
                "operation.skipped",
                json!({"operation": op.name.value, "run": run, "reason": "the workload has no instances yet"}),
            );
            return Ok(());
        }
        let res = match Fault::from_name(&op.uses) {
            Some(f) => self.run_fault(op, f, run, scope, &selected),
            None => self.run_adapter_op(op, run, target.as_deref(), &selected),
        };
        self.emit("operation.finished", json!({"operation": op.name.value, "run": run}));
        res
    }

    /// Pids (or pgids) of the selected candidates: (id, signal-the-group?).
    fn victims(&self, scope: &str, selected: &[String]) -> Vec<(String, i32, bool)> {
        let mut out = Vec::new();
        for name in selected {
            if scope == "target" {
                if let Some(t) = self.targets.get(name) {
                    if let Some((pid, true)) = self.target_pid(t) {
                        out.push((name.clone(), pid, t.spec.signal_scope == SignalScope::Group));
                    }
                }
            } else {
                for insts in self.instances.lock().unwrap_or_else(|e| e.into_inner()).values() {
                    for i in insts.iter().filter(|i| &i.name == name) {
                        if i.running.load(Ordering::SeqCst) {
                            if let Some(pid) = *i.pid.lock().unwrap_or_else(|e| e.into_inner()) {
                                out.push((name.clone(), pid, true));
                            }
                        }
                    }
                }
            }
        }
        out
    }

    fn find_instance(&self, name: &str) -> Option<Arc<InstanceRt>> {
        self.instances
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flat_map(|v| v.iter())
            .find(|i| i.name == name)
            .cloned()
    }

    fn signal(&self, id: i32, group: bool, sig: Signal) {
        if group {
            proc::kill_group(id, sig);
        } else {
            proc::kill_pid(id, sig);
        }
    }

    /// Kills the victims and verifies they are gone (a killed target's process, a killed instance's group).
    fn kill_and_verify(
        &self,
        op: &Operation,
        run: u32,
        scope: &str,
        victims: &[(String, i32, bool)],
        sig: Signal,
    ) -> std::result::Result<(), FlowError> {
        for (_, id, group) in victims {
            if sig == Signal::SIGTERM {
                self.signal(*id, *group, Signal::SIGCONT);
            }
            self.signal(*id, *group, sig);
        }
        let gone = |name: &str, id: i32, group: bool| -> bool {
            if scope == "target" {
                let running = self.targets.get(name).is_some_and(|t| self.target_pid(t) == Some((id, true)));
                !running && (!group || !proc::group_alive(id))
            } else {
                !proc::group_alive(id)
            }
        };
        let timeout = if sig == Signal::SIGKILL {
            Duration::from_secs(5)
        } else {
            victims
                .iter()
                .filter_map(|(n, _, _)| self.targets.get(n))
                .filter_map(|t| t.spec.stop_timeout.map(|d| d.0))
                .max()
                .unwrap_or(Duration::from_secs(10))
        };
        let mut ok =
            proc::poll_until(timeout, Duration::from_millis(2), || victims.iter().all(|(n, id, g)| gone(n, *id, *g)));
        if !ok && sig != Signal::SIGKILL {
            for (_, id, group) in victims {
                self.signal(*id, *group, Signal::SIGKILL);
            }
            self.emit("operation.escalated", json!({"operation": op.name.value, "run": run, "signal": "SIGKILL"}));
            ok = proc::poll_until(Duration::from_secs(5), Duration::from_millis(2), || {
                victims.iter().all(|(n, id, g)| gone(n, *id, *g))
            });
        }
        if !ok {
            self.harness_error(&format!("{}: the {} did not take effect: still running", op.name.value, op.uses.value));
            return Err(FlowError::Cancelled);
        }
        self.reap_target_events();
        self.emit(
            "operation.verified",
            json!({"operation": op.name.value, "run": run, "effect": "gone", "instances": victims.iter().map(|v| v.0.clone()).collect::<Vec<_>>()}),
        );
        Ok(())
    }

    fn restart_candidates(
        self: &Arc<Self>,
        op: &Operation,
        scope: &str,
        names: &[String],
    ) -> std::result::Result<(), FlowError> {
        for name in names {
            if scope == "target" {
                if let Some(t) = self.targets.get(name) {
                    match self.start_target(t, op.uses.value.as_str(), Some(&op.name.value)) {
                        Ok(_) => {}
                        Err(e) => {
                            self.harness_error(&e);
                            return Err(FlowError::Cancelled);
                        }
                    }
                }
            } else if let Some(inst) = self.find_instance(name) {
                if let Err(e) = self.spawn_instance(&inst, op.uses.value.as_str()) {
                    self.harness_error(&e);
                    return Err(FlowError::Cancelled);
                }
                inst.restarting.store(false, Ordering::SeqCst);
            }
        }
        Ok(())
    }

    fn run_fault(
        self: &Arc<Self>,
        op: &Operation,
        fault: Fault,
        run: u32,
        scope: &str,
        selected: &[String],
    ) -> std::result::Result<(), FlowError> {
        if scope == "target" {
            if let Some(eng) = self.docker.clone() {
                return self.run_docker_fault(&eng, op, fault, run, selected);
            }
        }
        let victims = self.victims(scope, selected);
        let names: Vec<String> = victims.iter().map(|v| v.0.clone()).collect();
        let ids: Vec<i32> = victims.iter().map(|v| v.1).collect();
        self.emit(
            "operation.started",
            json!({"operation": op.name.value, "uses": op.uses.value, "run": run, "target": op.target.as_ref().map(|t| t.value.clone()), "scope": scope, "instances": names, "ids": ids}),
        );
        if victims.is_empty() {
            self.emit(
                "operation.skipped",
                json!({"operation": op.name.value, "run": run, "reason": "nothing selected is running"}),
            );
            return Ok(());
        }
        if scope == "workload" && matches!(fault, Fault::Restart | Fault::RestartInPlace | Fault::Outage) {
            for n in &names {
                if let Some(i) = self.find_instance(n) {
                    i.restarting.store(true, Ordering::SeqCst);
                }
            }
        }
        match fault {
            Fault::Kill => {
                self.kill_and_verify(op, run, scope, &victims, Signal::SIGKILL)?;
                if scope == "target" {
                    for n in &names {
                        self.push_undo(op, run, UndoAction::StartTarget(n.clone()));
                    }
                }
            }
            Fault::Restart | Fault::RestartInPlace => {
                let sig = if fault == Fault::Restart { Signal::SIGTERM } else { Signal::SIGKILL };
                let res = self.kill_and_verify(op, run, scope, &victims, sig);
                if res.is_err() {
                    self.clear_restarting(&names);
                    return res;
                }
                let res = self.restart_candidates(op, scope, &names);
                self.clear_restarting(&names);
                res?;
                self.emit("operation.reverted", json!({"operation": op.name.value, "uses": op.uses.value, "run": run, "ok": true, "detail": "started again"}));
            }
            Fault::Outage => {
                let res = self.kill_and_verify(op, run, scope, &victims, Signal::SIGKILL);
                if res.is_err() {
                    self.clear_restarting(&names);
                    return res;
                }
                let undo_ids: Vec<u64> = if scope == "target" {
                    names.iter().map(|n| self.push_undo(op, run, UndoAction::StartTarget(n.clone()))).collect()
                } else {
                    vec![]
                };
                let d = op.duration.map(|d| d.0).unwrap_or_default();
                if !self.cancel.sleep(d) {
                    self.clear_restarting(&names);
                    return Err(FlowError::Cancelled);
                }
                for id in undo_ids {
                    if let Some(u) = self.take_undo(id) {
                        self.run_undo(u, false);
                    }
                }
                if scope == "workload" {
                    let res = self.restart_candidates(op, scope, &names);
                    self.clear_restarting(&names);
                    res?;
                    self.emit("operation.reverted", json!({"operation": op.name.value, "uses": op.uses.value, "run": run, "ok": true, "detail": "started again"}));
                }
            }
            Fault::Freeze => {
                for (_, id, group) in &victims {
                    self.signal(*id, *group, Signal::SIGSTOP);
                }
                let group_flags: Vec<bool> = victims.iter().map(|v| v.2).collect();
                let all_group = group_flags.iter().all(|g| *g);
                let undo_id = self.push_undo(
                    op,
                    run,
                    UndoAction::Thaw { group: all_group, ids: ids.clone(), names: names.clone() },
                );
                let frozen = proc::poll_until(Duration::from_secs(5), Duration::from_millis(2), || {
                    victims.iter().all(|(_, id, g)| is_stopped(*id, *g))
                });
                if !frozen {
                    self.harness_error(&format!("{}: the freeze did not take effect", op.name.value));
                    return Err(FlowError::Cancelled);
                }
                self.emit(
                    "operation.verified",
                    json!({"operation": op.name.value, "run": run, "effect": "stopped", "instances": names}),
                );
                if let Some(d) = op.duration {
                    let completed = self.cancel.sleep(d.0);
                    if let Some(u) = self.take_undo(undo_id) {
                        self.run_undo(u, false);
                    }
                    if !completed {
                        return Err(FlowError::Cancelled);
                    }
                }
            }
        }
        Ok(())
    }

    /// A built-in fault on docker targets, through the Engine API: kill (SIGKILL), restart (the engine's
    /// restart), restart-in-place (SIGKILL, then start the same container), freeze (pause/unpause), outage
    /// (stop, then start after `duration`).
    fn run_docker_fault(
        self: &Arc<Self>,
        eng: &docker::Engine,
        op: &Operation,
        fault: Fault,
        run: u32,
        selected: &[String],
    ) -> std::result::Result<(), FlowError> {
        let mut victims: Vec<(Arc<TargetRt>, String)> = Vec::new();
        for n in selected {
            if let Some(t) = self.targets.get(n) {
                let id = t.container.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let (Some(id), true) = (id, self.target_running(t)) {
                    victims.push((Arc::clone(t), id));
                }
            }
        }
        let names: Vec<String> = victims.iter().map(|v| v.0.spec.name.value.clone()).collect();
        let containers: Vec<String> = victims.iter().map(|v| v.1.chars().take(12).collect()).collect();
        self.emit(
            "operation.started",
            json!({"operation": op.name.value, "uses": op.uses.value, "run": run, "target": op.target.as_ref().map(|t| t.value.clone()), "scope": "target", "instances": names, "containers": containers}),
        );
        if victims.is_empty() {
            self.emit(
                "operation.skipped",
                json!({"operation": op.name.value, "run": run, "reason": "nothing selected is running"}),
            );
            return Ok(());
        }
        let fail = |what: String| -> std::result::Result<(), FlowError> {
            self.harness_error(&format!("{}: {what}", op.name.value));
            Err(FlowError::Cancelled)
        };
        let stop_secs =
            |t: &TargetRt| t.spec.stop_timeout.map_or(10, |d| i32::try_from(d.0.as_secs()).unwrap_or(i32::MAX));
        // The API call of each fault, then a check that it took effect.
        let gone = |api: &str| -> std::result::Result<(), FlowError> {
            let ok = proc::poll_until(Duration::from_secs(5), Duration::from_millis(5), || {
                victims.iter().all(|(t, _)| !self.target_running(t))
            });
            if !ok {
                return fail(format!("the {} did not take effect: still running", op.uses.value));
            }
            self.reap_target_events();
            self.emit(
                "operation.verified",
                json!({"operation": op.name.value, "run": run, "effect": "gone", "api": api, "instances": names}),
            );
            Ok(())
        };
        match fault {
            Fault::Kill | Fault::RestartInPlace => {
                for (_, id) in &victims {
                    if let Err(e) = eng.kill(id, "SIGKILL") {
                        return fail(format!("docker kill: {e}"));
                    }
                }
                gone("kill")?;
                if fault == Fault::Kill {
                    for n in &names {
                        self.push_undo(op, run, UndoAction::StartTarget(n.clone()));
                    }
                } else {
                    for (t, _) in &victims {
                        match self.start_target(t, op.uses.value.as_str(), Some(&op.name.value)) {
                            Ok(_) => {}
                            Err(e) => return fail(e),
                        }
                    }
                    self.emit("operation.reverted", json!({"operation": op.name.value, "uses": op.uses.value, "run": run, "ok": true, "detail": "started again"}));
                }
            }
            Fault::Restart => {
                for (t, id) in &victims {
                    if let Err(e) = eng.restart(id, stop_secs(t)) {
                        return fail(format!("docker restart: {e}"));
                    }
                }
                gone("restart")?;
                for (t, _) in &victims {
                    match self.start_target_with(t, op.uses.value.as_str(), Some(&op.name.value), true) {
                        Ok(_) => {}
                        Err(e) => return fail(e),
                    }
                }
                self.emit("operation.reverted", json!({"operation": op.name.value, "uses": op.uses.value, "run": run, "ok": true, "detail": "restarted by the engine"}));
            }
            Fault::Outage => {
                for (t, id) in &victims {
                    if let Err(e) = eng.stop(id, stop_secs(t)) {
                        return fail(format!("docker stop: {e}"));
                    }
                }
                gone("stop")?;
                let undo_ids: Vec<u64> =
                    names.iter().map(|n| self.push_undo(op, run, UndoAction::StartTarget(n.clone()))).collect();
                let d = op.duration.map(|d| d.0).unwrap_or_default();
                if !self.cancel.sleep(d) {
                    return Err(FlowError::Cancelled);
                }
                for id in undo_ids {
                    if let Some(u) = self.take_undo(id) {
                        self.run_undo(u, false);
                    }
                }
            }
            Fault::Freeze => {
                for (_, id) in &victims {
                    if let Err(e) = eng.pause(id) {
                        return fail(format!("docker pause: {e}"));
                    }
                }
                let ids: Vec<String> = victims.iter().map(|v| v.1.clone()).collect();
                let undo_id =
                    self.push_undo(op, run, UndoAction::Unpause { containers: ids.clone(), names: names.clone() });
                let paused = proc::poll_until(Duration::from_secs(5), Duration::from_millis(5), || {
                    ids.iter().all(|c| eng.state(c).is_ok_and(|s| s.paused))
                });
                if !paused {
                    return fail("the pause did not take effect".into());
                }
                self.emit("operation.verified", json!({"operation": op.name.value, "run": run, "effect": "stopped", "api": "pause", "instances": names}));
                if let Some(d) = op.duration {
                    let completed = self.cancel.sleep(d.0);
                    if let Some(u) = self.take_undo(undo_id) {
                        self.run_undo(u, false);
                    }
                    if !completed {
                        return Err(FlowError::Cancelled);
                    }
                }
            }
        }
        Ok(())
    }

    fn clear_restarting(&self, names: &[String]) {
        for n in names {
            if let Some(i) = self.find_instance(n) {
                i.restarting.store(false, Ordering::SeqCst);
            }
        }
        self.notify.bump();
    }

    fn run_adapter_op(
        self: &Arc<Self>,
        op: &Operation,
        run: u32,
        target: Option<&str>,
        selected: &[String],
    ) -> std::result::Result<(), FlowError> {
        let Some(spec) = self.adapter.operations.iter().find(|o| o.name == op.uses.value) else {
            self.harness_error(&format!("{}: adapter has no operation {}", op.name.value, op.uses.value));
            return Err(FlowError::Cancelled);
        };
        let pids: Vec<String> = match target {
            Some(t) if self.targets.contains_key(t) => {
                self.victims("target", selected).iter().map(|v| v.1.to_string()).collect()
            }
            Some(_) => self.victims("workload", selected).iter().map(|v| v.1.to_string()).collect(),
            None => vec![],
        };
        let mut env = self.hook_env(&[
            ("CHAOS_OPERATION", op.name.value.clone()),
            ("CHAOS_OPERATION_RUN", run.to_string()),
            ("CHAOS_TARGET", target.unwrap_or("").to_string()),
            ("CHAOS_SELECTED", selected.join(" ")),
            ("CHAOS_PIDS", pids.join(" ")),
            ("CHAOS_DURATION_SECONDS", op.duration.map(|d| d.0.as_secs_f64().to_string()).unwrap_or_default()),
        ]);
        for (k, v) in &op.env {
            let expanded = expand(v, &env);
            env.insert(k.clone(), expanded);
        }
        self.emit(
            "operation.started",
            json!({"operation": op.name.value, "uses": op.uses.value, "run": run, "target": target, "scope": "adapter", "instances": selected, "ids": pids}),
        );
        let timeout = spec.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(120));
        let undo_id = spec
            .undo
            .as_ref()
            .map(|u| self.push_undo(op, run, UndoAction::Hook { script: u.clone(), env: env.clone() }));
        match proc::run_hook(&spec.run, &env, &self.run_dir, timeout, Some(&self.cancel)) {
            Ok(o) if o.ok() => {
                self.emit("operation.verified", json!({"operation": op.name.value, "run": run, "effect": "hook succeeded", "output": o.output.trim()}));
            }
            Ok(o) => {
                self.harness_error(&format!(
                    "{}: adapter operation {} failed: {}: {}",
                    op.name.value,
                    spec.name,
                    o.describe(),
                    o.output.trim()
                ));
                return Err(FlowError::Cancelled);
            }
            Err(e) => {
                self.harness_error(&format!("{}: adapter operation {} could not run: {e}", op.name.value, spec.name));
                return Err(FlowError::Cancelled);
            }
        }
        if let (Some(d), Some(id)) = (op.duration, undo_id) {
            let completed = self.cancel.sleep(d.0);
            if let Some(u) = self.take_undo(id) {
                self.run_undo(u, false);
            }
            if !completed {
                return Err(FlowError::Cancelled);
            }
        }
        Ok(())
    }

    // -------------------------------------------------------------- flow

    fn exec(self: &Arc<Self>, node: &FlowNode, path: &str) -> std::result::Result<(), FlowError> {
        self.check_cancel()?;
        match &node.kind {
            FlowKind::Leaf(name) => {
                let n = self.exp.workloads.iter().find(|w| &w.name.value == name).map_or(1, |w| u64::from(w.instances));
                self.step(n)?;
            }
            FlowKind::Wait(_) | FlowKind::Delay(_) => self.step(1)?,
            FlowKind::Serial(_) | FlowKind::Parallel(_) | FlowKind::Repeat { .. } => {}
        }
        match &node.kind {
            FlowKind::Leaf(name) => {
                self.emit("node.started", json!({"node": path, "name": name}));
                let res = if let Some(w) = self.exp.workloads.iter().find(|w| &w.name.value == name) {
                    let w = w.clone();
                    self.run_workload(&w)
                } else if let Some(op) = self.exp.operations.iter().find(|o| &o.name.value == name) {
                    let op = op.clone();
                    self.run_operation(&op)
                } else {
                    self.harness_error(&format!("flow names unknown {name}"));
                    Err(FlowError::Cancelled)
                };
                self.emit("node.finished", json!({"node": path, "name": name, "ok": res.is_ok()}));
                res
            }
            FlowKind::Serial(v) => {
                for (i, n) in v.iter().enumerate() {
                    self.exec(n, &format!("{path}.serial[{i}]"))?;
                }
                Ok(())
            }
            FlowKind::Parallel(v) => {
                let results: Vec<std::result::Result<(), FlowError>> = std::thread::scope(|s| {
                    let handles: Vec<_> = v
                        .iter()
                        .enumerate()
                        .map(|(i, n)| {
                            let me = Arc::clone(self);
                            let p = format!("{path}.parallel[{i}]");
                            s.spawn(move || me.exec(n, &p))
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap_or(Err(FlowError::Cancelled))).collect()
                });
                results.into_iter().collect()
            }
            FlowKind::Delay(d) => {
                self.emit("node.started", json!({"node": path, "delay": secs(d.0)}));
                if !self.cancel.sleep(d.0) {
                    return Err(FlowError::Cancelled);
                }
                Ok(())
            }
            FlowKind::Wait(w) => self.exec_wait(w, path),
            FlowKind::Repeat { mode, body } => {
                let started = Instant::now();
                let mut i = 0u32;
                loop {
                    match mode {
                        RepeatMode::Times(n) if i >= *n => break,
                        RepeatMode::For(d) if i > 0 && started.elapsed() >= d.0 => break,
                        _ => {}
                    }
                    self.emit("node.started", json!({"node": path, "repeat": i + 1}));
                    self.exec(body, &format!("{path}.repeat[{i}]"))?;
                    i += 1;
                }
                Ok(())
            }
        }
    }

    fn exec_wait(self: &Arc<Self>, w: &WaitSpec, path: &str) -> std::result::Result<(), FlowError> {
        let timeout = w.timeout.map(|d| d.0).unwrap_or(self.exp.timeout.0);
        let started = Instant::now();
        if let Some(wl) = &w.workload {
            let cond = w.condition.unwrap_or(Condition::Started);
            self.emit("wait.started", json!({"node": path, "workload": wl.value, "condition": cond}));
            let total =
                self.exp.workloads.iter().find(|x| x.name.value == wl.value).map(|x| x.instances as usize).unwrap_or(0);
            loop {
                self.check_cancel()?;
                let insts = self.instance_list(&wl.value);
                let met = insts.len() == total
                    && match cond {
                        Condition::Started => insts.iter().all(|i| i.started.load(Ordering::SeqCst)),
                        Condition::Finished => insts.iter().all(|i| {
                            i.started.load(Ordering::SeqCst)
                                && !i.running.load(Ordering::SeqCst)
                                && !i.restarting.load(Ordering::SeqCst)
                        }),
                    };
                if met {
                    break;
                }
                if started.elapsed() >= timeout {
                    self.harness_error(&format!("wait for {} {:?} timed out after {}", wl.value, cond, Dur(timeout)));
                    return Err(FlowError::Cancelled);
                }
                self.notify.wait(Duration::from_millis(20));
            }
            self.emit(
                "wait.finished",
                json!({"node": path, "workload": wl.value, "condition": cond, "after": secs(started.elapsed())}),
            );
        } else if let Some(sig) = &w.signal {
            let Some(spec) = self.adapter.signals.iter().find(|s| s.name == sig.value) else {
                self.harness_error(&format!("adapter has no signal {}", sig.value));
                return Err(FlowError::Cancelled);
            };
            let re = regex::Regex::new(&spec.pattern).map_err(|_| FlowError::Cancelled)?;
            let from = self
                .watch_lines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&spec.watcher)
                .map_or(0, WatchLines::total);
            self.emit("wait.started", json!({"node": path, "signal": sig.value, "watcher": spec.watcher}));
            let mut seen = from;
            let matched = loop {
                self.check_cancel()?;
                let hit = {
                    let g = self.watch_lines.lock().unwrap_or_else(|e| e.into_inner());
                    match g.get(&spec.watcher) {
                        Some(lines) => {
                            let hit = lines.since(seen).find(|l| re.is_match(l)).cloned();
                            seen = lines.total();
                            hit
                        }
                        None => None,
                    }
                };
                if let Some(line) = hit {
                    break line;
                }
                if started.elapsed() >= timeout {
                    self.harness_error(&format!("wait for signal {} timed out after {}", sig.value, Dur(timeout)));
                    return Err(FlowError::Cancelled);
                }
                self.notify.wait(Duration::from_millis(20));
            };
            self.emit("signal.matched", json!({"node": path, "signal": sig.value, "line": matched}));
        }
        if let Some(d) = w.delay {
            if !self.cancel.sleep(d.0) {
                return Err(FlowError::Cancelled);
            }
        }
        Ok(())
    }
}

/// A watcher's lines in memory, for signal waits: only the newest [`WatchLines::KEEP`] (a watcher that prints
/// without end costs bounded memory; every line is still in its file).
#[derive(Default)]
struct WatchLines {
    /// Lines dropped from the front.
    dropped: usize,
    lines: std::collections::VecDeque<String>,
}

impl WatchLines {
    const KEEP: usize = 10_000;
    fn push(&mut self, line: String) {
        if self.lines.len() >= Self::KEEP {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(line);
    }
    /// Lines pushed so far (dropped ones included).
    fn total(&self) -> usize {
        self.dropped + self.lines.len()
    }
    /// The kept lines from number `from` on.
    fn since(&self, from: usize) -> impl Iterator<Item = &String> {
        self.lines.iter().skip(from.saturating_sub(self.dropped))
    }
}

type PendingExit = (String, i32, std::sync::mpsc::Receiver<std::process::ExitStatus>);

/// Whether the process (or every live process of the group) is stopped.
fn is_stopped(id: i32, group: bool) -> bool {
    if group {
        let members: Vec<_> = proc::group_members(id).into_iter().filter(|p| p.state != 'Z').collect();
        !members.is_empty() && members.iter().all(|p| p.state == 'T' || p.state == 't')
    } else {
        proc::proc_info(id).is_some_and(|p| p.state == 'T' || p.state == 't')
    }
}

// ------------------------------------------------------------------ applicability, preflight

/// Why the experiment cannot run on this adapter, if it cannot.
pub fn not_applicable(exp: &Experiment, adapter: &Adapter) -> Option<String> {
    if adapter.driver == Driver::Kubernetes {
        if let Some(r) = not_applicable_faults(exp, adapter) {
            return Some(r);
        }
        return Some(kubernetes_unreachable());
    }
    not_applicable_faults(exp, adapter)
}

fn not_applicable_faults(exp: &Experiment, adapter: &Adapter) -> Option<String> {
    for op in &exp.operations {
        let target = op.target.as_ref().map(|t| t.value.as_str());
        let is_workload = target.is_some_and(|t| exp.workloads.iter().any(|w| w.name.value == t));
        match Fault::from_name(&op.uses) {
            Some(f) => {
                let Some(t) = target else { continue };
                if is_workload {
                    continue;
                }
                match adapter.targets.iter().find(|x| x.name.value == t) {
                    None => {
                        return Some(format!(
                            "operation {} targets {t}, which adapter {} does not have",
                            op.name.value, adapter.name
                        ))
                    }
                    Some(x) => {
                        if let Some(faults) = &x.faults {
                            if !faults.contains(&f) {
                                return Some(format!(
                                    "operation {} uses {} on {t}, which adapter {} does not support for that target",
                                    op.name.value,
                                    f.name(),
                                    adapter.name
                                ));
                            }
                        }
                    }
                }
            }
            None => {
                if !adapter.operations.iter().any(|o| o.name == op.uses.value) {
                    return Some(format!(
                        "operation {} uses {}, which adapter {} does not define",
                        op.name.value, op.uses.value, adapter.name
                    ));
                }
                if let Some(t) = target {
                    if !is_workload && !adapter.targets.iter().any(|x| x.name.value == t) {
                        return Some(format!(
                            "operation {} targets {t}, which adapter {} does not have",
                            op.name.value, adapter.name
                        ));
                    }
                }
            }
        }
    }
    fn signals(n: &FlowNode, out: &mut Vec<String>) {
        match &n.kind {
            FlowKind::Wait(w) => {
                if let Some(s) = &w.signal {
                    out.push(s.value.clone());
                }
            }
            FlowKind::Serial(v) | FlowKind::Parallel(v) => v.iter().for_each(|c| signals(c, out)),
            FlowKind::Repeat { body, .. } => signals(body, out),
            _ => {}
        }
    }
    let mut sigs = vec![];
    if let Some(f) = &exp.flow {
        signals(f, &mut sigs);
    }
    for s in sigs {
        if !adapter.signals.iter().any(|x| x.name == s) {
            return Some(format!("the flow waits for signal {s}, which adapter {} does not define", adapter.name));
        }
    }
    None
}

/// Runs the adapter's then the experiment's preflight checks.
pub fn run_preflight(
    exp: &Experiment,
    adapter: &Adapter,
    env: &BTreeMap<String, String>,
    cwd: &Path,
    mut on_result: impl FnMut(&CheckResult),
) -> Vec<CheckResult> {
    let mut out = Vec::new();
    if adapter.driver == Driver::Docker {
        for r in docker_preflight(adapter, None) {
            on_result(&r);
            out.push(r);
        }
        if out.iter().any(|r| !r.passed) {
            return out;
        }
    }
    for c in adapter.preflight.iter().chain(exp.preflight.iter()) {
        let timeout = c.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(30));
        let (passed, details) = match proc::run_hook(&c.run, env, cwd, timeout, None) {
            Ok(o) if o.ok() => (true, vec![]),
            Ok(o) => {
                let mut d: Vec<String> =
                    o.output.lines().rev().take(10).map(str::to_string).collect::<Vec<_>>().into_iter().rev().collect();
                d.push(o.describe());
                (false, d)
            }
            Err(e) => (false, vec![format!("could not run: {e}")]),
        };
        let id = format!("preflight/{}", c.name);
        let r = CheckResult::new("preflight", id.clone(), id, passed, details);
        on_result(&r);
        out.push(r);
    }
    out
}

/// The docker driver's own preflight: the engine answers, and every target's image is present locally (this
/// harness never pulls); an image referred to by a tag only passes with a warning.
pub fn docker_preflight(adapter: &Adapter, engine: Option<&docker::Engine>) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let connected;
    let eng = match engine {
        Some(e) => e,
        None => match docker::Engine::connect() {
            Ok(e) => {
                connected = e;
                &connected
            }
            Err(e) => {
                out.push(CheckResult::new(
                    "preflight",
                    "preflight/docker-engine".into(),
                    "preflight/docker-engine".into(),
                    false,
                    vec![e],
                ));
                return out;
            }
        },
    };
    let version = eng.version().map(|v| v["version"].as_str().unwrap_or("?").to_string());
    out.push(CheckResult::new(
        "preflight",
        "preflight/docker-engine".into(),
        "preflight/docker-engine".into(),
        version.is_ok(),
        vec![match version {
            Ok(v) => format!("Docker {v}"),
            Err(e) => e,
        }],
    ));
    for t in &adapter.targets {
        let Some(ct) = &t.container else { continue };
        let id = format!("preflight/image-{}", t.name.value);
        let r = match eng.image(&ct.image.value) {
            Ok((image_id, _)) => {
                let mut details = vec![format!("{} is {image_id}", ct.image.value)];
                if !docker::pinned(&ct.image.value) {
                    details.push(format!(
                        "warning: image {} of target {} is referred to by a tag only; the manifest pins {image_id}",
                        ct.image.value, t.name.value
                    ));
                }
                CheckResult::new("preflight", id.clone(), id, true, details)
            }
            Err(e) => CheckResult::new(
                "preflight",
                id.clone(),
                id,
                false,
                vec![format!("image {} is not present locally (this harness never pulls): {e}", ct.image.value)],
            ),
        };
        out.push(r);
    }
    out
}

/// Why no Kubernetes cluster can be used, for the `kubernetes` driver's n/a.
pub fn kubernetes_unreachable() -> String {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let kubeconfig =
        std::env::var_os("KUBECONFIG").map(|v| std::env::split_paths(&v).any(|p| p.is_file())).unwrap_or(false)
            || std::env::var_os("HOME").is_some_and(|h| Path::new(&h).join(".kube/config").is_file());
    if !in_cluster && !kubeconfig {
        "no Kubernetes cluster is reachable: no kubeconfig (KUBECONFIG unset or missing, no ~/.kube/config) and not running inside a cluster (KUBERNETES_SERVICE_HOST unset); the adapter was loaded and validated, nothing was run".into()
    } else {
        "a Kubernetes configuration exists, but this harness's kubernetes driver only loads and validates adapters: it does not drive a cluster yet, so nothing was run".into()
    }
}

/// The variables every hook, workload and check sees.
pub fn base_env(
    exp: &LoadedExperiment,
    adapter: &LoadedAdapter,
    run_id: &str,
    run_dir: &Path,
    seed: u64,
    scratch: &Path,
) -> std::io::Result<BTreeMap<String, String>> {
    let mut env = BTreeMap::new();
    let dir_of = |p: &Path| {
        p.parent()
            .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf()))
            .unwrap_or_default()
            .display()
            .to_string()
    };
    env.insert("CHAOS_EXPERIMENT".into(), exp.experiment.id.value.clone());
    env.insert("CHAOS_EXPERIMENT_DIR".into(), dir_of(&exp.path));
    env.insert("CHAOS_ADAPTER".into(), adapter.adapter.name.clone());
    env.insert("CHAOS_ADAPTER_DIR".into(), dir_of(&adapter.path));
    env.insert("CHAOS_RUN_ID".into(), run_id.to_string());
    env.insert("CHAOS_RUN_DIR".into(), run_dir.display().to_string());
    env.insert("CHAOS_SEED".into(), seed.to_string());
    env.insert("CHAOS_SCRATCH_DIR".into(), scratch.display().to_string());
    for p in &adapter.adapter.ports {
        env.insert(format!("CHAOS_PORT_{}", p.to_ascii_uppercase()), free_port()?.to_string());
    }
    for (k, v) in &adapter.adapter.env {
        let expanded = expand(v, &env);
        env.insert(k.clone(), expanded);
    }
    Ok(env)
}

fn git_sha(dir: &Path) -> Option<String> {
    let o = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

// ------------------------------------------------------------------ observers

struct Observers {
    stop: Cancel,
    handles: Vec<std::thread::JoinHandle<()>>,
    watcher_pgids: Vec<i32>,
}

fn start_observers(ctx: &Arc<Ctx>) -> Observers {
    let stop = Cancel::default();
    let mut handles = Vec::new();
    let mut watcher_pgids = Vec::new();
    for s in &ctx.adapter.observers.metrics {
        let ctx2 = Arc::clone(ctx);
        let stop2 = stop.clone();
        let spec = s.clone();
        handles.push(std::thread::spawn(move || scrape_loop(&ctx2, &spec, &stop2)));
    }
    for w in &ctx.adapter.observers.watchers {
        let log = ctx.run_dir.join("logs").join(format!("watch-{}.log", w.name));
        let mut cmd = proc::shell(&w.run, &ctx.env, &ctx.run_dir);
        let errlog = match std::fs::OpenOptions::new().create(true).append(true).open(&log) {
            Ok(f) => f,
            Err(e) => {
                ctx.harness_error(&format!("watcher {}: {e}", w.name));
                continue;
            }
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(errlog);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                ctx.harness_error(&format!("watcher {} could not start: {e}", w.name));
                continue;
            }
        };
        watcher_pgids.push(child.id() as i32);
        ctx.watcher_groups.lock().unwrap_or_else(|e| e.into_inner()).push(child.id() as i32);
        ctx.emit("watcher.started", json!({"watcher": w.name, "pid": child.id()}));
        let out = child.stdout.take().expect("piped stdout");
        let ctx2 = Arc::clone(ctx);
        let name = w.name.clone();
        handles.push(std::thread::spawn(move || {
            let jsonl = ctx2.run_dir.join("system/watch").join(format!("{name}.jsonl"));
            let mut raw = std::fs::OpenOptions::new().create(true).append(true).open(&log).ok();
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let rec = json!({"t": secs(Duration::from_secs_f64(ctx2.tl.elapsed())), "ts": fsutil::rfc3339(fsutil::now()), "line": line});
                let _ = fsutil::append_line(&jsonl, &rec.to_string());
                if let Some(f) = raw.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                }
                ctx2.watch_lines.lock().unwrap_or_else(|e| e.into_inner()).entry(name.clone()).or_default().push(line);
                ctx2.notify.bump();
            }
            let _ = child.wait();
        }));
    }
    Observers { stop, handles, watcher_pgids }
}

fn scrape_once(ctx: &Ctx, spec: &Scrape, types: &mut BTreeMap<String, String>) {
    let url = expand(&spec.url, &ctx.env);
    let t = secs(Duration::from_secs_f64(ctx.tl.elapsed()));
    let ts = fsutil::rfc3339(fsutil::now());
    let dir = ctx.run_dir.join("system/metrics");
    let rec = match prom::http_get(&url, Duration::from_secs(2))
        .and_then(|body| prom::parse(&body).map_err(|e| e.to_string()))
        .and_then(|expo| {
            if expo.samples.len() > prom::MAX_SAMPLES {
                Err(format!(
                    "{} samples in one scrape, more than the {} recorded",
                    expo.samples.len(),
                    prom::MAX_SAMPLES
                ))
            } else {
                Ok(expo)
            }
        }) {
        Ok(expo) => {
            let mut changed = false;
            for (k, v) in &expo.types {
                if types.get(k) != Some(v) {
                    types.insert(k.clone(), v.clone());
                    changed = true;
                }
            }
            if changed {
                let _ = write_json_atomic(&dir.join(format!("{}.types.json", spec.target)), &json!(types));
            }
            let samples: Vec<Value> = expo
                .samples
                .iter()
                .map(|s| {
                    let v = if s.value.is_finite() {
                        json!(s.value)
                    } else if s.value.is_nan() {
                        json!("NaN")
                    } else if s.value > 0.0 {
                        json!("+Inf")
                    } else {
                        json!("-Inf")
                    };
                    json!({"name": s.name, "labels": s.labels, "value": v})
                })
                .collect();
            json!({"t": t, "ts": ts, "samples": samples})
        }
        Err(e) => json!({"t": t, "ts": ts, "error": e}),
    };
    let _ = fsutil::append_line(&dir.join(format!("{}.jsonl", spec.target)), &rec.to_string());
}

fn scrape_loop(ctx: &Ctx, spec: &Scrape, stop: &Cancel) {
    let interval = spec.interval.map(|d| d.0).unwrap_or(Duration::from_secs(2));
    let mut types = BTreeMap::new();
    loop {
        scrape_once(ctx, spec, &mut types);
        if !stop.sleep(interval) {
            break;
        }
    }
    // A last scrape, so the state after the flow and its undo is recorded (not after a signal: no time).
    if ctx.interrupt.signal().is_none() {
        scrape_once(ctx, spec, &mut types);
    }
}

fn stop_observers(ctx: &Ctx, obs: Observers) {
    obs.stop.cancel("run ended");
    for pgid in &obs.watcher_pgids {
        proc::kill_group(*pgid, Signal::SIGTERM);
    }
    for pgid in &obs.watcher_pgids {
        if !proc::poll_until(ctx.budget(Duration::from_secs(2)), Duration::from_millis(5), || !proc::group_alive(*pgid))
        {
            proc::kill_group(*pgid, Signal::SIGKILL);
        }
    }
    // After a signal a scrape still waiting for its endpoint is not waited for.
    if ctx.interrupt.signal().is_none() {
        for h in obs.handles {
            let _ = h.join();
        }
    }
    ctx.emit("observers.stopped", json!({}));
}

// ------------------------------------------------------------------ post-run adapter checks

fn adapter_checks(ctx: &Ctx) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let groups: Vec<i32> = ctx.groups.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let leaked = |groups: &[i32]| -> Vec<proc::ProcInfo> {
        groups.iter().flat_map(|g| proc::group_members(*g)).filter(|p| p.state != 'Z' && p.state != 'X').collect()
    };
    let ok = proc::poll_until(
        ctx.budget(Duration::from_secs(5)).max(Duration::from_millis(200)),
        Duration::from_millis(10),
        || leaked(&groups).is_empty(),
    );
    let details = if ok {
        vec![]
    } else {
        leaked(&groups).iter().map(|p| format!("pid {} ({}) in group {}", p.pid, p.comm, p.pgid)).collect()
    };
    out.push(CheckResult::new(
        "adapter",
        "adapter/no-leaked-processes".into(),
        "adapter/no-leaked-processes".into(),
        ok,
        details,
    ));

    let mut watched: Vec<i32> = groups.clone();
    for t in ctx.targets.values() {
        if let Some((pid, _)) = ctx.target_pid(t) {
            watched.push(pid);
        }
    }
    let frozen = |groups: &[i32]| -> Vec<proc::ProcInfo> {
        groups.iter().flat_map(|g| proc::group_members(*g)).filter(|p| p.state == 'T' || p.state == 't').collect()
    };
    let ok =
        proc::poll_until(ctx.budget(Duration::from_secs(5)), Duration::from_millis(10), || frozen(&watched).is_empty());
    let details = if ok {
        vec![]
    } else {
        frozen(&watched).iter().map(|p| format!("pid {} ({}) is stopped", p.pid, p.comm)).collect()
    };
    out.push(CheckResult::new(
        "adapter",
        "adapter/nothing-frozen".into(),
        "adapter/nothing-frozen".into(),
        ok,
        details,
    ));

    if let Some(eng) = &ctx.docker {
        let containers: Vec<(String, String)> = ctx
            .targets
            .values()
            .filter_map(|t| {
                t.container.lock().unwrap_or_else(|e| e.into_inner()).clone().map(|c| (t.spec.name.value.clone(), c))
            })
            .collect();
        let paused = || -> Vec<String> {
            containers
                .iter()
                .filter(|(_, c)| eng.state(c).is_ok_and(|s| s.paused))
                .map(|(n, _)| format!("{n} is paused"))
                .collect()
        };
        let ok =
            proc::poll_until(ctx.budget(Duration::from_secs(5)), Duration::from_millis(10), || paused().is_empty());
        out.push(CheckResult::new(
            "adapter",
            "adapter/nothing-paused".into(),
            "adapter/nothing-paused".into(),
            ok,
            if ok { vec![] } else { paused() },
        ));
    }
    if !ctx.targets.is_empty() {
        let mut details = Vec::new();
        let mut all = true;
        for t in ctx.targets.values() {
            let env = ctx.target_env(t);
            let running = ctx.target_running(t);
            let healthy = running
                && match &t.spec.health {
                    None => true,
                    Some(h) => {
                        let timeout = ctx.budget(h.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(30)));
                        let interval = h.interval.map(|d| d.0).unwrap_or(Duration::from_millis(50));
                        proc::poll_until(timeout, interval, || {
                            proc::run_hook(&h.run, &env, &ctx.run_dir, ctx.budget(Duration::from_secs(5)), None)
                                .is_ok_and(|o| o.ok())
                        })
                    }
                };
            if !healthy {
                all = false;
                details.push(format!("{} is {}", t.spec.name, if running { "not healthy" } else { "not running" }));
            }
        }
        out.push(CheckResult::new(
            "adapter",
            "adapter/targets-healthy".into(),
            "adapter/targets-healthy".into(),
            all,
            details,
        ));
    }
    for c in &ctx.adapter.checks {
        let timeout = ctx.budget(c.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(10)));
        let interval = c.interval.map(|d| d.0).unwrap_or(Duration::from_millis(50));
        let mut last = String::new();
        let ok = proc::poll_until(timeout, interval, || {
            match proc::run_hook(&c.run, &ctx.env, &ctx.run_dir, ctx.budget(timeout), None) {
                Ok(o) if o.ok() => true,
                Ok(o) => {
                    last = format!("{} {}", o.output.trim(), o.describe());
                    false
                }
                Err(e) => {
                    last = e.to_string();
                    false
                }
            }
        });
        let id = format!("adapter/{}", c.name);
        out.push(CheckResult::new("adapter", id.clone(), id, ok, if ok { vec![] } else { vec![last] }));
    }
    for r in &out {
        ctx.emit("check.finished", json!({"scope": "adapter", "check": r.id, "ok": r.passed}));
    }
    out
}

// ------------------------------------------------------------------ signals

/// Turns SIGINT and SIGTERM into a cancel of the run while it lasts (children keep default handling): the
/// first one cancels the flow and starts the clock of the cleanup ([`INTERRUPT_BUDGET`]); if the run is not
/// finished at [`INTERRUPT_DEADLINE`], or a second signal arrives, `overrun` kills what is left and exits.
struct SignalGuard {
    handle: Option<signal_hook::iterator::Handle>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SignalGuard {
    fn install(
        cancel: Cancel,
        interrupt: Arc<Interrupt>,
        notify: impl Fn(&str) + Send + 'static,
        overrun: impl Fn(i32, &str) + Send + Sync + 'static,
    ) -> SignalGuard {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
            return SignalGuard { handle: None, thread: None };
        };
        let handle = signals.handle();
        let overrun = Arc::new(overrun);
        let thread = std::thread::spawn(move || {
            for sig in signals.forever() {
                let first = interrupt.signal.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst).is_ok();
                if !first {
                    overrun(sig, "a second signal arrived during the cleanup");
                    continue;
                }
                *interrupt.at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                let why = format!("interrupted by {}", signal_name(sig));
                notify(&why);
                cancel.cancel(&why);
                let overrun = Arc::clone(&overrun);
                std::thread::spawn(move || {
                    std::thread::sleep(INTERRUPT_DEADLINE);
                    overrun(sig, "the undo and cleanup did not finish in time");
                });
            }
        });
        SignalGuard { handle: Some(handle), thread: Some(thread) }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.close();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------------ the run

fn run_id() -> String {
    let now = fsutil::now();
    let nanos = u64::from(now.nanosecond()) ^ u64::from(std::process::id()).wrapping_mul(0x9E37_79B9);
    let mut rng = Rng::new(nanos);
    format!("{}-{:04x}", fsutil::compact_stamp(now), rng.next_u64() & 0xffff)
}

/// Runs an experiment on an adapter and returns the run directory and its evaluation.
pub fn run(exp: &LoadedExperiment, adapter: &LoadedAdapter, opts: &RunOptions) -> Result<RunOutcome> {
    let e = &exp.experiment;
    let seed = opts.seed.unwrap_or_else(|| {
        let n = fsutil::now();
        Rng::new(u64::from(n.nanosecond()) ^ (n.unix_timestamp() as u64)).next_u64() % 1_000_000
    });
    let state_dir = opts.state_dir.clone().unwrap_or_else(|| PathBuf::from(".repro/chaos"));
    let id = run_id();
    let run_dir = state_dir.join(&e.id.value).join(&id);
    mkdirs(&run_dir)?;
    let run_dir = std::fs::canonicalize(&run_dir).map_err(|err| ChaosError::io(&run_dir, err))?;
    write_atomic(
        &run_dir.join(INCOMPLETE_MARKER),
        b"The harness has not finished this run (or was killed): there is no verdict.\n",
    )?;
    for d in ["logs", "system/metrics", "system/watch", "system/targets", "workloads", "evaluations"] {
        mkdirs(&run_dir.join(d))?;
    }
    write_atomic(&run_dir.join("experiment.yaml"), exp.text.as_bytes())?;
    write_atomic(&run_dir.join("adapter.yaml"), adapter.text.as_bytes())?;
    let scratch = std::env::temp_dir().join(format!("repro-chaos-{id}"));
    mkdirs(&scratch)?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o755));
    }
    let mut env = base_env(exp, adapter, &id, &run_dir, seed, &scratch)
        .map_err(|err| ChaosError::Harness(format!("picking ports: {err}")))?;
    if adapter.adapter.driver == Driver::Docker {
        // Workloads and checks reach a target's container by name (docker exec, docker logs).
        for t in &adapter.adapter.targets {
            let key = format!("CHAOS_CONTAINER_{}", t.name.value.to_ascii_uppercase().replace(['-', '.'], "_"));
            env.insert(key, format!("repro-chaos-{}-{}", id.to_ascii_lowercase(), t.name.value));
        }
    }
    let tl = Timeline::create(&run_dir, opts.echo)?;
    let cancel = Cancel::default();
    let (docker, docker_error) = if adapter.adapter.driver == Driver::Docker {
        match docker::Engine::connect() {
            Ok(e) => (Some(e), None),
            Err(e) => (None, Some(e)),
        }
    } else {
        (None, None)
    };

    let mut targets = BTreeMap::new();
    for t in &adapter.adapter.targets {
        mkdirs(&run_dir.join("system/targets").join(&t.name.value))?;
        targets.insert(
            t.name.value.clone(),
            Arc::new(TargetRt {
                spec: t.clone(),
                state: Mutex::new((None, false)),
                incarnation: AtomicU32::new(0),
                container: Mutex::new(None),
            }),
        );
    }
    let ctx = Arc::new(Ctx {
        exp: e.clone(),
        adapter: adapter.adapter.clone(),
        run_dir: run_dir.clone(),
        seed,
        tl,
        cancel: cancel.clone(),
        notify: Notify::default(),
        env,
        targets,
        instances: Mutex::new(BTreeMap::new()),
        op_runs: Mutex::new(HashMap::new()),
        undo: Mutex::new(Vec::new()),
        undo_seq: AtomicU32::new(0),
        watch_lines: Mutex::new(HashMap::new()),
        groups: Mutex::new(Vec::new()),
        pending: Mutex::new(Vec::new()),
        run_id: id.clone(),
        docker,
        docker_error,
        docker_events: Mutex::new(None),
        limits: opts.limits,
        steps: AtomicU64::new(0),
        interrupt: Arc::new(Interrupt::default()),
        watcher_groups: Mutex::new(Vec::new()),
        finished: Mutex::new(false),
    });
    let sig_ctx = Arc::clone(&ctx);
    let overrun_ctx = Arc::clone(&ctx);
    let guard = SignalGuard::install(
        cancel.clone(),
        Arc::clone(&ctx.interrupt),
        move |why| {
            sig_ctx.emit("harness.error", json!({"reason": why}));
            sig_ctx.notify.bump();
        },
        move |sig, why| overrun_ctx.overrun(sig, why),
    );

    ctx.emit(
        "run.started",
        json!({"run": id, "experiment": e.id.value, "version": e.version, "seed": seed, "adapter": adapter.adapter.name, "dir": run_dir}),
    );
    write_manifest(&ctx, exp, adapter, &id)?;

    let result = drive(&ctx);
    if let Err(err) = result {
        ctx.emit("harness.error", json!({"reason": err.to_string()}));
    }
    let _ = std::fs::remove_dir_all(&scratch);

    // After a signal the timeline holds a harness.error, so this evaluation runs no check (it is quick).
    let data = RunData::read_with(&run_dir, None, &ctx.limits)?;
    let evaluation = evaluate::evaluate(&data, true);
    for c in &evaluation.checks {
        if c.scope == "workload" || c.scope == "experiment" {
            ctx.emit("check.finished", json!({"scope": c.scope, "check": c.id, "ok": c.passed, "outcome": c.outcome}));
        }
    }
    let mut finished = ctx.finished.lock().unwrap_or_else(|err| err.into_inner());
    let interrupted = ctx.interrupt.signal();
    if let Some(sig) = interrupted {
        // Marked before the verdict is written: the directory never looks like a run that completed.
        let text = format!(
            "interrupted by {}: the flow was cancelled, the undo ran (see operation.undo in timeline.jsonl) and \
             every instance and target was stopped; no check of the experiment was evaluated\n",
            signal_name(sig)
        );
        write_atomic(&run_dir.join(INTERRUPTED_MARKER), text.as_bytes())?;
    }
    ctx.emit(
        "run.finished",
        json!({"verdict": evaluation.verdict.as_str(), "reason": evaluation.reason, "interrupted": interrupted.map(signal_name)}),
    );
    ctx.tl.sync();
    let v = serde_json::to_value(&evaluation).map_err(|err| ChaosError::Harness(err.to_string()))?;
    write_json_durable(&run_dir.join("verdict.json"), &v)?;
    std::fs::remove_file(run_dir.join(INCOMPLETE_MARKER)).map_err(|err| ChaosError::io(&run_dir, err))?;
    *finished = true;
    drop(finished);
    drop(guard);
    Ok(RunOutcome { run_dir, evaluation, interrupted })
}

impl Ctx {
    /// The cleanup after a signal overran its deadline, or a second signal came: kill every process group
    /// the run started (resumed first, so nothing stays stopped), mark the run directory interrupted (it
    /// keeps `INCOMPLETE`: there is no verdict) and exit 128 + the signal. Nothing happens once the run
    /// directory is final.
    fn overrun(&self, sig: i32, why: &str) {
        let finished = self.finished.lock().unwrap_or_else(|err| err.into_inner());
        if *finished {
            return;
        }
        let mut groups: Vec<i32> = self.groups.lock().unwrap_or_else(|err| err.into_inner()).clone();
        groups.extend(self.watcher_groups.lock().unwrap_or_else(|err| err.into_inner()).iter().copied());
        for t in self.targets.values() {
            if let Some((pid, _)) = self.target_pid(t) {
                groups.push(pid);
            }
        }
        for g in &groups {
            proc::kill_group(*g, Signal::SIGCONT);
            proc::kill_group(*g, Signal::SIGKILL);
        }
        let text = format!(
            "interrupted by {}: {why}; every process group of the run was killed; there is no verdict\n",
            signal_name(sig)
        );
        let _ = write_atomic(&self.run_dir.join(INTERRUPTED_MARKER), text.as_bytes());
        self.emit("harness.error", json!({"reason": format!("interrupted by {}: {why}", signal_name(sig))}));
        self.tl.sync();
        let msg = format!("repro: interrupted by {}: {why}; killed the run's processes\n", signal_name(sig));
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), msg.as_bytes());
        std::process::exit(128 + sig);
    }
}

fn write_manifest(ctx: &Ctx, exp: &LoadedExperiment, adapter: &LoadedAdapter, id: &str) -> Result<()> {
    let mut systems = serde_json::Map::new();
    for t in &adapter.adapter.targets {
        if let Some(v) = &t.version {
            let out = proc::run_hook(v, &ctx.env, &ctx.run_dir, Duration::from_secs(10), None)
                .map(|o| o.output.trim().to_string())
                .unwrap_or_else(|err| format!("unknown: {err}"));
            systems.insert(t.name.value.clone(), json!(out));
        }
    }
    let bash = proc::run_hook("echo \"$BASH_VERSION\"", &BTreeMap::new(), &ctx.run_dir, Duration::from_secs(5), None)
        .map(|o| o.output.trim().to_string())
        .unwrap_or_default();
    systems.insert("bash".into(), json!(bash));
    systems.insert(
        "kernel".into(),
        json!(std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()),
    );
    let exp_dir = exp.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut docker_info = Value::Null;
    let mut images = serde_json::Map::new();
    if let Some(eng) = &ctx.docker {
        docker_info = eng.version().unwrap_or_else(|e| json!({"error": e}));
        for t in &adapter.adapter.targets {
            let Some(ct) = &t.container else { continue };
            let v = match eng.image(&ct.image.value) {
                Ok((id, digests)) => {
                    json!({"ref": ct.image.value, "id": id, "repo_digests": digests, "pinned": docker::pinned(&ct.image.value)})
                }
                Err(e) => json!({"ref": ct.image.value, "error": e}),
            };
            images.insert(t.name.value.clone(), v);
        }
    }
    let manifest = json!({
        "run": id,
        "experiment": {"id": exp.experiment.id.value, "version": exp.experiment.version, "path": exp.path, "sha256": fsutil::sha256_hex(exp.text.as_bytes())},
        "adapter": {"name": adapter.adapter.name, "path": adapter.path, "sha256": fsutil::sha256_hex(adapter.text.as_bytes())},
        "repro_version": env!("CARGO_PKG_VERSION"),
        "git_sha": git_sha(exp_dir),
        "seed": ctx.seed,
        "started": fsutil::rfc3339(ctx.tl.start_wall()),
        "ports": ctx.env.iter().filter(|(k, _)| k.starts_with("CHAOS_PORT_")).map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "systems": systems,
    });
    let mut manifest = manifest;
    if ctx.docker.is_some() {
        manifest["docker"] = docker_info;
        manifest["images"] = Value::Object(images);
    }
    write_json_atomic(&ctx.run_dir.join("manifest.json"), &manifest)
}

/// Everything between the start and the evaluation. Errors here are harness errors.
fn drive(ctx: &Arc<Ctx>) -> Result<()> {
    let run_dir = &ctx.run_dir;
    if let Some(reason) = not_applicable(&ctx.exp, &ctx.adapter) {
        ctx.emit("run.not-applicable", json!({"reason": reason}));
        write_json_atomic(&run_dir.join("system/preflight.json"), &json!([]))?;
        return Ok(());
    }
    let pre = if let Some(err) = &ctx.docker_error {
        let r = CheckResult::new(
            "preflight",
            "preflight/docker-engine".into(),
            "preflight/docker-engine".into(),
            false,
            vec![err.clone()],
        );
        ctx.emit("check.finished", json!({"scope": "preflight", "check": r.id, "ok": false}));
        vec![r]
    } else {
        run_preflight(&ctx.exp, &ctx.adapter, &ctx.env, run_dir, |r| {
            ctx.emit("check.finished", json!({"scope": "preflight", "check": r.id, "ok": r.passed}));
            for w in r.details.iter().filter(|d| d.starts_with("warning:")) {
                ctx.emit("preflight.warning", json!({"check": r.id, "detail": w.trim_start_matches("warning: ")}));
            }
        })
    };
    let v = serde_json::to_value(&pre).map_err(|err| ChaosError::Harness(err.to_string()))?;
    write_json_atomic(&run_dir.join("system/preflight.json"), &v)?;
    if pre.iter().any(|r| !r.passed) {
        ctx.emit("flow.skipped", json!({"reason": "a preflight check failed"}));
        return Ok(());
    }

    if let Some(eng) = &ctx.docker {
        start_docker_events(ctx, eng);
    }
    // Targets: setup once, then start and wait until healthy.
    let mut started_targets: Vec<Arc<TargetRt>> = Vec::new();
    // In the adapter's order: a later target (an exporter) may need an earlier one (its server).
    let ordered: Vec<Arc<TargetRt>> =
        ctx.adapter.targets.iter().filter_map(|t| ctx.targets.get(&t.name.value)).cloned().collect();
    for t in &ordered {
        if ctx.cancel.is_cancelled() {
            break;
        }
        if let Some(setup) = &t.spec.setup {
            let env = ctx.hook_env(&[
                ("CHAOS_TARGET", t.spec.name.value.clone()),
                ("CHAOS_TARGET_DIR", ctx.target_dir(&t.spec.name).display().to_string()),
            ]);
            match proc::run_hook(setup, &env, run_dir, Duration::from_secs(120), Some(&ctx.cancel)) {
                Ok(o) if o.ok() => {
                    let _ = std::fs::write(run_dir.join("logs").join(format!("{}-setup.log", t.spec.name)), &o.output);
                }
                Ok(o) => {
                    ctx.harness_error(&format!(
                        "target {}: setup hook failed: {}: {}",
                        t.spec.name,
                        o.describe(),
                        o.output.trim()
                    ));
                    break;
                }
                Err(err) => {
                    ctx.harness_error(&format!("target {}: setup hook could not run: {err}", t.spec.name));
                    break;
                }
            }
        }
        started_targets.push(Arc::clone(t));
        match ctx.start_target(t, "run", None) {
            Ok(true) => {}
            Ok(false) => {
                ctx.harness_error(&format!("target {} did not become healthy", t.spec.name));
                break;
            }
            Err(err) => {
                ctx.harness_error(&err);
                break;
            }
        }
    }

    let observers = if ctx.cancel.is_cancelled() { None } else { Some(start_observers(ctx)) };

    if !ctx.cancel.is_cancelled() {
        if let Some(flow) = ctx.exp.flow.clone() {
            // The experiment's timeout bounds the flow.
            let deadline_cancel = ctx.cancel.clone();
            let timeout = ctx.exp.timeout.0;
            let flow_done = Cancel::default();
            let flow_done2 = flow_done.clone();
            let ctx_t = Arc::clone(ctx);
            let watchdog = std::thread::spawn(move || {
                if flow_done2.sleep(timeout) && !deadline_cancel.is_cancelled() {
                    ctx_t.harness_error(&format!("the experiment's timeout of {} ended the flow", Dur(timeout)));
                }
            });
            ctx.emit("flow.started", json!({}));
            let res = ctx.exec(&flow, "flow");
            flow_done.cancel("flow finished");
            let _ = watchdog.join();
            ctx.emit("flow.finished", json!({"ok": res.is_ok()}));
        }
    }

    // Undo, newest first.
    loop {
        let u = ctx.undo.lock().unwrap_or_else(|err| err.into_inner()).pop();
        let Some(u) = u else { break };
        ctx.run_undo(u, true);
    }
    // Instances still running (cancelled flow) are killed and collected.
    let all: Vec<Arc<InstanceRt>> =
        ctx.instances.lock().unwrap_or_else(|err| err.into_inner()).values().flatten().cloned().collect();
    for inst in all {
        if inst.running.load(Ordering::SeqCst) {
            let pid = inst.pid.lock().unwrap_or_else(|err| err.into_inner()).unwrap_or(0);
            proc::kill_group(pid, Signal::SIGCONT);
            proc::kill_group(pid, Signal::SIGKILL);
            let wait = ctx.budget(Duration::from_secs(5)).max(Duration::from_millis(200));
            proc::poll_until(wait, Duration::from_millis(5), || !inst.running.load(Ordering::SeqCst));
            ctx.collect_instance(&inst);
        }
    }
    if let Some(o) = observers {
        stop_observers(ctx, o);
    }
    if !started_targets.is_empty() || ctx.targets.is_empty() {
        let checks = adapter_checks(ctx);
        let v = serde_json::to_value(&checks).map_err(|err| ChaosError::Harness(err.to_string()))?;
        write_json_atomic(&run_dir.join("system/adapter-checks.json"), &v)?;
    }
    for t in started_targets.iter().rev() {
        ctx.stop_target(t, "run ended");
    }
    ctx.reap_target_events();
    if let Some(eng) = &ctx.docker {
        // After every container was removed: none of this run's is left.
        let leaked = || eng.list(docker::RUN_LABEL, &ctx.run_id).unwrap_or_default();
        let ok =
            proc::poll_until(ctx.budget(Duration::from_secs(5)), Duration::from_millis(20), || leaked().is_empty());
        let details: Vec<String> = if ok {
            vec![]
        } else {
            leaked().iter().map(|(id, name, st)| format!("{name} ({}) is {st}", &id[..12.min(id.len())])).collect()
        };
        let r = CheckResult::new(
            "adapter",
            "adapter/no-leaked-containers".into(),
            "adapter/no-leaked-containers".into(),
            ok,
            details,
        );
        ctx.emit("check.finished", json!({"scope": "adapter", "check": r.id, "ok": r.passed}));
        let path = run_dir.join("system/adapter-checks.json");
        let mut checks: Vec<CheckResult> =
            std::fs::read_to_string(&path).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
        checks.push(r);
        let v = serde_json::to_value(&checks).map_err(|err| ChaosError::Harness(err.to_string()))?;
        write_json_atomic(&path, &v)?;
    }
    stop_docker_events(ctx);
    Ok(())
}

/// Every Docker event of the run's containers, into system/watch/docker-events.jsonl (`line` is
/// "<action> <target>", like a watcher's line).
fn start_docker_events(ctx: &Arc<Ctx>, eng: &docker::Engine) {
    let stop = Arc::new(AtomicBool::new(false));
    let path = ctx.run_dir.join("system/watch/docker-events.jsonl");
    let ctx2 = Arc::clone(ctx);
    let res = eng.events(docker::RUN_LABEL, &ctx.run_id, Arc::clone(&stop), move |ev| {
        let t = secs(Duration::from_secs_f64(ctx2.tl.elapsed()));
        let line = format!(
            "{} {}",
            ev["action"].as_str().unwrap_or("?"),
            ev["target"].as_str().or(ev["name"].as_str()).unwrap_or("?")
        );
        let mut rec = json!({"t": t, "ts": fsutil::rfc3339(fsutil::now()), "line": line});
        if let (Some(m), Some(e)) = (rec.as_object_mut(), ev.as_object()) {
            for (k, v) in e {
                if !v.is_null() {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        let _ = fsutil::append_line(&path, &rec.to_string());
        // Signals may wait on these lines like on any watcher's.
        ctx2.watch_lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry("docker-events".into())
            .or_default()
            .push(line);
        ctx2.notify.bump();
    });
    match res {
        Ok(done) => {
            ctx.emit("watcher.started", json!({"watcher": "docker-events"}));
            *ctx.docker_events.lock().unwrap_or_else(|e| e.into_inner()) = Some((stop, done));
        }
        Err(e) => ctx.harness_error(&format!("docker events: {e}")),
    }
}

fn stop_docker_events(ctx: &Ctx) {
    let Some((stop, done)) = ctx.docker_events.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
    // The engine delivers events asynchronously: give the last ones (destroy) a moment.
    std::thread::sleep(Duration::from_millis(150));
    stop.store(true, Ordering::SeqCst);
    let _ = done.recv_timeout(Duration::from_secs(2));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watcher_lines_in_memory_are_bounded_and_waits_still_see_new_ones() {
        let mut w = WatchLines::default();
        for i in 0..(WatchLines::KEEP + 500) {
            w.push(format!("line {i}"));
        }
        assert_eq!(w.lines.len(), WatchLines::KEEP);
        assert_eq!(w.total(), WatchLines::KEEP + 500);
        let from = w.total();
        w.push("new".into());
        assert_eq!(w.since(from).cloned().collect::<Vec<_>>(), ["new"]);
        // A position among the dropped lines starts at the oldest kept one.
        assert_eq!(w.since(0).next().unwrap(), "line 501");
    }

    #[test]
    fn selection_is_a_function_of_seed_op_and_run() {
        let c: Vec<String> = (0..10).map(|i| format!("w-{i}")).collect();
        let a = select(42, "kill-one", 1, &c, Select::One);
        assert_eq!(a, select(42, "kill-one", 1, &c, Select::One));
        assert_eq!(a.len(), 1);
        let picks: std::collections::BTreeSet<Vec<String>> =
            (0..50).map(|s| select(s, "kill-one", 1, &c, Select::One)).collect();
        assert!(picks.len() > 3, "different seeds pick different instances");
        assert_eq!(select(1, "x", 1, &c, Select::All), c);
        let three = select(7, "x", 2, &c, Select::Count(3));
        assert_eq!(three.len(), 3);
        assert_eq!(select(7, "x", 1, &c, Select::Count(30)).len(), 10);
    }

    #[test]
    fn expands_variables() {
        let mut env = BTreeMap::new();
        env.insert("P".to_string(), "6390".to_string());
        assert_eq!(expand("http://127.0.0.1:${P}/m${NOPE}", &env), "http://127.0.0.1:6390/m");
    }
}
