//! The guest's start: its settings applied just before exec, and the fork that execs it.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;

use super::process::empty_sigset;
use super::{pipe, wait_child};

/// Options applied in the guest child just before exec.
#[derive(Debug, Clone)]
pub struct GuestSetup {
    pub umask: u32,
    pub no_aslr: bool,
    /// `(resource, soft, hard)`; values above the current hard limit are lowered to it.
    pub rlimits: Vec<(i32, u64, u64)>,
    /// CPUs to pin to (empty: leave as is).
    pub cpus: Vec<usize>,
    /// Descriptors to place: `(source, target)`.
    pub fds: Vec<(RawFd, RawFd)>,
    /// Descriptors to close in the child after placing.
    pub close: Vec<RawFd>,
    pub cwd: CString,
    /// Capabilities, no_new_privs and, if it has one, the confinement's seccomp filter, applied last.
    pub confine: Option<crate::confine::Confinement>,
}

/// Resource numbers for `GuestSetup::rlimits`.
pub mod rlimit {
    pub const NOFILE: i32 = libc::RLIMIT_NOFILE as i32;
    pub const STACK: i32 = libc::RLIMIT_STACK as i32;
    pub const CORE: i32 = libc::RLIMIT_CORE as i32;
    pub const NPROC: i32 = libc::RLIMIT_NPROC as i32;
    pub const INFINITY: u64 = libc::RLIM_INFINITY;
}

/// Applies `setup` to the calling process. Async-signal-safe: only raw calls on prepared data (the CPU set is
/// built on the stack). Returns the failing step's errno.
pub fn apply_guest_setup(setup: &GuestSetup) -> std::result::Result<(), (&'static str, i32)> {
    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
    // SAFETY: raw calls with valid arguments; the structures live on this stack frame.
    unsafe {
        for (src, dst) in &setup.fds {
            if libc::dup2(*src, *dst) < 0 {
                return Err(("dup2", errno()));
            }
        }
        for fd in &setup.close {
            libc::close(*fd);
        }
        // Nothing but 0, 1 and 2 crosses the exec (CLOSE_RANGE_CLOEXEC).
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 4u32);
        let mask = empty_sigset();
        libc::sigprocmask(libc::SIG_SETMASK, &mask, ptr::null_mut());
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE, libc::SIGQUIT] {
            libc::signal(s, libc::SIG_DFL);
        }
        libc::umask(setup.umask as libc::mode_t);
        if setup.no_aslr && libc::personality(0x0040000 /* ADDR_NO_RANDOMIZE */) < 0 {
            return Err(("personality", errno()));
        }
        for (res, soft, hard) in &setup.rlimits {
            let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::getrlimit(*res as _, &mut cur);
            let hard = (*hard).min(cur.rlim_max);
            let lim = libc::rlimit { rlim_cur: (*soft).min(hard), rlim_max: hard };
            if libc::setrlimit(*res as _, &lim) < 0 {
                return Err(("setrlimit", errno()));
            }
        }
        if !setup.cpus.is_empty() {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for c in &setup.cpus {
                libc::CPU_SET(*c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) < 0 {
                return Err(("sched_setaffinity", errno()));
            }
        }
        if libc::chdir(setup.cwd.as_ptr()) < 0 {
            return Err(("chdir", errno()));
        }
    }
    // Last: nothing above may need a capability this drops or a syscall the filter refuses.
    if let Some(c) = &setup.confine {
        crate::confine::apply(c)?;
    }
    Ok(())
}

/// Forks the guest: applies `setup`, then `execve(program, argv, envp)`. A failure before or at exec is
/// reported through a close-on-exec pipe, so the caller learns the errno: `Err` with the step and errno.
pub fn spawn_guest(
    program: &CStr,
    argv: &[CString],
    envp: &[CString],
    setup: &GuestSetup,
) -> std::result::Result<i32, (&'static str, i32)> {
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_p.push(ptr::null());
    let (r, w) = pipe().map_err(|e| ("pipe2", e.errno()))?;
    // SAFETY: the child runs only `apply_guest_setup` (raw calls) and execve/write/_exit on prepared data.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(("fork", io::Error::last_os_error().raw_os_error().unwrap_or(0)));
    }
    if pid == 0 {
        drop(r);
        let (step, err) = match apply_guest_setup(setup) {
            Ok(()) => {
                // SAFETY: valid NUL-terminated arrays.
                unsafe { libc::execve(program.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
                ("execve", io::Error::last_os_error().raw_os_error().unwrap_or(0))
            }
            Err(e) => e,
        };
        let code: u8 = if step == "execve" { 1 } else { 2 };
        let msg = [code, (err & 0xff) as u8, ((err >> 8) & 0xff) as u8];
        // SAFETY: writing a small stack buffer to our pipe, then exiting.
        unsafe {
            libc::write(w.as_raw_fd(), msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    drop(w);
    let mut buf = [0u8; 3];
    let mut got = 0;
    while got < 3 {
        // SAFETY: reading into the rest of a stack buffer.
        let n = unsafe { libc::read(r.as_raw_fd(), buf[got..].as_mut_ptr().cast(), 3 - got) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    if got == 3 {
        // The child reported its failure and exits: reaping it cannot tell more than its message.
        let _ = wait_child(pid, false);
        let err = buf[1] as i32 | ((buf[2] as i32) << 8);
        return Err((if buf[0] == 1 { "execve" } else { "setup" }, err));
    }
    Ok(pid)
}
