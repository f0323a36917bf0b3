//! The fixed parts and the defaults of a run's settings ([`crate::run::RunSettings`]): what every guest gets
//! unless an option says otherwise, defined once for `run`, `capture`, a pack's replay and `hunt`'s baseline.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::run::{Epoch, Rlimit, RunSettings, DEFAULT_DISK_BYTES};
use crate::DirOrder;

/// The guest's host name unless `--hostname` gives another.
pub const HOSTNAME: &str = "repro";
/// The guest's domain name.
pub const DOMAINNAME: &str = "repro.invalid";
/// The guest's umask.
pub const UMASK: u32 = 0o022;
/// Default memory limit: 4 GiB.
pub const DEFAULT_MEMORY: u64 = 4 << 30;
pub use crate::run::DEFAULT_PIDS;
/// The largest `--pids`: the kernel's `PID_MAX_LIMIT` on 64-bit machines (`pids.max` refuses more).
pub const MAX_PIDS: u64 = 4 << 20;
/// Default clock step: each clock read advances logical time by 1 µs (see docs/determinism.md).
pub const DEFAULT_CLOCK_STEP_NS: u64 = 1000;
/// `RLIM_INFINITY` on Linux.
pub const RLIM_INFINITY: u64 = u64::MAX;

/// The guest's resource limits: `nofile` 1024/4096, `stack` 8 MiB/unlimited, no core files.
pub fn fixed_rlimits() -> Vec<Rlimit> {
    [("nofile", 1024, 4096), ("stack", 8 << 20, RLIM_INFINITY), ("core", 0, 0)]
        .into_iter()
        .map(|(name, soft, hard)| Rlimit { resource: name.into(), soft, hard })
        .collect()
}

/// The umask as the record writes it (`0022`).
pub fn umask_text(umask: u32) -> String {
    format!("{umask:04o}")
}

/// The options of `repro run` as the user gave them (strings still unparsed): `repro_sandbox::run::RunRequest::prepare`
/// checks them against the host and makes the [`RunSettings`].
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub command: Vec<String>,
    pub epoch: Option<String>,
    /// `--seed`; the project file's, else 0, when not given.
    pub seed: Option<u64>,
    pub cpus: u32,
    pub memory: Option<String>,
    /// `--pids`: the bound of the guest's tasks; the project file's, else [`DEFAULT_PIDS`], when not given.
    pub pids: Option<u64>,
    pub env: Vec<String>,
    pub bind: Vec<String>,
    pub keep_changes: bool,
    pub state_dir: Option<PathBuf>,
    /// Logical nanoseconds per clock read (`--clock-step-ns`).
    pub clock_step_ns: u64,
    /// Run without the determinism supervisor (`--no-supervisor`).
    pub no_supervisor: bool,
    /// The guest's host name (`--hostname`; default `repro`).
    pub hostname: Option<String>,
    /// The order of directory listings (`--dir-order`; default sorted).
    pub dir_order: Option<String>,
    /// The bound of the writable layer (`--disk`; default 2G).
    pub disk: Option<String>,
    /// The deadlock watchdog's wall time (`--stuck-after`, e.g. `2s`, `500ms`, `1m`, `0` for off; default 60s).
    pub stuck_after: Option<String>,
    /// The spin-loop watchdog's limit (`--spin-limit`, e.g. `2s`, `500ms`; default 2s).
    pub spin_limit: Option<String>,
    /// The scheduler's policy (`--sched`: random, round-robin or pct; default random).
    pub sched: Option<String>,
    /// The scheduler's seed (`--sched-seed`; default 0).
    pub sched_seed: Option<u64>,
    /// Where the scheduler decides (`--sched-points`: blocking or io; default blocking).
    pub sched_points: Option<String>,
    /// A forced schedule's file (`--sched-script`).
    pub sched_script: Option<PathBuf>,
    /// Log the scheduler's decisions (`--sched-log`).
    pub sched_log: bool,
    /// Which project file (`repro.toml`) to use.
    pub config: ConfigChoice,
}

/// Which project file a run takes its settings from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ConfigChoice {
    /// `repro.toml` in the working directory or the nearest ancestor, up to the git root.
    #[default]
    Discover,
    /// `--config FILE`.
    File(PathBuf),
    /// `--no-config`.
    Ignore,
}

/// What `repro capture` and `repro replay` add to a run.
#[derive(Debug, Clone, Default)]
pub struct RunExtras {
    /// Record the paths the guest uses (needs the supervisor; repro-sandbox's `run::execute_with`).
    pub record_access: bool,
    /// Bind this directory as the guest's `/` instead of the host's (a pack's root).
    pub root_source: Option<PathBuf>,
    /// `root_source` carries the captured host's file times (a pack that recorded them): its files keep them as
    /// the host's installation does in a run; otherwise every time before the run is pinned.
    pub root_times: bool,
    /// Share the host's network (`repro capture --network record`) instead of an empty network namespace.
    pub host_network: bool,
    /// The network and /proc tapes to record or replay (need the supervisor).
    pub tapes: crate::tape::TapeSettings,
    /// With `record_access`: an existing file to which the paths the guest reads are appended while it runs.
    pub access_stream: Option<PathBuf>,
}

impl RunSettings {
    /// The settings of a run of `command` in `cwd` from `epoch` with every default and fixed part: seed 0, one
    /// CPU, [`DEFAULT_MEMORY`], [`DEFAULT_DISK_BYTES`], host name [`HOSTNAME`], sorted directories, the supervisor
    /// on with [`DEFAULT_CLOCK_STEP_NS`], the fixed domain name, umask, rlimits and no ASLR. The host-dependent
    /// parts (`cpu_affinity`, `identity`) are left empty: repro-sandbox's `settings::for_host` fills them.
    pub fn defaults(command: Vec<String>, cwd: String, epoch: Epoch) -> RunSettings {
        RunSettings {
            command,
            cwd,
            epoch,
            seed: 0,
            cpus: 1,
            cpu_affinity: Vec::new(),
            memory_bytes: DEFAULT_MEMORY,
            pids_max: DEFAULT_PIDS,
            env: BTreeMap::new(),
            binds: Vec::new(),
            keep_changes: false,
            hostname: HOSTNAME.into(),
            domainname: DOMAINNAME.into(),
            umask: umask_text(UMASK),
            aslr: false,
            rlimits: fixed_rlimits(),
            user_namespace: true,
            identity: None,
            supervised: true,
            clock_step_ns: DEFAULT_CLOCK_STEP_NS,
            dir_order: DirOrder::Sorted,
            disk_bytes: DEFAULT_DISK_BYTES,
            disk_inodes: crate::run::disk_inodes_for(DEFAULT_DISK_BYTES),
            project_file: None,
            toolchains: Vec::new(),
            repository: None,
            path_notes: Vec::new(),
            stuck_after_ms: crate::run::DEFAULT_STUCK_AFTER_MS,
            spin_limit_ms: crate::run::DEFAULT_SPIN_LIMIT_MS,
            sched: crate::sched::SchedSettings::default(),
            sched_script: None,
            sched_log: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::EpochSource;

    #[test]
    fn defaults_hold_the_fixed_parts() {
        let e = Epoch {
            unix: crate::run::DEFAULT_EPOCH,
            rfc3339: "2025-01-01T00:00:00Z".into(),
            source: EpochSource::Default,
        };
        let s = RunSettings::defaults(vec!["true".into()], "/w".into(), e);
        assert_eq!((s.hostname.as_str(), s.domainname.as_str(), s.umask.as_str()), ("repro", "repro.invalid", "0022"));
        assert_eq!(s.rlimits.iter().map(|r| r.resource.as_str()).collect::<Vec<_>>(), ["nofile", "stack", "core"]);
        assert_eq!(s.rlimits[1].hard, RLIM_INFINITY);
        assert_eq!(s.disk_inodes, crate::run::disk_inodes_for(s.disk_bytes));
        assert!(s.supervised && s.user_namespace && !s.aslr);
        assert_eq!(s.dir_order, DirOrder::Sorted);
    }
}
