//! connect() of a guest's socket to a pathname UNIX socket, made by the supervisor so that the check and the
//! act are one: a connector process (a child of the supervisor) takes the calling task's credentials, resolves
//! the path once (openat2 to an `O_PATH` descriptor, from the task's root or working directory), refuses a
//! socket on a read-only mount, and connects the guest's own socket (borrowed with pidfd_getfd: the same open file
//! description, so `O_NONBLOCK` and the connected state are the guest's) to `/proc/self/fd/<that descriptor>`.
//! The path the kernel's connect resolves is that magic link, which names the checked inode: neither a rewritten
//! `sockaddr_un` nor a swapped symlink can change what is reached after the check.
//!
//! A process rather than a thread: the credentials a listening peer reads (SO_PEERCRED) are the connecting
//! task's, and they must be the guest's (its effective uid and gid, and its groups), not the supervisor's; a
//! child cannot disturb the supervisor's threads whatever it does. The peer's pid is the connector's.
//!
//! The connector is made once (at the first connect) and serves one request at a time over a `SOCK_SEQPACKET`
//! socketpair ([`server`]): the descriptors (the guest's socket, the directory) travel with SCM_RIGHTS, the
//! result comes back as four bytes. Forking a process per connect cost ~0.6-2.5 ms (the page tables of the
//! supervisor); a request costs a few system calls. A connect that has not ended within the caller's first wait
//! (a full backlog) keeps its connector, which the caller kills if the guest's call is interrupted; the next
//! connect makes a new one (the rare path forks). When idle connectors pile up (two connects that ended at the
//! same time) the extra one is told to end by closing its channel. When the guest's top process has ended
//! ([`retire`]) the idle connector ends too, so that the run's waits for its last child do not wait for it.
//!
//! The supervisor's ptrace loop and the `--no-supervisor` init reap every child of the process (waitpid(-1)) and
//! may collect a connector that ended; they ignore a pid that is not the guest's. The result never travels through
//! an exit status.

mod server;

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

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

/// The supplementary groups taken for a connect, at most.
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
/// The result of a request whose credentials could not be taken (never an errno value).
const CREDENTIALS_FAILED: i32 = -1;

/// The bytes a request carries: a path (NUL-terminated) or an address.
const DATA_MAX: usize = 1024;

/// One request to the connector, sent as it is (one `SOCK_SEQPACKET` message) with the guest's socket and, for a
/// path, the directory it is resolved from.
#[repr(C)]
#[derive(Clone, Copy)]
struct Request {
    /// [`Request::PATH`] or [`Request::ADDRESS`].
    kind: u32,
    /// Non-zero: `RESOLVE_IN_ROOT`.
    resolve: u32,
    euid: u32,
    fsuid: u32,
    egid: u32,
    fsgid: u32,
    ngroups: u32,
    /// The bytes of `data` used.
    len: u32,
    groups: [u32; MAX_GROUPS],
    data: [u8; DATA_MAX],
}

impl Request {
    const PATH: u32 = 1;
    const ADDRESS: u32 = 2;
}

/// A connector process and our end of its channel.
#[derive(Debug)]
struct Connector {
    pidfd: OwnedFd,
    chan: OwnedFd,
}

/// Where an idle connector waits for the next connect.
type Pool = Mutex<Option<Connector>>;

/// The idle connector of this process, if any (made at the first connect).
static IDLE: Pool = Mutex::new(None);

/// Set by [`retire`]: a connector ends after its connect instead of waiting for the next one.
static RETIRED: AtomicBool = AtomicBool::new(false);

/// The guest's top process has ended: the idle connector ends now, and any connect made after this (a guest
/// process left over) has a connector of its own that ends with it. The run's waits for "no child left" (the
/// supervisor's ptrace loop, the init's) must not wait for a connector.
pub fn retire() {
    RETIRED.store(true, Ordering::SeqCst);
    let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(idle);
}

impl Connector {
    /// Forks a connector. Errors: the socketpair or the process could not be made.
    fn spawn() -> io::Result<Connector> {
        let (chan, theirs) = crate::net::socketpair(libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC)?;
        let mut pidfd: RawFd = -1;
        // SAFETY: clone(2) without CLONE_VM is a fork; the pidfd is written into `pidfd`, a live local. The child
        // runs `server::serve`, which makes only raw system calls on its own stack (async-signal-safe: the parent
        // is multi-threaded) and ends with _exit.
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
            server::serve(theirs.as_raw_fd());
        }
        drop(theirs);
        // SAFETY: CLONE_PIDFD gave us this new descriptor.
        Ok(Connector { pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) }, chan })
    }

    /// Sends `req` with `fds`. Errors: the connector is gone (EPIPE, ECONNRESET) or the message was refused.
    fn send(&self, req: &Request, fds: &[RawFd]) -> io::Result<()> {
        let mut iov =
            libc::iovec { iov_base: (req as *const Request).cast_mut().cast(), iov_len: size_of::<Request>() };
        let payload = size_of_val(fds);
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain data; all-zero is a valid value that we fill below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure computation on a length.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(payload as u32) } as _;
        // SAFETY: the control buffer (64 bytes) holds one header and two descriptors; CMSG_FIRSTHDR of a msghdr
        // with such a buffer is non-null and CMSG_DATA points inside it. `msg` points at live buffers for sendmsg.
        let n = unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), payload);
            libc::sendmsg(self.chan.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
        };
        if n != size_of::<Request>() as isize {
            return Err(if n < 0 { io::Error::last_os_error() } else { io::Error::from_raw_os_error(libc::EMSGSIZE) });
        }
        Ok(())
    }

    /// Kills the connector (its connect is abandoned).
    fn kill(&self) {
        // SAFETY: our pidfd; no siginfo.
        unsafe {
            libc::syscall(libc::SYS_pidfd_send_signal, self.pidfd.as_raw_fd(), libc::SIGKILL, 0usize, 0u32);
        }
    }

    /// Back to `pool` unless another one is there already (then this one ends).
    fn park(self, pool: &Pool) {
        let mut idle = pool.lock().unwrap_or_else(|e| e.into_inner());
        if idle.is_none() && !RETIRED.load(Ordering::SeqCst) {
            *idle = Some(self);
        }
    }
}

impl Drop for Connector {
    /// Ends the connector (end of file on its channel; killed before if it was busy) and collects it. ECHILD:
    /// another thread of this process (the ptrace loop, the init's reaper) collected it first.
    fn drop(&mut self) {
        // SAFETY: our end of the channel; our pidfd and a siginfo_t on this stack (a zeroed one is valid).
        unsafe {
            libc::shutdown(self.chan.as_raw_fd(), libc::SHUT_RDWR);
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PIDFD, self.pidfd.as_raw_fd() as libc::id_t, &mut info, libc::WEXITED | libc::__WALL);
        }
    }
}

/// A connect under way in a connector; [`Connecting::wait`] gives its result.
#[derive(Debug)]
pub struct Connecting {
    /// Until the result is read.
    conn: Option<Connector>,
    /// Where the connector goes back to.
    pool: &'static Pool,
}

/// The result of a finished connect: 0, or the errno the guest's connect gets.
pub type ConnectResult = Result<(), i32>;

/// What the connector connects to.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// The pathname socket `path`, resolved from `dir` (see [`Resolve`]); on a read-only mount: EACCES.
    Path { dir: &'a OwnedFd, path: &'a CStr, how: Resolve },
    /// Any other address (abstract, unnamed, another family): passed as it is, the kernel checks it.
    Address(&'a [u8]),
}

/// Starts the connect of `sock` to `target` with the credentials `who` (their effective and fs ids, their
/// groups). Errors: ENAMETOOLONG for a path or address longer than a request holds; the connector could not be
/// made or reached.
pub fn connect_as(sock: &OwnedFd, target: Target<'_>, who: &Credentials) -> io::Result<Connecting> {
    connect_with(&IDLE, sock, target, who)
}

/// [`connect_as`] with the connectors of `pool`.
fn connect_with(pool: &'static Pool, sock: &OwnedFd, target: Target<'_>, who: &Credentials) -> io::Result<Connecting> {
    let (kind, resolve, bytes, dir) = match target {
        Target::Path { dir, path, how } => {
            (Request::PATH, u32::from(how == Resolve::InRoot), path.to_bytes_with_nul(), Some(dir.as_raw_fd()))
        }
        Target::Address(a) => (Request::ADDRESS, 0, a, None),
    };
    if bytes.len() > DATA_MAX {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    let groups = &who.groups[..who.groups.len().min(MAX_GROUPS)];
    let mut req = Box::new(Request {
        kind,
        resolve,
        euid: who.uid[1],
        fsuid: who.uid[3],
        egid: who.gid[1],
        fsgid: who.gid[3],
        ngroups: groups.len() as u32,
        len: bytes.len() as u32,
        groups: [0; MAX_GROUPS],
        data: [0; DATA_MAX],
    });
    req.groups[..groups.len()].copy_from_slice(groups);
    req.data[..bytes.len()].copy_from_slice(bytes);
    let fds: Vec<RawFd> = std::iter::once(sock.as_raw_fd()).chain(dir).collect();
    let idle = pool.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(conn) = idle {
        // A connector that ended (killed by a root guest, say) is replaced below.
        if conn.send(&req, &fds).is_ok() {
            return Ok(Connecting { conn: Some(conn), pool });
        }
    }
    let conn = Connector::spawn()?;
    conn.send(&req, &fds)?;
    Ok(Connecting { conn: Some(conn), pool })
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// In the connector: connect to `addr` as it is. Returns 0 or an errno.
fn connect_to(sock: RawFd, addr: &[u8]) -> i32 {
    // SAFETY: `addr` is borrowed for the duration of the call; the kernel reads at most its length.
    match unsafe { libc::connect(sock, addr.as_ptr().cast(), addr.len() as libc::socklen_t) } {
        0 => 0,
        _ => errno(),
    }
}

/// In the connector: resolution, check, connect. Returns 0 or an errno.
fn checked_connect(sock: RawFd, dir: RawFd, path: *const libc::c_char, how: &OpenHow) -> i32 {
    // SAFETY: `path` is a NUL-terminated string and `how` a struct open_how, both live for the call.
    let target = unsafe { libc::syscall(libc::SYS_openat2, dir, path, how as *const OpenHow, size_of::<OpenHow>()) };
    if target < 0 {
        return errno();
    }
    let code = connect_checked(sock, target as RawFd);
    // SAFETY: the descriptor openat2 gave us, no longer used.
    unsafe { libc::close(target as RawFd) };
    code
}

/// In the connector: the check of the resolved `target`, and the connect to it. Returns 0 or an errno.
fn connect_checked(sock: RawFd, target: RawFd) -> i32 {
    // The kernel's `struct statfs` (x86-64: 120 bytes, `f_flags` at 80; libc's type does not name it).
    let mut st = [0u64; 15];
    // SAFETY: fstatfs fills the 120 bytes of `st`.
    if unsafe { libc::syscall(libc::SYS_fstatfs, target, st.as_mut_ptr()) } != 0 {
        return errno();
    }
    if st[STATFS_FLAGS_WORD] & ST_RDONLY != 0 {
        return libc::EACCES;
    }
    let addr = proc_fd_address(target);
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

/// `/proc/self/fd/<fd>` as a `sockaddr_un`, built without allocating (in the connector, a child of a
/// multi-threaded process).
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
    pub fn wait(&mut self, timeout_ms: i32) -> Option<ConnectResult> {
        let conn = self.conn.as_ref()?;
        let mut p = libc::pollfd { fd: conn.chan.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd on this stack.
        if unsafe { libc::poll(&mut p, 1, timeout_ms) } <= 0 {
            return None;
        }
        let mut b = [0u8; 4];
        // SAFETY: reads into this stack buffer from our channel (readable: this does not block).
        let n = unsafe { libc::recv(conn.chan.as_raw_fd(), b.as_mut_ptr().cast(), b.len(), libc::MSG_DONTWAIT) };
        let conn = self.conn.take()?;
        Some(match (n, i32::from_ne_bytes(b)) {
            (4, r) => {
                conn.park(self.pool);
                match r {
                    0 => Ok(()),
                    CREDENTIALS_FAILED => Err(libc::EPERM),
                    e if e > 0 => Err(e),
                    _ => Err(libc::EIO),
                }
            }
            // The connector died without a word (killed): the call was interrupted.
            _ => Err(libc::EINTR),
        })
    }

    /// Ends the connect (the guest's call was interrupted): kills and collects its connector.
    pub fn cancel(mut self) {
        if let Some(conn) = self.conn.take() {
            conn.kill();
        }
    }
}

impl Drop for Connecting {
    /// A connect dropped without its result is abandoned like a cancelled one.
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.kill();
        }
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
            let mut c = connect_as(&s, Target::Path { dir: base, path: &p, how }, &me()).unwrap();
            assert_eq!(c.wait(-1), Some(Ok(())));
            let (peer, _) = l.accept().unwrap();
            let cred = nix::sys::socket::getsockopt(&peer, nix::sys::socket::sockopt::PeerCredentials).unwrap();
            assert_eq!(cred.uid(), nix::unistd::geteuid().as_raw());
        }
        let s = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
        let base = dir(d.path());
        for (name, errno) in [("missing", libc::ENOENT), ("f", libc::ECONNREFUSED)] {
            let mut c = connect_as(
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
            let mut c = connect_as(&s, Target::Path { dir: &base, path: c"s", how: Resolve::FromCwd }, &me()).unwrap();
            match c.wait(200) {
                Some(r) => assert_eq!(r, Ok(())),
                None => break c,
            }
            fillers.push(s);
            assert!(fillers.len() < 16, "the backlog never filled");
        };
        let mut blocked = blocked;
        assert_eq!(blocked.wait(50), None);
        blocked.cancel();
    }

    /// One connector serves callers of different ids in sequence: each connect takes the caller's effective uid,
    /// gid and groups (the server's SO_PEERCRED sees them, permissions along the path are theirs) and gives them
    /// back (a connect as this process after them passes a directory only root may search).
    #[test]
    fn one_connector_takes_each_callers_ids_in_turn() {
        use std::os::unix::fs::PermissionsExt;
        static POOL: Pool = Mutex::new(None);
        assert!(nix::unistd::geteuid().is_root(), "taking other ids needs root");
        let d = tempfile::tempdir().unwrap();
        let mode = |p: &std::path::Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        mode(d.path(), 0o755);
        let open = UnixListener::bind(d.path().join("s")).unwrap();
        mode(&d.path().join("s"), 0o777);
        std::fs::create_dir(d.path().join("private")).unwrap();
        let private = UnixListener::bind(d.path().join("private/s")).unwrap();
        mode(&d.path().join("private/s"), 0o777);
        mode(&d.path().join("private"), 0o700);
        let base = dir(d.path());
        let ids = |uid, gid| Credentials { uid: [uid; 4], gid: [gid; 4], groups: vec![gid] };
        let mut pids = Vec::new();
        for who in [ids(1000, 1001), ids(2000, 2002), me(), ids(1000, 1001)] {
            let root = who.uid[1] == 0;
            let connect = |path: &CStr| {
                let s = crate::net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
                let mut c =
                    connect_with(&POOL, &s, Target::Path { dir: &base, path, how: Resolve::FromCwd }, &who).unwrap();
                c.wait(-1).unwrap()
            };
            assert_eq!(connect(c"s"), Ok(()), "uid {}", who.uid[1]);
            let (peer, _) = open.accept().unwrap();
            let cred = nix::sys::socket::getsockopt(&peer, nix::sys::socket::sockopt::PeerCredentials).unwrap();
            assert_eq!((cred.uid(), cred.gid()), (who.uid[1], who.gid[1]));
            assert_ne!(cred.pid(), std::process::id() as i32, "made by the connector");
            pids.push(cred.pid());
            let want = if root { Ok(()) } else { Err(libc::EACCES) };
            assert_eq!(connect(c"private/s"), want, "uid {}", who.uid[1]);
            if root {
                private.accept().unwrap();
            }
        }
        pids.dedup();
        assert_eq!(pids.len(), 1, "one connector for all: {pids:?}");
    }
}
