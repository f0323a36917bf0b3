//! Reading and writing another process's memory (process_vm_readv / process_vm_writev).

use std::io;

/// Reads up to `buf.len()` bytes at `addr` in task `pid`; returns how many were read (a short read
/// means an unmapped page).
pub fn read(pid: i32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes `buf`, which we own mutably; the remote side is checked by the kernel.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Reads exactly `buf.len()` bytes or fails with EFAULT.
pub fn read_exact(pid: i32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    let n = read(pid, addr, buf)?;
    if n != buf.len() {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// Writes all of `data` at `addr` in task `pid` (the target pages must be writable) or fails with EFAULT.
pub fn write(pid: i32, addr: u64, data: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        let local = libc::iovec { iov_base: data[done..].as_ptr() as *mut libc::c_void, iov_len: data.len() - done };
        let remote = libc::iovec { iov_base: (addr + done as u64) as *mut libc::c_void, iov_len: data.len() - done };
        // SAFETY: `local` describes a live slice that the kernel only reads.
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        done += n as usize;
    }
    Ok(())
}

/// Reads a NUL-terminated string of at most `max` bytes (without the NUL), page by page.
pub fn read_cstr(pid: i32, addr: u64, max: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut a = addr;
    while out.len() < max {
        let to_page_end = 4096 - (a % 4096) as usize;
        let mut chunk = vec![0u8; to_page_end.min(max - out.len())];
        let n = read(pid, a, &mut chunk)?;
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        if let Some(z) = chunk[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..z]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
        a += n as u64;
    }
    Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_own_memory() {
        let pid = std::process::id() as i32;
        let src = *b"hello\0world";
        let mut buf = [0u8; 11];
        read_exact(pid, src.as_ptr() as u64, &mut buf).unwrap();
        assert_eq!(buf, src);
        assert_eq!(read_cstr(pid, src.as_ptr() as u64, 100).unwrap(), b"hello");
        assert!(read_cstr(pid, src.as_ptr() as u64, 3).is_err());
        let mut dst = [0u8; 4];
        write(pid, dst.as_mut_ptr() as u64, b"abcd").unwrap();
        assert_eq!(std::hint::black_box(dst), *b"abcd");
        assert!(read_exact(pid, 8, &mut buf).is_err());
    }
}
