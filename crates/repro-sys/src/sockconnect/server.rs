//! The connector's side: the loop of a child forked from a multi-threaded process, so raw system calls on its
//! own stack only (no allocation, no lock a thread of the parent may have held at the fork), until its channel
//! says end of file.
//!
//! Per request it takes the caller's *effective* ids (setgroups, setresgid(-1, egid, -1), the fs gid,
//! setresuid(-1, euid, -1), the fs uid): SO_PEERCRED records the connecting task's effective uid and gid
//! (`cred_to_ucred` reads `cred->euid`/`cred->egid`), and path permissions are checked with its fs ids and
//! groups. Its real and saved uid stay the parent's (0), which lets it take its own ids back after the request
//! (seteuid to the real uid is always allowed; the capabilities cleared when the effective uid left 0 come back
//! from the permitted set, kept while the real uid is 0). If they cannot be taken back it answers and ends.

use std::os::fd::RawFd;

use super::{checked_connect, connect_to, errno, OpenHow, Request, CREDENTIALS_FAILED, RESOLVE_IN_ROOT};

/// Most descriptors a request carries: the guest's socket and, for a path, the directory it is resolved from.
const FDS: usize = 2;

/// The connector's own ids, taken back after every request.
struct Own {
    euid: u32,
    egid: u32,
}

/// Serves requests on `chan` until it is closed; never returns.
pub(super) fn serve(chan: RawFd) -> ! {
    // SAFETY: raw system calls on integers and on a sigset_t of this stack; _exit ends the child without running
    // anything of the parent's.
    unsafe {
        // Nothing of the parent's (its handlers, which may allocate) runs here; SIGKILL still ends it.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, &all as *const libc::sigset_t, 0usize, 8usize);
        // Only the channel stays open: nothing of the parent's (its seccomp listener, pidfds, the guest's
        // descriptors) is held while acting as a guest's ids, and the parent's exit closes the channel.
        if chan > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (chan - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (chan + 1) as u32, u32::MAX, 0u32);
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0);
    }
    // SAFETY: geteuid and getegid cannot fail.
    let own = unsafe { Own { euid: libc::geteuid(), egid: libc::getegid() } };
    // SAFETY: a zeroed Request (integers and byte arrays) is a valid value.
    let mut req: Request = unsafe { std::mem::zeroed() };
    loop {
        let mut fds = [-1 as RawFd; FDS];
        let n = receive(chan, &mut req, &mut fds);
        if n == 0 || (n < 0 && errno() != libc::EINTR) {
            // SAFETY: ends the child.
            unsafe { libc::_exit(0) };
        }
        if n < 0 {
            continue;
        }
        let code = if n as usize == size_of::<Request>() { one(&req, &fds) } else { libc::EINVAL };
        for fd in fds.into_iter().filter(|&fd| fd >= 0) {
            // SAFETY: a descriptor this request brought.
            unsafe { libc::close(fd) };
        }
        let back = take_back(&own);
        let code = code.to_ne_bytes();
        // SAFETY: four bytes of this stack to our channel; MSG_NOSIGNAL: a closed channel is EPIPE, not a signal.
        unsafe { libc::send(chan, code.as_ptr().cast(), code.len(), libc::MSG_NOSIGNAL) };
        if !back {
            // SAFETY: ends the child: it could not take its own ids back.
            unsafe { libc::_exit(1) };
        }
    }
}

/// One request: its descriptors checked, the caller's ids taken, the connect made. Returns 0 or an errno.
fn one(req: &Request, fds: &[RawFd; FDS]) -> i32 {
    let path = req.kind == Request::PATH;
    let (len, ngroups) = (req.len as usize, req.ngroups as usize);
    let wanted = if path { 2 } else { 1 };
    if fds.iter().filter(|&&fd| fd >= 0).count() != wanted || len > req.data.len() || ngroups > req.groups.len() {
        return libc::EINVAL;
    }
    // A path is NUL-terminated within its length.
    if path && !req.data[..len].contains(&0) {
        return libc::EINVAL;
    }
    if !take(req, ngroups) {
        return CREDENTIALS_FAILED;
    }
    if path {
        let resolve = if req.resolve != 0 { RESOLVE_IN_ROOT } else { 0 };
        let how = OpenHow { flags: (libc::O_PATH | libc::O_CLOEXEC) as u64, mode: 0, resolve };
        checked_connect(fds[0], fds[1], req.data.as_ptr().cast(), &how)
    } else {
        connect_to(fds[0], &req.data[..len])
    }
}

/// Takes the caller's groups, effective and fs gid, effective and fs uid; false if one could not be taken.
fn take(req: &Request, ngroups: usize) -> bool {
    // SAFETY: raw system calls on integers and on an array of this request, borrowed for the call.
    unsafe {
        // Denied in a user namespace whose setgroups is "deny" (an unprivileged caller's): the groups stay the
        // connector's (none but the mapped caller's), as they always are there.
        libc::syscall(libc::SYS_setgroups, ngroups, req.groups.as_ptr());
        if libc::syscall(libc::SYS_setresgid, u32::MAX, req.egid, u32::MAX) != 0 {
            return false;
        }
        libc::syscall(libc::SYS_setfsgid, req.fsgid);
        if libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32 != req.fsgid {
            return false;
        }
        if libc::syscall(libc::SYS_setresuid, u32::MAX, req.euid, u32::MAX) != 0 {
            return false;
        }
        libc::syscall(libc::SYS_setfsuid, req.fsuid);
        // setfs*id(-1) changes nothing and answers the current one.
        libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32 == req.fsuid
    }
}

/// Takes the connector's own ids back (uid first: the capabilities come back with the effective uid); true if
/// they are its own again. It stays non-dumpable (a change of ids resets the flag to the system's default).
fn take_back(own: &Own) -> bool {
    // SAFETY: raw system calls on integers.
    unsafe {
        libc::syscall(libc::SYS_setresuid, u32::MAX, own.euid, u32::MAX);
        libc::syscall(libc::SYS_setresgid, u32::MAX, own.egid, u32::MAX);
        libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<u32>());
        libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0);
        libc::geteuid() == own.euid
            && libc::getegid() == own.egid
            && libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32 == own.euid
            && libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32 == own.egid
    }
}

/// Receives one request and its descriptors (close-on-exec) into `req` and `fds`; returns recvmsg's result.
/// Descriptors beyond [`FDS`] are closed, and the message is then invalid.
fn receive(chan: RawFd, req: &mut Request, fds: &mut [RawFd; FDS]) -> isize {
    // Room for one SCM_RIGHTS header and FDS descriptors, aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec { iov_base: (req as *mut Request).cast(), iov_len: size_of::<Request>() };
    // SAFETY: msghdr is plain data; all-zero is a valid value that we fill below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: `msg` points at live buffers of this stack (the request, the control buffer) for the call.
    let n = unsafe { libc::recvmsg(chan, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n <= 0 {
        return n;
    }
    let mut got = 0;
    let mut extra = false;
    // SAFETY: the kernel filled `msg_controllen` bytes of the control buffer; CMSG_FIRSTHDR/NXTHDR walk only
    // inside it, and each SCM_RIGHTS payload is an array of descriptors now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    if got < FDS {
                        fds[got] = fd;
                        got += 1;
                    } else {
                        libc::close(fd);
                        extra = true;
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if extra || msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
        // Not a request of ours: answered EINVAL (a short length).
        return 1;
    }
    n
}
