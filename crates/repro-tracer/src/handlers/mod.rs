//! The handlers of the mediated syscalls, by family. Each reads the call's arguments from the guest through
//! the [`Guest`] trait, asks the [`DeterminismController`](repro_detcore::DeterminismController) what the guest
//! should see, and writes the answer into guest memory; none of them decides an answer itself.
//!
//! To mediate a new syscall: add it to `decode.rs` (a [`Syscall`] variant and, if always notified, to
//! `MEDIATED`), answer it in the family's file here (the policy as a controller method in repro-detcore), and
//! unit-test it over `FakeGuest`.

pub(crate) mod entropy;
pub(crate) mod files;
pub(crate) mod identity;
pub(crate) mod net;
pub(crate) mod ports;
pub(crate) mod proc_tape;
pub(crate) mod process;
pub(crate) mod procfs;
pub(crate) mod statfs;
pub(crate) mod time;
pub(crate) mod timers;
pub(crate) mod unix;
pub(crate) mod waits;

use crate::decode::{self, Control, NetCall, Syscall};
use crate::guest::Guest;
use crate::reply::{Outcome, Refusal, Reply};
use crate::state::Shared;

/// Answers one decoded notification of syscall `nr`.
pub(crate) fn dispatch<G: Guest>(sh: &mut Shared, g: &mut G, nr: i64, call: Syscall) -> Reply {
    if let Some(log) = sh.access.as_mut() {
        if log.note(g, call) {
            sh.stats.continued += 1;
            return Reply::Continue;
        }
    }
    if sh.tape.is_some() {
        if let Some(r) = net::handle(sh, g, call) {
            return r;
        }
    }
    use Syscall as S;
    if let S::Nanosleep { .. } | S::ClockNanosleep { .. } = call {
        if let Some(parked) = waits::park_sleep(sh, g, nr, call) {
            return parked;
        }
    }
    let r = match call {
        S::ClockGettime { .. }
        | S::ClockGetres { .. }
        | S::Gettimeofday { .. }
        | S::Time { .. }
        | S::Nanosleep { .. }
        | S::ClockNanosleep { .. }
        | S::Times { .. }
        | S::Getrusage { .. } => return time::handle(sh, g, nr, call),
        S::TimerfdCreate { .. }
        | S::TimerfdSettime { .. }
        | S::TimerfdGettime { .. }
        | S::Alarm { .. }
        | S::Setitimer { .. }
        | S::Getitimer { .. }
        | S::TimerCreate { .. }
        | S::TimerSettime { .. }
        | S::TimerGettime { .. }
        | S::TimerGetoverrun { .. }
        | S::TimerDelete { .. } => return timers::handle(sh, g, nr, call),
        S::Getrandom { buf, len, .. } => entropy::getrandom(sh, g, buf, len),
        S::Getcpu { cpu, node, cache } if process::is_vdso_fd_request(sh, g.tid(), cpu, node, cache) => {
            return process::vdso_fd(sh);
        }
        S::Uname { .. } | S::Sysinfo { .. } | S::SchedGetaffinity { .. } | S::Getcpu { .. } => {
            identity::handle(sh, g, call)
        }
        S::Getdents64 { fd, dirp, count } => files::getdents64(sh, g, fd, dirp, count),
        S::Open { path, flags, .. } => return files::open(sh, g, nr, path, flags),
        S::Stat { dirfd, path, flags, out } => files::stat(sh, g, dirfd, path, flags, out),
        S::Wait(w) => return waits::handle(sh, g, nr, w),
        S::IoUringSetup => return process::io_uring_setup(sh),
        // What still varies: kernel-chosen ports, file system figures.
        S::Net(NetCall::Control { fd, op: Control::Bind { addr, len } }) => ports::bind(sh, g, fd, addr, len),
        // A pathname socket on a read-only mount was refused before (unix::guard, in the notify loop).
        S::Net(NetCall::Connect { fd, addr, .. }) => ports::implicit(sh, g, fd, addr),
        S::Net(NetCall::Control { fd, op: Control::Listen }) => ports::implicit(sh, g, fd, 0),
        S::Statfs { path, fd, buf } => statfs::statfs(sh, g, path, fd, buf),
        S::PathUse { .. } | S::Net(_) | S::Other => return Reply::Continue,
    };
    answered(sh, nr, r)
}

/// The reply to an answered call; answers (values and errors) are counted by syscall name.
pub(crate) fn answered(sh: &mut Shared, nr: i64, r: Outcome) -> Reply {
    match r {
        Ok(v) => {
            sh.count(decode::name(nr));
            Reply::Value(v)
        }
        Err(Refusal::Native) => Reply::Continue,
        Err(Refusal::Errno(e)) => {
            sh.count(decode::name(nr));
            Reply::Error(e)
        }
    }
}

/// A `struct timespec` as the guest's memory holds it.
pub(crate) fn timespec_bytes(t: repro_detcore::Timespec) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&t.sec.to_le_bytes());
    b[8..].copy_from_slice(&t.nsec.to_le_bytes());
    b
}

/// Reads a `struct timespec` (or the two words of a `struct timeval`) at `addr`.
pub(crate) fn read_timespec<G: Guest>(g: &mut G, addr: u64) -> Result<repro_detcore::Timespec, i32> {
    let mut b = [0u8; 16];
    g.read_into(addr, &mut b)?;
    let word =
        |o: usize| i64::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3], b[o + 4], b[o + 5], b[o + 6], b[o + 7]]);
    Ok(repro_detcore::Timespec { sec: word(0), nsec: word(8) })
}

#[cfg(test)]
pub(crate) mod testing {
    //! A run's state without a guest process, for the handlers' unit tests.

    use repro_detcore::{ControllerConfig, DeterminismController, DirOrder};

    use crate::state::Shared;

    pub(crate) const EPOCH: i64 = 1_700_000_000;

    pub(crate) fn shared(seed: u64, step_ns: u64) -> Shared {
        Shared::new(DeterminismController::new(&ControllerConfig {
            seed,
            epoch_unix_secs: EPOCH,
            clock_step_ns: step_ns,
            cpus: 2,
            machine: "x86_64".into(),
            run_start_real_ns: 0,
            nodename: "repro".into(),
            dir_order: DirOrder::Sorted,
        }))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::decode::{decode, MEDIATED};
    use crate::guest::fake::FakeGuest;

    proptest! {
        /// Whatever a (hostile) guest passes to a mediated syscall, the handlers answer without panicking; with
        /// nothing mapped, nothing is written and only errors, values or "run natively" come back.
        #[test]
        fn any_arguments_get_an_answer(i in 0..MEDIATED.len(), mut args in proptest::array::uniform6(any::<u64>())) {
            let mut sh = testing::shared(1, 1000);
            let mut g = FakeGuest::new(3);
            let nr = MEDIATED[i];
            if nr == libc::SYS_getrandom {
                args[1] %= 1 << 16; // the stream is generated before the write fails: keep the test quick
            }
            let r = dispatch(&mut sh, &mut g, nr, decode(nr, args));
            prop_assert!(matches!(r, Reply::Value(_) | Reply::Error(_) | Reply::Continue), "{:?}", r);
        }

        /// The timed waits the filter may send, with any arguments.
        #[test]
        fn any_wait_gets_an_answer(nr in prop_oneof![
            Just(libc::SYS_poll), Just(libc::SYS_ppoll), Just(libc::SYS_select), Just(libc::SYS_pselect6),
            Just(libc::SYS_epoll_wait), Just(libc::SYS_epoll_pwait), Just(libc::SYS_epoll_pwait2), Just(libc::SYS_futex),
        ], args in proptest::array::uniform6(any::<u64>())) {
            let mut sh = testing::shared(1, 1000);
            let mut g = FakeGuest::new(3);
            let r = dispatch(&mut sh, &mut g, nr, decode(nr, args));
            prop_assert!(matches!(r, Reply::Continue | Reply::Error(_) | Reply::Value(0)), "{:?}", r);
        }
    }
}
