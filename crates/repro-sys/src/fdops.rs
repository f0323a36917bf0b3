//! Descriptor-level calls the supervisor makes on the guest's behalf: pidfds, borrowing a guest
//! descriptor, raw getdents64 and stat calls, memfds.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// pidfd_open(2); `thread` asks for a pidfd of a single thread (PIDFD_THREAD, Linux 6.9+).
pub fn pidfd_open(pid: i32, thread: bool) -> io::Result<OwnedFd> {
    let flags = if thread { libc::O_EXCL } else { 0 };
    // SAFETY: integer arguments only.
    let fd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) })?;
    // SAFETY: new descriptor owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// pidfd_getfd(2): a duplicate of descriptor `fd` of the process behind `pidfd` (same open file
/// description, so it shares the file offset).
pub fn pidfd_getfd(pidfd: &OwnedFd, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    let r = cvt(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })?;
    // SAFETY: new descriptor owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// getdents64(2) into `buf`; returns the number of bytes filled (0 at the end).
pub fn getdents64(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    let n = cvt(unsafe { libc::syscall(libc::SYS_getdents64, fd.as_raw_fd(), buf.as_mut_ptr(), buf.len()) })?;
    Ok(n as usize)
}

/// lseek(2).
pub fn lseek(fd: &OwnedFd, off: i64, whence: i32) -> io::Result<i64> {
    // SAFETY: integer arguments only.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off, whence) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// pread(2) into `buf` at `off`; returns the number of bytes read.
pub fn pread(fd: &OwnedFd, buf: &mut [u8], off: i64) -> io::Result<usize> {
    // SAFETY: the kernel writes at most buf.len() bytes into buf.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), off) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Polls `fds` (descriptor, events) without waiting; returns each one's `revents`.
pub fn poll_now(fds: &[(&OwnedFd, i16)]) -> io::Result<Vec<i16>> {
    let mut p: Vec<libc::pollfd> =
        fds.iter().map(|(fd, events)| libc::pollfd { fd: fd.as_raw_fd(), events: *events, revents: 0 }).collect();
    // SAFETY: `p` is a live array of `p.len()` pollfds; timeout 0 never blocks.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(p.iter().map(|q| q.revents).collect())
}

/// open(2) relative to `dir` (or the cwd when `None`).
pub fn openat(dir: Option<&OwnedFd>, path: &CStr, flags: i32) -> io::Result<OwnedFd> {
    let d = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `path` is a valid C string.
    let fd = unsafe { libc::openat(d, path.as_ptr(), flags | libc::O_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: new descriptor owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Raw `struct stat` bytes from newfstatat(2) (x86_64 layout: 144 bytes).
pub fn newfstatat_raw(dir: Option<&OwnedFd>, path: &CStr, flags: i32) -> io::Result<[u8; 144]> {
    let d = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    let mut buf = [0u8; 144];
    // SAFETY: struct stat is 144 bytes on x86_64/aarch64; path is a valid C string.
    cvt(unsafe { libc::syscall(libc::SYS_newfstatat, d, path.as_ptr(), buf.as_mut_ptr(), flags) })?;
    Ok(buf)
}

/// Raw `struct statx` bytes from statx(2) (256 bytes).
pub fn statx_raw(dir: Option<&OwnedFd>, path: &CStr, flags: i32, mask: u32) -> io::Result<[u8; 256]> {
    let d = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    let mut buf = [0u8; 256];
    // SAFETY: struct statx is 256 bytes; path is a valid C string.
    cvt(unsafe { libc::syscall(libc::SYS_statx, d, path.as_ptr(), flags, mask, buf.as_mut_ptr()) })?;
    Ok(buf)
}

/// Writes all of `data` to `fd` at its current offset.
pub(crate) fn write_all(fd: &OwnedFd, data: &[u8]) -> io::Result<()> {
    let mut off = 0;
    while off < data.len() {
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd.as_raw_fd(), data[off..].as_ptr().cast(), data.len() - off) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        off += n as usize;
    }
    Ok(())
}

/// fstatfs(2): the raw 120-byte `struct statfs` of the file system holding `fd`.
pub fn fstatfs_raw(fd: &OwnedFd) -> io::Result<[u8; 120]> {
    let mut buf = [0u8; 120];
    // SAFETY: the kernel writes one struct statfs (120 bytes on x86_64 and aarch64) into `buf`.
    let r = unsafe { libc::syscall(libc::SYS_fstatfs, fd.as_raw_fd(), buf.as_mut_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(buf)
}

/// A sealed-size memfd holding `data`, positioned at offset 0.
pub fn memfd_with(name: &CStr, data: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid C string.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: new descriptor owned by us.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    write_all(&fd, data)?;
    lseek(&fd, 0, libc::SEEK_SET)?;
    Ok(fd)
}

/// unshare(2) with the given CLONE_* flags.
pub fn unshare(flags: i32) -> io::Result<()> {
    // SAFETY: integer argument only.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_descriptor_shares_the_offset() {
        let me = pidfd_open(std::process::id() as i32, false).unwrap();
        let f = memfd_with(c"t", b"0123456789").unwrap();
        let dup = pidfd_getfd(&me, f.as_raw_fd()).unwrap();
        lseek(&dup, 4, libc::SEEK_SET).unwrap();
        assert_eq!(lseek(&f, 0, libc::SEEK_CUR).unwrap(), 4);
        let d = openat(None, c"/", libc::O_RDONLY | libc::O_DIRECTORY).unwrap();
        let mut buf = [0u8; 4096];
        assert!(getdents64(&d, &mut buf).unwrap() > 0);
        let st = newfstatat_raw(None, c"/", 0).unwrap();
        assert_ne!(u64::from_ne_bytes(st[8..16].try_into().unwrap()), 0);
        assert!(newfstatat_raw(None, c"/nonexistent/x", 0).is_err());
        let sx = statx_raw(None, c"/", 0, 0xfff).unwrap();
        assert_eq!(poll_now(&[(&f, libc::POLLIN)]).unwrap(), vec![libc::POLLIN]);
        assert_eq!(sx[32..40], st[8..16]);
    }
}
