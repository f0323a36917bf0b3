//! The stage of `repro run` while the guest runs: signals forwarded to it until the init is done, then its
//! output saved and its result read into the run's outcome.

use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;

use repro_model::run::{Determinism, RunOutcome};
use repro_model::ExitCode;
use repro_sys::ns;

use super::start::{Sandbox, Watch};
use super::RunRequest;
use crate::init::{Accessed, InitResult, TapesOut};
use crate::rundir::RunDir;
use crate::SandboxError;

/// How the run ended, as [`wait_for_end`] found it.
pub(super) struct Ended {
    /// The SIGINT/SIGTERM/SIGHUP repro received (forwarded to the guest).
    pub interrupted: Option<i32>,
    /// The init's exit, `Err` when it said it was done and its exit goes on beside the rest of the run.
    pub init_exit: Result<ns::ChildExit, ()>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub outcome: RunOutcome,
    pub exit_status: i32,
    pub determinism: Determinism,
    pub accessed: Vec<Accessed>,
    pub tapes: TapesOut,
}

/// Takes the started sandbox and what [`super::start::start`] set aside to watch it; forwards signals until the
/// init exits or says it is done, joins the output pumps and reads the init's result. Gives the outcome and the
/// exit status of the run (the result's warnings are added to `warnings`).
pub(super) fn wait_for_end(
    req: &RunRequest,
    dir: &RunDir,
    sandbox: &Sandbox,
    watch: Watch,
    warnings: &mut Vec<String>,
) -> Result<Ended, SandboxError> {
    let s = &req.settings;
    let (init_pid, sigfd) = (sandbox.init_pid, &sandbox.sigfd);
    let Watch { done_r, out_pump, err_pump, result_fd, rdrand_known, setup_error } = watch;
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
            if readable_first(d, sigfd)? {
                let mut b = [0u8; 1];
                match (&*d).read(&mut b) {
                    Ok(1) => break None,
                    // The init exited without saying it (or the pipe failed): its exit is waited for.
                    _ => done = None,
                }
                continue;
            }
        }
        match ns::read_signal(sigfd)? {
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
    Ok(Ended { interrupted, init_exit, stdout_bytes, stderr_bytes, outcome, exit_status, determinism, accessed, tapes })
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
