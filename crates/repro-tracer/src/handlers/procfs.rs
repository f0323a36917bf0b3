//! The per-process /proc files whose figures vary (`/proc/PID/stat`, `status`, `statm`): the supervisor reads
//! the real file for the guest and serves the controller's rewrite of it ([`repro_detcore::procfs`]) from a memfd.

use std::ffi::CString;

use repro_detcore::procfs::PidFile;
use repro_sys::{fdops, net};

use crate::decode;
use crate::guest::{guest_path, Guest};
use crate::reply::Reply;
use crate::state::Shared;

/// The most bytes read of one such file (a status file is about 1.5 KiB).
const MAX: usize = 1 << 16;

/// openat of a pinned per-process /proc file; `None` lets the open go on as usual (another file, a write, or a
/// file that cannot be read: the native open reports why).
pub(crate) fn open<G: Guest>(sh: &mut Shared, g: &mut G, nr: i64, path: &[u8], flags: i32) -> Option<Reply> {
    let f = PidFile::for_path(path)?;
    if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_DIRECTORY | libc::O_PATH) != 0 {
        return None;
    }
    let c = CString::new(guest_path(path, g.tid())).ok()?;
    let fd = fdops::openat(None, &c, libc::O_RDONLY | libc::O_CLOEXEC).ok()?;
    let mut real = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        match net::read(&fd, &mut buf) {
            Ok(0) => break,
            Ok(k) => real.extend_from_slice(&buf[..k]),
            Err(_) => return None,
        }
        if real.len() > MAX {
            return None;
        }
    }
    let data = sh.ctl.proc_pid_file(f, &real);
    if !g.still_waiting() {
        return Some(Reply::Error(libc::EINTR));
    }
    sh.count(decode::name(nr));
    let name = CString::new(format!("repro:{}", String::from_utf8_lossy(path))).unwrap_or_else(|_| c"repro".into());
    Some(match fdops::memfd_with(&name, &data) {
        Ok(fd) => Reply::AddFd { fd, cloexec: flags & libc::O_CLOEXEC != 0 },
        Err(e) => Reply::Error(e.raw_os_error().unwrap_or(libc::EIO)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::shared;

    fn read_served(r: Reply) -> String {
        let Reply::AddFd { fd, .. } = r else { panic!("{r:?}") };
        std::io::read_to_string(std::fs::File::from(fd)).unwrap()
    }

    #[test]
    fn stat_and_status_of_a_task_are_pinned() {
        let mut sh = shared(1, 1000);
        // This test process plays the guest task: its /proc files are real.
        let mut g = FakeGuest::new(std::process::id() as i32);
        g.put(0x100, b"/proc/self/stat\0").put(0x200, b"/proc/self/status\0").put(0x300, b"/proc/self/statm\0");
        let nr = libc::SYS_openat;
        let at = libc::AT_FDCWD as u32 as u64;
        let stat = read_served(dispatch(&mut sh, &mut g, nr, decode(nr, [at, 0x100, 0, 0, 0, 0])));
        let again = read_served(dispatch(&mut sh, &mut g, nr, decode(nr, [at, 0x100, 0, 0, 0, 0])));
        let field =
            |s: &str, n: usize| s[s.rfind(')').unwrap() + 1..].split_whitespace().nth(n - 3).unwrap().to_string();
        assert_eq!(field(&stat, 22), field(&again, 22), "one start time per process");
        assert_eq!(field(&stat, 22), (10_000 * 100).to_string(), "ticks of the logical clock");
        assert_eq!((field(&stat, 10), field(&stat, 14)), ("0".into(), "0".into()));
        let status = read_served(dispatch(&mut sh, &mut g, nr, decode(nr, [at, 0x200, 0, 0, 0, 0])));
        assert!(status.contains("voluntary_ctxt_switches:\t0\n"), "{status}");
        assert!(status.contains("VmRSS:\t   16384 kB\n"), "{status}");
        assert!(status.contains(&format!("Pid:\t{}\n", std::process::id())), "the rest is real");
        let statm = read_served(dispatch(&mut sh, &mut g, nr, decode(nr, [at, 0x300, 0, 0, 0, 0])));
        assert_eq!(statm.as_bytes(), repro_detcore::procfs::statm());
        // A write-only open goes to the kernel.
        let r = dispatch(&mut sh, &mut g, nr, decode(nr, [at, 0x100, libc::O_WRONLY as u64, 0, 0, 0]));
        assert!(matches!(r, Reply::Continue), "{r:?}");
    }
}
