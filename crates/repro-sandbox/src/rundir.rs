//! Run directories: `<state>/runs/<id>/`.
//!
//! A run directory is created with an `INCOMPLETE` marker; `run.json` is written last, atomically (a temporary
//! file renamed into place), and only then is the marker removed. A directory without `run.json` is a run that
//! did not finish, whatever else it holds.
//!
//! A run holds an exclusive flock(2) on its directory for as long as it lives; the directory is made under a
//! hidden name (`runs/.new-<id>`), locked, marked, and only then renamed to `runs/<id>`, so every run directory
//! that `repro gc` can see is locked while its run lives. gc deletes only what it could lock itself.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use repro_model::run::RunRecord;

use crate::SandboxError;

/// The marker of a run that has not finished.
pub const INCOMPLETE: &str = "INCOMPLETE";
/// The record of a finished run.
pub const RUN_JSON: &str = "run.json";

/// The state directory: `--state-dir`, else `$REPRO_STATE_DIR`, else `<cwd>/.repro`.
pub fn state_dir(flag: Option<&Path>, env: Option<&str>, cwd: &Path) -> PathBuf {
    match (flag, env.filter(|e| !e.is_empty())) {
        (Some(f), _) => crate::parse::normalize(&cwd.join(f)),
        (None, Some(e)) => crate::parse::normalize(&cwd.join(e)),
        (None, None) => cwd.join(".repro"),
    }
}

/// A new run id: UTC date and time to the millisecond plus a short random suffix, so ids sort by start time.
pub fn new_id(now: time::OffsetDateTime) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&now.unix_timestamp_nanos().to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    let suffix = h.finalize().to_hex();
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}.{:03}-{}",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.millisecond(),
        &suffix[..6]
    )
}

/// The prefix of a run directory being created (`runs/.new-<id>`).
pub const NEW_PREFIX: &str = ".new-";

/// One run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub id: String,
    pub path: PathBuf,
    /// The directory, open and flock'ed while the run lives (released when the last clone is dropped).
    lock: Option<std::sync::Arc<fs::File>>,
}

impl RunDir {
    /// Creates a fresh run directory with its `INCOMPLETE` marker.
    pub fn create(state: &Path, id: &str) -> Result<RunDir, SandboxError> {
        let runs = state.join("runs");
        fs::create_dir_all(&runs).map_err(|e| match e.kind() {
            // A state directory under a file (or a file in its place) is a bad argument, not a setup failure.
            std::io::ErrorKind::NotADirectory | std::io::ErrorKind::AlreadyExists => SandboxError::usage(
                format!("state directory '{}' (--state-dir or $REPRO_STATE_DIR)", state.display()),
                format!("cannot create '{}': {e}", runs.display()),
            ),
            _ => SandboxError::io("cannot create the state directory", &runs, e),
        })?;
        let path = runs.join(id);
        let fresh = runs.join(format!("{NEW_PREFIX}{id}"));
        fs::create_dir(&fresh).map_err(|e| SandboxError::io("cannot create the run directory", &fresh, e))?;
        let made = (|| {
            let lock = fs::File::open(&fresh).map_err(|e| SandboxError::io("cannot open", &fresh, e))?;
            if !repro_sys::ns::try_lock_exclusive(&lock).map_err(|e| SandboxError::io("cannot lock", &fresh, e))? {
                return Err(SandboxError::io(
                    "cannot lock",
                    &fresh,
                    std::io::Error::other("locked by another process"),
                ));
            }
            let dir = RunDir { id: id.to_string(), path: fresh.clone(), lock: Some(std::sync::Arc::new(lock)) };
            // Written in place: nobody reads a `.new-` directory, so a temporary name and a rename (another
            // metadata write on the disk, ~0.3 ms here) would protect nothing.
            let marker = fresh.join(INCOMPLETE);
            fs::write(&marker, b"this run has not finished; run.json is written when it does\n")
                .map_err(|e| SandboxError::io("cannot write", &marker, e))?;
            if path.exists() {
                return Err(SandboxError::io(
                    "cannot create the run directory",
                    &path,
                    std::io::Error::from(std::io::ErrorKind::AlreadyExists),
                ));
            }
            fs::rename(&fresh, &path).map_err(|e| SandboxError::io("cannot create the run directory", &path, e))?;
            Ok(RunDir { path: path.clone(), ..dir })
        })();
        if made.is_err() {
            // Best-effort cleanup: the error that made it is what is returned.
            let _ = fs::remove_dir_all(&fresh);
        }
        made
    }

    /// Whether this handle holds the directory's lock (a run in progress).
    pub fn is_locked(&self) -> bool {
        self.lock.is_some()
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }

    /// Writes a file atomically: to a temporary name, then renamed into place (not synced: see `finish`).
    pub fn write_atomic(&self, name: &str, data: &[u8]) -> Result<(), SandboxError> {
        write_atomic(&self.path.join(name), data, false)
    }

    /// Writes `run.json` and removes the `INCOMPLETE` marker. Everything written to the run directory before
    /// is made durable first (one syncfs), so a `run.json` that exists never refers to lost output.
    pub fn finish(&self, record: &RunRecord) -> Result<(), SandboxError> {
        let mut json =
            serde_json::to_vec_pretty(record).map_err(|source| SandboxError::Encode { what: "run.json", source })?;
        json.push(b'\n');
        write_atomic(&self.join(RUN_JSON), &json, true)?;
        fs::remove_file(self.join(INCOMPLETE))
            .map_err(|e| SandboxError::io("cannot remove the marker", self.join(INCOMPLETE), e))
    }
}

/// Writes `path` atomically (temporary file in the same directory, then rename). `durable`: before the
/// rename, flush the whole filesystem (syncfs), so the file and everything written before it survive a crash.
pub fn write_atomic(path: &Path, data: &[u8], durable: bool) -> Result<(), SandboxError> {
    write_atomic_mode(path, data, durable, 0o666)
}

/// [`write_atomic`] creating the file with `mode` (before the umask).
fn write_atomic_mode(path: &Path, data: &[u8], durable: bool, mode: u32) -> Result<(), SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    // Every caller names a file; a bare directory would give a hidden `..tmp-PID` name beside it.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let res = (|| {
        let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp)?;
        f.write_all(data)?;
        if durable {
            repro_sys::ns::syncfs(&f)?;
        }
        fs::rename(&tmp, path)
    })();
    res.map_err(|e| {
        // Best-effort cleanup: the write error is what is returned.
        let _ = fs::remove_file(&tmp);
        SandboxError::io("cannot write", path, e)
    })
}

/// A run as listed by `repro runs`.
#[derive(Debug, Clone)]
pub struct ListedRun {
    pub id: String,
    pub path: PathBuf,
    /// `None` when the run did not finish (or its record is unreadable).
    pub record: Option<RunRecord>,
}

/// The runs in a state directory, oldest first.
pub fn list(state: &Path) -> Result<Vec<ListedRun>, SandboxError> {
    let runs = state.join("runs");
    let entries = match fs::read_dir(&runs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SandboxError::io("cannot read", &runs, e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let id = entry.file_name().to_string_lossy().into_owned();
        // Being created (`.new-`) or being deleted by `repro gc` (`.gc-`).
        if id.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let record = read_record(&path).ok();
        out.push(ListedRun { id, path, record });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Reads `run.json` of a run directory.
pub fn read_record(dir: &Path) -> Result<RunRecord, SandboxError> {
    let p = dir.join(RUN_JSON);
    let data = fs::read(&p).map_err(|e| SandboxError::io("cannot read", &p, e))?;
    serde_json::from_slice(&data).map_err(|e| SandboxError::Corrupt { path: p, message: e.to_string() })
}

/// Reads `changes.json` of a run directory; a run directory without one (removed by hand) changed nothing that is
/// known.
pub fn changes(dir: &Path) -> Result<repro_model::run::Changes, SandboxError> {
    let p = dir.join("changes.json");
    let data = match fs::read(&p) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(SandboxError::io("cannot read", &p, e)),
    };
    serde_json::from_slice(&data).map_err(|e| SandboxError::Corrupt { path: p, message: e.to_string() })
}

/// Finds a run by id, unique id prefix, or `last`.
pub fn find(state: &Path, key: &str) -> Result<ListedRun, SandboxError> {
    let runs = list(state)?;
    if key == "last" {
        return runs.into_iter().last().ok_or_else(|| SandboxError::NoSuchRun(key.into()));
    }
    if let Some(exact) = runs.iter().find(|r| r.id == key) {
        return Ok(exact.clone());
    }
    let mut matches: Vec<ListedRun> = runs.into_iter().filter(|r| r.id.starts_with(key)).collect();
    match matches.len() {
        1 => Ok(matches.remove(0)),
        0 => Err(SandboxError::NoSuchRun(key.into())),
        n => Err(SandboxError::usage(format!("RUN '{key}'"), format!("matches {n} runs; give more of the id"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time() {
        let a = new_id(time::macros::datetime!(2026-01-02 03:04:05 UTC));
        let b = new_id(time::macros::datetime!(2026-01-02 03:04:06 UTC));
        assert!(a.starts_with("20260102-030405.000-"));
        assert!(a < b);
    }

    #[test]
    fn state_dir_precedence() {
        let cwd = Path::new("/w");
        assert_eq!(state_dir(None, None, cwd), PathBuf::from("/w/.repro"));
        assert_eq!(state_dir(None, Some("/s"), cwd), PathBuf::from("/s"));
        assert_eq!(state_dir(Some(Path::new("st")), Some("/s"), cwd), PathBuf::from("/w/st"));
    }

    #[test]
    fn incomplete_until_finished_and_lookup() {
        let d = tempfile::tempdir().unwrap();
        let run = RunDir::create(d.path(), "20260101-000000-aaaaaa").unwrap();
        RunDir::create(d.path(), "20260101-000001-bbbbbb").unwrap();
        assert!(run.join(INCOMPLETE).exists());
        assert!(run.is_locked());
        // The live run's directory cannot be locked by anyone else.
        let other = fs::File::open(&run.path).unwrap();
        assert!(!repro_sys::ns::try_lock_exclusive(&other).unwrap());
        assert!(!d.path().join("runs").join(format!("{NEW_PREFIX}20260101-000000-aaaaaa")).exists());
        let listed = list(d.path()).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|r| r.record.is_none()));
        assert_eq!(find(d.path(), "last").unwrap().id, "20260101-000001-bbbbbb");
        assert_eq!(find(d.path(), "20260101-000000").unwrap().id, "20260101-000000-aaaaaa");
        assert!(matches!(find(d.path(), "2026"), Err(SandboxError::Usage { .. })));
        assert!(matches!(find(d.path(), "x"), Err(SandboxError::NoSuchRun(_))));
    }
}
