//! A small cgroup for one run: a memory limit and a way to kill everything in it. Works with cgroup v2
//! (unified) and with v1's memory hierarchy.

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
    None,
}

impl Hierarchy {
    /// Finds the hierarchy under `/sys/fs/cgroup`.
    pub fn detect() -> Hierarchy {
        Self::detect_at(Path::new("/sys/fs/cgroup"))
    }

    pub fn detect_at(root: &Path) -> Hierarchy {
        if root.join("cgroup.controllers").exists() {
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
            Hierarchy::None => "no cgroup memory controller".into(),
        }
    }
}

/// The cgroup of one run.
#[derive(Debug, Clone)]
pub struct Cgroup {
    pub path: PathBuf,
    v2: bool,
}

impl Cgroup {
    /// Creates `<hierarchy>/repro/<name>` with a memory limit.
    pub fn create(h: &Hierarchy, name: &str, memory_bytes: u64) -> std::io::Result<Cgroup> {
        let (base, v2) = match h {
            Hierarchy::V2(p) => (p.join("repro"), true),
            Hierarchy::V1Memory(p) => (p.join("repro"), false),
            Hierarchy::None => return Err(std::io::Error::other("no cgroup memory controller on this machine")),
        };
        if !base.exists() {
            fs::create_dir(&base).or_else(|e| if base.exists() { Ok(()) } else { Err(e) })?;
        }
        if v2 {
            // Controllers must be enabled on every level above the run's cgroup.
            let root = base.parent().unwrap_or(Path::new("/"));
            let _ = repro_sys::ns::write_file(&root.join("cgroup.subtree_control").to_string_lossy(), "+memory +pids");
            repro_sys::ns::write_file(&base.join("cgroup.subtree_control").to_string_lossy(), "+memory +pids")?;
        }
        let path = base.join(name);
        fs::create_dir(&path)?;
        let cg = Cgroup { path, v2 };
        let limit = if v2 { "memory.max" } else { "memory.limit_in_bytes" };
        if let Err(e) = cg.write(limit, &memory_bytes.to_string()) {
            let _ = cg.remove();
            return Err(e);
        }
        if v2 {
            let _ = cg.write("memory.swap.max", "0");
        }
        Ok(cg)
    }

    /// Opens an existing run cgroup by path (for the reaper).
    pub fn open(path: &Path) -> Cgroup {
        Cgroup { path: path.to_path_buf(), v2: path.join("cgroup.controllers").exists() }
    }

    fn write(&self, file: &str, value: &str) -> std::io::Result<()> {
        repro_sys::ns::write_file(&self.path.join(file).to_string_lossy(), value)
    }

    /// Moves a process into the cgroup.
    pub fn add(&self, pid: i32) -> std::io::Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// The processes in the cgroup.
    pub fn pids(&self) -> Vec<i32> {
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
            let _ = self.write("cgroup.kill", "1");
        }
        loop {
            let pids = self.pids();
            if pids.is_empty() {
                return true;
            }
            for p in pids {
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

fn libc_sigkill() -> i32 {
    9
}

#[cfg(test)]
mod tests {
    use super::*;

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
