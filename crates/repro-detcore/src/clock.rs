//! The logical clock.
//!
//! Time is a single counter of logical nanoseconds elapsed since the run started. Realtime clocks read
//! `epoch + elapsed`, monotonic and boot clocks read `MONOTONIC_START + elapsed`, CPU-time clocks read
//! `elapsed`. The counter moves only when the guest makes it move: each clock read advances it by
//! `step_ns` (0 freezes it between events) and a sleep jumps it to the sleep's deadline.
//!
//! With a frozen clock, a loop that polls the clock would spin forever; after
//! [`STALL_READS`] reads in a row with no other mediated event in between the clock reports
//! [`ClockRead::Stalled`] so the transport can stop the guest with an explanation.

use crate::DetError;

/// Nanoseconds per second.
pub const NSEC_PER_SEC: i64 = 1_000_000_000;
/// What CLOCK_MONOTONIC (and BOOTTIME) read when the run starts: 10,000 s of pretend uptime.
pub const MONOTONIC_START_NS: i64 = 10_000 * NSEC_PER_SEC;
/// Reads in a row, with a frozen clock and nothing else happening, after which the guest is stopped.
pub const STALL_READS: u32 = 20_000;

/// Why a guest polling a frozen clock was stopped.
pub fn stall_reason(reads: u32) -> String {
    format!(
        "the guest read the clock {reads} times in a row with nothing else in between while the clock is \
         frozen (clock step 0), so it was waiting for time to pass, which never happens here; it was stopped. \
         Make the wait a sleep, or rerun with a clock that ticks on reads (--clock-step-ns 1000)"
    )
}

/// A `struct timespec` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: i64,
}

impl Timespec {
    /// Splits a nanosecond count (may be negative) into a normalized timespec.
    pub fn from_ns(ns: i128) -> Self {
        let sec = ns.div_euclid(NSEC_PER_SEC as i128);
        let nsec = ns.rem_euclid(NSEC_PER_SEC as i128);
        Timespec { sec: sec.clamp(i64::MIN as i128, i64::MAX as i128) as i64, nsec: nsec as i64 }
    }

    /// The value in nanoseconds; errors on a field the kernel would reject (EINVAL).
    pub fn to_ns(self) -> Result<i128, DetError> {
        if self.nsec < 0 || self.nsec >= NSEC_PER_SEC {
            return Err(DetError::InvalidTimespec { sec: self.sec, nsec: self.nsec });
        }
        Ok(self.sec as i128 * NSEC_PER_SEC as i128 + self.nsec as i128)
    }
}

/// The families of Linux clock ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// CLOCK_REALTIME, REALTIME_COARSE, REALTIME_ALARM, TAI.
    Realtime,
    /// CLOCK_MONOTONIC, MONOTONIC_RAW, MONOTONIC_COARSE, BOOTTIME, BOOTTIME_ALARM.
    Monotonic,
    /// CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID and the per-pid/tid CPU clocks (negative ids).
    CpuTime,
}

impl ClockKind {
    /// Classifies a clock id as passed to clock_gettime; dynamic (fd-based, PTP) clocks are not mediated.
    pub fn from_id(id: i64) -> Result<Self, DetError> {
        match id {
            0 | 5 | 8 | 11 => Ok(ClockKind::Realtime),
            1 | 4 | 6 | 7 | 9 => Ok(ClockKind::Monotonic),
            2 | 3 => Ok(ClockKind::CpuTime),
            // CPUCLOCK encoding: low 2 bits 0..2 are per-process/thread CPU clocks, 3 is CLOCKFD.
            n if n < 0 && n & 3 != 3 => Ok(ClockKind::CpuTime),
            n => Err(DetError::UnknownClock(n)),
        }
    }
}

/// Result of one clock read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockRead {
    /// The value to return to the guest.
    Value(Timespec),
    /// The clock is frozen and has been read [`STALL_READS`] times in a row: the guest is polling it.
    Stalled { reads: u32 },
}

/// The logical clock of one run.
#[derive(Debug, Clone)]
pub struct LogicalClock {
    epoch_ns: i128,
    elapsed_ns: i128,
    step_ns: u64,
    reads_in_row: u32,
}

impl LogicalClock {
    /// A clock whose realtime starts at `epoch_unix_secs` and advances `step_ns` per read (0 = frozen).
    pub fn new(epoch_unix_secs: i64, step_ns: u64) -> Self {
        LogicalClock {
            epoch_ns: epoch_unix_secs as i128 * NSEC_PER_SEC as i128,
            elapsed_ns: 0,
            step_ns,
            reads_in_row: 0,
        }
    }

    /// The per-read step.
    pub fn step_ns(&self) -> u64 {
        self.step_ns
    }

    /// Logical nanoseconds elapsed since the run started.
    pub fn elapsed_ns(&self) -> i128 {
        self.elapsed_ns
    }

    /// Value of a clock of `kind` at the current instant, without counting as a read.
    pub fn peek(&self, kind: ClockKind) -> Timespec {
        Timespec::from_ns(self.base(kind) + self.elapsed_ns)
    }

    fn base(&self, kind: ClockKind) -> i128 {
        match kind {
            ClockKind::Realtime => self.epoch_ns,
            ClockKind::Monotonic => MONOTONIC_START_NS as i128,
            ClockKind::CpuTime => 0,
        }
    }

    /// One guest read of a clock: returns the current value, then advances the clock by the step.
    pub fn read(&mut self, kind: ClockKind) -> ClockRead {
        self.reads_in_row = self.reads_in_row.saturating_add(1);
        if self.step_ns == 0 && self.reads_in_row >= STALL_READS {
            return ClockRead::Stalled { reads: self.reads_in_row };
        }
        let value = self.peek(kind);
        self.elapsed_ns += self.step_ns as i128;
        ClockRead::Value(value)
    }

    /// Clock reads in a row with no other event in between (the frozen-clock detector's count).
    pub fn reads_in_row(&self) -> u32 {
        self.reads_in_row
    }

    /// Adopts reads answered by an in-process reader of this clock (the replacement vDSO, which
    /// advances a shared copy of `elapsed_ns` by the step per read): the clock moves forward to
    /// `elapsed_ns` (never backward) and the detector's count becomes `reads_in_row`.
    pub fn absorb(&mut self, elapsed_ns: i128, reads_in_row: u32) {
        if elapsed_ns > self.elapsed_ns {
            self.elapsed_ns = elapsed_ns;
        }
        self.reads_in_row = reads_in_row;
    }

    /// Something other than a clock read happened: the polling detector starts over.
    pub fn note_event(&mut self) {
        self.reads_in_row = 0;
    }

    /// A relative sleep of `dur`: the clock jumps by that much, no wall-clock wait.
    pub fn sleep_for(&mut self, dur: Timespec) -> Result<(), DetError> {
        let ns = dur.to_ns()?;
        if dur.sec < 0 {
            return Err(DetError::InvalidTimespec { sec: dur.sec, nsec: dur.nsec });
        }
        self.note_event();
        self.elapsed_ns += ns;
        Ok(())
    }

    /// An absolute sleep until `deadline` on a clock of `kind`: jumps forward to it, never backward.
    pub fn sleep_until(&mut self, kind: ClockKind, deadline: Timespec) -> Result<(), DetError> {
        let ns = deadline.to_ns()?;
        self.note_event();
        let target = ns - self.base(kind);
        if target > self.elapsed_ns {
            self.elapsed_ns = target;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn val(r: ClockRead) -> Timespec {
        match r {
            ClockRead::Value(t) => t,
            ClockRead::Stalled { .. } => panic!("unexpected stall"),
        }
    }

    #[test]
    fn realtime_starts_at_epoch_and_monotonic_at_fixed_value() {
        let mut c = LogicalClock::new(1_700_000_000, 0);
        assert_eq!(val(c.read(ClockKind::Realtime)), Timespec { sec: 1_700_000_000, nsec: 0 });
        assert_eq!(val(c.read(ClockKind::Monotonic)), Timespec { sec: 10_000, nsec: 0 });
        assert_eq!(val(c.read(ClockKind::CpuTime)), Timespec { sec: 0, nsec: 0 });
    }

    #[test]
    fn step_advances_per_read() {
        let mut c = LogicalClock::new(0, 1500);
        let a = val(c.read(ClockKind::Realtime));
        let b = val(c.read(ClockKind::Realtime));
        let m = val(c.read(ClockKind::Monotonic));
        assert_eq!(a, Timespec { sec: 0, nsec: 0 });
        assert_eq!(b, Timespec { sec: 0, nsec: 1500 });
        assert_eq!(m, Timespec { sec: 10_000, nsec: 3000 });
    }

    #[test]
    fn frozen_clock_does_not_move_between_reads() {
        let mut c = LogicalClock::new(5, 0);
        for _ in 0..100 {
            assert_eq!(val(c.read(ClockKind::Realtime)), Timespec { sec: 5, nsec: 0 });
        }
    }

    #[test]
    fn sleep_jumps_the_clock() {
        let mut c = LogicalClock::new(100, 0);
        c.sleep_for(Timespec { sec: 60, nsec: 5 }).unwrap();
        assert_eq!(val(c.read(ClockKind::Realtime)), Timespec { sec: 160, nsec: 5 });
        assert_eq!(val(c.read(ClockKind::Monotonic)), Timespec { sec: 10_060, nsec: 5 });
    }

    #[test]
    fn absolute_sleep_jumps_forward_only() {
        let mut c = LogicalClock::new(100, 0);
        c.sleep_until(ClockKind::Monotonic, Timespec { sec: 10_010, nsec: 0 }).unwrap();
        assert_eq!(c.peek(ClockKind::Realtime), Timespec { sec: 110, nsec: 0 });
        // A deadline in the past leaves the clock where it is.
        c.sleep_until(ClockKind::Realtime, Timespec { sec: 50, nsec: 0 }).unwrap();
        assert_eq!(c.peek(ClockKind::Realtime), Timespec { sec: 110, nsec: 0 });
        c.sleep_until(ClockKind::Realtime, Timespec { sec: 200, nsec: 1 }).unwrap();
        assert_eq!(c.peek(ClockKind::Monotonic), Timespec { sec: 10_100, nsec: 1 });
    }

    #[test]
    fn invalid_timespecs_are_errors() {
        let mut c = LogicalClock::new(0, 0);
        assert!(c.sleep_for(Timespec { sec: 0, nsec: NSEC_PER_SEC }).is_err());
        assert!(c.sleep_for(Timespec { sec: -1, nsec: 0 }).is_err());
        assert!(c.sleep_until(ClockKind::Realtime, Timespec { sec: 1, nsec: -1 }).is_err());
        assert_eq!(c.elapsed_ns(), 0);
    }

    #[test]
    fn polling_a_frozen_clock_is_detected() {
        let mut c = LogicalClock::new(0, 0);
        for _ in 0..STALL_READS - 1 {
            assert!(matches!(c.read(ClockKind::Monotonic), ClockRead::Value(_)));
        }
        assert_eq!(c.read(ClockKind::Monotonic), ClockRead::Stalled { reads: STALL_READS });
    }

    #[test]
    fn events_reset_the_polling_detector() {
        let mut c = LogicalClock::new(0, 0);
        for i in 0..3 * STALL_READS {
            if i % 1000 == 0 {
                c.note_event();
            }
            assert!(matches!(c.read(ClockKind::Realtime), ClockRead::Value(_)));
        }
    }

    #[test]
    fn absorbed_in_process_reads_continue_the_same_clock() {
        let mut c = LogicalClock::new(0, 0);
        c.absorb(5_000, STALL_READS - 1);
        assert_eq!(c.peek(ClockKind::CpuTime), Timespec { sec: 0, nsec: 5_000 });
        // The next read is the one that completes the row.
        assert_eq!(c.read(ClockKind::Monotonic), ClockRead::Stalled { reads: STALL_READS });
        // Never backward.
        c.absorb(10, 0);
        assert_eq!(c.elapsed_ns(), 5_000);
        assert_eq!(c.reads_in_row(), 0);
    }

    #[test]
    fn a_stepping_clock_is_never_stalled() {
        let mut c = LogicalClock::new(0, 1);
        for _ in 0..2 * STALL_READS {
            assert!(matches!(c.read(ClockKind::Realtime), ClockRead::Value(_)));
        }
    }

    #[test]
    fn clock_ids_are_classified() {
        assert_eq!(ClockKind::from_id(0), Ok(ClockKind::Realtime));
        assert_eq!(ClockKind::from_id(11), Ok(ClockKind::Realtime));
        assert_eq!(ClockKind::from_id(1), Ok(ClockKind::Monotonic));
        assert_eq!(ClockKind::from_id(7), Ok(ClockKind::Monotonic));
        assert_eq!(ClockKind::from_id(2), Ok(ClockKind::CpuTime));
        // MAKE_PROCESS_CPUCLOCK(pid 5, CPUCLOCK_SCHED) = ((~5) << 3) | 2
        assert_eq!(ClockKind::from_id((!5i64 << 3) | 2), Ok(ClockKind::CpuTime));
        assert_eq!(ClockKind::from_id((!3i64 << 3) | 3), Err(DetError::UnknownClock((!3i64 << 3) | 3)));
        assert_eq!(ClockKind::from_id(10), Err(DetError::UnknownClock(10)));
        assert_eq!(ClockKind::from_id(42), Err(DetError::UnknownClock(42)));
    }

    proptest! {
        #[test]
        fn clocks_never_go_backwards(step in 0u64..10_000, ops in proptest::collection::vec((0u8..3, 0i64..1_000_000_000), 1..200)) {
            let mut c = LogicalClock::new(1_000_000, step);
            let mut last = [Timespec { sec: i64::MIN, nsec: 0 }; 3];
            for (op, n) in ops {
                match op {
                    0 => { c.sleep_for(Timespec { sec: 0, nsec: n }).unwrap(); }
                    1 => { c.sleep_until(ClockKind::Monotonic, Timespec { sec: 10_000 + n / 1000, nsec: 0 }).unwrap(); }
                    _ => {}
                }
                for (i, k) in [ClockKind::Realtime, ClockKind::Monotonic, ClockKind::CpuTime].into_iter().enumerate() {
                    if let ClockRead::Value(t) = c.read(k) {
                        prop_assert!(t >= last[i]);
                        last[i] = t;
                    }
                }
            }
        }

        #[test]
        fn timespec_round_trips(ns in -1_000_000_000_000_000i128..1_000_000_000_000_000i128) {
            let t = Timespec::from_ns(ns);
            prop_assert!(t.nsec >= 0 && t.nsec < NSEC_PER_SEC);
            prop_assert_eq!(t.to_ns().unwrap(), ns);
        }
    }
}
