//! `repro contract verify`: the environment contract of a project file (`[contract]` of `repro.toml`, schema in
//! [`repro_model::project::Contract`]) run cold. The project is copied afresh (git's tracked and untracked,
//! not ignored, files; every file when it is no git work tree) into `STATE/contracts/ID/tree`, then each step
//! runs there as `repro run --json --config COPY/repro.toml -- ARGV` (the same sandbox, settings and toolchain
//! binding as any run): the setup steps with `--keep-changes`, so what they install is in the copy for the next
//! steps; the diagnose steps, whose failure is reported and not fatal; the verify steps, which must all exit 0.
//! The report is written atomically to `STATE/contracts/ID/report.json`; the copy is removed afterwards unless
//! kept.

pub mod copy;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use repro_model::project::{Contract, ContractReport, Stage, StepOutcome, StepReport};
use repro_model::run::RunRecord;

/// The most bytes of one step's stdout/stderr tail kept in the report.
const TAIL: usize = 2000;

/// What went wrong before or around the steps (a step that fails is a report, not an error).
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error("{file}: no [contract] table: nothing to verify (see docs/contract.md)")]
    NoContract { file: PathBuf },
    #[error("{file}: [contract] {stage} step {index}: {reason}")]
    BadStep { file: PathBuf, stage: &'static str, index: usize, reason: &'static str },
    #[error("{file}: [contract] has no verify step: nothing would say the project works")]
    NoVerify { file: PathBuf },
    #[error("cannot {what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("copying the project: {0}")]
    Copy(String),
    #[error("step {name:?}: repro run printed no run record ({detail})")]
    NoRecord { name: String, detail: String },
    #[error(transparent)]
    Sandbox(#[from] repro_sandbox::SandboxError),
}

impl ContractError {
    /// The exit status: 2 for a bad or missing contract, 125 for what the host did not allow.
    pub fn exit_code(&self) -> i32 {
        match self {
            ContractError::NoContract { .. } | ContractError::BadStep { .. } | ContractError::NoVerify { .. } => 2,
            ContractError::Sandbox(e) => e.exit_code(),
            _ => 125,
        }
    }
}

/// How to run a contract.
#[derive(Debug, Clone)]
pub struct Options {
    /// The project file.
    pub file: PathBuf,
    /// Where runs and contract directories go.
    pub state: PathBuf,
    /// repro's executable (each step is a `repro run`).
    pub exe: PathBuf,
    /// Keep the copy after the steps.
    pub keep_tree: bool,
}

/// Checks that `contract` can run: a verify step, no empty step.
pub fn check(file: &Path, contract: &Contract) -> Result<(), ContractError> {
    for (stage, steps) in stages(contract) {
        for (i, s) in steps.iter().enumerate() {
            if let Some(reason) = s.problem() {
                return Err(ContractError::BadStep { file: file.into(), stage: stage.name(), index: i + 1, reason });
            }
        }
    }
    if contract.verify.is_empty() {
        return Err(ContractError::NoVerify { file: file.into() });
    }
    Ok(())
}

fn stages(c: &Contract) -> [(Stage, &[repro_model::project::Step]); 3] {
    [(Stage::Setup, &c.setup), (Stage::Diagnose, &c.diagnose), (Stage::Verify, &c.verify)]
}

/// Runs the contract of `opts.file`, calling `progress` after each step.
pub fn verify(opts: &Options, mut progress: impl FnMut(&StepReport)) -> Result<ContractReport, ContractError> {
    let loaded = repro_sandbox::project::load(&opts.file)?;
    let Some(contract) = loaded.file.contract.clone() else {
        return Err(ContractError::NoContract { file: opts.file.clone() });
    };
    check(&opts.file, &contract)?;
    let started = Instant::now();
    let project = opts.file.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let project = std::fs::canonicalize(&project).map_err(|source| ContractError::Io {
        what: "resolve",
        path: project.clone(),
        source,
    })?;
    let id = repro_sandbox::rundir::new_id(time::OffsetDateTime::now_utc());
    let dir = opts.state.join("contracts").join(&id);
    let tree = dir.join("tree");
    std::fs::create_dir_all(&tree).map_err(|source| ContractError::Io {
        what: "create",
        path: tree.clone(),
        source,
    })?;
    copy::project(&project, &tree, &opts.state)?;
    let config = tree.join(opts.file.file_name().unwrap_or(std::ffi::OsStr::new("repro.toml")));
    let mut steps = Vec::new();
    let mut setup_failed = false;
    for (stage, list) in stages(&contract) {
        for step in list {
            let (name, argv) = step.command();
            let report = if setup_failed {
                StepReport {
                    stage,
                    name,
                    argv,
                    run_id: None,
                    run_dir: None,
                    exit_status: None,
                    outcome: StepOutcome::Skipped,
                    duration_ms: 0,
                    stdout_tail: String::new(),
                    stderr_tail: String::new(),
                }
            } else {
                run_step(opts, &tree, &config, stage, name, argv)?
            };
            if stage == Stage::Setup && report.outcome == StepOutcome::Failed {
                setup_failed = true;
            }
            progress(&report);
            steps.push(report);
        }
    }
    let passed = steps.iter().all(|s| s.stage == Stage::Diagnose || s.outcome == StepOutcome::Passed);
    let report = ContractReport {
        id,
        file: opts.file.display().to_string(),
        passed,
        steps,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    let json = serde_json::to_vec_pretty(&report).unwrap_or_default();
    repro_sandbox::rundir::write_atomic(&dir.join("report.json"), &json, true)?;
    if !opts.keep_tree {
        std::fs::remove_dir_all(&tree).map_err(|source| ContractError::Io { what: "remove", path: tree, source })?;
    }
    Ok(report)
}

/// The last `TAIL` bytes of `path` as text.
fn tail(path: &Path) -> String {
    let Ok(mut f) = std::fs::File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > TAIL as u64 {
        use std::io::Seek;
        let _ = f.seek(std::io::SeekFrom::Start(len - TAIL as u64));
    }
    let mut buf = Vec::new();
    let _ = f.take(TAIL as u64).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

fn run_step(
    opts: &Options,
    tree: &Path,
    config: &Path,
    stage: Stage,
    name: String,
    argv: Vec<String>,
) -> Result<StepReport, ContractError> {
    let started = Instant::now();
    let mut cmd = Command::new(&opts.exe);
    cmd.current_dir(tree).arg("run").arg("--json").arg("-q").arg("--state-dir").arg(&opts.state);
    cmd.arg("--config").arg(config);
    if stage == Stage::Setup {
        cmd.arg("--keep-changes");
    }
    cmd.arg("--").args(&argv).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = cmd.output().map_err(|source| ContractError::Io { what: "run", path: opts.exe.clone(), source })?;
    let record: RunRecord = serde_json::from_slice(&out.stdout).map_err(|e| ContractError::NoRecord {
        name: name.clone(),
        detail: format!("{e}; stderr: {}", String::from_utf8_lossy(&out.stderr).trim()),
    })?;
    let run_dir = opts.state.join("runs").join(&record.id);
    let status = out.status.code().unwrap_or(record.exit_status);
    Ok(StepReport {
        stage,
        name,
        argv,
        run_id: Some(record.id.clone()),
        run_dir: Some(run_dir.display().to_string()),
        exit_status: Some(status),
        outcome: if status == 0 { StepOutcome::Passed } else { StepOutcome::Failed },
        duration_ms: started.elapsed().as_millis() as u64,
        stdout_tail: tail(&run_dir.join("stdout")),
        stderr_tail: tail(&run_dir.join("stderr")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use repro_model::project::Step;

    #[test]
    fn a_contract_needs_a_verify_step_and_no_empty_one() {
        let f = Path::new("p/repro.toml");
        let mut c = Contract::default();
        assert!(matches!(check(f, &c), Err(ContractError::NoVerify { .. })));
        c.verify.push(Step::Shell("make test".into()));
        check(f, &c).unwrap();
        c.setup.push(Step::Argv(vec![]));
        let e = check(f, &c).unwrap_err();
        assert_eq!(e.to_string(), "p/repro.toml: [contract] setup step 1: a step needs a name or a command");
        assert_eq!(e.exit_code(), 2);
    }
}
