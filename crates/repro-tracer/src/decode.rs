//! Decoding: a raw notification (syscall number and six argument words) becomes a typed [`Syscall`], grouped by
//! the family of handlers that answers it. Only the arguments are decoded here; what they point at is read by
//! the handler through the [`Guest`](crate::guest::Guest).

/// A mediated syscall of the guest, with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syscall {
    // Time.
    ClockGettime {
        clock: i64,
        tp: u64,
    },
    ClockGetres {
        clock: i64,
        res: u64,
    },
    Gettimeofday {
        tv: u64,
        tz: u64,
    },
    Time {
        tloc: u64,
    },
    Nanosleep {
        req: u64,
        rem: u64,
    },
    ClockNanosleep {
        clock: i64,
        flags: i32,
        req: u64,
        rem: u64,
    },
    Times {
        buf: u64,
    },
    Getrusage {
        usage: u64,
    },
    // Timers in logical time (handlers/timers.rs).
    TimerfdCreate {
        clock: i64,
        flags: i32,
    },
    TimerfdSettime {
        fd: i32,
        flags: i32,
        new: u64,
        old: u64,
    },
    TimerfdGettime {
        fd: i32,
        cur: u64,
    },
    Alarm {
        seconds: u64,
    },
    /// setitimer: `new` and `old` are struct itimerval addresses (0: none).
    Setitimer {
        which: i32,
        new: u64,
        old: u64,
    },
    Getitimer {
        which: i32,
        cur: u64,
    },
    TimerCreate {
        clock: i64,
        sevp: u64,
        timerid: u64,
    },
    TimerSettime {
        id: i32,
        flags: i32,
        new: u64,
        old: u64,
    },
    TimerGettime {
        id: i32,
        cur: u64,
    },
    TimerGetoverrun {
        id: i32,
    },
    TimerDelete {
        id: i32,
    },
    // Entropy.
    Getrandom {
        buf: u64,
        len: usize,
        flags: u32,
    },
    // Identity.
    Uname {
        buf: u64,
    },
    Sysinfo {
        info: u64,
    },
    SchedGetaffinity {
        len: usize,
        mask: u64,
    },
    Getcpu {
        cpu: u64,
        node: u64,
        cache: u64,
    },
    // Files and directories.
    Getdents64 {
        fd: i32,
        dirp: u64,
        count: usize,
    },
    Open {
        dirfd: i32,
        path: u64,
        flags: i32,
    },
    /// The stat family: `path` is `None` for fstat.
    Stat {
        dirfd: i32,
        path: Option<u64>,
        flags: i32,
        out: StatOut,
    },
    /// Calls only notified while recording the paths the guest uses; let through after noting the path.
    PathUse {
        dirfd: i32,
        path: u64,
        kind: PathUse,
    },
    // Waits.
    Wait(TimedWait),
    // Processes.
    IoUringSetup,
    // What still varies (handlers::ports, handlers::statfs).
    /// statfs (`path`) or fstatfs (`fd`), writing a `struct statfs` at `buf`.
    Statfs {
        path: Option<u64>,
        fd: i32,
        buf: u64,
    },
    // Network and tapes.
    Net(NetCall),
    /// Anything else the filter sent (it runs natively).
    Other,
}

/// Where the stat family writes and in which layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatOut {
    /// `struct stat` at this address.
    Stat(u64),
    /// `struct statx` at this address, with this mask.
    Statx(u64, u32),
}

/// How a recorded path was used by a record-only call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathUse {
    Exec,
    Readlink,
    Access,
    Chdir,
}

/// A wait with a timeout, as the filter notifies it (see `handlers::waits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimedWait {
    /// poll(fds, nfds, timeout_ms).
    Poll { fds: u64, nfds: usize, timeout_ms: i32 },
    /// ppoll(fds, nfds, tsp, ...).
    Ppoll { fds: u64, nfds: usize, tsp: u64 },
    /// select (timeval: `micro`) or pselect6 (timespec).
    Select { nfds: usize, sets: [u64; 3], timeout: u64, micro: bool },
    /// epoll_wait / epoll_pwait(epfd, events, max, timeout_ms).
    Epoll { epfd: i32, timeout_ms: i32 },
    /// epoll_pwait2(epfd, events, max, tsp, ...).
    Epoll2 { epfd: i32, tsp: u64 },
    /// futex(uaddr, op, val, timeout, uaddr2, val3).
    Futex { uaddr: u64, op: u64, val: u32, timeout: u64, val3: u32 },
    /// futex_waitv(waiters, nr_futexes, flags, timeout, clockid): `n` entries of `struct futex_waitv` at
    /// `waiters`, an absolute timeout on `clockid`.
    FutexWaitv { waiters: u64, n: u32, flags: u32, timeout: u64, clockid: i64 },
}

/// A socket call (or plain read/write, which may be on a socket) while the network is taped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetCall {
    Socket {
        domain: i32,
        ty: i32,
        protocol: i32,
    },
    Connect {
        fd: i32,
        addr: u64,
        len: u32,
    },
    /// accept / accept4 (`flags` 0 for accept).
    Accept {
        fd: i32,
        addr: u64,
        addrlen: u64,
        flags: i32,
    },
    Read {
        fd: i32,
        from: ReadArgs,
    },
    Write {
        fd: i32,
        to: WriteArgs,
    },
    Getsockname {
        fd: i32,
        addr: u64,
        addrlen: u64,
    },
    /// sendfile, splice, sendmmsg, recvmmsg: data moves without a buffer the supervisor could tape; `fds` are
    /// the descriptor arguments.
    Untaped {
        name: &'static str,
        fds: [Option<i32>; 2],
    },
    /// Replay only: socket options and addresses.
    Control {
        fd: i32,
        op: Control,
    },
}

/// The destination of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadArgs {
    Read { buf: u64, len: usize },
    Readv { iov: u64, count: usize },
    Recvfrom { buf: u64, len: usize, flags: i32, addr: u64, addrlen: u64 },
    Recvmsg { msg: u64, flags: i32 },
}

/// The source of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteArgs {
    Write { buf: u64, len: usize },
    Writev { iov: u64, count: usize },
    Sendto { buf: u64, len: usize, flags: i32, addr: u64, addrlen: usize },
    Sendmsg { msg: u64, flags: i32 },
}

impl WriteArgs {
    /// write and writev (no flags, no address: the descriptor may be anything).
    pub(crate) fn is_plain(self) -> bool {
        matches!(self, WriteArgs::Write { .. } | WriteArgs::Writev { .. })
    }
}

impl ReadArgs {
    pub(crate) fn is_plain(self) -> bool {
        matches!(self, ReadArgs::Read { .. } | ReadArgs::Readv { .. })
    }
}

/// Socket calls answered without the tape on replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    Bind {
        addr: u64,
        len: u32,
    },
    Listen,
    Setsockopt,
    Getsockopt {
        optval: u64,
        optlen: u64,
    },
    Getpeername {
        addr: u64,
        addrlen: u64,
    },
    Shutdown,
    /// getsockname of a replayed socket whose tape has no sockname event (tapes made before they were taped).
    Getsockname {
        addr: u64,
        addrlen: u64,
    },
}

impl NetCall {
    /// read, readv, write, writev: calls on any descriptor, taped only on a socket.
    pub(crate) fn is_plain_io(self) -> bool {
        match self {
            NetCall::Read { from, .. } => from.is_plain(),
            NetCall::Write { to, .. } => to.is_plain(),
            _ => false,
        }
    }
}

impl TimedWait {
    /// The waits on descriptors (poll, select, epoll), as opposed to futex.
    pub(crate) fn on_descriptors(self) -> bool {
        !self.on_futexes()
    }

    /// futex and futex_waitv.
    pub(crate) fn on_futexes(self) -> bool {
        matches!(self, TimedWait::Futex { .. } | TimedWait::FutexWaitv { .. })
    }
}

/// Decodes notification `nr` with arguments `a`. Integer arguments are truncated to their C type as the kernel
/// does (an `int` is the low 32 bits of its register).
pub(crate) fn decode(nr: i64, a: [u64; 6]) -> Syscall {
    use Syscall as S;
    let int = |i: usize| a[i] as i32;
    let fd = int;
    match nr {
        libc::SYS_clock_gettime => S::ClockGettime { clock: int(0) as i64, tp: a[1] },
        libc::SYS_clock_getres => S::ClockGetres { clock: int(0) as i64, res: a[1] },
        libc::SYS_gettimeofday => S::Gettimeofday { tv: a[0], tz: a[1] },
        libc::SYS_time => S::Time { tloc: a[0] },
        libc::SYS_nanosleep => S::Nanosleep { req: a[0], rem: a[1] },
        libc::SYS_clock_nanosleep => S::ClockNanosleep { clock: int(0) as i64, flags: int(1), req: a[2], rem: a[3] },
        libc::SYS_times => S::Times { buf: a[0] },
        libc::SYS_getrusage => S::Getrusage { usage: a[1] },
        libc::SYS_timerfd_create => S::TimerfdCreate { clock: int(0) as i64, flags: int(1) },
        libc::SYS_timerfd_settime => S::TimerfdSettime { fd: fd(0), flags: int(1), new: a[2], old: a[3] },
        libc::SYS_timerfd_gettime => S::TimerfdGettime { fd: fd(0), cur: a[1] },
        libc::SYS_alarm => S::Alarm { seconds: a[0] as u32 as u64 },
        libc::SYS_setitimer => S::Setitimer { which: int(0), new: a[1], old: a[2] },
        libc::SYS_getitimer => S::Getitimer { which: int(0), cur: a[1] },
        libc::SYS_timer_create => S::TimerCreate { clock: int(0) as i64, sevp: a[1], timerid: a[2] },
        libc::SYS_timer_settime => S::TimerSettime { id: int(0), flags: int(1), new: a[2], old: a[3] },
        libc::SYS_timer_gettime => S::TimerGettime { id: int(0), cur: a[1] },
        libc::SYS_timer_getoverrun => S::TimerGetoverrun { id: int(0) },
        libc::SYS_timer_delete => S::TimerDelete { id: int(0) },
        libc::SYS_getrandom => S::Getrandom { buf: a[0], len: a[1] as usize, flags: a[2] as u32 },
        libc::SYS_uname => S::Uname { buf: a[0] },
        libc::SYS_sysinfo => S::Sysinfo { info: a[0] },
        libc::SYS_sched_getaffinity => S::SchedGetaffinity { len: a[1] as usize, mask: a[2] },
        libc::SYS_getcpu => S::Getcpu { cpu: a[0], node: a[1], cache: a[2] },
        libc::SYS_getdents64 => S::Getdents64 { fd: fd(0), dirp: a[1], count: a[2] as u32 as usize },
        libc::SYS_open => S::Open { dirfd: libc::AT_FDCWD, path: a[0], flags: int(1) },
        libc::SYS_openat => S::Open { dirfd: fd(0), path: a[1], flags: int(2) },
        libc::SYS_stat => S::Stat { dirfd: libc::AT_FDCWD, path: Some(a[0]), flags: 0, out: StatOut::Stat(a[1]) },
        libc::SYS_lstat => S::Stat {
            dirfd: libc::AT_FDCWD,
            path: Some(a[0]),
            flags: libc::AT_SYMLINK_NOFOLLOW,
            out: StatOut::Stat(a[1]),
        },
        libc::SYS_fstat => S::Stat { dirfd: fd(0), path: None, flags: libc::AT_EMPTY_PATH, out: StatOut::Stat(a[1]) },
        libc::SYS_newfstatat => S::Stat { dirfd: fd(0), path: Some(a[1]), flags: int(3), out: StatOut::Stat(a[2]) },
        libc::SYS_statx => {
            S::Stat { dirfd: fd(0), path: Some(a[1]), flags: int(2), out: StatOut::Statx(a[4], a[3] as u32) }
        }
        libc::SYS_execve => S::PathUse { dirfd: libc::AT_FDCWD, path: a[0], kind: PathUse::Exec },
        libc::SYS_execveat => S::PathUse { dirfd: fd(0), path: a[1], kind: PathUse::Exec },
        libc::SYS_readlink => S::PathUse { dirfd: libc::AT_FDCWD, path: a[0], kind: PathUse::Readlink },
        libc::SYS_readlinkat => S::PathUse { dirfd: fd(0), path: a[1], kind: PathUse::Readlink },
        libc::SYS_access => S::PathUse { dirfd: libc::AT_FDCWD, path: a[0], kind: PathUse::Access },
        libc::SYS_faccessat | libc::SYS_faccessat2 => S::PathUse { dirfd: fd(0), path: a[1], kind: PathUse::Access },
        libc::SYS_chdir => S::PathUse { dirfd: libc::AT_FDCWD, path: a[0], kind: PathUse::Chdir },
        libc::SYS_poll => S::Wait(TimedWait::Poll { fds: a[0], nfds: a[1] as usize, timeout_ms: int(2) }),
        libc::SYS_ppoll => S::Wait(TimedWait::Ppoll { fds: a[0], nfds: a[1] as usize, tsp: a[2] }),
        libc::SYS_select | libc::SYS_pselect6 => S::Wait(TimedWait::Select {
            nfds: int(0) as usize,
            sets: [a[1], a[2], a[3]],
            timeout: a[4],
            micro: nr == libc::SYS_select,
        }),
        libc::SYS_epoll_wait | libc::SYS_epoll_pwait => S::Wait(TimedWait::Epoll { epfd: fd(0), timeout_ms: int(3) }),
        libc::SYS_epoll_pwait2 => S::Wait(TimedWait::Epoll2 { epfd: fd(0), tsp: a[3] }),
        libc::SYS_futex => {
            S::Wait(TimedWait::Futex { uaddr: a[0], op: a[1], val: a[2] as u32, timeout: a[3], val3: a[5] as u32 })
        }
        libc::SYS_futex_waitv => S::Wait(TimedWait::FutexWaitv {
            waiters: a[0],
            n: a[1] as u32,
            flags: a[2] as u32,
            timeout: a[3],
            clockid: int(4) as i64,
        }),
        libc::SYS_io_uring_setup => S::IoUringSetup,
        // What still varies.
        libc::SYS_statfs => S::Statfs { path: Some(a[0]), fd: libc::AT_FDCWD, buf: a[1] },
        libc::SYS_fstatfs => S::Statfs { path: None, fd: int(0), buf: a[1] },
        _ => decode_net(nr, a).map_or(S::Other, S::Net),
    }
}

fn decode_net(nr: i64, a: [u64; 6]) -> Option<NetCall> {
    use NetCall as N;
    let int = |i: usize| a[i] as i32;
    Some(match nr {
        libc::SYS_socket => N::Socket { domain: int(0), ty: int(1), protocol: int(2) },
        libc::SYS_connect => N::Connect { fd: int(0), addr: a[1], len: a[2] as u32 },
        libc::SYS_accept => N::Accept { fd: int(0), addr: a[1], addrlen: a[2], flags: 0 },
        libc::SYS_accept4 => N::Accept { fd: int(0), addr: a[1], addrlen: a[2], flags: int(3) },
        libc::SYS_read => N::Read { fd: int(0), from: ReadArgs::Read { buf: a[1], len: a[2] as usize } },
        libc::SYS_readv => N::Read { fd: int(0), from: ReadArgs::Readv { iov: a[1], count: a[2] as usize } },
        libc::SYS_recvfrom => N::Read {
            fd: int(0),
            from: ReadArgs::Recvfrom { buf: a[1], len: a[2] as usize, flags: int(3), addr: a[4], addrlen: a[5] },
        },
        libc::SYS_recvmsg => N::Read { fd: int(0), from: ReadArgs::Recvmsg { msg: a[1], flags: int(2) } },
        libc::SYS_write => N::Write { fd: int(0), to: WriteArgs::Write { buf: a[1], len: a[2] as usize } },
        libc::SYS_writev => N::Write { fd: int(0), to: WriteArgs::Writev { iov: a[1], count: a[2] as usize } },
        libc::SYS_sendto => N::Write {
            fd: int(0),
            to: WriteArgs::Sendto { buf: a[1], len: a[2] as usize, flags: int(3), addr: a[4], addrlen: a[5] as usize },
        },
        libc::SYS_sendmsg => N::Write { fd: int(0), to: WriteArgs::Sendmsg { msg: a[1], flags: int(2) } },
        libc::SYS_getsockname => N::Getsockname { fd: int(0), addr: a[1], addrlen: a[2] },
        libc::SYS_sendfile => N::Untaped { name: "sendfile", fds: [Some(int(0)), Some(int(1))] },
        libc::SYS_splice => N::Untaped { name: "splice", fds: [Some(int(0)), Some(int(2))] },
        libc::SYS_sendmmsg => N::Untaped { name: "sendmmsg", fds: [Some(int(0)), None] },
        libc::SYS_recvmmsg => N::Untaped { name: "recvmmsg", fds: [Some(int(0)), None] },
        libc::SYS_bind => N::Control { fd: int(0), op: Control::Bind { addr: a[1], len: a[2] as u32 } },
        libc::SYS_listen => N::Control { fd: int(0), op: Control::Listen },
        libc::SYS_setsockopt => N::Control { fd: int(0), op: Control::Setsockopt },
        libc::SYS_getsockopt => N::Control { fd: int(0), op: Control::Getsockopt { optval: a[3], optlen: a[4] } },
        libc::SYS_getpeername => N::Control { fd: int(0), op: Control::Getpeername { addr: a[1], addrlen: a[2] } },
        libc::SYS_shutdown => N::Control { fd: int(0), op: Control::Shutdown },
        _ => return None,
    })
}

macro_rules! names {
    ($($name:ident),* $(,)?) => {
        /// The name of syscall `nr` for the stats ("unknown" for one the supervisor does not mediate).
        pub(crate) fn name(nr: i64) -> &'static str {
            $(if nr == libc::$name { return &stringify!($name)[4..]; })*
            "unknown"
        }
    };
}

names!(
    SYS_sched_setscheduler,
    SYS_sched_setparam,
    SYS_sched_setattr,
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
    SYS_getitimer,
    SYS_timer_settime,
    SYS_timer_gettime,
    SYS_timer_getoverrun,
    SYS_timer_delete,
    SYS_timerfd_settime,
    SYS_timerfd_gettime,
    SYS_poll,
    SYS_ppoll,
    SYS_select,
    SYS_pselect6,
    SYS_epoll_wait,
    SYS_epoll_pwait,
    SYS_epoll_pwait2,
    SYS_futex,
    SYS_futex_waitv,
    // What still varies.
    SYS_bind,
    SYS_connect,
    SYS_listen,
    SYS_statfs,
    SYS_fstatfs,
);

/// Syscall numbers the filter always sends to the supervisor.
pub(crate) const MEDIATED: [i64; 38] = [
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_gettimeofday,
    libc::SYS_time,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_getrandom,
    libc::SYS_uname,
    libc::SYS_sysinfo,
    libc::SYS_getdents64,
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_sched_getaffinity,
    libc::SYS_getcpu,
    libc::SYS_times,
    libc::SYS_getrusage,
    libc::SYS_timerfd_create,
    libc::SYS_io_uring_setup,
    libc::SYS_alarm,
    libc::SYS_setitimer,
    libc::SYS_timer_create,
    libc::SYS_getitimer,
    libc::SYS_timer_settime,
    libc::SYS_timer_gettime,
    libc::SYS_timer_getoverrun,
    libc::SYS_timer_delete,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    // What still varies: kernel-chosen ports, file system figures.
    libc::SYS_bind,
    libc::SYS_connect,
    libc::SYS_listen,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_names() {
        assert_eq!(name(libc::SYS_clock_gettime), "clock_gettime");
        assert_eq!(name(libc::SYS_getdents64), "getdents64");
        assert_eq!(name(libc::SYS_epoll_pwait2), "epoll_pwait2");
        assert_eq!(name(9999), "unknown");
        for nr in MEDIATED {
            assert_ne!(name(nr), "unknown", "{nr}");
            assert_ne!(decode(nr, [0; 6]), Syscall::Other, "{nr} decodes");
        }
    }

    #[test]
    fn arguments_are_typed_like_the_kernel() {
        // An int argument is the low 32 bits of its register.
        let d = decode(libc::SYS_clock_gettime, [u32::MAX as u64, 0x1000, 0, 0, 0, 0]);
        assert_eq!(d, Syscall::ClockGettime { clock: -1, tp: 0x1000 });
        let d = decode(libc::SYS_openat, [libc::AT_FDCWD as u32 as u64, 0x10, libc::O_CLOEXEC as u64, 0, 0, 0]);
        assert_eq!(d, Syscall::Open { dirfd: libc::AT_FDCWD, path: 0x10, flags: libc::O_CLOEXEC });
        let d = decode(libc::SYS_statx, [3, 0x10, 0x100, 0x7ff, 0x20, 0]);
        assert_eq!(d, Syscall::Stat { dirfd: 3, path: Some(0x10), flags: 0x100, out: StatOut::Statx(0x20, 0x7ff) });
        let d = decode(libc::SYS_select, [5, 1, 0, 0, 0x30, 0]);
        assert_eq!(d, Syscall::Wait(TimedWait::Select { nfds: 5, sets: [1, 0, 0], timeout: 0x30, micro: true }));
        let d = decode(libc::SYS_splice, [1, 0, 2, 0, 0, 0]);
        assert_eq!(d, Syscall::Net(NetCall::Untaped { name: "splice", fds: [Some(1), Some(2)] }));
        assert!(matches!(decode(libc::SYS_read, [0; 6]), Syscall::Net(c) if c.is_plain_io()));
        assert!(matches!(decode(libc::SYS_sendto, [0; 6]), Syscall::Net(c) if !c.is_plain_io()));
        assert_eq!(decode(libc::SYS_mmap, [0; 6]), Syscall::Other);
    }
}
