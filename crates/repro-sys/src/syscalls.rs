//! Syscall numbers by name, for the syscalls the sandbox's policy names, on the two architectures repro
//! supports. Plain data: the numbers are those of the kernel's `syscall_64.tbl` (x86_64) and the generic table
//! (aarch64); numbers from 424 on are the same on both. A name missing on an architecture does not exist there.

/// `(name, x86_64, aarch64)`, sorted by name.
pub const TABLE: &[(&str, Option<u32>, Option<u32>)] = &[
    ("_sysctl", Some(156), None),
    ("acct", Some(163), Some(89)),
    ("add_key", Some(248), Some(217)),
    ("adjtimex", Some(159), Some(171)),
    ("bpf", Some(321), Some(280)),
    ("cachestat", Some(451), Some(451)),
    ("capset", Some(126), Some(91)),
    ("chroot", Some(161), Some(51)),
    ("clock_adjtime", Some(305), Some(266)),
    ("clock_settime", Some(227), Some(112)),
    ("clone", Some(56), Some(220)),
    ("clone3", Some(435), Some(435)),
    ("create_module", Some(174), None),
    ("delete_module", Some(176), Some(106)),
    ("fanotify_init", Some(300), Some(262)),
    ("fchmodat2", Some(452), Some(452)),
    ("finit_module", Some(313), Some(273)),
    ("fsconfig", Some(431), Some(431)),
    ("fsmount", Some(432), Some(432)),
    ("fsopen", Some(430), Some(430)),
    ("fspick", Some(433), Some(433)),
    ("futex_wait", Some(455), Some(455)),
    ("get_kernel_syms", Some(177), None),
    ("get_mempolicy", Some(239), Some(236)),
    ("getppid", Some(110), Some(173)),
    ("init_module", Some(175), Some(105)),
    ("io_uring_enter", Some(426), Some(426)),
    ("io_uring_register", Some(427), Some(427)),
    ("io_uring_setup", Some(425), Some(425)),
    ("ioperm", Some(173), None),
    ("iopl", Some(172), None),
    ("kcmp", Some(312), Some(272)),
    ("kexec_file_load", Some(320), Some(294)),
    ("kexec_load", Some(246), Some(104)),
    ("keyctl", Some(250), Some(219)),
    ("listmount", Some(458), Some(458)),
    ("lookup_dcookie", Some(212), Some(18)),
    ("lsm_get_self_attr", Some(459), Some(459)),
    ("lsm_list_modules", Some(461), Some(461)),
    ("lsm_set_self_attr", Some(460), Some(460)),
    ("mbind", Some(237), Some(235)),
    ("migrate_pages", Some(256), Some(238)),
    ("mknod", Some(133), None),
    ("mknodat", Some(259), Some(33)),
    ("mount", Some(165), Some(40)),
    ("mount_setattr", Some(442), Some(442)),
    ("move_mount", Some(429), Some(429)),
    ("move_pages", Some(279), Some(239)),
    ("mseal", Some(462), Some(462)),
    ("name_to_handle_at", Some(303), Some(264)),
    ("nfsservctl", Some(180), Some(42)),
    ("open_by_handle_at", Some(304), Some(265)),
    ("open_tree", Some(428), Some(428)),
    ("open_tree_attr", Some(467), Some(467)),
    ("perf_event_open", Some(298), Some(241)),
    ("personality", Some(135), Some(92)),
    ("pidfd_getfd", Some(438), Some(438)),
    ("pivot_root", Some(155), Some(41)),
    ("prctl", Some(157), Some(167)),
    ("process_madvise", Some(440), Some(440)),
    ("process_vm_readv", Some(310), Some(270)),
    ("process_vm_writev", Some(311), Some(271)),
    ("ptrace", Some(101), Some(117)),
    ("query_module", Some(178), None),
    ("quotactl", Some(179), Some(60)),
    ("quotactl_fd", Some(443), Some(443)),
    ("reboot", Some(169), Some(142)),
    ("request_key", Some(249), Some(218)),
    ("seccomp", Some(317), Some(277)),
    ("set_mempolicy", Some(238), Some(237)),
    ("set_mempolicy_home_node", Some(450), Some(450)),
    ("setdomainname", Some(171), Some(162)),
    ("sethostname", Some(170), Some(161)),
    ("setns", Some(308), Some(268)),
    ("settimeofday", Some(164), Some(170)),
    ("setuid", Some(105), Some(146)),
    ("socket", Some(41), Some(198)),
    ("statmount", Some(457), Some(457)),
    ("swapoff", Some(168), Some(225)),
    ("swapon", Some(167), Some(224)),
    ("sysfs", Some(139), None),
    ("syslog", Some(103), Some(116)),
    ("umount2", Some(166), Some(39)),
    ("unshare", Some(272), Some(97)),
    ("uselib", Some(134), None),
    ("userfaultfd", Some(323), Some(282)),
    ("ustat", Some(136), None),
    ("vhangup", Some(153), Some(58)),
];

/// The number of `name` on the architecture this was built for.
pub fn native(name: &str) -> Option<u32> {
    let (_, x86_64, aarch64) = TABLE.iter().find(|(n, _, _)| *n == name)?;
    if cfg!(target_arch = "aarch64") {
        *aarch64
    } else {
        *x86_64
    }
}

/// The name of syscall `nr` on this architecture, if the table has it.
pub fn native_name(nr: u32) -> Option<&'static str> {
    TABLE.iter().map(|(n, _, _)| *n).find(|n| native(n) == Some(nr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_every_name_exists_somewhere() {
        for w in TABLE.windows(2) {
            assert!(w[0].0 < w[1].0, "{} before {}", w[0].0, w[1].0);
        }
        for (n, x, a) in TABLE {
            assert!(x.is_some() || a.is_some(), "{n} exists on no architecture");
        }
    }

    #[test]
    fn numbers_are_unique_per_architecture() {
        let mut x: Vec<u32> = TABLE.iter().filter_map(|t| t.1).collect();
        let mut a: Vec<u32> = TABLE.iter().filter_map(|t| t.2).collect();
        let (nx, na) = (x.len(), a.len());
        x.sort_unstable();
        x.dedup();
        a.sort_unstable();
        a.dedup();
        assert_eq!((x.len(), a.len()), (nx, na));
    }

    /// On the architecture the tests run on, the table agrees with the C library's numbers.
    #[test]
    fn table_matches_libc_on_this_architecture() {
        macro_rules! check {
            ($($name:ident),* $(,)?) => {
                $(assert_eq!(native(&stringify!($name)[4..]), Some(libc::$name as u32), stringify!($name));)*
            };
        }
        #[cfg(target_arch = "x86_64")]
        check!(SYS_iopl, SYS_ioperm, SYS_sysfs, SYS__sysctl, SYS_uselib, SYS_ustat, SYS_mknod);
        check!(
            SYS_acct,
            SYS_add_key,
            SYS_adjtimex,
            SYS_bpf,
            SYS_capset,
            SYS_chroot,
            SYS_clock_adjtime,
            SYS_clock_settime,
            SYS_clone,
            SYS_clone3,
            SYS_delete_module,
            SYS_fanotify_init,
            SYS_finit_module,
            SYS_fsconfig,
            SYS_fsmount,
            SYS_fsopen,
            SYS_fspick,
            SYS_get_mempolicy,
            SYS_getppid,
            SYS_init_module,
            SYS_kcmp,
            SYS_kexec_file_load,
            SYS_kexec_load,
            SYS_keyctl,
            SYS_lookup_dcookie,
            SYS_mbind,
            SYS_migrate_pages,
            SYS_mknodat,
            SYS_mount,
            SYS_mount_setattr,
            SYS_move_mount,
            SYS_move_pages,
            SYS_mseal,
            SYS_name_to_handle_at,
            SYS_nfsservctl,
            SYS_open_by_handle_at,
            SYS_open_tree,
            SYS_perf_event_open,
            SYS_personality,
            SYS_pidfd_getfd,
            SYS_pivot_root,
            SYS_prctl,
            SYS_process_madvise,
            SYS_process_vm_readv,
            SYS_process_vm_writev,
            SYS_ptrace,
            SYS_quotactl,
            SYS_quotactl_fd,
            SYS_reboot,
            SYS_request_key,
            SYS_seccomp,
            SYS_set_mempolicy,
            SYS_set_mempolicy_home_node,
            SYS_setdomainname,
            SYS_sethostname,
            SYS_setns,
            SYS_settimeofday,
            SYS_setuid,
            SYS_socket,
            SYS_swapoff,
            SYS_swapon,
            SYS_syslog,
            SYS_umount2,
            SYS_unshare,
            SYS_userfaultfd,
            SYS_vhangup
        );
    }
}
