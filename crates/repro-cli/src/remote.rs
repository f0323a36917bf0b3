//! `repro remote check|upload`: parsing and printing; the work is repro-remote's.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use repro_model::settings::ConfigChoice;
use repro_remote::config::RemoteFlags;

use crate::error::CliError;
use crate::print_json;

/// Where the engine is: flags over the `[remote]` table of repro.toml.
#[derive(Debug, Args)]
pub struct RemoteArgs {
    /// The Remote Execution API v2 engine: grpc://HOST:PORT (plain) or grpcs://HOST:PORT (TLS).
    #[arg(long, value_name = "URL")]
    remote: Option<String>,
    /// The REAPI instance name [default: the [remote] table's, else the server's default instance].
    #[arg(long, value_name = "NAME")]
    remote_instance: Option<String>,
    /// A request header NAME:VALUE (e.g. 'authorization: Bearer TOKEN'); repeatable.
    #[arg(long, value_name = "NAME:VALUE", env = "REPRO_REMOTE_HEADER")]
    remote_header: Vec<String>,
    /// The CA certificate (PEM) of a grpcs:// server, instead of the system's roots.
    #[arg(long, value_name = "FILE")]
    remote_ca_cert: Option<PathBuf>,
    /// The project file [default: repro.toml in this directory or the nearest ancestor, up to the git root].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum RemoteCommand {
    /// Ask the engine what it offers (GetCapabilities): API versions, digest functions, batch limit, cache.
    Check(RemoteArgs),
    /// Upload a pack as a Remote Execution API Action (its blobs, Directory tree, Command) and print the
    /// Action's digest; says whether the Action Cache already holds a result for it.
    Upload {
        /// The pack (.repro).
        pack: PathBuf,
        #[command(flatten)]
        args: RemoteArgs,
    },
    /// Replay a pack on the engine: upload its Action, take the Action Cache's result or Execute it (a `repro
    /// worker` runs it) and print the replay's verdict; the exit code is the remote replay's.
    Replay {
        /// The pack (.repro).
        pack: PathBuf,
        /// Execute even when the Action Cache holds a result.
        #[arg(long)]
        no_cache: bool,
        /// How long to wait for the result, in seconds (then exit 125).
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        timeout: u64,
        #[command(flatten)]
        args: RemoteArgs,
    },
}

/// `repro worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Stop after one lease.
    #[arg(long)]
    once: bool,
    /// The bot's id [default: repro-HOSTNAME-PID].
    #[arg(long, value_name = "ID")]
    bot_id: Option<String>,
    #[command(flatten)]
    args: RemoteArgs,
}

pub fn worker_cmd(a: WorkerArgs) -> Result<i32, CliError> {
    let ep = endpoint(&a.args)?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let opts = repro_remote::worker::WorkerOptions {
        bot_id: a.bot_id.unwrap_or_else(|| format!("repro-{}-{}", host.trim(), std::process::id())),
        once: a.once,
        repro_exe: repro_sandbox::run::self_exe(),
        limits: Default::default(),
    };
    errln!("[repro worker] {} on {} (instance '{}')", opts.bot_id, ep.url(), ep.instance);
    let s = repro_remote::worker::run(&ep, &opts).map_err(remote_error)?;
    if a.args.json {
        print_json(&s)?;
    } else {
        errln!("[repro worker] {} lease(s) done{}", s.leases, if s.interrupted { "; stopped by a signal" } else { "" });
    }
    Ok(if s.interrupted { repro_model::ExitCode::Interrupted.code() } else { 0 })
}

fn remote_error(e: repro_remote::RemoteError) -> CliError {
    let code = e.exit_code();
    CliError::from_error(code, e)
}

fn endpoint(a: &RemoteArgs) -> Result<repro_model::remote::RemoteEndpoint, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::new(repro_model::ExitCode::Setup, format!("cannot read the current directory: {e}")))?;
    let choice = a.config.clone().map(ConfigChoice::File).unwrap_or_default();
    let loaded = match repro_sandbox::project::locate(&choice, &cwd) {
        Some(p) => Some(repro_sandbox::project::load(&p).map_err(|e| CliError::from_error(e.exit_code(), e))?),
        None => None,
    };
    let base = loaded.as_ref().and_then(|l| l.path.parent().map(PathBuf::from)).unwrap_or(cwd);
    let flags = RemoteFlags {
        url: a.remote.clone(),
        instance: a.remote_instance.clone(),
        headers: a.remote_header.clone(),
        ca_cert: a.remote_ca_cert.clone(),
    };
    repro_remote::config::resolve(&flags, loaded.as_ref().and_then(|l| l.file.remote.as_ref()), &base)
        .map_err(remote_error)
}

pub fn dispatch(cmd: RemoteCommand) -> Result<i32, CliError> {
    match cmd {
        RemoteCommand::Check(a) => {
            let c = repro_remote::ops::check(&endpoint(&a)?).map_err(remote_error)?;
            if a.json {
                print_json(&c)?;
            } else {
                outln!("remote     {} (instance '{}')", c.url, c.instance);
                outln!("api        {} to {}", c.api_low, c.api_high);
                outln!("digests    {}", c.digest_functions.join(", "));
                outln!(
                    "batch      {} bytes at most per BatchUpdateBlobs (larger blobs by ByteStream)",
                    c.max_batch_total_size_bytes
                );
                outln!("cache      {}", if c.action_cache_updates { "updates allowed" } else { "read-only" });
                outln!("execution  {}", if c.execution { "enabled" } else { "not offered by this instance" });
            }
            Ok(0)
        }
        RemoteCommand::Upload { pack, args } => {
            let u = repro_remote::ops::upload(&endpoint(&args)?, &pack).map_err(remote_error)?;
            if args.json {
                print_json(&u)?;
            } else {
                errln!(
                    "repro: {} blobs ({} bytes): {} already there, {} sent in batches, {} by ByteStream ({} bytes)",
                    u.blobs,
                    u.bytes,
                    u.already_present,
                    u.batched,
                    u.streamed,
                    u.sent_bytes
                );
                if let Some(code) = u.cached_exit_code {
                    errln!("repro: the Action Cache holds a result for it (exit {code})");
                }
                outln!("{}", u.action_digest);
            }
            Ok(0)
        }
        RemoteCommand::Replay { pack, no_cache, timeout, args } => {
            let opts = repro_remote::execute::ReplayRemoteOptions {
                no_cache,
                timeout: std::time::Duration::from_secs(timeout),
            };
            let r = repro_remote::execute::replay(&endpoint(&args)?, &pack, &opts).map_err(remote_error)?;
            if args.json {
                print_json(&r)?;
            } else {
                if !r.stderr.trim().is_empty() {
                    errln!("{}", r.stderr.trim_end());
                }
                let how = if r.cached { "from the Action Cache" } else { "executed" };
                match (r.reproduced, r.runs) {
                    (Some(n), Some(m)) => outln!(
                        "remote replay ({how}, {} ms): reproduced {n} of {m}, exit {}",
                        r.elapsed_ms,
                        r.exit_code
                    ),
                    _ => outln!("remote replay ({how}, {} ms): exit {}", r.elapsed_ms, r.exit_code),
                }
            }
            Ok(r.exit_code)
        }
    }
}
