//! `repro contract verify`: parsing and printing; the work is repro-contract's.

use std::path::PathBuf;

use clap::Subcommand;
use repro_model::project::{Stage, StepOutcome, StepReport};
use repro_model::settings::ConfigChoice;

use crate::error::CliError;
use crate::print_json;

#[derive(Debug, Subcommand)]
pub enum ContractCommand {
    /// Run the project file's [contract] cold in a fresh copy of the project: setup (changes kept in the copy),
    /// diagnose (facts, never fatal), verify (all must exit 0). Exit 0 when setup and verify passed, 1 when not.
    Verify {
        /// The project file [default: repro.toml in this directory or the nearest ancestor, up to the git root].
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Where runs and contract directories go [default: $REPRO_STATE_DIR, else ./.repro].
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Keep the copy (STATE/contracts/ID/tree) after the steps.
        #[arg(long)]
        keep_tree: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn contract_error(e: repro_contract::ContractError) -> CliError {
    let code = e.exit_code();
    CliError::from_error(code, e)
}

fn line(s: &StepReport) -> String {
    let how = match (s.outcome, s.exit_status) {
        (StepOutcome::Skipped, _) => "skipped (a setup step failed)".to_string(),
        (StepOutcome::Passed, _) => format!("passed in {} ms", s.duration_ms),
        (StepOutcome::Failed, Some(code)) => format!("FAILED with exit {code} in {} ms", s.duration_ms),
        (StepOutcome::Failed, None) => "FAILED".to_string(),
    };
    let run = s.run_id.as_deref().map(|r| format!(" (run {r})")).unwrap_or_default();
    format!("{:<8} {}: {how}{run}", s.stage.name(), s.name)
}

pub fn dispatch(cmd: ContractCommand) -> Result<i32, CliError> {
    let ContractCommand::Verify { config, state_dir, keep_tree, json } = cmd;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(repro_model::ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    let choice = config.map(ConfigChoice::File).unwrap_or_default();
    let Some(file) = repro_sandbox::project::locate(&choice, &cwd) else {
        return Err(CliError::usage(format!(
            "no {} here or above (up to the git root): write one with a [contract] table, or name it with --config",
            repro_model::project::FILE_NAME
        )));
    };
    let state =
        repro_sandbox::rundir::state_dir(state_dir.as_deref(), std::env::var("REPRO_STATE_DIR").ok().as_deref(), &cwd);
    let opts = repro_contract::Options { file, state, exe: repro_sandbox::run::self_exe(), keep_tree };
    let report = repro_contract::verify(&opts, |s| {
        if !json {
            errln!("repro: contract {}", line(s));
            if s.stage == Stage::Diagnose && !s.stdout_tail.is_empty() {
                for l in s.stdout_tail.lines() {
                    errln!("           | {l}");
                }
            }
            if s.outcome == StepOutcome::Failed {
                let tail = if s.stderr_tail.trim().is_empty() { &s.stdout_tail } else { &s.stderr_tail };
                for l in tail.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev() {
                    errln!("           ! {l}");
                }
            }
        }
    })
    .map_err(contract_error)?;
    if json {
        print_json(&report)?;
    } else {
        let failed = report.steps.iter().filter(|s| s.outcome == StepOutcome::Failed && s.stage != Stage::Diagnose);
        errln!(
            "repro: contract {} ({} steps, {} failed) in {} ms; report {}",
            if report.passed { "PASSED" } else { "FAILED" },
            report.steps.len(),
            failed.count(),
            report.duration_ms,
            opts.state.join("contracts").join(&report.id).join("report.json").display()
        );
    }
    Ok(if report.passed { 0 } else { 1 })
}
