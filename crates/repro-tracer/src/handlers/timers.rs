//! Timers in logical time: alarm, setitimer/getitimer(ITIMER_REAL) and the POSIX timers (timer_create,
//! timer_settime, timer_gettime, timer_getoverrun, timer_delete). None of them is armed on the host's clock: the
//! controller's [`TimerTable`](repro_detcore::timers::TimerTable) keeps them, and an expiry is delivered when the
//! logical clock reaches it:
//!
//! - after every mediated call ([`fire_due`], from the notify loop): reads and events move the clock;
//! - in a sleep that would pass an expiry ([`sleep`]): the clock jumps to the expiry, the signal goes out, and the
//!   sleep ends with EINTR and the time left (the signal interrupts this task), goes on (ignored or blocked), or
//!   is held until every other guest task is blocked again (the signal went to another process, which may act on
//!   it: `timeout` kills its child);
//! - when every guest task is blocked and a timer is armed ([`watch`]): nothing else can happen before it, so the
//!   clock jumps to it (pause(), sigsuspend(), wait4() on a child that waits too).
//!
//! A timerfd is an eventfd the supervisor created and keeps a copy of (installed in the guest with ADDFD): at
//! each expiry the supervisor adds the expiration count to it, so a read returns that count and resets it, and
//! poll/epoll see it readable, exactly as a timerfd; timerfd_settime/gettime find their timer by the eventfd's
//! id (/proc/<tid>/fdinfo). What differs from a real timerfd: /proc shows `anon_inode:[eventfd]`, a write by the
//! guest is accepted (a timerfd refuses it with EINVAL), and TFD_TIMER_CANCEL_ON_SET never cancels (the logical
//! clock is never set).
//!
//! Signals are sent from the supervisor, which runs in the guest's PID namespace, while the task that made the
//! mediated call is still stopped in it: the filter's WAIT_KILLABLE_RECV keeps the notification from being
//! interrupted, so the task takes the signal when the call returns, at the same point on every run. A POSIX
//! timer's signal carries si_code SI_TIMER, the timer id, the overrun count and its sigev_value
//! (rt_sigqueueinfo/rt_tgsigqueueinfo), as glibc's SIGEV_THREAD helper expects; ITIMER_REAL's SIGALRM is a plain
//! kill, as the kernel's carries no value either.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use repro_detcore::timers::{Expiry, Notify, Setting, TimerError, TimerKey};
use repro_detcore::{ClockKind, HostTimer, Timespec};

use super::{answered, read_timespec, timespec_bytes};
use crate::decode::Syscall;
use crate::guest::Guest;
use crate::reply::{Outcome, Refusal, Reply};
use crate::state::{lock, Shared, SharedRef};

const ITIMER_REAL: i32 = 0;
const SIGEV_SIGNAL: i32 = 0;
const SIGEV_NONE: i32 = 1;
const SIGEV_THREAD_ID: i32 = 4;
/// How often a held sleep and the watcher look at the guest again (real time).
const POLL: Duration = Duration::from_millis(1);
/// The watcher's looks at a guest that runs with nothing moving (no clock read, no mediated call) before a timer
/// fires anyway (about 5 s).
const STALL_POLLS: u32 = 5000;
/// The looks of a held sleep at other tasks that keep running before it goes on anyway (about 3 s).
const HOLD_LIMIT_POLLS: u32 = 3000;
/// The watcher's looks at a running guest, past a due timer, before it fires it anyway (about 50 ms).
const OVERDUE_POLLS: u32 = 50;

/// A task's signal masks, from /proc/<tid>/status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SigState {
    pub pending: u64,
    pub blocked: u64,
    pub ignored: u64,
    pub caught: u64,
}

fn bit(sig: i32) -> u64 {
    if (1..=64).contains(&sig) {
        1u64 << (sig - 1)
    } else {
        0
    }
}

/// Signals whose default action is not to end the process (ignore, stop, continue).
const NOT_FATAL: [i32; 8] = [
    libc::SIGCHLD,
    libc::SIGCONT,
    libc::SIGURG,
    libc::SIGWINCH,
    libc::SIGSTOP,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
];

impl SigState {
    /// A pending signal the task will run a handler for: an interruptible call ends with EINTR.
    pub(crate) fn interrupting(self) -> bool {
        self.pending & !self.blocked & self.caught != 0
    }

    /// A pending signal that ends the process by its default action: the call never returns.
    pub(crate) fn dying(self) -> bool {
        let not_fatal = NOT_FATAL.iter().fold(0, |m, &s| m | bit(s));
        self.pending & !self.blocked & !self.ignored & !self.caught & !not_fatal != 0
    }
}

/// What the timers need from the host: sending a timer's signal, a task's process, its signal state. The real
/// ones act on guest processes; unit tests put fakes here.
#[derive(Clone, Copy)]
pub(crate) struct TimerOs {
    /// Delivers an expiry of a timer of process `tgid`: `Err(errno)` when it cannot (ESRCH: the process is gone).
    pub deliver: fn(tgid: i32, e: &Expiry) -> Result<(), i32>,
    /// The thread group of task `tid` (`None`: gone).
    pub tgid_of: fn(tid: i32) -> Option<i32>,
    /// Whether `tid` is a thread of `tgid`.
    pub thread_of: fn(tgid: i32, tid: i32) -> bool,
    /// The signal state of task `tid` (`None`: gone, or a zombie).
    pub sig_state: fn(tid: i32) -> Option<SigState>,
    /// The eventfd id of descriptor `fd` of task `tid` (`None`: not an eventfd, or no such descriptor).
    pub fd_id: fn(tid: i32, fd: i32) -> Option<u64>,
}

/// A timerfd of the guest: the supervisor's copy of the eventfd, and its timer.
pub(crate) struct TimerFd {
    pub file: std::fs::File,
    pub key: TimerKey,
}

/// The most timerfds a run may hold (each keeps a descriptor open in the supervisor).
const MAX_TIMERFDS: usize = 4096;
const TFD_TIMER_ABSTIME: i32 = 1;
const TFD_TIMER_CANCEL_ON_SET: i32 = 2;

impl TimerOs {
    pub(crate) const REAL: TimerOs = TimerOs {
        deliver: deliver_real,
        tgid_of: tgid_real,
        thread_of: thread_real,
        sig_state: sig_state_real,
        fd_id: fd_id_real,
    };
    /// Sends nothing and sees one-thread processes with no signal pending (the unit tests' default).
    #[cfg(test)]
    pub(crate) const INERT: TimerOs = TimerOs {
        deliver: |_, _| Ok(()),
        tgid_of: Some,
        thread_of: |tgid, tid| tgid == tid,
        sig_state: |_| Some(SigState { pending: 0, blocked: 0, ignored: 0, caught: 0 }),
        fd_id: |_, _| None,
    };
}

/// The real host in the supervisor; an inert one in unit tests, which never signal a host process.
#[cfg(not(test))]
pub(crate) const DEFAULT_OS: TimerOs = TimerOs::REAL;
#[cfg(test)]
pub(crate) const DEFAULT_OS: TimerOs = TimerOs::INERT;

fn deliver_real(tgid: i32, e: &Expiry) -> Result<(), i32> {
    let r = match (e.key, e.notify) {
        // A timerfd's expiry is written by fire_due.
        (_, Notify::Nothing | Notify::Fd { .. }) | (TimerKey::Fd { .. }, _) => return Ok(()),
        (TimerKey::Real { .. }, Notify::Process { sig }) => repro_sys::ptrace::kill_process(tgid, sig),
        (TimerKey::Real { .. }, Notify::Thread { tid, sig }) => repro_sys::ptrace::kill_task(tid, sig),
        (TimerKey::Posix { id, .. }, Notify::Process { sig }) => {
            repro_sys::ptrace::queue_timer_signal(tgid, None, sig, id, e.overrun, e.sigval)
        }
        (TimerKey::Posix { id, .. }, Notify::Thread { tid, sig }) => {
            repro_sys::ptrace::queue_timer_signal(tgid, Some(tid), sig, id, e.overrun, e.sigval)
        }
    };
    r.map_err(|err| err.raw_os_error().unwrap_or(libc::ESRCH))
}

fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim)
}

fn tgid_real(tid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status_field(&s, "Tgid:")?.parse().ok()
}

fn thread_real(tgid: i32, tid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{tgid}/task/{tid}")).exists()
}

/// The `eventfd-id:` of a descriptor's fdinfo.
pub(crate) fn fd_id_real(tid: i32, fd: i32) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}")).ok()?;
    status_field(&info, "eventfd-id:")?.parse().ok()
}

fn sig_state_real(tid: i32) -> Option<SigState> {
    parse_status(&std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?)
}

/// The signal masks of a /proc/<tid>/status text; `None` for a zombie or a text without them.
pub(crate) fn parse_status(s: &str) -> Option<SigState> {
    if status_field(s, "State:")?.starts_with('Z') {
        return None;
    }
    let mask = |name: &str| u64::from_str_radix(status_field(s, name)?, 16).ok();
    Some(SigState {
        pending: mask("SigPnd:")? | mask("ShdPnd:")?,
        blocked: mask("SigBlk:")?,
        ignored: mask("SigIgn:")?,
        caught: mask("SigCgt:")?,
    })
}

/// The process of the calling task (its own tid when /proc does not say: a task that vanished).
fn tgid(sh: &Shared, tid: i32) -> i32 {
    (sh.timer_os.tgid_of)(tid).unwrap_or(tid)
}

/// Answers a timer call.
pub(crate) fn handle<G: Guest>(sh: &mut Shared, g: &mut G, nr: i64, call: Syscall) -> Reply {
    sh.ctl.note_event();
    let me = tgid(sh, g.tid());
    let r = match call {
        Syscall::Alarm { seconds } => {
            let clock = sh.ctl.clock.clone();
            Ok(sh.ctl.timers.alarm(&clock, me, seconds as u32) as i64)
        }
        Syscall::Setitimer { which, new, old } if which == ITIMER_REAL => setitimer(sh, g, me, new, old),
        Syscall::Setitimer { which: libc::ITIMER_VIRTUAL | libc::ITIMER_PROF, new, .. } => {
            // ITIMER_VIRTUAL / ITIMER_PROF count the host's CPU time: they run natively, and the run says so.
            let value = if new != 0 { read_timespec(g, new + 16).ok() } else { None };
            return host_timer(sh, HostTimer::Setitimer { given: new != 0, value });
        }
        Syscall::Getitimer { which, cur } if which == ITIMER_REAL => {
            let s = sh.ctl.timers.get(&sh.ctl.clock, TimerKey::Real { tgid: me }).unwrap_or_default();
            g.write_bytes(cur, &itimerval_bytes(s)).map(|_| 0).map_err(Refusal::from)
        }
        Syscall::TimerCreate { clock, sevp, timerid } => timer_create(sh, g, me, clock, sevp, timerid),
        Syscall::TimerSettime { id, flags, new, old } => timer_settime(sh, g, me, id, flags, new, old),
        Syscall::TimerGettime { id, cur } => {
            let key = TimerKey::Posix { tgid: me, id };
            match sh.ctl.timers.get(&sh.ctl.clock, key) {
                Ok(s) => g.write_bytes(cur, &itimerspec_bytes(s)).map(|_| 0).map_err(Refusal::from),
                // Not one of ours: a host timer (a CPU-time clock) or no timer; the kernel answers.
                Err(_) => Err(Refusal::Native),
            }
        }
        Syscall::TimerGetoverrun { id } => {
            sh.ctl.timers.overrun(TimerKey::Posix { tgid: me, id }).map(i64::from).map_err(|_| Refusal::Native)
        }
        Syscall::TimerDelete { id } => {
            sh.ctl.timers.delete(TimerKey::Posix { tgid: me, id }).map(|_| 0).map_err(|_| Refusal::Native)
        }
        Syscall::TimerfdCreate { clock, flags } => return timerfd_create(sh, nr, clock, flags),
        Syscall::TimerfdSettime { fd, flags, new, old } => timerfd_settime(sh, g, fd, flags, new, old),
        Syscall::TimerfdGettime { fd, cur } => match timerfd_key(sh, g, fd) {
            Some(key) => match sh.ctl.timers.get(&sh.ctl.clock, key) {
                Ok(s) => g.write_bytes(cur, &itimerspec_bytes(s)).map(|_| 0).map_err(Refusal::from),
                Err(e) => Err(terr(e)),
            },
            None => Err(Refusal::Native),
        },
        _ => Err(Refusal::Native),
    };
    answered(sh, nr, r)
}

/// A timer on the host's clock: it runs natively, and the run records why it is not reproducible.
pub(crate) fn host_timer(sh: &mut Shared, t: HostTimer) -> Reply {
    if let Some(why) = sh.ctl.host_timer(t) {
        sh.not_enforced.insert(why);
    }
    sh.stats.continued += 1;
    Reply::Continue
}

fn terr(e: TimerError) -> Refusal {
    Refusal::Errno(e.errno())
}

/// A `struct timeval` pair (interval, value) as a (value, interval) setting; tv_usec must be below 10^6.
fn read_itimerval<G: Guest>(g: &mut G, addr: u64) -> Result<(Timespec, Timespec), Refusal> {
    let mut pair = [Timespec { sec: 0, nsec: 0 }; 2];
    for (i, t) in pair.iter_mut().enumerate() {
        let tv = read_timespec(g, addr + 16 * i as u64)?;
        if tv.sec < 0 || !(0..1_000_000).contains(&tv.nsec) {
            return Err(Refusal::Errno(libc::EINVAL));
        }
        *t = Timespec { sec: tv.sec, nsec: tv.nsec * 1000 };
    }
    Ok((pair[1], pair[0]))
}

fn itimerval_bytes(s: Setting) -> [u8; 32] {
    // Rounded up to the microsecond, so that an armed timer never reads as disarmed.
    let tv = |t: Timespec| {
        let us = (t.nsec + 999) / 1000;
        let (sec, us) = if us == 1_000_000 { (t.sec + 1, 0) } else { (t.sec, us) };
        timespec_bytes(Timespec { sec, nsec: us })
    };
    let mut b = [0u8; 32];
    b[..16].copy_from_slice(&tv(s.interval));
    b[16..].copy_from_slice(&tv(s.value));
    b
}

fn itimerspec_bytes(s: Setting) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[..16].copy_from_slice(&timespec_bytes(s.interval));
    b[16..].copy_from_slice(&timespec_bytes(s.value));
    b
}

/// timerfd_create: an eventfd in the guest (ADDFD), with a disarmed timer.
fn timerfd_create(sh: &mut Shared, nr: i64, clock: i64, flags: i32) -> Reply {
    use nix::sys::eventfd::{EfdFlags, EventFd};
    if flags & !(libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) != 0 {
        return answered(sh, nr, Err(Refusal::Errno(libc::EINVAL)));
    }
    if sh.timerfds.len() >= MAX_TIMERFDS {
        return answered(sh, nr, Err(Refusal::Errno(libc::EMFILE)));
    }
    let key = match sh.ctl.timers.create_fd(clock) {
        Ok(k) => k,
        Err(e) => return answered(sh, nr, Err(terr(e))),
    };
    let mut efd = EfdFlags::EFD_CLOEXEC;
    if flags & libc::TFD_NONBLOCK != 0 {
        efd |= EfdFlags::EFD_NONBLOCK;
    }
    let made = EventFd::from_value_and_flags(0, efd).map_err(|e| e as i32).and_then(|ev| {
        let guest: OwnedFd = ev.into();
        let mine = guest.try_clone().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
        let id = fd_id_real(std::process::id() as i32, mine.as_raw_fd()).ok_or(libc::EIO)?;
        Ok((guest, mine, id))
    });
    match made {
        Ok((guest, mine, id)) => {
            sh.timerfds.insert(id, TimerFd { file: mine.into(), key });
            sh.count("timerfd_create");
            Reply::AddFd { fd: guest, cloexec: flags & libc::TFD_CLOEXEC != 0 }
        }
        Err(errno) => {
            // Just created: it exists.
            let _ = sh.ctl.timers.delete(key);
            answered(sh, nr, Err(Refusal::Errno(errno)))
        }
    }
}

/// The timer of the guest's descriptor `fd`, if it is one of our timerfds.
fn timerfd_key<G: Guest>(sh: &Shared, g: &G, fd: i32) -> Option<TimerKey> {
    let id = (sh.timer_os.fd_id)(g.tid(), fd)?;
    sh.timerfds.get(&id).map(|t| t.key)
}

fn timerfd_settime<G: Guest>(sh: &mut Shared, g: &mut G, fd: i32, flags: i32, new: u64, old: u64) -> Outcome {
    // Not one of ours (not a timerfd at all, or a bad descriptor): the kernel gives its error.
    let Some(key) = timerfd_key(sh, g, fd) else { return Err(Refusal::Native) };
    if flags & !(TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET) != 0 {
        return Err(Refusal::Errno(libc::EINVAL));
    }
    let interval = read_timespec(g, new)?;
    let value = read_timespec(g, new + 16)?;
    let clock = sh.ctl.clock.clone();
    let prev = sh.ctl.timers.set(&clock, key, value, interval, flags & TFD_TIMER_ABSTIME != 0).map_err(terr)?;
    // Setting a timerfd resets its expiration count, as the kernel does.
    if let Some(id) = (sh.timer_os.fd_id)(g.tid(), fd) {
        if let Some(t) = sh.timerfds.get(&id) {
            drain(&t.file);
        }
    }
    if old != 0 {
        g.write_bytes(old, &itimerspec_bytes(prev))?;
    }
    Ok(0)
}

/// Empties an eventfd's count without blocking (its blocking mode is the guest's).
fn drain(f: &std::fs::File) {
    use std::io::Read;
    let fd: &dyn std::os::fd::AsFd = f;
    let mut p = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
    if nix::poll::poll(&mut p, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0) {
        let mut b = [0u8; 8];
        // Readable: the read returns at once; if another task emptied it meanwhile the count is already 0.
        let _ = (&*f).read(&mut b);
    }
}

fn setitimer<G: Guest>(sh: &mut Shared, g: &mut G, me: i32, new: u64, old: u64) -> Outcome {
    let zero = Timespec { sec: 0, nsec: 0 };
    // A null new value disarms (deprecated, still accepted by Linux).
    let (value, interval) = if new != 0 { read_itimerval(g, new)? } else { (zero, zero) };
    let clock = sh.ctl.clock.clone();
    let prev = sh.ctl.timers.set(&clock, TimerKey::Real { tgid: me }, value, interval, false).map_err(terr)?;
    if old != 0 {
        g.write_bytes(old, &itimerval_bytes(prev))?;
    }
    Ok(0)
}

fn timer_create<G: Guest>(sh: &mut Shared, g: &mut G, me: i32, clock: i64, sevp: u64, timerid: u64) -> Outcome {
    if let Ok(ClockKind::CpuTime) = ClockKind::from_id(clock) {
        // A CPU-time clock follows the host's scheduling: the timer runs natively, and the run says so.
        if let Some(why) = sh.ctl.host_timer(HostTimer::TimerCreate) {
            sh.not_enforced.insert(why);
        }
        return Err(Refusal::Native);
    }
    let (notify, sigval) = if sevp == 0 {
        (Notify::Process { sig: libc::SIGALRM }, None)
    } else {
        let ev = g.read_bytes(sevp, 20)?;
        let int = |o: usize| i32::from_le_bytes([ev[o], ev[o + 1], ev[o + 2], ev[o + 3]]);
        let value = u64::from_le_bytes(ev[..8].try_into().map_err(|_| libc::EFAULT)?);
        let (sig, how) = (int(8), int(12));
        let valid_sig = (1..=64).contains(&sig);
        let notify = match how {
            SIGEV_NONE => Notify::Nothing,
            SIGEV_SIGNAL if valid_sig => Notify::Process { sig },
            SIGEV_THREAD_ID if valid_sig && (sh.timer_os.thread_of)(me, int(16)) => {
                Notify::Thread { tid: int(16), sig }
            }
            _ => return Err(Refusal::Errno(libc::EINVAL)),
        };
        (notify, Some(value))
    };
    let id = sh.ctl.timers.create(me, clock, notify, sigval).map_err(terr)?;
    if let Err(e) = g.write_bytes(timerid, &id.to_le_bytes()) {
        // The kernel too frees the timer when it cannot hand out its id; it was just created, so it exists.
        sh.ctl.timers.delete(TimerKey::Posix { tgid: me, id }).map_err(terr)?;
        return Err(e.into());
    }
    Ok(0)
}

#[allow(clippy::too_many_arguments)]
fn timer_settime<G: Guest>(sh: &mut Shared, g: &mut G, me: i32, id: i32, flags: i32, new: u64, old: u64) -> Outcome {
    let key = TimerKey::Posix { tgid: me, id };
    if sh.ctl.timers.get(&sh.ctl.clock, key).is_err() {
        return Err(Refusal::Native); // a host timer (CPU-time clock) or none: the kernel answers
    }
    if new == 0 {
        return Err(Refusal::Errno(libc::EINVAL));
    }
    let interval = read_timespec(g, new)?;
    let value = read_timespec(g, new + 16)?;
    let clock = sh.ctl.clock.clone();
    let abs = flags & libc::TIMER_ABSTIME != 0;
    let prev = sh.ctl.timers.set(&clock, key, value, interval, abs).map_err(terr)?;
    if old != 0 {
        g.write_bytes(old, &itimerspec_bytes(prev))?;
    }
    Ok(0)
}

/// Delivers every expiry due at the logical clock's current time; returns them. A timer whose process is gone
/// goes with it.
pub(crate) fn fire_due(sh: &mut Shared) -> Vec<Expiry> {
    if sh.ctl.timers.earliest().is_none_or(|e| e > sh.ctl.clock.elapsed_ns()) {
        return Vec::new();
    }
    // The guest sees the clock at the expiry before anything wakes it: a task woken by the signal or the
    // timerfd reads the vDSO page at once.
    sh.sync_out();
    let due = sh.ctl.timers.take_due(sh.ctl.clock.elapsed_ns());
    for e in &due {
        if let TimerKey::Fd { .. } = e.key {
            let add = (e.overrun as u64).saturating_add(1);
            if let Some(t) = sh.timerfds.values().find(|t| t.key == e.key) {
                match (&t.file).write_all(&add.to_le_bytes()) {
                    Ok(_) => sh.count("timer_expiries"),
                    Err(err) => {
                        sh.stats.warnings.insert(format!("writing a timerfd's expiry failed: {err}"));
                    }
                }
            }
            continue;
        }
        let owner = e.key.tgid();
        match (sh.timer_os.deliver)(owner, e) {
            Ok(()) => sh.count("timer_expiries"),
            Err(libc::ESRCH) => sh.ctl.timers.forget_process(owner, false),
            Err(errno) => {
                let why = format!("delivering a timer's signal to process {owner} failed (errno {errno})");
                sh.stats.warnings.insert(why);
            }
        }
    }
    due
}

/// For a timed wait nothing else can end (handlers/waits.rs), before the clock jumps to its `deadline`: when
/// a timer expires first, the clock jumps to that expiry instead and the timer fires. `true` when something was
/// delivered (a signal, a timerfd's count): the wait then runs natively and ends at once (its timerfd is
/// readable, or the signal interrupts it); `false` when the wait times out as it would have.
pub(crate) fn fire_before(sh: &mut Shared, deadline: repro_detcore::Deadline) -> bool {
    let c = &sh.ctl.clock;
    let end = match deadline {
        repro_detcore::Deadline::After(t) => t.to_ns().map(|ns| c.elapsed_ns() + ns),
        repro_detcore::Deadline::At(clock, t) => {
            ClockKind::from_id(clock).and_then(|k| repro_detcore::timers::elapsed_at(c, k, t))
        }
    };
    let Ok(end) = end else { return false };
    // SIGEV_NONE timers change nothing: skipped after their first expiry (see advance_sleep).
    let mut inert: Vec<TimerKey> = Vec::new();
    while let Some(e) = sh.ctl.timers.earliest_except(&inert).filter(|&e| e < end) {
        repro_detcore::timers::advance_to(&mut sh.ctl.clock, e);
        let fired = fire_due(sh);
        if fired.iter().any(|x| x.notify != Notify::Nothing) {
            return true;
        }
        inert.extend(fired.iter().map(|x| x.key));
    }
    false
}

/// Delivers what is due after a mediated call: the notify loop calls this while the calling task is still
/// stopped in the call, so a signal is taken when it returns.
pub(crate) fn after_call(sh: &mut Shared) {
    fire_due(sh);
}

/// Drops the timers of processes that exited (gone, or a zombie): the kernel deletes them at exit, and the clock
/// must not jump to a timer nobody will get.
fn prune_exited(sh: &mut Shared) {
    for owner in sh.ctl.timers.owners() {
        if (sh.timer_os.sig_state)(owner).is_none() {
            sh.ctl.timers.forget_process(owner, false);
        }
    }
}

/// Where a sleep of task `tid` (process `tgid`) until `deadline` (on the clock's elapsed-time line) stands.
enum Step {
    /// The sleep is over: slept to the deadline (0), or interrupted by a signal (EINTR, with this much left).
    Done(Result<(), Timespec>),
    /// A timer's signal went to another task, which may act before this sleep would end: wait until every
    /// other task is blocked again.
    Hold,
}

fn advance_sleep(sh: &mut Shared, tid: i32, tgid: i32, deadline: i128) -> Step {
    // Timers whose expiry changed nothing (blocked or ignored signals, SIGEV_NONE): their later expiries
    // would not either, so they are not stepped through one by one (a 1 ns period over a day-long sleep) but
    // folded into their overrun count at the end.
    let mut inert: Vec<TimerKey> = Vec::new();
    prune_exited(sh);
    loop {
        let next = sh.ctl.timers.earliest_except(&inert).filter(|&e| e < deadline);
        let Some(e) = next else {
            repro_detcore::timers::advance_to(&mut sh.ctl.clock, deadline);
            if !inert.is_empty() {
                fire_due(sh);
            }
            return Step::Done(Ok(()));
        };
        repro_detcore::timers::advance_to(&mut sh.ctl.clock, e);
        let fired = fire_due(sh);
        let left = Timespec::from_ns(deadline - sh.ctl.clock.elapsed_ns());
        match (sh.timer_os.sig_state)(tid) {
            Some(s) if s.interrupting() => return Step::Done(Err(left)),
            // Gone, or about to be: the answer is never seen.
            None => return Step::Done(Err(left)),
            Some(s) if s.dying() => return Step::Done(Err(left)),
            Some(_) => {}
        }
        let elsewhere = fired.iter().any(|x| match x.notify {
            Notify::Nothing => false,
            // Whoever waits on the timerfd wakes up.
            Notify::Fd { .. } => true,
            Notify::Process { .. } => x.key.tgid() != tgid,
            Notify::Thread { tid: t, .. } => t != tid,
        });
        if elsewhere {
            return Step::Hold;
        }
        inert.extend(fired.iter().map(|x| x.key));
    }
}

/// A sleep (nanosleep, clock_nanosleep) of the calling task until `deadline` on the elapsed-time line, with
/// its `rem` address (0: none) for the time left when a signal interrupts it.
pub(crate) fn sleep<G: Guest>(sh: &mut Shared, g: &mut G, deadline: i128, rem: u64) -> Reply {
    let tid = g.tid();
    let me = tgid(sh, tid);
    match advance_sleep(sh, tid, me, deadline) {
        Step::Done(r) => {
            sh.count("nanosleep");
            finish_sleep(g, r, rem)
        }
        Step::Hold => {
            sh.count("sleeps_held");
            Reply::Defer(Box::new(move |shared| hold(shared, tid, me, deadline, rem)))
        }
    }
}

fn finish_sleep<G: Guest>(g: &mut G, r: Result<(), Timespec>, rem: u64) -> Reply {
    match r {
        Ok(()) => Reply::Value(0),
        Err(left) => {
            if rem != 0 {
                // EFAULT on rem: the kernel too reports EINTR regardless (the remaining time is lost).
                let _ = g.write_bytes(rem, &timespec_bytes(left));
            }
            Reply::Error(libc::EINTR)
        }
    }
}

/// A held sleep, on a thread of its own: waits until every other guest task is blocked (or this one is
/// interrupted or gone), then goes on with the sleep.
///
/// Another task that never blocks (a busy server) would hold the sleep forever where natively it ends: after
/// [`HOLD_LIMIT_POLLS`] looks the sleep goes on anyway, and the run says that where it ended followed the
/// host's timing.
fn hold(shared: &SharedRef, tid: i32, tgid: i32, deadline: i128, rem: u64) -> Reply {
    let mut pidfds = crate::guest::PidfdCache::default();
    let mut waited = 0u32;
    loop {
        std::thread::sleep(POLL);
        let mut sh = lock(shared);
        let os = sh.timer_os;
        match (os.sig_state)(tid) {
            // Gone, or a signal will end it when the call returns (a traced task's fatal signal does not end
            // the wait by itself): the time left does not matter.
            None => return Reply::Error(libc::EINTR),
            Some(s) if s.dying() => return Reply::Error(libc::EINTR),
            Some(s) if s.interrupting() => {
                let left = Timespec::from_ns((deadline - sh.ctl.clock.elapsed_ns()).max(0));
                let mut g = crate::guest::TaskGuest::new(tid, None, &mut pidfds);
                return finish_sleep(&mut g, Err(left), rem);
            }
            Some(_) => {}
        }
        if !super::waits::others_blocked(&sh, tid) {
            waited += 1;
            if waited < HOLD_LIMIT_POLLS {
                continue;
            }
            sh.not_enforced.insert(
                "a sleep held after a timer's signal to another task went on while that task still ran: where \
                 it ended followed the host's timing"
                    .into(),
            );
        }
        waited = 0;
        sh.sync_in();
        let step = advance_sleep(&mut sh, tid, tgid, deadline);
        sh.sync_out();
        if let Step::Done(r) = step {
            sh.count("nanosleep");
            drop(sh);
            let mut g = crate::guest::TaskGuest::new(tid, None, &mut pidfds);
            return finish_sleep(&mut g, r, rem);
        }
    }
}

/// The watcher: while the guest runs, when a timer is armed and every guest task is blocked in a wait only
/// another task can end, nothing can happen before the timer's expiry: the clock jumps to it and it fires.
///
/// A timer that fell due on the clock the guest reads in-process (the vDSO page) while the guest runs without a
/// mediated call (a busy loop polling `time.time()`) is fired after [`OVERDUE_POLLS`] looks, so that the loop
/// ends as it does natively; where in the guest's run the signal lands then depends on the host's timing, and
/// the run says so (not enforced).
///
/// A guest that runs on with a timer armed but makes no mediated call and reads no clock (a CPU-bound loop under
/// `timeout`) would never reach the timer, where natively it fires: after [`STALL_POLLS`] looks (about 5 s)
/// with nothing moving, the clock jumps to the timer and it fires, reported as not enforced.
pub(crate) fn watch(shared: SharedRef) {
    let mut overdue = 0u32;
    let mut still = 0u32;
    let mut last = (0i128, 0u64, 0u64);
    loop {
        std::thread::sleep(POLL);
        // Only this thread holds the state: the run is over.
        if std::sync::Arc::strong_count(&shared) == 1 {
            return;
        }
        let mut sh = lock(&shared);
        if sh.live.is_empty() {
            return;
        }
        if sh.ctl.timers.earliest().is_none() {
            continue;
        }
        // Whether all are blocked first, then the exited owners: a process that exits in between is pruned
        // rather than taken for blocked.
        let blocked = super::waits::others_blocked(&sh, 0);
        prune_exited(&mut sh);
        let Some(e) = sh.ctl.timers.earliest() else { continue };
        if !blocked {
            sh.sync_in();
            overdue = if e <= sh.ctl.clock.elapsed_ns() { overdue + 1 } else { 0 };
            let progress = (sh.ctl.clock.elapsed_ns(), sh.stats.continued, sh.stats.total_mediated());
            still = if progress == last { still + 1 } else { 0 };
            last = progress;
            if still >= STALL_POLLS {
                still = 0;
                sh.not_enforced.insert(
                    "a timer fired while the guest ran without reading the clock or making a mediated call: \
                     logical time jumped to it after seconds of the host's time"
                        .into(),
                );
                repro_detcore::timers::advance_to(&mut sh.ctl.clock, e);
                fire_due(&mut sh);
                sh.sync_out();
            } else if overdue >= OVERDUE_POLLS {
                overdue = 0;
                sh.not_enforced.insert(
                    "a timer fell due while the guest ran without a mediated call (a loop reading the clock \
                     in-process): the point where its signal arrived follows the host's timing"
                        .into(),
                );
                fire_due(&mut sh);
                sh.sync_out();
            }
            continue;
        }
        overdue = 0;
        sh.sync_in();
        if e > sh.ctl.clock.elapsed_ns() {
            repro_detcore::timers::advance_to(&mut sh.ctl.clock, e);
            sh.count("timer_jumps");
        }
        fire_due(&mut sh);
        sh.sync_out();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::{shared, EPOCH};

    thread_local! {
        static SENT: RefCell<Vec<(i32, Expiry)>> = const { RefCell::new(Vec::new()) };
        static STATE: RefCell<SigState> = RefCell::new(SigState::default());
    }

    fn fake_os() -> TimerOs {
        TimerOs {
            deliver: |tgid, e| {
                SENT.with(|s| s.borrow_mut().push((tgid, *e)));
                Ok(())
            },
            tgid_of: |tid| Some(if tid >= 100 { 100 } else { tid }),
            thread_of: |tgid, tid| tgid == 100 && (100..110).contains(&tid),
            sig_state: |_| Some(STATE.with(|s| *s.borrow())),
            // The "guest's" descriptors are this process's own.
            fd_id: |_, fd| fd_id_real(std::process::id() as i32, fd),
        }
    }

    fn sent() -> Vec<(i32, Expiry)> {
        SENT.with(|s| s.borrow_mut().drain(..).collect())
    }

    fn setup() -> (Shared, FakeGuest) {
        let mut sh = shared(1, 0);
        sh.timer_os = fake_os();
        STATE.with(|s| *s.borrow_mut() = SigState::default());
        sent();
        (sh, FakeGuest::new(100))
    }

    fn call(sh: &mut Shared, g: &mut FakeGuest, nr: i64, a: [u64; 6]) -> Reply {
        dispatch(sh, g, nr, crate::decode::decode(nr, a))
    }

    fn tv(sec: i64, usec: i64) -> [u8; 16] {
        timespec_bytes(Timespec { sec, nsec: usec })
    }

    #[test]
    fn setitimer_arms_in_logical_time_and_a_sleep_is_interrupted() {
        let (mut sh, mut g) = setup();
        // it_interval 0.05 s, it_value 0.05 s.
        let mut itv = tv(0, 50_000).to_vec();
        itv.extend(tv(0, 50_000));
        g.put(0x1000, &itv).map(0x2000, 32);
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_setitimer, [0, 0x1000, 0x2000, 0, 0, 0]), Reply::Value(0)));
        assert_eq!(g.get(0x2000, 32), [0; 32], "nothing was armed before");
        assert!(sh.not_enforced.is_empty());
        // getitimer: 50 ms left.
        g.map(0x3000, 32);
        call(&mut sh, &mut g, libc::SYS_getitimer, [0, 0x3000, 0, 0, 0, 0]);
        assert_eq!(g.get(0x3000 + 16, 16), tv(0, 50_000));
        // A 1 s sleep: the clock jumps to the expiry, SIGALRM goes to the process, which catches it: EINTR, with
        // 0.95 s left in rem.
        STATE.with(|s| *s.borrow_mut() = SigState { pending: bit(14), caught: bit(14), ..Default::default() });
        g.put(0x4000, &timespec_bytes(Timespec { sec: 1, nsec: 0 })).map(0x5000, 16);
        let r = call(&mut sh, &mut g, libc::SYS_nanosleep, [0x4000, 0x5000, 0, 0, 0, 0]);
        assert!(matches!(r, Reply::Error(libc::EINTR)), "{r:?}");
        assert_eq!(g.get(0x5000, 16), timespec_bytes(Timespec { sec: 0, nsec: 950_000_000 }));
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime), Timespec { sec: EPOCH, nsec: 50_000_000 });
        let s = sent();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].0, s[0].1.notify), (100, Notify::Process { sig: libc::SIGALRM }));
        // The same sleep with the signal blocked: it sleeps through every expiry (blocked, the signal changes nothing).
        STATE.with(|s| *s.borrow_mut() = SigState { pending: bit(14), blocked: bit(14), ..Default::default() });
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_nanosleep, [0x4000, 0, 0, 0, 0, 0]), Reply::Value(0)));
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime), Timespec { sec: EPOCH + 1, nsec: 50_000_000 });
        assert_eq!(sent().len(), 2, "the first; the other 19 folded into one at the end, as overruns");
        // No such timer: the kernel answers (EINVAL), nothing is armed.
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_setitimer, [7, 0x1000, 0, 0, 0, 0]), Reply::Continue));
        assert!(sh.not_enforced.is_empty());
        // ITIMER_VIRTUAL still runs natively, refused.
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_setitimer, [1, 0x1000, 0, 0, 0, 0]), Reply::Continue));
        assert!(sh.not_enforced.iter().any(|r| r.contains("setitimer")));
    }

    #[test]
    fn a_fast_periodic_timer_with_its_signal_blocked_does_not_stall_a_long_sleep() {
        let (mut sh, mut g) = setup();
        STATE.with(|s| *s.borrow_mut() = SigState { pending: bit(14), blocked: bit(14), ..Default::default() });
        let mut itv = tv(0, 1).to_vec();
        itv.extend(tv(0, 1));
        g.put(0x1000, &itv);
        call(&mut sh, &mut g, libc::SYS_setitimer, [0, 0x1000, 0, 0, 0, 0]);
        g.put(0x2000, &timespec_bytes(Timespec { sec: 86_400, nsec: 0 }));
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_nanosleep, [0x2000, 0, 0, 0, 0, 0]), Reply::Value(0)));
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime).sec, EPOCH + 86_400);
        let s = sent();
        assert_eq!(s.len(), 2, "the first expiry, then the rest folded at the end");
        assert!(s[1].1.overrun > 1_000_000);
    }

    #[test]
    fn alarm_and_a_bad_itimerval() {
        let (mut sh, mut g) = setup();
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_alarm, [5, 0, 0, 0, 0, 0]), Reply::Value(0)));
        sh.ctl.clock.sleep_for(Timespec { sec: 2, nsec: 0 }).unwrap();
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_alarm, [0, 0, 0, 0, 0, 0]), Reply::Value(3)));
        let mut itv = tv(0, 0).to_vec();
        itv.extend(tv(0, 1_000_000));
        g.put(0x1000, &itv);
        let r = call(&mut sh, &mut g, libc::SYS_setitimer, [0, 0x1000, 0, 0, 0, 0]);
        assert!(matches!(r, Reply::Error(libc::EINVAL)));
        assert!(sh.not_enforced.is_empty());
    }

    #[test]
    fn a_posix_timer_signalling_another_process_holds_the_sleep() {
        let (mut sh, mut g) = setup();
        // timer_create(CLOCK_REALTIME, NULL, &id): SIGALRM, si_value = the id.
        g.map(0x1000, 4);
        let r = call(&mut sh, &mut g, libc::SYS_timer_create, [0, 0, 0x1000, 0, 0, 0]);
        assert!(matches!(r, Reply::Value(0)), "{r:?}");
        assert_eq!(g.get(0x1000, 4), 0i32.to_le_bytes());
        // timer_settime(0, 0, {0, 2 s}, NULL).
        let mut its = timespec_bytes(Timespec { sec: 0, nsec: 0 }).to_vec();
        its.extend(timespec_bytes(Timespec { sec: 2, nsec: 0 }));
        g.put(0x2000, &its).map(0x3000, 32);
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_timer_settime, [0, 0, 0x2000, 0, 0, 0]), Reply::Value(0)));
        call(&mut sh, &mut g, libc::SYS_timer_gettime, [0, 0x3000, 0, 0, 0, 0]);
        assert_eq!(g.get(0x3010, 16), timespec_bytes(Timespec { sec: 2, nsec: 0 }));
        // Another process (tid 7) sleeps 10 s: the timer fires at 2 s, at process 100; the sleep is held.
        let mut child = FakeGuest::new(7);
        child.put(0x4000, &timespec_bytes(Timespec { sec: 10, nsec: 0 }));
        let r = call(&mut sh, &mut child, libc::SYS_nanosleep, [0x4000, 0, 0, 0, 0, 0]);
        assert!(matches!(r, Reply::Defer(_)), "{r:?}");
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime).sec, EPOCH + 2);
        let s = sent();
        assert_eq!(s.len(), 1);
        assert!(matches!(s[0].1.key, TimerKey::Posix { tgid: 100, id: 0 }));
        assert_eq!(sh.stats.mediated["sleeps_held"], 1);
        // One-shot: the overrun is 0; deleted, its id is unknown to us (the kernel answers).
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_timer_getoverrun, [0, 0, 0, 0, 0, 0]), Reply::Value(0)));
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_timer_delete, [0, 0, 0, 0, 0, 0]), Reply::Value(0)));
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_timer_delete, [0, 0, 0, 0, 0, 0]), Reply::Continue));
    }

    #[test]
    fn timer_create_checks_the_sigevent() {
        let (mut sh, mut g) = setup();
        g.map(0x1000, 4);
        let ev = |value: u64, sig: i32, how: i32, tid: i32| {
            let mut b = value.to_le_bytes().to_vec();
            b.extend(sig.to_le_bytes());
            b.extend(how.to_le_bytes());
            b.extend(tid.to_le_bytes());
            b.extend([0u8; 44]);
            b
        };
        let create = |sh: &mut Shared, g: &mut FakeGuest, clock: u64| {
            call(sh, g, libc::SYS_timer_create, [clock, 0x2000, 0x1000, 0, 0, 0])
        };
        g.put(0x2000, &ev(0xabc, 34, SIGEV_THREAD_ID, 105));
        assert!(matches!(create(&mut sh, &mut g, 1), Reply::Value(0)));
        g.put(0x2000, &ev(0, 34, SIGEV_THREAD_ID, 7));
        assert!(matches!(create(&mut sh, &mut g, 1), Reply::Error(libc::EINVAL)), "not a thread of the caller");
        g.put(0x2000, &ev(0, 65, SIGEV_SIGNAL, 0));
        assert!(matches!(create(&mut sh, &mut g, 1), Reply::Error(libc::EINVAL)), "no signal 65");
        g.put(0x2000, &ev(0, 0, 2, 0));
        assert!(matches!(create(&mut sh, &mut g, 1), Reply::Error(libc::EINVAL)), "SIGEV_THREAD is glibc's");
        g.put(0x2000, &ev(0, 0, SIGEV_NONE, 0));
        assert!(matches!(create(&mut sh, &mut g, 10), Reply::Error(libc::EINVAL)), "no clock 10");
        assert!(matches!(create(&mut sh, &mut g, 2), Reply::Continue), "a CPU-time clock runs natively");
        assert!(sh.not_enforced.iter().any(|r| r.contains("timer_create")));
        // The thread-directed timer fires with its value, to thread 105.
        let mut its = timespec_bytes(Timespec { sec: 0, nsec: 0 }).to_vec();
        its.extend(timespec_bytes(Timespec { sec: 0, nsec: 1000 }));
        g.put(0x3000, &its);
        call(&mut sh, &mut g, libc::SYS_timer_settime, [0, 0, 0x3000, 0, 0, 0]);
        sh.ctl.clock.sleep_for(Timespec { sec: 0, nsec: 1000 }).unwrap();
        let due = fire_due(&mut sh);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].notify, due[0].sigval), (Notify::Thread { tid: 105, sig: 34 }, 0xabc));
        assert_eq!(sent().len(), 1);
    }

    #[test]
    fn a_timerfd_counts_its_expiries_in_logical_time() {
        let (mut sh, mut g) = setup();
        let nr = libc::SYS_timerfd_create;
        let r = call(&mut sh, &mut g, nr, [1, (libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) as u64, 0, 0, 0, 0]);
        let Reply::AddFd { fd, cloexec: true } = r else { panic!("{r:?}") };
        let raw = fd.as_raw_fd() as u64;
        assert!(matches!(call(&mut sh, &mut g, nr, [1, 0x4000, 0, 0, 0, 0]), Reply::Error(libc::EINVAL)), "bad flags");
        assert!(matches!(call(&mut sh, &mut g, nr, [2, 0, 0, 0, 0, 0]), Reply::Error(libc::EINVAL)), "CPU clock");
        // Every 100 ms from 250 ms.
        let mut its = timespec_bytes(Timespec { sec: 0, nsec: 100_000_000 }).to_vec();
        its.extend(timespec_bytes(Timespec { sec: 0, nsec: 250_000_000 }));
        g.put(0x1000, &its).map(0x2000, 32);
        let set = libc::SYS_timerfd_settime;
        assert!(matches!(call(&mut sh, &mut g, set, [raw, 0, 0x1000, 0x2000, 0, 0]), Reply::Value(0)));
        assert_eq!(g.get(0x2000, 32), [0; 32]);
        let mut file = std::fs::File::from(fd);
        let mut count = || {
            use std::io::Read;
            let mut b = [0u8; 8];
            file.read(&mut b).map(|_| u64::from_le_bytes(b)).map_err(|e| e.raw_os_error())
        };
        assert_eq!(count(), Err(Some(libc::EAGAIN)), "not expired yet");
        sh.ctl.clock.sleep_for(Timespec { sec: 0, nsec: 460_000_000 }).unwrap();
        fire_due(&mut sh);
        assert_eq!(count(), Ok(3), "250, 350 and 450 ms");
        call(&mut sh, &mut g, libc::SYS_timerfd_gettime, [raw, 0x2000, 0, 0, 0, 0]);
        assert_eq!(g.get(0x2010, 16), timespec_bytes(Timespec { sec: 0, nsec: 90_000_000 }));
        // A descriptor that is not one of ours: the kernel answers.
        assert!(matches!(call(&mut sh, &mut g, set, [0, 0, 0x1000, 0, 0, 0]), Reply::Continue));
        // A timed wait that would outlast the timer: the timer fires first, the wait runs natively.
        let before = sh.ctl.clock.elapsed_ns();
        assert!(fire_before(&mut sh, repro_detcore::Deadline::After(Timespec { sec: 5, nsec: 0 })));
        assert_eq!(sh.ctl.clock.elapsed_ns() - before, 90_000_000);
        assert_eq!(count(), Ok(1));
        assert!(!fire_before(&mut sh, repro_detcore::Deadline::After(Timespec { sec: 0, nsec: 1000 })));
    }

    #[test]
    fn the_real_host_view() {
        let os = TimerOs::REAL;
        let me = std::process::id() as i32;
        assert_eq!((os.tgid_of)(me), Some(me));
        assert!((os.thread_of)(me, me));
        assert!(!(os.thread_of)(me, i32::MAX));
        let key = TimerKey::Posix { tgid: me, id: 0 };
        assert_eq!((os.deliver)(me, &Expiry { key, notify: Notify::Nothing, sigval: 0, overrun: 0 }), Ok(()));
        // SIGURG's default action is to ignore it: the queued timer signal is accepted and dropped.
        let urg = Expiry { key, notify: Notify::Process { sig: libc::SIGURG }, sigval: 7, overrun: 0 };
        assert_eq!((os.deliver)(me, &urg), Ok(()));
        assert_eq!((os.deliver)(i32::MAX, &urg), Err(libc::ESRCH));
        let ev: OwnedFd = nix::sys::eventfd::EventFd::new().unwrap().into();
        assert!((os.fd_id)(me, ev.as_raw_fd()).is_some());
        assert_eq!((os.fd_id)(me, 0), None, "not an eventfd");
    }

    #[test]
    fn signal_state_from_proc() {
        let status = "Name:\tx\nState:\tS (sleeping)\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000002000\n\
                      SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000002000\n";
        let s = parse_status(status).unwrap();
        assert!(s.interrupting() && !s.dying(), "SIGALRM pending and caught");
        let s = SigState { caught: 0, ..s };
        assert!(s.dying() && !s.interrupting(), "SIGALRM pending, default action");
        let s = SigState { pending: bit(libc::SIGCHLD), ..Default::default() };
        assert!(!s.dying() && !s.interrupting());
        assert_eq!(parse_status("State:\tZ (zombie)\n"), None);
        assert_eq!(parse_status("State:\tS\n"), None, "no masks");
        assert!(sig_state_real(std::process::id() as i32).is_some());
    }
}
