//! `repro chaos ...`: parsing, dispatch and printing. The work is done by `repro_chaos`.
//!
//! Exit codes: 0 PASS, XFAIL or n/a (and success of list/show/preflight), 1 FAIL (including XPASS),
//! 2 ERROR (the harness, a preflight check or a hook broke) and bad input (unreadable or invalid YAML,
//! unknown experiment, adapter or run directory, an experiment over a limit), 130/143 a run interrupted by
//! SIGINT/SIGTERM (undone, marked INTERRUPTED).
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use repro_chaos::api;
use repro_chaos::evaluate::Evaluation;
use repro_chaos::limits::Limits;
use repro_chaos::runner::{self, RunOptions};

use crate::CliError;

/// Exit code when the harness could not do its job (bad input included).
/// Bad input and a broken harness (verdict ERROR).
const EXIT_ERROR: i32 = repro_model::ExitCode::Usage.code();

#[derive(Debug, Subcommand)]
pub enum ChaosCommand {
    /// Run an experiment: preflight, targets, observers, the flow, undo, checks; prints the check lines,
    /// the verdict and the run directory. Exit 0 PASS/XFAIL/n/a, 1 FAIL, 2 ERROR.
    Run {
        /// The experiment: a YAML file, or an id found under --dir.
        experiment: String,
        /// The adapter: a YAML file or a name (default: the experiment's default-adapter).
        #[arg(long)]
        adapter: Option<String>,
        /// Seed for every random choice (which instance `select: one` hits); recorded in the timeline.
        #[arg(long)]
        seed: Option<u64>,
        /// Where run directories go (default .repro/chaos).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Don't print events to stderr while running.
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        junit: crate::ci::JunitArg,
        #[command(flatten)]
        common: Common,
    },
    /// Run a finished run directory's experiment again from the run directory alone (its experiment,
    /// adapter, inputs/ and seed) and say whether the verdict, every check's outcome and the fault schedule
    /// reproduced, N/N. Exit 0 all reproduced, 122 one did not, 2 bad input, 130/143 interrupted.
    Replay {
        /// The run directory.
        run: PathBuf,
        /// How many times.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10000))]
        runs: u32,
        /// Where the replays' run directories go (default: beside the original's).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Don't print events to stderr while running.
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Cut a failing run's fault schedule down to the fewest operations (and shortest durations) that still
    /// fail the same check, every candidate run --runs times; writes the shrunk experiment and prints its path
    /// and the run directory of its last reproduction. Exit 0 done, 2 bad input or nothing to shrink, 130/143
    /// interrupted.
    Shrink {
        /// The run directory of a failing run.
        run: PathBuf,
        /// Runs of each candidate; it counts only if every run fails the check.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// The check to keep failing (default: the run's first failing check).
        #[arg(long)]
        check: Option<String>,
        /// Where to write the shrunk experiment (default RUN/shrink/<id>-shrunk.yaml).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// At most this many candidates.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10000))]
        max_candidates: u32,
        /// Don't print events to stderr while running.
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Load and check an experiment and its adapter (schema, references, limits) without running anything.
    Validate {
        experiment: String,
        #[arg(long)]
        adapter: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// List the experiments found under --dir.
    List {
        /// Only experiments that mention this issue.
        #[arg(long)]
        issue: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Describe an experiment.
    Show {
        experiment: String,
        #[command(flatten)]
        common: Common,
    },
    /// Run only the preflight checks of an experiment on an adapter. Exit 0 ready or n/a, 2 ERROR.
    Preflight {
        experiment: String,
        #[arg(long)]
        adapter: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Recompute the verdict of a run directory offline; writes evaluations/<ts>.json.
    Evaluate {
        /// The run directory.
        run: PathBuf,
        /// Evaluate with this experiment file instead of the run's experiment.yaml.
        #[arg(long)]
        experiment: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Write a self-contained HTML report of a run directory (verdict, checks, timeline, metrics charts).
    Report {
        /// The run directory.
        run: PathBuf,
        /// Where to write it (default RUN/report.html).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Write a Markdown page with the charts as SVG files beside it, for a bug report or a PR.
    Share {
        /// The run directory.
        run: PathBuf,
        /// The directory to write README.md and the SVG files into (default RUN/share).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Export the scraped metrics and the timeline as OpenMetrics text with timestamps (for
    /// `promtool tsdb create-blocks-from openmetrics`).
    Export {
        /// The run directory.
        run: PathBuf,
        /// Where to write it (default RUN/metrics.om; `-` for stdout).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Serve a page comparing runs side by side on 127.0.0.1 until interrupted.
    Dashboard {
        /// Run directories.
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        /// Port on 127.0.0.1 (0: any free port; the URL is printed).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
}

#[derive(Debug, Args)]
pub struct Common {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Where experiments are looked up by id (default examples/chaos if present, else .).
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    limits: LimitArgs,
}

impl Common {
    fn dir(&self) -> PathBuf {
        self.dir.clone().unwrap_or_else(api::default_search_dir)
    }
}

/// Raise (or lower) what an experiment may ask for; an experiment over a limit is refused when it is loaded.
#[derive(Debug, Args)]
#[command(next_help_heading = "Limits")]
pub struct LimitArgs {
    /// Instances of one workload and of all workloads together [default: 1000].
    #[arg(long, value_name = "N")]
    max_instances: Option<u64>,
    /// `times` of one repeat [default: 10000].
    #[arg(long, value_name = "N")]
    max_repeats: Option<u64>,
    /// Flow branches running at once [default: 64].
    #[arg(long, value_name = "N")]
    max_parallel: Option<u64>,
    /// Flow steps of one run: instance starts, operation runs, waits and delays, repeats multiplied out
    /// [default: 100000].
    #[arg(long, value_name = "N")]
    max_steps: Option<u64>,
    /// Check runs: workload checks x instances, plus experiment and preflight checks [default: 10000].
    #[arg(long, value_name = "N")]
    max_checks: Option<u64>,
    /// Any duration in the experiment or the adapter (timeouts, delays, repeat for) [default: 24h].
    #[arg(long, value_name = "DURATION", value_parser = parse_max_duration)]
    max_duration: Option<std::time::Duration>,
    /// Size of an experiment or adapter file in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    max_file_size: Option<u64>,
}

fn parse_max_duration(s: &str) -> Result<std::time::Duration, repro_chaos::model::DurationError> {
    repro_chaos::model::parse_duration_checked(s)
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        let d = Limits::default();
        Limits {
            instances: self.max_instances.unwrap_or(d.instances),
            repeats: self.max_repeats.unwrap_or(d.repeats),
            parallel: self.max_parallel.unwrap_or(d.parallel),
            steps: self.max_steps.unwrap_or(d.steps),
            checks: self.max_checks.unwrap_or(d.checks),
            duration: self.max_duration.unwrap_or(d.duration),
            file_bytes: self.max_file_size.unwrap_or(d.file_bytes),
        }
    }
}

fn err(e: repro_chaos::ChaosError) -> CliError {
    CliError::from_error(EXIT_ERROR, e)
}

fn rerr(e: repro_report::ReportError) -> CliError {
    CliError::from_error(EXIT_ERROR, e)
}

fn print_json(v: &impl serde::Serialize) -> Result<(), CliError> {
    let s = serde_json::to_string_pretty(v).map_err(|e| CliError::from_error(EXIT_ERROR, e))?;
    outln!("{s}");
    Ok(())
}

fn replay_line(i: u32, n: u32, r: &repro_chaos::replay::ReplayRun) -> String {
    let mut what = Vec::new();
    if !r.verdict_reproduced {
        what.push(format!("verdict {}", r.verdict));
    }
    for c in &r.checks {
        what.push(format!("{}: {} (was {})", c.check, c.replay, c.original));
    }
    if let Some(d) = &r.schedule_difference {
        what.push(format!("schedule: {d}"));
    }
    let status = if r.reproduced { "reproduced".to_string() } else { format!("DIFFERS: {}", what.join("; ")) };
    format!("replay {i}/{n}  {:<5}  {status}\n  {}", r.verdict, r.run_dir.display())
}

fn replay_summary(rep: &repro_chaos::replay::ReplayReport) -> String {
    let done = rep.runs.len();
    let mut s = format!(
        "reproduced {}/{}: verdict {} of {} (seed {}), every check's outcome and the fault schedule",
        rep.reproduced,
        rep.requested,
        rep.verdict,
        rep.original.display(),
        rep.seed
    );
    if let Some(sig) = rep.interrupted {
        s.push_str(&format!("\ninterrupted by signal {sig} after {done} of {} replays", rep.requested));
    }
    s
}

fn print_evaluation(ev: &Evaluation) {
    for l in ev.lines() {
        outln!("{l}");
    }
    outln!("{}", ev.verdict.as_str());
    if matches!(ev.verdict, repro_chaos::evaluate::Verdict::Error | repro_chaos::evaluate::Verdict::NotApplicable) {
        outln!("  {}", ev.reason);
    }
}

pub fn dispatch(cmd: ChaosCommand) -> Result<i32, CliError> {
    match cmd {
        ChaosCommand::Run { experiment, adapter, seed, state_dir, quiet, junit, common } => {
            junit.check()?;
            let limits = common.limits.limits();
            let exp = api::resolve_experiment_with(&experiment, &common.dir(), &limits).map_err(err)?;
            let ad = api::resolve_adapter_with(adapter.as_deref(), &exp, &limits).map_err(err)?;
            let reaper = std::env::current_exe().ok();
            let opts =
                RunOptions { seed, state_dir, echo: !quiet && !common.json, limits, reaper, ..Default::default() };
            let out = runner::run(&exp, &ad, &opts).map_err(err)?;
            junit.write(|| repro_ci::report::chaos(&out.evaluation))?;
            // The run directory is complete (the evaluation is its source of truth); the page is a view of it,
            // so a page that cannot be written is a warning, and `repro chaos report RUN` writes it again.
            let report = match repro_report::write_report(&out.run_dir, None) {
                Ok(p) => Some(p),
                Err(e) => {
                    errln!("repro: warning: report.html of {} not written: {e}", out.run_dir.display());
                    None
                }
            };
            if common.json {
                print_json(&out.evaluation)?;
            } else {
                print_evaluation(&out.evaluation);
                if let Some(p) = &report {
                    outln!("  report {}", p.display());
                }
                outln!("{}", out.run_dir.display());
            }
            // Interrupted: 128 + the signal, like a shell reports a command a signal ended.
            Ok(out.interrupted.map_or(out.evaluation.exit_code, |sig| 128 + sig))
        }
        ChaosCommand::Replay { run, runs, state_dir, quiet, common } => {
            let opts = repro_chaos::replay::ReplayOptions {
                runs,
                state_dir,
                echo: !quiet && !common.json,
                limits: common.limits.limits(),
                reaper: std::env::current_exe().ok(),
            };
            let json = common.json;
            let rep = repro_chaos::replay::replay(&run, &opts, |i, r| {
                // Each replay's page, as `chaos run` writes one (a view: a failure is a warning).
                if let Err(e) = repro_report::write_report(&r.run_dir, None) {
                    errln!("repro: warning: report.html of {} not written: {e}", r.run_dir.display());
                }
                if !json {
                    outln!("{}", replay_line(i, runs, r));
                }
            })
            .map_err(err)?;
            if json {
                print_json(&rep)?;
            } else {
                outln!("{}", replay_summary(&rep));
            }
            Ok(rep.exit_code())
        }
        ChaosCommand::Shrink { run, runs, check, output, max_candidates, quiet, common } => {
            let opts = repro_chaos::shrink::ShrinkOptions {
                runs,
                check,
                output,
                max_candidates,
                echo: !quiet && !common.json,
                limits: common.limits.limits(),
                reaper: std::env::current_exe().ok(),
            };
            let json = common.json;
            let mut n = 0;
            let rep = match repro_chaos::shrink::shrink(&run, &opts, &mut |t| {
                n += 1;
                if !json {
                    let durs: Vec<String> =
                        t.durations.iter().map(|d| d.map_or("-".into(), |d| format!("{d}s"))).collect();
                    outln!(
                        "candidate {n}: operations [{}] durations [{}]: failed {}/{} runs{}",
                        t.kept.iter().map(|k| format!("#{}", k + 1)).collect::<Vec<_>>().join(", "),
                        durs.join(", "),
                        t.failed,
                        t.runs,
                        if t.reproduced { ", reproduces" } else { "" }
                    );
                }
            }) {
                Ok(r) => r,
                Err(repro_chaos::ChaosError::Interrupted { signal }) => {
                    errln!("repro: chaos shrink: interrupted by signal {signal}");
                    return Ok(128 + signal);
                }
                Err(e) => return Err(err(e)),
            };
            if let Err(e) = repro_report::write_report(&rep.run_dir, None) {
                errln!("repro: warning: report.html of {} not written: {e}", rep.run_dir.display());
            }
            if json {
                print_json(&rep)?;
            } else {
                let kept: Vec<String> = rep
                    .kept
                    .iter()
                    .map(|i| {
                        let s = &rep.slots[*i];
                        format!("#{} {} at {} on [{}]", i + 1, s.operation, s.node, s.selected.join(", "))
                    })
                    .collect();
                outln!(
                    "shrunk {} operations to {} that still fail {}: {}",
                    rep.slots.len(),
                    rep.kept.len(),
                    rep.check,
                    if kept.is_empty() { "none (it fails without any fault)".to_string() } else { kept.join("; ") }
                );
                outln!("  {} candidates, {} runs, {}s", rep.candidates.len(), rep.runs, rep.seconds);
                outln!("  experiment {}", rep.experiment.display());
                outln!("{}", rep.run_dir.display());
            }
            Ok(0)
        }
        ChaosCommand::Validate { experiment, adapter, common } => {
            let limits = common.limits.limits();
            let exp = api::resolve_experiment_with(&experiment, &common.dir(), &limits).map_err(err)?;
            let ad = api::resolve_adapter_with(adapter.as_deref(), &exp, &limits).map_err(err)?;
            if common.json {
                print_json(&serde_json::json!({
                    "experiment": exp.path, "id": exp.experiment.id.value, "adapter": ad.adapter.name, "ok": true
                }))?;
            } else {
                outln!("ok  {} ({}) with adapter {}", exp.experiment.id.value, exp.path.display(), ad.adapter.name);
            }
            Ok(0)
        }
        ChaosCommand::List { issue, common } => {
            let (entries, errors) = api::list_with(&common.dir(), issue.as_deref(), &common.limits.limits());
            if common.json {
                let invalid: Vec<serde_json::Value> =
                    errors.iter().map(|e| serde_json::json!({"path": error_path(e), "error": e.to_string()})).collect();
                print_json(&serde_json::json!({"experiments": entries, "invalid": invalid}))?;
            } else {
                for e in &entries {
                    outln!("{} (v{})", e.id, e.version);
                    outln!("  {}", e.title);
                    if !e.issues.is_empty() {
                        outln!("  issues: {}", e.issues.join(", "));
                    }
                    for l in wrap(&e.hypothesis, 76) {
                        outln!("    {l}");
                    }
                    outln!();
                }
                for e in &errors {
                    outln!("INVALID {e}");
                }
            }
            if errors.is_empty() {
                Ok(0)
            } else {
                errln!(
                    "repro: chaos list: {} invalid experiment file{} (listed above)",
                    errors.len(),
                    if errors.len() == 1 { "" } else { "s" }
                );
                Ok(repro_model::ExitCode::Usage.code())
            }
        }
        ChaosCommand::Show { experiment, common } => {
            let exp = api::resolve_experiment_with(&experiment, &common.dir(), &common.limits.limits()).map_err(err)?;
            if common.json {
                print_json(&api::show_json(&exp))?;
            } else {
                out!("{}", api::show_text(&exp));
            }
            Ok(0)
        }
        ChaosCommand::Preflight { experiment, adapter, common } => {
            let limits = common.limits.limits();
            let exp = api::resolve_experiment_with(&experiment, &common.dir(), &limits).map_err(err)?;
            let ad = api::resolve_adapter_with(adapter.as_deref(), &exp, &limits).map_err(err)?;
            let rep = api::preflight(&exp, &ad).map_err(err)?;
            if common.json {
                print_json(&rep)?;
            } else {
                for c in &rep.checks {
                    for l in c.lines() {
                        outln!("{l}");
                    }
                }
                outln!("{}", rep.status);
                if rep.status != "ready" {
                    outln!("  {}", rep.reason);
                }
            }
            Ok(rep.exit_code)
        }
        ChaosCommand::Evaluate { run, experiment, common } => {
            let (ev, path) =
                api::evaluate_run_with(&run, experiment.as_deref(), &common.limits.limits()).map_err(err)?;
            if common.json {
                let mut v = serde_json::to_value(&ev).map_err(|e| CliError::new(EXIT_ERROR, e.to_string()))?;
                v["evaluation_file"] = serde_json::json!(path);
                print_json(&v)?;
            } else {
                let exp_desc = match &experiment {
                    Some(p) => p.display().to_string(),
                    None => Path::new(&run).join("experiment.yaml").display().to_string(),
                };
                let sha = ev.experiment["sha256"].as_str().unwrap_or("").chars().take(12).collect::<String>();
                let asha = ev.adapter["sha256"].as_str().unwrap_or("").chars().take(12).collect::<String>();
                outln!(
                    "  evaluated with {exp_desc} (sha256 {sha}) and adapter {} (sha256 {asha})",
                    ev.adapter["name"].as_str().unwrap_or("?")
                );
                print_evaluation(&ev);
                outln!("{}", path.display());
            }
            Ok(ev.exit_code)
        }
        ChaosCommand::Report { run, output } => {
            let p = repro_report::write_report(&run, output.as_deref()).map_err(rerr)?;
            outln!("{}", p.display());
            Ok(0)
        }
        ChaosCommand::Share { run, output } => {
            let (_, files) = repro_report::write_share(&run, output.as_deref()).map_err(rerr)?;
            for f in files {
                outln!("{}", f.display());
            }
            Ok(0)
        }
        ChaosCommand::Export { run, output } => {
            if output.as_deref() == Some(Path::new("-")) {
                let r = repro_report::Run::read(&run).map_err(rerr)?;
                out!("{}", repro_report::openmetrics::export(&r));
            } else {
                let p = repro_report::write_export(&run, output.as_deref()).map_err(rerr)?;
                outln!("{}", p.display());
            }
            Ok(0)
        }
        ChaosCommand::Dashboard { runs, port } => {
            let d = repro_report::serve::Dashboard::bind(runs, port).map_err(rerr)?;
            outln!("{}", d.url());
            crate::out::flush_out();
            d.serve(|e| errln!("repro: {e}")).map_err(rerr)?;
            Ok(0)
        }
    }
}

/// The file an error of `chaos list` is about.
fn error_path(e: &repro_chaos::ChaosError) -> Option<String> {
    use repro_chaos::ChaosError as E;
    match e {
        E::Yaml { path, .. } | E::Invalid { path, .. } | E::Io { path, .. } | E::DuplicateId { path, .. } => {
            Some(path.display().to_string())
        }
        _ => None,
    }
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    if !line.is_empty() {
        out.push(line);
    }
    out
}
