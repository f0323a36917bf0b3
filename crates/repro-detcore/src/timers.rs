//! Timers in logical time: alarm/setitimer(ITIMER_REAL) and POSIX timers (timer_create). The supervisor keeps
//! them here instead of arming them on the host's clock; a timer expires when the logical clock reaches it
//! (a sleep or a timed wait jumps the clock, reads advance it), and the transport delivers its signal.
//!
//! Every deadline is kept on one timeline: the clock's elapsed logical nanoseconds since the run started
//! ([`LogicalClock::elapsed_ns`]); realtime and monotonic both advance along it (the guest cannot set the clock),
//! so an absolute deadline on either clock is a point on it.

use std::collections::BTreeMap;

use crate::clock::{ClockKind, LogicalClock, Timespec, NSEC_PER_SEC};
use crate::DetError;

/// A timer, by owner: the process's one ITIMER_REAL (shared with alarm), or a POSIX timer id of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimerKey {
    /// ITIMER_REAL (and alarm) of thread group `tgid`.
    Real { tgid: i32 },
    /// POSIX timer `id` of thread group `tgid`.
    Posix { tgid: i32, id: i32 },
    /// Timerfd `id` (the supervisor's number for it): it belongs to no process, but to whoever holds the fd.
    Fd { id: u64 },
}

impl TimerKey {
    /// The process the timer belongs to.
    pub fn tgid(self) -> i32 {
        match self {
            TimerKey::Real { tgid } | TimerKey::Posix { tgid, .. } => tgid,
            TimerKey::Fd { .. } => NO_PROCESS,
        }
    }
}

/// The owner of a timerfd's timer: no process (pids are positive).
pub const NO_PROCESS: i32 = -1;

/// How an expiry is announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// A signal to the process (SIGEV_SIGNAL; SIGALRM for alarm/setitimer).
    Process { sig: i32 },
    /// A signal to one thread of the process (SIGEV_THREAD_ID).
    Thread { tid: i32, sig: i32 },
    /// SIGEV_NONE: nothing; the guest polls timer_gettime.
    Nothing,
    /// A timerfd: its expiration count grows by `1 + overrun` (the fd becomes readable).
    Fd { id: u64 },
}

/// One armed or disarmed timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timer {
    /// The next expiry on the clock's elapsed-time line; `None` when disarmed.
    pub expiry: Option<i128>,
    /// The period after the first expiry, in ns (0: one shot).
    pub interval_ns: i128,
    /// Expiries missed before the last one was delivered (timer_getoverrun).
    pub overrun: i32,
    pub notify: Notify,
    /// sigev_value, passed in the signal's si_value.
    pub sigval: u64,
    /// Realtime or monotonic (what an absolute setting is measured against).
    pub clock: ClockKind,
}

/// An expiry to deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub key: TimerKey,
    pub notify: Notify,
    pub sigval: u64,
    /// Expiries folded into this one (the kernel's overrun count).
    pub overrun: i32,
}

/// A timer's setting as the guest sees it: time to the next expiry and the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub value: Timespec,
    pub interval: Timespec,
}

impl Default for Setting {
    fn default() -> Self {
        Setting { value: ZERO, interval: ZERO }
    }
}

const ZERO: Timespec = Timespec { sec: 0, nsec: 0 };

/// Errors the timer calls return to the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    #[error("no timer {0:?}")]
    NoSuchTimer(TimerKey),
    #[error("invalid timer value {sec}s {nsec}ns")]
    Invalid { sec: i64, nsec: i64 },
    #[error("timer clock is not a realtime or monotonic clock")]
    BadClock,
    #[error("too many timers for one process")]
    TooMany,
}

impl TimerError {
    /// The errno of the call that failed.
    pub fn errno(self) -> i32 {
        match self {
            TimerError::NoSuchTimer(_) | TimerError::Invalid { .. } | TimerError::BadClock => libc::EINVAL,
            TimerError::TooMany => libc::EAGAIN,
        }
    }
}

/// The most POSIX timers one process may hold (the kernel's limit is RLIMIT_SIGPENDING; this keeps a hostile
/// guest from growing the supervisor's table without bound).
pub const MAX_TIMERS_PER_PROCESS: usize = 4096;

/// Every timer of the run.
#[derive(Debug, Clone, Default)]
pub struct TimerTable {
    timers: BTreeMap<TimerKey, Timer>,
    next_fd: u64,
}

fn ns_of(t: Timespec) -> Result<i128, TimerError> {
    match t.to_ns() {
        Ok(ns) if t.sec >= 0 => Ok(ns),
        _ => Err(TimerError::Invalid { sec: t.sec, nsec: t.nsec }),
    }
}

/// The offset of clock `kind` on the elapsed-time line (its value when nothing has elapsed).
fn base(clock: &LogicalClock, kind: ClockKind) -> i128 {
    // peek never yields an out-of-range nsec (from_ns normalises it).
    let now = clock.peek(kind);
    now.sec as i128 * NSEC_PER_SEC as i128 + now.nsec as i128 - clock.elapsed_ns()
}

impl TimerTable {
    /// Whether any timer is armed.
    pub fn any_armed(&self) -> bool {
        self.timers.values().any(|t| t.expiry.is_some())
    }

    /// The earliest expiry of all armed timers, on the elapsed-time line.
    pub fn earliest(&self) -> Option<i128> {
        self.timers.values().filter_map(|t| t.expiry).min()
    }

    /// The processes that own timers (timerfds belong to none), each once.
    pub fn owners(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.timers.keys().map(|k| k.tgid()).filter(|&t| t != NO_PROCESS).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The earliest expiry of the armed timers not in `skip`.
    pub fn earliest_except(&self, skip: &[TimerKey]) -> Option<i128> {
        self.timers.iter().filter(|(k, _)| !skip.contains(k)).filter_map(|(_, t)| t.expiry).min()
    }

    /// The earliest expiry as a time on clock `kind` (what a wait compares its own deadline with).
    pub fn earliest_deadline(&self, clock: &LogicalClock, kind: ClockKind) -> Option<Timespec> {
        self.earliest().map(|e| Timespec::from_ns(e + base(clock, kind)))
    }

    /// A new POSIX timer of `tgid` (timer_create): the lowest free id, as the kernel hands them out.
    pub fn create(&mut self, tgid: i32, clock_id: i64, notify: Notify, sigval: Option<u64>) -> Result<i32, TimerError> {
        let clock = match ClockKind::from_id(clock_id) {
            Ok(k @ (ClockKind::Realtime | ClockKind::Monotonic)) => k,
            _ => return Err(TimerError::BadClock),
        };
        let used: Vec<i32> = self
            .timers
            .keys()
            .filter_map(|k| match *k {
                TimerKey::Posix { tgid: t, id } if t == tgid => Some(id),
                _ => None,
            })
            .collect();
        if used.len() >= MAX_TIMERS_PER_PROCESS {
            return Err(TimerError::TooMany);
        }
        // `used` is sorted (BTreeMap order): the first gap.
        let id = used.iter().enumerate().find(|(i, id)| **id != *i as i32).map_or(used.len() as i32, |(i, _)| i as i32);
        let timer = Timer {
            expiry: None,
            interval_ns: 0,
            overrun: 0,
            notify,
            // Without a sigevent, si_value carries the timer id (as the kernel does).
            sigval: sigval.unwrap_or(id as u64),
            clock,
        };
        self.timers.insert(TimerKey::Posix { tgid, id }, timer);
        Ok(id)
    }

    /// A new timerfd's timer (timerfd_create), disarmed; its key.
    pub fn create_fd(&mut self, clock_id: i64) -> Result<TimerKey, TimerError> {
        let clock = match ClockKind::from_id(clock_id) {
            Ok(k @ (ClockKind::Realtime | ClockKind::Monotonic)) => k,
            _ => return Err(TimerError::BadClock),
        };
        let id = self.next_fd;
        self.next_fd += 1;
        let key = TimerKey::Fd { id };
        let notify = Notify::Fd { id };
        self.timers.insert(key, Timer { expiry: None, interval_ns: 0, overrun: 0, notify, sigval: 0, clock });
        Ok(key)
    }

    /// timer_delete.
    pub fn delete(&mut self, key: TimerKey) -> Result<(), TimerError> {
        self.timers.remove(&key).map(|_| ()).ok_or(TimerError::NoSuchTimer(key))
    }

    /// Drops every timer of a process (it exited or exec'd a new image: POSIX timers do not survive exec,
    /// ITIMER_REAL does, so `keep_real` says whether to keep it).
    pub fn forget_process(&mut self, tgid: i32, keep_real: bool) {
        self.timers.retain(|k, _| k.tgid() != tgid || (keep_real && matches!(k, TimerKey::Real { .. })));
    }

    fn setting(&self, clock: &LogicalClock, t: &Timer) -> Setting {
        let value = t.expiry.map_or(ZERO, |e| Timespec::from_ns((e - clock.elapsed_ns()).max(1)));
        Setting { value, interval: Timespec::from_ns(t.interval_ns) }
    }

    /// The current setting of a timer (timer_gettime, getitimer); an ITIMER_REAL never set reads as zero.
    pub fn get(&self, clock: &LogicalClock, key: TimerKey) -> Result<Setting, TimerError> {
        match (self.timers.get(&key), key) {
            (Some(t), _) => Ok(self.setting(clock, t)),
            (None, TimerKey::Real { .. }) => Ok(Setting::default()),
            (None, TimerKey::Posix { .. } | TimerKey::Fd { .. }) => Err(TimerError::NoSuchTimer(key)),
        }
    }

    /// timer_getoverrun.
    pub fn overrun(&self, key: TimerKey) -> Result<i32, TimerError> {
        self.timers.get(&key).map(|t| t.overrun).ok_or(TimerError::NoSuchTimer(key))
    }

    /// Arms (a non-zero `value`) or disarms a timer; `absolute`: `value` is a time on the timer's clock
    /// (TIMER_ABSTIME). Returns the previous setting. An ITIMER_REAL is created on first use.
    pub fn set(
        &mut self,
        clock: &LogicalClock,
        key: TimerKey,
        value: Timespec,
        interval: Timespec,
        absolute: bool,
    ) -> Result<Setting, TimerError> {
        let value_ns = ns_of(value)?;
        let interval_ns = ns_of(interval)?;
        if let TimerKey::Real { .. } = key {
            self.timers.entry(key).or_insert(Timer {
                expiry: None,
                interval_ns: 0,
                overrun: 0,
                notify: Notify::Process { sig: libc::SIGALRM },
                sigval: 0,
                clock: ClockKind::Realtime,
            });
        }
        let now = clock.elapsed_ns();
        let old = self.get(clock, key)?;
        let t = self.timers.get_mut(&key).ok_or(TimerError::NoSuchTimer(key))?;
        t.overrun = 0;
        if value_ns == 0 {
            t.expiry = None;
            t.interval_ns = 0;
            return Ok(old);
        }
        let expiry = if absolute { value_ns - base(clock, t.clock) } else { now + value_ns };
        // An absolute time already past expires at once (at the next check).
        t.expiry = Some(expiry.max(now));
        t.interval_ns = interval_ns;
        Ok(old)
    }

    /// alarm(seconds): arms ITIMER_REAL (0 disarms) and returns the seconds that were left, rounded as the
    /// kernel does (to the nearest second, and at least 1 while the old one was armed).
    pub fn alarm(&mut self, clock: &LogicalClock, tgid: i32, seconds: u32) -> u32 {
        let key = TimerKey::Real { tgid };
        let value = Timespec { sec: seconds as i64, nsec: 0 };
        // Non-negative and in range: the setting cannot be refused.
        let old = self.set(clock, key, value, ZERO, false).unwrap_or_default();
        let mut secs = old.value.sec as u32;
        if (secs == 0 && old.value.nsec != 0) || old.value.nsec >= 500_000_000 {
            secs += 1;
        }
        secs
    }

    /// Takes every expiry due at elapsed time `now`, in the order they fell due (then by key): one-shot timers
    /// are disarmed, periodic ones move to their next expiry after `now`, with the ones skipped as overruns.
    pub fn take_due(&mut self, now: i128) -> Vec<Expiry> {
        let mut due: Vec<(i128, TimerKey)> =
            self.timers.iter().filter_map(|(k, t)| t.expiry.filter(|&e| e <= now).map(|e| (e, *k))).collect();
        due.sort();
        let mut out = Vec::with_capacity(due.len());
        for (e, key) in due {
            let Some(t) = self.timers.get_mut(&key) else { continue };
            if t.interval_ns > 0 {
                let missed = (now - e) / t.interval_ns;
                t.overrun = missed.min(i32::MAX as i128) as i32;
                t.expiry = Some(e + (missed + 1) * t.interval_ns);
            } else {
                t.overrun = 0;
                t.expiry = None;
            }
            out.push(Expiry { key, notify: t.notify, sigval: t.sigval, overrun: t.overrun });
        }
        out
    }
}

/// Moves the clock forward to elapsed time `elapsed` (never backward): time passes in a sleep or a wait up to
/// a timer's expiry.
pub fn advance_to(clock: &mut LogicalClock, elapsed: i128) {
    let now = clock.elapsed_ns();
    if elapsed > now {
        // A positive, normalised duration: sleep_for cannot refuse it.
        let _ = clock.sleep_for(Timespec::from_ns(elapsed - now));
    } else {
        clock.note_event();
    }
}

/// The point on the elapsed-time line where clock `kind` reads `t` (an absolute deadline).
pub fn elapsed_at(clock: &LogicalClock, kind: ClockKind, t: Timespec) -> Result<i128, DetError> {
    Ok(t.to_ns()? - base(clock, kind))
}

/// An invalid timeval/timespec in a timer call is EINVAL.
impl From<DetError> for TimerError {
    fn from(e: DetError) -> Self {
        match e {
            DetError::InvalidTimespec { sec, nsec } => TimerError::Invalid { sec, nsec },
            _ => TimerError::BadClock,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: i64 = 1_700_000_000;

    fn ts(sec: i64, nsec: i64) -> Timespec {
        Timespec { sec, nsec }
    }

    #[test]
    fn a_one_shot_timer_fires_once_when_the_clock_reaches_it() {
        let mut c = LogicalClock::new(EPOCH, 0);
        let mut t = TimerTable::default();
        let key = TimerKey::Real { tgid: 7 };
        assert_eq!(t.set(&c, key, ts(2, 0), ts(0, 0), false).unwrap(), Setting::default());
        assert_eq!(t.earliest(), Some(2 * NSEC_PER_SEC as i128));
        c.sleep_for(ts(1, 0)).unwrap();
        assert!(t.take_due(c.elapsed_ns()).is_empty());
        assert_eq!(t.get(&c, key).unwrap().value, ts(1, 0));
        c.sleep_for(ts(5, 0)).unwrap();
        let due = t.take_due(c.elapsed_ns());
        assert_eq!(due, vec![Expiry { key, notify: Notify::Process { sig: libc::SIGALRM }, sigval: 0, overrun: 0 }]);
        assert!(t.take_due(c.elapsed_ns()).is_empty(), "one shot");
        assert!(!t.any_armed());
        assert_eq!(t.get(&c, key).unwrap(), Setting::default());
    }

    #[test]
    fn a_periodic_timer_rearms_and_counts_overruns() {
        let mut c = LogicalClock::new(EPOCH, 0);
        let mut t = TimerTable::default();
        let id = t.create(3, libc::CLOCK_MONOTONIC as i64, Notify::Thread { tid: 4, sig: 34 }, Some(99)).unwrap();
        assert_eq!(id, 0);
        let key = TimerKey::Posix { tgid: 3, id };
        t.set(&c, key, ts(0, 50_000_000), ts(0, 50_000_000), false).unwrap();
        c.sleep_for(ts(0, 50_000_000)).unwrap();
        let due = t.take_due(c.elapsed_ns());
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].sigval, due[0].overrun), (99, 0));
        // 175 ms later: the expiries at 100 and 150 ms were due, 200 ms is next; one delivery, one overrun.
        c.sleep_for(ts(0, 125_000_000)).unwrap();
        let due = t.take_due(c.elapsed_ns());
        assert_eq!(due[0].overrun, 1);
        assert_eq!(t.overrun(key).unwrap(), 1);
        assert_eq!(t.get(&c, key).unwrap(), Setting { value: ts(0, 25_000_000), interval: ts(0, 50_000_000) });
    }

    #[test]
    fn absolute_settings_on_either_clock_and_past_times() {
        let mut c = LogicalClock::new(EPOCH, 0);
        c.sleep_for(ts(10, 0)).unwrap();
        let mut t = TimerTable::default();
        let rt = t.create(1, libc::CLOCK_REALTIME as i64, Notify::Process { sig: 14 }, None).unwrap();
        let mono = t.create(1, libc::CLOCK_BOOTTIME as i64, Notify::Nothing, None).unwrap();
        assert_eq!((rt, mono), (0, 1));
        let now_mono = c.peek(ClockKind::Monotonic);
        t.set(&c, TimerKey::Posix { tgid: 1, id: rt }, ts(EPOCH + 13, 0), ts(0, 0), true).unwrap();
        t.set(&c, TimerKey::Posix { tgid: 1, id: mono }, ts(now_mono.sec + 2, 0), ts(0, 0), true).unwrap();
        assert_eq!(t.earliest_deadline(&c, ClockKind::Realtime), Some(ts(EPOCH + 12, 0)));
        assert_eq!(t.earliest_deadline(&c, ClockKind::Monotonic), Some(ts(now_mono.sec + 2, 0)));
        // A time already past: due at once.
        t.set(&c, TimerKey::Posix { tgid: 1, id: mono }, ts(1, 0), ts(0, 0), true).unwrap();
        let due = t.take_due(c.elapsed_ns());
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].notify, due[0].sigval), (Notify::Nothing, 1), "no sigevent: si_value is the id");
    }

    #[test]
    fn bad_input_is_refused_like_the_kernel() {
        let c = LogicalClock::new(EPOCH, 0);
        let mut t = TimerTable::default();
        let cpu = libc::CLOCK_PROCESS_CPUTIME_ID as i64;
        assert_eq!(t.create(1, cpu, Notify::Nothing, None), Err(TimerError::BadClock));
        assert_eq!(t.create(1, 99, Notify::Nothing, None).unwrap_err().errno(), libc::EINVAL);
        let key = TimerKey::Posix { tgid: 1, id: 5 };
        assert_eq!(t.set(&c, key, ts(1, 0), ts(0, 0), false), Err(TimerError::NoSuchTimer(key)));
        assert_eq!(t.delete(key), Err(TimerError::NoSuchTimer(key)));
        let real = TimerKey::Real { tgid: 1 };
        assert_eq!(t.set(&c, real, ts(0, 1_000_000_000), ts(0, 0), false).unwrap_err().errno(), libc::EINVAL);
        assert!(t.set(&c, real, ts(-1, 0), ts(0, 0), false).is_err());
        // Ids are reused lowest first; timers die with their process (ITIMER_REAL survives an exec).
        t.create(1, 0, Notify::Nothing, None).unwrap();
        t.create(1, 0, Notify::Nothing, None).unwrap();
        t.delete(TimerKey::Posix { tgid: 1, id: 0 }).unwrap();
        assert_eq!(t.create(1, 0, Notify::Nothing, None), Ok(0));
        t.set(&c, real, ts(5, 0), ts(0, 0), false).unwrap();
        t.forget_process(1, true);
        assert!(t.get(&c, TimerKey::Posix { tgid: 1, id: 1 }).is_err());
        assert_eq!(t.get(&c, real).unwrap().value, ts(5, 0));
        assert_eq!(t.owners(), vec![1]);
        t.forget_process(1, false);
        assert!(!t.any_armed());
        assert!(t.owners().is_empty());
    }

    #[test]
    fn alarm_returns_the_seconds_left_rounded() {
        let mut c = LogicalClock::new(EPOCH, 0);
        let mut t = TimerTable::default();
        assert_eq!(t.alarm(&c, 1, 10), 0);
        c.sleep_for(ts(3, 400_000_000)).unwrap();
        assert_eq!(t.alarm(&c, 1, 10), 7, "6.6 s left");
        c.sleep_for(ts(9, 999_000_000)).unwrap();
        assert_eq!(t.alarm(&c, 1, 0), 1, "1 ms left reads as 1 s");
        assert!(!t.any_armed());
    }

    #[test]
    fn timerfds_have_their_own_keys() {
        let c = LogicalClock::new(EPOCH, 0);
        let mut t = TimerTable::default();
        let a = t.create_fd(libc::CLOCK_MONOTONIC as i64).unwrap();
        let b = t.create_fd(libc::CLOCK_REALTIME as i64).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.tgid(), NO_PROCESS);
        assert!(t.create_fd(libc::CLOCK_THREAD_CPUTIME_ID as i64).is_err());
        t.set(&c, b, ts(0, 10), ts(0, 0), false).unwrap();
        t.forget_process(NO_PROCESS + 2, false);
        let due = t.take_due(10);
        assert_eq!(due[0].notify, Notify::Fd { id: 1 });
    }
}
