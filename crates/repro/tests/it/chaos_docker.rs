//! The docker driver of `repro chaos` against the real engine, with images built here (FROM scratch with
//! Debian's busybox-static / redis-server, `docker import`; nothing is pulled), and the kubernetes driver's
//! validation and n/a. Every image a test builds carries a test label and is removed by it.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

use crate::common::{assert_code, repro, require_cmd, require_docker, stderr, stdout, Workdir};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/chaos")
}

/// Images built for one test, removed (by label) when dropped.
struct Images {
    label: String,
    busybox: String,
    redis: String,
}

impl Images {
    /// Builds the images (`build-images.sh`: Debian's busybox-static, and redis-server for the redis image).
    fn build(which: &[&str]) -> Images {
        require_docker();
        require_cmd("busybox");
        if which.contains(&"redis") {
            require_cmd("redis-server");
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let id = format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let imgs = Images {
            label: format!("repro.chaos.test={id}"),
            busybox: format!("repro-chaos-test/busybox:{id}"),
            redis: format!("repro-chaos-test/redis:{id}"),
        };
        let o = Command::new(examples().join("docker/build-images.sh"))
            .args(which)
            .env("BUSYBOX_IMAGE", &imgs.busybox)
            .env("REDIS_IMAGE", &imgs.redis)
            .env("EXTRA_LABEL", &imgs.label)
            .output()
            .expect("build-images.sh runs");
        assert!(o.status.success(), "building images failed:\n{}", stderr(&o));
        imgs
    }

    /// The example adapter `name` with this test's image tags, written into `wd`.
    fn adapter(&self, wd: &Workdir, name: &str) -> PathBuf {
        let text = std::fs::read_to_string(examples().join(format!("adapters/{name}.yaml"))).unwrap();
        let text = text.replace("repro-chaos/busybox:1", &self.busybox).replace("repro-chaos/redis:7", &self.redis);
        let p = wd.path().join(format!("{name}.yaml"));
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        let ids = Command::new("docker").args(["images", "-q", "-f", &format!("label={}", self.label)]).output();
        if let Ok(o) = ids {
            let ids: Vec<String> = stdout(&o).split_whitespace().map(str::to_string).collect();
            if !ids.is_empty() {
                let _ = Command::new("docker").args(["image", "rm", "-f"]).args(&ids).output();
            }
        }
    }
}

fn run(wd: &Workdir, exp: &Path, adapter: &Path) -> Output {
    repro()
        .current_dir(wd.path())
        .args(["chaos", "run"])
        .arg(exp)
        .arg("--adapter")
        .arg(adapter)
        .arg("--state-dir")
        .arg(wd.path().join("state"))
        .args(["-q", "--seed", "3"])
        .output()
        .expect("repro runs")
}

fn run_dir(o: &Output) -> PathBuf {
    PathBuf::from(stdout(o).lines().last().expect("output").trim())
}

fn jsonl(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p).unwrap().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// Containers of a run still known to the engine.
fn containers_of(run: &str) -> Vec<String> {
    let o = Command::new("docker")
        .args(["ps", "-a", "-q", "-f", &format!("label=repro.chaos.run={run}")])
        .output()
        .expect("docker runs");
    stdout(&o).split_whitespace().map(str::to_string).collect()
}

#[test]
fn docker_hello_world_restarts_the_container_through_the_engine_and_cleans_up() {
    let wd = Workdir::new();
    let images = Images::build(&["busybox"]);
    let adapter = images.adapter(&wd, "docker-busybox");
    let o = run(&wd, &examples().join("docker-hello-world.yaml"), &adapter);
    assert_code(&o, 0);
    let out = stdout(&o);
    for line in [
        "  ok    preflight/docker-engine\n",
        "  ok    preflight/image-hello\n",
        "  ok    reader-0/said-hello-twice\n",
        "  ok    experiment/restarted-by-the-engine\n",
        "  ok    adapter/nothing-paused\n",
        "  ok    adapter/no-leaked-containers\n",
        "\nPASS\n",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(out.contains("warning: image repro-chaos-test/busybox:"), "a tag-only image warns:\n{out}");
    let dir = run_dir(&o);
    let run_id = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(containers_of(&run_id).is_empty(), "containers left behind");
    // The manifest pins the engine's version and the image id.
    let m: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert!(m["docker"]["version"].as_str().is_some_and(|v| !v.is_empty()), "{m}");
    let image_id = m["images"]["hello"]["id"].as_str().unwrap_or("");
    assert!(image_id.starts_with("sha256:") && image_id.len() == 71, "{m}");
    assert_eq!(m["images"]["hello"]["pinned"], false);
    // The engine's events for the run's container, in order.
    let events: Vec<String> = jsonl(&dir.join("system/watch/docker-events.jsonl"))
        .iter()
        .filter_map(|e| e["line"].as_str().map(str::to_string))
        .collect();
    let want = ["create hello", "start hello", "kill hello", "die hello", "restart hello", "destroy hello"];
    let mut at = 0;
    for w in want {
        let found = events[at..].iter().position(|e| e == w);
        assert!(found.is_some(), "no {w:?} after position {at} in {events:?}");
        at += found.unwrap_or(0) + 1;
    }
    // The container's log was saved before it was removed: two greetings.
    let log = std::fs::read_to_string(dir.join("logs/hello.log")).unwrap();
    assert_eq!(log.matches("hello, world").count(), 2, "{log}");
    // A report of a docker run has the container's lane.
    assert_code(&repro().args(["chaos", "report"]).arg(&dir).output().unwrap(), 0);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains(">hello</text>") && html.contains("restart-hello"), "lane and band in the report");
}

#[test]
fn docker_redis_keeps_acknowledged_writes_across_a_kill_and_restart_in_place() {
    let wd = Workdir::new();
    let images = Images::build(&["redis"]);
    let adapter = images.adapter(&wd, "docker-redis");
    let o = run(&wd, &examples().join("docker-redis-kill-acked-writes.yaml"), &adapter);
    assert_code(&o, 0);
    let out = stdout(&o);
    for line in [
        "  ok    writer-0/wrote-through-the-outage\n",
        "  ok    verifier-0/no-acknowledged-write-lost\n",
        "  ok    experiment/redis-came-back\n",
        "  ok    experiment/engine-saw-the-kill\n",
        "\nPASS\n",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    let run_id = run_dir(&o).file_name().unwrap().to_string_lossy().into_owned();
    assert!(containers_of(&run_id).is_empty(), "containers left behind");
}

#[test]
fn docker_freeze_outage_and_kill_map_to_pause_stop_and_kill() {
    let wd = Workdir::new();
    let images = Images::build(&["busybox"]);
    let adapter = images.adapter(&wd, "docker-busybox");
    let exp = wd.path().join("faults.yaml");
    std::fs::write(
        &exp,
        r#"apiVersion: repro.dev/chaos/v1
id: docker-faults
version: 1
title: every fault on a container
hypothesis: each fault takes effect and is undone
timeout: 1m
operations:
  - {name: freeze-it, uses: freeze, target: hello, duration: 300ms}
  - {name: outage-it, uses: outage, target: hello, duration: 300ms}
  - {name: kill-it, uses: kill, target: hello}
flow:
  serial:
    - freeze-it
    - outage-it
    - parallel:
        - {wait: {signal: hello-died, timeout: 10s}}
        - serial: [{delay: 200ms}, kill-it]
checks:
  - name: order
    kind: timeline
    order:
      - {event: operation.verified, where: {operation: freeze-it, api: pause, effect: stopped}}
      - {event: operation.reverted, where: {operation: freeze-it, ok: "true"}}
      - {event: operation.verified, where: {operation: outage-it, api: stop}}
      - {event: operation.reverted, where: {operation: outage-it, ok: "true"}}
      - {event: operation.started, where: {operation: kill-it}}
      - {event: signal.matched, where: {signal: hello-died, line: die hello}}
      - {event: operation.undo, where: {operation: kill-it, ok: "true"}}
  - name: killed
    kind: timeline
    order:
      - {event: operation.verified, where: {operation: kill-it, api: kill}}
      - {event: operation.undo, where: {operation: kill-it, ok: "true"}}
"#,
    )
    .unwrap();
    let o = run(&wd, &exp, &adapter);
    assert_code(&o, 0);
    let dir = run_dir(&o);
    let actions: Vec<String> = jsonl(&dir.join("system/watch/docker-events.jsonl"))
        .iter()
        .filter_map(|e| e["action"].as_str().map(str::to_string))
        .collect();
    for a in ["pause", "unpause", "stop", "kill", "start", "destroy"] {
        assert!(actions.iter().any(|x| x == a), "no {a} in {actions:?}");
    }
    // The report draws the freeze as a frozen segment of the container's lane.
    let o = repro().args(["chaos", "report"]).arg(&dir).output().unwrap();
    assert_code(&o, 0);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("hello: frozen from"), "no frozen segment");
    assert!(html.contains("hello: down from"), "no down segment");
    let run_id = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(containers_of(&run_id).is_empty(), "containers left behind");
}

#[test]
fn docker_image_missing_locally_is_a_preflight_error_and_nothing_is_pulled() {
    require_docker();
    let wd = Workdir::new();
    let text = std::fs::read_to_string(examples().join("adapters/docker-busybox.yaml"))
        .unwrap()
        .replace("repro-chaos/busybox:1", "repro-chaos-test/never-built:0");
    let adapter = wd.path().join("a.yaml");
    std::fs::write(&adapter, text).unwrap();
    let exp = examples().join("docker-hello-world.yaml");
    let o = repro().args(["chaos", "preflight"]).arg(&exp).arg("--adapter").arg(&adapter).output().unwrap();
    assert_code(&o, 2);
    let out = stdout(&o);
    assert!(out.contains("FAIL  preflight/image-hello"), "{out}");
    assert!(out.contains("is not present locally (this harness never pulls)"), "{out}");
    let o = run(&wd, &exp, &adapter);
    assert_code(&o, 2);
    assert!(stdout(&o).contains("\nERROR\n"), "{}", stdout(&o));
    let images = Command::new("docker").args(["images", "-q", "repro-chaos-test/never-built"]).output().unwrap();
    assert!(stdout(&images).trim().is_empty(), "an image was pulled");
}

#[test]
fn docker_adapter_errors_name_file_line_and_field() {
    let wd = Workdir::new();
    let base = std::fs::read_to_string(examples().join("adapters/docker-redis.yaml")).unwrap();
    let exp = examples().join("docker-redis-kill-acked-writes.yaml");
    let cases = [
        (
            base.replace("ports: {redis: 6379}", "ports: {web: 6379}"),
            "targets[0].container.ports.web: expected one of the adapter's ports (redis)",
        ),
        (
            base.replace("    container:\n", "    start: exec redis-server\n    container:\n"),
            "targets[0]: a docker target has a container, not a start hook or a pod",
        ),
        (base.replace("driver: docker", "driver: process"), "targets[0].start: a process target needs a start hook"),
    ];
    for (text, want) in cases {
        let p = wd.path().join("bad.yaml");
        std::fs::write(&p, text).unwrap();
        let o = repro().args(["chaos", "preflight"]).arg(&exp).arg("--adapter").arg(&p).output().unwrap();
        assert_code(&o, 2);
        let err = stderr(&o);
        assert!(err.starts_with(&format!("repro: {}:", p.display())) && err.contains(want), "{want}: {err}");
    }
}

#[test]
fn kubernetes_adapter_validates_and_says_no_cluster_is_reachable() {
    let wd = Workdir::new();
    let exp = examples().join("redis-kill-acked-writes.yaml");
    let adapter = examples().join("adapters/kubernetes-redis.yaml");
    let no_cluster = |c: &mut assert_cmd::Command| {
        c.env_remove("KUBECONFIG").env_remove("KUBERNETES_SERVICE_HOST").env("HOME", wd.path());
    };
    let mut c = repro();
    no_cluster(&mut c);
    let o = c.args(["chaos", "preflight"]).arg(&exp).arg("--adapter").arg(&adapter).output().unwrap();
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.starts_with("n/a\n  no Kubernetes cluster is reachable: no kubeconfig"), "{out}");
    let mut c = repro();
    no_cluster(&mut c);
    let o = c
        .args(["chaos", "run"])
        .arg(&exp)
        .arg("--adapter")
        .arg(&adapter)
        .arg("--state-dir")
        .arg(wd.path().join("state"))
        .arg("-q")
        .output()
        .unwrap();
    assert_code(&o, 0);
    assert!(stdout(&o).contains("n/a\n  no Kubernetes cluster is reachable"), "{}", stdout(&o));
    let dir = run_dir(&o);
    let tl = jsonl(&dir.join("timeline.jsonl"));
    assert!(tl.iter().any(|e| e["event"] == "run.not-applicable"), "n/a is in the timeline");
    assert!(!tl.iter().any(|e| e["event"] == "target.started"), "nothing was started");
    // A kubeconfig that exists does not make a cluster: still n/a, saying why.
    let kc = wd.path().join("kubeconfig");
    std::fs::write(&kc, "apiVersion: v1\nkind: Config\nclusters: []\n").unwrap();
    let mut c = repro();
    no_cluster(&mut c);
    let o = c
        .env("KUBECONFIG", &kc)
        .args(["chaos", "preflight"])
        .arg(&exp)
        .arg("--adapter")
        .arg(&adapter)
        .output()
        .unwrap();
    assert_code(&o, 0);
    assert!(stdout(&o).contains("only loads and validates adapters"), "{}", stdout(&o));
    // Validation: a selector that is not one, an outage without an owner.
    let text = std::fs::read_to_string(&adapter).unwrap();
    for (bad, want) in [
        (text.replace("selector: app=redis", "selector: redis"), "targets[0].pod.selector: expected a label selector"),
        (
            text.replace("      owner: deployment/redis\n", ""),
            "targets[0].pod.owner: the outage fault scales the owner",
        ),
        (
            text.replace("owner: deployment/redis", "owner: pod/redis"),
            "targets[0].pod.owner: expected deployment/<name>",
        ),
    ] {
        let p = wd.path().join("k.yaml");
        std::fs::write(&p, bad).unwrap();
        let o = repro().args(["chaos", "preflight"]).arg(&exp).arg("--adapter").arg(&p).output().unwrap();
        assert_code(&o, 2);
        assert!(stderr(&o).contains(want), "{want}: {}", stderr(&o));
    }
}

#[test]
fn docker_instances_run_in_their_own_containers_and_faults_reach_them() {
    let wd = Workdir::new();
    let images = Images::build(&["busybox"]);
    let adapter = images.adapter(&wd, "docker-busybox-instances");
    let exp = wd.path().join("inside.yaml");
    std::fs::write(
        &exp,
        r#"apiVersion: repro.dev/chaos/v1
id: docker-instances
version: 1
title: instances in containers
hypothesis: each instance runs in a container of the instance image; a kill reaches one
timeout: 1m
workloads:
  - name: inside
    kind: shell
    instances: 3
    run: |
      cat /etc/repro-chaos-image > where
      echo "$CHAOS_EXPERIMENT_WORKLOAD_INSTANCE" > me
    checks:
      - {name: exited-ok, kind: exit-code}
      - {name: ran-in-the-image, kind: shell, run: grep -q "repro-chaos image" where}
      - {name: knows-itself, kind: shell, run: test "$(cat me)" = "$CHAOS_EXPERIMENT_WORKLOAD_INSTANCE"}
  - name: sleeper
    kind: shell
    instances: 2
    run: sleep 3
operations:
  - {name: kill-one, uses: kill, target: sleeper, select: one}
flow:
  serial:
    - inside
    - parallel: [sleeper, {serial: [{wait: {workload: sleeper, condition: started}}, {delay: 300ms}, kill-one]}]
checks:
  - name: one-sleeper-killed
    kind: timeline
    event: instance.state
    where: {workload: sleeper, state: Killed}
"#,
    )
    .unwrap();
    let o = run(&wd, &exp, &adapter);
    assert_code(&o, 0);
    let out = stdout(&o);
    for line in [
        "  ok    inside-2/ran-in-the-image\n",
        "  ok    inside-0/knows-itself\n",
        "  ok    experiment/one-sleeper-killed\n",
        "  ok    adapter/no-leaked-containers\n",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    let dir = run_dir(&o);
    let tl = jsonl(&dir.join("timeline.jsonl"));
    let created: Vec<&Value> = tl.iter().filter(|e| e["event"] == "instance.created").collect();
    assert_eq!(created.len(), 5);
    assert!(created.iter().all(|e| e["container"].as_str().is_some_and(|c| c.len() == 12)), "{created:?}");
    let killed = tl.iter().filter(|e| e["event"] == "instance.state" && e["state"] == "Killed").count();
    assert_eq!(killed, 1, "exactly the selected sleeper was killed");
    let run_id = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(containers_of(&run_id).is_empty(), "containers left behind");
}

/// A network fault on a docker target: its proxied port is published on the listen port and the proxy fronts
/// it on 127.0.0.1, so the redis-latency example runs unchanged on the docker-redis adapter with `proxy:`.
#[test]
fn docker_latency_goes_through_the_proxy_in_front_of_the_published_port() {
    let wd = Workdir::new();
    let images = Images::build(&["redis"]);
    let adapter = images.adapter(&wd, "docker-redis");
    let text =
        std::fs::read_to_string(&adapter).unwrap().replace("    container:\n", "    proxy: [redis]\n    container:\n");
    std::fs::write(&adapter, text).unwrap();
    let o = run(&wd, &examples().join("redis-latency.yaml"), &adapter);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("  ok    pinger-0/round-trips\n") && out.contains("  ok    pinger-1/round-trips\n"), "{out}");
    let dir = run_dir(&o);
    let rec: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("system/netproxy/redis-redis.json")).unwrap()).unwrap();
    assert_eq!(rec["decisions"].as_array().unwrap().len(), 12, "{rec}");
    let tl = jsonl(&dir.join("timeline.jsonl"));
    assert!(tl.iter().any(|e| e["event"] == "operation.verified" && e["api"] == "netproxy"), "{tl:?}");
    let run_id = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(containers_of(&run_id).is_empty(), "containers left behind");
}
