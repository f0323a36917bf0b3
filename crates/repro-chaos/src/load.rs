//! Reading experiments and adapters from YAML, with errors that name file, line, column and field.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::error::{ChaosError, Result};
use crate::limits::{with_parse_limits, Limits};
use crate::model::*;

/// Parses YAML text into `T`, mapping every error to file, line, column, field path and message.
pub fn parse_yaml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    let mut field = String::new();
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let res =
        serde_saphyr::with_deserializer_from_str_with_options(
            text,
            options,
            |de| match serde_path_to_error::deserialize::<_, T>(de) {
                Ok(v) => Ok(v),
                Err(e) => {
                    field = e.path().to_string();
                    Err(e.into_inner())
                }
            },
        );
    res.map_err(|e| {
        let (line, column) = e.location().map(|l| (l.line(), l.column())).unwrap_or((0, 0));
        let message = clean_message(&e.to_string());
        let field = field_path(&field, &message);
        ChaosError::Yaml { path: path.to_path_buf(), line, column, field, message }
    })
}

/// The dotted field path of an error: serde-saphyr's span wrappers add `.value` segments, which are
/// dropped; a missing field is named after its parent.
fn field_path(raw: &str, message: &str) -> String {
    let mut p = raw.to_string();
    let keep_tail = regex::Regex::new(r"checks\[\d+\]\.value$").expect("static regex");
    let tail = if keep_tail.is_match(&p) {
        p.truncate(p.len() - ".value".len());
        ".value"
    } else {
        ""
    };
    p = p.replace(".value.", ".").replace(".value[", "[");
    if let Some(stripped) = p.strip_suffix(".value") {
        p = stripped.to_string();
    }
    if p == "." {
        p.clear();
    }
    p.push_str(tail);
    let missing = regex::Regex::new(r"missing field `([^`]+)`").expect("static regex");
    if let Some(c) = missing.captures(message) {
        if p.is_empty() {
            p = c[1].to_string();
        } else {
            p = format!("{p}.{}", &c[1]);
        }
    }
    if p.is_empty() {
        "(document)".to_string()
    } else {
        p
    }
}

/// serde-saphyr appends " at line X column Y" to some messages; the location is reported separately.
fn clean_message(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or(msg).trim();
    let re = regex::Regex::new(r"\s*(at )?line \d+,? column \d+\s*$").expect("static regex");
    let out = re.replace(first, "").to_string();
    let out = out.trim_start_matches("error: ").to_string();
    if out.is_empty() {
        msg.trim().to_string()
    } else {
        out
    }
}

fn invalid<T>(path: &Path, line: u64, column: u64, field: impl Into<String>, msg: impl Into<String>) -> Result<T> {
    Err(ChaosError::Invalid { path: path.to_path_buf(), line, column, field: field.into(), message: msg.into() })
}

/// Reads a YAML file, refusing one larger than the limit before reading it.
fn read(path: &Path, limits: &Limits) -> Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| ChaosError::io(path, e))?;
    let mut text = String::new();
    let read = f.take(limits.file_bytes.saturating_add(1)).read_to_string(&mut text);
    read.map_err(|e| ChaosError::io(path, e))?;
    if text.len() as u64 > limits.file_bytes {
        return invalid(path, 1, 1, "(document)", Limits::exceeded("the file's size", limits.file_bytes, "bytes"));
    }
    Ok(text)
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !s.starts_with('.')
}

/// A loaded experiment: its text, its parsed form and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedExperiment {
    pub path: PathBuf,
    pub text: String,
    pub experiment: Experiment,
}

/// A loaded adapter.
#[derive(Debug, Clone)]
pub struct LoadedAdapter {
    pub path: PathBuf,
    pub text: String,
    pub adapter: Adapter,
}

/// Loads an experiment within the default [`Limits`].
pub fn load_experiment(path: &Path) -> Result<LoadedExperiment> {
    load_experiment_with(path, &Limits::default())
}

/// Loads an experiment and checks it against `limits` (durations, counts, flow size, file size).
pub fn load_experiment_with(path: &Path, limits: &Limits) -> Result<LoadedExperiment> {
    let text = read(path, limits)?;
    let experiment = parse_experiment_with(path, &text, limits)?;
    Ok(LoadedExperiment { path: path.to_path_buf(), text, experiment })
}

/// Loads an adapter within the default [`Limits`].
pub fn load_adapter(path: &Path) -> Result<LoadedAdapter> {
    load_adapter_with(path, &Limits::default())
}

pub fn load_adapter_with(path: &Path, limits: &Limits) -> Result<LoadedAdapter> {
    let text = read(path, limits)?;
    let adapter = parse_adapter_with(path, &text, limits)?;
    Ok(LoadedAdapter { path: path.to_path_buf(), text, adapter })
}

/// The adapter used when none is named: instances are local processes; no targets.
pub const BUILTIN_PROCESS_ADAPTER: &str = r#"apiVersion: repro.dev/chaos/v1
kind: adapter
name: process
description: Instances are local processes, each in its own process group. No targets.
driver: process
"#;

pub fn builtin_process_adapter() -> LoadedAdapter {
    let path = PathBuf::from("<builtin>/process.yaml");
    let adapter = parse_adapter(&path, BUILTIN_PROCESS_ADAPTER).expect("the built-in adapter parses");
    LoadedAdapter { path, text: BUILTIN_PROCESS_ADAPTER.to_string(), adapter }
}

/// Parses and validates an experiment within the default [`Limits`].
pub fn parse_experiment(path: &Path, text: &str) -> Result<Experiment> {
    parse_experiment_with(path, text, &Limits::default())
}

/// Parses and validates an experiment; a value over `limits` is an error at its line and column.
pub fn parse_experiment_with(path: &Path, text: &str, limits: &Limits) -> Result<Experiment> {
    let exp: Experiment = with_parse_limits(limits, || parse_yaml(path, text))?;
    validate_experiment_with(path, &exp, limits)?;
    Ok(exp)
}

/// Parses and validates an adapter within the default [`Limits`].
pub fn parse_adapter(path: &Path, text: &str) -> Result<Adapter> {
    parse_adapter_with(path, text, &Limits::default())
}

/// Parses and validates an adapter; a duration over `limits` is an error at its line and column.
pub fn parse_adapter_with(path: &Path, text: &str, limits: &Limits) -> Result<Adapter> {
    let a: Adapter = with_parse_limits(limits, || parse_yaml(path, text))?;
    if a.api_version.value != API_VERSION {
        return invalid(
            path,
            a.api_version.line,
            a.api_version.column,
            "apiVersion",
            format!("expected {API_VERSION:?}, got {:?}", a.api_version.value),
        );
    }
    if a.kind.value != "adapter" {
        return invalid(
            path,
            a.kind.line,
            a.kind.column,
            "kind",
            format!("expected \"adapter\", got {:?}", a.kind.value),
        );
    }
    let mut names = BTreeSet::new();
    for (i, t) in a.targets.iter().enumerate() {
        if !valid_name(&t.name) || !names.insert(t.name.value.clone()) {
            return invalid(
                path,
                t.name.line,
                t.name.column,
                format!("targets[{i}].name"),
                format!("expected a unique name of letters, digits, '-', '_' or '.', got {:?}", t.name.value),
            );
        }
    }
    let port_names: BTreeSet<&str> = a.ports.iter().map(|p| p.value.as_str()).collect();
    if let Some(ic) = &a.instance.container {
        if a.driver != Driver::Docker {
            return invalid(
                path,
                ic.image.line,
                ic.image.column,
                "instance.container",
                "instance containers need driver docker",
            );
        }
        if ic.image.value.trim().is_empty() {
            return invalid(
                path,
                ic.image.line,
                ic.image.column,
                "instance.container.image",
                "expected an image reference",
            );
        }
    }
    for (i, t) in a.targets.iter().enumerate() {
        let (l, c) = (t.name.line, t.name.column);
        match a.driver {
            Driver::Process => {
                if t.start.trim().is_empty() {
                    return invalid(path, l, c, format!("targets[{i}].start"), "a process target needs a start hook");
                }
                if t.container.is_some() || t.pod.is_some() {
                    return invalid(
                        path,
                        l,
                        c,
                        format!("targets[{i}]"),
                        "container and pod need driver docker or kubernetes",
                    );
                }
            }
            Driver::Docker => {
                let Some(ct) = &t.container else {
                    return invalid(
                        path,
                        l,
                        c,
                        format!("targets[{i}].container"),
                        "a docker target needs a container (image, command, env, ports)",
                    );
                };
                if !t.start.is_empty() || t.pod.is_some() {
                    return invalid(
                        path,
                        l,
                        c,
                        format!("targets[{i}]"),
                        "a docker target has a container, not a start hook or a pod",
                    );
                }
                if ct.image.value.trim().is_empty() {
                    return invalid(
                        path,
                        ct.image.line,
                        ct.image.column,
                        format!("targets[{i}].container.image"),
                        "expected an image reference",
                    );
                }
                for (name, port) in &ct.ports {
                    if !port_names.contains(name.as_str()) {
                        return invalid(
                            path,
                            port.line,
                            port.column,
                            format!("targets[{i}].container.ports.{name}"),
                            format!(
                                "expected one of the adapter's ports ({}), got {name:?}",
                                port_names.iter().copied().collect::<Vec<_>>().join(", ")
                            ),
                        );
                    }
                }
            }
            Driver::Kubernetes => {
                let Some(pod) = &t.pod else {
                    return invalid(
                        path,
                        l,
                        c,
                        format!("targets[{i}].pod"),
                        "a kubernetes target needs a pod (namespace, selector, owner)",
                    );
                };
                if !t.start.is_empty() || t.container.is_some() {
                    return invalid(
                        path,
                        l,
                        c,
                        format!("targets[{i}]"),
                        "a kubernetes target has a pod, not a start hook or a container",
                    );
                }
                let sel = &pod.selector;
                let ok = !sel.value.is_empty()
                    && sel.value.split(',').all(|kv| {
                        kv.split_once('=').is_some_and(|(k, v)| !k.trim().is_empty() && !v.trim().is_empty())
                    });
                if !ok {
                    return invalid(
                        path,
                        sel.line,
                        sel.column,
                        format!("targets[{i}].pod.selector"),
                        format!("expected a label selector such as app=redis, got {:?}", sel.value),
                    );
                }
                if let Some(o) = &pod.owner {
                    let ok = o
                        .value
                        .split_once('/')
                        .is_some_and(|(k, n)| matches!(k, "deployment" | "statefulset") && !n.is_empty());
                    if !ok {
                        return invalid(
                            path,
                            o.line,
                            o.column,
                            format!("targets[{i}].pod.owner"),
                            format!("expected deployment/<name> or statefulset/<name>, got {:?}", o.value),
                        );
                    }
                }
                let faults = t.faults.clone().unwrap_or_else(|| {
                    vec![Fault::Kill, Fault::Restart, Fault::RestartInPlace, Fault::Freeze, Fault::Outage]
                });
                if faults.contains(&Fault::Outage) && pod.owner.is_none() {
                    return invalid(path, l, c, format!("targets[{i}].pod.owner"), "the outage fault scales the owner to 0 and back: name it (deployment/<name>), or leave outage out of faults");
                }
            }
        }
    }
    let mut watchers: BTreeSet<&str> = a.observers.watchers.iter().map(|w| w.name.as_str()).collect();
    if a.driver == Driver::Docker {
        // The built-in watcher over the engine's events: lines are "<action> <target>".
        watchers.insert("docker-events");
    }
    for (i, s) in a.signals.iter().enumerate() {
        if !watchers.contains(s.watcher.as_str()) {
            return invalid(
                path,
                s.pattern.line,
                s.pattern.column,
                format!("signals[{i}].watcher"),
                format!("expected the name of a watcher, got {:?}", s.watcher),
            );
        }
        if let Err(e) = regex::Regex::new(&s.pattern) {
            return invalid(
                path,
                s.pattern.line,
                s.pattern.column,
                format!("signals[{i}].pattern"),
                format!("expected a regular expression: {e}"),
            );
        }
    }
    for (i, p) in a.ports.iter().enumerate() {
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return invalid(
                path,
                p.line,
                p.column,
                format!("ports[{i}]"),
                format!("expected a name of letters, digits and '_', got {p:?}"),
            );
        }
    }
    Ok(a)
}

/// Checks what the types cannot (references, required fields per kind, unique names) and the default [`Limits`].
pub fn validate_experiment(path: &Path, e: &Experiment) -> Result<()> {
    validate_experiment_with(path, e, &Limits::default())
}

/// Like [`validate_experiment`], with the given limits.
pub fn validate_experiment_with(path: &Path, e: &Experiment, limits: &Limits) -> Result<()> {
    if e.api_version.value != API_VERSION {
        return invalid(
            path,
            e.api_version.line,
            e.api_version.column,
            "apiVersion",
            format!("expected {API_VERSION:?}, got {:?}", e.api_version.value),
        );
    }
    if !valid_name(&e.id) {
        return invalid(
            path,
            e.id.line,
            e.id.column,
            "id",
            format!("expected a name of letters, digits, '-', '_' or '.', got {:?}", e.id.value),
        );
    }
    let mut names: BTreeSet<String> = BTreeSet::new();
    for (i, w) in e.workloads.iter().enumerate() {
        let f = format!("workloads[{i}]");
        if !valid_name(&w.name) || !names.insert(w.name.value.clone()) {
            return invalid(
                path,
                w.name.line,
                w.name.column,
                format!("{f}.name"),
                format!("expected a unique name of letters, digits, '-', '_' or '.', got {:?}", w.name.value),
            );
        }
        if w.instances == 0 {
            return invalid(path, w.name.line, w.name.column, format!("{f}.instances"), "expected at least 1 instance");
        }
        let mut check_names = BTreeSet::new();
        for (j, c) in w.checks.iter().enumerate() {
            let cf = format!("{f}.checks[{j}]");
            if !valid_name(&c.name) || !check_names.insert(c.name.value.clone()) {
                return invalid(
                    path,
                    c.name.line,
                    c.name.column,
                    format!("{cf}.name"),
                    format!("expected a unique check name, got {:?}", c.name.value),
                );
            }
            match c.kind.value {
                WorkloadCheckKind::Shell if c.run.is_none() => {
                    return invalid(
                        path,
                        c.kind.line,
                        c.kind.column,
                        format!("{cf}.run"),
                        "a shell check needs `run`, the script (exit 0 means pass)",
                    );
                }
                WorkloadCheckKind::ExitCode if c.run.is_some() => {
                    return invalid(
                        path,
                        c.kind.line,
                        c.kind.column,
                        format!("{cf}.run"),
                        "an exit-code check takes `equals`, not `run`",
                    );
                }
                _ => {}
            }
        }
    }
    for (i, o) in e.operations.iter().enumerate() {
        let f = format!("operations[{i}]");
        if !valid_name(&o.name) || !names.insert(o.name.value.clone()) {
            return invalid(
                path,
                o.name.line,
                o.name.column,
                format!("{f}.name"),
                format!("expected a name unique among workloads and operations, got {:?}", o.name.value),
            );
        }
        if let Some(fault) = Fault::from_name(&o.uses) {
            if o.target.is_none() {
                return invalid(
                    path,
                    o.uses.line,
                    o.uses.column,
                    format!("{f}.target"),
                    format!("the built-in fault {} needs a `target`: an adapter target or a workload", fault.name()),
                );
            }
            if fault == Fault::Outage && o.duration.is_none() {
                return invalid(
                    path,
                    o.uses.line,
                    o.uses.column,
                    format!("{f}.duration"),
                    format!("an outage needs `duration`: {DURATION_EXPECTED}"),
                );
            }
        }
    }
    let workloads: Vec<&str> = e.workloads.iter().map(|w| w.name.value.as_str()).collect();
    let leaves: Vec<&str> = names.iter().map(String::as_str).collect();
    if let Some(flow) = &e.flow {
        validate_flow(path, flow, &leaves, &workloads)?;
    }
    let mut check_names = BTreeSet::new();
    for (i, c) in e.checks.iter().enumerate() {
        let f = format!("checks[{i}]");
        if !valid_name(&c.name) || !check_names.insert(c.name.value.clone()) {
            return invalid(
                path,
                c.name.line,
                c.name.column,
                format!("{f}.name"),
                format!("expected a unique check name, got {:?}", c.name.value),
            );
        }
        let (l, col) = (c.kind.line, c.kind.column);
        match c.kind.value {
            CheckKind::Shell if c.run.is_none() => {
                return invalid(
                    path,
                    l,
                    col,
                    format!("{f}.run"),
                    "a shell check needs `run`, the script (exit 0 means pass)",
                );
            }
            CheckKind::Metric => {
                for (name, missing) in [
                    ("target", c.target.is_none()),
                    ("metric", c.metric.is_none()),
                    ("op", c.op.is_none()),
                    ("value", c.value.is_none()),
                ] {
                    if missing {
                        return invalid(
                            path,
                            l,
                            col,
                            format!("{f}.{name}"),
                            "a metric check needs target, metric, op and value (aggregate defaults to last)",
                        );
                    }
                }
            }
            CheckKind::Timeline if c.event.is_none() == c.order.is_empty() => {
                return invalid(
                    path,
                    l,
                    col,
                    format!("{f}.event"),
                    "a timeline check needs exactly one of `event` (with optional `where` and `happened`) or `order`",
                );
            }
            _ => {}
        }
    }
    for (i, x) in e.expectations.iter().enumerate() {
        if x.checks.is_empty() {
            return invalid(
                path,
                x.issue.line,
                x.issue.column,
                format!("expectations[{i}].checks"),
                "expected at least one check (workload/check or experiment/check)",
            );
        }
        for (j, c) in x.checks.iter().enumerate() {
            if !c.contains('/') {
                return invalid(
                    path,
                    c.line,
                    c.column,
                    format!("expectations[{i}].checks[{j}]"),
                    format!(
                        "expected `scope/check` such as counter/exited-ok or experiment/recovered, got {:?}",
                        c.value
                    ),
                );
            }
        }
    }
    check_sizes(path, e, limits)
}

/// What the experiment multiplies out to: instances in total, check runs, flow steps and parallel branches.
fn check_sizes(path: &Path, e: &Experiment, limits: &Limits) -> Result<()> {
    let mut total: u64 = 0;
    let mut check_runs: u64 = (e.checks.len() as u64).saturating_add(e.preflight.len() as u64);
    for (i, w) in e.workloads.iter().enumerate() {
        let n = u64::from(w.instances);
        if n > limits.instances {
            let msg = Limits::exceeded(n, limits.instances, "instances");
            return invalid(path, w.name.line, w.name.column, format!("workloads[{i}].instances"), msg);
        }
        total = total.saturating_add(n);
        if total > limits.instances {
            let msg = format!(
                "{n} instances bring the experiment's total to {total}, which {}",
                Limits::exceeded("", limits.instances, "instances").trim_start()
            );
            return invalid(path, w.name.line, w.name.column, format!("workloads[{i}].instances"), msg);
        }
        check_runs = check_runs.saturating_add((w.checks.len() as u64).saturating_mul(n));
        if check_runs > limits.checks {
            let msg = format!(
                "{} checks x {n} instances bring the check runs to {check_runs}, which {}",
                w.checks.len(),
                Limits::exceeded("", limits.checks, "check runs").trim_start()
            );
            return invalid(path, w.name.line, w.name.column, format!("workloads[{i}].checks"), msg);
        }
    }
    if check_runs > limits.checks {
        let msg = Limits::exceeded(check_runs, limits.checks, "check runs");
        return invalid(path, e.id.line, e.id.column, "checks", msg);
    }
    if let Some(flow) = &e.flow {
        flow_size(path, flow, e, limits)?;
    }
    Ok(())
}

/// Returns (steps, branches at once) of a flow node, or the located error of the innermost node over a limit.
fn flow_size(path: &Path, node: &FlowNode, e: &Experiment, limits: &Limits) -> Result<(u64, u64)> {
    let (steps, width) = match &node.kind {
        FlowKind::Leaf(name) => {
            let n = e.workloads.iter().find(|w| &w.name.value == name).map_or(1, |w| u64::from(w.instances).max(1));
            (n, 1)
        }
        FlowKind::Serial(v) | FlowKind::Parallel(v) => {
            let mut steps = 0u64;
            let mut width = 0u64;
            for n in v {
                let (s, w) = flow_size(path, n, e, limits)?;
                steps = steps.saturating_add(s);
                width = if matches!(node.kind, FlowKind::Parallel(_)) { width.saturating_add(w) } else { width.max(w) };
            }
            (steps, width.max(1))
        }
        FlowKind::Wait(_) | FlowKind::Delay(_) => (1, 1),
        FlowKind::Repeat { mode, body } => {
            let (s, w) = flow_size(path, body, e, limits)?;
            match mode {
                RepeatMode::Times(n) => (s.saturating_mul(u64::from(*n)), w),
                // Counted once here; the runner counts every real iteration against the same limit.
                RepeatMode::For(_) => (s, w),
            }
        }
    };
    if width > limits.parallel {
        let msg = Limits::exceeded(format!("{width} branches at once"), limits.parallel, "parallel branches");
        return invalid(path, node.line, node.column, "flow", msg);
    }
    if steps > limits.steps {
        let msg = Limits::exceeded(format!("{steps} flow steps"), limits.steps, "steps");
        return invalid(path, node.line, node.column, "flow", msg);
    }
    Ok((steps, width))
}

fn validate_flow(path: &Path, node: &FlowNode, leaves: &[&str], workloads: &[&str]) -> Result<()> {
    match &node.kind {
        FlowKind::Leaf(name) => {
            if !leaves.contains(&name.as_str()) {
                return invalid(
                    path,
                    node.line,
                    node.column,
                    "flow",
                    format!("unknown operation or workload `{name}`, expected one of: {}", leaves.join(", ")),
                );
            }
        }
        FlowKind::Serial(v) | FlowKind::Parallel(v) => {
            for n in v {
                validate_flow(path, n, leaves, workloads)?;
            }
        }
        FlowKind::Wait(w) => match (&w.workload, &w.signal) {
            (Some(wl), None) => {
                if !workloads.contains(&wl.value.as_str()) {
                    return invalid(
                        path,
                        wl.line,
                        wl.column,
                        "flow.wait.workload",
                        format!("unknown workload `{}`, expected one of: {}", wl.value, workloads.join(", ")),
                    );
                }
                if w.condition.is_none() {
                    return invalid(
                        path,
                        wl.line,
                        wl.column,
                        "flow.wait.condition",
                        "a workload wait needs `condition`: started or finished",
                    );
                }
            }
            (None, Some(_)) => {}
            _ => {
                return invalid(
                    path,
                    node.line,
                    node.column,
                    "flow.wait",
                    "a wait needs exactly one of `workload` (with `condition`) or `signal`",
                );
            }
        },
        FlowKind::Delay(_) => {}
        FlowKind::Repeat { body, .. } => validate_flow(path, body, leaves, workloads)?,
    }
    Ok(())
}

/// Reads only `apiVersion` and `kind` to tell experiments from adapters and other YAML.
pub fn sniff_kind(text: &str) -> Option<(String, Option<String>)> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "apiVersion")]
        api_version: Option<String>,
        kind: Option<String>,
    }
    let h: Head = serde_saphyr::from_str(text).ok()?;
    Some((h.api_version?, h.kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const HELLO: &str = r#"apiVersion: repro.dev/chaos/v1
id: hello
version: 1
title: t
hypothesis: h
timeout: 1m
workloads:
  - name: hello
    kind: shell
    run: echo hi
    checks:
      - name: ok
        kind: exit-code
flow: hello
"#;

    fn err(text: &str) -> String {
        parse_experiment(Path::new("e.yaml"), text).unwrap_err().to_string()
    }

    #[test]
    fn parses_minimal() {
        let e = parse_experiment(Path::new("e.yaml"), HELLO).unwrap();
        assert_eq!(e.workloads[0].instances, 1);
        assert!(matches!(e.flow.unwrap().kind, FlowKind::Leaf(ref n) if n == "hello"));
    }

    #[test]
    fn wrong_type_names_line_column_and_field() {
        let t = HELLO.replace("    kind: shell\n", "    kind: shell\n    instances: many\n");
        let m = err(&t);
        assert!(m.starts_with("e.yaml:10:16: workloads[0].instances:"), "{m}");
    }

    #[test]
    fn unknown_flow_leaf() {
        let t = HELLO.replace("flow: hello", "flow:\n  serial:\n    - hello\n    - nope");
        let m = err(&t);
        assert!(m.starts_with("e.yaml:17:7: flow: unknown operation or workload `nope`"), "{m}");
    }

    proptest::proptest! {
        /// Any edit of a valid experiment parses or fails with a located error; it never panics.
        #[test]
        fn edited_experiments_never_panic(at in 0usize..400, len in 0usize..12, insert in "[ -~\n]{0,8}") {
            let mut t = HELLO.to_string();
            let at = at.min(t.len());
            let end = (at + len).min(t.len());
            t.replace_range(at..end, &insert);
            if let Err(e) = parse_experiment(Path::new("e.yaml"), &t) {
                let m = e.to_string();
                proptest::prop_assert!(m.starts_with("e.yaml:"), "{}", m);
            }
        }
    }

    #[test]
    fn adapter_errors_are_located() {
        let a = "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: a\ndriver: process\ntargets:\n  - name: s\n    start: exec sleep 1\n  - name: s\n    start: exec sleep 1\n";
        let m = parse_adapter(Path::new("a.yaml"), a).unwrap_err().to_string();
        assert!(m.starts_with("a.yaml:8:11: targets[1].name: expected a unique name"), "{m}");
        let b = a.replace("driver: process", "driver: nomad");
        let m = parse_adapter(Path::new("a.yaml"), &b).unwrap_err().to_string();
        assert!(
            m.starts_with("a.yaml:4:9: driver: unknown variant `nomad`, expected one of process, docker, kubernetes"),
            "{m}"
        );
        assert!(parse_adapter(Path::new("a.yaml"), BUILTIN_PROCESS_ADAPTER).is_ok());
    }

    #[test]
    fn flow_forms() {
        let t = HELLO.replace(
            "flow: hello",
            "operations:\n  - {name: k, uses: kill, target: hello}\nflow:\n  serial:\n    - parallel: [hello, {serial: [{wait: {workload: hello, condition: started}}, {delay: 1s}, k]}]\n    - repeat: {times: 2, serial: [k]}\n    - {for: 1s, do: hello}\n",
        );
        let e = parse_experiment(Path::new("e.yaml"), &t).unwrap();
        let FlowKind::Serial(v) = e.flow.unwrap().kind else { panic!() };
        assert!(matches!(v[0].kind, FlowKind::Parallel(_)));
        assert!(matches!(v[1].kind, FlowKind::Repeat { mode: RepeatMode::Times(2), .. }));
        assert!(matches!(v[2].kind, FlowKind::Repeat { mode: RepeatMode::For(_), .. }));
    }

    fn err_with(text: &str, limits: &Limits) -> String {
        parse_experiment_with(Path::new("e.yaml"), text, limits).unwrap_err().to_string()
    }

    #[test]
    fn absurd_instances_are_refused_at_their_line_and_column() {
        let t = HELLO.replace("    kind: shell\n", "    kind: shell\n    instances: 100000000\n");
        let m = err(&t);
        assert_eq!(
            m,
            "e.yaml:10:16: workloads[0].instances: 100000000 exceeds the limit of 1000 instances (raise it with --max-instances)"
        );
        let raised = Limits { instances: 100_000_000, steps: 100_000_000, checks: 100_000_000, ..Limits::default() };
        assert!(parse_experiment_with(Path::new("e.yaml"), &t, &raised).is_ok());
        // Beyond u32: an error, not a wrap-around.
        let t = HELLO.replace("    kind: shell\n", "    kind: shell\n    instances: 99999999999\n");
        let huge = Limits { instances: u64::MAX, steps: u64::MAX, ..Limits::default() };
        let m = err_with(&t, &huge);
        assert!(m.starts_with("e.yaml:10:16: workloads[0].instances: 99999999999 is too large"), "{m}");
        let t = HELLO.replace("    kind: shell\n", "    kind: shell\n    instances: 999999999999999999999999\n");
        let m = err_with(&t, &huge);
        assert!(m.starts_with("e.yaml:10:16: workloads[0].instances:"), "{m}");
    }

    #[test]
    fn the_total_of_instances_is_limited_too() {
        let two = HELLO.replace(
            "flow: hello",
            "  - name: other\n    kind: shell\n    instances: 600\n    run: echo hi\nflow: hello",
        );
        let t = two.replace(
            "    kind: shell\n    run: echo hi\n    checks:",
            "    kind: shell\n    instances: 600\n    run: echo hi\n    checks:",
        );
        let m = err(&t);
        assert!(
            m.starts_with("e.yaml:15:11: workloads[1].instances: 600 instances bring the experiment's total to 1200, which exceeds the limit of 1000 instances"),
            "{m}"
        );
    }

    #[test]
    fn overflowing_durations_are_errors_not_panics() {
        for (value, want) in [
            ("99999999999999999999h", "e.yaml:6:10: timeout: \"99999999999999999999h\" is too large for a duration"),
            ("99999999999999999999", "e.yaml:6:10: timeout:"),
            ("1e300", "e.yaml:6:10: timeout:"),
            ("18446744073709551615", "e.yaml:6:10: timeout:"),
            ("-5", "e.yaml:6:10: timeout: expected a duration"),
            ("25h", "e.yaml:6:10: timeout: 25h exceeds the limit of 24h for a duration (raise it with --max-duration)"),
        ] {
            let t = HELLO.replace("timeout: 1m", &format!("timeout: {value}"));
            let m = err(&t);
            assert!(m.starts_with(want), "{value}: {m}");
        }
        let t = HELLO.replace("timeout: 1m", "timeout: 25h");
        let l = Limits { duration: Duration::from_secs(48 * 3600), ..Limits::default() };
        assert!(parse_experiment_with(Path::new("e.yaml"), &t, &l).is_ok());
        // Every duration field, not only the experiment's timeout.
        let t = HELLO.replace("flow: hello", "flow:\n  serial: [hello, {delay: 100000h}]");
        let m = err(&t);
        assert!(m.starts_with("e.yaml:15:27: flow.serial[1].delay: "), "{m}");
        assert!(m.contains("100000h exceeds the limit of 24h"), "{m}");
    }

    #[test]
    fn repeats_parallel_branches_steps_and_checks_are_limited() {
        let t = HELLO.replace("flow: hello", "flow:\n  repeat: {times: 4000000000, do: hello}");
        let m = err(&t);
        assert!(m.contains("4000000000 exceeds the limit of 10000 repeats (raise it with --max-repeats)"), "{m}");
        assert!(m.starts_with("e.yaml:15:19: flow.repeat.times: "), "{m}");
        // Nested repeats multiply: 5000 x 5000 steps.
        let t = HELLO.replace("flow: hello", "flow:\n  repeat: {times: 5000, do: {repeat: {times: 5000, do: hello}}}");
        let m = err(&t);
        assert!(m.starts_with("e.yaml:15:3: flow: 25000000 flow steps exceeds the limit of 100000 steps"), "{m}");
        assert!(m.contains("--max-steps"), "{m}");
        let branches: Vec<String> = (0..65).map(|_| "hello".to_string()).collect();
        let t = HELLO.replace("flow: hello", &format!("flow:\n  parallel: [{}]", branches.join(", ")));
        let m = err(&t);
        assert!(m.starts_with("e.yaml:15:3: flow: 65 branches at once exceeds the limit of 64 parallel branches (raise it with --max-parallel)"), "{m}");
        let l = Limits { parallel: 65, ..Limits::default() };
        assert!(parse_experiment_with(Path::new("e.yaml"), &t, &l).is_ok());
        let t = HELLO.replace("    kind: shell\n", "    kind: shell\n    instances: 1000\n");
        let l = Limits { checks: 999, ..Limits::default() };
        let m = err_with(&t, &l);
        assert!(m.contains("workloads[0].checks: 1 checks x 1000 instances bring the check runs to 1000"), "{m}");
        assert!(m.contains("--max-checks"), "{m}");
    }

    #[test]
    fn a_file_over_the_size_limit_is_refused_before_parsing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("e.yaml");
        std::fs::write(&p, format!("{HELLO}# {}\n", "x".repeat(2 << 20))).unwrap();
        let m = load_experiment(&p).unwrap_err().to_string();
        assert!(
            m.ends_with(
                "(document): the file's size exceeds the limit of 1048576 bytes (raise it with --max-file-size)"
            ),
            "{m}"
        );
        let l = Limits { file_bytes: 4 << 20, ..Limits::default() };
        assert!(load_experiment_with(&p, &l).is_ok());
    }

    proptest::proptest! {
        /// Any number in any count or duration field: a value or a located error, never a panic.
        #[test]
        fn numbers_in_counts_and_durations_never_panic(
            n in proptest::prelude::any::<u128>(),
            unit in proptest::sample::select(vec!["", "ms", "s", "m", "h", ".5s", "h1ms"]),
            field in 0usize..4,
        ) {
            let v = format!("{n}{unit}");
            let t = match field {
                0 => HELLO.replace("timeout: 1m", &format!("timeout: {v}")),
                1 => HELLO.replace("    kind: shell\n", &format!("    kind: shell\n    instances: {n}\n")),
                2 => HELLO.replace("flow: hello", &format!("flow:\n  repeat: {{times: {n}, do: hello}}")),
                _ => HELLO.replace("flow: hello", &format!("flow:\n  serial: [hello, {{delay: {v}}}]")),
            };
            for l in [Limits::default(), Limits { instances: u64::MAX, repeats: u64::MAX, parallel: u64::MAX, steps: u64::MAX, checks: u64::MAX, duration: Duration::MAX, file_bytes: u64::MAX }] {
                if let Err(e) = parse_experiment_with(Path::new("e.yaml"), &t, &l) {
                    let m = e.to_string();
                    proptest::prop_assert!(m.starts_with("e.yaml:") && !m.starts_with("e.yaml:0:0"), "{}", m);
                }
            }
        }
    }
}
