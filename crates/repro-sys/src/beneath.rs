//! Filling a directory with untrusted names without ever leaving it: every call takes a directory descriptor and
//! a single name component, and resolves it with openat2(2) and `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS`, so that neither a symbolic link (made by an earlier entry of the same archive, or by
//! someone racing us), nor `..`, nor an absolute name can take a write outside. Files are created with `O_EXCL`
//! and `O_NOFOLLOW`; nothing is ever opened by a joined path string.
//!
//! Safe code only (nix does the raw calls); it lives here so that every path-resolution decision of repro that
//! meets untrusted names sits in one place.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::{openat2, renameat2, OFlag, OpenHow, RenameFlags, ResolveFlag};
use nix::sys::stat::{fchmod, mkdirat, Mode};

fn errno(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// The resolution every name below a [`Beneath`] directory gets.
fn strict() -> ResolveFlag {
    ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS
}

/// Refuses anything that is not one plain name component (the kernel would refuse most of it too; this makes
/// the error clear and does not depend on it). Names are bytes: a name that is not UTF-8 is created as it is.
fn component<N: AsRef<OsStr> + ?Sized>(name: &N) -> io::Result<&OsStr> {
    let name = name.as_ref();
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) || b.len() > 255 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{}' is not a single name component", name.to_string_lossy()),
        ));
    }
    Ok(name)
}

/// Only the permission bits: setuid, setgid and sticky are never applied to what is extracted.
pub const PERMISSION_BITS: u32 = 0o777;

/// An open directory under which names are created and opened without following links.
#[derive(Debug)]
pub struct Beneath {
    fd: OwnedFd,
}

impl Beneath {
    /// Opens a directory the caller chose (a trusted path: links in it are followed, as any path argument).
    pub fn open(path: &Path) -> io::Result<Beneath> {
        let how = OpenHow::new().flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC);
        let fd = openat2(nix::fcntl::AT_FDCWD, path, how).map_err(errno)?;
        Ok(Beneath { fd })
    }

    /// The directory `name` below this one; created with `mode` (permission bits only) when `create` and it is
    /// missing. A symbolic link, a file or anything else in its place is an error (ELOOP, ENOTDIR).
    pub fn subdir<N: AsRef<OsStr> + ?Sized>(&self, name: &N, create: Option<u32>) -> io::Result<Beneath> {
        let name = component(name)?;
        if let Some(mode) = create {
            match mkdirat(self.fd.as_fd(), name, Mode::from_bits_truncate(mode & PERMISSION_BITS)) {
                Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                Err(e) => return Err(errno(e)),
            }
        }
        let how = OpenHow::new()
            .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
            .resolve(strict());
        let fd = openat2(self.fd.as_fd(), name, how).map_err(errno)?;
        Ok(Beneath { fd })
    }

    /// Creates the regular file `name` (it must not exist: `O_EXCL`) for writing, with `mode`'s permission bits
    /// set exactly (not masked by the umask; setuid, setgid and sticky dropped).
    pub fn create_file<N: AsRef<OsStr> + ?Sized>(&self, name: &N, mode: u32) -> io::Result<File> {
        let name = component(name)?;
        let how = OpenHow::new()
            .flags(OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
            .mode(Mode::from_bits_truncate(0o600))
            .resolve(strict());
        let fd = openat2(self.fd.as_fd(), name, how).map_err(errno)?;
        fchmod(fd.as_fd(), Mode::from_bits_truncate(mode & PERMISSION_BITS)).map_err(errno)?;
        Ok(File::from(fd))
    }

    /// Opens the regular file `name` for reading (not through a link).
    pub fn open_file<N: AsRef<OsStr> + ?Sized>(&self, name: &N) -> io::Result<File> {
        let name = component(name)?;
        let how = OpenHow::new().flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW).resolve(strict());
        let fd = openat2(self.fd.as_fd(), name, how).map_err(errno)?;
        let f = File::from(fd);
        if !f.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{}' is not a regular file", name.to_string_lossy()),
            ));
        }
        Ok(f)
    }

    /// Makes the symbolic link `name` (which must not exist) holding `target`. The link is only written, never
    /// followed by anything here.
    pub fn symlink<T: AsRef<OsStr> + ?Sized, N: AsRef<OsStr> + ?Sized>(&self, target: &T, name: &N) -> io::Result<()> {
        let name = component(name)?;
        let target = target.as_ref();
        if target.is_empty() || target.as_bytes().contains(&0) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty link target or one with a NUL byte"));
        }
        nix::unistd::symlinkat(target, self.fd.as_fd(), name).map_err(errno)
    }

    /// Moves `name` of this directory to `to_name` in `to`, refusing to replace anything there.
    pub fn rename_noreplace<N: AsRef<OsStr> + ?Sized, M: AsRef<OsStr> + ?Sized>(
        &self,
        name: &N,
        to: &Beneath,
        to_name: &M,
    ) -> io::Result<()> {
        let (name, to_name) = (component(name)?, component(to_name)?);
        renameat2(self.fd.as_fd(), name, to.fd.as_fd(), to_name, RenameFlags::RENAME_NOREPLACE).map_err(errno)
    }

    /// Sets the access and modification times of `name` (a link itself, never what it points to) to `ns`
    /// nanoseconds since the Unix epoch.
    pub fn set_times<N: AsRef<OsStr> + ?Sized>(&self, name: &N, ns: i64) -> io::Result<()> {
        use nix::sys::stat::{utimensat, UtimensatFlags};
        let name = component(name)?;
        let t = nix::sys::time::TimeSpec::new(ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000));
        utimensat(self.fd.as_fd(), name, &t, &t, UtimensatFlags::NoFollowSymlink).map_err(errno)
    }

    /// Sets this directory's permission bits (setuid, setgid and sticky dropped).
    pub fn chmod(&self, mode: u32) -> io::Result<()> {
        fchmod(self.fd.as_fd(), Mode::from_bits_truncate(mode & PERMISSION_BITS)).map_err(errno)
    }

    /// Free bytes and free inodes (for an unprivileged user) of the filesystem holding this directory; the inode
    /// count is `None` on filesystems that do not count them.
    pub fn free_space(&self) -> io::Result<(u64, Option<u64>)> {
        let s = nix::sys::statvfs::fstatvfs(self.fd.as_fd()).map_err(errno)?;
        let bytes = (s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64);
        let inodes = (s.files() != 0).then_some(s.files_available() as u64);
        Ok((bytes, inodes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn never_follows_a_link_out() {
        let d = tempfile_dir();
        let outside = d.join("outside");
        std::fs::create_dir(&outside).unwrap();
        let inside = d.join("inside");
        std::fs::create_dir(&inside).unwrap();
        std::os::unix::fs::symlink(&outside, inside.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), inside.join("flink")).unwrap();
        let b = Beneath::open(&inside).unwrap();
        assert!(b.subdir("link", Some(0o755)).is_err(), "a link to a directory is not entered");
        assert!(b.create_file("flink", 0o644).is_err(), "a dangling link is not created through");
        assert!(b.open_file("flink").is_err());
        for bad in ["..", "a/b", "/etc", "", "."] {
            assert!(b.subdir(bad, Some(0o755)).is_err(), "{bad}");
            assert!(b.create_file(bad, 0o644).is_err(), "{bad}");
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing was written outside");
        let mut f = b.create_file("x", 0o4755).unwrap();
        f.write_all(b"hi").unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(inside.join("x")).unwrap().permissions().mode() & 0o7777, 0o755);
        assert_eq!(b.create_file("x", 0o644).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        let sub = b.subdir("s", Some(0o2755)).unwrap();
        sub.chmod(0o1777).unwrap();
        assert_eq!(std::fs::metadata(inside.join("s")).unwrap().permissions().mode() & 0o7777, 0o777);
        b.rename_noreplace("x", &sub, "y").unwrap();
        assert!(inside.join("s/y").is_file());
        assert!(b.free_space().unwrap().0 > 0);
        // Names are bytes: one that is not UTF-8 is created exactly; one with '/' or NUL is refused.
        let raw = OsStr::from_bytes(b"n\xffm");
        b.create_file(raw, 0o644).unwrap();
        b.subdir(OsStr::from_bytes(b"d\xfe"), Some(0o755)).unwrap();
        assert!(inside.join(raw).is_file() && inside.join(OsStr::from_bytes(b"d\xfe")).is_dir());
        for bad in [&b"a/\xff"[..], b"\xff\0", b".."] {
            assert!(b.create_file(OsStr::from_bytes(bad), 0o644).is_err(), "{bad:?}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("repro-beneath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        d
    }
}
