//! Escape attempts: confine (see main.rs for the rules these tests follow).
//!
//! What a guest process may do: its capabilities are no wider than Docker's default set, no_new_privs is set,
//! and the seccomp policy refuses Docker's list with EPERM, with the supervisor and without it
//! (`--no-supervisor`), whoever runs repro. Every attempt is harmless when it succeeds: kernel interfaces are
//! called with null or invalid arguments, writes aim at a canary directory on the test's own small tmpfs, and a
//! clone that is let through exits at once in the child.

use std::process::{Command, Output};

use crate::common::{stderr, stdout};
#[allow(unused_imports)]
use crate::harness::*;

const EPERM: i32 = 1;
const ENOSYS: i32 = 38;

/// Both ways a guest is started.
const MODES: [&[&str]; 2] = [&[], &["--no-supervisor"]];

fn out(o: &Output) -> String {
    format!("status {:?}\nstdout:\n{}\nstderr:\n{}", o.status.code(), stdout(o), stderr(o))
}

/// `key=value` lines of the guest's output.
fn field<'a>(o: &'a str, key: &str) -> Option<&'a str> {
    o.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// A Python probe that makes raw syscalls through ctypes and prints `NAME=ERRNO` (0 when the call succeeded).
/// Numbers for x86_64 and aarch64 (the kernel's tables); a name missing on an architecture is skipped.
const PROBE: &str = r#"
import ctypes, os, platform, socket, sys
NR = {
    # name: (x86_64, aarch64)
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "unshare": (272, 97), "setns": (308, 268), "clone": (56, 220), "clone3": (435, 435),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "fsopen": (430, 430),
    "open_tree": (428, 428), "move_mount": (429, 429), "mount_setattr": (442, 442),
    "personality": (135, 92), "syslog": (103, 116), "acct": (163, 89), "swapon": (167, 224),
    "reboot": (169, 142), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "adjtimex": (159, 171), "iopl": (172, None), "ioperm": (173, None), "kcmp": (312, 272),
    "pidfd_getfd": (438, 438), "sethostname": (170, 161), "quotactl": (179, 60),
    "get_mempolicy": (239, 236), "move_pages": (279, 239), "getppid": (110, 173),
    "io_uring_setup": (425, 425),
}
arch = 0 if platform.machine() == "x86_64" else 1
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(label, name, *args):
    nr = NR[name][arch]
    if nr is None:
        return
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if name == "clone" and r == 0:
        os._exit(0)  # a clone that was let through: the child leaves at once
    if name == "clone" and r > 0:
        os.waitpid(r, 0)
    print(f"{label}={ctypes.get_errno() if r == -1 else 0}", flush=True)
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID, SIGCHLD = 0x20000, 0x10000000, 0x40000000, 0x20000000, 17
call("keyctl", "keyctl", 0, -3, 0)             # KEYCTL_GET_KEYRING_ID of the session keyring
call("add_key", "add_key", 0, 0, 0, 0, 0)
call("request_key", "request_key", 0, 0, 0, 0)
call("bpf", "bpf", 0, 0, 0)                     # BPF_MAP_CREATE, NULL attributes
call("perf_event_open", "perf_event_open", 0, 0, -1, -1, 0)
call("userfaultfd", "userfaultfd", 0)
call("open_by_handle_at", "open_by_handle_at", -1, 0, 0)
call("name_to_handle_at", "name_to_handle_at", -1, 0, 0, 0, 0)
call("kexec_load", "kexec_load", 0, 0, 0, 0)
call("kexec_file_load", "kexec_file_load", -1, -1, 0, 0, 0)
call("init_module", "init_module", 0, 0, 0)
call("finit_module", "finit_module", -1, 0, 0)
call("delete_module", "delete_module", 0, 0)
call("unshare_user", "unshare", CLONE_NEWUSER)
call("unshare_mount", "unshare", CLONE_NEWNS)
call("setns", "setns", os.open("/proc/self/ns/net", os.O_RDONLY), 0)
call("clone_user", "clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
call("clone_net", "clone", CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0)
call("clone_pid", "clone", CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0)
call("clone3", "clone3", 0, 0)
call("fsopen", "fsopen", 0, 0)
call("open_tree", "open_tree", -1, 0, 0)
call("move_mount", "move_mount", -1, 0, -1, 0, 0)
call("mount_setattr", "mount_setattr", -1, 0, 0, 0, 0)
call("pivot_root", "pivot_root", 0, 0)
call("personality_rie", "personality", 0x0400000)   # READ_IMPLIES_EXEC
call("syslog", "syslog", 10, 0, 0)                  # SYSLOG_ACTION_SIZE_BUFFER
call("acct", "acct", 0)
call("swapon", "swapon", 0, 0)
call("reboot", "reboot", 0, 0, 0, 0)                # bad magic numbers: nothing would happen anyway
call("settimeofday", "settimeofday", 0, 0)
call("clock_settime", "clock_settime", 0, 0)
call("adjtimex", "adjtimex", 0)
call("iopl", "iopl", 0)
call("ioperm", "ioperm", 0, 0, 0)
call("kcmp", "kcmp", 0, 0, 0, 0, 0)
call("pidfd_getfd", "pidfd_getfd", -1, 0, 0)
call("sethostname", "sethostname", 0, 0)
call("quotactl", "quotactl", 0, 0, 0, 0)
call("get_mempolicy", "get_mempolicy", 0, 0, 0, 0, 0)
call("move_pages", "move_pages", 0, 0, 0, 0, 0, 0)
call("io_uring_setup", "io_uring_setup", 1, 0)      # NULL parameters
# What must keep working: plain clone (fork), personality queries, an ordinary socket.
call("clone_plain", "clone", SIGCHLD, 0, 0, 0, 0)
call("personality_query", "personality", 0xffffffff)
call("getppid", "getppid")
try:
    socket.socket(40, socket.SOCK_STREAM)          # AF_VSOCK
    print("vsock=0")
except OSError as e:
    print(f"vsock={e.errno}")
socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
print("done=1")
"#;

/// Every refused syscall of [`PROBE`] (the labels it prints) with the errno the guest must see.
const REFUSED: &[(&str, i32)] = &[
    ("keyctl", EPERM),
    ("add_key", EPERM),
    ("request_key", EPERM),
    ("bpf", EPERM),
    ("perf_event_open", EPERM),
    ("userfaultfd", EPERM),
    ("open_by_handle_at", EPERM),
    ("name_to_handle_at", EPERM),
    ("kexec_load", EPERM),
    ("kexec_file_load", EPERM),
    ("init_module", EPERM),
    ("finit_module", EPERM),
    ("delete_module", EPERM),
    ("unshare_user", EPERM),
    ("unshare_mount", EPERM),
    ("setns", EPERM),
    ("clone_user", EPERM),
    ("clone_net", EPERM),
    ("clone_pid", EPERM),
    ("clone3", ENOSYS),
    ("fsopen", EPERM),
    ("open_tree", EPERM),
    ("move_mount", EPERM),
    ("mount_setattr", EPERM),
    ("pivot_root", EPERM),
    ("personality_rie", EPERM),
    ("syslog", EPERM),
    ("acct", EPERM),
    ("swapon", EPERM),
    ("reboot", EPERM),
    ("settimeofday", EPERM),
    ("clock_settime", EPERM),
    ("adjtimex", EPERM),
    ("kcmp", EPERM),
    ("pidfd_getfd", EPERM),
    ("sethostname", EPERM),
    ("quotactl", EPERM),
    ("get_mempolicy", EPERM),
    ("move_pages", EPERM),
    ("io_uring_setup", EPERM),
    ("vsock", EPERM),
];

/// Runs [`PROBE`] in the guest as `caller` with `mode`'s flags.
fn probe(caller: Caller, mode: &[&str]) -> Output {
    let dir = workdir(caller);
    std::fs::write(dir.path().join("probe.py"), PROBE).unwrap();
    sh_as(caller, dir.path(), mode, "python3 ./probe.py")
}

#[test]
fn dockers_refused_syscalls_answer_eperm_with_and_without_the_supervisor() {
    for caller in CALLERS {
        for mode in MODES {
            let o = probe(caller, mode);
            let s = stdout(&o);
            let ctx = format!("{caller:?} {mode:?}\n{}", out(&o));
            assert_eq!(field(&s, "done"), Some("1"), "the probe did not finish: {ctx}");
            for (label, errno) in REFUSED {
                let want = errno.to_string();
                assert_eq!(field(&s, label), Some(want.as_str()), "{label}: {ctx}");
            }
            if cfg!(target_arch = "x86_64") {
                assert_eq!(field(&s, "iopl"), Some("1"), "{ctx}");
                assert_eq!(field(&s, "ioperm"), Some("1"), "{ctx}");
            }
            for ok in ["clone_plain", "personality_query", "getppid"] {
                assert_eq!(field(&s, ok), Some("0"), "{ok} must work: {ctx}");
            }
        }
    }
}

/// The guest's own view in /proc/self/status: Docker's capability set (bounding, permitted, effective), no
/// inheritable or ambient capabilities, no_new_privs, a seccomp filter.
#[test]
fn capabilities_and_no_new_privs_match_dockers() {
    for caller in CALLERS {
        for mode in MODES {
            let dir = workdir(caller);
            let o = sh_as(caller, dir.path(), mode, "grep -E '^(Cap[A-Za-z]+|NoNewPrivs|Seccomp):' /proc/self/status");
            let s = stdout(&o).replace(":\t", "=");
            let ctx = format!("{caller:?} {mode:?}\n{}", out(&o));
            for (k, v) in [
                ("CapBnd", "00000000a80425fb"),
                ("CapPrm", "00000000a80425fb"),
                ("CapEff", "00000000a80425fb"),
                ("CapInh", "0000000000000000"),
                ("CapAmb", "0000000000000000"),
                ("NoNewPrivs", "1"),
                ("Seccomp", "2"),
            ] {
                assert_eq!(field(&s, k), Some(v), "{k}: {ctx}");
            }
        }
    }
}

/// `mount -o remount,rw` of the read-only root and of a read-only bind, then writes: refused (EPERM), and
/// nothing reaches the canary tmpfs.
#[test]
fn remount_read_write_is_refused_and_the_canary_stays_empty() {
    for caller in CALLERS {
        for mode in MODES {
            let canary = Tmpfs::canary();
            let dir = workdir(caller);
            let bind = format!("{}:/tmp/canary:ro", canary.path().display());
            let script = r#"
                python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND, MS_RDONLY = 32, 4096, 1
for label, target, flags in [("root", b"/", MS_REMOUNT), ("bind", b"/tmp/canary", MS_REMOUNT | MS_BIND)]:
    r = libc.mount(None, target, None, flags, None)
    print(f"remount_{label}={ctypes.get_errno() if r else 0}")
r = libc.umount2(b"/tmp/canary", 2)  # MNT_DETACH: uncover what is beneath the bind
print(f"umount={ctypes.get_errno() if r else 0}")
try:
    open("/tmp/canary/escaped", "w").write("x")
    print("write=0")
except OSError as e:
    print(f"write={e.errno}")
PY
                mount -o remount,rw /tmp/canary 2>/dev/null; echo "mount_cli=$?"
            "#;
            let o = sh_as(caller, dir.path(), &[&["--bind", &bind], mode].concat(), script);
            let s = stdout(&o);
            let ctx = format!("{caller:?} {mode:?}\n{}", out(&o));
            assert_eq!(field(&s, "remount_root"), Some("1"), "{ctx}");
            assert_eq!(field(&s, "remount_bind"), Some("1"), "{ctx}");
            assert_eq!(field(&s, "umount"), Some("1"), "{ctx}");
            assert_eq!(field(&s, "write"), Some("30"), "EROFS expected: {ctx}");
            assert_ne!(field(&s, "mount_cli"), Some("0"), "{ctx}");
            let left: Vec<_> = std::fs::read_dir(canary.path()).unwrap().collect();
            assert!(left.is_empty(), "the canary tmpfs was written: {left:?}\n{ctx}");
        }
    }
}

/// `umount -l` of the hidden state directory, then a forged run record: umount2 answers EPERM and the host's
/// state directory gets nothing.
#[test]
fn the_hidden_state_directory_cannot_be_unmounted() {
    for caller in CALLERS {
        for mode in MODES {
            let dir = workdir(caller);
            let script = r#"
                python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.umount2(b"./.repro", 2); print(f"umount={ctypes.get_errno() if r else 0}")'
                umount -l ./.repro 2>/dev/null; echo "umount_cli=$?"
                mkdir -p ./.repro/runs/forged 2>/dev/null && echo forged > ./.repro/runs/forged/run.json 2>/dev/null
                echo "forge=$?"
            "#;
            let o = sh_as(caller, dir.path(), mode, script);
            let s = stdout(&o);
            let ctx = format!("{caller:?} {mode:?}\n{}", out(&o));
            assert_eq!(field(&s, "umount"), Some("1"), "{ctx}");
            assert_ne!(field(&s, "umount_cli"), Some("0"), "{ctx}");
            assert_ne!(field(&s, "forge"), Some("0"), "{ctx}");
            assert!(!dir.path().join(".repro/runs/forged").exists(), "a forged run record reached the host: {ctx}");
        }
    }
}

/// A setuid-root copy of `id`, executed after dropping to another uid: no_new_privs keeps the effective uid.
/// Where the guest cannot switch uid at all (an unprivileged caller maps a single id), that is checked instead.
#[test]
fn a_setuid_binary_gains_nothing() {
    for caller in CALLERS {
        for mode in MODES {
            let dir = workdir(caller);
            let script = r#"
                cp /usr/bin/id ./suid-id && chown 0:0 ./suid-id && chmod 4755 ./suid-id || { echo setup=1; exit 0; }
                if setpriv --reuid=1000 --regid=1000 --clear-groups true 2>/dev/null; then
                    echo "euid=$(setpriv --reuid=1000 --regid=1000 --clear-groups ./suid-id -u)"
                else
                    echo "switch=refused"
                fi
            "#;
            let o = sh_as(caller, dir.path(), mode, script);
            let s = stdout(&o);
            let ctx = format!("{caller:?} {mode:?}\n{}", out(&o));
            assert_eq!(field(&s, "setup"), None, "could not make the setuid copy: {ctx}");
            match (field(&s, "euid"), field(&s, "switch")) {
                (Some(euid), _) => assert_eq!(euid, "1000", "the setuid bit raised the euid: {ctx}"),
                (None, Some("refused")) => assert_eq!(caller, Caller::Unprivileged, "root's guest can switch: {ctx}"),
                _ => panic!("unexpected output: {ctx}"),
            }
        }
    }
}

/// ptrace stays allowed: without the supervisor (which traces every guest process itself) a guest attaches to
/// its own child and detaches.
#[test]
fn a_guest_may_ptrace_its_own_processes() {
    for caller in CALLERS {
        let dir = workdir(caller);
        let script = r#"
            python3 - <<'PY'
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
pid = os.fork()
if pid == 0:
    time.sleep(5)
    os._exit(0)
r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
print(f"attach={ctypes.get_errno() if r else 0}")
if r == 0:
    os.waitpid(pid, 0)
    print(f"detach={ctypes.get_errno() if libc.ptrace(17, pid, None, None) else 0}")
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
PY
        "#;
        let o = sh_as(caller, dir.path(), &["--no-supervisor"], script);
        let s = stdout(&o);
        let ctx = format!("{caller:?}\n{}", out(&o));
        assert_eq!(field(&s, "attach"), Some("0"), "{ctx}");
        assert_eq!(field(&s, "detach"), Some("0"), "{ctx}");
    }
}

/// The 32-bit x86 entry (`int $0x80`) is the classic way around a filter written for x86_64 numbers: every
/// 32-bit syscall answers ENOSYS, with the supervisor and without it.
#[cfg(target_arch = "x86_64")]
#[test]
fn thirty_two_bit_syscalls_cannot_go_around_the_filter() {
    const C: &str = r#"
#include <stdio.h>
int main(void) {
    long r;
    /* i386 getpid (20): harmless whatever the answer. */
    __asm__ volatile ("int $0x80" : "=a"(r) : "a"(20L) : "memory");
    printf("i386_getpid=%ld\n", r);
    /* i386 unshare (310) of a user namespace: refused, or a namespace of this throwaway process only. */
    __asm__ volatile ("int $0x80" : "=a"(r) : "a"(310L), "b"(0x10000000L) : "memory");
    printf("i386_unshare=%ld\n", r);
    return 0;
}
"#;
    crate::common::require_cmd("gcc");
    for caller in CALLERS {
        for mode in MODES {
            let dir = workdir(caller);
            std::fs::write(dir.path().join("int80.c"), C).unwrap();
            let st = Command::new("gcc")
                .args(["-O1", "-o"])
                .arg(dir.path().join("int80"))
                .arg(dir.path().join("int80.c"))
                .status()
                .expect("gcc runs");
            assert!(st.success(), "compiling the probe");
            let o = sh_as(caller, dir.path(), mode, "./int80");
            let s = stdout(&o);
            let ctx = format!("{caller:?} {mode:?}\n{}", out(&o));
            assert_eq!(field(&s, "i386_getpid"), Some("-38"), "{ctx}");
            assert_eq!(field(&s, "i386_unshare"), Some("-38"), "{ctx}");
        }
    }
}
