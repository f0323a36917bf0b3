//! The JUnit mapping of each command's result: one testcase per run (`run`, each run of `run --verify`), per
//! replay run (`replay`), per attempt (`hunt`) and per check (`chaos run`). docs/ci.md documents it.

use std::path::Path;

use repro_chaos::evaluate::{Evaluation, Outcome as CheckOutcome, Verdict as ChaosVerdict};
use repro_hunt::config::Dimension;
use repro_hunt::hunt::HuntReport;
use repro_hunt::runner::{Outcome as HuntOutcome, Verdict as HuntVerdict};
use repro_model::manifest::Signature;
use repro_model::run::{RunOutcome, RunRecord, RunSettings};
use repro_model::ExitCode;
use repro_pack::replay::ReplayReport;
use repro_sandbox::verify::{Difference, VerifyReport};

use crate::junit::{Case, Outcome, Problem, Report, Suite};

/// How much of a run's saved stderr is read for its tail.
const STDERR_READ_BYTES: u64 = 64 * 1024;

/// The command as one line, quoted like a shell would need it.
pub fn command_line(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last lines of a run directory's `stderr`, normalized as a pack's failure signature is.
pub fn stderr_tail(run_dir: &Path) -> Vec<String> {
    use std::io::{Read as _, Seek as _};
    let Ok(mut f) = std::fs::File::open(run_dir.join("stderr")) else { return Vec::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(std::io::SeekFrom::Start(len.saturating_sub(STDERR_READ_BYTES)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    repro_pack::signature::stderr_tail(&buf)
}

/// The failure text: exit status, failing tests, the stderr tail, then `extra` lines (pack, run directory).
fn signature_text(exit_status: i32, failing: &[String], tail: &[String], extra: &[String]) -> String {
    let mut t = format!("exit status: {exit_status}\n");
    if !failing.is_empty() {
        t.push_str(&format!("failing tests: {}\n", failing.join(", ")));
    }
    if !tail.is_empty() {
        t.push_str("stderr (last lines):\n");
        for l in tail {
            t.push_str(&format!("  {l}\n"));
        }
    }
    for e in extra {
        t.push_str(e);
        t.push('\n');
    }
    t
}

fn summary(exit_status: i32, tail: &[String]) -> String {
    match tail.last() {
        Some(l) => format!("exit {exit_status}: {l}"),
        None => format!("exit {exit_status}"),
    }
}

fn base_properties(s: &RunSettings) -> Vec<(String, String)> {
    vec![
        ("command".into(), command_line(&s.command)),
        ("seed".into(), s.seed.to_string()),
        ("epoch".into(), s.epoch.rfc3339.clone()),
    ]
}

/// The outcome of one recorded run: passed on exit 0; a failure for a non-zero exit, a signal or a stuck
/// guest; an error when it could not run (not found, not executable, setup) or determinism was not enforced.
fn run_outcome(r: &RunRecord, dir: &Path, pack: Option<&Path>) -> Outcome {
    let tail = stderr_tail(dir);
    let mut extra = Vec::new();
    if let Some(p) = pack {
        extra.push(format!("pack: {}", p.display()));
    }
    extra.push(format!("run: {}", dir.display()));
    let text = signature_text(r.exit_status, &[], &tail, &extra);
    if !r.determinism.not_enforced.is_empty() {
        return Outcome::Error(Problem {
            message: format!("determinism not enforced: {}", r.determinism.not_enforced.join("; ")),
            kind: "not-deterministic".into(),
            text,
        });
    }
    if let Some(s) = &r.determinism.stuck {
        return Outcome::Failure(Problem {
            message: format!("stuck, stopped by the watchdog (exit 120): {s}"),
            kind: "stuck".into(),
            text,
        });
    }
    match &r.outcome {
        RunOutcome::Exited { code: 0 } => Outcome::Passed,
        RunOutcome::Exited { code } => {
            Outcome::Failure(Problem { message: summary(*code, &tail), kind: "exit-status".into(), text })
        }
        RunOutcome::Signaled { signal, name } => {
            Outcome::Failure(Problem { message: format!("killed by {name} ({signal})"), kind: "signal".into(), text })
        }
        RunOutcome::ExecFailed { message, .. } => {
            Outcome::Error(Problem { message: format!("cannot execute: {message}"), kind: "exec".into(), text })
        }
        RunOutcome::SetupFailed { message } => {
            Outcome::Error(Problem { message: format!("setup failed: {message}"), kind: "setup".into(), text })
        }
    }
}

/// `repro run --junit`: one testcase, the run. `environment` is the identity recorded with `--record-inputs`.
pub fn run(r: &RunRecord, dir: &Path, environment: Option<&str>) -> Report {
    let mut properties = vec![("run_id".to_string(), r.id.clone())];
    properties.extend(base_properties(&r.settings));
    if let Some(e) = environment {
        properties.push(("environment".into(), e.to_string()));
    }
    let case = Case {
        classname: "repro.run".into(),
        name: command_line(&r.settings.command),
        time_ms: r.duration_ms,
        outcome: run_outcome(r, dir, None),
        system_out: Some(format!("run: {}\n", dir.display())),
    };
    Report { name: "repro run".into(), suites: vec![Suite { name: "repro run".into(), properties, cases: vec![case] }] }
}

/// `repro run --verify --junit`: one testcase per run, `run N of M`. A run fails when its command failed (as
/// `repro run` would report it) or when it differs from the first run (the differences are its failure text).
pub fn verify(report: &VerifyReport, settings: &RunSettings, environment: Option<&str>) -> Report {
    let mut properties = base_properties(settings);
    properties.push(("identical".into(), report.identical.to_string()));
    if let Some(e) = environment {
        properties.push(("environment".into(), e.to_string()));
    }
    let n = report.runs.len();
    let mut cases = Vec::new();
    for (i, v) in report.runs.iter().enumerate() {
        let number = i + 1;
        properties.push((format!("run_id.{number}"), v.id.clone()));
        let record: Option<RunRecord> =
            std::fs::read(v.dir.join("run.json")).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let mut outcome = match &record {
            Some(r) => run_outcome(r, &v.dir, None),
            None if v.exit_status == 0 => Outcome::Passed,
            None => {
                let tail = stderr_tail(&v.dir);
                Outcome::Failure(Problem {
                    message: summary(v.exit_status, &tail),
                    kind: "exit-status".into(),
                    text: signature_text(v.exit_status, &[], &tail, &[format!("run: {}", v.dir.display())]),
                })
            }
        };
        let diffs: Vec<String> = report.differences.iter().filter(|d| diff_run(d) == number).map(describe).collect();
        if !diffs.is_empty() {
            let mut text = format!("run {number} differs from run 1 (repro exits 122):\n");
            for d in &diffs {
                text.push_str(&format!("  {d}\n"));
            }
            for c in &report.not_enforced {
                text.push_str(&format!("likely cause: determinism not enforced: {c}\n"));
            }
            text.push_str(&format!("run: {}\n", v.dir.display()));
            outcome = Outcome::Failure(Problem {
                message: format!("not reproducible: {}", diffs[0]),
                kind: "verify-differs".into(),
                text,
            });
        }
        let time_ms = record.as_ref().map_or(0, |r| r.duration_ms);
        cases.push(Case {
            classname: "repro.run.verify".into(),
            name: format!("run {number} of {n}: {}", command_line(&settings.command)),
            time_ms,
            outcome,
            system_out: Some(format!("run: {}\n", v.dir.display())),
        });
    }
    Report {
        name: "repro run --verify".into(),
        suites: vec![Suite { name: "repro run --verify".into(), properties, cases }],
    }
}

fn diff_run(d: &Difference) -> usize {
    match d {
        Difference::ExitStatus { run, .. }
        | Difference::Output { run, .. }
        | Difference::FilePresence { run, .. }
        | Difference::FileContent { run, .. } => *run,
    }
}

fn describe(d: &Difference) -> String {
    match d {
        Difference::ExitStatus { first, this, .. } => format!("exit status: run 1 exited {first}, this run {this}"),
        Difference::Output { stream, line, first, this, .. } => format!(
            "{stream} differs at line {line}: run 1 `{}`, this run `{}`",
            first.as_deref().unwrap_or("(end of output)"),
            this.as_deref().unwrap_or("(end of output)")
        ),
        Difference::FilePresence { path, in_first, .. } => {
            format!("file {path}: changed in {} only", if *in_first { "run 1" } else { "this run" })
        }
        Difference::FileContent { path, byte_offset, .. } => {
            format!("file {path}: content differs from byte {byte_offset}")
        }
    }
}

fn run_id(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// `repro replay --junit`: one testcase per replay run, passed when the run reproduced the recorded failure
/// signature (a replay tests that the failure reproduces).
pub fn replay(r: &ReplayReport) -> Report {
    let pack = r.pack.display().to_string();
    let mut properties = vec![
        ("pack".to_string(), pack.clone()),
        ("recorded_signature".to_string(), r.recorded.summary()),
        ("reproduced".to_string(), format!("{}/{}", r.reproduced, r.runs.len())),
    ];
    let n = r.runs.len();
    let mut cases = Vec::new();
    for (i, run) in r.runs.iter().enumerate() {
        properties.push((format!("run_id.{}", i + 1), run_id(&run.run_dir)));
        let sig = &run.signature;
        let mut extra = vec![format!("pack: {pack}"), format!("run: {}", run.run_dir.display())];
        let outcome = if let Some(d) = &run.diverged {
            Outcome::Error(Problem {
                message: format!("diverged from the recording: {d}"),
                kind: "diverged".into(),
                text: signature_text(sig.exit_status, &sig.failing_tests, &sig.stderr_tail, &extra),
            })
        } else if let Some(s) = &run.stuck {
            Outcome::Failure(Problem {
                message: format!("stuck, stopped by the watchdog (exit 120): {s}"),
                kind: "stuck".into(),
                text: signature_text(sig.exit_status, &sig.failing_tests, &sig.stderr_tail, &extra),
            })
        } else if run.differences.is_empty() {
            Outcome::Passed
        } else {
            let mut head = vec!["did not reproduce the recorded signature:".to_string()];
            head.extend(run.differences.iter().map(|d| format!("  {d}")));
            head.push(format!("recorded: {}", r.recorded.summary()));
            head.append(&mut extra);
            Outcome::Failure(Problem {
                message: format!("not reproduced: {}", run.differences[0]),
                kind: "not-reproduced".into(),
                text: signature_text(sig.exit_status, &sig.failing_tests, &sig.stderr_tail, &head),
            })
        };
        cases.push(Case {
            classname: "repro.replay".into(),
            name: format!("replay {} of {n}: {}", i + 1, file_name(&r.pack)),
            time_ms: run.duration_ms,
            outcome,
            system_out: Some(format!(
                "recorded: {}\ngot: {}\nrun: {}\n",
                r.recorded.summary(),
                sig.summary(),
                run.run_dir.display()
            )),
        });
    }
    Report { name: "repro replay".into(), suites: vec![Suite { name: "repro replay".into(), properties, cases }] }
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

fn failure_of(sig: &Signature, extra: &[String]) -> Problem {
    Problem {
        message: summary(sig.exit_status, &sig.stderr_tail),
        kind: "exit-status".into(),
        text: signature_text(sig.exit_status, &sig.failing_tests, &sig.stderr_tail, extra),
    }
}

/// `repro hunt --junit`: one testcase per attempt (configuration tried), named by the varied values; a failing
/// configuration is a failure with its signature; one the supervisor could not enforce is skipped (it is no
/// evidence); one repro could not try is an error. The pack `--capture` wrote is named in the first failure.
pub fn hunt(outcomes: &[HuntOutcome], dims: &[Dimension], report: &HuntReport) -> Report {
    let mut properties = vec![
        ("dimensions".to_string(), dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")),
        ("runs".to_string(), report.runs.to_string()),
        ("failed".to_string(), report.failed.to_string()),
    ];
    if let Some(p) = &report.pack {
        properties.push(("pack".into(), p.display().to_string()));
    }
    let mut sorted: Vec<&HuntOutcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| o.index);
    let mut pack_named = false;
    let cases = sorted
        .into_iter()
        .map(|o| {
            let mut extra = Vec::new();
            if o.verdict == HuntVerdict::Fail && !pack_named {
                if let Some(p) = &report.pack {
                    extra.push(format!("pack: {}", p.display()));
                    pack_named = true;
                }
            }
            extra.push(format!("seed: {}", o.config.seed));
            extra.push(format!("run: {}", o.run_dir.display()));
            let outcome = match o.verdict {
                HuntVerdict::Pass => Outcome::Passed,
                HuntVerdict::Fail => Outcome::Failure(failure_of(&o.signature, &extra)),
                HuntVerdict::Unenforced => Outcome::Skipped(format!(
                    "determinism not enforced (exit {}): {}",
                    ExitCode::NotDeterministic.code(),
                    o.not_enforced.join("; ")
                )),
                HuntVerdict::Error => Outcome::Error(Problem {
                    message: format!("repro could not try this configuration (exit {})", o.exit_status),
                    kind: "repro-error".into(),
                    text: signature_text(o.exit_status, &[], &o.signature.stderr_tail, &extra),
                }),
            };
            let described = o.config.describe(dims);
            Case {
                classname: "repro.hunt".into(),
                name: format!(
                    "attempt {}: {}",
                    o.index + 1,
                    if described.is_empty() { "baseline".into() } else { described }
                ),
                time_ms: o.duration_ms,
                outcome,
                system_out: Some(format!("run: {}\n", o.run_dir.display())),
            }
        })
        .collect();
    Report { name: "repro hunt".into(), suites: vec![Suite { name: "repro hunt".into(), properties, cases }] }
}

/// `repro chaos run --junit`: one testsuite for the experiment, one testcase per check (`scope/id`), so a CI
/// report names the check that failed. ok and flaky checks pass; FAIL and XPASS are failures; XFAIL (a known
/// failure) is skipped naming its issue. A verdict of ERROR adds an error testcase `verdict` with the reason;
/// n/a, a skipped one.
pub fn chaos(ev: &Evaluation) -> Report {
    let id = ev.experiment.get("id").and_then(|v| v.as_str()).unwrap_or("experiment").to_string();
    let mut properties = vec![
        ("experiment".to_string(), id.clone()),
        ("verdict".to_string(), ev.verdict.as_str().to_string()),
        ("run_dir".to_string(), ev.run_dir.display().to_string()),
    ];
    if let Some(a) = ev.adapter.get("name").and_then(|v| v.as_str()) {
        properties.push(("adapter".into(), a.to_string()));
    }
    let mut cases: Vec<Case> = ev
        .checks
        .iter()
        .map(|c| {
            let text = || {
                let mut t = c.details.iter().map(|d| format!("{d}\n")).collect::<String>();
                t.push_str(&format!("run: {}\n", ev.run_dir.display()));
                t
            };
            let outcome = match c.outcome {
                CheckOutcome::Ok | CheckOutcome::Flaky if c.passed || c.outcome == CheckOutcome::Flaky => {
                    Outcome::Passed
                }
                CheckOutcome::Xfail => {
                    Outcome::Skipped(format!("known failure: {}", c.issue.as_deref().unwrap_or("expected to fail")))
                }
                CheckOutcome::Xpass => Outcome::Failure(Problem {
                    message: "passed although expected to fail: update the expectation".into(),
                    kind: "xpass".into(),
                    text: text(),
                }),
                _ => Outcome::Failure(Problem {
                    message: c.details.first().cloned().unwrap_or_else(|| format!("{} failed", c.id)),
                    kind: format!("{}-check", c.scope),
                    text: text(),
                }),
            };
            Case {
                classname: format!("repro.chaos.{id}.{}", c.scope),
                name: c.id.clone(),
                outcome,
                ..Default::default()
            }
        })
        .collect();
    match ev.verdict {
        ChaosVerdict::Error => cases.push(Case {
            classname: format!("repro.chaos.{id}"),
            name: "verdict".into(),
            outcome: Outcome::Error(Problem {
                message: ev.reason.clone(),
                kind: "harness-error".into(),
                text: format!("verdict ERROR (exit {}): {}\nrun: {}\n", ev.exit_code, ev.reason, ev.run_dir.display()),
            }),
            ..Default::default()
        }),
        ChaosVerdict::NotApplicable => cases.push(Case {
            classname: format!("repro.chaos.{id}"),
            name: "verdict".into(),
            outcome: Outcome::Skipped(format!("n/a: {}", ev.reason)),
            ..Default::default()
        }),
        _ if cases.is_empty() => cases.push(Case {
            classname: format!("repro.chaos.{id}"),
            name: "verdict".into(),
            outcome: if ev.exit_code == 0 {
                Outcome::Passed
            } else {
                Outcome::Failure(Problem {
                    message: ev.reason.clone(),
                    kind: "verdict".into(),
                    text: format!("verdict {}: {}\n", ev.verdict.as_str(), ev.reason),
                })
            },
            ..Default::default()
        }),
        _ => {}
    }
    Report { name: "repro chaos run".into(), suites: vec![Suite { name: format!("chaos {id}"), properties, cases }] }
}
