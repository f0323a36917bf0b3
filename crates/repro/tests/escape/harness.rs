//! Running `repro` as root or as an unprivileged user, in a directory both can use.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::common::repro_path;

/// Who runs `repro`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The test's own user (root in CI).
    Root,
    /// uid/gid 65534 through `setpriv`, with a copy of the binary it can execute.
    Unprivileged,
}

/// Both callers, for tests that try the same attempt as each.
pub const CALLERS: [Caller; 2] = [Caller::Root, Caller::Unprivileged];

pub const NOBODY: u32 = 65534;

/// A copy of the repro binary in a directory every user can reach, shared by every test process (nextest runs
/// each test in its own): named by the built binary's size and modification time, copied under a temporary name
/// and renamed into place, so no process runs half a copy and a rebuilt binary gets a copy of its own.
fn shared_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let src = repro_path();
        let meta = std::fs::metadata(&src).expect("repro binary");
        let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default();
        let dir = std::env::temp_dir().join(format!("repro-escape-bin-{}-{}", meta.len(), mtime.as_nanos()));
        std::fs::create_dir_all(&dir).expect("binary directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let bin = dir.join("repro");
        if !bin.exists() {
            let tmp = dir.join(format!(".repro-{}", std::process::id()));
            std::fs::copy(&src, &tmp).expect("copy repro");
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            std::fs::rename(&tmp, &bin).expect("rename the copy of repro");
        }
        bin
    })
}

/// A fresh working directory that `caller` can write (mode 0777 for the unprivileged caller).
pub fn workdir(caller: Caller) -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("repro-escape-").tempdir().expect("tempdir");
    if caller == Caller::Unprivileged {
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    d
}

/// A `repro` command run by `caller` in `dir`.
pub fn repro_as(caller: Caller, dir: &Path) -> Command {
    let mut c = match caller {
        Caller::Root => Command::new(repro_path()),
        Caller::Unprivileged => {
            crate::common::require_cmd("setpriv");
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={NOBODY}"), format!("--regid={NOBODY}"), "--clear-groups".into()]);
            c.arg(shared_binary());
            c
        }
    };
    c.current_dir(dir);
    c.env_remove("REPRO_STATE_DIR");
    c
}

/// `repro run -q [args] -- sh -c SCRIPT` as `caller` in `dir`, bounded by `timeout 60`.
pub fn sh_as(caller: Caller, dir: &Path, args: &[&str], script: &str) -> Output {
    let c = repro_as(caller, dir);
    let prog = c.get_program().to_owned();
    let pre: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
    let mut t = Command::new("timeout");
    t.arg("60").arg(prog).args(pre).arg("run").arg("-q").args(args).args(["--", "sh", "-c", script]);
    t.current_dir(dir);
    t.env_remove("REPRO_STATE_DIR");
    t.output().expect("repro runs")
}

/// A tmpfs of the test's own (mode 0777, on a 0755 mount point), unmounted (lazily) when dropped, even after a
/// failure: canary paths for writes that must not happen, and a bounded place for untrusted data.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `size` and `nr_inodes` as mount(8) takes them.
    pub fn mount(size: &str, inodes: u32) -> Tmpfs {
        Tmpfs::mount_in(&std::env::temp_dir(), size, inodes)
    }
    /// [`Tmpfs::mount`] on a new directory in `parent` (one the guest sees, such as /var/tmp: /tmp is its own).
    pub fn mount_in(parent: &Path, size: &str, inodes: u32) -> Tmpfs {
        let dir = tempfile::Builder::new().prefix("repro-escape-fs-").tempdir_in(parent).expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},nr_inodes={inodes},mode=0777"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount runs");
        assert!(
            o.status.success(),
            "mount tmpfs (the escape tests run as root): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Tmpfs { dir }
    }
    /// 1 MiB and 64 inodes: where a write would show an escape.
    pub fn canary() -> Tmpfs {
        Tmpfs::mount("1m", 64)
    }
    /// 256 MiB and 20000 inodes: where untrusted data is unpacked.
    pub fn bounded() -> Tmpfs {
        Tmpfs::mount("256m", 20000)
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}
