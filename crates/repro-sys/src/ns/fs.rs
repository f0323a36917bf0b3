//! Filesystem calls and queries: writes to existing files, access, whiteouts, xattrs, syncfs, free space, locks.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use super::{check, cstr, Result};

/// Writes `data` to a file that already exists (cgroup and /proc files).
pub fn write_file(path: &str, data: &str) -> io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(data.as_bytes())
}

/// Whether `path` is executable by us (access X_OK).
pub fn is_executable(path: &str) -> std::result::Result<(), i32> {
    let p = cstr(path);
    // SAFETY: valid path.
    if unsafe { libc::access(p.as_ptr(), libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// Creates a device-free character node test: whether `path` is an overlayfs whiteout (char device 0:0).
pub fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Reads an extended attribute (for overlayfs' `trusted.overlay.opaque`).
pub fn get_xattr(path: &str, name: &str) -> Option<Vec<u8>> {
    let (p, n) = (cstr(path), cstr(name));
    let mut buf = [0u8; 64];
    // SAFETY: valid strings and a buffer with its length.
    let rc = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if rc < 0 {
        None
    } else {
        Some(buf[..rc as usize].to_vec())
    }
}

/// Flushes every dirty page of the filesystem that holds `file` (syncfs(2)): one call makes everything
/// written there so far durable.
pub fn syncfs(file: &std::fs::File) -> io::Result<()> {
    // SAFETY: syncfs takes a descriptor we own for the duration of the call.
    if unsafe { libc::syncfs(file.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Space on the filesystem of a descriptor (fstatvfs), in bytes and inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    pub bytes_total: u64,
    pub bytes_free: u64,
    pub inodes_total: u64,
    pub inodes_free: u64,
}

/// fstatvfs(2).
pub fn fs_space(fd: RawFd) -> Result<FsSpace> {
    // SAFETY: statvfs is plain data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    let rc = unsafe { libc::fstatvfs(fd, &mut st) };
    check(rc, "fstatvfs", || format!("fd {fd}"))?;
    let frsize = st.f_frsize as u64;
    Ok(FsSpace {
        bytes_total: st.f_blocks as u64 * frsize,
        bytes_free: st.f_bavail as u64 * frsize,
        inodes_total: st.f_files as u64,
        inodes_free: st.f_favail as u64,
    })
}

/// Takes an exclusive flock(2) on `file` without waiting: `Ok(false)` when another holder has it.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    loop {
        // SAFETY: flock on a descriptor we hold for the duration of the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}
