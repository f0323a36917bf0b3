//! The record of one `repro run`: what was asked, what was in force, and how it ended.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the `run.json` format.
pub const RUN_FORMAT: u32 = 1;

/// The epoch a run starts from when nothing else sets one: 2025-01-01T00:00:00Z, in Unix seconds. The one
/// definition: `run`, `capture`, `hunt` and the pack's replay all take it from here.
pub const DEFAULT_EPOCH: i64 = 1_735_689_600;

/// Where the run's epoch came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EpochSource {
    /// `--epoch`.
    Flag,
    /// The host's SOURCE_DATE_EPOCH.
    SourceDateEpoch,
    /// The commit time of the git HEAD of the current directory.
    GitHead,
    /// `epoch` in the project file (`repro.toml`, see [`crate::project`]).
    ProjectFile,
    /// The fixed default, 2025-01-01T00:00:00Z.
    Default,
}

/// The run's epoch: the instant the guest's clock starts from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epoch {
    /// Seconds since 1970-01-01T00:00:00Z.
    pub unix: i64,
    /// The same instant in RFC 3339.
    pub rfc3339: String,
    pub source: EpochSource,
}

impl EpochSource {
    /// Why the run has this epoch, as the summary line says it: `--epoch`, `SOURCE_DATE_EPOCH`, `git HEAD`,
    /// `repro.toml`, or for the default what was missing.
    pub fn describe(self) -> &'static str {
        match self {
            EpochSource::Flag => "--epoch",
            EpochSource::SourceDateEpoch => "SOURCE_DATE_EPOCH",
            EpochSource::GitHead => "the commit time of git HEAD",
            EpochSource::ProjectFile => "epoch in repro.toml",
            EpochSource::Default => "default: no --epoch, no SOURCE_DATE_EPOCH, not a git checkout",
        }
    }
}

/// A toolchain `repro run` found on the host for the command and made visible to the guest: what was passed and
/// why (see repro-sandbox's `toolchain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toolchain {
    /// `rustup`, `pyenv`, `virtualenv`, `nvm` or `go`.
    pub name: String,
    /// The host file the command resolved to.
    pub command: String,
    /// Host directories bound read-only at the same path in the guest.
    pub paths: Vec<String>,
    /// Variables set in the guest's environment (PATH as the guest gets it).
    pub variables: BTreeMap<String, String>,
    /// Why: which host setting led to this toolchain.
    pub reason: String,
    /// The directories of `paths` that lie under the host's HOME, shown read-only once more at the same place
    /// under the guest's HOME (`/root/.cargo` also at `/home/repro/.cargo`), so that a script saying
    /// `$HOME/.cargo/bin` or `~/.pyenv/versions/...` finds them as natively: guest path to host path.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub home_paths: BTreeMap<String, String>,
}

/// The part of the working directory's git repository shown to the guest beyond its working directory, so that
/// `git status`, `git log` and `git describe` answer as on the host from a subdirectory or a linked worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepositoryView {
    /// The repository's work tree (the directory holding `.git`).
    pub top: String,
    /// Host directories bound read-only (idmapped as root) at the same path in the guest: the work tree, and for a
    /// linked worktree the main repository's git directory.
    pub paths: Vec<String>,
    /// Variables set in the guest's environment (`GIT_DISCOVERY_ACROSS_FILESYSTEM=1` when the working directory,
    /// a mount of its own, lies below the work tree).
    pub variables: BTreeMap<String, String>,
    /// Why these paths.
    pub reason: String,
}

/// A path added to the sandbox with `--bind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindMount {
    pub host: String,
    pub guest: String,
    pub writable: bool,
}

/// One range of a user namespace's id map: guest ids `inside..inside+count` are host ids `outside..outside+count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// Who the guest is on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub uid_map: IdRange,
    pub gid_map: IdRange,
    /// Where the host range came from: `/etc/subuid`, `/etc/subgid`, `default` or `caller` (a single-id map of an
    /// unprivileged caller).
    pub source: String,
    /// Whether the working directory (or a pack's root) and `:rw` binds are idmapped, so that host files look to
    /// the guest as they do on the host (host root's files owned by guest root) and guest writes land as the
    /// host's ids (needs root).
    pub idmapped_mounts: bool,
}

/// A resource limit applied to the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rlimit {
    pub resource: String,
    pub soft: u64,
    pub hard: u64,
}

/// Every setting in force for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSettings {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The working directory (the same path inside and outside the sandbox).
    pub cwd: String,
    pub epoch: Epoch,
    pub seed: u64,
    /// CPUs the guest is pinned to (count requested).
    pub cpus: u32,
    /// The host CPUs actually used for the affinity mask.
    pub cpu_affinity: Vec<usize>,
    /// Memory limit in bytes.
    pub memory_bytes: u64,
    /// The bound of the guest's tasks, processes and threads together (`--pids`, the cgroup's `pids.max`).
    #[serde(default = "default_pids_max")]
    pub pids_max: u64,
    /// The guest's whole environment; in `run.json` the values of secret variables are markers
    /// (see [`crate::secrets`]).
    pub env: BTreeMap<String, String>,
    pub binds: Vec<BindMount>,
    pub keep_changes: bool,
    pub hostname: String,
    pub domainname: String,
    pub umask: String,
    pub aslr: bool,
    pub rlimits: Vec<Rlimit>,
    /// Whether the guest ran in a user namespace (always, since the guest's root must not be the host's).
    pub user_namespace: bool,
    /// The guest's user namespace: its id maps and whether the working directory, a pack's root and `:rw`
    /// binds were idmapped. `None` in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Identity>,
    /// Whether the determinism supervisor mediated the guest (`--no-supervisor` turns it off).
    #[serde(default)]
    pub supervised: bool,
    /// Logical nanoseconds each clock read advances the guest's clock; 0 freezes it between events.
    #[serde(default)]
    pub clock_step_ns: u64,
    /// The order of directory listings, written `sorted`, `reversed` or `shuffled:SEED`.
    #[serde(default)]
    pub dir_order: crate::DirOrder,
    /// The bound of the guest's writable layer (`--disk`): bytes of the working directory's overlay, /tmp and
    /// /home together.
    #[serde(default = "default_disk_bytes")]
    pub disk_bytes: u64,
    /// The inode bound of the same layer (derived from `disk_bytes`).
    #[serde(default = "default_disk_inodes")]
    pub disk_inodes: u64,
    /// The project file (`repro.toml`) whose settings were used, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_file: Option<String>,
    /// The toolchains found on the host for the command and passed to the guest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub toolchains: Vec<Toolchain>,
    /// The working directory's git repository, where the guest is shown more of it than its working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryView>,
    /// Names the host's PATH finds elsewhere than the guest's and repro could not show (said once on stderr).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_notes: Vec<String>,
    /// The deadlock watchdog's wall time in milliseconds (`--stuck-after`; 0: off). Left out of the record when it
    /// is the default, so that records written before it existed read and write back the same.
    #[serde(default = "default_stuck_after_ms", skip_serializing_if = "is_default_stuck_after")]
    pub stuck_after_ms: u64,
    /// The spin-loop watchdog's limit in milliseconds of CPU time a guest thread may run without a system call
    /// while another waits (`--spin-limit`); left out when it is the default.
    #[serde(default = "default_spin_limit_ms", skip_serializing_if = "is_default_spin_limit")]
    pub spin_limit_ms: u64,
    /// The deterministic scheduler's policy and seed (`--sched`, `--sched-seed`); records written before it existed
    /// read as the default (random, seed 0).
    #[serde(default)]
    pub sched: crate::sched::SchedSettings,
    /// A forced schedule (`--sched-script`): the decisions where the scheduler switched, every other one
    /// non-preemptive; `settings.sched` is then not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched_script: Option<crate::sched::SchedScript>,
    /// Whether the scheduler's decisions were logged (`--sched-log`, into `determinism.schedule`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sched_log: bool,
}

/// The deadlock watchdog's default: a minute of every task waiting on another.
pub const DEFAULT_STUCK_AFTER_MS: u64 = 60_000;

/// The spin-loop watchdog's default: two seconds of CPU time without a system call while another thread waits
/// (a JVM's interpreter ran 200 ms without one while its JIT compiler threads waited; see docs/determinism.md).
pub const DEFAULT_SPIN_LIMIT_MS: u64 = 2_000;

/// The longest spin-loop limit accepted (`--spin-limit`, a pack's `determinism.spin_limit_ms`): an hour.
pub const MAX_SPIN_LIMIT_MS: u64 = 3_600_000;

/// Why `ms` is not a spin-loop limit (`None`: it is one): 1 ms to [`MAX_SPIN_LIMIT_MS`].
pub fn bad_spin_limit_ms(ms: u64) -> Option<String> {
    (!(1..=MAX_SPIN_LIMIT_MS).contains(&ms))
        .then(|| format!("{ms} ms (expected 1 ms to {} h, e.g. 2s or 500ms)", MAX_SPIN_LIMIT_MS / 3_600_000))
}

/// The spin-loop watchdog's limit once a run was refused: where it preempts no longer matters, only speed does.
pub const REFUSED_SPIN_LIMIT_MS: u64 = 200;

pub(crate) fn default_spin_limit_ms() -> u64 {
    DEFAULT_SPIN_LIMIT_MS
}

pub(crate) fn is_default_spin_limit(ms: &u64) -> bool {
    *ms == DEFAULT_SPIN_LIMIT_MS
}

fn default_stuck_after_ms() -> u64 {
    DEFAULT_STUCK_AFTER_MS
}

fn is_default_stuck_after(ms: &u64) -> bool {
    *ms == DEFAULT_STUCK_AFTER_MS
}

impl RunSettings {
    /// The settings as recorded and reported: the values of secret variables replaced by their markers
    /// (see [`crate::secrets`]). The guest is given the real settings.
    pub fn redacted(&self) -> RunSettings {
        RunSettings { env: crate::secrets::redact_env(&self.env), ..self.clone() }
    }
}

/// Default bound of the guest's tasks (processes and threads together): 4096. The memory limit alone admits
/// ~40,000 tasks (~100 KiB each), more than a host's usual `pid_max` (32768).
pub const DEFAULT_PIDS: u64 = 4096;

/// The default `--disk`: 2 GiB.
pub const DEFAULT_DISK_BYTES: u64 = 2 << 30;

/// The inode bound that goes with a `--disk` size: one inode per 8 KiB, at least 1024.
pub fn disk_inodes_for(bytes: u64) -> u64 {
    (bytes / 8192).max(1024)
}

fn default_disk_bytes() -> u64 {
    DEFAULT_DISK_BYTES
}

/// Records written before `--pids` existed ran without a bound of tasks; read back, they get the default.
fn default_pids_max() -> u64 {
    DEFAULT_PIDS
}

fn default_disk_inodes() -> u64 {
    disk_inodes_for(DEFAULT_DISK_BYTES)
}

/// What the determinism supervisor did and could not do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Determinism {
    /// Whether the guest ran under the supervisor.
    pub supervised: bool,
    /// What the supervisor could not enforce; a run with any is reported as not deterministic (exit 121).
    pub not_enforced: Vec<String>,
    /// Mediated system calls answered by the supervisor, by name.
    pub mediated: BTreeMap<String, u64>,
    /// Processes and threads the guest created.
    pub tasks_created: u64,
    /// Program images started (execve).
    pub execs: u64,
    /// The deadlock watchdog stopped the guest (exit 120): where each task waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<String>,
    /// What the supervisor noticed without it making the run unreproducible: a library containing RDRAND, ports
    /// left to the kernel on the host's network, "waits on outside descriptors ran in real time: ..." (at most
    /// 8); also listed with the run's other warnings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The scheduler's decisions, with `--sched-log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<crate::sched::SchedLog>,
}

/// How the guest ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RunOutcome {
    /// The guest exited with a code.
    Exited { code: i32 },
    /// The guest was killed by a signal.
    Signaled { signal: i32, name: String },
    /// The command could not be executed (126 or 127).
    ExecFailed { errno: i32, message: String },
    /// repro could not set the sandbox up (125).
    SetupFailed { message: String },
}

/// How a limit was (or was not) enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// The cgroup path used for the memory limit, if any.
    pub cgroup: Option<String>,
    /// The cgroup whose `pids.max` bounds the guest's tasks (`--pids`), if any: the memory one with cgroup v2,
    /// one in the pids hierarchy with v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_cgroup: Option<String>,
    /// Without such a cgroup: the RLIMIT_NPROC the init and the guest got instead (`--pids`), counted per user in
    /// the sandbox's own user namespace (the caller's other processes do not count). Nothing counts the forks it
    /// refused, so `pids_limit_reached` stays false under it. (`--pids` is at most 4194304; a `NonZeroU32` keeps
    /// the record as small as it was.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_rlimit: Option<std::num::NonZeroU32>,
    /// Messages for what could not be enforced.
    pub warnings: Vec<String>,
    /// The guest filled its writable layer (`--disk` bytes or inodes): its writes failed with ENOSPC.
    #[serde(default)]
    pub disk_limit_reached: bool,
    /// The guest reached `--pids`: some of its forks and clones failed with EAGAIN (the cgroup's `pids.events`).
    #[serde(default)]
    pub pids_limit_reached: bool,
}

/// `run.json`: the complete record of a finished run. Written last and atomically: a run directory without it
/// did not finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub format: u32,
    pub id: String,
    pub repro_version: String,
    pub settings: RunSettings,
    /// Wall-clock start, RFC 3339 (host time: when the run happened, not what the guest saw).
    pub started_at: String,
    pub duration_ms: u64,
    pub outcome: RunOutcome,
    /// repro's own exit status for this run.
    pub exit_status: i32,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub changes: ChangeSummary,
    pub enforcement: Enforcement,
    #[serde(default)]
    pub determinism: Determinism,
}

/// Counts of changed files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSummary {
    pub added: u32,
    pub modified: u32,
    pub deleted: u32,
    /// Whether the changes were copied back to the real directory (`--keep-changes`).
    pub kept: bool,
    /// Entries not copied to the run directory or back (see [`Changes::skipped`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What happened to one path of the working directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// The kind of file a change is about. Only files, directories and links are ever copied (to the run directory,
/// or back with `--keep-changes`); the other kinds are recorded in [`Changes::skipped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl FileKind {
    /// The word for it in messages: `fifo`, `socket`, `character device`...
    pub fn word(self) -> &'static str {
        match self {
            FileKind::File => "file",
            FileKind::Dir => "directory",
            FileKind::Symlink => "symbolic link",
            FileKind::Fifo => "fifo",
            FileKind::Socket => "socket",
            FileKind::CharDevice => "character device",
            FileKind::BlockDevice => "block device",
        }
    }
}

/// Why an entry the guest left was not copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkipReason {
    /// A fifo, socket or device node: never opened.
    SpecialFile,
    /// A file larger (holes included) than the run's writable layer.
    TooLarge,
    /// The copy reached its bound of bytes, entries or depth.
    OverBudget,
    /// The run directory's filesystem has not enough free space.
    NoSpace,
    /// Reading or writing it failed (a symbolic link in the way is one such failure: it is never followed).
    Failed,
}

/// An entry of the working directory the guest left that was not copied to the run directory, or not back to
/// the working directory with `--keep-changes`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Skipped {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    /// What it is (absent when its status could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileKind>,
    pub reason: SkipReason,
    /// In words: which copy, and why.
    pub message: String,
}

/// One entry of `changes.json`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Change {
    /// Path relative to the working directory (as text; see `path_hex`).
    pub path: String,
    /// The path's exact bytes in hex when it is not valid UTF-8 (see [`crate::pathenc`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub kind: ChangeKind,
    pub file: FileKind,
    /// Size in bytes (files), absent for deletions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// blake3 of the content (files) or the link target (symlinks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
}

/// `changes.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub changes: Vec<Change>,
    /// What was not copied, and why (absent in records made before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// A change whose `path_hex` does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the change of {path:?}: path_hex: {message}")]
pub struct BadChangePath {
    pub path: String,
    pub message: String,
}

impl Change {
    /// The path this change is about, exact bytes included (see [`crate::pathenc`]).
    pub fn rel_path(&self) -> Result<std::path::PathBuf, BadChangePath> {
        crate::pathenc::decode(&self.path, self.path_hex.as_deref())
            .map_err(|e| BadChangePath { path: self.path.clone(), message: e.to_string() })
    }
}

impl Changes {
    pub fn summary(&self, kept: bool) -> ChangeSummary {
        let count = |k| self.changes.iter().filter(|c| c.kind == k && c.file != FileKind::Dir).count() as u32;
        ChangeSummary {
            added: count(ChangeKind::Added),
            modified: count(ChangeKind::Modified),
            deleted: count(ChangeKind::Deleted),
            kept,
            skipped: self.skipped.len().min(u32::MAX as usize) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_serializes_with_a_kind_tag() {
        let o = RunOutcome::Signaled { signal: 9, name: "SIGKILL".into() };
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["kind"], "signaled");
        assert_eq!(v["signal"], 9);
        let back: RunOutcome = serde_json::from_value(v).unwrap();
        assert_eq!(back, o);
    }

    #[test]
    fn a_run_json_written_before_the_typed_dir_order_reads_and_writes_back_the_same() {
        // Written by `repro run --dir-order shuffled:7` before `dir_order` became a `DirOrder`.
        let text = include_str!("testdata/run-before-issue13.json");
        let r: RunRecord = serde_json::from_str(text).unwrap();
        assert_eq!(r.settings.dir_order, crate::DirOrder::Shuffled(7));
        let original: serde_json::Value = serde_json::from_str(text).unwrap();
        // It had no scheduler: the default, which is always written back (the interleaving is part of the run).
        assert_eq!(r.settings.sched, crate::SchedSettings::default());
        let mut back = serde_json::to_value(&r).unwrap();
        assert_eq!(back["settings"]["sched"], serde_json::json!({"policy": "random", "seed": 0}));
        back["settings"].as_object_mut().unwrap().remove("sched");
        // It had no bound of tasks (it ran before `--pids`): read back, the default; nothing reached it.
        assert_eq!(r.settings.pids_max, DEFAULT_PIDS);
        assert_eq!(back["settings"].as_object_mut().unwrap().remove("pids_max"), Some(4096.into()));
        assert_eq!(back["enforcement"].as_object_mut().unwrap().remove("pids_limit_reached"), Some(false.into()));
        assert_eq!(back, original);
        // The oldest records have no dir_order at all: sorted.
        let mut v = original.clone();
        v["settings"].as_object_mut().unwrap().remove("dir_order");
        let r: RunRecord = serde_json::from_value(v).unwrap();
        assert_eq!(r.settings.dir_order, crate::DirOrder::Sorted);
        // A bad one names what was expected.
        let mut v = original;
        v["settings"]["dir_order"] = "sideways".into();
        let e = serde_json::from_value::<RunRecord>(v).unwrap_err().to_string();
        assert!(e.contains("expected sorted, reversed or shuffled:SEED"), "{e}");
    }

    #[test]
    fn a_change_with_a_bad_path_hex_is_refused_naming_it() {
        let c = Change {
            path: "a".into(),
            path_hex: Some("zz".into()),
            kind: ChangeKind::Added,
            file: FileKind::File,
            size: None,
            blake3: None,
        };
        let e = c.rel_path().unwrap_err();
        assert_eq!(e.path, "a");
        assert!(e.to_string().starts_with("the change of \"a\": path_hex: "), "{e}");
        let ok = Change { path_hex: Some("61".into()), ..c };
        assert_eq!(ok.rel_path().unwrap(), std::path::PathBuf::from("a"));
    }

    #[test]
    fn changes_written_before_skipped_entries_existed_still_read() {
        let old = r#"{"changes":[{"path":"a","kind":"added","file":"file","size":1,"blake3":"00"}]}"#;
        let c: Changes = serde_json::from_str(old).unwrap();
        assert!(c.skipped.is_empty());
        assert_eq!(serde_json::to_string(&c).unwrap(), old, "written back the same");
        let s: ChangeSummary = serde_json::from_str(r#"{"added":1,"modified":0,"deleted":0,"kept":false}"#).unwrap();
        assert_eq!(s.skipped, 0);
        // A fifo is recorded by kind, and listed as skipped with why.
        let new = Changes {
            changes: vec![Change {
                path: "f".into(),
                path_hex: None,
                kind: ChangeKind::Added,
                file: FileKind::Fifo,
                size: None,
                blake3: None,
            }],
            skipped: vec![Skipped {
                path: "f".into(),
                path_hex: None,
                file: Some(FileKind::Fifo),
                reason: SkipReason::SpecialFile,
                message: "not copied: fifo".into(),
            }],
        };
        let v = serde_json::to_value(&new).unwrap();
        assert_eq!(v["changes"][0]["file"], "fifo");
        assert_eq!(v["skipped"][0]["reason"], "special-file");
        assert_eq!(serde_json::from_value::<Changes>(v).unwrap(), new);
        assert_eq!(new.summary(false).skipped, 1);
    }

    #[test]
    fn summary_counts_files_not_directories() {
        let c = Changes {
            changes: vec![
                Change {
                    path: "a".into(),
                    path_hex: None,
                    kind: ChangeKind::Added,
                    file: FileKind::File,
                    size: Some(1),
                    blake3: None,
                },
                Change {
                    path: "d".into(),
                    path_hex: None,
                    kind: ChangeKind::Added,
                    file: FileKind::Dir,
                    size: None,
                    blake3: None,
                },
                Change {
                    path: "b".into(),
                    path_hex: None,
                    kind: ChangeKind::Deleted,
                    file: FileKind::File,
                    size: None,
                    blake3: None,
                },
            ],
            skipped: vec![],
        };
        let s = c.summary(false);
        assert_eq!((s.added, s.modified, s.deleted), (1, 0, 1));
    }
}
