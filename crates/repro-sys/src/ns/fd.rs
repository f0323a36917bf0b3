//! Descriptors: close-on-exec pipes, the release byte, and descriptors passed over unix sockets.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::{check, Result, SysError};

/// A pipe whose both ends are close-on-exec.
pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    check(rc, "pipe2", String::new)?;
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Closes a raw descriptor that no Rust object owns (one placed by `spawn_init`).
pub fn close_raw(fd: RawFd) {
    // SAFETY: the caller names a descriptor it received as a raw number and that no `OwnedFd` holds.
    unsafe { libc::close(fd) };
}

/// Release descriptor: writes one byte.
pub fn write_byte(fd: &OwnedFd) -> Result<()> {
    let b = [1u8];
    // SAFETY: one byte from a stack buffer.
    let n = unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 1) };
    check(n as libc::c_int, "write", || "sync pipe".into()).map(|_| ())
}

/// A connected pair of `AF_UNIX` `SOCK_SEQPACKET` sockets, both close-on-exec (to pass a descriptor to a child).
pub fn socketpair() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let rc = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
    check(rc, "socketpair", || "AF_UNIX SOCK_SEQPACKET".into())?;
    // SAFETY: socketpair succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends the descriptor `fd` over the unix socket `sock` (SCM_RIGHTS, with one byte of data).
pub fn send_fd(sock: RawFd, fd: RawFd) -> Result<()> {
    let mut byte = [1u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // Room for one cmsghdr carrying one int, aligned as the kernel expects.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as _;
    // SAFETY: `msg` points at `control`, which is large enough for one header and one int (checked by
    // CMSG_FIRSTHDR returning non-null); CMSG_DATA points inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(SysError { call: "sendmsg", what: "SCM_RIGHTS".into(), source: io::Error::other("no room") });
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    loop {
        // SAFETY: `msg` and everything it points to live across the call.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return check(n as libc::c_int, "sendmsg", || format!("SCM_RIGHTS fd {fd}")).map(|_| ());
    }
}

/// Receives a descriptor sent with [`send_fd`] without blocking: `Ok(None)` when none is queued (or the peer
/// closed without sending). The received descriptor is close-on-exec.
pub fn recv_fd_nonblocking(sock: &OwnedFd) -> Result<Option<OwnedFd>> {
    let mut byte = [0u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let n = loop {
        // SAFETY: `msg` points at buffers that live across the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                _ => return Err(SysError::last("recvmsg", "SCM_RIGHTS")),
            }
        }
        break n;
    };
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: the kernel filled `msg`'s control buffer; CMSG_FIRSTHDR/NXTHDR stay inside msg_controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        let mut found = None;
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
                if found.is_none() {
                    found = Some(OwnedFd::from_raw_fd(fd));
                } else {
                    libc::close(fd);
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok(found)
    }
}
