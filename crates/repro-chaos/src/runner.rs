//! `repro chaos run`: the run directory, the wiring of one run (driver, engine, observers, signal guard,
//! checks) and its phases: preflight, targets, flow, undo, cleanup, checks, evaluation, verdict. The flow's
//! semantics are in [`crate::flow`], what its leaves do in [`crate::engine`] and its neighbours, the system
//! under test behind [`crate::driver::Driver`].
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use repro_model::timeline::Event;
use serde_json::{json, Value};

use crate::checks::{self, finished};
use crate::common::{base_vars, with_adapter_env, Rng, INTERRUPTED_MARKER, SCHEDULE_FILE};
use crate::docker;
use crate::docker_driver::DockerDriver;
use crate::driver::TargetRt;
use crate::engine::observers;
use crate::engine::{Ctx, CtxParts};
use crate::error::{ChaosError, Result};
use crate::evaluate::{self, CheckResult, Evaluation, RunData, INCOMPLETE_MARKER};
use crate::flow::{signal_name, RealClock};
use crate::fsutil::{self, mkdirs, write_atomic, write_json_atomic, write_json_durable};
use crate::limits::Limits;
use crate::load::{LoadedAdapter, LoadedExperiment};
use crate::proc;
use crate::process_driver::ProcessDriver;
use crate::signals::SignalGuard;
use crate::timeline::Timeline;

pub use crate::checks::{docker_preflight, kubernetes_unreachable, not_applicable, run_preflight};

/// Options of `repro chaos run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub seed: Option<u64>,
    /// Where runs go: `<state_dir>/<experiment>/<run-id>/` (default `.repro/chaos`).
    pub state_dir: Option<PathBuf>,
    /// Echo timeline events to stderr.
    pub echo: bool,
    /// What the experiment may ask for; the flow's steps are also counted against `limits.steps` while it runs.
    pub limits: Limits,
    /// `CHAOS_EXPERIMENT_DIR` and `CHAOS_ADAPTER_DIR` instead of the files' own directories (a replay: the
    /// copies in the original run directory's `inputs/`).
    pub experiment_dir: Option<PathBuf>,
    pub adapter_dir: Option<PathBuf>,
    /// The run directory this run replays (recorded in the manifest).
    pub replay_of: Option<PathBuf>,
    /// This program, to start `<exe> __chaos-reap` beside the run (see [`crate::reaper`]); None: no reaper.
    pub reaper: Option<PathBuf>,
}

pub struct RunOutcome {
    pub run_dir: PathBuf,
    pub evaluation: Evaluation,
    /// The signal (SIGINT 2, SIGTERM 15) that interrupted the run, if one did: the run directory holds
    /// `INTERRUPTED`, the verdict is ERROR, and `repro chaos run` exits 128 + the signal.
    pub interrupted: Option<i32>,
}

fn git_sha(dir: &Path) -> Option<String> {
    let o = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

// ------------------------------------------------------------------ the run

fn run_id() -> String {
    let now = fsutil::now();
    let nanos = u64::from(now.nanosecond()) ^ u64::from(std::process::id()).wrapping_mul(0x9E37_79B9);
    let mut rng = Rng::new(nanos);
    format!("{}-{:04x}", fsutil::compact_stamp(now), rng.next_u64() & 0xffff)
}

/// Runs an experiment on an adapter and returns the run directory and its evaluation.
pub fn run(exp: &LoadedExperiment, adapter: &LoadedAdapter, opts: &RunOptions) -> Result<RunOutcome> {
    let e = &exp.experiment;
    let seed = opts.seed.unwrap_or_else(|| {
        let n = fsutil::now();
        Rng::new(u64::from(n.nanosecond()) ^ (n.unix_timestamp() as u64)).next_u64() % 1_000_000
    });
    let state_dir = opts.state_dir.clone().unwrap_or_else(|| PathBuf::from(".repro/chaos"));
    let id = run_id();
    let run_dir = state_dir.join(&e.id.value).join(&id);
    mkdirs(&run_dir)?;
    let run_dir = std::fs::canonicalize(&run_dir).map_err(|err| ChaosError::io(&run_dir, err))?;
    write_atomic(
        &run_dir.join(INCOMPLETE_MARKER),
        b"The harness has not finished this run (or was killed): there is no verdict.\n",
    )?;
    for d in ["logs", "system/metrics", "system/watch", "system/targets", "workloads", "evaluations"] {
        mkdirs(&run_dir.join(d))?;
    }
    write_atomic(&run_dir.join("experiment.yaml"), exp.text.as_bytes())?;
    write_atomic(&run_dir.join("adapter.yaml"), adapter.text.as_bytes())?;
    let scratch = std::env::temp_dir().join(format!("repro-chaos-{id}"));
    mkdirs(&scratch)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o755))
            .map_err(|err| ChaosError::io(&scratch, err))?;
    }
    let dirs = (opts.experiment_dir.as_deref(), opts.adapter_dir.as_deref());
    let mut raw = base_vars(exp, adapter, &id, &run_dir, seed, &scratch, dirs)
        .map_err(|err| ChaosError::Harness(format!("picking ports: {err}")))?;
    if adapter.adapter.driver == crate::model::Driver::Docker {
        // Workloads and checks reach a target's container by name (docker exec, docker logs).
        for t in &adapter.adapter.targets {
            let key = format!("CHAOS_CONTAINER_{}", t.name.value.to_ascii_uppercase().replace(['-', '.'], "_"));
            raw.insert(key, crate::engine::targets::container_name(&id, &t.name.value));
        }
    }
    // The proxies start before the targets: an upstream is only an address until its server listens.
    let net = crate::engine::network::Network::start(&adapter.adapter, seed, &mut raw)?;
    let env = with_adapter_env(&adapter.adapter, raw.clone());
    let inputs = copy_run_inputs(exp, adapter, &run_dir, &env)?;
    let tl = Timeline::create(&run_dir, opts.echo)?;
    let is_docker = adapter.adapter.driver == crate::model::Driver::Docker;
    let reaper = match &opts.reaper {
        Some(exe) => Some(
            crate::reaper::Reaper::start(exe, &run_dir, &id, &scratch, is_docker)
                .map_err(|err| ChaosError::Harness(format!("starting the reaper {}: {err}", exe.display())))?,
        ),
        None => None,
    };
    let (docker, docker_error) = if adapter.adapter.driver == crate::model::Driver::Docker {
        match docker::Engine::connect() {
            Ok(e) => (Some(e), None),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };
    let driver: Box<dyn crate::driver::Driver> = match &docker {
        Some(eng) => {
            Box::new(DockerDriver { engine: eng.clone(), instance: adapter.adapter.instance.container.clone() })
        }
        None => Box::new(ProcessDriver),
    };
    for t in &adapter.adapter.targets {
        mkdirs(&run_dir.join("system/targets").join(&t.name.value))?;
    }
    let ctx = Ctx::new(CtxParts {
        exp: e.clone(),
        adapter: adapter.adapter.clone(),
        run_dir: run_dir.clone(),
        run_id: id.clone(),
        seed,
        tl,
        clock: Box::new(RealClock::default()),
        driver,
        env,
        env_raw: raw,
        net,
        limits: opts.limits,
    });
    let guard = SignalGuard::install(&ctx);

    ctx.emit(Event::RunStarted {
        run: id.clone(),
        experiment: e.id.value.clone(),
        version: e.version,
        seed,
        adapter: adapter.adapter.name.clone(),
        dir: run_dir.clone(),
    });
    write_manifest(&ctx, exp, adapter, &id, docker.as_ref(), &inputs, opts.replay_of.as_deref())?;

    if let Err(err) = drive(&ctx, docker.as_ref(), docker_error) {
        ctx.harness_error(&err.to_string());
    }
    // The targets are stopped: the proxies' records, then the proxies.
    if let Err(err) = ctx.finish_network() {
        ctx.harness_error(&format!("netproxy records: {err}"));
    }
    if let Err(err) = std::fs::remove_dir_all(&scratch) {
        ctx.emit(Event::HarnessWarning {
            target: None,
            instance: None,
            detail: format!("{}: could not remove the scratch directory: {err}", scratch.display()),
        });
    }

    // After a signal the timeline holds a harness.error, so this evaluation runs no check (it is quick).
    let data = RunData::read_with(&run_dir, None, &opts.limits)?;
    let schedule = crate::schedule::from_timeline(seed, &data.timeline);
    let v = serde_json::to_value(&schedule).map_err(|err| ChaosError::Harness(err.to_string()))?;
    write_json_atomic(&run_dir.join(SCHEDULE_FILE), &v)?;
    let evaluation = evaluate::evaluate(&data, true);
    for c in &evaluation.checks {
        if c.scope == "workload" || c.scope == "experiment" {
            ctx.emit(Event::CheckFinished {
                scope: c.scope.clone(),
                check: c.id.clone(),
                ok: c.passed,
                outcome: serde_json::to_value(c.outcome).ok(),
            });
        }
    }
    let mut finished = ctx.finished.lock().unwrap_or_else(|err| err.into_inner());
    let interrupted = ctx.flow.interrupt.signal();
    if let Some(sig) = interrupted {
        // Marked before the verdict is written: the directory never looks like a run that completed.
        let text = format!(
            "interrupted by {}: the flow was cancelled, the undo ran (see operation.undo in timeline.jsonl) and \
             every instance and target was stopped; no check of the experiment was evaluated\n",
            signal_name(sig)
        );
        write_atomic(&run_dir.join(INTERRUPTED_MARKER), text.as_bytes())?;
    }
    ctx.emit(Event::RunFinished {
        verdict: evaluation.verdict.as_str().to_string(),
        reason: evaluation.reason.clone(),
        interrupted: interrupted.map(|s| signal_name(s).to_string()),
    });
    // Evidence that did not reach the disk: no verdict is written (the run stays INCOMPLETE).
    if let Err(err) = ctx.tl.sync() {
        *finished = true;
        return Err(err);
    }
    let v = serde_json::to_value(&evaluation).map_err(|err| ChaosError::Harness(err.to_string()))?;
    write_json_durable(&run_dir.join("verdict.json"), &v)?;
    std::fs::remove_file(run_dir.join(INCOMPLETE_MARKER)).map_err(|err| ChaosError::io(&run_dir, err))?;
    *finished = true;
    drop(finished);
    drop(guard);
    if let Some(r) = reaper {
        r.finish();
    }
    Ok(RunOutcome { run_dir, evaluation, interrupted })
}

fn write_manifest(
    ctx: &Ctx,
    exp: &LoadedExperiment,
    adapter: &LoadedAdapter,
    id: &str,
    docker: Option<&docker::Engine>,
    inputs: &[crate::inputs::InputFile],
    replay_of: Option<&Path>,
) -> Result<()> {
    let mut systems = serde_json::Map::new();
    for t in &adapter.adapter.targets {
        if let Some(v) = &t.version {
            // A target hook: it sees its own proxied ports as their listen ports.
            let env = ctx.targets.get(&t.name.value).map_or_else(|| ctx.env.clone(), |rt| ctx.target_env(rt));
            let out = proc::run_hook(v, &env, &ctx.run_dir, Duration::from_secs(10), None)
                .map(|o| o.output.trim().to_string())
                .unwrap_or_else(|err| format!("unknown: {err}"));
            systems.insert(t.name.value.clone(), json!(out));
        }
    }
    let bash = proc::run_hook("echo \"$BASH_VERSION\"", &BTreeMap::new(), &ctx.run_dir, Duration::from_secs(5), None)
        .map(|o| o.output.trim().to_string())
        .unwrap_or_else(|err| format!("unknown: {err}"));
    systems.insert("bash".into(), json!(bash));
    systems.insert(
        "kernel".into(),
        json!(std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|err| format!("unknown: {err}"), |k| k.trim().to_string())),
    );
    let exp_dir = exp.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut docker_info = Value::Null;
    let mut images = serde_json::Map::new();
    if let Some(eng) = docker {
        docker_info = eng.version().unwrap_or_else(|e| json!({"error": e.to_string()}));
        for t in &adapter.adapter.targets {
            let Some(ct) = &t.container else { continue };
            let v = match eng.image(&ct.image.value) {
                Ok((id, digests)) => {
                    json!({"ref": ct.image.value, "id": id, "repo_digests": digests, "pinned": docker::pinned(&ct.image.value)})
                }
                Err(e) => json!({"ref": ct.image.value, "error": e.to_string()}),
            };
            images.insert(t.name.value.clone(), v);
        }
    }
    let manifest = json!({
        "run": id,
        "experiment": {"id": exp.experiment.id.value, "version": exp.experiment.version, "path": exp.path, "sha256": fsutil::sha256_hex(exp.text.as_bytes())},
        "adapter": {"name": adapter.adapter.name, "path": adapter.path, "sha256": fsutil::sha256_hex(adapter.text.as_bytes())},
        "repro_version": env!("CARGO_PKG_VERSION"),
        "git_sha": git_sha(exp_dir),
        "seed": ctx.seed,
        "started": fsutil::rfc3339(ctx.tl.start_wall()),
        "ports": ctx.env.iter().filter(|(k, _)| k.starts_with("CHAOS_PORT_") || k.starts_with("CHAOS_LISTEN_PORT_")).map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "netproxy": ctx.net.manifest(),
        "systems": systems,
        "inputs": inputs,
    });
    let mut manifest = manifest;
    if let Some(r) = replay_of {
        manifest["replay_of"] = json!(r);
    }
    if docker.is_some() {
        manifest["docker"] = docker_info;
        manifest["images"] = Value::Object(images);
    }
    write_json_atomic(&ctx.run_dir.join("manifest.json"), &manifest)
}

/// Runs the steady-state probes of one phase into `out`; false if one was out of tolerance before the flow (the
/// run is then ERROR: a harness error says which probe and why).
fn probe_steady_state(ctx: &Ctx, phase: &str, out: &mut Vec<crate::steady::Probed>) -> bool {
    let env = ctx.hook_env(&[("CHAOS_STEADY_STATE_PHASE", phase.to_string())]);
    let mut steady = true;
    for p in &ctx.exp.steady_state {
        if ctx.flow.is_cancelled() {
            break;
        }
        let r = crate::steady::run_probe(p, phase, &env, &ctx.run_dir, Some(&ctx.flow.cancel));
        ctx.emit(Event::SteadyStateProbed {
            phase: phase.to_string(),
            probe: p.name.value.clone(),
            ok: r.result.passed,
            detail: r.result.details.first().cloned(),
        });
        if !r.result.passed && phase == "before" && steady {
            steady = false;
            ctx.harness_error(&format!(
                "the system was not in steady state before the experiment: {}: {}",
                r.result.id,
                r.result.details.first().map_or("out of tolerance", String::as_str)
            ));
        }
        out.push(r);
    }
    steady
}

/// Copies the files the experiment and the adapter use into `RUN/inputs/` (see [`crate::inputs`]).
fn copy_run_inputs(
    exp: &LoadedExperiment,
    adapter: &LoadedAdapter,
    run_dir: &Path,
    env: &BTreeMap<String, String>,
) -> Result<Vec<crate::inputs::InputFile>> {
    use crate::inputs::{copy_inputs, Side};
    let exp_dir = PathBuf::from(env.get("CHAOS_EXPERIMENT_DIR").cloned().unwrap_or_default());
    let adapter_dir = PathBuf::from(env.get("CHAOS_ADAPTER_DIR").cloned().unwrap_or_default());
    let declared = |v: &[crate::model::At<String>]| v.iter().map(|f| (f.value.clone(), f.line, f.column)).collect();
    let mut sides = vec![Side {
        side: "experiment",
        dir: &exp_dir,
        file: &exp.path,
        declared: declared(&exp.experiment.files),
        text: &exp.text,
    }];
    // The built-in process adapter is no file: it has no directory of its own.
    if adapter.path.is_file() || !adapter.adapter.files.is_empty() {
        sides.push(Side {
            side: "adapter",
            dir: &adapter_dir,
            file: &adapter.path,
            declared: declared(&adapter.adapter.files),
            text: &adapter.text,
        });
    }
    copy_inputs(run_dir, &sides)
}

/// Everything between the start and the evaluation. Errors here are harness errors.
fn drive(ctx: &Arc<Ctx>, docker: Option<&docker::Engine>, docker_error: Option<String>) -> Result<()> {
    let run_dir = &ctx.run_dir;
    if let Some(reason) = not_applicable(&ctx.exp, &ctx.adapter) {
        ctx.emit(Event::RunNotApplicable { reason });
        write_json_atomic(&run_dir.join("system/preflight.json"), &json!([]))?;
        return Ok(());
    }
    let pre = if let Some(err) = docker_error {
        let id = "preflight/docker-engine".to_string();
        let r = CheckResult::new("preflight", id.clone(), id, false, vec![err]);
        ctx.emit(finished("preflight", &r));
        vec![r]
    } else {
        run_preflight(&ctx.exp, &ctx.adapter, &ctx.env, run_dir, |r| {
            ctx.emit(finished("preflight", r));
            for w in r.details.iter().filter(|d| d.starts_with("warning:")) {
                let detail = w.trim_start_matches("warning: ").to_string();
                ctx.emit(Event::PreflightWarning { check: r.id.clone(), detail });
            }
        })
    };
    let v = serde_json::to_value(&pre).map_err(|err| ChaosError::Harness(err.to_string()))?;
    write_json_atomic(&run_dir.join("system/preflight.json"), &v)?;
    if pre.iter().any(|r| !r.passed) {
        ctx.emit(Event::FlowSkipped { reason: "a preflight check failed".into() });
        return Ok(());
    }

    if let Some(eng) = docker {
        observers::start_docker_events(ctx, eng);
    }
    let started_targets = start_targets(ctx);
    let observers = if ctx.flow.is_cancelled() { None } else { Some(observers::start(ctx)) };
    let mut steady = Vec::new();
    let steady_before = ctx.flow.is_cancelled() || probe_steady_state(ctx, "before", &mut steady);
    if !ctx.flow.is_cancelled() && steady_before {
        if let Some(flow) = &ctx.exp.flow {
            ctx.flow.run(&**ctx, flow, ctx.exp.timeout.0);
        }
    }
    ctx.undo_all();
    ctx.stop_remaining_instances();
    if steady_before && !ctx.flow.is_cancelled() {
        probe_steady_state(ctx, "after", &mut steady);
    }
    if !ctx.exp.steady_state.is_empty() {
        let v = serde_json::to_value(&steady).map_err(|err| ChaosError::Harness(err.to_string()))?;
        write_json_atomic(&run_dir.join(crate::steady::STEADY_FILE), &v)?;
    }
    if let Some(o) = observers {
        observers::stop(ctx, o);
    }
    if !started_targets.is_empty() || ctx.targets.is_empty() {
        let checks = checks::adapter_checks(ctx, docker);
        let v = serde_json::to_value(&checks).map_err(|err| ChaosError::Harness(err.to_string()))?;
        write_json_atomic(&run_dir.join("system/adapter-checks.json"), &v)?;
    }
    for t in started_targets.iter().rev() {
        ctx.stop_target(t, "run ended");
    }
    ctx.reap_target_events();
    if let Some(eng) = docker {
        let r = checks::no_leaked_containers(ctx, eng);
        ctx.emit(finished("adapter", &r));
        let path = run_dir.join("system/adapter-checks.json");
        let mut checks: Vec<CheckResult> = match std::fs::read_to_string(&path) {
            Ok(t) => {
                serde_json::from_str(&t).map_err(|err| ChaosError::Harness(format!("{}: {err}", path.display())))?
            }
            // Not written: no target started, so there were no adapter checks before this one.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(err) => return Err(ChaosError::io(&path, err)),
        };
        checks.push(r);
        let v = serde_json::to_value(&checks).map_err(|err| ChaosError::Harness(err.to_string()))?;
        write_json_atomic(&path, &v)?;
    }
    observers::stop_docker_events(ctx);
    Ok(())
}

/// Targets, in the adapter's order (a later one, an exporter, may need an earlier one, its server): setup
/// once, then start and wait until healthy. The ones started, to stop at the end.
pub fn start_targets(ctx: &Ctx) -> Vec<Arc<TargetRt>> {
    let mut started_targets: Vec<Arc<TargetRt>> = Vec::new();
    let ordered: Vec<Arc<TargetRt>> =
        ctx.adapter.targets.iter().filter_map(|t| ctx.targets.get(&t.name.value)).cloned().collect();
    for t in &ordered {
        if ctx.flow.is_cancelled() {
            break;
        }
        if let Some(setup) = &t.spec.setup {
            let env = ctx.target_env(t);
            match proc::run_hook(setup, &env, &ctx.run_dir, Duration::from_secs(120), Some(&ctx.flow.cancel)) {
                Ok(o) if o.ok() => {
                    let log = ctx.run_dir.join("logs").join(format!("{}-setup.log", t.spec.name));
                    if let Err(err) = std::fs::write(&log, &o.output) {
                        ctx.harness_error(&format!("target {}: {}: {err}", t.spec.name, log.display()));
                        break;
                    }
                }
                Ok(o) => {
                    ctx.harness_error(&format!(
                        "target {}: setup hook failed: {}: {}",
                        t.spec.name,
                        o.describe(),
                        o.output.trim()
                    ));
                    break;
                }
                Err(err) => {
                    ctx.harness_error(&format!("target {}: setup hook could not run: {err}", t.spec.name));
                    break;
                }
            }
        }
        started_targets.push(Arc::clone(t));
        match ctx.start_target(t, "run", None) {
            Ok(true) => {}
            Ok(false) => {
                ctx.harness_error(&format!("target {} did not become healthy", t.spec.name));
                break;
            }
            Err(err) => {
                ctx.harness_error(&err.to_string());
                break;
            }
        }
    }
    started_targets
}
