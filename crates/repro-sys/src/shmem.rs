//! A memfd whose first page is mapped `MAP_SHARED` in the supervisor and in guest processes: the data
//! page of the replacement vDSO. The supervisor only touches it through 64-bit atomics, as the guest does.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of the shared data page.
pub const PAGE: usize = 4096;

/// A memfd holding one shared data page followed by `rest` (e.g. an ELF image), with the data page
/// mapped read-write in this process.
#[derive(Debug)]
pub struct SharedPage {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomic operations on aligned 64-bit words (below), which
// are sound from any thread; the pointer itself is never handed out.
unsafe impl Send for SharedPage {}
// SAFETY: as above.
unsafe impl Sync for SharedPage {}

impl SharedPage {
    /// Creates the memfd (`name`), writes a zeroed data page followed by `rest`, and maps the data page.
    pub fn new(name: &CStr, rest: &[u8]) -> io::Result<Self> {
        // MFD_EXEC (Linux 6.3+) keeps the image mappable executable when vm.memfd_noexec asks for
        // non-executable memfds by default; older kernels reject the flag, so retry without it.
        const MFD_EXEC: libc::c_uint = 0x10;
        // SAFETY: `name` is a valid C string; integer flags.
        let mut fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | MFD_EXEC) };
        if fd < 0 {
            // SAFETY: as above.
            fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        }
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: new descriptor owned by us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut data = vec![0u8; PAGE];
        data.extend_from_slice(rest);
        data.resize(data.len().div_ceil(PAGE) * PAGE, 0);
        crate::fdops::write_all(&fd, &data)?;
        // SAFETY: a fresh shared mapping of the first page of our own memfd; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedPage { fd, ptr: ptr.cast(), len: data.len() })
    }

    /// The memfd (to be installed in a guest and mapped there).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Total bytes in the memfd: the data page plus the rest, rounded up to pages.
    pub fn total_len(&self) -> usize {
        self.len
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= PAGE, "offset {off} outside the shared page");
        // SAFETY: `ptr` maps PAGE bytes, read-write, for the lifetime of `self`; `off` is 8-aligned and in
        // bounds (checked above); AtomicU64 has the layout of u64, and every access to this memory (here
        // and in the guests) is atomic.
        unsafe { &*(self.ptr.add(off) as *const AtomicU64) }
    }

    /// Atomically loads the word at byte offset `off`.
    pub fn load(&self, off: usize) -> u64 {
        self.word(off).load(Ordering::SeqCst)
    }

    /// Atomically stores `v` at byte offset `off`.
    pub fn store(&self, off: usize, v: u64) {
        self.word(off).store(v, Ordering::SeqCst)
    }

    /// Atomically adds `v` at byte offset `off`; returns the previous value.
    pub fn fetch_add(&self, off: usize, v: u64) -> u64 {
        self.word(off).fetch_add(v, Ordering::SeqCst)
    }
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: unmaps the page mapped in `new`; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.cast(), PAGE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_words_are_visible_through_the_memfd() {
        let p = SharedPage::new(c"t", b"image").unwrap();
        assert_eq!(p.total_len(), 2 * PAGE);
        p.store(64, 5);
        assert_eq!(p.fetch_add(64, 3), 5);
        assert_eq!(p.load(64), 8);
        let mut buf = [0u8; 8];
        // SAFETY-free check through the descriptor: pread of the same bytes.
        let n = crate::fdops::pread(p.fd(), &mut buf, 64).unwrap();
        assert_eq!(n, 8);
        assert_eq!(u64::from_le_bytes(buf), 8);
        let n = crate::fdops::pread(p.fd(), &mut buf[..5], PAGE as i64).unwrap();
        assert_eq!(&buf[..n], b"image");
    }
}
