//! Processes: the supervisor's own request for the vDSO memfd at a task's exec stop, and io_uring (whose
//! operations bypass the mediation). Forks, clones and execs are ptrace events: see `exec.rs` and the trace loop.

use crate::reply::Reply;
use crate::state::Shared;

/// Whether a getcpu call is the supervisor's own, injected at `tid`'s exec stop to receive the vDSO memfd
/// (magic arguments, and only while that task is being set up).
pub(crate) fn is_vdso_fd_request(sh: &Shared, tid: i32, cpu: u64, node: u64, cache: u64) -> bool {
    [cpu, node] == crate::vdso::FD_REQUEST_MAGIC && cache == tid as u64 && sh.vdso_fd_requests.contains(&tid)
}

/// Answers the vDSO memfd request: the memfd, installed in the task.
pub(crate) fn vdso_fd(sh: &Shared) -> Reply {
    match sh.vdso.as_ref().map(|p| p.fd().try_clone()) {
        Some(Ok(fd)) => Reply::AddFd { fd, cloexec: true },
        Some(Err(e)) => Reply::Error(e.raw_os_error().unwrap_or(libc::EIO)),
        None => Reply::Error(libc::ENOSYS),
    }
}

/// io_uring_setup runs, and the run is marked not reproducible.
pub(crate) fn io_uring_setup(sh: &mut Shared) -> Reply {
    if let Some(why) = sh.ctl.host_timer(repro_detcore::HostTimer::IoUringSetup) {
        sh.not_enforced.insert(why);
    }
    Reply::Continue
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode;
    use crate::guest::fake::FakeGuest;
    use crate::handlers::dispatch;
    use crate::handlers::testing::shared;

    #[test]
    fn only_the_supervisors_own_getcpu_gets_the_memfd() {
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(3);
        let [m0, m1] = crate::vdso::FD_REQUEST_MAGIC;
        let nr = libc::SYS_getcpu;
        // Not being set up: an ordinary getcpu with those (bad) pointers.
        assert!(!is_vdso_fd_request(&sh, 3, m0, m1, 3));
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [m0, m1, 3, 0, 0, 0])), Reply::Error(libc::EFAULT)));
        sh.vdso_fd_requests.insert(3);
        assert!(is_vdso_fd_request(&sh, 3, m0, m1, 3));
        assert!(!is_vdso_fd_request(&sh, 3, m0, m1, 4), "another task's id");
        // No vDSO page in this run: ENOSYS.
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [m0, m1, 3, 0, 0, 0])), Reply::Error(libc::ENOSYS)));
    }

    #[test]
    fn io_uring_is_not_enforced() {
        let mut sh = shared(1, 0);
        let mut g = FakeGuest::new(3);
        let nr = libc::SYS_io_uring_setup;
        assert!(matches!(dispatch(&mut sh, &mut g, nr, decode(nr, [0; 6])), Reply::Continue));
        assert!(sh.not_enforced.iter().any(|r| r.contains("io_uring")));
    }
}
