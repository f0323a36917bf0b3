//! `repro repair PACK --agent CMD`: parsing and printing; the loop is repro-repair-loop's.

use std::path::PathBuf;

use clap::Args;
use repro_model::repair::{GateConfig, DEFAULT_MAX_DIFF_LINES};
use repro_model::repair_loop::RepairOutcome;
use repro_repair_loop::exec::ReproExecutor;
use repro_repair_loop::{Options, Progress};

use crate::error::CliError;
use crate::print_json;

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// The pack of the failure to repair (captured in this project).
    pack: PathBuf,
    /// The agent: a shell command run in a sandboxed, writable copy of the project each iteration
    /// (`.repro-repair/` there and REPRO_REPAIR_* variables tell it the failure and why its last change was
    /// refused).
    #[arg(long, value_name = "CMD")]
    agent: String,
    /// The project the pack was captured in [default: the current directory].
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// Replays that judge each change: the failure must be gone in every one.
    #[arg(long, value_name = "N", default_value_t = 3)]
    runs: u32,
    /// Iterations before giving up.
    #[arg(long, value_name = "N", default_value_t = 3)]
    max_iterations: u32,
    /// Wall time before giving up: 90s, 10m, 1h (an agent still running then is stopped).
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    time_budget: String,
    /// The diff-too-large gate's budget: lines added plus removed.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DIFF_LINES)]
    max_diff_lines: u64,
    /// Also protect paths matching GLOB (repeatable; the defaults: tests, CI files, the contract).
    #[arg(long, value_name = "GLOB")]
    protect: Vec<String>,
    /// Drop a default protected GLOB (repeatable; spelled as in docs/repair-gates.md).
    #[arg(long, value_name = "GLOB")]
    unprotect: Vec<String>,
    /// A TOML file of masking patterns merged over the defaults.
    #[arg(long, value_name = "FILE")]
    masking: Option<PathBuf>,
    /// Where runs and repair directories go [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Write the accepted patch here too.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Sign the fix: write fix.dsse.json, a SLSA verification summary ("the fix held N/N times in environment X,
    /// passed these gates and the contract") about the pack and fix.patch, signed with this private key
    /// (PREFIX.key of `repro key gen`; check it with `repro attest verify --pack PACK --file fix.patch`).
    #[arg(long, value_name = "KEY")]
    key: Option<PathBuf>,
    /// Keep the repair's copies (base, work) after the loop.
    #[arg(long)]
    keep_trees: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

fn loop_error(e: repro_repair_loop::LoopError) -> CliError {
    let code = e.exit_code();
    CliError::from_error(code, e)
}

pub fn repair_cmd(a: RepairArgs) -> Result<i32, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(repro_model::ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    let time_budget = repro_hunt::config::parse_duration("--time-budget", &a.time_budget)?;
    let state = repro_sandbox::rundir::state_dir(
        a.state_dir.as_deref(),
        std::env::var("REPRO_STATE_DIR").ok().as_deref(),
        &cwd,
    );
    let abs = |p: PathBuf| if p.is_absolute() { p } else { cwd.join(p) };
    let gates = GateConfig {
        protected_add: a.protect,
        protected_remove: a.unprotect,
        masking_file: a.masking.map(abs),
        max_diff_lines: a.max_diff_lines,
        ..GateConfig::default()
    };
    let opts = Options {
        pack: abs(a.pack),
        project: abs(a.project.unwrap_or_else(|| cwd.clone())),
        state: abs(state.clone()),
        agent: a.agent,
        max_iterations: a.max_iterations,
        time_budget,
        runs: a.runs,
        gates,
        keep_trees: a.keep_trees,
        key: a.key.map(abs),
    };
    let mut exec = ReproExecutor { exe: repro_sandbox::run::self_exe(), state: opts.state.clone() };
    let json = a.json;
    let repaired = repro_repair_loop::repair(&opts, &mut exec, |p| {
        if json {
            return;
        }
        match p {
            Progress::Baseline { exit_status, reproduced, dir, visibility } => {
                let vars: Vec<String> = visibility.env.iter().map(|v| format!("{}={}", v.name, v.value)).collect();
                match &visibility.dropped_because {
                    None => {
                        errln!("repro: repair: every replay runs with {} (to see each test's result)", vars.join(" "))
                    }
                    Some(why) => {
                        errln!("repro: repair: the replays run as recorded, without {}: {why}", vars.join(" "))
                    }
                }
                errln!(
                    "repro: repair: baseline replay exited {exit_status}: {} ({})",
                    if reproduced {
                        "the recorded failure reproduced"
                    } else {
                        "the recorded failure did NOT reproduce"
                    },
                    dir.display()
                )
            }
            Progress::AgentStarts { number } => errln!("repro: repair: iteration {number}: the agent runs"),
            Progress::Iteration(it) => {
                let d = &it.diff;
                errln!(
                    "repro: repair: iteration {}: +{} -{} lines in {} files; replays {}; {}",
                    it.number,
                    d.lines_added,
                    d.lines_removed,
                    d.files_added + d.files_modified + d.files_removed,
                    if it.replays.is_empty() {
                        "none".to_string()
                    } else {
                        let ok = it.replays.iter().filter(|r| r.exit_status == 0).count();
                        format!("{ok}/{} passed", it.replays.len())
                    },
                    if it.accepted { "ACCEPTED" } else { "refused" }
                );
                for why in &it.refused_because {
                    errln!("           ! {why}");
                }
                for g in it.gates.iter().filter(|g| !g.applicable) {
                    errln!("           - gate {}: {}", g.name.as_str(), g.details.join("; "));
                }
                if let Some(w) = &it.weak {
                    errln!("           ~ {w}");
                }
            }
        }
    })
    .map_err(loop_error)?;
    let s = &repaired.summary;
    if let (Some(out), Some(patch)) = (&a.output, &s.patch) {
        let text = std::fs::read(patch)
            .map_err(|e| CliError::new(repro_model::ExitCode::Setup, format!("cannot read {patch}: {e}")))?;
        repro_sandbox::rundir::write_atomic(out, &text, true)
            .map_err(|e| CliError::new(repro_model::ExitCode::Setup, format!("-o {}: {e}", out.display())))?;
    }
    if json {
        print_json(s)?;
    } else {
        let tail = match s.outcome {
            RepairOutcome::Fixed => match &s.attestation {
                Some(a) => format!("patch {}; signed {a}", s.patch.as_deref().unwrap_or("")),
                None => format!("patch {}", s.patch.as_deref().unwrap_or("")),
            },
            _ if !s.gates_fired.is_empty() => format!("gates fired: {}", s.gates_fired.join(", ")),
            _ => String::new(),
        };
        errln!(
            "repro: repair {} after {} iterations in {} ms; {tail}; summary {}",
            s.outcome.as_str().to_uppercase(),
            s.iterations.len(),
            s.duration_ms,
            repaired.dir.join("summary.json").display()
        );
    }
    Ok(if s.outcome == RepairOutcome::Fixed { 0 } else { 1 })
}
