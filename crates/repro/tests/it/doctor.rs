//! `repro doctor` on this machine.

use crate::common::*;

#[test]
fn doctor_reports_every_item_and_passes_here() {
    let o = repro().arg("doctor").output().unwrap();
    assert_code(&o, 0);
    let text = stdout(&o);
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"Linux \S+ (x86_64|aarch64)", "Linux [RELEASE] $1");
    settings.add_filter(r"Docker engine \S+", "Docker engine [VERSION]");
    // The number of seccomp rules depends on the architecture (aarch64 lacks some legacy syscalls).
    settings.add_filter(r"seccomp filter of \d+ rules", "seccomp filter of [N] rules");
    settings.add_filter(r"cgroup v1 memory controller at \S+|cgroup v2 at \S+", "[CGROUP]");
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
        "docker",
    ] {
        assert!(names.contains(&n), "{n} is checked");
    }
}
