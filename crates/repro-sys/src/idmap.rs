//! The guest's identity: idmapped detached mounts (open_tree, mount_setattr, move_mount), passing descriptors
//! over a socket (SCM_RIGHTS), and the calls the init makes about itself (dumpable, capability bounding set).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

use crate::ns::SysError;

type Result<T> = std::result::Result<T, SysError>;

fn err(call: &'static str, what: impl Into<String>) -> SysError {
    SysError { call, what: what.into(), source: io::Error::last_os_error() }
}

fn cpath(p: &str) -> CString {
    // Cannot fail: the NUL bytes are filtered out first.
    CString::new(p.as_bytes().iter().copied().filter(|b| *b != 0).collect::<Vec<u8>>()).unwrap_or_default()
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
pub(crate) struct MountAttr {
    pub(crate) attr_set: u64,
    pub(crate) attr_clr: u64,
    pub(crate) propagation: u64,
    pub(crate) userns_fd: u64,
}

/// A detached, recursive copy of the mount tree at `path` whose file ownership is seen through the id maps of
/// the user namespace `userns` (open_tree(OPEN_TREE_CLONE | AT_RECURSIVE) then
/// mount_setattr(MOUNT_ATTR_IDMAP)): a file of host uid `H + n` appears as uid `H + n` mapped back, i.e. a
/// file owned by host uid 0 looks owned by the namespace's root, and what the namespace's root writes through
/// it lands as host uid 0. Needs CAP_SYS_ADMIN over the filesystem (the caller is host root).
pub fn idmapped_tree(path: &str, userns: &OwnedFd) -> Result<OwnedFd> {
    let tree = cloned_tree(path)?;
    let attr =
        MountAttr { attr_set: MOUNT_ATTR_IDMAP, attr_clr: 0, propagation: 0, userns_fd: userns.as_raw_fd() as u64 };
    // SAFETY: the empty path with AT_EMPTY_PATH names `tree` itself; `attr` is a valid struct of the given size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 {
        return Err(err("mount_setattr", format!("{path} MOUNT_ATTR_IDMAP")));
    }
    Ok(tree)
}

/// A detached, recursive copy of the mount tree at `path` (open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)), without
/// idmapping: for a process that cannot reach `path` by name.
pub fn cloned_tree(path: &str) -> Result<OwnedFd> {
    let p = cpath(path);
    // SAFETY: valid NUL-terminated path; integer flags only.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            p.as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE,
        )
    };
    if fd < 0 {
        return Err(err("open_tree", format!("{path} (clone, recursive)")));
    }
    // SAFETY: open_tree returned a new descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Attaches a detached mount (`idmapped_tree`) at `target` in the caller's mount namespace (move_mount).
pub fn attach_tree(tree: RawFd, target: &str) -> Result<()> {
    let t = cpath(target);
    // SAFETY: `tree` is a descriptor of a detached mount; the empty source path with MOVE_MOUNT_F_EMPTY_PATH
    // names it; `t` is a valid path.
    let rc = unsafe {
        libc::syscall(libc::SYS_move_mount, tree, c"".as_ptr(), libc::AT_FDCWD, t.as_ptr(), MOVE_MOUNT_F_EMPTY_PATH)
    };
    if rc < 0 {
        return Err(err("move_mount", format!("descriptor {tree} to {target}")));
    }
    Ok(())
}

/// Most descriptors one message carries (the kernel's SCM_MAX_FD is 253).
pub const MAX_FDS: usize = 64;

/// Sends `fds` (at most [`MAX_FDS`]) in one message whose body is their count followed by `tags` (at most
/// [`MAX_FDS`] bytes the receiver gets back as they are).
pub fn send_fds(sock: &OwnedFd, tags: &[u8], fds: &[RawFd]) -> Result<()> {
    if fds.len() > MAX_FDS || tags.len() > MAX_FDS {
        return Err(SysError {
            call: "sendmsg",
            what: "SCM_RIGHTS".into(),
            source: io::Error::other(format!("{} descriptors and {} tags, at most {MAX_FDS}", fds.len(), tags.len())),
        });
    }
    let mut body = vec![fds.len() as u8];
    body.extend_from_slice(tags);
    let mut iov = libc::iovec { iov_base: body.as_mut_ptr().cast(), iov_len: body.len() };
    let payload = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation on a length.
    let space = unsafe { libc::CMSG_SPACE(payload.max(1) as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: msghdr is plain data; all-zero is a valid value that we fill below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer is CMSG_SPACE(payload) bytes, room for one header and the descriptors;
        // CMSG_FIRSTHDR of a msghdr with such a buffer is non-null and CMSG_DATA points inside the buffer.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload as u32) as _;
            ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), payload);
        }
    }
    // SAFETY: `msg` points at live buffers (iov, control) for the duration of the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n != body.len() as isize {
        return Err(err("sendmsg", format!("{} descriptors", fds.len())));
    }
    Ok(())
}

/// Receives the tags and descriptors one [`send_fds`] sent (blocking); the descriptors arrive close-on-exec.
pub fn recv_fds(sock: RawFd) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut body = [0u8; 1 + MAX_FDS];
    let mut iov = libc::iovec { iov_base: body.as_mut_ptr().cast(), iov_len: body.len() };
    // SAFETY: CMSG_SPACE is a pure computation on a length.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: msghdr is plain data; all-zero is a valid value that we fill below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` points at live buffers (iov, control) for the duration of the call.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break n;
    };
    if n < 1 {
        if n < 0 {
            return Err(err("recvmsg", "descriptors"));
        }
        return Err(SysError {
            call: "recvmsg",
            what: "descriptors".into(),
            source: io::Error::other("the sender closed the socket without a message"),
        });
    }
    let mut out = Vec::new();
    // SAFETY: the kernel filled `msg_controllen` bytes of the control buffer; CMSG_FIRSTHDR/NXTHDR walk only
    // inside it, and each SCM_RIGHTS payload is an array of descriptors now owned by this process.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    out.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 || out.len() != body[0] as usize {
        return Err(SysError {
            call: "recvmsg",
            what: "descriptors".into(),
            source: io::Error::other(format!("expected {} descriptors, received {}", body[0], out.len())),
        });
    }
    Ok((body[1..n as usize].to_vec(), out))
}

/// prctl(PR_SET_DUMPABLE, 0): no process without CAP_SYS_PTRACE over the caller's user namespace can ptrace it,
/// read its memory or open its /proc files that need ptrace access.
pub fn set_non_dumpable() -> Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) };
    if rc < 0 {
        return Err(err("prctl", "PR_SET_DUMPABLE 0"));
    }
    Ok(())
}

/// Whether the calling process is dumpable (prctl(PR_GET_DUMPABLE)).
pub fn is_dumpable() -> bool {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 1 }
}

/// CAP_SYS_PTRACE.
pub const CAP_SYS_PTRACE: i32 = 19;

/// prctl(PR_CAPBSET_DROP, cap): the capability stays in the caller's effective set but no program it (or its
/// children) executes can gain it again.
pub fn drop_bounding(cap: i32) -> Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    if rc < 0 {
        return Err(err("prctl", format!("PR_CAPBSET_DROP {cap}")));
    }
    Ok(())
}

/// Takes ownership of descriptor `fd`, placed in this process by [`crate::ns::spawn_init`] before its exec, and
/// marks it close-on-exec. `None` when no such descriptor is open. Call it once per number: the descriptor is
/// then owned by the returned value.
pub fn inherited(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: F_GETFD only queries the descriptor table.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return None;
    }
    // SAFETY: F_SETFD on an open descriptor; then the caller's promise that nothing else owns `fd` makes this
    // the only owner.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        Some(OwnedFd::from_raw_fd(fd))
    }
}

/// Moves `fd` to descriptor number `at` (dup3, close-on-exec), closing `fd`. The descriptor at `at` then stays open
/// until the process exits or execs.
pub fn place_fd(fd: OwnedFd, at: RawFd) -> Result<()> {
    // SAFETY: dup3 onto a number this process reserves for the purpose; `fd` is open (owned).
    let rc = unsafe { libc::dup3(fd.as_raw_fd(), at, libc::O_CLOEXEC) };
    if rc < 0 {
        return Err(err("dup3", format!("{} to {at}", fd.as_raw_fd())));
    }
    Ok(())
}

/// A memfd holding `data`, positioned at its start (for the init's configuration).
pub fn memfd(name: &CStr, data: &[u8]) -> Result<OwnedFd> {
    crate::fdops::memfd_with(name, data).map_err(|source| SysError {
        call: "memfd_create",
        what: format!("{name:?}"),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ns::socketpair;

    #[test]
    fn descriptors_cross_a_socket() {
        let (a, b) = socketpair().unwrap();
        let m = memfd(c"t", b"hello").unwrap();
        send_fds(&a, &[1, 0, 1], &[m.as_raw_fd(), m.as_raw_fd()]).unwrap();
        let (tags, got) = recv_fds(b.as_raw_fd()).unwrap();
        assert_eq!(tags, [1, 0, 1]);
        assert_eq!(got.len(), 2);
        let mut s = String::new();
        use std::io::Read;
        std::fs::File::from(got.into_iter().next().unwrap()).read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello");
        send_fds(&a, &[], &[]).unwrap();
        let (tags, got) = recv_fds(b.as_raw_fd()).unwrap();
        assert!(tags.is_empty() && got.is_empty());
        drop(a);
        assert!(recv_fds(b.as_raw_fd()).is_err(), "a closed peer is an error, not an empty list");
    }

    #[test]
    fn too_many_descriptors_are_refused() {
        let (a, _b) = socketpair().unwrap();
        assert!(send_fds(&a, &[], &[0; MAX_FDS + 1]).is_err());
    }
}
