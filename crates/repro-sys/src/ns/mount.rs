//! The init's setup of its namespaces: host and domain names, the loopback interface, mounts, the pivot into
//! the new root, unshare.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;

use super::{check, cstr, Result};

pub fn sethostname(name: &str) -> Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    let rc = unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
    check(rc, "sethostname", || name.to_string()).map(|_| ())
}

pub fn setdomainname(name: &str) -> Result<()> {
    // SAFETY: the pointer and length describe `name`'s bytes.
    let rc = unsafe { libc::setdomainname(name.as_ptr().cast(), name.len()) };
    check(rc, "setdomainname", || name.to_string()).map(|_| ())
}

/// Brings a network interface up (`lo` in a new network namespace starts down).
pub fn interface_up(name: &str) -> Result<()> {
    // SAFETY: socket has no memory-safety preconditions.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(sock, "socket", || "AF_INET".into())?;
    // SAFETY: socket returned a new descriptor that we own.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in name.bytes().take(libc::IFNAMSIZ - 1).enumerate() {
        req.ifr_name[i] = b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads and fills the ifreq we pass.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) };
    check(rc, "ioctl(SIOCGIFFLAGS)", || name.into())?;
    // SAFETY: the kernel filled ifru_flags for SIOCGIFFLAGS.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads the ifreq we pass.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) };
    check(rc, "ioctl(SIOCSIFFLAGS)", || name.into()).map(|_| ())
}

/// Mount flags.
pub mod mflags {
    pub const BIND: u64 = libc::MS_BIND;
    pub const REC: u64 = libc::MS_REC;
    pub const PRIVATE: u64 = libc::MS_PRIVATE;
    pub const RDONLY: u64 = libc::MS_RDONLY;
    pub const REMOUNT: u64 = libc::MS_REMOUNT;
    pub const NOSUID: u64 = libc::MS_NOSUID;
    pub const NODEV: u64 = libc::MS_NODEV;
    pub const NOEXEC: u64 = libc::MS_NOEXEC;
}

/// mount(2).
pub fn mount(source: &str, target: &str, fstype: &str, flags: u64, data: Option<&str>) -> Result<()> {
    let (s, t, f) = (cstr(source), cstr(target), cstr(fstype));
    let d = data.map(cstr);
    // SAFETY: every pointer is a valid NUL-terminated string or null.
    let rc = unsafe {
        libc::mount(
            if source.is_empty() { ptr::null() } else { s.as_ptr() },
            t.as_ptr(),
            if fstype.is_empty() { ptr::null() } else { f.as_ptr() },
            flags as libc::c_ulong,
            d.as_ref().map_or(ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    check(rc, "mount", || format!("{fstype} {source} on {target}")).map(|_| ())
}

/// Makes a mount and everything below it read-only (mount_setattr with AT_RECURSIVE).
pub fn make_readonly_recursive(target: &str) -> Result<()> {
    use crate::idmap::MountAttr;
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const AT_RECURSIVE: libc::c_int = 0x8000;
    let t = cstr(target);
    let attr = MountAttr { attr_set: MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: valid path, valid attribute struct and its exact size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            t.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(rc as libc::c_int, "mount_setattr", || format!("{target} read-only, recursive")).map(|_| ())
}

/// umount2(2) with MNT_DETACH.
pub fn umount_detach(target: &str) -> Result<()> {
    let t = cstr(target);
    // SAFETY: valid path.
    let rc = unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    check(rc, "umount2", || target.into()).map(|_| ())
}

/// Makes `new_root` the root: `chdir(new_root); pivot_root(".", "."); umount2(".", MNT_DETACH); chdir("/")`.
pub fn pivot_into(new_root: &str) -> Result<()> {
    let r = cstr(new_root);
    let dot = cstr(".");
    // SAFETY: valid paths; pivot_root with the same directory twice stacks the old root on the new one,
    // which the detach then removes.
    unsafe {
        check(libc::chdir(r.as_ptr()), "chdir", || new_root.into())?;
        check(libc::syscall(libc::SYS_pivot_root, dot.as_ptr(), dot.as_ptr()) as libc::c_int, "pivot_root", || {
            new_root.into()
        })?;
        check(libc::umount2(dot.as_ptr(), libc::MNT_DETACH), "umount2", || "old root".into())?;
        check(libc::chdir(c"/".as_ptr()), "chdir", || "/".into())?;
    }
    Ok(())
}

/// unshare(2).
pub fn unshare(namespaces: i32) -> Result<()> {
    // SAFETY: unshare has no memory-safety preconditions.
    check(unsafe { libc::unshare(namespaces) }, "unshare", || format!("{namespaces:#x}")).map(|_| ())
}
