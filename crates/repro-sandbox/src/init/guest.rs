//! Starting the guest (with or without the determinism supervisor), reaping, and reporting how it ended.

use std::ffi::CString;
use std::path::Path;

use repro_model::run::{Determinism, RunOutcome};
use repro_model::ExitCode;
use repro_sys::ns::{self, ChildExit};

use super::{
    libc_sig, signal_name, Accessed, DetSettings, InitConfig, TapeIo, TapesOut, INIT_SIGNALS, STDERR_FD, STDOUT_FD,
};

/// Finds the program the way a shell would, with the guest's PATH, inside the new root.
fn resolve_program(cmd: &str, path_var: &str) -> Result<String, i32> {
    if cmd.contains('/') {
        return match ns::is_executable(cmd) {
            Ok(()) if Path::new(cmd).is_dir() => Err(13),
            Ok(()) => Ok(cmd.to_string()),
            Err(errno) => Err(errno),
        };
    }
    let mut denied = false;
    for dir in path_var.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let cand = format!("{dir}/{cmd}");
        if Path::new(&cand).is_file() {
            match ns::is_executable(&cand) {
                Ok(()) => return Ok(cand),
                Err(_) => denied = true,
            }
        }
    }
    Err(if denied { 13 } else { 2 })
}

fn exec_failed(cmd: &str, errno: i32, hint: Option<&str>) -> (RunOutcome, i32) {
    let message = ns::strerror(errno);
    match hint.filter(|_| errno == 2) {
        Some(h) => eprintln!("repro: cannot execute '{cmd}': {message} ({h})"),
        None => eprintln!("repro: cannot execute '{cmd}': {message}"),
    }
    let code = if errno == 2 { ExitCode::NotFound.code() } else { ExitCode::NotExecutable.code() };
    (RunOutcome::ExecFailed { errno, message }, code)
}

pub(super) fn run_guest(
    cfg: &InitConfig,
    determinism: &mut Determinism,
    (accessed, stream): (&mut Vec<Accessed>, Option<repro_tracer::AccessStream>),
    (tapes, rdrand_clean): (&mut TapesOut, &mut Vec<repro_model::init::ScannedFile>),
    warnings: &mut Vec<String>,
) -> (RunOutcome, i32) {
    // `repro run` refuses an empty command; an empty name would fail below as not found.
    let cmd = cfg.argv.first().cloned().unwrap_or_default();
    let path_var = cfg.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or(crate::env::PATH);
    let sigfd = match ns::signalfd(&INIT_SIGNALS) {
        Ok(f) => f,
        Err(x) => return (RunOutcome::SetupFailed { message: x.to_string() }, ExitCode::Setup.code()),
    };
    // Resolve from the working directory, as the guest would.
    if let Err(x) = std::env::set_current_dir(&cfg.cwd) {
        let m = format!("cannot enter the working directory {}: {x}", cfg.cwd);
        eprintln!("repro: sandbox setup failed: {m}");
        return (RunOutcome::SetupFailed { message: m }, ExitCode::Setup.code());
    }
    let program = match resolve_program(&cmd, path_var) {
        Ok(p) => p,
        Err(errno) => return exec_failed(&cmd, errno, cfg.exec_hint.as_deref()),
    };
    // Cannot fail: the NUL bytes are removed first.
    let cs = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
    let argv: Vec<CString> = cfg.argv.iter().map(|a| cs(a)).collect();
    let envp: Vec<CString> = cfg.env.iter().map(|(k, v)| cs(&format!("{k}={v}"))).collect();
    // Docker's capabilities and no_new_privs; the guest's seccomp rules are in the supervisor's filter, or without
    // the supervisor in the host-socket guard's (see `spawn_plain`).
    let confine = match repro_sys::confine::Confinement::docker_default(false) {
        Ok(c) => c,
        Err(x) => {
            let m = format!("cannot build the guest's seccomp filter: {x}");
            eprintln!("repro: sandbox setup failed: {m}");
            return (RunOutcome::SetupFailed { message: m }, ExitCode::Setup.code());
        }
    };
    repro_sys::startup::mark("init: guest's confinement built");
    match super::enter_run_cgroup() {
        Ok(warning) => warnings.extend(warning),
        Err(x) => {
            let m = x.to_string();
            eprintln!("repro: sandbox setup failed: {m}");
            return (RunOutcome::SetupFailed { message: m }, ExitCode::Setup.code());
        }
    }
    let setup = ns::GuestSetup {
        umask: cfg.umask,
        no_aslr: cfg.no_aslr,
        rlimits: cfg.rlimits.clone(),
        cpus: cfg.cpus.clone(),
        fds: vec![(STDOUT_FD, 1), (STDERR_FD, 2)],
        close: vec![STDOUT_FD, STDERR_FD],
        cwd: cs(&cfg.cwd),
        confine: Some(confine),
    };
    let exit = match &cfg.determinism {
        None => match spawn_plain(&cs(&program), &argv, &envp, &setup, &sigfd) {
            Ok(exit) => exit,
            Err(failed) => return failed(&cmd),
        },
        Some(det) => {
            match supervised(
                cs(&program),
                argv,
                envp,
                &setup,
                det,
                sigfd,
                determinism,
                (accessed, stream),
                (cfg, tapes, rdrand_clean),
            ) {
                Ok(exit) => exit,
                Err(failed) => return failed(&cmd),
            }
        }
    };
    let outcome = match exit {
        ChildExit::Exited(code) => RunOutcome::Exited { code },
        ChildExit::Signaled(signal) => RunOutcome::Signaled { signal, name: signal_name(signal) },
    };
    (outcome, exit.code())
}

/// How a failed start is reported: a function of the command name.
type Failed = Box<dyn FnOnce(&str) -> (RunOutcome, i32)>;

fn setup_failed(m: String) -> Failed {
    Box::new(move |_| {
        eprintln!("repro: sandbox setup failed: {m}");
        (RunOutcome::SetupFailed { message: m }, ExitCode::Setup.code())
    })
}

/// Starts the guest without the supervisor and waits for it. Its filter (the guest's seccomp rules) notifies the
/// calls that may reach a host daemon's UNIX socket; a thread of this init answers them
/// ([`repro_tracer::serve_socket_guard`]) until the last guest task is gone.
fn spawn_plain(
    program: &CString,
    argv: &[CString],
    envp: &[CString],
    setup: &ns::GuestSetup,
    sigfd: &std::os::fd::OwnedFd,
) -> Result<ChildExit, Failed> {
    use repro_sys::spawn::SpawnError;
    let filter = repro_tracer::socket_guard_filter().map_err(|e| setup_failed(e.to_string()))?;
    let mut pre_exec = || -> std::io::Result<()> {
        ns::apply_guest_setup(setup).map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno))
    };
    let failed = |e: SpawnError| -> Failed {
        match e {
            SpawnError::Exec(errno) => Box::new(move |cmd| exec_failed(cmd, errno, None)),
            SpawnError::PreExec(errno) => setup_failed(format!("setting up the guest failed: {}", ns::strerror(errno))),
            SpawnError::Filter(errno) => {
                setup_failed(format!("installing the guest's seccomp filter failed: {}", ns::strerror(errno)))
            }
            SpawnError::Io(x) => setup_failed(format!("starting the guest failed: {x}")),
        }
    };
    let pending = repro_sys::spawn::spawn_guest(program, argv, envp, &filter, false, &mut pre_exec).map_err(failed)?;
    let guest = pending.pid;
    let listener = pending.listener.try_clone().map_err(|x| setup_failed(format!("the guard's listener: {x}")))?;
    let served = std::thread::Builder::new()
        .name("repro-socket-guard".into())
        .spawn(move || repro_tracer::serve_socket_guard(listener));
    if let Err(x) = served {
        let _ = ns::kill(guest, libc_sig::KILL);
        let _ = ns::wait_child(guest, false);
        return Err(setup_failed(format!("starting the host-socket guard failed: {x}")));
    }
    if let Err(e) = pending.release() {
        // The child reported its failed exec and exits.
        let _ = ns::wait_child(guest, false);
        return Err(failed(e));
    }
    // The init keeps no end of the output pipes: they close when the guest's last process does.
    ns::close_raw(STDOUT_FD);
    ns::close_raw(STDERR_FD);
    let exit = wait_guest(guest, sigfd);
    // The idle AF_UNIX connector is a child of the init: it must not keep the init from seeing its last child.
    repro_sys::sockconnect::retire();
    Ok(exit)
}

/// Starts the guest under the determinism supervisor and waits for it. Signals for the guest are forwarded (to
/// every guest process, see [`forward`]) by a thread started once the guest runs.
#[allow(clippy::too_many_arguments)]
fn supervised(
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    setup: &ns::GuestSetup,
    det: &DetSettings,
    sigfd: std::os::fd::OwnedFd,
    determinism: &mut Determinism,
    (accessed, stream): (&mut Vec<Accessed>, Option<repro_tracer::AccessStream>),
    (init, tapes, rdrand_clean): (&InitConfig, &mut TapesOut, &mut Vec<repro_model::init::ScannedFile>),
) -> Result<ChildExit, Failed> {
    let tape_cfg = &init.tapes;
    use repro_tracer::tape::{NetMode, ProcMode};
    let network = match &tape_cfg.network {
        TapeIo::Off => NetMode::Off,
        TapeIo::Record => NetMode::Record,
        TapeIo::Replay(t) => NetMode::Replay(t.clone()),
    };
    let proc = match &tape_cfg.proc {
        TapeIo::Off => ProcMode::Off,
        TapeIo::Record => ProcMode::Record,
        TapeIo::Replay(t) => ProcMode::Replay(t.clone()),
    };
    let mut pre_exec = || -> std::io::Result<()> {
        ns::apply_guest_setup(setup).map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno))
    };
    let spec = repro_tracer::GuestSpec { program, argv, envp, pre_exec: &mut pre_exec };
    let cfg = repro_tracer::DetConfig {
        seed: det.seed,
        epoch_unix_secs: det.epoch_unix_secs,
        clock_step_ns: det.clock_step_ns,
        cpus: det.cpus,
        record_access: det.record_access,
        hostname: det.hostname.clone(),
        dir_order: det.dir_order,
        tapes: repro_tracer::tape::TapeConfig { network, proc },
        access_stream: stream,
        confine: true,
        host_network: init.host_network,
        disk: repro_detcore::statfs::DiskLimit { bytes: init.disk_bytes, inodes: init.disk_inodes },
        own_network: matches!(tape_cfg.network, TapeIo::Off),
        stuck_after: (det.stuck_after_ms > 0).then(|| std::time::Duration::from_millis(det.stuck_after_ms)),
        // A replayed pack's root has the captured host's times when the pack recorded them; an older pack's root
        // was laid out with the times of its layout, so they are pinned.
        host_file_times: (init.root_source.is_none() || init.root_times).then(|| std::path::PathBuf::from(&init.cwd)),
        root_installed: init.root_source.is_some() && init.root_times,
        rdrand_clean: det.rdrand_clean.clone(),
        sched: Some(repro_tracer::sched::SchedConfig {
            settings: det.sched,
            cpus: setup.cpus.clone(),
            spin_limit: std::time::Duration::from_millis(det.spin_limit_ms),
            script: det.sched_script.clone(),
            log: det.sched_log,
        }),
    };
    let mut sigfd = Some(sigfd);
    let mut on_spawn = |_guest: i32| {
        // The guest has its own copies of the output pipes now.
        ns::close_raw(STDOUT_FD);
        ns::close_raw(STDERR_FD);
        if let Some(fd) = sigfd.take() {
            std::thread::spawn(move || {
                repro_tracer::sched::supervisor_thread();
                loop {
                    match ns::read_signal(&fd) {
                        Ok(libc_sig::CHLD) => {}
                        Ok(sig) => forward(sig),
                        Err(_) => return,
                    }
                }
            });
        }
    };
    match repro_tracer::supervise(spec, &cfg, &mut on_spawn) {
        Ok(out) => {
            determinism.not_enforced = out.not_enforced;
            determinism.mediated = out.stats.mediated;
            determinism.tasks_created = out.stats.tasks_created;
            determinism.execs = out.stats.execs;
            if let Some(stuck) = &out.stuck {
                eprintln!("[repro] the guest is stuck: {stuck}");
            }
            determinism.stuck = out.stuck;
            determinism.schedule = out.schedule;
            *rdrand_clean = out.rdrand_clean;
            determinism.warnings = out.stats.warnings.into_iter().collect();
            *accessed = out
                .accessed
                .into_iter()
                .map(|a| {
                    let (path, path_hex) = repro_model::pathenc::encode(a.path.as_os_str());
                    Accessed { path, path_hex, kinds: a.kinds }
                })
                .collect();
            tapes.network_events = out.tapes.network.as_ref().map_or(0, |t| t.events.len() as u64);
            tapes.proc_reads = out.tapes.proc.as_ref().map_or(0, |t| t.reads.len() as u64);
            tapes.network = out.tapes.network;
            tapes.proc = out.tapes.proc;
            tapes.diverged = out.diverged;
            Ok(match out.exit {
                repro_tracer::GuestExit::Exited(c) => ChildExit::Exited(c),
                repro_tracer::GuestExit::Signaled(s) => ChildExit::Signaled(s),
            })
        }
        Err(repro_tracer::TracerError::Exec { errno, .. }) => Err(Box::new(move |cmd| exec_failed(cmd, errno, None))),
        Err(e) => Err(setup_failed(e.to_string())),
    }
}

/// Forwards a signal `repro run` passed on (SIGINT, SIGTERM, SIGHUP) to the whole guest: `kill(-1)` from the
/// namespace's PID 1 reaches every process of the namespace but the init itself, so a shell's children get it as
/// well as the shell (as a terminal's Ctrl-C reaches the whole foreground process group), and so do processes in
/// process groups or sessions of their own. Only the guest's own status ends the run, as before.
fn forward(sig: i32) {
    // Only ESRCH (every guest process has exited meanwhile) can fail it, and ns::kill takes that as done.
    let _ = ns::kill(-1, sig);
}

fn wait_guest(guest: i32, sigfd: &std::os::fd::OwnedFd) -> ChildExit {
    loop {
        // Reap whatever has exited; the guest's own status ends the run.
        loop {
            match ns::wait_child(-1, true) {
                Ok(Some((pid, exit))) if pid == guest => return exit,
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => return ChildExit::Exited(ExitCode::Setup.code()),
            }
        }
        match ns::read_signal(sigfd) {
            Ok(libc_sig::CHLD) => {}
            Ok(sig) => forward(sig),
            Err(_) => return ChildExit::Exited(ExitCode::Setup.code()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn programs_resolve_through_path() {
        assert_eq!(resolve_program("sh", "/nonexistent:/bin").unwrap(), "/bin/sh");
        assert_eq!(resolve_program("no-such-program-xyz", "/bin").unwrap_err(), 2);
        let d = tempfile::tempdir().unwrap();
        let plain = d.path().join("plain");
        fs::write(&plain, "x").unwrap();
        fs::set_permissions(&plain, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(resolve_program(&plain.to_string_lossy(), "/bin").unwrap_err(), 13);
        assert_eq!(resolve_program(&d.path().to_string_lossy(), "/bin").unwrap_err(), 13);
        assert_eq!(resolve_program("/no/such", "/bin").unwrap_err(), 2);
    }
}
