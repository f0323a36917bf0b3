//! Reading experiments and adapters from YAML, with errors that name file, line, column and field.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::error::{ChaosError, Result};
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

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| ChaosError::io(path, e))
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

pub fn load_experiment(path: &Path) -> Result<LoadedExperiment> {
    let text = read(path)?;
    let experiment = parse_experiment(path, &text)?;
    Ok(LoadedExperiment { path: path.to_path_buf(), text, experiment })
}

pub fn load_adapter(path: &Path) -> Result<LoadedAdapter> {
    let text = read(path)?;
    let adapter = parse_adapter(path, &text)?;
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

/// Parses and validates an experiment.
pub fn parse_experiment(path: &Path, text: &str) -> Result<Experiment> {
    let exp: Experiment = parse_yaml(path, text)?;
    validate_experiment(path, &exp)?;
    Ok(exp)
}

/// Parses and validates an adapter.
pub fn parse_adapter(path: &Path, text: &str) -> Result<Adapter> {
    let a: Adapter = parse_yaml(path, text)?;
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

/// Checks what the types cannot: references, required fields per kind, unique names.
pub fn validate_experiment(path: &Path, e: &Experiment) -> Result<()> {
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
    Ok(())
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
}
