//! `repro sbom`: parsing and printing; the document is repro-prov's.

use std::path::PathBuf;

use clap::Args;
use repro_prov::sbom::Format;

use crate::error::CliError;
use crate::prov::{load, prov_error};

#[derive(Debug, Args)]
pub struct SbomArgs {
    /// A run (id, unique prefix, `last`, or its directory; recorded with `repro run --record-inputs`), a pack,
    /// or an environment document (`repro env --json`, `repro env snapshot -o`).
    #[arg(value_name = "RUN|PACK|FILE")]
    target: String,
    /// cyclonedx (CycloneDX 1.6 JSON) or spdx (SPDX 2.3 JSON).
    #[arg(long, short, value_name = "FORMAT", value_parser = clap::builder::PossibleValuesParser::new(Format::NAMES))]
    format: String,
    /// Write the SBOM here (atomically) instead of to standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Where run directories are [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

pub fn sbom_cmd(a: SbomArgs) -> Result<i32, CliError> {
    let format: Format = a.format.parse().map_err(|e: String| CliError::new(repro_model::ExitCode::Usage, e))?;
    let env = load(&a.target, a.state_dir)?;
    let doc = repro_prov::sbom::write(&env, format);
    match a.output {
        Some(out) => {
            repro_prov::env::write_atomic(&out, &doc).map_err(prov_error)?;
            errln!(
                "repro: {} SBOM of {} ({} components) written to {}",
                format.name(),
                env.identity,
                env.components.len(),
                out.display()
            );
        }
        None => out!("{}", String::from_utf8_lossy(&doc)),
    }
    Ok(0)
}
