//! `repro capture`, `repro replay`, `repro inspect`, `repro unpack`, `repro pack verify`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use repro_pack::capture::{capture, CaptureOptions};
use repro_pack::replay::{replay, ReplayOptions};
use repro_pack::{PackError, Store};
use repro_sandbox::run::Echo;

use repro_model::ExitCode;

use crate::{print_json, CliError};

/// `--network`: what the guest's network is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkArg {
    /// No network (an empty network namespace, as `repro run`).
    None,
    /// The host's network; every socket's connect, accept, reads and writes are taped for replay.
    Record,
}

impl From<PackError> for CliError {
    fn from(e: PackError) -> Self {
        CliError::from_error(e.exit_code(), e)
    }
}

/// `--secrets`: what capture does with credentials it finds in the files and output it would pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SecretsArg {
    /// Leave such files out of the pack (the manifest says which and why); redact the output.
    Exclude,
    /// Pack files and output with each credential replaced by a marker.
    Redact,
    /// Pack everything as it is (with a warning).
    Keep,
}

#[derive(Debug, Args)]
pub struct CaptureArgs {
    #[command(flatten)]
    sandbox: crate::run::SandboxArgs,
    /// Write a pack even when the command succeeds.
    #[arg(long)]
    always: bool,
    /// The guest's network: none, or the host's with its sockets taped (replayed without a network).
    #[arg(long, value_enum, default_value = "none", value_name = "MODE")]
    network: NetworkArg,
    /// Credentials found in packed files (private keys, cloud and GitHub/Slack tokens, .netrc and other
    /// credential files) and in the output: exclude such files and redact the output, redact both, or keep.
    #[arg(long, value_enum, default_value = "exclude", value_name = "MODE")]
    secrets: SecretsArg,
    /// The pack to write [default: <state dir>/packs/<program>-<id>.repro].
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Keep the blobs in the local store ($XDG_CACHE_HOME/repro/cas) and only refer to them from the pack.
    #[arg(long)]
    thin: bool,
    /// Pack only what the run used: not the shell, nor rustdoc beside a rustc that ran, which a fix replayed
    /// with `repro replay --with` or `repro repair` typically needs (see docs/pack-format.md, Companions).
    #[arg(long)]
    no_companions: bool,
    /// Print a JSON report on stdout (the guest's stdout is then only saved, not echoed).
    #[arg(long)]
    json: bool,
    /// Print no summary line at the end.
    #[arg(long, short)]
    quiet: bool,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `--max-unpacked-size`, `--max-entries`: how much a pack may unpack to (a pack is untrusted data).
#[derive(Debug, Args, Clone)]
pub struct LimitArgs {
    /// Refuse a pack that unpacks to more than this (K, M, G, T suffixes).
    #[arg(long, value_name = "SIZE", default_value = "8G")]
    max_unpacked_size: String,
    /// Refuse a pack with more entries (paths and blobs) than this.
    #[arg(long, value_name = "N", default_value_t = repro_pack::extract::DEFAULT_MAX_ENTRIES)]
    max_entries: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> Result<repro_pack::Limits, CliError> {
        let max_unpacked_size = parse_size("--max-unpacked-size", &self.max_unpacked_size)?;
        if self.max_entries == 0 {
            return Err(CliError::usage("--max-entries: expected at least 1".to_string()));
        }
        Ok(repro_pack::Limits { max_unpacked_size, max_entries: self.max_entries })
    }
}

/// A size with an optional K, M, G or T suffix (powers of 1024), or a plain number of bytes.
fn parse_size(argument: &str, value: &str) -> Result<u64, CliError> {
    let bad = || CliError::usage(format!("{argument} '{value}': expected a size such as 512M, 8G or 1099511627776"));
    let v = value.trim();
    let (num, mult) = match v.char_indices().last() {
        Some((i, c)) if "kKmMgGtT".contains(c) => {
            let shift = match c.to_ascii_lowercase() {
                'k' => 10,
                'm' => 20,
                'g' => 30,
                _ => 40,
            };
            (&v[..i], 1u64 << shift)
        }
        _ => (v, 1),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    n.checked_mul(mult).ok_or_else(bad)
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The pack.
    pack: PathBuf,
    /// How many times to run it.
    #[arg(long, default_value_t = 1, value_name = "N")]
    runs: u32,
    /// Lay this path of the current tree over the pack's copy (relative to the working directory). Repeatable.
    #[arg(long, value_name = "PATH")]
    with: Vec<PathBuf>,
    /// Where run directories go [default: $REPRO_STATE_DIR, else ./.repro].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(flatten)]
    limits: LimitArgs,
    /// Print a JSON report on stdout (the guest's stdout is then only saved).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    junit: crate::ci::JunitArg,
    /// Stop a run (exit 120) when every task has waited this long on another (a deadlock): 2s, 500ms, 1m; 0
    /// turns it off [default: 60s].
    #[arg(long, value_name = "DURATION")]
    stuck_after: Option<String>,
    /// Refuse a run (exit 121) when a guest thread runs this long without a system call while another waits:
    /// 2s, 500ms [default: the pack's, else 2s].
    #[arg(long, value_name = "DURATION")]
    spin_limit: Option<String>,
    /// Replay with another seed (a variation: the recorded signature is then not expected).
    #[arg(long, value_name = "N", help_heading = "Variations (used by repro explain PACK)")]
    seed: Option<u64>,
    /// Replay at another epoch (Unix seconds or RFC 3339).
    #[arg(long, value_name = "TIME", help_heading = "Variations (used by repro explain PACK)")]
    epoch: Option<String>,
    /// Replay with another CPU count as seen by the guest.
    #[arg(long, value_name = "N", help_heading = "Variations (used by repro explain PACK)")]
    cpus: Option<u32>,
    /// Replay with another clock step.
    #[arg(long, value_name = "N", help_heading = "Variations (used by repro explain PACK)")]
    clock_step_ns: Option<u64>,
    /// Set a variable on top of the recorded environment (repeatable); NAME alone takes this environment's
    /// value (how a variable redacted at capture is supplied).
    #[arg(long, value_name = "NAME[=VALUE]", help_heading = "Variations (used by repro explain PACK)")]
    env: Vec<String>,
    /// Replay with another directory order: sorted, reversed, shuffled:SEED.
    #[arg(long, value_name = "ORDER", help_heading = "Variations (used by repro explain PACK)")]
    dir_order: Option<String>,
    /// Replay with another host name.
    #[arg(long, value_name = "NAME", help_heading = "Variations (used by repro explain PACK)")]
    hostname: Option<String>,
    /// Replay with another scheduling policy: random, round-robin or pct (the seed stays the recorded one unless
    /// --sched-seed is given too).
    #[arg(long, value_name = "POLICY", help_heading = "Variations (used by repro explain PACK)")]
    sched: Option<String>,
    /// Replay with another scheduler seed (another interleaving of the guest's threads).
    #[arg(long, value_name = "N", help_heading = "Variations (used by repro explain PACK)")]
    sched_seed: Option<u64>,
    /// Replay with other scheduling points: blocking or io (as `repro run --sched-points`).
    #[arg(long, value_name = "POINTS", help_heading = "Variations (used by repro explain PACK)")]
    sched_points: Option<String>,
}

fn variation(a: &ReplayArgs) -> Result<repro_pack::replay::Variation, CliError> {
    let mut env = Vec::new();
    for e in &a.env {
        match repro_sandbox::parse::parse_env(e)? {
            repro_sandbox::parse::EnvSpec::Set(k, v) => env.push((k, v)),
            // The value of this environment (a variable redacted at capture is supplied this way).
            repro_sandbox::parse::EnvSpec::Pass(k) => match std::env::var(&k) {
                Ok(v) => env.push((k, v)),
                Err(_) => return Err(CliError::usage(format!("--env '{k}': not set in this environment"))),
            },
        }
    }
    Ok(repro_pack::replay::Variation {
        seed: a.seed,
        epoch_unix: a.epoch.as_deref().map(|e| repro_sandbox::parse::parse_epoch("--epoch", e)).transpose()?,
        cpus: a.cpus,
        clock_step_ns: a.clock_step_ns,
        env,
        dir_order: a
            .dir_order
            .as_deref()
            .map(|o| {
                o.parse().map_err(|_| {
                    CliError::usage(format!(
                        "--dir-order '{o}': expected {}",
                        repro_model::dirorder::DIR_ORDER_EXPECTED
                    ))
                })
            })
            .transpose()?,
        hostname: a.hostname.clone(),
        sched: sched_variation(a)?,
    })
}

/// `--sched`/`--sched-seed` over the pack's recorded scheduler settings: what is not given stays as recorded
/// (resolved against the manifest when the replay's settings are made).
fn sched_variation(a: &ReplayArgs) -> Result<Option<repro_pack::replay::SchedVariation>, CliError> {
    if a.sched.is_none() && a.sched_seed.is_none() && a.sched_points.is_none() {
        return Ok(None);
    }
    let policy = a
        .sched
        .as_deref()
        .map(|p| p.parse::<repro_model::SchedPolicy>().map_err(|m| CliError::usage(format!("--sched '{p}': {m}"))))
        .transpose()?;
    let points =
        a.sched_points.as_deref().map(repro_model::SchedPoints::parse_arg).transpose().map_err(CliError::usage)?;
    Ok(Some(repro_pack::replay::SchedVariation { policy, seed: a.sched_seed, points }))
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The pack.
    pack: PathBuf,
    #[command(flatten)]
    limits: LimitArgs,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct UnpackArgs {
    /// The pack.
    pack: PathBuf,
    /// A new or empty directory.
    dir: PathBuf,
    #[command(flatten)]
    limits: LimitArgs,
}

#[derive(Debug, Subcommand)]
pub enum PackCommand {
    /// Check a pack as replay and unpack would: every digest, size and manifest field, every entry (exit 2 naming
    /// the offending one).
    Verify {
        pack: PathBuf,
        #[command(flatten)]
        limits: LimitArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show the size of repro's pack caches ($XDG_CACHE_HOME/repro), or empty them with --clean.
    ///
    /// frames (compressed blobs reused by later captures), digests (digests of host files), roots (laid-out
    /// replay roots) only cost time to rebuild; cas is the blob store that thin packs refer to, removed only
    /// with --clean --store.
    Cache {
        /// Remove the frames, digests and roots caches.
        #[arg(long)]
        clean: bool,
        /// With --clean: also remove the blob store (thin packs made on this machine stop replaying).
        #[arg(long, requires = "clean")]
        store: bool,
        #[arg(long)]
        json: bool,
    },
}

fn exe() -> PathBuf {
    repro_sandbox::run::self_exe()
}

/// `-o FILE` must be writable where it points before the command runs: a missing directory is a usage error
/// (exit 2), not a failure found after the command ran.
fn check_output_path(path: &std::path::Path) -> Result<(), CliError> {
    if path.is_dir() {
        return Err(CliError::usage(format!("-o {}: is a directory, expected a pack file name", path.display())));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        return Err(CliError::usage(format!(
            "-o {}: the directory {} does not exist (create it first)",
            path.display(),
            parent.display()
        )));
    }
    Ok(())
}

pub fn capture_cmd(a: CaptureArgs) -> Result<i32, CliError> {
    if let Some(p) = &a.output {
        check_output_path(p)?;
    }
    let opts = CaptureOptions {
        run: a.sandbox.into_options(a.command, false),
        always: a.always,
        output: a.output,
        thin: a.thin,
        echo: Echo { stdout: !a.json, stderr: true },
        network_record: a.network == NetworkArg::Record,
        secrets: match a.secrets {
            SecretsArg::Exclude => repro_pack::secrets::SecretsMode::Exclude,
            SecretsArg::Redact => repro_pack::secrets::SecretsMode::Redact,
            SecretsArg::Keep => repro_pack::secrets::SecretsMode::Keep,
        },
        environment: Some(repro_prov::env::capture_hook),
        companions: !a.no_companions,
    };
    let r = capture(&opts, &exe())?;
    let rec = &r.run.record;
    for n in &rec.determinism.not_enforced {
        errln!("[repro] determinism not enforced: {n}");
    }
    if a.json {
        print_json(&serde_json::json!({
            "exit_status": rec.exit_status,
            "pack": r.pack,
            "signature": r.signature,
            "files": r.files,
            "blobs": r.blobs,
            "run": r.run.dir,
        }))?;
    } else if !a.quiet {
        match &r.pack {
            Some(p) => errln!(
                "[repro] pack: {} ({} paths, {} blobs; signature: {})",
                p.display(),
                r.files,
                r.blobs,
                r.signature.summary()
            ),
            None => {
                errln!("[repro] exit {}: no pack written (the command succeeded; --always writes one)", rec.exit_status)
            }
        }
        errln!("[repro] {}", crate::run::epoch_text(&rec.settings));
    }
    Ok(rec.exit_status)
}

pub fn replay_cmd(a: ReplayArgs) -> Result<i32, CliError> {
    a.junit.check()?;
    let vary = variation(&a)?;
    let limits = a.limits.limits()?;
    let stuck_after_ms =
        a.stuck_after.as_deref().map(|d| repro_sandbox::parse::parse_duration_ms("--stuck-after", d)).transpose()?;
    let spin_limit_ms = a.spin_limit.as_deref().map(repro_sandbox::parse::parse_spin_limit_ms).transpose()?;
    let opts = ReplayOptions {
        pack: a.pack,
        runs: a.runs,
        with: a.with,
        state_dir: a.state_dir,
        echo: Echo { stdout: !a.json, stderr: !a.json },
        vary,
        limits,
        stuck_after_ms,
        spin_limit_ms,
    };
    crate::run::hold_interrupts();
    let r = replay(&opts, &exe())?;
    if let Some(sig) = r.interrupted {
        errln!(
            "[repro] replay interrupted by {} during run {} of {}: stopped, nothing to report",
            repro_sandbox::init::signal_name(sig),
            r.runs.len() + 1,
            a.runs
        );
        return Ok(ExitCode::signalled(sig));
    }
    let n = r.runs.len();
    let diverged = r.runs.iter().find_map(|run| run.diverged.clone());
    let stuck = r.runs.iter().any(|run| run.stuck.is_some());
    let code = if diverged.is_some() {
        ExitCode::Diverged
    } else if stuck {
        // As for `repro run`: the watchdog stopped a run; what it printed is no result of the guest's.
        ExitCode::Stuck
    } else if r.reproduced as usize == n {
        ExitCode::Success
    } else {
        ExitCode::Failure
    }
    .code();
    a.junit.write(|| repro_ci::report::replay(&r))?;
    if a.json {
        let mut v = serde_json::to_value(&r).map_err(|e| CliError::new(ExitCode::Failure, e.to_string()))?;
        v["exit_status"] = code.into();
        print_json(&v)?;
        return Ok(code);
    }
    // As `repro run` does: what the sandbox could not enforce, once each.
    let mut warned = std::collections::BTreeSet::new();
    for w in r.runs.iter().flat_map(|run| &run.warnings) {
        if warned.insert(w) {
            errln!("repro: warning: {w}");
        }
    }
    if let Some(d) = diverged {
        errln!("[repro] replay diverged from the recording: {d}");
    } else {
        errln!("[repro] reproduced {}/{}: {}", r.reproduced, n, r.recorded.summary());
        for (i, run) in r.runs.iter().enumerate() {
            if let Some(s) = &run.stuck {
                errln!("[repro] run {}: stuck, stopped by the watchdog (exit 120): {s}", i + 1);
            }
            for d in &run.differences {
                errln!("[repro] run {}: differs: {d}", i + 1);
            }
        }
    }
    Ok(code)
}

pub fn inspect_cmd(a: InspectArgs) -> Result<i32, CliError> {
    let pack = repro_pack::read_pack_checked(&a.pack, &Store::default_store(), None, &a.limits.limits()?)?;
    let s = repro_pack::summary::summarize(&pack);
    if a.json {
        print_json(&s)?;
    } else {
        out!("{}", repro_pack::summary::render(&s));
    }
    Ok(0)
}

pub fn unpack_cmd(a: UnpackArgs) -> Result<i32, CliError> {
    let pack = repro_pack::summary::unpack_limited(&a.pack, &a.dir, &Store::default_store(), &a.limits.limits()?)?;
    errln!(
        "[repro] unpacked {} paths of {} into {} (manifest.json, root/, stdout, stderr)",
        pack.manifest.files.len(),
        a.pack.display(),
        a.dir.display()
    );
    Ok(0)
}

pub fn pack_cmd(c: PackCommand) -> Result<i32, CliError> {
    match c {
        PackCommand::Verify { pack, limits, json } => {
            let p = repro_pack::read_pack_checked(&pack, &Store::default_store(), None, &limits.limits()?)?;
            if json {
                print_json(&serde_json::json!({
                    "pack": pack, "ok": true, "id": p.id, "blobs": p.blobs.len(),
                    "blob_bytes": p.blobs.values().sum::<u64>(), "format": p.manifest.format,
                }))?;
            } else {
                outln!("{}: ok ({} blobs, every digest checks)", pack.display(), p.blobs.len());
            }
            Ok(0)
        }
        PackCommand::Cache { clean, store, json } => {
            let dir = repro_pack::store::cache_dir();
            let list =
                if clean { repro_pack::store::clean_cache(&dir, store)? } else { repro_pack::store::cache_usage(&dir) };
            if json {
                print_json(&serde_json::json!({ "cache": dir, "cleaned": clean, "caches": list }))?;
                return Ok(0);
            }
            let verb = if clean { "removed" } else { "" };
            for c in &list {
                let note = if c.pure { "" } else { "  (thin packs refer to it)" };
                let line = format!(
                    "{:<8} {:>8} files {:>12} bytes  {} {verb}{note}",
                    c.name,
                    c.files,
                    c.bytes,
                    c.path.display()
                );
                outln!("{}", line.trim_end());
            }
            if clean && list.is_empty() {
                outln!("nothing to remove in {}", dir.display());
            }
            Ok(0)
        }
    }
}
