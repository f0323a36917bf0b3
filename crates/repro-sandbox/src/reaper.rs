//! `repro __reap`: a small process that outlives a killed `repro run`.
//!
//! `repro run` starts it with a pipe on its stdin and keeps the write end. When that end closes (the run
//! finished, or `repro run` was killed) the reaper kills whatever is left in the run's cgroup, removes the
//! cgroup, and removes the scratch directories of the run. A finished run has already done all of that, so
//! the reaper finds nothing left.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cgroup::Cgroup;

/// What the reaper cleans up.
#[derive(Debug, Clone)]
pub struct ReapJob {
    pub cgroup: Option<PathBuf>,
    /// With cgroup v1: the run's cgroup of the pids hierarchy (emptied with the memory one, then removed).
    pub pids_cgroup: Option<PathBuf>,
    /// Scratch directories and files to remove (the assembled root mountpoint, the overlay's work directory, the
    /// init's configuration).
    pub scratch: Vec<PathBuf>,
}

impl ReapJob {
    pub fn to_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(c) = &self.cgroup {
            a.push("--cgroup".into());
            a.push(c.to_string_lossy().into_owned());
        }
        if let Some(c) = &self.pids_cgroup {
            a.push("--pids-cgroup".into());
            a.push(c.to_string_lossy().into_owned());
        }
        for s in &self.scratch {
            a.push("--scratch".into());
            a.push(s.to_string_lossy().into_owned());
        }
        a
    }

    pub fn from_args(args: &[String]) -> ReapJob {
        let mut job = ReapJob { cgroup: None, pids_cgroup: None, scratch: Vec::new() };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match (a.as_str(), it.next()) {
                ("--cgroup", Some(v)) => job.cgroup = Some(PathBuf::from(v)),
                ("--pids-cgroup", Some(v)) => job.pids_cgroup = Some(PathBuf::from(v)),
                ("--scratch", Some(v)) => job.scratch.push(PathBuf::from(v)),
                _ => {}
            }
        }
        job
    }
}

/// The reaper's entry point: waits for EOF on stdin, then cleans up. Returns the exit status.
pub fn main(job: &ReapJob) -> i32 {
    // Terminal signals are for the run, not for its cleanup.
    // Without the mask a terminal signal may end the cleanup early; what it leaves, `repro gc` removes.
    let _ = repro_sys::ns::block_signals(&[1, 2, 3, 15]);
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    cleanup(job);
    0
}

/// Kills and removes the cgroup, removes the scratch directories.
pub fn cleanup(job: &ReapJob) {
    if let Some(path) = &job.cgroup {
        if path.exists() {
            let cg = Cgroup::open(path);
            cg.kill_all(Duration::from_secs(10));
            for _ in 0..200 {
                if cg.remove().is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    if let Some(path) = &job.pids_cgroup {
        // Its processes are the memory cgroup's, killed above.
        for _ in 0..200 {
            match std::fs::remove_dir(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => std::thread::sleep(Duration::from_millis(10)),
                _ => break,
            }
        }
    }
    for path in &job.scratch {
        // A scratch file (the init's configuration, which holds the guest's real environment) or a directory.
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.is_dir() => {
                // Best effort: what cannot be removed is left for `repro gc`.
                let _ = std::fs::remove_file(path);
            }
            _ => remove_tree(path),
        }
    }
}

/// Removes a directory tree, making directories writable as needed (overlayfs' work directory has mode 000).
pub fn remove_tree(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
        return;
    }
    // Best effort (a guest may have left a directory without write permission): removal below says the rest.
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_tree(&e.path());
            } else {
                // Best effort: what cannot be removed is left for `repro gc`.
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    // Best effort: a directory that is not empty now is left for `repro gc`.
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_roundtrip() {
        let job = ReapJob {
            cgroup: Some("/sys/fs/cgroup/x".into()),
            pids_cgroup: Some("/p".into()),
            scratch: vec!["/a".into(), "/b".into()],
        };
        let back = ReapJob::from_args(&job.to_args());
        assert_eq!(back.cgroup, job.cgroup);
        assert_eq!(back.pids_cgroup, job.pids_cgroup);
        assert_eq!(back.scratch, job.scratch);
    }

    #[test]
    fn removes_unwritable_trees() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("work/work");
        std::fs::create_dir_all(&w).unwrap();
        std::fs::write(w.join("f"), "x").unwrap();
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o000)).unwrap();
        remove_tree(&d.path().join("work"));
        assert!(!d.path().join("work").exists());
    }
}
