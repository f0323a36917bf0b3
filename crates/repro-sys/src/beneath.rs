//! Filling a directory with untrusted names without ever leaving it: every call takes a directory descriptor and
//! a single name component, and resolves it with openat2(2) and `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS`, so that neither a symbolic link (made by an earlier entry of the same archive, or by
//! someone racing us), nor `..`, nor an absolute name can take a write outside. Files are created with `O_EXCL`
//! and `O_NOFOLLOW`; nothing is ever opened by a joined path string.
//!
//! Safe code only (nix does the raw calls); it lives here so that every path-resolution decision of repro that
//! meets untrusted names sits in one place.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use nix::fcntl::{openat2, renameat, renameat2, OFlag, OpenHow, RenameFlags, ResolveFlag};
use nix::sys::stat::{fchmod, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

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

pub use repro_model::run::FileKind;

/// An entry's status, never its target's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub kind: FileKind,
    /// Permission bits with setuid, setgid and sticky (`st_mode & 0o7777`).
    pub mode: u32,
    /// Logical size in bytes.
    pub size: u64,
    /// Bytes the filesystem holds for it (`st_blocks * 512`: a sparse file's holes take none).
    pub allocated: u64,
    /// Device number of a device node (0 otherwise; a whiteout of overlayfs is a character device 0/0).
    pub rdev: u64,
    /// The device and inode number of the entry itself (which file it is, for loops).
    pub dev: u64,
    pub ino: u64,
}

impl Stat {
    /// An overlayfs whiteout (a deletion in an upper layer): a character device with device number 0/0.
    pub fn is_whiteout(&self) -> bool {
        self.kind == FileKind::CharDevice && self.rdev == 0
    }

    fn from(st: &nix::sys::stat::FileStat) -> Stat {
        let fmt = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
        let kind = match fmt {
            SFlag::S_IFDIR => FileKind::Dir,
            SFlag::S_IFLNK => FileKind::Symlink,
            SFlag::S_IFIFO => FileKind::Fifo,
            SFlag::S_IFSOCK => FileKind::Socket,
            SFlag::S_IFCHR => FileKind::CharDevice,
            SFlag::S_IFBLK => FileKind::BlockDevice,
            _ => FileKind::File,
        };
        Stat {
            kind,
            mode: st.st_mode & 0o7777,
            size: st.st_size.max(0) as u64,
            allocated: (st.st_blocks.max(0) as u64).saturating_mul(512),
            rdev: st.st_rdev,
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// An open directory under which names are created and opened without following links.
#[derive(Debug)]
pub struct Beneath {
    fd: OwnedFd,
}

impl AsFd for Beneath {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What a path leads to once its symbolic links are followed ([`Beneath::open_following`]).
#[derive(Debug)]
pub enum Followed {
    Dir(Beneath),
    /// A regular file, open for reading.
    File(File),
    /// Anything else (a fifo, socket or device node): never opened.
    Other,
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

    /// Opens the relative path `rel` below this directory, following symbolic links only while they stay below
    /// it (openat2 `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`): a link that climbs out with `..` or is absolute
    /// is an error (EXDEV), as is `rel` itself when absolute. The path is first opened `O_PATH` and checked with
    /// fstat; a regular file is then reopened for reading through that descriptor (`/proc/self/fd`), so a fifo
    /// or a device node is never opened, even one swapped in meanwhile.
    pub fn open_following(&self, rel: &Path) -> io::Result<(Stat, Followed)> {
        if rel.is_absolute() || rel.as_os_str().is_empty() || rel.as_os_str().as_bytes().contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{}' is not a relative path", rel.display()),
            ));
        }
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let fd = openat2(self.fd.as_fd(), rel, how).map_err(errno)?;
        let st = Stat::from(&nix::sys::stat::fstat(fd.as_fd()).map_err(errno)?);
        let followed = match st.kind {
            FileKind::Dir => {
                let how = OpenHow::new()
                    .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
                    .resolve(strict());
                Followed::Dir(Beneath { fd: openat2(fd.as_fd(), ".", how).map_err(errno)? })
            }
            FileKind::File => {
                let again = format!("/proc/self/fd/{}", fd.as_raw_fd());
                let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
                let f = File::from(nix::fcntl::open(again.as_str(), flags, Mode::empty()).map_err(errno)?);
                let now = Stat::from(&nix::sys::stat::fstat(f.as_fd()).map_err(errno)?);
                if now.kind != FileKind::File || (now.dev, now.ino) != (st.dev, st.ino) {
                    return Err(io::Error::other(format!("'{}' changed while opened", rel.display())));
                }
                Followed::File(f)
            }
            _ => Followed::Other,
        };
        Ok((st, followed))
    }

    /// This directory again, through a descriptor of its own.
    pub fn subdir_self(&self) -> io::Result<Beneath> {
        let how = OpenHow::new()
            .flags(OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
            .resolve(strict());
        let fd = openat2(self.fd.as_fd(), ".", how).map_err(errno)?;
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

    /// Opens the regular file `name` for reading (not through a link). Opened with `O_NONBLOCK` and checked with
    /// fstat afterwards, so that a fifo put in its place neither blocks the open nor is read.
    pub fn open_file<N: AsRef<OsStr> + ?Sized>(&self, name: &N) -> io::Result<File> {
        let name = component(name)?;
        let how = OpenHow::new()
            .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY)
            .resolve(strict());
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

    /// Creates a new regular file under an unpredictable name (`.repro-tmp-` and 128 random bits, `O_EXCL`,
    /// `O_NOFOLLOW`: a link or anything else already there under that name is never opened), mode 0600. Returns
    /// the name with the file; the caller renames it into place ([`Beneath::rename_replace`]) or removes it.
    pub fn create_temp(&self) -> io::Result<(OsString, File)> {
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..16 {
            let name = temp_name()?;
            match self.create_file(&name, 0o600) {
                Ok(f) => return Ok((name, f)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// Makes the symbolic link `name` holding `target`, replacing (never following) a file or link there: made
    /// under an unpredictable name first, then renamed over `name`.
    pub fn symlink_replace<T: AsRef<OsStr> + ?Sized, N: AsRef<OsStr> + ?Sized>(
        &self,
        target: &T,
        name: &N,
    ) -> io::Result<()> {
        let name = component(name)?;
        let mut tries = 0;
        let tmp = loop {
            let tmp = temp_name()?;
            match self.symlink(target, &tmp) {
                Ok(()) => break tmp,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 16 => tries += 1,
                Err(e) => return Err(e),
            }
        };
        self.rename_replace(&tmp, self, name).inspect_err(|_| {
            let _ = self.remove(&tmp, false);
        })
    }

    /// Makes the fifo `name` (which must not exist) with `mode`'s permission bits; it is never opened here.
    pub fn mkfifo<N: AsRef<OsStr> + ?Sized>(&self, name: &N, mode: u32) -> io::Result<()> {
        let name = component(name)?;
        nix::unistd::mkfifoat(self.fd.as_fd(), name, Mode::from_bits_truncate(mode & PERMISSION_BITS)).map_err(errno)
    }

    /// The status of `name` itself (a link is not followed).
    pub fn stat<N: AsRef<OsStr> + ?Sized>(&self, name: &N) -> io::Result<Stat> {
        let name = component(name)?;
        let st = fstatat(self.fd.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno)?;
        Ok(Stat::from(&st))
    }

    /// The status of this directory.
    pub fn stat_self(&self) -> io::Result<Stat> {
        let st = nix::sys::stat::fstat(self.fd.as_fd()).map_err(errno)?;
        Ok(Stat::from(&st))
    }

    /// The names in this directory (without `.` and `..`), sorted by their bytes; at most `max` of them (more is
    /// an error: a listing is never unbounded).
    pub fn list(&self, max: usize) -> io::Result<Vec<OsString>> {
        let mut dir = nix::dir::Dir::openat(
            self.fd.as_fd(),
            ".",
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .map_err(errno)?;
        let mut names = Vec::new();
        for e in dir.iter() {
            let e = e.map_err(errno)?;
            let b = e.file_name().to_bytes();
            if b == b"." || b == b".." {
                continue;
            }
            if names.len() >= max {
                return Err(io::Error::other(format!("more than {max} entries in one directory")));
            }
            names.push(OsString::from_vec(b.to_vec()));
        }
        names.sort();
        Ok(names)
    }

    /// The target of the symbolic link `name` (read, never followed).
    pub fn read_link<N: AsRef<OsStr> + ?Sized>(&self, name: &N) -> io::Result<OsString> {
        let name = component(name)?;
        nix::fcntl::readlinkat(self.fd.as_fd(), name).map_err(errno)
    }

    /// Removes `name` (an empty directory when `dir`, anything but a directory otherwise; a link itself).
    pub fn remove<N: AsRef<OsStr> + ?Sized>(&self, name: &N, dir: bool) -> io::Result<()> {
        let name = component(name)?;
        let flag = if dir { UnlinkatFlags::RemoveDir } else { UnlinkatFlags::NoRemoveDir };
        unlinkat(self.fd.as_fd(), name, flag).map_err(errno)
    }

    /// Moves `name` of this directory to `to_name` in `to`, replacing a file or link there (a link is replaced,
    /// not followed; a directory there is an error).
    pub fn rename_replace<N: AsRef<OsStr> + ?Sized, M: AsRef<OsStr> + ?Sized>(
        &self,
        name: &N,
        to: &Beneath,
        to_name: &M,
    ) -> io::Result<()> {
        let (name, to_name) = (component(name)?, component(to_name)?);
        renameat(self.fd.as_fd(), name, to.fd.as_fd(), to_name).map_err(errno)
    }

    /// An extended attribute of this directory (for overlayfs' `trusted.overlay.opaque`), at most 64 bytes.
    pub fn get_xattr(&self, attr: &str) -> Option<Vec<u8>> {
        let attr = std::ffi::CString::new(attr).ok()?;
        let mut buf = [0u8; 64];
        // SAFETY: a descriptor we hold, a NUL-terminated name, and a buffer with its length.
        let rc = unsafe { libc::fgetxattr(self.fd.as_raw_fd(), attr.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        (rc >= 0).then(|| buf[..rc as usize].to_vec())
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

/// `.repro-tmp-` and 32 random hex digits.
fn temp_name() -> io::Result<OsString> {
    let mut r = [0u8; 16];
    getrandom::fill(&mut r).map_err(|e| io::Error::other(format!("no random bytes for a temporary name: {e}")))?;
    let hex: String = r.iter().map(|b| format!("{b:02x}")).collect();
    Ok(OsString::from(format!(".repro-tmp-{hex}")))
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
