//! What the server was started with: the limits every tool call inherits and cannot widen.

use std::path::PathBuf;

/// Which project file (`repro.toml`) the runs take their `[run]` settings from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectConfig {
    /// As `repro run`: the nearest `repro.toml` up to the git root.
    Discover,
    /// `--config FILE`.
    File(PathBuf),
    /// `--no-config`.
    Ignore,
}

/// The server's settings. Tool inputs have no field for any of these: binds, passed or set variables, the
/// resource limits, the state directory and the project file are the server's, passed to every child as is.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The `repro` binary the tools run (`std::env::current_exe()`).
    pub repro: PathBuf,
    /// The working directory of every run (the server's).
    pub cwd: PathBuf,
    /// Where run directories go (absolute); also `REPRO_STATE_DIR` of every child.
    pub state_dir: PathBuf,
    /// `--bind HOST[:GUEST][:ro|rw]`, passed to run, verify, capture, hunt and explain.
    pub binds: Vec<String>,
    /// `--env NAME[=VALUE]`, passed the same way.
    pub env: Vec<String>,
    /// `--memory SIZE`.
    pub memory: Option<String>,
    /// `--disk SIZE` (run, verify, capture).
    pub disk: Option<String>,
    pub config: ProjectConfig,
    /// The private key the `attest` tool signs with; without it the tool is refused.
    pub attest_key: Option<PathBuf>,
    /// The most parallel runs a hunt or explain may ask for.
    pub max_jobs: usize,
}
