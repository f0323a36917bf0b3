//! The deterministic scheduler's policy: which of the guest threads ready at a scheduling point runs next.
//!
//! The supervisor holds every guest thread that stopped at a scheduling point (a mediated syscall, futex,
//! sched_yield) while no guest thread runs, and asks [`Scheduler::pick`] which one to let go. Threads are named by
//! task ids in the order the guest created them (0 for the first), never by host thread ids, so the same seed
//! gives the same choices on every run and machine.

use std::collections::BTreeMap;

use repro_model::{SchedPolicy, SchedScript};

use crate::rng::SplitMix64;

/// A seeded chooser among ready threads.
#[derive(Debug, Clone)]
pub struct Scheduler {
    policy: SchedPolicy,
    rng: SplitMix64,
    /// Decisions made so far.
    steps: u64,
    /// Round-robin: the task that ran last.
    last: Option<u64>,
    /// PCT: each task's priority (higher runs first), given on first sight.
    priorities: std::collections::BTreeMap<u64, u64>,
    /// PCT: the decisions (among two or more ready, counted from 1) after which the task just chosen drops to a
    /// priority below every initial one, with that priority (d-1 change points, priorities d-1 down to 1).
    change_points: Vec<(u64, u64)>,
    /// Decisions among two or more ready tasks so far (a [`SchedScript`]'s steps).
    choices: u64,
    /// A forced schedule: the task to run at each listed decision; the non-preemptive choice at the others.
    script: Option<BTreeMap<u64, u64>>,
    /// The task the last decision among two or more would have let go without preemption.
    last_default: u64,
}

impl Scheduler {
    pub fn new(policy: SchedPolicy, seed: u64) -> Scheduler {
        let mut rng = SplitMix64::new(seed ^ 0x5c4e_d01e_5eed_0000);
        // PCT (Burckhardt et al. 2010): d-1 change points, each uniform among the first k decisions; the i-th
        // lowers the task chosen there to priority d-i, below every initial priority (d or more).
        let change_points = match policy {
            SchedPolicy::Pct(p) => {
                (1..u64::from(p.depth)).map(|i| (1 + rng.below(p.steps), u64::from(p.depth) - i)).collect()
            }
            _ => Vec::new(),
        };
        Scheduler {
            policy,
            rng,
            steps: 0,
            last: None,
            priorities: Default::default(),
            change_points,
            choices: 0,
            script: None,
            last_default: 0,
        }
    }

    /// A scheduler that follows `script` (see [`SchedScript`]); `policy` is only reported.
    pub fn scripted(policy: SchedPolicy, script: &SchedScript) -> Scheduler {
        let mut s = Scheduler::new(policy, 0);
        s.script = Some(script.switches.iter().map(|sw| (sw.step, sw.task)).collect());
        s
    }

    /// Decisions among two or more ready tasks made so far; the last one was step `choices() - 1`.
    pub fn choices(&self) -> u64 {
        self.choices
    }

    /// The task the last decision among two or more would have let go without preemption.
    pub fn last_default(&self) -> u64 {
        self.last_default
    }

    pub fn policy(&self) -> SchedPolicy {
        self.policy
    }

    /// Decisions made so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The index in `ready` (task ids, in any order but without duplicates) of the task to run next; 0 for an
    /// empty or one-element list. The choice depends only on the seed, the policy and the sequence of `ready`
    /// sets asked about (as sets: the same ids in another order give the same task).
    pub fn pick(&mut self, ready: &[u64]) -> usize {
        if ready.len() <= 1 {
            if let Some(&t) = ready.first() {
                self.ran(t);
            }
            return 0;
        }
        let mut sorted: Vec<u64> = ready.to_vec();
        sorted.sort_unstable();
        let step = self.choices;
        self.choices += 1;
        self.last_default = non_preemptive(self.last, &sorted);
        if let Some(script) = &self.script {
            let chosen = match script.get(&step) {
                Some(t) if sorted.contains(t) => *t,
                _ => self.last_default,
            };
            self.ran(chosen);
            return ready.iter().position(|&t| t == chosen).unwrap_or(0);
        }
        let chosen = match self.policy {
            SchedPolicy::Random => sorted[self.rng.below(sorted.len() as u64) as usize],
            SchedPolicy::RoundRobin => match self.last {
                Some(l) => sorted.iter().copied().find(|&t| t > l).unwrap_or(sorted[0]),
                None => sorted[0],
            },
            SchedPolicy::Pct(params) => {
                for &t in &sorted {
                    if !self.priorities.contains_key(&t) {
                        let p = u64::from(params.depth) + self.rng.below(1 << 32);
                        self.priorities.insert(t, p);
                    }
                }
                // Highest priority; ties (vanishingly rare) to the lower id.
                let best = sorted.iter().copied().max_by_key(|t| (self.priorities[t], std::cmp::Reverse(*t)));
                best.unwrap_or(sorted[0])
            }
        };
        self.ran(chosen);
        self.change_priority(chosen);
        ready.iter().position(|&t| t == chosen).unwrap_or(0)
    }

    fn ran(&mut self, task: u64) {
        self.steps += 1;
        self.last = Some(task);
    }

    /// PCT: after decision `self.choices` (among two or more), a change point lowers the task chosen there.
    fn change_priority(&mut self, task: u64) {
        for &(at, to) in &self.change_points {
            if at == self.choices {
                self.priorities.insert(task, to);
            }
        }
    }

    /// PCT's change points: (decision, priority the chosen task drops to).
    pub fn change_points(&self) -> &[(u64, u64)] {
        &self.change_points
    }
}

/// Why a guest thread is held for a decision. Besides the calls that block (futex waits, mediated calls), the
/// scheduler decides at the points where another task can see what a thread did or is about to do: without them a
/// thread that never blocks runs from its start to its end at one go, and every seed gives the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionPoint {
    /// A new thread or process, before its first instruction (the parent goes on to its own next point): which of
    /// the two runs first is the policy's choice.
    Start,
    /// A read or write of a descriptor (a pipe, socket, terminal or file another task may hold).
    SharedIo,
    /// A futex call (a wake, or a wait that may not block) or sched_yield.
    Sync,
    /// A signal sent to a task (kill, tgkill, tkill).
    Signal,
}

/// The system calls notified only so that the scheduler decides before them (when it is on), besides futex and
/// sched_yield: reads and writes of descriptors and signals sent. They run natively once let go.
pub const SHARED_OBJECT_SYSCALLS: [i64; 9] = [
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_kill,
    libc::SYS_tgkill,
    libc::SYS_tkill,
];

/// The decision point system call `nr` is when notified only for the scheduler, `None` for any other call.
pub fn decision_point(nr: i64) -> Option<DecisionPoint> {
    match nr {
        libc::SYS_futex | libc::SYS_sched_yield => Some(DecisionPoint::Sync),
        libc::SYS_kill | libc::SYS_tgkill | libc::SYS_tkill => Some(DecisionPoint::Signal),
        _ if SHARED_OBJECT_SYSCALLS.contains(&nr) => Some(DecisionPoint::SharedIo),
        _ => None,
    }
}

/// The choice without preemption: the task that ran last if it is ready (it goes on), else the ready task created
/// first. `sorted` is the ready tasks in ascending order, not empty.
pub fn non_preemptive(last: Option<u64>, sorted: &[u64]) -> u64 {
    match last {
        Some(l) if sorted.contains(&l) => l,
        _ => sorted[0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: SchedPolicy, seed: u64, rounds: usize) -> Vec<u64> {
        let mut s = Scheduler::new(policy, seed);
        let ready = [0u64, 1, 2, 3];
        (0..rounds).map(|_| ready[s.pick(&ready)]).collect()
    }

    #[test]
    fn a_script_forces_its_steps_and_goes_on_without_preemption_elsewhere() {
        use repro_model::sched::SchedSwitch;
        let script = SchedScript { switches: vec![SchedSwitch { step: 1, task: 2 }, SchedSwitch { step: 3, task: 9 }] };
        let mut s = Scheduler::scripted(SchedPolicy::Random, &script);
        let ready = [0u64, 1, 2];
        assert_eq!(ready[s.pick(&ready)], 0, "step 0: nothing ran yet, the first task");
        assert_eq!((s.choices(), s.last_default()), (1, 0));
        assert_eq!(ready[s.pick(&ready)], 2, "step 1 is forced");
        assert_eq!(s.last_default(), 0, "without the switch task 0 would have gone on");
        assert_eq!(ready[s.pick(&ready)], 2, "step 2: task 2 goes on");
        assert_eq!(ready[s.pick(&ready)], 2, "step 3 names a task that is not ready: no switch");
        assert_eq!(s.pick(&[1]), 0, "a single ready task is no decision");
        assert_eq!(s.choices(), 4);
        assert_eq!([0u64, 1][s.pick(&[0, 1])], 1, "task 1 ran last");
        // A script that forces every choice of a random run reproduces it.
        let mut free = Scheduler::new(SchedPolicy::Random, 5);
        let mut switches = Vec::new();
        let mut chosen = Vec::new();
        for step in 0..100 {
            let c = ready[free.pick(&ready)];
            if c != free.last_default() {
                switches.push(SchedSwitch { step, task: c });
            }
            chosen.push(c);
        }
        let mut forced = Scheduler::scripted(SchedPolicy::Random, &SchedScript { switches });
        let again: Vec<u64> = (0..100).map(|_| ready[forced.pick(&ready)]).collect();
        assert_eq!(again, chosen);
    }

    #[test]
    fn reads_writes_and_signals_are_decision_points_and_other_calls_are_not() {
        assert_eq!(decision_point(libc::SYS_write), Some(DecisionPoint::SharedIo));
        assert_eq!(decision_point(libc::SYS_readv), Some(DecisionPoint::SharedIo));
        assert_eq!(decision_point(libc::SYS_tgkill), Some(DecisionPoint::Signal));
        assert_eq!(decision_point(libc::SYS_futex), Some(DecisionPoint::Sync));
        assert_eq!(decision_point(libc::SYS_openat), None, "mediated: answered by its handler");
        assert_eq!(decision_point(libc::SYS_mmap), None);
        for nr in SHARED_OBJECT_SYSCALLS {
            assert!(decision_point(nr).is_some(), "{nr}");
        }
    }

    #[test]
    fn new_tasks_held_at_their_start_finish_in_an_order_the_seed_chooses() {
        // Four threads, each held at its start while the creator waits in its join: every seed picks an order,
        // and together the seeds give more than one (as the compute-only race needs).
        let order = |seed| {
            let mut s = Scheduler::new(SchedPolicy::Random, seed);
            let mut ready = vec![1u64, 2, 3, 4];
            let mut done = Vec::new();
            while !ready.is_empty() {
                let i = s.pick(&ready);
                done.push(ready.remove(i));
            }
            done
        };
        let orders: std::collections::BTreeSet<Vec<u64>> = (0..50).map(order).collect();
        assert!(orders.len() > 5, "{orders:?}");
        assert_eq!(order(9), order(9));
    }

    #[test]
    fn the_same_seed_gives_the_same_choices() {
        for p in [SchedPolicy::Random, SchedPolicy::RoundRobin, SchedPolicy::PCT] {
            assert_eq!(run(p, 7, 200), run(p, 7, 200), "{p}");
        }
    }

    #[test]
    fn random_choices_differ_across_seeds_and_cover_every_task() {
        let a = run(SchedPolicy::Random, 1, 200);
        assert_ne!(a, run(SchedPolicy::Random, 2, 200));
        for t in 0..4 {
            assert!(a.contains(&t), "task {t} never chosen");
        }
    }

    #[test]
    fn round_robin_takes_the_next_task_after_the_last() {
        assert_eq!(run(SchedPolicy::RoundRobin, 0, 6), [0, 1, 2, 3, 0, 1]);
        let mut s = Scheduler::new(SchedPolicy::RoundRobin, 0);
        assert_eq!(s.pick(&[5, 2]), 1, "the lowest id first");
        assert_eq!(s.pick(&[5, 2, 9]), 0, "then the next one above 2");
        assert_eq!(s.pick(&[2, 9]), 1);
        assert_eq!(s.pick(&[2, 5]), 0, "round again");
    }

    #[test]
    fn the_order_of_the_ready_list_does_not_change_the_task() {
        for p in [SchedPolicy::Random, SchedPolicy::RoundRobin, SchedPolicy::PCT] {
            let (mut a, mut b) = (Scheduler::new(p, 3), Scheduler::new(p, 3));
            for _ in 0..50 {
                let x = [0u64, 1, 2];
                let y = [2u64, 0, 1];
                assert_eq!(x[a.pick(&x)], y[b.pick(&y)], "{p}");
            }
        }
    }

    #[test]
    fn pct_has_depth_minus_one_change_points_among_the_first_k_decisions() {
        use repro_model::PctParams;
        for (depth, steps) in [(1u32, 10u64), (2, 5), (3, 2_000), (5, 40)] {
            for seed in 0..30 {
                let s = Scheduler::new(SchedPolicy::Pct(PctParams { depth, steps }), seed);
                assert_eq!(s.change_points().len() as u32, depth - 1);
                for (i, &(at, to)) in s.change_points().iter().enumerate() {
                    assert!((1..=steps).contains(&at), "{at} outside 1..={steps}");
                    assert_eq!(to, u64::from(depth) - 1 - i as u64, "below every initial priority (>= d)");
                }
            }
        }
        // Depth 1: no change point, so the same task runs whenever it is ready.
        let mut s = Scheduler::new(SchedPolicy::Pct(PctParams { depth: 1, steps: 10 }), 4);
        let first = [0u64, 1][s.pick(&[0, 1])];
        assert!((0..100).all(|_| [0u64, 1][s.pick(&[0, 1])] == first));
    }

    #[test]
    fn pct_finds_a_depth_two_ordering_bug_at_least_as_often_as_its_bound() {
        // Two tasks, each taking 5 steps; the bug needs task 1 to run in the middle of task 0 (0, then 1, then 0
        // again: depth 2, one preemption). Without change points PCT runs the task of higher priority to its end
        // and never shows it. Bound: 1/(n k^(d-1)) = 1/(2*10).
        use repro_model::PctParams;
        let policy = SchedPolicy::Pct(PctParams { depth: 2, steps: 10 });
        let runs = 2_000;
        let mut found = 0;
        for seed in 0..runs {
            let mut s = Scheduler::new(policy, seed);
            let mut left = [5u32, 5];
            let mut order = Vec::new();
            while left.iter().any(|&l| l > 0) {
                let ready: Vec<u64> = (0..2u64).filter(|&t| left[t as usize] > 0).collect();
                let t = ready[s.pick(&ready)];
                left[t as usize] -= 1;
                order.push(t);
            }
            let first_1 = order.iter().position(|&t| t == 1).unwrap_or(0);
            if order[0] == 0 && order[first_1..].contains(&0) {
                found += 1;
            }
        }
        assert!(found * 20 >= runs, "found {found} in {runs}, below 1/20");
    }

    #[test]
    fn pct_runs_the_highest_priority_until_a_change_point_lowers_it() {
        let mut s = Scheduler::new(SchedPolicy::PCT, 11);
        let first = [0u64, 1, 2][s.pick(&[0, 1, 2])];
        // Until the first change point the same task keeps winning.
        let before = s.change_points.iter().map(|c| c.0).min().unwrap();
        for _ in 1..before {
            assert_eq!([0u64, 1, 2][s.pick(&[0, 1, 2])], first);
        }
        // Across all steps, every task runs at some point for some seed.
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..20 {
            seen.insert(run(SchedPolicy::PCT, seed, 1)[0]);
        }
        assert!(seen.len() > 1, "{seen:?}");
        assert_eq!(Scheduler::new(SchedPolicy::PCT, 0).pick(&[4]), 0);
        assert_eq!(Scheduler::new(SchedPolicy::PCT, 0).pick(&[]), 0);
    }
}
