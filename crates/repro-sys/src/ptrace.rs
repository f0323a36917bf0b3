//! ptrace as a typestate: a [`Tracee<Running>`] can only be waited on; [`wait_any`] hands back a
//! [`Tracee<Stopped>`] whose registers can be read and written, and which must be resumed (consuming
//! it) to become running again. All requests must come from the thread that attached.

use std::io;
use std::marker::PhantomData;

use nix::sys::ptrace as nptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

pub use nix::sys::ptrace::Options;

/// Marker: the tracee is running.
#[derive(Debug)]
pub struct Running;
/// Marker: the tracee is in a ptrace stop.
#[derive(Debug)]
pub struct Stopped;

/// A traced task in state `S`.
#[derive(Debug)]
pub struct Tracee<S> {
    tid: i32,
    _state: PhantomData<S>,
}

fn nix_err(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// The registers of a stopped task.
pub type Regs = libc::user_regs_struct;

/// Attaches to `tid` with PTRACE_SEIZE (the task keeps running).
pub fn seize(tid: i32, options: Options) -> io::Result<Tracee<Running>> {
    nptrace::seize(Pid::from_raw(tid), options).map_err(nix_err)?;
    Ok(Tracee { tid, _state: PhantomData })
}

impl<S> Tracee<S> {
    /// The task's thread id.
    pub fn tid(&self) -> i32 {
        self.tid
    }
}

impl Tracee<Stopped> {
    /// General-purpose registers.
    pub fn regs(&self) -> io::Result<Regs> {
        nptrace::getregs(Pid::from_raw(self.tid)).map_err(nix_err)
    }

    /// Sets the general-purpose registers.
    pub fn set_regs(&self, regs: Regs) -> io::Result<()> {
        nptrace::setregs(Pid::from_raw(self.tid), regs).map_err(nix_err)
    }

    /// PTRACE_GETEVENTMSG (the new task's id at a clone/fork/vfork event).
    pub fn event_msg(&self) -> io::Result<u64> {
        nptrace::getevent(Pid::from_raw(self.tid)).map(|v| v as u64).map_err(nix_err)
    }

    /// Reads one word of the task's memory (works on read-only and execute-only pages).
    pub fn peek(&self, addr: u64) -> io::Result<u64> {
        nptrace::read(Pid::from_raw(self.tid), addr as nptrace::AddressType).map(|v| v as u64).map_err(nix_err)
    }

    /// Resumes the task, delivering `sig` if given.
    pub fn cont(self, sig: Option<i32>) -> io::Result<Tracee<Running>> {
        let sig = sig.map(Signal::try_from).transpose().map_err(nix_err)?;
        nptrace::cont(Pid::from_raw(self.tid), sig).map_err(nix_err)?;
        Ok(Tracee { tid: self.tid, _state: PhantomData })
    }

    /// Resumes a task in group-stop without ending the stop (PTRACE_LISTEN).
    pub fn listen(self) -> io::Result<Tracee<Running>> {
        // SAFETY-free: nix exposes no PTRACE_LISTEN wrapper, use the raw request.
        // SAFETY: PTRACE_LISTEN takes no pointer arguments.
        let r = unsafe { libc::ptrace(libc::PTRACE_LISTEN, self.tid, 0usize, 0usize) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Tracee { tid: self.tid, _state: PhantomData })
    }
}

/// Why a syscall could not be injected into a tracee.
#[derive(Debug)]
pub enum InjectError {
    /// The task exited or was killed meanwhile; the event must be handled by the caller's wait loop.
    Gone(Event),
    /// A ptrace or wait request failed.
    Sys(io::Error),
}

impl From<io::Error> for InjectError {
    fn from(e: io::Error) -> Self {
        InjectError::Sys(e)
    }
}

/// Waits for the next stop (or end) of one task.
fn wait_tid(tid: i32) -> io::Result<WaitStatus> {
    loop {
        match waitpid(Pid::from_raw(tid), Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::StillAlive) | Ok(WaitStatus::Continued(_)) | Err(nix::Error::EINTR) => continue,
            Ok(s) => return Ok(s),
            Err(e) => return Err(nix_err(e)),
        }
    }
}

fn gone(st: &WaitStatus) -> Option<Event> {
    match *st {
        WaitStatus::Exited(pid, code) => Some(Event::Exited { tid: pid.as_raw(), code }),
        WaitStatus::Signaled(pid, sig, _) => Some(Event::Killed { tid: pid.as_raw(), sig: sig as i32 }),
        _ => None,
    }
}

impl Tracee<Stopped> {
    /// From a PTRACE_EVENT_EXEC stop, runs the task to the syscall-exit stop of its execve (the new
    /// image has not run an instruction yet). There the registers can be changed freely: the kernel
    /// has already stored execve's return value. Signals that arrive meanwhile are appended to
    /// `deferred` (the caller re-sends them).
    pub fn exec_to_syscall_exit(&self, deferred: &mut Vec<i32>) -> Result<(), InjectError> {
        nptrace::syscall(Pid::from_raw(self.tid), None).map_err(nix_err)?;
        loop {
            let st = wait_tid(self.tid)?;
            if let Some(ev) = gone(&st) {
                return Err(InjectError::Gone(ev));
            }
            match st {
                WaitStatus::Stopped(_, Signal::SIGTRAP) | WaitStatus::PtraceSyscall(_) => return Ok(()),
                WaitStatus::Stopped(_, sig) => {
                    deferred.push(sig as i32);
                    nptrace::syscall(Pid::from_raw(self.tid), None).map_err(nix_err)?;
                }
                _ => nptrace::syscall(Pid::from_raw(self.tid), None).map_err(nix_err)?,
            }
        }
    }

    /// Makes the stopped task execute one system call (x86_64): `regs` with `rip` at `gadget` (the
    /// address of a `syscall` instruction, 0f 05, in an executable mapping of the task), `rax` = `nr`
    /// and the arguments, then single-steps over the instruction. Returns the raw result (-errno on
    /// failure). The caller restores the task's registers afterwards. The task must be at a stop where
    /// its registers are not about to be overwritten by the kernel (e.g. a syscall-exit stop, or a
    /// previous injection's stop). Signals that arrive meanwhile are appended to `deferred`.
    #[cfg(target_arch = "x86_64")]
    pub fn inject_syscall(
        &self,
        base: &Regs,
        gadget: u64,
        nr: i64,
        args: [u64; 6],
        deferred: &mut Vec<i32>,
    ) -> Result<i64, InjectError> {
        let mut r = *base;
        r.rip = gadget;
        r.rax = nr as u64;
        r.orig_rax = u64::MAX;
        r.rdi = args[0];
        r.rsi = args[1];
        r.rdx = args[2];
        r.r10 = args[3];
        r.r8 = args[4];
        r.r9 = args[5];
        self.set_regs(r)?;
        loop {
            nptrace::step(Pid::from_raw(self.tid), None).map_err(nix_err)?;
            let st = wait_tid(self.tid)?;
            if let Some(ev) = gone(&st) {
                return Err(InjectError::Gone(ev));
            }
            match st {
                WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                    let after = self.regs()?;
                    if after.rip == gadget + 2 {
                        return Ok(after.rax as i64);
                    }
                    // A SIGTRAP sent to the task before the instruction ran.
                    deferred.push(libc::SIGTRAP);
                }
                WaitStatus::Stopped(_, sig) => deferred.push(sig as i32),
                _ => {}
            }
        }
    }
}

/// What [`wait_any`] observed.
#[derive(Debug)]
pub enum Event {
    /// A PTRACE_EVENT_* stop (`event` is the PTRACE_EVENT_ number; STOP for group stops and new tasks).
    PtraceEvent { tracee: Tracee<Stopped>, event: i32, sig: i32 },
    /// A signal-delivery stop.
    Signal { tracee: Tracee<Stopped>, sig: i32 },
    /// The task exited with `code`.
    Exited { tid: i32, code: i32 },
    /// The task was killed by `sig`.
    Killed { tid: i32, sig: i32 },
}

/// Waits for any child or tracee (`__WALL`). Returns `ECHILD` when there is none left.
pub fn wait_any() -> io::Result<Event> {
    loop {
        let st = match waitpid(None, Some(WaitPidFlag::__WALL)) {
            Ok(s) => s,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(nix_err(e)),
        };
        let stopped = |pid: Pid| Tracee { tid: pid.as_raw(), _state: PhantomData };
        return Ok(match st {
            WaitStatus::Exited(pid, code) => Event::Exited { tid: pid.as_raw(), code },
            WaitStatus::Signaled(pid, sig, _) => Event::Killed { tid: pid.as_raw(), sig: sig as i32 },
            WaitStatus::Stopped(pid, sig) => Event::Signal { tracee: stopped(pid), sig: sig as i32 },
            WaitStatus::PtraceEvent(pid, sig, event) => {
                Event::PtraceEvent { tracee: stopped(pid), event, sig: sig as i32 }
            }
            WaitStatus::PtraceSyscall(pid) => Event::Signal { tracee: stopped(pid), sig: 0 },
            WaitStatus::Continued(_) | WaitStatus::StillAlive => continue,
        });
    }
}

/// Whether a tracee or child of this process (any of its threads) has a stop or an exit that no wait has
/// collected yet. Looks without collecting it (`waitid` with `WNOWAIT | WNOHANG`): the tracer's own wait still gets
/// it.
pub fn event_pending() -> bool {
    let flags = WaitPidFlag::WEXITED
        | WaitPidFlag::WSTOPPED
        | WaitPidFlag::WNOHANG
        | WaitPidFlag::WNOWAIT
        | WaitPidFlag::__WALL;
    matches!(nix::sys::wait::waitid(nix::sys::wait::Id::All, flags), Ok(st) if st != WaitStatus::StillAlive)
}

/// Sends `sig` to one thread (tgkill with tgid = tid's own group is not needed: tkill semantics).
pub fn kill_task(tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_tkill, tid, sig) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Queues `sig` as a POSIX timer's expiry (si_code SI_TIMER, timer id, overrun count, si_value) to process
/// `pid` (rt_sigqueueinfo), or to its thread `tid` (rt_tgsigqueueinfo).
pub fn queue_timer_signal(
    pid: i32,
    tid: Option<i32>,
    sig: i32,
    timer_id: i32,
    overrun: i32,
    value: u64,
) -> io::Result<()> {
    // siginfo_t (128 bytes, x86_64): si_signo, si_errno, si_code, padding, then the timer fields.
    const SI_TIMER: i32 = -2;
    let mut info = [0u64; 16];
    info[0] = sig as u32 as u64;
    info[1] = SI_TIMER as u32 as u64;
    info[2] = (timer_id as u32 as u64) | ((overrun as u32 as u64) << 32);
    info[3] = value;
    // SAFETY: `info` is a live, aligned 128-byte siginfo_t the kernel only reads; the ids are plain integers.
    let r = unsafe {
        match tid {
            Some(t) => libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, t, sig, info.as_ptr()),
            None => libc::syscall(libc::SYS_rt_sigqueueinfo, pid, sig, info.as_ptr()),
        }
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `sig` to a process (kill(2)).
pub fn kill_process(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    if unsafe { libc::kill(pid, sig) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
