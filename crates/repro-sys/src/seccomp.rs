//! seccomp-bpf: building a filter that sends a chosen set of syscalls to a user-space supervisor
//! (SECCOMP_RET_USER_NOTIF) and lets everything else run natively, and the user-notification ioctls.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `AUDIT_ARCH_X86_64` / `AUDIT_ARCH_AARCH64`: the only architecture the filter lets through unmediated.
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH_NATIVE: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH_NATIVE: u32 = 0xc000_00b7;

/// The x32 syscall bit: x32 syscalls are refused (ENOSYS) so they cannot bypass the filter.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// A classic-BPF seccomp program.
#[derive(Clone)]
pub struct BpfFilter {
    insns: Vec<libc::sock_filter>,
}

impl std::fmt::Debug for BpfFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BpfFilter({} instructions)", self.insns.len())
    }
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt: 0, jf: 0, k }
}
fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// A condition on a syscall's arguments under which it is sent to the supervisor (otherwise it runs
/// natively): keeps hot syscalls whose common forms need no mediation off the notification path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgCheck {
    /// The 32-bit signed argument `arg` is greater than 0 (a poll/epoll_wait timeout in ms).
    PositiveInt { arg: usize },
    /// The 32-bit signed argument `arg` is 0 or more (a poll/epoll_wait timeout in ms that does not wait forever:
    /// a zero timeout is a scheduling point for the deterministic scheduler).
    NonNegativeInt { arg: usize },
    /// The pointer argument `arg` is not NULL (a timeout pointer: NULL waits forever).
    NonNull { arg: usize },
    /// futex: the command (`op & 0x7f`) is FUTEX_WAIT or FUTEX_WAIT_BITSET and the timeout pointer
    /// (argument 3) is not NULL.
    FutexTimedWait,
}

/// Byte offset of the low 32 bits of argument `i` in `struct seccomp_data`.
fn arg_lo(i: usize) -> u32 {
    16 + 8 * i as u32
}

const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;

/// What the filter answers for a syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Runs natively.
    Allow,
    /// Sent to the supervisor (SECCOMP_RET_USER_NOTIF).
    Notify,
    /// Fails with this errno without running (SECCOMP_RET_ERRNO).
    Errno(u16),
}

impl Action {
    fn ret(self) -> u32 {
        match self {
            Action::Allow => libc::SECCOMP_RET_ALLOW,
            Action::Notify => libc::SECCOMP_RET_USER_NOTIF,
            Action::Errno(e) => libc::SECCOMP_RET_ERRNO | u32::from(e),
        }
    }
}

/// The rule for one syscall number. Argument conditions look at the low 32 bits of an argument only,
/// which is all the kernel reads of the `int`/`unsigned int` arguments they are used on (and where the
/// namespace bits of clone's flags are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Always(Action),
    /// Notify when the check passes, run natively otherwise.
    NotifyIf(ArgCheck),
    /// `then` when argument `arg` has any bit of `mask` set, `otherwise` when it has none.
    IfAnyBits {
        arg: usize,
        mask: u32,
        then: Action,
        otherwise: Action,
    },
    /// `then` when argument `arg` equals one of `values`, `otherwise` when it equals none.
    IfOneOf {
        arg: usize,
        values: Vec<u32>,
        then: Action,
        otherwise: Action,
    },
}

impl Rule {
    /// The rule with every `Allow` outcome turned into `Notify` (a syscall the supervisor mediates that is
    /// also constrained by the guest's policy: the policy's refusals stand, the rest is notified).
    fn notified(self) -> Rule {
        let n = |a: Action| if a == Action::Allow { Action::Notify } else { a };
        match self {
            Rule::Always(a) => Rule::Always(n(a)),
            Rule::NotifyIf(_) => Rule::Always(Action::Notify),
            Rule::IfAnyBits { arg, mask, then, otherwise } => {
                Rule::IfAnyBits { arg, mask, then: n(then), otherwise: n(otherwise) }
            }
            Rule::IfOneOf { arg, values, then, otherwise } => {
                Rule::IfOneOf { arg, values, then: n(then), otherwise: n(otherwise) }
            }
        }
    }

    /// Instructions that decide this rule; every path ends in a return.
    fn code(&self) -> Result<Vec<libc::sock_filter>, io::Error> {
        let ret_allow = stmt(RET_K, libc::SECCOMP_RET_ALLOW);
        let ret_notif = stmt(RET_K, libc::SECCOMP_RET_USER_NOTIF);
        Ok(match self {
            Rule::Always(a) => vec![stmt(RET_K, a.ret())],
            Rule::NotifyIf(ArgCheck::PositiveInt { arg }) => vec![
                stmt(LD_W_ABS, arg_lo(*arg)),
                jump(JEQ_K, 0, 1, 0),
                jump(JSET_K, 0x8000_0000, 0, 1),
                ret_allow,
                ret_notif,
            ],
            Rule::NotifyIf(ArgCheck::NonNegativeInt { arg }) => {
                vec![stmt(LD_W_ABS, arg_lo(*arg)), jump(JSET_K, 0x8000_0000, 0, 1), ret_allow, ret_notif]
            }
            Rule::NotifyIf(ArgCheck::NonNull { arg }) => vec![
                stmt(LD_W_ABS, arg_lo(*arg)),
                jump(JEQ_K, 0, 0, 3),
                stmt(LD_W_ABS, arg_lo(*arg) + 4),
                jump(JEQ_K, 0, 0, 1),
                ret_allow,
                ret_notif,
            ],
            Rule::NotifyIf(ArgCheck::FutexTimedWait) => vec![
                stmt(LD_W_ABS, arg_lo(1)),
                stmt(ALU_AND_K, 0x7f),
                jump(JEQ_K, 0, 1, 0),
                jump(JEQ_K, 9, 0, 4),
                stmt(LD_W_ABS, arg_lo(3)),
                jump(JEQ_K, 0, 0, 3),
                stmt(LD_W_ABS, arg_lo(3) + 4),
                jump(JEQ_K, 0, 0, 1),
                ret_allow,
                ret_notif,
            ],
            Rule::IfAnyBits { arg, mask, then, otherwise } => vec![
                stmt(LD_W_ABS, arg_lo(*arg)),
                jump(JSET_K, *mask, 0, 1),
                stmt(RET_K, then.ret()),
                stmt(RET_K, otherwise.ret()),
            ],
            Rule::IfOneOf { arg, values, then, otherwise } => {
                let n = values.len();
                let mut v = vec![stmt(LD_W_ABS, arg_lo(*arg))];
                for (i, &val) in values.iter().enumerate() {
                    // On a match, over the remaining comparisons and the `otherwise` return.
                    v.push(jump(JEQ_K, val, u8::try_from(n - i).map_err(|_| too_far())?, 0));
                }
                v.push(stmt(RET_K, otherwise.ret()));
                v.push(stmt(RET_K, then.ret()));
                v
            }
        })
    }
}

/// A seccomp policy: a rule per syscall number; numbers without a rule run natively.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    by_nr: std::collections::BTreeMap<u32, Rule>,
}

impl Rules {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the rule of `nr` (replacing an earlier one).
    pub fn set(&mut self, nr: u32, rule: Rule) {
        self.by_nr.insert(nr, rule);
    }

    pub fn get(&self, nr: u32) -> Option<&Rule> {
        self.by_nr.get(&nr)
    }

    pub fn len(&self) -> usize {
        self.by_nr.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_nr.is_empty()
    }

    /// Adds the supervisor's syscalls: those in `notify` always, those in `when` when their arguments pass
    /// the check. A refusal already in the policy stands (the guest's policy is decided before the
    /// supervisor is asked); a syscall in both lists is notified unconditionally. Fails when a syscall
    /// would need two different argument conditions.
    pub fn add_notify(&mut self, notify: &[u32], when: &[(u32, ArgCheck)]) -> Result<(), io::Error> {
        for &nr in notify {
            let rule = self.by_nr.remove(&nr).map_or(Rule::Always(Action::Notify), Rule::notified);
            self.by_nr.insert(nr, rule);
        }
        for &(nr, check) in when {
            match self.by_nr.get(&nr) {
                None | Some(Rule::Always(Action::Allow)) => {
                    self.by_nr.insert(nr, Rule::NotifyIf(check));
                }
                Some(Rule::Always(_)) => {}
                Some(Rule::NotifyIf(c)) if *c == check => {}
                Some(other) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("syscall {nr}: a notify condition on top of {other:?}"),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Most syscall numbers a leaf of the search tree compares one after the other.
const LEAF: usize = 4;

/// The decision tree over `entries` (sorted by number): a binary search on the syscall number (in the
/// accumulator) down to leaves of at most [`LEAF`] comparisons, each followed by its rules' code; a number
/// that no entry has is allowed. Every path ends in a return, so trees can be concatenated.
fn tree(entries: &[(u32, &Rule)]) -> Result<Vec<libc::sock_filter>, io::Error> {
    if entries.len() <= LEAF {
        let codes = entries.iter().map(|(_, r)| r.code()).collect::<Result<Vec<_>, _>>()?;
        let m = entries.len();
        let mut v = Vec::new();
        let mut before = 0;
        for (i, (nr, _)) in entries.iter().enumerate() {
            // Over the remaining comparisons, the ALLOW, and the code of the entries before this one.
            let offset = (m - i - 1) + 1 + before;
            v.push(jump(JEQ_K, *nr, u8::try_from(offset).map_err(|_| too_far())?, 0));
            before += codes[i].len();
        }
        v.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
        for c in codes {
            v.extend(c);
        }
        return Ok(v);
    }
    let mid = entries.len() / 2;
    let left = tree(&entries[..mid])?;
    let right = tree(&entries[mid..])?;
    let pivot = entries[mid].0;
    let mut v = Vec::with_capacity(left.len() + right.len() + 2);
    match u8::try_from(left.len()) {
        Ok(skip) => v.push(jump(JGE_K, pivot, skip, 0)),
        Err(_) => {
            // Too far for a conditional jump: through an unconditional one (32-bit offset).
            v.push(jump(JGE_K, pivot, 0, 1));
            v.push(stmt(JA, u32::try_from(left.len()).map_err(|_| too_far())?));
        }
    }
    v.extend(left);
    v.extend(right);
    Ok(v)
}

impl BpfFilter {
    /// A filter that returns USER_NOTIF for each syscall number in `notify`, ERRNO(ENOSYS) for other
    /// architectures and x32 syscalls, and ALLOW for everything else.
    pub fn notify(notify: &[u32]) -> Result<Self, io::Error> {
        Self::notify_when(notify, &[])
    }

    /// As [`BpfFilter::notify`], plus syscalls sent to the supervisor only when their arguments pass
    /// a check (`when`); a syscall listed in both is notified unconditionally.
    pub fn notify_when(notify: &[u32], when: &[(u32, ArgCheck)]) -> Result<Self, io::Error> {
        let mut rules = Rules::new();
        rules.add_notify(notify, when)?;
        Self::compile(&rules)
    }

    /// The program for `rules`: ERRNO(ENOSYS) for other architectures (32-bit x86 included) and x32
    /// syscalls, then a binary search on the syscall number to the rule, ALLOW where there is none.
    pub fn compile(rules: &Rules) -> Result<Self, io::Error> {
        if rules.len() > 1000 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many syscall rules"));
        }
        let mut v = vec![
            // arch check
            stmt(LD_W_ABS, 4),
            jump(JEQ_K, AUDIT_ARCH_NATIVE, 1, 0),
            stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
            // syscall number
            stmt(LD_W_ABS, 0),
            jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
            stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        ];
        let entries: Vec<(u32, &Rule)> =
            rules.by_nr.iter().filter(|(_, r)| **r != Rule::Always(Action::Allow)).map(|(n, r)| (*n, r)).collect();
        v.extend(tree(&entries)?);
        if v.len() > 4096 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "seccomp program over 4096 instructions"));
        }
        Ok(BpfFilter { insns: v })
    }

    /// Number of instructions.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Whether the program is empty.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// Runs the program on a syscall (number, arch) the way the kernel would; for tests and diagnostics.
    pub fn evaluate(&self, nr: u32, arch: u32) -> u32 {
        self.evaluate_args(nr, arch, [0; 6])
    }

    /// As [`BpfFilter::evaluate`], with the syscall's arguments.
    pub fn evaluate_args(&self, nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut acc = 0u32;
        let mut pc = 0usize;
        while pc < self.insns.len() {
            let i = self.insns[pc];
            match i.code {
                LD_W_ABS => {
                    acc = match i.k {
                        0 => nr,
                        4 => arch,
                        k if (16..64).contains(&k) => {
                            let a = args[(k as usize - 16) / 8];
                            if k % 8 == 0 {
                                a as u32
                            } else {
                                (a >> 32) as u32
                            }
                        }
                        _ => return libc::SECCOMP_RET_KILL_PROCESS,
                    }
                }
                ALU_AND_K => acc &= i.k,
                JEQ_K => {
                    pc += if acc == i.k { i.jt as usize } else { i.jf as usize };
                }
                JSET_K => {
                    pc += if acc & i.k != 0 { i.jt as usize } else { i.jf as usize };
                }
                JGE_K => {
                    pc += if acc >= i.k { i.jt as usize } else { i.jf as usize };
                }
                JA => pc += i.k as usize,
                RET_K => return i.k,
                _ => return libc::SECCOMP_RET_KILL_PROCESS,
            }
            pc += 1;
        }
        libc::SECCOMP_RET_KILL_PROCESS
    }

    /// Installs the filter on the calling thread (after PR_SET_NO_NEW_PRIVS), without a listener: for a
    /// policy with no `Notify` outcome. Async-signal-safe: no allocation, usable between fork and exec.
    pub fn install(&self) -> io::Result<()> {
        let prog = libc::sock_fprog { len: self.insns.len() as u16, filter: self.insns.as_ptr() as *mut _ };
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `prog` points at `self.insns`, alive for the duration of the call; the kernel copies it.
        let r = unsafe {
            libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &prog as *const libc::sock_fprog)
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Installs the filter on the calling thread (after PR_SET_NO_NEW_PRIVS) and returns the listener.
    /// Async-signal-safe: no allocation, usable between fork and exec.
    pub fn install_with_listener(&self) -> io::Result<OwnedFd> {
        let prog = libc::sock_fprog { len: self.insns.len() as u16, filter: self.insns.as_ptr() as *mut _ };
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // WAIT_KILLABLE_RECV (Linux 5.19+): once the supervisor has received a notification, only a
        // fatal signal interrupts the guest's syscall, so an answer the supervisor computed (which may
        // have consumed entropy or moved the clock) is never thrown away and asked again.
        const WAIT_KILLABLE_RECV: libc::c_ulong = 1 << 5;
        let install = |flags: libc::c_ulong| {
            // SAFETY: `prog` points at `self.insns`, alive for the duration of the call; the kernel copies it.
            unsafe {
                libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, flags, &prog as *const libc::sock_fprog)
            }
        };
        let mut fd = install(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | WAIT_KILLABLE_RECV);
        if fd < 0 {
            fd = install(libc::SECCOMP_FILTER_FLAG_NEW_LISTENER);
        }
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this new descriptor; we are its only owner.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }
}

/// One user notification: a guest task stopped in a mediated syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notification {
    pub id: u64,
    /// Thread id of the calling task (in the supervisor's pid namespace).
    pub pid: u32,
    pub nr: i32,
    pub arch: u32,
    pub ip: u64,
    pub args: [u64; 6],
}

/// Outcome of waiting on the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerState {
    /// A notification is pending.
    Readable,
    /// No task uses the filter any more.
    Hangup,
    /// The timeout expired.
    Timeout,
}

/// The supervisor's end of a seccomp filter.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
}

impl Listener {
    /// Wraps a listener descriptor.
    pub fn new(fd: OwnedFd) -> Self {
        Listener { fd }
    }

    /// Waits up to `timeout_ms` (-1 = forever) for a notification or for the last filtered task to go.
    pub fn wait(&self, timeout_ms: i32) -> io::Result<ListenerState> {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        loop {
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            if r == 0 {
                return Ok(ListenerState::Timeout);
            }
            if p.revents & libc::POLLIN != 0 {
                return Ok(ListenerState::Readable);
            }
            return Ok(ListenerState::Hangup);
        }
    }

    /// Asks the kernel to wake the supervisor on the CPU of the notifying task
    /// (SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, Linux 6.6+), which shortens each round trip.
    pub fn set_sync_wakeup(&self) -> io::Result<()> {
        const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: libc::c_ulong = 1;
        // The flags are the ioctl's argument itself, not a pointer to them.
        // SAFETY: the ioctl takes an integer argument and touches no memory of ours.
        let r = unsafe {
            libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one notification. `ENOENT` means the task died before it could be read.
    pub fn recv(&self) -> io::Result<Notification> {
        loop {
            // SAFETY: seccomp_notif is plain data; zeroed is the required input state.
            let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
            // SAFETY: the ioctl writes one seccomp_notif into `n`.
            let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            return Ok(Notification {
                id: n.id,
                pid: n.pid,
                nr: n.data.nr,
                arch: n.data.arch,
                ip: n.data.instruction_pointer,
                args: n.data.args,
            });
        }
    }

    fn send(&self, id: u64, val: i64, error: i32, flags: u32) -> io::Result<()> {
        let mut resp = libc::seccomp_notif_resp { id, val, error, flags };
        // SAFETY: the ioctl reads one seccomp_notif_resp.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Completes the syscall with return value `val`.
    pub fn respond_value(&self, id: u64, val: i64) -> io::Result<()> {
        self.send(id, val, 0, 0)
    }

    /// Completes the syscall with `-errno`.
    pub fn respond_error(&self, id: u64, errno: i32) -> io::Result<()> {
        self.send(id, 0, -errno.abs(), 0)
    }

    /// Lets the syscall run natively in the guest.
    pub fn respond_continue(&self, id: u64) -> io::Result<()> {
        self.send(id, 0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32)
    }

    /// Whether the notification is still live (its task has not been killed or interrupted), to be
    /// checked after reading guest memory and before acting on what was read.
    pub fn id_valid(&self, id: u64) -> bool {
        let mut id = id;
        // SAFETY: the ioctl reads one u64.
        unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) == 0 }
    }

    /// Installs `src` as a new descriptor in the guest and completes the syscall with its number
    /// (SECCOMP_ADDFD_FLAG_SEND, atomic). `cloexec` sets O_CLOEXEC on the guest's descriptor.
    pub fn addfd_send(&self, id: u64, src: RawFd, cloexec: bool) -> io::Result<i32> {
        let mut a = libc::seccomp_notif_addfd {
            id,
            flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
            srcfd: src as u32,
            newfd: 0,
            newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
        };
        // SAFETY: the ioctl reads one seccomp_notif_addfd.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ADDFD, &mut a) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r)
    }
}

fn too_far() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "seccomp filter too long for its jumps")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_checks_route_only_timed_waits() {
        const NOTIF: u32 = libc::SECCOMP_RET_USER_NOTIF;
        const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
        let f = BpfFilter::notify_when(
            &[228, 39],
            &[
                (7, ArgCheck::PositiveInt { arg: 2 }),
                (270, ArgCheck::NonNull { arg: 4 }),
                (202, ArgCheck::FutexTimedWait),
                (232, ArgCheck::NonNegativeInt { arg: 3 }),
            ],
        )
        .unwrap();
        let ev = |nr, args| f.evaluate_args(nr, AUDIT_ARCH_NATIVE, args);
        assert_eq!(ev(228, [0; 6]), NOTIF);
        assert_eq!(ev(39, [0; 6]), NOTIF);
        assert_eq!(ev(1, [0; 6]), ALLOW);
        // poll: timeout 0 and -1 run natively, a positive timeout is notified.
        assert_eq!(ev(7, [0, 1, 0, 0, 0, 0]), ALLOW);
        assert_eq!(ev(7, [0, 1, u32::MAX as u64, 0, 0, 0]), ALLOW);
        assert_eq!(ev(7, [0, 1, 0xffff_ffff_ffff_ffff, 0, 0, 0]), ALLOW);
        assert_eq!(ev(7, [0, 1, 5000, 0, 0, 0]), NOTIF);
        // epoll_wait under the scheduler: timeout 0 and positive ones are notified, -1 (any negative) runs natively.
        assert_eq!(ev(232, [3, 0x1000, 1, 0, 0, 0]), NOTIF);
        assert_eq!(ev(232, [3, 0x1000, 1, 10, 0, 0]), NOTIF);
        assert_eq!(ev(232, [3, 0x1000, 1, u32::MAX as u64, 0, 0]), ALLOW);
        assert_eq!(ev(232, [3, 0x1000, 1, 0xffff_ffff_8000_0000, 0, 0]), ALLOW);
        // pselect6: NULL timeout runs natively; any pointer (low or high half set) is notified.
        assert_eq!(ev(270, [0; 6]), ALLOW);
        assert_eq!(ev(270, [0, 0, 0, 0, 0x1000, 0]), NOTIF);
        assert_eq!(ev(270, [0, 0, 0, 0, 0x7fff_0000_0000, 0]), NOTIF);
        // futex: only timed FUTEX_WAIT / FUTEX_WAIT_BITSET (any private/realtime flags).
        assert_eq!(ev(202, [0, 0, 0, 0x1000, 0, 0]), NOTIF);
        assert_eq!(ev(202, [0, 128, 0, 0x1000, 0, 0]), NOTIF);
        assert_eq!(ev(202, [0, 9 | 128 | 256, 0, 0x7fff_0000_0000, 0, 0]), NOTIF);
        assert_eq!(ev(202, [0, 128, 0, 0, 0, 0]), ALLOW);
        assert_eq!(ev(202, [0, 1 | 128, 1, 0x1000, 0, 0]), ALLOW, "FUTEX_WAKE (arg 3 is a count)");
        assert_eq!(ev(202, [0, 4, 0, 0x1000, 0, 0]), ALLOW);
        assert_eq!(ev(202, [0, 9, 0, 0, 0, 0]), ALLOW);
    }

    #[test]
    fn filter_routes_syscalls() {
        let f = BpfFilter::notify(&[228, 318, 63]).unwrap();
        assert_eq!(f.evaluate(228, AUDIT_ARCH_NATIVE), libc::SECCOMP_RET_USER_NOTIF);
        assert_eq!(f.evaluate(63, AUDIT_ARCH_NATIVE), libc::SECCOMP_RET_USER_NOTIF);
        assert_eq!(f.evaluate(318, AUDIT_ARCH_NATIVE), libc::SECCOMP_RET_USER_NOTIF);
        assert_eq!(f.evaluate(39, AUDIT_ARCH_NATIVE), libc::SECCOMP_RET_ALLOW);
        assert_eq!(f.evaluate(228, 0x4000_0003), libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        assert_eq!(f.evaluate(X32_SYSCALL_BIT | 228, AUDIT_ARCH_NATIVE), libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        assert_eq!(BpfFilter::notify(&[]).unwrap().evaluate(1, AUDIT_ARCH_NATIVE), libc::SECCOMP_RET_ALLOW);
        assert!(BpfFilter::notify(&(0..1001).collect::<Vec<_>>()).is_err());
    }

    /// The binary search agrees with the rules for every number, also when subtrees are too far apart for
    /// a conditional jump (600 rules of mixed kinds) and for tiny sets.
    #[test]
    fn search_tree_matches_the_rules() {
        const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        for count in [0u32, 1, 2, 3, 4, 5, 9, 17, 600] {
            let mut rules = Rules::new();
            for i in 0..count {
                let nr = i * 3 + 1;
                let rule = match i % 4 {
                    0 => Rule::Always(Action::Notify),
                    1 => Rule::Always(Action::Errno(libc::EPERM as u16)),
                    2 => Rule::IfOneOf { arg: 0, values: vec![7, 9], then: Action::Allow, otherwise: Action::Notify },
                    _ => Rule::IfAnyBits { arg: 1, mask: 0x10, then: Action::Errno(1), otherwise: Action::Allow },
                };
                rules.set(nr, rule);
            }
            let f = BpfFilter::compile(&rules).unwrap();
            for nr in 0..count * 3 + 10 {
                let ev = |a0, a1| f.evaluate_args(nr, AUDIT_ARCH_NATIVE, [a0, a1, 0, 0, 0, 0]);
                let (a, b) = match rules.get(nr) {
                    None => (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_ALLOW),
                    Some(Rule::Always(x)) => (x.ret(), x.ret()),
                    Some(Rule::IfOneOf { .. }) => (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_USER_NOTIF),
                    Some(_) => (EPERM, libc::SECCOMP_RET_ALLOW),
                };
                // (a0, a1) = (9, 0x10) satisfies both kinds of condition; (8, 0) neither.
                assert_eq!((ev(9, 0x10), ev(8, 0)), (a, b), "{count} rules, syscall {nr}");
            }
        }
    }
}
