//! What `repro inspect` shows, and `repro unpack`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::archive::Pack;
use crate::manifest::{EntryKind, Manifest, NetworkMode, Outcome};
use crate::signature::Signature;
use crate::store::Store;
use crate::PackError;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Sizes {
    /// Size of the pack file.
    pub pack_bytes: u64,
    /// Distinct blobs and their total size, uncompressed.
    pub blobs: u64,
    pub blob_bytes: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct InputGroup {
    pub entries: u64,
    /// Files whose content is packed.
    pub files: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TapeSummary {
    pub network_mode: NetworkMode,
    pub network_events: u64,
    pub proc_reads: u64,
}

/// The summary of a pack.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub pack: String,
    pub id: String,
    pub format: u32,
    pub repro_version: String,
    pub thin: bool,
    pub argv: Vec<String>,
    pub cwd: String,
    pub seed: u64,
    pub epoch: String,
    pub clock_step_ns: u64,
    /// The scheduler's policy and seed the replay uses.
    pub sched: repro_model::SchedSettings,
    pub outcome: Outcome,
    pub exit_status: i32,
    pub signature: Signature,
    pub sizes: Sizes,
    /// Inputs by top directory (`/usr`, `/etc`, the working directory...).
    pub inputs: BTreeMap<String, InputGroup>,
    pub tapes: TapeSummary,
    pub git_commit: Option<String>,
    pub uncommitted_changes: bool,
    pub lockfiles: Vec<String>,
    pub system: String,
}

fn group_of(path: &str, cwd: &str) -> String {
    if path == cwd || path.starts_with(&format!("{}/", cwd.trim_end_matches('/'))) {
        return "(working directory)".into();
    }
    let top = path.trim_start_matches('/').split('/').next().unwrap_or("");
    format!("/{top}")
}

pub fn summarize(pack: &Pack) -> Summary {
    let m: &Manifest = &pack.manifest;
    let mut inputs: BTreeMap<String, InputGroup> = BTreeMap::new();
    for f in &m.files {
        let g = inputs.entry(group_of(&f.path, &m.command.cwd)).or_default();
        g.entries += 1;
        if f.kind == EntryKind::File {
            g.files += 1;
            g.bytes += f.size.unwrap_or(0);
        }
    }
    Summary {
        pack: pack.path.display().to_string(),
        id: pack.id.clone(),
        format: m.format,
        repro_version: m.repro_version.clone(),
        thin: m.thin,
        argv: m.command.argv.clone(),
        cwd: m.command.cwd.clone(),
        seed: m.determinism.seed,
        epoch: m.determinism.epoch_rfc3339.clone(),
        clock_step_ns: m.determinism.clock_step_ns,
        sched: m.determinism.sched,
        outcome: m.result.outcome,
        exit_status: m.result.exit_status,
        signature: m.signature.clone(),
        sizes: Sizes {
            pack_bytes: pack.compressed_bytes,
            blobs: pack.blobs.len() as u64,
            blob_bytes: pack.blobs.values().sum(),
        },
        inputs,
        tapes: TapeSummary {
            network_mode: m.tapes.network_mode,
            network_events: m.tapes.network_events,
            proc_reads: m.tapes.proc_reads,
        },
        git_commit: m.source.git.as_ref().map(|g| g.commit.clone()),
        uncommitted_changes: m.source.git.as_ref().is_some_and(|g| g.uncommitted_digest.is_some()),
        lockfiles: m.source.lockfiles.iter().map(|l| l.path.clone()).collect(),
        system: format!("{} Linux {}, {}", m.system.arch, m.system.kernel_release, m.system.libc_version),
    }
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{} MiB", n >> 20),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 10 << 10 => format!("{} KiB", n >> 10),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn shell_quote(a: &str) -> String {
    if !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@+%".contains(&b)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// The human summary of `repro inspect`.
pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    let argv: Vec<String> = s.argv.iter().map(|a| shell_quote(a)).collect();
    o.push_str(&format!("pack       {}{}\n", s.pack, if s.thin { " (thin: blobs in the local store)" } else { "" }));
    o.push_str(&format!("id         {}\n", s.id));
    o.push_str(&format!("format     {} (repro {})\n", s.format, s.repro_version));
    o.push_str(&format!("command    {}\n", argv.join(" ")));
    o.push_str(&format!("cwd        {}\n", s.cwd));
    o.push_str(&format!(
        "seed       {}   epoch {}   clock step {} ns   sched {} seed {}{}\n",
        s.seed,
        s.epoch,
        s.clock_step_ns,
        s.sched.policy,
        s.sched.seed,
        if s.sched.points.is_default() { String::new() } else { format!(" points {}", s.sched.points) }
    ));
    o.push_str(&format!("system     {}\n", s.system));
    if let Some(c) = &s.git_commit {
        o.push_str(&format!("git        {c}{}\n", if s.uncommitted_changes { " + uncommitted changes" } else { "" }));
    }
    if !s.lockfiles.is_empty() {
        o.push_str(&format!("lockfiles  {}\n", s.lockfiles.join(", ")));
    }
    o.push_str(&format!("outcome    {}, exit status {}\n", s.outcome, s.exit_status));
    o.push_str("signature\n");
    o.push_str(&format!("  exit status  {}\n", s.signature.exit_status));
    if !s.signature.failing_tests.is_empty() {
        o.push_str(&format!(
            "  failing      {} ({})\n",
            s.signature.failing_tests.join(", "),
            s.signature.test_frameworks.join(", ")
        ));
    }
    for l in &s.signature.stderr_tail {
        o.push_str(&format!("  stderr | {l}\n"));
    }
    o.push_str(&format!(
        "size       {} packed, {} in {} blobs\n",
        human_bytes(s.sizes.pack_bytes),
        human_bytes(s.sizes.blob_bytes),
        s.sizes.blobs
    ));
    o.push_str("inputs\n");
    for (dir, g) in &s.inputs {
        o.push_str(&format!(
            "  {dir:<22} {:>5} entries {:>5} files {:>10}\n",
            g.entries,
            g.files,
            human_bytes(g.bytes)
        ));
    }
    o.push_str(&format!(
        "tapes      network {} ({} events), /proc and /sys {} reads\n",
        s.tapes.network_mode, s.tapes.network_events, s.tapes.proc_reads
    ));
    o
}

/// `repro unpack`: `dir/manifest.json`, `dir/root/` (the closure as a tree), `dir/stdout`, `dir/stderr` and
/// `dir/tapes/{network,proc}.json`. `dir` must not exist or be empty.
pub fn unpack(pack_path: &Path, dir: &Path, store: &Store) -> Result<Pack, PackError> {
    unpack_limited(pack_path, dir, store, &crate::extract::Limits::default())
}

/// [`unpack`] with the given limits. Everything is written into a staging directory beside `dir` and renamed
/// onto it at the end; on any error nothing is left (see [`crate::extract`]).
pub fn unpack_limited(
    pack_path: &Path,
    dir: &Path,
    store: &Store,
    limits: &crate::extract::Limits,
) -> Result<Pack, PackError> {
    if let Ok(mut rd) = fs::read_dir(dir) {
        if rd.next().is_some() {
            return Err(PackError::io(
                "will not unpack into the non-empty directory",
                dir,
                std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            ));
        }
    }
    let staging = crate::extract::Staging::beside(dir)?;
    let shown = staging.path().to_path_buf();
    let e = |what: &'static str, name: &str| {
        let p = shown.join(name);
        move |err| PackError::io(what, p, err)
    };
    let blobs = staging.dir.subdir(".blobs", Some(0o700)).map_err(e("cannot create", ".blobs"))?;
    let pack = crate::archive::read_pack_checked(pack_path, store, Some((&blobs, &shown.join(".blobs"))), limits)?;
    let m = &pack.manifest;
    let mut mj = serde_json::to_vec_pretty(m).map_err(|x| PackError::Manifest {
        path: pack_path.into(),
        source: crate::manifest::ManifestError::Shape(format!("cannot be written as JSON: {x}")),
    })?;
    mj.push(b'\n');
    let mut f = staging.dir.create_file("manifest.json", 0o644).map_err(e("cannot write", "manifest.json"))?;
    std::io::Write::write_all(&mut f, &mj).map_err(e("cannot write", "manifest.json"))?;
    crate::tree::copy_blob(&blobs, &m.result.stdout.blake3, &staging.dir, "stdout")
        .map_err(e("cannot write", "stdout"))?;
    crate::tree::copy_blob(&blobs, &m.result.stderr.blake3, &staging.dir, "stderr")
        .map_err(e("cannot write", "stderr"))?;
    let tapes = [("network.json", &m.tapes.network), ("proc.json", &m.tapes.proc)];
    if tapes.iter().any(|(_, t)| t.is_some()) {
        let td = staging.dir.subdir("tapes", Some(0o755)).map_err(e("cannot create", "tapes"))?;
        for (name, t) in tapes {
            if let Some(b) = t {
                crate::tree::copy_blob(&blobs, &b.blake3, &td, name).map_err(e("cannot write", "tapes"))?;
            }
        }
    }
    // Last: it moves blobs out of `blobs` (the copies above may share a digest with a file).
    let root = staging.dir.subdir("root", Some(0o755)).map_err(e("cannot create", "root"))?;
    crate::tree::materialize(&pack, &blobs, &root, &shown.join("root"))?;
    drop(blobs);
    fs::remove_dir_all(shown.join(".blobs")).map_err(e("cannot remove", ".blobs"))?;
    staging.finish(dir, 0o755)?;
    Ok(pack)
}
