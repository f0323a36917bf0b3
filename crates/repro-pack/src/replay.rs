//! `repro replay`: the pack's command in a sandbox whose root is the pack's own closure, with the recorded
//! environment, seed, epoch and clock step; each run's failure signature is compared with the recorded one.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use repro_model::run::{BindMount, Changes, Epoch, EpochSource, RunSettings};
use repro_model::tape::{NetTape, ProcTape, TapeIo, TapeSettings};
use repro_model::DirOrder;
use repro_sandbox::run::{Echo, RunExtras, RunRequest};

use crate::archive::Pack;
use crate::manifest::ManifestCheck;
use crate::signature::Signature;
use crate::store::{cache_dir, Store};
use crate::PackError;

/// Inputs changed on replay, one dimension at a time (`repro explain PACK`); unset fields keep the recording.
#[derive(Debug, Clone, Default)]
pub struct Variation {
    pub seed: Option<u64>,
    pub epoch_unix: Option<i64>,
    pub cpus: Option<u32>,
    pub clock_step_ns: Option<u64>,
    /// Variables set on top of the recorded environment.
    pub env: Vec<(String, String)>,
    pub dir_order: Option<DirOrder>,
    pub hostname: Option<String>,
    /// Another scheduler policy or seed (`--sched`, `--sched-seed`).
    pub sched: Option<SchedVariation>,
}

/// `--sched`, `--sched-seed` and `--sched-points` on replay: each unset part keeps the recording's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedVariation {
    pub policy: Option<repro_model::SchedPolicy>,
    pub seed: Option<u64>,
    pub points: Option<repro_model::SchedPoints>,
}

impl Variation {
    /// Whether anything is changed.
    pub fn is_empty(&self) -> bool {
        self.seed.is_none()
            && self.epoch_unix.is_none()
            && self.cpus.is_none()
            && self.clock_step_ns.is_none()
            && self.env.is_empty()
            && self.dir_order.is_none()
            && self.hostname.is_none()
            && self.sched.is_none()
    }

    /// Applies the changes to a replay's settings.
    pub fn apply(&self, s: &mut RunSettings) {
        if let Some(v) = self.seed {
            s.seed = v;
        }
        if let Some(v) = self.epoch_unix {
            s.epoch = Epoch { unix: v, rfc3339: repro_sandbox::parse::rfc3339(v), source: EpochSource::Flag };
            s.env.insert("SOURCE_DATE_EPOCH".into(), v.to_string());
        }
        if let Some(v) = self.cpus {
            s.cpus = v;
            s.cpu_affinity = repro_sandbox::settings::affinity_for(s);
        }
        if let Some(v) = self.clock_step_ns {
            s.clock_step_ns = v;
        }
        for (k, v) in &self.env {
            s.env.insert(k.clone(), v.clone());
        }
        if let Some(v) = self.dir_order {
            s.dir_order = v;
        }
        if let Some(v) = self.sched {
            if let Some(p) = v.policy {
                s.sched.policy = p;
            }
            if let Some(n) = v.seed {
                s.sched.seed = n;
            }
            if let Some(p) = v.points {
                s.sched.points = p;
            }
        }
        if let Some(v) = &self.hostname {
            s.hostname = v.clone();
        }
    }
}

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub pack: PathBuf,
    pub runs: u32,
    /// Paths of the current tree laid over the pack's copy of the working directory.
    pub with: Vec<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub echo: Echo,
    /// Inputs changed from the recording (none for a plain replay).
    pub vary: Variation,
    /// Limits of what the pack may unpack to (`--max-unpacked-size`, `--max-entries`).
    pub limits: crate::extract::Limits,
    /// The deadlock watchdog's wall time in milliseconds (`--stuck-after`; 0: off), as for `repro run`; `None`:
    /// the default.
    pub stuck_after_ms: Option<u64>,
    /// The spin-loop watchdog's limit in milliseconds (`--spin-limit`); `None`: the pack's.
    pub spin_limit_ms: Option<u64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplayRun {
    pub exit_status: i32,
    pub signature: Signature,
    /// What differs from the recorded signature; empty when it was reproduced.
    pub differences: Vec<String>,
    pub run_dir: PathBuf,
    pub duration_ms: u64,
    /// What the guest did that is not on the pack's tapes (the run was stopped: exit 123).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diverged: Option<String>,
    /// What the sandbox could not enforce in this run (as `repro run` reports it), e.g. the memory limit.
    pub warnings: Vec<String>,
    /// Where every task waited when the deadlock watchdog stopped the run (its exit status is then 120).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplayReport {
    pub pack: PathBuf,
    pub recorded: Signature,
    pub runs: Vec<ReplayRun>,
    pub reproduced: u32,
    /// Time to read and check the pack and prepare its root (cached after the first replay).
    pub prepare_ms: u64,
    pub root: PathBuf,
    /// The signal (SIGINT, SIGTERM) repro received during a run: the replay stopped there, and `runs` holds
    /// only the runs that ended before it; nothing is said about reproduction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<i32>,
}

/// The sandbox settings of a replay of `pack`: what the pack recorded, the rest as `repro run` sets it
/// ([`repro_sandbox::settings::for_host`]).
pub fn settings(pack: &Pack, binds: Vec<BindMount>) -> RunSettings {
    let m = &pack.manifest;
    let epoch = Epoch {
        unix: m.determinism.epoch_unix,
        rfc3339: m.determinism.epoch_rfc3339.clone(),
        source: EpochSource::Flag,
    };
    repro_sandbox::settings::for_host(m.command.argv.clone(), m.command.cwd.clone(), epoch, |s| {
        s.seed = m.determinism.seed;
        s.cpus = m.resources.cpus;
        s.memory_bytes = m.resources.memory_bytes;
        s.pids_max = m.resources.pids_max;
        s.env = m.command.env.clone();
        s.binds = binds;
        s.hostname = m.determinism.hostname.clone();
        s.supervised = m.determinism.supervised;
        s.clock_step_ns = m.determinism.clock_step_ns;
        s.dir_order = m.determinism.dir_order;
        s.sched = m.determinism.sched;
        s.spin_limit_ms = m.determinism.spin_limit_ms;
    })
}

/// `--with PATH`: the host path, and where it goes in the guest (the same place relative to the pack's working
/// directory as PATH is relative to the current directory).
pub fn with_bind(path: &Path, current: &Path, pack_cwd: &str) -> Result<BindMount, PackError> {
    let usage = |message: String| PackError::Usage { argument: format!("--with {}", path.display()), message };
    let host = fs::canonicalize(current.join(path)).map_err(|e| usage(format!("cannot resolve it: {e}")))?;
    let cur = fs::canonicalize(current).unwrap_or_else(|_| current.to_path_buf());
    let rel = host
        .strip_prefix(&cur)
        .map_err(|_| usage(format!("it is not inside the current directory {}", cur.display())))?;
    let guest = Path::new(pack_cwd).join(rel);
    Ok(BindMount {
        host: host.to_string_lossy().into_owned(),
        guest: guest.to_string_lossy().into_owned(),
        writable: false,
    })
}

/// [`with_bind`], refusing a guest path that passes through a link or file of the pack (the sandbox creates
/// and mounts on it inside the pack's root: through a link of the pack it would reach wherever the link points).
pub fn with_bind_checked(path: &Path, current: &Path, pack: &Pack) -> Result<BindMount, PackError> {
    let b = with_bind(path, current, &pack.manifest.command.cwd)?;
    if let Some((entry, kind)) = pack.manifest.non_dir_on_the_way(&b.guest) {
        return Err(PackError::Usage {
            argument: format!("--with {}", path.display()),
            message: format!("its place in the pack, {}, is under {entry}, which is {kind} in the pack", b.guest),
        });
    }
    Ok(b)
}

/// The pack's files under /home (a toolchain the capture showed under a HOME: `/home/repro/.cargo`, the mirror
/// of the host's `~/.cargo`): the sandbox's /home is its own in a replay too, so each `/home/USER/ENTRY` holding
/// some is bound read-only from the pack's root. Not one that is or lies in the working directory (its overlay
/// shows those), one `--with` took, or one whose way in the root is a symbolic link (a pack from a stranger
/// names no host path through it).
pub fn home_binds(pack: &Pack, root: &Path, taken: &[BindMount]) -> Vec<BindMount> {
    let cwd = Path::new(&pack.manifest.command.cwd);
    let mut tops: Vec<PathBuf> = pack
        .manifest
        .files
        .iter()
        .filter_map(|f| {
            let p = Path::new(std::str::from_utf8(&f.bytes()).ok()?).to_path_buf();
            let top: PathBuf = p.components().take(4).collect();
            // Only plain names: no `..` or `.` can move a bind's guest or host path elsewhere.
            let plain = top.components().skip(1).all(|c| matches!(c, std::path::Component::Normal(_)));
            (plain && top.starts_with("/home") && top.components().count() == 4).then_some(top)
        })
        .collect();
    tops.sort();
    tops.dedup();
    let plain = |t: &Path| {
        let rel = t.strip_prefix("/").unwrap_or(t);
        let mut host = root.to_path_buf();
        for c in rel.components() {
            host.push(c);
            if fs::symlink_metadata(&host).map_or(true, |m| m.file_type().is_symlink()) {
                return None;
            }
        }
        Some(host)
    };
    tops.into_iter()
        .filter(|t| !t.starts_with(cwd) && !taken.iter().any(|b| Path::new(&b.guest) == t))
        .filter_map(|t| {
            let host = plain(&t)?;
            Some(BindMount { host: host.display().to_string(), guest: t.display().to_string(), writable: false })
        })
        .collect()
}

/// The tapes a replay serves: the pack's, kept next to its cached root (see [`crate::tree::cached_root`]).
fn replay_tapes(pack: &Pack, root: &Path) -> Result<TapeSettings, PackError> {
    let dir = root.parent().unwrap_or(root).join("tapes");
    let load = |name: &str, present: bool| -> Result<Option<Vec<u8>>, PackError> {
        if !present {
            return Ok(None);
        }
        let p = dir.join(name);
        fs::read(&p).map(Some).map_err(|e| PackError::io("cannot read the tape", &p, e))
    };
    let bad = |name: &str| {
        let tape = PathBuf::from("tapes").join(name);
        move |source| PackError::Tape { path: pack.path.clone(), tape, source }
    };
    let t = &pack.manifest.tapes;
    // A pack recorded without a network tape replays as `repro run`: an empty network namespace.
    let network = match load("network.json", t.network.is_some())? {
        Some(b) => TapeIo::Replay(NetTape::from_json(&b).map_err(bad("network.json"))?),
        None => TapeIo::Off,
    };
    let proc = match load("proc.json", t.proc.is_some())? {
        Some(b) => TapeIo::Replay(ProcTape::from_json(&b).map_err(bad("proc.json"))?),
        None => TapeIo::Off,
    };
    Ok(TapeSettings { network, proc })
}

/// Refuses to run with a redaction marker as a variable's value: the pack's secret variables were not stored,
/// the replay must supply them (`repro replay --env NAME` or `--env NAME=VALUE`).
pub fn check_supplied(settings: &RunSettings) -> Result<(), PackError> {
    let missing = repro_model::secrets::redacted_names(&settings.env);
    if missing.is_empty() {
        return Ok(());
    }
    Err(PackError::Usage {
        argument: "PACK".into(),
        message: format!(
            "its variables {} were redacted at capture (only a marker of each value is stored); supply each with \
             --env NAME (the value of this environment) or --env NAME=VALUE",
            missing.join(", ")
        ),
    })
}

/// Says which files of the capture the pack does not hold (left out as secrets), so a replay that misses one
/// is explained.
fn explain_excluded(pack: &Pack) {
    for x in &pack.manifest.secrets.excluded {
        eprintln!("[repro] not in this pack: {} ({})", x.path, x.reason);
    }
}

/// Replays a pack `runs` times.
pub fn replay(opts: &ReplayOptions, exe: &Path) -> Result<ReplayReport, PackError> {
    if opts.runs == 0 {
        return Err(PackError::Usage { argument: "--runs".into(), message: "expected at least 1".into() });
    }
    let started = Instant::now();
    // A pack directory (an Action's input root, see dirpack) is checked and made a pack file first.
    let mut _from_dir = None;
    let pack_file = if crate::dirpack::is_pack_dir(&opts.pack) {
        let base = cache_dir();
        fs::create_dir_all(&base).map_err(|e| PackError::io("cannot create", &base, e))?;
        let tmp = tempfile::Builder::new()
            .prefix("dirpack-")
            .tempdir_in(&base)
            .map_err(|e| PackError::io("cannot create a directory in", &base, e))?;
        let file = tmp.path().join("dir.repro");
        crate::dirpack::pack_of_dir(&opts.pack, &file, &opts.limits)?;
        _from_dir = Some(tmp);
        file
    } else {
        opts.pack.clone()
    };
    let (pack, root) = crate::tree::cached_root(&pack_file, &cache_dir(), &Store::default_store(), &opts.limits)?;
    let current = std::env::current_dir().map_err(|e| PackError::io("cannot read the current directory", ".", e))?;
    let binds: Vec<BindMount> =
        opts.with.iter().map(|p| with_bind_checked(p, &current, &pack)).collect::<Result<_, _>>()?;
    let state_dir = repro_sandbox::rundir::state_dir(
        opts.state_dir.as_deref(),
        std::env::var("REPRO_STATE_DIR").ok().as_deref(),
        &current,
    );
    let mut binds = binds;
    binds.extend(home_binds(&pack, &root, &binds));
    let mut settings = settings(&pack, binds);
    opts.vary.apply(&mut settings);
    if let Some(ms) = opts.stuck_after_ms {
        settings.stuck_after_ms = ms;
    }
    if let Some(ms) = opts.spin_limit_ms {
        settings.spin_limit_ms = ms;
    }
    check_supplied(&settings)?;
    explain_excluded(&pack);
    let req = RunRequest { settings, state_dir, exec_hint: None };
    let prepare_ms = started.elapsed().as_millis() as u64;
    let recorded = pack.manifest.signature.clone();
    let tapes = replay_tapes(&pack, &root)?;
    let mut runs = Vec::new();
    for i in 0..opts.runs {
        let echo = Echo { stdout: opts.echo.stdout && i == 0, stderr: opts.echo.stderr && i == 0 };
        let extras = RunExtras {
            root_source: Some(root.clone()),
            // The root has the captured host's times when the pack recorded them (see tree::restore_times).
            root_times: pack.manifest.files.iter().any(|f| f.mtime_ns.is_some()),
            tapes: tapes.clone(),
            ..Default::default()
        };
        let report = repro_sandbox::run::execute_with(&req, exe, echo, &extras)?;
        if let Some(sig) = report.interrupted {
            // Ctrl-C stops the whole replay: the interrupted run is no evidence, and no next run starts.
            return Ok(ReplayReport {
                pack: opts.pack.clone(),
                recorded,
                reproduced: 0,
                runs,
                prepare_ms,
                root,
                interrupted: Some(sig),
            });
        }
        let read =
            |n: &str| fs::read(report.dir.join(n)).map_err(|e| PackError::io("cannot read", report.dir.join(n), e));
        let (mut stdout, mut stderr) = (read("stdout")?, read("stderr")?);
        // The capture redacted credentials in its output before computing the signature: so does the replay.
        let redacted = &pack.manifest.secrets.output_redacted;
        let values = crate::secrets::secret_values(&req.settings.env);
        if redacted.iter().any(|o| o == "stdout") {
            stdout = crate::secrets::redact(&stdout, &values).0;
        }
        if redacted.iter().any(|o| o == "stderr") {
            stderr = crate::secrets::redact(&stderr, &values).0;
        }
        let changes: Changes = serde_json::from_slice(&read("changes.json")?).map_err(|e| {
            let e = std::io::Error::new(std::io::ErrorKind::InvalidData, e);
            PackError::io("cannot read the changes of the run", report.dir.join("changes.json"), e)
        })?;
        let junit: Vec<Vec<u8>> = changes
            .changes
            .iter()
            .filter(|c| c.path.ends_with(".xml"))
            .filter_map(|c| fs::read(report.dir.join("changes").join(&c.path)).ok())
            .filter(|d| String::from_utf8_lossy(&d[..d.len().min(4096)]).contains("<testsuite"))
            .collect();
        let refs: Vec<&[u8]> = junit.iter().map(|v| v.as_slice()).collect();
        let signature = crate::signature::compute(report.record.exit_status, &stdout, &stderr, &refs);
        let mut differences = recorded.differences(&signature);
        let diverged = report.tapes.diverged.clone();
        if let Some(d) = &diverged {
            differences.insert(0, format!("replay diverged from the recording: {d}"));
        }
        runs.push(ReplayRun {
            exit_status: report.record.exit_status,
            signature,
            differences,
            run_dir: report.dir.clone(),
            duration_ms: report.record.duration_ms,
            diverged,
            warnings: report.record.enforcement.warnings.clone(),
            stuck: report.record.determinism.stuck.clone(),
        });
    }
    let reproduced = runs.iter().filter(|r| r.differences.is_empty()).count() as u32;
    Ok(ReplayReport { pack: opts.pack.clone(), recorded, runs, reproduced, prepare_ms, root, interrupted: None })
}
