//! The policy of timed waits (poll, select, epoll, futex): when a wait times out, which waits another task must
//! end, and which descriptors only the guest can make ready. The transport reads the guest's arguments and the
//! kernel's view of the other tasks; what to conclude from them is decided here.

use std::collections::HashSet;

use crate::clock::{ClockKind, Timespec};

/// When a timed wait times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// After this long.
    After(Timespec),
    /// At this absolute time on clock id `.0`.
    At(i64, Timespec),
}

const FUTEX_CMD_MASK: u64 = 0x7f;
const FUTEX_WAIT: u64 = 0;
const FUTEX_WAIT_BITSET: u64 = 9;
const FUTEX_CLOCK_REALTIME: u64 = 256;

impl Deadline {
    /// A timeout in milliseconds (poll, epoll_wait); `None` when it is not positive (nothing to jump).
    pub fn millis(ms: i32) -> Option<Deadline> {
        (ms > 0).then(|| Deadline::After(Timespec { sec: ms as i64 / 1000, nsec: (ms as i64 % 1000) * 1_000_000 }))
    }

    /// A relative timeout given as (seconds, sub-second units of `unit` ns); `None` if the kernel would
    /// reject it (the native call then reports the error) or it is zero (nothing to wait for).
    pub fn relative(sec: i64, sub: i64, unit: i64) -> Option<Deadline> {
        if unit <= 0 || sec < 0 || sub < 0 || sub >= 1_000_000_000 / unit || (sec == 0 && sub == 0) {
            return None;
        }
        Some(Deadline::After(Timespec { sec, nsec: sub * unit }))
    }

    /// The timeout of a futex call `op` (with `bitset`) and timespec (`sec`, `nsec`); `None` for an operation
    /// that is not a wait the supervisor can time out.
    pub fn futex(op: u64, bitset: u32, sec: i64, nsec: i64) -> Option<Deadline> {
        match op & FUTEX_CMD_MASK {
            FUTEX_WAIT => Deadline::relative(sec, nsec, 1),
            FUTEX_WAIT_BITSET if bitset != 0 && sec >= 0 && (0..1_000_000_000).contains(&nsec) => {
                let clock = if op & FUTEX_CLOCK_REALTIME != 0 { libc::CLOCK_REALTIME } else { libc::CLOCK_MONOTONIC };
                Some(Deadline::At(clock as i64, Timespec { sec, nsec }))
            }
            _ => None,
        }
    }

    /// The timeout of `futex_waitv(waiters, n, flags, timeout, clockid)`: always absolute, on CLOCK_MONOTONIC or
    /// CLOCK_REALTIME; `None` for what the kernel rejects (flags, another clock, a bad timespec: the native
    /// call reports the error).
    pub fn futex_waitv(flags: u32, clockid: i64, sec: i64, nsec: i64) -> Option<Deadline> {
        let clock_ok = clockid == libc::CLOCK_MONOTONIC as i64 || clockid == libc::CLOCK_REALTIME as i64;
        (flags == 0 && clock_ok && sec >= 0 && (0..1_000_000_000).contains(&nsec))
            .then_some(Deadline::At(clockid, Timespec { sec, nsec }))
    }
}

/// Whether a task asleep in syscall `nr` with arguments `a` waits for something only another task (or the
/// world outside) can do: waiting for a child, reading a pipe or socket, an untimed futex or poll, pause...
pub fn untimed_wait(nr: i64, a: &[u64]) -> bool {
    if a.len() < 6 {
        return false;
    }
    let arg = |i: usize| a[i];
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
        libc::SYS_futex => matches!(arg(1) & FUTEX_CMD_MASK, FUTEX_WAIT | FUTEX_WAIT_BITSET) && arg(3) == 0,
        libc::SYS_futex_waitv => arg(3) == 0,
        libc::SYS_poll => (arg(2) as i32) < 0,
        libc::SYS_epoll_wait | libc::SYS_epoll_pwait => (arg(3) as i32) < 0,
        libc::SYS_ppoll => arg(2) == 0,
        libc::SYS_select | libc::SYS_pselect6 => arg(4) == 0,
        libc::SYS_epoll_pwait2 => arg(3) == 0,
        libc::SYS_rt_sigtimedwait => arg(2) == 0,
        _ => false,
    }
}

/// Whether a descriptor whose `/proc/<pid>/fd` link reads `target` can only be made ready by the guest itself:
/// a pipe, eventfd, signalfd or pidfd the guest created, and, when the guest has a network namespace of its own
/// (`own_network`: only `lo`, nothing outside can connect or send to it), any socket it created: a socketpair
/// (asyncio's and libuv's self-pipe), an AF_UNIX socket, a loopback TCP or UDP socket. Under the host's network
/// a socket may be fed from outside. Terminals and other devices, timerfds (host time), inotify (host file
/// changes), nested epolls and anything the guest inherited from outside (`inherited`) can be made ready by the
/// world outside, so a wait on them is never jumped.
pub fn internal_descriptor(target: &str, inherited: &HashSet<String>, own_network: bool) -> bool {
    if inherited.contains(target) {
        return false;
    }
    target.starts_with("pipe:[")
        || (own_network && target.starts_with("socket:["))
        || matches!(target, "anon_inode:[eventfd]" | "anon_inode:[signalfd]" | "anon_inode:[pidfd]")
}

/// Where the host's clock will be when the logical clock reaches `at`, a wait's absolute deadline in logical
/// time, given both clocks' readings now (same clock id): the host deadline is as far from the host's now as
/// `at` is from the logical now. `None` when the deadline has passed in logical time (the wait times out at
/// once). The kernel compares absolute deadlines with the host's clock, so a logical one must never reach it.
pub fn host_deadline(at: Timespec, logical_now: Timespec, host_now: Timespec) -> Option<Timespec> {
    let ns = |t: Timespec| t.sec as i128 * 1_000_000_000 + t.nsec as i128;
    let left = ns(at) - ns(logical_now);
    (left > 0).then(|| Timespec::from_ns(ns(host_now) + left))
}

/// The logical CLOCK_MONOTONIC time, in nanoseconds, at which a wait with `deadline` started when the logical
/// clocks read `now_mono` and `now_real` times out (an absolute CLOCK_REALTIME deadline is as far from
/// `now_real` as the result is from `now_mono`); `None` for a CPU-time or unknown clock (it is not parked).
pub fn monotonic_deadline_ns(deadline: Deadline, now_mono: Timespec, now_real: Timespec) -> Option<i128> {
    let ns = |t: Timespec| t.sec as i128 * 1_000_000_000 + t.nsec as i128;
    match deadline {
        Deadline::After(d) => Some(ns(now_mono) + ns(d)),
        Deadline::At(clock, t) => match ClockKind::from_id(clock) {
            Ok(ClockKind::Monotonic) => Some(ns(t)),
            Ok(ClockKind::Realtime) => Some(ns(now_mono) + ns(t) - ns(now_real)),
            _ => None,
        },
    }
}

/// A timed wait the supervisor holds (parked) until something in the guest ends it or every guest task is
/// blocked: then the parked wait with the earliest deadline times out, the logical clock jumping to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkedWait {
    pub tid: i32,
    /// Its deadline on the logical CLOCK_MONOTONIC, in nanoseconds.
    pub deadline_ns: i128,
}

/// The parked wait that times out first when every task is blocked: the earliest deadline, ties broken by the
/// lower task id (ids are deterministic in the guest's PID namespace; the order the waits arrived in is not).
pub fn first_to_expire(parked: impl IntoIterator<Item = ParkedWait>) -> Option<ParkedWait> {
    parked.into_iter().min_by_key(|p| (p.deadline_ns, p.tid))
}

/// Whether a task whose `/proc/<tid>/stat` state letter is `state` can do nothing any more: a zombie (exited,
/// not yet reaped: a child started by `subprocess.Popen` that has finished) or a dead task.
pub fn finished_state(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_parsed_like_the_kernel() {
        assert_eq!(Deadline::millis(1500), Some(Deadline::After(Timespec { sec: 1, nsec: 500_000_000 })));
        assert_eq!(Deadline::millis(0), None);
        assert_eq!(Deadline::millis(-1), None);
        let d = Deadline::relative(2, 500_000, 1000);
        assert_eq!(d, Some(Deadline::After(Timespec { sec: 2, nsec: 500_000_000 })));
        assert_eq!(Deadline::relative(0, 0, 1), None);
        assert_eq!(Deadline::relative(0, 1_000_000, 1000), None, "tv_usec out of range");
        assert_eq!(Deadline::relative(-1, 0, 1), None);
        assert_eq!(Deadline::futex(0, 0, 1, 0), Some(Deadline::After(Timespec { sec: 1, nsec: 0 })));
        let abs = Deadline::futex(9 | 256, u32::MAX, 5, 7);
        assert_eq!(abs, Some(Deadline::At(libc::CLOCK_REALTIME as i64, Timespec { sec: 5, nsec: 7 })));
        assert_eq!(Deadline::futex(9, 0, 5, 7), None, "an empty bitset is EINVAL, left to the kernel");
        assert_eq!(Deadline::futex(1, 0, 5, 7), None, "FUTEX_WAKE does not wait");
        let mono = libc::CLOCK_MONOTONIC as i64;
        assert_eq!(Deadline::futex_waitv(0, mono, 5, 7), Some(Deadline::At(mono, Timespec { sec: 5, nsec: 7 })));
        let real = libc::CLOCK_REALTIME as i64;
        assert_eq!(Deadline::futex_waitv(0, real, 5, 0), Some(Deadline::At(real, Timespec { sec: 5, nsec: 0 })));
        assert_eq!(Deadline::futex_waitv(1, mono, 5, 7), None, "flags must be 0");
        assert_eq!(Deadline::futex_waitv(0, libc::CLOCK_BOOTTIME as i64, 5, 7), None, "EINVAL natively");
        assert_eq!(Deadline::futex_waitv(0, mono, 5, 1_000_000_000), None);
        assert_eq!(Deadline::futex_waitv(0, mono, -1, 0), None);
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
        assert!(!untimed_wait(libc::SYS_futex, &[]), "missing arguments are not a wait");
        assert!(untimed_wait(libc::SYS_futex_waitv, &[0x1000, 2, 0, 0, 1, 0]));
        assert!(!untimed_wait(libc::SYS_futex_waitv, &[0x1000, 2, 0, 0x2000, 1, 0]), "timed");
    }

    #[test]
    fn only_descriptors_the_guest_feeds_are_internal() {
        let none = HashSet::new();
        assert!(internal_descriptor("pipe:[12]", &none, false));
        assert!(internal_descriptor("anon_inode:[eventfd]", &none, false));
        assert!(!internal_descriptor("socket:[12]", &none, false), "the host's network: fed from outside");
        assert!(internal_descriptor("socket:[12]", &none, true), "the guest's own network: only the guest feeds it");
        assert!(!internal_descriptor("/dev/pts/0", &none, true));
        assert!(!internal_descriptor("anon_inode:[timerfd]", &none, true));
        let outside: HashSet<String> = ["pipe:[12]".to_string(), "socket:[9]".to_string()].into();
        assert!(!internal_descriptor("pipe:[12]", &outside, true), "the same pipe, inherited from outside");
        assert!(!internal_descriptor("socket:[9]", &outside, true), "a socket inherited from outside");
    }

    #[test]
    fn absolute_deadlines_are_moved_onto_the_host_clock() {
        let ts = |sec, nsec| Timespec { sec, nsec };
        // 0.5 s left in logical time: 0.5 s from the host's now.
        assert_eq!(
            host_deadline(ts(10_001, 0), ts(10_000, 500_000_000), ts(250_000, 900_000_000)),
            Some(ts(250_001, 400_000_000))
        );
        assert_eq!(host_deadline(ts(10_000, 0), ts(10_000, 0), ts(5, 0)), None, "due now: times out at once");
        assert_eq!(host_deadline(ts(9_000, 0), ts(10_000, 0), ts(5, 0)), None, "passed");
        // A host clock far behind the logical one (a freshly booted host) still gets a near deadline.
        assert_eq!(host_deadline(ts(10_000, 1), ts(10_000, 0), ts(3, 0)), Some(ts(3, 1)));
    }

    #[test]
    fn the_earliest_parked_deadline_expires_first() {
        let mono = Timespec { sec: 10_000, nsec: 0 };
        let real = Timespec { sec: 1_700_000_000, nsec: 0 };
        let d = monotonic_deadline_ns(Deadline::After(Timespec { sec: 0, nsec: 19_000_000 }), mono, real);
        assert_eq!(d, Some(10_000_019_000_000));
        let at = Deadline::At(libc::CLOCK_MONOTONIC as i64, Timespec { sec: 10_005, nsec: 1 });
        assert_eq!(monotonic_deadline_ns(at, mono, real), Some(10_005_000_000_001));
        let at_real = Deadline::At(libc::CLOCK_REALTIME as i64, Timespec { sec: 1_700_000_002, nsec: 0 });
        assert_eq!(monotonic_deadline_ns(at_real, mono, real), Some(10_002_000_000_000), "2 s away on either clock");
        let cpu = Deadline::At(libc::CLOCK_PROCESS_CPUTIME_ID as i64, mono);
        assert_eq!(monotonic_deadline_ns(cpu, mono, real), None);
        let w = |tid, deadline_ns| ParkedWait { tid, deadline_ns };
        assert_eq!(first_to_expire([w(5, 300), w(7, 100), w(3, 200)]), Some(w(7, 100)));
        assert_eq!(first_to_expire([w(9, 100), w(4, 100)]), Some(w(4, 100)), "a tie goes to the lower task id");
        assert_eq!(first_to_expire([]), None);
    }

    #[test]
    fn finished_tasks_can_end_no_wait() {
        assert!(finished_state('Z'));
        assert!(finished_state('X'));
        assert!(!finished_state('S'));
        assert!(!finished_state('R'));
        assert!(!finished_state('t'));
    }
}
