//! Assembling the guest's root before the pivot: the read-only root, the writable layer, /dev, /etc files,
//! binds, a fresh proc and sysfs with runc's masks.

use super::error::InitError;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use repro_sys::ns::{self, mflags};

use super::paths::{host_path, stays_inside, through};
use super::{InitConfig, TreeRole, LAYER_FD};

pub(super) fn under(root: &str, path: &str) -> String {
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
pub(super) fn build_root(cfg: &InitConfig, mut trees: Vec<(TreeRole, std::os::fd::OwnedFd)>) -> Result<(), InitError> {
    let e = InitError::from;
    let r = cfg.root.as_str();
    ns::mount("", "/", "", mflags::REC | mflags::PRIVATE, None).map_err(e)?;
    build_scratch(cfg)?;
    // An idmapped tree (the working directory or a pack's root) is attached at the stage first.
    let mut take = |role: TreeRole| trees.iter().position(|(r, _)| *r == role).map(|i| trees.remove(i).1);
    let staged = |fd: std::os::fd::OwnedFd| -> Result<String, InitError> {
        repro_sys::idmap::attach_tree(std::os::fd::AsRawFd::as_raw_fd(&fd), &cfg.stage).map_err(e)?;
        Ok(cfg.stage.clone())
    };
    let pack_root = take(TreeRole::RootSource).map(staged).transpose()?;
    let cwd_tree = take(TreeRole::Cwd).map(staged).transpose()?;

    // The read-only root.
    ns::mount("tmpfs", r, "tmpfs", mflags::NOSUID | mflags::NODEV, Some("mode=755,size=1m,nr_inodes=4096"))
        .map_err(e)?;
    let source = pack_root.as_deref().or(cfg.root_source.as_deref()).unwrap_or("/");
    let closed = populate_root(source, r, &mount_point_tops(cfg))?;
    repro_sys::startup::mark("init: root: top-level directories bound");
    scaffold_closed(cfg, r, &closed)?;
    for (d, mode) in [("proc", 0o555), ("sys", 0o555), ("dev", 0o755), ("run", 0o755), ("tmp", 0o1777), ("home", 0o755)]
    {
        mkdir_p(&under(r, d), mode)?;
    }
    // When the run directory lies inside a bound directory, the bind copied the scratch (with the root being
    // built): drop it. Nothing is mounted there unless the run directory lies inside a bound directory.
    let _ = ns::umount_detach(&under(r, &host_path(&cfg.scratch)));
    scrub_kernel_mounts(r)?;
    repro_sys::startup::mark("init: root: kernel file systems beneath scrubbed");
    super::cover::cover_closed_ancestors(r, &mount_points(cfg))?;
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
    .map_err(|x| InitError::from(x).within("the writable layer (--disk)"))?;
    for (d, mode) in [("upper", 0o755), ("work", 0o755), ("tmp", 0o1777), ("home", 0o755)] {
        mkdir_p(&format!("{layer}/{d}"), mode)?;
    }
    let layer_dir = fs::File::open(layer).map_err(|x| InitError::io("open", layer, x))?;
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

    // Binds that hold the working directory (its git work tree), then the working directory: an overlay whose
    // upper layer is on the writable layer.
    for (i, b) in cfg.binds.iter().enumerate() {
        if below_cwd_ancestor(cfg, b) {
            mount_bind(r, b, take(TreeRole::Bind(i)).map(fs::File::from))?;
        }
    }
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
            return Err(InitError::Refused(format!("the path '{p}' contains ',' or ':', which overlayfs cannot take")));
        }
    }
    let mut opts = format!("lowerdir={lower},upperdir={upper},workdir={work}");
    if cfg.user_namespace {
        opts.push_str(",userxattr");
    }
    // nodev: a node the guest makes in its working directory cannot be opened; nosuid: no setuid binary either.
    ns::mount("overlay", &target, "overlay", mflags::NOSUID | mflags::NODEV, Some(&opts))
        .map_err(|x| InitError::from(x).noted(format!("options {opts}")))?;
    for h in &cfg.hide {
        let t = under(r, h);
        if Path::new(&t).is_dir() {
            ns::mount("tmpfs", &t, "tmpfs", mflags::RDONLY | mflags::NOSUID | mflags::NODEV, Some("mode=555,size=4k"))
                .map_err(e)?;
        }
    }

    // /dev, /etc files, binds.
    repro_sys::startup::mark("init: root: layer, /tmp, /home, working directory's overlay");
    build_dev(r)?;
    repro_sys::startup::mark("init: root: /dev");

    for (name, _) in &cfg.etc {
        let host = &etc_file(cfg, name);
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
            fs::write(&t, b"").map_err(|x| InitError::io("create", &t, x))?;
        }
        if Path::new(&t).exists() {
            ns::mount(host, &t, "", mflags::BIND, None).map_err(e)?;
            // mount_setattr, not a remount: in a user namespace a remount must repeat every locked flag of the
            // source's mount (nosuid, nodev... of a run directory inside a container), or it is refused.
            ns::make_readonly_recursive(&t).map_err(e)?;
        }
    }

    for (i, b) in cfg.binds.iter().enumerate() {
        if !below_cwd_ancestor(cfg, b) {
            mount_bind(r, b, take(TreeRole::Bind(i)).map(fs::File::from))?;
        }
    }

    // proc and sys.
    repro_sys::startup::mark("init: root: /etc files, binds");
    build_proc_sys(cfg, r)
}

/// Whether the bind `b` holds the working directory (a git work tree shown below it, [`crate::gitview`]): it is
/// mounted before the working directory's overlay, which then lies on it.
fn below_cwd_ancestor(cfg: &InitConfig, b: &repro_model::run::BindMount) -> bool {
    let (cwd, guest) = (Path::new(&cfg.cwd), Path::new(&b.guest));
    cwd != guest && cwd.starts_with(guest)
}

/// Mounts the bind `b` in the root `r`: the idmapped `tree` sent by `repro run` (as root), else the host path;
/// read-only unless asked otherwise.
fn mount_bind(r: &str, b: &repro_model::run::BindMount, tree: Option<fs::File>) -> Result<(), InitError> {
    let e = InitError::from;
    let t = under(r, &b.guest);
    stays_inside(r, &t, &format!("--bind {}: the guest path {}", b.host, b.guest))?;
    // A tree sent by `repro run` says itself what it is: the host path may not be reachable from here.
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
                .and_then(|_| fs::write(&t, b"").map_err(|x| InitError::io("create", &t, x)))
        };
        made.map_err(|x| {
            x.within(format!(
                "--bind {}: the guest path {} does not exist and cannot be created in the read-only root (use a \
                 path under /tmp, /run, {} or the working directory, or one that exists)",
                b.host,
                b.guest,
                crate::env::HOME
            ))
        })?;
    }
    match tree {
        Some(tree) => repro_sys::idmap::attach_tree(std::os::fd::AsRawFd::as_raw_fd(&tree), &t).map_err(e)?,
        None => ns::mount(&b.host, &t, "", mflags::BIND | mflags::REC, None).map_err(e)?,
    }
    if !b.writable {
        ns::make_readonly_recursive(&t).map_err(e)?;
    }
    Ok(())
}

/// Mounts the init's own tmpfs on the run's scratch directory (seen in its mount namespace only; nosuid, nodev,
/// noexec) and makes in it the directories of the root, the layer and the stage, and the /etc files (0644, bound
/// read-only into the root later). The host's disk holds nothing of it.
fn build_scratch(cfg: &InitConfig) -> Result<(), InitError> {
    let s = cfg.scratch.as_str();
    ns::mount(
        "tmpfs",
        s,
        "tmpfs",
        mflags::NOSUID | mflags::NODEV | mflags::NOEXEC,
        Some("mode=755,size=64k,nr_inodes=64"),
    )
    .map_err(|x| InitError::from(x).within("the run's scratch directory"))?;
    for d in [cfg.root.as_str(), cfg.layer.as_str(), cfg.stage.as_str(), &under(s, "etc")] {
        mkdir_p(d, 0o755)?;
    }
    for (name, content) in &cfg.etc {
        // A name is one of ours (hostname, hosts, resolv.conf), never a path.
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(InitError::Refused(format!("the /etc file name '{name}' is not a plain name")));
        }
        let p = etc_file(cfg, name);
        fs::write(&p, content).map_err(|x| InitError::io("write", &p, x))?;
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).map_err(|x| InitError::io("chmod", &p, x))?;
    }
    Ok(())
}

/// Where the /etc file `name` is written in the scratch.
fn etc_file(cfg: &InitConfig, name: &str) -> String {
    under(&cfg.scratch, &format!("etc/{name}"))
}

/// The top-level names under which the working directory or a bind is mounted.
fn mount_point_tops(cfg: &InitConfig) -> Vec<String> {
    std::iter::once(cfg.cwd.as_str())
        .chain(cfg.binds.iter().map(|b| b.guest.as_str()))
        .filter_map(|p| p.trim_start_matches('/').split('/').next())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// The guest paths of the working directory and the binds, each with whether it is a file's mount point.
fn mount_points(cfg: &InitConfig) -> Vec<(&str, bool)> {
    let bind_files = cfg.binds.iter().map(|b| (b.guest.as_str(), Path::new(&b.host).is_file()));
    std::iter::once((cfg.cwd.as_str(), false)).chain(bind_files).collect()
}

/// Makes the mount points of the working directory and the binds that lie in a top-level directory closed to the
/// guest ([`populate_root`] left it empty): a project or a toolchain under `/root`. Made now, while the root is
/// still writable; what is mounted there later is all the guest sees of that directory.
fn scaffold_closed(cfg: &InitConfig, r: &str, closed: &[String]) -> Result<(), InitError> {
    let in_closed =
        |p: &str| p.trim_start_matches('/').split('/').next().is_some_and(|t| closed.iter().any(|c| c == t));
    for (p, is_file) in mount_points(cfg) {
        if !in_closed(p) {
            continue;
        }
        let t = under(r, p);
        stays_inside(r, &t, &format!("the mount point {p}"))?;
        if is_file {
            if let Some(parent) = Path::new(&t).parent() {
                fs::create_dir_all(parent).map_err(|x| InitError::io("mkdir", parent.to_string_lossy(), x))?;
            }
            fs::write(&t, b"").map_err(|x| InitError::io("create", &t, x))?;
        } else {
            fs::create_dir_all(&t).map_err(|x| InitError::io("mkdir", &t, x))?;
        }
    }
    Ok(())
}

/// Fills the empty tmpfs `r` from `source`: its top-level symbolic links as links, each top-level directory
/// (except [`NOT_BOUND`]) as a recursive bind, each top-level regular file as a bind. Nothing else. A directory
/// the guest's root cannot search (`/root`: mode 700, owned by an id outside the guest's user namespace) that
/// holds a mount point (one of `tops`) is left an empty directory of the same mode instead, so that what is
/// mounted into it can be reached (the guest then sees those mount points there, nothing of the host's); its
/// names are returned. Without a mount point in it, it stays the host's, closed to the guest.
fn populate_root(source: &str, r: &str, tops: &[String]) -> Result<Vec<String>, InitError> {
    use std::os::unix::fs::MetadataExt;
    let e = InitError::from;
    let entries = fs::read_dir(source).map_err(|x| InitError::io("read", source, x))?;
    let mut names: Vec<_> = entries.flatten().map(|d| d.file_name()).collect();
    names.sort();
    let mut closed = Vec::new();
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
            let target = fs::read_link(&src).map_err(|x| InitError::io("readlink", &src_s, x))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(|x| InitError::io("symlink", &dst_s, x))?;
        } else if meta.is_dir() {
            fs::create_dir(&dst).map_err(|x| InitError::io("mkdir", &dst_s, x))?;
            fs::set_permissions(&dst, fs::Permissions::from_mode(meta.mode() & 0o7777))
                .map_err(|x| InitError::io("chmod", &dst_s, x))?;
            if tops.iter().any(|t| t == n) && nix::unistd::access(&src, nix::unistd::AccessFlags::X_OK).is_err() {
                closed.push(n.to_string());
                continue;
            }
            // Recursive: inside a user namespace a plain bind of a tree with (locked) submounts is refused.
            ns::mount(&src_s, &dst_s, "", mflags::BIND | mflags::REC, None).map_err(e)?;
        } else if meta.is_file() {
            fs::write(&dst, b"").map_err(|x| InitError::io("create", &dst_s, x))?;
            ns::mount(&src_s, &dst_s, "", mflags::BIND | mflags::REC, None).map_err(e)?;
        }
    }
    Ok(closed)
}

/// One line of /proc/self/mountinfo: the mount point (unescaped) and the filesystem type.
/// Unreadable is an error: the host's kernel filesystems could not be found and hidden.
fn mountinfo_entries() -> Result<Vec<(String, String)>, InitError> {
    let text =
        fs::read_to_string("/proc/self/mountinfo").map_err(|x| InitError::io("read", "/proc/self/mountinfo", x))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            Some((unescape_mountinfo(fields.get(4)?), fields.get(sep + 1)?.to_string()))
        })
        .collect())
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
fn scrub_kernel_mounts(r: &str) -> Result<(), InitError> {
    let prefix = format!("{}/", host_path(r).trim_end_matches('/'));
    let mut found: Vec<String> = mountinfo_entries()?
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
        mask(&mp).map_err(|x| x.within(format!("cannot hide the host's kernel filesystem at {mp}")))?;
    }
    Ok(())
}

/// Covers `path`: a directory with an empty read-only tmpfs, anything else with the host's /dev/null.
fn mask(path: &str) -> Result<(), InitError> {
    let e = InitError::from;
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
fn build_proc_sys(cfg: &InitConfig, r: &str) -> Result<(), InitError> {
    let e = InitError::from;
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
fn build_dev(r: &str) -> Result<(), InitError> {
    let e = InitError::from;
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
        fs::write(&t, b"").map_err(|x| InitError::io("create", &t, x))?;
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
        std::os::unix::fs::symlink(target, format!("{dev}/{link}"))
            .map_err(|x| InitError::io("symlink", format!("{dev}/{link}"), x))?;
    }
    Ok(())
}

fn mkdir_p(path: &str, mode: u32) -> Result<(), InitError> {
    fs::create_dir_all(path).map_err(|x| InitError::io("mkdir", path, x))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|x| InitError::io("chmod", path, x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_undone() {
        assert_eq!(unescape_mountinfo("/a\\040b\\011c"), "/a b\tc");
        assert_eq!(unescape_mountinfo("/plain\\"), "/plain\\");
        assert_eq!(unescape_mountinfo("/x\\09"), "/x\\09");
    }
}
