//! The deterministic scheduler's transport: the guest's threads run SCHED_FIFO at one priority on the one guest
//! CPU, so a guest thread runs until it blocks or traps; the supervisor's threads are SCHED_OTHER on the same CPU
//! and so run only when every guest thread is blocked. The notify thread then sees every pending notification,
//! and lets one go, chosen by [`repro_detcore::Scheduler`] (see transport/notify.rs); the tracer runs SCHED_FIFO
//! one above the guest, so a ptrace stop (clone, exec) is handled before any guest thread runs again.
//!
//! A thread that never enters the kernel (a spin loop) would keep the others from running: the [`watchdog`],
//! on another CPU when there is one, notices a guest thread that used more than the limit of CPU time while no
//! notification arrived while another guest thread was ready to run, and has the tracer stop it (SIGSTOP,
//! suppressed at its signal-delivery stop) to read where it spins, and demotes it to SCHED_OTHER so the others
//! run. Where that happens is not deterministic: the run then says so (exit 121).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use repro_detcore::Scheduler;
use repro_model::SchedSettings;
use repro_sys::sched as ksched;

use crate::state::{lock, SharedRef};

/// What the scheduler needs from the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedConfig {
    pub settings: SchedSettings,
    /// The host CPUs the guest is pinned to: the scheduler serializes only on exactly one.
    pub cpus: Vec<usize>,
    /// The spin-loop watchdog's limit of CPU time without a system call.
    pub spin_limit: Duration,
    /// A forced schedule instead of the policy's choices.
    pub script: Option<repro_model::SchedScript>,
    /// Log every decision.
    pub log: bool,
}

/// The scheduler's state, in [`crate::state::Shared`].
pub(crate) struct SchedState {
    pub scheduler: Scheduler,
    /// Where the scheduler decides (the filter notifies reads, writes and signals only with `io`).
    pub points: repro_model::SchedPoints,
    /// Task ids by host thread id, in the order the guest created its tasks (the first is 0).
    task_ids: HashMap<i32, u64>,
    next_id: u64,
    /// Notifications and ptrace events seen so far (the watchdog's sign of progress).
    pub progress: u64,
    /// Threads the watchdog asked the tracer to stop (with the CPU time they spun and whether a thread of the same
    /// process was kept waiting), and those already reported.
    pub probes: HashMap<i32, (u64, bool)>,
    pub reported: HashSet<i32>,
    /// Threads (tasks sharing their process's memory) the guest created: without the scheduler, their
    /// interleaving is the kernel's.
    pub threads_created: u64,
    /// Whether the guest runs SCHED_FIFO on one CPU (else the choices are not made; see `unavailable`).
    pub active: bool,
    /// Why the guest's threads could not be serialized.
    pub unavailable: Option<String>,
    /// The decisions, when logging.
    pub log: Option<repro_model::SchedLog>,
    /// New tasks held at their start ([`hold_at_start`]) whose `sched_yield` was not let go yet (for the log).
    pub starting: HashSet<i32>,
    /// When logging: where each new task was created (its parent's code), for its `start` entries.
    pub created_at: HashMap<i32, String>,
}

impl SchedState {
    pub(crate) fn new(cfg: &SchedConfig) -> SchedState {
        let settings: SchedSettings = cfg.settings;
        SchedState {
            scheduler: match &cfg.script {
                Some(script) => Scheduler::scripted(settings.policy, script),
                None => Scheduler::new(settings.policy, settings.seed),
            },
            points: settings.points,
            log: cfg.log.then(repro_model::SchedLog::default),
            task_ids: HashMap::new(),
            next_id: 0,
            progress: 0,
            probes: HashMap::new(),
            threads_created: 0,
            reported: HashSet::new(),
            active: false,
            unavailable: None,
            starting: HashSet::new(),
            created_at: HashMap::new(),
        }
    }

    /// The task id of thread `tid`, given on first sight (the tracer sees each new task at its clone event).
    pub(crate) fn task_id(&mut self, tid: i32) -> u64 {
        if let Some(&id) = self.task_ids.get(&tid) {
            return id;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.task_ids.insert(tid, id);
        id
    }
}

/// Puts the calling thread on the guest's CPU (the threads it starts inherit it); `Err` with why the scheduler
/// cannot serialize the guest.
pub(crate) fn pin_supervisor(cfg: &SchedConfig) -> Result<(), String> {
    match cfg.cpus.as_slice() {
        [cpu] => ksched::pin_this_thread(&[*cpu]).map_err(|e| format!("pinning the supervisor to CPU {cpu}: {e}")),
        [] => Err("the guest is not pinned to a CPU".into()),
        more => Err(format!("the guest runs on {} CPUs (--cpus {}): threads run in parallel", more.len(), more.len())),
    }
}

/// Called first by every thread the supervisor starts: back to SCHED_OTHER (the tracer it inherits from runs
/// SCHED_FIFO), so that it runs only when no guest thread can. Lowering is always allowed.
pub fn supervisor_thread() {
    if ksched::policy_of(0).is_ok_and(|p| p != libc::SCHED_OTHER) {
        let _ = ksched::set_other(0);
    }
}

/// Whether the notified call is only a scheduling point (futex other than a timed wait, sched_yield): it runs
/// natively once the scheduler lets it go.
pub(crate) fn only_a_scheduling_point(nr: i64, args: &[u64; 6]) -> bool {
    match nr {
        libc::SYS_sched_yield => true,
        libc::SYS_futex => {
            let cmd = args[1] & 0x7f;
            !((cmd == libc::FUTEX_WAIT as u64 || cmd == libc::FUTEX_WAIT_BITSET as u64) && args[3] != 0)
        }
        _ => false,
    }
}

/// What a guest thread is doing, as the scheduler needs to know before it lets another go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activity {
    /// Asleep until the supervisor answers its notification: not received yet (`S`), or received and held
    /// (`D`: the filter's `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` makes that wait killable only).
    AwaitsAnswer,
    /// On the CPU or about to be without any other guest thread's doing: runnable (`R`), in disk sleep (`D`: a
    /// page fault or a read that waits for the disk), which ends at a moment of the disk's timing, or at a ptrace
    /// stop (`t`), which the tracer ends when it has handled it (it may not have taken it yet: the tracer's wait
    /// returned but it waits for the lock of the supervisor's state, so `Shared::tracer_busy` does not say so yet).
    Runs,
    /// An exited task whose exit the tracer has not collected yet (`Z`): it waits for the lock of the supervisor's
    /// state, or has not been woken, and goes on at a moment of the host's timing, taking the task out of the
    /// live ones. (A thread-group leader whose other threads still run is `Other`: its exit is reported after
    /// theirs.)
    Exiting,
    /// Anything else: asleep in a wait (another task or the world ends it), a vfork parent (`D` until its child
    /// execs or exits: the child's doing), a leader waiting for its threads, gone.
    Other,
}

/// What task `tid` is doing (see [`Activity`]), from /proc/TID/task/TID/{stat,wchan,syscall}.
pub(crate) fn activity(tid: i32) -> Activity {
    match ksched::thread_cpu_ticks(tid) {
        Some((_, state)) => activity_in(tid, state),
        None => Activity::Other,
    }
}

/// [`activity`] of task `tid`, whose state letter was just read as `state`.
fn activity_in(tid: i32, state: char) -> Activity {
    match state {
        'R' | 't' => Activity::Runs,
        'S' | 'D' => {
            let dir = format!("/proc/{tid}/task/{tid}");
            if std::fs::read_to_string(format!("{dir}/wchan")).is_ok_and(|w| w.starts_with("seccomp")) {
                return Activity::AwaitsAnswer;
            }
            if state == 'S' {
                return Activity::Other;
            }
            let nr = std::fs::read_to_string(format!("{dir}/syscall"))
                .ok()
                .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<i64>().ok()));
            match nr {
                Some(libc::SYS_vfork | libc::SYS_clone | libc::SYS_clone3) => Activity::Other,
                _ => Activity::Runs,
            }
        }
        'Z' | 'X' | 'x' if !crate::handlers::waits::zombie_leader_of_live_threads(tid) => Activity::Exiting,
        _ => Activity::Other,
    }
}

/// Whether task `tid` is [`Activity::Runs`] or [`Activity::Exiting`]: what a decision must wait for. Cheaper than
/// [`activity`] for the usual sleeping thread (its state alone says no).
pub(crate) fn goes_on_by_itself(tid: i32) -> bool {
    match ksched::thread_cpu_ticks(tid) {
        Some((_, 'S')) | None => false,
        Some((_, state)) => matches!(activity_in(tid, state), Activity::Runs | Activity::Exiting),
    }
}

/// Whether the notified call would take a guest thread out of the scheduler's hands (another policy or priority:
/// SCHED_OTHER threads run when the kernel likes). Answered 0 without effect: a refusal would fail what glibc does
/// with it (`pthread_create` with an explicit scheduling attribute sets it in the new thread and fails with it).
pub(crate) fn changes_policy(nr: i64) -> bool {
    matches!(nr, libc::SYS_sched_setscheduler | libc::SYS_sched_setparam | libc::SYS_sched_setattr)
}

/// What the run says when the guest asked for [`changes_policy`].
pub(crate) const POLICY_REFUSED: &str = "the guest asked to change a thread's scheduling policy or priority \
    (sched_setscheduler, sched_setparam or sched_setattr): answered as done but not done, so that the scheduler \
    keeps ordering its threads";

/// The syscalls notified only for the scheduler: futex and sched_yield, the policy changes it refuses, and with
/// `--sched-points io` the reads, writes and signals that are decision points
/// ([`repro_detcore::sched::SHARED_OBJECT_SYSCALLS`]). Without it they are not in the filter at all, so that a
/// single-threaded program's reads and writes cost nothing.
pub(crate) fn scheduling_syscalls(points: repro_model::SchedPoints) -> Vec<u32> {
    let mut v = vec![
        libc::SYS_futex as u32,
        libc::SYS_sched_yield as u32,
        libc::SYS_sched_setscheduler as u32,
        libc::SYS_sched_setparam as u32,
        libc::SYS_sched_setattr as u32,
    ];
    if points == repro_model::SchedPoints::Io {
        v.extend(repro_detcore::sched::SHARED_OBJECT_SYSCALLS.map(|n| n as u32));
    }
    v
}

/// The `syscall` instruction (x86-64), little-endian.
const SYSCALL_INSN: u64 = 0x050f;

/// Holds a new task (at its first ptrace stop, before its first instruction) for the scheduler: it is made to
/// enter `sched_yield` first, a scheduling point, so the policy chooses when it starts among the ready tasks.
/// Without this a thread that never blocks ran from start to end the moment it got the CPU, in creation order on
/// every seed. The task stands just after its clone/fork's `syscall` instruction with 0 in `rax`; it is moved back
/// onto that instruction with `sched_yield`'s number, which returns 0 there: the task then goes on exactly as it
/// would have (the instruction clobbers only `rcx` and `r11`, with the values they already hold). Returns whether
/// it was held; a task that stands elsewhere (not after a `syscall`, or a non-zero `rax`) is left as it is.
#[cfg(target_arch = "x86_64")]
pub(crate) fn hold_at_start(tracee: &repro_sys::ptrace::Tracee<repro_sys::ptrace::Stopped>) -> bool {
    let Ok(mut regs) = tracee.regs() else { return false };
    if regs.rax != 0 || regs.rip < 2 {
        return false;
    }
    // The word starting at the instruction (peek reads a whole word; an unreadable one is no syscall).
    match tracee.peek(regs.rip - 2) {
        Ok(word) if word & 0xffff == SYSCALL_INSN => {}
        _ => return false,
    }
    regs.rip -= 2;
    regs.rax = libc::SYS_sched_yield as u64;
    tracee.set_regs(regs).is_ok()
}

/// Elsewhere new tasks start without a decision.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn hold_at_start(_tracee: &repro_sys::ptrace::Tracee<repro_sys::ptrace::Stopped>) -> bool {
    false
}

/// The spin-loop watchdog: runs until the guest is finished (`Shared::finished`).
///
/// Only a thread that keeps another from running is preempted: one that computes while the others wait for it
/// (a worker holding CPython's GIL, the others in their timed GIL waits) is left alone, however long it runs.
pub(crate) fn watchdog(shared: SharedRef, limit: Duration, other_cpus: Vec<usize>) {
    if !other_cpus.is_empty() {
        // Off the guest's CPU. On it (a host of one CPU) it runs too: it has the tracer's real-time priority,
        // above the guest's (a guest thread it preempts for a tick resumes first, so the order is unchanged), or
        // without one the share the kernel keeps for SCHED_OTHER threads, later.
        let _ = ksched::pin_this_thread(&other_cpus);
    }
    let tick = Duration::from_millis(50);
    let hz = ksched::clock_ticks_per_second().max(1);
    let ticks = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).saturating_mul(hz).div_ceil(1000).max(1);
    // Once the run is refused (by this watchdog or anything else), where a spinner is preempted no longer
    // matters: the shorter limit only keeps a spinning guest from wasting time.
    let refused_limit = ticks(limit.min(Duration::from_millis(repro_model::run::REFUSED_SPIN_LIMIT_MS)));
    let full_limit = ticks(limit);
    let mut last_progress = u64::MAX;
    let mut base: HashMap<i32, u64> = HashMap::new();
    loop {
        std::thread::sleep(tick);
        let (progress, live, limit_ticks) = {
            let sh = lock(&shared);
            if sh.finished {
                return;
            }
            let Some(s) = sh.sched.as_ref() else { return };
            let limit_ticks = if sh.not_enforced.is_empty() { full_limit } else { refused_limit };
            (s.progress, sh.live.iter().copied().collect::<Vec<_>>(), limit_ticks)
        };
        if progress != last_progress {
            last_progress = progress;
            base.clear();
            continue;
        }
        if live.len() < 2 {
            continue;
        }
        let figures: Vec<(i32, u64, char)> =
            live.iter().filter_map(|&t| ksched::thread_cpu_ticks(t).map(|(c, s)| (t, c, s))).collect();
        if base.is_empty() {
            base = figures.iter().map(|&(t, c, _)| (t, c)).collect();
            continue;
        }
        let ready: Vec<i32> = figures.iter().filter(|&&(t, _, s)| ready(t, s)).map(|f| f.0).collect();
        for &(t, c, state) in &figures {
            let Some(&b) = base.get(&t) else { continue };
            let kept: Vec<i32> = ready.iter().copied().filter(|&o| o != t).collect();
            if state != 'R' || c.saturating_sub(b) < limit_ticks || kept.is_empty() {
                continue;
            }
            // A thread of its own process kept waiting: they share memory, a data race's outcome may follow
            // where it was preempted. Other processes: only the order of their effects.
            let group = ksched::thread_group(t);
            let same_process = group.is_some() && kept.iter().any(|&o| ksched::thread_group(o) == group);
            let ms = (c - b) * 1000 / hz;
            let mut sh = lock(&shared);
            let Some(s) = sh.sched.as_mut() else { return };
            if s.probes.contains_key(&t) {
                continue;
            }
            s.probes.insert(t, (ms, same_process));
            drop(sh);
            // The tracer takes it from its signal-delivery stop (see `on_probe_stop`); ESRCH: it is gone.
            let _ = repro_sys::ptrace::kill_task(t, libc::SIGSTOP);
        }
    }
}

/// Whether thread `tid`, in state `state`, could run if it had the CPU: runnable (`R`: queued behind the spinner),
/// or stopped at a scheduling point that would let it go at once (a sched_yield, a futex call other than a wait,
/// a futex wait whose word has already changed, another mediated call but a sleep). A thread waiting for a
/// futex word to change, for a sleep to end, for a child or on a descriptor is not.
fn ready(tid: i32, state: char) -> bool {
    if state == 'R' {
        return true;
    }
    // A notification the notify thread received and holds sleeps killable only (`D`, see [`Activity`]).
    if state != 'S' && !(state == 'D' && activity_in(tid, state) == Activity::AwaitsAnswer) {
        return false;
    }
    let Ok(sc) = std::fs::read_to_string(format!("/proc/{tid}/syscall")) else { return false };
    let mut it = sc.split_whitespace();
    let Some(Ok(nr)) = it.next().map(|n| n.parse::<i64>()) else { return false };
    let a: Vec<u64> = it.take(6).filter_map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok()).collect();
    if a.len() < 6 {
        return false;
    }
    match nr {
        libc::SYS_sched_yield => true,
        libc::SYS_futex => match (a[1] & 0x7f) as i32 {
            libc::FUTEX_WAIT | libc::FUTEX_WAIT_BITSET => {
                let mut word = [0u8; 4];
                repro_sys::memory::read_exact(tid, a[0], &mut word).is_ok() && u32::from_ne_bytes(word) != a[2] as u32
            }
            libc::FUTEX_WAKE | libc::FUTEX_WAKE_OP | libc::FUTEX_WAKE_BITSET | libc::FUTEX_REQUEUE => true,
            libc::FUTEX_CMP_REQUEUE => true,
            _ => false,
        },
        libc::SYS_nanosleep | libc::SYS_clock_nanosleep => false,
        nr => crate::decode::MEDIATED.contains(&nr),
    }
}

/// At a SIGSTOP signal-delivery stop of a thread the watchdog probed: reads where it spins, records it (once per
/// thread) and demotes it to SCHED_OTHER, where it runs only when no guest thread of the scheduler can, and shares
/// the CPU with the supervisor's threads (as a spinning SCHED_FIFO thread, even put back behind the others, it
/// would starve them: a waiter that looks at the clock and waits again would take the CPU's scarce leftovers for
/// each round). `true`: the stop was the probe's (the signal is to be suppressed).
pub(crate) fn on_probe_stop(
    tracee: &repro_sys::ptrace::Tracee<repro_sys::ptrace::Stopped>,
    shared: &SharedRef,
) -> bool {
    let tid = tracee.tid();
    let (ms, same_process) = {
        let mut sh = lock(shared);
        let Some(s) = sh.sched.as_mut() else { return false };
        let Some((ms, same_process)) = s.probes.remove(&tid) else { return false };
        if !s.reported.insert(tid) {
            let _ = ksched::set_other(tid);
            return true;
        }
        (ms, same_process)
    };
    // Lowering the policy is always allowed; ESRCH: the task is gone.
    let _ = ksched::set_other(tid);
    let at = match tracee.regs() {
        Ok(r) => symbolize(tid, r.rip),
        Err(_) => "an unknown address".into(),
    };
    let mut sh = lock(shared);
    let id = sh.sched.as_mut().map_or(0, |s| s.task_id(tid));
    if same_process {
        sh.not_enforced.insert(format!("thread {id} ran {ms} ms without a system call (spin loop at {at})"));
        sh.warn(
            "a thread that computes longer than the spin-loop limit while another waits is refused too: \
             --spin-limit raises the limit"
                .into(),
        );
    } else {
        sh.warn(format!(
            "task {id} ran {ms} ms without a system call while another process waited (at {at}): preempted, so \
             the order of the processes' effects followed the host's speed"
        ));
    }
    true
}

/// `module!symbol+0xoff` for an address of thread `tid`, or `module+0xoff`, or the bare address.
pub(crate) fn symbolize(tid: i32, addr: u64) -> String {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{tid}/maps")) else { return format!("{addr:#x}") };
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), _, Some(off)) = (f.next(), f.next(), f.next()) else { continue };
        let path = f.nth(2).unwrap_or("");
        let Some((lo, hi)) = range.split_once('-') else { continue };
        let (Ok(lo), Ok(hi), Ok(off)) =
            (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16), u64::from_str_radix(off, 16))
        else {
            continue;
        };
        if addr < lo || addr >= hi {
            continue;
        }
        if !path.starts_with('/') {
            return format!("{addr:#x} ({})", if path.is_empty() { "anonymous memory" } else { path });
        }
        let file_off = addr - lo + off;
        let name = path.rsplit('/').next().unwrap_or(path);
        let root_path = format!("/proc/{tid}/root{path}");
        return match crate::elfsym::symbol_at_file_offset(std::path::Path::new(&root_path), file_off) {
            Some((sym, delta)) => format!("{sym}+{delta:#x} in {name}"),
            None => format!("{name}+{file_off:#x}"),
        };
    }
    format!("{addr:#x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// Waits (at most 10 s) until task `tid`'s state letter is `state`.
    fn until_state(tid: i32, state: char) {
        let start = Instant::now();
        while ksched::thread_cpu_ticks(tid).map(|(_, s)| s) != Some(state) {
            assert!(start.elapsed() < Duration::from_secs(10), "task {tid} never reached state {state}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn the_calling_thread_runs() {
        let me = nix::unistd::gettid().as_raw();
        assert_eq!(activity(me), Activity::Runs);
    }

    #[test]
    fn a_sleeping_child_is_other_and_an_uncollected_exit_is_exiting() {
        let mut sleeper = Command::new("sleep").arg("30").stdout(Stdio::null()).spawn().unwrap();
        let tid = sleeper.id() as i32;
        until_state(tid, 'S');
        assert_eq!(activity(tid), Activity::Other, "asleep in a wait another task or the world ends");
        assert!(!goes_on_by_itself(tid));
        sleeper.kill().unwrap();
        until_state(tid, 'Z');
        assert_eq!(activity(tid), Activity::Exiting, "exited, not collected yet");
        assert!(goes_on_by_itself(tid));
        sleeper.wait().unwrap();
        assert_eq!(activity(tid), Activity::Other, "gone");
    }

    #[test]
    fn a_thread_blocked_reading_a_pipe_is_other() {
        let (r, w) = std::io::pipe().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            let mut r = r;
            let mut b = [0u8; 1];
            std::io::Read::read(&mut r, &mut b).unwrap()
        });
        let tid = rx.recv().unwrap();
        until_state(tid, 'S');
        assert_eq!(activity(tid), Activity::Other);
        std::io::Write::write_all(&mut &w, b"x").unwrap();
        assert_eq!(reader.join().unwrap(), 1);
    }
}
