//! `repro mcp`: parsing and start-up; the server is repro-mcp's.

use std::path::PathBuf;

use clap::Args;
use repro_model::ExitCode;

use crate::CliError;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP on this loopback address (127.0.0.1:PORT; port 0 picks a free one, printed on
    /// stderr) instead of stdio.
    #[arg(long, value_name = "IP:PORT")]
    listen: Option<String>,
    /// Add a host path to every run: HOST[:GUEST][:ro|rw] (repeatable). Tool calls cannot add any.
    #[arg(long, value_name = "HOST[:GUEST][:ro|rw]")]
    bind: Vec<String>,
    /// Pass a host variable through (NAME) or set one (NAME=VALUE) in every run (repeatable). Tool calls cannot
    /// add any.
    #[arg(long, value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Memory limit of every run (K, M, G, T suffixes) [default: 4G].
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Bound of every run's writable layer [default: 2G].
    #[arg(long, value_name = "SIZE")]
    disk: Option<String>,
    /// Where run directories and packs go [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The project file every run takes [run] settings from [default: repro.toml as `repro run` finds it].
    #[arg(long, value_name = "FILE", conflicts_with = "no_config")]
    config: Option<PathBuf>,
    /// Ignore any repro.toml.
    #[arg(long)]
    no_config: bool,
    /// The private key (PREFIX.key of `repro key gen`) the `attest` tool signs with; without it `attest` is
    /// refused.
    #[arg(long, value_name = "KEY")]
    attest_key: Option<PathBuf>,
    /// The most parallel runs a hunt or explain may use [default: the number of CPUs].
    #[arg(long, value_name = "N")]
    max_jobs: Option<usize>,
}

fn absolute(cwd: &std::path::Path, p: PathBuf, flag: &str) -> Result<PathBuf, CliError> {
    let p = cwd.join(p);
    std::fs::canonicalize(&p).map_err(|e| CliError::usage(format!("{flag} {}: {e}", p.display())))
}

pub fn mcp_cmd(a: McpArgs) -> Result<i32, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    for b in &a.bind {
        repro_sandbox::parse::parse_bind(b, &cwd)?;
    }
    for e in &a.env {
        repro_sandbox::parse::parse_env(e)?;
    }
    if let Some(m) = &a.memory {
        repro_sandbox::parse::parse_memory("--memory", m)?;
    }
    if let Some(d) = &a.disk {
        repro_sandbox::parse::parse_memory("--disk", d)?;
    }
    let max_jobs = match a.max_jobs {
        Some(0) => return Err(CliError::usage("--max-jobs: expected at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    };
    let transport = match &a.listen {
        Some(l) => repro_mcp::Transport::Http(
            repro_mcp::parse_listen(l).map_err(|e| CliError::from_error(ExitCode::Usage, e))?,
        ),
        None => repro_mcp::Transport::Stdio,
    };
    let state_dir = repro_sandbox::rundir::state_dir(
        a.state_dir.as_deref(),
        std::env::var("REPRO_STATE_DIR").ok().as_deref(),
        &cwd,
    );
    let state_dir = cwd.join(state_dir);
    let settings = repro_mcp::Settings {
        repro: repro_sandbox::run::self_exe(),
        cwd: cwd.clone(),
        state_dir,
        binds: a.bind,
        env: a.env,
        memory: a.memory,
        disk: a.disk,
        config: match (a.config, a.no_config) {
            (Some(f), _) => repro_mcp::ProjectConfig::File(absolute(&cwd, f, "--config")?),
            (None, true) => repro_mcp::ProjectConfig::Ignore,
            (None, false) => repro_mcp::ProjectConfig::Discover,
        },
        attest_key: a.attest_key.map(|k| absolute(&cwd, k, "--attest-key")).transpose()?,
        max_jobs,
    };
    repro_mcp::serve(settings, transport, |addr| errln!("repro mcp: listening on http://{addr}/mcp"))
        .map_err(|e| CliError::from_error(ExitCode::Setup, e))?;
    Ok(0)
}
