//! Reading experiments and adapters from YAML, with errors that name file, line, column and field:
//! [`yaml`] maps the YAML library's errors, [`experiment`] and [`adapter`] check what the types cannot.
use std::path::{Path, PathBuf};

use crate::error::{ChaosError, Result};
use crate::limits::{with_parse_limits, Limits};
use crate::model::*;

pub mod adapter;
pub mod experiment;
pub mod yaml;

pub use adapter::validate_adapter;
pub use experiment::{validate_against_adapter, validate_experiment, validate_experiment_with};
pub use yaml::parse_yaml;

/// The `apiVersion` every experiment and adapter file must carry.
pub(crate) fn check_api_version(path: &Path, v: &At<String>) -> Result<()> {
    if v.value != API_VERSION {
        return invalid(path, v.line, v.column, "apiVersion", format!("expected {API_VERSION:?}, got {:?}", v.value));
    }
    Ok(())
}

pub(crate) fn invalid<T>(
    path: &Path,
    line: u64,
    column: u64,
    field: impl Into<String>,
    msg: impl Into<String>,
) -> Result<T> {
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

pub(crate) fn valid_name(s: &str) -> bool {
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
    validate_adapter(path, &a)?;
    Ok(a)
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

    #[test]
    fn seeded_flow_forms_and_their_errors() {
        let with = |flow: &str| {
            HELLO.replace(
                "flow: hello",
                &format!("operations:\n  - {{name: k, uses: kill, target: hello}}\n  - {{name: f, uses: freeze, target: hello, duration: 1s}}\nflow:\n{flow}"),
            )
        };
        let t = with("  serial:\n    - {delay: 2s, jitter: 500ms}\n    - random: {pick: 1, from: [k, f]}\n    - schedule: {from: [k, {do: f, weight: 3}], length: 4, interval: 200ms}\n");
        let e = parse_experiment(Path::new("e.yaml"), &t).unwrap();
        let FlowKind::Serial(v) = e.flow.clone().unwrap().kind else { panic!() };
        assert!(matches!(&v[0].kind, FlowKind::Delay { jitter: Some(j), .. } if j.0 == Duration::from_millis(500)));
        assert!(matches!(&v[1].kind, FlowKind::Random(r) if r.pick == 1 && r.from.len() == 2));
        let FlowKind::Schedule(sc) = &v[2].kind else { panic!() };
        assert_eq!((sc.length, sc.from[0].weight, sc.from[1].weight), (4, 1, 3));
        assert_eq!(sc.from[0].node.line, 21, "a bare name is located where it was written");
        // What is written reads back.
        let y = serde_saphyr::to_string(&e).unwrap();
        let back = parse_experiment(Path::new("e.yaml"), &y).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&e).unwrap());

        let m = err(&with("  {delay: 1s, jitter: 2s}\n"));
        assert!(m.contains("jitter 2s is larger than its delay 1s"), "{m}");
        let m = err(&with("  {serial: [k], jitter: 2s}\n"));
        assert!(m.contains("`jitter` goes with `delay`"), "{m}");
        let m = err(&with("  random: {pick: 3, from: [k, f]}\n"));
        assert!(m.starts_with("e.yaml:18:3: flow.random: random: pick 3 of 2 children"), "{m}");
        let m = err(&with("  random: {pick: 1, from: [k, nope]}\n"));
        assert!(m.contains("unknown operation or workload `nope`"), "{m}");
        let m = err(&with("  schedule: {from: [{do: k, weight: 0}], length: 2}\n"));
        assert!(m.contains("flow.schedule.from: a schedule needs at least one choice with a weight above 0"), "{m}");
        let m = err(&with("  schedule: {from: [k], length: 0}\n"));
        assert!(m.contains("flow.schedule.length"), "{m}");
        let m = err(&with("  schedule: {from: [{do: k, rate: 2}], length: 2}\n"));
        assert!(m.contains("unknown field `rate`"), "{m}");
        let m = err_with(&with("  schedule: {from: [k], length: 5000}\n"), &Limits { steps: 100, ..Limits::default() });
        assert!(m.contains("steps"), "{m}");
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

    const ADAPTER: &str = "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: a\ndriver: docker\nports: [web]\ntargets:\n  - name: s\n    container:\n      image: img@sha256:00\n      ports: {web: 80}\n    faults: [kill, freeze]\n    stop-timeout: 5s\nobservers:\n  watchers:\n    - {name: w, run: 'echo x'}\nsignals:\n  - {name: up, watcher: w, pattern: 'x+'}\n";

    proptest::proptest! {
        /// Any text at all: an experiment or adapter, or an error located in the file; never a panic.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            let errors = [parse_experiment(Path::new("e.yaml"), &text).err(), parse_adapter(Path::new("e.yaml"), &text).err()];
            for e in errors.into_iter().flatten() {
                let m = e.to_string();
                proptest::prop_assert!(m.starts_with("e.yaml:"), "{}", m);
            }
            // sniff_kind only reads apiVersion and kind; any answer is fine, the property is that it returns.
            let _ = sniff_kind(&text);
        }

        /// Any edit of a valid adapter parses or fails with a located error.
        #[test]
        fn edited_adapters_never_panic(at in 0usize..400, len in 0usize..12, insert in "[ -~\n]{0,8}") {
            let mut t = ADAPTER.to_string();
            let at = at.min(t.len());
            let end = (at + len).min(t.len());
            t.replace_range(at..end, &insert);
            if let Err(e) = parse_adapter(Path::new("a.yaml"), &t) {
                let m = e.to_string();
                proptest::prop_assert!(m.starts_with("a.yaml:"), "{}", m);
            }
        }
    }

    #[test]
    fn the_adapter_fixture_parses() {
        let a = parse_adapter(Path::new("a.yaml"), ADAPTER).unwrap();
        assert_eq!(a.targets[0].container.as_ref().unwrap().ports["web"].value, 80);
        assert_eq!(a.targets[0].faults, Some(vec![Fault::Kill, Fault::Freeze]));
    }

    /// What the schema serializes (as `repro chaos show --json` and the run directory do) reads back to the
    /// same thing: the hand-written Serialize of flows, durations and selections matches their Deserialize.
    #[test]
    fn serialized_experiments_and_adapters_read_back() {
        let t = HELLO.replace(
            "flow: hello",
            "operations:\n  - {name: k, uses: kill, target: hello, select: 2, duration: 1m30s}\nflow:\n  serial:\n    - parallel: [hello, {serial: [{wait: {workload: hello, condition: started, timeout: 500ms}}, {delay: 1s}, k]}]\n    - repeat: {times: 2, serial: [k]}\n    - {for: 1s, do: hello}\n",
        );
        let e = parse_experiment(Path::new("e.yaml"), &t).unwrap();
        let json = serde_json::to_value(&e).unwrap();
        let text = serde_saphyr::to_string(&e).unwrap();
        let back = parse_experiment(Path::new("back.yaml"), &text).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json, "{text}");
        assert_eq!(json["operations"][0]["select"], 2);
        assert_eq!(json["operations"][0]["duration"], "1m30s");
        let a = parse_adapter(Path::new("a.yaml"), ADAPTER).unwrap();
        let back = parse_adapter(Path::new("back.yaml"), &serde_saphyr::to_string(&a).unwrap()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&a).unwrap());
    }
}

#[cfg(test)]
mod network_tests {
    use super::*;

    const NET: &str = r#"apiVersion: repro.dev/chaos/v1
id: net
version: 1
title: t
hypothesis: h
timeout: 1m
workloads:
  - name: writer
    kind: shell
    instances: 2
    run: echo hi
operations:
  - name: op
    uses: latency
    target: redis
    network:
      delay: 100ms
flow: writer
"#;

    const ADAPTER: &str = "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: a\ndriver: process\nports: [redis, other]\ntargets:\n  - name: redis\n    proxy: [redis]\n    start: exec sleep 100\n  - name: plain\n    start: exec sleep 100\n";

    fn err(text: &str) -> String {
        parse_experiment(Path::new("e.yaml"), text).unwrap_err().to_string()
    }

    fn with_network(uses: &str, network: &str) -> String {
        NET.replace("    uses: latency\n", &format!("    uses: {uses}\n"))
            .replace("    network:\n      delay: 100ms\n", &format!("    network:\n{network}"))
    }

    #[test]
    fn network_faults_parse() {
        let e = parse_experiment(Path::new("e.yaml"), NET).unwrap();
        let n = e.operations[0].network.as_ref().unwrap();
        assert_eq!(n.value.delay.as_ref().unwrap().value, Dur::millis(100));
        for (uses, net) in [
            (
                "loss",
                "      percent: 10\n      correlation: 25\n      direction: to-target\n      clients: [writer-0]\n",
            ),
            ("duplicate", "      percent: 5\n"),
            ("reorder", "      percent: 50\n"),
            ("corrupt", "      percent: 1\n      direction: from-target\n"),
            ("bandwidth", "      rate: 1mbit\n"),
            ("bandwidth", "      rate: 12500\n"),
            ("partition", "      clients: [writer]\n"),
            ("reset", "      clients: [writer]\n"),
        ] {
            let t = with_network(uses, net);
            let e = parse_experiment(Path::new("e.yaml"), &t).unwrap_or_else(|e| panic!("{uses}: {e}"));
            assert_eq!(e.operations[0].uses.value, uses);
        }
        let t = NET
            .replace("    target: redis\n", "")
            .replace("    uses: latency\n", "    uses: partition\n")
            .replace("      delay: 100ms\n", "      between: [[writer], [redis]]\n      one-way: true\n");
        let e = parse_experiment(Path::new("e.yaml"), &t).unwrap();
        assert_eq!(e.operations[0].network.as_ref().unwrap().value.between.as_ref().unwrap().value.len(), 2);
        // A partition needs no parameters.
        let t = NET
            .replace("    uses: latency\n", "    uses: partition\n")
            .replace("    network:\n      delay: 100ms\n", "");
        assert!(parse_experiment(Path::new("e.yaml"), &t).is_ok());
    }

    #[test]
    fn every_network_error_is_located() {
        let cases: Vec<(String, &str)> = vec![
            (with_network("latency", "      jitter: 10ms\n"), "e.yaml:17:7: operations[0].network.delay: latency needs network.delay: a duration"),
            (with_network("latency", "      dealy: 100ms\n"), "e.yaml:17:7: operations[0].network.dealy: unknown field `dealy`, expected one of delay, jitter"),
            (with_network("latency", "      delay: soon\n"), "e.yaml:17:14: operations[0].network.delay: expected a duration"),
            (with_network("latency", "      delay: 0ms\n"), "e.yaml:17:14: operations[0].network.delay: expected a delay above 0"),
            (with_network("loss", "      correlation: 5\n"), "e.yaml:17:7: operations[0].network.percent: loss needs network.percent: a share of chunks from 0 to 100"),
            (with_network("loss", "      percent: 150\n"), "e.yaml:17:16: operations[0].network.percent: expected a percent from 0 to 100, got 150"),
            (with_network("reorder", "      percent: 10\n      correlation: -1\n"), "e.yaml:18:20: operations[0].network.correlation: expected a correlation from 0 to 100, got -1"),
            (with_network("loss", "      percent: 10\n      delay: 1s\n"), "e.yaml:18:14: operations[0].network.delay: loss does not take `delay`"),
            (with_network("duplicate", "      percent: 10\n      correlation: 5\n"), "e.yaml:18:20: operations[0].network.correlation: duplicate does not take `correlation`"),
            (with_network("bandwidth", "      direction: both\n"), "e.yaml:17:7: operations[0].network.rate: bandwidth needs network.rate: a rate such as 1mbit"),
            (with_network("bandwidth", "      rate: fast\n"), "e.yaml:17:13: operations[0].network.rate: expected a rate such as 1mbit"),
            (with_network("bandwidth", "      rate: 0\n"), "e.yaml:17:13: operations[0].network.rate:"),
            (with_network("latency", "      delay: 1s\n      direction: sideways\n"), "e.yaml:18:18: operations[0].network.direction: unknown variant `sideways`"),
            (with_network("reset", "      direction: both\n"), "e.yaml:17:18: operations[0].network.direction: a reset aborts whole connections: it has no direction"),
            (with_network("partition", "      one-way: true\n"), "e.yaml:17:7: operations[0].network.one-way: one-way goes with network.between"),
            (with_network("kill", "      delay: 1s\n"), "e.yaml:17:7: operations[0].network: `network` goes with the network faults (latency, loss, duplicate, reorder, corrupt, bandwidth, partition, reset), not with kill"),
            (NET.replace("    target: redis\n", "    target: writer\n"), "e.yaml:15:13: operations[0].target: the target of the network fault latency is an adapter target with proxied ports, not a workload: name the workload writer in network.clients"),
            (NET.replace("    target: redis\n", ""), "e.yaml:14:11: operations[0].target: the network fault latency needs a `target`"),
            (NET.replace("    target: redis\n", "    target: redis\n    select: all\n"), "e.yaml:14:11: operations[0].select: latency is a network fault: it has no `select`"),
            (with_network("partition", "      between: [[writer]]\n").replace("    target: redis\n", ""), "e.yaml:16:16: operations[0].network.between: expected two non-empty groups"),
            (with_network("partition", "      between: [[writer], [redis]]\n"), "e.yaml:17:16: operations[0].network.between: a partition takes either `target` (redis) with network.clients, or network.between: not both"),
            (with_network("partition", "      between: [[writer], [writer]]\n").replace("    target: redis\n", ""), "e.yaml:16:28: operations[0].network.between[1][0]: expected a workload, instance or target name in one group only"),
            (with_network("partition", "      between: [[writer], [redis]]\n      direction: to-target\n").replace("    target: redis\n", ""), "e.yaml:17:18: operations[0].network.direction: with network.between the groups say who"),
        ];
        let mut wrong = Vec::new();
        for (text, want) in cases {
            let m = err(&text);
            if !m.starts_with(want) {
                wrong.push(format!("want {want}\n got {m}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    fn against(text: &str) -> Result<()> {
        let e = parse_experiment(Path::new("e.yaml"), text).unwrap();
        let a = parse_adapter(Path::new("a.yaml"), ADAPTER).unwrap();
        validate_against_adapter(Path::new("e.yaml"), &e, &a)
    }

    #[test]
    fn network_faults_are_checked_against_the_adapter() {
        against(NET).unwrap();
        against(&with_network("partition", "      clients: [writer-1, plain]\n")).unwrap();
        let m = against(&NET.replace("    target: redis\n", "    target: plain\n")).unwrap_err().to_string();
        assert!(m.starts_with("e.yaml:15:13: operations[0].target: latency is a network fault, and target plain of adapter a serves no port through the proxy: add `proxy: [<port>]` to it"), "{m}");
        let m = against(&with_network("partition", "      clients: [writer-2]\n")).unwrap_err().to_string();
        assert!(m.starts_with("e.yaml:17:17: operations[0].network.clients[0]: unknown client \"writer-2\": expected a workload, an instance (<workload>-<i>) or a target of adapter a (writer, redis, plain)"), "{m}");
        let t = with_network("partition", "      between: [[writer], [plain]]\n").replace("    target: redis\n", "");
        let m = against(&t).unwrap_err().to_string();
        assert!(m.starts_with("e.yaml:16:16: operations[0].network.between: no name in the groups is a target of adapter a with proxied ports"), "{m}");
        let t = with_network("partition", "      between: [[writer], [nope]]\n").replace("    target: redis\n", "");
        let m = against(&t).unwrap_err().to_string();
        assert!(m.starts_with("e.yaml:16:28: operations[0].network.between[1][0]: unknown name \"nope\""), "{m}");
    }

    #[test]
    fn proxied_ports_are_checked_in_the_adapter() {
        let a = |t: &str| parse_adapter(Path::new("a.yaml"), t).map(|_| ()).map_err(|e| e.to_string());
        a(ADAPTER).unwrap();
        let m = a(&ADAPTER.replace("proxy: [redis]", "proxy: [redsi]")).unwrap_err();
        assert!(
            m.starts_with(
                "a.yaml:8:13: targets[0].proxy[0]: expected one of the adapter's ports (other, redis), got \"redsi\""
            ),
            "{m}"
        );
        let m = a(&ADAPTER.replace("  - name: plain\n", "  - name: plain\n    proxy: [redis]\n")).unwrap_err();
        assert!(
            m.starts_with("a.yaml:11:13: targets[1].proxy[0]: port redis is already proxied for target redis"),
            "{m}"
        );
        let k = "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: k\ndriver: kubernetes\nports: [redis]\ntargets:\n  - name: redis\n    proxy: [redis]\n    pod: {selector: app=redis}\n    faults: [kill]\n";
        let m = a(k).unwrap_err();
        assert!(
            m.starts_with("a.yaml:8:13: targets[0].proxy[0]: proxied ports are not supported on the kubernetes driver"),
            "{m}"
        );
        let d = "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: d\ndriver: docker\nports: [redis, x]\ntargets:\n  - name: redis\n    proxy: [x]\n    container:\n      image: redis@sha256:00\n      ports: {redis: 6379}\n";
        let m = a(d).unwrap_err();
        assert!(m.starts_with("a.yaml:8:13: targets[0].proxy[0]: a docker target's proxied port must be published: add x to container.ports"), "{m}");
    }
}

#[cfg(test)]
mod stress_tests {
    use super::*;

    const STRESS: &str = r#"apiVersion: repro.dev/chaos/v1
id: stress
version: 1
title: t
hypothesis: h
timeout: 1m
workloads:
  - name: w
    kind: shell
    run: echo hi
operations:
  - name: op
    uses: stress
    target: server
    duration: 2s
    stress:
      cpu: 2
flow: w
"#;

    fn with_stress(stress: &str) -> String {
        STRESS.replace("    stress:\n      cpu: 2\n", &format!("    stress:\n{stress}"))
    }

    fn err(text: &str) -> String {
        parse_experiment(Path::new("e.yaml"), text).unwrap_err().to_string()
    }

    #[test]
    fn stress_parses() {
        let e = parse_experiment(Path::new("e.yaml"), STRESS).unwrap();
        let s = &e.operations[0].stress.as_ref().unwrap().value;
        assert_eq!((s.cpu_workers(), s.vm(), s.io_workers()), (2, 0, 0));
        let e = parse_experiment(
            Path::new("e.yaml"),
            &with_stress("      memory: 256Mi\n      vm-workers: 2\n      io: 1\n      cpu: 64\n"),
        )
        .unwrap();
        let s = &e.operations[0].stress.as_ref().unwrap().value;
        assert_eq!(s.bytes_per_vm_worker(), Some(128 << 20));
        assert_eq!(s.describe(), "64 cpu workers, 1 io worker, 2 vm workers of 128 MiB");
        // A bare number of bytes, the largest memory, and back through serde.
        let e = parse_experiment(Path::new("e.yaml"), &with_stress("      memory: 68719476736\n")).unwrap();
        let text = serde_saphyr::to_string(&e).unwrap();
        let back = parse_experiment(Path::new("back.yaml"), &text).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&e).unwrap(), "{text}");
        assert_eq!(Fault::from_name("stress"), Some(Fault::Stress));
        assert!(!Fault::Stress.is_network() && !Fault::PROCESS.contains(&Fault::Stress));
        assert!(Fault::ALL.iter().all(|f| Fault::from_name(f.name()) == Some(*f)));
    }

    #[test]
    fn every_stress_error_is_located() {
        let cases: Vec<(String, &str)> = vec![
            (with_stress("      cpu: 0\n"), "e.yaml:17:12: operations[0].stress.cpu: expected 1 to 64 workers, got 0"),
            (with_stress("      cpu: 65\n"), "e.yaml:17:12: operations[0].stress.cpu: expected 1 to 64 workers, got 65"),
            (with_stress("      io: 100\n"), "e.yaml:17:11: operations[0].stress.io: expected 1 to 64 workers, got 100"),
            (with_stress("      cpu: -1\n"), "e.yaml:17:12: operations[0].stress.cpu: "),
            (with_stress("      cpu: two\n"), "e.yaml:17:12: operations[0].stress.cpu: "),
            (with_stress("      memory: 65Gi\n"), "e.yaml:17:15: operations[0].stress.memory: expected at most 64Gi, got 65 GiB"),
            (with_stress("      memory: lots\n"), "e.yaml:17:15: operations[0].stress.memory: expected a size such as 256Mi"),
            (with_stress("      memory: 0\n"), "e.yaml:17:15: operations[0].stress.memory: \"0\" is not a size"),
            (with_stress("      memory: 8Ki\n      vm-workers: 4\n"), "e.yaml:17:15: operations[0].stress.memory: expected at least 4Ki for each of the 4 vm workers, got 8 KiB in all"),
            (with_stress("      memory: 1Gi\n      vm-workers: 0\n"), "e.yaml:18:19: operations[0].stress.vm-workers: expected 1 to 64 workers, got 0"),
            (with_stress("      cpu: 1\n      vm-workers: 2\n"), "e.yaml:18:19: operations[0].stress.vm-workers: vm-workers goes with memory"),
            (with_stress("      vm-workers: 2\n"), "e.yaml:17:7: operations[0].stress: expected at least one of cpu (workers), memory (bytes, such as 256Mi) or io (workers)"),
            (with_stress("      cpus: 2\n"), "e.yaml:17:7: operations[0].stress.cpus: unknown field `cpus`, expected one of cpu, memory, io, vm-workers"),
            (STRESS.replace("    stress:\n      cpu: 2\n", ""), "e.yaml:13:11: operations[0].stress: the stress fault needs `stress:` with at least one of cpu, memory, io"),
            (STRESS.replace("    uses: stress\n", "    uses: kill\n"), "e.yaml:17:7: operations[0].stress: `stress` goes with the stress fault, not with kill"),
            (STRESS.replace("    uses: stress\n", "    uses: latency\n"), "e.yaml:17:7: operations[0].stress: `stress` goes with the stress fault, not with latency"),
            (STRESS.replace("    target: server\n", ""), "e.yaml:13:11: operations[0].target: the stress fault needs a `target`: an adapter target"),
            (STRESS.replace("    target: server\n", "    target: w\n"), "e.yaml:14:13: operations[0].target: the target of the stress fault is an adapter target, not a workload (w)"),
        ];
        let mut wrong = Vec::new();
        for (text, want) in cases {
            let m = err(&text);
            if !m.starts_with(want) {
                wrong.push(format!("want {want}\n got {m}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn stress_is_refused_on_the_docker_driver() {
        let e = parse_experiment(Path::new("e.yaml"), STRESS).unwrap();
        let p = "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: p\ndriver: process\ntargets:\n  - name: server\n    start: exec sleep 100\n";
        validate_against_adapter(Path::new("e.yaml"), &e, &parse_adapter(Path::new("a.yaml"), p).unwrap()).unwrap();
        let d = "apiVersion: repro.dev/chaos/v1\nkind: adapter\nname: d\ndriver: docker\ntargets:\n  - name: server\n    container:\n      image: redis@sha256:00\n";
        let a = parse_adapter(Path::new("a.yaml"), d).unwrap();
        let m = validate_against_adapter(Path::new("e.yaml"), &e, &a).unwrap_err().to_string();
        assert!(m.starts_with("e.yaml:13:11: operations[0].uses: stress runs stress-ng beside a target of the process driver, and adapter d uses another: the docker driver does not run it"), "{m}");
    }
}
