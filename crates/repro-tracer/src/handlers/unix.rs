//! connect() to a pathname UNIX socket: only sockets on a writable mount of the sandbox are reachable (those the
//! guest made itself, in its working directory's layer, /tmp, /home or /dev/shm, and those of a `--bind ...:rw`
//! the user granted). A socket of a host daemon on the read-only host tree (a 0666 socket under /var/tmp, /srv...)
//! answers EACCES, as a socket without write permission does: a read-only bind alone does not stop connect.
//!
//! The check is made on the path the guest passed, then the call runs natively on the same path: another thread
//! of the guest that rewrites the path between the two could still reach a host socket (docs/security.md says
//! so). Abstract sockets live in the guest's own network namespace and are not looked at.

use std::ffi::CString;

use repro_sys::fdops;

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

/// connect(fd, addr, len): `Some(EACCES)` for a pathname socket on a read-only mount, `None` to go on.
pub(crate) fn connect<G: Guest>(g: &mut G, addr: u64, len: u32) -> Option<Outcome> {
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
