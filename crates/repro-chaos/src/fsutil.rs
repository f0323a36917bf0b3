//! Crash-safe file writing and timestamps.
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::{ChaosError, Result};

/// Writes `data` to `path` atomically: a temp file in the same directory, then rename.
/// A reader never sees a half-written file; a killed harness leaves the old file or none.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    write_atomic_impl(path, data, false)
}

/// Like [`write_atomic`], and also fsyncs the file and its directory (for the verdict and the manifest).
pub fn write_atomic_durable(path: &Path, data: &[u8]) -> Result<()> {
    write_atomic_impl(path, data, true)
}

fn write_atomic_impl(path: &Path, data: &[u8], durable: bool) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| ChaosError::io(dir, e))?;
    // A path without a file name (`/`, `..`) still gets a unique temporary name from the pid.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let mut f = File::create(&tmp).map_err(|e| ChaosError::io(&tmp, e))?;
    f.write_all(data).map_err(|e| ChaosError::io(&tmp, e))?;
    if durable {
        f.sync_all().map_err(|e| ChaosError::io(&tmp, e))?;
    }
    drop(f);
    fs::rename(&tmp, path).map_err(|e| ChaosError::io(path, e))?;
    if durable {
        let synced = File::open(dir).and_then(|d| d.sync_all());
        synced.map_err(|e| ChaosError::io(dir, e))?;
    }
    Ok(())
}

pub fn write_json_atomic(path: &Path, v: &serde_json::Value) -> Result<()> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| ChaosError::Harness(e.to_string()))?;
    s.push('\n');
    write_atomic(path, s.as_bytes())
}

pub fn write_json_durable(path: &Path, v: &serde_json::Value) -> Result<()> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| ChaosError::Harness(e.to_string()))?;
    s.push('\n');
    write_atomic_durable(path, s.as_bytes())
}

pub fn mkdirs(path: &Path) -> Result<()> {
    fs::create_dir_all(path).map_err(|e| ChaosError::io(path, e))
}

pub fn append_line(path: &Path, line: &str) -> Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path).map_err(|e| ChaosError::io(path, e))?;
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    f.write_all(buf.as_bytes()).map_err(|e| ChaosError::io(path, e))
}

/// RFC 3339 UTC with microseconds: `2026-10-29T11:26:46.122471Z`.
pub fn rfc3339(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

/// Compact UTC stamp for names: `20261029T112646Z`.
pub fn compact_stamp(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

pub fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

/// Reads a JSON-lines file, skipping a torn last line (a crash mid-write) and blank lines.
/// The largest JSON-lines record read back (a timeline, a metrics file): a run directory may be someone else's.
pub const MAX_JSONL_BYTES: u64 = 1 << 30;

pub fn read_jsonl(path: &Path) -> Result<Vec<serde_json::Value>> {
    use std::io::Read;
    let f = fs::File::open(path).map_err(|e| ChaosError::io(path, e))?;
    let mut text = String::new();
    f.take(MAX_JSONL_BYTES + 1).read_to_string(&mut text).map_err(|e| ChaosError::io(path, e))?;
    if text.len() as u64 > MAX_JSONL_BYTES {
        let e = std::io::Error::other(format!("larger than {} MiB", MAX_JSONL_BYTES >> 20));
        return Err(ChaosError::io(path, e));
    }
    Ok(text.lines().filter(|l| !l.trim().is_empty()).filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// sha256 of bytes as lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("verdict.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn torn_jsonl_line_is_skipped() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        fs::write(&p, "{\"a\":1}\n{\"a\":2}\n{\"a\":").unwrap();
        assert_eq!(read_jsonl(&p).unwrap().len(), 2);
    }

    #[test]
    fn sha256_known_value() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
