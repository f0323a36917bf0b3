//! `repro ci init`, and the `--junit FILE` option of run, replay, hunt and chaos run. The documents are made by
//! `repro_ci`; this module parses, checks paths and prints.

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args, Subcommand};
use repro_ci::pipeline::{self, InitError, PipelineOptions, Provider};
use repro_model::ExitCode;

use crate::{print_json, CliError};

/// `--junit FILE`, flattened into each command that writes a report.
#[derive(Debug, Args, Clone, Default)]
pub struct JunitArg {
    /// Also write the result as JUnit XML to FILE (atomically), for CI test reports; the exit status and the
    /// --json output are unchanged.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

impl JunitArg {
    /// Checks before anything runs that FILE can be written where it points: its directory exists and it is not a
    /// directory (a usage error, exit 2).
    pub fn check(&self) -> Result<(), CliError> {
        let Some(path) = &self.junit else { return Ok(()) };
        if path.is_dir() {
            return Err(CliError::usage(format!("--junit {}: is a directory, expected a file name", path.display())));
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !parent.is_dir() {
            return Err(CliError::usage(format!(
                "--junit {}: the directory {} does not exist (create it first)",
                path.display(),
                parent.display()
            )));
        }
        Ok(())
    }

    /// Writes the report made by `make`, when --junit was given. A write that fails is repro failing to write its
    /// results: exit 125.
    pub fn write(&self, make: impl FnOnce() -> repro_ci::junit::Report) -> Result<(), CliError> {
        let Some(path) = &self.junit else { return Ok(()) };
        make().write_atomic(path).map_err(|e| {
            CliError::new(ExitCode::Setup, format!("--junit {}: cannot write the JUnit report: {e}", path.display()))
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum CiCommand {
    /// Write a CI pipeline that runs the tests under `repro run --verify`, captures a pack on failure, uploads
    /// it, replays it in a second job and publishes JUnit reports (docs/ci.md).
    #[command(group(ArgGroup::new("provider").required(true).args(["github", "gitlab"])))]
    Init(InitArgs),
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// A GitHub Actions workflow [default file: .github/workflows/repro.yml].
    #[arg(long)]
    github: bool,
    /// A GitLab CI file [default file: .gitlab-ci.yml].
    #[arg(long)]
    gitlab: bool,
    /// The project's test command, a shell command line run as `sh -c CMD` under repro.
    #[arg(long, value_name = "CMD")]
    test_cmd: String,
    /// Add a job running `repro repair PACK --agent CMD` on a reproduced failure (docs/repair.md).
    #[arg(long, value_name = "CMD")]
    repair_agent: Option<String>,
    /// The shell command that puts repro on PATH in CI [default: cargo install from repro's repository].
    #[arg(long, value_name = "CMD")]
    install: Option<String>,
    /// Where to write the file.
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Replace an existing file.
    #[arg(long)]
    force: bool,
    /// Print {"path", "provider"} as JSON.
    #[arg(long)]
    json: bool,
}

pub fn dispatch(cmd: CiCommand) -> Result<i32, CliError> {
    match cmd {
        CiCommand::Init(a) => init(a),
    }
}

fn init(a: InitArgs) -> Result<i32, CliError> {
    let provider = if a.github { Provider::Github } else { Provider::Gitlab };
    if a.test_cmd.trim().is_empty() {
        return Err(CliError::usage("--test-cmd: expected a command"));
    }
    let path = a.output.unwrap_or_else(|| PathBuf::from(provider.default_path()));
    let opts = PipelineOptions {
        test_cmd: a.test_cmd,
        repair_agent: a.repair_agent,
        install: a.install.unwrap_or_else(pipeline::default_install),
    };
    pipeline::init(provider, &opts, &path, a.force).map_err(|e| match e {
        InitError::Exists(_) => CliError::usage(e.to_string()),
        InitError::Io { .. } => CliError::new(ExitCode::Setup, e.to_string()),
    })?;
    let name = if a.github { "github" } else { "gitlab" };
    if a.json {
        print_json(&serde_json::json!({ "path": path, "provider": name }))?;
    } else {
        errln!("repro: wrote {} ({name}); see docs/ci.md", path.display());
    }
    Ok(0)
}
