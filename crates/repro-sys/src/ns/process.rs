//! Processes: the init's clone into new namespaces, signals, waits, ids, clocks and CPUs.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

use super::{check, Result, SysError};

/// What the namespaced init child does between the clone and its exec.
pub struct InitSpawn<'a> {
    /// Namespace flags (`flags::*`).
    pub namespaces: i32,
    /// The program to execute (usually `/proc/self/exe`).
    pub program: &'a CStr,
    pub argv: &'a [CString],
    /// Descriptors to place at fixed numbers in the child: `(source, target)`.
    pub fds: &'a [(RawFd, RawFd)],
    /// The child blocks reading this descriptor before exec; one byte releases it, EOF makes it exit.
    pub sync: RawFd,
    /// Signal mask to install in the child before exec (the init reads its signals through signalfd).
    pub block_signals: &'a [i32],
    /// With a new user namespace: once released, become its root (setresgid/setresuid 0, and no supplementary
    /// groups where setgroups is allowed) so that the exec gives the namespace's full capabilities. Without it
    /// a child of host root would keep host uid 0 (unmapped inside) and lose every capability at exec.
    pub become_root: bool,
}

/// Clones a child into new namespaces. The child sets a parent-death signal (SIGKILL), places the
/// descriptors, waits for the parent's go on `sync`, then executes `program`. Returns the child's pid.
pub fn spawn_init(spec: &InitSpawn<'_>) -> Result<i32> {
    // A source that is another pair's target would be overwritten before it is placed: move such sources above
    // every target first (the copies close when this function returns).
    let top = spec.fds.iter().map(|(_, d)| *d).max().unwrap_or(0) + 1;
    let mut moved: Vec<OwnedFd> = Vec::new();
    let mut fds: Vec<(RawFd, RawFd)> = Vec::with_capacity(spec.fds.len());
    for (src, dst) in spec.fds {
        if src != dst && spec.fds.iter().any(|(_, d)| d == src) {
            // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor the caller passed as open.
            let fd = unsafe { libc::fcntl(*src, libc::F_DUPFD_CLOEXEC, top) };
            check(fd, "fcntl", || format!("F_DUPFD_CLOEXEC of {src}"))?;
            // SAFETY: fcntl returned a new descriptor that we own.
            moved.push(unsafe { OwnedFd::from_raw_fd(fd) });
            fds.push((fd, *dst));
        } else {
            fds.push((*src, *dst));
        }
    }
    // The same for the sync descriptor: were it a target, the child would read its go from whatever was placed
    // there (and die, or run before the parent is ready).
    let mut sync = spec.sync;
    if spec.fds.iter().any(|(_, d)| *d == sync) {
        // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor the caller passed as open.
        let fd = unsafe { libc::fcntl(sync, libc::F_DUPFD_CLOEXEC, top) };
        check(fd, "fcntl", || format!("F_DUPFD_CLOEXEC of the sync descriptor {sync}"))?;
        // SAFETY: fcntl returned a new descriptor that we own.
        moved.push(unsafe { OwnedFd::from_raw_fd(fd) });
        sync = fd;
    }
    let mut argv: Vec<*const libc::c_char> = spec.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(ptr::null());
    let mut mask = empty_sigset();
    for s in spec.block_signals {
        // SAFETY: `mask` is an initialized sigset_t.
        unsafe { libc::sigaddset(&mut mask, *s) };
    }
    let flags = (spec.namespaces as libc::c_ulong) | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: a raw clone without CLONE_VM and with a null stack behaves like fork: the child gets a copy of
    // the address space. The child below only makes async-signal-safe raw system calls on data prepared
    // before the clone, then execs or exits with `_exit`, so the parent's other threads cannot be disturbed.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, ptr::null_mut::<libc::c_void>(), 0usize, 0usize, 0usize) };
    if pid < 0 {
        return Err(SysError::last("clone", format!("namespaces {:#x}", spec.namespaces)));
    }
    if pid == 0 {
        // Child. Only raw calls from here on.
        // SAFETY: every call below is async-signal-safe and takes valid pointers prepared before the clone.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            for (src, dst) in &fds {
                if src == dst {
                    let fl = libc::fcntl(*dst, libc::F_GETFD);
                    libc::fcntl(*dst, libc::F_SETFD, fl & !libc::FD_CLOEXEC);
                } else if libc::dup2(*src, *dst) < 0 {
                    libc::_exit(125);
                }
            }
            let mut b = 0u8;
            let n = libc::read(sync, (&mut b as *mut u8).cast(), 1);
            if n != 1 {
                libc::_exit(125);
            }
            if spec.become_root {
                // setgroups is refused where the parent denied it (an unprivileged map): keep the groups then.
                libc::syscall(libc::SYS_setgroups, 0usize, ptr::null::<libc::gid_t>());
                if libc::syscall(libc::SYS_setresgid, 0u32, 0u32, 0u32) != 0
                    || libc::syscall(libc::SYS_setresuid, 0u32, 0u32, 0u32) != 0
                {
                    libc::_exit(125);
                }
            }
            libc::sigprocmask(libc::SIG_SETMASK, &mask, ptr::null_mut());
            libc::execv(spec.program.as_ptr(), argv.as_ptr());
            libc::_exit(125);
        }
    }
    drop(moved);
    Ok(pid as i32)
}

pub(super) fn empty_sigset() -> libc::sigset_t {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initializes the set it is given.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        set.assume_init()
    }
}

/// Blocks `signals` in the calling thread (threads created later inherit the mask).
pub fn block_signals(signals: &[i32]) -> Result<()> {
    let mut mask = empty_sigset();
    for s in signals {
        // SAFETY: `mask` is an initialized sigset_t.
        unsafe { libc::sigaddset(&mut mask, *s) };
    }
    // SAFETY: valid sigset pointer; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &mask, ptr::null_mut()) };
    if rc != 0 {
        return Err(SysError {
            call: "pthread_sigmask",
            what: String::new(),
            source: io::Error::from_raw_os_error(rc),
        });
    }
    Ok(())
}

/// A signalfd reading `signals` (which must be blocked).
pub fn signalfd(signals: &[i32]) -> Result<OwnedFd> {
    let mut mask = empty_sigset();
    for s in signals {
        // SAFETY: `mask` is an initialized sigset_t.
        unsafe { libc::sigaddset(&mut mask, *s) };
    }
    // SAFETY: -1 asks for a new descriptor; `mask` is valid.
    let fd = unsafe { libc::signalfd(-1, &mask, libc::SFD_CLOEXEC) };
    check(fd, "signalfd", String::new)?;
    // SAFETY: signalfd returned a new descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one signal number from a signalfd (blocking). Retries on EINTR.
pub fn read_signal(fd: &OwnedFd) -> Result<i32> {
    let mut info = std::mem::MaybeUninit::<libc::signalfd_siginfo>::zeroed();
    loop {
        // SAFETY: the buffer is exactly one signalfd_siginfo.
        let n = unsafe {
            libc::read(fd.as_raw_fd(), info.as_mut_ptr().cast(), std::mem::size_of::<libc::signalfd_siginfo>())
        };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n as usize != std::mem::size_of::<libc::signalfd_siginfo>() {
            return Err(SysError::last("read", "signalfd"));
        }
        // SAFETY: the kernel filled the whole structure.
        return Ok(unsafe { info.assume_init() }.ssi_signo as i32);
    }
}

/// How a waited-for child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    Exited(i32),
    Signaled(i32),
}

impl ChildExit {
    /// The shell convention: the exit code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ChildExit::Exited(c) => c,
            ChildExit::Signaled(s) => 128 + s,
        }
    }
}

fn decode_status(status: libc::c_int) -> Option<ChildExit> {
    if libc::WIFEXITED(status) {
        Some(ChildExit::Exited(libc::WEXITSTATUS(status)))
    } else if libc::WIFSIGNALED(status) {
        Some(ChildExit::Signaled(libc::WTERMSIG(status)))
    } else {
        None
    }
}

/// Waits for a child (`pid`, or any child with -1). `nohang`: return `Ok(None)` when none has exited.
/// Returns `Err` with ECHILD when there is no child left.
pub fn wait_child(pid: i32, nohang: bool) -> Result<Option<(i32, ChildExit)>> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, if nohang { libc::WNOHANG } else { 0 }) };
        if rc < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(SysError::last("waitpid", pid.to_string()));
        }
        if rc == 0 {
            return Ok(None);
        }
        if let Some(exit) = decode_status(status) {
            return Ok(Some((rc, exit)));
        }
    }
}

/// Sets the resource limit `resource` (soft and hard: `limit`) of the process `pid` (prlimit(2)): for the init
/// before it runs, so that it and the guest inherit it. RLIMIT_NPROC set this way counts the tasks of the
/// process's user in the process's own user namespace (kernel 5.14 and later), not the caller's other ones.
pub fn set_rlimit_of(pid: i32, resource: i32, limit: u64) -> Result<()> {
    let new = libc::rlimit { rlim_cur: limit, rlim_max: limit };
    // SAFETY: `new` lives on this stack frame; a null old-limit pointer asks for nothing back.
    let rc = unsafe { libc::prlimit(pid, resource as _, &new, std::ptr::null_mut()) };
    if rc < 0 {
        return Err(SysError::last("prlimit", format!("{pid}, {resource}, {limit}")));
    }
    Ok(())
}

/// Sends a signal; a process that is already gone is not an error.
pub fn kill(pid: i32, sig: i32) -> Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH) {
        return Err(SysError::last("kill", pid.to_string()));
    }
    Ok(())
}

pub fn getpid() -> i32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// CLOCK_REALTIME_COARSE in nanoseconds: the clock the kernel stamps file times with (a file written after this
/// reading never carries an older time, which a precise reading would not guarantee).
pub fn realtime_coarse_ns() -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for clock_gettime.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// Clock `clock`'s reading as (seconds, nanoseconds), by the system call itself rather than the vDSO: safe on a
/// thread that traps rdtsc (see [`crate::tsc`]), where the vDSO's clock read would fault.
pub fn clock_now_syscall(clock: i32) -> std::io::Result<(i64, i64)> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for clock_gettime, which writes one struct timespec.
    let r = unsafe { libc::syscall(libc::SYS_clock_gettime, clock, &mut ts as *mut libc::timespec) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((ts.tv_sec, ts.tv_nsec))
}

pub fn getuid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

pub fn getgid() -> u32 {
    // SAFETY: getgid cannot fail.
    unsafe { libc::getgid() }
}

/// Starts a new session (leaves the terminal's process group).
pub fn setsid() -> Result<()> {
    // SAFETY: setsid has no memory-safety preconditions.
    check(unsafe { libc::setsid() }, "setsid", String::new).map(|_| ())
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer and its size.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc < 0 {
        return vec![0];
    }
    // SAFETY: `set` was filled by the kernel.
    (0..libc::CPU_SETSIZE as usize).filter(|c| unsafe { libc::CPU_ISSET(*c, &set) }).collect()
}

/// The CPU this thread runs on now, if the kernel says.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}
