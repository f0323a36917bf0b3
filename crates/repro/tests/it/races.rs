//! The racy programs of tests/races/ (none calls sched_yield): for each, some scheduler seed in 0..99 shows the bug
//! (the program exits 1) and another does not (exit 0), and the same seed gives the same outcome and output again.
//! Before the scheduler decided at thread starts and at reads, writes and signals, every seed gave one outcome.
//! The programs whose threads never block between their racing steps need the read/write/signal points
//! (`--sched-points io`); the others show their bug with the default points (blocking calls and thread starts).
use crate::common::*;

/// Compiles tests/races/NAME.c into the working directory as `./NAME`.
fn build_race(w: &Workdir, name: &str) {
    build_c_program(w, "tests/races", name);
}

/// The exit code and stdout of `./NAME` under repro with `--sched POLICY --sched-seed SEED --sched-points POINTS`.
fn outcome(w: &Workdir, name: &str, policy: &str, seed: u64, points: &str) -> (i32, String) {
    let o = repro()
        .current_dir(w.path())
        .args(["run", "-q", "--sched", policy, "--sched-seed", &seed.to_string(), "--sched-points", points])
        .args(["--", &format!("./{name}")])
        .timeout(HANG_GUARD)
        .output()
        .expect("repro runs");
    let code = o.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "{name} seed {seed}: exit {code}\n{}", stderr(&o));
    (code, stdout(&o))
}

/// Seeds 0..99 in turn (with scheduling points `points`) until one shows the bug and one does not; each of the two
/// again gives the same outcome.
fn a_seed_shows_it_and_another_does_not(name: &str, points: &str) {
    let w = Workdir::new();
    build_race(&w, name);
    let (mut shows, mut clean) = (None, None);
    for seed in 0..100u64 {
        let got = outcome(&w, name, "random", seed, points);
        match got.0 {
            1 if shows.is_none() => shows = Some((seed, got)),
            0 if clean.is_none() => clean = Some((seed, got)),
            _ => {}
        }
        if shows.is_some() && clean.is_some() {
            break;
        }
    }
    let (Some(shows), Some(clean)) = (shows.clone(), clean.clone()) else {
        panic!("{name}: seeds 0..99 gave only one outcome (bug shown: {shows:?}, clean: {clean:?})")
    };
    for (seed, first) in [shows, clean] {
        assert_eq!(outcome(&w, name, "random", seed, points), first, "{name}: seed {seed} again");
    }
}

#[test]
fn races_finish_order_of_computing_threads() {
    a_seed_shows_it_and_another_does_not("finish_order", "blocking");
}

#[test]
fn races_digits_written_by_four_threads() {
    a_seed_shows_it_and_another_does_not("digits", "io");
}

#[test]
fn races_lost_update_across_a_write() {
    a_seed_shows_it_and_another_does_not("lost_update", "io");
}

#[test]
fn races_check_then_act_on_a_file() {
    a_seed_shows_it_and_another_does_not("check_then_act", "blocking");
}

#[test]
fn races_two_producers_through_a_pipe() {
    a_seed_shows_it_and_another_does_not("pipe_order", "blocking");
}

#[test]
fn races_missed_condition_variable_wakeup() {
    a_seed_shows_it_and_another_does_not("missed_wakeup", "io");
}

/// Without the read/write points, the threads of `digits` and `lost_update` run between their writes without a
/// decision: no seed interleaves them (which is why `repro race` and `repro hunt --vary schedule` turn them on).
#[test]
fn races_need_the_io_points_when_threads_race_between_writes() {
    for name in ["digits", "lost_update"] {
        let w = Workdir::new();
        build_race(&w, name);
        let codes: Vec<i32> = (0..8).map(|seed| outcome(&w, name, "random", seed, "blocking").0).collect();
        assert_eq!(codes, [0; 8], "{name}: with blocking points only");
        let shown = (0..8).filter(|&seed| outcome(&w, name, "random", seed, "io").0 == 1).count();
        assert!(shown > 0, "{name}: no seed of 0..7 shows the bug with io points");
    }
}

#[test]
fn races_verify_holds_for_a_seed_on_every_program() {
    for name in ["finish_order", "digits", "lost_update", "check_then_act", "pipe_order", "missed_wakeup"] {
        let w = Workdir::new();
        build_race(&w, name);
        let o = repro()
            .current_dir(w.path())
            .args(["run", "-q", "--verify", "--runs", "5", "--sched", "random", "--sched-seed", "3"])
            .args(["--sched-points", "io", "--"])
            .arg(format!("./{name}"))
            .timeout(HANG_GUARD)
            .output()
            .expect("repro runs");
        assert_code(&o, 0);
        assert!(stderr(&o).contains("verified: 5 runs identical"), "{name}: {}", stderr(&o));
    }
}

/// `repro hunt --vary schedule` finds the bug of `digits` and of `lost_update` among seeds 0..99 by itself (its
/// schedules decide at reads and writes: with the default points no seed shows them), and the schedule it reports
/// fails again under `repro run` with the points it ran.
#[test]
fn races_hunt_finds_the_bugs_that_need_the_io_points_within_100_seeds() {
    for name in ["digits", "lost_update"] {
        let w = Workdir::new();
        build_race(&w, name);
        let o = repro()
            .current_dir(w.path())
            .args(["hunt", "--vary", "schedule", "--sched-seeds", "100", "--jobs", "2", "--json", "--"])
            .arg(format!("./{name}"))
            .timeout(HANG_GUARD)
            .output()
            .expect("repro runs");
        assert_code(&o, 1);
        let r: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{name}: {e}: {}", stderr(&o)));
        assert!(r["failed"].as_u64().unwrap() >= 1, "{name}: {r}");
        let sched = &r["failures"][0]["first"]["sched"];
        assert_eq!(sched["points"], "io", "{name}: {sched}");
        let (policy, seed) = (sched["policy"].as_str().unwrap(), sched["seed"].as_u64().unwrap());
        assert!(seed < 100, "{name}: {sched}");
        assert_eq!(outcome(&w, name, policy, seed, "io").0, 1, "{name}: the reported schedule {sched} again");
    }
}
