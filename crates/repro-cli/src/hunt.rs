//! `repro hunt` and `repro explain`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use repro_hunt::cancel::{Cancel, SignalGuard};
use repro_hunt::config::{self, Config, Dimension, Space, SpaceOptions};
use repro_hunt::explain::BaselineEpoch;
use repro_hunt::runner::{self, Budget, Runner};
use repro_hunt::{explain, hunt, HuntError};
use std::sync::Arc;

use repro_model::ExitCode;

use crate::{print_json, CliError};

impl From<HuntError> for CliError {
    fn from(e: HuntError) -> Self {
        CliError::from_error(e.exit_code(), e)
    }
}

/// Options shared by hunt and explain.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Dimensions to vary: seed, epoch, dir-order, env, cpus, hostname, clock-step, schedule (the interleaving of
    /// the guest's threads: scheduler seeds under the random and pct policies, deciding before reads, writes and
    /// signals too, as `repro run --sched-points io`), or all.
    #[arg(long, value_name = "LIST", default_value = "all")]
    vary: String,
    /// Seeds to try: a count (seeds 0..N) or a range A..B.
    #[arg(long, value_name = "N|A..B")]
    seeds: Option<String>,
    /// Scheduler seeds to try when varying the schedule: a count (0..N) or a range A..B [default: as --seeds].
    #[arg(long, value_name = "N|A..B")]
    sched_seeds: Option<String>,
    /// Dates to try besides the calendar edges: FROM..TO (dates, RFC 3339 or Unix seconds).
    #[arg(long, value_name = "FROM..TO")]
    epoch_range: Option<String>,
    /// Values of an environment variable to try: NAME=V1,V2,... (repeatable; replaces the built-in TZ,
    /// locale, HOME, USER and PATH variants).
    #[arg(long, value_name = "NAME=V1,V2")]
    env_variant: Vec<String>,
    /// Parallel runs, at most 256 [default: the number of CPUs].
    #[arg(long, short, value_name = "N")]
    jobs: Option<usize>,
    /// The baseline epoch (as `repro run --epoch`) [default: $SOURCE_DATE_EPOCH, else the git HEAD's commit
    /// time, else 2025-01-01T00:00:00Z].
    #[arg(long, value_name = "TIME")]
    epoch: Option<String>,
    /// Options for every run, passed to `repro run` (repeatable): --memory, --bind, --env.
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    #[arg(long, value_name = "HOST[:GUEST][:ro|rw]")]
    bind: Vec<String>,
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Where run directories go [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
}

struct Prepared {
    runner: Runner,
    space: Space,
    base: Config,
    jobs: usize,
    epoch: BaselineEpoch,
    /// SIGINT/SIGTERM stop the child runs while this lives.
    _signals: Option<SignalGuard>,
}

/// Installs the SIGINT/SIGTERM handler of a search; without it (it could not be registered) a signal ends
/// repro at once and the child runs finish on their own, which is said.
pub(crate) fn install(cancel: &Arc<Cancel>) -> Option<SignalGuard> {
    match cancel.install() {
        Ok(g) => Some(g),
        Err(e) => {
            errln!("repro: warning: SIGINT/SIGTERM handler not installed ({e}): a signal ends repro at once");
            None
        }
    }
}

/// A progress line on stderr, unless quiet.
fn note(quiet: bool, kind: &str, line: &str) {
    if !quiet {
        errln!("[{kind}] {line}");
    }
}

/// The most parallel runs `--jobs` may ask for: each is a worker thread and a sandbox.
const MAX_JOBS: usize = 256;

fn prepare(
    a: &SearchArgs,
    command: &[String],
    pack: Option<&std::path::Path>,
    kind: &str,
    default_seeds: u64,
) -> Result<Prepared, CliError> {
    if command.is_empty() && pack.is_none() {
        return Err(CliError::usage(format!("no command given: repro {kind} [OPTIONS] -- CMD [ARGS...]")));
    }
    let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).max(1);
    if jobs > MAX_JOBS {
        return Err(CliError::usage(format!("--jobs {jobs}: at most {MAX_JOBS} parallel runs")));
    }
    let dims = Dimension::parse_list(&a.vary)?;
    let seeds = match &a.seeds {
        Some(s) => Some(config::parse_seeds(s)?),
        None => Some((0..default_seeds).collect()),
    };
    let sched_seeds = match &a.sched_seeds {
        Some(s) => Some(config::parse_seeds(s)?),
        None => seeds.clone(),
    };
    let epoch_range = a.epoch_range.as_deref().map(|r| config::parse_date_range("--epoch-range", r)).transpose()?;
    let env_variants = a.env_variant.iter().map(|v| config::parse_env_variant(v)).collect::<Result<Vec<_>, _>>()?;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    // As `repro run` decides it: --epoch, SOURCE_DATE_EPOCH, the git HEAD's commit time, the default.
    let resolved = match &a.epoch {
        Some(e) => repro_model::run::Epoch {
            unix: config::parse_date("--epoch", e)?,
            rfc3339: String::new(),
            source: repro_model::run::EpochSource::Flag,
        },
        None => repro_sandbox::parse::resolve_epoch(None, std::env::var("SOURCE_DATE_EPOCH").ok().as_deref(), &cwd)
            .map_err(|e| CliError::usage(e.to_string()))?,
    };
    let base_epoch = resolved.unix;
    let mut epoch = BaselineEpoch::new(base_epoch, epoch_source(&resolved.source));
    let space = Space::new(&SpaceOptions { dims, seeds, epoch_range, env_variants, random_epochs: 12, sched_seeds }, 0);
    // The baseline: `repro run`'s defaults, or what the pack recorded.
    let base = match pack {
        None => Config::baseline(base_epoch),
        Some(p) => {
            let pack = repro_pack::read_pack(p, &repro_pack::Store::default_store(), None).map_err(CliError::from)?;
            // Variables redacted at capture must be supplied (`--env NAME` or `--env NAME=VALUE`): they are passed
            // to every replay, never replayed with their markers.
            let supplied: Vec<&str> = a.env.iter().map(|e| e.split_once('=').map_or(e.as_str(), |(n, _)| n)).collect();
            let missing: Vec<String> = repro_model::secrets::redacted_names(&pack.manifest.command.env)
                .into_iter()
                .filter(|n| !supplied.contains(&n.as_str()))
                .collect();
            if !missing.is_empty() {
                return Err(CliError::usage(format!(
                    "PACK '{}': its variables {} were redacted at capture; supply each with --env NAME (the value \
                     of this environment) or --env NAME=VALUE",
                    p.display(),
                    missing.join(", ")
                )));
            }
            let d = &pack.manifest.determinism;
            epoch = BaselineEpoch::new(d.epoch_unix, "pack");
            Config {
                seed: d.seed,
                epoch: d.epoch_unix,
                cpus: pack.manifest.resources.cpus,
                clock_step_ns: d.clock_step_ns,
                sched: d.sched,
                ..Config::baseline(d.epoch_unix)
            }
        }
    };
    let mut base_args = Vec::new();
    if let Some(m) = &a.memory {
        base_args.extend(["--memory".to_string(), m.clone()]);
    }
    for b in &a.bind {
        base_args.extend(["--bind".to_string(), b.clone()]);
    }
    for e in &a.env {
        base_args.extend(["--env".to_string(), e.clone()]);
    }
    let state = repro_sandbox::rundir::state_dir(
        a.state_dir.as_deref(),
        std::env::var("REPRO_STATE_DIR").ok().as_deref(),
        &cwd,
    );
    let id = repro_sandbox::rundir::new_id(time::OffsetDateTime::now_utc());
    let state_dir = state.join(format!("{kind}s")).join(id);
    std::fs::create_dir_all(&state_dir)
        .map_err(|e| CliError::new(ExitCode::Setup, format!("cannot create {}: {e}", state_dir.display())))?;
    let repro = repro_sandbox::run::self_exe();
    let cancel = Cancel::new();

    Ok(Prepared {
        runner: Runner {
            repro,
            command: command.to_vec(),
            pack: pack.map(|p| p.to_path_buf()),
            base_args,
            state_dir,
            cwd,
            cancel: Arc::clone(&cancel),
        },
        space,
        base,
        jobs,
        epoch,
        _signals: install(&cancel),
    })
}

/// The epoch's source as shown: "flag", "SOURCE_DATE_EPOCH", "git HEAD", "default" (a source added later shows
/// its record name).
fn epoch_source(s: &repro_model::run::EpochSource) -> String {
    let name = serde_json::to_value(s).ok().and_then(|v| v.as_str().map(str::to_string));
    match name.as_deref() {
        Some("source-date-epoch") => "SOURCE_DATE_EPOCH".into(),
        Some("git-head") => "git HEAD".into(),
        Some(other) => other.into(),
        None => format!("{s:?}"),
    }
}

#[derive(Debug, Args)]
pub struct HuntArgs {
    #[command(flatten)]
    search: SearchArgs,
    /// Stop after this many runs.
    #[arg(long, default_value_t = 200, value_name = "N")]
    max_runs: usize,
    /// Stop after this long (90s, 5m, 1h).
    #[arg(long, default_value = "10m", value_name = "DURATION")]
    time_budget: String,
    /// Keep going after the first failure, to the end of the budget (to find several distinct failures).
    #[arg(long)]
    keep_going: bool,
    /// Capture the first failing configuration as a reproducer pack.
    #[arg(long)]
    capture: bool,
    /// Where `--capture` writes the pack.
    #[arg(long, short, value_name = "FILE", requires = "capture")]
    output: Option<PathBuf>,
    #[command(flatten)]
    junit: crate::ci::JunitArg,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn hunt(a: HuntArgs) -> Result<i32, CliError> {
    a.junit.check()?;
    let budget_time = config::parse_duration("--time-budget", &a.time_budget)?;
    if a.max_runs == 0 {
        return Err(CliError::usage("--max-runs: expected at least 1"));
    }
    let p = prepare(&a.search, &a.command, None, "hunt", 1000)?;
    let quiet = a.search.quiet;
    note(quiet, "hunt", &format!("baseline {}", p.epoch.describe()));
    let start = Instant::now();
    let budget = Budget { max_runs: a.max_runs, deadline: Some(start + budget_time), stop_on_failure: !a.keep_going };
    let tty = std::io::stderr().is_terminal() && !a.search.json;
    let mut last_print = Instant::now() - Duration::from_secs(10);
    let mut failures_seen = 0;
    let mut progress = |outcomes: &[runner::Outcome]| {
        if quiet {
            return;
        }
        let failed = outcomes.iter().filter(|o| o.verdict == runner::Verdict::Fail).count();
        let line = format!(
            "{} runs, {} failing, {:.1} runs/s",
            outcomes.len(),
            failed,
            runner::rate(outcomes.len(), start.elapsed())
        );
        if tty {
            if last_print.elapsed() > Duration::from_millis(100) {
                errout!("\r[hunt] {line}   ");
                last_print = Instant::now();
            }
        } else if failed > failures_seen || last_print.elapsed() > Duration::from_secs(2) {
            // Plain lines when stderr is a file or a pipe: on every new failure, else every 2 s.
            let newest = outcomes.last().filter(|o| o.verdict == runner::Verdict::Fail && failed > failures_seen);
            match newest {
                Some(o) => errln!("[hunt] {line}; failed: {}", o.config.describe(&p.space.dims)),
                None => errln!("[hunt] {line}"),
            }
            failures_seen = failed;
            last_print = Instant::now();
        }
    };
    let space = &p.space;
    let base = &p.base;
    let outcomes = runner::run_parallel(&p.runner, p.jobs, &budget, &|i| space.config(base, i), &mut progress)?;
    if tty && !quiet {
        errln!();
    }
    let interrupted = p.runner.cancel.signal();
    let mut report = hunt::report(&space.dims, &outcomes, start.elapsed().as_millis() as u64);
    report.baseline_epoch = Some(p.epoch.clone());
    report.interrupted = interrupted.is_some();
    if a.capture && interrupted.is_none() {
        if let Some(first) = report.failures.first() {
            let out = a.output.clone().unwrap_or_else(|| PathBuf::from("hunt-failure.repro"));
            let mut cmd = std::process::Command::new(&p.runner.repro);
            cmd.current_dir(&p.runner.cwd)
                .arg("capture")
                .arg("-o")
                .arg(&out)
                .args(first.first.to_args())
                .args(&p.runner.base_args)
                .arg("--")
                .args(&p.runner.command)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            let status = match p.runner.cancel.output(&mut cmd, "repro capture") {
                Ok(o) => o.status.to_string(),
                Err(HuntError::Interrupted { .. }) => "interrupted".to_string(),
                Err(e) => return Err(e.into()),
            };
            if p.runner.cancel.signal().is_none() {
                if !out.exists() {
                    return Err(CliError::new(
                        ExitCode::Setup,
                        format!("repro capture did not write {} ({status})", out.display()),
                    ));
                }
                report.pack = Some(out);
            }
        }
    }
    a.junit.write(|| repro_ci::report::hunt(&outcomes, &space.dims, &report))?;
    if a.search.json {
        print_json(&report)?;
    } else {
        out!("{}", hunt::render(&report));
    }
    if let Some(sig) = p.runner.cancel.signal() {
        errln!("[hunt] interrupted by {}: {} runs finished", signal_name(sig), report.runs);
        return Ok(ExitCode::signalled(sig));
    }
    Ok(if report.failed > 0 { 1 } else { 0 })
}

fn signal_name(sig: i32) -> String {
    repro_sandbox::init::signal_name(sig).to_string()
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    search: SearchArgs,
    /// Control runs with everything pinned.
    #[arg(long, default_value_t = 3, value_name = "K")]
    control: usize,
    /// Values each dimension gets before it may be dropped: once one dimension changes the outcome, the
    /// others (unmoved after this many tries) are dropped and the deciding one is tried in full.
    #[arg(long, default_value_t = repro_hunt::explain::DEFAULT_PATIENCE, value_name = "K")]
    patience: usize,
    /// A reproducer pack (`repro explain PACK`), or the command and its arguments (`repro explain -- CMD`).
    #[arg(required = true, trailing_var_arg = true, value_name = "PACK | CMD")]
    command: Vec<String>,
}

pub fn explain(a: ExplainArgs) -> Result<i32, CliError> {
    // One argument naming a pack file: explain the pack (its recorded inputs are the control).
    let pack = match a.command.as_slice() {
        [one] if one.ends_with(".repro") => {
            let p = PathBuf::from(one);
            if !p.is_file() {
                return Err(CliError::usage(format!("PACK '{one}': no such file")));
            }
            Some(p)
        }
        _ => None,
    };
    if a.patience == 0 {
        return Err(CliError::usage("--patience: expected at least 1"));
    }
    let command = if pack.is_some() { Vec::new() } else { a.command.clone() };
    let p = prepare(&a.search, &command, pack.as_deref(), "explain", 50)?;
    let quiet = a.search.quiet;
    let start = Instant::now();
    note(quiet, "explain", &format!("baseline {}", p.epoch.describe()));
    let budget = Budget { max_runs: usize::MAX, deadline: None, stop_on_failure: false };
    let cancel = Arc::clone(&p.runner.cancel);
    let mut last_tick = Instant::now();
    let mut batch = |configs: &[Config]| {
        let configs = configs.to_vec();
        // A long batch says how far it is every 5 s.
        let mut tick = |done: &[runner::Outcome]| {
            if !quiet && last_tick.elapsed() > Duration::from_secs(5) {
                errln!(
                    "[explain] {}/{} runs of this step ({:.1} s)",
                    done.len(),
                    configs.len(),
                    start.elapsed().as_secs_f64()
                );
                last_tick = Instant::now();
            }
        };
        let outcomes = runner::run_parallel(
            &p.runner,
            p.jobs,
            &Budget { max_runs: configs.len(), ..budget.clone() },
            &|i| configs[i].clone(),
            &mut tick,
        )?;
        // Cut short by a signal: the outcomes that finished (explain sees fewer than it asked for).
        Ok(outcomes)
    };
    let opts = explain::ExplainOptions {
        control_k: a.control,
        patience: a.patience,
        chunk: p.jobs.max(2),
        bisect_points: p.jobs,
    };
    let mut progress = |line: &str| note(quiet, "explain", &format!("{line} ({:.1} s)", start.elapsed().as_secs_f64()));
    let mut report = match explain::explain(&p.base, &p.space, &opts, &mut batch, &mut progress) {
        Err(HuntError::Interrupted { signal }) => {
            let signal = cancel.signal().unwrap_or(signal);
            errln!("[explain] interrupted by {} during the control runs: nothing found", signal_name(signal));
            return Ok(ExitCode::signalled(signal));
        }
        r => r?,
    };
    report.baseline_epoch = Some(p.epoch.clone());
    if a.search.json {
        print_json(&report)?;
    } else {
        out!("{}", explain::render(&report));
    }
    if let Some(sig) = p.runner.cancel.signal() {
        errln!("[explain] interrupted by {}: {} runs finished", signal_name(sig), report.runs);
        return Ok(ExitCode::signalled(sig));
    }
    Ok(if report.nondeterministic { ExitCode::NotDeterministic.code() } else { ExitCode::Success.code() })
}

#[derive(Debug, Args)]
pub struct ShrinkArgs {
    /// The pack to shrink.
    #[arg(value_name = "PACK")]
    pack: PathBuf,
    /// Where to write the smaller pack [default: <PACK>.min.repro].
    #[arg(long, short, value_name = "SMALLER")]
    output: Option<PathBuf>,
    /// Replays per candidate that must all reproduce the recorded signature.
    #[arg(long, default_value_t = 2, value_name = "K")]
    confirm: u32,
    /// Stop shrinking after this long (the best pack so far is written).
    #[arg(long, default_value = "10m", value_name = "DURATION")]
    time_budget: String,
    #[command(flatten)]
    limits: crate::pack::LimitArgs,
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
}

pub fn shrink(a: ShrinkArgs) -> Result<i32, CliError> {
    use repro_hunt::shrink;
    if a.confirm == 0 {
        return Err(CliError::usage("--confirm: expected at least 1"));
    }
    if !a.pack.is_file() {
        return Err(CliError::usage(format!("PACK '{}': no such file", a.pack.display())));
    }
    let budget = config::parse_duration("--time-budget", &a.time_budget)?;
    let limits = a.limits.limits()?;
    let output = a.output.clone().unwrap_or_else(|| {
        let stem = a.pack.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "pack".into());
        a.pack.with_file_name(format!("{stem}.min.repro"))
    });
    let work = tempfile_dir()?;
    let cancel = Cancel::new();
    let guard = install(&cancel);
    let opts = shrink::ShrinkOptions {
        pack: a.pack.clone(),
        output,
        confirm: a.confirm,
        deadline: Some(Instant::now() + budget),
        repro: repro_sandbox::run::self_exe(),
        work: work.clone(),
        limits,
        cancel: Arc::clone(&cancel),
    };
    let quiet = a.json || a.quiet;
    let mut progress = |line: &str| {
        if !quiet {
            errln!("[shrink] {line}");
        }
    };
    let result = shrink::shrink(&opts, &mut progress);
    if let Err(e) = std::fs::remove_dir_all(&work) {
        errln!("repro: warning: cannot remove the shrink's scratch directory {}: {e}", work.display());
    }
    drop(guard);
    let report = result?;
    if a.json {
        print_json(&report)?;
    } else {
        out!("{}", shrink::render(&report));
    }
    if let Some(sig) = cancel.signal() {
        errln!("[shrink] interrupted by {}: the smallest pack so far is written", signal_name(sig));
        return Ok(ExitCode::signalled(sig));
    }
    Ok(0)
}

/// A fresh scratch directory for shrinking (removed afterwards).
fn tempfile_dir() -> Result<PathBuf, CliError> {
    let base = std::env::temp_dir().join(format!("repro-shrink-{}", std::process::id()));
    std::fs::create_dir_all(&base)
        .map_err(|e| CliError::new(ExitCode::Setup, format!("cannot create {}: {e}", base.display())))?;
    Ok(base)
}
