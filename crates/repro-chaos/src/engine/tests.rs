//! The flow's semantics over the fake driver and the fake clock: no process, no root, no sleep deciding an
//! outcome.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::engine::{Ctx, CtxParts};
use crate::fake::{FakeClock, FakeDriver, FakeState};
use crate::flow::FlowOutcome;
use crate::fsutil::mkdirs;
use crate::limits::Limits;
use crate::load::{parse_adapter, parse_experiment};
use crate::timeline::Timeline;

const ADAPTER: &str = r#"apiVersion: repro.dev/chaos/v1
kind: adapter
name: fake
driver: process
targets:
  - name: a
    start: "true"
  - name: b
    start: "true"
"#;

struct Run {
    _dir: tempfile::TempDir,
    ctx: Arc<Ctx>,
    fake: Arc<FakeState>,
}

fn experiment(body: &str) -> String {
    format!(
        "apiVersion: repro.dev/chaos/v1\nid: t\nversion: 1\ntitle: t\nhypothesis: h\ndefault-adapter: fake\n\
         timeout: 1h\n{body}"
    )
}

fn setup(body: &str) -> Run {
    setup_with(body, Limits::default())
}

fn setup_with(body: &str, limits: Limits) -> Run {
    setup_full(body, ADAPTER, limits)
}

fn setup_full(body: &str, adapter: &str, limits: Limits) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_path_buf();
    for d in ["logs", "workloads", "system/targets", "system/metrics", "system/watch"] {
        mkdirs(&run_dir.join(d)).unwrap();
    }
    let exp = parse_experiment(Path::new("t.yaml"), &experiment(body)).unwrap();
    let adapter = parse_adapter(Path::new("fake.yaml"), adapter).unwrap();
    let fake = Arc::new(FakeState::default());
    let ctx = Ctx::new(CtxParts {
        exp,
        adapter,
        run_dir: run_dir.clone(),
        run_id: "test".into(),
        seed: 1,
        tl: Timeline::create(&run_dir, false).unwrap(),
        clock: Box::new(FakeClock::default()),
        driver: Box::new(FakeDriver(Arc::clone(&fake))),
        env: BTreeMap::new(),
        env_raw: BTreeMap::new(),
        net: Default::default(),
        limits,
    });
    Run { _dir: dir, ctx, fake }
}

impl Run {
    /// What `repro chaos run` does around the flow: targets up, the flow, the undo sweep, the cleanup.
    fn run(&self) -> FlowOutcome {
        let started = crate::runner::start_targets(&self.ctx);
        let flow = self.ctx.exp.flow.clone().unwrap();
        let outcome = self.ctx.flow.run(&*self.ctx, &flow, self.ctx.exp.timeout.0);
        self.ctx.undo_all();
        self.ctx.stop_remaining_instances();
        for t in started.iter().rev() {
            self.ctx.stop_target(t, "run ended");
        }
        outcome
    }

    fn events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.ctx.tl.path).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// The events named `name`, as (field `key`) values.
    fn field(&self, name: &str, key: &str) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["event"] == name)
            .filter_map(|e| e.get(key).map(crate::timeline::value_text))
            .collect()
    }

    fn hits(&self) -> Vec<String> {
        self.fake.calls().into_iter().filter(|c| !c.starts_with("remove:")).collect()
    }
}

fn kill_ops(names: &[(&str, &str)]) -> String {
    let mut s = String::from("operations:\n");
    for (op, target) in names {
        s.push_str(&format!("  - name: {op}\n    uses: kill\n    target: {target}\n"));
    }
    s
}

#[test]
fn serial_runs_in_order_and_the_undo_sweep_runs_newest_first() {
    let r = setup(&format!("{}flow:\n  serial: [kill-a, kill-b]\n", kill_ops(&[("kill-a", "a"), ("kill-b", "b")])));
    assert_eq!(r.run(), FlowOutcome::Completed);
    assert_eq!(
        r.hits(),
        ["start:a", "start:b", "hit:Kill:a", "hit:Kill:b", "start:b", "start:a", "stop:b", "stop:a"],
        "kill a then b; the undo starts b again before a"
    );
    assert_eq!(r.field("operation.undo", "operation"), ["kill-b", "kill-a"]);
    assert_eq!(r.field("operation.undo", "detail"), ["restarted and healthy", "restarted and healthy"]);
    assert_eq!(r.field("node.finished", "ok"), ["true", "true"]);
    assert_eq!(r.field("flow.finished", "ok"), ["true"]);
}

#[test]
fn parallel_branches_all_run() {
    let body = format!(
        "workloads:\n  - name: w\n    instances: 2\n    kind: shell\n    run: 'true'\n{}flow:\n  parallel: [w, kill-a, kill-b]\n",
        kill_ops(&[("kill-a", "a"), ("kill-b", "b")])
    );
    let r = setup(&body);
    r.fake.exits.lock().unwrap().insert("w".into(), 0);
    assert_eq!(r.run(), FlowOutcome::Completed);
    let calls = r.hits();
    for c in ["hit:Kill:a", "hit:Kill:b", "spawn:w-0", "spawn:w-1"] {
        assert!(calls.contains(&c.to_string()), "{c} missing from {calls:?}");
    }
    assert_eq!(r.field("instance.state", "state"), ["Succeeded", "Succeeded"]);
    assert_eq!(r.field("instance.collected", "exit_code"), ["0", "0"]);
    let mut nodes = r.field("node.finished", "node");
    nodes.sort();
    assert_eq!(nodes, ["flow.parallel[0]", "flow.parallel[1]", "flow.parallel[2]"]);
}

#[test]
fn a_failing_step_stops_the_flow_and_the_undo_runs_in_reverse() {
    let body = format!(
        "{}  - name: bad\n    uses: no-such-hook\nflow:\n  serial: [kill-a, kill-b, bad, kill-a]\n",
        kill_ops(&[("kill-a", "a"), ("kill-b", "b")])
    );
    // The adapter does not define `no-such-hook`: a harness error at that step (not a panic).
    let r = setup(&body);
    let out = r.run();
    assert!(
        matches!(&out, FlowOutcome::Failed(why) if why.contains("adapter has no operation no-such-hook")),
        "{out:?}"
    );
    assert_eq!(out.exit_code(), 2);
    assert_eq!(r.field("operation.undo", "operation"), ["kill-b", "kill-a"]);
    // kill-a ran once: the step after the failure did not run.
    assert_eq!(r.hits().iter().filter(|c| *c == "hit:Kill:a").count(), 1);
    assert_eq!(r.field("harness.error", "reason").len(), 1);
}

#[test]
fn a_driver_failure_is_a_harness_error_and_the_undo_still_runs() {
    let body = format!("{}flow:\n  serial: [kill-a, kill-b]\n", kill_ops(&[("kill-a", "a"), ("kill-b", "b")]));
    let r = setup(&body);
    r.fake.fail("hit:Kill:b", "the engine said no");
    let out = r.run();
    assert!(matches!(&out, FlowOutcome::Failed(why) if why.contains("kill-b") && why.contains("the engine said no")));
    assert_eq!(r.field("harness.error", "reason"), ["kill-b: victim b: the engine said no"]);
    assert_eq!(r.field("operation.undo", "operation"), ["kill-a"]);
    assert!(r.hits().contains(&"stop:b".to_string()), "targets are stopped after the failure");
}

#[test]
fn a_target_that_cannot_start_again_in_the_undo_is_reported() {
    let body = format!("{}flow:\n  serial: [kill-a]\n", kill_ops(&[("kill-a", "a")]));
    let r = setup(&body);
    let fake = Arc::clone(&r.fake);
    // The first start works; the undo's start fails.
    r.fake.on("hit:Kill:a", move || fake.fail("start:a", "no image"));
    let out = r.run();
    assert!(matches!(&out, FlowOutcome::Completed), "the flow itself completed: {out:?}");
    assert_eq!(r.field("operation.undo", "ok"), ["false"]);
    assert_eq!(r.field("harness.error", "reason"), ["target a: no image"]);
}

#[test]
fn repeat_and_delay() {
    let body = format!(
        "{}flow:\n  repeat:\n    times: 3\n    serial:\n      - kill-a\n      - delay: 10m\n",
        kill_ops(&[("kill-a", "a")])
    );
    let r = setup(&body);
    assert_eq!(r.run(), FlowOutcome::Completed);
    assert_eq!(r.field("node.started", "repeat"), ["1", "2", "3"]);
    assert_eq!(r.field("node.started", "delay"), ["600.0", "600.0", "600.0"]);
    assert_eq!(r.field("operation.selected", "run"), ["1", "2", "3"]);
    // The fake clock moved by the three delays, no more than a few poll steps besides.
    let now = r.ctx.flow.clock.now().as_secs();
    assert!((1800..1810).contains(&now), "{now}");
}

#[test]
fn a_wait_that_times_out_is_a_harness_error() {
    let body = "workloads:\n  - name: w\n    kind: shell\n    run: 'true'\nflow:\n  parallel:\n    - w\n    - wait: {workload: w, condition: finished, timeout: 5s}\n";
    let r = setup(body);
    // Instances of w run until killed.
    let out = r.run();
    assert!(
        matches!(&out, FlowOutcome::Failed(why) if why.contains("wait for w Finished timed out after 5s")),
        "{out:?}"
    );
    assert!(r.hits().contains(&"kill:w-0".to_string()), "the cancelled workload's instance is killed");
    assert_eq!(r.field("instance.state", "state"), ["Killed"]);
}

#[test]
fn the_experiment_timeout_ends_the_flow() {
    let r = setup("operations: []\nflow:\n  serial:\n    - delay: 30m\n    - delay: 40m\n");
    let out = r.run();
    assert!(matches!(&out, FlowOutcome::Failed(why) if why.contains("timeout of 1h ended the flow")), "{out:?}");
    assert_eq!(r.field("flow.finished", "ok"), ["false"]);
    assert_eq!(r.ctx.flow.clock.now().as_secs(), 3600, "the second delay was cut at the deadline");
}

#[test]
fn the_step_limit_ends_the_flow() {
    let limits = Limits { steps: 4, ..Limits::default() };
    let r = setup_with(
        &format!("{}flow:\n  repeat:\n    times: 10\n    serial: [kill-a]\n", kill_ops(&[("kill-a", "a")])),
        limits,
    );
    let out = r.run();
    assert!(matches!(&out, FlowOutcome::Failed(why) if why.contains("steps")), "{out:?}");
    assert_eq!(r.field("operation.selected", "run"), ["1", "2", "3", "4"]);
}

#[test]
fn sigint_in_a_parallel_branch_cancels_the_other_and_every_undo_runs_once() {
    let body = format!(
        "workloads:\n  - name: w\n    kind: shell\n    run: 'true'\n{}  - name: freeze-w\n    uses: freeze\n    target: w\n    duration: 1m\n\
         flow:\n  parallel:\n    - w\n    - serial:\n        - wait: {{workload: w, condition: started}}\n        - freeze-w\n        - kill-a\n        - kill-b\n        - kill-a\n",
        kill_ops(&[("kill-a", "a"), ("kill-b", "b")])
    );
    let r = setup(&body);
    // SIGINT arrives while kill-b hits b: through the interpreter's cancel handle, as the signal guard does.
    let weak = Arc::downgrade(&r.ctx);
    r.fake.on("hit:Kill:b", move || {
        if let Some(ctx) = weak.upgrade() {
            assert!(ctx.flow.interrupt(2, &*ctx));
        }
    });
    let out = r.run();
    assert_eq!(out, FlowOutcome::Interrupted(2));
    assert_eq!(out.exit_code(), 130);
    // The freeze's minute is a sleep of the flow, which the fake clock passes at once; its undo (the thaw)
    // ran when it ended, before the signal.
    assert_eq!(r.field("operation.reverted", "operation"), ["freeze-w"]);
    // Every undo registered before the signal ran exactly once, newest first, and none started a target.
    assert_eq!(r.field("operation.undo", "operation"), ["kill-b", "kill-a"]);
    assert!(r.field("operation.undo", "detail").iter().all(|d| d.contains("interrupted")));
    let calls = r.hits();
    assert_eq!(calls.iter().filter(|c| c.starts_with("start:")).count(), 2, "no restart after SIGINT: {calls:?}");
    assert_eq!(calls.iter().filter(|c| *c == "hit:Kill:a").count(), 1, "the branch stopped after kill-b");
    // The other branch (the workload) was cancelled: its instance killed, its leaf not ok.
    assert!(calls.contains(&"kill:w-0".to_string()), "{calls:?}");
    assert_eq!(r.field("instance.state", "state"), ["Killed"]);
    let leaves: Vec<(String, String)> = r
        .events()
        .iter()
        .filter(|e| e["event"] == "node.finished")
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["ok"].to_string()))
        .collect();
    assert!(leaves.contains(&("w".into(), "false".into())), "{leaves:?}");
    assert_eq!(r.field("harness.error", "reason"), ["interrupted by SIGINT"]);
}

#[test]
fn a_failed_scrape_is_a_timeline_event_once_per_run_of_failures() {
    // A port nobody listens on: every scrape is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let adapter = format!(
        "{ADAPTER}observers:\n  metrics:\n    - target: m\n      url: http://127.0.0.1:{port}/metrics\n      interval: 10ms\n"
    );
    let r = setup_full("operations: []\nflow: {delay: 1s}\n", &adapter, Limits::default());
    let obs = crate::engine::observers::start(&r.ctx);
    crate::engine::observers::stop(&r.ctx, obs);
    let failed: Vec<Value> = r.events().into_iter().filter(|e| e["event"] == "scrape.failed").collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["target"], "m");
    assert!(failed[0]["url"].as_str().unwrap().ends_with(&format!(":{port}/metrics")));
    assert!(!failed[0]["error"].as_str().unwrap().is_empty());
    let lines = std::fs::read_to_string(r.ctx.run_dir.join("system/metrics/m.jsonl")).unwrap();
    assert!(lines.lines().count() >= 2, "the loop's scrapes and the last one: {lines}");
    assert!(lines.lines().all(|l| l.contains("\"error\"")), "{lines}");
    assert_eq!(r.field("observers.stopped", "event").len(), 1);
    assert!(r.field("harness.error", "reason").is_empty(), "a failed scrape is not a harness error");
}
