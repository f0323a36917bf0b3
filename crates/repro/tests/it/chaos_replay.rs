//! `repro chaos replay` and the seeded flow: a schedule drawn from the seed, recorded in the run directory with
//! the files the experiment uses, and run again from the run directory alone.
use super::*;

fn replay(wd: &Workdir, run: &Path, extra: &[&str]) -> Output {
    let mut c = repro();
    c.current_dir(wd.path()).args(["chaos", "replay"]).arg(run).arg("-q").args(extra).timeout(HANG_GUARD);
    c.output().expect("repro runs")
}

/// Four instances, a jittered delay, a three-step schedule of kills and freezes and a random pick; the
/// instances' script is a helper file next to the experiment; which instances die (so which checks fail)
/// depends on the seed alone.
fn seeded_experiment(dir: &Path) -> PathBuf {
    write(dir, "lib/work.sh", "sleep 3\necho done > out\n");
    write(
        dir,
        "seeded.yaml",
        &format!(
            "{}files: [lib]\nworkloads:\n  - name: w\n    kind: shell\n    instances: 4\n    run: bash \"$CHAOS_EXPERIMENT_DIR/lib/work.sh\"\n    checks:\n      - name: finished\n        kind: shell\n        run: test -s out\noperations:\n  - {{name: kill-one, uses: kill, target: w}}\n  - {{name: freeze-one, uses: freeze, target: w, duration: 150ms}}\nflow:\n  parallel:\n    - w\n    - serial:\n        - wait: {{workload: w, condition: started}}\n        - {{delay: 200ms, jitter: 100ms}}\n        - schedule: {{from: [kill-one, {{do: freeze-one, weight: 2}}], length: 3, interval: 100ms}}\n        - random: {{pick: 1, from: [kill-one, {{delay: 10ms}}]}}\n",
            header("seeded-schedule")
        ),
    )
}

#[test]
fn a_seeded_schedule_is_recorded_with_its_inputs_and_replays_from_the_run_directory_alone() {
    let wd = Workdir::new();
    let src = wd.path().join("src");
    let exp = seeded_experiment(&src);
    let o = chaos_run(&wd, &exp, &["--seed", "3"]);
    let code = o.status.code();
    assert!(matches!(code, Some(0 | 1)), "PASS or FAIL: {}\n{}", stdout(&o), stderr(&o));
    let run = run_dir(&o);

    // The schedule: every draw and every operation, with where in the flow it ran.
    let sc: Value = serde_json::from_str(&std::fs::read_to_string(run.join("schedule.json")).unwrap()).unwrap();
    assert_eq!(sc["seed"], 3);
    let draws = sc["draws"].as_array().unwrap();
    let kinds: Vec<&str> = draws.iter().map(|d| d["draw"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["delay", "schedule", "schedule", "schedule", "random"], "{sc}");
    let d = draws[0]["draw"]["delay_ms"].as_u64().unwrap();
    assert!((100..=300).contains(&d), "{d}");
    let ops = sc["operations"].as_array().unwrap();
    assert!(ops.len() >= 3, "{sc}");
    assert!(ops.iter().all(
        |o| o["node"].as_str().unwrap().contains(".schedule[") || o["node"].as_str().unwrap().contains(".random[")
    ));
    // The same seed draws the same schedule; another seed another one (over a few seeds).
    let o2 = chaos_run(&wd, &exp, &["--seed", "3"]);
    let sc2: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir(&o2).join("schedule.json")).unwrap()).unwrap();
    assert_eq!(sc2["draws"], sc["draws"]);
    let other: Vec<Value> = ["4", "5", "6"]
        .iter()
        .map(|s| {
            let o = chaos_run(&wd, &exp, &["--seed", s]);
            serde_json::from_str::<Value>(&std::fs::read_to_string(run_dir(&o).join("schedule.json")).unwrap()).unwrap()
                ["draws"]
                .clone()
        })
        .collect();
    assert!(other.iter().any(|d| *d != sc["draws"]), "other seeds draw other schedules");

    // The helper script is in the run directory, with its digest in the manifest.
    assert_eq!(
        std::fs::read_to_string(run.join("inputs/experiment/lib/work.sh")).unwrap(),
        "sleep 3\necho done > out\n"
    );
    let m: Value = serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["inputs"][0]["path"], "lib/work.sh", "{m}");
    assert_eq!(m["inputs"][0]["sha256"].as_str().unwrap().len(), 64);

    // Without the original files, from the run directory alone: 3/3.
    std::fs::rename(&src, wd.path().join("gone")).unwrap();
    let r = replay(&wd, &run, &["--runs", "3"]);
    assert_code(&r, 0);
    let out = stdout(&r);
    assert!(out.contains("replay 3/3") && out.contains("reproduced 3/3: verdict"), "{out}");
    let r = replay(&wd, &run, &["--json"]);
    assert_code(&r, 0);
    let v: Value = serde_json::from_str(&stdout(&r)).unwrap();
    assert_eq!((v["reproduced"].as_u64(), v["requested"].as_u64(), v["seed"].as_u64()), (Some(1), Some(1), Some(3)));
    let again = PathBuf::from(v["runs"][0]["run_dir"].as_str().unwrap());
    assert!(again.join("report.html").is_file(), "each replay has its page");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(again.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["replay_of"].as_str().unwrap(), std::fs::canonicalize(&run).unwrap().to_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(again.join("schedule.json"))
            .map(|t| serde_json::from_str::<Value>(&t).unwrap()["draws"].clone())
            .unwrap(),
        sc["draws"]
    );
}

#[test]
fn a_check_that_does_not_come_out_the_same_is_named_and_exits_122() {
    let wd = Workdir::new();
    let counter = wd.path().join("counter");
    std::fs::write(&counter, "0").unwrap();
    // Passes on even runs, fails on odd ones: the original (run 0) passes, its first replay fails.
    let exp = write(
        wd.path(),
        "alternating.yaml",
        &format!(
            "{}workloads:\n  - name: w\n    kind: shell\n    run: 'true'\nflow: w\nchecks:\n  - name: even-run\n    kind: shell\n    run: |\n      n=$(cat {c}); echo $((n + 1)) > {c}; test $((n % 2)) -eq 0\n",
            header("alternating"),
            c = counter.display()
        ),
    );
    let o = chaos_run(&wd, &exp, &["--seed", "1"]);
    assert_code(&o, 0);
    let r = replay(&wd, &run_dir(&o), &["--runs", "2"]);
    assert_code(&r, 122);
    let out = stdout(&r);
    assert!(out.contains("replay 1/2  FAIL   DIFFERS: verdict FAIL; experiment/even-run: fail (was ok)"), "{out}");
    assert!(out.contains("replay 2/2  PASS   reproduced"), "{out}");
    assert!(out.contains("reproduced 1/2"), "{out}");
}

#[test]
fn replay_refuses_what_is_not_a_finished_run() {
    let wd = Workdir::new();
    let r = replay(&wd, &wd.path().join("nope"), &[]);
    assert_code(&r, 2);
    assert!(stderr(&r).contains("not a run directory (no such directory)"), "{}", stderr(&r));
    let half = wd.path().join("half");
    std::fs::create_dir_all(&half).unwrap();
    std::fs::write(half.join("INCOMPLETE"), "x").unwrap();
    let r = replay(&wd, &half, &[]);
    assert_code(&r, 2);
    assert!(stderr(&r).contains("did not finish (INCOMPLETE)"), "{}", stderr(&r));
}

/// Five faults, one per instance; only the kill of w-3 fails the check that w-3 finished.
fn planted(dir: &Path) -> PathBuf {
    write(
        dir,
        "planted.yaml",
        &format!(
            "{}workloads:\n  - name: w\n    kind: shell\n    instances: 5\n    run: sleep 1.2; echo done > out\n    checks:\n      - {{name: finished, kind: shell, run: test -s out}}\noperations:\n  - {{name: freeze-w0, uses: freeze, target: w, select: [w-0], duration: 200ms}}\n  - {{name: freeze-w1, uses: freeze, target: w, select: [w-1], duration: 200ms}}\n  - {{name: freeze-w2, uses: freeze, target: w, select: [w-2], duration: 200ms}}\n  - {{name: kill-w3, uses: kill, target: w, select: [w-3]}}\n  - {{name: freeze-w4, uses: freeze, target: w, select: [w-4], duration: 200ms}}\nflow:\n  parallel:\n    - w\n    - serial:\n        - wait: {{workload: w, condition: started}}\n        - freeze-w0\n        - freeze-w1\n        - freeze-w2\n        - kill-w3\n        - freeze-w4\n",
            header("planted")
        ),
    )
}

#[test]
fn shrink_cuts_a_planted_five_fault_schedule_to_the_one_that_matters() {
    let wd = Workdir::new();
    let exp = planted(wd.path());
    let o = chaos_run(&wd, &exp, &["--seed", "1"]);
    assert_code(&o, 1);
    assert!(stdout(&o).contains("FAIL  w-3/finished"), "{}", stdout(&o));
    let run = run_dir(&o);
    let mut c = repro();
    c.current_dir(wd.path()).args(["chaos", "shrink"]).arg(&run).args(["--runs", "2", "-q"]).timeout(HANG_GUARD);
    let s = c.output().unwrap();
    assert_code(&s, 0);
    let out = stdout(&s);
    assert!(
        out.contains(
            "shrunk 5 operations to 1 that still fail w-3/finished: #4 kill-w3 at flow.parallel[1].serial[4] on [w-3]"
        ),
        "{out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    let shrunk_exp = PathBuf::from(
        lines.iter().find(|l| l.starts_with("  experiment ")).unwrap().trim_start_matches("  experiment "),
    );
    let last = PathBuf::from(lines.last().unwrap().trim());
    assert!(last.join("report.html").is_file(), "the shrunk run has its page");
    // The shrunk experiment is a valid experiment holding one operation call, and its run failed the check.
    let text = std::fs::read_to_string(&shrunk_exp).unwrap();
    assert!(text.contains("id: planted-shrunk"), "{text}");
    assert_eq!(text.matches("op: ").count(), 1, "{text}");
    let v = repro().current_dir(wd.path()).args(["chaos", "validate"]).arg(&shrunk_exp).output().unwrap();
    assert_code(&v, 0);
    let verdict: Value = serde_json::from_str(&std::fs::read_to_string(last.join("verdict.json")).unwrap()).unwrap();
    let failed: Vec<&str> = verdict["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "fail")
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["w-3/finished"], "only the one check fails in the shrunk run");
    // Running the shrunk file again fails the same way (the schedule is pinned: no seed needed).
    let again = chaos_run(&wd, &shrunk_exp, &[]);
    assert_code(&again, 1);
    assert!(stdout(&again).contains("FAIL  w-3/finished"), "{}", stdout(&again));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("shrink/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["kept"], serde_json::json!([3]));
    assert!(summary["candidates"].as_array().unwrap().len() <= 12, "{summary}");

    // What cannot be shrunk says why, exit 2.
    let ok = chaos_run(&wd, &seeded_experiment(&wd.path().join("s2")), &["--seed", "999"]);
    let ok_run = run_dir(&ok);
    let mut c = repro();
    c.args(["chaos", "shrink"]).arg(&ok_run).args(["--check", "nope/none", "-q"]).timeout(HANG_GUARD);
    let r = c.output().unwrap();
    assert_code(&r, 2);
    assert!(stderr(&r).contains("cannot shrink this run: check nope/none did not fail in this run"), "{}", stderr(&r));
}

#[test]
fn redis_nemesis_replays_its_schedule_and_a_lossy_redis_shrinks_to_the_outage() {
    require_redis();
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("redis-nemesis.yaml"), &["--seed", "4"]);
    assert_code(&o, 0);
    let run = run_dir(&o);
    let sc: Value = serde_json::from_str(&std::fs::read_to_string(run.join("schedule.json")).unwrap()).unwrap();
    let ops: Vec<&str> =
        sc["operations"].as_array().unwrap().iter().map(|o| o["operation"].as_str().unwrap()).collect();
    assert_eq!(ops.len(), 5, "{sc}");
    let r = replay(&wd, &run, &["--runs", "3"]);
    assert_code(&r, 0);
    assert!(stdout(&r).contains("reproduced 3/3"), "{}", stdout(&r));

    // Without persistence an outage loses the acknowledged writes; a freeze does not.
    let adapter = std::fs::read_to_string(examples().join("adapters/process-redis.yaml"))
        .unwrap()
        .replace("--appendonly yes --appendfsync always", "--appendonly no");
    let ad = write(wd.path(), "adapters/lossy-redis.yaml", &adapter);
    // A seed whose schedule holds exactly one outage among its five faults.
    let seed = (0..200u64)
        .find(|s| {
            let picks: Vec<usize> = (0..5)
                .map(|k| {
                    let path = format!("flow.serial[0].parallel[1].serial[2].schedule[{k}]");
                    repro_chaos::flow::draw_schedule_step(*s, &path, Duration::from_millis(100), &[3, 1]).1
                })
                .collect();
            picks.iter().filter(|c| **c == 1).count() == 1
        })
        .expect("a seed with one outage");
    let o = chaos_run(
        &wd,
        &examples().join("redis-nemesis.yaml"),
        &["--adapter", ad.to_str().unwrap(), "--seed", &seed.to_string()],
    );
    assert_code(&o, 1);
    assert!(stdout(&o).contains("FAIL  verifier-0/no-acknowledged-write-lost"), "{}", stdout(&o));
    let run = run_dir(&o);
    let mut c = repro();
    c.current_dir(wd.path())
        .args(["chaos", "shrink"])
        .arg(&run)
        .args(["--runs", "2", "--check", "verifier-0/no-acknowledged-write-lost", "-q"])
        .timeout(HANG_GUARD);
    let s = c.output().unwrap();
    assert_code(&s, 0);
    let out = stdout(&s);
    assert!(out.contains("shrunk 5 operations to 1 that still fail verifier-0/no-acknowledged-write-lost: #"), "{out}");
    assert!(out.contains(" redis-down at flow.serial[0].parallel[1].serial[2].schedule["), "{out}");
}

#[test]
fn shrink_says_so_when_the_pinned_schedule_does_not_reproduce_the_failure() {
    let wd = Workdir::new();
    let counter = wd.path().join("counter");
    std::fs::write(&counter, "0").unwrap();
    // Fails on even runs only: the original (run 0) fails, the pinned schedule's first run (run 1) passes.
    let exp = write(
        wd.path(),
        "flaky.yaml",
        &format!(
            "{}workloads:\n  - name: w\n    kind: shell\n    run: sleep 0.5\noperations:\n  - {{name: f, uses: freeze, target: w, duration: 100ms}}\nflow:\n  parallel: [w, {{serial: [{{wait: {{workload: w, condition: started}}}}, f]}}]\nchecks:\n  - name: odd-run\n    kind: shell\n    run: |\n      n=$(cat {c}); echo $((n + 1)) > {c}; test $((n % 2)) -eq 1\n",
            header("flaky-shrink"),
            c = counter.display()
        ),
    );
    let o = chaos_run(&wd, &exp, &[]);
    assert_code(&o, 1);
    let mut c = repro();
    c.args(["chaos", "shrink"]).arg(run_dir(&o)).args(["--runs", "2", "-q"]).timeout(HANG_GUARD);
    let s = c.output().unwrap();
    assert_code(&s, 2);
    let err = stderr(&s);
    assert!(
        err.contains("cannot shrink this run: the pinned schedule of 1 operations does not reproduce the failure of experiment/odd-run (0 of 1 runs failed it)"),
        "{err}"
    );
}
