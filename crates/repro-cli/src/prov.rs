//! `repro env`, `repro drift`: parsing and printing; the work is repro-prov's.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use repro_prov::ProvError;

use crate::error::CliError;
use crate::print_json;

/// A provenance error with its exit status.
pub(crate) fn prov_error(e: ProvError) -> CliError {
    CliError::from_error(e.exit_code(), e)
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct EnvArgs {
    #[command(subcommand)]
    snapshot: Option<EnvCommand>,
    /// A run (id, unique prefix, `last`, or its directory; recorded with `repro run --record-inputs`), a pack,
    /// or an environment document (`repro env --json`).
    #[arg(value_name = "RUN|PACK|FILE", required = true)]
    target: Option<String>,
    /// Where run directories are [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Print the environment document as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum EnvCommand {
    /// This host's view of the files a run or pack used, read now without running anything.
    Snapshot {
        /// The run, pack or environment document whose paths are read here.
        #[arg(value_name = "RUN|PACK|FILE")]
        of: String,
        /// Write the snapshot here (an environment document) instead of printing it.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Print the snapshot as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn state(flag: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(repro_model::ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    Ok(repro_sandbox::rundir::state_dir(flag.as_deref(), std::env::var("REPRO_STATE_DIR").ok().as_deref(), &cwd))
}

pub(crate) fn load(arg: &str, state_flag: Option<PathBuf>) -> Result<repro_model::provenance::Environment, CliError> {
    let path = repro_prov::env::resolve_target(arg, &state(state_flag)?).map_err(prov_error)?;
    repro_prov::env::environment_of(&path).map_err(prov_error)
}

pub fn env_cmd(a: EnvArgs) -> Result<i32, CliError> {
    if let Some(EnvCommand::Snapshot { of, output, state_dir, json }) = a.snapshot {
        let base = load(&of, state_dir)?;
        let snap = repro_prov::env::snapshot(&base, &of, std::path::Path::new("/")).map_err(prov_error)?;
        if let Some(out) = output {
            repro_prov::env::write_atomic(&out, &repro_prov::env::to_json(&snap)).map_err(prov_error)?;
            errln!("repro: snapshot {} written to {}", snap.identity, out.display());
        } else if json {
            print_json(&snap)?;
        } else {
            for l in repro_prov::env::describe(&snap) {
                outln!("{l}");
            }
        }
        return Ok(0);
    }
    let target = a.target.unwrap_or_default();
    let env = load(&target, a.state_dir)?;
    if a.json {
        print_json(&env)?;
    } else {
        for l in repro_prov::env::describe(&env) {
            outln!("{l}");
        }
    }
    Ok(0)
}

#[derive(Debug, Args)]
pub struct DriftArgs {
    /// The verified side: a run, a pack, an environment document or snapshot.
    #[arg(value_name = "A")]
    a: String,
    /// The other side (e.g. `repro env snapshot` of a production machine).
    #[arg(value_name = "B")]
    b: String,
    /// Print the differences as JSON.
    #[arg(long)]
    json: bool,
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

pub fn drift_cmd(a: DriftArgs) -> Result<i32, CliError> {
    let ea = load(&a.a, a.state_dir.clone())?;
    let eb = load(&a.b, a.state_dir)?;
    let d = repro_prov::drift::compare((&a.a, &ea), (&a.b, &eb));
    if a.json {
        print_json(&d)?;
    } else {
        for l in repro_prov::drift::describe(&d) {
            outln!("{l}");
        }
    }
    Ok(if d.same { 0 } else { 1 })
}
