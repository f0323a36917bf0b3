//! statfs/fstatfs: the real call made by the supervisor on the guest's behalf, then the figures replaced by the
//! controller's ([`repro_detcore::statfs`]): the run's disk limit for writable file systems, fixed ones for
//! read-only ones.

use std::ffi::CString;

use repro_detcore::statfs::StatfsFigures;
use repro_sys::fdops;

use crate::guest::{guest_path, Guest};
use crate::reply::Outcome;
use crate::state::Shared;

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The words of a `struct statfs` (x86_64/aarch64: eleven 8-byte fields, `f_fsid` being two ints, then spares).
const FIELDS: usize = 11;

fn parse(b: &[u8; 120]) -> StatfsFigures {
    let w = |i: usize| {
        u64::from_le_bytes([
            b[i * 8],
            b[i * 8 + 1],
            b[i * 8 + 2],
            b[i * 8 + 3],
            b[i * 8 + 4],
            b[i * 8 + 5],
            b[i * 8 + 6],
            b[i * 8 + 7],
        ])
    };
    StatfsFigures {
        fs_type: w(0),
        bsize: w(1),
        blocks: w(2),
        bfree: w(3),
        bavail: w(4),
        files: w(5),
        ffree: w(6),
        fsid: w(7),
        namelen: w(8),
        frsize: w(9),
        flags: w(10),
    }
}

fn bytes(f: StatfsFigures) -> [u8; 120] {
    let words: [u64; FIELDS] =
        [f.fs_type, f.bsize, f.blocks, f.bfree, f.bavail, f.files, f.ffree, f.fsid, f.namelen, f.frsize, f.flags];
    let mut b = [0u8; 120];
    for (i, w) in words.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    b
}

/// statfs(path, buf) (`path` Some) or fstatfs(fd, buf).
pub(crate) fn statfs<G: Guest>(sh: &mut Shared, g: &mut G, path: Option<u64>, fd: i32, buf: u64) -> Outcome {
    let file = match path {
        Some(addr) => {
            let p = g.read_cstr(addr, 4096)?;
            if p.is_empty() {
                return Err(libc::ENOENT.into());
            }
            let p = guest_path(&p, g.tid());
            let dir = if p.first() == Some(&b'/') { None } else { Some(g.dir_fd(libc::AT_FDCWD)?) };
            let c = CString::new(p).map_err(|_| libc::EINVAL)?;
            fdops::openat(dir.as_ref(), &c, libc::O_PATH | libc::O_CLOEXEC).map_err(|e| errno_of(&e))?
        }
        None => g.borrow_fd(fd)?,
    };
    let real = fdops::fstatfs_raw(&file).map_err(|e| errno_of(&e))?;
    let view = sh.ctl.statfs_view(parse(&real), sh.disk);
    if !g.still_waiting() {
        return Err(libc::EINTR.into());
    }
    g.write_bytes(buf, &bytes(view))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::shared;
    use crate::reply::Reply;

    #[test]
    fn statfs_reports_the_controllers_figures() {
        let d = tempfile::tempdir().unwrap();
        let mut sh = shared(1, 1000);
        sh.disk = repro_detcore::statfs::DiskLimit { bytes: 1 << 30, inodes: 5000 };
        let mut g = FakeGuest::new(3);
        let c = CString::new(d.path().as_os_str().as_encoded_bytes()).unwrap();
        let mut path = c.as_bytes_with_nul().to_vec();
        path.resize(path.len().max(8), 0);
        g.put(0x100, &path).map(0x1000, 120).map(0x2000, 120);
        g.fds.insert(4, fdops::openat(None, &c, libc::O_RDONLY).unwrap());
        let nr = libc::SYS_statfs;
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0x100, 0x1000, 0, 0, 0, 0])), Reply::Value(0)));
        let nr = libc::SYS_fstatfs;
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [4, 0x2000, 0, 0, 0, 0])), Reply::Value(0)));
        let a: [u8; 120] = g.get(0x1000, 120).try_into().unwrap();
        let b: [u8; 120] = g.get(0x2000, 120).try_into().unwrap();
        let (a, b) = (parse(&a), parse(&b));
        assert_eq!(a.bsize, 4096);
        assert_eq!(a.fsid, 0, "the host's fsid does not show");
        assert_eq!((a.blocks, a.files), ((1 << 30) / 4096, 5000), "a writable temp dir has the disk limit");
        assert_eq!((a.fs_type, a.blocks), (b.fs_type, b.blocks));
        assert_eq!(sh.stats.mediated["fstatfs"], 1);
        // Missing, bad descriptor, unwritable buffer.
        g.put(0x300, b"/nonexistent-repro\0");
        assert!(matches!(
            dispatch(&mut sh, &mut g, libc::SYS_statfs, decode(libc::SYS_statfs, [0x300, 0x1000, 0, 0, 0, 0])),
            Reply::Error(libc::ENOENT)
        ));
        assert!(matches!(
            dispatch(&mut sh, &mut g, nr, decode(nr, [9, 0x2000, 0, 0, 0, 0])),
            Reply::Error(libc::EBADF)
        ));
        assert!(matches!(
            dispatch(&mut sh, &mut g, nr, decode(nr, [4, 0x9000, 0, 0, 0, 0])),
            Reply::Error(libc::EFAULT)
        ));
    }
}
