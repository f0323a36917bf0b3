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
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

impl BpfFilter {
    /// A filter that returns USER_NOTIF for each syscall number in `notify`, ERRNO(ENOSYS) for other
    /// architectures and x32 syscalls, and ALLOW for everything else.
    pub fn notify(notify: &[u32]) -> Result<Self, io::Error> {
        if notify.len() > 200 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many mediated syscalls"));
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
        let n = notify.len();
        for (i, &nr) in notify.iter().enumerate() {
            // On match, jump over the remaining comparisons and the ALLOW to the NOTIF return.
            let remaining = (n - i - 1) as u8;
            v.push(jump(JEQ_K, nr, remaining + 1, 0));
        }
        v.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
        v.push(stmt(RET_K, libc::SECCOMP_RET_USER_NOTIF));
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
        let mut acc = 0u32;
        let mut pc = 0usize;
        while pc < self.insns.len() {
            let i = self.insns[pc];
            match i.code {
                LD_W_ABS => acc = if i.k == 0 { nr } else { arch },
                JEQ_K => {
                    pc += if acc == i.k { i.jt as usize } else { i.jf as usize };
                }
                JGE_K => {
                    pc += if acc >= i.k { i.jt as usize } else { i.jf as usize };
                }
                RET_K => return i.k,
                _ => return libc::SECCOMP_RET_KILL_PROCESS,
            }
            pc += 1;
        }
        libc::SECCOMP_RET_KILL_PROCESS
    }

    /// Installs the filter on the calling thread (after PR_SET_NO_NEW_PRIVS) and returns the listener.
    /// Async-signal-safe: no allocation, usable between fork and exec.
    pub fn install_with_listener(&self) -> io::Result<OwnedFd> {
        let prog = libc::sock_fprog { len: self.insns.len() as u16, filter: self.insns.as_ptr() as *mut _ };
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `prog` points at `self.insns`, alive for the duration of the call; the kernel copies it.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const libc::sock_fprog,
            )
        };
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
        let mut flags: u64 = 1; // SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
                                // SAFETY: the ioctl reads one u64.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, &mut flags) };
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(BpfFilter::notify(&[1; 300]).is_err());
    }
}
