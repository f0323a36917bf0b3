//! Network faults end to end: real Redis behind the harness's TCP proxy, real sockets, real run directories.
use super::*;

fn json_file(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `<i> <start µs> <end µs> <ok|fail>` lines of a writer's journal.
fn journal(p: &Path) -> Vec<(u64, u64, u64, bool)> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap(), f[3] == "ok")
        })
        .collect()
}

/// The one event `name` of `operation` (panics unless there is exactly one).
fn op_event<'a>(tl: &'a [Value], name: &str, operation: &str) -> &'a Value {
    let v: Vec<&Value> = events(tl, name).into_iter().filter(|e| e["operation"] == operation).collect();
    assert_eq!(v.len(), 1, "one {name} of {operation}: {tl:?}");
    v[0]
}

#[test]
fn a_partition_cuts_only_the_writer_and_keeps_every_acknowledged_write() {
    require_redis();
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("redis-partition-acked-writes.yaml"), &["--seed", "3"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    for c in [
        "writer-0/failed-during-the-partition",
        "writer-0/resumed-after-the-heal",
        "bystander-0/never-cut-off",
        "verifier-0/no-acknowledged-write-lost",
        "experiment/partition-held-and-healed",
    ] {
        assert!(out.contains(&format!("  ok    {c}\n")), "{c}: {out}");
    }
    let dir = run_dir(&o);
    let tl = timeline(&dir);
    let verified = op_event(&tl, "operation.verified", "cut-off-writer");
    assert_eq!(verified["api"], "netproxy");
    assert_eq!(verified["effect"], "partition on redis:redis for writer-0, both ways");
    assert_eq!(verified["rules"], serde_json::json!(["redis:redis/rule-1"]));
    let reverted = op_event(&tl, "operation.reverted", "cut-off-writer");
    assert_eq!(reverted["ok"], true);
    let held = &reverted["stats"]["redis:redis"]["writer-0"];
    assert!(
        held["held_connects"].as_u64().unwrap() + held["upstream"]["held"].as_u64().unwrap() > 0,
        "the writer's traffic was held: {reverted}"
    );
    assert!(
        reverted["detail"].as_str().unwrap().starts_with("removed redis:redis/rule-1; while active: "),
        "{reverted}"
    );
    assert!(verified["t"].as_f64() < reverted["t"].as_f64());

    // The journals: the writer failed during the partition and only then; the bystander's writes started
    // in that same window were acknowledged.
    let out_of = |i: &str| dir.join(format!("workloads/{}/instances/{i}/output", &i[..i.len() - 2]));
    let w = journal(&out_of("writer-0").join("journal"));
    let b = journal(&out_of("bystander-0").join("journal"));
    let fails: Vec<&(u64, u64, u64, bool)> = w.iter().filter(|e| !e.3).collect();
    assert!(fails.len() >= 2, "the writer timed out during 1.5 s of partition: {w:?}");
    let (from, to) = (fails[0].1, fails.last().unwrap().2);
    assert!(to - from >= 1_000_000, "the failures span most of the partition ({from}..{to})");
    assert!(w.iter().any(|e| e.3 && e.1 > to), "writes resumed after the heal: {w:?}");
    assert!(b.iter().all(|e| e.3), "the bystander never failed: {b:?}");
    let during = b.iter().filter(|e| e.1 > from && e.2 < to).count();
    assert!(during >= 10, "the bystander kept writing while the writer was cut off: {during} writes");

    // The proxy's record.
    let rec = json_file(&dir.join("system/netproxy/redis-redis.json"));
    assert_eq!(rec["target"], "redis");
    assert_eq!(rec["active_rules_at_end"], serde_json::json!([]));
    let clients = &rec["stats"]["clients"];
    assert!(clients["bystander-0"]["connections"].as_u64().unwrap() >= 10, "{clients}");
    assert_eq!(clients["bystander-0"]["held_connects"], 0);
    assert!(clients["writer-0"]["held_connects"].as_u64().unwrap() > 0, "{clients}");
    for id in ["harness", "writer-0", "bystander-0", "verifier-0", "redis-exporter"] {
        assert!(rec["listeners"][id].as_u64().is_some(), "listener of {id}: {rec}");
    }
    let manifest = json_file(&dir.join("manifest.json"));
    let m = &manifest["netproxy"]["redis:redis"];
    assert_eq!(m["listen"], rec["listen"]);
    assert_eq!(m["listeners"], rec["listeners"]);
    assert_eq!(manifest["ports"]["CHAOS_LISTEN_PORT_REDIS"], rec["listen"].to_string());
    // Each instance's env names its own listener.
    let env = std::fs::read_to_string(dir.join("workloads/writer/instances/writer-0/env")).unwrap();
    assert!(env.contains(&format!("REDIS_PORT='{}'\n", rec["listeners"]["writer-0"])), "{env}");
}

#[test]
fn latency_on_one_instance_slows_only_that_instance() {
    require_redis();
    let wd = Workdir::new();
    let o = chaos_run(&wd, &examples().join("redis-latency.yaml"), &[]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("  ok    pinger-0/round-trips\n") && out.contains("  ok    pinger-1/round-trips\n"), "{out}");
    let dir = run_dir(&o);
    let tl = timeline(&dir);
    let v = op_event(&tl, "operation.verified", "slow-pinger-0");
    assert_eq!(v["effect"], "latency 200ms on redis:redis for pinger-0, to the target");
    let undo = op_event(&tl, "operation.undo", "slow-pinger-0");
    assert_eq!(undo["ok"], true);
    assert_eq!(undo["stats"]["redis:redis"]["pinger-0"]["upstream"]["delayed"], 12, "{undo}");
    let rec = json_file(&dir.join("system/netproxy/redis-redis.json"));
    let decisions = rec["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 12, "one decision per PING: {decisions:?}");
    assert!(decisions
        .iter()
        .all(|d| d["client"] == "pinger-0" && d["delay_us"] == 200_000 && d["direction"] == "upstream"));
    assert_eq!(rec["stats"]["clients"]["pinger-1"]["upstream"]["delayed"], 0);
}

#[test]
fn a_bad_network_field_fails_validate_with_a_located_message() {
    let wd = Workdir::new();
    let text = std::fs::read_to_string(examples().join("redis-latency.yaml")).unwrap();
    let adapter = examples().join("adapters/process-redis.yaml");
    let line = text.lines().position(|l| l.trim() == "delay: 200ms").unwrap() + 1;
    for (name, from, to, want) in [
        (
            "typo",
            "delay: 200ms",
            "dealy: 200ms",
            format!("typo.yaml:{line}:7: operations[0].network.dealy: unknown field `dealy`"),
        ),
        (
            "percent",
            "delay: 200ms",
            "percent: 20",
            format!("percent.yaml:{line}:16: operations[0].network.percent: latency does not take `percent`"),
        ),
        (
            "client",
            "clients: [pinger-0]",
            "clients: [pinger-2]",
            format!("client.yaml:{}:17: operations[0].network.clients[0]: unknown client \"pinger-2\"", line + 2),
        ),
    ] {
        let p = write(wd.path(), &format!("{name}.yaml"), &text.replace(from, to));
        let o = repro()
            .current_dir(wd.path())
            .args(["chaos", "validate"])
            .arg(&p)
            .arg("--adapter")
            .arg(&adapter)
            .timeout(HANG_GUARD)
            .output()
            .unwrap();
        assert_code(&o, 2);
        assert!(stderr(&o).contains(&want), "want {want}: {}", stderr(&o));
    }
    let o = repro().args(["chaos", "validate"]).arg(examples().join("redis-latency.yaml")).output().unwrap();
    assert_code(&o, 0);
}

/// Jittered latency with a correlation on a fixed pattern: 15 PINGs, one at a time on one connection, so each
/// PING is one chunk. The decisions of two runs with the same seed are the same; another seed's differ.
#[test]
fn the_same_seed_gives_the_same_proxy_decisions() {
    require_redis();
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "jitter.yaml",
        &format!(
            "{}default-adapter: {}\nworkloads:\n  - name: pinger\n    kind: shell\n    timeout: 30s\n    run: |\n      exec 3<>\"/dev/tcp/127.0.0.1/$REDIS_PORT\"\n      for i in $(seq 15); do printf 'PING\\r\\n' >&3; IFS= read -r -t 5 l <&3 || exit 1; done\n    checks:\n      - {{name: exited-ok, kind: exit-code}}\noperations:\n  - name: jitter\n    uses: latency\n    target: redis\n    network: {{delay: 30ms, jitter: 25ms, correlation: 25, clients: [pinger]}}\nflow:\n  serial: [jitter, pinger]\n",
            header("jitter"),
            examples().join("adapters/process-redis.yaml").display()
        ),
    );
    let decisions = |seed: &str| -> Vec<Value> {
        let o = chaos_run(&wd, &exp, &["--seed", seed]);
        assert_code(&o, 0);
        let rec = json_file(&run_dir(&o).join("system/netproxy/redis-redis.json"));
        rec["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                serde_json::json!([
                    d["client"],
                    d["conn"],
                    d["direction"],
                    d["chunk"],
                    d["len"],
                    d["delay_us"],
                    d["rules"]
                ])
            })
            .collect()
    };
    let a = decisions("42");
    let b = decisions("42");
    let c = decisions("43");
    // Both directions of 15 request/reply pairs: 30 chunks.
    assert_eq!(a.len(), 30, "{a:?}");
    assert_eq!(a, b, "the same seed, the same decisions");
    let delays: std::collections::BTreeSet<String> = a.iter().map(|d| d[5].to_string()).collect();
    assert!(delays.len() > 5, "jitter varies the delays: {delays:?}");
    assert_ne!(a, c, "another seed, other delays");
}

/// A 120 KB value fetched by two clients: `thin-0` through 40 KB/s of bandwidth on what Redis sends it, `wide-0`
/// untouched. Then a `reset` aborts a connection `thin-0` holds open, and a one-way partition (what `thin-0`
/// sends is held, what Redis sends is not) makes its PING go unanswered while a subscriber still gets messages.
#[test]
fn bandwidth_reset_and_a_one_way_partition_on_real_redis() {
    require_redis();
    let wd = Workdir::new();
    let exp = write(
        wd.path(),
        "net-more.yaml",
        &format!(
            "{}workloads:\n  - name: seed\n    kind: shell\n    run: head -c 120000 /dev/zero | tr '\\\\0' x | redis-cli -h 127.0.0.1 -p \"$REDIS_PORT\" -x SET big\n  - name: fetch\n    kind: shell\n    instances: 2\n    run: |\n      t0=${{EPOCHREALTIME/./}}\n      n=$(redis-cli -h 127.0.0.1 -p \"$REDIS_PORT\" --no-raw STRLEN big)\n      redis-cli -h 127.0.0.1 -p \"$REDIS_PORT\" GET big | wc -c > bytes\n      echo $(( (${{EPOCHREALTIME/./}} - t0) / 1000 )) > ms\n  - name: holder\n    kind: shell\n    run: |\n      exec 3<>\"/dev/tcp/127.0.0.1/$REDIS_PORT\"\n      printf 'PING\\r\\n' >&3; IFS= read -r -t 5 l <&3; echo \"first: $l\" > out\n      sleep 1\n      printf 'PING\\r\\n' >&3\n      if IFS= read -r -t 3 l <&3; then echo \"second: $l\" >> out; else echo \"second: ended $?\" >> out; fi\n  - name: oneway\n    kind: shell\n    run: |\n      exec 3<>\"/dev/tcp/127.0.0.1/$REDIS_PORT\"\n      printf 'PING\\r\\n' >&3; IFS= read -r -t 5 l <&3; echo \"before: $l\" > out\n      sleep 0.8\n      printf 'PING\\r\\n' >&3\n      if IFS= read -r -t 0.6 l <&3; then echo \"during: $l\" >> out; else echo 'during: no reply' >> out; fi\n      IFS= read -r -t 5 l <&3 && echo \"after: $l\" >> out\noperations:\n  - {{name: thin, uses: bandwidth, target: redis, network: {{rate: 40kbps, direction: from-target, clients: [fetch-0]}}}}\n  - {{name: rst, uses: reset, target: redis, network: {{clients: [holder]}}, duration: 300ms}}\n  - {{name: mute, uses: partition, target: redis, duration: 1s, network: {{clients: [oneway], direction: to-target}}}}\nflow:\n  serial:\n    - seed\n    - thin\n    - fetch\n    - parallel:\n        - holder\n        - oneway\n        - serial: [{{delay: 500ms}}, rst, mute]\n",
            header("net-more")
        ),
    );
    let adapter = examples().join("adapters/process-redis.yaml");
    let o = chaos_run(&wd, &exp, &["--adapter", adapter.to_str().unwrap()]);
    let out = stdout(&o);
    assert_code(&o, 0);
    let dir = run_dir(&o);
    let inst = |w: &str, i: &str, f: &str| {
        std::fs::read_to_string(dir.join(format!("workloads/{w}/instances/{i}/output/{f}"))).unwrap_or_default()
    };
    // Bandwidth: the same bytes, about 3 s at 40 KB/s against a few ms.
    for i in ["fetch-0", "fetch-1"] {
        assert!(inst("fetch", i, "bytes").trim().parse::<u64>().unwrap() >= 120_000, "{i}: {out}");
    }
    let slow: u64 = inst("fetch", "fetch-0", "ms").trim().parse().unwrap();
    let fast: u64 = inst("fetch", "fetch-1", "ms").trim().parse().unwrap();
    assert!(slow >= 2000 && fast < 1000, "fetch-0 {slow} ms, fetch-1 {fast} ms");
    // Reset: the open connection of the holder ended.
    let h = inst("holder", "holder-0", "out");
    assert!(h.contains("first: +PONG") && h.contains("second: ended"), "{h}");
    // One way: the PING sent during the partition is answered only after it heals.
    let w = inst("oneway", "oneway-0", "out");
    assert!(w.contains("before: +PONG") && w.contains("during: no reply") && w.contains("after: +PONG"), "{w}");
    let tl = timeline(&dir);
    assert!(op_event(&tl, "operation.verified", "thin")["effect"].as_str().unwrap().starts_with("bandwidth"));
    assert_eq!(op_event(&tl, "operation.reverted", "mute")["ok"], true);
}
