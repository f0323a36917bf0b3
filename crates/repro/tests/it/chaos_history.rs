//! History checks (`linearizable`, `set`, `counter`): histories written by workloads with the helpers in
//! examples/chaos/lib, judged by repro-history, drawn in report.html.
use super::*;

fn lib() -> PathBuf {
    examples().join("lib")
}

#[test]
fn a_redis_replica_cut_off_by_a_partition_is_not_linearizable_and_the_report_draws_the_window() {
    require_redis();
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("redis-replica-linearizable.yaml"), &["--seed", "1"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("xfail experiment/register-linearizable (known: REDIS-ASYNC-REPLICATION)"), "{out}");
    assert!(out.contains("not linearizable (smallest window of "), "{out}");
    let run = run_dir(&o);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(run.join("verdict.json")).unwrap()).unwrap();
    let c =
        v["checks"].as_array().unwrap().iter().find(|c| c["id"] == "experiment/register-linearizable").unwrap().clone();
    assert_eq!(c["data"]["valid"], "invalid", "{c}");
    let w = &c["data"]["details"]["window"];
    let ops = w["ops"].as_array().unwrap();
    assert!((2..=10).contains(&ops.len()), "{w}");
    assert!(
        ops.iter().any(|o| o["f"] == "read") && ops.iter().any(|o| o["f"] == "write"),
        "a stale read and the write it missed: {w}"
    );
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        html.contains("class=\"history-window\"") && html.contains("non-linearizable window"),
        "the report draws it"
    );
    // Offline evaluation finds the same.
    let e = repro().args(["chaos", "evaluate", "--json"]).arg(&run).output().unwrap();
    assert_code(&e, 0);
    // The verdict replays (the window itself may be another one: the host's timing decides which reads are stale).
    let mut r = repro();
    r.args(["chaos", "replay"]).arg(&run).args(["--runs", "2", "-q"]).timeout(HANG_GUARD);
    let r = r.output().unwrap();
    assert!(matches!(r.status.code(), Some(0 | 122)), "{}", stderr(&r));
    assert!(stdout(&r).contains("replay 2/2  XFAIL"), "{}", stdout(&r));
}

#[test]
fn set_and_counter_histories_from_shell_and_python_workloads() {
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "histories.yaml",
        &format!(
            "{}workloads:\n  - name: adder\n    kind: shell\n    run: |\n      source {lib}/history.sh\n      p=$CHAOS_EXPERIMENT_WORKLOAD_INSTANCE\n      for i in 1 2 3; do history_op $p invoke add $i; history_op $p ok add $i; done\n      history_op $p invoke add 4; history_op $p info add 4\n      history_op $p invoke read null; history_op $p ok read \"[1,2,THIRD]\"\n  - name: counter\n    kind: shell\n    run: |\n      HISTORY_FILE=counter.jsonl python3 -c '\n      import sys; sys.path.insert(0, \"{lib}\")\n      from history import History\n      h = History()\n      for _ in range(5):\n          h.invoke(\"c\", \"incr\", 1); h.ok(\"c\", \"incr\", 1)\n      h.invoke(\"c\", \"read\"); h.ok(\"c\", \"read\", READ)\n      '\nflow:\n  serial: [adder, counter]\nchecks:\n  - {{name: acked-adds-read, kind: set, history: workloads/adder/instances/*/output/history.jsonl}}\n  - {{name: counter-in-bounds, kind: counter, history: workloads/counter/instances/*/output/counter.jsonl}}\n",
            header("histories"),
            lib = lib().display(),
        ),
    );
    // The adder's read misses the acknowledged 3, the counter reads 7 of 5 increments.
    let exp_text = std::fs::read_to_string(&exp).unwrap();
    let bad = write(wd.path(), "bad.yaml", &exp_text.replace(",THIRD", "").replace("READ)", "7)"));
    let o = chaos_run(&wd, &bad, &[]);
    assert_code(&o, 1);
    let out = stdout(&o);
    assert!(out.contains("FAIL  experiment/acked-adds-read"), "{out}");
    assert!(out.contains("FAIL  experiment/counter-in-bounds"), "{out}");
    let good = write(
        wd.path(),
        "good.yaml",
        &exp_text.replace("THIRD", "3").replace("READ)", "5)").replace("id: histories", "id: histories-ok"),
    );
    let o = chaos_run(&wd, &good, &[]);
    assert_code(&o, 0);
    // A pattern that leaves the run directory is refused where it is written.
    let esc = write(
        wd.path(),
        "esc.yaml",
        &exp_text.replace("history: workloads/adder/instances/*/output/history.jsonl", "history: ../../etc/passwd"),
    );
    let v = repro().args(["chaos", "validate"]).arg(&esc).output().unwrap();
    assert_code(&v, 2);
    assert!(
        stderr(&v).contains("checks[0].history: expected a relative glob inside the run directory"),
        "{}",
        stderr(&v)
    );
}
