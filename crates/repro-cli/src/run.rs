//! `repro run`, `repro runs`, `repro show`.

use std::path::PathBuf;

use clap::Args;
use repro_model::run::{RunOutcome, RunRecord};
use repro_model::settings::ConfigChoice;
use repro_sandbox::run::{Echo, RunOptions, RunRequest};
use repro_sandbox::verify::Verified;
use repro_sandbox::{rundir, SandboxError};

use repro_model::ExitCode;

use crate::{print_json, CliError};

impl From<SandboxError> for CliError {
    fn from(e: SandboxError) -> Self {
        CliError::from_error(e.exit_code(), e)
    }
}

/// The options that shape a sandboxed run, shared by `repro run` and `repro capture`.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// The run's epoch: Unix seconds or RFC 3339 [default: $SOURCE_DATE_EPOCH, else the git HEAD's commit
    /// time, else 2025-01-01T00:00:00Z].
    #[arg(long, value_name = "TIME")]
    epoch: Option<String>,
    /// Seed of the guest's entropy stream [default: repro.toml's, else 0].
    #[arg(long)]
    seed: Option<u64>,
    /// Number of CPUs the guest is pinned to.
    #[arg(long, default_value_t = 1, value_name = "N")]
    cpus: u32,
    /// Memory limit (K, M, G, T suffixes) [default: 4G].
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Bound of the guest's tasks (processes and threads together), the cgroup's pids.max [default: 4096].
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// Bound of the guest's writable layer: the working directory's changes, /tmp and /home together, in bytes
    /// (K, M, G, T suffixes; inodes: one per 8K) [default: 2G].
    #[arg(long, value_name = "SIZE")]
    disk: Option<String>,
    /// Pass a host variable through (NAME) or set one (NAME=VALUE). Repeatable.
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Add a host path: HOST[:GUEST][:ro|rw] (read-only unless :rw). Repeatable.
    #[arg(long, value_name = "HOST[:GUEST][:ro|rw]")]
    bind: Vec<String>,
    /// Copy the guest's changes to the working directory back when the run ends.
    #[arg(long)]
    keep_changes: bool,
    /// Where run directories go [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Logical nanoseconds each clock read advances the guest's clock; 0 freezes time between events.
    #[arg(long, value_name = "N", default_value_t = repro_sandbox::run::DEFAULT_CLOCK_STEP_NS)]
    clock_step_ns: u64,
    /// The guest's host name [default: repro].
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,
    /// The order of directory listings: sorted, reversed or shuffled:SEED [default: sorted].
    #[arg(long, value_name = "ORDER")]
    dir_order: Option<String>,
    /// The project file to take [run] settings from [default: repro.toml in the working directory or the
    /// nearest ancestor, up to the git root]. Flags win over the file.
    #[arg(long, value_name = "FILE", conflicts_with = "no_config")]
    config: Option<PathBuf>,
    /// Ignore any repro.toml.
    #[arg(long)]
    no_config: bool,
    /// Stop the guest (exit 120) when every task has waited this long on another (a deadlock): 2s, 500ms, 1m;
    /// 0 turns it off [default: 60s].
    #[arg(long, value_name = "DURATION")]
    stuck_after: Option<String>,
    /// Refuse the run (exit 121) when a guest thread runs this long (CPU time) without a system call while another
    /// thread waits to run (a spin loop, or a computation longer than this): 2s, 500ms [default: 2s].
    #[arg(long, value_name = "DURATION")]
    spin_limit: Option<String>,
    /// How the scheduler picks the next guest thread at each scheduling point: random, round-robin, pct or
    /// pct:d=DEPTH,k=STEPS (PCT for bugs of depth d over the first k decisions; pct is d=3,k=2000) [default: random].
    #[arg(long, value_name = "POLICY")]
    sched: Option<String>,
    /// Seed of the scheduler's choices (the same seed, the same interleaving) [default: 0].
    #[arg(long, value_name = "N")]
    sched_seed: Option<u64>,
    /// Where the scheduler decides: blocking (blocking calls and thread starts: deterministic, and free for a
    /// single-threaded program) or io (also before every read, write and signal sent: the points a race between
    /// threads that never block needs, at a notification each; `repro race` and `repro hunt --vary schedule` use
    /// it) [default: blocking].
    #[arg(long, value_name = "POINTS")]
    sched_points: Option<String>,
    /// Force a schedule: a JSON file {"switches": [{"step": N, "task": T}, ...]} naming the decisions (counted
    /// from 0 where two or more threads were ready) at which task T runs; every other decision runs the thread
    /// that ran last (no preemption). `repro race` writes them. --sched and --sched-seed are then not used.
    #[arg(long, value_name = "FILE")]
    sched_script: Option<PathBuf>,
    /// Log the scheduler's decisions (the ready threads, the system call and code location of each, the one
    /// chosen) into run.json's determinism.schedule (at most 20000).
    #[arg(long)]
    sched_log: bool,
}

impl SandboxArgs {
    /// The run options for `command`.
    pub fn into_options(self, command: Vec<String>, no_supervisor: bool) -> RunOptions {
        RunOptions {
            command,
            epoch: self.epoch,
            seed: self.seed,
            cpus: self.cpus,
            memory: self.memory,
            pids: self.pids,
            env: self.env,
            bind: self.bind,
            keep_changes: self.keep_changes,
            state_dir: self.state_dir,
            clock_step_ns: self.clock_step_ns,
            no_supervisor,
            hostname: self.hostname,
            dir_order: self.dir_order,
            disk: self.disk,
            config: match (self.config, self.no_config) {
                (Some(file), _) => ConfigChoice::File(file),
                (None, true) => ConfigChoice::Ignore,
                (None, false) => ConfigChoice::Discover,
            },
            stuck_after: self.stuck_after,
            spin_limit: self.spin_limit,
            sched: self.sched,
            sched_seed: self.sched_seed,
            sched_points: self.sched_points,
            sched_script: self.sched_script,
            sched_log: self.sched_log,
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// Run inside the hermetic boundary only, without the determinism supervisor.
    #[arg(long)]
    no_supervisor: bool,
    /// Run the command several times from identical starting states and compare what they produced.
    #[arg(long)]
    verify: bool,
    /// How many runs `--verify` makes.
    #[arg(long, value_name = "N", default_value_t = 2, requires = "verify")]
    runs: u32,
    /// Record the files the guest used outside the working directory, with their digests and packages, as
    /// `environment.json` in the run directory (for `repro env`, `attest`, `drift`).
    /// With `--verify`: the first run's (every run records its accesses, so the runs stay alike).
    #[arg(long, conflicts_with = "no_supervisor")]
    record_inputs: bool,
    /// Print the run record as JSON on stdout (the guest's stdout is then only saved, not echoed).
    #[arg(long)]
    json: bool,
    /// Print no summary line at the end.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    junit: crate::ci::JunitArg,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

pub fn run(a: RunArgs) -> Result<i32, CliError> {
    let keep_changes = a.sandbox.keep_changes;
    let opts = a.sandbox.into_options(a.command, a.no_supervisor);
    if a.verify && keep_changes {
        return Err(CliError::usage("--keep-changes: cannot be combined with --verify"));
    }
    if a.verify && a.runs < 2 {
        return Err(CliError::usage(format!("--runs {}: --verify needs at least 2 runs", a.runs)));
    }
    a.junit.check()?;
    let req = RunRequest::prepare(&opts)?;
    repro_sys::startup::mark("run: settings prepared (project file, epoch, toolchains)");
    let exe = repro_sandbox::run::self_exe();
    if a.verify {
        return verify(&req, &exe, a.runs, a.json, a.record_inputs, &a.junit);
    }
    let echo = Echo { stdout: !a.json, stderr: true };
    let (report, env) = if a.record_inputs {
        let (report, env) = repro_prov::env::record_run(&req, &exe, echo).map_err(crate::prov::prov_error)?;
        (report, Some(env))
    } else {
        (repro_sandbox::run::execute(&req, &exe, echo)?, None)
    };
    let r = &report.record;
    report_enforcement(r, a.quiet);
    if r.exit_status != 0 {
        let stderr = std::fs::read(report.dir.join("stderr")).unwrap_or_default();
        let path = std::env::var("PATH").ok();
        for h in repro_sandbox::hidden::hints(&stderr, &r.settings, path.as_deref()) {
            errln!("[repro] {h}");
        }
    }
    a.junit.write(|| repro_ci::report::run(r, &report.dir, env.as_ref().map(|e| e.identity.as_str())))?;
    if a.json {
        print_json(r)?;
    } else if !a.quiet {
        errln!(
            "repro: {} in {} ms; {}; {}; run {}",
            outcome_text(r),
            r.duration_ms,
            changes_text(r),
            epoch_text(&r.settings),
            report.dir.display()
        );
        if let Some(env) = &env {
            errln!(
                "repro: environment {} ({} components, {} files used)",
                env.identity,
                env.components.len(),
                env.components.iter().map(|c| c.files.len()).sum::<usize>()
            );
        }
    }
    repro_sys::startup::mark("run: summary printed");
    Ok(r.exit_status)
}

/// Warnings, the supervisor's notes (unless `quiet`), and what the supervisor could not enforce, on stderr.
fn report_enforcement(r: &RunRecord, quiet: bool) {
    for n in &r.settings.path_notes {
        errln!("repro: warning: {n}");
    }
    for w in &r.enforcement.warnings {
        errln!("repro: warning: {w}");
    }
    if !quiet {
        for w in &r.determinism.warnings {
            errln!("repro: note: {w}");
        }
    }
    for n in &r.determinism.not_enforced {
        errln!("[repro] determinism not enforced: {n}");
    }
    if !r.determinism.not_enforced.is_empty() {
        errln!("[repro] {} but this run is NOT reproducible; see the messages above (exit 121)", outcome_text(r));
    }
}

fn verify(
    req: &RunRequest,
    exe: &std::path::Path,
    runs: u32,
    json: bool,
    record_inputs: bool,
    junit: &crate::ci::JunitArg,
) -> Result<i32, CliError> {
    hold_interrupts();
    let mut environment = None;
    let first = |report: &repro_sandbox::run::RunReport| {
        for w in &report.record.enforcement.warnings {
            errln!("repro: warning: {w}");
        }
        if record_inputs {
            environment = Some(repro_prov::env::record_report(req, report));
        }
    };
    let verified = repro_sandbox::verify::verify(req, exe, runs, !json, record_inputs, first)?;
    let identity = match &environment {
        Some(Ok(env)) => Some(env.identity.clone()),
        _ => None,
    };
    match environment {
        Some(Err(e)) => return Err(crate::prov::prov_error(e)),
        Some(Ok(env)) if !json => errln!(
            "repro: environment {} ({} components, {} files used), recorded with the first run",
            env.identity,
            env.components.len(),
            env.components.iter().map(|c| c.files.len()).sum::<usize>()
        ),
        _ => {}
    }
    let report = match verified {
        Verified::Compared(report) => report,
        // Ctrl-C stops the whole verification: no next run, no comparison of an interrupted run.
        Verified::Interrupted { signal, run, dir } => {
            errln!(
                "repro: --verify interrupted by {} during run {run} of {runs}: stopped, nothing compared (run {})",
                repro_sandbox::init::signal_name(signal),
                dir.display()
            );
            return Ok(ExitCode::signalled(signal));
        }
    };
    let code = report.exit_code();
    junit.write(|| repro_ci::report::verify(&report, &req.settings, identity.as_deref()))?;
    if json {
        let mut v = serde_json::to_value(&report).map_err(|e| CliError::new(ExitCode::Failure, e.to_string()))?;
        v["exit_status"] = code.code().into();
        print_json(&v)?;
    } else {
        for n in &report.not_enforced {
            errln!("[repro] determinism not enforced: {n}");
        }
        errout!("{}", repro_sandbox::verify::render(&report));
        errln!("repro: {}", epoch_text(&req.settings));
    }
    Ok(code.code())
}

/// [`repro_sandbox::run::hold_interrupts`], warning when it cannot.
pub(crate) fn hold_interrupts() {
    if let Err(e) = repro_sandbox::run::hold_interrupts() {
        errln!("repro: warning: cannot hold SIGINT/SIGTERM/SIGHUP between runs: {e}");
    }
}

fn outcome_text(r: &RunRecord) -> String {
    if r.determinism.stuck.is_some() {
        // The watchdog's SIGKILL is repro's, not the guest's end: say what happened (exit 120).
        return "stuck, stopped by the watchdog (exit 120)".to_string();
    }
    match &r.outcome {
        RunOutcome::Exited { code } => format!("exit {code}"),
        RunOutcome::Signaled { signal, name } => format!("killed by {name} ({signal})"),
        RunOutcome::ExecFailed { message, .. } => format!("cannot execute: {message}"),
        RunOutcome::SetupFailed { message } => format!("setup failed: {message}"),
    }
}

/// The run's epoch and where it came from: `epoch 2025-01-01T00:00:00Z (default: no --epoch, ...)`.
pub(crate) fn epoch_text(s: &repro_model::run::RunSettings) -> String {
    let why = match (s.epoch.source, &s.project_file) {
        (repro_model::run::EpochSource::ProjectFile, Some(f)) => format!("epoch in {f}"),
        (source, _) => source.describe().to_string(),
    };
    format!("epoch {} ({why})", s.epoch.rfc3339)
}

fn changes_text(r: &RunRecord) -> String {
    let c = &r.changes;
    if c.added + c.modified + c.deleted == 0 {
        return "no files changed".into();
    }
    format!("{} added, {} modified, {} deleted{}", c.added, c.modified, c.deleted, if c.kept { " (kept)" } else { "" })
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Where run directories are [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

fn state(flag: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    Ok(rundir::state_dir(flag.as_deref(), std::env::var("REPRO_STATE_DIR").ok().as_deref(), &cwd))
}

pub fn runs(a: RunsArgs) -> Result<i32, CliError> {
    let state = state(a.state_dir)?;
    let list = rundir::list(&state)?;
    if a.json {
        let v: Vec<serde_json::Value> = list
            .iter()
            .map(|r| match &r.record {
                Some(rec) => serde_json::json!({
                    "id": r.id, "complete": true, "exit_status": rec.exit_status,
                    "duration_ms": rec.duration_ms, "command": rec.settings.command, "path": r.path,
                }),
                None => serde_json::json!({"id": r.id, "complete": false, "path": r.path}),
            })
            .collect();
        print_json(&v)?;
        return Ok(0);
    }
    if list.is_empty() {
        outln!("no runs in {}", state.display());
        return Ok(0);
    }
    let width = list.iter().map(|r| r.id.len()).max().unwrap_or(2);
    outln!("{:<width$} {:<12} {:>9}  COMMAND", "ID", "STATUS", "DURATION");
    for r in &list {
        match &r.record {
            Some(rec) => outln!(
                "{:<width$} {:<12} {:>7}ms  {}",
                r.id,
                format!("exit {}", rec.exit_status),
                rec.duration_ms,
                repro_ci::report::command_line(&rec.settings.command)
            ),
            None => outln!("{:<width$} {:<12} {:>9}  -", r.id, "incomplete", "-"),
        }
    }
    Ok(0)
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Also remove finished runs that started longer ago than this (s, m, h, d, w: 30d, 12h, 1d12h).
    #[arg(long, value_name = "DURATION")]
    older_than: Option<String>,
    /// Then remove the oldest finished runs until all runs take at most this much (K, M, G, T).
    #[arg(long, value_name = "SIZE")]
    max_size: Option<String>,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Where run directories are [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// `repro gc`: runs in progress are never touched (each holds a lock on its directory).
pub fn gc(a: GcArgs) -> Result<i32, CliError> {
    use repro_sandbox::gc;
    let opts = gc::GcOptions {
        older_than: a.older_than.as_deref().map(|v| gc::parse_age("--older-than", v)).transpose()?,
        max_size: a.max_size.as_deref().map(|v| repro_sandbox::parse::parse_memory("--max-size", v)).transpose()?,
        dry_run: a.dry_run,
    };
    let state = state(a.state_dir)?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let report = gc::gc(&state, &opts, now)?;
    if a.json {
        print_json(&report)?;
        return Ok(0);
    }
    let verb = if report.dry_run { "would remove" } else { "removed" };
    for item in &report.removed {
        let reason = match item.reason {
            gc::GcReason::Interrupted => "interrupted run",
            gc::GcReason::Scratch => "leftover scratch",
            gc::GcReason::Age => "older than --older-than",
            gc::GcReason::Size => "over --max-size",
        };
        outln!("{verb} {} ({reason}, {})", item.id, human_bytes(item.bytes));
    }
    for id in &report.live {
        outln!("kept {id} (in progress)");
    }
    outln!(
        "{verb} {} item(s), {}; runs now take {}",
        report.removed.len(),
        human_bytes(report.freed_bytes),
        human_bytes(report.remaining_bytes)
    );
    Ok(0)
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A run id, a unique prefix of one, or `last`.
    #[arg(value_name = "RUN")]
    run: String,
    /// Where run directories are [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

pub fn show(a: ShowArgs) -> Result<i32, CliError> {
    let state = state(a.state_dir)?;
    let found = rundir::find(&state, &a.run)?;
    let Some(mut r) = found.record else {
        return Err(SandboxError::Incomplete { id: found.id }.into());
    };
    // Records written before secrets were redacted still hold the values: never show them.
    r.settings = r.settings.redacted();
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    let s = &r.settings;
    outln!("run       {}", r.id);
    outln!("path      {}", found.path.display());
    outln!("command   {}", repro_ci::report::command_line(&s.command));
    outln!("cwd       {}", s.cwd);
    outln!("started   {} (took {} ms)", r.started_at, r.duration_ms);
    outln!("outcome   {} (repro exit status {})", outcome_text(&r), r.exit_status);
    outln!("epoch     {}", repro_sandbox::run::describe_epoch(&s.epoch));
    outln!("seed      {}", s.seed);
    outln!("cpus      {} (host CPUs {:?})", s.cpus, s.cpu_affinity);
    outln!("memory    {} bytes{}", s.memory_bytes, if r.enforcement.cgroup.is_some() { "" } else { " (not enforced)" });
    outln!(
        "pids      {}{}{}",
        s.pids_max,
        match (&r.enforcement.pids_cgroup, r.enforcement.pids_rlimit) {
            (Some(_), _) => "",
            (None, Some(_)) => " (RLIMIT_NPROC in the sandbox's user namespace)",
            (None, None) => " (not enforced)",
        },
        if r.enforcement.pids_limit_reached { " (reached)" } else { "" }
    );
    outln!("output    stdout {} bytes, stderr {} bytes", r.stdout_bytes, r.stderr_bytes);
    outln!("changes   {}", changes_text(&r));
    for ch in &rundir::changes(&found.path)?.changes {
        outln!("          {:<8} {}", format!("{:?}", ch.kind).to_lowercase(), ch.path);
    }
    if let Some(f) = &s.project_file {
        outln!("config    {f}");
    }
    for t in &s.toolchains {
        outln!("toolchain {} ({}): {}", t.name, t.command, t.reason);
    }
    for b in &s.binds {
        outln!("bind      {} -> {} ({})", b.host, b.guest, if b.writable { "rw" } else { "ro" });
    }
    outln!("env");
    for line in repro_sandbox::run::env_lines(&s.env) {
        outln!("          {line}");
    }
    for w in &r.enforcement.warnings {
        outln!("warning   {w}");
    }
    Ok(0)
}
