//! `repro race`: the race report of a failing schedule.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use repro_hunt::cancel::Cancel;
use repro_hunt::config::{self, Config};
use repro_hunt::race::{self, RaceOutcome, Runs};
use repro_hunt::runner::Runner;
use repro_model::ExitCode;

use crate::{print_json, CliError};

#[derive(Debug, Args)]
pub struct RaceArgs {
    /// The policy of the failing schedule (as `repro run --sched`; `repro hunt --vary schedule` reports it).
    #[arg(long, value_name = "POLICY", default_value = "random")]
    sched: String,
    /// The seed of the failing schedule (as `repro run --sched-seed`).
    #[arg(long, value_name = "N", default_value_t = 0)]
    sched_seed: u64,
    /// The scheduling points of the failing schedule (as `repro run --sched-points`): io, as `repro hunt --vary
    /// schedule` runs them, decides before reads, writes and signals too; blocking only at blocking calls.
    #[arg(long, value_name = "POINTS", default_value = "io")]
    sched_points: String,
    /// The guest's entropy seed (as `repro run --seed`).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Number of CPUs the guest sees (as `repro run --cpus`).
    #[arg(long, default_value_t = 1, value_name = "N")]
    cpus: u32,
    /// The run's epoch (as `repro run --epoch`) [default: $SOURCE_DATE_EPOCH, else the git HEAD's commit time,
    /// else 2025-01-01T00:00:00Z].
    #[arg(long, value_name = "TIME")]
    epoch: Option<String>,
    /// Options for every run, passed to `repro run`: --memory, --bind, --env.
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    #[arg(long, value_name = "HOST[:GUEST][:ro|rw]")]
    bind: Vec<String>,
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Where run directories go [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Stop shrinking the schedule after this many runs (the report then says the set is small, not minimal).
    #[arg(long, default_value_t = 100, value_name = "N")]
    max_runs: usize,
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Exit 0 with the report, 1 when there is no race to report (the schedule passes, or fails without preemption),
/// 2 for a bad argument, 128 + N when a signal stopped it.
pub fn race_cmd(a: RaceArgs) -> Result<i32, CliError> {
    let policy: repro_model::SchedPolicy =
        a.sched.parse().map_err(|m: String| CliError::usage(format!("--sched '{}': {m}", a.sched)))?;
    let points = repro_model::SchedPoints::parse_arg(&a.sched_points).map_err(CliError::usage)?;
    if a.max_runs < 3 {
        return Err(CliError::usage("--max-runs: expected at least 3 (the failing run, it forced, and no preemption)"));
    }
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    let epoch = match &a.epoch {
        Some(e) => config::parse_date("--epoch", e)?,
        None => {
            repro_sandbox::parse::resolve_epoch(None, std::env::var("SOURCE_DATE_EPOCH").ok().as_deref(), &cwd)
                .map_err(|e| CliError::usage(e.to_string()))?
                .unix
        }
    };
    let config = Config {
        seed: a.seed,
        cpus: a.cpus,
        sched: repro_model::SchedSettings { policy, seed: a.sched_seed, points },
        ..Config::baseline(epoch)
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
    let dir = state.join("races").join(repro_sandbox::rundir::new_id(time::OffsetDateTime::now_utc()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::new(ExitCode::Setup, format!("cannot create {}: {e}", dir.display())))?;
    let cancel = Cancel::new();
    let _signals = crate::hunt::install(&cancel);
    let runner = Runner {
        repro: repro_sandbox::run::self_exe(),
        command: a.command.clone(),
        pack: None,
        base_args,
        state_dir: dir.clone(),
        cwd,
        cancel: Arc::clone(&cancel),
    };
    let mut runs = Runs::new(runner, config, dir.clone());
    let quiet = a.quiet || a.json;
    let mut progress = |line: &str| {
        if !quiet {
            errln!("[race] {line}");
        }
    };
    progress(&format!(
        "scheduling points: {points} ({})",
        match points {
            repro_model::SchedPoints::Io => "before reads, writes and signals too; --sched-points blocking for fewer",
            repro_model::SchedPoints::Blocking => "blocking calls and thread starts only",
        }
    ));
    let outcome = race::race(&mut runs, a.max_runs, &mut progress)?;
    let (failing, passing) = match &outcome {
        RaceOutcome::Found(r) => (
            runs.write_script("failing.json", &r.failing_script)?.display().to_string(),
            runs.write_script("passing.json", &r.passing_script)?.display().to_string(),
        ),
        RaceOutcome::NoRace { .. } => (String::new(), String::new()),
    };
    if a.json {
        let mut v = serde_json::to_value(&outcome).map_err(|e| CliError::new(ExitCode::Setup, e.to_string()))?;
        v["sched_points"] = points.name().into();
        if !failing.is_empty() {
            v["failing_schedule"] = failing.clone().into();
            v["passing_schedule"] = passing.clone().into();
        }
        print_json(&v)?;
    } else {
        let command = a.command.iter().map(|w| shell_word(w)).collect::<Vec<_>>().join(" ");
        out!("{}", race::render(&outcome, &failing, &passing, &command, points));
    }
    Ok(match outcome {
        RaceOutcome::Found(_) => ExitCode::Success.code(),
        RaceOutcome::NoRace { .. } => ExitCode::Failure.code(),
    })
}

/// A word as a shell reads it back.
fn shell_word(w: &str) -> String {
    if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}
