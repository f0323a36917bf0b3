//! connect() of a guest's socket to a pathname UNIX socket, made by the supervisor so that the check and the
//! act are one: a short-lived child of the supervisor takes the calling task's credentials, resolves the path
//! once (openat2 to an `O_PATH` descriptor, from the task's root or working directory), refuses a socket on a
//! read-only mount, and connects the guest's own socket (borrowed with pidfd_getfd: the same open file
//! description, so `O_NONBLOCK` and the connected state are the guest's) to `/proc/self/fd/<that descriptor>`.
//! The path the kernel's connect resolves is that magic link, which names the checked inode: neither a rewritten
//! `sockaddr_un` nor a swapped symlink can change what is reached after the check.
//!
//! A process rather than a thread: the credentials a listening peer reads (SO_PEERCRED) are the connecting
//! task's, and they must be the guest's (uid, gid and groups of the calling task), not the supervisor's; a
//! thread of a multi-threaded process changing its own ids with raw syscalls would do too, but a child cannot
//! disturb the supervisor's threads whatever it does. The peer's pid is the child's.
//!
//! The child's result travels through a pipe, not its exit status: the supervisor's ptrace loop and the
//! `--no-supervisor` init reap every child of the process (waitpid(-1)) and may collect it first; they ignore a
//! pid that is not the guest's.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The credentials of the task whose connect is made (as `/proc/<tid>/status` lists them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// Real, effective, saved and file-system uid.
    pub uid: [u32; 4],
    /// Real, effective, saved and file-system gid.
    pub gid: [u32; 4],
    /// Supplementary groups (at most [`MAX_GROUPS`] are taken).
    pub groups: Vec<u32>,
}

/// The supplementary groups given to the child, at most.
pub const MAX_GROUPS: usize = 64;

impl Credentials {
    /// Parses the `Uid:`, `Gid:` and `Groups:` lines of a `/proc/<tid>/status`; `None` if one is missing.
    pub fn from_status(status: &str) -> Option<Credentials> {
        let ids = |key: &str| -> Option<[u32; 4]> {
            let line = status.lines().find_map(|l| l.strip_prefix(key))?;
            let v: Vec<u32> = line.split_whitespace().map(str::parse).collect::<Result<_, _>>().ok()?;
            v.try_into().ok()
        };
        let groups = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
        let groups = groups.split_whitespace().map(str::parse).collect::<Result<Vec<u32>, _>>().ok()?;
        Some(Credentials {
            uid: ids("Uid:")?,
            gid: ids("Gid:")?,
            groups: groups.into_iter().take(MAX_GROUPS).collect(),
        })
    }
}

/// How the path is resolved against the directory descriptor given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// The descriptor is the task's root (an absolute path): `RESOLVE_IN_ROOT`.
    InRoot,
    /// The descriptor is the task's working directory (a relative path).
    FromCwd,
}

/// The openat2(2) `struct open_how`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_IN_ROOT: u64 = 0x10;
/// `ST_RDONLY` in `statfs.f_flags`, the eleventh 64-bit word of the kernel's `struct statfs` (x86-64).
const ST_RDONLY: u64 = 1;
const STATFS_FLAGS_WORD: usize = 10;
/// The result of a child that could not take the task's credentials (never an errno value).
const CREDENTIALS_FAILED: i32 = -1;

/// A connect under way in a child; [`Connecting::wait`] gives its result.
#[derive(Debug)]
pub struct Connecting {
    pidfd: OwnedFd,
    /// The read end of the pipe the child writes its result to.
    result: OwnedFd,
}

/// The result of a finished connect: 0, or the errno the guest's connect gets.
pub type ConnectResult = Result<(), i32>;

/// What the child connects to.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// The pathname socket `path`, resolved from `dir` (see [`Resolve`]); on a read-only mount: EACCES.
    Path { dir: &'a OwnedFd, path: &'a CStr, how: Resolve },
    /// Any other address (abstract, unnamed, another family): passed as it is, the kernel checks it.
    Address(&'a [u8]),
}

/// Starts the connect of `sock` to `target` with the credentials `who`. Errors: the child could not be made.
pub fn connect_as(sock: &OwnedFd, target: Target<'_>, who: &Credentials) -> io::Result<Connecting> {
    let (dir, path, resolve, addr) = match target {
        Target::Path { dir, path, how } => {
            (dir.as_raw_fd(), path.as_ptr(), if how == Resolve::InRoot { RESOLVE_IN_ROOT } else { 0 }, &[][..])
        }
        Target::Address(a) => (-1, std::ptr::null(), 0, a),
    };
    let open_how = OpenHow { flags: (libc::O_PATH | libc::O_CLOEXEC) as u64, mode: 0, resolve };
    let groups: Vec<libc::gid_t> = who.groups.iter().copied().take(MAX_GROUPS).collect();
    let sock = sock.as_raw_fd();
    let mut ends = [-1 as RawFd; 2];
    // SAFETY: pipe2 fills the two descriptors of this local array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 gave us these two new descriptors.
    let (result, write_end) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let mut pidfd: RawFd = -1;
    // SAFETY: clone(2) without CLONE_VM is a fork; the pidfd is written into `pidfd`, a live local. The child
    // only makes raw system calls on data prepared before the call (async-signal-safe: the parent is
    // multi-threaded) and ends with _exit.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PIDFD | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            &mut pidfd as *mut RawFd,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = if path.is_null() {
            take_credentials(who, &groups).unwrap_or_else(|| connect_to(sock, addr))
        } else {
            take_credentials(who, &groups).unwrap_or_else(|| checked_connect(sock, dir, path, &open_how))
        };
        let code = code.to_ne_bytes();
        // SAFETY: four bytes of this stack to our pipe; then the child ends without running the parent's atexit
        // handlers or destructors.
        unsafe {
            libc::write(write_end.as_raw_fd(), code.as_ptr().cast(), code.len());
            libc::_exit(0)
        };
    }
    drop(write_end);
    // SAFETY: CLONE_PIDFD gave us this new descriptor.
    Ok(Connecting { pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) }, result })
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// In the child: takes the task's groups and ids; `Some(CREDENTIALS_FAILED)` if the ids could not be taken.
fn take_credentials(who: &Credentials, groups: &[u32]) -> Option<i32> {
    // SAFETY: raw system calls on integers and on a slice borrowed for the duration of the call.
    unsafe {
        // Denied in a user namespace whose setgroups is "deny" (an unprivileged caller's): the groups stay the
        // init's (none but the mapped caller's).
        libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr());
        let [r, e, s, fs] = who.gid;
        if libc::syscall(libc::SYS_setresgid, r, e, s) != 0 {
            return Some(CREDENTIALS_FAILED);
        }
        libc::syscall(libc::SYS_setfsgid, fs);
        let [r, e, s, fs] = who.uid;
        if libc::syscall(libc::SYS_setresuid, r, e, s) != 0 {
            return Some(CREDENTIALS_FAILED);
        }
        libc::syscall(libc::SYS_setfsuid, fs);
    }
    None
}

/// In the child: connect to `addr` as it is. Returns 0 or an errno.
fn connect_to(sock: RawFd, addr: &[u8]) -> i32 {
    // SAFETY: `addr` is borrowed for the duration of the call; the kernel reads at most its length.
    match unsafe { libc::connect(sock, addr.as_ptr().cast(), addr.len() as libc::socklen_t) } {
        0 => 0,
        _ => errno(),
    }
}

/// In the child: resolution, check, connect. Returns 0 or an errno.
fn checked_connect(sock: RawFd, dir: RawFd, path: *const libc::c_char, how: &OpenHow) -> i32 {
    // SAFETY: `path` is a NUL-terminated string and `how` a struct open_how, both live for the call.
    let target = unsafe { libc::syscall(libc::SYS_openat2, dir, path, how as *const OpenHow, size_of::<OpenHow>()) };
    if target < 0 {
        return errno();
    }
    // The kernel's `struct statfs` (x86-64: 120 bytes, `f_flags` at 80; libc's type does not name it).
    let mut st = [0u64; 15];
    // SAFETY: fstatfs fills the 120 bytes of `st`.
    if unsafe { libc::syscall(libc::SYS_fstatfs, target, st.as_mut_ptr()) } != 0 {
        return errno();
    }
    if st[STATFS_FLAGS_WORD] & ST_RDONLY != 0 {
        return libc::EACCES;
    }
    let addr = proc_fd_address(target as RawFd);
    // SAFETY: `addr` is a complete sockaddr_un on this stack.
    let r = unsafe {
        libc::connect(
            sock,
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return errno();
    }
    0
}

/// `/proc/self/fd/<fd>` as a `sockaddr_un`, built without allocating (the child of a multi-threaded process).
fn proc_fd_address(fd: RawFd) -> libc::sockaddr_un {
    // SAFETY: a zeroed sockaddr_un is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let prefix = b"/proc/self/fd/";
    for (i, b) in prefix.iter().enumerate() {
        a.sun_path[i] = *b as libc::c_char;
    }
    let mut digits = [0u8; 10];
    let (mut n, mut len) = (fd.max(0) as u32, 0);
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        a.sun_path[prefix.len() + i] = digits[len - 1 - i] as libc::c_char;
    }
    a
}

impl Connecting {
    /// Waits up to `timeout_ms` (-1: without limit) for the result; `None` while the connect is under way.
    pub fn wait(&self, timeout_ms: i32) -> Option<ConnectResult> {
        let mut p = libc::pollfd { fd: self.result.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd on this stack.
        if unsafe { libc::poll(&mut p, 1, timeout_ms) } <= 0 {
            return None;
        }
        let mut b = [0u8; 4];
        // SAFETY: reads into this stack buffer from our pipe.
        let n = unsafe { libc::read(self.result.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
        self.reap();
        Some(match (n, i32::from_ne_bytes(b)) {
            (4, 0) => Ok(()),
            (4, CREDENTIALS_FAILED) => Err(libc::EPERM),
            (4, e) if e > 0 => Err(e),
            // The child died without a word (killed): the call was interrupted.
            _ => Err(libc::EINTR),
        })
    }

    /// Collects the child, which has written its result or died. ECHILD: another thread of this process (the
    /// ptrace loop, the init's reaper) collected it first.
    fn reap(&self) {
        // SAFETY: a zeroed siginfo_t is a valid value; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: our pidfd and a siginfo_t on this stack.
        unsafe {
            libc::waitid(libc::P_PIDFD, self.pidfd.as_raw_fd() as libc::id_t, &mut info, libc::WEXITED | libc::__WALL)
        };
    }

    /// Ends the connect (the guest's call was interrupted): kills and reaps the child.
    pub fn cancel(self) {
        // SAFETY: our pidfd; no siginfo.
        unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, self.pidfd.as_raw_fd(), libc::SIGKILL, 0usize, 0u32);
        }
        self.reap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::net::UnixListener;

    fn me() -> Credentials {
        Credentials::from_status(&std::fs::read_to_string("/proc/self/status").unwrap()).unwrap()
    }

    fn dir(p: &std::path::Path) -> OwnedFd {
        std::fs::File::open(p).unwrap().into()
    }

    #[test]
    fn status_lines_give_the_credentials() {
        let s = "Name:\tx\nUid:\t1\t2\t3\t4\nGid:\t5\t6\t7\t8\nGroups:\t9 10 \n";
        let c = Credentials::from_status(s).unwrap();
        assert_eq!((c.uid, c.gid, c.groups), ([1, 2, 3, 4], [5, 6, 7, 8], vec![9, 10]));
        assert_eq!(Credentials::from_status("Uid:\t1\t2\t3\nGid:\t5\t6\t7\t8\nGroups:\n"), None);
        assert_eq!(Credentials::from_status("Uid:\t1\t2\t3\t4\nGid:\t5\t6\t7\t8\n"), None);
    }

    #[test]
    fn the_proc_fd_address_names_the_descriptor() {
        for (fd, want) in [(0, "/proc/self/fd/0"), (7, "/proc/self/fd/7"), (1234567, "/proc/self/fd/1234567")] {
            let a = proc_fd_address(fd);
            let got: Vec<u8> = a.sun_path.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
            assert_eq!(got, want.as_bytes());
        }
    }

    /// A real connect, relative and absolute; a missing socket and a non-socket get the native errors; the peer
    /// sees this process's uid.
    #[test]
    fn connects_through_the_checked_descriptor() {
        let d = tempfile::tempdir().unwrap();
        let l = UnixListener::bind(d.path().join("s")).unwrap();
        std::fs::write(d.path().join("f"), b"").unwrap();
        let root = dir(std::path::Path::new("/"));
        let abs = CString::new(d.path().join("s").into_os_string().into_encoded_bytes()).unwrap();
        for (base, p, how) in
            [(&root, abs, Resolve::InRoot), (&dir(d.path()), CString::new("s").unwrap(), Resolve::FromCwd)]
        {
            let s = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
            let c = connect_as(&s, Target::Path { dir: base, path: &p, how }, &me()).unwrap();
            assert_eq!(c.wait(-1), Some(Ok(())));
            let (peer, _) = l.accept().unwrap();
            let cred = nix::sys::socket::getsockopt(&peer, nix::sys::socket::sockopt::PeerCredentials).unwrap();
            assert_eq!(cred.uid(), nix::unistd::geteuid().as_raw());
        }
        let s = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
        let base = dir(d.path());
        for (name, errno) in [("missing", libc::ENOENT), ("f", libc::ECONNREFUSED)] {
            let c = connect_as(
                &s,
                Target::Path { dir: &base, path: &CString::new(name).unwrap(), how: Resolve::FromCwd },
                &me(),
            )
            .unwrap();
            assert_eq!(c.wait(-1), Some(Err(errno)), "{name}");
        }
    }

    /// An address passed as it is: an abstract socket connects, a bad length is the kernel's EINVAL.
    #[test]
    fn other_addresses_are_passed_as_they_are() {
        let name = format!("\0repro-sockconnect-{}", std::process::id());
        let mut addr = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        addr.extend_from_slice(name.as_bytes());
        let l = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
        crate::net::bind(&l, &addr).unwrap();
        // SAFETY: listen on our own socket.
        assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 4) }, 0);
        let s = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
        assert_eq!(connect_as(&s, Target::Address(&addr), &me()).unwrap().wait(-1), Some(Ok(())));
        let s = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
        assert_eq!(connect_as(&s, Target::Address(&addr[..1]), &me()).unwrap().wait(-1), Some(Err(libc::EINVAL)));
    }

    /// A connect that blocks (a full backlog) is under way until cancelled.
    #[test]
    fn a_blocked_connect_can_be_cancelled() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("s");
        let sock = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
        let mut addr = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        addr.extend_from_slice(path.as_os_str().as_encoded_bytes());
        crate::net::bind(&sock, &addr).unwrap();
        // SAFETY: listen on our own socket with a backlog of 0.
        assert_eq!(unsafe { libc::listen(sock.as_raw_fd(), 0) }, 0);
        let base = dir(d.path());
        let mut fillers = Vec::new();
        let blocked = loop {
            let s = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
            let c = connect_as(&s, Target::Path { dir: &base, path: c"s", how: Resolve::FromCwd }, &me()).unwrap();
            match c.wait(200) {
                Some(r) => assert_eq!(r, Ok(())),
                None => break c,
            }
            fillers.push(s);
            assert!(fillers.len() < 16, "the backlog never filled");
        };
        assert_eq!(blocked.wait(50), None);
        blocked.cancel();
    }
}
