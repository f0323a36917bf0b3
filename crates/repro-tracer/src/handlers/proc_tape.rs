//! The /proc and /sys tape: an open (read-only) of a regular file of /proc or /sys that the controller does not
//! generate is read by the supervisor and served from a memfd, its bytes taped by path; on replay the recorded
//! bytes are served (`repro_detcore::tapes::ProcReplay`).

use std::ffi::CString;

use repro_detcore::tapes;
use repro_model::tape::ProcRead;
use repro_sys::{fdops, net};

use crate::guest::{guest_path, Guest};
use crate::reply::Reply;
use crate::state::Shared;
use crate::tape::{ProcMode, PROC_MAX};

/// openat of a /proc or /sys file while the /proc tape records or replays; `None` lets it run as usual.
pub(crate) fn proc_open<G: Guest>(sh: &mut Shared, g: &mut G, path: &[u8], flags: i32) -> Option<Reply> {
    let tape = sh.tape.as_mut()?;
    if tape.cfg.proc == ProcMode::Off
        || flags & libc::O_ACCMODE != libc::O_RDONLY
        || flags & (libc::O_DIRECTORY | libc::O_PATH) != 0
        || !tapes::proc_candidate(path)
    {
        return None;
    }
    let key = String::from_utf8(path.to_vec()).ok()?;
    let data = if let ProcMode::Replay(_) = tape.cfg.proc {
        tape.proc_replay.open(&key)?
    } else {
        let real = guest_path(path, g.tid());
        let c = CString::new(real).ok()?;
        let fd = fdops::openat(None, &c, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY).ok()?;
        let st = fdops::newfstatat_raw(Some(&fd), c"", libc::AT_EMPTY_PATH).ok()?;
        let mode = u32::from_le_bytes([st[24], st[25], st[26], st[27]]);
        let dev = u64::from_le_bytes([st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7]]);
        if mode & libc::S_IFMT != libc::S_IFREG || !sh.pseudo_devs.contains(&dev) {
            return None;
        }
        let mut data = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            match net::read(&fd, &mut buf) {
                Ok(0) => break,
                Ok(k) => data.extend_from_slice(&buf[..k]),
                Err(_) => return None,
            }
            if data.len() > PROC_MAX {
                return None;
            }
        }
        let tape = sh.tape.as_mut()?;
        tape.proc_recorded.push(ProcRead { path: key.clone(), data: data.clone() });
        data
    };
    if !g.still_waiting() {
        return Some(Reply::Error(libc::EINTR));
    }
    let name = CString::new(format!("repro-tape:{key}")).unwrap_or_else(|_| c"repro-tape".into());
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
    use crate::tape::{NetMode, TapeConfig, TapeState};

    /// The /proc tape on replay: an open of a taped file reads the recorded bytes, in order; other files and
    /// writes are the host's.
    #[test]
    fn proc_replay_serves_the_recorded_bytes() {
        use repro_model::tape::ProcTape;
        let read = |d: &[u8]| ProcRead { path: "/proc/version".into(), data: d.to_vec() };
        let mut sh = shared(1, 1000);
        let cfg = TapeConfig {
            network: NetMode::Off,
            proc: ProcMode::Replay(ProcTape { reads: vec![read(b"one"), read(b"two")] }),
        };
        sh.tape = TapeState::new(&cfg);
        let mut g = FakeGuest::new(3);
        g.put(0x100, b"/proc/version\0").put(0x200, b"/proc/cmdline\0");
        let at = libc::AT_FDCWD as u32 as u64;
        let mut open = |path: u64, flags: i32| {
            let nr = libc::SYS_openat;
            match dispatch(&mut sh, &mut g, nr, decode(nr, [at, path, flags as u64, 0, 0, 0])) {
                Reply::AddFd { fd, .. } => Some(std::io::read_to_string(std::fs::File::from(fd)).unwrap()),
                Reply::Continue => None,
                r => panic!("{r:?}"),
            }
        };
        assert_eq!(open(0x100, 0).as_deref(), Some("one"));
        assert_eq!(open(0x100, 0).as_deref(), Some("two"));
        assert_eq!(open(0x100, 0).as_deref(), Some("two"), "the last read again");
        assert_eq!(open(0x200, 0), None, "not on the tape: the host's");
        assert_eq!(open(0x100, libc::O_WRONLY), None, "a write goes to the host");
    }
}
