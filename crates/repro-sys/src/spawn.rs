//! Starting the guest: fork, run the caller's pre-exec hook, install the seccomp filter, hand the
//! listener to the parent, wait until the parent has attached, then execve.
//!
//! After the filter is installed the child makes no system call the filter may send to the supervisor
//! until the supervisor holds the listener: the filter may mediate read(2) and write(2) (network taping),
//! and nobody would answer. So the listener's descriptor number is predicted (the lowest free one, which
//! is what the kernel gives it) and sent on the status pipe *before* the filter is installed, and the
//! child then announces the installed filter by closing its end of a third pipe (close is never
//! mediated). Its later read of the go pipe and a write reporting a failed execve may be mediated: by
//! then the caller serves the listener (and lets them run natively).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::seccomp::BpfFilter;

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Counts the threads of the calling process (via /proc/self/task); `None` when /proc is not mounted.
pub fn thread_count() -> Option<usize> {
    std::fs::read_dir("/proc/self/task").ok().map(|d| d.count())
}

fn ensure_single_threaded() -> io::Result<()> {
    match thread_count() {
        Some(n) if n > 1 => Err(io::Error::other(format!(
            "fork from a process with {n} threads: only async-signal-safe work is possible, refusing"
        ))),
        _ => Ok(()),
    }
}

/// Messages from the child on the status pipe: (tag, value).
const TAG_LISTENER: i32 = 0;
const TAG_PRE_EXEC_FAILED: i32 = 1;
const TAG_FILTER_FAILED: i32 = 2;
const TAG_EXEC_FAILED: i32 = 3;

/// What failed in the child before the guest program started.
#[derive(Debug)]
pub enum SpawnError {
    /// The pre-exec hook failed with this errno.
    PreExec(i32),
    /// Installing the seccomp filter failed with this errno.
    Filter(i32),
    /// execve failed with this errno.
    Exec(i32),
    /// A call in the parent failed.
    Io(io::Error),
}

impl From<io::Error> for SpawnError {
    fn from(e: io::Error) -> Self {
        SpawnError::Io(e)
    }
}

/// A child stopped just before execve, waiting for [`PendingGuest::release`].
#[derive(Debug)]
pub struct PendingGuest {
    pub pid: i32,
    /// The seccomp listener of the guest's filter.
    pub listener: OwnedFd,
    status_rd: OwnedFd,
    go_wr: OwnedFd,
}

/// The lowest free descriptor number of the calling process: the number the next new descriptor gets.
/// Async-signal-safe.
fn lowest_free_fd(any_open: RawFd) -> io::Result<RawFd> {
    // SAFETY: F_DUPFD_CLOEXEC duplicates an open descriptor of ours onto the lowest free number.
    let fd = unsafe { libc::fcntl(any_open, libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: closes the duplicate just made, which nothing else refers to.
    unsafe { libc::close(fd) };
    Ok(fd)
}

/// Whether `fd` has data (or EOF) to read now.
fn readable_now(fd: RawFd) -> io::Result<bool> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: one valid pollfd; a zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        return Ok(r > 0);
    }
}

/// Reads `fd` until EOF (the other ends are all closed), discarding what is read.
fn wait_eof(fd: RawFd) -> io::Result<()> {
    let mut b = [0u8; 16];
    loop {
        // SAFETY: reads into a live stack buffer.
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
        if n == 0 {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

fn write_msg(fd: RawFd, tag: i32, val: i32) {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&tag.to_ne_bytes());
    b[4..].copy_from_slice(&val.to_ne_bytes());
    // SAFETY: writes 8 bytes from a live stack buffer; async-signal-safe.
    unsafe { libc::write(fd, b.as_ptr().cast(), 8) };
}

fn read_msg(fd: RawFd) -> io::Result<Option<(i32, i32)>> {
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        // SAFETY: reads into the unfilled tail of a live stack buffer.
        let n = unsafe { libc::read(fd, b[got..].as_mut_ptr().cast(), 8 - got) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return if got == 0 { Ok(None) } else { Err(io::Error::from(io::ErrorKind::UnexpectedEof)) };
        }
        got += n as usize;
    }
    let tag = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    let val = i32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
    Ok(Some((tag, val)))
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Forks the guest. The child runs `pre_exec`, installs `filter`, and waits; the caller attaches (e.g.
/// PTRACE_SEIZE) and then calls [`PendingGuest::release`], after which the child enables the rdtsc trap
/// (if `trap_tsc`) and execs. Refuses to fork from a multithreaded process.
pub fn spawn_guest(
    program: &CString,
    argv: &[CString],
    envp: &[CString],
    filter: &BpfFilter,
    trap_tsc: bool,
    pre_exec: &mut dyn FnMut() -> io::Result<()>,
) -> Result<PendingGuest, SpawnError> {
    ensure_single_threaded()?;
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let (status_rd, status_wr) = pipe_cloexec()?;
    let (go_rd, go_wr) = pipe_cloexec()?;
    let (ready_rd, ready_wr) = pipe_cloexec()?;
    // SAFETY: the process is single-threaded (checked above), so the child may do anything; it does only
    // async-signal-safe calls anyway (the caller's hook is documented to do the same) and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error().into());
    }
    if pid == 0 {
        let sw = status_wr.as_raw_fd();
        if let Err(e) = pre_exec() {
            write_msg(sw, TAG_PRE_EXEC_FAILED, e.raw_os_error().unwrap_or(libc::EIO));
            // SAFETY: _exit is async-signal-safe and ends the child.
            unsafe { libc::_exit(127) };
        }
        // Nothing may be written after the filter is installed (see the module documentation): the
        // listener's number is announced first.
        let predicted = match lowest_free_fd(sw) {
            Ok(fd) => fd,
            Err(e) => {
                write_msg(sw, TAG_FILTER_FAILED, e.raw_os_error().unwrap_or(libc::EIO));
                // SAFETY: as above.
                unsafe { libc::_exit(127) };
            }
        };
        write_msg(sw, TAG_LISTENER, predicted);
        let listener = match filter.install_with_listener() {
            Ok(l) => l,
            Err(e) => {
                // No filter: this write runs natively.
                write_msg(sw, TAG_FILTER_FAILED, e.raw_os_error().unwrap_or(libc::EIO));
                // SAFETY: as above.
                unsafe { libc::_exit(127) };
            }
        };
        if listener.as_raw_fd() != predicted {
            // Cannot happen in a single-threaded child (the kernel gives the lowest free number); if it
            // did, the listener is moved to the announced number (dup3 and close are never mediated).
            // SAFETY: dup3 onto a number we own (or that is free); the listener stays open below.
            unsafe { libc::dup3(listener.as_raw_fd(), predicted, libc::O_CLOEXEC) };
        }
        // The filter is in place: tell the parent by closing, not writing.
        drop(ready_wr);
        let mut b = [0u8; 1];
        // SAFETY: reads one byte into a stack buffer; EOF (parent gone) also releases us.
        unsafe { libc::read(go_rd.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
        drop(listener);
        if trap_tsc {
            // SAFETY: prctl with integer arguments.
            unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV, 0, 0, 0) };
        }
        // SAFETY: the pointer arrays are NUL-terminated and point into CStrings alive in this frame.
        unsafe { libc::execve(program.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
        write_msg(sw, TAG_EXEC_FAILED, errno());
        // SAFETY: as above.
        unsafe { libc::_exit(127) };
    }
    drop(status_wr);
    drop(go_rd);
    drop(ready_wr);
    let reap = |pid: i32| {
        let mut st = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut st, libc::__WALL) };
    };
    // EOF on the ready pipe: the child installed its filter (and waits for the go byte) or exited. Every
    // message it wrote before either is in the status pipe by now.
    let waited = wait_eof(ready_rd.as_raw_fd());
    let kill_and_reap = |pid: i32| {
        // SAFETY: kills our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        reap(pid);
    };
    if let Err(e) = waited {
        kill_and_reap(pid);
        return Err(e.into());
    }
    let first = read_msg(status_rd.as_raw_fd())?;
    // After the listener's number, a second message means installing the filter failed.
    let second = match first {
        Some((TAG_LISTENER, _)) if readable_now(status_rd.as_raw_fd())? => Some(read_msg(status_rd.as_raw_fd())?),
        _ => None,
    };
    match (first, second) {
        (Some((TAG_LISTENER, fd)), None) => {
            let listener = crate::fdops::pidfd_open(pid, false).and_then(|p| crate::fdops::pidfd_getfd(&p, fd));
            match listener {
                Ok(listener) => Ok(PendingGuest { pid, listener, status_rd, go_wr }),
                Err(e) => {
                    kill_and_reap(pid);
                    Err(e.into())
                }
            }
        }
        (Some((TAG_PRE_EXEC_FAILED, e)), _) => {
            reap(pid);
            Err(SpawnError::PreExec(e))
        }
        (Some((TAG_FILTER_FAILED, e)), _) | (_, Some(Some((TAG_FILTER_FAILED, e)))) => {
            reap(pid);
            Err(SpawnError::Filter(e))
        }
        other => {
            kill_and_reap(pid);
            Err(io::Error::other(format!("unexpected messages from the guest child: {other:?}")).into())
        }
    }
}

impl PendingGuest {
    /// Lets the child exec; returns `Ok(())` once execve succeeded, or the exec errno. The child must
    /// be able to run while this waits (a seized child runs until its exec event stop, which happens
    /// after the descriptors are closed, so this does not deadlock).
    pub fn release(self) -> Result<(), SpawnError> {
        let b = [1u8];
        // SAFETY: writes one byte from a live buffer.
        unsafe { libc::write(self.go_wr.as_raw_fd(), b.as_ptr().cast(), 1) };
        match read_msg(self.status_rd.as_raw_fd())? {
            None => Ok(()),
            Some((TAG_EXEC_FAILED, e)) => Err(SpawnError::Exec(e)),
            Some(other) => Err(io::Error::other(format!("unexpected message {other:?}")).into()),
        }
    }
}

/// Forks a child that runs `f` and exits with its return value (for a PID-namespace init). Refuses
/// to fork from a multithreaded process.
pub fn fork_run(f: impl FnOnce() -> i32) -> io::Result<i32> {
    ensure_single_threaded()?;
    // SAFETY: single-threaded process (checked), so the child inherits a consistent state.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = f();
        // SAFETY: ends the child without running the parent's atexit handlers twice.
        unsafe { libc::_exit(code) };
    }
    Ok(pid)
}
