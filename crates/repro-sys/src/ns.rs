//! Namespaces, mounts and the process-level calls of the hermetic boundary.
//!
//! The functions that fork (`spawn_init`, `spawn_guest`, `probe_in_child`) run the child side with raw system
//! calls only, on data prepared before the fork, so they are sound even when the parent has other threads.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// An error from a system call, with the call's name and the object it acted on.
#[derive(Debug, thiserror::Error)]
#[error("{call}({what}): {source}")]
pub struct SysError {
    pub call: &'static str,
    pub what: String,
    #[source]
    pub source: io::Error,
}

impl SysError {
    fn last(call: &'static str, what: impl Into<String>) -> Self {
        SysError { call, what: what.into(), source: io::Error::last_os_error() }
    }
    /// The errno of the failed call.
    pub fn errno(&self) -> i32 {
        self.source.raw_os_error().unwrap_or(0)
    }
}

pub type Result<T> = std::result::Result<T, SysError>;

fn cstr(s: &str) -> CString {
    // Cannot fail: the NUL bytes are filtered out first.
    CString::new(s.as_bytes().iter().copied().filter(|b| *b != 0).collect::<Vec<u8>>()).unwrap_or_default()
}

fn check(rc: libc::c_int, call: &'static str, what: impl FnOnce() -> String) -> Result<libc::c_int> {
    if rc < 0 {
        Err(SysError::last(call, what()))
    } else {
        Ok(rc)
    }
}

/// Namespace flags for `unshare`/`clone`.
pub mod flags {
    pub const MOUNT: i32 = libc::CLONE_NEWNS;
    pub const PID: i32 = libc::CLONE_NEWPID;
    pub const NET: i32 = libc::CLONE_NEWNET;
    pub const UTS: i32 = libc::CLONE_NEWUTS;
    pub const IPC: i32 = libc::CLONE_NEWIPC;
    pub const USER: i32 = libc::CLONE_NEWUSER;
    pub const CGROUP: i32 = libc::CLONE_NEWCGROUP;
    pub const TIME: i32 = libc::CLONE_NEWTIME;
}

/// A pipe whose both ends are close-on-exec.
pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    check(rc, "pipe2", String::new)?;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

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

fn empty_sigset() -> libc::sigset_t {
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

pub fn sethostname(name: &str) -> Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    let rc = unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
    check(rc, "sethostname", || name.to_string()).map(|_| ())
}

pub fn setdomainname(name: &str) -> Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    let rc = unsafe { libc::setdomainname(name.as_ptr().cast(), name.len()) };
    check(rc, "setdomainname", || name.to_string()).map(|_| ())
}

/// Brings a network interface up (`lo` in a new network namespace starts down).
pub fn interface_up(name: &str) -> Result<()> {
    // SAFETY: socket has no memory-safety preconditions.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(sock, "socket", || "AF_INET".into())?;
    // SAFETY: socket returned a new descriptor that we own.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in name.bytes().take(libc::IFNAMSIZ - 1).enumerate() {
        req.ifr_name[i] = b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads and fills the ifreq we pass.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) };
    check(rc, "ioctl(SIOCGIFFLAGS)", || name.into())?;
    // SAFETY: the kernel filled ifru_flags for SIOCGIFFLAGS.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the ifreq we pass.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) };
    check(rc, "ioctl(SIOCSIFFLAGS)", || name.into()).map(|_| ())
}

/// Mount flags.
pub mod mflags {
    pub const BIND: u64 = libc::MS_BIND;
    pub const REC: u64 = libc::MS_REC;
    pub const PRIVATE: u64 = libc::MS_PRIVATE;
    pub const RDONLY: u64 = libc::MS_RDONLY;
    pub const REMOUNT: u64 = libc::MS_REMOUNT;
    pub const NOSUID: u64 = libc::MS_NOSUID;
    pub const NODEV: u64 = libc::MS_NODEV;
    pub const NOEXEC: u64 = libc::MS_NOEXEC;
}

/// mount(2).
pub fn mount(source: &str, target: &str, fstype: &str, flags: u64, data: Option<&str>) -> Result<()> {
    let (s, t, f) = (cstr(source), cstr(target), cstr(fstype));
    let d = data.map(cstr);
    // SAFETY: every pointer is a valid NUL-terminated string or null.
    let rc = unsafe {
        libc::mount(
            if source.is_empty() { ptr::null() } else { s.as_ptr() },
            t.as_ptr(),
            if fstype.is_empty() { ptr::null() } else { f.as_ptr() },
            flags as libc::c_ulong,
            d.as_ref().map_or(ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    check(rc, "mount", || format!("{fstype} {source} on {target}")).map(|_| ())
}

/// Makes a mount and everything below it read-only (mount_setattr with AT_RECURSIVE).
pub fn make_readonly_recursive(target: &str) -> Result<()> {
    use crate::idmap::MountAttr;
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const AT_RECURSIVE: libc::c_int = 0x8000;
    let t = cstr(target);
    let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: valid path, valid attribute struct and its exact size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            t.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(rc as libc::c_int, "mount_setattr", || format!("{target} read-only, recursive")).map(|_| ())
}

/// umount2(2) with MNT_DETACH.
pub fn umount_detach(target: &str) -> Result<()> {
    let t = cstr(target);
    // SAFETY: valid path.
    let rc = unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    check(rc, "umount2", || target.into()).map(|_| ())
}

/// Makes `new_root` the root: `chdir(new_root); pivot_root(".", "."); umount2(".", MNT_DETACH); chdir("/")`.
pub fn pivot_into(new_root: &str) -> Result<()> {
    let r = cstr(new_root);
    let dot = cstr(".");
    // SAFETY: valid paths; pivot_root with the same directory twice stacks the old root on the new one,
    // which the detach then removes.
    unsafe {
        check(libc::chdir(r.as_ptr()), "chdir", || new_root.into())?;
        check(libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) as libc::c_int, "pivot_root", || {
            new_root.into()
        })?;
        check(libc::umount2(dot.as_ptr(), libc::MNT_DETACH), "umount2", || "old root".into())?;
        check(libc::chdir(c"/".as_ptr()), "chdir", || "/".into())?;
    }
    Ok(())
}

/// unshare(2).
pub fn unshare(namespaces: i32) -> Result<()> {
    // SAFETY: unshare has no memory-safety preconditions.
    check(unsafe { libc::unshare(namespaces) }, "unshare", || format!("{namespaces:#x}")).map(|_| ())
}

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

/// Writes `data` to a file that already exists (cgroup and /proc files).
pub fn write_file(path: &str, data: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(data.as_bytes())
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

/// Whether `path` is executable by us (access X_OK).
pub fn is_executable(path: &str) -> std::result::Result<(), i32> {
    let p = cstr(path);
    // SAFETY: valid path.
    if unsafe { libc::access(p.as_ptr(), libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Creates a device-free character node test: whether `path` is an overlayfs whiteout (char device 0:0).
pub fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Reads an extended attribute (for overlayfs' `trusted.overlay.opaque`).
pub fn get_xattr(path: &str, name: &str) -> Option<Vec<u8>> {
    let (p, n) = (cstr(path), cstr(name));
    let mut buf = [0u8; 64];
    // SAFETY: valid strings and a buffer with its length.
    let rc = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if rc < 0 {
        None
    } else {
        Some(buf[..rc as usize].to_vec())
    }
}

/// Closes a raw descriptor that no Rust object owns (one placed by `spawn_init`).
pub fn close_raw(fd: RawFd) {
    // SAFETY: the caller names a descriptor it received as a raw number and that no `OwnedFd` holds.
    unsafe { libc::close(fd) };
}

/// errno as text: "No such file or directory".
pub fn strerror(errno: i32) -> String {
    io::Error::from_raw_os_error(errno).to_string().split(" (os error").next().unwrap_or_default().to_string()
}

/// Flushes every dirty page of the filesystem that holds `file` (syncfs(2)): one call makes everything
/// written there so far durable.
pub fn syncfs(file: &std::fs::File) -> io::Result<()> {
    // SAFETY: syncfs takes a descriptor we own for the duration of the call.
    if unsafe { libc::syncfs(file.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Release descriptor: writes one byte.
pub fn write_byte(fd: &OwnedFd) -> Result<()> {
    let b = [1u8];
    // SAFETY: one byte from a stack buffer.
    let n = unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 1) };
    check(n as libc::c_int, "write", || "sync pipe".into()).map(|_| ())
}

/// A connected pair of `AF_UNIX` `SOCK_SEQPACKET` sockets, both close-on-exec (to pass a descriptor to a child).
pub fn socketpair() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
    check(rc, "socketpair", || "AF_UNIX SOCK_SEQPACKET".into())?;
    // SAFETY: socketpair succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends the descriptor `fd` over the unix socket `sock` (SCM_RIGHTS, with one byte of data).
pub fn send_fd(sock: RawFd, fd: RawFd) -> Result<()> {
    let mut byte = [1u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // Room for one cmsghdr carrying one int, aligned as the kernel expects.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as _;
    // SAFETY: `msg` points at `control`, which is large enough for one header and one int (checked by
    // CMSG_FIRSTHDR returning non-null); CMSG_DATA points inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(SysError { call: "sendmsg", what: "SCM_RIGHTS".into(), source: io::Error::other("no room") });
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    loop {
        // SAFETY: `msg` and everything it points to live across the call.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return check(n as libc::c_int, "sendmsg", || format!("SCM_RIGHTS fd {fd}")).map(|_| ());
    }
}

/// Receives a descriptor sent with [`send_fd`] without blocking: `Ok(None)` when none is queued (or the peer
/// closed without sending). The received descriptor is close-on-exec.
pub fn recv_fd_nonblocking(sock: &OwnedFd) -> Result<Option<OwnedFd>> {
    let mut byte = [0u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let n = loop {
        // SAFETY: `msg` points at buffers that live across the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                _ => return Err(SysError::last("recvmsg", "SCM_RIGHTS")),
            }
        }
        break n;
    };
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR/NXTHDR stay inside msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        let mut found = None;
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
                if found.is_none() {
                    found = Some(OwnedFd::from_raw_fd(fd));
                } else {
                    libc::close(fd);
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok(found)
    }
}

/// Space on the filesystem of a descriptor (fstatvfs), in bytes and inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    pub bytes_total: u64,
    pub bytes_free: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
}

/// fstatvfs(2).
pub fn fs_space(fd: RawFd) -> Result<FsSpace> {
    // SAFETY: statvfs is plain data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    let rc = unsafe { libc::fstatvfs(fd, &mut st) };
    check(rc, "fstatvfs", || format!("fd {fd}"))?;
    let frsize = st.f_frsize as u64;
    Ok(FsSpace {
        bytes_total: st.f_blocks as u64 * frsize,
        bytes_free: st.f_bavail as u64 * frsize,
        inodes_total: st.f_files as u64,
        inodes_free: st.f_favail as u64,
    })
}

/// Takes an exclusive flock(2) on `file` without waiting: `Ok(false)` when another holder has it.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    loop {
        // SAFETY: flock on a descriptor we hold for the duration of the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sync descriptor may have the number of a target (whatever the process had open decides): the child
    /// must still wait for its go on the sync pipe, not read from what was placed over it.
    #[test]
    fn the_sync_descriptor_survives_being_a_target_number() {
        let (sync_r, sync_w) = pipe().unwrap();
        let devnull = std::fs::File::open("/dev/null").unwrap();
        // A target number equal to the sync descriptor's: /dev/null goes there in the child.
        let target = sync_r.as_raw_fd();
        let program = CString::new("/bin/sh").unwrap();
        let argv = [CString::new("sh").unwrap(), CString::new("-c").unwrap(), CString::new("exit 7").unwrap()];
        let pid = spawn_init(&InitSpawn {
            namespaces: 0,
            program: &program,
            argv: &argv,
            fds: &[(devnull.as_raw_fd(), target)],
            sync: sync_r.as_raw_fd(),
            block_signals: &[],
            become_root: false,
        })
        .unwrap();
        drop(sync_r);
        // Reading /dev/null would give EOF and the child would exit 125 before this byte is written.
        write_byte(&sync_w).unwrap();
        let (_, exit) = wait_child(pid, false).unwrap().unwrap();
        assert_eq!(exit.code(), 7);
    }

    #[test]
    fn strerror_strips_os_error_suffix() {
        assert_eq!(strerror(libc::ENOENT), "No such file or directory");
    }

    #[test]
    fn child_exit_codes_follow_the_shell_convention() {
        assert_eq!(ChildExit::Exited(3).code(), 3);
        assert_eq!(ChildExit::Signaled(9).code(), 137);
    }

    #[test]
    fn descriptors_pass_over_a_socketpair() {
        let (a, b) = socketpair().unwrap();
        assert!(recv_fd_nonblocking(&b).unwrap().is_none());
        let d = tempfile_dir();
        let dir = std::fs::File::open(&d).unwrap();
        send_fd(a.as_raw_fd(), dir.as_raw_fd()).unwrap();
        drop(dir);
        drop(a);
        let got = recv_fd_nonblocking(&b).unwrap().expect("a descriptor");
        std::fs::write(format!("/proc/self/fd/{}/x", got.as_raw_fd()), "y").unwrap();
        assert_eq!(std::fs::read_to_string(d.join("x")).unwrap(), "y");
        assert!(fs_space(got.as_raw_fd()).unwrap().bytes_total > 0);
        assert!(recv_fd_nonblocking(&b).unwrap().is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn exclusive_locks_exclude() {
        let d = tempfile_dir();
        let a = std::fs::File::open(&d).unwrap();
        let b = std::fs::File::open(&d).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        drop(a);
        assert!(try_lock_exclusive(&b).unwrap());
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "repro-sys-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn allowed_cpus_is_not_empty() {
        assert!(!allowed_cpus().is_empty());
    }
}
