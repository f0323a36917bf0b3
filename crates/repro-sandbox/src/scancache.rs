//! The state directory's cache of the files the supervisor's RDRAND/RDSEED scan found clean
//! (`<state>/cache/rdrand-clean`): a run passes it to its supervisor, which then does not read an unchanged
//! program or library again (python3 is 7 MB of code to decode at every exec), and adds what the run found.
//!
//! One file a line: `DEV INO SIZE MTIME MTIME_NS CTIME CTIME_NS` (any change to a file moves its change time).
//! Best effort: an unreadable cache is empty, and of two runs writing it at once the last one wins (what the
//! other found is scanned again next time). At most [`MAX`] files, the most recent kept.

use std::path::Path;

use repro_model::init::ScannedFile;

/// The cache file under the state directory.
pub const FILE: &str = "cache/rdrand-clean";
/// The most files kept.
pub const MAX: usize = 4096;

fn parse_line(l: &str) -> Option<ScannedFile> {
    let mut f = l.split(' ');
    let mut u = || f.next()?.parse::<u64>().ok();
    let (dev, ino, size) = (u()?, u()?, u()?);
    let mut i = || i64::try_from(u()?).ok();
    let (m, mn, c, cn) = (i()?, i()?, i()?, i()?);
    Some(ScannedFile { dev, ino, size, mtime: (m, mn), ctime: (c, cn) })
}

/// The files of the text of a cache (lines that do not parse are skipped).
pub fn parse(text: &str) -> Vec<ScannedFile> {
    text.lines().filter_map(parse_line).collect()
}

/// The text of a cache of `files`.
pub fn render(files: &[ScannedFile]) -> String {
    let mut s = String::new();
    for f in files {
        s.push_str(&format!(
            "{} {} {} {} {} {} {}\n",
            f.dev, f.ino, f.size, f.mtime.0, f.mtime.1, f.ctime.0, f.ctime.1
        ));
    }
    s
}

/// The files of `state`'s cache.
pub fn load(state: &Path) -> Vec<ScannedFile> {
    std::fs::read_to_string(state.join(FILE)).map(|t| parse(&t)).unwrap_or_default()
}

/// `known` and then `found` without repeats, the last [`MAX`].
pub fn merge(known: &[ScannedFile], found: &[ScannedFile]) -> Vec<ScannedFile> {
    let mut seen = std::collections::HashSet::new();
    let mut all: Vec<ScannedFile> = known.iter().chain(found).copied().filter(|f| seen.insert(*f)).collect();
    let excess = all.len().saturating_sub(MAX);
    all.drain(..excess);
    all
}

/// Adds `found` to the cache that held `known` (nothing to write when nothing was found).
pub fn store(state: &Path, known: &[ScannedFile], found: &[ScannedFile]) {
    if found.is_empty() {
        return;
    }
    let path = state.join(FILE);
    if let Some(dir) = path.parent() {
        if std::fs::create_dir_all(dir).is_ok() {
            // A cache that cannot be written only costs the next run a scan.
            let _ = crate::rundir::write_atomic(&path, render(&merge(known, found)).as_bytes(), false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(ino: u64) -> ScannedFile {
        ScannedFile { dev: 2049, ino, size: 7, mtime: (1_700_000_000, 5), ctime: (1_700_000_001, 999_999_999) }
    }

    #[test]
    fn the_cache_round_trips_merges_and_stays_bounded() {
        let d = tempfile::tempdir().unwrap();
        assert!(load(d.path()).is_empty());
        store(d.path(), &[], &[f(1), f(2)]);
        assert_eq!(load(d.path()), [f(1), f(2)]);
        store(d.path(), &[f(1), f(2)], &[f(2), f(3)]);
        assert_eq!(load(d.path()), [f(1), f(2), f(3)]);
        assert_eq!(parse("1 2 3 4 5 6 7\nnonsense\n1 2 3 -4 5 6 7\n").len(), 1);
        let many: Vec<ScannedFile> = (0..MAX as u64 + 10).map(f).collect();
        let kept = merge(&many, &[f(0)]);
        assert_eq!(kept.len(), MAX);
        assert_eq!(kept[0], f(10), "the oldest go first");
    }
}
