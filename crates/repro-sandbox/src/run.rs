//! `repro run`: prepares the settings, starts the init in new namespaces, pumps the guest's output, forwards
//! signals, and writes the run directory.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use repro_model::run::{BindMount, Enforcement, Epoch, Identity, RunOutcome, RunRecord, RunSettings, RUN_FORMAT};
use repro_model::{DirOrder, ExitCode};
use repro_sys::ns::{self, flags};

use crate::cgroup::{Cgroup, Hierarchy};
use crate::init::{
    Accessed, InitConfig, InitResult, TreeRole, ACCESS_FD, CONFIG_FD, INIT_SIGNALS, RESULT_FD, RUN_DIR_FD, STDERR_FD,
    STDOUT_FD, TREES_FD,
};
use crate::parse::{self, EnvSpec};
use crate::reaper::{self, ReapJob};
use crate::rundir::{self, RunDir};
use crate::SandboxError;

pub use crate::settings::{DEFAULT_CLOCK_STEP_NS, DEFAULT_MEMORY, DOMAINNAME, HOSTNAME, UMASK};
/// The options of a run and what `capture` and `replay` add are repro-model's; re-exported for their users.
pub use repro_model::settings::{RunExtras, RunOptions};

/// A validated run, ready to execute.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub settings: RunSettings,
    pub state_dir: PathBuf,
    /// Said after "cannot execute" when the guest does not find the command: where the host has it and the flag
    /// that makes it visible ([`crate::toolchain::Resolution::hint`]).
    pub exec_hint: Option<String>,
}

impl RunRequest {
    /// Validates the options against the host: every error names the argument and the expected form.
    pub fn prepare(opts: &RunOptions) -> Result<RunRequest, SandboxError> {
        if opts.command.is_empty() {
            return Err(SandboxError::usage("CMD", "no command given: repro run [OPTIONS] -- CMD [ARGS...]"));
        }
        let cwd = std::env::current_dir().map_err(|e| SandboxError::io("cannot read the current directory", ".", e))?;
        check_cwd(&cwd)?;
        let project = match crate::project::locate(&opts.config, &cwd) {
            Some(path) => Some(crate::project::load(&path)?),
            None => None,
        };
        let merged;
        let opts = match &project {
            Some(p) => {
                merged = crate::project::apply(opts, p);
                &merged
            }
            None => opts,
        };
        repro_sys::startup::mark("run: project file located");
        let file_epoch = project.as_ref().and_then(|p| p.file.run.epoch.as_ref()).map(|e| e.as_flag());
        let state_dir =
            rundir::state_dir(opts.state_dir.as_deref(), std::env::var("REPRO_STATE_DIR").ok().as_deref(), &cwd);
        let epoch = parse::resolve_epoch_with(
            opts.epoch.as_deref(),
            file_epoch.as_deref(),
            std::env::var("SOURCE_DATE_EPOCH").ok().as_deref(),
            &cwd,
            Some(&state_dir),
        )?;
        repro_sys::startup::mark("run: epoch resolved");
        let memory_bytes = match &opts.memory {
            Some(m) => parse::parse_memory("--memory", m)?,
            None => DEFAULT_MEMORY,
        };
        let pids_max = opts.pids.unwrap_or(repro_model::settings::DEFAULT_PIDS);
        if !(1..=repro_model::settings::MAX_PIDS).contains(&pids_max) {
            return Err(SandboxError::usage(
                format!("--pids {pids_max}"),
                format!("expected a number of tasks from 1 to {}", repro_model::settings::MAX_PIDS),
            ));
        }
        let disk_bytes = match &opts.disk {
            Some(d) => parse::parse_memory("--disk", d)?,
            None => repro_model::run::DEFAULT_DISK_BYTES,
        };
        if opts.cpus == 0 {
            return Err(SandboxError::usage("--cpus", "expected a number of CPUs of at least 1"));
        }
        let stuck_after_ms = match &opts.stuck_after {
            Some(d) => parse::parse_duration_ms("--stuck-after", d)?,
            None => repro_model::run::DEFAULT_STUCK_AFTER_MS,
        };
        let spin_limit_ms = match &opts.spin_limit {
            Some(d) => parse::parse_spin_limit_ms(d)?,
            None => repro_model::run::DEFAULT_SPIN_LIMIT_MS,
        };
        let sched = repro_model::SchedSettings {
            policy: match &opts.sched {
                Some(p) => p.parse().map_err(|m: String| SandboxError::usage(format!("--sched '{p}'"), m))?,
                None => repro_model::SchedPolicy::default(),
            },
            seed: opts.sched_seed.unwrap_or(0),
        };
        let sched_script = match &opts.sched_script {
            Some(path) => {
                let arg = format!("--sched-script {}", path.display());
                let text =
                    std::fs::read(path).map_err(|e| SandboxError::usage(&arg, format!("cannot read it: {e}")))?;
                Some(repro_model::SchedScript::parse(&text).map_err(|e| SandboxError::usage(&arg, e.to_string()))?)
            }
            None => None,
        };
        let specs: Vec<EnvSpec> = opts.env.iter().map(|e| parse::parse_env(e)).collect::<Result<_, _>>()?;
        let mut env = crate::env::guest_env(epoch.unix, &specs, |k| std::env::var(k).ok());
        let mut binds: Vec<BindMount> =
            opts.bind.iter().map(|b| parse::parse_bind(b, &cwd)).collect::<Result<_, _>>()?;
        let guest_path = env.get("PATH").cloned().unwrap_or_else(|| crate::env::PATH.to_string());
        let host_var = |k: &str| std::env::var(k).ok();
        let resolution = crate::reach::resolve_all(
            &opts.command,
            &crate::toolchain::Host { var: &host_var, cwd: &cwd },
            &guest_path,
        );
        repro_sys::startup::mark("run: toolchains resolved");
        // A variable an `--env` names is the user's.
        let user_set = |k: &str| specs.iter().any(|s| matches!(s, EnvSpec::Set(n, _) | EnvSpec::Pass(n) if n == k));
        pass_toolchains(&resolution.toolchains, &user_set, &cwd, &mut env, &mut binds);
        if let (Some(p), false) = (&resolution.path, user_set("PATH")) {
            env.insert("PATH".into(), p.clone());
        }
        let repository = crate::gitview::view(&cwd, &host_var);
        repository.iter().for_each(|v| crate::gitview::pass(v, &user_set, &mut env, &mut binds));
        let hostname = match &opts.hostname {
            Some(h) => check_hostname(h)?,
            None => HOSTNAME.into(),
        };
        let dir_order = match &opts.dir_order {
            Some(o) => o.parse::<DirOrder>().map_err(|_| {
                SandboxError::usage(
                    format!("--dir-order '{o}'"),
                    format!("expected {}", repro_model::dirorder::DIR_ORDER_EXPECTED),
                )
            })?,
            None => DirOrder::Sorted,
        };
        let settings =
            crate::settings::for_host(opts.command.clone(), cwd.to_string_lossy().into_owned(), epoch, |s| {
                s.seed = opts.seed.unwrap_or(0);
                s.cpus = opts.cpus;
                s.memory_bytes = memory_bytes;
                s.pids_max = pids_max;
                s.env = env;
                s.binds = binds;
                s.keep_changes = opts.keep_changes;
                s.hostname = hostname;
                s.supervised = !opts.no_supervisor;
                s.clock_step_ns = opts.clock_step_ns;
                s.dir_order = dir_order;
                s.disk_bytes = disk_bytes;
                s.project_file = project.as_ref().map(|p| p.path.to_string_lossy().into_owned());
                s.toolchains = resolution.toolchains;
                s.repository = repository;
                s.path_notes = resolution.notes;
                s.stuck_after_ms = stuck_after_ms;
                s.spin_limit_ms = spin_limit_ms;
                s.sched = sched;
                s.sched_script = sched_script;
                s.sched_log = opts.sched_log;
            });
        Ok(RunRequest { settings, state_dir, exec_hint: resolution.hint })
    }
}

/// Passes the toolchains to the guest: their variables (unless an `--env` names the same variable: the user's
/// wins) and read-only binds of their directories the guest does not already see (a path already bound by
/// `--bind` is left to it).
fn pass_toolchains(
    toolchains: &[repro_model::run::Toolchain],
    user_set: &dyn Fn(&str) -> bool,
    cwd: &Path,
    env: &mut BTreeMap<String, String>,
    binds: &mut Vec<BindMount>,
) {
    for t in toolchains {
        for (k, v) in &t.variables {
            if !user_set(k) {
                env.insert(k.clone(), v.clone());
            }
        }
        for p in &t.paths {
            let taken = binds.iter().any(|b| Path::new(&b.guest) == Path::new(p));
            if !taken && !crate::toolchain::guest_sees(Path::new(p), cwd) {
                binds.push(BindMount { host: p.clone(), guest: p.clone(), writable: false });
            }
        }
    }
}

/// A host name the guest can be given: 1 to 63 letters, digits, '-' and '.'.
fn check_hostname(h: &str) -> Result<String, SandboxError> {
    let ok = !h.is_empty() && h.len() <= 63 && h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ok {
        Ok(h.to_string())
    } else {
        Err(SandboxError::usage(format!("--hostname '{h}'"), "expected 1 to 63 letters, digits, '-' and '.'"))
    }
}

/// The working directory becomes the guest's writable overlay: it cannot be the root or a kernel filesystem.
fn check_cwd(cwd: &Path) -> Result<(), SandboxError> {
    let bad = cwd == Path::new("/") || ["/proc", "/sys", "/dev"].iter().any(|p| cwd.starts_with(p));
    if bad {
        return Err(SandboxError::usage(
            "working directory",
            format!(
                "'{}' cannot be the sandbox's writable directory: run repro from a project directory",
                cwd.display()
            ),
        ));
    }
    Ok(())
}

/// Where the guest's output goes besides the run directory.
#[derive(Debug, Clone, Copy)]
pub struct Echo {
    pub stdout: bool,
    pub stderr: bool,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub record: RunRecord,
    pub dir: PathBuf,
    /// The paths the guest used (with [`RunExtras::record_access`]).
    pub accessed: Vec<Accessed>,
    /// The tapes recorded, and whether a replay diverged from its tapes.
    pub tapes: crate::init::TapesOut,
    /// The SIGINT/SIGTERM/SIGHUP that repro itself received during the run (forwarded to the guest): a
    /// caller running several runs (`--verify`, `replay --runs`) stops there.
    pub interrupted: Option<i32>,
}

/// Starts a thread that may run beside [`execute_with`]: a run waits for its init through a signalfd, so a
/// SIGCHLD (or SIGINT/SIGTERM/SIGHUP) delivered to a thread that does not block it would be lost and the run would
/// never end. The thread blocks those signals before `f`.
pub fn spawn_beside<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let owned = name.to_string();
    std::thread::Builder::new().name(name.into()).spawn(move || {
        if let Err(e) = ns::block_signals(&INIT_SIGNALS) {
            eprintln!(
                "repro: warning: thread {owned}: cannot block the run's signals ({e}): a run may wait for a lost \
                 SIGCHLD"
            );
        }
        f()
    })
}

/// Holds SIGINT/SIGTERM/SIGHUP from here on (as each run does while it lasts), so one that arrives between two
/// runs of `--verify` or `replay --runs`, or before the first run reads its signals, is seen by the next run as
/// an interrupt: the loop then stops with 128 + the signal instead of dying half-way.
pub fn hold_interrupts() -> Result<(), SandboxError> {
    Ok(ns::block_signals(&INIT_SIGNALS)?)
}

/// repro's own executable, which a run starts again as `__init` and `__reap` (`/proc/self/exe` itself when the
/// link cannot be read: it names the same file).
pub fn self_exe() -> PathBuf {
    fs::read_link("/proc/self/exe").unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
}

/// Runs the request. `exe` is repro's own executable (for `__init` and `__reap`).
pub fn execute(req: &RunRequest, exe: &Path, echo: Echo) -> Result<RunReport, SandboxError> {
    execute_with(req, exe, echo, &RunExtras::default())
}

/// Runs the request with the additions of `extras`.
pub fn execute_with(req: &RunRequest, exe: &Path, echo: Echo, extras: &RunExtras) -> Result<RunReport, SandboxError> {
    // The guest inherits the caller's terminal as its standard input: whatever it left changed (echo off, raw
    // mode; also when it was killed) is put back when this returns, on every path.
    let _terminal = repro_sys::term::SavedTerminal::stdin();
    let started = Instant::now();
    let now = time::OffsetDateTime::now_utc();
    let s = &req.settings;
    let id = rundir::new_id(now);
    let dir = RunDir::create(&req.state_dir, &id)?;
    let mut warnings = setting_warnings(s);
    repro_sys::startup::mark("run: run directory created");

    // The run's only scratch on the host's disk: an empty directory on which the init mounts a tmpfs of its own
    // for the root, the layer, the stage and the /etc files (each directory made on the disk costs ~0.3 ms here,
    // and as much again to remove).
    let scratch = dir.join(SCRATCH);
    fs::create_dir(&scratch).map_err(|e| SandboxError::io("cannot create", &scratch, e))?;
    // The guest always has its own user namespace: its root is a host id without privileges (see identity.rs).
    let mut identity = s.identity.clone().unwrap_or_else(crate::identity::current);
    let trees = idmapped_trees(&identity, s, extras);
    let etc_files = etc_files(&s.hostname);
    let cwd = Path::new(&s.cwd);
    // Files earlier runs found free of RDRAND/RDSEED: the supervisor does not read them again.
    let rdrand_known = if s.supervised { crate::scancache::load(&req.state_dir) } else { Vec::new() };
    let cfg = init_config(req, extras, &trees, &etc_files, &rdrand_known)?;
    // The init cannot open files of the run directory (it is not the host's user): its configuration, result and
    // access stream are descriptors it inherits. The configuration (with the environment) never touches the disk.
    let cfg_json =
        serde_json::to_vec(&cfg).map_err(|source| SandboxError::Encode { what: "the init's configuration", source })?;
    let cfg_fd = repro_sys::idmap::memfd(c"repro-init-config", &cfg_json)?;
    let result_fd = repro_sys::idmap::memfd(c"repro-init-result", b"")?;
    let access_fd = match &extras.access_stream {
        Some(p) => {
            Some(fs::OpenOptions::new().append(true).open(p).map_err(|e| SandboxError::io("cannot open", p, e))?)
        }
        None => None,
    };
    let (trees_tx, trees_rx) = ns::socketpair()?;
    repro_sys::startup::mark("run: scratch directory, init configuration");

    // The cgroup for the memory limit.
    let cgroup = Cgroup::for_run(&Hierarchy::detect(), &id, (s.memory_bytes, s.pids_max), &mut warnings);

    // With cgroup v1 the init joins the cgroup itself, through this file; else `repro run` moves it by its pid.
    let mut cgroup_tasks = cgroup.as_ref().and_then(|c| c.tasks_for_self()).and_then(|r| r.ok());
    let pids_tasks = cgroup.as_ref().and_then(|c| c.pids_tasks_for_self(&mut warnings));
    repro_sys::startup::mark("run: cgroup created");
    // The reaper outlives us if we are killed. Starting it (an exec of this binary) takes a few milliseconds: a
    // thread does it while the init is cloned; it is joined once the init is let go (a reaper that failed to
    // start stops the run).
    let job = ReapJob {
        cgroup: cgroup.as_ref().map(|c| c.path.clone()),
        pids_cgroup: cgroup
            .as_ref()
            .and_then(|c| c.pids.clone())
            .filter(|p| Some(p) != cgroup.as_ref().map(|c| &c.path)),
        scratch: vec![scratch.clone()],
    };
    let reaper_exe = exe.to_path_buf();
    let reaper_start = spawn_beside("repro-reaper-start", move || {
        Command::new(reaper_exe)
            .arg("__reap")
            .args(job.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
    })
    .map_err(|e| SandboxError::io("cannot start the cleanup process", exe, e))?;

    // Signals are read through a signalfd from here on; threads started below inherit the mask.
    ns::block_signals(&INIT_SIGNALS)?;
    let sigfd = ns::signalfd(&INIT_SIGNALS)?;

    let (out_r, out_w) = ns::pipe()?;
    let (err_r, err_w) = ns::pipe()?;
    let (sync_r, sync_w) = ns::pipe()?;
    let (cgroup_r, cgroup_w) = ns::pipe()?;
    let (done_r, done_w) = ns::pipe()?;
    // The init sends the writable layer's directory over this socket; it stays queued there (and the layer
    // alive) until read after the run, and is freed by the kernel if we die first.
    let (layer_sock, layer_sock_init) = ns::socketpair()?;
    let exe_c = CString::new(exe.as_os_str().as_encoded_bytes())
        .map_err(|_| SandboxError::ExePath { path: exe.to_path_buf() })?;
    let argv = vec![
        CString::from(c"repro-init"),
        CString::from(c"__init"),
        // Cannot fail: a number has no NUL byte.
        CString::new(format!("fd:{CONFIG_FD}")).unwrap_or_default(),
    ];
    let mut namespaces = flags::USER | flags::MOUNT | flags::PID | flags::UTS | flags::IPC;
    if !extras.host_network {
        namespaces |= flags::NET;
    }
    let mut fds = vec![
        (out_w.as_raw_fd(), STDOUT_FD),
        (err_w.as_raw_fd(), STDERR_FD),
        (cfg_fd.as_raw_fd(), CONFIG_FD),
        (result_fd.as_raw_fd(), RESULT_FD),
        (trees_rx.as_raw_fd(), TREES_FD),
        (layer_sock_init.as_raw_fd(), crate::init::LAYER_FD),
        (cgroup_r.as_raw_fd(), crate::init::CGROUP_FD),
        (done_w.as_raw_fd(), crate::init::DONE_FD),
    ];
    if let Some(f) = &cgroup_tasks {
        fds.push((f.as_raw_fd(), crate::init::CGROUP_TASKS_FD));
    }
    if let Some(f) = &pids_tasks {
        fds.push((f.as_raw_fd(), crate::init::CGROUP_PIDS_TASKS_FD));
    }
    if let Some(f) = &access_fd {
        fds.push((f.as_raw_fd(), ACCESS_FD));
    }
    if req.settings.supervised {
        // The init and the guest are in a user namespace, where only RLIMIT_RTPRIO lets the guest's threads run
        // SCHED_FIFO (the deterministic scheduler, see repro-tracer's sched.rs) and the tracer one above them.
        // Refused (unprivileged, hard limit 0): the supervisor finds the guest not FIFO and says so.
        let _ = repro_sys::sched::allow_rt_priority(repro_sys::sched::TRACER_RT_PRIORITY as u64);
    }
    let init_pid = ns::spawn_init(&ns::InitSpawn {
        namespaces,
        program: &exe_c,
        argv: &argv,
        fds: &fds,
        sync: sync_r.as_raw_fd(),
        block_signals: &INIT_SIGNALS,
        become_root: true,
    })?;
    drop((sync_r, cfg_fd, access_fd, trees_rx, layer_sock_init, cgroup_r, done_w, pids_tasks));
    let init_joins_itself = cgroup_tasks.take().is_some();
    repro_sys::startup::mark("run: init cloned (new namespaces)");
    if s.supervised {
        // The deterministic scheduler (repro-tracer's sched.rs): the init starts SCHED_FIFO one above where the
        // guest will run; in its user namespace it could only choose that with RLIMIT_RTPRIO, but here
        // CAP_SYS_NICE may allow it. Refused: the supervisor finds the guest not FIFO and says so.
        let _ = repro_sys::sched::set_fifo(init_pid, repro_sys::sched::TRACER_RT_PRIORITY);
    }
    // The id maps, then the idmapped trees (they need the namespace the maps define). A failure here ends the
    // run before the guest starts: the init is not released and exits.
    let setup_error = match crate::identity::enter(init_pid, &dir.path, &identity, &trees, &s.binds, &trees_tx) {
        Ok(Some(warning)) => {
            eprintln!("repro: warning: {warning}");
            warnings.push(warning);
            identity.idmapped_mounts = false;
            None
        }
        Ok(None) => None,
        Err(e) => {
            let m = e.to_string();
            eprintln!("repro: sandbox setup failed: {m}");
            Some(m)
        }
    };
    drop(trees_tx);
    if setup_error.is_none() {
        repro_sys::startup::mark("run: id maps written, idmapped trees sent");
        ns::write_byte(&sync_w)?;
    } else {
        // The init holds a copy of the sync pipe's write end until its exec, so closing ours is not enough.
        ns::kill(init_pid, crate::init::libc_sig::KILL)?;
    }
    drop(sync_w);
    drop(out_w);
    drop(err_w);

    let out_pump =
        pump(out_r, dir.join("stdout"), echo.stdout.then(|| Box::new(std::io::stdout()) as Box<dyn Write + Send>));
    let err_pump =
        pump(err_r, dir.join("stderr"), echo.stderr.then(|| Box::new(std::io::stderr()) as Box<dyn Write + Send>));

    // While the init starts and assembles the root: with cgroup v2 the init's move into the run's cgroup (a write
    // of its pid to cgroup.procs, which waits for an RCU grace period: ~10 ms; with v1 the init moves itself, at
    // no such cost), then the byte on CGROUP_FD that lets it start the guest.
    if setup_error.is_none() {
        if let (Some(cg), false) = (&cgroup, init_joins_itself) {
            match cg.add(init_pid) {
                Ok(()) => {}
                // The init is gone already (its setup failed): its result says why.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    warnings.push(format!("memory limit not enforced: cannot join cgroup {}: {e}", cg.path.display()))
                }
            }
        }
        // An init that died meanwhile (its setup failed) no longer reads the pipe: nothing to tell it.
        let _ = ns::write_byte(&cgroup_w);
    }
    drop(cgroup_w);
    repro_sys::startup::mark("run: init let go to start the guest once in the cgroup");
    // The reaper has usually started by now (the init takes longer to reach its guest).
    let (mut reaper, reaper_error) = match reaper_start.join() {
        Ok(Ok(child)) => (Some(child), None),
        Ok(Err(e)) => (None, Some(e)),
        Err(_) => (None, Some(std::io::Error::other("the thread starting it panicked"))),
    };
    if reaper_error.is_some() {
        // Nothing would clean up after a killed run: the sandbox goes (the error is returned after the teardown).
        let _ = ns::kill(init_pid, crate::init::libc_sig::KILL);
    }
    let reaper_pipe = reaper.as_mut().and_then(|r| r.stdin.take());
    repro_sys::startup::mark("run: cleanup process started");

    // SIGINT/SIGTERM/SIGHUP go to the guest (through the init). A second one kills the sandbox: the guest may
    // ignore them, or the sandbox may not have started it yet.
    let mut interrupted: Option<i32> = None;
    let mut killed = false;
    // The init's exit, or `None` when it said first that it is done (DONE_FD: its result is written and nothing
    // of the guest is left); its exit (its namespaces' teardown) then goes on beside the rest of the run.
    let mut done = Some(fs::File::from(done_r));
    let mut init_exit = loop {
        if let Some((_, exit)) = ns::wait_child(init_pid, true)? {
            break Some(exit);
        }
        if let Some(d) = &done {
            if readable_first(d, &sigfd)? {
                let mut b = [0u8; 1];
                match (&*d).read(&mut b) {
                    Ok(1) => break None,
                    // The init exited without saying it (or the pipe failed): its exit is waited for.
                    _ => done = None,
                }
                continue;
            }
        }
        match ns::read_signal(&sigfd)? {
            crate::init::libc_sig::CHLD => {}
            sig if interrupted.is_some() && !killed => {
                eprintln!("repro: {} again: killing the sandbox", crate::init::signal_name(sig));
                ns::kill(init_pid, crate::init::libc_sig::KILL)?;
                killed = true;
            }
            sig => {
                interrupted.get_or_insert(sig);
                ns::kill(init_pid, sig)?
            }
        }
    };
    repro_sys::startup::mark("run: init done");
    let stdout_bytes =
        out_pump.join().unwrap_or(Ok(0)).map_err(|e| SandboxError::io("cannot save", dir.join("stdout"), e))?;
    let stderr_bytes =
        err_pump.join().unwrap_or(Ok(0)).map_err(|e| SandboxError::io("cannot save", dir.join("stderr"), e))?;

    let result: Option<InitResult> = read_result(result_fd);
    if result.is_none() && init_exit.is_none() {
        // Said done without a readable result: how it ended is in its exit.
        init_exit = ns::wait_child(init_pid, false)?.map(|(_, exit)| exit);
    }
    let init_exit = init_exit.ok_or(());
    if let Some(r) = &result {
        crate::scancache::store(&req.state_dir, &rdrand_known, &r.rdrand_clean);
        warnings.extend(r.warnings.iter().cloned());
    }
    let (outcome, mut exit_status, determinism, accessed, tapes) = match (result, interrupted, setup_error) {
        (Some(r), _, _) => (r.outcome, r.exit_status, r.determinism, r.accessed, r.tapes),
        (None, _, Some(message)) => (
            RunOutcome::SetupFailed { message },
            ExitCode::Setup.code(),
            Default::default(),
            Vec::new(),
            Default::default(),
        ),
        // Killed after a second interrupt: the run ended by the first one.
        (None, Some(sig), None) if killed => (
            RunOutcome::Signaled { signal: sig, name: crate::init::signal_name(sig) },
            ExitCode::signalled(sig),
            Default::default(),
            Vec::new(),
            Default::default(),
        ),
        (None, _, None) => (
            RunOutcome::SetupFailed {
                message: if init_exit == Ok(ns::ChildExit::Signaled(crate::init::libc_sig::KILL)) {
                    format!(
                        "the sandbox's init was killed (SIGKILL) without reporting a result: most likely the \
                         memory limit was reached (--memory {} MiB; what the guest writes to its working \
                         directory, /tmp and /home counts toward it)",
                        s.memory_bytes >> 20
                    )
                } else {
                    format!(
                        "the sandbox's init ended ({:?}) without reporting a result",
                        init_exit.unwrap_or(ns::ChildExit::Exited(0))
                    )
                },
            },
            ExitCode::Setup.code(),
            Default::default(),
            Vec::new(),
            Default::default(),
        ),
    };
    // A run that was not deterministic is not evidence of anything, whatever the guest's status.
    let ran = matches!(outcome, RunOutcome::Exited { .. } | RunOutcome::Signaled { .. });
    if ran && !determinism.not_enforced.is_empty() {
        exit_status = ExitCode::NotDeterministic.code();
    }
    if determinism.stuck.is_some() {
        exit_status = ExitCode::Stuck.code();
    }
    // The supervisor's notes (a library holding RDRAND, waits on outside descriptors) stay in
    // `determinism.warnings`: the CLI says them unless asked to be quiet; the run's own warnings are below.

    repro_sys::startup::mark("run: output saved, result read");
    // Tear down, in a thread beside the collection of the changes and the writing of the run directory (the run
    // returns once it is done): nothing of the guest is left once its PID 1 has exited; the cgroup goes, then the
    // scratch; then the reaper is let go (it finds nothing left: its status says nothing about the run, and what
    // it leaves `repro gc` removes) and reaped by the thread. Without the thread the reaper does all of it.
    // Read before the cgroup goes: nothing of the guest is left to fork.
    let pids_refused = cgroup.as_ref().and_then(|c| c.pids_reached(s.pids_max));
    // Said on stderr with the other warnings, and kept in the record.
    warnings.extend(pids_refused.clone());
    let run_cgroup = cgroup.clone();
    // The run waits for the cleanup, not for the reaper's exit.
    let (torn_down, teardown) = std::sync::mpsc::channel::<()>();
    let init_reaped = init_exit.is_ok();
    let _ = spawn_beside("repro-teardown", move || {
        // The scratch directory is empty on the host (the init's tmpfs on it lives in the init's mount namespace,
        // which may still be going: a mount point of another namespace can be removed); removed while the init
        // exits.
        let scratch_left = fs::remove_dir(&scratch).is_err();
        if !init_reaped {
            // The init said it was done: its exit empties the cgroup.
            let _ = ns::wait_child(init_pid, false);
            repro_sys::startup::mark("run: the init's exit (its namespaces' teardown) waited for");
        }
        if let Some(cg) = &run_cgroup {
            cg.kill_all(std::time::Duration::from_secs(5));
            // The reaper, let go below, removes it if this fails (a process not gone yet).
            let _ = cg.remove();
            let _ = cg.remove_pids();
            repro_sys::startup::mark("run: cgroup removed");
        }
        if scratch_left {
            reaper::remove_tree(&scratch);
        }
        drop(reaper_pipe);
        repro_sys::startup::mark("run: torn down (cgroup, scratch)");
        let _ = torn_down.send(());
        if let Some(mut r) = reaper {
            let _ = r.wait();
        }
    });
    if let Some(e) = reaper_error {
        // Returns when the cleanup is done, or at once if the thread could not start.
        let _ = teardown.recv();
        return Err(SandboxError::io("cannot start the cleanup process", exe, e));
    }

    // What the guest changed: read from the writable layer through the descriptor the init sent, then copied
    // to the run directory; the layer itself goes with the descriptor.
    let changes_dir = dir.join("changes");
    let lower = match &extras.root_source {
        Some(r) => r.join(cwd.strip_prefix("/").unwrap_or(cwd)),
        None => cwd.to_path_buf(),
    };
    let layer_fd = ns::recv_fd_nonblocking(&layer_sock)?;
    drop(layer_sock);
    let mut disk_limit_reached = false;
    // Nothing the guest left is copied beyond what its layer could hold (a sparse file keeps its holes).
    let copy_limits = crate::changes::CopyLimits::for_layer(s.disk_bytes, s.disk_inodes);
    let mut changes = match &layer_fd {
        Some(fd) => {
            if let Ok(space) = ns::fs_space(fd.as_raw_fd()) {
                // tmpfs hands out whole pages: less than one page (or no inode) left means a write failed.
                if space.bytes_free < 4096 || space.inodes_free == 0 {
                    disk_limit_reached = true;
                    // Said on stderr with the other warnings, and kept in the record.
                    warnings.push(disk_limit_message(s.disk_bytes, s.disk_inodes, space));
                }
            }
            let upper = PathBuf::from(format!("/proc/self/fd/{}/upper", fd.as_raw_fd()));
            let mut changes = crate::changes::collect(&upper, &lower, &copy_limits)?;
            crate::changes::copy_tree(&upper, &changes_dir, &copy_limits, &mut changes)?;
            changes
        }
        None => {
            fs::create_dir(&changes_dir).map_err(|e| SandboxError::io("cannot create", &changes_dir, e))?;
            Default::default()
        }
    };
    drop(layer_fd);
    if s.keep_changes {
        crate::changes::apply(&mut changes, &changes_dir, cwd, &copy_limits)?;
    }
    // Said on stderr with the other warnings, and kept in the record.
    warnings.extend(crate::changes::skipped_warning(&changes));
    let mut cjson =
        serde_json::to_vec_pretty(&changes).map_err(|source| SandboxError::Encode { what: "changes.json", source })?;
    cjson.push(b'\n');
    dir.write_atomic("changes.json", &cjson)?;
    repro_sys::startup::mark("run: changes collected");

    let record = RunRecord {
        format: RUN_FORMAT,
        id: id.clone(),
        repro_version: env!("CARGO_PKG_VERSION").to_string(),
        // Secret variables are recorded as markers; only the guest got their values.
        settings: RunSettings { user_namespace: true, identity: Some(identity), ..s.redacted() },
        started_at: parse::rfc3339(now.unix_timestamp()),
        duration_ms: started.elapsed().as_millis() as u64,
        outcome,
        exit_status,
        stdout_bytes,
        stderr_bytes,
        changes: changes.summary(s.keep_changes),
        enforcement: Enforcement {
            cgroup: cgroup.as_ref().map(|c| c.path.to_string_lossy().into_owned()),
            pids_cgroup: cgroup.as_ref().and_then(|c| c.pids.as_ref()).map(|p| p.to_string_lossy().into_owned()),
            warnings,
            disk_limit_reached,
            pids_limit_reached: pids_refused.is_some(),
        },
        determinism,
    };
    dir.finish(&record)?;
    repro_sys::startup::mark("run: run.json written, run directory complete");
    // Returns when the cleanup is done, or at once if the thread could not start.
    let _ = teardown.recv();
    Ok(RunReport { record, dir: dir.path, accessed, tapes, interrupted })
}

/// What the settings themselves warn about: more CPUs asked than there are, a `--disk` larger than `--memory`.
fn setting_warnings(s: &RunSettings) -> Vec<String> {
    let mut warnings = Vec::new();
    // Supervised, the guest runs on one CPU whatever it sees (settings::affinity_for): nothing to warn about.
    if !s.supervised && (s.cpus as usize) > s.cpu_affinity.len() {
        warnings.push(format!(
            "--cpus {}: only {} CPU(s) are available here; the guest is pinned to {:?}",
            s.cpus,
            s.cpu_affinity.len(),
            s.cpu_affinity
        ));
    }
    if s.disk_bytes > s.memory_bytes {
        warnings.push(format!(
            "--disk {} MiB is more than --memory {} MiB: the writable layer is memory, so the memory limit stops \
             the guest's writes first (and the kernel kills the sandbox)",
            s.disk_bytes >> 20,
            s.memory_bytes >> 20
        ));
    }
    warnings
}

/// The trees `repro run` idmaps for the guest (as root): the working directory or a pack's root, and every bind.
fn idmapped_trees(identity: &Identity, s: &RunSettings, extras: &RunExtras) -> Vec<(TreeRole, PathBuf)> {
    let mut trees: Vec<(TreeRole, PathBuf)> = Vec::new();
    if identity.idmapped_mounts {
        match &extras.root_source {
            Some(r) => trees.push((TreeRole::RootSource, r.clone())),
            None => trees.push((TreeRole::Cwd, PathBuf::from(&s.cwd))),
        }
        for (i, b) in s.binds.iter().enumerate() {
            trees.push((TreeRole::Bind(i), PathBuf::from(&b.host)));
        }
    }
    trees
}

/// The run directory's scratch directory (see [`InitConfig::scratch`]); gone when the run ends.
pub const SCRATCH: &str = ".scratch";

/// The guest's /etc/hostname, /etc/hosts and /etc/resolv.conf.
fn etc_files(hostname: &str) -> [(&'static str, String); 3] {
    [
        ("hostname", format!("{}\n", hostname)),
        (
            "hosts",
            format!(
                "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{h}.{DOMAINNAME} {h}\n",
                h = hostname
            ),
        ),
        (
            "resolv.conf",
            "# repro: the sandbox has no network\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n".to_string(),
        ),
    ]
}

/// The init's configuration for `req`: the run directory is reached through [`RUN_DIR_FD`], the fixed parts come
/// from the settings, the supervisor's from the settings and `extras`.
fn init_config(
    req: &RunRequest,
    extras: &RunExtras,
    trees: &[(TreeRole, PathBuf)],
    etc_files: &[(&'static str, String)],
    rdrand_clean: &[repro_model::init::ScannedFile],
) -> Result<InitConfig, SandboxError> {
    let s = &req.settings;
    let cwd = Path::new(&s.cwd);
    let hide = if req.state_dir.starts_with(cwd) && req.state_dir != cwd {
        vec![req.state_dir.to_string_lossy().into_owned()]
    } else {
        Vec::new()
    };
    // The init reaches the run directory through a descriptor (see `identity::enter`), not by its host path: the
    // guest's root may not traverse the directories above it (a project under /root, mode 700).
    let in_run_dir = |name: &str| format!("/proc/self/fd/{RUN_DIR_FD}/{name}");
    let in_scratch = |name: &str| in_run_dir(&format!("{SCRATCH}/{name}"));
    Ok(InitConfig {
        argv: s.command.clone(),
        env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        cwd: s.cwd.clone(),
        scratch: in_run_dir(SCRATCH),
        root: in_scratch("root"),
        layer: in_scratch("layer"),
        disk_bytes: s.disk_bytes,
        disk_inodes: s.disk_inodes,
        hide,
        binds: s.binds.clone(),
        etc: etc_files.iter().map(|(n, c)| (n.to_string(), c.clone())).collect(),
        hostname: s.hostname.clone(),
        domainname: s.domainname.clone(),
        umask: crate::settings::umask_of(s)?,
        no_aslr: !s.aslr,
        rlimits: crate::settings::rlimits_for_init(&s.rlimits)?,
        cpus: s.cpu_affinity.clone(),
        user_namespace: true,
        trees: trees.iter().map(|(r, _)| *r).collect(),
        stage: in_scratch("stage"),
        determinism: s.supervised.then_some(crate::init::DetSettings {
            seed: s.seed,
            epoch_unix_secs: s.epoch.unix,
            clock_step_ns: s.clock_step_ns,
            hostname: s.hostname.clone(),
            dir_order: s.dir_order,
            cpus: s.cpus,
            record_access: extras.record_access,
            access_stream: extras.access_stream.as_ref().map(|p| p.to_string_lossy().into_owned()),
            stuck_after_ms: s.stuck_after_ms,
            spin_limit_ms: s.spin_limit_ms,
            sched: s.sched,
            sched_script: s.sched_script.clone(),
            sched_log: s.sched_log,
            rdrand_clean: rdrand_clean.to_vec(),
        }),
        root_source: extras.root_source.as_ref().map(|p| p.to_string_lossy().into_owned()),
        root_times: extras.root_times,
        host_network: extras.host_network,
        tapes: extras.tapes.clone(),
        exec_hint: req.exec_hint.clone(),
    })
}

/// What a run that filled its writable layer is told.
fn disk_limit_message(bytes: u64, inodes: u64, space: ns::FsSpace) -> String {
    let what = if space.inodes_free == 0 { format!("its {inodes} inodes") } else { format!("{} MiB", bytes >> 20) };
    format!(
        "the --disk limit was reached: the guest's writable layer (working directory changes, /tmp, /home) is full \
         ({what}); writes failed with 'No space left on device'. Raise it with --disk SIZE"
    )
}

/// Waits until `first` or `then` is readable; whether `first` is.
fn readable_first(first: &fs::File, then: &OwnedFd) -> Result<bool, SandboxError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    loop {
        let mut fds = [PollFd::new(first.as_fd(), PollFlags::POLLIN), PollFd::new(then.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => return Ok(fds[0].revents().is_some_and(|r| !r.is_empty())),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(SandboxError::io("cannot wait for the sandbox's init", "poll", e.into())),
        }
    }
}

/// The init's result, from the memfd it wrote.
fn read_result(fd: OwnedFd) -> Option<InitResult> {
    let mut f = fs::File::from(fd);
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0)).ok()?;
    let mut data = Vec::new();
    f.read_to_end(&mut data).ok()?;
    serde_json::from_slice(&data).ok()
}

/// Copies a pipe to a file and, optionally, to one of our own streams, as data arrives.
fn pump(
    src: OwnedFd,
    file: PathBuf,
    mut echo: Option<Box<dyn Write + Send>>,
) -> std::thread::JoinHandle<std::io::Result<u64>> {
    std::thread::spawn(move || {
        let mut src = fs::File::from(src);
        let mut out = fs::File::create(&file)?;
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let n = match src.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            out.write_all(&buf[..n])?;
            if let Some(w) = echo.as_mut() {
                // A closed terminal must not stop the saving.
                if w.write_all(&buf[..n]).and_then(|_| w.flush()).is_err() {
                    echo = None;
                }
            }
            total += n as u64;
        }
        Ok(total)
    })
}

/// The environment as a sorted list, for display (secret values as markers).
pub fn env_lines(env: &BTreeMap<String, String>) -> Vec<String> {
    env.iter().map(|(k, v)| format!("{k}={}", repro_model::secrets::redact_value(k, v))).collect()
}

/// The epoch as shown to users.
pub fn describe_epoch(e: &Epoch) -> String {
    format!("{} ({}; {})", e.rfc3339, e.unix, e.source.describe())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> RunOptions {
        RunOptions {
            command: vec!["true".into()],
            epoch: Some("0".into()),
            cpus: 1,
            clock_step_ns: DEFAULT_CLOCK_STEP_NS,
            ..Default::default()
        }
    }

    #[test]
    fn prepared_settings_are_the_defaults_with_the_options() {
        let o = RunOptions {
            seed: Some(7),
            dir_order: Some("shuffled:3".into()),
            hostname: Some("box".into()),
            disk: Some("64M".into()),
            ..opts()
        };
        let s = RunRequest::prepare(&o).unwrap().settings;
        assert_eq!((s.seed, s.epoch.unix, s.hostname.as_str()), (7, 0, "box"));
        assert_eq!(s.dir_order, DirOrder::Shuffled(3));
        assert_eq!((s.disk_bytes, s.disk_inodes), (64 << 20, repro_model::run::disk_inodes_for(64 << 20)));
        assert_eq!((s.domainname.as_str(), s.umask.as_str()), (DOMAINNAME, "0022"));
        assert_eq!(s.rlimits, repro_model::settings::fixed_rlimits());
        assert_eq!(s.memory_bytes, DEFAULT_MEMORY);
        assert!(s.supervised && s.identity.is_some() && s.cpu_affinity.len() <= 1);
        assert_eq!(s.sched, repro_model::SchedSettings::default());
        let d = RunRequest::prepare(&opts()).unwrap().settings;
        assert_eq!((d.dir_order, d.hostname.as_str()), (DirOrder::Sorted, HOSTNAME));
        let o = RunOptions { sched: Some("pct".into()), sched_seed: Some(9), ..opts() };
        let p = RunRequest::prepare(&o).unwrap().settings;
        assert_eq!(p.sched, repro_model::SchedSettings { policy: repro_model::SchedPolicy::Pct, seed: 9 });
    }

    #[test]
    fn the_init_config_follows_the_settings() {
        let mut req = RunRequest::prepare(&RunOptions { dir_order: Some("reversed".into()), ..opts() }).unwrap();
        req.state_dir = PathBuf::from(&req.settings.cwd).join(".repro");
        let extras = RunExtras { record_access: true, host_network: true, ..Default::default() };
        let trees = [(TreeRole::Cwd, PathBuf::from(&req.settings.cwd))];
        let cfg = init_config(&req, &extras, &trees, &etc_files("box"), &[]).unwrap();
        let det = cfg.determinism.as_ref().unwrap();
        assert_eq!((det.dir_order, det.record_access, det.seed), (DirOrder::Reversed, true, 0));
        assert_eq!((cfg.umask, cfg.no_aslr, cfg.host_network), (UMASK, true, true));
        assert_eq!(cfg.trees, [TreeRole::Cwd]);
        // The state directory inside the working directory is hidden from the guest.
        assert_eq!(cfg.hide, [req.state_dir.to_string_lossy().into_owned()]);
        assert!(cfg.root.starts_with(&format!("/proc/self/fd/{RUN_DIR_FD}/")));
        assert_eq!(cfg.etc.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["hostname", "hosts", "resolv.conf"]);
        req.settings.supervised = false;
        assert!(init_config(&req, &extras, &[], &[], &[]).unwrap().determinism.is_none());
        req.settings.rlimits.push(repro_model::run::Rlimit { resource: "cpu".into(), soft: 1, hard: 1 });
        assert!(init_config(&req, &extras, &[], &[], &[]).is_err());
    }

    #[test]
    fn bad_options_name_the_argument_and_the_expected_form() {
        let cases = [
            (RunOptions { dir_order: Some("sideways".into()), ..opts() }, "--dir-order 'sideways'", "shuffled:SEED"),
            (RunOptions { hostname: Some("a b".into()), ..opts() }, "--hostname 'a b'", "letters, digits"),
            (RunOptions { cpus: 0, ..opts() }, "--cpus", "at least 1"),
            (RunOptions { sched: Some("fifo".into()), ..opts() }, "--sched 'fifo'", "round-robin"),
            (RunOptions { command: vec![], ..opts() }, "CMD", "no command given"),
        ];
        for (o, argument, expected) in cases {
            let e = RunRequest::prepare(&o).unwrap_err();
            assert_eq!(e.exit_code(), ExitCode::Usage.code(), "{e}");
            let text = e.to_string();
            assert!(text.starts_with(argument) && text.contains(expected), "{text}");
        }
    }
}
