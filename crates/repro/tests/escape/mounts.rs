//! Escape attempts: mounts (see main.rs for the rules these tests follow).
//!
//! What the guest's file tree is made of: no host /proc, /sys or /dev beneath anything (so `umount -l` uncovers
//! nothing), runc's masked and read-only paths, /dev nodev, an empty /run, a bounded writable layer that never
//! lands on the host's disk, and `repro gc` beside live runs.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{stderr, stdout};
#[allow(unused_imports)]
use crate::harness::*;

/// `(mount point, fstype, device, root)` of each line of a mountinfo text.
fn mounts(mountinfo: &str) -> Vec<(String, String, String, String)> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some((f[4].to_string(), f.get(sep + 1)?.to_string(), f[2].to_string(), f[3].to_string()))
        })
        .collect()
}

/// The device (major:minor) of the host's mount of `fstype` at `at`.
fn host_dev(at: &str, fstype: &str) -> String {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mounts(&mi).into_iter().find(|m| m.0 == at && m.1 == fstype).map(|m| m.2).expect("the host mount")
}

fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start = out.find(&format!("=={name}==\n")).map(|i| i + name.len() + 5).unwrap_or(out.len());
    let end = out[start..].find("==").map(|i| start + i).unwrap_or(out.len());
    &out[start..end]
}

/// The guest's only kernel filesystems are the fresh ones the init mounted: no mount of the host's proc,
/// sysfs, devtmpfs tree, cgroup or devpts; and `umount -l` of /proc and /sys (repeated) never uncovers the
/// host's process list or network devices.
#[test]
fn umount_of_proc_and_sys_uncovers_no_host_instance() {
    let (host_proc, host_sys) = (host_dev("/proc", "proc"), host_dev("/sys", "sysfs"));
    let host_pts = host_dev("/dev/pts", "devpts");
    for caller in CALLERS {
        let d = workdir(caller);
        let o = sh_as(
            caller,
            d.path(),
            &[],
            "echo ==mountinfo==; cat /proc/self/mountinfo; \
             for i in 1 2 3 4 5; do umount -l /proc 2>/dev/null; umount -l /sys 2>/dev/null; done; \
             echo ==pid1==; cat /proc/1/cmdline 2>/dev/null | tr '\\0' ' '; echo; \
             echo ==pids==; ls /proc 2>/dev/null | grep -c '^[0-9]'; \
             echo ==net==; ls /sys/class/net 2>/dev/null; echo ==end==",
        );
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{caller:?}: {out}\n{}", stderr(&o));
        let all = mounts(section(&out, "mountinfo"));
        assert!(all.iter().any(|m| m.0 == "/proc" && m.1 == "proc"), "{caller:?}: no /proc: {all:?}");
        for (at, fstype, dev, root) in &all {
            match fstype.as_str() {
                "proc" => assert_ne!(dev, &host_proc, "{caller:?}: the host's proc is mounted at {at}"),
                "sysfs" => assert_ne!(dev, &host_sys, "{caller:?}: the host's sysfs is mounted at {at}"),
                "devpts" => assert_ne!(dev, &host_pts, "{caller:?}: the host's devpts is mounted at {at}"),
                "devtmpfs" => assert!(
                    ["/null", "/zero", "/full", "/random", "/urandom", "/tty"].contains(&root.as_str()),
                    "{caller:?}: host /dev{root} is mounted at {at}"
                ),
                "cgroup" | "cgroup2" | "debugfs" | "tracefs" | "securityfs" | "bpf" | "configfs" | "mqueue" => {
                    panic!("{caller:?}: a host {fstype} is mounted at {at}")
                }
                _ => {}
            }
        }
        let pid1 = section(&out, "pid1");
        assert!(pid1.trim().is_empty() || pid1.contains("__init"), "{caller:?}: /proc/1 is the host's: {pid1}");
        let pids: u32 = section(&out, "pids").trim().parse().unwrap_or(0);
        assert!(pids < 20, "{caller:?}: {pids} processes visible after umount -l /proc");
        let net = section(&out, "net");
        assert!(!net.contains("eth0") && !net.contains("docker0"), "{caller:?}: host devices in /sys: {net}");
    }
}

/// A host proc or sysfs mounted inside a directory the sandbox binds (here under /var/tmp, in a private mount
/// namespace of the test) is not reachable from the guest: detached, or covered where it is locked.
#[test]
fn kernel_filesystems_inside_bound_directories_are_hidden() {
    let base = tempfile::Builder::new().prefix("repro-escape-kfs-").tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(base.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for d in ["p", "s"] {
        std::fs::create_dir(base.path().join(d)).unwrap();
    }
    for caller in CALLERS {
        let d = workdir(caller);
        let inner = repro_as(caller, d.path());
        let mut argv: Vec<String> = vec![inner.get_program().to_string_lossy().into_owned()];
        argv.extend(inner.get_args().map(|a| a.to_string_lossy().into_owned()));
        let b = base.path().display();
        let script = format!(
            "set -e; mount -t proc proc {b}/p; mount -t sysfs sysfs {b}/s; \
             exec timeout 60 {} run -q -- sh -c 'echo ==p==; ls {b}/p | head -5; echo ==s==; ls {b}/s | head -5; echo ==end=='",
            argv.join(" ")
        );
        let o = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .current_dir(d.path())
            .env_remove("REPRO_STATE_DIR")
            .output()
            .unwrap();
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{caller:?}: {out}\n{}", stderr(&o));
        assert_eq!(section(&out, "p").trim(), "", "{caller:?}: a host proc is visible: {out}");
        assert_eq!(section(&out, "s").trim(), "", "{caller:?}: a host sysfs is visible: {out}");
    }
    // The mounts were in the test's private namespace: nothing is left on the host.
    assert!(std::fs::read_dir(base.path().join("p")).unwrap().next().is_none());
}

/// /proc/sys is read-only: a write of a sysctl's own current value fails, and the host's value is unchanged.
/// (Harmless even if it succeeded: the value written is the one read.) /proc/bus, fs, irq are read-only too.
#[test]
fn proc_sys_cannot_be_written() {
    let sysctl = "/proc/sys/vm/swappiness";
    let before = std::fs::read_to_string(sysctl).unwrap();
    for caller in CALLERS {
        let d = workdir(caller);
        let o = sh_as(
            caller,
            d.path(),
            &[],
            &format!(
                "v=$(cat {sysctl}); if echo \"$v\" > {sysctl}; then echo WROTE; fi; \
                 echo ==mountinfo==; cat /proc/self/mountinfo; echo ==end=="
            ),
        );
        let out = stdout(&o);
        assert!(!out.contains("WROTE"), "{caller:?}: wrote {sysctl}: {out}");
        assert!(stderr(&o).contains("Read-only file system"), "{caller:?}: {}", stderr(&o));
        for p in ["/proc/sys", "/proc/bus", "/proc/fs", "/proc/irq"] {
            if !Path::new(p).exists() {
                continue;
            }
            let line = section(&out, "mountinfo").lines().find(|l| l.split(' ').nth(4) == Some(p));
            let line = line.unwrap_or_else(|| panic!("{caller:?}: {p} is not a mount of its own: {out}"));
            assert!(line.split(' ').nth(5).unwrap().split(',').any(|o| o == "ro"), "{caller:?}: {p} not ro: {line}");
        }
    }
    assert_eq!(std::fs::read_to_string(sysctl).unwrap(), before);
}

/// runc's masked paths that exist on this host read as empty inside the guest.
#[test]
fn masked_paths_read_empty() {
    let present: Vec<&str> = [
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
    ]
    .into_iter()
    .filter(|p| Path::new(p).exists())
    .collect();
    assert!(present.contains(&"/proc/interrupts"), "this host has /proc/interrupts");
    let script: String = present
        .iter()
        .map(|p| format!("if [ -d {p} ]; then echo \"{p} $(ls -A {p} | wc -l)\"; else echo \"{p} $(head -c 4096 {p} | wc -c)\"; fi; "))
        .collect();
    for caller in CALLERS {
        let d = workdir(caller);
        let o = sh_as(caller, d.path(), &[], &script);
        let out = stdout(&o);
        assert_eq!(out.lines().count(), present.len(), "{caller:?}: {out}\n{}", stderr(&o));
        for line in out.lines() {
            assert!(line.ends_with(" 0"), "{caller:?}: not masked: {line}");
        }
    }
}

/// /sys is read-only: writing the current MTU of the guest's own loopback back (harmless) fails.
#[test]
fn sys_is_read_only() {
    for caller in CALLERS {
        let d = workdir(caller);
        let o = sh_as(
            caller,
            d.path(),
            &[],
            "m=$(cat /sys/class/net/lo/mtu); if echo \"$m\" > /sys/class/net/lo/mtu; then echo WROTE; fi; \
             if mkdir /sys/fs/cgroup/repro-escape 2>/dev/null; then echo MADE; fi",
        );
        let out = stdout(&o);
        assert!(!out.contains("WROTE") && !out.contains("MADE"), "{caller:?}: {out}");
        assert!(stderr(&o).contains("Read-only file system"), "{caller:?}: {}", stderr(&o));
    }
}

/// /run and /var/run are empty: no Docker socket to see or connect to (it exists on this machine).
#[test]
fn docker_socket_is_unreachable() {
    let host_has_it = Path::new("/var/run/docker.sock").exists();
    for caller in CALLERS {
        let d = workdir(caller);
        let o = sh_as(
            caller,
            d.path(),
            &[],
            "for p in /var/run/docker.sock /run/docker.sock; do [ -e $p ] && echo VISIBLE $p; done; \
             echo \"run has $(ls -A /run | wc -l) var-run has $(ls -A /var/run | wc -l)\"; \
             python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"/var/run/docker.sock\"); print(\"CONNECTED\")' 2>&1 | tail -1",
        );
        let out = stdout(&o);
        assert!(out.contains("run has 0 var-run has 0"), "{caller:?} (host has the socket: {host_has_it}): {out}");
        assert!(!out.contains("VISIBLE") && !out.contains("CONNECTED"), "{caller:?}: {out}");
        assert!(out.contains("FileNotFoundError"), "{caller:?}: {out}");
    }
}

/// A device node the guest makes cannot be opened: in /dev (tmpfs nodev), in its working directory and in
/// /tmp (nodev too). The node is the harmless `null` (1:3); the block node names a loop device that does not
/// exist (7:250), never a real disk.
#[test]
fn mknod_gives_no_usable_device() {
    for caller in CALLERS {
        let d = workdir(caller);
        let o = sh_as(
            caller,
            d.path(),
            &[],
            "for p in /dev/x ./x /tmp/x; do \
               if mknod $p c 1 3 2>/dev/null; then if echo hi > $p; then echo OPENED $p; fi; fi; done; \
             if mknod /dev/b b 7 250 2>/dev/null; then if head -c 1 /dev/b >/dev/null 2>&1; then echo OPENED /dev/b; fi; fi; \
             grep ' /dev ' /proc/self/mountinfo",
        );
        let out = stdout(&o);
        assert!(!out.contains("OPENED"), "{caller:?}: {out}\n{}", stderr(&o));
        let dev = out.lines().find(|l| l.split(' ').nth(4) == Some("/dev")).expect("the /dev mount");
        let opts = dev.split(' ').nth(5).unwrap();
        for o in ["nodev", "nosuid", "noexec"] {
            assert!(opts.split(',').any(|x| x == o), "{caller:?}: /dev without {o}: {dev}");
        }
    }
}

/// With `--disk 8M` a guest that writes 1 MiB files until it fails (at most 20) gets ENOSPC; the run says the
/// limit was reached on stderr and in run.json; the working directory on the host is unchanged.
#[test]
fn disk_limit_ends_writes_with_a_clear_message() {
    for caller in CALLERS {
        let d = workdir(caller);
        let o = sh_as(
            caller,
            d.path(),
            &["--disk", "8M"],
            "i=0; while [ $i -lt 20 ]; do dd if=/dev/zero of=f$i bs=1M count=1 2>/dev/null || { echo FULL at $i; break; }; \
             i=$((i+1)); done; if echo x > /tmp/more; then echo TMP-WROTE; fi",
        );
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(out.contains("FULL at"), "{caller:?}: the guest never hit the limit: {out}\n{err}");
        let at: u32 = out.split("FULL at ").nth(1).and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap();
        assert!(at <= 8, "{caller:?}: wrote {at} MiB into 8M");
        assert!(!out.contains("TMP-WROTE"), "{caller:?}: /tmp is outside the limit: {out}");
        assert!(err.contains("--disk limit was reached"), "{caller:?}: {err}");
        let runs = d.path().join(".repro/runs");
        let run = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
        let record: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("run.json")).unwrap()).unwrap();
        assert_eq!(record["enforcement"]["disk_limit_reached"], true, "{caller:?}");
        assert_eq!(record["settings"]["disk_bytes"], 8 << 20, "{caller:?}");
        assert!(!d.path().join("f0").exists(), "{caller:?}: the guest wrote to the host's directory");
    }
    // A bad size is a usage error naming the argument.
    let d = workdir(Caller::Root);
    let o = sh_as(Caller::Root, d.path(), &["--disk", "lots"], "true");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--disk"), "{}", stderr(&o));
}

/// While a guest writes, nothing of it lands in the run directory on the host's disk; killing `repro run`
/// leaves no writable layer behind; `repro gc` keeps the live run and removes the dead one's directory.
#[test]
fn killed_runs_leave_no_layer_and_gc_removes_only_dead_runs() {
    for caller in CALLERS {
        let d = workdir(caller);
        let mut cmd = repro_as(caller, d.path());
        cmd.args([
            "run",
            "-q",
            // Without the supervisor the guest's sleep takes real time.
            "--no-supervisor",
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero of=big bs=1M count=4 2>/dev/null; echo written; sleep 30",
        ]);
        let mut child = KillOnDrop(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
        let runs = d.path().join(".repro/runs");
        let deadline = Instant::now() + Duration::from_secs(30);
        let run = loop {
            let found = std::fs::read_dir(&runs).ok().and_then(|mut e| {
                e.find_map(|x| {
                    x.ok().map(|x| x.path()).filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
                })
            });
            if let Some(r) =
                found.filter(|r| std::fs::read_to_string(r.join("stdout")).is_ok_and(|s| s.contains("written")))
            {
                break r;
            }
            assert!(Instant::now() < deadline, "{caller:?}: the guest did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        let on_disk = du(&d.path().join(".repro"));
        assert!(on_disk < 1 << 20, "{caller:?}: {on_disk} bytes of the guest's writes are on the host's disk");

        let gc = |extra: &[&str]| -> Output {
            let mut c = repro_as(caller, d.path());
            c.arg("gc").args(extra).output().unwrap()
        };
        let o = gc(&["--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["removed"].as_array().unwrap().len(), 0, "{caller:?}: gc touched a live run: {report}");
        assert_eq!(report["live"].as_array().unwrap().len(), 1, "{caller:?}: {report}");
        assert!(run.join("INCOMPLETE").exists());

        child.0.kill().unwrap();
        child.0.wait().unwrap();
        // The init dies with repro (parent-death signal); its layer goes with it.
        std::thread::sleep(Duration::from_millis(500));
        assert!(run.join("INCOMPLETE").exists(), "{caller:?}: the killed run is incomplete");
        assert!(du(&run) < 1 << 20, "{caller:?}: the killed run left {} bytes", du(&run));
        let o = gc(&["--dry-run"]);
        assert!(stdout(&o).contains("would remove"), "{}", stdout(&o));
        assert!(run.exists(), "{caller:?}: --dry-run removed something");
        let o = gc(&[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains("interrupted run"), "{caller:?}: {}", stdout(&o));
        assert!(!run.exists(), "{caller:?}: gc left the dead run's directory");
    }
}

/// A child process killed (and reaped) when the test ends, also when it fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Bytes of the files under `p` (not following links).
fn du(p: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(p) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(p).map(|e| e.flatten().map(|x| du(&x.path())).sum()).unwrap_or(0)
}

/// A `--bind` whose guest path goes through an absolute link of the host's tree (`/var/run -> /run`) is refused:
/// before the pivot the link names the host's /run, where the init would otherwise create the mount point (a
/// canary name, removed if it ever appears).
#[test]
fn bind_through_an_outward_link_is_refused() {
    if std::fs::read_link("/var/run").ok().as_deref() != Some(Path::new("/run")) {
        return;
    }
    for caller in CALLERS {
        let d = workdir(caller);
        std::fs::write(d.path().join("src"), "x").unwrap();
        let name = format!("repro-escape-canary-{}", std::process::id());
        let canary = Path::new("/run").join(&name);
        let bind = format!("{}:/var/run/{name}", d.path().join("src").display());
        let o = sh_as(caller, d.path(), &["--bind", &bind], "true");
        let created = canary.exists();
        let _ = std::fs::remove_file(&canary);
        assert!(!created, "{caller:?}: the init created {} on the host", canary.display());
        assert_eq!(o.status.code(), Some(125), "{caller:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("leaves the sandbox's root"), "{caller:?}: {}", stderr(&o));
    }
}

/// `repro replay` assembles the pack's root the same way: no host proc or sysfs beneath the guest's, an empty
/// /run, runc's masks.
#[test]
fn replayed_pack_root_has_no_host_kernel_filesystems() {
    let (host_proc, host_sys) = (host_dev("/proc", "proc"), host_dev("/sys", "sysfs"));
    for caller in CALLERS {
        let d = workdir(caller);
        let script = "echo ==mountinfo==; cat /proc/self/mountinfo; echo ==run==; ls -A /run | wc -l; \
                      echo ==irq==; head -c 4096 /proc/interrupts | wc -c; echo ==end==; exit 3";
        let mut c = repro_as(caller, d.path());
        c.args(["capture", "-q", "-o", "p.repro", "--", "sh", "-c", script]);
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(3), "{caller:?}: {}", stderr(&o));
        let mut c = repro_as(caller, d.path());
        // The unprivileged caller cannot use root's cache.
        c.env("XDG_CACHE_HOME", d.path().join("cache"));
        let o = c.args(["replay", "p.repro"]).output().unwrap();
        let out = stdout(&o) + &stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{caller:?}: {out}");
        let all = mounts(section(&out, "mountinfo"));
        assert!(all.iter().any(|m| m.0 == "/proc" && m.1 == "proc"), "{caller:?}: {out}");
        for (at, fstype, dev, _) in &all {
            assert!(!(fstype == "proc" && dev == &host_proc), "{caller:?}: the host's proc at {at}");
            assert!(!(fstype == "sysfs" && dev == &host_sys), "{caller:?}: the host's sysfs at {at}");
            assert!(!["cgroup", "cgroup2", "debugfs", "tracefs"].contains(&fstype.as_str()), "{caller:?}: {at}");
        }
        assert_eq!(section(&out, "run").trim(), "0", "{caller:?}: {out}");
        assert_eq!(section(&out, "irq").trim(), "0", "{caller:?}: {out}");
    }
}
