//! Namespaces, mounts and the process-level calls of the hermetic boundary.
//!
//! The functions that fork (`spawn_init`, `spawn_guest`, `probe_in_child`) run the child side with raw system
//! calls only, on data prepared before the fork, so they are sound even when the parent has other threads.
//!
//! By job: `process.rs` (the init's clone, signals, waits, ids, clocks), `mount.rs` (the init's namespace setup:
//! names, `lo`, mounts, pivot), `probe.rs` (what the kernel allows), `guest.rs` (the guest's fork and exec),
//! `fd.rs` (pipes and descriptor passing), `fs.rs` (filesystem calls and queries). Everything is re-exported
//! here: callers write `ns::NAME`.

use std::ffi::CString;
use std::io;

mod fd;
mod fs;
mod guest;
mod mount;
mod probe;
mod process;

pub use fd::{close_raw, pipe, recv_fd_nonblocking, send_fd, socketpair, write_byte};
pub use fs::{fs_space, get_xattr, is_executable, is_whiteout, syncfs, try_lock_exclusive, write_file, FsSpace};
pub use guest::{apply_guest_setup, rlimit, spawn_guest, GuestSetup};
pub use mount::{
    interface_up, make_readonly_recursive, mflags, mount, pivot_into, setdomainname, sethostname, umount_detach,
    unshare,
};
pub use probe::{probe_in_child, probe_perf_counters, probe_ptrace, probe_set_tsc};
pub use process::{
    allowed_cpus, block_signals, clock_now_syscall, current_cpu, getgid, getpid, getuid, kill, read_signal,
    realtime_coarse_ns, set_rlimit_of, setsid, signalfd, spawn_init, wait_child, ChildExit, InitSpawn,
};

/// An error from a system call, with the call's name and the object it acted on.
#[derive(Debug, thiserror::Error)]
#[error("{call}({what}): {source}")]
pub struct SysError {
    pub call: &'static str,
    pub what: String,
    #[source]
    pub source: io::Error,
}

impl SysError {
    fn last(call: &'static str, what: impl Into<String>) -> Self {
        SysError { call, what: what.into(), source: io::Error::last_os_error() }
    }
    /// The errno of the failed call.
    pub fn errno(&self) -> i32 {
        self.source.raw_os_error().unwrap_or(0)
    }
}

pub type Result<T> = std::result::Result<T, SysError>;

fn cstr(s: &str) -> CString {
    // Cannot fail: the NUL bytes are filtered out first.
    CString::new(s.as_bytes().iter().copied().filter(|b| *b != 0).collect::<Vec<u8>>()).unwrap_or_default()
}

fn check(rc: libc::c_int, call: &'static str, what: impl FnOnce() -> String) -> Result<libc::c_int> {
    if rc < 0 {
        Err(SysError::last(call, what()))
    } else {
        Ok(rc)
    }
}

/// Namespace flags for `unshare`/`clone`.
pub mod flags {
    pub const MOUNT: i32 = libc::CLONE_NEWNS;
    pub const PID: i32 = libc::CLONE_NEWPID;
    pub const NET: i32 = libc::CLONE_NEWNET;
    pub const UTS: i32 = libc::CLONE_NEWUTS;
    pub const IPC: i32 = libc::CLONE_NEWIPC;
    pub const USER: i32 = libc::CLONE_NEWUSER;
    pub const CGROUP: i32 = libc::CLONE_NEWCGROUP;
    pub const TIME: i32 = libc::CLONE_NEWTIME;
}

/// errno as text: "No such file or directory".
pub fn strerror(errno: i32) -> String {
    io::Error::from_raw_os_error(errno).to_string().split(" (os error").next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// The sync descriptor may have the number of a target (whatever the process had open decides): the child
    /// must still wait for its go on the sync pipe, not read from what was placed over it.
    #[test]
    fn the_sync_descriptor_survives_being_a_target_number() {
        let (sync_r, sync_w) = pipe().unwrap();
        let devnull = std::fs::File::open("/dev/null").unwrap();
        // A target number equal to the sync descriptor's: /dev/null goes there in the child.
        let target = sync_r.as_raw_fd();
        let program = CString::new("/bin/sh").unwrap();
        let argv = [CString::new("sh").unwrap(), CString::new("-c").unwrap(), CString::new("exit 7").unwrap()];
        let pid = spawn_init(&InitSpawn {
            namespaces: 0,
            program: &program,
            argv: &argv,
            fds: &[(devnull.as_raw_fd(), target)],
            sync: sync_r.as_raw_fd(),
            block_signals: &[],
            become_root: false,
        })
        .unwrap();
        drop(sync_r);
        // Reading /dev/null would give EOF and the child would exit 125 before this byte is written.
        write_byte(&sync_w).unwrap();
        let (_, exit) = wait_child(pid, false).unwrap().unwrap();
        assert_eq!(exit.code(), 7);
    }

    #[test]
    fn strerror_strips_os_error_suffix() {
        assert_eq!(strerror(libc::ENOENT), "No such file or directory");
    }

    #[test]
    fn child_exit_codes_follow_the_shell_convention() {
        assert_eq!(ChildExit::Exited(3).code(), 3);
        assert_eq!(ChildExit::Signaled(9).code(), 137);
    }

    #[test]
    fn descriptors_pass_over_a_socketpair() {
        let (a, b) = socketpair().unwrap();
        assert!(recv_fd_nonblocking(&b).unwrap().is_none());
        let d = tempfile_dir();
        let dir = std::fs::File::open(&d).unwrap();
        send_fd(a.as_raw_fd(), dir.as_raw_fd()).unwrap();
        drop(dir);
        drop(a);
        let got = recv_fd_nonblocking(&b).unwrap().expect("a descriptor");
        std::fs::write(format!("/proc/self/fd/{}/x", got.as_raw_fd()), "y").unwrap();
        assert_eq!(std::fs::read_to_string(d.join("x")).unwrap(), "y");
        assert!(fs_space(got.as_raw_fd()).unwrap().bytes_total > 0);
        assert!(recv_fd_nonblocking(&b).unwrap().is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn exclusive_locks_exclude() {
        let d = tempfile_dir();
        let a = std::fs::File::open(&d).unwrap();
        let b = std::fs::File::open(&d).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        drop(a);
        assert!(try_lock_exclusive(&b).unwrap());
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "repro-sys-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn allowed_cpus_is_not_empty() {
        assert!(!allowed_cpus().is_empty());
    }
}
