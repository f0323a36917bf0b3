//! Timed waits: poll, ppoll, select, pselect6, epoll_wait, epoll_pwait, epoll_pwait2, futex waits and
//! futex_waitv with a timeout. The filter sends them to the supervisor only when they have a finite, non-zero timeout (see
//! [`conditional_syscalls`]); infinite and non-blocking forms run natively.
//!
//! A timed wait that nothing can end is answered at once with a timeout, after jumping the logical clock to
//! its deadline (no wall-clock waiting). "Nothing can end it" means: none of its descriptors is ready now (or,
//! for a futex, the word still holds the expected value), and every other live guest task is asleep in a wait
//! only another guest task can end. A task that is running, stopped, in the middle of a mediated syscall, or
//! itself in a timed wait, could still end it (a pipe another guest process writes to): then the wait runs
//! natively, in real time, and is never cut short. The conclusions (deadlines, which waits and descriptors
//! count) are repro-detcore's (`repro_detcore::waits`); this file reads the guest and the kernel's view of it.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::time::Duration;

use repro_detcore::waits::{
    finished_state, first_to_expire, host_deadline, internal_descriptor, monotonic_deadline_ns, untimed_wait,
    ParkedWait,
};
use repro_detcore::{ClockKind, Deadline, Timespec};
use repro_sys::fdops;
use repro_sys::seccomp::{ArgCheck, Listener};

use crate::decode::{self, Syscall, TimedWait};
use crate::guest::{Guest, PidfdCache, TaskGuest};
use crate::reply::{Outcome, Refusal, Reply};
use crate::state::{lock, FutexRewrite, Shared, SharedRef};

/// The waits the filter sends to the supervisor, with the condition that keeps the others native.
///
/// With the scheduler on (`scheduling`), a poll or epoll_wait with a zero timeout is notified too: it is a
/// scheduling point, like the zero timespec of ppoll or pselect6, so that an event loop polling for what another
/// thread of the guest will send lets that thread run (an asyncio loop spinning on `epoll_wait(0)` until a worker
/// thread's result arrived kept the worker from running until the spin-loop watchdog preempted it: asgiref's
/// suite was refused). It runs natively once let go.
pub(crate) fn conditional_syscalls(scheduling: bool) -> Vec<(u32, ArgCheck)> {
    let ms = |arg| if scheduling { ArgCheck::NonNegativeInt { arg } } else { ArgCheck::PositiveInt { arg } };
    vec![
        (libc::SYS_poll as u32, ms(2)),
        (libc::SYS_ppoll as u32, ArgCheck::NonNull { arg: 2 }),
        (libc::SYS_select as u32, ArgCheck::NonNull { arg: 4 }),
        (libc::SYS_pselect6 as u32, ArgCheck::NonNull { arg: 4 }),
        (libc::SYS_epoll_wait as u32, ms(3)),
        (libc::SYS_epoll_pwait as u32, ms(3)),
        (libc::SYS_epoll_pwait2 as u32, ArgCheck::NonNull { arg: 3 }),
        (libc::SYS_futex as u32, ArgCheck::FutexTimedWait),
        (libc::SYS_futex_waitv as u32, ArgCheck::NonNull { arg: 3 }),
    ]
}

/// What the wait watches, to check whether it is already over.
#[derive(Debug, Clone, Copy)]
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
    /// futex_waitv: each of the `n` `struct futex_waitv` at `addr` names a word that must still hold its value.
    FutexV {
        addr: u64,
        n: u32,
    },
    /// A parked sleep: nothing but its deadline ends it.
    Sleep,
}

impl Watch {
    fn on_futexes(&self) -> bool {
        matches!(self, Watch::Futex { .. } | Watch::FutexV { .. })
    }
}

/// Guest memory to rewrite when the wait times out: (address, bytes).
type Writes = Vec<(u64, Vec<u8>)>;

/// Anything unexpected while looking at the wait: let it run natively (it then waits in real time).
const NATIVE: Refusal = Refusal::Native;

fn timespec_at<G: Guest>(g: &mut G, addr: u64) -> Result<(i64, i64), Refusal> {
    let t = super::read_timespec(g, addr).map_err(|_| NATIVE)?;
    Ok((t.sec, t.nsec))
}

/// What a timed wait's arguments say: its deadline (`None`: nothing to jump), what it watches, and where the
/// kernel would write the time left.
type Parsed = (Option<Deadline>, Watch, Option<u64>);

fn parse<G: Guest>(sh: &Shared, g: &mut G, w: TimedWait) -> Result<Parsed, Refusal> {
    Ok(match w {
        TimedWait::Poll { fds, nfds, timeout_ms } => {
            (Deadline::millis(timeout_ms), Watch::Poll { addr: fds, n: nfds }, None)
        }
        TimedWait::Ppoll { fds, nfds, tsp } => {
            let (s, ns) = timespec_at(g, tsp)?;
            (Deadline::relative(s, ns, 1), Watch::Poll { addr: fds, n: nfds }, Some(tsp))
        }
        TimedWait::Select { nfds, sets, timeout, micro } => {
            let (s, sub) = timespec_at(g, timeout)?;
            let unit = if micro { 1000 } else { 1 };
            (Deadline::relative(s, sub, unit), Watch::Select { nfds, sets }, Some(timeout))
        }
        TimedWait::Epoll { epfd, timeout_ms } => (Deadline::millis(timeout_ms), Watch::Epoll { epfd }, None),
        TimedWait::Epoll2 { epfd, tsp } => {
            let (s, ns) = timespec_at(g, tsp)?;
            (Deadline::relative(s, ns, 1), Watch::Epoll { epfd }, None)
        }
        TimedWait::Futex { uaddr, op, val, timeout, val3 } => {
            let (s, ns) = logical_timeout(sh, g, timeout)?;
            (Deadline::futex(op, val3, s, ns), Watch::Futex { addr: uaddr, val }, None)
        }
        TimedWait::FutexWaitv { waiters, n, flags, timeout, clockid } => {
            let (s, ns) = logical_timeout(sh, g, timeout)?;
            (Deadline::futex_waitv(flags, clockid, s, ns), Watch::FutexV { addr: waiters, n }, None)
        }
    })
}

/// The timespec at `addr` of a futex wait, as logical time: a retry of a wait whose deadline was moved onto the
/// host's clock passes that value back.
fn logical_timeout<G: Guest>(sh: &Shared, g: &mut G, addr: u64) -> Result<(i64, i64), Refusal> {
    let (s, ns) = timespec_at(g, addr)?;
    if let Some(r) = sh.futex_rewrites.get(&g.tid()) {
        if r.addr == addr && (r.host.sec, r.host.nsec) == (s, ns) {
            return Ok((r.logical.sec, r.logical.nsec));
        }
    }
    Ok((s, ns))
}

/// Answers a notified timed wait (syscall `nr`): parks it when another task may still end it (see [`schedule`]),
/// else jumps the clock and times it out, or lets it run natively.
pub(crate) fn handle<G: Guest>(sh: &mut Shared, g: &mut G, nr: i64, w: TimedWait) -> Reply {
    if let Some(parked) = park(sh, g, nr, w) {
        return parked;
    }
    let r = answer(sh, g, w);
    super::answered(sh, nr, r)
}

/// Parks a wait on descriptors only the guest feeds, none ready (or a futex whose word still holds the expected
/// value), when another task could still end it (or other waits are parked, which may expire first): `None`
/// when it is not parked.
fn park<G: Guest>(sh: &mut Shared, g: &mut G, nr: i64, w: TimedWait) -> Option<Reply> {
    let id = g.notification()?;
    let tid = g.tid();
    let (deadline, watch, timeout_out) = parse(sh, g, w).ok()?;
    let deadline_ns = deadline_ns(sh, deadline?)?;
    if sh.parked.is_empty() && others_blocked(sh, tid) {
        return None; // nothing can end it and nothing expires before it: answer() times it out now
    }
    match over_already(g, &watch, &sh.inherited_fds, sh.own_network) {
        Ok(Some(_)) => {}
        Ok(None) => return None,
        Err(_) => {
            // A futex the kernel refuses (a misaligned word, bad flags) is no outside wait: the native call fails.
            if w.on_descriptors() {
                note_outside_wait(sh, decode::name(nr));
            }
            return None;
        }
    }
    if !g.still_waiting() {
        return Some(Reply::Error(libc::EINTR));
    }
    let parked = Parked::new(sh, id, nr, watch, timeout_out, ParkedWait { tid, deadline_ns });
    sh.parked.insert(tid, parked);
    sh.stats.waits_parked += 1;
    sh.waits_cv.notify_all();
    Some(Reply::Parked)
}

/// Parks a sleep (nanosleep, clock_nanosleep) while another task could still act, or other waits are parked:
/// it ends when every task is blocked and it has the earliest deadline, so how often a task polls a busy one
/// (`while p.poll() is None: time.sleep(0.001)`) does not depend on how long the other runs in real time.
/// `None` when the sleep is answered at once (by the time handlers) instead.
pub(crate) fn park_sleep<G: Guest>(sh: &mut Shared, g: &mut G, nr: i64, call: Syscall) -> Option<Reply> {
    let id = g.notification()?;
    let tid = g.tid();
    let deadline = match call {
        Syscall::Nanosleep { req, .. } => {
            let t = super::read_timespec(g, req).ok()?;
            Deadline::relative(t.sec, t.nsec, 1)?
        }
        Syscall::ClockNanosleep { clock, flags, req, .. } => {
            let t = super::read_timespec(g, req).ok()?;
            if flags & libc::TIMER_ABSTIME != 0 {
                if t.sec < 0 || !(0..1_000_000_000).contains(&t.nsec) {
                    return None;
                }
                Deadline::At(clock, t)
            } else {
                Deadline::relative(t.sec, t.nsec, 1)?
            }
        }
        _ => return None,
    };
    let deadline_ns = deadline_ns(sh, deadline)?;
    if sh.parked.is_empty() && others_blocked(sh, tid) {
        return None;
    }
    if !g.still_waiting() {
        return Some(Reply::Error(libc::EINTR));
    }
    let wait = ParkedWait { tid, deadline_ns };
    let parked = Parked::new(sh, id, nr, Watch::Sleep, None, wait);
    sh.parked.insert(tid, parked);
    sh.stats.waits_parked += 1;
    sh.waits_cv.notify_all();
    Some(Reply::Parked)
}

/// A wait's deadline on the logical CLOCK_MONOTONIC, in nanoseconds.
fn deadline_ns(sh: &Shared, deadline: Deadline) -> Option<i128> {
    let now_mono = sh.ctl.clock.peek(ClockKind::Monotonic);
    let now_real = sh.ctl.clock.peek(ClockKind::Realtime);
    monotonic_deadline_ns(deadline, now_mono, now_real)
}

/// A wait ran natively in real time because a descriptor may be fed from outside the guest: the run says so.
fn note_outside_wait(sh: &mut Shared, name: &str) {
    sh.stats.outside_waits += 1;
    if sh.stats.warnings.len() < 8 {
        sh.stats.warnings.insert(format!(
            "waits on outside descriptors ran in real time: {} on a descriptor the world outside may feed (a \
             terminal, a host socket, an inherited pipe, a tape)",
            name
        ));
    }
}

/// A timed wait held by the supervisor.
#[derive(Debug, Clone)]
pub(crate) struct Parked {
    /// The seccomp notification to answer.
    pub id: u64,
    /// The syscall (for the counts).
    pub nr: i64,
    watch: Watch,
    timeout_out: Option<u64>,
    pub wait: ParkedWait,
    /// When the scheduler first saw it (wall time), and how long it is held at most while other tasks run: its
    /// own duration, and for a sleep or a wait on descriptors at least [`PARK_GRACE`]. A task that never blocks
    /// (a spin on a flag another task sets after a sleep) must not hold a wait forever.
    held_since: Option<std::time::Instant>,
    hold_at_most: Duration,
}

impl Parked {
    fn new(sh: &Shared, id: u64, nr: i64, watch: Watch, timeout_out: Option<u64>, wait: ParkedWait) -> Parked {
        let now = sh.ctl.clock.peek(ClockKind::Monotonic);
        let now_ns = now.sec as i128 * 1_000_000_000 + now.nsec as i128;
        let own = Duration::from_nanos(u64::try_from(wait.deadline_ns - now_ns).unwrap_or(0));
        // A futex is held no longer than natively: a lock or condition handed between threads (CPython's GIL
        // waits 5 ms, then asks the holder to yield) must not wait for the other thread to block.
        let hold_at_most = if watch.on_futexes() { own } else { own.max(PARK_GRACE) };
        Parked { id, nr, watch, timeout_out, wait, held_since: None, hold_at_most }
    }
}

/// The least wall time a parked wait is held while another task runs (see [`Parked::hold_at_most`]): long
/// enough for a child's ordinary run to end first, so that how often a parent polls it does not vary.
const PARK_GRACE: Duration = Duration::from_secs(2);

/// Futex waits of one task that each timed out without moving the clock (see [`tick`]), one right after the
/// other: since when the first was held, and when the last timed out.
#[derive(Debug, Clone, Copy)]
struct Streak {
    since: std::time::Instant,
    last: std::time::Instant,
}

/// How long a task may take between a futex wait that timed out without moving the clock and its next, for the
/// two to count as one streak (it only looked at the clock and waited again).
const STREAK_GAP: Duration = Duration::from_millis(100);

/// How often the scheduler looks at parked waits (for readiness) while the guest runs.
const PARKED_TICK: Duration = Duration::from_millis(1);

/// The waits scheduler, on a thread of its own for the whole run: every [`PARKED_TICK`] it lets the parked waits
/// whose descriptors became ready run natively (they return at once), forgets those a signal interrupted, and
/// when every live task is parked or blocked in a wait only another task can end, times out the parked wait
/// with the earliest deadline, jumping the logical clock to it. Returns when the guest is gone.
///
/// It is also the deadlock watchdog ([`Shared::stuck_after`]): when no wait is parked and every live task has sat
/// in the same wait only another guest task could end (see [`stuck_wait`]), using no CPU, for that long, the
/// guest is stopped and [`Shared::stuck`] says where each task waited.
pub(crate) fn schedule(listener: Listener, shared: SharedRef) {
    let mut pidfds = PidfdCache::default();
    let mut streaks: HashMap<i32, Streak> = HashMap::new();
    // The scheduler's count of notifications and ptrace events, and since when it has stood still.
    let mut progress: (u64, std::time::Instant) = (0, std::time::Instant::now());
    let cv = lock(&shared).waits_cv.clone();
    let mut sh = lock(&shared);
    // The stuck state seen last (what every task waits in, and their CPU time) and since when.
    let mut seen: Option<((String, String), std::time::Instant)> = None;
    loop {
        if sh.finished {
            return;
        }
        if !sh.parked.is_empty() {
            seen = None;
            if !tick(&mut sh, &listener, &mut pidfds, &mut streaks, &mut progress) {
                sh = cv.wait_timeout(sh, PARKED_TICK).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            }
            continue;
        }
        let Some(limit) = sh.stuck_after else {
            sh = cv.wait(sh).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        if sh.stuck.is_none() {
            match stuck_report(&sh) {
                Some(now) => match &seen {
                    Some((before, since)) if *before == now => {
                        if since.elapsed() >= limit {
                            sh.stuck = Some(now.0);
                            sh.kill_all();
                        }
                    }
                    _ => seen = Some((now, std::time::Instant::now())),
                },
                None => seen = None,
            }
        }
        let every = (limit / 4).clamp(Duration::from_millis(10), Duration::from_millis(500));
        sh = cv.wait_timeout(sh, every).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
    }
}

/// When every live task is stuck: where each waits, and their CPU times (a task that ran meanwhile changes
/// them); `None` when one of them can still make progress by itself or be woken from outside.
fn stuck_report(sh: &Shared) -> Option<(String, String)> {
    let mut tids: Vec<i32> = sh.live.iter().copied().collect();
    if tids.is_empty() {
        return None;
    }
    tids.sort_unstable();
    let mut parts = Vec::with_capacity(tids.len());
    for tid in tids {
        let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(').map_or("?", |(_, c)| c);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the comm: state is field 3, utime 14 and stime 15 (1-based in proc(5)), so 0, 11 and 12 here.
        let cpu = format!("{}+{}", fields.get(11)?, fields.get(12)?);
        let wait = stuck_wait(sh, tid, fields.first()?.chars().next()?)?;
        parts.push((format!("task {tid} ({comm}) in {wait}"), cpu));
    }
    let cpu: Vec<&str> = parts.iter().map(|(_, c)| c.as_str()).collect();
    let text: Vec<&str> = parts.iter().map(|(t, _)| t.as_str()).collect();
    Some((text.join("; "), cpu.join(",")))
}

/// The wait task `tid` (in state `state`) sits in, described, if only another guest task could end it: waiting
/// for a child, a signal, a futex, or on descriptors only the guest feeds. `None` when it runs, is in a timed
/// or mediated call, or waits on something outside the guest (a terminal, a host socket, an inherited pipe).
fn stuck_wait(sh: &Shared, tid: i32, state: char) -> Option<String> {
    if state == 'Z' {
        return zombie_leader_of_live_threads(tid).then(|| "exit (its other threads remain)".to_string());
    }
    if state != 'S' {
        return None;
    }
    let sc = std::fs::read_to_string(format!("/proc/{tid}/syscall")).ok()?;
    let mut it = sc.split_whitespace();
    let nr: i64 = it.next()?.parse().ok()?;
    let a: Vec<u64> =
        it.take(6).map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok()).collect::<Option<_>>()?;
    if a.len() < 6 || !untimed_wait(nr, &a) {
        return None;
    }
    let fd_text = |fd: u64| -> Option<String> {
        let t = std::fs::read_link(format!("/proc/{tid}/fd/{fd}")).ok()?;
        let t = t.to_string_lossy().into_owned();
        internal_descriptor(&t, &sh.inherited_fds, sh.own_network).then(|| format!("fd {fd} ({t})"))
    };
    let fds_text = |fds: &[u64]| -> Option<String> {
        Some(fds.iter().map(|&fd| fd_text(fd)).collect::<Option<Vec<_>>>()?.join(", "))
    };
    Some(match nr {
        libc::SYS_wait4 | libc::SYS_waitid => "wait4/waitid for a child".to_string(),
        libc::SYS_pause | libc::SYS_rt_sigsuspend | libc::SYS_rt_sigtimedwait => "a wait for a signal".to_string(),
        libc::SYS_futex => format!("futex wait at {:#x}", a[0]),
        libc::SYS_futex_waitv => format!("futex_waitv on {} futexes at {:#x}", a[1], a[0]),
        libc::SYS_msgrcv => "msgrcv".to_string(),
        libc::SYS_flock => format!("flock on {}", fd_text(a[0])?),
        libc::SYS_poll | libc::SYS_ppoll => {
            let n = usize::try_from(a[1]).ok().filter(|&n| n <= 4096)?;
            let mut raw = vec![0u8; n * 8];
            repro_sys::memory::read_exact(tid, a[0], &mut raw).ok()?;
            let fds: Vec<u64> = raw
                .chunks_exact(8)
                .map(|e| i32::from_le_bytes([e[0], e[1], e[2], e[3]]))
                .filter(|&fd| fd >= 0)
                .map(|fd| fd as u64)
                .collect();
            format!("poll on {}", fds_text(&fds)?)
        }
        libc::SYS_epoll_wait | libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => {
            let info = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{}", a[0])).ok()?;
            let fds: Vec<u64> = info
                .lines()
                .filter_map(|l| l.strip_prefix("tfd:"))
                .map(|l| l.split_whitespace().next().and_then(|t| t.parse().ok()))
                .collect::<Option<_>>()?;
            format!("epoll_wait on {}", fds_text(&fds)?)
        }
        // select's sets are not read: a select with no timeout on descriptors is rare enough to stay unjudged.
        libc::SYS_select | libc::SYS_pselect6 => return None,
        _ => {
            let what = match nr {
                libc::SYS_read | libc::SYS_readv | libc::SYS_pread64 | libc::SYS_preadv => "read",
                libc::SYS_write | libc::SYS_writev => "write",
                libc::SYS_recvfrom | libc::SYS_recvmsg => "recv",
                libc::SYS_sendto | libc::SYS_sendmsg => "send",
                libc::SYS_accept | libc::SYS_accept4 => "accept",
                _ => return None,
            };
            format!("{what} on {}", fd_text(a[0])?)
        }
    })
}

/// One look at the parked waits; true when one ended (look again at once).
///
/// Whether every task is blocked is looked at before any parked wait's descriptors or futex word, as in
/// [`jump`]: in the other order a task could run between the two looks (one this very look released, say a
/// thread whose GIL wait ended), write to a parked wait's descriptor and block again, and that wait would be
/// timed out although it was ready. And a look that ended any wait times nothing out: the task it released
/// runs, and the next look sees where it went.
/// Which of the parked waits that can end now (two or more) is released first: the scheduler's choice, logged
/// like the notify thread's decisions (`--sched-log`).
fn pick_release(sh: &mut Shared, ready: &[(i32, Parked)]) -> usize {
    let Some(s) = sh.sched.as_mut() else { return 0 };
    let ids: Vec<u64> = ready.iter().map(|(tid, _)| s.task_id(*tid)).collect();
    let pick = s.scheduler.pick(&ids);
    if let Some(log) = s.log.as_mut() {
        log.total += 1;
        if log.decisions.len() < repro_model::sched::SCHED_LOG_LIMIT {
            let mut described: Vec<repro_model::sched::SchedReady> = ready
                .iter()
                .zip(&ids)
                .map(|((tid, p), &task)| crate::schedlog::parked(task, *tid, decode::name(p.nr)))
                .collect();
            described.sort_by_key(|r| r.task);
            log.decisions.push(repro_model::sched::SchedDecision {
                step: s.scheduler.choices() - 1,
                chosen: ids[pick],
                default: s.scheduler.last_default(),
                ready: described,
            });
        }
    }
    pick
}

fn tick(
    sh: &mut Shared,
    listener: &Listener,
    pidfds: &mut PidfdCache,
    streaks: &mut HashMap<i32, Streak>,
    progress: &mut (u64, std::time::Instant),
) -> bool {
    streaks.retain(|t, _| sh.live.contains(t));
    // Under the scheduler no guest thread runs while this thread does (they run SCHED_FIFO on its CPU), but one
    // may be waiting for the notify thread's answer, which lets it go when the scheduler says. Releasing a parked
    // wait now (its futex word changed, its descriptor is ready, it was held for its duration in wall time) would
    // race that answer: which of the two ran first would follow the host's timing. So parked waits move only
    // once the notify thread has let every such task go. (A task that really runs here, a spinner the watchdog
    // demoted, has made the run not deterministic already: the rules below, on wall time, then apply.)
    //
    // Nor while a guest thread runs or will run by itself: the kernel's real-time throttling gives this thread
    // the CPU while a guest thread computes, and one in disk sleep (a page fault, a read from the disk) goes on
    // when the disk is done. A release then would race it, and the order would follow the host's timing (seen:
    // cargo's main thread let out of its job-queue wait while a rustc thread faulted a page in, one run in two).
    // A spinner the watchdog reported runs on purpose; it does not hold the releases back, nor does a thread that
    // runs while the guest has made no system call the scheduler sees for PARK_GRACE (a spin on a flag that a
    // parked sleeper sets, a computation under a `timeout`): the wall-time rules below then end the waits, and
    // the watchdog or the timers say that the run followed the host's speed.
    //
    // (Nor while the trace loop handles a task's ptrace stop: it runs again at a moment of the host's timing.)
    if let Some(s) = sh.sched.as_ref().filter(|s| s.active) {
        if s.progress != progress.0 {
            *progress = (s.progress, std::time::Instant::now());
        }
        let stalled = progress.1.elapsed() >= PARK_GRACE;
        let busy = |t: &i32| {
            if sh.parked.contains_key(t) || sh.deferred.contains(t) {
                return false;
            }
            match crate::sched::activity(*t) {
                crate::sched::Activity::AwaitsAnswer | crate::sched::Activity::Exiting => true,
                crate::sched::Activity::Runs => !stalled && !s.reported.contains(t),
                crate::sched::Activity::Other => false,
            }
        };
        if sh.tracer_busy.is_some_and(|t| !sh.parked.contains_key(&t)) || sh.live.iter().any(busy) {
            return false;
        }
    }
    // Looked at before any parked wait's descriptors or futex word (see above), once nothing holds the look back.
    let all_blocked = sh.live.iter().all(|t| sh.parked.contains_key(t) || blocked_indefinitely(*t));
    let mut tids: Vec<i32> = sh.parked.keys().copied().collect();
    // Released in a fixed order (each released task runs at once, under the scheduler): by task id.
    match sh.sched.as_mut() {
        Some(s) => tids.sort_by_cached_key(|&t| s.task_id(t)),
        None => tids.sort_unstable(),
    }
    let mut outputs: HashMap<i32, Writes> = HashMap::new();
    let mut ended = false;
    // Waits whose condition is met (a futex word changed, a descriptor is ready): under the scheduler one of them
    // is released per tick, chosen by its policy (a scheduling decision like the notify thread's), the others
    // looked at again once it has run; without it, all of them.
    let mut ready_now: Vec<(i32, Parked)> = Vec::new();
    for tid in tids {
        let Some(p) = sh.parked.get(&tid).cloned() else { continue };
        let mut g = TaskGuest::new(tid, Some((listener, p.id)), pidfds);
        if !g.still_waiting() {
            sh.parked.remove(&tid); // interrupted (a signal) or gone: the kernel ended the call
            streaks.remove(&tid);
            ended = true;
            continue;
        }
        // A signal the task will handle is pending (a timer fired while it was held here): the wait ends with
        // EINTR now, at this logical time, as it would natively; the handler runs and the guest decides whether
        // to wait again. (The filter's killable wait keeps the kernel from ending it by itself.)
        if (sh.timer_os.sig_state)(tid).is_some_and(|st| st.interrupting()) {
            sh.parked.remove(&tid);
            streaks.remove(&tid);
            ended = true;
            sh.count(decode::name(p.nr));
            // ENOENT: the task is gone meanwhile; nothing to answer.
            let _ = listener.respond_error(p.id, libc::EINTR);
            continue;
        }
        match over_already(&mut g, &p.watch, &sh.inherited_fds, sh.own_network) {
            Ok(Some(w)) => {
                outputs.insert(tid, w);
            }
            _ => ready_now.push((tid, p)),
        }
    }
    if !ready_now.is_empty() {
        let scheduling = sh.sched.as_ref().is_some_and(|s| s.active);
        if scheduling && ready_now.len() > 1 {
            let pick = pick_release(sh, &ready_now);
            let one = ready_now.swap_remove(pick);
            ready_now = vec![one];
        }
        for (tid, p) in ready_now {
            // Ready now (or no longer readable): the native call returns at once. A futex word that changed
            // is what the kernel answers EAGAIN to (the waker changes the word before it wakes).
            sh.parked.remove(&tid);
            streaks.remove(&tid);
            // ENOENT: interrupted meanwhile; the kernel restarts or ends the call itself.
            let _ = if p.watch.on_futexes() {
                sh.count(decode::name(p.nr));
                listener.respond_error(p.id, libc::EAGAIN)
            } else {
                sh.stats.continued += 1;
                listener.respond_continue(p.id)
            };
        }
        return true;
    }
    if ended {
        return true;
    }
    let now = std::time::Instant::now();
    for p in sh.parked.values_mut() {
        p.held_since.get_or_insert(now);
    }
    // Whether timing the wait out moves the logical clock to its deadline.
    let mut jump_clock = true;
    let first = if all_blocked {
        first_to_expire(sh.parked.values().map(|p| p.wait))
    } else {
        // Another task still runs: only a wait held for as long as it could be ends, in deadline order.
        let overdue = sh.parked.values().filter(|p| p.held_since.is_some_and(|s| now - s >= p.hold_at_most));
        let first = first_to_expire(overdue.map(|p| p.wait));
        let held = first.and_then(|f| sh.parked.get(&f.tid));
        // A futex held for its duration while another task ran (CPython's 5 ms GIL wait while the holder runs C
        // code) times out as natively, but the logical clock stays: how often that happens follows the host's
        // speed, and moving the clock each time would make the guest's time depend on it. Unless the task has
        // done nothing but wait again, each wait timed out that way, for PARK_GRACE: a waiter that looks at the
        // clock and waits again until its deadline has come (Java's AQS), beside a thread that spins until it
        // has, would otherwise never see it come.
        let mut released = held.is_some_and(|p| p.hold_at_most >= PARK_GRACE);
        if let Some(p) = held.filter(|p| p.watch.on_futexes()) {
            let tid = p.wait.tid;
            let since = streaks
                .get(&tid)
                .filter(|s| now.saturating_duration_since(s.last) <= p.hold_at_most + STREAK_GAP)
                .map_or(p.held_since.unwrap_or(now), |s| s.since);
            if now.saturating_duration_since(since) >= PARK_GRACE {
                released = true;
                streaks.remove(&tid);
            } else {
                jump_clock = false;
                streaks.insert(tid, Streak { since, last: now });
            }
        }
        if released {
            sh.stats.waits_released += 1;
            if sh.stats.warnings.len() < 8 {
                sh.stats.warnings.insert(format!(
                    "a parked wait timed out after {} s or more of wall time while another task ran: when it \
                     ended depended on the host's speed",
                    PARK_GRACE.as_secs()
                ));
            }
        }
        first
    };
    let Some(first) = first else { return false };
    // A timer due before this deadline fires first: the clock jumps to its expiry and its signal or timerfd
    // count is delivered; the next tick ends the waits it interrupts (EINTR, above) or makes ready, and the
    // earliest deadline is chosen again.
    let at = Deadline::At(libc::CLOCK_MONOTONIC as i64, Timespec::from_ns(first.deadline_ns));
    sh.sync_in();
    if jump_clock && super::timers::fire_before(sh, at) {
        return true;
    }
    let Some(p) = sh.parked.remove(&first.tid) else { return false };
    let mut g = TaskGuest::new(first.tid, Some((listener, p.id)), pidfds);
    if !g.still_waiting() {
        return true;
    }
    if jump_clock {
        streaks.remove(&first.tid);
        sh.sync_in();
        if sh.ctl.time_out_wait(at).is_err() {
            // Cannot happen for a deadline built from a valid timespec; the call then runs natively.
            let _ = listener.respond_continue(p.id);
            return true;
        }
        sh.sync_out();
        sh.stats.waits_jumped += 1;
    } else {
        sh.stats.futex_waits_yielded += 1;
    }
    // Every wait still parked got its outputs in the loop above; none (a sleep, a futex, epoll) writes nothing.
    let mut wrote =
        outputs.remove(&first.tid).unwrap_or_default().into_iter().all(|(a, b)| g.write_bytes(a, &b).is_ok());
    if let Some(t) = p.timeout_out {
        wrote &= g.write_bytes(t, &[0u8; 16]).is_ok();
    }
    sh.count(decode::name(p.nr));
    let r = if !wrote {
        listener.respond_error(p.id, libc::EFAULT)
    } else if p.watch.on_futexes() {
        listener.respond_error(p.id, libc::ETIMEDOUT)
    } else {
        listener.respond_value(p.id, 0)
    };
    if let Err(e) = r {
        if e.raw_os_error() != Some(libc::ENOENT) && sh.stats.warnings.len() < 8 {
            sh.stats.warnings.insert(format!("answering a parked wait failed: {e}"));
        }
    }
    true
}

/// Answers a notified timed wait: jumps the clock and times it out, or lets it run natively (an absolute
/// deadline first moved onto the host's clock).
fn answer<G: Guest>(sh: &mut Shared, g: &mut G, w: TimedWait) -> Outcome {
    let tid = g.tid();
    let (deadline, watch, timeout_out) = parse(sh, g, w)?;
    let Some(deadline) = deadline else { return Err(NATIVE) };
    match jump(sh, g, tid, deadline, &watch, timeout_out, w) {
        Err(Refusal::Native) => match (w, deadline) {
            (TimedWait::Futex { timeout, .. } | TimedWait::FutexWaitv { timeout, .. }, Deadline::At(clock, at)) => {
                native_absolute(sh, g, clock, at, timeout, &watch)
            }
            _ => Err(NATIVE),
        },
        r => r,
    }
}

/// Times the wait out at its deadline if nothing can end it before; `Err(Native)` when something may.
fn jump<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    tid: i32,
    deadline: Deadline,
    watch: &Watch,
    timeout_out: Option<u64>,
    w: TimedWait,
) -> Outcome {
    // First establish that no other task can act, then look at the descriptors: in the other order a
    // task could write to them between the two looks and then block, and the wait would be cut short. A parked
    // wait may expire before this one: then this one waits too.
    if !sh.parked.is_empty() || !others_blocked(sh, tid) {
        return Err(NATIVE);
    }
    let outputs = match over_already(g, watch, &sh.inherited_fds, sh.own_network) {
        Ok(Some(outputs)) => outputs,
        Ok(None) => return Err(NATIVE),
        Err(_) => {
            let name = match w {
                TimedWait::Poll { .. } => "poll",
                TimedWait::Ppoll { .. } => "ppoll",
                TimedWait::Select { micro: true, .. } => "select",
                TimedWait::Select { .. } => "pselect6",
                TimedWait::Epoll { .. } | TimedWait::Epoll2 { .. } => "epoll_wait",
                TimedWait::Futex { .. } | TimedWait::FutexWaitv { .. } => return Err(NATIVE),
            };
            note_outside_wait(sh, name);
            return Err(NATIVE);
        }
    };
    // Everything read from the guest is only meaningful if the task is still waiting in this call.
    if !g.still_waiting() {
        return Err(libc::EINTR.into());
    }
    if super::timers::fire_before(sh, deadline) {
        return Err(NATIVE);
    }
    if sh.ctl.time_out_wait(deadline).is_err() {
        return Err(NATIVE);
    }
    sh.stats.waits_jumped += 1;
    // What the kernel writes back on a timeout: no revents, empty fd sets, no time left.
    for (addr, bytes) in outputs {
        g.write_bytes(addr, &bytes)?;
    }
    if let Some(t) = timeout_out {
        g.write_bytes(t, &[0u8; 16])?;
    }
    if w.on_futexes() {
        return Err(libc::ETIMEDOUT.into());
    }
    Ok(0)
}

/// A futex wait (or futex_waitv) with an absolute deadline `at` in logical time on clock `clock` that must run natively
/// (another task may end it): the kernel compares the deadline with the host's clock, so the guest's timespec
/// at `ts_addr` is rewritten to the host time as far away as `at` is in logical time (and remembered, so that
/// a retry with the same memory is understood). A deadline already passed in logical time times out at once.
fn native_absolute<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    clock: i64,
    at: Timespec,
    ts_addr: u64,
    watch: &Watch,
) -> Outcome {
    let Ok(kind) = ClockKind::from_id(clock) else { return Err(NATIVE) };
    let Ok((sec, nsec)) = repro_sys::ns::clock_now_syscall(clock as i32) else { return Err(NATIVE) };
    let logical_now = sh.ctl.clock.peek(kind);
    match host_deadline(at, logical_now, Timespec { sec, nsec }) {
        None => {
            // Due: the kernel would compare the words first (EAGAIN when one changed), then time out.
            let unchanged = futex_words_unchanged(g, watch)?;
            if !g.still_waiting() {
                return Err(libc::EINTR.into());
            }
            if !unchanged {
                return Err(libc::EAGAIN.into());
            }
            Err(libc::ETIMEDOUT.into())
        }
        Some(host) => {
            g.write_bytes(ts_addr, &super::timespec_bytes(host))?;
            sh.futex_rewrites.insert(g.tid(), FutexRewrite { addr: ts_addr, host, logical: at });
            sh.stats.deadlines_translated += 1;
            Err(NATIVE)
        }
    }
}

/// `Ok(Some(writes))` when the wait would not end before its timeout by what is ready now, with the guest
/// memory to rewrite when it times out; `Ok(None)` when it would return at once.
///
/// Only waits on descriptors the guest itself feeds count: a descriptor that something outside the guest can
/// make ready (see [`internal_descriptor`]) makes the wait run natively.
fn over_already<G: Guest>(
    g: &mut G,
    watch: &Watch,
    inherited: &HashSet<String>,
    own_network: bool,
) -> Result<Option<Writes>, Refusal> {
    let check = |g: &mut G, fd: i32| match g.fd_target(fd) {
        Ok(t) if internal_descriptor(&String::from_utf8_lossy(&t), inherited, own_network) => Ok(()),
        _ => Err(NATIVE),
    };
    let ready = |fds: &[(OwnedFd, i16)]| -> Result<bool, Refusal> {
        let list: Vec<(&OwnedFd, i16)> = fds.iter().map(|(f, e)| (f, *e)).collect();
        Ok(fdops::poll_now(&list).map_err(|_| NATIVE)?.iter().any(|&r| r != 0))
    };
    match *watch {
        Watch::Poll { addr, n } => {
            if n > 4096 {
                return Err(NATIVE);
            }
            let mut raw = g.read_bytes(addr, n * 8).map_err(|_| NATIVE)?;
            let mut fds = Vec::new();
            for e in raw.chunks_exact(8) {
                let fd = i32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                if fd >= 0 {
                    check(g, fd)?;
                    // An invalid descriptor is POLLNVAL, which ends the wait at once.
                    let events = i16::from_le_bytes([e[4], e[5]]) | libc::POLLHUP | libc::POLLERR;
                    fds.push((g.borrow_fd(fd).map_err(|_| NATIVE)?, events));
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
                return Err(NATIVE);
            }
            let words = nfds.div_ceil(64);
            let mut fds = Vec::new();
            let mut writes = Vec::new();
            for (i, &set) in sets.iter().enumerate() {
                if set == 0 || words == 0 {
                    continue;
                }
                let raw = g.read_bytes(set, words * 8).map_err(|_| NATIVE)?;
                let bit = |fd: usize| raw[fd / 8] >> (fd % 8) & 1 != 0;
                let events = [libc::POLLIN, libc::POLLOUT, libc::POLLPRI][i];
                for fd in (0..nfds).filter(|&fd| bit(fd)) {
                    check(g, fd as i32)?;
                    fds.push((g.borrow_fd(fd as i32).map_err(|_| NATIVE)?, events | libc::POLLHUP | libc::POLLERR));
                }
                writes.push((set, vec![0u8; words * 8]));
            }
            if ready(&fds)? {
                return Ok(None);
            }
            Ok(Some(writes))
        }
        Watch::Epoll { epfd } => {
            for fd in g.epoll_fds(epfd).map_err(|_| NATIVE)? {
                check(g, fd)?;
            }
            let ep = g.borrow_fd(epfd).map_err(|_| NATIVE)?;
            if ready(&[(ep, libc::POLLIN)])? {
                return Ok(None);
            }
            Ok(Some(Vec::new()))
        }
        Watch::Futex { .. } | Watch::FutexV { .. } => {
            if !futex_words_unchanged(g, watch)? {
                return Ok(None); // EAGAIN at once
            }
            Ok(Some(Vec::new()))
        }
        Watch::Sleep => Ok(Some(Vec::new())),
    }
}

/// Whether every futex word a futex wait (or futex_waitv) watches still holds its expected value; `Err(Native)`
/// for what the kernel would refuse (left to it) or memory that cannot be read.
fn futex_words_unchanged<G: Guest>(g: &mut G, watch: &Watch) -> Result<bool, Refusal> {
    let mut words: Vec<(u64, u64)> = Vec::new();
    match *watch {
        Watch::Futex { addr, val } => words.push((addr, val as u64)),
        Watch::FutexV { addr, n } => {
            if !(1..=128).contains(&n) {
                return Err(NATIVE);
            }
            // struct futex_waitv { u64 val; u64 uaddr; u32 flags; u32 __reserved; }
            let raw = g.read_bytes(addr, n as usize * 24).map_err(|_| NATIVE)?;
            for e in raw.chunks_exact(24) {
                let val = u64::from_le_bytes(e[0..8].try_into().map_err(|_| NATIVE)?);
                let uaddr = u64::from_le_bytes(e[8..16].try_into().map_err(|_| NATIVE)?);
                let flags = u32::from_le_bytes(e[16..20].try_into().map_err(|_| NATIVE)?);
                let reserved = u32::from_le_bytes(e[20..24].try_into().map_err(|_| NATIVE)?);
                // Only 32-bit futexes (FUTEX2_SIZE_U32, optionally FUTEX2_PRIVATE) exist; the rest is EINVAL.
                if flags & !FUTEX2_PRIVATE != FUTEX2_SIZE_U32 || reserved != 0 || val > u32::MAX as u64 {
                    return Err(NATIVE);
                }
                words.push((uaddr, val));
            }
        }
        _ => return Err(NATIVE),
    }
    for (addr, val) in words {
        if addr % 4 != 0 {
            return Err(NATIVE);
        }
        let mut w = [0u8; 4];
        g.read_into(addr, &mut w).map_err(|_| NATIVE)?;
        if u32::from_le_bytes(w) as u64 != val {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `struct futex_waitv`'s flags: the word's size (32 bits) and process-private.
const FUTEX2_SIZE_U32: u32 = 2;
const FUTEX2_PRIVATE: u32 = 128;

/// The identities (`/proc/<pid>/fd` link targets such as `pipe:[1234]`) of the descriptors the
/// supervisor's process has, which the guest inherits: their other ends are outside the guest.
pub(crate) fn inherited_fds() -> HashSet<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return HashSet::new() };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .filter(|t| !t.starts_with('/'))
        .collect()
}

/// Whether every live guest task other than `me` is asleep in a wait that only another guest task
/// (or the world outside) can end.
pub(crate) fn others_blocked(sh: &Shared, me: i32) -> bool {
    sh.live.iter().filter(|&&t| t != me).all(|&t| sh.parked.contains_key(&t) || blocked_indefinitely(t))
}

/// Whether zombie `tid` leads a thread group that still has other threads (its exit is reported after theirs).
pub(crate) fn zombie_leader_of_live_threads(tid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else { return true };
    let field =
        |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<i64>().ok());
    field("Tgid:") == Some(tid as i64) && field("Threads:").is_some_and(|n| n > 1)
}

/// Whether task `tid` sleeps in a wait only another task can end, as /proc shows it.
fn blocked_indefinitely(tid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{tid}/stat")) else {
        return true; // gone: it can do nothing any more
    };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    if state.is_some_and(finished_state) {
        // Exited. Until the trace loop has collected its exit (and dropped it from the live tasks), its parent's
        // waitpid may not see it yet: only a thread-group leader whose exit waits for its other threads counts
        // as blocked meanwhile.
        return state != Some('Z') || zombie_leader_of_live_threads(tid);
    }
    if state != Some('S') {
        return false; // running, stopped at a ptrace event, in disk sleep, a zombie about to be reaped...
    }
    // Waiting for the supervisor's answer (held by the scheduler, or not received yet), not for the call itself:
    // /proc/TID/syscall shows the call (a futex wait looks untimed) but the task runs once it is let go.
    if std::fs::read_to_string(format!("/proc/{tid}/wchan")).is_ok_and(|w| w.starts_with("seccomp")) {
        return false;
    }
    let Ok(sc) = std::fs::read_to_string(format!("/proc/{tid}/syscall")) else { return false };
    let mut it = sc.split_whitespace();
    let Some(Ok(nr)) = it.next().map(|s| s.parse::<i64>()) else { return false };
    // An unparsable argument is a value no wait has (u64::MAX), so it never makes a wait look untimed.
    let args: Vec<u64> =
        it.take(6).map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).unwrap_or(u64::MAX)).collect();
    untimed_wait(nr, &args)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::testing::{shared, EPOCH};
    use crate::handlers::{dispatch, read_timespec, timespec_bytes};
    use crate::reply::Reply;
    use repro_detcore::{ClockKind, Timespec};

    #[test]
    fn a_timed_futex_wait_nothing_can_end_advances_the_logical_clock() {
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(3);
        g.put(0x1000, &7u32.to_le_bytes()).put(0x2000, &timespec_bytes(Timespec { sec: 5, nsec: 0 }));
        let nr = libc::SYS_futex;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, 0, 7, 0x2000, 0, 0]));
        assert!(matches!(r, Reply::Error(libc::ETIMEDOUT)), "{r:?}");
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime), Timespec { sec: EPOCH + 5, nsec: 0 });
        assert_eq!(sh.stats.waits_jumped, 1);
        // The word changed: the wait ends at once (natively, EAGAIN), the clock stays.
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, 0, 8, 0x2000, 0, 0]));
        assert!(matches!(r, Reply::Continue));
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime).sec, EPOCH + 5);
        // Interrupted meanwhile: EINTR, the clock stays.
        g.interrupted = true;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, 0, 7, 0x2000, 0, 0]));
        assert!(matches!(r, Reply::Error(libc::EINTR)));
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime).sec, EPOCH + 5);
    }

    /// `struct futex_waitv` entries for (value, address) pairs, 32-bit private futexes.
    fn waitv(entries: &[(u64, u64)]) -> Vec<u8> {
        let mut b = Vec::new();
        for &(val, addr) in entries {
            b.extend(val.to_le_bytes());
            b.extend(addr.to_le_bytes());
            b.extend((FUTEX2_SIZE_U32 | FUTEX2_PRIVATE).to_le_bytes());
            b.extend(0u32.to_le_bytes());
        }
        b
    }

    #[test]
    fn futex_waitv_nothing_can_end_jumps_to_its_absolute_deadline() {
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(3);
        g.put(0x1000, &7u32.to_le_bytes()).put(0x1004, &9u32.to_le_bytes());
        g.put(0x3000, &waitv(&[(7, 0x1000), (9, 0x1004)]));
        // CLOCK_MONOTONIC 10,002.5 s: 2.5 s after the logical now.
        g.put(0x2000, &timespec_bytes(Timespec { sec: 10_002, nsec: 500_000_000 }));
        let nr = libc::SYS_futex_waitv;
        let mono = libc::CLOCK_MONOTONIC as u64;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0x3000, 2, 0, 0x2000, mono, 0]));
        assert!(matches!(r, Reply::Error(libc::ETIMEDOUT)), "{r:?}");
        assert_eq!(sh.ctl.clock.peek(ClockKind::Monotonic), Timespec { sec: 10_002, nsec: 500_000_000 });
        assert_eq!(sh.stats.waits_jumped, 1);
        assert_eq!(sh.stats.mediated.get("futex_waitv"), Some(&1));
        // CLOCK_REALTIME: as far from the logical realtime now.
        g.put(0x2000, &timespec_bytes(Timespec { sec: EPOCH + 3, nsec: 0 }));
        let real = libc::CLOCK_REALTIME as u64;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0x3000, 2, 0, 0x2000, real, 0]));
        assert!(matches!(r, Reply::Error(libc::ETIMEDOUT)), "{r:?}");
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime), Timespec { sec: EPOCH + 3, nsec: 0 });
        // One word changed: the wait would end at once; natively, with its deadline moved onto the host clock.
        g.put(0x1004, &10u32.to_le_bytes());
        g.put(0x2000, &timespec_bytes(Timespec { sec: 10_010, nsec: 0 }));
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [0x3000, 2, 0, 0x2000, mono, 0]));
        assert!(matches!(r, Reply::Continue), "{r:?}");
        assert_eq!(sh.stats.deadlines_translated, 1);
        assert_ne!(read_timespec(&mut g, 0x2000).unwrap().sec, 10_010, "the kernel never sees a logical deadline");
        // Flags, another clock or a 64-bit futex are the kernel's to refuse (EINVAL): run natively, no jump.
        g.put(0x1004, &9u32.to_le_bytes());
        g.put(0x2000, &timespec_bytes(Timespec { sec: 10_020, nsec: 0 }));
        let boot = libc::CLOCK_BOOTTIME as u64;
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x3000, 2, 1, 0x2000, mono, 0])), Reply::Continue));
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x3000, 2, 0, 0x2000, boot, 0])), Reply::Continue));
        let mut wide = waitv(&[(7, 0x1000)]);
        wide[16] = 3; // FUTEX2_SIZE_U64
        g.put(0x3000, &wide);
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x3000, 1, 0, 0x2000, mono, 0])), Reply::Continue));
        assert_eq!(sh.stats.waits_jumped, 2);
        assert_eq!(sh.stats.outside_waits, 0, "no descriptor involved");
    }

    #[test]
    fn a_poll_on_an_empty_pipe_of_the_guest_times_out_at_once() {
        let (r, w) = std::io::pipe().unwrap();
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(3);
        g.fds.insert(4, r.into());
        g.targets.insert(4, b"pipe:[77]".to_vec());
        let mut pollfd = 4i32.to_le_bytes().to_vec();
        pollfd.extend(libc::POLLIN.to_le_bytes());
        pollfd.extend([0xff, 0xff]);
        g.put(0x1000, &pollfd);
        let nr = libc::SYS_poll;
        let out = dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, 1, 1500, 0, 0, 0]));
        assert!(matches!(out, Reply::Value(0)), "{out:?}");
        assert_eq!(g.get(0x1006, 2), [0, 0], "revents cleared");
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime), Timespec { sec: EPOCH + 1, nsec: 500_000_000 });
        // Data in the pipe: the wait would end at once, so it runs natively.
        use std::io::Write;
        (&w).write_all(b"x").unwrap();
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, 1, 1500, 0, 0, 0])), Reply::Continue));
        // A socket may be fed from outside: never jumped.
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        g.fds.insert(4, sock.try_clone().unwrap().into());
        g.targets.insert(4, format!("socket:[{}]", sock.as_raw_fd()).into_bytes());
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, 1, 1500, 0, 0, 0])), Reply::Continue));
        assert_eq!(sh.stats.waits_jumped, 1);
    }

    #[test]
    fn select_clears_the_sets_and_the_timeout() {
        let (r, _w) = std::io::pipe().unwrap();
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(3);
        g.fds.insert(3, r.into());
        g.targets.insert(3, b"pipe:[1]".to_vec());
        g.put(0x1000, &(1u64 << 3).to_le_bytes()).put(0x2000, &timespec_bytes(Timespec { sec: 0, nsec: 250_000 }));
        let nr = libc::SYS_select;
        let out = dispatch(&mut sh, &mut g, nr, decode(nr, [4, 0x1000, 0, 0, 0x2000, 0]));
        assert!(matches!(out, Reply::Value(0)), "{out:?}");
        assert_eq!(g.get(0x1000, 8), [0; 8]);
        assert_eq!(g.get(0x2000, 16), [0; 16]);
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime), Timespec { sec: EPOCH, nsec: 250_000_000 }, "µs");
    }

    /// This very thread's id: a task that is running.
    fn running_tid() -> i32 {
        let me = std::fs::read_link("/proc/thread-self").unwrap();
        me.file_name().unwrap().to_str().unwrap().parse().unwrap()
    }

    #[test]
    fn an_absolute_futex_deadline_is_moved_onto_the_host_clock_when_the_wait_runs_natively() {
        let mut sh = shared(1, 0);
        sh.live.insert(running_tid()); // another task runs: the wait cannot be jumped
        let mut g = FakeGuest::new(3);
        // FUTEX_WAIT_BITSET_PRIVATE on CLOCK_MONOTONIC, 2.5 s after the logical now (10,000 s).
        g.put(0x1000, &7u32.to_le_bytes()).put(0x2000, &timespec_bytes(Timespec { sec: 10_002, nsec: 500_000_000 }));
        let nr = libc::SYS_futex;
        let args = [0x1000, 9 | 128, 7, 0x2000, 0, u32::MAX as u64];
        let before = repro_sys::ns::clock_now_syscall(libc::CLOCK_MONOTONIC).unwrap();
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, args)), Reply::Continue));
        let after = repro_sys::ns::clock_now_syscall(libc::CLOCK_MONOTONIC).unwrap();
        let written = read_timespec(&mut g, 0x2000).unwrap();
        let ns = |(s, n): (i64, i64)| s as i128 * 1_000_000_000 + n as i128;
        let w = ns((written.sec, written.nsec));
        assert!(w >= ns(before) + 2_500_000_000 && w <= ns(after) + 2_500_000_000, "{written:?}");
        assert_eq!(sh.stats.deadlines_translated, 1);
        assert_eq!(sh.ctl.clock.peek(ClockKind::Monotonic).sec, 10_000, "the clock did not move");
        // The retry passes the host value back: it stands for the same logical deadline, translated afresh.
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, args)), Reply::Continue));
        let again = ns({
            let t = read_timespec(&mut g, 0x2000).unwrap();
            (t.sec, t.nsec)
        });
        assert!(again >= w && again - w < 1_000_000_000, "not read as a logical time of {written:?}");
        // Once every other task is blocked, it times out at its logical deadline.
        sh.live.clear();
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, args)), Reply::Error(libc::ETIMEDOUT)));
        assert_eq!(sh.ctl.clock.peek(ClockKind::Monotonic), Timespec { sec: 10_002, nsec: 500_000_000 });
        // A deadline already passed times out at once, without the kernel.
        sh.live.insert(running_tid());
        g.put(0x2000, &timespec_bytes(Timespec { sec: 10_001, nsec: 0 }));
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, args)), Reply::Error(libc::ETIMEDOUT)));
    }

    #[test]
    fn a_wait_another_task_may_end_is_parked_and_sleeps_too() {
        let (r, _w) = std::io::pipe().unwrap();
        let mut sh = shared(1, 0);
        sh.own_network = true;
        sh.live.insert(running_tid());
        let mut g = FakeGuest::new(3);
        g.notification = Some(42);
        g.fds.insert(4, r.into());
        g.targets.insert(4, b"socket:[77]".to_vec()); // a socketpair of the guest's own network
        let mut pollfd = 4i32.to_le_bytes().to_vec();
        pollfd.extend(libc::POLLIN.to_le_bytes());
        pollfd.extend([0, 0]);
        g.put(0x1000, &pollfd);
        let nr = libc::SYS_poll;
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x1000, 1, 50, 0, 0, 0])), Reply::Parked));
        let p = &sh.parked[&3];
        assert_eq!((p.id, p.wait.deadline_ns), (42, 10_000_050_000_000));
        // Another task's sleep parks beside it (a wait is parked), and the earlier deadline is the poll's.
        let mut g2 = FakeGuest::new(5);
        g2.notification = Some(43);
        g2.put(0x3000, &timespec_bytes(Timespec { sec: 1, nsec: 0 }));
        let nr = libc::SYS_nanosleep;
        assert!(matches!(dispatch(&mut sh, &mut g2, nr, decode(nr, [0x3000, 0, 0, 0, 0, 0])), Reply::Parked));
        let first = first_to_expire(sh.parked.values().map(|p| p.wait)).unwrap();
        assert_eq!(first.tid, 3);
        assert_eq!(sh.ctl.clock.peek(ClockKind::Monotonic).sec, 10_000, "parking moves no clock");
        assert_eq!(sh.stats.waits_parked, 2);
        // Without a notification to answer later (or over the host's network) a wait is not parked.
        sh.own_network = false;
        let mut g3 = FakeGuest::new(6);
        g3.notification = Some(44);
        g3.fds.insert(4, g.fds.remove(&4).unwrap());
        g3.targets.insert(4, b"socket:[77]".to_vec());
        g3.put(0x1000, &pollfd);
        let nr = libc::SYS_poll;
        assert!(matches!(dispatch(&mut sh, &mut g3, nr, decode(nr, [0x1000, 1, 50, 0, 0, 0])), Reply::Continue));
        assert_eq!(sh.stats.outside_waits, 1);
        assert!(sh.stats.warnings.iter().any(|w| w.contains("outside descriptors ran in real time")));
    }

    #[test]
    fn a_running_or_unknown_task_is_not_blocked() {
        // This very thread (not the process's main thread, which may be asleep waiting for the tests).
        let me = std::fs::read_link("/proc/thread-self").unwrap();
        let me: i32 = me.file_name().unwrap().to_str().unwrap().parse().unwrap();
        assert!(!blocked_indefinitely(me), "this test is running");
        assert!(blocked_indefinitely(i32::MAX), "no such task");
        let mut sh = shared(1, 0);
        sh.live.insert(me);
        assert!(!others_blocked(&sh, 3), "another task runs: it could end the wait");
        assert!(inherited_fds().iter().all(|t| !t.starts_with('/')));
    }
}
