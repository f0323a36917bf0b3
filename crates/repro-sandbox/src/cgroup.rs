//! A small cgroup for one run, created under the caller's own cgroup: a memory limit, a bound of tasks
//! (`pids.max`) and a way to kill everything in it. Works with cgroup v2 (unified) and with v1's memory
//! hierarchy (then the bound of tasks is a second cgroup, in v1's pids hierarchy).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which cgroup hierarchy this machine offers for the memory controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// cgroup v2 mounted at the path.
    V2(PathBuf),
    /// cgroup v1 with the memory controller mounted at the path.
    V1Memory(PathBuf),
    /// cgroup v1's pids hierarchy (used beside `V1Memory` for `pids.max`).
    V1Pids(PathBuf),
    None,
}

impl Hierarchy {
    /// Finds the hierarchy under `/sys/fs/cgroup`.
    pub fn detect() -> Hierarchy {
        Self::detect_at(Path::new("/sys/fs/cgroup"))
    }

    pub fn detect_at(root: &Path) -> Hierarchy {
        if root.join("cgroup.controllers").exists() {
            // Unreadable: no controllers, so the memory limit is reported as not enforced.
            let controllers = fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                return Hierarchy::V2(root.to_path_buf());
            }
            return Hierarchy::None;
        }
        let mem = root.join("memory");
        if mem.join("memory.limit_in_bytes").exists() {
            return Hierarchy::V1Memory(mem);
        }
        Hierarchy::None
    }

    pub fn describe(&self) -> String {
        match self {
            Hierarchy::V2(p) => format!("cgroup v2 at {}", p.display()),
            Hierarchy::V1Memory(p) => format!("cgroup v1 memory controller at {}", p.display()),
            Hierarchy::V1Pids(p) => format!("cgroup v1 pids controller at {}", p.display()),
            Hierarchy::None => "no cgroup memory controller".into(),
        }
    }
}

/// The cgroup of one run.
#[derive(Debug, Clone)]
pub struct Cgroup {
    pub path: PathBuf,
    v2: bool,
    /// The directory whose `pids.max` bounds the run's tasks: `path` with v2, a cgroup of v1's pids hierarchy
    /// with v1; `None` where it could not be set (then `pids_error` says why).
    pub pids: Option<PathBuf>,
    pub pids_error: Option<String>,
}

impl Cgroup {
    /// Creates `repro-<name>` with a memory limit under the caller's own cgroup (from `/proc/self/cgroup`), so
    /// that the caller's limits hold for the guest too.
    /// The bound of tasks `pids_max` is set too, where it can be (else `pids_error` says why; the memory limit
    /// holds without it).
    pub fn create(h: &Hierarchy, name: &str, memory_bytes: u64, pids_max: u64) -> std::io::Result<Cgroup> {
        let own = fs::read_to_string("/proc/self/cgroup")?;
        let base = caller_cgroup(h, &own).ok_or_else(|| {
            std::io::Error::other(format!("/proc/self/cgroup names no cgroup in the {}", h.describe()))
        })?;
        let v2 = matches!(h, Hierarchy::V2(_));
        if v2 {
            // The memory controller must be enabled for the caller's cgroup's children (refused when the caller's
            // cgroup holds processes and is not the root: then memory.max is missing below and the limit is
            // reported as not enforced).
            let _ = repro_sys::ns::write_file(&base.join("cgroup.subtree_control").to_string_lossy(), "+memory +pids");
        }
        let name = format!("repro-{name}");
        let path = base.join(&name);
        fs::create_dir(&path)?;
        let mut cg = Cgroup { path, v2, pids: None, pids_error: None };
        let limit = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
        if let Err(e) = cg.write(limit, &memory_bytes.to_string()) {
            // Best-effort cleanup: the failure to set the limit is what is reported.
            let _ = cg.remove();
            return Err(e);
        }
        if v2 {
            // Absent without swap accounting: the memory limit holds without it.
            let _ = cg.write("memory.swap.max", "0");
        }
        match cg.create_pids(h, &own, &name, pids_max) {
            Ok(p) => cg.pids = Some(p),
            Err(e) => cg.pids_error = Some(e),
        }
        Ok(cg)
    }

    /// Sets `pids.max`: in the run's cgroup with v2; with v1 in a cgroup of the same name in the pids hierarchy
    /// (beside the memory one, under the caller's cgroup of that hierarchy). Returns the directory.
    fn create_pids(&self, h: &Hierarchy, proc_self_cgroup: &str, name: &str, pids_max: u64) -> Result<PathBuf, String> {
        let dir = if self.v2 {
            self.path.clone()
        } else {
            // v1's hierarchies are mounted side by side (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup/pids`).
            let root = match h {
                Hierarchy::V1Memory(m) => m.parent().unwrap_or(Path::new("/sys/fs/cgroup")),
                _ => Path::new("/sys/fs/cgroup"),
            };
            let h = Hierarchy::V1Pids(root.join("pids"));
            let base = caller_cgroup(&h, proc_self_cgroup)
                .ok_or_else(|| format!("/proc/self/cgroup names no cgroup in the {}", h.describe()))?;
            let dir = base.join(name);
            fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            dir
        };
        let file = dir.join("pids.max");
        if let Err(e) = repro_sys::ns::write_file(&file.to_string_lossy(), &pids_max.to_string()) {
            if !self.v2 {
                // Best-effort cleanup of the empty directory: the failure to set the bound is what is reported.
                let _ = fs::remove_dir(&dir);
            }
            return Err(format!("cannot write {}: {e}", file.display()));
        }
        Ok(dir)
    }

    /// Opens an existing run cgroup by path (for the reaper).
    pub fn open(path: &Path) -> Cgroup {
        Cgroup { path: path.to_path_buf(), v2: path.join("cgroup.controllers").exists(), pids: None, pids_error: None }
    }

    /// The run's cgroup (`limits`: memory bytes, pids), or `None`, and why the cgroup bounds no tasks when it
    /// does not (the run then sets RLIMIT_NPROC); what it cannot enforce of the memory is added to `warnings`.
    pub fn for_run(
        h: &Hierarchy,
        id: &str,
        limits: (u64, u64),
        warnings: &mut Vec<String>,
    ) -> (Option<Cgroup>, Option<String>) {
        match Cgroup::create(h, id, limits.0, limits.1) {
            Ok(cg) => {
                let pids = cg.pids_error.clone();
                (Some(cg), pids)
            }
            Err(e) => {
                warnings.push(format!("memory limit not enforced: cannot create a cgroup ({}): {e}", h.describe()));
                (None, Some(format!("cannot create a cgroup ({})", h.describe())))
            }
        }
    }

    /// With cgroup v1: the `tasks` file of the run's cgroup in the pids hierarchy, open for writing (as
    /// [`Cgroup::tasks_for_self`]); one that cannot be opened is a warning.
    pub fn pids_tasks_for_self(&self, warnings: &mut Vec<String>) -> Option<fs::File> {
        let dir = self.pids.as_ref().filter(|_| !self.v2)?;
        fs::OpenOptions::new()
            .write(true)
            .open(dir.join("tasks"))
            .map_err(|e| {
                warnings.push(format!("pids limit not enforced: cannot open the pids cgroup's tasks file: {e}"))
            })
            .ok()
    }

    /// The warning of a run whose guest reached `pids_max`: how many of its forks and clones failed there (the
    /// `max` line of `pids.events`). Read before the cgroup goes.
    pub fn pids_reached(&self, pids_max: u64) -> Option<String> {
        let dir = self.pids.as_ref()?;
        let refused: u64 = fs::read_to_string(dir.join("pids.events"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("max ")?.trim().parse().ok())?;
        (refused > 0).then(|| {
            format!(
                "pids limit reached: {refused} fork(s) or clone(s) of the guest failed with EAGAIN (--pids \
                 {pids_max}: processes and threads together)"
            )
        })
    }

    /// Removes the cgroup of v1's pids hierarchy (empty once the memory cgroup is: the same processes).
    pub fn remove_pids(&self) -> std::io::Result<()> {
        match &self.pids {
            Some(dir) if !self.v2 => match fs::remove_dir(dir) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
            _ => Ok(()),
        }
    }

    fn write(&self, file: &str, value: &str) -> std::io::Result<()> {
        repro_sys::ns::write_file(&self.path.join(file).to_string_lossy(), value)
    }

    /// With cgroup v1: the cgroup's `tasks` file, open for writing, for a process that moves itself: writing `0`
    /// there moves the writing thread, which the kernel does without the global lock whose taking waits for an
    /// RCU grace period (~10 ms) on every write of a pid to `cgroup.procs`. The kernel checks the credentials of
    /// whoever opened the file, so a process without the right to open it (the sandbox's init, whose root is
    /// not the host's) can be given it. `None` with cgroup v2, where a thread cannot move alone.
    pub fn tasks_for_self(&self) -> Option<std::io::Result<fs::File>> {
        (!self.v2).then(|| fs::OpenOptions::new().write(true).open(self.path.join("tasks")))
    }

    /// Moves a process into the cgroup.
    pub fn add(&self, pid: i32) -> std::io::Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// The processes in the cgroup.
    pub fn pids(&self) -> Vec<i32> {
        // A cgroup already removed has no processes.
        fs::read_to_string(self.path.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Kills every process in the cgroup and waits until it is empty (at most `timeout`).
    pub fn kill_all(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        if self.v2 {
            // Older kernels have no cgroup.kill: the loop below kills each process.
            let _ = self.write("cgroup.kill", "1");
        }
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            for p in pids {
                // It may have exited already (ESRCH); the loop looks again until the deadline.
                let _ = repro_sys::ns::kill(p, libc_sigkill());
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Removes the (empty) cgroup directory. A cgroup already gone is not an error.
    pub fn remove(&self) -> std::io::Result<()> {
        match fs::remove_dir(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// The peak memory use, where the kernel reports it.
    pub fn peak_memory(&self) -> Option<u64> {
        let file = if self.v2 { "memory.peak" } else { "memory.max_usage_in_bytes" };
        fs::read_to_string(self.path.join(file)).ok()?.trim().parse().ok()
    }
}

/// The directory of the caller's cgroup in hierarchy `h`, from the text of `/proc/self/cgroup`: the line of the
/// memory controller (v1) or the `0::` line (v2). A path that leaves the hierarchy (`..`) is refused.
pub fn caller_cgroup(h: &Hierarchy, proc_self_cgroup: &str) -> Option<PathBuf> {
    let (mount, v2, controller) = match h {
        Hierarchy::V2(p) => (p, true, ""),
        Hierarchy::V1Memory(p) => (p, false, "memory"),
        Hierarchy::V1Pids(p) => (p, false, "pids"),
        Hierarchy::None => return None,
    };
    let rel = proc_self_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let ours = if v2 { id == "0" && ctrls.is_empty() } else { ctrls.split(',').any(|c| c == controller) };
        ours.then_some(path)
    })?;
    let rel = Path::new(rel.trim());
    if !rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return None;
    }
    Some(mount.join(rel.strip_prefix("/").ok()?))
}

fn libc_sigkill() -> i32 {
    9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_cgroup_goes_under_the_callers_own() {
        let v1 = Hierarchy::V1Memory("/sys/fs/cgroup/memory".into());
        let text = "9:name=systemd:/\n4:memory:/process_api/62d2\n1:cpu,cpuacct:/x\n0::/\n";
        assert_eq!(caller_cgroup(&v1, text), Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/62d2")));
        let v2 = Hierarchy::V2("/sys/fs/cgroup".into());
        assert_eq!(caller_cgroup(&v2, text), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(
            caller_cgroup(&v2, "0::/user.slice/user-1000.slice/session-2.scope\n"),
            Some(PathBuf::from("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"))
        );
        assert_eq!(caller_cgroup(&v1, "0::/a\n"), None, "no memory line");
        let pids = Hierarchy::V1Pids("/sys/fs/cgroup/pids".into());
        assert_eq!(caller_cgroup(&pids, "8:pids:/a/b\n4:memory:/x\n"), Some(PathBuf::from("/sys/fs/cgroup/pids/a/b")));
        assert_eq!(caller_cgroup(&v2, "0::/../etc\n"), None);
        assert_eq!(caller_cgroup(&Hierarchy::None, text), None);
    }

    #[test]
    fn detects_v1_and_v2_layouts() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Hierarchy::detect_at(d.path()), Hierarchy::None);
        fs::create_dir(d.path().join("memory")).unwrap();
        fs::write(d.path().join("memory/memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        assert_eq!(Hierarchy::detect_at(d.path()), Hierarchy::V1Memory(d.path().join("memory")));
        fs::write(d.path().join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
        assert_eq!(Hierarchy::detect_at(d.path()), Hierarchy::V2(d.path().to_path_buf()));
        fs::write(d.path().join("cgroup.controllers"), "cpu io\n").unwrap();
        assert_eq!(Hierarchy::detect_at(d.path()), Hierarchy::None);
    }
}
