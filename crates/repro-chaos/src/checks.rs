//! Checks of the harness itself: whether an experiment applies to an adapter, the preflight (the adapter's,
//! the experiment's, the Docker engine and images), and the adapter checks after the flow (no leaked process
//! or container, nothing frozen or paused, targets healthy, the adapter's own checks).
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use repro_model::timeline::Event;

use crate::docker;
use crate::engine::Ctx;
use crate::evaluate::CheckResult;
use crate::model::*;
use crate::proc;

/// Why the experiment cannot run on this adapter, if it cannot.
pub fn not_applicable(exp: &Experiment, adapter: &Adapter) -> Option<String> {
    if adapter.driver == Driver::Kubernetes {
        if let Some(r) = not_applicable_faults(exp, adapter) {
            return Some(r);
        }
        return Some(kubernetes_unreachable());
    }
    not_applicable_faults(exp, adapter)
}

fn not_applicable_faults(exp: &Experiment, adapter: &Adapter) -> Option<String> {
    for op in &exp.operations {
        let target = op.target.as_ref().map(|t| t.value.as_str());
        let is_workload = target.is_some_and(|t| exp.workloads.iter().any(|w| w.name.value == t));
        match Fault::from_name(&op.uses) {
            Some(f) => {
                let Some(t) = target else { continue };
                if is_workload {
                    continue;
                }
                match adapter.targets.iter().find(|x| x.name.value == t) {
                    None => {
                        return Some(format!(
                            "operation {} targets {t}, which adapter {} does not have",
                            op.name.value, adapter.name
                        ))
                    }
                    Some(x) => {
                        if let Some(faults) = &x.faults {
                            if !faults.contains(&f) {
                                return Some(format!(
                                    "operation {} uses {} on {t}, which adapter {} does not support for that target",
                                    op.name.value,
                                    f.name(),
                                    adapter.name
                                ));
                            }
                        }
                    }
                }
            }
            None => {
                if !adapter.operations.iter().any(|o| o.name == op.uses.value) {
                    return Some(format!(
                        "operation {} uses {}, which adapter {} does not define",
                        op.name.value, op.uses.value, adapter.name
                    ));
                }
                if let Some(t) = target {
                    if !is_workload && !adapter.targets.iter().any(|x| x.name.value == t) {
                        return Some(format!(
                            "operation {} targets {t}, which adapter {} does not have",
                            op.name.value, adapter.name
                        ));
                    }
                }
            }
        }
    }
    fn signals(n: &FlowNode, out: &mut Vec<String>) {
        match &n.kind {
            FlowKind::Wait(w) => {
                if let Some(s) = &w.signal {
                    out.push(s.value.clone());
                }
            }
            FlowKind::Serial(v) | FlowKind::Parallel(v) => v.iter().for_each(|c| signals(c, out)),
            FlowKind::Repeat { body, .. } => signals(body, out),
            FlowKind::Random(r) => r.from.iter().for_each(|c| signals(c, out)),
            FlowKind::Schedule(sc) => sc.from.iter().for_each(|w| signals(&w.node, out)),
            _ => {}
        }
    }
    let mut sigs = vec![];
    if let Some(f) = &exp.flow {
        signals(f, &mut sigs);
    }
    for s in sigs {
        if !adapter.signals.iter().any(|x| x.name == s) {
            return Some(format!("the flow waits for signal {s}, which adapter {} does not define", adapter.name));
        }
    }
    None
}

/// Runs the adapter's then the experiment's preflight checks.
pub fn run_preflight(
    exp: &Experiment,
    adapter: &Adapter,
    env: &BTreeMap<String, String>,
    cwd: &Path,
    mut on_result: impl FnMut(&CheckResult),
) -> Vec<CheckResult> {
    let mut out = Vec::new();
    if adapter.driver == Driver::Docker {
        for r in docker_preflight(adapter, None) {
            on_result(&r);
            out.push(r);
        }
        if out.iter().any(|r| !r.passed) {
            return out;
        }
    }
    for c in adapter.preflight.iter().chain(exp.preflight.iter()) {
        let timeout = c.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(30));
        let (passed, details) = match proc::run_hook(&c.run, env, cwd, timeout, None) {
            Ok(o) if o.ok() => (true, vec![]),
            Ok(o) => {
                let mut d: Vec<String> =
                    o.output.lines().rev().take(10).map(str::to_string).collect::<Vec<_>>().into_iter().rev().collect();
                d.push(o.describe());
                (false, d)
            }
            Err(e) => (false, vec![format!("could not run: {e}")]),
        };
        let id = format!("preflight/{}", c.name);
        let r = CheckResult::new("preflight", id.clone(), id, passed, details);
        on_result(&r);
        out.push(r);
    }
    out
}

/// The docker driver's own preflight: the engine answers, and every target's image is present locally (this
/// harness never pulls); an image referred to by a tag only passes with a warning.
pub fn docker_preflight(adapter: &Adapter, engine: Option<&docker::Engine>) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let connected;
    let eng = match engine {
        Some(e) => e,
        None => match docker::Engine::connect() {
            Ok(e) => {
                connected = e;
                &connected
            }
            Err(e) => {
                out.push(CheckResult::new(
                    "preflight",
                    "preflight/docker-engine".into(),
                    "preflight/docker-engine".into(),
                    false,
                    vec![e.to_string()],
                ));
                return out;
            }
        },
    };
    let version = eng.version().map(|v| v["version"].as_str().unwrap_or("?").to_string());
    out.push(CheckResult::new(
        "preflight",
        "preflight/docker-engine".into(),
        "preflight/docker-engine".into(),
        version.is_ok(),
        vec![match version {
            Ok(v) => format!("Docker {v}"),
            Err(e) => e.to_string(),
        }],
    ));
    for t in &adapter.targets {
        let Some(ct) = &t.container else { continue };
        let id = format!("preflight/image-{}", t.name.value);
        let r = match eng.image(&ct.image.value) {
            Ok((image_id, _)) => {
                let mut details = vec![format!("{} is {image_id}", ct.image.value)];
                if !docker::pinned(&ct.image.value) {
                    details.push(format!(
                        "warning: image {} of target {} is referred to by a tag only; the manifest pins {image_id}",
                        ct.image.value, t.name.value
                    ));
                }
                CheckResult::new("preflight", id.clone(), id, true, details)
            }
            Err(e) => CheckResult::new(
                "preflight",
                id.clone(),
                id,
                false,
                vec![format!("image {} is not present locally (this harness never pulls): {e}", ct.image.value)],
            ),
        };
        out.push(r);
    }
    out
}

/// Why no Kubernetes cluster can be used, for the `kubernetes` driver's n/a.
pub fn kubernetes_unreachable() -> String {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let kubeconfig =
        std::env::var_os("KUBECONFIG").map(|v| std::env::split_paths(&v).any(|p| p.is_file())).unwrap_or(false)
            || std::env::var_os("HOME").is_some_and(|h| Path::new(&h).join(".kube/config").is_file());
    if !in_cluster && !kubeconfig {
        "no Kubernetes cluster is reachable: no kubeconfig (KUBECONFIG unset or missing, no ~/.kube/config) and not running inside a cluster (KUBERNETES_SERVICE_HOST unset); the adapter was loaded and validated, nothing was run".into()
    } else {
        "a Kubernetes configuration exists, but this harness's kubernetes driver only loads and validates adapters: it does not drive a cluster yet, so nothing was run".into()
    }
}

/// The adapter checks after the flow and its undo (`docker`: the engine of the docker driver).
pub fn adapter_checks(ctx: &Ctx, docker: Option<&docker::Engine>) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let groups: Vec<i32> = ctx.groups.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let leaked = |groups: &[i32]| -> Vec<proc::ProcInfo> {
        groups.iter().flat_map(|g| proc::group_members(*g)).filter(|p| p.state != 'Z' && p.state != 'X').collect()
    };
    let ok = proc::poll_until(
        ctx.budget(Duration::from_secs(5)).max(Duration::from_millis(200)),
        Duration::from_millis(10),
        || leaked(&groups).is_empty(),
    );
    let details = if ok {
        vec![]
    } else {
        leaked(&groups).iter().map(|p| format!("pid {} ({}) in group {}", p.pid, p.comm, p.pgid)).collect()
    };
    out.push(CheckResult::new(
        "adapter",
        "adapter/no-leaked-processes".into(),
        "adapter/no-leaked-processes".into(),
        ok,
        details,
    ));

    let mut watched: Vec<i32> = groups.clone();
    for t in ctx.targets.values() {
        if let Some((pid, _)) = t.pid() {
            watched.push(pid);
        }
    }
    let frozen = |groups: &[i32]| -> Vec<proc::ProcInfo> {
        groups.iter().flat_map(|g| proc::group_members(*g)).filter(|p| p.state == 'T' || p.state == 't').collect()
    };
    let ok =
        proc::poll_until(ctx.budget(Duration::from_secs(5)), Duration::from_millis(10), || frozen(&watched).is_empty());
    let details = if ok {
        vec![]
    } else {
        frozen(&watched).iter().map(|p| format!("pid {} ({}) is stopped", p.pid, p.comm)).collect()
    };
    out.push(CheckResult::new(
        "adapter",
        "adapter/nothing-frozen".into(),
        "adapter/nothing-frozen".into(),
        ok,
        details,
    ));

    if let Some(eng) = docker {
        let containers: Vec<(String, String)> =
            ctx.targets.values().filter_map(|t| t.container().map(|c| (t.spec.name.value.clone(), c))).collect();
        let paused = || -> Vec<String> {
            containers
                .iter()
                .filter(|(_, c)| eng.state(c).is_ok_and(|s| s.paused))
                .map(|(n, _)| format!("{n} is paused"))
                .collect()
        };
        let ok =
            proc::poll_until(ctx.budget(Duration::from_secs(5)), Duration::from_millis(10), || paused().is_empty());
        out.push(CheckResult::new(
            "adapter",
            "adapter/nothing-paused".into(),
            "adapter/nothing-paused".into(),
            ok,
            if ok { vec![] } else { paused() },
        ));
    }
    if !ctx.targets.is_empty() {
        let mut details = Vec::new();
        let mut all = true;
        for t in ctx.targets.values() {
            let env = ctx.target_env(t);
            let running = t.running();
            let healthy = running
                && match &t.spec.health {
                    None => true,
                    Some(h) => {
                        let timeout = ctx.budget(h.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(30)));
                        let interval = h.interval.map(|d| d.0).unwrap_or(Duration::from_millis(50));
                        proc::poll_until(timeout, interval, || {
                            proc::run_hook(&h.run, &env, &ctx.run_dir, ctx.budget(Duration::from_secs(5)), None)
                                .is_ok_and(|o| o.ok())
                        })
                    }
                };
            if !healthy {
                all = false;
                details.push(format!("{} is {}", t.spec.name, if running { "not healthy" } else { "not running" }));
            }
        }
        out.push(CheckResult::new(
            "adapter",
            "adapter/targets-healthy".into(),
            "adapter/targets-healthy".into(),
            all,
            details,
        ));
    }
    for c in &ctx.adapter.checks {
        let timeout = ctx.budget(c.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(10)));
        let interval = c.interval.map(|d| d.0).unwrap_or(Duration::from_millis(50));
        let mut last = String::new();
        let ok = proc::poll_until(timeout, interval, || {
            match proc::run_hook(&c.run, &ctx.env, &ctx.run_dir, ctx.budget(timeout), None) {
                Ok(o) if o.ok() => true,
                Ok(o) => {
                    last = format!("{} {}", o.output.trim(), o.describe());
                    false
                }
                Err(e) => {
                    last = e.to_string();
                    false
                }
            }
        });
        let id = format!("adapter/{}", c.name);
        out.push(CheckResult::new("adapter", id.clone(), id, ok, if ok { vec![] } else { vec![last] }));
    }
    for r in &out {
        ctx.emit(finished("adapter", r));
    }
    out
}

/// The `check.finished` event of a harness check.
pub fn finished(scope: &str, r: &CheckResult) -> Event {
    Event::CheckFinished { scope: scope.into(), check: r.id.clone(), ok: r.passed, outcome: None }
}

/// After every container was removed: none of this run's is left.
pub fn no_leaked_containers(ctx: &Ctx, eng: &docker::Engine) -> CheckResult {
    let leaked = || match eng.list(docker::RUN_LABEL, &ctx.run_id) {
        Ok(v) => v,
        // The engine did not answer: the check cannot pass, and says why.
        Err(e) => vec![(String::new(), "?".to_string(), format!("unknown (docker ps: {e})"))],
    };
    let ok = proc::poll_until(ctx.budget(Duration::from_secs(5)), Duration::from_millis(20), || leaked().is_empty());
    let details: Vec<String> = if ok {
        vec![]
    } else {
        leaked().iter().map(|(id, name, st)| format!("{name} ({}) is {st}", &id[..12.min(id.len())])).collect()
    };
    let id = "adapter/no-leaked-containers".to_string();
    CheckResult::new("adapter", id.clone(), id, ok, details)
}
