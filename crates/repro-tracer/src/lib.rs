//! The determinism supervisor: the transport that carries the guest's mediated syscalls to the
//! [`DeterminismController`](repro_detcore::DeterminismController).
//!
//! Shape (see docs/determinism.md):
//! - a seccomp-bpf filter installed in the child before exec returns USER_NOTIF for the mediated
//!   syscalls only; everything else runs natively. A notify thread answers them, writing results with
//!   process_vm_writev and checking SECCOMP_IOCTL_NOTIF_ID_VALID after reading guest memory;
//! - ptrace (PTRACE_SEIZE, exec/clone/fork/vfork events, EXITKILL) on the calling thread, for the rare
//!   events: at every exec the vDSO is replaced by ours (AT_SYSINFO_EHDR pointed at an image of ours
//!   that answers clock reads in-process from a page shared with the supervisor; see [`vdso`]), or,
//!   when that fails, disabled (AT_SYSINFO_EHDR = 0, so libc falls back to real syscalls, which the
//!   filter mediates); the 16 AT_RANDOM bytes are rewritten from the seeded stream; rdtsc/rdtscp trap
//!   with PR_SET_TSC and are emulated at the SIGSEGV stop.
//!
//! One syscall's path, in files:
//!
//! ```text
//! guest --seccomp USER_NOTIF--> transport/notify.rs   recv, then respond (value, errno, continue, ADDFD, defer)
//!                                     |         ^
//!                               decode.rs       |     raw (nr, args) -> typed Syscall
//!                                     v         |
//!                             handlers/mod.rs dispatch by family: time, timers, entropy, identity, files,
//!                                     |               procfs, statfs, waits, ports, unix (host sockets),
//!                                     |               net and proc_tape (the tapes), process
//!                       Guest (guest.rs): memory, fds, paths, ids, "still pending"   (TaskGuest / FakeGuest)
//!                                     v
//!                 repro_detcore::DeterminismController decides (all policy; no kernel there)
//! ```
//! ptrace events (exec, fork, the rdtsc trap) go through the trace loop below and `exec.rs` to the same
//! controller. To mediate a new syscall: a variant in `decode.rs` (and `decode::MEDIATED` if always notified),
//! its answer in the family's file under `handlers/` with its policy as a controller method, a unit test over
//! `FakeGuest`. A new tape: its record type in `repro_model::tape`, its mode in `tape.rs`, its calls in
//! `handlers/net.rs` or `handlers/proc_tape.rs` (or a file of its own), its replay policy in
//! `repro_detcore::tapes`.

mod access;
pub use access::AccessStream;
mod decode;
mod elfsym;
mod exec;
mod guest;
mod handlers;
mod rdrand;
mod reply;
pub mod sched;
mod schedlog;
mod state;
mod stats;
pub use stats::SupervisorStats;
pub mod tape;
mod transport;
pub use transport::guard::{serve_socket_guard, socket_guard_filter, GuardError};
pub mod vdso;

pub use access::AccessedPath;

use std::collections::HashSet;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

use state::{lock, Shared, SharedRef};

use repro_detcore::{ControllerConfig, DeterminismController};
use repro_sys::ptrace::{self, Event, Options};
use repro_sys::seccomp::{BpfFilter, Listener, Rules};
use repro_sys::spawn::{self, SpawnError};

/// What the guest's view of the world is a function of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetConfig {
    /// Seeds the entropy stream (getrandom, /dev/urandom, AT_RANDOM, uuid, boot_id).
    pub seed: u64,
    /// Logical CLOCK_REALTIME at the start of the run.
    pub epoch_unix_secs: i64,
    /// Logical nanoseconds each clock read advances the clock by; 0 freezes time between events.
    pub clock_step_ns: u64,
    /// CPUs as seen by the guest (nproc, sched_getaffinity, /proc/cpuinfo, /sys cpu lists).
    pub cpus: u32,
    /// Record every path the guest opens, executes, maps, stats, lists or reads as a link
    /// ([`GuestOutcome::accessed`]); adds a few syscalls to the filter (see `access.rs`).
    pub record_access: bool,
    /// The host name the guest sees in uname (the sandbox sets the same UTS name).
    pub hostname: String,
    /// The order of directory listings.
    pub dir_order: repro_detcore::DirOrder,
    /// The network and /proc tapes to record or replay (see `tape.rs`); off by default.
    pub tapes: tape::TapeConfig,
    /// With `record_access`: a file to which each path the guest opens, executes or maps is appended (one per
    /// line, on first use) while it runs, so that a capture can start packing before the guest ends.
    pub access_stream: Option<access::AccessStream>,
    /// Put the guest's seccomp policy ([`repro_sys::confine::guest_rules`]: Docker's refusals, EPERM) in the
    /// supervisor's filter, decided before the notify rules.
    pub confine: bool,
    /// The guest shares the host's network (`repro capture --network record`): ports bound to 0 stay the
    /// kernel's choice, with a warning.
    pub host_network: bool,
    /// The run's writable layer (`--disk`): the size and inodes statfs reports for writable file systems.
    pub disk: repro_detcore::statfs::DiskLimit,
    /// The guest runs in a network namespace of its own (only `lo`): its sockets can only be fed by the guest,
    /// so waits on them take part in logical time like waits on its pipes (see `handlers/waits.rs`). False
    /// under the host's network; ignored while the network is taped (the tape is outside the guest).
    pub own_network: bool,
    /// The deadlock watchdog: when every guest task has waited this long (wall time) in a wait only another
    /// guest task could end, with nothing changing and no deadline to jump to, the guest is stopped and
    /// [`GuestOutcome::stuck`] says where each task waited. `None`: never.
    pub stuck_after: Option<std::time::Duration>,
    /// `Some(working directory)`: the guest's root is the host's, so files of the host's installation (disk file
    /// systems outside the working directory) that predate the run keep their times (see
    /// [`repro_detcore::FileOrigin`]). `None` (a replayed pack's root, or no sandbox): every file's times before
    /// the run are pinned.
    pub host_file_times: Option<std::path::PathBuf>,
    /// With `host_file_times`: the guest's `/` is a replayed pack's root that got the captured times back, and
    /// counts as the installation whatever file system holds it.
    pub root_installed: bool,
    /// Files known (from earlier runs) to hold no RDRAND/RDSEED: not scanned again while unchanged.
    pub rdrand_clean: Vec<repro_model::init::ScannedFile>,
    /// The deterministic scheduler (see sched.rs): `None`, the kernel schedules the guest's threads.
    pub sched: Option<sched::SchedConfig>,
}

impl Default for DetConfig {
    /// Seed 0, the default epoch of every run ([`repro_model::run::DEFAULT_EPOCH`], 2025-01-01T00:00:00Z), a clock
    /// that ticks 1 µs per read, one CPU.
    fn default() -> Self {
        DetConfig {
            seed: 0,
            epoch_unix_secs: repro_model::run::DEFAULT_EPOCH,
            clock_step_ns: 1000,
            cpus: 1,
            record_access: false,
            hostname: "repro".into(),
            dir_order: repro_detcore::DirOrder::Sorted,
            tapes: Default::default(),
            access_stream: None,
            confine: true,
            host_network: false,
            disk: state::default_disk(),
            own_network: false,
            stuck_after: None,
            host_file_times: None,
            root_installed: false,
            rdrand_clean: Vec::new(),
            sched: None,
        }
    }
}

/// The program to run under supervision.
pub struct GuestSpec<'a> {
    /// Resolved path to execve.
    pub program: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// Runs in the forked child just before the seccomp filter is installed and execve is called
    /// (the sandbox uses it for setsid, umask, personality, rlimits, affinity). Must only do
    /// async-signal-safe work.
    pub pre_exec: &'a mut dyn FnMut() -> std::io::Result<()>,
}

/// How the guest's top process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestExit {
    Exited(i32),
    Signaled(i32),
}

/// The result of a supervised run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestOutcome {
    pub exit: GuestExit,
    /// "determinism not enforced" reasons, empty when everything was enforced.
    pub not_enforced: Vec<String>,
    pub stats: SupervisorStats,
    /// The paths the guest used, sorted (empty unless [`DetConfig::record_access`]).
    pub accessed: Vec<AccessedPath>,
    /// The tapes recorded (with [`DetConfig::tapes`] recording).
    pub tapes: tape::RecordedTapes,
    /// Why a replay stopped the guest: it did something the tape does not have.
    pub diverged: Option<String>,
    /// The watchdog stopped the guest ([`DetConfig::stuck_after`]): its tasks and the waits they were stuck in.
    pub stuck: Option<String>,
    /// The files this run scanned and found free of RDRAND/RDSEED, beyond [`DetConfig::rdrand_clean`].
    pub rdrand_clean: Vec<repro_model::init::ScannedFile>,
    /// The scheduler's decisions ([`sched::SchedConfig::log`]).
    pub schedule: Option<repro_model::SchedLog>,
}

/// Errors of the supervisor.
#[derive(Debug, thiserror::Error)]
pub enum TracerError {
    /// execve of the guest failed (ENOENT: the sandbox exits 127; EACCES: 126).
    #[error("cannot execute {program:?}: {}", std::io::Error::from_raw_os_error(*errno))]
    Exec { program: String, errno: i32 },
    /// The caller's pre-exec hook failed in the child.
    #[error("pre-exec setup of the guest failed: {}", std::io::Error::from_raw_os_error(*errno))]
    PreExec { errno: i32 },
    /// The seccomp filter could not be installed.
    #[error("installing the seccomp filter failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Filter { errno: i32 },
    /// A system call of the supervisor failed.
    #[error("{context} (pid {pid}): {source}")]
    Sys { context: &'static str, pid: i32, source: std::io::Error },
}

/// When the run starts, on the coarse clock that file times come from: a file the guest writes in the same tick
/// carries this very time and so counts as written during the run (with the precise clock it could look older
/// than the run's start, and be pinned as an input: `touch x.c && make` would then rebuild nothing).
fn now_real_ns() -> i128 {
    repro_sys::ns::realtime_coarse_ns()
}

/// Runs the guest under the supervisor and returns when its top process has exited (after its
/// remaining descendants are killed and reaped). The caller must be single-threaded; it is normally
/// PID 1 of a fresh PID namespace. `on_spawn` is called with the guest's pid once it runs.
pub fn supervise(
    spec: GuestSpec<'_>,
    cfg: &DetConfig,
    on_spawn: &mut dyn FnMut(i32),
) -> Result<GuestOutcome, TracerError> {
    let mut syscalls: Vec<u32> = decode::MEDIATED.iter().map(|&n| n as u32).collect();
    if cfg.record_access {
        syscalls.extend(access::record_only_syscalls());
    }
    syscalls.extend(tape::net_syscalls(&cfg.tapes));
    // The scheduler: where it serializes the guest, futex and sched_yield are scheduling points too. This thread
    // (the tracer) runs SCHED_FIFO above the guest, which inherits it at the fork and lowers itself.
    // The CPUs this process may use, before it is pinned to the guest's: the spin-loop watchdog runs on the others.
    let host_cpus = repro_sys::ns::allowed_cpus();
    // Not while the network is taped: a taped socket's reads and polls run on the supervisor's threads, and a
    // guest thread retrying one in a loop kept the thread that must answer from running (as before the scheduler,
    // the kernel interleaves the guest's threads then; said as a warning).
    let taped = !matches!(cfg.tapes.network, tape::NetMode::Off);
    let sched_cfg = cfg.sched.as_ref().filter(|_| !taped);
    let sched_cpu_error = sched_cfg.map(sched::pin_supervisor);
    let tracer_rt = matches!(sched_cpu_error, Some(Ok(())))
        && repro_sys::sched::set_fifo(0, repro_sys::sched::TRACER_RT_PRIORITY).is_ok();
    let scheduling = matches!(sched_cpu_error, Some(Ok(())));
    if let Some(c) = sched_cfg.filter(|_| scheduling) {
        syscalls.extend(sched::scheduling_syscalls(c.settings.points));
    }
    let (guarded, guarded_when) = handlers::unix::notified();
    syscalls.extend(guarded);
    let mut when = handlers::waits::conditional_syscalls(scheduling);
    when.extend(guarded_when);
    let mut rules = if cfg.confine { repro_sys::confine::guest_rules() } else { Rules::new() };
    let filter = rules
        .add_notify(&syscalls, &when)
        .and_then(|()| BpfFilter::compile(&rules))
        .map_err(|source| TracerError::Sys { context: "building the seccomp filter", pid: 0, source })?;
    repro_sys::startup::mark("supervisor: seccomp filter compiled");
    let ctl = DeterminismController::new(&ControllerConfig {
        seed: cfg.seed,
        epoch_unix_secs: cfg.epoch_unix_secs,
        clock_step_ns: cfg.clock_step_ns,
        cpus: cfg.cpus,
        machine: std::env::consts::ARCH.to_string(),
        run_start_real_ns: now_real_ns(),
        nodename: cfg.hostname.clone(),
        dir_order: cfg.dir_order,
    });
    let (vdso, vdso_unavailable) = match vdso::ClockPage::new(&ctl.clock, cfg.epoch_unix_secs) {
        Ok(p) => (Some(p), None),
        Err(why) => (None, Some(format!("the replacement vDSO is unavailable: {why}"))),
    };
    // Before the guest exists: what it will inherit from us is connected to the world outside.
    repro_sys::startup::mark("supervisor: controller and vDSO page ready");
    let inherited_fds = handlers::waits::inherited_fds();
    let program_name = spec.program.to_string_lossy().into_owned();
    let serialize = matches!(sched_cpu_error, Some(Ok(())));
    let caller_pre_exec = spec.pre_exec;
    let mut pre_exec = || -> std::io::Result<()> {
        caller_pre_exec()?;
        if serialize {
            // Every thread and child of the guest inherits it. A refusal (EPERM without RLIMIT_RTPRIO) is seen by
            // the parent below, which reads the guest's policy.
            let _ = repro_sys::sched::set_fifo(0, repro_sys::sched::GUEST_RT_PRIORITY);
            // The guest may not change priorities (as natively, where the limit is 0): nor rise to the tracer's.
            let _ = repro_sys::sched::limit_rt_priority(0);
        }
        Ok(())
    };
    let pending = spawn::spawn_guest(&spec.program, &spec.argv, &spec.envp, &filter, true, &mut pre_exec)
        .map_err(|e| spawn_error(e, &program_name, 0))?;
    let pid = pending.pid;
    repro_sys::startup::mark("supervisor: guest forked (stopped before exec)");
    let options = Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_EXITKILL;
    if let Err(source) = ptrace::seize(pid, options) {
        // The guest is being discarded: only its death matters, and the error reported is the seize's.
        let _ = ptrace::kill_process(pid, libc::SIGKILL);
        let _ = ptrace::wait_any();
        return Err(TracerError::Sys { context: "PTRACE_SEIZE of the guest", pid, source });
    }
    repro_sys::startup::mark("supervisor: guest seized");
    let listener_fd = pending.listener.try_clone().map_err(|source| TracerError::Sys {
        context: "duplicating the seccomp listener",
        pid,
        source,
    })?;
    let (host_devs, run_files) = match &cfg.host_file_times {
        Some(cwd) => state::installed_files_here(cwd, cfg.root_installed),
        None => Default::default(),
    };
    let shared: SharedRef = Arc::new(Mutex::new(Shared {
        live: HashSet::from([pid]),
        pseudo_devs: state::pseudo_fs_devs(),
        host_devs,
        run_files,
        vdso,
        vdso_unavailable,
        inherited_fds,
        own_network: cfg.own_network && cfg.tapes.network == tape::NetMode::Off,
        stuck_after: cfg.stuck_after,
        access: cfg.record_access.then(|| access::AccessLog::new(cfg.access_stream.clone())),
        tape: tape::TapeState::new(&cfg.tapes),
        host_network: cfg.host_network,
        disk: cfg.disk,
        rdrand: rdrand::ScanCache::with_clean(&cfg.rdrand_clean),
        sched: sched_cfg.map(|c| {
            let mut s = sched::SchedState::new(c);
            s.task_id(pid);
            match &sched_cpu_error {
                Some(Err(why)) => s.unavailable = Some(why.clone()),
                _ => match repro_sys::sched::policy_of(pid) {
                    Ok(libc::SCHED_FIFO) => s.active = true,
                    Ok(_) => {
                        s.unavailable = Some(
                            "the guest's threads could not be made SCHED_FIFO (no RLIMIT_RTPRIO: repro runs \
                             unprivileged?)"
                                .into(),
                        )
                    }
                    Err(e) => s.unavailable = Some(format!("reading the guest's scheduling policy: {e}")),
                },
            }
            s
        }),
        ..Shared::new(ctl)
    }));
    let waits_listener = pending.listener.try_clone().map_err(|source| TracerError::Sys {
        context: "duplicating the seccomp listener",
        pid,
        source,
    })?;
    let scheduler = {
        let shared = shared.clone();
        let listener = Listener::new(waits_listener);
        std::thread::Builder::new()
            .name("repro-waits".into())
            .spawn(move || {
                sched::supervisor_thread();
                handlers::waits::schedule(listener, shared)
            })
            .map_err(|source| TracerError::Sys { context: "starting the waits scheduler", pid, source })?
    };
    let notifier = {
        let shared = shared.clone();
        let listener = Listener::new(listener_fd);
        std::thread::Builder::new()
            .name("repro-notify".into())
            .spawn(move || {
                sched::supervisor_thread();
                transport::notify::serve(listener, shared)
            })
            .map_err(|source| TracerError::Sys { context: "starting the notify thread", pid, source })?
    };
    // The timers' watcher: fires a timer when every guest task waits for it (handlers/timers.rs).
    let watched = shared.clone();
    if std::thread::Builder::new()
        .name("repro-timers".into())
        .spawn(move || {
            sched::supervisor_thread();
            handlers::timers::watch(watched)
        })
        .is_err()
    {
        lock(&shared)
            .stats
            .warnings
            .insert("the timers' watcher could not start: a guest waiting for a timer hangs".into());
    }
    if cfg.sched.is_some() && taped {
        lock(&shared)
            .warn("the scheduler is off while the network is taped: threads interleave as the kernel likes".into());
    }
    if let Some(c) = sched_cfg.filter(|_| lock(&shared).sched.as_ref().is_some_and(|s| s.active)) {
        let watched = shared.clone();
        let limit = c.spin_limit;
        let others: Vec<usize> = host_cpus.iter().copied().filter(|x| !c.cpus.contains(x)).collect();
        if std::thread::Builder::new()
            .name("repro-spin-watch".into())
            // It keeps the tracer's real-time priority (above the guest's): it sleeps but for a few /proc reads a
            // tick, and so looks on time even when its CPU is taken by another run's real-time guest.
            .spawn(move || sched::watchdog(watched, limit, others))
            .is_err()
        {
            lock(&shared).warn("the spin-loop watchdog could not start: a spinning thread may hang the run".into());
        }
    }
    repro_sys::startup::mark("supervisor: threads started");
    if let Err(e) = pending.release() {
        // The guest is being discarded (the error reported is the release's): kill, reap, and let the notify
        // thread end; how it ended changes nothing.
        let _ = ptrace::kill_process(pid, libc::SIGKILL);
        while ptrace::wait_any().is_ok() {}
        let _ = notifier.join();
        {
            let mut sh = lock(&shared);
            sh.finished = true;
            sh.waits_cv.notify_all();
        }
        let _ = scheduler.join();
        return Err(spawn_error(e, &program_name, pid));
    }
    on_spawn(pid);
    repro_sys::startup::mark("supervisor: guest released");
    // Like the notify thread, this thread switches with the guest at every ptrace stop (exec, fork,
    // the rdtsc trap): with rdtsc trapped here too, those switches do not rewrite CR4.TSD (see
    // repro_sys::tsc). Nothing in the trace loop reads a clock; the setting is undone afterwards. Either failing
    // only costs speed.
    let _ = repro_sys::tsc::disable_for_this_thread();
    let exit = trace_loop(pid, &shared);
    if tracer_rt {
        // Back to what it was; only the speed of what follows depends on it.
        let _ = repro_sys::sched::set_other(0);
    }
    repro_sys::startup::mark("supervisor: guest exited");
    let _ = repro_sys::tsc::enable_for_this_thread();
    {
        let mut sh = lock(&shared);
        sh.finished = true;
        sh.waits_cv.notify_all();
    }
    let scheduler_panicked = scheduler.join().is_err();
    let exit = exit?;
    let notify_panicked = notifier.join().is_err();
    let mut sh = lock(&shared);
    if scheduler_panicked {
        sh.not_enforced
            .insert("the supervisor's waits scheduler failed (a panic): parked waits went unanswered".into());
    }
    if notify_panicked {
        sh.not_enforced.insert("the supervisor's notify thread failed (a panic): some calls went unanswered".into());
    }
    if sh.access.as_ref().is_some_and(|a| a.stream_failed) {
        sh.stats.warnings.insert("writing the access stream failed: a capture packs the paths only at the end".into());
    }
    if let Some(why) = sh.sched.as_ref().and_then(|s| s.unavailable.clone()) {
        let m = format!("the scheduler could not serialize the guest's threads: {why}");
        if sh.sched.as_ref().is_some_and(|s| s.threads_created > 0) {
            // Threads ran: the kernel interleaved them as it liked. (Processes only: as before the scheduler, the
            // order of their effects is the kernel's, said as a warning.)
            sh.not_enforced.insert(m);
        } else {
            sh.warn(m);
        }
    }
    let reads = sh.vdso.as_ref().map_or(0, |p| p.reads());
    sh.stats.vdso_clock_reads = reads;
    if reads > 0 {
        sh.stats.mediated.insert("vdso_clock_reads".into(), reads);
    }
    Ok(GuestOutcome {
        exit,
        not_enforced: sh.not_enforced.iter().cloned().collect(),
        stats: sh.stats.clone(),
        // Not recording paths or tapes: none.
        accessed: sh.access.as_ref().map(|a| a.finish()).unwrap_or_default(),
        tapes: sh.tape.as_mut().map(|t| t.finish()).unwrap_or_default(),
        diverged: sh.tape.as_ref().and_then(|t| t.diverged.clone()),
        stuck: sh.stuck.clone(),
        rdrand_clean: sh.rdrand.newly_clean(),
        schedule: sh.sched.as_mut().and_then(|s| s.log.take()),
    })
}

fn spawn_error(e: SpawnError, program: &str, pid: i32) -> TracerError {
    match e {
        SpawnError::Exec(errno) => TracerError::Exec { program: program.to_string(), errno },
        SpawnError::PreExec(errno) => TracerError::PreExec { errno },
        SpawnError::Filter(errno) => TracerError::Filter { errno },
        SpawnError::Io(source) => TracerError::Sys { context: "starting the guest", pid, source },
    }
}

const PTRACE_EVENT_FORK: i32 = 1;
const PTRACE_EVENT_VFORK: i32 = 2;
const PTRACE_EVENT_CLONE: i32 = 3;
const PTRACE_EVENT_EXEC: i32 = 4;

/// The ptrace loop: runs on the thread that attached until the top process has exited and every
/// other task is gone.
fn trace_loop(top: i32, shared: &SharedRef) -> Result<GuestExit, TracerError> {
    let mut exit: Option<GuestExit> = None;
    // Tasks whose first stop was seen (the top one had it before the guest ran).
    let mut started: std::collections::HashSet<i32> = [top].into();
    loop {
        lock(shared).tracer_busy = None;
        let mut ev = match ptrace::wait_any() {
            Ok(ev) => ev,
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => break,
            Err(source) => return Err(TracerError::Sys { context: "waitpid", pid: top, source }),
        };
        if let Event::PtraceEvent { tracee, .. } | Event::Signal { tracee, .. } = &ev {
            lock(shared).tracer_busy = Some(tracee.tid());
        }
        // An exec stop may end in another event (the task died while its vDSO was being installed).
        if let Event::PtraceEvent { event: PTRACE_EVENT_EXEC, .. } = ev {
            let Event::PtraceEvent { tracee, .. } = ev else { continue };
            let done = exec::on_exec(&tracee, shared);
            match done.gone {
                Some(gone) => ev = gone,
                None => {
                    let tid = tracee.tid();
                    // ESRCH: the task vanished (SIGKILL) since the stop; its exit event follows.
                    let _ = tracee.cont(None);
                    for sig in done.deferred {
                        // ESRCH: the task is gone, and with it the signal's target.
                        let _ = ptrace::kill_task(tid, sig);
                    }
                    continue;
                }
            }
        }
        match ev {
            Event::PtraceEvent { tracee, event, sig } => {
                let tid = tracee.tid();
                match event {
                    PTRACE_EVENT_FORK | PTRACE_EVENT_VFORK | PTRACE_EVENT_CLONE => {
                        if let Ok(child) = tracee.event_msg() {
                            let logging = lock(shared).sched.as_ref().is_some_and(|s| s.active && s.log.is_some());
                            // Read before the lock (/proc and memory reads), only when logging.
                            let created_at = if logging { schedlog::creator(tid) } else { None };
                            let mut sh = lock(shared);
                            sh.live.insert(child as i32);
                            sh.stats.tasks_created += 1;
                            if let Some(s) = sh.sched.as_mut() {
                                s.task_id(child as i32);
                                s.progress += 1;
                                if let Some(at) = created_at {
                                    s.created_at.insert(child as i32, at);
                                }
                                if event == PTRACE_EVENT_CLONE {
                                    s.threads_created += 1;
                                }
                            }
                        }
                    }
                    _ => {
                        // PTRACE_EVENT_STOP: a new task's first stop or a group stop. New tasks are
                        // recorded here too, in case their stop arrives before the parent's event.
                        let mut sh = lock(shared);
                        sh.live.insert(tid);
                        // A new task's first stop (SIGTRAP; a group stop carries the stopping signal): held at
                        // its start for the scheduler, a decision point.
                        let first = sig == libc::SIGTRAP && tid != top && started.insert(tid);
                        if let Some(s) = sh.sched.as_mut().filter(|s| first && s.active) {
                            if sched::hold_at_start(&tracee) {
                                s.starting.insert(tid);
                            }
                        }
                    }
                }
                // A task may vanish (SIGKILL) between the stop and the resume: ignore ESRCH.
                let _ = tracee.cont(None);
            }
            Event::Signal { tracee, sig } => {
                // Resuming fails only for a task that vanished (SIGKILL) since the stop: its exit event follows.
                if sig == libc::SIGSEGV && exec::emulate_rdtsc(&tracee, shared) {
                    let _ = tracee.cont(None);
                } else if sig == libc::SIGSTOP && sched::on_probe_stop(&tracee, shared) {
                    // The watchdog's probe, not the guest's signal.
                    let _ = tracee.cont(None);
                } else {
                    let _ = tracee.cont(if sig == 0 { None } else { Some(sig) });
                }
            }
            Event::Exited { tid, code } => {
                if tid == top {
                    exit = Some(GuestExit::Exited(code));
                    kill_remaining(shared, tid);
                }
                let mut sh = lock(shared);
                sh.live.remove(&tid);
                sh.futex_rewrites.remove(&tid);
                sh.parked.remove(&tid);
            }
            Event::Killed { tid, sig } => {
                if tid == top {
                    exit = Some(GuestExit::Signaled(sig));
                    kill_remaining(shared, tid);
                }
                let mut sh = lock(shared);
                sh.live.remove(&tid);
                sh.futex_rewrites.remove(&tid);
                sh.parked.remove(&tid);
            }
        }
    }
    exit.ok_or(TracerError::Sys {
        context: "the guest's exit status was never reported",
        pid: top,
        source: std::io::Error::from_raw_os_error(libc::ECHILD),
    })
}

/// The top process is gone: its remaining descendants are killed so the run ends.
fn kill_remaining(shared: &SharedRef, top: i32) {
    // The idle AF_UNIX connector is a child too: the loop's wait for the last child must not wait for it.
    repro_sys::sockconnect::retire();
    let live: Vec<i32> = lock(shared).live.iter().copied().filter(|&t| t != top).collect();
    for t in live {
        // ESRCH: already gone, which is what was wanted.
        let _ = ptrace::kill_task(t, libc::SIGKILL);
    }
}
