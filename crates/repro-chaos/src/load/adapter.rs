//! What an adapter's types cannot say: its apiVersion and kind, unique target names, the fields each driver
//! needs, ports, watchers named by signals, regular expressions.
use std::collections::BTreeSet;
use std::path::Path;

use super::{check_api_version, invalid, valid_name};
use crate::error::Result;
use crate::model::*;

/// Checks a parsed adapter.
pub fn validate_adapter(path: &Path, a: &Adapter) -> Result<()> {
    check_api_version(path, &a.api_version)?;
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
                let faults = t.faults.clone().unwrap_or_else(|| Fault::PROCESS.to_vec());
                if faults.contains(&Fault::Outage) && pod.owner.is_none() {
                    return invalid(path, l, c, format!("targets[{i}].pod.owner"), "the outage fault scales the owner to 0 and back: name it (deployment/<name>), or leave outage out of faults");
                }
            }
        }
    }
    validate_proxy(path, a, &port_names)?;
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
    Ok(())
}

/// `proxy:` of each target: adapter ports, each served by one target, published by a docker target, not on
/// kubernetes (the proxy runs on the harness's host and fronts 127.0.0.1 ports).
fn validate_proxy(path: &Path, a: &Adapter, port_names: &BTreeSet<&str>) -> Result<()> {
    let mut owner: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
    for (i, t) in a.targets.iter().enumerate() {
        for (j, p) in t.proxy.iter().enumerate() {
            let field = format!("targets[{i}].proxy[{j}]");
            if a.driver == Driver::Kubernetes {
                return invalid(
                    path,
                    p.line,
                    p.column,
                    field,
                    "proxied ports are not supported on the kubernetes driver (the proxy fronts 127.0.0.1 ports of the harness's host)",
                );
            }
            if !port_names.contains(p.value.as_str()) {
                return invalid(
                    path,
                    p.line,
                    p.column,
                    field,
                    format!(
                        "expected one of the adapter's ports ({}), got {:?}",
                        port_names.iter().copied().collect::<Vec<_>>().join(", "),
                        p.value
                    ),
                );
            }
            if let Some(other) = owner.insert(p.value.as_str(), t.name.value.as_str()) {
                return invalid(
                    path,
                    p.line,
                    p.column,
                    field,
                    format!("port {} is already proxied for target {other}: a port is served by one target", p.value),
                );
            }
            if let Some(ct) = &t.container {
                if !ct.ports.contains_key(&p.value) {
                    return invalid(
                        path,
                        p.line,
                        p.column,
                        field,
                        format!("a docker target's proxied port must be published: add {} to container.ports", p.value),
                    );
                }
            }
        }
    }
    Ok(())
}
