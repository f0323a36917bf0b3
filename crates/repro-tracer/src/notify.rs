//! The notify loop: answers the mediated syscalls the seccomp filter sends to the supervisor.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use repro_detcore::controller::VirtualFile;
use repro_detcore::{ClockKind, ClockRead, DirListing, FileIdentity, FileTimes, Timespec};
use repro_sys::fdops;
use repro_sys::memory;
use repro_sys::seccomp::{Listener, ListenerState, Notification};

use crate::{lock, Shared, SharedRef};

/// Bytes of /dev/urandom served per open (a pre-generated, finite stream).
const URANDOM_BYTES: usize = 1 << 20;
/// The most bytes one getrandom call returns (as the kernel: 32 MiB - 1).
const GETRANDOM_MAX: usize = (1 << 25) - 1;

macro_rules! mediated {
    ($($name:ident),* $(,)?) => {
        /// Syscall numbers the filter sends to the supervisor.
        pub(crate) fn mediated_syscalls() -> Vec<u32> {
            vec![$(libc::$name as u32),*]
        }
        fn syscall_name(nr: i64) -> &'static str {
            $(if nr == libc::$name { return &stringify!($name)[4..]; })*
            crate::waits::syscall_name(nr).unwrap_or("unknown")
        }
    };
}

mediated!(
    SYS_clock_gettime,
    SYS_clock_getres,
    SYS_gettimeofday,
    SYS_time,
    SYS_nanosleep,
    SYS_clock_nanosleep,
    SYS_getrandom,
    SYS_uname,
    SYS_sysinfo,
    SYS_getdents64,
    SYS_open,
    SYS_openat,
    SYS_stat,
    SYS_lstat,
    SYS_fstat,
    SYS_newfstatat,
    SYS_statx,
    SYS_sched_getaffinity,
    SYS_getcpu,
    SYS_times,
    SYS_getrusage,
    SYS_timerfd_create,
    SYS_io_uring_setup,
    SYS_alarm,
    SYS_setitimer,
    SYS_timer_create,
);

/// What to tell the kernel.
pub(crate) enum Reply {
    Value(i64),
    Error(i32),
    Continue,
    /// Install this descriptor in the guest and return its number.
    AddFd {
        fd: OwnedFd,
        cloexec: bool,
    },
    /// A call that would block (a recv or accept while recording the network): it is made on a thread of its
    /// own, which answers when it returns, so that the notify thread goes on serving the guest's other tasks
    /// (one of which may be the peer it waits for).
    Defer(Box<dyn FnOnce(&SharedRef) -> Reply + Send>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Value(v) => write!(f, "Value({v})"),
            Reply::Error(e) => write!(f, "Error({e})"),
            Reply::Continue => write!(f, "Continue"),
            Reply::AddFd { cloexec, .. } => write!(f, "AddFd(cloexec: {cloexec})"),
            Reply::Defer(_) => write!(f, "Defer"),
        }
    }
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Serves notifications until no guest task is left under the filter.
///
/// The receive ioctl is tried first (one syscall per notification on the hot path); it fails at once
/// when the filter has no task left or the task died, and only then is the listener polled to tell
/// the two apart.
pub(crate) fn serve(listener: Listener, shared: SharedRef) {
    let listener = std::sync::Arc::new(listener);
    // Wake the supervisor on the guest's CPU: halves the round trip (Linux 6.6+; harmless if absent).
    let _ = listener.set_sync_wakeup();
    // The guest runs with rdtsc trapped; with the same setting here, switching between the guest and
    // this thread does not rewrite CR4 (a hypervisor exit each time in a VM; see repro_sys::tsc).
    // Nothing below reads the TSC (no clocks are read on this thread).
    let _ = repro_sys::tsc::disable_for_this_thread();
    loop {
        let n = match listener.recv() {
            Ok(n) => n,
            Err(_) => match listener.wait(-1) {
                Ok(ListenerState::Readable) | Ok(ListenerState::Timeout) => continue,
                Ok(ListenerState::Hangup) | Err(_) => return,
            },
        };
        match handle(&n, &listener, &shared) {
            Reply::Defer(call) => {
                let (l, s, id) = (listener.clone(), shared.clone(), n.id);
                // The thread inherits this one's blocked signals (the init's signalfd set).
                let spawned = std::thread::Builder::new()
                    .name("repro-blocking-call".into())
                    .spawn(move || respond(&l, &s, id, call(&s)));
                if spawned.is_err() {
                    let _ = listener.respond_error(n.id, libc::EAGAIN);
                }
            }
            reply => respond(&listener, &shared, n.id, reply),
        }
    }
}

/// Sends the answer to notification `id`.
fn respond(listener: &Listener, shared: &SharedRef, id: u64, reply: Reply) {
    let r = match reply {
        Reply::Value(v) => listener.respond_value(id, v),
        Reply::Error(e) => listener.respond_error(id, e),
        Reply::Continue => {
            lock(shared).stats.continued += 1;
            listener.respond_continue(id)
        }
        // If the descriptor cannot be installed (EMFILE...), the syscall fails with that error
        // rather than leaving the task waiting for an answer.
        Reply::AddFd { fd, cloexec } => match listener.addfd_send(id, fd.as_raw_fd(), cloexec) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => listener.respond_error(id, errno_of(&e)),
            r => r.map(|_| ()),
        },
        // Not produced by a deferred call itself.
        Reply::Defer(_) => listener.respond_error(id, libc::EIO),
    };
    // ENOENT: the task was killed or a signal interrupted the syscall; it will be restarted.
    let _ = r;
}

/// Answers one notification; the vDSO's shared clock page is synchronised with the controller around it.
fn handle(n: &Notification, listener: &Listener, shared: &SharedRef) -> Reply {
    lock(shared).sync_in();
    let r = handle_inner(n, listener, shared);
    lock(shared).sync_out();
    r
}

fn handle_inner(n: &Notification, listener: &Listener, shared: &SharedRef) -> Reply {
    let nr = n.nr as i64;
    let pid = n.pid as i32;
    let a = n.args;
    let mut sh = lock(shared);
    if sh.access.as_mut().is_some_and(|log| log.note(n)) {
        sh.stats.continued += 1;
        return Reply::Continue;
    }
    if sh.tape.is_some() {
        if let Some(r) = crate::tape::handle(&mut sh, n) {
            return r;
        }
    }
    let name = syscall_name(nr);
    let r = match nr {
        libc::SYS_clock_gettime => clock_gettime(&mut sh, pid, a[0] as i32 as i64, a[1]),
        _ if crate::waits::is_timed_wait(nr) => crate::waits::answer(&mut sh, n, listener),
        libc::SYS_clock_getres => clock_getres(&mut sh, pid, a[0] as i32 as i64, a[1]),
        libc::SYS_gettimeofday => gettimeofday(&mut sh, pid, a[0], a[1]),
        libc::SYS_time => time(&mut sh, pid, a[0]),
        libc::SYS_nanosleep => {
            read_timespec(pid, a[0]).and_then(|t| sh.ctl.sleep_for(t).map(|_| 0).map_err(|_| libc::EINVAL))
        }
        libc::SYS_clock_nanosleep => read_timespec(pid, a[2]).and_then(|t| {
            let clk = a[0] as i32 as i64;
            let res = if a[1] as i32 & libc::TIMER_ABSTIME != 0 {
                sh.ctl.sleep_until(clk, t)
            } else {
                repro_detcore::ClockKind::from_id(clk).and_then(|_| sh.ctl.sleep_for(t))
            };
            // clock_nanosleep returns the error number itself, not -1/errno.
            res.map(|_| 0).map_err(|_| libc::EINVAL)
        }),
        libc::SYS_getrandom => {
            let len = (a[1] as usize).min(GETRANDOM_MAX);
            let bytes = sh.ctl.random(pid, len);
            write(pid, a[0], &bytes).map(|_| len as i64)
        }
        libc::SYS_uname => {
            let b = sh.ctl.uname();
            write(pid, a[0], &b).map(|_| 0)
        }
        libc::SYS_sysinfo => {
            let b = sh.ctl.sysinfo();
            write(pid, a[0], &b).map(|_| 0)
        }
        libc::SYS_sched_getaffinity => {
            sh.ctl.note_event();
            let len = a[1] as usize;
            if len < 8 || !len.is_multiple_of(8) {
                Err(libc::EINVAL)
            } else {
                let m = sh.ctl.identity.affinity_mask(8);
                write(pid, a[2], &m).map(|_| 8)
            }
        }
        libc::SYS_getcpu
            if a[..2] == crate::vdso::FD_REQUEST_MAGIC && a[2] == pid as u64 && sh.vdso_fd_requests.contains(&pid) =>
        {
            // The supervisor itself, installing the replacement vDSO at this task's exec stop.
            return match sh.vdso.as_ref().map(|p| p.fd().try_clone()) {
                Some(Ok(fd)) => Reply::AddFd { fd, cloexec: true },
                Some(Err(e)) => Reply::Error(errno_of(&e)),
                None => Reply::Error(libc::ENOSYS),
            };
        }
        libc::SYS_getcpu => {
            sh.ctl.note_event();
            let mut r = Ok(0);
            for p in [a[0], a[1]] {
                if p != 0 {
                    r = r.and(write(pid, p, &0u32.to_le_bytes()).map(|_| 0));
                }
            }
            r
        }
        libc::SYS_times => {
            sh.ctl.note_event();
            // Logical ticks (100 Hz) since the pretend boot; the process used no CPU time.
            let mono = sh.ctl.clock.peek(ClockKind::Monotonic);
            let ticks = mono.sec * 100 + mono.nsec / 10_000_000;
            if a[0] != 0 {
                write(pid, a[0], &[0u8; 32]).map(|_| ticks)
            } else {
                Ok(ticks)
            }
        }
        libc::SYS_getrusage => {
            sh.ctl.note_event();
            write(pid, a[1], &[0u8; 144]).map(|_| 0)
        }
        libc::SYS_getdents64 => getdents64(&mut sh, pid, a[0] as i32, a[1], a[2] as u32 as usize),
        libc::SYS_open | libc::SYS_openat => {
            let (dirfd, path, flags) = if nr == libc::SYS_open {
                (libc::AT_FDCWD, a[0], a[1] as i32)
            } else {
                (a[0] as i32, a[1], a[2] as i32)
            };
            drop(sh);
            return open(n, listener, shared, dirfd, path, flags);
        }
        libc::SYS_stat | libc::SYS_lstat => {
            let flags = if nr == libc::SYS_lstat { libc::AT_SYMLINK_NOFOLLOW } else { 0 };
            stat(&mut sh, n, listener, libc::AT_FDCWD, Some(a[0]), flags, StatKind::Stat(a[1]))
        }
        libc::SYS_fstat => stat(&mut sh, n, listener, a[0] as i32, None, libc::AT_EMPTY_PATH, StatKind::Stat(a[1])),
        libc::SYS_newfstatat => stat(&mut sh, n, listener, a[0] as i32, Some(a[1]), a[3] as i32, StatKind::Stat(a[2])),
        libc::SYS_statx => {
            stat(&mut sh, n, listener, a[0] as i32, Some(a[1]), a[2] as i32, StatKind::Statx(a[4], a[3] as u32))
        }
        libc::SYS_timerfd_create => {
            sh.not_enforced.insert(
                "the guest created a timerfd (timerfd_create): timerfds run on the host's clock and are not mediated"
                    .into(),
            );
            sh.stats.continued += 1;
            return Reply::Continue;
        }
        libc::SYS_alarm | libc::SYS_setitimer | libc::SYS_timer_create => {
            // Disarming (alarm(0), a zero it_value) is harmless; arming runs a timer on the host's clock.
            let arms = match nr {
                libc::SYS_alarm => a[0] != 0,
                // struct itimerval: it_interval, then it_value (a timeval each).
                libc::SYS_setitimer => {
                    a[1] != 0 && read_timespec(pid, a[1] + 16).map_or(true, |v| v.sec != 0 || v.nsec != 0)
                }
                _ => true,
            };
            if arms {
                sh.not_enforced.insert(format!(
                    "the guest armed a timer on the host's clock ({}): its expiry and signal are not mediated",
                    syscall_name(nr)
                ));
            }
            sh.stats.continued += 1;
            return Reply::Continue;
        }
        libc::SYS_io_uring_setup => {
            sh.not_enforced.insert(
                "the guest set up an io_uring (io_uring_setup): its operations bypass the syscall mediation".into(),
            );
            return Reply::Continue;
        }
        _ => return Reply::Continue,
    };
    match r {
        Ok(v) => {
            count(&mut sh, name);
            Reply::Value(v)
        }
        Err(CONTINUE) => Reply::Continue,
        Err(e) => {
            count(&mut sh, name);
            Reply::Error(e)
        }
    }
}

/// Counts one answered syscall (no allocation once the name is known).
fn count(sh: &mut Shared, name: &str) {
    match sh.stats.mediated.get_mut(name) {
        Some(c) => *c += 1,
        None => {
            sh.stats.mediated.insert(name.to_string(), 1);
        }
    }
}

/// Pseudo-errno: let the syscall run natively.
const CONTINUE: i32 = -1;

fn write(pid: i32, addr: u64, data: &[u8]) -> Result<(), i32> {
    memory::write(pid, addr, data).map_err(|_| libc::EFAULT)
}

fn read_timespec(pid: i32, addr: u64) -> Result<Timespec, i32> {
    let mut b = [0u8; 16];
    memory::read_exact(pid, addr, &mut b).map_err(|_| libc::EFAULT)?;
    let sec = i64::from_le_bytes(b[0..8].try_into().map_err(|_| libc::EFAULT)?);
    let nsec = i64::from_le_bytes(b[8..16].try_into().map_err(|_| libc::EFAULT)?);
    Ok(Timespec { sec, nsec })
}

fn timespec_bytes(t: Timespec) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&t.sec.to_le_bytes());
    b[8..].copy_from_slice(&t.nsec.to_le_bytes());
    b
}

/// One clock read; a frozen clock polled too long stops the guest.
fn read_clock(sh: &mut Shared, kind: ClockKind) -> Result<Timespec, i32> {
    match sh.ctl.clock.read(kind) {
        ClockRead::Value(t) => Ok(t),
        ClockRead::Stalled { reads } => {
            stop_polling_guest(sh, reads);
            Err(libc::EINTR)
        }
    }
}

fn stop_polling_guest(sh: &mut Shared, reads: u32) {
    sh.not_enforced.insert(format!(
        "the guest read the clock {reads} times in a row with nothing else in between while the clock is \
         frozen (clock step 0), so it was waiting for time to pass, which never happens here; it was stopped. \
         Make the wait a sleep, or rerun with a clock that ticks on reads (--clock-step-ns 1000)"
    ));
    for &t in &sh.live {
        let _ = repro_sys::ptrace::kill_task(t, libc::SIGKILL);
    }
}

fn clock_gettime(sh: &mut Shared, pid: i32, clk: i64, tp: u64) -> Result<i64, i32> {
    let kind = match ClockKind::from_id(clk) {
        Ok(k) => k,
        Err(_) if clk < 0 => {
            sh.not_enforced.insert(format!("clock_gettime on a dynamic (fd-based) clock id {clk} is not mediated"));
            return Err(CONTINUE);
        }
        Err(_) => return Err(libc::EINVAL),
    };
    let t = read_clock(sh, kind)?;
    write(pid, tp, &timespec_bytes(t)).map(|_| 0)
}

/// clock_getres: pinned resolutions (1 ns; the coarse clocks 4 ms), the same the vDSO answers.
fn clock_getres(sh: &mut Shared, pid: i32, clk: i64, res: u64) -> Result<i64, i32> {
    sh.ctl.note_event();
    match ClockKind::from_id(clk) {
        Ok(_) => {}
        Err(_) if clk < 0 => return Err(CONTINUE),
        Err(_) => return Err(libc::EINVAL),
    }
    let nsec = if clk == libc::CLOCK_REALTIME_COARSE as i64 || clk == libc::CLOCK_MONOTONIC_COARSE as i64 {
        4_000_000
    } else {
        1
    };
    if res != 0 {
        write(pid, res, &timespec_bytes(Timespec { sec: 0, nsec }))?;
    }
    Ok(0)
}

fn gettimeofday(sh: &mut Shared, pid: i32, tv: u64, tz: u64) -> Result<i64, i32> {
    if tv != 0 {
        let t = read_clock(sh, ClockKind::Realtime)?;
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&t.sec.to_le_bytes());
        b[8..].copy_from_slice(&(t.nsec / 1000).to_le_bytes());
        write(pid, tv, &b)?;
    }
    if tz != 0 {
        write(pid, tz, &[0u8; 8])?;
    }
    Ok(0)
}

fn time(sh: &mut Shared, pid: i32, tloc: u64) -> Result<i64, i32> {
    let t = read_clock(sh, ClockKind::Realtime)?;
    if tloc != 0 {
        write(pid, tloc, &t.sec.to_le_bytes())?;
    }
    Ok(t.sec)
}

/// A descriptor of the guest, borrowed with pidfd_getfd (same open file description). Pidfds are
/// cached per task; a stale one (the task is gone, its tid reused) fails and is replaced once.
pub(crate) fn borrow_fd(sh: &mut Shared, tid: i32, fd: i32) -> Result<OwnedFd, i32> {
    let open = || fdops::pidfd_open(tid, true).or_else(|_| fdops::pidfd_open(tid, false)).map_err(|e| errno_of(&e));
    if let Some(p) = sh.pidfds.get(&tid) {
        match fdops::pidfd_getfd(p, fd) {
            Ok(f) => return Ok(f),
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => return Err(libc::EBADF),
            Err(_) => {
                sh.pidfds.remove(&tid);
            }
        }
    }
    let p = open()?;
    let f = fdops::pidfd_getfd(&p, fd).map_err(|e| errno_of(&e))?;
    if sh.pidfds.len() >= 256 {
        sh.pidfds.clear();
    }
    sh.pidfds.insert(tid, p);
    Ok(f)
}

/// getdents64: the whole directory is read once at position 0, sorted, then served from the cache;
/// the position of the guest's open file description is the index of the next entry.
fn getdents64(sh: &mut Shared, pid: i32, fd: i32, dirp: u64, count: usize) -> Result<i64, i32> {
    sh.ctl.note_event();
    let dir = borrow_fd(sh, pid, fd)?;
    let st = fdops::newfstatat_raw(Some(&dir), c"", libc::AT_EMPTY_PATH).map_err(|e| errno_of(&e))?;
    let mode = u32::from_le_bytes([st[24], st[25], st[26], st[27]]);
    if mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR);
    }
    let dev = u64::from_le_bytes(st[0..8].try_into().map_err(|_| libc::EIO)?);
    let ino = u64::from_le_bytes(st[8..16].try_into().map_err(|_| libc::EIO)?);
    let pos = fdops::lseek(&dir, 0, libc::SEEK_CUR).map_err(|e| errno_of(&e))?.max(0) as u64;
    let key = (dev, ino);
    if pos == 0 || !sh.dirs.contains_key(&key) {
        fdops::lseek(&dir, 0, libc::SEEK_SET).map_err(|e| errno_of(&e))?;
        let mut entries = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = fdops::getdents64(&dir, &mut buf).map_err(|e| errno_of(&e))?;
            if n == 0 {
                break;
            }
            DirListing::parse_dirents(&buf[..n], &mut entries);
        }
        let order = sh.ctl.dir_order;
        sh.dirs.insert(key, DirListing::new_ordered(entries, order));
    }
    let Shared { dirs, ctl, .. } = sh;
    let listing = dirs.get(&key).ok_or(libc::EIO)?;
    let (out, next) =
        listing.serve(pos, count, |e| ctl.inodes.inode(FileIdentity { dev, ino: e.ino })).map_err(|_| libc::EINVAL)?;
    if out.is_empty() {
        dirs.remove(&key);
    }
    write(pid, dirp, &out)?;
    fdops::lseek(&dir, next as i64, libc::SEEK_SET).map_err(|e| errno_of(&e))?;
    Ok(out.len() as i64)
}

/// openat/open: generated files are served from a memfd installed with ADDFD; others run natively.
fn open(n: &Notification, listener: &Listener, shared: &SharedRef, dirfd: i32, path: u64, flags: i32) -> Reply {
    let pid = n.pid as i32;
    let Ok(p) = memory::read_cstr(pid, path, 4096) else { return Reply::Continue };
    let Some(vf) = VirtualFile::for_path(&p) else {
        let mut sh = lock(shared);
        if let Some(r) = crate::tape::proc_open(&mut sh, n, listener, &p, flags) {
            return r;
        }
        sh.stats.continued += 1;
        return Reply::Continue;
    };
    let _ = dirfd; // only absolute paths are matched
    if flags & libc::O_ACCMODE == libc::O_WRONLY {
        return Reply::Continue;
    }
    if !listener.id_valid(n.id) {
        return Reply::Error(libc::EINTR);
    }
    let mut sh = lock(shared);
    let data = sh.ctl.virtual_file(n.pid as i32, vf, URANDOM_BYTES);
    count(&mut sh, syscall_name(n.nr as i64));
    let name = CString::new(format!("repro:{}", String::from_utf8_lossy(&p))).unwrap_or_else(|_| c"repro".into());
    match fdops::memfd_with(&name, &data) {
        Ok(fd) => Reply::AddFd { fd, cloexec: flags & libc::O_CLOEXEC != 0 },
        Err(e) => Reply::Error(errno_of(&e)),
    }
}

/// Virtual device, inode and times of a file. Only files whose times record writes (regular files,
/// directories, symlinks on real file systems) go through the order-preserving map; pipes, sockets,
/// devices and pseudo-file-system entries carry times that follow the host clock, so they read as the
/// logical now.
fn file_view(sh: &mut Shared, id: FileIdentity, times: FileTimes, mode: u32) -> (u64, u64, FileTimes) {
    let fmt = mode & libc::S_IFMT;
    let written = matches!(fmt, libc::S_IFREG | libc::S_IFDIR | libc::S_IFLNK) && !sh.pseudo_devs.contains(&id.dev);
    if written {
        return sh.ctl.file_view(id, times);
    }
    let (vdev, vino, _) = sh.ctl.file_view(id, FileTimes { atime: 0, mtime: 0, ctime: 0 });
    let now = sh.ctl.clock.peek(ClockKind::Realtime);
    let now = now.sec as i128 * 1_000_000_000 + now.nsec as i128;
    (vdev, vino, FileTimes { atime: now, mtime: now, ctime: now })
}

enum StatKind {
    /// `struct stat` to this address.
    Stat(u64),
    /// `struct statx` to this address, with this mask.
    Statx(u64, u32),
}

/// Rewrites "/proc/self" and "/proc/thread-self" so the supervisor resolves them for the guest task.
pub(crate) fn guest_path(p: &[u8], tid: i32) -> Vec<u8> {
    for (prefix, repl) in
        [(&b"/proc/self"[..], format!("/proc/{tid}")), (&b"/proc/thread-self"[..], format!("/proc/{tid}/task/{tid}"))]
    {
        if p.starts_with(prefix) && (p.len() == prefix.len() || p[prefix.len()] == b'/') {
            let mut v = repl.into_bytes();
            v.extend_from_slice(&p[prefix.len()..]);
            return v;
        }
    }
    p.to_vec()
}

fn stat(
    sh: &mut Shared,
    n: &Notification,
    listener: &Listener,
    dirfd: i32,
    path: Option<u64>,
    flags: i32,
    kind: StatKind,
) -> Result<i64, i32> {
    let tid = n.pid as i32;
    let p = match path {
        Some(addr) => memory::read_cstr(tid, addr, 4096).map_err(|e| errno_of(&e))?,
        None => Vec::new(),
    };
    if p.is_empty() && flags & libc::AT_EMPTY_PATH == 0 {
        return Err(libc::ENOENT);
    }
    let p = guest_path(&p, tid);
    let dir = if p.first() == Some(&b'/') {
        None
    } else if dirfd == libc::AT_FDCWD {
        let cwd = CString::new(format!("/proc/{tid}/cwd")).map_err(|_| libc::EINVAL)?;
        Some(fdops::openat(None, &cwd, libc::O_PATH | libc::O_DIRECTORY).map_err(|e| errno_of(&e))?)
    } else {
        Some(borrow_fd(sh, tid, dirfd)?)
    };
    let cpath = CString::new(p).map_err(|_| libc::EINVAL)?;
    if !listener.id_valid(n.id) {
        return Err(libc::EINTR);
    }
    let flags = flags & (libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT);
    match kind {
        StatKind::Stat(buf) => {
            let mut st = fdops::newfstatat_raw(dir.as_ref(), &cpath, flags).map_err(|e| errno_of(&e))?;
            let word = |b: &[u8], o: usize| i64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
            let id = FileIdentity { dev: word(&st, 0) as u64, ino: word(&st, 8) as u64 };
            let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
            let times = FileTimes {
                atime: ns(word(&st, 72), word(&st, 80)),
                mtime: ns(word(&st, 88), word(&st, 96)),
                ctime: ns(word(&st, 104), word(&st, 112)),
            };
            let mode = u32::from_le_bytes([st[24], st[25], st[26], st[27]]);
            let (vdev, vino, t) = file_view(sh, id, times, mode);
            st[0..8].copy_from_slice(&vdev.to_le_bytes());
            st[8..16].copy_from_slice(&vino.to_le_bytes());
            for (off, v) in [(72, t.atime), (88, t.mtime), (104, t.ctime)] {
                let ts = Timespec::from_ns(v);
                st[off..off + 8].copy_from_slice(&ts.sec.to_le_bytes());
                st[off + 8..off + 16].copy_from_slice(&ts.nsec.to_le_bytes());
            }
            write(tid, buf, &st).map(|_| 0)
        }
        StatKind::Statx(buf, mask) => {
            let sync = 0; // AT_STATX_SYNC_AS_STAT
            let mut sx =
                fdops::statx_raw(dir.as_ref(), &cpath, flags | sync, mask | 0xfff).map_err(|e| errno_of(&e))?;
            let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
            let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
            let dev = libc::makedev(u32_at(&sx, 136), u32_at(&sx, 140));
            let id = FileIdentity { dev, ino: u64_at(&sx, 32) };
            let ts = |o: usize| u64_at(&sx, o) as i64 as i128 * 1_000_000_000 + u32_at(&sx, o + 8) as i128;
            let times = FileTimes { atime: ts(64), mtime: ts(112), ctime: ts(96) };
            let btime = ts(80);
            let mode = u16::from_le_bytes([sx[28], sx[29]]) as u32;
            let (vdev, vino, t) = file_view(sh, id, times, mode);
            let vbtime = if btime != 0 { t.ctime.min(sh.ctl.file_times.map(id, btime, t.ctime)) } else { 0 };
            sx[32..40].copy_from_slice(&vino.to_le_bytes());
            sx[136..140].copy_from_slice(&0u32.to_le_bytes());
            sx[140..144].copy_from_slice(&(vdev as u32).to_le_bytes());
            for (off, v) in [(64, t.atime), (80, vbtime), (96, t.ctime), (112, t.mtime)] {
                let ts = Timespec::from_ns(v);
                sx[off..off + 8].copy_from_slice(&ts.sec.to_le_bytes());
                sx[off + 8..off + 12].copy_from_slice(&(ts.nsec as u32).to_le_bytes());
            }
            write(tid, buf, &sx).map(|_| 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_self_is_rewritten_for_the_guest() {
        assert_eq!(guest_path(b"/proc/self/stat", 7), b"/proc/7/stat");
        assert_eq!(guest_path(b"/proc/self", 7), b"/proc/7");
        assert_eq!(guest_path(b"/proc/selfish", 7), b"/proc/selfish");
        assert_eq!(guest_path(b"/proc/thread-self/x", 7), b"/proc/7/task/7/x");
        assert_eq!(guest_path(b"rel", 7), b"rel");
    }

    #[test]
    fn syscall_names() {
        assert_eq!(syscall_name(libc::SYS_clock_gettime), "clock_gettime");
        assert_eq!(syscall_name(libc::SYS_getdents64), "getdents64");
        assert_eq!(syscall_name(9999), "unknown");
        assert!(mediated_syscalls().contains(&(libc::SYS_getrandom as u32)));
    }
}
