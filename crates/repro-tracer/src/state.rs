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
    /// The replacement vDSO's shared clock page, or why there is none.
    pub vdso: Option<vdso::ClockPage>,
    pub vdso_unavailable: Option<String>,
    /// Tasks being given the vDSO memfd at their exec stop (see exec::install).
    pub vdso_fd_requests: HashSet<i32>,
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
            vdso: None,
            vdso_unavailable: None,
            vdso_fd_requests: HashSet::new(),
            inherited_fds: HashSet::new(),
            own_network: false,
            futex_rewrites: HashMap::new(),
            parked: HashMap::new(),
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

pub(crate) type SharedRef = Arc<Mutex<Shared>>;

pub(crate) fn lock(s: &SharedRef) -> std::sync::MutexGuard<'_, Shared> {
    // A panic in the other thread must not make the run lose its results: use the data anyway.
    s.lock().unwrap_or_else(|p| p.into_inner())
}
