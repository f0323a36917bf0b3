//! `repro __init`: PID 1 of the sandbox. It builds the guest's root, starts the guest, reaps every process,
//! forwards SIGINT/SIGTERM/SIGHUP to every guest process and exits with the guest's status.
//!
//! It is executed fresh (`/proc/self/exe __init fd:10`) by `repro run` in new user, mount, PID, network, UTS and IPC
//! namespaces, so it starts single-threaded with a clean address space. It reads its configuration from, and
//! writes its result to, descriptors `repro run` placed ([`CONFIG_FD`], [`RESULT_FD`]): the run directory
//! belongs to the host's user, whom the init no longer is. It makes itself non-dumpable (a guest cannot ptrace
//! it or read its memory). Just before it starts the guest it is in the run's cgroup (with cgroup v1 it moves
//! itself, through [`CGROUP_TASKS_FD`]; with v2 `repro run` moves it while it assembles the root, and says so on
//! [`CGROUP_FD`]) and enters a cgroup namespace, so the guest sees the run's cgroup as the root.

use std::fs;
use std::io::Write;
use std::path::Path;

use repro_model::run::{Determinism, RunOutcome};
use repro_model::ExitCode;
use repro_sys::ns;

pub use error::InitError;
use guest::run_guest;
use root::build_root;

pub use crate::signals::{libc_sig, signal_name, INIT_SIGNALS};
/// The messages that cross to and from the init live in repro-model; re-exported here for their users.
pub use repro_model::init::{Accessed, DetSettings, InitConfig, InitResult, TreeRole};
pub use repro_model::tape::{TapeIo, TapeSettings, TapesOut};
pub use root::{MASKED, NOT_BOUND, READ_ONLY};

mod cover;
mod error;
mod guest;
mod paths;
mod root;

/// The descriptor at which the init receives the guest's stdout pipe.
pub const STDOUT_FD: i32 = 3;
/// The descriptor at which the init receives the guest's stderr pipe.
pub const STDERR_FD: i32 = 4;
/// The descriptor at which the init receives a unix socket: it sends the writable layer's directory over it.
pub const LAYER_FD: i32 = 5;
/// A pipe on which `repro run` writes one byte when the init may start the guest: with cgroup v2 once it has
/// moved the init into the run's cgroup (a write to `cgroup.procs`, which waits for an RCU grace period, ~10 ms,
/// while the init starts and assembles the root); at once with v1 (the init moves itself, [`CGROUP_TASKS_FD`])
/// or without a cgroup (a warning of the run says so). So the guest and everything it starts are in the cgroup.
pub const CGROUP_FD: i32 = 6;
/// With cgroup v1: the run cgroup's `tasks` file, which `repro run` opened for writing: the init moves itself
/// there (it writes `0`: its own thread, without the wait of a move by pid; see
/// [`crate::cgroup::Cgroup::tasks_for_self`]) and `repro run` sends the byte on [`CGROUP_FD`] at once.
pub const CGROUP_TASKS_FD: i32 = 7;
/// A pipe on which the init writes one byte once its result is written and nothing of the guest is left (it has
/// no child: every process of the sandbox descends from it, and orphans come back to it). `repro run` then
/// reads the run's output and changes while the init exits (the teardown of its namespaces takes a millisecond).
pub const DONE_FD: i32 = 8;
/// With cgroup v1 and `pids.max` set: the `tasks` file of the run's cgroup in the pids hierarchy, which the init
/// writes `0` to beside [`CGROUP_TASKS_FD`] (see [`crate::cgroup::Cgroup::pids_tasks_for_self`]).
pub const CGROUP_PIDS_TASKS_FD: i32 = 9;
/// The descriptor from which the init reads its [`InitConfig`] (a memfd).
pub const CONFIG_FD: i32 = 10;
/// The descriptor to which the init writes its [`InitResult`] (a memfd `repro run` reads afterwards).
pub const RESULT_FD: i32 = 11;
/// With [`DetSettings::access_stream`]: the stream file, open for appending.
pub const ACCESS_FD: i32 = 12;
/// A socket on which `repro run` sends the detached idmapped mounts of [`InitConfig::trees`], in that order.
pub const TREES_FD: i32 = 13;

/// The run directory, open (received first on [`TREES_FD`]): the init reaches its files as `/proc/self/fd/14/NAME`,
/// never by their host path.
pub const RUN_DIR_FD: i32 = 14;

/// The init's entry point: `config` is `fd:N` (the descriptor the configuration is read from). Returns the exit
/// status.
pub fn main(config: &Path) -> i32 {
    // The result goes to a descriptor `repro run` reads afterwards: the run directory is not writable by the
    // guest's (mapped) root.
    let Some(result_fd) = ns_fd(RESULT_FD) else {
        eprintln!(
            "repro: sandbox setup failed: no result descriptor {RESULT_FD} (repro __init is started by repro run)"
        );
        return ExitCode::Setup.code();
    };
    repro_sys::startup::mark("init: started");
    let mut result_file = fs::File::from(result_fd);
    let cfg: InitConfig = match read_config(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("repro: sandbox setup failed: cannot read the configuration ({}): {e}", config.display());
            return ExitCode::Setup.code();
        }
    };
    let stream = match cfg.determinism.as_ref().and_then(|d| d.access_stream.as_ref()) {
        Some(_) => ns_fd(ACCESS_FD).map(|fd| repro_tracer::AccessStream(std::sync::Arc::new(fs::File::from(fd)))),
        None => None,
    };
    let mut determinism = Determinism { supervised: cfg.determinism.is_some(), ..Default::default() };
    let mut accessed = Vec::new();
    let mut tapes = TapesOut::default();
    let mut rdrand_clean = Vec::new();
    let mut warnings = Vec::new();
    let (outcome, status) = match harden().and_then(|_| setup(&cfg)) {
        Err(msg) => {
            eprintln!("repro: sandbox setup failed: {msg}");
            (RunOutcome::SetupFailed { message: msg.to_string() }, ExitCode::Setup.code())
        }
        Ok(()) => {
            run_guest(&cfg, &mut determinism, (&mut accessed, stream), (&mut tapes, &mut rdrand_clean), &mut warnings)
        }
    };
    repro_sys::startup::mark("init: guest ended");
    let res = InitResult { outcome, exit_status: status, determinism, accessed, tapes, rdrand_clean, warnings };
    // Without a result `repro run` reports the init ended without one; the reason is said here, on stderr.
    match serde_json::to_vec(&res) {
        Ok(json) => {
            if let Err(e) = result_file.write_all(&json) {
                eprintln!("repro: sandbox: cannot write the run's result to descriptor {RESULT_FD}: {e}");
            }
        }
        Err(e) => eprintln!("repro: sandbox: cannot encode the run's result: {e}"),
    }
    repro_sys::startup::mark("init: result written");
    if let Some(done) = ns_fd(DONE_FD) {
        if no_process_left() {
            // Unsaid, `repro run` waits for the init's exit instead.
            let _ = fs::File::from(done).write_all(&[1]);
        }
    }
    status
}

/// Whether the init has no child left (reaping those that have exited): then no process of the guest is left.
fn no_process_left() -> bool {
    loop {
        match ns::wait_child(-1, true) {
            Ok(Some(_)) => continue,
            Ok(None) => return false,
            Err(e) => return e.errno() == libc::ECHILD,
        }
    }
}

fn ns_fd(fd: i32) -> Option<std::os::fd::OwnedFd> {
    repro_sys::idmap::inherited(fd)
}

fn read_config(config: &Path) -> Result<InitConfig, InitError> {
    let arg = config.to_string_lossy();
    let fd: i32 = arg
        .strip_prefix("fd:")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| InitError::Refused(format!("expected fd:N, got '{arg}'")))?;
    let f = ns_fd(fd).ok_or_else(|| InitError::Refused(format!("descriptor {fd} is not open")))?;
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut fs::File::from(f), &mut data)
        .map_err(|e| InitError::io("read", format!("descriptor {fd}"), e))?;
    Ok(serde_json::from_slice(&data)?)
}

/// What the init does to itself before anything else: no process of the guest may ptrace it or read its memory
/// (non-dumpable, and no program it starts regains CAP_SYS_PTRACE, which would override that).
fn harden() -> Result<(), InitError> {
    use repro_sys::idmap;
    idmap::set_non_dumpable()?;
    idmap::drop_bounding(idmap::CAP_SYS_PTRACE)?;
    Ok(())
}

/// Just before the guest starts (the init has a single thread): joins the run's cgroup through
/// [`CGROUP_TASKS_FD`] when it has it, and waits until `repro run` says the init is in the cgroup (one byte on
/// [`CGROUP_FD`]; the guest inherits the init's cgroup); then enters a cgroup namespace, so that the guest sees
/// the run's cgroup as the root of the hierarchy (a namespace's root is its maker's cgroup when it is made).
/// Returns the warning of a join that failed (the run goes on without the memory limit, as when `repro run`
/// cannot make the cgroup).
pub(super) fn enter_run_cgroup() -> Result<Option<String>, InitError> {
    let mut warning = None;
    if let Some(tasks) = ns_fd(CGROUP_TASKS_FD) {
        if let Err(e) = fs::File::from(tasks).write_all(b"0") {
            warning = Some(format!("memory limit not enforced: the sandbox could not join its cgroup: {e}"));
        }
    }
    if let Some(tasks) = ns_fd(CGROUP_PIDS_TASKS_FD) {
        if let Err(e) = fs::File::from(tasks).write_all(b"0") {
            warning = Some(format!("pids limit not enforced: the sandbox could not join its pids cgroup: {e}"));
        }
    }
    let fd =
        ns_fd(CGROUP_FD).ok_or_else(|| InitError::Refused(format!("no descriptor {CGROUP_FD} for the cgroup's go")))?;
    let mut f = fs::File::from(fd);
    let mut byte = [0u8; 1];
    loop {
        match std::io::Read::read(&mut f, &mut byte) {
            Ok(1) => break,
            Ok(_) => {
                return Err(InitError::Refused(
                    "repro run ended before it placed the sandbox in the run's cgroup".into(),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(InitError::io("read", format!("descriptor {CGROUP_FD}"), e)),
        }
    }
    drop(f);
    ns::unshare(ns::flags::CGROUP).map_err(|e| InitError::from(e).noted("a cgroup namespace"))?;
    repro_sys::startup::mark("init: in the run's cgroup and its namespace");
    Ok(warning)
}

fn setup(cfg: &InitConfig) -> Result<(), InitError> {
    let e = InitError::from;
    ns::setsid().map_err(e)?;
    ns::sethostname(&cfg.hostname).map_err(e)?;
    ns::setdomainname(&cfg.domainname).map_err(e)?;
    if !cfg.host_network {
        ns::interface_up("lo").map_err(e)?;
    }
    let trees = receive_trees(cfg)?;
    repro_sys::startup::mark("init: hardened, host name, lo up, released; trees received");
    build_root(cfg, trees)?;
    repro_sys::startup::mark("init: root assembled");
    ns::pivot_into(&cfg.root).map_err(e)?;
    repro_sys::startup::mark("init: pivoted");
    Ok(())
}

/// The idmapped trees `repro run` sends on [`TREES_FD`] (one message, possibly without descriptors).
fn receive_trees(cfg: &InitConfig) -> Result<Vec<(TreeRole, std::os::fd::OwnedFd)>, InitError> {
    let sock = ns_fd(TREES_FD)
        .ok_or_else(|| InitError::Refused(format!("no descriptor {TREES_FD} for the idmapped mounts")))?;
    let (sent, mut fds) = repro_sys::idmap::recv_fds(std::os::fd::AsRawFd::as_raw_fd(&sock))?;
    // The run directory first, placed where the configuration's paths expect it.
    if fds.is_empty() {
        return Err(InitError::Refused("the run directory's descriptor is missing".into()));
    }
    // A received tree that landed on that number moves elsewhere first.
    for f in fds.iter_mut().skip(1) {
        if std::os::fd::AsRawFd::as_raw_fd(f) == RUN_DIR_FD {
            *f = f.try_clone().map_err(|e| InitError::io("dup", format!("descriptor {RUN_DIR_FD}"), e))?;
        }
    }
    repro_sys::idmap::place_fd(fds.remove(0), RUN_DIR_FD)?;
    // Then one tag per planned tree: 1 when it was sent.
    let made = sent.iter().filter(|t| **t == 1).count();
    if sent.len() != cfg.trees.len() || made != fds.len() {
        return Err(InitError::Refused(format!(
            "expected {} idmapped mounts, received {} of {}",
            cfg.trees.len(),
            fds.len(),
            sent.len()
        )));
    }
    let roles = cfg.trees.iter().zip(&sent).filter(|(_, t)| **t == 1).map(|(r, _)| *r);
    Ok(roles.zip(fds).collect())
}
