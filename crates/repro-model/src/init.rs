//! The messages between `repro run` and the sandbox's init (`repro __init`), which cross a process boundary: the
//! configuration the init reads from a memfd ([`InitConfig`]) and the result it writes back ([`InitResult`]).
//! Both are JSON; the descriptor numbers they travel on are repro-sandbox's (`repro_sandbox::init`).

use serde::{Deserialize, Serialize};

use crate::run::{BindMount, Determinism, RunOutcome};
use crate::tape::{TapeSettings, TapesOut};
use crate::DirOrder;

/// What a detached, idmapped mount tree sent to the init is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TreeRole {
    /// The working directory: attached at [`InitConfig::stage`], the overlay's lower layer.
    Cwd,
    /// A pack's root (`root_source`): attached at [`InitConfig::stage`], bound as the guest's `/`.
    RootSource,
    /// `--bind` number N: attached at its guest path (idmapped when possible; a read-only one that cannot be is a
    /// plain copy of its mount).
    Bind(usize),
}

/// Everything the init needs, written by `repro run` to a memfd.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitConfig {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// The one empty directory of the run on the host: the init mounts a small tmpfs of its own there first (seen
    /// only in its mount namespace) and makes [`InitConfig::root`], [`InitConfig::layer`], [`InitConfig::stage`]
    /// and the /etc files in it, so the host's disk holds no other scratch of the run.
    #[serde(default)]
    pub scratch: String,
    /// Where the new root is assembled: a directory the init makes in `scratch`.
    pub root: String,
    /// Where the init mounts the writable layer (a tmpfs of `disk_bytes` and `disk_inodes`): a directory it makes
    /// in `scratch`.
    pub layer: String,
    pub disk_bytes: u64,
    pub disk_inodes: u64,
    /// Paths to hide from the guest (the state directory when it lies inside the working directory).
    pub hide: Vec<String>,
    pub binds: Vec<BindMount>,
    /// Files to place at `/etc/<name>` (read-only): `(name, content)`; the init writes them in `scratch`.
    pub etc: Vec<(String, String)>,
    pub hostname: String,
    pub domainname: String,
    pub umask: u32,
    pub no_aslr: bool,
    /// `(resource number, soft, hard)`.
    pub rlimits: Vec<(i32, u64, u64)>,
    pub cpus: Vec<usize>,
    /// Whether the init runs in its own user namespace (overlay then needs `userxattr`).
    pub user_namespace: bool,
    /// The detached idmapped mounts the init receives, in order (empty for an unprivileged caller).
    #[serde(default)]
    pub trees: Vec<TreeRole>,
    /// Where the tree of the working directory (or of a pack's root) is attached: a directory the init makes in
    /// `scratch`.
    #[serde(default)]
    pub stage: String,
    /// The determinism supervisor's settings; `None` runs the guest without it.
    pub determinism: Option<DetSettings>,
    /// A directory to bind (read-only) as the guest's `/` instead of the host's (a reproducer pack's root);
    /// the working directory's overlay then takes its lower layer from inside it.
    #[serde(default)]
    pub root_source: Option<String>,
    /// `root_source` carries the captured host's file times ([`crate::settings::RunExtras::root_times`]).
    #[serde(default)]
    pub root_times: bool,
    /// Share the host's network namespace (`repro capture --network record`): the init then neither brings
    /// up `lo` nor expects a network namespace of its own.
    #[serde(default)]
    pub host_network: bool,
    /// The network and /proc tapes to record or replay.
    #[serde(default)]
    pub tapes: TapeSettings,
    /// Said after "cannot execute" when the command is not found: where the host has it and what fixes it.
    #[serde(default)]
    pub exec_hint: Option<String>,
}

/// What the supervisor makes the guest's view of the world a function of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetSettings {
    pub seed: u64,
    pub epoch_unix_secs: i64,
    pub clock_step_ns: u64,
    /// CPUs as the guest sees them.
    pub cpus: u32,
    /// Record the paths the guest uses (`repro capture`).
    #[serde(default)]
    pub record_access: bool,
    /// The host name the guest sees.
    #[serde(default = "default_hostname")]
    pub hostname: String,
    /// The order of directory listings (`sorted`, `reversed` or `shuffled:SEED`).
    #[serde(default)]
    pub dir_order: DirOrder,
    /// With `record_access`: a file the paths the guest reads are appended to while it runs (the init receives it
    /// open on a descriptor; the path is for messages).
    #[serde(default)]
    pub access_stream: Option<String>,
    /// The deadlock watchdog's wall time in milliseconds (0: off).
    #[serde(default)]
    pub stuck_after_ms: u64,
    /// The spin-loop watchdog's limit in milliseconds of CPU time.
    #[serde(default = "crate::run::default_spin_limit_ms")]
    pub spin_limit_ms: u64,
    /// The deterministic scheduler's policy and seed.
    #[serde(default)]
    pub sched: crate::sched::SchedSettings,
    /// A forced schedule, instead of `sched`'s policy.
    #[serde(default)]
    pub sched_script: Option<crate::sched::SchedScript>,
    /// Log the scheduler's decisions.
    #[serde(default)]
    pub sched_log: bool,
    /// Files earlier runs scanned and found free of RDRAND/RDSEED (the state directory's cache): not read again
    /// while they are unchanged.
    #[serde(default)]
    pub rdrand_clean: Vec<ScannedFile>,
}

/// A file the RDRAND/RDSEED scan read and found none in, by identity and version: device, inode, size, and the
/// modification and change times (seconds, nanoseconds). Any change to the file changes its change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScannedFile {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

fn default_hostname() -> String {
    crate::settings::HOSTNAME.into()
}

/// A path the guest used and how (`open`, `exec`, `map`, `stat`, `list`, `readlink`, `chdir`). `path` is text
/// (lossy for a name that is not UTF-8); such a name's exact bytes are in `path_hex` ([`crate::pathenc`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accessed {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub kinds: Vec<String>,
}

impl Accessed {
    /// The exact path (`path_hex` when present; the text of `path` when `path_hex` is not valid hex).
    pub fn bytes(&self) -> std::path::PathBuf {
        crate::pathenc::decode(&self.path, self.path_hex.as_deref())
            .unwrap_or_else(|_| std::path::PathBuf::from(&self.path))
    }
}

/// What the init reports back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitResult {
    pub outcome: RunOutcome,
    pub exit_status: i32,
    #[serde(default)]
    pub determinism: Determinism,
    /// The paths the guest used, when recording.
    #[serde(default)]
    pub accessed: Vec<Accessed>,
    #[serde(default)]
    pub tapes: TapesOut,
    /// The files this run scanned and found free of RDRAND/RDSEED, beyond [`DetSettings::rdrand_clean`] (for the
    /// state directory's cache).
    #[serde(default)]
    pub rdrand_clean: Vec<ScannedFile>,
    /// What the init could not enforce itself (joining the run's cgroup), for the run's warnings.
    #[serde(default)]
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn det_settings_keep_the_dir_order_text_and_defaults() {
        let json = r#"{"seed":1,"epoch_unix_secs":5,"clock_step_ns":1000,"cpus":2,"dir_order":"shuffled:9"}"#;
        let d: DetSettings = serde_json::from_str(json).unwrap();
        assert_eq!(d.dir_order, DirOrder::Shuffled(9));
        assert_eq!(d.hostname, "repro");
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["dir_order"], "shuffled:9");
        // Written before the order existed: sorted.
        let d: DetSettings =
            serde_json::from_str(r#"{"seed":1,"epoch_unix_secs":5,"clock_step_ns":0,"cpus":1}"#).unwrap();
        assert_eq!(d.dir_order, DirOrder::Sorted);
        assert!(serde_json::from_str::<DetSettings>(
            r#"{"seed":1,"epoch_unix_secs":5,"clock_step_ns":0,"cpus":1,"dir_order":"upward"}"#
        )
        .is_err());
    }

    #[test]
    fn tree_roles_and_results_round_trip() {
        let roles = vec![TreeRole::Cwd, TreeRole::RootSource, TreeRole::Bind(3)];
        let back: Vec<TreeRole> = serde_json::from_str(&serde_json::to_string(&roles).unwrap()).unwrap();
        assert_eq!(back, roles);
        let r = InitResult {
            outcome: RunOutcome::Exited { code: 3 },
            exit_status: 3,
            determinism: Determinism::default(),
            accessed: vec![Accessed { path: "/a".into(), path_hex: None, kinds: vec!["open".into()] }],
            tapes: TapesOut::default(),
            rdrand_clean: vec![ScannedFile { dev: 1, ino: 2, size: 3, mtime: (4, 5), ctime: (6, 7) }],
            warnings: vec!["w".into()],
        };
        let back: InitResult = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.accessed[0].bytes(), std::path::PathBuf::from("/a"));
    }
}
