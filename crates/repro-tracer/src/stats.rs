//! What the supervisor did in a run, for the run record and the benchmarks.

use std::collections::{BTreeMap, BTreeSet};

/// Counts of what the supervisor did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SupervisorStats {
    /// Mediated syscalls answered by the supervisor, by syscall name.
    pub mediated: BTreeMap<String, u64>,
    /// Notifications let through to the kernel unchanged (e.g. openat of an ordinary file).
    pub continued: u64,
    /// Processes and threads created by the guest (fork, vfork, clone).
    pub tasks_created: u64,
    /// Program images started (execve), including the first.
    pub execs: u64,
    /// rdtsc/rdtscp instructions emulated.
    pub rdtsc: u64,
    /// Program images that got the replacement vDSO.
    pub vdso_replaced: u64,
    /// Program images whose vDSO was disabled instead (AT_SYSINFO_EHDR = 0: correct, clock reads are
    /// mediated syscalls), and why.
    pub vdso_disabled: u64,
    pub vdso_disabled_why: BTreeSet<String>,
    /// Clock reads the replacement vDSO answered in-process (also counted in `mediated` as
    /// `vdso_clock_reads`: they are answered by the same policy, through the shared page).
    pub vdso_clock_reads: u64,
    /// Timed waits (poll, select, epoll, futex) that nothing could end, answered by jumping the
    /// clock to their deadline instead of waiting.
    pub waits_jumped: u64,
    /// Absolute futex deadlines in logical time moved onto the host's clock before a wait ran natively.
    pub deadlines_translated: u64,
    /// Timed waits held by the supervisor until the guest ended them or every task was blocked.
    pub waits_parked: u64,
    /// Parked waits that timed out while another task still ran, after being held for their duration in wall
    /// time (at least 2 s): a task that never blocks.
    pub waits_released: u64,
    /// Parked futex waits that timed out while another task still ran, after their duration in wall time (a
    /// GIL's 5 ms wait while the holder runs), without moving the logical clock.
    pub futex_waits_yielded: u64,
    /// Timed waits that ran natively, in real time, because a descriptor may be fed from outside the guest.
    pub outside_waits: u64,
    /// What went wrong in the supervisor without changing what the guest saw (an answer that could not be
    /// written back, the access stream that could not be written), at most 8.
    pub warnings: BTreeSet<String>,
}

impl SupervisorStats {
    /// Total mediated syscalls.
    pub fn total_mediated(&self) -> u64 {
        self.mediated.values().sum()
    }

    /// The stats as a JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "mediated": self.mediated,
            "continued": self.continued,
            "tasks_created": self.tasks_created,
            "execs": self.execs,
            "rdtsc": self.rdtsc,
            "vdso_replaced": self.vdso_replaced,
            "vdso_disabled": self.vdso_disabled,
            "vdso_disabled_why": self.vdso_disabled_why,
            "vdso_clock_reads": self.vdso_clock_reads,
            "waits_jumped": self.waits_jumped,
            "deadlines_translated": self.deadlines_translated,
            "waits_parked": self.waits_parked,
            "waits_released": self.waits_released,
            "futex_waits_yielded": self.futex_waits_yielded,
            "outside_waits": self.outside_waits,
            "warnings": self.warnings,
        })
    }
}
