//! connect() to a pathname UNIX socket, and a datagram sent to one (sendto, sendmsg, sendmmsg): only sockets on a writable mount of the sandbox are reachable (those the
//! guest made itself, in its working directory's layer, /tmp, /home or /dev/shm, and those of a `--bind ...:rw`
//! the user granted). A socket of a host daemon on the read-only host tree (a 0666 socket under /var/tmp, /srv...)
//! answers EACCES, as a socket without write permission does: a read-only bind alone does not stop connect.
//!
//! connect: the check and the act are one ([`connect`]): the address is read once, the path resolved once to a
//! descriptor in the calling task's view, that descriptor checked, and the guest's socket connected to it by a
//! connector process of the supervisor with the task's credentials (`repro_sys::sockconnect`); every connect of an AF_UNIX
//! socket goes that way, whatever address it names (an abstract address read at the check could be rewritten to
//! a path before a native call read it again). A second guest thread rewriting the `sockaddr_un` or swapping a
//! symlink after the check changes nothing.
//!
//! sendto, sendmsg and sendmmsg: the check is made on the path the guest passed, then the call runs natively on
//! the same path: another thread of the guest that rewrites the path between the two could still reach a host
//! socket (docs/security.md says so). Abstract sockets live in the guest's own network namespace.

use std::ffi::CString;

use repro_sys::seccomp::ArgCheck;
use repro_sys::sockconnect::{self, Connecting, Resolve, Target};
use repro_sys::{fdops, net};

use crate::guest::{guest_path, Guest};
use crate::reply::{Outcome, Refusal};

/// The offset of `f_flags` in the kernel's `struct statfs` (x86-64) and its read-only bit.
const STATFS_FLAGS: usize = 80;
const ST_RDONLY: u64 = 1;

/// The path of a pathname `sockaddr_un` (none for other families, abstract and unnamed addresses).
pub(crate) fn socket_path(addr: &[u8]) -> Option<&[u8]> {
    if addr.len() < 3 || i32::from(u16::from_ne_bytes([addr[0], addr[1]])) != libc::AF_UNIX || addr[2] == 0 {
        return None;
    }
    let path = &addr[2..];
    Some(path.iter().position(|&b| b == 0).map_or(path, |end| &path[..end]))
}

/// The calls that may name a pathname socket: connect and sendmsg/sendmmsg always (sendmsg's address is in
/// memory, out of the filter's reach), sendto when its address is not NULL. The supervisor's filter and the
/// `--no-supervisor` guard's notify them; [`guard`] answers them.
pub(crate) fn notified() -> (Vec<u32>, Vec<(u32, ArgCheck)>) {
    (
        vec![libc::SYS_connect as u32, libc::SYS_sendmsg as u32, libc::SYS_sendmmsg as u32],
        vec![(libc::SYS_sendto as u32, ArgCheck::NonNull { arg: 4 })],
    )
}

/// connect(2) with raw arguments `args`, made by the supervisor when the guest's descriptor is an AF_UNIX socket:
/// `None` when it is not (or the address cannot be read: the native call gets EFAULT, EINVAL, EBADF or
/// ENOTSOCK itself; a connect of an inet socket cannot reach a pathname socket), else the connect under way
/// ([`finish`] gives its result) or the errno the guest gets now.
pub(crate) fn connect<G: Guest>(g: &mut G, args: &[u64; 6]) -> Option<Result<Connecting, i32>> {
    let len = args[2] as u32 as usize;
    // Longer than any address: the kernel's EINVAL, without reading it.
    if len > std::mem::size_of::<libc::sockaddr_storage>() {
        return None;
    }
    let sock = g.borrow_fd(args[0] as u32 as i32).ok()?;
    let own = net::getsockname(&sock).ok()?;
    if own.len() < 2 || i32::from(u16::from_ne_bytes([own[0], own[1]])) != libc::AF_UNIX {
        return None;
    }
    // Read once: what is checked is what is connected to.
    let addr = g.read_bytes(args[1], len).ok()?;
    let started = match socket_path(&addr) {
        None => g.credentials().map(|who| sockconnect::connect_as(&sock, Target::Address(&addr), &who)),
        Some(path) => {
            let absolute = path.first() == Some(&b'/');
            let p = if absolute { guest_path(path, g.tid()) } else { path.to_vec() };
            let Ok(p) = CString::new(p) else { return Some(Err(libc::EINVAL)) };
            let (dir, how) =
                if absolute { (g.root_fd(), Resolve::InRoot) } else { (g.dir_fd(libc::AT_FDCWD), Resolve::FromCwd) };
            dir.and_then(|dir| {
                let who = g.credentials()?;
                Ok(sockconnect::connect_as(&sock, Target::Path { dir: &dir, path: &p, how }, &who))
            })
        }
    };
    Some(match started {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.raw_os_error().unwrap_or(libc::EAGAIN)),
        Err(e) => Err(e),
    })
}

/// How long the notify loop waits for a connect before handing it to a thread of its own (a connect to a
/// listener whose backlog is full blocks until it is accepted).
pub(crate) const INLINE_WAIT_MS: i32 = 5;

/// The result of the connect `c` if it ends within [`INLINE_WAIT_MS`], else `c` back.
pub(crate) fn finished_soon(mut c: Connecting) -> Result<Outcome, Connecting> {
    match c.wait(INLINE_WAIT_MS) {
        Some(r) => Ok(r.map(|()| 0).map_err(Refusal::Errno)),
        None => Err(c),
    }
}

/// Whether task `tid` has a pending signal it will run a handler for (natively its blocked connect would end with
/// EINTR). The filter's WAIT_KILLABLE_RECV keeps the kernel from interrupting a notified call itself, so a connect
/// waiting on a full backlog would otherwise outwait the guest's own timeout (an alarm) forever. Unreadable (the
/// task is gone): not interrupted; its notification is no longer valid anyway.
pub(crate) fn interrupted(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| crate::handlers::timers::parse_status(&s))
        .is_some_and(|st| st.interrupting())
}

/// The result of the connect `c`, waited for while `waiting()` says the guest's call is still pending; when it is
/// not (a signal interrupted it, the task was killed), the connect is ended and EINTR returned (nobody reads it).
pub(crate) fn finish(mut c: Connecting, waiting: impl Fn() -> bool) -> Outcome {
    loop {
        if let Some(r) = c.wait(50) {
            return r.map(|()| 0).map_err(Refusal::Errno);
        }
        if !waiting() {
            c.cancel();
            return Err(Refusal::Errno(libc::EINTR));
        }
    }
}

/// The offsets in `struct msghdr` of `msg_name` and `msg_namelen`, and the size of `struct mmsghdr`.
const MSG_NAME: usize = 0;
const MSG_NAMELEN: usize = 8;
const MMSGHDR: u64 = 64;
/// What is read of a `struct msghdr`: up to `msg_namelen`.
const MSGHDR_HEAD: usize = MSG_NAMELEN + 4;
/// The kernel's limit on sendmmsg's `vlen` (UIO_MAXIOV).
const MAX_MMSG: u64 = 1024;

/// Syscall `nr` with raw arguments `args`: `Some(EACCES)` when it would reach a pathname socket on a read-only
/// mount (connect of a socket that is not AF_UNIX's, which then fails natively; a datagram sent with
/// sendto/sendmsg/sendmmsg to that address), `None` to go on.
pub(crate) fn guard<G: Guest>(g: &mut G, nr: i64, args: &[u64; 6]) -> Option<Outcome> {
    named_addresses(g, nr, args).into_iter().find_map(|(addr, len)| refuse(g, addr, len))
}

/// The socket addresses (pointer, length) syscall `nr` names. A header that cannot be read names none: the kernel
/// gives the guest its EFAULT.
fn named_addresses<G: Guest>(g: &mut G, nr: i64, args: &[u64; 6]) -> Vec<(u64, u32)> {
    match nr {
        libc::SYS_connect => vec![(args[1], args[2] as u32)],
        libc::SYS_sendto if args[4] != 0 => vec![(args[4], args[5] as u32)],
        libc::SYS_sendmsg => g.read_bytes(args[1], MSGHDR_HEAD).ok().and_then(|h| msg_name(&h)).into_iter().collect(),
        libc::SYS_sendmmsg => {
            let mut named = Vec::new();
            for i in 0..(args[2] & 0xffff_ffff).min(MAX_MMSG) {
                match g.read_bytes(args[1].wrapping_add(i * MMSGHDR), MSGHDR_HEAD) {
                    Ok(h) => named.extend(msg_name(&h)),
                    Err(_) => break,
                }
            }
            named
        }
        _ => Vec::new(),
    }
}

/// The address the head of a `struct msghdr` names, if any.
fn msg_name(h: &[u8]) -> Option<(u64, u32)> {
    let name = u64::from_ne_bytes(h.get(MSG_NAME..MSG_NAME + 8)?.try_into().ok()?);
    let len = u32::from_ne_bytes(h.get(MSG_NAMELEN..MSG_NAMELEN + 4)?.try_into().ok()?);
    (name != 0).then_some((name, len))
}

/// The address `addr` (`len` bytes): `Some(EACCES)` for a pathname socket on a read-only mount.
fn refuse<G: Guest>(g: &mut G, addr: u64, len: u32) -> Option<Outcome> {
    let len = (len as usize).min(std::mem::size_of::<libc::sockaddr_un>());
    // An unreadable address: the kernel gives the guest its EFAULT.
    let a = g.read_bytes(addr, len).ok()?;
    let path = socket_path(&a)?;
    let tid = g.tid();
    let p = guest_path(path, tid);
    let dir = if p.first() == Some(&b'/') { None } else { Some(g.dir_fd(libc::AT_FDCWD).ok()?) };
    let cpath = CString::new(p).ok()?;
    // Missing, or not reachable: the native call says why.
    let target = fdops::openat(dir.as_ref(), &cpath, libc::O_PATH | libc::O_CLOEXEC).ok()?;
    let st = fdops::fstatfs_raw(&target).ok()?;
    let flags = st.get(STATFS_FLAGS..STATFS_FLAGS + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_ne_bytes);
    (flags & ST_RDONLY != 0).then_some(Err(Refusal::Errno(libc::EACCES)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn un(path: &[u8]) -> Vec<u8> {
        let mut a = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        a.extend_from_slice(path);
        a
    }

    use crate::guest::fake::FakeGuest;

    /// A `struct msghdr` naming `name` (`len` bytes), padded to a `struct mmsghdr`.
    fn msghdr(name: u64, len: u32) -> Vec<u8> {
        let mut h = vec![0u8; MMSGHDR as usize];
        h[MSG_NAME..MSG_NAME + 8].copy_from_slice(&name.to_ne_bytes());
        h[MSG_NAMELEN..MSG_NAMELEN + 4].copy_from_slice(&len.to_ne_bytes());
        h
    }

    #[test]
    fn the_addresses_each_call_names() {
        let mut g = FakeGuest::new(1);
        let mut two = msghdr(0x5000, 20);
        two.extend(msghdr(0, 0));
        two.extend(msghdr(0x6000, 30));
        g.put(0x1000, &msghdr(0x4000, 110)).put(0x2000, &two);
        let n = |g: &mut FakeGuest, nr, args| named_addresses(g, nr, &args);
        assert_eq!(n(&mut g, libc::SYS_connect, [3, 0x4000, 110, 0, 0, 0]), vec![(0x4000, 110)]);
        assert_eq!(n(&mut g, libc::SYS_sendto, [3, 0x9000, 5, 0, 0x4000, 12]), vec![(0x4000, 12)]);
        assert_eq!(n(&mut g, libc::SYS_sendto, [3, 0x9000, 5, 0, 0, 0]), vec![]);
        assert_eq!(n(&mut g, libc::SYS_sendmsg, [3, 0x1000, 0, 0, 0, 0]), vec![(0x4000, 110)]);
        // An unreadable header names nothing (the kernel answers EFAULT).
        assert_eq!(n(&mut g, libc::SYS_sendmsg, [3, 0x8000, 0, 0, 0, 0]), vec![]);
        // Every entry of sendmmsg's vector, up to the first unreadable one.
        assert_eq!(n(&mut g, libc::SYS_sendmmsg, [3, 0x2000, 5, 0, 0, 0]), vec![(0x5000, 20), (0x6000, 30)]);
        assert_eq!(n(&mut g, libc::SYS_sendmmsg, [3, 0x2000, 1, 0, 0, 0]), vec![(0x5000, 20)]);
        assert_eq!(n(&mut g, libc::SYS_write, [3, 0x2000, 1, 0, 0, 0]), vec![]);
    }

    #[test]
    fn a_socket_on_a_writable_mount_or_missing_is_not_refused() {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("s");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let mut g = FakeGuest::new(std::process::id() as i32);
        let mut a = un(sock.as_os_str().as_encoded_bytes());
        a.push(0);
        g.put(0x4000, &a);
        assert!(guard(&mut g, libc::SYS_connect, &[3, 0x4000, a.len() as u64, 0, 0, 0]).is_none());
        let missing = un(b"/nonexistent/s\0");
        g.put(0x5000, &missing);
        assert!(guard(&mut g, libc::SYS_connect, &[3, 0x5000, missing.len() as u64, 0, 0, 0]).is_none());
    }

    /// connect through the fake guest (this process): an AF_UNIX socket is connected by the supervisor's connector to
    /// the address read once, absolute or relative to the cwd; an inet socket, a descriptor that is not open and an
    /// unreadable address are left to the native call.
    #[test]
    fn an_af_unix_connect_is_made_here() {
        let d = tempfile::tempdir().unwrap();
        let l = std::os::unix::net::UnixListener::bind(d.path().join("s")).unwrap();
        let mut g = FakeGuest::new(std::process::id() as i32);
        g.cwd = Some(std::fs::File::open(d.path()).unwrap().into());
        let mut abs = un(d.path().join("s").as_os_str().as_encoded_bytes());
        abs.push(0);
        g.put(0x4000, &abs).put(0x5000, &un(b"s")).put(0x6000, &un(b"missing"));
        for (addr, len, want) in
            [(0x4000, abs.len(), Ok(0)), (0x5000, 3, Ok(0)), (0x6000, 9, Err(Refusal::Errno(libc::ENOENT)))]
        {
            let s = net::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap();
            g.fds.insert(3, s);
            let c = connect(&mut g, &[3, addr, len as u64, 0, 0, 0]).expect("made here").expect("started");
            let r = match finished_soon(c) {
                Ok(r) => r,
                Err(c) => finish(c, || true),
            };
            assert_eq!(r, want, "{addr:#x}");
            if want.is_ok() {
                l.accept().unwrap();
            }
        }
        assert!(connect(&mut g, &[3, 0x9000, 20, 0, 0, 0]).is_none(), "unreadable: the kernel's EFAULT");
        assert!(connect(&mut g, &[7, 0x4000, 20, 0, 0, 0]).is_none(), "not open: the kernel's EBADF");
        assert!(connect(&mut g, &[3, 0x4000, 129, 0, 0, 0]).is_none(), "too long: the kernel's EINVAL");
        g.fds.insert(3, net::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0).unwrap());
        assert!(connect(&mut g, &[3, 0x4000, abs.len() as u64, 0, 0, 0]).is_none(), "an inet socket");
    }

    #[test]
    fn only_pathname_unix_addresses_have_a_path() {
        assert_eq!(socket_path(&un(b"/var/tmp/s\0\0\0")), Some(&b"/var/tmp/s"[..]));
        assert_eq!(socket_path(&un(b"rel.sock")), Some(&b"rel.sock"[..]));
        assert_eq!(socket_path(&un(b"\0abstract")), None);
        assert_eq!(socket_path(&un(b"")), None);
        let mut inet = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        inet.extend_from_slice(&[0, 80, 127, 0, 0, 1]);
        assert_eq!(socket_path(&inet), None);
    }
}
