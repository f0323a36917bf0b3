//! `repro capture`: a run exactly like `repro run`, with the supervisor recording the paths the guest uses;
//! when it fails (or always), its inputs and result are written as a pack.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use repro_model::run::{ChangeKind, Changes, RunOutcome};
use repro_model::tape::{ProcTape, TapeIo, TapeSettings};
use repro_sandbox::run::{Echo, RunExtras, RunOptions, RunReport, RunRequest};

use crate::archive::{write_pack, BlobSource, EXTENSION};
use crate::closure::{Access, Closure, ClosureOptions};
use crate::manifest::*;
use crate::prefetch::Prefetcher;
use crate::secrets::{credential_file, is_distributed_test_vector, redact, secret_values, ScanCache, SecretsMode};
use crate::store::{FrameCache, Store};
use crate::PackError;

/// Lockfile names recorded in the manifest (`requirements*.txt` is matched by prefix).
pub const LOCKFILES: [&str; 6] =
    ["Cargo.lock", "package-lock.json", "uv.lock", "poetry.lock", "go.sum", "Gemfile.lock"];

/// Guest paths that are not inputs: the sandbox makes them fresh for every run.
pub const NOT_INPUTS: [&str; 8] =
    ["/proc", "/sys", "/dev", "/tmp", "/home", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];

#[derive(Debug, Clone)]
pub struct CaptureOptions {
    pub run: RunOptions,
    /// Write a pack even when the command succeeds.
    pub always: bool,
    /// Where to write the pack [default: `<state dir>/packs/<program>-<id>.repro`].
    pub output: Option<PathBuf>,
    /// Blobs to the local store, not into the pack.
    pub thin: bool,
    pub echo: Echo,
    /// `--network record`: the guest uses the host's network and its sockets are taped.
    pub network_record: bool,
    /// `--secrets`: what to do with credentials found in the closure and the output.
    pub secrets: SecretsMode,
    /// Derives the pack's `environment` blob from the files the run used (repro-prov's, which knows the
    /// package databases); without it the pack has none.
    pub environment: Option<EnvironmentHook>,
    /// Pack the [`crate::companions::RULES`]' files too (`--no-companions`: only what the run used).
    pub companions: bool,
}

/// What a run used, for provenance: the run, its settings, and the files outside the working directory whose
/// content the guest read, executed or mapped, with their digests.
#[derive(Debug, Clone)]
pub struct UsedInputs {
    pub run_id: String,
    /// The run's start, RFC 3339.
    pub started_at: String,
    pub settings: repro_model::run::RunSettings,
    pub files: Vec<repro_model::provenance::UsedFile>,
    pub unread: Vec<repro_model::provenance::UnreadFile>,
}

/// Turns what a run used into the JSON of its environment (or says why it cannot).
pub type EnvironmentHook = fn(&UsedInputs) -> Result<Vec<u8>, String>;

#[derive(Debug)]
pub struct CaptureReport {
    pub run: RunReport,
    /// The pack, when one was written.
    pub pack: Option<PathBuf>,
    pub signature: Signature,
    pub files: usize,
    pub blobs: usize,
}

/// Runs and, when it fails or `always`, packs. `exe` is repro's own executable.
pub fn capture(opts: &CaptureOptions, exe: &Path) -> Result<CaptureReport, PackError> {
    if opts.run.no_supervisor {
        return Err(PackError::Usage {
            argument: "--no-supervisor".into(),
            message: "capture needs the supervisor: it records the paths the guest uses".into(),
        });
    }
    let keep = opts.run.keep_changes;
    let mut run_opts = opts.run.clone();
    run_opts.keep_changes = false;
    let req = RunRequest::prepare(&run_opts)?;
    // The host facts of the manifest (libc version, git state, lockfiles) are gathered on another thread while
    // the guest runs; the guest writes only to its overlay, so the working tree read here is the one it started on.
    let facts = {
        let (cwd, state) = (PathBuf::from(&req.settings.cwd), req.state_dir.clone());
        repro_sandbox::run::spawn_beside("repro-host-facts", move || HostFacts {
            system: system(),
            source: Source { git: git_state(&cwd, &state), lockfiles: lockfiles(&cwd, &state) },
        })
        .map_err(|e| PackError::io("cannot start a thread in", &req.state_dir, e))?
    };
    // Files the guest reads are hashed and compressed into the caches while it runs (see prefetch.rs).
    fs::create_dir_all(&req.state_dir).map_err(|e| PackError::io("cannot create", &req.state_dir, e))?;
    let stream = tempfile::Builder::new()
        .prefix(".access-")
        .tempfile_in(&req.state_dir)
        .map_err(|e| PackError::io("cannot create a file in", &req.state_dir, e))?;
    let prefetcher = Prefetcher::start(
        stream.path().to_path_buf(),
        closure_options(&req),
        FrameCache::default_cache(),
        crate::store::cache_dir().join("digests.json"),
        ScanCache::default_path(),
    );
    let report = repro_sandbox::run::execute_with(
        &req,
        exe,
        opts.echo,
        &RunExtras {
            record_access: true,
            access_stream: Some(stream.path().to_path_buf()),
            host_network: opts.network_record,
            tapes: TapeSettings {
                network: if opts.network_record { TapeIo::Record } else { TapeIo::Off },
                proc: TapeIo::Record,
            },
            ..Default::default()
        },
    )?;
    prefetcher.finish();
    drop(stream);
    let rec = &report.record;
    // Credentials in the output are redacted before anything is derived from it (the signature too).
    let values = secret_values(&req.settings.env);
    let mut found = SecretsRecord { mode: opts.secrets, ..Default::default() };
    let mut output_notes = Vec::new();
    let mut outputs = Vec::new();
    for name in ["stdout", "stderr"] {
        let data = read(&report.dir.join(name))?;
        let (red, findings) = redact(&data, &values);
        if findings.is_empty() {
            outputs.push(data);
            continue;
        }
        let what = findings.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", ");
        if opts.secrets == SecretsMode::Keep {
            output_notes.push(format!("{name}: {what}: KEPT in the pack (--secrets keep)"));
            found.kept.push(SecretFile { path: name.into(), reason: what });
            outputs.push(data);
        } else {
            output_notes.push(format!("{name}: {what}: redacted in the pack"));
            found.output_redacted.push(name.into());
            outputs.push(red);
        }
    }
    // The loop above pushed exactly two outputs, stdout then stderr.
    let stderr = outputs.pop().unwrap_or_default();
    let stdout = outputs.pop().unwrap_or_default();
    let changes: Changes = serde_json::from_slice(&read(&report.dir.join("changes.json"))?)
        .map_err(|e| PackError::Closure { path: report.dir.join("changes.json"), detail: e.to_string() })?;
    let junit = junit_files(&changes, &report.dir.join("changes"));
    let junit_refs: Vec<&[u8]> = junit.iter().map(|v| v.as_slice()).collect();
    let signature = crate::signature::compute(rec.exit_status, &stdout, &stderr, &junit_refs);
    let mut out = CaptureReport { run: report.clone(), pack: None, signature: signature.clone(), files: 0, blobs: 0 };
    let failed = rec.exit_status != 0;
    if failed || opts.always {
        let facts = facts.join().map_err(|_| PackError::Closure {
            path: PathBuf::from(&req.settings.cwd),
            detail: "gathering the git state and lockfiles failed".into(),
        })?;
        for note in &output_notes {
            eprintln!("[repro] secrets: {note}");
        }
        let (manifest, blobs) = build_manifest(
            &req,
            &report,
            &changes,
            signature,
            (stdout, stderr),
            opts.thin,
            facts,
            (opts.secrets, found),
            opts.companions,
        )?;
        let (mut manifest, mut blobs) = (manifest, blobs);
        if let Some(hook) = opts.environment {
            let used = used_inputs(&req, &report, &manifest.files);
            let json = hook(&used).map_err(|detail| PackError::Closure { path: report.dir.clone(), detail })?;
            let r = BlobRef::of(&json);
            blobs.insert(r.blake3.clone(), BlobSource::Bytes(json));
            manifest.environment = Some(r);
        }
        let store = Store::default_store();
        let path = match &opts.output {
            Some(p) => p.clone(),
            None => {
                let mut json = serde_json::to_vec_pretty(&manifest).map_err(|e| PackError::Closure {
                    path: PathBuf::from(&manifest.command.cwd),
                    detail: format!("cannot write the manifest as JSON: {e}"),
                })?;
                json.push(b'\n');
                let id = digest(&json);
                let prog = Path::new(&manifest.command.argv[0])
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "pack".into());
                let dir = req.state_dir.join("packs");
                fs::create_dir_all(&dir).map_err(|e| PackError::io("cannot create", &dir, e))?;
                dir.join(format!("{prog}-{}.{EXTENSION}", &id[..12]))
            }
        };
        write_pack(&path, &manifest, &blobs, opts.thin.then_some(&store), Some(&FrameCache::default_cache()))?;
        out.files = manifest.files.len();
        out.blobs = blobs.len();
        out.pack = Some(path);
    }
    if keep {
        let limits = repro_sandbox::changes::CopyLimits::for_layer(req.settings.disk_bytes, req.settings.disk_inodes);
        let mut changes = changes;
        repro_sandbox::changes::apply(
            &mut changes,
            &report.dir.join("changes"),
            Path::new(&req.settings.cwd),
            &limits,
        )?;
        if let Some(w) = repro_sandbox::changes::skipped_warning(&changes) {
            eprintln!("[repro] WARNING: --keep-changes: {w}");
        }
    }
    Ok(out)
}

/// Runs like `repro run` with the paths the guest uses recorded (`repro run --record-inputs`): the run's report
/// and what it used, resolved on the host as a capture's closure is.
pub fn run_recording_inputs(req: &RunRequest, exe: &Path, echo: Echo) -> Result<(RunReport, UsedInputs), PackError> {
    if !req.settings.supervised {
        return Err(PackError::Usage {
            argument: "--no-supervisor".into(),
            message: "--record-inputs needs the supervisor: it records the paths the guest uses".into(),
        });
    }
    let report =
        repro_sandbox::run::execute_with(req, exe, echo, &RunExtras { record_access: true, ..Default::default() })?;
    let used = used_inputs_of(req, &report)?;
    Ok((report, used))
}

/// The inputs a run that recorded its accesses (`RunExtras::record_access`) used: its closure's files outside the
/// working directory, hashed again on the host.
pub fn used_inputs_of(req: &RunRequest, report: &RunReport) -> Result<UsedInputs, PackError> {
    let accesses = accesses_of(report)?;
    let closure = Closure::build(&accesses, &closure_options(req))?;
    let entries: Vec<FileEntry> = closure.entries.into_values().collect();
    Ok(used_inputs(req, report, &entries))
}

/// The accesses the supervisor reported, typed; the working directory is one of them.
fn accesses_of(report: &RunReport) -> Result<Vec<Access>, PackError> {
    // The access stream names each use; a name this version does not know is an error, not a use dropped.
    let kind = |path: &Path, k: &str| {
        AccessKind::parse(k).ok_or_else(|| PackError::Closure {
            path: path.into(),
            detail: format!("the supervisor reported an unknown access '{k}'"),
        })
    };
    let mut accesses: Vec<Access> = report
        .accessed
        .iter()
        .map(|a| {
            let path = a.bytes();
            let kinds = a.kinds.iter().map(|k| kind(&path, k)).collect::<Result<_, _>>()?;
            Ok(Access { path, kinds })
        })
        .collect::<Result<_, PackError>>()?;
    accesses.push(Access { path: report.record.settings.cwd.clone().into(), kinds: vec![AccessKind::Chdir] });
    Ok(accesses)
}

/// The closure's files outside the working directory whose content the guest used, with sha256 and blake3 of
/// the host file (read again: one that changed since the closure hashed it is listed as unread, not guessed).
fn used_inputs(req: &RunRequest, report: &RunReport, entries: &[FileEntry]) -> UsedInputs {
    use sha2::Digest as _;
    let opts = closure_options(req);
    let cwd = req.settings.cwd.trim_end_matches('/');
    let mut files = Vec::new();
    let mut unread = Vec::new();
    for e in entries {
        if e.kind != EntryKind::File || !e.access.iter().any(|k| k.reads()) {
            continue;
        }
        let bytes = e.bytes();
        if bytes.as_ref() == cwd.as_bytes() || bytes.starts_with(format!("{cwd}/").as_bytes()) {
            continue;
        }
        let Some(b3) = &e.blake3 else { continue };
        let host = opts.host(&bytes);
        let data = match read_bounded(&host, e.size.unwrap_or(0)) {
            Ok(d) => d,
            Err(reason) => {
                unread.push(repro_model::provenance::UnreadFile { path: e.path.clone(), reason });
                continue;
            }
        };
        if &digest(&data) != b3 {
            unread.push(repro_model::provenance::UnreadFile {
                path: e.path.clone(),
                reason: "it changed on the host after the run read it".into(),
            });
            continue;
        }
        files.push(repro_model::provenance::UsedFile {
            path: e.path.clone(),
            path_hex: e.path_hex.clone(),
            uses: e.access.iter().copied().filter(|k| k.reads()).collect(),
            size: data.len() as u64,
            sha256: hex(&sha2::Sha256::digest(&data)),
            blake3: b3.clone(),
            sha1: Some(hex(&sha1::Sha1::digest(&data))),
        });
    }
    UsedInputs {
        run_id: report.record.id.clone(),
        started_at: report.record.started_at.clone(),
        settings: report.record.settings.clone(),
        files,
        unread,
    }
}

/// A file's content, at most `expected` bytes plus one (a file that grew is caught by its digest).
fn read_bounded(p: &Path, expected: u64) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let f = fs::File::open(p).map_err(|e| format!("cannot open {}: {e}", p.display()))?;
    let mut data = Vec::new();
    f.take(expected.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    Ok(data)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn read(p: &Path) -> Result<Vec<u8>, PackError> {
    fs::read(p).map_err(|e| PackError::io("cannot read", p, e))
}

/// JUnit XML files the run wrote into the working directory.
fn junit_files(changes: &Changes, dir: &Path) -> Vec<Vec<u8>> {
    changes
        .changes
        .iter()
        .filter(|c| c.kind != ChangeKind::Deleted && c.path.ends_with(".xml"))
        .filter_map(|c| fs::read(dir.join(&c.path)).ok())
        .filter(|d| {
            let head = String::from_utf8_lossy(&d[..d.len().min(4096)]).into_owned();
            head.contains("<testsuite")
        })
        .collect()
}

fn outcome_of(o: &RunOutcome) -> Outcome {
    match o {
        RunOutcome::Exited { .. } => Outcome::Exited,
        RunOutcome::Signaled { .. } => Outcome::Signaled,
        RunOutcome::ExecFailed { .. } => Outcome::ExecFailed,
        RunOutcome::SetupFailed { .. } => Outcome::SetupFailed,
    }
}

/// What the manifest says of the host: gathered while the guest runs.
struct HostFacts {
    system: System,
    source: Source,
}

/// Adds the companions of `accesses` ([`crate::companions`]) that the closure does not hold as files: their
/// entries (and the directories and links leading to them) with no access kind, their blobs.
fn add_companions(
    closure: &mut Closure,
    accesses: &[Access],
    opts: &ClosureOptions,
) -> Result<Vec<CompanionFile>, PackError> {
    use std::os::unix::ffi::OsStrExt;
    let exists = |p: &Path| !opts.skipped(p.as_os_str().as_bytes()) && opts.host(p.as_os_str().as_bytes()).exists();
    let wanted = crate::companions::of(accesses, crate::companions::RULES, &exists);
    let mut added = Vec::new();
    for c in wanted {
        let more = Closure::build(&[Access { path: c.path.clone(), kinds: vec![AccessKind::Exec] }], opts)?;
        let mut new = false;
        let mut digests = std::collections::BTreeSet::new();
        for (path, mut e) in more.entries {
            digests.extend(e.blake3.clone().filter(|_| e.kind == EntryKind::File));
            match closure.entries.get_mut(&path) {
                // The run saw it without its content (a stat, a listing): packed now, still as the run used it.
                Some(have) if have.kind != EntryKind::File && e.kind == EntryKind::File => {
                    e.access = have.access.clone();
                    *have = e;
                    new = true;
                }
                Some(_) => {}
                None => {
                    e.access.clear();
                    closure.entries.insert(path, e);
                    new = true;
                }
            }
        }
        for (d, src) in more.blobs.into_iter().filter(|(d, _)| digests.contains(d)) {
            closure.blobs.entry(d).or_insert(src);
        }
        if new {
            added.push(CompanionFile { path: c.path.to_string_lossy().into_owned(), reason: c.reason.to_string() });
        }
    }
    Ok(added)
}

/// What is an input of the run and where the guest's paths are on the host.
fn closure_options(req: &RunRequest) -> ClosureOptions {
    let s = &req.settings;
    let mut map: Vec<(String, String)> = s.binds.iter().map(|b| (b.guest.clone(), b.host.clone())).collect();
    map.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
    let mut exempt = vec![s.cwd.clone()];
    exempt.extend(s.binds.iter().map(|b| b.guest.clone()));
    ClosureOptions {
        excluded: NOT_INPUTS.iter().map(|s| s.to_string()).collect(),
        exempt,
        hidden: vec![req.state_dir.to_string_lossy().into_owned()],
        map,
        digest_cache: Some(crate::store::cache_dir().join("digests.json")),
        untimed: vec![s.cwd.clone()],
    }
}

#[allow(clippy::too_many_arguments)]
fn build_manifest(
    req: &RunRequest,
    report: &RunReport,
    changes: &Changes,
    signature: Signature,
    (stdout, stderr): (Vec<u8>, Vec<u8>),
    thin: bool,
    facts: HostFacts,
    (mode, mut found): (SecretsMode, SecretsRecord),
    companions: bool,
) -> Result<(Manifest, BTreeMap<Digest, BlobSource>), PackError> {
    let s = &req.settings;
    let cwd = s.cwd.clone();
    let opts = closure_options(req);
    let accesses = accesses_of(report)?;
    let mut closure = Closure::build(&accesses, &opts)?;
    let companions = if companions { add_companions(&mut closure, &accesses, &opts)? } else { Vec::new() };
    let (entries, mut blobs) = screen_files(closure.entries, closure.blobs, mode, &mut found)?;
    let out_ref = BlobRef::of(&stdout);
    let err_ref = BlobRef::of(&stderr);
    blobs.insert(out_ref.blake3.clone(), BlobSource::Bytes(stdout));
    blobs.insert(err_ref.blake3.clone(), BlobSource::Bytes(stderr));
    let changed = changes
        .changes
        .iter()
        .map(|c| ChangedFile {
            path: c.path.clone(),
            path_hex: c.path_hex.clone(),
            kind: c.kind,
            blake3: c.blake3.clone(),
        })
        .collect();
    let cwd_path = Path::new(&cwd);
    let mut tapes = Tapes { network_mode: NetworkMode::None, ..Default::default() };
    let t = &report.tapes;
    if let Some(net) = &t.network {
        let net = net.to_json();
        // The guest's traffic is compared byte for byte on replay: it cannot be redacted, only reported.
        let (_, findings) = redact(&net, &secret_values(&s.env));
        if !findings.is_empty() && mode != SecretsMode::Keep {
            let what = findings.iter().map(|f| f.what.clone()).collect::<std::collections::BTreeSet<_>>();
            let what = what.into_iter().collect::<Vec<_>>().join(", ");
            eprintln!("[repro] secrets: WARNING: the network tape holds {what}: the pack keeps the recorded traffic");
            found.kept.push(SecretFile { path: "tapes.network".into(), reason: what });
        }
        let r = BlobRef::of(&net);
        blobs.insert(r.blake3.clone(), BlobSource::Bytes(net));
        tapes.network_mode = NetworkMode::Record;
        tapes.network = Some(r);
        tapes.network_events = t.network_events;
    }
    if let Some(p) = t.proc.as_ref().filter(|_| t.proc_reads > 0) {
        // `/proc/self/environ` and the like hold the secret values: redacted like the output.
        let p = if mode == SecretsMode::Keep { p.to_json() } else { redact_proc_tape(p, &s.env, &mut found) };
        let r = BlobRef::of(&p);
        blobs.insert(r.blake3.clone(), BlobSource::Bytes(p));
        tapes.proc = Some(r);
        tapes.proc_reads = t.proc_reads;
    }
    let manifest = Manifest {
        format: PACK_FORMAT,
        repro_version: env!("CARGO_PKG_VERSION").into(),
        // Secret variables as markers: `repro replay` asks for them (see repro_model::secrets).
        command: CommandSpec {
            argv: s.command.clone(),
            cwd: cwd.clone(),
            env: repro_model::secrets::redact_env(&s.env),
        },
        determinism: DeterminismSpec {
            supervised: s.supervised,
            seed: s.seed,
            epoch_unix: s.epoch.unix,
            epoch_rfc3339: s.epoch.rfc3339.clone(),
            clock_step_ns: s.clock_step_ns,
            dir_order: s.dir_order,
            hostname: s.hostname.clone(),
            sched: s.sched,
            spin_limit_ms: s.spin_limit_ms,
        },
        resources: Resources { cpus: s.cpus, memory_bytes: s.memory_bytes, pids_max: s.pids_max },
        system: facts.system,
        source: facts.source,
        result: RunResult {
            outcome: outcome_of(&report.record.outcome),
            exit_status: report.record.exit_status,
            stdout: out_ref,
            stderr: err_ref,
            changes: changed,
        },
        signature,
        files: entries.into_values().collect(),
        tapes,
        thin,
        secrets: found,
        environment: None,
        companions,
    };
    manifest.validate().map_err(|e| PackError::Closure { path: cwd_path.into(), detail: e.to_string() })?;
    Ok((manifest, blobs))
}

/// The /proc tape with secret values and credential shapes redacted in each recorded read.
fn redact_proc_tape(tape: &ProcTape, env: &BTreeMap<String, String>, found: &mut SecretsRecord) -> Vec<u8> {
    let values = secret_values(env);
    let mut tape = tape.clone();
    let mut hits = std::collections::BTreeSet::new();
    for read in &mut tape.reads {
        let (red, findings) = redact(&read.data, &values);
        if !findings.is_empty() {
            hits.insert(read.path.clone());
            read.data = red;
        }
    }
    for path in hits {
        eprintln!("[repro] secrets: the /proc tape's read of {path}: redacted in the pack");
        found.redacted.push(SecretFile { path: format!("tapes.proc:{path}"), reason: "secret values".into() });
    }
    tape.to_json()
}

/// The closure's entries by guest path.
type Entries = BTreeMap<Vec<u8>, FileEntry>;

/// Looks for credentials in the files of the closure (by path, and in their content through the scan cache) and
/// leaves them out, redacts or keeps them according to `mode`, saying so on stderr (never the credential).
fn screen_files(
    mut entries: Entries,
    mut blobs: BTreeMap<Digest, BlobSource>,
    mode: SecretsMode,
    found: &mut SecretsRecord,
) -> Result<(Entries, BTreeMap<Digest, BlobSource>), PackError> {
    let read_blob = |src: Option<&BlobSource>| -> Option<Vec<u8>> {
        match src? {
            BlobSource::File(p) => fs::read(p).ok(),
            BlobSource::Bytes(b) => Some(b.clone()),
        }
    };
    let mut scans = ScanCache::load(ScanCache::default_path());
    let mut left_out = Vec::new();
    for (key, e) in entries.iter_mut() {
        let Some(d) = e.blake3.clone().filter(|_| e.kind == EntryKind::File) else { continue };
        let path = &e.path;
        let by_path = credential_file(path);
        let mut reasons: Vec<String> = by_path.iter().map(|w| w.to_string()).collect();
        let findings = match scans.findings(&d, || read_blob(blobs.get(&d))) {
            Some(f) => f,
            // Not among the pack's blobs: none of its content is packed.
            None if !blobs.contains_key(&d) => Vec::new(),
            // Nothing is packed unscanned.
            None => {
                return Err(PackError::Closure {
                    path: path.into(),
                    detail: "cannot read it to look for credentials".into(),
                })
            }
        };
        // A distributed library's self-test keys are public and the library is needed: packed as it is.
        let findings = if by_path.is_none()
            && !findings.is_empty()
            && read_blob(blobs.get(&d)).is_some_and(|data| is_distributed_test_vector(path, &data, &findings))
        {
            Vec::new()
        } else {
            findings
        };
        reasons.extend(findings.iter().map(|f| f.to_string()));
        if reasons.is_empty() {
            continue;
        }
        let reason = reasons.join(", ");
        let entry = SecretFile { path: path.clone(), reason: reason.clone() };
        match mode {
            SecretsMode::Keep => {
                eprintln!("[repro] secrets: WARNING: {path}: {reason}: KEPT in the pack (--secrets keep)");
                found.kept.push(entry);
            }
            SecretsMode::Exclude => {
                eprintln!(
                    "[repro] secrets: {path}: {reason}: left out of the pack (--secrets redact or keep to pack it)"
                );
                found.excluded.push(entry);
                left_out.push(key.clone());
            }
            SecretsMode::Redact => {
                let data = read_blob(blobs.get(&d))
                    .ok_or_else(|| PackError::Closure { path: path.into(), detail: "cannot read it again".into() })?;
                let red = match by_path {
                    Some(what) => format!("# <redacted: {what}>\n").into_bytes(),
                    None => redact(&data, &[]).0,
                };
                let r = BlobRef::of(&red);
                blobs.insert(r.blake3.clone(), BlobSource::Bytes(red));
                e.size = Some(r.size);
                e.blake3 = Some(r.blake3);
                eprintln!("[repro] secrets: {path}: {reason}: redacted in the pack");
                found.redacted.push(entry);
            }
        }
    }
    scans.save();
    for p in left_out {
        entries.remove(&p);
    }
    // Blobs no entry refers to any more (left out, or replaced by a redacted copy) are not written.
    let used: std::collections::HashSet<Digest> = entries.values().filter_map(|e| e.blake3.clone()).collect();
    blobs.retain(|d, _| used.contains(d));
    Ok((entries, blobs))
}

fn system() -> System {
    // Informative (replay does not need it): empty when unknown.
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default();
    let libc = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    System { arch: std::env::consts::ARCH.into(), kernel_release: kernel, libc_version: libc }
}

fn git(cwd: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let o = Command::new("git").arg("-C").arg(cwd).args(args).output().ok()?;
    o.status.success().then_some(o.stdout)
}

/// The HEAD commit and a digest of what is not committed (tracked changes and untracked files, the state
/// directory left out).
fn git_state(cwd: &Path, state: &Path) -> Option<GitState> {
    let head = git(cwd, &["rev-parse", "HEAD"])?;
    let commit = String::from_utf8_lossy(&head).trim().to_string();
    let top = PathBuf::from(String::from_utf8_lossy(&git(cwd, &["rev-parse", "--show-toplevel"])?).trim());
    let mut exclude = Vec::new();
    if let Ok(rel) = state.strip_prefix(&top) {
        exclude.push(format!(":(exclude){}", rel.display()));
    }
    let mut args = vec!["diff", "HEAD", "--binary", "--", "."];
    args.extend(exclude.iter().map(String::as_str));
    // When git cannot say what is uncommitted, the state is unknown (None), never "clean".
    let diff = git(&top, &args)?;
    let mut args = vec!["ls-files", "--others", "--exclude-standard", "-z", "--", "."];
    args.extend(exclude.iter().map(String::as_str));
    let untracked = git(&top, &args)?;
    let mut h = blake3::Hasher::new();
    h.update(&diff);
    for name in untracked.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        h.update(name);
        h.update(&[0]);
        if let Ok(d) = fs::read(top.join(String::from_utf8_lossy(name).as_ref())) {
            h.update(blake3::hash(&d).as_bytes());
        }
    }
    let dirty = !diff.is_empty() || !untracked.is_empty();
    Some(GitState { commit, uncommitted_digest: dirty.then(|| h.finalize().to_hex().to_string()) })
}

/// Lockfiles in the working directory and two levels below it.
fn lockfiles(cwd: &Path, state: &Path) -> Vec<Lockfile> {
    let mut out = Vec::new();
    let mut stack = vec![(cwd.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                let skip = name.starts_with('.') || ["node_modules", "target", "vendor"].contains(&name.as_str());
                if depth < 2 && !skip && p != state {
                    stack.push((p, depth + 1));
                }
            } else if ft.is_file()
                && (LOCKFILES.contains(&name.as_str()) || (name.starts_with("requirements") && name.ends_with(".txt")))
            {
                if let Ok(d) = fs::read(&p) {
                    let rel = p.strip_prefix(cwd).unwrap_or(&p).to_string_lossy().into_owned();
                    out.push(Lockfile { path: rel, blake3: digest(&d) });
                }
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
