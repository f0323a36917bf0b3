//! `repro env`: the environment a run used, derived from the files it actually opened, executed or mapped.
//!
//! Three sources: a run directory's `environment.json` (`repro run --record-inputs`), a pack's `environment`
//! blob (every `repro capture`), and an environment document (the JSON of `repro env --json` or
//! `repro env snapshot`). This module derives, writes, parses and checks the document and says it in lines; the
//! identity is computed in [`crate::identity`], never read: a document from someone else claims an identity, and a
//! claim that does not match its own components is refused. Telling the sources apart and opening them (a pack's
//! claim checked against its blobs) is [`crate::open`]'s job; a DSSE envelope is a side of `repro drift`
//! ([`crate::drift::side_of`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use repro_model::provenance::{Component, EnvSource, Environment, Settings, UnreadFile, UsedFile, PROVENANCE_FORMAT};
use repro_model::run::RunSettings;
use repro_pack::capture::UsedInputs;
use sha2::Digest as _;

use crate::identity::{component_digest, hex, identity, is_hex};
use crate::resolve::{self, Contents};
use crate::ProvError;

/// The name of the environment document in a run directory.
pub const RUN_FILE: &str = "environment.json";

/// The largest environment document read (a run of a whole toolchain uses tens of thousands of files, each a few
/// hundred bytes of JSON).
pub const MAX_DOCUMENT: u64 = 256 << 20;

/// The settings of a run as an environment records them: `identity` enter the identity digest (they change
/// what every program in the sandbox sees), `run` are the run's own variables, recorded only (docs/provenance.md).
pub fn settings_of(s: &RunSettings) -> Settings {
    let mut identity = BTreeMap::new();
    let mut put = |k: &str, v: String| identity.insert(k.to_string(), v);
    put("aslr", s.aslr.to_string());
    put("cpus", s.cpus.to_string());
    put("dir_order", s.dir_order.to_string());
    put("disk_bytes", s.disk_bytes.to_string());
    put("domainname", s.domainname.clone());
    put("hostname", s.hostname.clone());
    put("memory_bytes", s.memory_bytes.to_string());
    put(
        "rlimits",
        s.rlimits.iter().map(|r| format!("{}={}:{}", r.resource, r.soft, r.hard)).collect::<Vec<_>>().join(","),
    );
    put("supervised", s.supervised.to_string());
    put("umask", s.umask.clone());
    put("user_namespace", s.user_namespace.to_string());
    // Secret values are markers already (the record is redacted); the marker names the variable only.
    for (k, v) in repro_model::secrets::redact_env(&s.env) {
        put(&format!("env.{k}"), v);
    }
    let mut run = BTreeMap::new();
    run.insert("clock_step_ns".into(), s.clock_step_ns.to_string());
    run.insert("cwd".into(), s.cwd.clone());
    run.insert("epoch".into(), s.epoch.rfc3339.clone());
    run.insert("sched".into(), format!("{:?}", s.sched));
    run.insert("seed".into(), s.seed.to_string());
    run.insert("spin_limit_ms".into(), s.spin_limit_ms.to_string());
    Settings { identity, run }
}

/// This host's architecture and kernel release (uname).
pub fn host_system() -> (String, String) {
    let release =
        std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default();
    (std::env::consts::ARCH.to_string(), release)
}

/// The bytes of a host file, when its sha256 is still the one recorded.
struct HostFiles<'a> {
    root: &'a Path,
}

impl Contents for HostFiles<'_> {
    fn bytes(&self, file: &UsedFile) -> Option<Vec<u8>> {
        let p = self.root.join(file.path.trim_start_matches('/'));
        let f = std::fs::File::open(p).ok()?;
        let mut data = Vec::new();
        f.take(file.size.saturating_add(1)).read_to_end(&mut data).ok()?;
        (hex(&sha2::Sha256::digest(&data)) == file.sha256).then_some(data)
    }
}

/// The environment of what a run used, its components named by the package databases below `root` ("/").
pub fn derive(used: &UsedInputs, root: &Path) -> Result<Environment, ProvError> {
    let (arch, kernel_release) = host_system();
    let lock = format!("{}/Cargo.lock", used.settings.cwd.trim_end_matches('/'));
    let mut components = resolve::components_with(root, &used.files, &HostFiles { root }, Some(lock.as_bytes()))?;
    finish(&mut components);
    let settings = settings_of(&used.settings);
    Ok(Environment {
        format: PROVENANCE_FORMAT,
        repro_version: env!("CARGO_PKG_VERSION").into(),
        source: EnvSource::Run { run_id: used.run_id.clone() },
        recorded_at: used.started_at.clone(),
        identity: identity(&arch, &kernel_release, &settings, &components),
        arch,
        kernel_release,
        settings,
        components,
        unread: used.unread.clone(),
    })
}

/// Sorts components and their files, and sets each component's digest from its files.
fn finish(components: &mut [Component]) {
    for c in components.iter_mut() {
        c.files.sort();
        c.digest = component_digest(&c.files);
    }
    components.sort_by(|a, b| (a.kind, &a.name, &a.version).cmp(&(b.kind, &b.name, &b.version)));
}

/// The JSON of an environment (pretty, with a final newline).
pub fn to_json(env: &Environment) -> Vec<u8> {
    // An Environment is strings, numbers and maps: it always serializes.
    let mut v = serde_json::to_vec_pretty(env).unwrap_or_default();
    v.push(b'\n');
    v
}

/// The hook `repro capture` calls to put the environment into the pack.
/// Two captures of one run give byte-identical packs: the stored document names no run id (the source is set
/// to the pack when it is read) and is dated by the run's epoch, not the wall clock.
pub fn capture_hook(used: &UsedInputs) -> Result<Vec<u8>, String> {
    let mut env = derive(used, Path::new("/")).map_err(|e| crate::error::chain(&e))?;
    env.source = EnvSource::Pack { pack: String::new() };
    env.recorded_at = used.settings.epoch.rfc3339.clone();
    Ok(to_json(&env))
}

/// `repro run --record-inputs`: the run, then its environment written to `environment.json` in the run
/// directory (atomically, after run.json: a run without the file recorded no inputs).
pub fn record_run(
    req: &repro_sandbox::run::RunRequest,
    exe: &Path,
    echo: repro_sandbox::run::Echo,
) -> Result<(repro_sandbox::run::RunReport, Environment), ProvError> {
    let (report, used) = repro_pack::capture::run_recording_inputs(req, exe, echo)?;
    let env = derive(&used, Path::new("/"))?;
    write_atomic(&report.dir.join(RUN_FILE), &to_json(&env))?;
    Ok((report, env))
}

/// The environment of a run that recorded its accesses (the first run of `run --verify --record-inputs`),
/// written as its `environment.json`.
pub fn record_report(
    req: &repro_sandbox::run::RunRequest,
    report: &repro_sandbox::run::RunReport,
) -> Result<Environment, ProvError> {
    let used = repro_pack::capture::used_inputs_of(req, report)?;
    let env = derive(&used, Path::new("/"))?;
    write_atomic(&report.dir.join(RUN_FILE), &to_json(&env))?;
    Ok(env)
}

/// Writes `path` through a temporary file in its directory, synced, then renamed over it.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), ProvError> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let werr = |source| ProvError::Write { path: path.to_path_buf(), source };
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir).map_err(werr)?;
    tmp.write_all(data).map_err(werr)?;
    tmp.as_file().sync_all().map_err(werr)?;
    tmp.persist(path).map_err(|e| werr(e.error))?;
    Ok(())
}

/// Reads at most [`MAX_DOCUMENT`] bytes of `path`.
pub(crate) fn read_limited(path: &Path, what: &'static str) -> Result<Vec<u8>, ProvError> {
    let f = std::fs::File::open(path).map_err(|source| ProvError::Read { path: path.into(), source })?;
    let mut data = Vec::new();
    f.take(MAX_DOCUMENT + 1).read_to_end(&mut data).map_err(|source| ProvError::Read { path: path.into(), source })?;
    if data.len() as u64 > MAX_DOCUMENT {
        return Err(ProvError::TooLarge { path: path.into(), what, limit: MAX_DOCUMENT });
    }
    Ok(data)
}

/// Parses an environment document that may come from anyone, and checks it against itself: its format, every
/// component's digest and the identity.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Environment, ProvError> {
    let env: Environment = serde_json::from_slice(bytes).map_err(|source| ProvError::Json {
        path: path.into(),
        what: "environment document (repro env --json)",
        source,
    })?;
    check(path, env)
}

/// Checks an environment against itself: its format, every component's digest, every file's digests, the identity.
pub(crate) fn check(path: &Path, env: Environment) -> Result<Environment, ProvError> {
    let bad = |reason: String| ProvError::Parse { path: path.into(), line: None, reason };
    if env.format != PROVENANCE_FORMAT {
        return Err(bad(format!("format {} (this repro reads format {PROVENANCE_FORMAT})", env.format)));
    }
    for (i, c) in env.components.iter().enumerate() {
        let want = component_digest(&c.files);
        if c.digest != want {
            return Err(bad(format!(
                "components[{i}] ({} {}): digest {} is not the digest of its files ({want})",
                c.kind.name(),
                c.name,
                c.digest
            )));
        }
        for f in &c.files {
            if !is_hex(&f.sha256, 64) || !is_hex(&f.blake3, 64) {
                return Err(bad(format!("components[{i}] file {}: sha256 and blake3 must be 64 hex digits", f.path)));
            }
            if c.archive_sha256.as_deref().is_some_and(|s| !is_hex(s, 64)) {
                return Err(bad(format!("components[{i}] ({}): archive_sha256 must be 64 hex digits", c.name)));
            }
            if f.sha1.as_deref().is_some_and(|s| !is_hex(s, 40)) {
                return Err(bad(format!("components[{i}] file {}: sha1 must be 40 hex digits", f.path)));
            }
        }
    }
    let want = identity(&env.arch, &env.kernel_release, &env.settings, &env.components);
    if env.identity != want {
        return Err(bad(format!("identity {} is not the identity of its components ({want})", env.identity)));
    }
    Ok(env)
}

/// `repro env snapshot`: this host's view of the paths `of` used, read now without running anything: each file
/// hashed again, components named by this host's package databases below `root`, this host's kernel and
/// architecture. The sandbox settings are `of`'s (a run here would use the same); a path missing here is unread.
pub fn snapshot(of: &Environment, of_name: &str, root: &Path) -> Result<Environment, ProvError> {
    let (arch, kernel_release) = host_system();
    let mut files = Vec::new();
    let mut unread: Vec<UnreadFile> = Vec::new();
    for c in &of.components {
        for f in &c.files {
            let p = root.join(f.path.trim_start_matches('/'));
            match read_file_bounded(&p) {
                Ok(data) => files.push(UsedFile {
                    path: f.path.clone(),
                    path_hex: None,
                    uses: f.uses.clone(),
                    size: data.len() as u64,
                    sha256: hex(&sha2::Sha256::digest(&data)),
                    blake3: blake3::hash(&data).to_hex().to_string(),
                    sha1: Some(hex(&sha1::Sha1::digest(&data))),
                }),
                Err(e) => unread.push(UnreadFile { path: f.path.clone(), reason: e.to_string() }),
            }
        }
    }
    files.sort();
    let lock = of.settings.run.get("cwd").map(|cwd| format!("{}/Cargo.lock", cwd.trim_end_matches('/')));
    let mut components =
        resolve::components_with(root, &files, &HostFiles { root }, lock.as_deref().map(str::as_bytes))?;
    finish(&mut components);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default();
    let now = time::OffsetDateTime::now_utc();
    let recorded_at = now
        .replace_nanosecond(0)
        .unwrap_or(now)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    Ok(Environment {
        format: PROVENANCE_FORMAT,
        repro_version: env!("CARGO_PKG_VERSION").into(),
        source: EnvSource::Snapshot { host, of: of_name.to_string() },
        recorded_at,
        identity: identity(&arch, &kernel_release, &of.settings, &components),
        arch,
        kernel_release,
        settings: of.settings.clone(),
        components,
        unread,
    })
}

/// A regular file's content, at most 4 GiB.
fn read_file_bounded(p: &Path) -> std::io::Result<Vec<u8>> {
    let f = std::fs::File::open(p)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut data = Vec::new();
    f.take(4 << 30).read_to_end(&mut data)?;
    Ok(data)
}

/// The lines `repro env` prints: the identity, what enters it, then each component with its files' checks.
pub fn describe(env: &Environment) -> Vec<String> {
    let mut out = header(env);
    let files: usize = env.components.iter().map(|c| c.files.len()).sum();
    out.push(format!("used       {} files in {} components", files, env.components.len()));
    for c in &env.components {
        let version = c.version.as_deref().map(|v| format!(" {v}")).unwrap_or_default();
        let exec = if c.executed() { " [executed]" } else { "" };
        let n = c.files.len();
        let modified: Vec<&str> = c.modified().map(|f| f.path.as_str()).collect();
        let check = if !modified.is_empty() {
            format!("; MODIFIED since installed: {}", modified.join(", "))
        } else {
            String::new()
        };
        let purl = c.purl.as_deref().map(|p| format!("  {p}")).unwrap_or_default();
        out.push(format!(
            "  {:<6} {}{}{}  ({} file{}{}){}",
            c.kind.name(),
            c.name,
            version,
            exec,
            n,
            if n == 1 { "" } else { "s" },
            check,
            purl
        ));
    }
    for u in &env.unread {
        out.push(format!("  unread {}: {}", u.path, u.reason));
    }
    out
}

/// The lines of [`describe`] before the components: the identity and what enters it.
pub(crate) fn header(env: &Environment) -> Vec<String> {
    let mut out = Vec::new();
    out.push(format!("identity   {}", env.identity));
    out.push(format!("source     {}", source_text(&env.source)));
    out.push(format!("recorded   {}", env.recorded_at));
    out.push(format!("system     {} {}", env.arch, env.kernel_release));
    let settings: Vec<String> = env.settings.identity.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push(format!("settings   {}", settings.join(" ")));
    let run: Vec<String> = env.settings.run.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push(format!("run        {} (recorded, not in the identity)", run.join(" ")));
    out
}

/// Where an environment came from, in words.
pub fn source_text(s: &EnvSource) -> String {
    match s {
        EnvSource::Run { run_id } => format!("run {run_id}"),
        EnvSource::Pack { pack } => format!("pack {pack}"),
        EnvSource::Snapshot { host, of } => format!("snapshot of host {host} (paths of {of})"),
    }
}
