//! Timed waits: poll, ppoll, select, pselect6, epoll_wait, epoll_pwait, epoll_pwait2 and futex waits
//! with a timeout. The filter sends them to the supervisor only when they have a finite, non-zero
//! timeout (see [`conditional_syscalls`]); infinite and non-blocking forms run natively.
//!
//! A timed wait that nothing can end is answered at once with a timeout, after jumping the logical
//! clock to its deadline (no wall-clock waiting). "Nothing can end it" means: none of its descriptors
//! is ready now (or, for a futex, the word still holds the expected value), and every other live
//! guest task is asleep in a wait only another guest task can end (waiting for a child, reading a
//! pipe or socket, an untimed futex or poll, pause...). A task that is running, stopped, in the
//! middle of a mediated syscall, or itself in a timed wait, could still end it (a pipe another guest
//! process writes to): then the wait runs natively, in real time, and is never cut short.

use std::collections::HashSet;
use std::os::fd::OwnedFd;

use repro_detcore::Timespec;
use repro_sys::fdops;
use repro_sys::memory;
use repro_sys::seccomp::{ArgCheck, Listener, Notification};

use crate::Shared;

/// Pseudo-errno: let the syscall run natively (the same value as notify's).
const CONTINUE: i32 = -1;

const FUTEX_WAIT: u64 = 0;
const FUTEX_WAIT_BITSET: u64 = 9;
const FUTEX_CLOCK_REALTIME: u64 = 256;

/// The waits the filter sends to the supervisor, with the condition that keeps the others native.
pub(crate) fn conditional_syscalls() -> Vec<(u32, ArgCheck)> {
    vec![
        (libc::SYS_poll as u32, ArgCheck::PositiveInt { arg: 2 }),
        (libc::SYS_ppoll as u32, ArgCheck::NonNull { arg: 2 }),
        (libc::SYS_select as u32, ArgCheck::NonNull { arg: 4 }),
        (libc::SYS_pselect6 as u32, ArgCheck::NonNull { arg: 4 }),
        (libc::SYS_epoll_wait as u32, ArgCheck::PositiveInt { arg: 3 }),
        (libc::SYS_epoll_pwait as u32, ArgCheck::PositiveInt { arg: 3 }),
        (libc::SYS_epoll_pwait2 as u32, ArgCheck::NonNull { arg: 3 }),
        (libc::SYS_futex as u32, ArgCheck::FutexTimedWait),
    ]
}

/// Name of a wait syscall, for the stats.
/// The waits on descriptors with a timeout: the poll, select and epoll families.
pub(crate) fn is_descriptor_wait(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_poll
            | libc::SYS_ppoll
            | libc::SYS_select
            | libc::SYS_pselect6
            | libc::SYS_epoll_wait
            | libc::SYS_epoll_pwait
            | libc::SYS_epoll_pwait2
    )
}

/// Every timed wait the filter may notify: the descriptor waits and futex.
pub(crate) fn is_timed_wait(nr: i64) -> bool {
    is_descriptor_wait(nr) || nr == libc::SYS_futex
}

pub(crate) fn syscall_name(nr: i64) -> Option<&'static str> {
    Some(match nr {
        libc::SYS_poll => "poll",
        libc::SYS_ppoll => "ppoll",
        libc::SYS_select => "select",
        libc::SYS_pselect6 => "pselect6",
        libc::SYS_epoll_wait => "epoll_wait",
        libc::SYS_epoll_pwait => "epoll_pwait",
        libc::SYS_epoll_pwait2 => "epoll_pwait2",
        libc::SYS_futex => "futex",
        _ => return None,
    })
}

/// When a wait times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    After(Timespec),
    /// An absolute time on clock `id`.
    At(i64, Timespec),
}

fn read_u64s(pid: i32, addr: u64, n: usize) -> Result<Vec<u64>, i32> {
    let mut b = vec![0u8; n * 8];
    memory::read_exact(pid, addr, &mut b).map_err(|_| CONTINUE)?;
    Ok(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
}

/// A relative timeout given as (seconds, sub-second units of `unit` ns); `None` if the kernel would
/// reject it (the native call then reports the error) or it is zero (nothing to wait for).
fn relative(sec: i64, sub: i64, unit: i64) -> Option<Deadline> {
    if sec < 0 || sub < 0 || sub >= 1_000_000_000 / unit || (sec == 0 && sub == 0) {
        return None;
    }
    Some(Deadline::After(Timespec { sec, nsec: sub * unit }))
}

fn millis(ms: i32) -> Option<Deadline> {
    (ms > 0).then(|| Deadline::After(Timespec { sec: ms as i64 / 1000, nsec: (ms as i64 % 1000) * 1_000_000 }))
}

fn timespec_at(pid: i32, addr: u64) -> Result<(i64, i64), i32> {
    let v = read_u64s(pid, addr, 2)?;
    Ok((v[0] as i64, v[1] as i64))
}

/// What the wait watches, to check whether it is already over.
enum Watch {
    /// pollfd array at `addr` with `n` entries.
    Poll {
        addr: u64,
        n: usize,
    },
    /// fd_sets (read, write, except) for descriptors below `nfds`.
    Select {
        nfds: usize,
        sets: [u64; 3],
    },
    Epoll {
        epfd: i32,
    },
    /// The futex word at `addr` must still hold `val`.
    Futex {
        addr: u64,
        val: u32,
    },
}

/// Answers a notified timed wait: jumps the clock and times it out, or lets it run natively.
pub(crate) fn answer(sh: &mut Shared, n: &Notification, listener: &Listener) -> Result<i64, i32> {
    let pid = n.pid as i32;
    let a = n.args;
    let nr = n.nr as i64;
    let (deadline, watch) = match nr {
        libc::SYS_poll => (millis(a[2] as i32), Watch::Poll { addr: a[0], n: a[1] as usize }),
        libc::SYS_ppoll => {
            let (s, ns) = timespec_at(pid, a[2])?;
            (relative(s, ns, 1), Watch::Poll { addr: a[0], n: a[1] as usize })
        }
        libc::SYS_select | libc::SYS_pselect6 => {
            let (s, sub) = timespec_at(pid, a[4])?;
            let unit = if nr == libc::SYS_select { 1000 } else { 1 };
            (relative(s, sub, unit), Watch::Select { nfds: a[0] as i32 as usize, sets: [a[1], a[2], a[3]] })
        }
        libc::SYS_epoll_wait | libc::SYS_epoll_pwait => (millis(a[3] as i32), Watch::Epoll { epfd: a[0] as i32 }),
        libc::SYS_epoll_pwait2 => {
            let (s, ns) = timespec_at(pid, a[3])?;
            (relative(s, ns, 1), Watch::Epoll { epfd: a[0] as i32 })
        }
        libc::SYS_futex => {
            let cmd = a[1] & 0x7f;
            let (s, ns) = timespec_at(pid, a[3])?;
            let d = match cmd {
                FUTEX_WAIT => relative(s, ns, 1),
                FUTEX_WAIT_BITSET if a[5] as u32 != 0 && s >= 0 && (0..1_000_000_000).contains(&ns) => {
                    let clock =
                        if a[1] & FUTEX_CLOCK_REALTIME != 0 { libc::CLOCK_REALTIME } else { libc::CLOCK_MONOTONIC };
                    Some(Deadline::At(clock as i64, Timespec { sec: s, nsec: ns }))
                }
                _ => None,
            };
            (d, Watch::Futex { addr: a[0], val: a[2] as u32 })
        }
        _ => return Err(CONTINUE),
    };
    let Some(deadline) = deadline else { return Err(CONTINUE) };
    // First establish that no other task can act, then look at the descriptors: in the other order a
    // task could write to them between the two looks and then block, and the wait would be cut short.
    if !others_blocked(sh, pid) {
        return Err(CONTINUE);
    }
    let outputs = match over_already(pid, &watch, &sh.inherited_fds) {
        Ok(Some(outputs)) => outputs,
        _ => return Err(CONTINUE),
    };
    // Everything read from the guest is only meaningful if the task is still waiting in this call.
    if !listener.id_valid(n.id) {
        return Err(libc::EINTR);
    }
    let moved = match deadline {
        Deadline::After(t) => sh.ctl.sleep_for(t),
        Deadline::At(clock, t) => sh.ctl.sleep_until(clock, t),
    };
    if moved.is_err() {
        return Err(CONTINUE);
    }
    sh.stats.waits_jumped += 1;
    // What the kernel writes back on a timeout: no revents, empty fd sets, no time left.
    for (addr, bytes) in outputs {
        memory::write(pid, addr, &bytes).map_err(|_| libc::EFAULT)?;
    }
    match nr {
        libc::SYS_ppoll => memory::write(pid, a[2], &[0u8; 16]).map_err(|_| libc::EFAULT)?,
        libc::SYS_select | libc::SYS_pselect6 => memory::write(pid, a[4], &[0u8; 16]).map_err(|_| libc::EFAULT)?,
        _ => {}
    }
    if nr == libc::SYS_futex {
        return Err(libc::ETIMEDOUT);
    }
    Ok(0)
}

/// `Ok(Some(writes))` when the wait would not end before its timeout by what is ready now, with the
/// guest memory to rewrite when it times out; `Ok(None)` when it would return at once.
/// Guest memory to rewrite: (address, bytes).
type Writes = Vec<(u64, Vec<u8>)>;

///
/// Only waits on descriptors the guest itself feeds count: a descriptor that something outside the
/// guest can make ready (see [`internal`]) makes the wait run natively (`Err(CONTINUE)`).
fn over_already(pid: i32, watch: &Watch, inherited: &HashSet<String>) -> Result<Option<Writes>, i32> {
    let check = |fd: i32| if internal(pid, fd, inherited) { Ok(()) } else { Err(CONTINUE) };
    let pidfd = || fdops::pidfd_open(pid, true).or_else(|_| fdops::pidfd_open(pid, false)).map_err(|_| CONTINUE);
    let borrow = |pidfd: &OwnedFd, fd: i32| fdops::pidfd_getfd(pidfd, fd).map_err(|_| CONTINUE);
    let ready = |fds: &[(OwnedFd, i16)]| -> Result<bool, i32> {
        let list: Vec<(&OwnedFd, i16)> = fds.iter().map(|(f, e)| (f, *e)).collect();
        Ok(fdops::poll_now(&list).map_err(|_| CONTINUE)?.iter().any(|&r| r != 0))
    };
    match *watch {
        Watch::Poll { addr, n } => {
            if n > 4096 {
                return Err(CONTINUE);
            }
            let mut raw = vec![0u8; n * 8];
            memory::read_exact(pid, addr, &mut raw).map_err(|_| CONTINUE)?;
            let p = pidfd()?;
            let mut fds = Vec::new();
            for e in raw.chunks_exact(8) {
                let fd = i32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                if fd >= 0 {
                    check(fd)?;
                    // An invalid descriptor is POLLNVAL, which ends the wait at once.
                    fds.push((borrow(&p, fd)?, i16::from_le_bytes([e[4], e[5]]) | libc::POLLHUP | libc::POLLERR));
                }
            }
            if ready(&fds)? {
                return Ok(None);
            }
            for e in raw.chunks_exact_mut(8) {
                e[6] = 0;
                e[7] = 0;
            }
            Ok(Some(vec![(addr, raw)]))
        }
        Watch::Select { nfds, sets } => {
            if nfds > 1024 {
                return Err(CONTINUE);
            }
            let words = nfds.div_ceil(64);
            let p = pidfd()?;
            let mut fds = Vec::new();
            let mut writes = Vec::new();
            for (i, &set) in sets.iter().enumerate() {
                if set == 0 || words == 0 {
                    continue;
                }
                let bits = read_u64s(pid, set, words)?;
                let events = [libc::POLLIN, libc::POLLOUT, libc::POLLPRI][i];
                for fd in (0..nfds).filter(|&fd| bits[fd / 64] >> (fd % 64) & 1 != 0) {
                    check(fd as i32)?;
                    fds.push((borrow(&p, fd as i32)?, events | libc::POLLHUP | libc::POLLERR));
                }
                writes.push((set, vec![0u8; words * 8]));
            }
            if ready(&fds)? {
                return Ok(None);
            }
            Ok(Some(writes))
        }
        Watch::Epoll { epfd } => {
            // The descriptors in the interest list, from /proc/<pid>/fdinfo/<epfd> ("tfd: N ...").
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{epfd}")).map_err(|_| CONTINUE)?;
            for l in info.lines().filter_map(|l| l.strip_prefix("tfd:")) {
                let fd = l.split_whitespace().next().and_then(|t| t.parse::<i32>().ok()).ok_or(CONTINUE)?;
                check(fd)?;
            }
            let p = pidfd()?;
            let ep = borrow(&p, epfd)?;
            if ready(&[(ep, libc::POLLIN)])? {
                return Ok(None);
            }
            Ok(Some(Vec::new()))
        }
        Watch::Futex { addr, val } => {
            let mut w = [0u8; 4];
            if addr % 4 != 0 {
                return Err(CONTINUE);
            }
            memory::read_exact(pid, addr, &mut w).map_err(|_| CONTINUE)?;
            if u32::from_le_bytes(w) != val {
                return Ok(None); // EAGAIN at once
            }
            Ok(Some(Vec::new()))
        }
    }
}

/// The identities (`/proc/<pid>/fd` link targets such as `pipe:[1234]`) of the descriptors the
/// supervisor's process has, which the guest inherits: their other ends are outside the guest.
pub(crate) fn inherited_fds() -> HashSet<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return HashSet::new() };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .filter(|t| !t.starts_with('/'))
        .collect()
}

/// Whether descriptor `fd` of `pid` can only be made ready by the guest itself: a pipe, eventfd,
/// signalfd or pidfd the guest created. Sockets (the network, or a server outside), terminals and
/// other devices, timerfds (host time), inotify (host file changes), nested epolls and anything the
/// guest inherited from outside can be made ready by the world outside, so a wait on them is never
/// jumped.
fn internal(pid: i32, fd: i32, inherited: &HashSet<String>) -> bool {
    let Ok(target) = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")) else { return false };
    let t = target.to_string_lossy();
    if inherited.contains(t.as_ref()) {
        return false;
    }
    t.starts_with("pipe:[")
        || matches!(t.as_ref(), "anon_inode:[eventfd]" | "anon_inode:[signalfd]" | "anon_inode:[pidfd]")
}

/// Whether every live guest task other than `me` is asleep in a wait that only another guest task
/// (or the world outside) can end.
fn others_blocked(sh: &Shared, me: i32) -> bool {
    sh.live.iter().filter(|&&t| t != me).all(|&t| blocked_indefinitely(t))
}

fn blocked_indefinitely(tid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{tid}/stat")) else {
        return true; // gone: it can do nothing any more
    };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    if state != Some('S') {
        return false; // running, stopped at a ptrace event, in disk sleep, a zombie about to be reaped...
    }
    let Ok(sc) = std::fs::read_to_string(format!("/proc/{tid}/syscall")) else { return false };
    let mut it = sc.split_whitespace();
    let Some(Ok(nr)) = it.next().map(|s| s.parse::<i64>()) else { return false };
    let args: Vec<u64> =
        it.take(6).map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).unwrap_or(u64::MAX)).collect();
    if args.len() < 6 {
        return false;
    }
    untimed_wait(nr, &args)
}

/// Whether a task asleep in syscall `nr` waits for something only another task can do.
fn untimed_wait(nr: i64, a: &[u64]) -> bool {
    match nr {
        libc::SYS_wait4 | libc::SYS_waitid | libc::SYS_pause | libc::SYS_rt_sigsuspend => true,
        libc::SYS_read
        | libc::SYS_readv
        | libc::SYS_pread64
        | libc::SYS_preadv
        | libc::SYS_write
        | libc::SYS_writev
        | libc::SYS_recvfrom
        | libc::SYS_recvmsg
        | libc::SYS_sendto
        | libc::SYS_sendmsg
        | libc::SYS_accept
        | libc::SYS_accept4
        | libc::SYS_msgrcv
        | libc::SYS_flock => true,
        libc::SYS_futex => matches!(a[1] & 0x7f, FUTEX_WAIT | FUTEX_WAIT_BITSET) && a[3] == 0,
        libc::SYS_poll => (a[2] as i32) < 0,
        libc::SYS_epoll_wait | libc::SYS_epoll_pwait => (a[3] as i32) < 0,
        libc::SYS_ppoll => a[2] == 0,
        libc::SYS_select | libc::SYS_pselect6 => a[4] == 0,
        libc::SYS_epoll_pwait2 => a[3] == 0,
        libc::SYS_rt_sigtimedwait => a[2] == 0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_parsed_like_the_kernel() {
        assert_eq!(millis(1500), Some(Deadline::After(Timespec { sec: 1, nsec: 500_000_000 })));
        assert_eq!(millis(0), None);
        assert_eq!(millis(-1), None);
        assert_eq!(relative(2, 500_000, 1000), Some(Deadline::After(Timespec { sec: 2, nsec: 500_000_000 })));
        assert_eq!(relative(0, 0, 1), None);
        assert_eq!(relative(0, 1_000_000, 1000), None, "tv_usec out of range");
        assert_eq!(relative(-1, 0, 1), None);
    }

    #[test]
    fn only_waits_another_task_must_end_count_as_blocked() {
        assert!(untimed_wait(libc::SYS_wait4, &[0; 6]));
        assert!(untimed_wait(libc::SYS_read, &[0; 6]));
        assert!(untimed_wait(libc::SYS_futex, &[0x1000, 128, 0, 0, 0, 0]));
        assert!(!untimed_wait(libc::SYS_futex, &[0x1000, 128, 0, 0x2000, 0, 0]), "a timed futex wait ends by itself");
        assert!(untimed_wait(libc::SYS_poll, &[0, 1, u32::MAX as u64, 0, 0, 0]));
        assert!(!untimed_wait(libc::SYS_poll, &[0, 1, 100, 0, 0, 0]));
        assert!(!untimed_wait(libc::SYS_nanosleep, &[0; 6]));
        assert!(!untimed_wait(libc::SYS_getdents64, &[0; 6]), "a pending mediated call will return");
    }

    #[test]
    fn only_descriptors_the_guest_feeds_are_internal() {
        let me = std::process::id() as i32;
        let (r, w) = std::io::pipe().unwrap();
        use std::os::fd::AsRawFd;
        let none = HashSet::new();
        assert!(internal(me, r.as_raw_fd(), &none));
        let outside: HashSet<String> =
            [std::fs::read_link(format!("/proc/self/fd/{}", w.as_raw_fd())).unwrap().to_string_lossy().into_owned()]
                .into();
        assert!(!internal(me, r.as_raw_fd(), &outside), "the same pipe, inherited from outside");
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!internal(me, sock.as_raw_fd(), &none), "sockets can be fed from outside");
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(!internal(me, f.as_raw_fd(), &none));
        assert!(!internal(me, 9999, &none));
        assert!(inherited_fds().iter().all(|t| !t.starts_with('/')));
    }

    #[test]
    fn a_running_or_unknown_task_is_not_blocked() {
        assert!(!blocked_indefinitely(std::process::id() as i32), "this test is running");
        assert!(blocked_indefinitely(i32::MAX), "no such task");
    }
}
