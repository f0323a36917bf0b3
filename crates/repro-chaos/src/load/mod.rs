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
