//! The stage of `repro run` that starts the sandbox: the cgroup, the cleanup process, the init cloned into new
//! namespaces with its descriptors, its id maps and idmapped trees, its release, and the pumps of its output.

use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;

use repro_model::init::ScannedFile;
use repro_model::run::Identity;
use repro_sys::ns::{self, flags};

use super::config::Configured;
use super::{spawn_beside, Echo, RunExtras, RunRequest};
use crate::cgroup::{Cgroup, Hierarchy};
use crate::init::{ACCESS_FD, CONFIG_FD, INIT_SIGNALS, RESULT_FD, STDERR_FD, STDOUT_FD, TREES_FD};
use crate::reaper::ReapJob;
use crate::rundir::RunDir;
use crate::SandboxError;

/// The started sandbox, as the rest of the run needs it until it returns.
pub(super) struct Sandbox {
    /// The init's pid (in our namespace).
    pub init_pid: i32,
    /// The signalfd for SIGCHLD and the interrupts (blocked from here on).
    pub sigfd: OwnedFd,
    /// The run's cgroup, if one could be made.
    pub cgroup: Option<Cgroup>,
    /// RLIMIT_NPROC of the init and the guest, when no cgroup bounds their tasks ([`bound_tasks_by_rlimit`]).
    pub pids_rlimit: Option<std::num::NonZeroU32>,
    /// The guest's identity (without idmapped trees if they failed).
    pub identity: Identity,
    /// The socket on which the init sends the writable layer's directory.
    pub layer_sock: OwnedFd,
}

/// What [`super::wait::wait_for_end`] consumes: the init's done pipe, the output pumps, its result memfd.
pub(super) struct Watch {
    pub done_r: OwnedFd,
    pub out_pump: JoinHandle<std::io::Result<u64>>,
    pub err_pump: JoinHandle<std::io::Result<u64>>,
    pub result_fd: OwnedFd,
    pub rdrand_known: Vec<ScannedFile>,
    /// Why the sandbox's setup failed before the guest started, if it did.
    pub setup_error: Option<String>,
}

/// What [`super::finish::tear_down`] consumes: the scratch directory and the cleanup process (or why it did
/// not start).
pub(super) struct Cleanup {
    pub scratch: PathBuf,
    pub reaper: Option<Child>,
    pub reaper_error: Option<std::io::Error>,
    pub reaper_pipe: Option<ChildStdin>,
}

/// Takes the request, `exe` (repro itself), the run's id and directory and what [`super::config::configure`]
/// gave; starts the cgroup, the cleanup process and the init, writes the id maps and lets the init go (or kills
/// it if its setup failed), and starts pumping its output. Gives the live sandbox, what waiting for it consumes
/// and what the teardown consumes; warnings are added to `warnings`.
#[allow(clippy::too_many_arguments)]
pub(super) fn start(
    req: &RunRequest,
    extras: &RunExtras,
    exe: &Path,
    echo: Echo,
    id: &str,
    dir: &RunDir,
    configured: Configured,
    warnings: &mut Vec<String>,
) -> Result<(Sandbox, Watch, Cleanup), SandboxError> {
    let s = &req.settings;
    let Configured { scratch, mut identity, trees, rdrand_known, cfg_fd, result_fd, access_fd, trees_tx, trees_rx } =
        configured;
    // The cgroup for the memory limit.
    let (cgroup, no_pids_cgroup) = Cgroup::for_run(&Hierarchy::detect(), id, (s.memory_bytes, s.pids_max), warnings);

    // With cgroup v1 the init joins the cgroup itself, through this file; else `repro run` moves it by its pid.
    let mut cgroup_tasks = cgroup.as_ref().and_then(|c| c.tasks_for_self()).and_then(|r| r.ok());
    let pids_tasks = cgroup.as_ref().and_then(|c| c.pids_tasks_for_self(warnings));
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
    let pids_rlimit = no_pids_cgroup.and_then(|why| bound_tasks_by_rlimit(init_pid, s.pids_max, &why, warnings));
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
    Ok((
        Sandbox { init_pid, sigfd, cgroup, pids_rlimit, identity, layer_sock },
        Watch { done_r, out_pump, err_pump, result_fd, rdrand_known, setup_error },
        Cleanup { scratch, reaper, reaper_error, reaper_pipe },
    ))
}

/// Without a cgroup's `pids.max` (`why`: an unprivileged caller without a delegated cgroup, a v1 host without
/// the pids hierarchy), `--pids` becomes the RLIMIT_NPROC of the init, set before it runs (the guest inherits
/// it and cannot raise it: that takes CAP_SYS_RESOURCE of the host's namespace). The kernel counts it per user
/// in the sandbox's own user namespace: the caller's other processes do not count, and an unprivileged caller's
/// guest has that one user. A guest root of `repro` run as root can switch among 65,536 mapped users, each
/// counted apart (root always has a cgroup there). Returns the limit set, or pushes why none is.
fn bound_tasks_by_rlimit(
    init_pid: i32,
    pids_max: u64,
    why: &str,
    warnings: &mut Vec<String>,
) -> Option<std::num::NonZeroU32> {
    // Checked at the start: 1 to 4194304 (the kernel's PID_MAX_LIMIT).
    let Some(n) = u32::try_from(pids_max).ok().and_then(std::num::NonZeroU32::new) else {
        warnings.push(format!("pids limit not enforced: {why}; --pids {pids_max} is no RLIMIT_NPROC"));
        return None;
    };
    match ns::set_rlimit_of(init_pid, ns::rlimit::NPROC, pids_max) {
        Ok(()) => Some(n),
        Err(e) => {
            warnings.push(format!("pids limit not enforced: {why}; RLIMIT_NPROC: {e}"));
            None
        }
    }
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
