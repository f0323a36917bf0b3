//! `repro key gen`, `repro attest`, `repro attest verify`: parsing and printing; the work is repro-prov's
//! (`repro_prov::attest`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use repro_model::ExitCode;
use repro_prov::attest::{self, Against, PredicateKind, PrivateKey, PublicKey, Request};
use repro_prov::ProvError;

use crate::error::CliError;
use crate::print_json;

fn prov_error(e: ProvError) -> CliError {
    CliError::from_error(e.exit_code(), e)
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Generate an ed25519 key pair: PREFIX.key (PKCS#8 PEM, mode 0600: keep it secret) and PREFIX.pub (SPKI
    /// PEM, to give to whoever verifies). Never overwrites a file.
    Gen {
        /// Where to write the pair: PREFIX.key and PREFIX.pub.
        #[arg(long, short, value_name = "PREFIX")]
        out: PathBuf,
        /// Print the paths and key id as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn key_cmd(cmd: KeyCommand) -> Result<i32, CliError> {
    match cmd {
        KeyCommand::Gen { out, json } => {
            let g = attest::generate(&out).map_err(prov_error)?;
            if json {
                print_json(&g)?;
            } else {
                outln!("{}", g.key_id);
                errln!(
                    "repro: key {} written: {} (private, mode 0600: keep it secret) and {} (public: give it to \
                     whoever verifies)",
                    g.key_id,
                    g.private.display(),
                    g.public.display()
                );
            }
            Ok(0)
        }
    }
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct AttestArgs {
    #[command(subcommand)]
    verify: Option<AttestCommand>,
    /// A pack, or a run (id, unique prefix, `last`, or its directory).
    #[arg(value_name = "PACK|RUN", required = true)]
    target: Option<String>,
    /// The private key that signs (PREFIX.key of `repro key gen`).
    #[arg(long, value_name = "KEY", required = true)]
    key: Option<PathBuf>,
    /// runtime-trace: the inputs the run used, its environment's identity and the sandbox settings (a run needs
    /// `repro run --record-inputs`); test-result: the command's outcome; vsa: a SLSA verification summary of
    /// --report ("reproduced N/N times in environment X").
    #[arg(long, value_name = "PREDICATE", default_value = "runtime-trace",
          value_parser = ["runtime-trace", "test-result", "vsa"])]
    predicate: String,
    /// The evidence of a VSA: the JSON of `repro replay PACK --runs N --json` (attest the pack) or of `repro run
    /// --verify --runs N --json` (attest one of its runs).
    #[arg(long, visible_alias = "replay-report", value_name = "REPORT.json")]
    report: Option<PathBuf>,
    /// What a VSA claims: failure (it reproduces) or fix (it passes) [default: failure for a replay, what the
    /// runs did for run --verify].
    #[arg(long, value_name = "CLAIM", value_parser = ["failure", "fix"], requires = "report")]
    claim: Option<String>,
    /// Write the envelope (one line of JSON) here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Where run directories are [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum AttestCommand {
    /// Check an attestation: its signature by --key, that its subjects match the pack, run or files given, and
    /// print what it claims. Exit 1, with the reason, when it does not verify.
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The DSSE envelope (`repro attest` output).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The public key (PREFIX.pub of `repro key gen`, or any ed25519 SPKI PEM key).
    #[arg(long, value_name = "PUB")]
    key: PathBuf,
    /// Check the subjects against this pack: the pack file and each of its blobs.
    #[arg(long, value_name = "PACK")]
    pack: Option<PathBuf>,
    /// Check the subjects against this run (id, prefix, `last` or directory): its stdout, stderr, run.json and
    /// changed files.
    #[arg(long, value_name = "RUN")]
    run: Option<String>,
    /// Check that this file is a subject (by name and digest); repeatable.
    #[arg(long = "file", value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Where run directories are, for --run [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Print the verdict and the statement as JSON.
    #[arg(long)]
    json: bool,
}

fn state(flag: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    Ok(repro_sandbox::rundir::state_dir(flag.as_deref(), std::env::var("REPRO_STATE_DIR").ok().as_deref(), &cwd))
}

pub fn attest_cmd(a: AttestArgs) -> Result<i32, CliError> {
    if let Some(AttestCommand::Verify(v)) = a.verify {
        return verify_cmd(v);
    }
    let (Some(target), Some(key)) = (a.target, a.key) else {
        return Err(CliError::usage("repro attest PACK|RUN --key KEY (or: repro attest verify FILE --key PUB)"));
    };
    let kind: PredicateKind = a.predicate.parse().map_err(|e: String| CliError::usage(format!("--predicate: {e}")))?;
    if a.report.is_some() && kind != PredicateKind::Vsa {
        return Err(CliError::usage("--report: the evidence of --predicate vsa only"));
    }
    let claim =
        a.claim.as_deref().map(str::parse).transpose().map_err(|e: String| CliError::usage(format!("--claim: {e}")))?;
    let signer = PrivateKey::load(&key).map_err(prov_error)?;
    let path = repro_prov::open::resolve_target(&target, &state(a.state_dir)?).map_err(prov_error)?;
    let req = Request { kind, report: a.report, claim, time_verified: None };
    let att = attest::attest(&path, &req, &signer).map_err(prov_error)?;
    let bytes = att.envelope.to_json();
    match &a.out {
        Some(out) => repro_prov::env::write_atomic(out, &bytes).map_err(prov_error)?,
        None => crate::out::write_out_bytes(&bytes),
    }
    let s = &att.statement;
    errln!(
        "repro: signed {} about {} ({} subject{}) with key {}{}",
        s.predicate_type,
        path.display(),
        s.subject.len(),
        if s.subject.len() == 1 { "" } else { "s" },
        signer.id(),
        a.out.as_ref().map(|o| format!("; written to {}", o.display())).unwrap_or_default()
    );
    if kind == PredicateKind::Vsa {
        let result = s.predicate.get("verificationResult").and_then(|v| v.as_str()).unwrap_or_default();
        let summary = s
            .predicate
            .get(attest::predicates::REPRODUCTION_FIELD)
            .and_then(|r| r.get("summary"))
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        errln!("repro: verificationResult {result}: {summary}");
    }
    Ok(0)
}

fn verify_cmd(v: VerifyArgs) -> Result<i32, CliError> {
    let key = PublicKey::load(&v.key).map_err(prov_error)?;
    let run = match &v.run {
        Some(r) => Some(repro_prov::open::resolve_target(r, &state(v.state_dir.clone())?).map_err(prov_error)?),
        None => None,
    };
    let against = Against { pack: v.pack.clone(), run, files: v.files.clone() };
    match attest::verify_file(&v.file, &key, &against) {
        Ok(verified) => {
            if v.json {
                print_json(&serde_json::json!({
                    "verified": true,
                    "keyid": verified.key_id,
                    "checked": verified.checked,
                    "against": verified.against,
                    "statement": verified.statement,
                }))?;
            } else {
                for l in attest::describe(&verified) {
                    outln!("{l}");
                }
            }
            Ok(0)
        }
        Err(e) => {
            if let (true, ProvError::Unverified { reason, .. }) = (v.json, &e) {
                print_json(&serde_json::json!({ "verified": false, "reason": reason }))?;
            }
            Err(prov_error(e))
        }
    }
}
