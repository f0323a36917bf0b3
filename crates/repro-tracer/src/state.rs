//! The state the ptrace thread and the notify thread share: the controller, the stats, and what the handlers
//! keep between calls.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::CString;
use std::sync::{Arc, Condvar, Mutex};

use repro_detcore::{DeterminismController, DirListing};

use crate::stats::SupervisorStats;
use crate::{access, tape, vdso};

/// State shared by the ptrace thread and the notify thread.
pub(crate) struct Shared {
    pub ctl: DeterminismController,
    pub stats: SupervisorStats,
    pub not_enforced: BTreeSet<String>,
    /// Live guest tasks (so a stopped clock loop can kill them all).
    pub live: HashSet<i32>,
    /// Directory listings being served, by (device, inode).
    pub dirs: HashMap<(u64, u64), DirListing>,
    /// Devices of pseudo file systems (/proc, /sys, /dev...): their file times are the host's "now".
    pub pseudo_devs: HashSet<u64>,
    /// Devices of the host's installation (see [`installed_files`]): files there that predate the run keep their
    /// host times; and the files on them that the sandbox made for this run (the fixed /etc files), which do not.
    pub host_devs: HashSet<u64>,
    pub run_files: HashSet<(u64, u64)>,
    /// The replacement vDSO's shared clock page, or why there is none.
    pub vdso: Option<vdso::ClockPage>,
    pub vdso_unavailable: Option<String>,
    /// Tasks being given the vDSO memfd at their exec stop (see exec::install).
    pub vdso_fd_requests: HashSet<i32>,
    /// The task whose ptrace stop the trace loop is handling (from the wait that reported it until it waits
    /// again). The tracer runs above the guest, but it may block meanwhile (reading a program to scan it at an
    /// exec): the scheduler takes no decision then, since that task runs again at a moment of the host's timing.
    pub tracer_busy: Option<i32>,
    /// Identities of the descriptors the guest inherited from outside (see handlers::waits::inherited_fds).
    pub inherited_fds: HashSet<String>,
    /// The guest's sockets can only be fed by the guest (its own network namespace, untaped).
    pub own_network: bool,
    /// The last absolute futex deadline moved onto the host's clock in each task's memory (see
    /// handlers::waits): a retry of the same wait passes the host value back, which stands for the logical one.
    pub futex_rewrites: HashMap<i32, FutexRewrite>,
    /// Timed waits held by the supervisor, by task (see handlers::waits::schedule), and the condition variable
    /// the scheduler sleeps on (with this state's mutex).
    pub parked: HashMap<i32, crate::handlers::waits::Parked>,
    /// Tasks whose call a thread of its own answers (`Reply::Defer`: a held sleep, a blocking read of a tape):
    /// they wait for that, not for the notify thread's choice (see handlers::waits::tick).
    pub deferred: HashSet<i32>,
    pub waits_cv: Arc<Condvar>,
    /// The guest is gone: the waits scheduler stops.
    pub finished: bool,
    /// The deadlock watchdog's wall time (see DetConfig::stuck_after), and what it found when it stopped the guest.
    pub stuck_after: Option<std::time::Duration>,
    pub stuck: Option<String>,
    /// The paths the guest used, when recording.
    pub access: Option<access::AccessLog>,
    /// The tapes, when recording or replaying.
    pub tape: Option<tape::TapeState>,
    /// The guest shares the host's network: ports bound to 0 stay the kernel's (see handlers::ports).
    pub host_network: bool,
    /// The run's writable layer, for the figures statfs reports (see handlers::statfs).
    pub disk: repro_detcore::statfs::DiskLimit,
    /// The RDRAND/RDSEED scans of this run's programs and libraries (see rdrand.rs).
    pub rdrand: crate::rdrand::ScanCache,
    /// How timer expiries reach the guest (the timers themselves are the controller's `timers`).
    pub timer_os: crate::handlers::timers::TimerOs,
    /// The guest's timerfds (eventfds the supervisor writes at each expiry), by eventfd id.
    pub timerfds: HashMap<u64, crate::handlers::timers::TimerFd>,
    /// The deterministic scheduler (see sched.rs), when the run has one.
    pub sched: Option<crate::sched::SchedState>,
}

impl Shared {
    /// The state of a run whose guest does not exist yet: no task, no vDSO page, nothing recorded.
    pub(crate) fn new(ctl: DeterminismController) -> Shared {
        Shared {
            ctl,
            stats: SupervisorStats::default(),
            not_enforced: BTreeSet::new(),
            live: HashSet::new(),
            dirs: HashMap::new(),
            pseudo_devs: HashSet::new(),
            host_devs: HashSet::new(),
            run_files: HashSet::new(),
            vdso: None,
            vdso_unavailable: None,
            vdso_fd_requests: HashSet::new(),
            tracer_busy: None,
            inherited_fds: HashSet::new(),
            own_network: false,
            futex_rewrites: HashMap::new(),
            parked: HashMap::new(),
            deferred: HashSet::new(),
            waits_cv: Arc::new(Condvar::new()),
            finished: false,
            stuck_after: None,
            stuck: None,
            access: None,
            tape: None,
            host_network: false,
            disk: default_disk(),
            rdrand: Default::default(),
            timer_os: crate::handlers::timers::DEFAULT_OS,
            timerfds: HashMap::new(),
            sched: None,
        }
    }

    /// Adopts the clock reads the vDSO answered in-process; call before using the clock.
    pub(crate) fn sync_in(&mut self) {
        if let Some(p) = self.vdso.as_mut() {
            p.sync_in(&mut self.ctl.clock);
        }
    }

    /// Publishes the controller's clock to the vDSO page; call after the clock may have moved.
    pub(crate) fn sync_out(&mut self) {
        if let Some(p) = self.vdso.as_mut() {
            p.sync_out(&self.ctl.clock);
        }
    }

    /// An exec kept the safe fallback (vDSO disabled) because ours could not be installed.
    pub(crate) fn vdso_fallback(&mut self, why: String) {
        self.stats.vdso_disabled += 1;
        if self.stats.vdso_disabled_why.len() < 8 {
            self.stats.vdso_disabled_why.insert(why);
        }
    }

    /// Records a warning for the run record (at most 8, as the stats say: the first ones).
    pub(crate) fn warn(&mut self, w: String) {
        if self.stats.warnings.len() < 8 {
            self.stats.warnings.insert(w);
        }
    }

    /// Counts one answered syscall (no allocation once the name is known).
    pub(crate) fn count(&mut self, name: &str) {
        match self.stats.mediated.get_mut(name) {
            Some(c) => *c += 1,
            None => {
                self.stats.mediated.insert(name.to_string(), 1);
            }
        }
    }

    /// Stops the guest: every live task is killed, and the run reports `why` as not enforced.
    pub(crate) fn stop_guest(&mut self, why: String) {
        self.not_enforced.insert(why);
        self.kill_all();
    }

    /// Kills every live guest task.
    pub(crate) fn kill_all(&self) {
        for &t in &self.live {
            // ESRCH: the task is already gone, which is what was wanted.
            let _ = repro_sys::ptrace::kill_task(t, libc::SIGKILL);
        }
    }
}

/// The writable layer of a run without a `--disk` figure (repro-model's default).
pub(crate) fn default_disk() -> repro_detcore::statfs::DiskLimit {
    let bytes = repro_model::run::DEFAULT_DISK_BYTES;
    repro_detcore::statfs::DiskLimit { bytes, inodes: repro_model::run::disk_inodes_for(bytes) }
}

/// An absolute futex deadline the supervisor rewrote in guest memory before letting the wait run natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FutexRewrite {
    /// The address of the guest's timespec.
    pub addr: u64,
    /// What was written there (on the host's clock).
    pub host: repro_detcore::Timespec,
    /// The logical deadline it stands for.
    pub logical: repro_detcore::Timespec,
}

/// Devices of the pseudo file systems whose timestamps follow the host clock rather than writes.
pub(crate) fn pseudo_fs_devs() -> HashSet<u64> {
    let dev_of = |p: &str| {
        let c = CString::new(p).ok()?;
        let st = repro_sys::fdops::newfstatat_raw(None, &c, 0).ok()?;
        Some(u64::from_le_bytes(st[0..8].try_into().ok()?))
    };
    let root = dev_of("/");
    ["/proc", "/sys", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/run"]
        .iter()
        .filter_map(|p| dev_of(p))
        .filter(|d| Some(*d) != root)
        .collect()
}

impl Shared {
    /// Where the file `(dev, ino)` lives, for its times.
    pub(crate) fn file_origin(&self, dev: u64, ino: u64) -> repro_detcore::FileOrigin {
        use repro_detcore::FileOrigin;
        if self.pseudo_devs.contains(&dev) {
            FileOrigin::Pseudo
        } else if self.host_devs.contains(&dev) && !self.run_files.contains(&(dev, ino)) {
            FileOrigin::Host
        } else {
            FileOrigin::Run
        }
    }
}

/// One line of /proc/self/mountinfo: the mount's device, where it is mounted, and its file system type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountLine {
    pub dev: u64,
    pub mount_point: std::path::PathBuf,
    pub fstype: String,
}

/// Parses /proc/self/mountinfo (proc(5)): `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE
/// SOURCE SUPER_OPTIONS`, the mount point with spaces, tabs, newlines and backslashes as octal escapes. Lines that do
/// not have that shape are skipped.
pub(crate) fn parse_mountinfo(text: &[u8]) -> Vec<MountLine> {
    use std::os::unix::ffi::OsStringExt;
    let unescape = |f: &[u8]| {
        let mut out = Vec::with_capacity(f.len());
        let mut i = 0;
        while i < f.len() {
            let oct = f.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
            match (f[i], oct) {
                (b'\\', Some(d)) => {
                    out.push(d.iter().fold(0u8, |a, c| a.wrapping_mul(8).wrapping_add(c - b'0')));
                    i += 4;
                }
                (c, _) => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        std::path::PathBuf::from(std::ffi::OsString::from_vec(out))
    };
    let mut mounts = Vec::new();
    for line in text.split(|&c| c == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == b"-") else { continue };
        if sep < 6 || fields.len() < sep + 2 {
            continue;
        }
        let Some((major, minor)) = std::str::from_utf8(fields[2]).ok().and_then(|d| d.split_once(':')) else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>()) else { continue };
        mounts.push(MountLine {
            dev: libc::makedev(major, minor),
            mount_point: unescape(fields[4]),
            fstype: String::from_utf8_lossy(fields[sep + 1]).into_owned(),
        });
    }
    mounts
}

/// A path's device, inode and whether it is a directory.
pub(crate) type PathStat = (u64, u64, bool);

/// File systems whose files follow the host's clock: never looked at.
const PSEUDO: &[&str] = &[
    "proc",
    "sysfs",
    "devpts",
    "devtmpfs",
    "mqueue",
    "cgroup",
    "cgroup2",
    "securityfs",
    "debugfs",
    "tracefs",
    "bpf",
    "binfmt_misc",
    "autofs",
    "hugetlbfs",
    "nsfs",
    "pstore",
    "configfs",
    "fusectl",
    "efivarfs",
    "rpc_pipefs",
];

/// File systems made for the run (the sandbox's root, /tmp, /home, /dev, /run, masks), unless they hold a
/// replayed pack's root.
const MEMORY: &[&str] = &["tmpfs", "ramfs"];

/// The sandbox's own top-level directories: never a pack's.
const SANDBOX_DIRS: &[&str] = &["/proc", "/sys", "/dev", "/tmp", "/home", "/run"];

/// The devices of the host's installation in the guest's mount namespace (`mounts`), and the files on them that
/// the sandbox made for this run: every mount of a disk file system (the read-only binds of the host's
/// directories, toolchains, `--bind` trees) except the working directory `cwd` and what lies under it; the
/// files bind-mounted onto single paths (the fixed /etc files written into the run directory) are the run's.
/// `root_installed`: the top-level directories (but the sandbox's own) are binds of a replayed pack's root that
/// got the captured times back, whatever file system holds it (a cache on a tmpfs in a container).
/// `stat` gives a path's (device, inode, is a directory); the device a mount's files report can differ from the
/// one mountinfo names (btrfs subvolumes), so both count.
pub(crate) fn installed_files(
    mounts: &[MountLine],
    cwd: &std::path::Path,
    root_installed: bool,
    stat: &dyn Fn(&std::path::Path) -> Option<PathStat>,
) -> (HashSet<u64>, HashSet<(u64, u64)>) {
    use std::path::Path;
    let mut devs = HashSet::new();
    let mut run_files = HashSet::new();
    for m in mounts {
        if PSEUDO.contains(&m.fstype.as_str()) {
            continue;
        }
        let mp = m.mount_point.as_path();
        let pack_dir =
            root_installed && mp.parent() == Some(Path::new("/")) && !SANDBOX_DIRS.iter().any(|d| mp == Path::new(d));
        // A disk file system or an overlay (the host's root in a container), or a pack's top-level directory.
        let installed = !mp.starts_with(cwd) && (pack_dir || !MEMORY.contains(&m.fstype.as_str()));
        match stat(mp) {
            Some((dev, ino, false)) => {
                run_files.insert((dev, ino));
            }
            Some((dev, _, true)) if installed => {
                devs.insert(m.dev);
                devs.insert(dev);
            }
            _ => {}
        }
    }
    (devs, run_files)
}

/// [`installed_files`] of this process's mount namespace (the guest's), or nothing when it cannot be read.
pub(crate) fn installed_files_here(cwd: &std::path::Path, root_installed: bool) -> (HashSet<u64>, HashSet<(u64, u64)>) {
    let Ok(text) = std::fs::read("/proc/self/mountinfo") else { return Default::default() };
    let stat = |p: &std::path::Path| -> Option<PathStat> {
        use std::os::unix::ffi::OsStrExt;
        let c = CString::new(p.as_os_str().as_bytes()).ok()?;
        let st = repro_sys::fdops::newfstatat_raw(None, &c, 0).ok()?;
        let dev = u64::from_le_bytes(st[0..8].try_into().ok()?);
        let ino = u64::from_le_bytes(st[8..16].try_into().ok()?);
        let mode = u32::from_le_bytes(st[24..28].try_into().ok()?);
        Some((dev, ino, mode & libc::S_IFMT == libc::S_IFDIR))
    };
    let (devs, mut run_files) = installed_files(&parse_mountinfo(&text), cwd, root_installed, &stat);
    // `/` is the sandbox's own (a tmpfs, or a replayed pack's root directory, laid out for the run).
    if let Some((dev, ino, _)) = stat(std::path::Path::new("/")) {
        run_files.insert((dev, ino));
    }
    (devs, run_files)
}

pub(crate) type SharedRef = Arc<Mutex<Shared>>;

pub(crate) fn lock(s: &SharedRef) -> std::sync::MutexGuard<'_, Shared> {
    // A panic in the other thread must not make the run lose its results: use the data anyway.
    s.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const MOUNTINFO: &[u8] = b"70 46 0:41 / / ro,nosuid,nodev,relatime - tmpfs tmpfs rw,size=1024k\n\
74 70 254:0 /etc /etc ro,relatime - ext4 /dev/vda rw\n\
85 70 254:0 /usr /usr ro,relatime shared:1 master:2 - ext4 /dev/vda rw\n\
86 70 0:30 /@home /my\\040data ro,relatime - btrfs /dev/vdb rw\n\
95 86 0:44 / /work/proj rw,nosuid - overlay overlay rw,lowerdir=/x\n\
96 95 254:0 /x /work/proj/sub ro - ext4 /dev/vda rw\n\
91 70 0:42 /tmp /tmp rw - tmpfs tmpfs rw\n\
108 74 254:0 /run/.etc/hosts /etc/hosts ro,relatime - ext4 /dev/vda rw\n\
110 70 0:51 / /proc rw - proc proc rw\n\
bad line\n\
1 2 x:y / /z rw - ext4 /dev/vda rw\n";

    #[test]
    fn mountinfo_lines_are_parsed_with_escapes() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 9, "the two malformed lines are skipped: {m:?}");
        assert_eq!(m[1], MountLine { dev: libc::makedev(254, 0), mount_point: "/etc".into(), fstype: "ext4".into() });
        assert_eq!(m[2].fstype, "ext4", "optional fields before the separator");
        assert_eq!(m[3].mount_point, Path::new("/my data"));
    }

    #[test]
    fn the_installation_is_every_disk_mount_but_the_working_directory_and_file_binds() {
        let stat = |p: &Path| -> Option<PathStat> {
            match p.to_str()? {
                "/etc/hosts" => Some((65024, 967, false)),
                "/my data" => Some((77, 256, true)),
                "/proc" => panic!("{p:?}: never looked at"),
                "/" => Some((41, 1, true)),
                "/tmp" => Some((42, 1, true)),
                "/work/proj" => Some((44, 1, true)),
                _ => Some((65024, 2, true)),
            }
        };
        let (devs, run_files) = installed_files(&parse_mountinfo(MOUNTINFO), Path::new("/work/proj"), false, &stat);
        let mut devs: Vec<u64> = devs.into_iter().collect();
        devs.sort();
        let mut want = vec![65024, libc::makedev(254, 0), libc::makedev(0, 30), 77];
        want.sort();
        want.dedup();
        assert_eq!(devs, want, "ext4 and btrfs (both of their devices), not the overlay, tmpfs or proc");
        assert_eq!(run_files, HashSet::from([(65024, 967)]), "the file bind onto /etc/hosts is the run's");
        // A replayed pack's root on a tmpfs (a cache in a container) is the installation.
        let pack = b"70 46 0:41 / / ro - tmpfs tmpfs rw\n\
71 70 0:48 /cache/roots/x/root/usr /usr ro - tmpfs tmpfs rw\n\
72 70 0:48 /cache/roots/x/root/work /work ro - tmpfs tmpfs rw\n\
73 72 0:44 / /work/proj rw - overlay overlay rw\n\
74 70 0:42 /tmp /tmp rw - tmpfs tmpfs rw\n\
75 70 0:48 /cache/run/.etc/hosts /etc/hosts ro - tmpfs tmpfs rw\n";
        let stat_pack = |p: &Path| -> Option<PathStat> {
            match p.to_str()? {
                "/" => Some((41, 1, true)),
                "/tmp" => Some((42, 1, true)),
                "/work/proj" => Some((44, 1, true)),
                "/etc/hosts" => Some((48, 9, false)),
                _ => Some((48, 2, true)),
            }
        };
        let (devs, run_files) = installed_files(&parse_mountinfo(pack), Path::new("/work/proj"), true, &stat_pack);
        assert_eq!(devs, HashSet::from([libc::makedev(0, 48), 48]), "the pack's top-level binds, on a tmpfs");
        assert_eq!(run_files, HashSet::from([(48, 9)]));
        let (devs, _) = installed_files(&parse_mountinfo(pack), Path::new("/work/proj"), false, &stat_pack);
        assert!(devs.is_empty(), "a run's tmpfs and overlay mounts are not the installation: {devs:?}");
    }

    #[test]
    fn origins() {
        let mut sh = Shared::new(DeterminismController::new(&repro_detcore::ControllerConfig {
            seed: 0,
            epoch_unix_secs: 0,
            clock_step_ns: 0,
            cpus: 1,
            machine: "x86_64".into(),
            run_start_real_ns: 0,
            nodename: "n".into(),
            dir_order: repro_detcore::DirOrder::Sorted,
        }));
        sh.pseudo_devs.insert(5);
        sh.host_devs.insert(7);
        sh.run_files.insert((7, 9));
        use repro_detcore::FileOrigin;
        assert_eq!(sh.file_origin(5, 1), FileOrigin::Pseudo);
        assert_eq!(sh.file_origin(7, 1), FileOrigin::Host);
        assert_eq!(sh.file_origin(7, 9), FileOrigin::Run);
        assert_eq!(sh.file_origin(46, 1), FileOrigin::Run, "a working directory file (overlay's own device)");
    }
}
