//! Time: clock reads, sleeps, times/getrusage (the timers are in timers.rs).

use repro_detcore::{ClockAnswer, ClockKind, Timespec};

use super::{answered, read_timespec, timespec_bytes};
use crate::decode::Syscall;
use crate::guest::Guest;
use crate::reply::{Outcome, Refusal, Reply};
use crate::state::Shared;

pub(crate) fn handle<G: Guest>(sh: &mut Shared, g: &mut G, nr: i64, call: Syscall) -> Reply {
    let r = match call {
        Syscall::ClockGettime { clock, tp } => {
            let a = sh.ctl.clock_gettime_answer(clock);
            clock_answer(sh, a).and_then(|t| Ok(g.write_bytes(tp, &timespec_bytes(t)).map(|_| 0)?))
        }
        Syscall::ClockGetres { clock, res } => {
            let a = sh.ctl.clock_getres(clock);
            clock_answer(sh, a).and_then(|t| {
                if res != 0 {
                    Ok(g.write_bytes(res, &timespec_bytes(t)).map(|_| 0)?)
                } else {
                    Ok(0)
                }
            })
        }
        Syscall::Gettimeofday { tv, tz } => gettimeofday(sh, g, tv, tz),
        Syscall::Time { tloc } => {
            let a = sh.ctl.read_clock(ClockKind::Realtime);
            clock_answer(sh, a).and_then(|t| {
                if tloc != 0 {
                    g.write_bytes(tloc, &t.sec.to_le_bytes())?;
                }
                Ok(t.sec)
            })
        }
        // With a timer armed, a sleep may end at its expiry (handlers/timers.rs); without, the clock jumps.
        Syscall::Nanosleep { req, rem } if sh.ctl.timers.any_armed() => {
            return match sleep_deadline(sh, g, None, 0, req) {
                Ok(d) => super::timers::sleep(sh, g, d, rem),
                Err(e) => answered(sh, nr, Err(e)),
            };
        }
        Syscall::ClockNanosleep { clock, flags, req, rem } if sh.ctl.timers.any_armed() => {
            let rem = if flags & libc::TIMER_ABSTIME != 0 { 0 } else { rem };
            return match sleep_deadline(sh, g, Some(clock), flags, req) {
                Ok(d) => super::timers::sleep(sh, g, d, rem),
                Err(e) => answered(sh, nr, Err(e)),
            };
        }
        Syscall::Nanosleep { req, .. } => read_timespec(g, req)
            .and_then(|t| sh.ctl.sleep_for(t).map(|_| 0).map_err(|e| e.errno()))
            .map_err(Refusal::from),
        // clock_nanosleep returns the error number itself, not -1/errno (the C library's wrapper turns it around).
        Syscall::ClockNanosleep { clock, flags, req, .. } => read_timespec(g, req)
            .and_then(|t| sh.ctl.clock_nanosleep(clock, flags, t).map(|_| 0).map_err(|e| e.errno()))
            .map_err(Refusal::from),
        Syscall::Times { buf } => {
            let ticks = sh.ctl.times();
            if buf != 0 {
                g.write_bytes(buf, &[0u8; 32]).map(|_| ticks).map_err(Refusal::from)
            } else {
                Ok(ticks)
            }
        }
        Syscall::Getrusage { usage } => {
            let r = sh.ctl.rusage();
            g.write_bytes(usage, &r).map(|_| 0).map_err(Refusal::from)
        }
        _ => Err(Refusal::Native),
    };
    answered(sh, nr, r)
}

/// The time a clock answer gives, or what the guest gets instead.
fn clock_answer(sh: &mut Shared, a: ClockAnswer) -> Result<Timespec, Refusal> {
    match a {
        ClockAnswer::Time(t) => Ok(t),
        ClockAnswer::Invalid => Err(Refusal::Errno(libc::EINVAL)),
        ClockAnswer::Native(why) => {
            if let Some(why) = why {
                sh.not_enforced.insert(why);
            }
            Err(Refusal::Native)
        }
        ClockAnswer::Stop(why) => {
            sh.stop_guest(why);
            Err(Refusal::Errno(libc::EINTR))
        }
    }
}

fn gettimeofday<G: Guest>(sh: &mut Shared, g: &mut G, tv: u64, tz: u64) -> Outcome {
    if tv != 0 {
        let a = sh.ctl.read_clock(ClockKind::Realtime);
        let t = clock_answer(sh, a)?;
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&t.sec.to_le_bytes());
        b[8..].copy_from_slice(&(t.nsec / 1000).to_le_bytes());
        g.write_bytes(tv, &b)?;
    }
    if tz != 0 {
        g.write_bytes(tz, &[0u8; 8])?;
    }
    Ok(0)
}

/// Where a sleep of `req` ends on the clock's elapsed-time line: relative (nanosleep, or clock_nanosleep
/// without TIMER_ABSTIME on `clock`), or absolute on `clock`; EINVAL for a bad timespec or clock.
fn sleep_deadline<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    clock: Option<i64>,
    flags: i32,
    req: u64,
) -> Result<i128, Refusal> {
    let t = read_timespec(g, req)?;
    let kind = match clock {
        Some(c) => Some(ClockKind::from_id(c).map_err(|e| e.errno())?),
        None => None,
    };
    let c = &sh.ctl.clock;
    match kind {
        Some(k) if flags & libc::TIMER_ABSTIME != 0 => {
            Ok(repro_detcore::timers::elapsed_at(c, k, t).map_err(|e| e.errno())?)
        }
        _ => match t.to_ns() {
            Ok(ns) if t.sec >= 0 => Ok(c.elapsed_ns() + ns),
            _ => Err(Refusal::Errno(libc::EINVAL)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::{shared, EPOCH};

    fn call(sh: &mut Shared, g: &mut FakeGuest, nr: i64, a: [u64; 6]) -> Reply {
        dispatch(sh, g, nr, crate::decode::decode(nr, a))
    }

    #[test]
    fn clock_gettime_writes_the_controllers_time() {
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(10);
        g.map(0x1000, 16);
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_clock_gettime, [0, 0x1000, 0, 0, 0, 0]), Reply::Value(0)));
        assert_eq!(g.get(0x1000, 16), timespec_bytes(Timespec { sec: EPOCH, nsec: 0 }));
        // The clock stepped by 1 µs on that read; MONOTONIC starts at 10,000 s.
        call(&mut sh, &mut g, libc::SYS_clock_gettime, [1, 0x1000, 0, 0, 0, 0]);
        assert_eq!(g.get(0x1000, 16), timespec_bytes(Timespec { sec: 10_000, nsec: 1000 }));
        assert_eq!(sh.stats.mediated["clock_gettime"], 2);
        assert!(matches!(
            call(&mut sh, &mut g, libc::SYS_clock_gettime, [0, 0x9000, 0, 0, 0, 0]),
            Reply::Error(libc::EFAULT)
        ));
        assert!(matches!(
            call(&mut sh, &mut g, libc::SYS_clock_gettime, [10, 0x1000, 0, 0, 0, 0]),
            Reply::Error(libc::EINVAL)
        ));
        // A dynamic clock (CLOCKFD) runs natively and the run says so.
        let fd_clock = ((!3i64) << 3 | 3) as u32 as u64;
        assert!(matches!(
            call(&mut sh, &mut g, libc::SYS_clock_gettime, [fd_clock, 0x1000, 0, 0, 0, 0]),
            Reply::Continue
        ));
        assert!(sh.not_enforced.iter().any(|r| r.contains("dynamic")));
    }

    #[test]
    fn gettimeofday_time_and_getres() {
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(10);
        g.map(0x1000, 16).map(0x2000, 8).map(0x3000, 16);
        call(&mut sh, &mut g, libc::SYS_gettimeofday, [0x1000, 0x2000, 0, 0, 0, 0]);
        assert_eq!(g.get(0x1000, 8), EPOCH.to_le_bytes());
        assert!(
            matches!(call(&mut sh, &mut g, libc::SYS_time, [0x2000, 0, 0, 0, 0, 0]), Reply::Value(v) if v == EPOCH)
        );
        assert_eq!(g.get(0x2000, 8), EPOCH.to_le_bytes());
        call(&mut sh, &mut g, libc::SYS_clock_getres, [libc::CLOCK_REALTIME_COARSE as u64, 0x3000, 0, 0, 0, 0]);
        assert_eq!(g.get(0x3000, 16), timespec_bytes(Timespec { sec: 0, nsec: 4_000_000 }));
    }

    #[test]
    fn sleeps_jump_the_clock_without_waiting() {
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(10);
        g.put(0x1000, &timespec_bytes(Timespec { sec: 30, nsec: 0 }));
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_nanosleep, [0x1000, 0, 0, 0, 0, 0]), Reply::Value(0)));
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime).sec, EPOCH + 30);
        g.put(0x2000, &timespec_bytes(Timespec { sec: 0, nsec: 2_000_000_000 }));
        assert!(matches!(
            call(&mut sh, &mut g, libc::SYS_nanosleep, [0x2000, 0, 0, 0, 0, 0]),
            Reply::Error(libc::EINVAL)
        ));
        let abs = libc::TIMER_ABSTIME as u64;
        g.put(0x3000, &timespec_bytes(Timespec { sec: EPOCH + 100, nsec: 0 }));
        call(&mut sh, &mut g, libc::SYS_clock_nanosleep, [0, abs, 0x3000, 0, 0, 0]);
        assert_eq!(sh.ctl.clock.peek(ClockKind::Realtime).sec, EPOCH + 100);
    }

    #[test]
    fn a_frozen_clock_polled_forever_stops_the_guest() {
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(10);
        g.map(0x1000, 16);
        let mut last = None;
        for _ in 0..repro_detcore::clock::STALL_READS {
            last = Some(call(&mut sh, &mut g, libc::SYS_clock_gettime, [1, 0x1000, 0, 0, 0, 0]));
        }
        assert!(matches!(last, Some(Reply::Error(libc::EINTR))));
        assert!(sh.not_enforced.iter().any(|r| r.contains("frozen")));
    }

    #[test]
    fn times_getrusage_and_host_timers() {
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(10);
        g.put(0x1000, &[0xff; 32]).put(0x2000, &[0xff; 144]);
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_times, [0x1000, 0, 0, 0, 0, 0]), Reply::Value(1_000_000)));
        assert_eq!(g.get(0x1000, 32), [0; 32]);
        call(&mut sh, &mut g, libc::SYS_getrusage, [0, 0x2000, 0, 0, 0, 0]);
        assert_eq!(g.get(0x2000, 144), [0; 144]);
        // alarm and ITIMER_REAL run in logical time (handlers/timers.rs); ITIMER_PROF with a zero it_value
        // disarms, a non-zero one arms a host timer.
        assert!(matches!(call(&mut sh, &mut g, libc::SYS_alarm, [3, 0, 0, 0, 0, 0]), Reply::Value(0)));
        assert!(sh.not_enforced.is_empty(), "alarm is mediated");
        g.map(0x3000, 32);
        call(&mut sh, &mut g, libc::SYS_setitimer, [2, 0x3000, 0, 0, 0, 0]);
        assert!(sh.not_enforced.is_empty());
        g.write_bytes(0x3010, &5i64.to_le_bytes()).unwrap();
        call(&mut sh, &mut g, libc::SYS_setitimer, [2, 0x3000, 0, 0, 0, 0]);
        assert!(sh.not_enforced.iter().any(|r| r.contains("setitimer")));
    }
}
