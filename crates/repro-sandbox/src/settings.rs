//! The one constructor of a run's settings on this host: [`for_host`] is what `repro run`, `repro capture` and
//! a pack's replay build their [`RunSettings`] with. The fixed parts and defaults are repro-model's
//! ([`repro_model::settings`]); what depends on this host (the CPUs the guest is pinned to, its user
//! namespace's id maps) is filled here.

use repro_model::run::{disk_inodes_for, Epoch, Rlimit, RunSettings};
use repro_sys::ns::{self, rlimit};

pub use repro_model::settings::{DEFAULT_CLOCK_STEP_NS, DEFAULT_MEMORY, DOMAINNAME, HOSTNAME, UMASK};

use crate::SandboxError;

/// The settings of a run of `command` in `cwd` from `epoch`: the defaults and fixed parts, changed by `tune` (the
/// options of `run`, or what a pack recorded), then completed for this host: the guest is pinned to the first
/// `cpus` CPUs it may use from the one this process runs on ([`pick_cpus`]), its inode bound follows `disk_bytes`,
/// and its identity is this caller's
/// ([`crate::identity::current`]) unless `tune` set one.
pub fn for_host(command: Vec<String>, cwd: String, epoch: Epoch, tune: impl FnOnce(&mut RunSettings)) -> RunSettings {
    let mut s = RunSettings::defaults(command, cwd, epoch);
    tune(&mut s);
    s.cpu_affinity = affinity_for(&s);
    s.disk_inodes = disk_inodes_for(s.disk_bytes);
    if s.identity.is_none() {
        s.identity = Some(crate::identity::current());
    }
    s
}

/// The host CPUs a run's guest runs on. Supervised, one, whatever `--cpus` says: the scheduler serializes the
/// guest's threads and processes on it (two CPUs would run them in parallel, beyond its control), while the guest
/// sees `cpus` CPUs (nproc, sched_getaffinity and getcpu are answered), so a program sizes its thread pools as
/// it would on such a machine. Unsupervised, `cpus` of them.
pub fn affinity_for(s: &RunSettings) -> Vec<usize> {
    let n = if s.supervised { 1 } else { s.cpus as usize };
    pick_cpus(&ns::allowed_cpus(), ns::current_cpu(), n)
}

/// `n` of the `allowed` CPUs, starting at the one this process runs on (`current`) and going round. Which host CPU
/// the guest gets is not part of what it sees (getcpu and sched_getaffinity are answered), so this only decides
/// speed: always CPU 0 made a run wait for it when it was busy (up to 15 ms of start-up measured), and the runs of
/// `hunt -j 2` share one CPU of two.
pub fn pick_cpus(allowed: &[usize], current: Option<usize>, n: usize) -> Vec<usize> {
    let start = current.and_then(|c| allowed.iter().position(|&a| a == c)).unwrap_or(0);
    allowed.iter().cycle().skip(start).take(n.min(allowed.len())).copied().collect()
}

/// The kernel's number of a resource limit named as in the run record.
pub fn rlimit_resource(name: &str) -> Option<i32> {
    match name {
        "nofile" => Some(rlimit::NOFILE),
        "stack" => Some(rlimit::STACK),
        "core" => Some(rlimit::CORE),
        _ => None,
    }
}

/// The settings' resource limits as the init applies them: `(resource number, soft, hard)`.
pub fn rlimits_for_init(limits: &[Rlimit]) -> Result<Vec<(i32, u64, u64)>, SandboxError> {
    limits
        .iter()
        .map(|l| match rlimit_resource(&l.resource) {
            Some(r) => Ok((r, l.soft, l.hard)),
            None => Err(SandboxError::usage(
                format!("rlimit '{}'", l.resource),
                "expected one of the limits repro sets: nofile, stack, core",
            )),
        })
        .collect()
}

/// The settings' umask (`0022`) as a number.
pub fn umask_of(s: &RunSettings) -> Result<u32, SandboxError> {
    u32::from_str_radix(&s.umask, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| SandboxError::usage(format!("umask '{}'", s.umask), "expected an octal mode such as 0022"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpus_start_at_the_current_one() {
        assert_eq!(pick_cpus(&[0, 1], Some(1), 1), [1]);
        assert_eq!(pick_cpus(&[0, 1], Some(0), 1), [0]);
        assert_eq!(pick_cpus(&[0, 2, 5], Some(5), 2), [5, 0]);
        assert_eq!(pick_cpus(&[0, 2, 5], Some(3), 2), [0, 2], "a CPU we may not use: from the first");
        assert_eq!(pick_cpus(&[0, 2], None, 4), [0, 2], "never more than allowed");
    }

    use super::*;
    use repro_model::run::EpochSource;

    fn epoch() -> Epoch {
        Epoch {
            unix: repro_model::run::DEFAULT_EPOCH,
            rfc3339: "2025-01-01T00:00:00Z".into(),
            source: EpochSource::Default,
        }
    }

    #[test]
    fn tuned_settings_are_completed_for_the_host() {
        let s = for_host(vec!["true".into()], "/w".into(), epoch(), |s| {
            s.cpus = 1;
            s.disk_bytes = 64 << 20;
        });
        assert_eq!(s.cpu_affinity.len(), 1);
        let four = for_host(vec!["true".into()], "/w".into(), epoch(), |s| s.cpus = 4);
        assert_eq!((four.cpus, four.cpu_affinity.len()), (4, 1), "supervised: four CPUs seen, one used");
        let unsupervised = for_host(vec!["true".into()], "/w".into(), epoch(), |s| {
            s.cpus = 4;
            s.supervised = false;
        });
        assert_eq!(unsupervised.cpu_affinity.len(), ns::allowed_cpus().len().min(4));
        assert_eq!(s.disk_inodes, disk_inodes_for(64 << 20));
        assert!(s.identity.is_some());
        assert_eq!(umask_of(&s).unwrap(), UMASK);
        let limits = rlimits_for_init(&s.rlimits).unwrap();
        assert_eq!(limits[0], (rlimit::NOFILE, 1024, 4096));
        assert_eq!(limits[1], (rlimit::STACK, 8 << 20, rlimit::INFINITY));
    }

    #[test]
    fn unknown_limits_and_bad_umasks_are_refused_by_name() {
        let bad = [Rlimit { resource: "cpu".into(), soft: 1, hard: 1 }];
        assert!(rlimits_for_init(&bad).unwrap_err().to_string().contains("rlimit 'cpu'"));
        let mut s = RunSettings::defaults(vec![], "/".into(), epoch());
        s.umask = "9".into();
        assert!(umask_of(&s).unwrap_err().to_string().contains("umask '9'"));
    }
}
