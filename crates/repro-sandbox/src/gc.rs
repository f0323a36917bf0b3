//! `repro gc`: removes what interrupted runs left behind and prunes old runs by age and total size.
//!
//! Safe beside runs in progress: a run holds an exclusive flock on its directory while it lives (see
//! [`crate::rundir`]), and gc removes a directory only after taking that lock itself, without waiting. A removed
//! directory is first renamed to a hidden `runs/.gc-<id>` (atomic: `repro runs` never lists half a run), then
//! deleted; what a killed gc leaves under that name is removed by the next one.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::rundir::{self, INCOMPLETE, NEW_PREFIX, RUN_JSON};
use crate::SandboxError;

/// The prefix of a directory being deleted by gc.
pub const GC_PREFIX: &str = ".gc-";

/// A directory being created younger than this is left alone even when it can be locked (the creating run
/// locks it a moment after making it).
pub const NEW_GRACE: Duration = Duration::from_secs(60);

/// Files and directories of a run's own scratch, which a finished run has removed and a killed one may leave
/// (`.scratch` is this version's; the others are those of runs made by earlier versions).
pub const SCRATCH: [&str; 9] =
    [".scratch", ".root", ".layer", ".etc", ".stage", ".work", "upper", ".init.json", ".init-result.json"];

/// What to prune besides the leftovers of interrupted runs.
#[derive(Debug, Clone, Default)]
pub struct GcOptions {
    /// Remove finished runs that started longer ago than this.
    pub older_than: Option<Duration>,
    /// Then remove the oldest finished runs until all runs together take at most this many bytes.
    pub max_size: Option<u64>,
    /// Say what would be removed, remove nothing.
    pub dry_run: bool,
}

/// Why something was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcReason {
    /// A run directory without `run.json` whose run is no longer alive.
    Interrupted,
    /// Scratch files inside a finished run's directory, or a directory half created or half deleted.
    Scratch,
    /// Older than `--older-than`.
    Age,
    /// Removed to bring the total under `--max-size`.
    Size,
}

/// One removal.
#[derive(Debug, Clone, Serialize)]
pub struct GcItem {
    /// The run id (or the directory's name).
    pub id: String,
    pub path: PathBuf,
    pub reason: GcReason,
    pub bytes: u64,
}

/// What gc did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub removed: Vec<GcItem>,
    /// Runs in progress, left alone.
    pub live: Vec<String>,
    pub freed_bytes: u64,
    /// What the runs take after gc.
    pub remaining_bytes: u64,
}

/// A finished run that may be pruned, with its lock held.
struct Finished {
    id: String,
    path: PathBuf,
    started_unix: Option<i64>,
    bytes: u64,
    _lock: fs::File,
}

/// Runs gc on the state directory `state` at time `now_unix`.
pub fn gc(state: &Path, opts: &GcOptions, now_unix: i64) -> Result<GcReport, SandboxError> {
    let runs = state.join("runs");
    let mut report =
        GcReport { dry_run: opts.dry_run, removed: Vec::new(), live: Vec::new(), freed_bytes: 0, remaining_bytes: 0 };
    let entries = match fs::read_dir(&runs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(SandboxError::io("cannot read", &runs, e)),
    };
    let mut names: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| SandboxError::io("cannot read", &runs, e))?;
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            if let Some(n) = entry.file_name().to_str() {
                names.push(n.to_string());
            }
        }
    }
    names.sort();
    let mut finished: Vec<Finished> = Vec::new();
    let mut live_bytes = 0u64;
    for name in names {
        let path = runs.join(&name);
        if name.starts_with(GC_PREFIX) {
            // Half deleted by an earlier gc.
            let bytes = tree_size(&path);
            remove(&mut report, opts, &runs, name, path, GcReason::Scratch, bytes, false)?;
            continue;
        }
        if let Some(id) = name.strip_prefix(NEW_PREFIX) {
            let young = fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age < NEW_GRACE);
            let Some(lock) = try_lock(&path)? else {
                report.live.push(id.to_string());
                continue;
            };
            if young {
                report.live.push(id.to_string());
                continue;
            }
            let bytes = tree_size(&path);
            remove(&mut report, opts, &runs, name, path, GcReason::Scratch, bytes, true)?;
            drop(lock);
            continue;
        }
        if name.starts_with('.') {
            continue;
        }
        let Some(lock) = try_lock(&path)? else {
            live_bytes += tree_size(&path);
            report.live.push(name);
            continue;
        };
        let record = rundir::read_record(&path).ok();
        if record.is_none() || path.join(INCOMPLETE).exists() || !path.join(RUN_JSON).exists() {
            let bytes = tree_size(&path);
            remove(&mut report, opts, &runs, name, path, GcReason::Interrupted, bytes, true)?;
            drop(lock);
            continue;
        }
        // A finished run: its leftover scratch goes in any case.
        let mut scratch_bytes = 0;
        for s in SCRATCH {
            let p = path.join(s);
            if fs::symlink_metadata(&p).is_ok() {
                scratch_bytes += tree_size(&p);
                if !opts.dry_run {
                    if p.is_dir() {
                        crate::reaper::remove_tree(&p);
                    } else {
                        // What cannot be removed stays and is found by the next `repro gc`.
                        let _ = fs::remove_file(&p);
                    }
                }
            }
        }
        if scratch_bytes > 0 {
            report.removed.push(GcItem {
                id: name.clone(),
                path: path.clone(),
                reason: GcReason::Scratch,
                bytes: scratch_bytes,
            });
            report.freed_bytes += scratch_bytes;
        }
        let started_unix = record.as_ref().and_then(|r| parse_started(&r.started_at)).or_else(|| id_time(&name));
        let bytes = tree_size(&path).saturating_sub(if opts.dry_run { scratch_bytes } else { 0 });
        finished.push(Finished { id: name, path, started_unix, bytes, _lock: lock });
    }

    // By age.
    if let Some(age) = opts.older_than {
        let cutoff = now_unix.saturating_sub(age.as_secs().min(i64::MAX as u64) as i64);
        let (old, keep): (Vec<Finished>, Vec<Finished>) =
            finished.into_iter().partition(|f| f.started_unix.is_some_and(|t| t < cutoff));
        for f in old {
            remove(&mut report, opts, &runs, f.id.clone(), f.path.clone(), GcReason::Age, f.bytes, true)?;
        }
        finished = keep;
    }
    // By total size, oldest first (ids sort by start time).
    let mut total: u64 = live_bytes + finished.iter().map(|f| f.bytes).sum::<u64>();
    if let Some(max) = opts.max_size {
        finished.sort_by(|a, b| (a.started_unix, &a.id).cmp(&(b.started_unix, &b.id)));
        let mut keep = Vec::new();
        for f in finished {
            if total > max {
                total -= f.bytes;
                remove(&mut report, opts, &runs, f.id.clone(), f.path.clone(), GcReason::Size, f.bytes, true)?;
            } else {
                keep.push(f);
            }
        }
        finished = keep;
    }
    report.remaining_bytes = total;
    drop(finished);
    Ok(report)
}

/// Removes `path` (renamed to a hidden name first, so the removal is atomic to readers), or records what would
/// be removed.
#[allow(clippy::too_many_arguments)]
fn remove(
    report: &mut GcReport,
    opts: &GcOptions,
    runs: &Path,
    id: String,
    path: PathBuf,
    reason: GcReason,
    bytes: u64,
    rename_first: bool,
) -> Result<(), SandboxError> {
    if !opts.dry_run {
        let doomed = if rename_first {
            let hidden = runs.join(format!("{GC_PREFIX}{}-{}", id.trim_start_matches('.'), std::process::id()));
            fs::rename(&path, &hidden).map_err(|e| SandboxError::io("cannot rename", &path, e))?;
            hidden
        } else {
            path.clone()
        };
        crate::reaper::remove_tree(&doomed);
        if doomed.exists() {
            return Err(SandboxError::io(
                "cannot remove",
                &doomed,
                std::io::Error::other("some entries could not be removed"),
            ));
        }
    }
    report.freed_bytes += bytes;
    report.removed.push(GcItem { id, path, reason, bytes });
    Ok(())
}

/// Opens `dir` and takes its lock without waiting: `None` when a live run holds it.
fn try_lock(dir: &Path) -> Result<Option<fs::File>, SandboxError> {
    let f = match fs::File::open(dir) {
        Ok(f) => f,
        // Gone meanwhile (a concurrent gc): nothing to do, and nothing to lock.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SandboxError::io("cannot open", dir, e)),
    };
    let locked = repro_sys::ns::try_lock_exclusive(&f).map_err(|e| SandboxError::io("cannot lock", dir, e))?;
    Ok(locked.then_some(f))
}

/// The bytes of the files under `path` (not following links), bounded to a million entries.
pub fn tree_size(path: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![path.to_path_buf()];
    let mut seen = 0u32;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > 1_000_000 {
            break;
        }
        let Ok(meta) = fs::symlink_metadata(&p) else { continue };
        total = total.saturating_add(meta.len());
        if meta.is_dir() {
            if let Ok(entries) = fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    total
}

/// The start time in a run id (`20260102-030405.678-abcdef`), as Unix seconds.
fn id_time(id: &str) -> Option<i64> {
    let b = id.as_bytes();
    if b.len() < 15 || b[8] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| id.get(r).and_then(|s| s.parse::<u32>().ok());
    let date = time::Date::from_calendar_date(
        num(0..4)? as i32,
        time::Month::try_from(num(4..6)? as u8).ok()?,
        num(6..8)? as u8,
    )
    .ok()?;
    let t = time::Time::from_hms(num(9..11)? as u8, num(11..13)? as u8, num(13..15)? as u8).ok()?;
    Some(time::PrimitiveDateTime::new(date, t).assume_utc().unix_timestamp())
}

fn parse_started(rfc3339: &str) -> Option<i64> {
    time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp())
}

/// Parses an age: a number with a unit s, m, h, d or w (`30d`, `12h`), or several (`1d12h`).
pub fn parse_age(argument: &str, value: &str) -> Result<Duration, SandboxError> {
    let bad = || {
        SandboxError::usage(
            argument,
            format!("'{value}' is not a duration: expected a number and a unit s, m, h, d or w (e.g. 30d, 12h, 1d12h)"),
        )
    };
    let v = value.trim();
    if v.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut num = String::new();
    for c in v.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            'w' => 7 * 86400,
            _ => return Err(bad()),
        };
        let n: u64 = num.parse().map_err(|_| bad())?;
        num.clear();
        total = n
            .checked_mul(unit)
            .and_then(|x| total.checked_add(x))
            .filter(|t| *t <= 100 * 365 * 86400)
            .ok_or_else(|| SandboxError::usage(argument, format!("'{value}' is too long: at most 100 years")))?;
    }
    if !num.is_empty() {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundir::RunDir;

    fn finished(state: &Path, id: &str, started: &str, payload: usize) {
        let runs = state.join("runs").join(id);
        fs::create_dir_all(&runs).unwrap();
        fs::write(runs.join("stdout"), vec![b'x'; payload]).unwrap();
        fs::write(runs.join(RUN_JSON), sample_record(id, started)).unwrap();
    }

    fn sample_record(id: &str, started: &str) -> String {
        let text = include_str!("testdata/run.json");
        text.replace("RUN_ID", id).replace("STARTED_AT", started)
    }

    #[test]
    fn ages_parse() {
        assert_eq!(parse_age("--older-than", "30d").unwrap(), Duration::from_secs(30 * 86400));
        assert_eq!(parse_age("--older-than", "1d12h").unwrap(), Duration::from_secs(86400 + 12 * 3600));
        assert_eq!(parse_age("--older-than", "90s").unwrap(), Duration::from_secs(90));
        for bad in ["", "d", "12", "3x", "1.5d", "-1d"] {
            assert!(matches!(parse_age("--older-than", bad), Err(SandboxError::Usage { .. })), "{bad}");
        }
        assert!(parse_age("--older-than", "99999999999999999999w").is_err());
        assert!(parse_age("--older-than", "999999w").is_err());
    }

    #[test]
    fn ids_give_start_times() {
        assert_eq!(id_time("20260102-030405.678-abcdef"), Some(1_767_323_045));
        assert_eq!(id_time("junk"), None);
        assert_eq!(id_time("20261399-000000.000-abcdef"), None);
    }

    #[test]
    fn interrupted_dead_runs_go_live_ones_stay() {
        let d = tempfile::tempdir().unwrap();
        let live = RunDir::create(d.path(), "20260101-000001.000-aaaaaa").unwrap();
        let dead = RunDir::create(d.path(), "20260101-000002.000-bbbbbb").unwrap();
        let dead_path = dead.path.clone();
        drop(dead);
        finished(d.path(), "20260101-000003.000-cccccc", "2026-01-01T00:00:03Z", 10);
        fs::create_dir(d.path().join("runs/20260101-000003.000-cccccc/.root")).unwrap();
        let dry = gc(d.path(), &GcOptions { dry_run: true, ..Default::default() }, 1_767_225_600).unwrap();
        assert!(dead_path.exists());
        assert_eq!(dry.live, vec!["20260101-000001.000-aaaaaa".to_string()]);
        let r = gc(d.path(), &GcOptions::default(), 1_767_225_600).unwrap();
        let got: Vec<(&str, GcReason)> = r.removed.iter().map(|i| (i.id.as_str(), i.reason)).collect();
        assert_eq!(
            got,
            vec![
                ("20260101-000002.000-bbbbbb", GcReason::Interrupted),
                ("20260101-000003.000-cccccc", GcReason::Scratch)
            ]
        );
        assert!(!dead_path.exists());
        assert!(live.path.join(INCOMPLETE).exists());
        assert!(!d.path().join("runs/20260101-000003.000-cccccc/.root").exists());
        assert!(d.path().join("runs/20260101-000003.000-cccccc/run.json").exists());
        assert_eq!(dry.removed.len(), r.removed.len());
        // Nothing hidden is left.
        let hidden: Vec<_> = fs::read_dir(d.path().join("runs"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(hidden.is_empty());
    }

    #[test]
    fn prunes_by_age_then_size() {
        let d = tempfile::tempdir().unwrap();
        finished(d.path(), "20250101-000000.000-aaaaaa", "2025-01-01T00:00:00Z", 5000);
        finished(d.path(), "20260101-000000.000-bbbbbb", "2026-01-01T00:00:00Z", 5000);
        finished(d.path(), "20260102-000000.000-cccccc", "2026-01-02T00:00:00Z", 5000);
        let now = 1_767_398_400; // 2026-01-03
        let r =
            gc(d.path(), &GcOptions { older_than: Some(Duration::from_secs(30 * 86400)), ..Default::default() }, now)
                .unwrap();
        assert_eq!(
            r.removed.iter().map(|i| (i.id.as_str(), i.reason)).collect::<Vec<_>>(),
            vec![("20250101-000000.000-aaaaaa", GcReason::Age)]
        );
        let one = tree_size(&d.path().join("runs/20260102-000000.000-cccccc"));
        let r = gc(d.path(), &GcOptions { max_size: Some(one + 10), ..Default::default() }, now).unwrap();
        assert_eq!(
            r.removed.iter().map(|i| (i.id.as_str(), i.reason)).collect::<Vec<_>>(),
            vec![("20260101-000000.000-bbbbbb", GcReason::Size)]
        );
        assert!(r.remaining_bytes <= one + 10);
        assert!(d.path().join("runs/20260102-000000.000-cccccc/run.json").exists());
    }
}
