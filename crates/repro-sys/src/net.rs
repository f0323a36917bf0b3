//! Socket calls the supervisor makes on the guest's behalf while taping its network (`repro capture
//! --network record`, `repro replay`): creating sockets and socket pairs, connect, accept, recv and send on a
//! descriptor borrowed from the guest. Addresses are passed as raw `sockaddr` bytes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Room for any socket address.
const ADDR_MAX: usize = std::mem::size_of::<libc::sockaddr_storage>();

/// socket(2).
pub fn socket(domain: i32, ty: i32, protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    let fd = unsafe { libc::socket(domain, ty, protocol) };
    cvt(fd as isize)?;
    // SAFETY: a new descriptor owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// socketpair(2) of `AF_UNIX` sockets of type `ty` (SOCK_NONBLOCK/SOCK_CLOEXEC allowed).
pub fn socketpair(ty: i32) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: the kernel writes two descriptors into `fds`.
    let r = unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, fds.as_mut_ptr()) };
    cvt(r as isize)?;
    // SAFETY: two new descriptors owned by us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// connect(2) to the raw socket address `addr`.
pub fn connect(fd: &OwnedFd, addr: &[u8]) -> io::Result<()> {
    // SAFETY: the kernel reads addr.len() bytes of `addr`.
    let r = unsafe { libc::connect(fd.as_raw_fd(), addr.as_ptr().cast(), addr.len() as libc::socklen_t) };
    cvt(r as isize).map(|_| ())
}

/// bind(2) to the raw socket address `addr`.
pub fn bind(fd: &OwnedFd, addr: &[u8]) -> io::Result<()> {
    // SAFETY: the kernel reads addr.len() bytes of `addr`.
    let r = unsafe { libc::bind(fd.as_raw_fd(), addr.as_ptr().cast(), addr.len() as libc::socklen_t) };
    cvt(r as isize).map(|_| ())
}

/// accept4(2): the new descriptor and the peer's raw address.
pub fn accept4(fd: &OwnedFd, flags: i32) -> io::Result<(OwnedFd, Vec<u8>)> {
    let mut addr = [0u8; ADDR_MAX];
    let mut len = ADDR_MAX as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `addr` and updates `len`.
    let r = unsafe { libc::accept4(fd.as_raw_fd(), addr.as_mut_ptr().cast(), &mut len, flags) };
    cvt(r as isize)?;
    // SAFETY: a new descriptor owned by us.
    let nfd = unsafe { OwnedFd::from_raw_fd(r) };
    Ok((nfd, addr[..(len as usize).min(ADDR_MAX)].to_vec()))
}

/// getsockname(2): the socket's own raw address.
pub fn getsockname(fd: &OwnedFd) -> io::Result<Vec<u8>> {
    let mut addr = [0u8; ADDR_MAX];
    let mut len = ADDR_MAX as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `addr` and updates `len`.
    let r = unsafe { libc::getsockname(fd.as_raw_fd(), addr.as_mut_ptr().cast(), &mut len) };
    cvt(r as isize)?;
    Ok(addr[..(len as usize).min(ADDR_MAX)].to_vec())
}

/// recvfrom(2) of at most `len` bytes: the bytes and the sender's raw address (empty when none).
pub fn recvfrom(fd: &OwnedFd, len: usize, flags: i32) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = vec![0u8; len];
    let mut addr = [0u8; ADDR_MAX];
    let mut alen = ADDR_MAX as libc::socklen_t;
    // SAFETY: the kernel writes at most buf.len() bytes into buf and at most `alen` into `addr`.
    let n = unsafe {
        libc::recvfrom(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags, addr.as_mut_ptr().cast(), &mut alen)
    };
    let n = cvt(n)?;
    buf.truncate(n);
    Ok((buf, addr[..(alen as usize).min(ADDR_MAX)].to_vec()))
}

/// sendto(2) of `data` (to `addr` when not empty); returns the bytes sent.
pub fn sendto(fd: &OwnedFd, data: &[u8], flags: i32, addr: &[u8]) -> io::Result<usize> {
    let (ap, al) = if addr.is_empty() { (std::ptr::null(), 0) } else { (addr.as_ptr(), addr.len()) };
    // SAFETY: the kernel reads data.len() bytes of `data` and `al` bytes of `ap` (null when 0).
    let n = unsafe { libc::sendto(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), flags, ap.cast(), al as _) };
    cvt(n)
}

/// write(2) of `data`; returns the bytes written.
pub fn write(fd: &OwnedFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: the kernel reads data.len() bytes of `data`.
    cvt(unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) })
}

/// read(2) into `buf`; returns the bytes read.
pub fn read(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    cvt(unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socketpair_round_trip() {
        let (a, b) = socketpair(libc::SOCK_STREAM | libc::SOCK_CLOEXEC).unwrap();
        assert_eq!(sendto(&a, b"hello", 0, &[]).unwrap(), 5);
        let (got, _) = recvfrom(&b, 16, 0).unwrap();
        assert_eq!(got, b"hello");
        assert_eq!(write(&b, b"x").unwrap(), 1);
        assert_eq!(recvfrom(&a, 16, libc::MSG_DONTWAIT).unwrap().0, b"x");
        let e = recvfrom(&a, 16, libc::MSG_DONTWAIT).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    }

    #[test]
    fn loopback_connect_accept() {
        let l = socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
        // 127.0.0.1, port 0 (any), then listen and read the bound port back.
        let mut sa = [0u8; 16];
        sa[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        sa[4..8].copy_from_slice(&[127, 0, 0, 1]);
        // SAFETY: bind/listen/getsockname on our own socket with a live buffer.
        let port = unsafe {
            assert_eq!(libc::bind(l.as_raw_fd(), sa.as_ptr().cast(), 16), 0);
            assert_eq!(libc::listen(l.as_raw_fd(), 1), 0);
            let mut len = 16 as libc::socklen_t;
            assert_eq!(libc::getsockname(l.as_raw_fd(), sa.as_mut_ptr().cast(), &mut len), 0);
            u16::from_be_bytes([sa[2], sa[3]])
        };
        assert_ne!(port, 0);
        let c = socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
        connect(&c, &sa).unwrap();
        let (s, peer) = accept4(&l, libc::SOCK_CLOEXEC).unwrap();
        assert_eq!(peer.len(), 16);
        assert_eq!(sendto(&c, b"ping", 0, &[]).unwrap(), 4);
        assert_eq!(recvfrom(&s, 4, 0).unwrap().0, b"ping");
    }
}
