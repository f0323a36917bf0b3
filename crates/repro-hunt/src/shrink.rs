//! `repro shrink`: delta debugging (ddmin) over a pack's inputs while the replayed failure signature stays the
//! same k times out of k. Shrinks, in order: the test selection (for pytest, cargo test and go test), the
//! input files under the working directory (removed, then emptied, then truncated), the environment variables
//! and the argv elements. Every candidate is written as a pack and replayed by `repro replay`; results are
//! memoized by the candidate's digest.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use repro_pack::archive::{write_pack, BlobSource, Pack};
use repro_pack::manifest::{digest, EntryKind, FileEntry, Manifest};
use repro_pack::store::Store;
use serde::Serialize;

use crate::HuntError;

/// Classic ddmin: the smallest subset of `items` (1-minimal) for which `keeps_failing` holds, assuming it
/// holds for all of `items`.
pub fn ddmin<T: Clone>(items: Vec<T>, keeps_failing: &mut dyn FnMut(&[T]) -> bool) -> Vec<T> {
    let mut items = items;
    if items.is_empty() {
        return items;
    }
    if keeps_failing(&[]) {
        return Vec::new();
    }
    let mut n = 2usize;
    while items.len() >= 2 {
        let chunk = items.len().div_ceil(n);
        let chunks: Vec<Vec<T>> = items.chunks(chunk).map(|c| c.to_vec()).collect();
        let mut reduced = false;
        for c in &chunks {
            if keeps_failing(c) {
                items = c.clone();
                n = 2;
                reduced = true;
                break;
            }
        }
        if !reduced && chunks.len() > 2 {
            for i in 0..chunks.len() {
                let complement: Vec<T> =
                    chunks.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, c)| c.iter().cloned()).collect();
                if keeps_failing(&complement) {
                    items = complement;
                    n = (n - 1).max(2);
                    reduced = true;
                    break;
                }
            }
        }
        if !reduced {
            if n >= items.len() {
                break;
            }
            n = (n * 2).min(items.len());
        }
    }
    items
}

/// How a file is kept in a candidate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum FileState {
    Whole,
    Empty,
    Prefix(u64),
}

/// One candidate: what is kept of the pack.
#[derive(Debug, Clone)]
struct Candidate {
    argv: Vec<String>,
    env: BTreeSet<String>,
    /// Shrinkable files (under the working directory) that are kept, and how.
    files: BTreeMap<String, FileState>,
}

/// What shrinking did.
#[derive(Debug, Clone, Serialize)]
pub struct ShrinkReport {
    pub output: PathBuf,
    pub replays: usize,
    pub memo_hits: usize,
    pub elapsed_ms: u64,
    pub budget_exhausted: bool,
    pub test_selection: Option<Vec<String>>,
    pub removed_env: Vec<String>,
    pub removed_files: Vec<String>,
    pub emptied_files: Vec<String>,
    pub truncated_files: Vec<String>,
    pub removed_args: Vec<String>,
    pub before: Size,
    pub after: Size,
}

/// Sizes of a pack's inputs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Size {
    pub files: usize,
    pub content_bytes: u64,
    pub env_vars: usize,
    pub argv: usize,
    pub pack_bytes: u64,
}

/// Options of a shrink.
#[derive(Debug, Clone)]
pub struct ShrinkOptions {
    pub pack: PathBuf,
    pub output: PathBuf,
    pub confirm: u32,
    pub deadline: Option<Instant>,
    pub repro: PathBuf,
    /// Scratch space (extracted blobs, candidates, replay state and cache).
    pub work: PathBuf,
    /// How much the pack may unpack to (checked when it is read; passed on to each candidate's replay).
    pub limits: repro_pack::Limits,
    /// Stops the replays on SIGINT/SIGTERM: the best pack so far is written.
    pub cancel: std::sync::Arc<crate::cancel::Cancel>,
}

struct Shrinker<'a> {
    opts: &'a ShrinkOptions,
    /// The recorded run's failure lines (see [`failure_lines`]).
    failure_lines: Vec<String>,
    pack: Pack,
    blobs_dir: PathBuf,
    memo: HashMap<String, bool>,
    replays: usize,
    memo_hits: usize,
    budget_exhausted: bool,
    progress: &'a mut dyn FnMut(&str),
}

impl Shrinker<'_> {
    fn manifest_of(&self, c: &Candidate) -> Result<(Manifest, BTreeMap<String, BlobSource>), HuntError> {
        let orig = &self.pack.manifest;
        let mut m = orig.clone();
        m.command.argv = c.argv.clone();
        m.command.env.retain(|k, _| c.env.contains(k));
        // The environment is the captured run's (docs/provenance.md): a shrunk pack no longer holds the files it
        // names, and no run used the shrunk inputs, so it has none.
        m.environment = None;
        let mut blobs: BTreeMap<String, BlobSource> = BTreeMap::new();
        let shrinkable = shrinkable_paths(orig);
        m.files = Vec::new();
        for f in &orig.files {
            let mut f: FileEntry = f.clone();
            if shrinkable.contains(&f.path) {
                match c.files.get(&f.path) {
                    None => continue,
                    Some(FileState::Whole) => {}
                    Some(FileState::Empty) => set_content(&mut f, Vec::new(), &mut blobs),
                    Some(FileState::Prefix(n)) => {
                        let data = self.content(&f)?;
                        set_content(&mut f, data[..(*n as usize).min(data.len())].to_vec(), &mut blobs);
                    }
                }
            }
            m.files.push(f);
        }
        // Every other blob the manifest names (kept files, recorded output, tapes) comes from the original pack.
        for (_, d, _) in m.blob_refs() {
            blobs.entry(d.clone()).or_insert_with(|| BlobSource::File(self.blobs_dir.join(&d)));
        }
        Ok((m, blobs))
    }

    /// The content of a file of the pack (its blob, extracted and checked by `read_pack_checked`).
    fn content(&self, f: &FileEntry) -> Result<Vec<u8>, HuntError> {
        let Some(d) = &f.blake3 else { return Ok(Vec::new()) };
        let path = self.blobs_dir.join(d);
        std::fs::read(&path).map_err(|e| HuntError::io("cannot read the blob", path, e))
    }

    /// Whether the candidate still fails with the recorded signature, `confirm` times out of `confirm`.
    fn still_fails(&mut self, c: &Candidate) -> bool {
        let (m, blobs) = match self.manifest_of(c) {
            Ok(mb) => mb,
            Err(e) => {
                // A candidate that cannot be made is not kept; the shrinker goes on with the others.
                (self.progress)(&format!("warning: candidate skipped: {e}"));
                return false;
            }
        };
        let json = match serde_json::to_vec(&m) {
            Ok(json) => json,
            Err(e) => {
                (self.progress)(&format!("warning: candidate skipped: its manifest cannot be written: {e}"));
                return false;
            }
        };
        let key = digest(&json);
        if let Some(r) = self.memo.get(&key) {
            self.memo_hits += 1;
            return *r;
        }
        if self.opts.deadline.is_some_and(|d| Instant::now() >= d) || self.opts.cancel.signal().is_some() {
            self.budget_exhausted = true;
            return false;
        }
        // Candidates are thin packs: their blobs go once into a scratch store that the replays read.
        let mut m = m;
        m.thin = true;
        let path = self.opts.work.join(format!("candidate-{}.repro", &key[..16]));
        let store = Store::at(self.opts.work.join("cache/repro/cas"));
        let supplied = repro_model::secrets::redacted_names(&m.command.env);
        let ok = write_pack(&path, &m, &blobs, Some(&store), None).is_ok() && self.replay(&path, &supplied);
        // Scratch in the work directory (removed with it): a candidate left behind costs only space.
        let _ = std::fs::remove_file(&path);
        self.replays += 1;
        self.memo.insert(key, ok);
        ok
    }

    fn replay(&self, pack: &Path, supplied: &[String]) -> bool {
        let mut cmd = Command::new(&self.opts.repro);
        cmd.arg("replay")
            .arg(pack)
            .args(supplied.iter().flat_map(|n| ["--env", n.as_str()]))
            .arg("--runs")
            .arg(self.opts.confirm.to_string())
            .arg("--json")
            .arg("--state-dir")
            .arg(self.opts.work.join("state"))
            .arg("--max-unpacked-size")
            .arg(self.opts.limits.max_unpacked_size.to_string())
            .arg("--max-entries")
            .arg(self.opts.limits.max_entries.to_string())
            .env("XDG_CACHE_HOME", self.opts.work.join("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // A replay that could not start, or was stopped by a signal, did not reproduce.
        let Ok(out) = self.opts.cancel.output(&mut cmd, "repro replay") else { return false };
        // A replay that printed no report (it could not run) did not reproduce: Null has no `reproduced`.
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        // The cached root of a candidate is not needed again.
        if let Some(root) = v["root"].as_str() {
            // Best effort: a root left behind is a cache entry `repro cache clean` removes.
            let _ = std::fs::remove_dir_all(root);
        }
        // Same signature is not enough: the failing tests must fail for the same reason (a test that now
        // fails because its input file is gone is another failure).
        let same_reason = v["runs"].as_array().is_some_and(|runs| {
            runs.iter().all(|r| {
                let out = r["run_dir"].as_str().and_then(|d| std::fs::read(Path::new(d).join("stdout")).ok());
                out.is_some_and(|o| failure_lines(&o) == self.failure_lines)
            })
        });
        // Scratch run directories of the replays, in the work directory: best effort, removed with it.
        let _ = std::fs::remove_dir_all(self.opts.work.join("state"));
        same_reason && v["reproduced"].as_u64() == Some(self.opts.confirm as u64)
    }
}

/// The lines of a test runner's output that name a failure and its reason, normalized: pytest's `FAILED id - Error`
/// and `ERROR id`, go's `--- FAIL:`, a Rust test's `panicked at` and assertion messages.
pub fn failure_lines(stdout: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(stdout);
    let mut v: Vec<String> = text
        .lines()
        .map(|l| l.trim_end())
        .filter(|l| {
            l.starts_with("FAILED ")
                || l.starts_with("ERROR ")
                || l.starts_with("--- FAIL: ")
                || l.contains("panicked at")
        })
        .map(|l| {
            // go prints the test's duration.
            let l = repro_pack::signature::normalize_line(l);
            match l.find(" (<dur>)") {
                Some(i) => l[..i].to_string(),
                None => l,
            }
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

pub(crate) fn set_content(f: &mut FileEntry, data: Vec<u8>, blobs: &mut BTreeMap<String, BlobSource>) {
    let d = digest(&data);
    f.kind = EntryKind::File;
    f.size = Some(data.len() as u64);
    f.blake3 = Some(d.clone());
    blobs.insert(d, BlobSource::Bytes(data));
}

/// The files that may be shrunk: regular, listed or sized entries under the working directory.
pub(crate) fn shrinkable_paths(m: &Manifest) -> BTreeSet<String> {
    let cwd = m.command.cwd.trim_end_matches('/').to_string() + "/";
    m.files
        .iter()
        .filter(|f| {
            f.path.starts_with(&cwd) && matches!(f.kind, EntryKind::File | EntryKind::Sized | EntryKind::Listed)
        })
        .map(|f| f.path.clone())
        .collect()
}

fn size_of(m: &Manifest, pack_bytes: u64) -> Size {
    Size {
        files: m.files.iter().filter(|f| f.kind != EntryKind::Dir).count(),
        content_bytes: m.files.iter().filter(|f| f.kind == EntryKind::File).filter_map(|f| f.size).sum(),
        env_vars: m.command.env.len(),
        argv: m.command.argv.len(),
        pack_bytes,
    }
}

/// The argv that runs only the failing tests, for recognized runners.
pub fn select_tests(argv: &[String], failing: &[String]) -> Option<Vec<String>> {
    if failing.is_empty() {
        return None;
    }
    let is_pytest = argv.iter().any(|a| a == "pytest" || a.ends_with("/pytest") || a == "py.test")
        || argv.windows(2).any(|w| w[0] == "-m" && w[1] == "pytest");
    if is_pytest {
        // Keep everything but the test paths (files, node ids, directories given after the options), then
        // name the failing node ids.
        let takes_value = ["-p", "-k", "-m", "-c", "-o", "-W", "--rootdir", "--deselect", "--ignore", "--confcutdir"];
        let mut out = Vec::new();
        for (i, a) in argv.iter().enumerate() {
            let is_value = i > 0 && takes_value.contains(&argv[i - 1].as_str());
            let is_path =
                !a.starts_with('-') && (a.ends_with(".py") || a.contains("::") || a == "." || a.ends_with('/'));
            if i == 0 || is_value || !is_path {
                out.push(a.clone());
            }
        }
        out.extend(failing.iter().map(|t| t.trim_start_matches("pytest:").to_string()));
        return Some(out);
    }
    let go = argv.len() >= 2 && (argv[0] == "go" || argv[0].ends_with("/go")) && argv[1] == "test";
    if go {
        let mut out = argv.to_vec();
        out.insert(2, format!("-run=^({})$", failing.join("|")));
        return Some(out);
    }
    let cargo = argv.len() >= 2 && argv[0].ends_with("cargo") && (argv[1] == "test" || argv[1] == "nextest");
    if cargo {
        let mut out: Vec<String> = argv.iter().take_while(|a| *a != "--").cloned().collect();
        out.push("--".into());
        out.extend(failing.iter().cloned());
        out.push("--exact".into());
        return Some(out);
    }
    None
}

/// Shrinks the pack. `progress` receives one line per step.
pub fn shrink(opts: &ShrinkOptions, progress: &mut dyn FnMut(&str)) -> Result<ShrinkReport, HuntError> {
    let start = Instant::now();
    let blobs_dir = opts.work.join("blobs");
    std::fs::create_dir_all(&blobs_dir).map_err(|e| HuntError::io("cannot create", &blobs_dir, e))?;
    let blobs =
        repro_pack::extract::Beneath::open(&blobs_dir).map_err(|e| HuntError::io("cannot open", &blobs_dir, e))?;
    let pack =
        repro_pack::read_pack_checked(&opts.pack, &Store::default_store(), Some((&blobs, &blobs_dir)), &opts.limits)
            .map_err(|e| HuntError::Pack { what: "cannot read PACK", path: opts.pack.clone(), source: Box::new(e) })?;
    let orig = pack.manifest.clone();
    // Variables redacted at capture are supplied from this environment to every replay (as `repro replay
    // --env NAME` does), never run with their markers.
    let missing: Vec<String> = repro_model::secrets::redacted_names(&orig.command.env)
        .into_iter()
        .filter(|n| std::env::var_os(n).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(HuntError::usage(
            format!("PACK '{}'", opts.pack.display()),
            format!(
                "its variables {} were redacted at capture: set them in this environment to shrink it",
                missing.join(", ")
            ),
        ));
    }
    let before = size_of(&orig, pack.compressed_bytes);
    let stdout_blob = blobs_dir.join(&orig.result.stdout.blake3);
    let recorded_stdout =
        std::fs::read(&stdout_blob).map_err(|e| HuntError::io("cannot read the recorded stdout", stdout_blob, e))?;
    let mut s = Shrinker {
        opts,
        failure_lines: failure_lines(&recorded_stdout),
        pack,
        blobs_dir,
        memo: HashMap::new(),
        replays: 0,
        memo_hits: 0,
        budget_exhausted: false,
        progress,
    };
    let all_files: BTreeMap<String, FileState> =
        shrinkable_paths(&orig).into_iter().map(|p| (p, FileState::Whole)).collect();
    let mut cur = Candidate {
        argv: orig.command.argv.clone(),
        env: orig.command.env.keys().cloned().collect(),
        files: all_files,
    };
    (s.progress)(&format!("checking that the pack reproduces ({} replays of {} runs each)", 1, opts.confirm));
    if !s.still_fails(&cur) {
        return Err(HuntError::usage(
            format!("PACK '{}'", opts.pack.display()),
            "it does not reproduce its recorded failure signature: nothing to shrink (see `repro replay`)",
        ));
    }
    // 1. The test selection.
    let mut test_selection = None;
    if let Some(argv) = select_tests(&cur.argv, &orig.signature.failing_tests) {
        let mut cand = cur.clone();
        cand.argv = argv.clone();
        if s.still_fails(&cand) {
            (s.progress)(&format!("test selection: only {}", orig.signature.failing_tests.join(", ")));
            cur = cand;
            test_selection = Some(orig.signature.failing_tests.clone());
        }
    }
    // 2. Files: removed, then emptied, then truncated to half.
    let paths: Vec<String> = cur.files.keys().cloned().collect();
    let base = cur.clone();
    let kept = ddmin(paths.clone(), &mut |keep: &[String]| {
        let mut c = base.clone();
        c.files.retain(|p, _| keep.contains(p));
        s.still_fails(&c)
    });
    cur.files.retain(|p, _| kept.contains(p));
    (s.progress)(&format!("files: {} -> {} kept ({} replays)", paths.len(), kept.len(), s.replays));
    let base = cur.clone();
    let whole = ddmin(kept.clone(), &mut |keep_whole: &[String]| {
        let mut c = base.clone();
        for (p, st) in c.files.iter_mut() {
            if !keep_whole.contains(p) {
                *st = FileState::Empty;
            }
        }
        s.still_fails(&c)
    });
    for (p, st) in cur.files.iter_mut() {
        if !whole.contains(p) {
            *st = FileState::Empty;
        }
    }
    for p in &whole {
        let full = s.pack.manifest.files.iter().find(|f| &f.path == p).and_then(|f| f.size).unwrap_or(0);
        let mut len = full;
        while len > 1 {
            let mut c = cur.clone();
            c.files.insert(p.clone(), FileState::Prefix(len / 2));
            if s.still_fails(&c) {
                len /= 2;
                cur = c;
            } else {
                break;
            }
        }
    }
    (s.progress)(&format!("file contents: {} emptied ({} replays)", kept.len() - whole.len(), s.replays));
    // 3. Environment variables.
    let vars: Vec<String> = cur.env.iter().cloned().collect();
    let base = cur.clone();
    let keep_env = ddmin(vars.clone(), &mut |keep: &[String]| {
        let mut c = base.clone();
        c.env = keep.iter().cloned().collect();
        s.still_fails(&c)
    });
    cur.env = keep_env.iter().cloned().collect();
    (s.progress)(&format!("environment: {} -> {} variables ({} replays)", vars.len(), keep_env.len(), s.replays));
    // 4. Arguments (argv[0] stays).
    if cur.argv.len() > 1 {
        let args: Vec<(usize, String)> = cur.argv.iter().cloned().enumerate().skip(1).collect();
        let base = cur.clone();
        let keep = ddmin(args.clone(), &mut |keep: &[(usize, String)]| {
            let mut c = base.clone();
            c.argv = std::iter::once(base.argv[0].clone()).chain(keep.iter().map(|(_, a)| a.clone())).collect();
            s.still_fails(&c)
        });
        cur.argv = std::iter::once(cur.argv[0].clone()).chain(keep.iter().map(|(_, a)| a.clone())).collect();
        (s.progress)(&format!("arguments: {} -> {} ({} replays)", args.len(), keep.len(), s.replays));
    }
    // The result: written atomically, then checked once more.
    let (m, blobs) = s.manifest_of(&cur)?;
    write_pack(&opts.output, &m, &blobs, None, Some(&repro_pack::store::FrameCache::default_cache()))
        .map_err(|e| HuntError::Pack { what: "cannot write", path: opts.output.clone(), source: Box::new(e) })?;
    let pack_bytes = std::fs::metadata(&opts.output).map(|m| m.len()).unwrap_or(0);
    let after = size_of(&m, pack_bytes);
    let removed_files: Vec<String> =
        paths.iter().filter(|p| !cur.files.contains_key(*p)).map(|p| rel(&orig, p)).collect();
    let emptied_files: Vec<String> =
        cur.files.iter().filter(|(_, st)| **st == FileState::Empty).map(|(p, _)| rel(&orig, p)).collect();
    let truncated_files: Vec<String> =
        cur.files.iter().filter(|(_, st)| matches!(st, FileState::Prefix(_))).map(|(p, _)| rel(&orig, p)).collect();
    let removed_env: Vec<String> = orig.command.env.keys().filter(|k| !cur.env.contains(*k)).cloned().collect();
    let removed_args: Vec<String> = orig.command.argv.iter().filter(|a| !cur.argv.contains(a)).cloned().collect();
    Ok(ShrinkReport {
        output: opts.output.clone(),
        replays: s.replays,
        memo_hits: s.memo_hits,
        elapsed_ms: start.elapsed().as_millis() as u64,
        budget_exhausted: s.budget_exhausted,
        test_selection,
        removed_env,
        removed_files,
        emptied_files,
        truncated_files,
        removed_args,
        before,
        after,
    })
}

fn rel(m: &Manifest, p: &str) -> String {
    p.strip_prefix(&(m.command.cwd.trim_end_matches('/').to_string() + "/")).unwrap_or(p).to_string()
}

/// The report as text.
pub fn render(r: &ShrinkReport) -> String {
    let mut out = String::new();
    let list = |v: &[String]| {
        if v.len() > 12 {
            format!("{} ... ({} in all)", v[..12].join(" "), v.len())
        } else {
            v.join(" ")
        }
    };
    if let Some(t) = &r.test_selection {
        out.push_str(&format!("tests:      only {}\n", t.join(", ")));
    }
    out.push_str(&format!("files:      removed {}: {}\n", r.removed_files.len(), list(&r.removed_files)));
    if !r.emptied_files.is_empty() {
        out.push_str(&format!("            emptied {}: {}\n", r.emptied_files.len(), list(&r.emptied_files)));
    }
    if !r.truncated_files.is_empty() {
        out.push_str(&format!("            truncated {}: {}\n", r.truncated_files.len(), list(&r.truncated_files)));
    }
    out.push_str(&format!("env:        removed {}: {}\n", r.removed_env.len(), list(&r.removed_env)));
    out.push_str(&format!("argv:       removed {}: {}\n", r.removed_args.len(), list(&r.removed_args)));
    out.push_str(&format!(
        "size:       {} files, {} bytes of content, {} env vars, pack {} bytes  ->  {} files, {} bytes, {} env vars, pack {} bytes\n",
        r.before.files, r.before.content_bytes, r.before.env_vars, r.before.pack_bytes, r.after.files, r.after.content_bytes,
        r.after.env_vars, r.after.pack_bytes
    ));
    out.push_str(&format!(
        "{} replays ({} answered from memory) in {:.1} s{}; wrote {}\n",
        r.replays,
        r.memo_hits,
        r.elapsed_ms as f64 / 1000.0,
        if r.budget_exhausted { ", time budget exhausted" } else { "" },
        r.output.display()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddmin_finds_the_one_needed_item() {
        let items: Vec<u32> = (0..40).collect();
        let mut calls = 0;
        let kept = ddmin(items, &mut |s: &[u32]| {
            calls += 1;
            s.contains(&17)
        });
        assert_eq!(kept, vec![17]);
        assert!(calls < 40, "fewer tests than one per item: {calls}");
    }

    #[test]
    fn ddmin_keeps_a_needed_pair_and_handles_nothing_needed() {
        let kept = ddmin((0..16).collect(), &mut |s: &[u32]| s.contains(&3) && s.contains(&12));
        assert_eq!(kept, vec![3, 12]);
        assert!(ddmin((0..5).collect::<Vec<u32>>(), &mut |_| true).is_empty());
    }

    #[test]
    fn failure_lines_keep_the_reason() {
        let out = b"..F\n=== short test summary info ===\nFAILED t.py::test_x - AssertionError: expired\n1 failed, 40 passed in 0.05s\n--- FAIL: TestA (0.01s)\n";
        assert_eq!(failure_lines(out), vec!["--- FAIL: TestA", "FAILED t.py::test_x - AssertionError: expired"]);
        assert_ne!(failure_lines(b"FAILED t.py::test_x - FileNotFoundError: item_17.json\n"), failure_lines(out));
    }

    #[test]
    fn test_selection_for_known_runners() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let failing = v(&["test_a.py::test_x"]);
        assert_eq!(
            select_tests(
                &v(&["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_a.py", "tests/"]),
                &failing
            )
            .unwrap(),
            v(&["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_a.py::test_x"])
        );
        assert_eq!(
            select_tests(&v(&["go", "test", "./..."]), &v(&["TestA"])).unwrap(),
            v(&["go", "test", "-run=^(TestA)$", "./..."])
        );
        assert_eq!(
            select_tests(&v(&["cargo", "test"]), &v(&["tests::a"])).unwrap(),
            v(&["cargo", "test", "--", "tests::a", "--exact"])
        );
        assert_eq!(select_tests(&v(&["make"]), &failing), None);
        assert_eq!(select_tests(&v(&["pytest"]), &[]), None);
    }
}
