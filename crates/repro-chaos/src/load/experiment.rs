//! What an experiment's types cannot say: references between its parts, the fields each kind needs, unique
//! names, and what the whole multiplies out to against the [`Limits`].
use std::collections::BTreeSet;
use std::path::Path;

use super::{check_api_version, invalid, valid_name};
use crate::error::Result;
use crate::limits::Limits;
use crate::model::*;

/// Checks what the types cannot (references, required fields per kind, unique names) and the default [`Limits`].
pub fn validate_experiment(path: &Path, e: &Experiment) -> Result<()> {
    validate_experiment_with(path, e, &Limits::default())
}

/// Like [`validate_experiment`], with the given limits.
pub fn validate_experiment_with(path: &Path, e: &Experiment, limits: &Limits) -> Result<()> {
    check_api_version(path, &e.api_version)?;
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
        let fault = Fault::from_name(&o.uses);
        if let Some(n) = &o.network {
            if !fault.is_some_and(Fault::is_network) {
                return invalid(
                    path,
                    n.line,
                    n.column,
                    format!("{f}.network"),
                    format!(
                        "`network` goes with the network faults ({}), not with {}",
                        network_fault_names(),
                        o.uses.value
                    ),
                );
            }
        }
        if let Some(st) = &o.stress {
            if fault != Some(Fault::Stress) {
                return invalid(
                    path,
                    st.line,
                    st.column,
                    format!("{f}.stress"),
                    format!("`stress` goes with the stress fault, not with {}", o.uses.value),
                );
            }
        }
        if let Some(fault) = fault.filter(|f| f.is_network()) {
            validate_network(path, &f, o, fault, e)?;
            continue;
        }
        if fault == Some(Fault::Stress) {
            validate_stress(path, &f, o, e)?;
            continue;
        }
        if let Some(fault) = fault {
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
    let mut probe_names = BTreeSet::new();
    for (i, p) in e.steady_state.iter().enumerate() {
        let f = format!("steady-state[{i}]");
        if !valid_name(&p.name) || !probe_names.insert(p.name.value.clone()) {
            return invalid(
                path,
                p.name.line,
                p.name.column,
                format!("{f}.name"),
                format!("expected a unique probe name, got {:?}", p.name.value),
            );
        }
        if let Some(t) = &p.tolerance {
            if let Err(e) = crate::steady::check_tolerance(&t.value) {
                return invalid(path, t.line, t.column, format!("{f}.tolerance"), e.to_string());
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
            CheckKind::Linearizable | CheckKind::Set | CheckKind::Counter => {
                if let Some(h) = &c.history {
                    if !crate::evaluate::history::valid_pattern(h) {
                        return invalid(
                            path,
                            l,
                            col,
                            format!("{f}.history"),
                            format!(
                                "expected a relative glob inside the run directory (no `..`, not absolute), got {h:?}"
                            ),
                        );
                    }
                }
                if c.kind.value != CheckKind::Linearizable && (c.model.is_some() || c.initial.is_some()) {
                    return invalid(
                        path,
                        l,
                        col,
                        format!("{f}.model"),
                        "`model` and `initial` go with a linearizable check",
                    );
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
    let mut check_runs: u64 = (e.checks.len() as u64)
        .saturating_add(e.preflight.len() as u64)
        .saturating_add((e.steady_state.len() as u64).saturating_mul(2));
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
        FlowKind::Wait(_) | FlowKind::Delay { .. } | FlowKind::Op(_) => (1, 1),
        FlowKind::Random(r) => {
            // The k largest children, one after another: a bound on what any draw runs.
            let mut sizes = Vec::with_capacity(r.from.len());
            for n in &r.from {
                sizes.push(flow_size(path, n, e, limits)?);
            }
            sizes.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
            let k = (r.pick as usize).min(sizes.len());
            let steps = sizes[..k].iter().fold(0u64, |acc, s| acc.saturating_add(s.0));
            (steps, sizes.iter().map(|s| s.1).max().unwrap_or(1))
        }
        FlowKind::Schedule(sc) => {
            // Each of `length` picks: its pause and the largest choice.
            let mut most = (0u64, 1u64);
            for w in &sc.from {
                let s = flow_size(path, &w.node, e, limits)?;
                most = (most.0.max(s.0), most.1.max(s.1));
            }
            (most.0.saturating_add(1).saturating_mul(u64::from(sc.length)), most.1)
        }
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
        FlowKind::Delay { .. } => {}
        FlowKind::Op(c) => {
            if !leaves.contains(&c.name.as_str()) || workloads.contains(&c.name.as_str()) {
                let ops: Vec<&str> = leaves.iter().filter(|l| !workloads.contains(l)).copied().collect();
                return invalid(
                    path,
                    node.line,
                    node.column,
                    "flow.op",
                    format!("unknown operation `{}`, expected one of: {}", c.name, ops.join(", ")),
                );
            }
        }
        FlowKind::Random(r) => {
            if r.from.is_empty() || r.pick == 0 || r.pick as usize > r.from.len() {
                let msg = format!(
                    "random: pick {} of {} children: expected a pick from 1 to the number of children in `from`",
                    r.pick,
                    r.from.len()
                );
                return invalid(path, node.line, node.column, "flow.random", msg);
            }
            for n in &r.from {
                validate_flow(path, n, leaves, workloads)?;
            }
        }
        FlowKind::Schedule(sc) => {
            if sc.from.is_empty() || sc.from.iter().all(|w| w.weight == 0) {
                return invalid(
                    path,
                    node.line,
                    node.column,
                    "flow.schedule.from",
                    "a schedule needs at least one choice with a weight above 0",
                );
            }
            if sc.length == 0 {
                return invalid(path, node.line, node.column, "flow.schedule.length", "expected a length of 1 or more");
            }
            for w in &sc.from {
                validate_flow(path, &w.node, leaves, workloads)?;
            }
        }
        FlowKind::Repeat { body, .. } => validate_flow(path, body, leaves, workloads)?,
    }
    Ok(())
}

fn network_fault_names() -> String {
    Fault::ALL.iter().filter(|f| f.is_network()).map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

/// Whether `name` is a workload or one of its instances (`<workload>-<i>`).
pub(crate) fn names_workload_or_instance(e: &Experiment, name: &str) -> bool {
    e.workloads.iter().any(|w| {
        w.name.value == name
            || name
                .strip_prefix(w.name.value.as_str())
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|i| i.parse::<u32>().ok())
                .is_some_and(|i| i < w.instances && name == format!("{}-{i}", w.name.value))
    })
}

/// The fields a network fault needs and allows (`network:`), its target and `select`.
fn validate_network(path: &Path, f: &str, o: &Operation, fault: Fault, e: &Experiment) -> Result<()> {
    let name = fault.name();
    let default = NetworkSpec::default();
    let n = o.network.as_ref().map_or(&default, |n| &n.value);
    // Where a missing field is reported: the `network` map, else `uses`.
    let (nl, nc) = o.network.as_ref().map_or((o.uses.line, o.uses.column), |n| (n.line, n.column));
    if o.select != Select::One {
        return invalid(
            path,
            o.uses.line,
            o.uses.column,
            format!("{f}.select"),
            format!("{name} is a network fault: it has no `select` (name the clients it hits in network.clients)"),
        );
    }
    let between = n.between.as_ref();
    match (&o.target, between) {
        (None, None) => {
            let msg = if fault == Fault::Partition {
                "a partition needs a `target` (an adapter target with proxied ports, cut off from network.clients) or network.between (two groups)".to_string()
            } else {
                format!("the network fault {name} needs a `target`: an adapter target with proxied ports (`proxy:` in the adapter)")
            };
            return invalid(path, o.uses.line, o.uses.column, format!("{f}.target"), msg);
        }
        (Some(t), _) if e.workloads.iter().any(|w| w.name.value == t.value) => {
            return invalid(
                path,
                t.line,
                t.column,
                format!("{f}.target"),
                format!("the target of the network fault {name} is an adapter target with proxied ports, not a workload: name the workload {} in network.clients", t.value),
            );
        }
        (Some(t), Some(b)) => {
            return invalid(
                path,
                b.line,
                b.column,
                format!("{f}.network.between"),
                format!(
                    "a partition takes either `target` ({}) with network.clients, or network.between: not both",
                    t.value
                ),
            );
        }
        _ => {}
    }
    // Which of the optional fields this fault takes.
    let takes = |field: &str| match field {
        "delay" | "jitter" => fault == Fault::Latency,
        "correlation" => matches!(fault, Fault::Latency | Fault::Loss | Fault::Reorder),
        "percent" => matches!(fault, Fault::Loss | Fault::Duplicate | Fault::Reorder | Fault::Corrupt),
        "rate" => fault == Fault::Bandwidth,
        "direction" => fault != Fault::Reset && between.is_none(),
        "clients" => between.is_none(),
        "between" | "one-way" => fault == Fault::Partition,
        _ => false,
    };
    let given: [(&str, Option<(u64, u64)>); 9] = [
        ("delay", n.delay.as_ref().map(|v| (v.line, v.column))),
        ("jitter", n.jitter.as_ref().map(|v| (v.line, v.column))),
        ("correlation", n.correlation.as_ref().map(|v| (v.line, v.column))),
        ("percent", n.percent.as_ref().map(|v| (v.line, v.column))),
        ("rate", n.rate.as_ref().map(|v| (v.line, v.column))),
        ("direction", n.direction.as_ref().map(|v| (v.line, v.column))),
        ("clients", n.clients.as_ref().map(|v| v.first().map_or((nl, nc), |c| (c.line, c.column)))),
        ("between", between.map(|v| (v.line, v.column))),
        ("one-way", n.one_way.map(|_| (nl, nc))),
    ];
    for (field, at) in given {
        if let Some((l, c)) = at {
            if !takes(field) {
                let why = match field {
                    "direction" if fault == Fault::Reset => {
                        "a reset aborts whole connections: it has no direction".to_string()
                    }
                    "direction" | "clients" => {
                        "with network.between the groups say who is cut off from whom (one-way: true for one direction)"
                            .to_string()
                    }
                    "one-way" => {
                        "one-way goes with network.between (with target and clients, use direction)".to_string()
                    }
                    _ => format!("{name} does not take `{field}`"),
                };
                return invalid(path, l, c, format!("{f}.network.{field}"), why);
            }
        }
    }
    if n.one_way.is_some() && between.is_none() {
        return invalid(
            path,
            nl,
            nc,
            format!("{f}.network.one-way"),
            "one-way goes with network.between (with target and clients, use direction)",
        );
    }
    let need = |field: &str, what: &str| {
        invalid::<()>(path, nl, nc, format!("{f}.network.{field}"), format!("{name} needs network.{field}: {what}"))
    };
    match fault {
        Fault::Latency => {
            let Some(d) = &n.delay else { return need("delay", DURATION_EXPECTED) };
            if d.value.0.is_zero() {
                return invalid(path, d.line, d.column, format!("{f}.network.delay"), "expected a delay above 0");
            }
        }
        Fault::Loss | Fault::Duplicate | Fault::Reorder | Fault::Corrupt if n.percent.is_none() => {
            return need("percent", "a share of chunks from 0 to 100");
        }
        Fault::Bandwidth if n.rate.is_none() => return need("rate", RATE_EXPECTED),
        _ => {}
    }
    for (field, v) in [("percent", &n.percent), ("correlation", &n.correlation)] {
        if let Some(v) = v {
            if !(0.0..=100.0).contains(&v.value) {
                return invalid(
                    path,
                    v.line,
                    v.column,
                    format!("{f}.network.{field}"),
                    format!("expected a {field} from 0 to 100, got {}", v.value),
                );
            }
        }
    }
    for (j, c) in n.clients.iter().flatten().enumerate() {
        if !valid_name(&c.value) {
            return invalid(
                path,
                c.line,
                c.column,
                format!("{f}.network.clients[{j}]"),
                format!("expected a workload, instance or target name, got {:?}", c.value),
            );
        }
    }
    if let Some(b) = between {
        if b.value.len() != 2 || b.value.iter().any(Vec::is_empty) {
            return invalid(
                path,
                b.line,
                b.column,
                format!("{f}.network.between"),
                "expected two non-empty groups of workload, instance or target names, such as [[writer], [redis]]",
            );
        }
        let mut seen = BTreeSet::new();
        for (g, group) in b.value.iter().enumerate() {
            for (j, c) in group.iter().enumerate() {
                if !valid_name(&c.value) || !seen.insert(c.value.clone()) {
                    return invalid(
                        path,
                        c.line,
                        c.column,
                        format!("{f}.network.between[{g}][{j}]"),
                        format!("expected a workload, instance or target name in one group only, got {:?}", c.value),
                    );
                }
            }
        }
    }
    Ok(())
}

/// The most workers of one kind (cpu, io, vm) a stress starts.
pub const STRESS_MAX_WORKERS: u32 = 64;
/// The most memory a stress holds: 64 GiB.
pub const STRESS_MAX_MEMORY: u64 = 64 << 30;
/// The least memory each vm worker holds (stress-ng's minimum): 4 KiB.
const STRESS_MIN_VM_BYTES: u64 = 4 << 10;

/// The stress fault: an adapter target, and `stress:` with at least one of cpu, memory, io, within bounds.
fn validate_stress(path: &Path, f: &str, o: &Operation, e: &Experiment) -> Result<()> {
    let Some(t) = &o.target else {
        return invalid(
            path,
            o.uses.line,
            o.uses.column,
            format!("{f}.target"),
            "the stress fault needs a `target`: an adapter target (stress-ng runs beside it, on its host)",
        );
    };
    if names_workload_or_instance(e, &t.value) {
        return invalid(
            path,
            t.line,
            t.column,
            format!("{f}.target"),
            format!("the target of the stress fault is an adapter target, not a workload ({}): stress-ng runs beside a target of the adapter", t.value),
        );
    }
    let Some(st) = &o.stress else {
        return invalid(
            path,
            o.uses.line,
            o.uses.column,
            format!("{f}.stress"),
            "the stress fault needs `stress:` with at least one of cpu, memory, io (for example stress: {cpu: 2})",
        );
    };
    let s = &st.value;
    if s.cpu.is_none() && s.memory.is_none() && s.io.is_none() {
        return invalid(
            path,
            st.line,
            st.column,
            format!("{f}.stress"),
            "expected at least one of cpu (workers), memory (bytes, such as 256Mi) or io (workers)",
        );
    }
    for (name, v) in [("cpu", &s.cpu), ("io", &s.io), ("vm-workers", &s.vm_workers)] {
        if let Some(n) = v {
            if !(1..=STRESS_MAX_WORKERS).contains(&n.value) {
                return invalid(
                    path,
                    n.line,
                    n.column,
                    format!("{f}.stress.{name}"),
                    format!("expected 1 to {STRESS_MAX_WORKERS} workers, got {}", n.value),
                );
            }
        }
    }
    if let (Some(v), None) = (&s.vm_workers, &s.memory) {
        return invalid(
            path,
            v.line,
            v.column,
            format!("{f}.stress.vm-workers"),
            "vm-workers goes with memory: they are the workers that hold it",
        );
    }
    if let Some(m) = &s.memory {
        if m.value.0 > STRESS_MAX_MEMORY {
            return invalid(
                path,
                m.line,
                m.column,
                format!("{f}.stress.memory"),
                format!("expected at most 64Gi, got {} ({} bytes)", m.value, m.value.0),
            );
        }
        if s.bytes_per_vm_worker().unwrap_or(0) < STRESS_MIN_VM_BYTES {
            return invalid(
                path,
                m.line,
                m.column,
                format!("{f}.stress.memory"),
                format!("expected at least 4Ki for each of the {} vm workers, got {} in all", s.vm(), m.value),
            );
        }
    }
    Ok(())
}

/// What an experiment's network faults need of the adapter it runs on: the target serves ports through the
/// proxy, and every name in `clients` and `between` is a workload, an instance or a target. (A target the
/// adapter does not have makes the run n/a, as for the other faults: see `checks::not_applicable`.)
pub fn validate_against_adapter(path: &Path, e: &Experiment, a: &Adapter) -> Result<()> {
    let target = |name: &str| a.targets.iter().find(|t| t.name.value == name);
    let known = |name: &str| names_workload_or_instance(e, name) || target(name).is_some();
    let expected = || {
        let mut v: Vec<String> = e.workloads.iter().map(|w| w.name.value.clone()).collect();
        v.extend(a.targets.iter().map(|t| t.name.value.clone()));
        v.join(", ")
    };
    for (i, o) in e.operations.iter().enumerate() {
        let f = format!("operations[{i}]");
        if Fault::from_name(&o.uses) == Some(Fault::Stress) && a.driver != Driver::Process {
            let why = match a.driver {
                Driver::Docker => {
                    "the docker driver does not run it (that would need stress-ng in the image, run in the container)"
                }
                _ => "the kubernetes driver does not run it",
            };
            return invalid(
                path,
                o.uses.line,
                o.uses.column,
                format!("{f}.uses"),
                format!(
                    "stress runs stress-ng beside a target of the process driver, and adapter {} uses another: {why}",
                    a.name
                ),
            );
        }
        let Some(fault) = Fault::from_name(&o.uses).filter(|f| f.is_network()) else { continue };
        if let Some(t) = &o.target {
            if let Some(spec) = target(&t.value) {
                if spec.proxy.is_empty() {
                    return invalid(
                        path,
                        t.line,
                        t.column,
                        format!("{f}.target"),
                        format!(
                            "{} is a network fault, and target {} of adapter {} serves no port through the proxy: add `proxy: [<port>]` to it",
                            fault.name(),
                            t.value,
                            a.name
                        ),
                    );
                }
            }
        }
        let Some(n) = &o.network else { continue };
        for (j, c) in n.value.clients.iter().flatten().enumerate() {
            if !known(&c.value) {
                return invalid(
                    path,
                    c.line,
                    c.column,
                    format!("{f}.network.clients[{j}]"),
                    format!("unknown client {:?}: expected a workload, an instance (<workload>-<i>) or a target of adapter {} ({})", c.value, a.name, expected()),
                );
            }
        }
        if let Some(b) = &n.value.between {
            for (g, group) in b.value.iter().enumerate() {
                for (j, c) in group.iter().enumerate() {
                    if !known(&c.value) {
                        return invalid(
                            path,
                            c.line,
                            c.column,
                            format!("{f}.network.between[{g}][{j}]"),
                            format!("unknown name {:?}: expected a workload, an instance (<workload>-<i>) or a target of adapter {} ({})", c.value, a.name, expected()),
                        );
                    }
                }
            }
            let proxied = b.value.iter().flatten().any(|c| target(&c.value).is_some_and(|t| !t.proxy.is_empty()));
            if !proxied {
                return invalid(
                    path,
                    b.line,
                    b.column,
                    format!("{f}.network.between"),
                    format!("no name in the groups is a target of adapter {} with proxied ports: a partition cuts the traffic to a proxied port", a.name),
                );
            }
        }
    }
    Ok(())
}
