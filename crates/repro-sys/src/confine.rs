//! What a guest process may do: its capabilities (no wider than Docker's default set), no_new_privs, and the
//! seccomp policy (at least as strict as Docker's default profile, refusing with EPERM).
//!
//! The policy is plain data ([`DENY`], [`CLONE_NAMESPACE_FLAGS`], [`PERSONAS`], [`DOCKER_DEFAULT_CAPS`]) turned
//! into rules by [`guest_rules`]; the sandbox installs it in the guest child just before exec, alone
//! ([`Confinement::filter`]) or, under the determinism supervisor, merged into the supervisor's filter
//! ([`crate::seccomp::Rules::add_notify`]: its refusals are decided first).

use std::io;

use crate::seccomp::{Action, BpfFilter, Rule, Rules};
use crate::syscalls;

/// Docker's default capability set for a container's root: `(name without CAP_, number)`. Every other
/// capability is dropped from the guest's bounding set.
pub const DOCKER_DEFAULT_CAPS: &[(&str, u32)] = &[
    ("CHOWN", 0),
    ("DAC_OVERRIDE", 1),
    ("FOWNER", 3),
    ("FSETID", 4),
    ("KILL", 5),
    ("SETGID", 6),
    ("SETUID", 7),
    ("SETPCAP", 8),
    ("NET_BIND_SERVICE", 10),
    ("NET_RAW", 13),
    ("SYS_CHROOT", 18),
    ("MKNOD", 27),
    ("AUDIT_WRITE", 29),
    ("SETFCAP", 31),
];

/// [`DOCKER_DEFAULT_CAPS`] as a bit mask (what `/proc/PID/status` shows as `CapBnd`: `00000000a80425fb`).
pub fn docker_caps_mask() -> u64 {
    DOCKER_DEFAULT_CAPS.iter().fold(0, |m, (_, c)| m | 1 << c)
}

/// Syscalls the guest may never make: they answer EPERM. Docker's default profile refuses each of them to a
/// container without extra capabilities (its profile is an allow list; these are the syscalls of x86_64 and
/// aarch64 it leaves out), plus `adjtimex`/`clock_adjtime` and `name_to_handle_at` (see docs/security.md).
/// Names that do not exist on an architecture are skipped there.
pub const DENY: &[&str] = &[
    // Kernel modules, kexec, reboot, swap, accounting.
    "create_module",
    "init_module",
    "finit_module",
    "delete_module",
    "get_kernel_syms",
    "query_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    // The kernel keyring.
    "add_key",
    "request_key",
    "keyctl",
    // Tracing, profiling and kernel programs.
    "bpf",
    "perf_event_open",
    "lookup_dcookie",
    "fanotify_init",
    "syslog",
    // Mounts and namespaces (clone's namespace flags are refused below).
    "mount",
    "umount2",
    "pivot_root",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "open_tree_attr",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "listmount",
    "statmount",
    "unshare",
    "setns",
    "quotactl",
    "quotactl_fd",
    "nfsservctl",
    // File handles (the "shocker" escape through open_by_handle_at).
    "name_to_handle_at",
    "open_by_handle_at",
    // Clocks (setting them needs CAP_SYS_TIME; reading through adjtimex bypasses the supervisor's clock).
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    // Host and domain names (the sandbox sets them; Docker refuses them without CAP_SYS_ADMIN).
    "sethostname",
    "setdomainname",
    // Raw I/O, terminals, old interfaces.
    "iopl",
    "ioperm",
    "vhangup",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    // NUMA placement, other processes' memory and descriptors.
    "mbind",
    "set_mempolicy",
    "get_mempolicy",
    "set_mempolicy_home_node",
    "migrate_pages",
    "move_pages",
    "kcmp",
    "pidfd_getfd",
    "process_madvise",
    // Page-fault handling in user space (a tool for widening kernel races).
    "userfaultfd",
    // io_uring: its operations bypass seccomp (and the supervisor's mediation); Docker refuses it since v25.
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    // Linux security module attributes.
    "lsm_get_self_attr",
    "lsm_set_self_attr",
    "lsm_list_modules",
];

/// clone(2) flags that create namespaces (NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET): a clone
/// with any of them answers EPERM (Docker's mask 0x7E020000).
pub const CLONE_NAMESPACE_FLAGS: u32 = 0x7E02_0000;

/// `ADDR_NO_RANDOMIZE`, which `repro run` sets itself (unless `--aslr`): a guest may keep it when it sets its
/// persona again.
pub const ADDR_NO_RANDOMIZE: u32 = 0x0004_0000;

/// The personas personality(2) may set (Docker's list: PER_LINUX, PER_LINUX32, UNAME26 with either, and the
/// query 0xffffffff), each also with [`ADDR_NO_RANDOMIZE`]; any other answers EPERM.
pub const PERSONAS: &[u32] = &[
    0x0000_0000,
    0x0000_0008,
    0x0002_0000,
    0x0002_0008,
    0xffff_ffff,
    ADDR_NO_RANDOMIZE,
    ADDR_NO_RANDOMIZE | 0x0000_0008,
    ADDR_NO_RANDOMIZE | 0x0002_0000,
    ADDR_NO_RANDOMIZE | 0x0002_0008,
];

/// `AF_VSOCK`: socket(2) in this family answers EPERM (the hypervisor's channel; Docker refuses it too).
pub const AF_VSOCK: u32 = 40;

/// The guest's seccomp rules for this architecture: [`DENY`] → EPERM; clone with
/// [`CLONE_NAMESPACE_FLAGS`] → EPERM; clone3 → ENOSYS (its flags are in memory, out of the filter's reach;
/// the C libraries then fall back to clone); personality other than [`PERSONAS`] → EPERM; socket(AF_VSOCK)
/// → EPERM. Everything else (ptrace and process_vm_readv/writev on the guest's own processes included) is
/// allowed.
pub fn guest_rules() -> Rules {
    let eperm = Action::Errno(libc::EPERM as u16);
    let mut r = Rules::new();
    for nr in DENY.iter().filter_map(|n| syscalls::native(n)) {
        r.set(nr, Rule::Always(eperm));
    }
    let mut set = |name: &str, rule: Rule| {
        if let Some(nr) = syscalls::native(name) {
            r.set(nr, rule);
        }
    };
    set("clone", Rule::IfAnyBits { arg: 0, mask: CLONE_NAMESPACE_FLAGS, then: eperm, otherwise: Action::Allow });
    set("clone3", Rule::Always(Action::Errno(libc::ENOSYS as u16)));
    set("personality", Rule::IfOneOf { arg: 0, values: PERSONAS.to_vec(), then: Action::Allow, otherwise: eperm });
    set("socket", Rule::IfOneOf { arg: 0, values: vec![AF_VSOCK], then: eperm, otherwise: Action::Allow });
    r
}

/// What [`apply`] does to the guest child.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// Capabilities kept (bit `n` = capability `n`): the bounding set, permitted and effective sets are
    /// limited to them; the inheritable and ambient sets are emptied.
    pub keep_caps: u64,
    /// A seccomp filter to install last (none when the rules are in a filter with a listener: the supervisor's,
    /// or the `--no-supervisor` run's host-socket guard's).
    pub filter: Option<BpfFilter>,
}

impl Confinement {
    /// Docker's capabilities and, when `standalone`, the guest's rules as a filter of their own (without the
    /// supervisor).
    pub fn docker_default(standalone: bool) -> io::Result<Self> {
        let filter = if standalone { Some(BpfFilter::compile(&guest_rules())?) } else { None };
        Ok(Confinement { keep_caps: docker_caps_mask(), filter })
    }
}

const PR_CAP_AMBIENT: libc::c_int = 47;
const PR_CAP_AMBIENT_CLEAR_ALL: libc::c_ulong = 4;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Applies `c` to the calling process: drops every capability outside `keep_caps` from the bounding set,
/// clears the ambient set, limits permitted and effective to `keep_caps`, empties inheritable, sets
/// no_new_privs, then installs the filter. Async-signal-safe (no allocation): meant for the child between
/// fork and exec. Returns the failing step and its errno.
pub fn apply(c: &Confinement) -> Result<(), (&'static str, i32)> {
    for cap in 0..64u32 {
        if c.keep_caps & (1 << cap) != 0 {
            continue;
        }
        // SAFETY: prctl with integer arguments only.
        let present = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
        if present < 0 {
            // EINVAL: past the kernel's last capability.
            break;
        }
        if present == 0 {
            continue;
        }
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(("prctl(PR_CAPBSET_DROP)", errno()));
        }
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) } != 0 && errno() != libc::EINVAL {
        return Err(("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", errno()));
    }
    let mut hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: a version-3 header and room for the two data structures version 3 uses.
    if unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) } != 0 {
        return Err(("capget", errno()));
    }
    for (i, d) in data.iter_mut().enumerate() {
        let keep = (c.keep_caps >> (32 * i)) as u32;
        d.permitted &= keep;
        d.effective &= keep;
        d.inheritable = 0;
    }
    // SAFETY: as for capget; the kernel only reads the structures.
    if unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) } != 0 {
        return Err(("capset", errno()));
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(("prctl(PR_SET_NO_NEW_PRIVS)", errno()));
    }
    if let Some(f) = &c.filter {
        f.install().map_err(|e| ("seccomp", e.raw_os_error().unwrap_or(libc::EIO)))?;
    }
    Ok(())
}

/// Whether the confinement works on this machine: in a forked child, applies Docker's capabilities,
/// no_new_privs and the guest's filter, then checks that keyctl answers EPERM, a plain syscall runs and
/// no_new_privs is set. Returns the number of syscall rules, or why it failed. The caller must be
/// single-threaded (see [`crate::ns::probe_in_child`]).
pub fn probe() -> std::result::Result<usize, ProbeError> {
    let rules = guest_rules();
    let c = Confinement::docker_default(true).map_err(|e| ProbeError::Filter(e.to_string()))?;
    let keyctl = syscalls::native("keyctl").ok_or(ProbeError::NoKeyctl)?;
    let code = crate::ns::probe_in_child(move || {
        if apply(&c).is_err() {
            return 2;
        }
        // SAFETY: keyctl is refused by the filter before the kernel reads its (null) arguments.
        let refused = unsafe { libc::syscall(keyctl as libc::c_long, 0, 0, 0, 0, 0) } == -1 && errno() == libc::EPERM;
        // SAFETY: prctl queries with integer arguments; getppid has no arguments.
        let (nnp, ppid) = unsafe { (libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), libc::getppid()) };
        if !refused {
            3
        } else if nnp != 1 || ppid <= 0 {
            4
        } else {
            0
        }
    })
    .map_err(ProbeError::Child)?;
    match code {
        0 => Ok(rules.len()),
        2 => Err(ProbeError::CannotApply),
        3 => Err(ProbeError::NotRefused),
        _ => Err(ProbeError::Failed(code)),
    }
}

/// Why the confinement probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot build the filter: {0}")]
    Filter(String),
    #[error("keyctl has no number on this architecture")]
    NoKeyctl,
    #[error(transparent)]
    Child(crate::ns::SysError),
    #[error("capabilities, no_new_privs or the seccomp filter cannot be set")]
    CannotApply,
    #[error("the seccomp filter did not refuse keyctl")]
    NotRefused,
    #[error("the confined probe failed ({0})")]
    Failed(i32),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seccomp::AUDIT_ARCH_NATIVE;

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    const NOTIF: u32 = libc::SECCOMP_RET_USER_NOTIF;

    fn nr(name: &str) -> u32 {
        syscalls::native(name).unwrap_or_else(|| panic!("{name} has no number here"))
    }

    #[test]
    fn docker_mask_is_dockers_capbnd() {
        assert_eq!(docker_caps_mask(), 0xa804_25fb);
    }

    #[test]
    fn every_denied_name_has_a_number_on_x86_64_or_aarch64() {
        for name in DENY {
            let row = syscalls::TABLE.iter().find(|(n, _, _)| n == name);
            assert!(matches!(row, Some((_, x, a)) if x.is_some() || a.is_some()), "{name} is not in the table");
        }
        // The ones both architectures have (all but the x86-only legacy calls) resolve on both.
        let x86_only = ["create_module", "get_kernel_syms", "query_module", "iopl", "ioperm", "uselib", "ustat"];
        let x86_only = [&x86_only[..], &["sysfs", "_sysctl"]].concat();
        for name in DENY.iter().filter(|n| !x86_only.contains(n)) {
            let (_, x, a) = syscalls::TABLE.iter().find(|(n, _, _)| n == name).unwrap();
            assert!(x.is_some() && a.is_some(), "{name}");
        }
        let mut d = DENY.to_vec();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), DENY.len(), "a name is listed twice");
    }

    #[test]
    fn the_filter_denies_the_list_and_allows_the_rest() {
        let f = BpfFilter::compile(&guest_rules()).unwrap();
        let denied: Vec<u32> = DENY.iter().filter_map(|n| syscalls::native(n)).collect();
        assert!(denied.len() >= 60);
        for name in DENY {
            if let Some(n) = syscalls::native(name) {
                assert_eq!(f.evaluate(n, AUDIT_ARCH_NATIVE), EPERM, "{name}");
            }
        }
        let special = ["clone", "clone3", "personality", "socket"].map(nr);
        for n in 0..600 {
            if !denied.contains(&n) && !special.contains(&n) {
                assert_eq!(f.evaluate(n, AUDIT_ARCH_NATIVE), ALLOW, "syscall {n}");
            }
        }
        for name in ["ptrace", "process_vm_readv", "process_vm_writev", "chroot", "seccomp", "capset", "setuid"] {
            assert_eq!(f.evaluate(nr(name), AUDIT_ARCH_NATIVE), ALLOW, "{name}");
        }
        // Other architectures (32-bit x86 included) and x32 are refused as before.
        assert_eq!(f.evaluate(nr("getppid"), 0x4000_0003), ENOSYS);
        assert_eq!(f.evaluate(nr("getppid") | crate::seccomp::X32_SYSCALL_BIT, AUDIT_ARCH_NATIVE), ENOSYS);
    }

    #[test]
    fn argument_rules() {
        let f = BpfFilter::compile(&guest_rules()).unwrap();
        let ev = |name: &str, a0: u64| f.evaluate_args(nr(name), AUDIT_ARCH_NATIVE, [a0, 0, 0, 0, 0, 0]);
        // clone: threads and forks run, any namespace flag is refused.
        assert_eq!(ev("clone", libc::SIGCHLD as u64), ALLOW);
        assert_eq!(ev("clone", 0x3d0f00), ALLOW, "pthread_create's flags");
        for flag in [
            libc::CLONE_NEWNS,
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
            libc::CLONE_NEWUTS,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWCGROUP,
        ] {
            assert_eq!(ev("clone", flag as u64 | libc::SIGCHLD as u64), EPERM, "{flag:#x}");
        }
        assert_eq!(ev("clone3", 0), ENOSYS);
        // personality: Docker's personas (and ADDR_NO_RANDOMIZE with them), nothing else.
        for p in [0, 8, 0x20000, 0x20008, 0xffff_ffff, 0x40000, 0x0000_0000_ffff_ffff] {
            assert_eq!(ev("personality", p), ALLOW, "{p:#x}");
        }
        for p in [0x0400000 /* READ_IMPLIES_EXEC */, 0x0100000 /* MMAP_PAGE_ZERO */, 0x0008_0000, 1] {
            assert_eq!(ev("personality", p), EPERM, "{p:#x}");
        }
        assert_eq!(ev("socket", AF_VSOCK as u64), EPERM);
        assert_eq!(ev("socket", libc::AF_INET as u64), ALLOW);
        assert_eq!(ev("socket", libc::AF_UNIX as u64), ALLOW);
    }

    #[test]
    fn merged_with_the_supervisor_refusals_come_first() {
        let mut rules = guest_rules();
        let getppid = nr("getppid");
        // The supervisor notifies socket (network tape), mount (hypothetically) and getppid.
        rules.add_notify(&[nr("socket"), nr("mount"), getppid], &[]).unwrap();
        let f = BpfFilter::compile(&rules).unwrap();
        let ev = |n: u32, a0: u64| f.evaluate_args(n, AUDIT_ARCH_NATIVE, [a0, 0, 0, 0, 0, 0]);
        assert_eq!(ev(nr("mount"), 0), EPERM);
        assert_eq!(ev(getppid, 0), NOTIF);
        assert_eq!(ev(nr("socket"), libc::AF_INET as u64), NOTIF);
        assert_eq!(ev(nr("socket"), AF_VSOCK as u64), EPERM);
        assert_eq!(ev(nr("keyctl"), 0), EPERM);
        assert_eq!(ev(nr("clone"), libc::CLONE_NEWUSER as u64), EPERM);
        assert_eq!(ev(nr("clone"), libc::SIGCHLD as u64), ALLOW);
    }

    /// The real kernel agrees with the interpreter: in a forked child with the confinement applied, denied
    /// calls fail with EPERM before doing anything, allowed ones run, and the capability sets and
    /// no_new_privs are as set. (The child makes raw calls only, on data prepared before the fork: the test
    /// harness has other threads.)
    #[test]
    fn installed_in_a_child_the_kernel_refuses() {
        let f = BpfFilter::compile(&guest_rules()).unwrap();
        let c = Confinement { keep_caps: docker_caps_mask(), filter: Some(f) };
        let eperm: Vec<(u32, [u64; 3])> = [
            ("keyctl", [0, 0, 0]),
            ("bpf", [0, 0, 0]),
            ("perf_event_open", [0, 0, 0]),
            ("userfaultfd", [0, 0, 0]),
            ("unshare", [libc::CLONE_NEWUSER as u64, 0, 0]),
            ("setns", [u64::MAX, 0, 0]),
            ("mount", [0, 0, 0]),
            ("open_by_handle_at", [u64::MAX, 0, 0]),
            ("kexec_load", [0, 0, 0]),
            ("init_module", [0, 0, 0]),
            ("personality", [0x0040_0000, 0, 0]),
            ("clone", [(libc::CLONE_NEWUSER | libc::SIGCHLD) as u64, 0, 0]),
        ]
        .iter()
        .map(|(n, a)| (nr(n), *a))
        .collect();
        let (clone3, getppid, personality) = (nr("clone3"), nr("getppid"), nr("personality"));
        let keep = docker_caps_mask();
        let call = |n: u32, a: [u64; 3]| {
            // SAFETY: each call is refused by the filter before the kernel reads its arguments, or is a
            // harmless query (getppid, personality(0xffffffff)).
            let r = unsafe { libc::syscall(n as libc::c_long, a[0], a[1], a[2], 0, 0, 0) };
            if r < 0 {
                errno()
            } else {
                0
            }
        };
        let child = || -> i32 {
            if apply(&c).is_err() {
                return 10;
            }
            for (i, (n, args)) in eperm.iter().enumerate() {
                if call(*n, *args) != libc::EPERM {
                    return 20 + i as i32;
                }
            }
            if call(clone3, [0, 0, 0]) != libc::ENOSYS {
                return 40;
            }
            if call(getppid, [0, 0, 0]) != 0 || call(personality, [0xffff_ffff, 0, 0]) != 0 {
                return 41;
            }
            // SAFETY: prctl queries with integer arguments.
            let (nnp, mode) = unsafe {
                (libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0), libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0))
            };
            if nnp != 1 || mode != 2 {
                return 42;
            }
            for cap in 0..41u32 {
                // SAFETY: as above.
                let inb = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) };
                if inb == 1 && keep & (1 << cap) == 0 {
                    return 43;
                }
            }
            let mut hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
            let mut data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
            // SAFETY: a version-3 header and room for two data structures.
            unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) };
            let eff = u64::from(data[0].effective) | u64::from(data[1].effective) << 32;
            let inh = u64::from(data[0].inheritable) | u64::from(data[1].inheritable) << 32;
            if eff & !keep != 0 || inh != 0 {
                return 44;
            }
            0
        };
        // SAFETY: the child runs `child` (raw calls on data prepared above, no allocation) and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = child();
            // SAFETY: ends the child without running the harness's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "the child's check failed (see the codes above)");
    }
}
