//! `repro __init`: PID 1 of the sandbox. It builds the guest's root, starts the guest, reaps every process,
//! forwards SIGINT/SIGTERM/SIGHUP to the guest and exits with the guest's status.
//!
//! It is executed fresh (`/proc/self/exe __init fd:10`) by `repro run` in new user, mount, PID, network, UTS and IPC
//! namespaces, so it starts single-threaded with a clean address space. It reads its configuration from, and
//! writes its result to, descriptors `repro run` placed ([`CONFIG_FD`], [`RESULT_FD`]): the run directory
//! belongs to the host's user, whom the init no longer is. It makes itself non-dumpable (a guest cannot ptrace
//! it or read its memory) and enters a cgroup namespace, so the guest sees the run's cgroup as the root.

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use repro_model::run::{BindMount, Determinism, RunOutcome};
use repro_sys::ns::{self, mflags, ChildExit};
use serde::{Deserialize, Serialize};

/// Signals the init handles through a signalfd (blocked before its exec).
pub const INIT_SIGNALS: [i32; 4] = [libc_sig::INT, libc_sig::TERM, libc_sig::HUP, libc_sig::CHLD];

/// Signal numbers (x86_64 and aarch64 agree on these).
pub mod libc_sig {
    pub const HUP: i32 = 1;
    pub const INT: i32 = 2;
    pub const KILL: i32 = 9;
    pub const TERM: i32 = 15;
    pub const CHLD: i32 = 17;
}

/// The descriptor at which the init receives the guest's stdout pipe.
pub const STDOUT_FD: i32 = 3;
/// The descriptor at which the init receives the guest's stderr pipe.
pub const STDERR_FD: i32 = 4;
/// The descriptor at which the init receives a unix socket: it sends the writable layer's directory over it.
pub const LAYER_FD: i32 = 5;
/// The descriptor from which the init reads its [`InitConfig`] (a memfd).
pub const CONFIG_FD: i32 = 10;
/// The descriptor to which the init writes its [`InitResult`] (a memfd `repro run` reads afterwards).
pub const RESULT_FD: i32 = 11;
/// With [`DetSettings::access_stream`]: the stream file, open for appending.
pub const ACCESS_FD: i32 = 12;
/// A socket on which `repro run` sends the detached idmapped mounts of [`InitConfig::trees`], in that order.
pub const TREES_FD: i32 = 13;

/// The run directory, open (received first on [`TREES_FD`]): the init reaches its files as `/proc/self/fd/14/NAME`,
/// never by their host path.
pub const RUN_DIR_FD: i32 = 14;

/// What a detached, idmapped mount tree received on [`TREES_FD`] is for.
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

/// Everything the init needs, written by `repro run` to the run directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitConfig {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// An empty directory on the host where the new root is assembled.
    pub root: String,
    /// An empty directory on the host where the init mounts the writable layer (a tmpfs of `disk_bytes` and
    /// `disk_inodes`); visible only in the init's mount namespace.
    pub layer: String,
    pub disk_bytes: u64,
    pub disk_inodes: u64,
    /// Paths to hide from the guest (the state directory when it lies inside the working directory).
    pub hide: Vec<String>,
    pub binds: Vec<BindMount>,
    /// Host files to place at `/etc/<name>`: `(name, host path)`.
    pub etc: Vec<(String, String)>,
    pub hostname: String,
    pub domainname: String,
    pub umask: u32,
    pub no_aslr: bool,
    pub rlimits: Vec<(i32, u64, u64)>,
    pub cpus: Vec<usize>,
    /// Whether the init runs in its own user namespace (overlay then needs `userxattr`).
    pub user_namespace: bool,
    /// The detached idmapped mounts that arrive on [`TREES_FD`], in order (empty for an unprivileged caller).
    #[serde(default)]
    pub trees: Vec<TreeRole>,
    /// An empty directory where the tree of the working directory (or of a pack's root) is attached.
    #[serde(default)]
    pub stage: String,
    /// The determinism supervisor's settings; `None` runs the guest without it.
    pub determinism: Option<DetSettings>,
    /// A directory to bind (read-only) as the guest's `/` instead of the host's (a reproducer pack's root);
    /// the working directory's overlay then takes its lower layer from inside it.
    #[serde(default)]
    pub root_source: Option<String>,
    /// Share the host's network namespace (`repro capture --network record`): the init then neither brings
    /// up `lo` nor expects a network namespace of its own.
    #[serde(default)]
    pub host_network: bool,
    /// The network and /proc tapes to record or replay.
    #[serde(default)]
    pub tapes: TapeSettings,
}

pub use repro_model::tape::{TapeIo, TapeSettings, TapesOut};

/// What the supervisor makes the guest's view of the world a function of.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// `sorted`, `reversed` or `shuffled:SEED`.
    #[serde(default)]
    pub dir_order: String,
    /// With `record_access`: a file the paths the guest reads are appended to while it runs (the init receives it
    /// open on [`ACCESS_FD`]; the path is for messages).
    #[serde(default)]
    pub access_stream: Option<String>,
}

/// A path the guest used and how (`open`, `exec`, `map`, `stat`, `list`, `readlink`, `chdir`). `path` is text
/// (lossy for a name that is not UTF-8); such a name's exact bytes are in `path_hex` ([`repro_model::pathenc`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accessed {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    pub kinds: Vec<String>,
}

impl Accessed {
    /// The exact path (`path_hex` when present).
    pub fn bytes(&self) -> std::path::PathBuf {
        repro_model::pathenc::decode(&self.path, self.path_hex.as_deref())
            .unwrap_or_else(|_| std::path::PathBuf::from(&self.path))
    }
}

fn default_hostname() -> String {
    crate::run::HOSTNAME.into()
}

/// What the init reports back.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
}

/// The init's entry point: `config` is `fd:N` (the descriptor the configuration is read from). Returns the exit
/// status.
pub fn main(config: &Path) -> i32 {
    // The result goes to a descriptor `repro run` reads afterwards: the run directory is not writable by the
    // guest's (mapped) root.
    let Some(result_fd) = ns_fd(RESULT_FD) else {
        eprintln!(
            "repro: sandbox setup failed: no result descriptor {RESULT_FD} (repro __init is started by repro run)"
        );
        return crate::EXIT_SETUP;
    };
    let mut result_file = fs::File::from(result_fd);
    let cfg: InitConfig = match read_config(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("repro: sandbox setup failed: cannot read the configuration ({}): {e}", config.display());
            return crate::EXIT_SETUP;
        }
    };
    let stream = match cfg.determinism.as_ref().and_then(|d| d.access_stream.as_ref()) {
        Some(_) => ns_fd(ACCESS_FD).map(|fd| repro_tracer::AccessStream(std::sync::Arc::new(fs::File::from(fd)))),
        None => None,
    };
    let mut determinism = Determinism { supervised: cfg.determinism.is_some(), ..Default::default() };
    let mut accessed = Vec::new();
    let mut tapes = TapesOut::default();
    let (outcome, status) = match harden().and_then(|_| setup(&cfg)) {
        Err(msg) => {
            eprintln!("repro: sandbox setup failed: {msg}");
            (RunOutcome::SetupFailed { message: msg }, crate::EXIT_SETUP)
        }
        Ok(()) => run_guest(&cfg, &mut determinism, (&mut accessed, stream), &mut tapes),
    };
    let res = InitResult { outcome, exit_status: status, determinism, accessed, tapes };
    let _ = result_file.write_all(&serde_json::to_vec(&res).unwrap_or_default());
    status
}

fn ns_fd(fd: i32) -> Option<std::os::fd::OwnedFd> {
    repro_sys::idmap::inherited(fd)
}

fn read_config(config: &Path) -> Result<InitConfig, String> {
    let arg = config.to_string_lossy();
    let fd: i32 =
        arg.strip_prefix("fd:").and_then(|n| n.parse().ok()).ok_or_else(|| format!("expected fd:N, got '{arg}'"))?;
    let f = ns_fd(fd).ok_or_else(|| format!("descriptor {fd} is not open"))?;
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut fs::File::from(f), &mut data).map_err(|e| e.to_string())?;
    serde_json::from_slice(&data).map_err(|e| e.to_string())
}

/// What the init does to itself before anything else, once `repro run` has placed it in the run's cgroup: no
/// process of the guest may ptrace it or read its memory (non-dumpable, and no program it starts regains
/// CAP_SYS_PTRACE, which would override that), and the guest sees the run's cgroup as the root of the hierarchy.
fn harden() -> Result<(), String> {
    use repro_sys::idmap;
    idmap::set_non_dumpable().map_err(|e| e.to_string())?;
    idmap::drop_bounding(idmap::CAP_SYS_PTRACE).map_err(|e| e.to_string())?;
    ns::unshare(ns::flags::CGROUP).map_err(|e| format!("{e} (a cgroup namespace)"))?;
    Ok(())
}

fn setup(cfg: &InitConfig) -> Result<(), String> {
    let e = |x: ns::SysError| x.to_string();
    ns::setsid().map_err(e)?;
    ns::sethostname(&cfg.hostname).map_err(e)?;
    ns::setdomainname(&cfg.domainname).map_err(e)?;
    if !cfg.host_network {
        ns::interface_up("lo").map_err(e)?;
    }
    let trees = receive_trees(cfg)?;
    build_root(cfg, trees)?;
    ns::pivot_into(&cfg.root).map_err(e)?;
    Ok(())
}

/// The idmapped trees `repro run` sends on [`TREES_FD`] (one message, possibly without descriptors).
fn receive_trees(cfg: &InitConfig) -> Result<Vec<(TreeRole, std::os::fd::OwnedFd)>, String> {
    let sock = ns_fd(TREES_FD).ok_or_else(|| format!("no descriptor {TREES_FD} for the idmapped mounts"))?;
    let (sent, mut fds) =
        repro_sys::idmap::recv_fds(std::os::fd::AsRawFd::as_raw_fd(&sock)).map_err(|e| e.to_string())?;
    // The run directory first, placed where the configuration's paths expect it.
    if fds.is_empty() {
        return Err("the run directory's descriptor is missing".into());
    }
    // A received tree that landed on that number moves elsewhere first.
    for f in fds.iter_mut().skip(1) {
        if std::os::fd::AsRawFd::as_raw_fd(f) == RUN_DIR_FD {
            *f = f.try_clone().map_err(|e| format!("dup: {e}"))?;
        }
    }
    repro_sys::idmap::place_fd(fds.remove(0), RUN_DIR_FD).map_err(|e| e.to_string())?;
    // Then one tag per planned tree: 1 when it was sent.
    let made = sent.iter().filter(|t| **t == 1).count();
    if sent.len() != cfg.trees.len() || made != fds.len() {
        return Err(format!("expected {} idmapped mounts, received {} of {}", cfg.trees.len(), fds.len(), sent.len()));
    }
    let roles = cfg.trees.iter().zip(&sent).filter(|(_, t)| **t == 1).map(|(r, _)| *r);
    Ok(roles.zip(fds).collect())
}

fn under(root: &str, path: &str) -> String {
    format!("{}/{}", root.trim_end_matches('/'), path.trim_start_matches('/'))
}

/// Top-level directories of the host (or pack) root that the guest never gets: fresh or empty instances are
/// mounted there instead, so no host /proc, /sys, /dev or daemon socket lies beneath anything the guest sees.
pub const NOT_BOUND: [&str; 6] = ["proc", "sys", "dev", "run", "tmp", "home"];

/// runc's masked paths: a directory gets an empty read-only tmpfs, a file the guest's /dev/null.
pub const MASKED: [&str; 12] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// runc's read-only paths (the whole /sys is read-only as well).
pub const READ_ONLY: [&str; 5] = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

/// Kernel filesystems that must never be reachable from the guest except as the fresh instances the init
/// mounts itself (a host instance beneath would be uncovered by `umount -l`).
const KERNEL_FS: [&str; 16] = [
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "bpf",
    "configfs",
    "fusectl",
    "pstore",
    "efivarfs",
    "binfmt_misc",
    "mqueue",
];

/// Assembles the guest's root at `cfg.root`, all before the pivot (in a user namespace a fresh proc and sysfs
/// can only be mounted while a host instance is still in the mount namespace: the old root provides it):
///
/// 1. a tmpfs as `/`, holding the source's top-level symbolic links and a recursive bind of each top-level
///    directory except [`NOT_BOUND`], then all of it read-only;
/// 2. the bounded writable layer: a tmpfs (`--disk` bytes and inodes) for the overlay's upper and work
///    directories, /tmp and /home; its descriptor goes to `repro run` (SCM_RIGHTS on [`LAYER_FD`]), which reads
///    the changes through it after the run: nothing writable lives on the host's disk, and a killed run's layer
///    is freed by the kernel with the last descriptor;
/// 3. empty /run (and /var/run), /tmp and /home from the layer, the working directory's overlay;
/// 4. /dev (nodev, noexec) with the standard nodes bound in, /etc files, `--bind`s;
/// 5. a fresh proc and sysfs, runc's masks and read-only paths.
fn build_root(cfg: &InitConfig, mut trees: Vec<(TreeRole, std::os::fd::OwnedFd)>) -> Result<(), String> {
    let e = |x: ns::SysError| x.to_string();
    let r = cfg.root.as_str();
    ns::mount("", "/", "", mflags::REC | mflags::PRIVATE, None).map_err(e)?;
    // An idmapped tree (the working directory or a pack's root) is attached at the stage first.
    let mut take = |role: TreeRole| trees.iter().position(|(r, _)| *r == role).map(|i| trees.remove(i).1);
    let staged = |fd: std::os::fd::OwnedFd| -> Result<String, String> {
        repro_sys::idmap::attach_tree(std::os::fd::AsRawFd::as_raw_fd(&fd), &cfg.stage).map_err(e)?;
        Ok(cfg.stage.clone())
    };
    let pack_root = take(TreeRole::RootSource).map(staged).transpose()?;
    let cwd_tree = take(TreeRole::Cwd).map(staged).transpose()?;

    // The read-only root.
    ns::mount("tmpfs", r, "tmpfs", mflags::NOSUID | mflags::NODEV, Some("mode=755,size=1m,nr_inodes=4096"))
        .map_err(e)?;
    let source = pack_root.as_deref().or(cfg.root_source.as_deref()).unwrap_or("/");
    populate_root(source, r)?;
    for (d, mode) in [("proc", 0o555), ("sys", 0o555), ("dev", 0o755), ("run", 0o755), ("tmp", 0o1777), ("home", 0o755)]
    {
        mkdir_p(&under(r, d), mode)?;
    }
    // When the run directory lies inside a bound directory, the bind copied the root being built: drop it.
    let _ = ns::umount_detach(&under(r, &host_path(r)));
    scrub_kernel_mounts(r)?;
    ns::make_readonly_recursive(r).map_err(e)?;

    // The writable layer (mounted after the binds, so no copy of it lies in the root).
    let layer = cfg.layer.as_str();
    ns::mount(
        "tmpfs",
        layer,
        "tmpfs",
        mflags::NOSUID | mflags::NODEV,
        Some(&format!("mode=755,size={},nr_inodes={}", cfg.disk_bytes, cfg.disk_inodes)),
    )
    .map_err(|x| format!("the writable layer (--disk): {x}"))?;
    for (d, mode) in [("upper", 0o755), ("work", 0o755), ("tmp", 0o1777), ("home", 0o755)] {
        mkdir_p(&format!("{layer}/{d}"), mode)?;
    }
    let layer_dir = fs::File::open(layer).map_err(|x| format!("open {layer}: {x}"))?;
    ns::send_fd(LAYER_FD, std::os::fd::AsRawFd::as_raw_fd(&layer_dir)).map_err(e)?;
    ns::close_raw(LAYER_FD);
    drop(layer_dir);

    // The writable places.
    let run_tmpfs = |t: &str| {
        ns::mount(
            "tmpfs",
            t,
            "tmpfs",
            mflags::NOSUID | mflags::NODEV | mflags::NOEXEC,
            Some("mode=755,size=16m,nr_inodes=4096"),
        )
        .map_err(e)
    };
    run_tmpfs(&under(r, "/run"))?;
    // /var/run is usually a link to /run; where it is a directory of its own it is emptied too.
    let var_run = under(r, "/var/run");
    if fs::symlink_metadata(&var_run).is_ok_and(|m| m.is_dir()) {
        run_tmpfs(&var_run)?;
    }
    for d in ["tmp", "home"] {
        ns::mount(&format!("{layer}/{d}"), &under(r, d), "", mflags::BIND, None).map_err(e)?;
    }
    mkdir_p(&under(r, crate::env::HOME), 0o755)?;

    // The working directory: an overlay whose upper layer is on the writable layer.
    let target = under(r, &cfg.cwd);
    stays_inside(r, &target, "the working directory")?;
    if !Path::new(&target).is_dir() {
        mkdir_p(&target, 0o755)?;
    }
    let lower = match (&pack_root, &cfg.root_source, cwd_tree) {
        (Some(src), _, _) | (None, Some(src), _) => {
            let lower = under(src, &cfg.cwd);
            stays_inside(src, &lower, "the working directory")?;
            lower
        }
        (None, None, Some(stage)) => stage,
        (None, None, None) => cfg.cwd.clone(),
    };
    let (upper, work) = (format!("{layer}/upper"), format!("{layer}/work"));
    for p in [&lower, &upper, &work] {
        if p.contains(',') || p.contains(':') {
            return Err(format!("the path '{p}' contains ',' or ':', which overlayfs cannot take"));
        }
    }
    let mut opts = format!("lowerdir={lower},upperdir={upper},workdir={work}");
    if cfg.user_namespace {
        opts.push_str(",userxattr");
    }
    // nodev: a node the guest makes in its working directory cannot be opened; nosuid: no setuid binary either.
    ns::mount("overlay", &target, "overlay", mflags::NOSUID | mflags::NODEV, Some(&opts))
        .map_err(|x| format!("{x} (options {opts})"))?;
    for h in &cfg.hide {
        let t = under(r, h);
        if Path::new(&t).is_dir() {
            ns::mount("tmpfs", &t, "tmpfs", mflags::RDONLY | mflags::NOSUID | mflags::NODEV, Some("mode=555,size=4k"))
                .map_err(e)?;
        }
    }

    // /dev, /etc files, binds.
    build_dev(r)?;

    for (name, host) in &cfg.etc {
        let t = resolve_in_root(r, &format!("/etc/{name}"));
        if stays_inside(r, &t, "").is_err() {
            // A link that leaves the root (before the pivot an absolute link names a host path): not covered.
            continue;
        }
        // A link into /run (systemd-resolved's /etc/resolv.conf) points into the guest's empty /run: the file is
        // made there, so the fixed one is what the guest reads.
        if !Path::new(&t).exists() && t.starts_with(&under(r, "/run/")) {
            if let Some(parent) = Path::new(&t).parent() {
                mkdir_p(&parent.to_string_lossy(), 0o755)?;
            }
            fs::write(&t, b"").map_err(|x| format!("create {t}: {x}"))?;
        }
        if Path::new(&t).exists() {
            ns::mount(host, &t, "", mflags::BIND, None).map_err(e)?;
            // mount_setattr, not a remount: in a user namespace a remount must repeat every locked flag of the
            // source's mount (nosuid, nodev... of a run directory inside a container), or it is refused.
            ns::make_readonly_recursive(&t).map_err(e)?;
        }
    }

    for (i, b) in cfg.binds.iter().enumerate() {
        let t = under(r, &b.guest);
        stays_inside(r, &t, &format!("--bind {}: the guest path {}", b.host, b.guest))?;
        // A tree sent by `repro run` says itself what it is: the host path may not be reachable from here.
        let tree = take(TreeRole::Bind(i)).map(fs::File::from);
        if !Path::new(&t).exists() {
            let host_is_dir = match &tree {
                Some(f) => f.metadata().map(|m| m.is_dir()).unwrap_or(false),
                None => Path::new(&b.host).is_dir(),
            };
            let made = if host_is_dir {
                mkdir_p(&t, 0o755)
            } else {
                Path::new(&t)
                    .parent()
                    .map(|p| mkdir_p(&p.to_string_lossy(), 0o755))
                    .unwrap_or(Ok(()))
                    .and_then(|_| fs::write(&t, b"").map_err(|x| x.to_string()))
            };
            made.map_err(|_| {
                format!(
                    "--bind {}: the guest path {} does not exist and cannot be created in the read-only root (use a \
                     path under /tmp, /run, {} or the working directory, or one that exists)",
                    b.host,
                    b.guest,
                    crate::env::HOME
                )
            })?;
        }
        match tree {
            Some(tree) => repro_sys::idmap::attach_tree(std::os::fd::AsRawFd::as_raw_fd(&tree), &t).map_err(e)?,
            None => ns::mount(&b.host, &t, "", mflags::BIND | mflags::REC, None).map_err(e)?,
        }
        if !b.writable {
            ns::make_readonly_recursive(&t).map_err(e)?;
        }
    }

    // proc and sys.
    build_proc_sys(cfg, r)
}

/// Fills the empty tmpfs `r` from `source`: its top-level symbolic links as links, each top-level directory
/// (except [`NOT_BOUND`]) as a recursive bind, each top-level regular file as a bind. Nothing else.
fn populate_root(source: &str, r: &str) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let e = |x: ns::SysError| x.to_string();
    let entries = fs::read_dir(source).map_err(|x| format!("read {source}: {x}"))?;
    let mut names: Vec<_> = entries.flatten().map(|d| d.file_name()).collect();
    names.sort();
    for name in names {
        // mount(2) takes the path as text here: a top-level name that is not UTF-8 is left out rather than
        // failing every run.
        let Some(n) = name.to_str() else { continue };
        if NOT_BOUND.contains(&n) {
            continue;
        }
        let src = Path::new(source).join(&name);
        let dst = Path::new(r).join(&name);
        let (src_s, dst_s) = (src.to_string_lossy().into_owned(), dst.to_string_lossy().into_owned());
        let Ok(meta) = fs::symlink_metadata(&src) else { continue };
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&src).map_err(|x| format!("readlink {src_s}: {x}"))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(|x| format!("symlink {dst_s}: {x}"))?;
        } else if meta.is_dir() {
            fs::create_dir(&dst).map_err(|x| format!("mkdir {dst_s}: {x}"))?;
            fs::set_permissions(&dst, fs::Permissions::from_mode(meta.mode() & 0o7777))
                .map_err(|x| format!("chmod {dst_s}: {x}"))?;
            // Recursive: inside a user namespace a plain bind of a tree with (locked) submounts is refused.
            ns::mount(&src_s, &dst_s, "", mflags::BIND | mflags::REC, None).map_err(e)?;
        } else if meta.is_file() {
            fs::write(&dst, b"").map_err(|x| format!("create {dst_s}: {x}"))?;
            ns::mount(&src_s, &dst_s, "", mflags::BIND | mflags::REC, None).map_err(e)?;
        }
    }
    Ok(())
}

/// One line of /proc/self/mountinfo: the mount point (unescaped) and the filesystem type.
fn mountinfo_entries() -> Vec<(String, String)> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            Some((unescape_mountinfo(fields.get(4)?), fields.get(sep + 1)?.to_string()))
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A host kernel filesystem mounted somewhere inside a bound directory (outside /proc, /sys, /dev) would give
/// the guest a host instance: each is detached, or, where the mount is locked (a user namespace), covered by an
/// empty read-only tmpfs (a file by /dev/null).
fn scrub_kernel_mounts(r: &str) -> Result<(), String> {
    let prefix = format!("{}/", host_path(r).trim_end_matches('/'));
    let mut found: Vec<String> = mountinfo_entries()
        .into_iter()
        .filter(|(mp, fstype)| mp.starts_with(&prefix) && KERNEL_FS.contains(&fstype.as_str()))
        .map(|(mp, _)| through(r, &mp))
        .collect();
    // Deepest first.
    found.sort_by_key(|m| std::cmp::Reverse(m.matches('/').count()));
    found.dedup();
    for mp in found {
        if ns::umount_detach(&mp).is_ok() {
            continue;
        }
        mask(&mp).map_err(|x| format!("cannot hide the host's kernel filesystem at {mp}: {x}"))?;
    }
    Ok(())
}

/// Covers `path`: a directory with an empty read-only tmpfs, anything else with the host's /dev/null.
fn mask(path: &str) -> Result<(), String> {
    let e = |x: ns::SysError| x.to_string();
    let Ok(meta) = fs::metadata(path) else { return Ok(()) };
    if meta.is_dir() {
        ns::mount(
            "tmpfs",
            path,
            "tmpfs",
            mflags::RDONLY | mflags::NOSUID | mflags::NODEV | mflags::NOEXEC,
            Some("mode=555,size=4k,nr_inodes=16"),
        )
        .map_err(e)
    } else {
        ns::mount("/dev/null", path, "", mflags::BIND, None).map_err(e)
    }
}

/// A fresh proc (of the guest's PID namespace) and sysfs (of its network namespace, read-only), with runc's
/// masked and read-only paths. With the host's network a sysfs cannot be mounted for that namespace: the host's
/// /sys is bound read-only instead (the guest's only /sys; nothing lies beneath it).
fn build_proc_sys(cfg: &InitConfig, r: &str) -> Result<(), String> {
    let e = |x: ns::SysError| x.to_string();
    let (proc, sys) = (under(r, "/proc"), under(r, "/sys"));
    ns::mount("proc", &proc, "proc", mflags::NOSUID | mflags::NODEV | mflags::NOEXEC, None).map_err(e)?;
    if cfg.host_network {
        ns::mount("/sys", &sys, "", mflags::BIND | mflags::REC, None).map_err(e)?;
        scrub_kernel_mounts(&sys)?;
    } else {
        ns::mount("sysfs", &sys, "sysfs", mflags::RDONLY | mflags::NOSUID | mflags::NODEV | mflags::NOEXEC, None)
            .map_err(e)?;
    }
    ns::make_readonly_recursive(&sys).map_err(e)?;
    for p in READ_ONLY {
        let t = under(r, p);
        if Path::new(&t).exists() {
            ns::mount(&t, &t, "", mflags::BIND | mflags::REC, None).map_err(e)?;
            ns::make_readonly_recursive(&t).map_err(e)?;
        }
    }
    for p in MASKED {
        mask(&under(r, p))?;
    }
    Ok(())
}

/// Before the pivot an absolute symbolic link inside the root being built names a host path: a guest path that
/// goes through one (say `/var/run -> /run`) would make the init create or mount on the host's side. Refuses
/// `path` unless its deepest existing ancestor, links resolved, lies inside `root`.
fn stays_inside(root: &str, path: &str, what: &str) -> Result<(), String> {
    use std::ffi::OsString;
    let root = root.trim_end_matches('/');
    let leaves =
        || format!("{what} goes through a symbolic link that leaves the sandbox's root; give it without links");
    let rel = path.strip_prefix(root).ok_or_else(|| format!("{what}: {path} is not under {root}"))?;
    // Walked by hand rather than canonicalized: `root` may be reached through the run directory's descriptor
    // (/proc/self/fd/N/...), whose host ancestors the guest's root may not search.
    let mut pending: std::collections::VecDeque<OsString> =
        Path::new(rel).components().filter_map(|c| component_name(&c)).collect();
    let mut inside: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            inside.pop().ok_or_else(leaves)?;
            continue;
        }
        inside.push(c);
        let here = inside.iter().fold(PathBuf::from(root), |p, c| p.join(c));
        match fs::symlink_metadata(&here) {
            // What does not exist yet is created below a checked parent, without following anything.
            Err(_) => return Ok(()),
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 40 {
                    return Err(format!("{what} goes through too many symbolic links ({path})"));
                }
                let target = fs::read_link(&here).map_err(|x| format!("readlink {}: {x}", here.display()))?;
                // Before the pivot an absolute link names a host path.
                if target.is_absolute() {
                    return Err(leaves());
                }
                // A dangling link: what it names does not exist yet, and creating it would follow the link.
                if fs::metadata(&here).is_err() {
                    return Err(format!("{what} goes through a dangling symbolic link ({path})"));
                }
                inside.pop();
                for c in target.components().rev().filter_map(|c| component_name(&c)) {
                    pending.push_front(c);
                }
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// A path component as a name to walk (`..` kept as such; `.` and the root dropped).
fn component_name(c: &std::path::Component<'_>) -> Option<std::ffi::OsString> {
    match c {
        std::path::Component::Normal(n) => Some(n.to_os_string()),
        std::path::Component::ParentDir => Some("..".into()),
        _ => None,
    }
}

/// The host path of a path given through a descriptor (`/proc/self/fd/N/rest`): what /proc/self/mountinfo shows.
fn host_path(p: &str) -> String {
    if let Some(rest) = p.strip_prefix("/proc/self/fd/") {
        let (n, tail) = rest.split_once('/').unwrap_or((rest, ""));
        if let Ok(dir) = fs::read_link(format!("/proc/self/fd/{n}")) {
            let dir = dir.to_string_lossy().into_owned();
            return if tail.is_empty() { dir } else { format!("{}/{tail}", dir.trim_end_matches('/')) };
        }
    }
    p.to_string()
}

/// `host` (a path inside the tree at `host_path(r)`) as a path through `r`.
fn through(r: &str, host: &str) -> String {
    let hr = host_path(r);
    match host.strip_prefix(hr.trim_end_matches('/')) {
        Some(rest) => format!("{}{rest}", r.trim_end_matches('/')),
        None => host.to_string(),
    }
}

/// Resolves symbolic links of `path` inside `root` (at most a few levels), for files such as /etc/resolv.conf.
fn resolve_in_root(root: &str, path: &str) -> String {
    let mut p = PathBuf::from(path);
    for _ in 0..8 {
        let host = under(root, &p.to_string_lossy());
        match fs::read_link(&host) {
            Ok(target) => {
                p = if target.is_absolute() { target } else { p.parent().unwrap_or(Path::new("/")).join(target) };
                p = crate::parse::normalize(&p);
            }
            Err(_) => return host,
        }
    }
    under(root, &p.to_string_lossy())
}

/// The guest's /dev: a tmpfs with nosuid, nodev and noexec (a node the guest makes there cannot be opened),
/// with the standard nodes bound in from the host's /dev, a new devpts instance and a /dev/shm.
fn build_dev(r: &str) -> Result<(), String> {
    let e = |x: ns::SysError| x.to_string();
    let dev = under(r, "/dev");
    ns::mount(
        "tmpfs",
        &dev,
        "tmpfs",
        mflags::NOSUID | mflags::NODEV | mflags::NOEXEC,
        Some("mode=755,size=64k,nr_inodes=256"),
    )
    .map_err(e)?;
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let t = format!("{dev}/{node}");
        fs::write(&t, b"").map_err(|x| format!("{t}: {x}"))?;
        ns::mount(&format!("/dev/{node}"), &t, "", mflags::BIND, None).map_err(e)?;
    }
    mkdir_p(&format!("{dev}/pts"), 0o755)?;
    ns::mount(
        "devpts",
        &format!("{dev}/pts"),
        "devpts",
        mflags::NOSUID | mflags::NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .map_err(e)?;
    mkdir_p(&format!("{dev}/shm"), 0o1777)?;
    ns::mount(
        "tmpfs",
        &format!("{dev}/shm"),
        "tmpfs",
        mflags::NOSUID | mflags::NODEV | mflags::NOEXEC,
        Some("mode=1777"),
    )
    .map_err(e)?;
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, format!("{dev}/{link}")).map_err(|x| format!("{dev}/{link}: {x}"))?;
    }
    Ok(())
}

fn mkdir_p(path: &str, mode: u32) -> Result<(), String> {
    fs::create_dir_all(path).map_err(|x| format!("mkdir {path}: {x}"))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|x| format!("chmod {path}: {x}"))
}

/// Finds the program the way a shell would, with the guest's PATH, inside the new root.
fn resolve_program(cmd: &str, path_var: &str) -> Result<String, i32> {
    if cmd.contains('/') {
        return match ns::is_executable(cmd) {
            Ok(()) if Path::new(cmd).is_dir() => Err(13),
            Ok(()) => Ok(cmd.to_string()),
            Err(errno) => Err(errno),
        };
    }
    let mut denied = false;
    for dir in path_var.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let cand = format!("{dir}/{cmd}");
        if Path::new(&cand).is_file() {
            match ns::is_executable(&cand) {
                Ok(()) => return Ok(cand),
                Err(_) => denied = true,
            }
        }
    }
    Err(if denied { 13 } else { 2 })
}

fn exec_failed(cmd: &str, errno: i32) -> (RunOutcome, i32) {
    let message = ns::strerror(errno);
    eprintln!("repro: cannot execute '{cmd}': {message}");
    let code = if errno == 2 { crate::EXIT_NOT_FOUND } else { crate::EXIT_NOT_EXECUTABLE };
    (RunOutcome::ExecFailed { errno, message }, code)
}

fn run_guest(
    cfg: &InitConfig,
    determinism: &mut Determinism,
    (accessed, stream): (&mut Vec<Accessed>, Option<repro_tracer::AccessStream>),
    tapes: &mut TapesOut,
) -> (RunOutcome, i32) {
    let cmd = cfg.argv.first().cloned().unwrap_or_default();
    let path_var = cfg.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or(crate::env::PATH);
    let sigfd = match ns::signalfd(&INIT_SIGNALS) {
        Ok(f) => f,
        Err(x) => return (RunOutcome::SetupFailed { message: x.to_string() }, crate::EXIT_SETUP),
    };
    // Resolve from the working directory, as the guest would.
    if let Err(x) = std::env::set_current_dir(&cfg.cwd) {
        let m = format!("cannot enter the working directory {}: {x}", cfg.cwd);
        eprintln!("repro: sandbox setup failed: {m}");
        return (RunOutcome::SetupFailed { message: m }, crate::EXIT_SETUP);
    }
    let program = match resolve_program(&cmd, path_var) {
        Ok(p) => p,
        Err(errno) => return exec_failed(&cmd, errno),
    };
    let cs = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
    let argv: Vec<CString> = cfg.argv.iter().map(|a| cs(a)).collect();
    let envp: Vec<CString> = cfg.env.iter().map(|(k, v)| cs(&format!("{k}={v}"))).collect();
    // Docker's capabilities, no_new_privs, and the guest's seccomp rules: a filter of their own without the
    // supervisor, in the supervisor's filter with it.
    let confine = match repro_sys::confine::Confinement::docker_default(cfg.determinism.is_none()) {
        Ok(c) => c,
        Err(x) => {
            let m = format!("cannot build the guest's seccomp filter: {x}");
            eprintln!("repro: sandbox setup failed: {m}");
            return (RunOutcome::SetupFailed { message: m }, crate::EXIT_SETUP);
        }
    };
    let setup = ns::GuestSetup {
        umask: cfg.umask,
        no_aslr: cfg.no_aslr,
        rlimits: cfg.rlimits.clone(),
        cpus: cfg.cpus.clone(),
        fds: vec![(STDOUT_FD, 1), (STDERR_FD, 2)],
        close: vec![STDOUT_FD, STDERR_FD],
        cwd: cs(&cfg.cwd),
        confine: Some(confine),
    };
    let exit = match &cfg.determinism {
        None => match spawn_plain(&cs(&program), &argv, &envp, &setup, &sigfd) {
            Ok(exit) => exit,
            Err(failed) => return failed(&cmd),
        },
        Some(det) => {
            match supervised(
                cs(&program),
                argv,
                envp,
                &setup,
                det,
                sigfd,
                determinism,
                (accessed, stream),
                (&cfg.tapes, tapes),
            ) {
                Ok(exit) => exit,
                Err(failed) => return failed(&cmd),
            }
        }
    };
    let outcome = match exit {
        ChildExit::Exited(code) => RunOutcome::Exited { code },
        ChildExit::Signaled(signal) => RunOutcome::Signaled { signal, name: signal_name(signal) },
    };
    (outcome, exit.code())
}

/// How a failed start is reported: a function of the command name.
type Failed = Box<dyn FnOnce(&str) -> (RunOutcome, i32)>;

fn setup_failed(m: String) -> Failed {
    Box::new(move |_| {
        eprintln!("repro: sandbox setup failed: {m}");
        (RunOutcome::SetupFailed { message: m }, crate::EXIT_SETUP)
    })
}

/// Starts the guest without the supervisor and waits for it.
fn spawn_plain(
    program: &CString,
    argv: &[CString],
    envp: &[CString],
    setup: &ns::GuestSetup,
    sigfd: &std::os::fd::OwnedFd,
) -> Result<ChildExit, Failed> {
    let guest = match ns::spawn_guest(program, argv, envp, setup) {
        Ok(pid) => pid,
        Err(("execve", errno)) => return Err(Box::new(move |cmd| exec_failed(cmd, errno))),
        Err((step, errno)) => return Err(setup_failed(format!("{step} in the guest failed: {}", ns::strerror(errno)))),
    };
    // The init keeps no end of the output pipes: they close when the guest's last process does.
    ns::close_raw(STDOUT_FD);
    ns::close_raw(STDERR_FD);
    Ok(wait_guest(guest, sigfd))
}

/// Starts the guest under the determinism supervisor and waits for it. Signals for the guest are forwarded
/// by a thread started once the guest runs.
#[allow(clippy::too_many_arguments)]
fn supervised(
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    setup: &ns::GuestSetup,
    det: &DetSettings,
    sigfd: std::os::fd::OwnedFd,
    determinism: &mut Determinism,
    (accessed, stream): (&mut Vec<Accessed>, Option<repro_tracer::AccessStream>),
    (tape_cfg, tapes): (&TapeSettings, &mut TapesOut),
) -> Result<ChildExit, Failed> {
    use repro_tracer::tape::{NetMode, ProcMode};
    let network = match &tape_cfg.network {
        TapeIo::Off => NetMode::Off,
        TapeIo::Record => NetMode::Record,
        TapeIo::Replay(t) => NetMode::Replay(t.clone()),
    };
    let proc = match &tape_cfg.proc {
        TapeIo::Off => ProcMode::Off,
        TapeIo::Record => ProcMode::Record,
        TapeIo::Replay(t) => ProcMode::Replay(t.clone()),
    };
    let mut pre_exec = || -> std::io::Result<()> {
        ns::apply_guest_setup(setup).map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno))
    };
    let spec = repro_tracer::GuestSpec { program, argv, envp, pre_exec: &mut pre_exec };
    let cfg = repro_tracer::DetConfig {
        seed: det.seed,
        epoch_unix_secs: det.epoch_unix_secs,
        clock_step_ns: det.clock_step_ns,
        cpus: det.cpus,
        record_access: det.record_access,
        hostname: det.hostname.clone(),
        dir_order: repro_detcore::DirOrder::parse(&det.dir_order).unwrap_or_default(),
        tapes: repro_tracer::tape::TapeConfig { network, proc },
        access_stream: stream,
        confine: true,
    };
    let mut sigfd = Some(sigfd);
    let mut on_spawn = |guest: i32| {
        // The guest has its own copies of the output pipes now.
        ns::close_raw(STDOUT_FD);
        ns::close_raw(STDERR_FD);
        if let Some(fd) = sigfd.take() {
            std::thread::spawn(move || loop {
                match ns::read_signal(&fd) {
                    Ok(libc_sig::CHLD) => {}
                    Ok(sig) => {
                        let _ = ns::kill(guest, sig);
                    }
                    Err(_) => return,
                }
            });
        }
    };
    match repro_tracer::supervise(spec, &cfg, &mut on_spawn) {
        Ok(out) => {
            determinism.not_enforced = out.not_enforced;
            determinism.mediated = out.stats.mediated;
            determinism.tasks_created = out.stats.tasks_created;
            determinism.execs = out.stats.execs;
            *accessed = out
                .accessed
                .into_iter()
                .map(|a| {
                    let (path, path_hex) = repro_model::pathenc::encode(a.path.as_os_str());
                    Accessed { path, path_hex, kinds: a.kinds }
                })
                .collect();
            tapes.network_events = out.tapes.network.as_ref().map_or(0, |t| t.events.len() as u64);
            tapes.proc_reads = out.tapes.proc.as_ref().map_or(0, |t| t.reads.len() as u64);
            tapes.network = out.tapes.network;
            tapes.proc = out.tapes.proc;
            tapes.diverged = out.diverged;
            Ok(match out.exit {
                repro_tracer::GuestExit::Exited(c) => ChildExit::Exited(c),
                repro_tracer::GuestExit::Signaled(s) => ChildExit::Signaled(s),
            })
        }
        Err(repro_tracer::TracerError::Exec { errno, .. }) => Err(Box::new(move |cmd| exec_failed(cmd, errno))),
        Err(e) => Err(setup_failed(e.to_string())),
    }
}

fn wait_guest(guest: i32, sigfd: &std::os::fd::OwnedFd) -> ChildExit {
    loop {
        // Reap whatever has exited; the guest's own status ends the run.
        loop {
            match ns::wait_child(-1, true) {
                Ok(Some((pid, exit))) if pid == guest => return exit,
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => return ChildExit::Exited(crate::EXIT_SETUP),
            }
        }
        match ns::read_signal(sigfd) {
            Ok(libc_sig::CHLD) => {}
            Ok(sig) => {
                let _ = ns::kill(guest, sig);
            }
            Err(_) => return ChildExit::Exited(crate::EXIT_SETUP),
        }
    }
}

/// The conventional name of a signal number.
pub fn signal_name(sig: i32) -> String {
    let names = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    names.get(sig as usize).filter(|n| !n.is_empty()).map(|n| n.to_string()).unwrap_or_else(|| format!("SIG{sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(2), "SIGINT");
        assert_eq!(signal_name(40), "SIG40");
    }

    #[test]
    fn mountinfo_escapes_undone() {
        assert_eq!(unescape_mountinfo("/a\\040b\\011c"), "/a b\tc");
        assert_eq!(unescape_mountinfo("/plain\\"), "/plain\\");
        assert_eq!(unescape_mountinfo("/x\\09"), "/x\\09");
    }

    #[test]
    fn paths_through_outward_links_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        fs::create_dir_all(root.join("var/lib")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("var/run")).unwrap();
        std::os::unix::fs::symlink("lib", root.join("var/rel")).unwrap();
        std::os::unix::fs::symlink("missing-target", root.join("dangling")).unwrap();
        std::os::unix::fs::symlink("/nonexistent-repro-target", root.join("absolute")).unwrap();
        std::os::unix::fs::symlink("../../..", root.join("var/up")).unwrap();
        let r = root.to_string_lossy();
        assert!(stays_inside(&r, &format!("{r}/var/lib/new/deeper"), "x").is_ok());
        assert!(stays_inside(&r, &format!("{r}/var/rel/new"), "x").is_ok());
        assert!(stays_inside(&r, &format!("{r}/var/run/x"), "x").unwrap_err().contains("leaves the sandbox's root"));
        assert!(stays_inside(&r, &format!("{r}/dangling/x"), "x").unwrap_err().contains("dangling"));
        assert!(stays_inside(&r, &format!("{r}/absolute/x"), "x").unwrap_err().contains("leaves the sandbox's root"));
        assert!(stays_inside(&r, &format!("{r}/var/up/x"), "x").unwrap_err().contains("leaves the sandbox's root"));
        // Through a descriptor of the root's parent, as the init reaches the run directory.
        let dir = fs::File::open(d.path()).unwrap();
        let via = format!("/proc/self/fd/{}/root", std::os::fd::AsRawFd::as_raw_fd(&dir));
        assert_eq!(host_path(&via), r);
        assert!(stays_inside(&via, &format!("{via}/var/run/x"), "x").is_err());
        assert!(stays_inside(&via, &format!("{via}/var/rel/new"), "x").is_ok());
        assert_eq!(through(&via, &format!("{r}/var/lib")), format!("{via}/var/lib"));
    }

    #[test]
    fn programs_resolve_through_path() {
        assert_eq!(resolve_program("sh", "/nonexistent:/bin").unwrap(), "/bin/sh");
        assert_eq!(resolve_program("no-such-program-xyz", "/bin").unwrap_err(), 2);
        let d = tempfile::tempdir().unwrap();
        let plain = d.path().join("plain");
        fs::write(&plain, "x").unwrap();
        fs::set_permissions(&plain, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(resolve_program(&plain.to_string_lossy(), "/bin").unwrap_err(), 13);
        assert_eq!(resolve_program(&d.path().to_string_lossy(), "/bin").unwrap_err(), 13);
        assert_eq!(resolve_program("/no/such", "/bin").unwrap_err(), 2);
    }
}
