//! Probes of what the kernel allows, run in a forked child or in place.

use std::io;

use super::{check, wait_child, ChildExit, Result, SysError};

/// Runs `probe` in a forked child and returns its exit code.
///
/// The child runs ordinary Rust code, which is only sound when the caller is single-threaded; this is checked
/// and refused otherwise.
pub fn probe_in_child(probe: impl FnOnce() -> i32) -> Result<i32> {
    if thread_count() != Some(1) {
        return Err(SysError {
            call: "fork",
            what: "probe".into(),
            source: io::Error::other("probe_in_child needs a single-threaded process"),
        });
    }
    // SAFETY: the process is single-threaded (checked above), so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    check(pid, "fork", || "probe".into())?;
    if pid == 0 {
        let code = probe();
        // SAFETY: _exit ends the child without running the parent's destructors twice.
        unsafe { libc::_exit(code) };
    }
    match wait_child(pid, false)? {
        Some((_, ChildExit::Exited(c))) => Ok(c),
        Some((_, ChildExit::Signaled(s))) => Ok(128 + s),
        None => Ok(255),
    }
}

fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok())
}

/// Runs a closure-free probe: whether `prctl(PR_SET_TSC, PR_TSC_SIGSEGV)` is accepted (in a child).
pub fn probe_set_tsc() -> Result<bool> {
    probe_in_child(|| {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV as libc::c_ulong, 0, 0, 0) };
        if rc == 0 {
            0
        } else {
            1
        }
    })
    .map(|c| c == 0)
}

/// Whether a child can be traced with PTRACE_TRACEME and stops as expected.
pub fn probe_ptrace() -> Result<bool> {
    // SAFETY: the child only calls ptrace, raise and _exit.
    let pid = unsafe { libc::fork() };
    check(pid, "fork", || "ptrace probe".into())?;
    if pid == 0 {
        // SAFETY: raw calls only.
        unsafe {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                libc::_exit(1);
            }
            libc::raise(libc::SIGSTOP);
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let stopped = libc::WIFSTOPPED(status);
    if stopped {
        // SAFETY: the child is our stopped tracee.
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, 0) };
        // SAFETY: valid out-pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
    Ok(stopped && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// Whether hardware performance counters can be opened (perf_event_open of CPU cycles for this process).
pub fn probe_perf_counters() -> bool {
    #[repr(C)]
    struct PerfEventAttr {
        type_: u32,
        size: u32,
        config: u64,
        rest: [u64; 14],
    }
    let attr = PerfEventAttr { type_: 0, size: std::mem::size_of::<PerfEventAttr>() as u32, config: 0, rest: [0; 14] };
    // SAFETY: a valid, zero-padded perf_event_attr (PERF_TYPE_HARDWARE, CPU cycles); the fd is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, 0, -1, -1, 0) };
    if fd >= 0 {
        // SAFETY: we own the descriptor perf_event_open returned.
        unsafe { libc::close(fd as i32) };
        true
    } else {
        false
    }
}
