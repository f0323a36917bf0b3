//! Kernel scheduling of the guest and the supervisor: SCHED_FIFO for the guest's threads (so that one runs until
//! it blocks), thread CPU affinity, and RLIMIT_RTPRIO, which lets a task in a user namespace choose SCHED_FIFO.

use std::io;

/// The guest's threads' real-time priority; the supervisor's tracer runs one above it.
pub const GUEST_RT_PRIORITY: i32 = 1;
/// The tracer thread's real-time priority: it handles every ptrace stop before any guest thread runs again.
pub const TRACER_RT_PRIORITY: i32 = 2;

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Puts thread `tid` (0: the calling thread) in SCHED_FIFO at `priority`. Without CAP_SYS_NICE in the initial
/// user namespace this needs RLIMIT_RTPRIO of at least `priority` (EPERM otherwise).
pub fn set_fifo(tid: i32, priority: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: priority };
    // SAFETY: a valid sched_param on this stack frame; the kernel only reads it.
    check(unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &p) })
}

/// Puts thread `tid` (0: the calling thread) back in SCHED_OTHER (always allowed: it lowers the policy).
pub fn set_other(tid: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in set_fifo.
    check(unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &p) })
}

/// The scheduling policy of thread `tid` (SCHED_FIFO, SCHED_OTHER...).
pub fn policy_of(tid: i32) -> io::Result<i32> {
    // SAFETY: takes a thread id only.
    let rc = unsafe { libc::sched_getscheduler(tid) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Pins the calling thread to `cpus` (threads it creates later inherit it).
pub fn pin_this_thread(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: `c` is below CPU_SETSIZE, within the set.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: a valid set and its size.
    check(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })
}

/// Raises RLIMIT_RTPRIO (soft and hard) to at least `priority`, so that this process and what it starts, in a
/// user namespace too, may choose SCHED_FIFO up to it. Raising the hard limit needs CAP_SYS_RESOURCE: without
/// it, the soft limit is raised as far as the hard one allows.
pub fn allow_rt_priority(priority: u64) -> io::Result<()> {
    let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out-pointer.
    check(unsafe { libc::getrlimit(libc::RLIMIT_RTPRIO, &mut cur) })?;
    if cur.rlim_cur >= priority {
        return Ok(());
    }
    let want = libc::rlimit { rlim_cur: priority, rlim_max: cur.rlim_max.max(priority) };
    // SAFETY: a valid rlimit on this stack frame.
    if unsafe { libc::setrlimit(libc::RLIMIT_RTPRIO, &want) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    let soft = libc::rlimit { rlim_cur: cur.rlim_max.min(priority), rlim_max: cur.rlim_max };
    // SAFETY: as above.
    check(unsafe { libc::setrlimit(libc::RLIMIT_RTPRIO, &soft) })?;
    Err(err)
}

/// Thread `tid`'s CPU time so far (user + system, in clock ticks) and its state letter, from
/// /proc/TID/task/TID/stat (/proc/TID/stat sums the times of the whole thread group).
pub fn thread_cpu_ticks(tid: i32) -> Option<(u64, char)> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/task/{tid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // After the name: state is field 3 (index 0 here), utime 14 and stime 15 (indexes 11, 12).
    let state = f.first()?.chars().next()?;
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((ticks, state))
}

/// The thread group (process id) of thread `tid`, from /proc/TID/status.
pub fn thread_group(tid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

/// The kernel's clock ticks per second (the unit of /proc's CPU times; 100 on Linux).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes a constant and touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).unwrap_or(100)
}

/// Lowers RLIMIT_RTPRIO (soft and hard) to `priority` (always allowed).
pub fn limit_rt_priority(priority: u64) -> io::Result<()> {
    let l = libc::rlimit { rlim_cur: priority, rlim_max: priority };
    // SAFETY: a valid rlimit on this stack frame.
    check(unsafe { libc::setrlimit(libc::RLIMIT_RTPRIO, &l) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_threads_figures_are_read() {
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { libc::gettid() };
        let (_, state) = thread_cpu_ticks(tid).unwrap();
        assert_eq!(state, 'R', "this very thread runs");
        assert_eq!(policy_of(0).unwrap(), libc::SCHED_OTHER);
        assert!(thread_cpu_ticks(-5).is_none());
        assert_eq!(thread_group(tid), Some(std::process::id() as i32));
        assert!((1..=10_000).contains(&clock_ticks_per_second()));
    }
}
