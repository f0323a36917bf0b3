//! The `repro` command line: clap definitions and human/JSON output. The work itself is done by the library
//! crates; this crate only parses, dispatches and prints.

#[macro_use]
mod out;
mod attest;
mod chaos;
mod ci;
mod contract;
mod error;
mod hunt;
mod mcp;
mod pack;
mod prov;
mod race;
mod remote;
mod repair;
mod run;
mod sbom;

use repro_model::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

pub use error::CliError;

#[derive(Debug, Parser)]
#[command(
    name = "repro",
    version,
    about = "Make any failing Linux command reproducible on demand",
    long_about = "repro runs a command inside a hermetic sandbox (no network, read-only root, pinned environment \
                  and identity) under a supervisor that makes its clock, randomness, identity and directory \
                  order a function of (command, files, seed, epoch); records every run; turns a failure into \
                  a pack that replays anywhere; hunts flaky failures across seeds, dates and orders, explains \
                  and shrinks them; and runs fault-injection experiments.",
    propagate_version = true,
    after_help = "Exit status: the guest's own; 2 usage error; 121 determinism not enforced; 122 --verify found \
                  differences; 123 replay diverged from its tape; 125 repro failed to set up; 126 command not \
                  executable; 127 command not found; 130/143 interrupted by SIGINT/SIGTERM; 141 stdout closed early."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command inside the hermetic sandbox and record the run.
    Run(run::RunArgs),
    /// List the recorded runs.
    Runs(run::RunsArgs),
    /// Print one recorded run.
    Show(run::ShowArgs),
    /// Remove what interrupted runs left behind; prune old runs by age and total size.
    Gc(run::GcArgs),
    /// Run a command like `repro run` and, when it fails, write a reproducer pack of its inputs.
    Capture(pack::CaptureArgs),
    /// Run a reproducer pack from its own root and check the failure signature.
    Replay(pack::ReplayArgs),
    /// Summarize a reproducer pack.
    Inspect(pack::InspectArgs),
    /// Extract a reproducer pack's files and manifest into a directory.
    Unpack(pack::UnpackArgs),
    /// Reproducer pack tools.
    #[command(subcommand)]
    Pack(pack::PackCommand),
    /// Run a command under many configurations (seeds, dates, orders, environments) until it fails.
    Hunt(hunt::HuntArgs),
    /// Say which input decides a command's outcome: vary one at a time, bisect the date boundary.
    Explain(hunt::ExplainArgs),
    /// Shrink a reproducer pack to the smallest inputs that still fail the same way (delta debugging).
    Shrink(hunt::ShrinkArgs),
    /// Report the race of a failing schedule: the fewest preemptions that still fail, and the decision whose
    /// order decides, side by side with the passing run.
    Race(race::RaceArgs),
    /// Check what this machine offers repro, and how to fix what is missing.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The environment a run or pack used: its components (Debian, Python, Rust, npm, Go, loose files) and identity.
    Env(prov::EnvArgs),
    /// What differs between the inputs two runs, packs or environment snapshots used (exit 1 when they differ).
    Drift(prov::DriftArgs),
    /// A software bill of materials of what a run or pack used: CycloneDX 1.6 or SPDX 2.3 JSON.
    Sbom(sbom::SbomArgs),
    /// Signing keys for attestations: `repro key gen --out PREFIX`.
    #[command(subcommand)]
    Key(attest::KeyCommand),
    /// Sign an in-toto attestation about a pack or run (runtime-trace, test-result, or a VSA of a replay); `repro
    /// attest verify FILE --key PUB` checks one.
    Attest(attest::AttestArgs),
    /// Let an agent fix a pack's failure in a sandboxed copy of the project; each change is replayed N times
    /// and judged by the anti-weakening gates and the contract (docs/repair.md).
    Repair(repair::RepairArgs),
    /// The environment contract of repro.toml: `repro contract verify` runs setup, diagnose and verify cold.
    #[command(subcommand)]
    Contract(contract::ContractCommand),
    /// Fault-injection experiments: run, list, show, preflight, evaluate, report, share, export, dashboard.
    #[command(subcommand)]
    Chaos(chaos::ChaosCommand),
    /// CI pipelines: `repro ci init --github|--gitlab --test-cmd CMD` writes one (docs/ci.md).
    #[command(subcommand)]
    Ci(ci::CiCommand),
    /// A Remote Execution API v2 engine (BuildGrid, Buildbarn, ...): `check` its capabilities, `upload` a pack as
    /// an Action (docs/remote.md).
    #[command(subcommand)]
    Remote(remote::RemoteCommand),
    /// A bot of a Remote Execution engine (BuildGrid's Bots API): takes leases of pack Actions, replays them with
    /// `repro replay`, uploads the results; until Ctrl-C (docs/remote.md).
    Worker(remote::WorkerArgs),
    /// Serve repro's commands as Model Context Protocol tools to a coding agent: stdio, or streamable HTTP with
    /// --listen (docs/mcp.md).
    Mcp(mcp::McpArgs),
    /// Print a shell completion script.
    Completions {
        /// The shell: bash, zsh or fish.
        shell: clap_complete::Shell,
    },
    /// (internal) PID 1 of the sandbox.
    #[command(name = "__init", hide = true)]
    Init { config: std::path::PathBuf },
    /// (internal) cleans up after a killed run.
    #[command(name = "__reap", hide = true)]
    Reap {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Entry point used by the `repro` binary.
pub fn main() -> std::process::ExitCode {
    repro_sys::startup::begin();
    if let Some(code) = sandbox_process(&std::env::args_os().collect::<Vec<_>>()) {
        return std::process::ExitCode::from(code.clamp(0, 255) as u8);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { ExitCode::Usage } else { ExitCode::Success };
            // clap's message could not reach its stream: there is nowhere left to say so; the status still does.
            let _ = e.print();
            return std::process::ExitCode::from(code.code() as u8);
        }
    };
    repro_sys::startup::mark("repro: arguments parsed");
    match dispatch(cli) {
        Ok(code) => std::process::ExitCode::from(code.clamp(0, 255) as u8),
        Err(err) => {
            errln!("repro: {err}");
            std::process::ExitCode::from(err.code.clamp(0, 255) as u8)
        }
    }
}

/// The sandbox's own processes, which `repro run` starts with fixed arguments (`repro-init __init fd:N`, `repro
/// __reap ARGS...`): dispatched without clap, whose parser of the whole command line costs half a millisecond of
/// every run's start-up. `None` for anything else (clap then parses it, these included if their form differs).
fn sandbox_process(args: &[std::ffi::OsString]) -> Option<i32> {
    match args.get(1)?.to_str()? {
        "__init" if args.len() == 3 => Some(repro_sandbox::init::main(std::path::Path::new(&args[2]))),
        "__reap" => {
            let rest: Vec<String> = args[2..].iter().map(|a| a.to_str().map(String::from)).collect::<Option<_>>()?;
            Some(repro_sandbox::reaper::main(&repro_sandbox::reaper::ReapJob::from_args(&rest)))
        }
        "__chaos-reap" => {
            let rest: Vec<String> = args[2..].iter().map(|a| a.to_str().map(String::from)).collect::<Option<_>>()?;
            Some(repro_chaos::reaper::main(&repro_chaos::reaper::ReapArgs::parse(&rest)))
        }
        _ => None,
    }
}

fn dispatch(cli: Cli) -> Result<i32, CliError> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Runs(args) => run::runs(args),
        Command::Show(args) => run::show(args),
        Command::Gc(args) => run::gc(args),
        Command::Capture(args) => pack::capture_cmd(args),
        Command::Replay(args) => pack::replay_cmd(args),
        Command::Inspect(args) => pack::inspect_cmd(args),
        Command::Unpack(args) => pack::unpack_cmd(args),
        Command::Pack(cmd) => pack::pack_cmd(cmd),
        Command::Hunt(args) => hunt::hunt(args),
        Command::Explain(args) => hunt::explain(args),
        Command::Shrink(args) => hunt::shrink(args),
        Command::Race(args) => race::race_cmd(args),
        Command::Doctor { json } => {
            let report = repro_sandbox::doctor::run();
            if json {
                print_json(&report)?;
            } else {
                out!("{}", repro_sandbox::doctor::render(&report));
            }
            Ok(if report.usable { ExitCode::Success } else { ExitCode::Failure }.code())
        }
        Command::Env(args) => prov::env_cmd(args),
        Command::Drift(args) => prov::drift_cmd(args),
        Command::Sbom(args) => sbom::sbom_cmd(args),
        Command::Key(cmd) => attest::key_cmd(cmd),
        Command::Attest(args) => attest::attest_cmd(args),
        Command::Repair(args) => repair::repair_cmd(args),
        Command::Contract(cmd) => contract::dispatch(cmd),
        Command::Chaos(cmd) => chaos::dispatch(cmd),
        Command::Ci(cmd) => ci::dispatch(cmd),
        Command::Remote(cmd) => remote::dispatch(cmd),
        Command::Worker(args) => remote::worker_cmd(args),
        Command::Mcp(args) => mcp::mcp_cmd(args),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            // Generated into memory: clap_complete panics when its writer fails (a closed pipe).
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "repro", &mut buf);
            out::write_out_bytes(&buf);
            Ok(0)
        }
        Command::Init { config } => Ok(repro_sandbox::init::main(&config)),
        Command::Reap { args } => Ok(repro_sandbox::reaper::main(&repro_sandbox::reaper::ReapJob::from_args(&args))),
    }
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: serde::Serialize>(v: &T) -> Result<(), CliError> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| CliError::new(ExitCode::Failure, format!("cannot encode JSON: {e}")))?;
    outln!("{s}");
    Ok(())
}
