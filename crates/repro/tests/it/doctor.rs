//! `repro doctor` on this machine.

use crate::common::*;

#[test]
fn doctor_reports_every_item_and_passes_here() {
    let o = repro().arg("doctor").output().unwrap();
    assert_code(&o, 0);
    let text = stdout(&o);
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"Linux \S+ (x86_64|aarch64)", "Linux [RELEASE] $1");
    // The number of seccomp rules depends on the architecture (aarch64 lacks some legacy syscalls).
    settings.add_filter(r"seccomp filter of \d+ rules", "seccomp filter of [N] rules");
    settings.add_filter(r"cgroup v1 memory controller at \S+|cgroup v2 at \S+", "[CGROUP]");
    // Facts of the host rather than of repro: the Yama LSM and its scope, whether repro itself runs under a
    // seccomp profile (a container), hardware counters and the TSC controls (a hypervisor may hide them), and
    // whether the optional Docker engine is there, whether SCHED_FIFO is allowed (root, or RLIMIT_RTPRIO). Their lines keep their name and lose status and detail.
    settings.add_filter(r"a child can be traced \([^)\n]*\)", "a child can be traced ([PTRACE SCOPE])");
    settings.add_filter(r"; repro itself already runs under a seccomp filter \(a container profile\)", "");
    settings.add_filter(
        r"(?m)^\S+ +(perf counters|rdtsc trap|scheduler|docker) +\S.*$",
        "[HOST]   $1  [DEPENDS ON THE HOST]",
    );
    settings.add_filter(r"(?m)^ +fix: run on x86_64 Linux outside of a hypervisor.*\n", "");
    settings.bind(|| insta::assert_snapshot!("doctor", text));
    let o = repro().args(["doctor", "--json"]).output().unwrap();
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["usable"], true);
    let names: Vec<&str> = v["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    for n in [
        "kernel",
        "namespace:pid",
        "namespace:net",
        "overlayfs",
        "cgroups",
        "ptrace",
        "seccomp",
        "confinement",
        "rdtsc trap",
        "perf counters",
        "scheduler",
        "docker",
    ] {
        assert!(names.contains(&n), "{n} is checked");
    }
}
