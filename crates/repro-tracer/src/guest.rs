//! The handlers' only view of the guest: its memory, its descriptors and paths, its ids, and whether the call
//! being answered is still pending. [`TaskGuest`] is the real one (process_vm_readv/writev, pidfd_getfd and the
//! seccomp notification's id check); `fake::FakeGuest` (tests) is an in-memory one, so the handlers are
//! unit-tested without root or a kernel mechanism.
//!
//! Errors are the errno the guest's call would see (EFAULT for memory that is not there, EBADF for a
//! descriptor that is not open...): a handler passes them on or decides otherwise.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;

use repro_sys::seccomp::Listener;
use repro_sys::{fdops, memory};

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// What a syscall handler may see and do of the guest task that made the call.
pub(crate) trait Guest {
    /// The calling task (thread) id, in the supervisor's pid namespace.
    fn tid(&self) -> i32;
    /// Reads exactly `buf.len()` bytes at `addr`.
    fn read_into(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), i32>;
    /// Reads a NUL-terminated string of at most `max` bytes (without the NUL).
    fn read_cstr(&mut self, addr: u64, max: usize) -> Result<Vec<u8>, i32>;
    /// Writes all of `data` at `addr`.
    fn write_bytes(&mut self, addr: u64, data: &[u8]) -> Result<(), i32>;
    /// A duplicate of the guest's descriptor `fd` (the same open file description: its offset is shared).
    fn borrow_fd(&mut self, fd: i32) -> Result<OwnedFd, i32>;
    /// The directory a relative path of the guest is resolved against: `dirfd`, or its cwd for AT_FDCWD.
    fn dir_fd(&mut self, dirfd: i32) -> Result<OwnedFd, i32>;
    /// What the guest's descriptor `fd` is, as its `/proc/<tid>/fd` link reads (`/a/path`, `pipe:[12]`...).
    fn fd_target(&mut self, fd: i32) -> Result<Vec<u8>, i32>;
    /// The guest's working directory.
    fn cwd(&mut self) -> Result<Vec<u8>, i32>;
    /// The task's root directory (an `O_PATH` descriptor), which its absolute paths are resolved in.
    fn root_fd(&mut self) -> Result<OwnedFd, i32>;
    /// The task's credentials (uids, gids, supplementary groups).
    fn credentials(&mut self) -> Result<repro_sys::sockconnect::Credentials, i32>;
    /// The descriptors in the interest list of the guest's epoll `epfd`.
    fn epoll_fds(&mut self, epfd: i32) -> Result<Vec<i32>, i32>;
    /// Whether the call is still pending: what was read from the guest's memory still belongs to it.
    fn still_waiting(&self) -> bool;
    /// The seccomp notification of the call, when there is one to answer later (a parked wait).
    fn notification(&self) -> Option<u64> {
        None
    }

    /// Reads `len` bytes at `addr`.
    fn read_bytes(&mut self, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
        let mut b = vec![0u8; len];
        self.read_into(addr, &mut b)?;
        Ok(b)
    }
}

/// Rewrites "/proc/self" and "/proc/thread-self" so the supervisor resolves them for the guest task.
pub(crate) fn guest_path(p: &[u8], tid: i32) -> Vec<u8> {
    for (prefix, repl) in
        [(&b"/proc/self"[..], format!("/proc/{tid}")), (&b"/proc/thread-self"[..], format!("/proc/{tid}/task/{tid}"))]
    {
        if p.starts_with(prefix) && (p.len() == prefix.len() || p[prefix.len()] == b'/') {
            let mut v = repl.into_bytes();
            v.extend_from_slice(&p[prefix.len()..]);
            return v;
        }
    }
    p.to_vec()
}

/// Pidfds of guest tasks, for borrowing their descriptors; owned by the notify thread. A stale one (the task is
/// gone, its tid reused) fails and is replaced once.
#[derive(Default)]
pub(crate) struct PidfdCache {
    pidfds: HashMap<i32, OwnedFd>,
}

impl PidfdCache {
    /// Descriptor `fd` of task `tid`, borrowed with pidfd_getfd (same open file description).
    pub(crate) fn borrow(&mut self, tid: i32, fd: i32) -> Result<OwnedFd, i32> {
        if let Some(p) = self.pidfds.get(&tid) {
            match fdops::pidfd_getfd(p, fd) {
                Ok(f) => return Ok(f),
                Err(e) if e.raw_os_error() == Some(libc::EBADF) => return Err(libc::EBADF),
                Err(_) => {
                    self.pidfds.remove(&tid);
                }
            }
        }
        let p = fdops::pidfd_open(tid, true).or_else(|_| fdops::pidfd_open(tid, false)).map_err(|e| errno_of(&e))?;
        let f = fdops::pidfd_getfd(&p, fd).map_err(|e| errno_of(&e))?;
        if self.pidfds.len() >= 256 {
            self.pidfds.clear();
        }
        self.pidfds.insert(tid, p);
        Ok(f)
    }
}

/// A real guest task stopped in a notified syscall (or, without a listener, a task whose call was deferred to a
/// thread of its own).
pub(crate) struct TaskGuest<'a> {
    tid: i32,
    /// The notification and its listener, for the id check.
    pending: Option<(&'a Listener, u64)>,
    pidfds: &'a mut PidfdCache,
}

impl<'a> TaskGuest<'a> {
    pub(crate) fn new(tid: i32, pending: Option<(&'a Listener, u64)>, pidfds: &'a mut PidfdCache) -> Self {
        TaskGuest { tid, pending, pidfds }
    }
}

impl Guest for TaskGuest<'_> {
    fn tid(&self) -> i32 {
        self.tid
    }

    fn read_into(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
        memory::read_exact(self.tid, addr, buf).map_err(|_| libc::EFAULT)
    }

    fn read_cstr(&mut self, addr: u64, max: usize) -> Result<Vec<u8>, i32> {
        memory::read_cstr(self.tid, addr, max).map_err(|e| errno_of(&e))
    }

    fn write_bytes(&mut self, addr: u64, data: &[u8]) -> Result<(), i32> {
        memory::write(self.tid, addr, data).map_err(|_| libc::EFAULT)
    }

    fn borrow_fd(&mut self, fd: i32) -> Result<OwnedFd, i32> {
        self.pidfds.borrow(self.tid, fd)
    }

    fn dir_fd(&mut self, dirfd: i32) -> Result<OwnedFd, i32> {
        if dirfd != libc::AT_FDCWD {
            return self.borrow_fd(dirfd);
        }
        let cwd = CString::new(format!("/proc/{}/cwd", self.tid)).map_err(|_| libc::EINVAL)?;
        fdops::openat(None, &cwd, libc::O_PATH | libc::O_DIRECTORY).map_err(|e| errno_of(&e))
    }

    fn fd_target(&mut self, fd: i32) -> Result<Vec<u8>, i32> {
        let p = std::fs::read_link(format!("/proc/{}/fd/{fd}", self.tid)).map_err(|e| errno_of(&e))?;
        Ok(p.into_os_string().into_encoded_bytes())
    }

    fn cwd(&mut self) -> Result<Vec<u8>, i32> {
        let p = std::fs::read_link(format!("/proc/{}/cwd", self.tid)).map_err(|e| errno_of(&e))?;
        Ok(p.into_os_string().into_encoded_bytes())
    }

    fn root_fd(&mut self) -> Result<OwnedFd, i32> {
        let root = CString::new(format!("/proc/{}/root", self.tid)).map_err(|_| libc::EINVAL)?;
        fdops::openat(None, &root, libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC).map_err(|e| errno_of(&e))
    }

    fn credentials(&mut self) -> Result<repro_sys::sockconnect::Credentials, i32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.tid)).map_err(|e| errno_of(&e))?;
        repro_sys::sockconnect::Credentials::from_status(&status).ok_or(libc::EIO)
    }

    fn epoll_fds(&mut self, epfd: i32) -> Result<Vec<i32>, i32> {
        // The interest list, from /proc/<pid>/fdinfo/<epfd> ("tfd: N ...").
        let info = std::fs::read_to_string(format!("/proc/{}/fdinfo/{epfd}", self.tid)).map_err(|e| errno_of(&e))?;
        info.lines()
            .filter_map(|l| l.strip_prefix("tfd:"))
            .map(|l| l.split_whitespace().next().and_then(|t| t.parse::<i32>().ok()).ok_or(libc::EIO))
            .collect()
    }

    fn still_waiting(&self) -> bool {
        self.pending.is_none_or(|(l, id)| l.id_valid(id))
    }

    fn notification(&self) -> Option<u64> {
        self.pending.map(|(_, id)| id)
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A guest in memory: a few regions of bytes, a table of descriptors (real files the test opened), their
    //! link targets and epoll lists, and a switch for "the call was interrupted".

    use super::*;

    #[derive(Default)]
    pub(crate) struct FakeGuest {
        pub tid: i32,
        /// Memory regions: start address -> bytes.
        pub mem: std::collections::BTreeMap<u64, Vec<u8>>,
        pub fds: HashMap<i32, OwnedFd>,
        pub targets: HashMap<i32, Vec<u8>>,
        pub epolls: HashMap<i32, Vec<i32>>,
        pub cwd: Option<OwnedFd>,
        pub cwd_path: Vec<u8>,
        /// The call was interrupted (a signal): `still_waiting` is false.
        pub interrupted: bool,
        /// The notification id a parked wait would be answered on (`None`: the call cannot be parked).
        pub notification: Option<u64>,
    }

    impl FakeGuest {
        pub(crate) fn new(tid: i32) -> Self {
            FakeGuest { tid, ..Default::default() }
        }

        /// Maps `len` zero bytes at `addr`.
        pub(crate) fn map(&mut self, addr: u64, len: usize) -> &mut Self {
            self.mem.insert(addr, vec![0; len]);
            self
        }

        /// Maps `data` at `addr`.
        pub(crate) fn put(&mut self, addr: u64, data: &[u8]) -> &mut Self {
            self.mem.insert(addr, data.to_vec());
            self
        }

        /// The `len` bytes at `addr` (panics when they are not mapped: a test bug).
        pub(crate) fn get(&self, addr: u64, len: usize) -> Vec<u8> {
            let (start, off) = self.region(addr, len).expect("mapped");
            self.mem[&start][off..off + len].to_vec()
        }

        fn region(&self, addr: u64, len: usize) -> Option<(u64, usize)> {
            let (&start, bytes) = self.mem.range(..=addr).next_back()?;
            let off = (addr - start) as usize;
            (off + len <= bytes.len()).then_some((start, off))
        }
    }

    impl Guest for FakeGuest {
        fn tid(&self) -> i32 {
            self.tid
        }

        fn read_into(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
            if buf.is_empty() {
                return Ok(()); // as process_vm_readv: nothing to read, nothing to fault on
            }
            let (start, off) = self.region(addr, buf.len()).ok_or(libc::EFAULT)?;
            buf.copy_from_slice(&self.mem[&start][off..off + buf.len()]);
            Ok(())
        }

        fn read_cstr(&mut self, addr: u64, max: usize) -> Result<Vec<u8>, i32> {
            let (start, off) = self.region(addr, 0).ok_or(libc::EFAULT)?;
            let rest = &self.mem[&start][off..];
            match rest.iter().take(max).position(|&b| b == 0) {
                Some(z) => Ok(rest[..z].to_vec()),
                None if rest.len() >= max => Err(libc::ENAMETOOLONG),
                None => Err(libc::EFAULT),
            }
        }

        fn write_bytes(&mut self, addr: u64, data: &[u8]) -> Result<(), i32> {
            if data.is_empty() {
                return Ok(());
            }
            let (start, off) = self.region(addr, data.len()).ok_or(libc::EFAULT)?;
            let r = self.mem.get_mut(&start).ok_or(libc::EFAULT)?;
            r[off..off + data.len()].copy_from_slice(data);
            Ok(())
        }

        fn borrow_fd(&mut self, fd: i32) -> Result<OwnedFd, i32> {
            self.fds.get(&fd).ok_or(libc::EBADF)?.try_clone().map_err(|e| errno_of(&e))
        }

        fn dir_fd(&mut self, dirfd: i32) -> Result<OwnedFd, i32> {
            if dirfd == libc::AT_FDCWD {
                return self.cwd.as_ref().ok_or(libc::ENOENT)?.try_clone().map_err(|e| errno_of(&e));
            }
            self.borrow_fd(dirfd)
        }

        fn fd_target(&mut self, fd: i32) -> Result<Vec<u8>, i32> {
            self.targets.get(&fd).cloned().ok_or(libc::EBADF)
        }

        fn cwd(&mut self) -> Result<Vec<u8>, i32> {
            Ok(self.cwd_path.clone())
        }

        /// This process's root and credentials: the fake guest's paths are the test's own.
        fn root_fd(&mut self) -> Result<OwnedFd, i32> {
            fdops::openat(None, c"/", libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC).map_err(|e| errno_of(&e))
        }

        fn credentials(&mut self) -> Result<repro_sys::sockconnect::Credentials, i32> {
            let status = std::fs::read_to_string("/proc/self/status").map_err(|e| errno_of(&e))?;
            repro_sys::sockconnect::Credentials::from_status(&status).ok_or(libc::EIO)
        }

        fn epoll_fds(&mut self, epfd: i32) -> Result<Vec<i32>, i32> {
            self.epolls.get(&epfd).cloned().ok_or(libc::EBADF)
        }

        fn still_waiting(&self) -> bool {
            !self.interrupted
        }

        fn notification(&self) -> Option<u64> {
            self.notification
        }
    }

    #[test]
    fn fake_memory_behaves_like_a_process() {
        let mut g = FakeGuest::new(7);
        g.put(0x1000, b"abc\0def").map(0x2000, 4);
        assert_eq!(g.read_cstr(0x1000, 100).unwrap(), b"abc");
        assert_eq!(g.read_cstr(0x1004, 100), Err(libc::EFAULT), "no NUL before the end of the mapping");
        assert_eq!(g.read_cstr(0x1004, 2), Err(libc::ENAMETOOLONG));
        g.write_bytes(0x2001, b"xy").unwrap();
        assert_eq!(g.get(0x2000, 4), b"\0xy\0");
        assert_eq!(g.write_bytes(0x2003, b"xy"), Err(libc::EFAULT), "crosses the end");
        assert_eq!(g.read_bytes(0x3000, 1), Err(libc::EFAULT));
        assert_eq!(g.borrow_fd(3).err(), Some(libc::EBADF));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_self_is_rewritten_for_the_guest() {
        assert_eq!(guest_path(b"/proc/self/stat", 7), b"/proc/7/stat");
        assert_eq!(guest_path(b"/proc/self", 7), b"/proc/7");
        assert_eq!(guest_path(b"/proc/selfish", 7), b"/proc/selfish");
        assert_eq!(guest_path(b"/proc/thread-self/x", 7), b"/proc/7/task/7/x");
        assert_eq!(guest_path(b"rel", 7), b"rel");
    }

    /// The real guest over this very process: memory, descriptors, cwd.
    #[test]
    fn task_guest_reads_and_writes_a_real_task() {
        let me = std::process::id() as i32;
        let mut cache = PidfdCache::default();
        let mut g = TaskGuest::new(me, None, &mut cache);
        let src = *b"hello\0";
        assert_eq!(g.read_cstr(src.as_ptr() as u64, 64).unwrap(), b"hello");
        let mut dst = [0u8; 4];
        g.write_bytes(dst.as_mut_ptr() as u64, b"abcd").unwrap();
        assert_eq!(std::hint::black_box(dst), *b"abcd");
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsRawFd;
        let target = g.fd_target(f.as_raw_fd()).unwrap();
        assert!(target.starts_with(b"/proc/"), "{target:?}");
        assert_eq!(g.cwd().unwrap(), std::env::current_dir().unwrap().into_os_string().into_encoded_bytes());
        assert!(g.still_waiting(), "a deferred call has no notification to expire");
    }
}
