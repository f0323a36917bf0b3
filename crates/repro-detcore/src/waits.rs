//! The policy of timed waits (poll, select, epoll, futex): when a wait times out, which waits another task must
//! end, and which descriptors only the guest can make ready. The transport reads the guest's arguments and the
//! kernel's view of the other tasks; what to conclude from them is decided here.

use std::collections::HashSet;

use crate::clock::Timespec;

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
/// a pipe, eventfd, signalfd or pidfd the guest created. Sockets (the network, or a server outside), terminals
/// and other devices, timerfds (host time), inotify (host file changes), nested epolls and anything the guest
/// inherited from outside (`inherited`) can be made ready by the world outside, so a wait on them is never
/// jumped.
pub fn internal_descriptor(target: &str, inherited: &HashSet<String>) -> bool {
    if inherited.contains(target) {
        return false;
    }
    target.starts_with("pipe:[")
        || matches!(target, "anon_inode:[eventfd]" | "anon_inode:[signalfd]" | "anon_inode:[pidfd]")
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
    }

    #[test]
    fn only_descriptors_the_guest_feeds_are_internal() {
        let none = HashSet::new();
        assert!(internal_descriptor("pipe:[12]", &none));
        assert!(internal_descriptor("anon_inode:[eventfd]", &none));
        assert!(!internal_descriptor("socket:[12]", &none));
        assert!(!internal_descriptor("/dev/pts/0", &none));
        assert!(!internal_descriptor("anon_inode:[timerfd]", &none));
        let outside: HashSet<String> = ["pipe:[12]".to_string()].into();
        assert!(!internal_descriptor("pipe:[12]", &outside), "the same pipe, inherited from outside");
    }
}
