//! `repro doctor`: what this machine offers repro, one line per item, and how to fix what is missing.

use std::io::{Read, Write};
use std::path::Path;

use serde::Serialize;

use crate::cgroup::Hierarchy;
use repro_sys::ns::{self, flags};

/// The state of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works.
    Ok,
    /// Missing, but `repro run` works without it (with the consequence said).
    Warn,
    /// Missing and needed: `repro run` cannot work.
    Missing,
    /// Optional and absent.
    Absent,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Whether `repro run` can work here.
    pub usable: bool,
    pub checks: Vec<Check>,
}

fn check(name: &str, status: Status, detail: impl Into<String>, fix: Option<&str>) -> Check {
    Check { name: name.into(), status, detail: detail.into(), fix: fix.map(String::from) }
}

/// Runs every check. Must be called while the process is single-threaded (the namespace probes fork).
pub fn run() -> Report {
    let mut checks = Vec::new();
    let root = ns::getuid() == 0;
    checks.push(kernel());
    checks.push(check(
        "user",
        Status::Ok,
        if root {
            "running as root: the guest's ids map to unprivileged host ids; the working directory is idmapped"
        } else {
            "not root: the guest's root is this user (a one-id user namespace)"
        },
        None,
    ));
    for (name, flag, needed) in [
        ("namespace:mount", flags::MOUNT, true),
        ("namespace:pid", flags::PID, true),
        ("namespace:net", flags::NET, true),
        ("namespace:uts", flags::UTS, true),
        ("namespace:ipc", flags::IPC, true),
        ("namespace:user", flags::USER, true),
        ("namespace:cgroup", flags::CGROUP, true),
        ("namespace:time", flags::TIME, false),
    ] {
        let extra = if root || flag == flags::USER { 0 } else { flags::USER };
        let ok = ns::probe_in_child(|| if ns::unshare(flag | extra).is_ok() { 0 } else { 1 })
            .map(|c| c == 0)
            .unwrap_or(false);
        checks.push(if ok {
            check(name, Status::Ok, "can be created", None)
        } else if needed {
            check(
                name,
                Status::Missing,
                "cannot be created",
                Some(if flag == flags::USER {
                    "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or \
                     kernel.apparmor_restrict_unprivileged_userns=0), or run repro as root"
                } else {
                    "run repro as root, or in a container started with --privileged or CAP_SYS_ADMIN"
                }),
            )
        } else {
            check(name, Status::Warn, "cannot be created (not needed by repro run)", None)
        });
    }
    checks.push(overlay(root));
    checks.push(cgroups());
    checks.push(ptrace());
    checks.push(seccomp());
    checks.push(confinement());
    checks.push(match ns::probe_set_tsc() {
        Ok(true) => check("rdtsc trap", Status::Ok, "PR_SET_TSC works: rdtsc/rdtscp can be trapped and emulated", None),
        _ => check(
            "rdtsc trap",
            Status::Warn,
            "PR_SET_TSC is refused: rdtsc reads the host's counter",
            Some("run on x86_64 Linux outside of a hypervisor that hides the TSC controls"),
        ),
    });
    checks.push(if ns::probe_perf_counters() {
        check("perf counters", Status::Ok, "hardware performance counters are available", None)
    } else {
        check(
            "perf counters",
            Status::Warn,
            "hardware performance counters are not available: repro does not need them, but thread \
             interleavings cannot be recorded instruction-exactly (as rr does); the seeded scheduler runs one guest \
             thread at a time and switches only at system calls",
            None,
        )
    });
    checks.push(scheduler());
    checks.push(docker());
    let usable = !checks.iter().any(|c| c.status == Status::Missing);
    Report { usable, checks }
}

/// Whether `repro run` can make the guest SCHED_FIFO (what the deterministic scheduler needs): the same call it
/// makes on the init, tried in a child.
fn scheduler() -> Check {
    let priority = repro_sys::sched::TRACER_RT_PRIORITY;
    let ok = ns::probe_in_child(|| if repro_sys::sched::set_fifo(0, priority).is_ok() { 0 } else { 1 })
        .map(|c| c == 0)
        .unwrap_or(false);
    if ok {
        check(
            "scheduler",
            Status::Ok,
            "SCHED_FIFO is allowed: one guest thread runs at a time, in the seed's order",
            None,
        )
    } else {
        check(
            "scheduler",
            Status::Warn,
            "SCHED_FIFO is refused (no CAP_SYS_NICE, RLIMIT_RTPRIO 0): multithreaded guests interleave as the \
             kernel likes and their runs are reported as not deterministic (exit 121)",
            Some("run repro as root (CAP_SYS_NICE), or raise RLIMIT_RTPRIO to 2 (e.g. `rtprio 2` in /etc/security/limits.conf)"),
        )
    }
}

fn kernel() -> Check {
    // Unreadable: an empty release, reported below as a kernel too old to tell.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let arch = std::env::consts::ARCH;
    let (major, minor) = parse_release(&release);
    if (major, minor) >= (5, 12) {
        check("kernel", Status::Ok, format!("Linux {release} {arch}"), None)
    } else {
        check(
            "kernel",
            Status::Missing,
            format!("Linux {release} {arch}: repro needs 5.12 or newer (mount_setattr, close_range)"),
            Some("upgrade the kernel"),
        )
    }
}

/// `major.minor` of a kernel release string.
pub fn parse_release(r: &str) -> (u32, u32) {
    let mut it = r.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

fn overlay(root: bool) -> Check {
    // Unreadable: reported below as overlayfs missing.
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !fs.lines().any(|l| l.trim_end().ends_with("overlay")) {
        return check(
            "overlayfs",
            Status::Missing,
            "overlayfs is not available",
            Some("load the module: modprobe overlay"),
        );
    }
    let base = std::env::temp_dir().join(format!("repro-doctor-{}", std::process::id()));
    // As in a run: the upper and work directories on a tmpfs of their own (the --disk layer).
    let dirs = ["lower", "layer", "merged"].map(|d| base.join(d));
    for d in &dirs {
        // A directory that cannot be made fails the probe below, which is what is reported.
        let _ = std::fs::create_dir_all(d);
    }
    let layer = dirs[1].to_string_lossy().into_owned();
    let opts = format!(
        "lowerdir={},upperdir={layer}/upper,workdir={layer}/work{}",
        dirs[0].display(),
        if root { "" } else { ",userxattr" }
    );
    let target = dirs[2].to_string_lossy().into_owned();
    let ns_flags = if root { flags::MOUNT } else { flags::MOUNT | flags::USER };
    let (uid, gid) = (ns::getuid(), ns::getgid());
    let ok = ns::probe_in_child(|| {
        if ns::unshare(ns_flags).is_err() {
            return 2;
        }
        if !root {
            // Map ourselves to root, as a run does: files of unmapped owners would refuse the overlay.
            // A map that cannot be written fails the mounts below, which is what is reported.
            let _ = ns::write_file("/proc/self/setgroups", "deny");
            let _ = ns::write_file("/proc/self/uid_map", &format!("0 {uid} 1"));
            let _ = ns::write_file("/proc/self/gid_map", &format!("0 {gid} 1"));
        }
        // In the probe's own mount namespace: a failure here shows as a failed mount below.
        let _ = ns::mount("", "/", "", ns::mflags::REC | ns::mflags::PRIVATE, None);
        if ns::mount("tmpfs", &layer, "tmpfs", 0, Some("size=1m,nr_inodes=64")).is_err()
            || std::fs::create_dir(format!("{layer}/upper")).is_err()
            || std::fs::create_dir(format!("{layer}/work")).is_err()
        {
            return 3;
        }
        if ns::mount("overlay", &target, "overlay", 0, Some(&opts)).is_ok() {
            0
        } else {
            1
        }
    });
    crate::reaper::remove_tree(&base);
    match ok {
        Ok(0) => {
            check("overlayfs", Status::Ok, "an overlay can be mounted (the working directory's writable layer)", None)
        }
        _ => check(
            "overlayfs",
            Status::Missing,
            "an overlay with its upper layer on a tmpfs was refused",
            Some(
                "run as root, or on a kernel that allows overlayfs in user namespaces (5.11+) with user extended \
                 attributes on tmpfs (6.6+)",
            ),
        ),
    }
}

fn cgroups() -> Check {
    let h = Hierarchy::detect();
    match &h {
        Hierarchy::None => check(
            "cgroups",
            Status::Warn,
            "no cgroup memory controller: --memory is recorded but not enforced; --pids is RLIMIT_NPROC in the sandbox's user namespace",
            Some("mount cgroup v2 at /sys/fs/cgroup with the memory controller enabled"),
        ),
        _ => {
            let probe = format!("doctor-{}", std::process::id());
            match crate::cgroup::Cgroup::create(&h, &probe, 64 << 20, 64) {
                Ok(cg) => {
                    // The check is about creating one; an empty probe cgroup left behind holds nothing.
                    let _ = cg.remove();
                    let _ = cg.remove_pids();
                    match &cg.pids_error {
                        None => check("cgroups", Status::Ok, format!("{}: --memory and --pids are enforced", h.describe()), None),
                        Some(e) => check(
                            "cgroups",
                            Status::Warn,
                            format!("{}: --memory is enforced; --pids is RLIMIT_NPROC in the sandbox's user namespace, not a cgroup ({e})", h.describe()),
                            Some("enable the pids controller (cgroup v2: in the parent's cgroup.subtree_control; v1: mount it at /sys/fs/cgroup/pids)"),
                        ),
                    }
                }
                Err(e) => check(
                    "cgroups",
                    Status::Warn,
                    format!("{}, but a cgroup cannot be created ({e}): --memory is recorded but not enforced; --pids is RLIMIT_NPROC in the sandbox's user namespace", h.describe()),
                    Some("run as root, or delegate a cgroup subtree to this user (systemd-run --user --scope -p Delegate=yes)"),
                ),
            }
        }
    }
}

fn ptrace() -> Check {
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok().map(|s| s.trim().to_string());
    let seccomp_mode = proc_status_field("Seccomp:");
    let works = ns::probe_ptrace().unwrap_or(false);
    let context = match (&yama, seccomp_mode.as_deref()) {
        (Some(y), _) => format!("Yama ptrace_scope={y}"),
        (None, _) => "no Yama LSM".to_string(),
    };
    if works {
        check("ptrace", Status::Ok, format!("a child can be traced ({context})"), None)
    } else {
        check(
            "ptrace",
            Status::Warn,
            format!("ptrace is refused ({context}): the determinism supervisor cannot follow exec"),
            Some("set kernel.yama.ptrace_scope to 0 or 1; in a container add CAP_SYS_PTRACE and a seccomp profile allowing ptrace"),
        )
    }
}

fn seccomp() -> Check {
    // Unreadable: no actions, reported below as user notification missing.
    let actions = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    let mode = proc_status_field("Seccomp:").unwrap_or_else(|| "?".into());
    let filtered =
        if mode == "2" { "; repro itself already runs under a seccomp filter (a container profile)" } else { "" };
    if actions.split_whitespace().any(|a| a == "user_notif") {
        check("seccomp", Status::Ok, format!("filters with user notification are available{filtered}"), None)
    } else if actions.is_empty() {
        check(
            "seccomp",
            Status::Warn,
            "seccomp is not available: the determinism supervisor cannot run",
            Some("use a kernel built with CONFIG_SECCOMP_FILTER"),
        )
    } else {
        check(
            "seccomp",
            Status::Warn,
            format!("seccomp user notification is not available (actions: {}){filtered}", actions.trim()),
            Some("use Linux 5.5 or newer"),
        )
    }
}

/// The guest's confinement, applied in a probe child as `repro run` applies it (needed: a run refuses to
/// start its guest without it).
fn confinement() -> Check {
    match repro_sys::confine::probe() {
        Ok(rules) => check(
            "confinement",
            Status::Ok,
            format!(
                "guests get Docker's capability set, no_new_privs and a seccomp filter of {rules} rules (Docker's \
                 refused syscalls answer EPERM)"
            ),
            None,
        ),
        Err(why) => check(
            "confinement",
            Status::Missing,
            format!("the guest cannot be confined: {why}"),
            Some("use a kernel with CONFIG_SECCOMP_FILTER (Linux 5.5 or newer), outside a seccomp profile that refuses seccomp(2)"),
        ),
    }
}

fn proc_status_field(name: &str) -> Option<String> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
}

fn docker() -> Check {
    let sock = Path::new("/var/run/docker.sock");
    if !sock.exists() {
        return check("docker", Status::Absent, "no Docker engine socket at /var/run/docker.sock (optional)", None);
    }
    match docker_version(sock) {
        Some(v) => check("docker", Status::Ok, format!("Docker engine {v} (optional)"), None),
        None => check("docker", Status::Absent, "the Docker socket does not answer (optional)", None),
    }
}

fn docker_version(sock: &Path) -> Option<String> {
    let mut s = std::os::unix::net::UnixStream::connect(sock).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let json = body.split("\r\n\r\n").nth(1)?;
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get("Version")?.as_str().map(String::from)
}

/// The report as text, one line per check.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let width = r.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in &r.checks {
        let tag = match c.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Missing => "MISSING",
            Status::Absent => "absent",
        };
        out.push_str(&format!("{tag:<7} {:<width$}  {}\n", c.name, c.detail));
        if let Some(f) = &c.fix {
            out.push_str(&format!("{:<7} {:<width$}  fix: {f}\n", "", ""));
        }
    }
    out.push_str(if r.usable {
        "repro run can work on this machine.\n"
    } else {
        "repro run cannot work on this machine: fix the MISSING items above.\n"
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_release_parsing() {
        assert_eq!(parse_release("6.18.44-fc-v857"), (6, 18));
        assert_eq!(parse_release("5.4.0"), (5, 4));
        assert_eq!(parse_release(""), (0, 0));
    }

    #[test]
    fn render_marks_missing_items_and_fixes() {
        let r = Report {
            usable: false,
            checks: vec![
                check("kernel", Status::Ok, "Linux 6.1 x86_64", None),
                check("namespace:pid", Status::Missing, "cannot be created", Some("run as root")),
            ],
        };
        let text = render(&r);
        assert!(text.contains("MISSING namespace:pid  cannot be created\n"), "{text}");
        assert!(text.contains("fix: run as root"));
        assert!(text.ends_with("fix the MISSING items above.\n"));
    }
}
