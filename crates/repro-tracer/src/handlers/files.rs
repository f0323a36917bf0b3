//! Files and directories: directory order (getdents64), generated files (open of /dev/urandom, /proc/cpuinfo...),
//! and the identity and times the stat family reports.

use std::ffi::CString;

use repro_detcore::controller::VirtualFile;
use repro_detcore::{DirListing, FileIdentity, FileTimes, Timespec, URANDOM_BYTES};
use repro_sys::fdops;

use crate::decode::{self, StatOut};
use crate::guest::{guest_path, Guest};
use crate::reply::{Outcome, Reply};
use crate::state::Shared;

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// getdents64: the whole directory is read once at position 0, ordered, then served from the cache; the
/// position of the guest's open file description is the index of the next entry.
pub(crate) fn getdents64<G: Guest>(sh: &mut Shared, g: &mut G, fd: i32, dirp: u64, count: usize) -> Outcome {
    sh.ctl.note_event();
    let dir = g.borrow_fd(fd)?;
    let st = fdops::newfstatat_raw(Some(&dir), c"", libc::AT_EMPTY_PATH).map_err(|e| errno_of(&e))?;
    let mode = u32::from_le_bytes([st[24], st[25], st[26], st[27]]);
    if mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR.into());
    }
    let dev = u64::from_le_bytes(st[0..8].try_into().map_err(|_| libc::EIO)?);
    let ino = u64::from_le_bytes(st[8..16].try_into().map_err(|_| libc::EIO)?);
    let pos = fdops::lseek(&dir, 0, libc::SEEK_CUR).map_err(|e| errno_of(&e))?.max(0) as u64;
    let key = (dev, ino);
    if pos == 0 || !sh.dirs.contains_key(&key) {
        fdops::lseek(&dir, 0, libc::SEEK_SET).map_err(|e| errno_of(&e))?;
        let mut entries = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = fdops::getdents64(&dir, &mut buf).map_err(|e| errno_of(&e))?;
            if n == 0 {
                break;
            }
            DirListing::parse_dirents(&buf[..n], &mut entries);
        }
        let order = sh.ctl.dir_order;
        sh.dirs.insert(key, DirListing::new_ordered(entries, order));
    }
    let Shared { dirs, ctl, .. } = sh;
    let listing = dirs.get(&key).ok_or(libc::EIO)?;
    let (out, next) =
        listing.serve(pos, count, |e| ctl.inodes.inode(FileIdentity { dev, ino: e.ino })).map_err(|e| e.errno())?;
    if out.is_empty() {
        dirs.remove(&key);
    }
    g.write_bytes(dirp, &out)?;
    fdops::lseek(&dir, next as i64, libc::SEEK_SET).map_err(|e| errno_of(&e))?;
    Ok(out.len() as i64)
}

/// openat/open: generated files are served from a memfd installed with ADDFD; /proc and /sys files go to the
/// /proc tape when it runs; others run natively. Only absolute paths are matched.
pub(crate) fn open<G: Guest>(sh: &mut Shared, g: &mut G, nr: i64, path: u64, flags: i32) -> Reply {
    let Ok(p) = g.read_cstr(path, 4096) else { return Reply::Continue };
    let Some(vf) = VirtualFile::for_path(&p) else {
        if let Some(r) = super::procfs::open(sh, g, nr, &p, flags) {
            return r;
        }
        if let Some(r) = super::proc_tape::proc_open(sh, g, &p, flags) {
            return r;
        }
        if flags & libc::O_ACCMODE == libc::O_RDONLY && crate::rdrand::is_library(&p) {
            crate::rdrand::check_library(sh, &guest_path(&p, g.tid()));
        }
        sh.stats.continued += 1;
        return Reply::Continue;
    };
    if !vf.serves(flags) {
        return Reply::Continue;
    }
    if !g.still_waiting() {
        return Reply::Error(libc::EINTR);
    }
    let data = sh.ctl.virtual_file(g.tid(), vf, URANDOM_BYTES);
    sh.count(decode::name(nr));
    let name = CString::new(format!("repro:{}", String::from_utf8_lossy(&p))).unwrap_or_else(|_| c"repro".into());
    match fdops::memfd_with(&name, &data) {
        Ok(fd) => Reply::AddFd { fd, cloexec: flags & libc::O_CLOEXEC != 0 },
        Err(e) => Reply::Error(errno_of(&e)),
    }
}

/// The stat family: the real call made by the supervisor on the guest's behalf, then the device, inode and
/// times replaced by the controller's view of them.
pub(crate) fn stat<G: Guest>(
    sh: &mut Shared,
    g: &mut G,
    dirfd: i32,
    path: Option<u64>,
    flags: i32,
    out: StatOut,
) -> Outcome {
    let tid = g.tid();
    let p = match path {
        Some(addr) => g.read_cstr(addr, 4096)?,
        None => Vec::new(),
    };
    if p.is_empty() && flags & libc::AT_EMPTY_PATH == 0 {
        return Err(libc::ENOENT.into());
    }
    let p = guest_path(&p, tid);
    let dir = if p.first() == Some(&b'/') { None } else { Some(g.dir_fd(dirfd)?) };
    let cpath = CString::new(p).map_err(|_| libc::EINVAL)?;
    if !g.still_waiting() {
        return Err(libc::EINTR.into());
    }
    let flags = flags & (libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH | libc::AT_NO_AUTOMOUNT);
    match out {
        StatOut::Stat(buf) => {
            let mut st = fdops::newfstatat_raw(dir.as_ref(), &cpath, flags).map_err(|e| errno_of(&e))?;
            rewrite_stat(sh, &mut st);
            g.write_bytes(buf, &st)?;
            Ok(0)
        }
        StatOut::Statx(buf, mask) => {
            let sync = 0; // AT_STATX_SYNC_AS_STAT
            let mut sx =
                fdops::statx_raw(dir.as_ref(), &cpath, flags | sync, mask | 0xfff).map_err(|e| errno_of(&e))?;
            rewrite_statx(sh, &mut sx);
            g.write_bytes(buf, &sx)?;
            Ok(0)
        }
    }
}

/// The controller's view of a file: device, inode and times.
fn view(sh: &mut Shared, id: FileIdentity, times: FileTimes, mode: u32) -> (u64, u64, FileTimes) {
    let origin = sh.file_origin(id.dev, id.ino);
    sh.ctl.stat_view(id, times, mode & libc::S_IFMT, origin)
}

/// Rewrites a `struct stat` in place.
fn rewrite_stat(sh: &mut Shared, st: &mut [u8; 144]) {
    let word = |b: &[u8], o: usize| {
        i64::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3], b[o + 4], b[o + 5], b[o + 6], b[o + 7]])
    };
    let id = FileIdentity { dev: word(st, 0) as u64, ino: word(st, 8) as u64 };
    let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
    let times = FileTimes {
        atime: ns(word(st, 72), word(st, 80)),
        mtime: ns(word(st, 88), word(st, 96)),
        ctime: ns(word(st, 104), word(st, 112)),
    };
    let mode = u32::from_le_bytes([st[24], st[25], st[26], st[27]]);
    let (vdev, vino, t) = view(sh, id, times, mode);
    st[0..8].copy_from_slice(&vdev.to_le_bytes());
    st[8..16].copy_from_slice(&vino.to_le_bytes());
    for (off, v) in [(72, t.atime), (88, t.mtime), (104, t.ctime)] {
        let ts = Timespec::from_ns(v);
        st[off..off + 8].copy_from_slice(&ts.sec.to_le_bytes());
        st[off + 8..off + 16].copy_from_slice(&ts.nsec.to_le_bytes());
    }
}

/// Rewrites a `struct statx` in place.
fn rewrite_statx(sh: &mut Shared, sx: &mut [u8; 256]) {
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |b: &[u8], o: usize| u64::from(u32_at(b, o)) | u64::from(u32_at(b, o + 4)) << 32;
    let dev = libc::makedev(u32_at(sx, 136), u32_at(sx, 140));
    let id = FileIdentity { dev, ino: u64_at(sx, 32) };
    let ts = |o: usize| u64_at(sx, o) as i64 as i128 * 1_000_000_000 + u32_at(sx, o + 8) as i128;
    let times = FileTimes { atime: ts(64), mtime: ts(112), ctime: ts(96) };
    let btime = ts(80);
    let mode = u16::from_le_bytes([sx[28], sx[29]]) as u32;
    let (vdev, vino, t) = view(sh, id, times, mode);
    let origin = sh.file_origin(id.dev, id.ino);
    let vbtime = sh.ctl.birth_time(id, btime, times, origin, t.ctime);
    sx[32..40].copy_from_slice(&vino.to_le_bytes());
    sx[136..140].copy_from_slice(&0u32.to_le_bytes());
    sx[140..144].copy_from_slice(&(vdev as u32).to_le_bytes());
    for (off, v) in [(64, t.atime), (80, vbtime), (96, t.ctime), (112, t.mtime)] {
        let ts = Timespec::from_ns(v);
        sx[off..off + 8].copy_from_slice(&ts.sec.to_le_bytes());
        sx[off + 8..off + 12].copy_from_slice(&(ts.nsec as u32).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;

    use super::*;
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::shared;

    fn dir_fd(p: &std::path::Path) -> OwnedFd {
        let c = CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        fdops::openat(None, &c, libc::O_RDONLY | libc::O_DIRECTORY).unwrap()
    }

    /// Names of a getdents64 buffer.
    fn names(buf: &[u8]) -> Vec<String> {
        let mut v = Vec::new();
        let mut entries = Vec::new();
        DirListing::parse_dirents(buf, &mut entries);
        for e in entries {
            v.push(String::from_utf8_lossy(&e.name).into_owned());
        }
        v
    }

    #[test]
    fn getdents64_lists_in_the_controllers_order() {
        let d = tempfile::tempdir().unwrap();
        for n in ["zeta", "alpha", "mid"] {
            std::fs::write(d.path().join(n), n).unwrap();
        }
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(3);
        g.fds.insert(5, dir_fd(d.path()));
        g.map(0x1000, 4096);
        let nr = libc::SYS_getdents64;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [5, 0x1000, 4096, 0, 0, 0]));
        let Reply::Value(n) = r else { panic!("{r:?}") };
        assert_eq!(names(&g.get(0x1000, n as usize)), [".", "..", "alpha", "mid", "zeta"]);
        // The end of the listing, then EBADF and ENOTDIR.
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [5, 0x1000, 4096, 0, 0, 0])), Reply::Value(0)));
        assert!(matches!(
            dispatch(&mut sh, &mut g, nr, decode(nr, [6, 0x1000, 4096, 0, 0, 0])),
            Reply::Error(libc::EBADF)
        ));
        let f = std::fs::File::open(d.path().join("mid")).unwrap();
        g.fds.insert(6, f.into());
        assert!(matches!(
            dispatch(&mut sh, &mut g, nr, decode(nr, [6, 0x1000, 4096, 0, 0, 0])),
            Reply::Error(libc::ENOTDIR)
        ));
    }

    #[test]
    fn stat_reports_the_controllers_identity() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), "x").unwrap();
        std::fs::write(d.path().join("b"), "y").unwrap();
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(3);
        g.cwd = Some(dir_fd(d.path()));
        g.put(0x100, b"a\0").put(0x200, b"b\0").map(0x1000, 144).map(0x2000, 144).map(0x3000, 256);
        let nr = libc::SYS_stat;
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x100, 0x1000, 0, 0, 0, 0])), Reply::Value(0)));
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x200, 0x2000, 0, 0, 0, 0])), Reply::Value(0)));
        let (a, b) = (g.get(0x1000, 144), g.get(0x2000, 144));
        let word = |s: &[u8], o: usize| u64::from_le_bytes(s[o..o + 8].try_into().unwrap());
        assert_eq!(word(&a, 0), word(&b, 0), "one virtual device");
        assert_eq!(word(&b, 8), word(&a, 8) + 1, "inodes numbered in order of first sight");
        assert_eq!(word(&a, 48), 1, "the size is the real one");
        // statx agrees with stat on the inode.
        let r = dispatch(
            &mut sh,
            &mut g,
            libc::SYS_statx,
            decode(libc::SYS_statx, [libc::AT_FDCWD as u32 as u64, 0x100, 0, 0x7ff, 0x3000, 0]),
        );
        assert!(matches!(r, Reply::Value(0)));
        assert_eq!(word(&g.get(0x3000, 256), 32), word(&a, 8));
        // A missing file and an interrupted call.
        g.put(0x300, b"nope\0");
        assert!(matches!(
            dispatch(&mut sh, &mut g, nr, decode(nr, [0x300, 0x1000, 0, 0, 0, 0])),
            Reply::Error(libc::ENOENT)
        ));
        g.interrupted = true;
        assert!(matches!(
            dispatch(&mut sh, &mut g, nr, decode(nr, [0x100, 0x1000, 0, 0, 0, 0])),
            Reply::Error(libc::EINTR)
        ));
    }

    #[test]
    fn generated_files_are_served_and_others_run_natively() {
        let mut sh = shared(1, 1000);
        let mut g = FakeGuest::new(3);
        g.put(0x100, b"/proc/cpuinfo\0").put(0x200, b"/etc/passwd\0");
        let nr = libc::SYS_openat;
        let at = libc::AT_FDCWD as u32 as u64;
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [at, 0x100, libc::O_CLOEXEC as u64, 0, 0, 0]));
        let Reply::AddFd { fd, cloexec: true } = r else { panic!("{r:?}") };
        let text = std::io::read_to_string(std::fs::File::from(fd)).unwrap();
        assert_eq!(text.matches("processor").count(), 2, "two CPUs: {text}");
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [at, 0x200, 0, 0, 0, 0])), Reply::Continue));
        assert_eq!(sh.stats.mediated["openat"], 1);
    }
}
