//! `repro env`, `repro drift`: parsing and printing; the work is repro-prov's.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use repro_prov::attest::{PublicKey, Verifier};
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
    /// an environment document (`repro env --json`), or a DSSE envelope of `repro attest` (read unchecked: its
    /// signature is checked by `repro attest verify` or `repro drift --key`).
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
    let path = repro_prov::open::resolve_target(arg, &state(state_flag)?).map_err(prov_error)?;
    repro_prov::open::environment_of(&path).map_err(prov_error)
}

/// A side of `repro drift` or the target of `repro env`: also a DSSE envelope, its signature checked by one of
/// `keys` when any are given.
fn load_side(arg: &str, state_flag: Option<PathBuf>, keys: &[PublicKey]) -> Result<repro_prov::drift::Side, CliError> {
    let path = repro_prov::open::resolve_target(arg, &state(state_flag)?).map_err(prov_error)?;
    let verifiers: Vec<&dyn Verifier> = keys.iter().map(|k| k as &dyn Verifier).collect();
    repro_prov::drift::side_of(&path, &verifiers).map_err(prov_error)
}

pub fn env_cmd(a: EnvArgs) -> Result<i32, CliError> {
    if let Some(EnvCommand::Snapshot { of, output, state_dir, json }) = a.snapshot {
        let side = load_side(&of, state_dir, &[])?;
        if !side.files_listed() {
            return Err(CliError::usage(format!(
                "{of}: a VSA or a test result lists components, not files: a snapshot reads the files of a run, a \
                 pack, an environment document or a runtime trace"
            )));
        }
        let base = side.environment;
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
    let side = load_side(&target, a.state_dir, &[])?;
    if a.json {
        print_json(&side.environment)?;
    } else {
        for l in repro_prov::drift::describe_side(&side) {
            outln!("{l}");
        }
    }
    Ok(0)
}

#[derive(Debug, Args)]
pub struct DriftArgs {
    /// The verified side: a run, a pack, an environment document or snapshot, or a DSSE envelope of `repro
    /// attest` (a runtime trace, a test result or a VSA).
    #[arg(value_name = "A")]
    a: String,
    /// The other side (e.g. `repro env snapshot` of a production machine).
    #[arg(value_name = "B")]
    b: String,
    /// Check the signature of each side that is an envelope with this public key (PREFIX.pub of `repro key
    /// gen`) first: one that does not verify exits 1. Repeatable (any one of the keys may have signed). Without
    /// it, an envelope is read unchecked, and the output says so.
    #[arg(long = "key", value_name = "PUB")]
    keys: Vec<PathBuf>,
    /// Print the differences as JSON.
    #[arg(long)]
    json: bool,
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

pub fn drift_cmd(a: DriftArgs) -> Result<i32, CliError> {
    let keys = a.keys.iter().map(|k| PublicKey::load(k)).collect::<Result<Vec<_>, _>>().map_err(prov_error)?;
    let sa = load_side(&a.a, a.state_dir.clone(), &keys)?;
    let sb = load_side(&a.b, a.state_dir, &keys)?;
    if !keys.is_empty() && sa.attestation.is_none() && sb.attestation.is_none() {
        errln!("repro: --key: neither side is an attestation (a DSSE envelope): no signature was checked");
    }
    let d = repro_prov::drift::compare_sides((&a.a, &sa), (&a.b, &sb));
    if a.json {
        print_json(&d)?;
    } else {
        for l in repro_prov::drift::describe(&d) {
            outln!("{l}");
        }
    }
    Ok(if d.same { 0 } else { 1 })
}
