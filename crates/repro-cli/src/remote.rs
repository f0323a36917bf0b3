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
    }
}
